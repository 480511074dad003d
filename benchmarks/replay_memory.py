"""FrameReplay against SB3's ReplayBuffer and sb3-extra-buffers' (``peers``: in a venv of their own) on recorded real
play (docs/performance.md, "Replay memory": ``python benchmarks/replay_memory.py``), written as common.py says.
"""

import argparse
import functools
import itertools
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import common
import gymnasium
import numpy as np
import torch
from stable_baselines3.common.buffers import ReplayBuffer

from atari_game import FrameReplay, GamePool
from atari_game.algorithms import trained_policy
from atari_game.arguments import integer
from atari_game.game import action_meanings
from atari_game.replay import COMPRESSIONS

SHAPE = (4, 84, 84)
# The recordings: name (its game's, but for "-trained") -> played by the trained agent.
PLAYS = dict.fromkeys(("Breakout", "Pong", "Seaquest", "MsPacman"), False) | {"Breakout-trained": True}
SB3 = "SB3 ReplayBuffer"  # whose sample time every other is compared with
CHECKPOINT = "runs/Breakout-1/checkpoint.pt"  # Breakout-trained's player: the run of docs/results.md
ROUNDS, ENVS, RECORD_STEPS = 5, 8, 12_500  # alternating rounds of sample; the pools' envs; each recording's steps
Buffer = FrameReplay | ReplayBuffer


def live_play(envs: int, steps: int, game: str, policy: Callable | None = None, **options: Any) -> Iterator:
    """Per pool step: the transition (next_obs: the true final observations), the next obs, and the wall seconds."""
    options = options or {"life_loss": "terminal", "noop_max": 30, "fire_reset": "FIRE" in action_meanings(game)}
    rng = np.random.default_rng(0)
    with GamePool(envs, game, seed=0, autoreset_mode="SameStep", **options) as pool:
        obs, _ = pool.reset()
        for _ in range(steps):
            actions = rng.integers(0, pool.single_action_space.n, envs)
            if policy is not None:
                actions = np.array([policy(observation) for observation in obs])
            start = time.perf_counter()
            next_obs, rewards, terminations, truncations, info = pool.step(actions)
            wall, final = time.perf_counter() - start, next_obs.copy()
            for env in np.flatnonzero(terminations | truncations):
                final[env] = info["final_obs"][env]
            yield (obs, actions, rewards, final, terminations, truncations), next_obs, wall
            obs = next_obs


class RecordedPlay:
    """Real pool steps (`live_play`'s): each env's new frame a step and, where an episode ended, its next first one."""

    def __init__(self, envs: int, steps: int, game: str, policy: Callable | None = None, **options: Any) -> None:
        self.frames, self.firsts = (np.zeros((steps, envs, *SHAPE[1:]), np.uint8) for _ in range(2))
        self.terminations, self.truncations = np.zeros((steps, envs), bool), np.zeros((steps, envs), bool)
        self.rewards, self.actions = np.zeros((steps, envs)), np.zeros((steps, envs), np.int64)
        for step, (transition, next_obs, _) in enumerate(live_play(envs, steps, game, policy, **options)):
            obs, self.actions[step], self.rewards[step], final, terminations, truncations = transition
            self.start = obs.copy() if step == 0 else self.start
            self.terminations[step], self.truncations[step] = terminations, truncations
            self.frames[step] = final[:, -1]
            ended = terminations | truncations
            self.firsts[step, ended] = next_obs[ended, -1]  # the next episode's first frame, in every slot
        self.envs, self.steps = envs, steps

    def transitions(self, count: int) -> Iterator:
        """The first `count` pool steps as ``(obs, actions, rewards, next_obs, terminations, truncations)``."""
        if count > self.steps:
            raise ValueError(f"the recording holds {self.steps} pool steps, not {count}: raise RECORD_STEPS")
        obs = self.start.copy()
        for k in range(count):
            next_obs = np.concatenate([obs[:, 1:], self.frames[k][:, None]], axis=1)
            ended = self.terminations[k] | self.truncations[k]
            yield obs, self.actions[k], self.rewards[k], next_obs, self.terminations[k], self.truncations[k]
            obs = next_obs
            obs[ended] = self.firsts[k, ended][:, None]  # the next episode's first frame in every slot


def record(name: str) -> RecordedPlay:
    """The recording `name` of `PLAYS`, played now."""
    game = name.removesuffix("-trained")
    policy, options, _ = trained_policy(CHECKPOINT, game) if PLAYS[name] else (None, {}, "")
    options.pop("game", None)
    return RecordedPlay(ENVS, RECORD_STEPS, game, policy, **options)


def sb3_buffer(capacity: int, envs: int, optimize: bool, method: str = "") -> ReplayBuffer:
    """SB3's ReplayBuffer for `SHAPE` uint8 observations; with `method`, sb3-extra-buffers' CompressedReplayBuffer."""
    space, options, buffer_class = gymnasium.spaces.Box(0, 255, SHAPE, np.uint8), {}, ReplayBuffer
    if method:
        from sb3_extra_buffers.compressed import CompressedReplayBuffer, find_buffer_dtypes

        buffer_class = CompressedReplayBuffer
        options = {"dtypes": find_buffer_dtypes(SHAPE, compression_method=method), "compression_method": method}
    kinds = {"optimize_memory_usage": optimize, "handle_timeout_termination": not optimize}  # SB3 refuses both
    return buffer_class(capacity, space, gymnasium.spaces.Discrete(4), "cpu", envs, **kinds, **options)


def filled(buffer: Buffer, play: RecordedPlay, transitions: int) -> Buffer:
    """`buffer` with `transitions` of `play`'s transitions added."""
    for obs, actions, rewards, next_obs, terminations, truncations in play.transitions(transitions // play.envs):
        if isinstance(buffer, FrameReplay):
            buffer.add(obs, actions, rewards, next_obs, terminations, truncations)
        else:
            infos = [{"TimeLimit.truncated": bool(truncated)} for truncated in truncations]
            buffer.add(obs, next_obs, actions, rewards, terminations | truncations, infos)
    return buffer


def ours(play: RecordedPlay, transitions: int | None = None) -> dict[str, Buffer]:
    """A FrameReplay of each compression by name, holding `transitions` of `play`'s (default: the whole recording)."""
    n = transitions or play.steps * play.envs
    made = {c: FrameReplay(n, play.envs, SHAPE, seed=0, compression=c) for c in COMPRESSIONS}
    return {f"FrameReplay {c}": filled(buffer, play, n) for c, buffer in made.items()}


def per_transition(buffer: Buffer) -> float:
    """Bytes per transition held (an SB3 buffer's: its arrays and their objects, per transition of its capacity)."""
    if isinstance(buffer, FrameReplay):
        return buffer.nbytes / len(buffer)
    held = 0
    for value in vars(buffer).values():
        if isinstance(value, np.ndarray) and value.dtype == object:
            held += sys.getsizeof(value) + sum(sys.getsizeof(blob) for blob in value.flat if blob is not None)
        elif isinstance(value, np.ndarray):
            held += value.nbytes
    return held / (buffer.buffer_size * buffer.n_envs)


def as_torch(batch: Any) -> tuple[torch.Tensor, ...]:
    return torch.as_tensor(batch.obs), torch.as_tensor(batch.next_obs), torch.as_tensor(batch.actions)


def sample_times(buffers: dict[str, Buffer], rounds: int, batches: int) -> dict[str, float]:
    """Print and return each buffer's median CPU µs per ``sample(32)`` (numpy and torch) in alternating rounds."""
    calls: dict[str, Callable[[], object]] = {}
    for name, buffer in buffers.items():
        if isinstance(buffer, FrameReplay):
            calls[f"{name} (numpy)"] = lambda b=buffer: b.sample(32)
            calls[f"{name} + torch.as_tensor"] = lambda b=buffer: as_torch(b.sample(32))
        else:
            calls[name] = lambda b=buffer: b.sample(32)
    np.random.seed(0)  # SB3 samples with numpy's global generator
    times = [{name: common.per_call(call, batches)["cpu"] * 1e6 for name, call in calls.items()} for _ in range(rounds)]
    medians = {name: float(np.median([round_[name] for round_ in times])) for name in calls}
    print(f"\nsample(32), CPU µs per batch, median of {rounds} alternating rounds of {batches}:")
    for name, median in sorted(medians.items(), key=lambda item: item[1]):
        print(f"  {name:56s} {median:9,.0f} µs   {median / medians[SB3]:6.2f}x SB3's")
    return medians


def sample_buffers(play: RecordedPlay, transitions: int, methods: Iterable[str] = ()) -> dict[str, Buffer]:
    """Ours, SB3's and sb3-extra-buffers' of `methods`, with and without optimize_memory_usage, of `transitions`."""
    made = ours(play, transitions)
    for method, optimize in itertools.product(["", *methods], (False, True)):
        name = f"{SB3} (optimize_memory_usage=True)" if optimize else SB3
        name = f"sb3-extra-buffers {method} optimize={optimize}" if method else name
        made[name] = filled(sb3_buffer(transitions, play.envs, optimize, method), play, transitions)
    return made


def bytes_table(plays: dict[str, RecordedPlay], buffers: Callable[[RecordedPlay], dict[str, Buffer]]) -> dict:
    """Print and return bytes per transition of each of `buffers(play)` for each recording."""
    table: dict[str, dict[str, float]] = {}
    for game, play in plays.items():
        for name, buffer in buffers(play).items():
            table.setdefault(name, {})[game] = per_transition(buffer)
    print(f"\nBytes per transition held, (4, 84, 84) uint8, {next(iter(plays.values())).envs} envs:")
    print(f"  {'':52s}" + "".join(f"{game:>17s}" for game in plays))
    for name, sizes in table.items():
        print(f"  {name:52s}" + "".join(f"{sizes[game]:17,.0f}" for game in plays))
    return table


def add_table(envs: int, steps: int) -> dict:
    """Print and return the CPU time of adding a pool step of live Breakout against the step's wall time."""
    # (The median, and the mean, which counts the zstd dictionary's training.)
    buffers = {c: FrameReplay(steps * envs, envs, SHAPE, compression=c) for c in COMPRESSIONS}
    step_times, add_times = [], {compression: [] for compression in COMPRESSIONS}
    for step, (transition, _, wall) in enumerate(live_play(envs, steps, "Breakout")):
        step_times.append(wall)
        for compression in COMPRESSIONS if step % 2 else COMPRESSIONS[::-1]:
            add = functools.partial(buffers[compression].add, *transition)
            add_times[compression].append(common.per_call(add)["cpu"])
    step_time, figures = float(np.median(step_times)), {"pool_step_us": 1e6 * float(np.median(step_times))}
    print(f"\nadd of one pool step of {envs} envs (Breakout), {steps} steps; a pool step: {step_time * 1e6:,.0f} µs")
    for compression, values in add_times.items():
        median, mean = float(np.median(values)), float(np.mean(values))
        figures[f"add_us {compression}"] = {"median": 1e6 * median, "mean": 1e6 * mean, "longest": 1e6 * max(values)}
        print(
            f"  FrameReplay {compression!s:5s} add: {median * 1e6:6.0f} µs = {median / step_time:6.1%} of a pool "
            f"step; mean {mean * 1e6:6.0f} µs = {mean / step_time:6.1%}, longest {max(values) * 1e3:.0f} ms"
        )
    return figures


def resident_bytes() -> int:
    """This process's resident memory now (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def fill(transitions: int, envs: int, game: str) -> dict:
    """Live play of `game` into a zstd FrameReplay of `transitions`: its resident memory, then save and load."""
    before = resident_bytes()
    buffer = FrameReplay(transitions, envs, SHAPE, seed=0, compression="zstd")
    adding = 0.0
    for transition, _, _ in live_play(envs, transitions // envs, game):
        adding += common.per_call(functools.partial(buffer.add, *transition))["cpu"]
    after, peak = resident_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    figures = {"held": len(buffer), "nbytes": buffer.nbytes, "resident_before": before, "resident_after": after,
               "peak_rss": peak, "add_us": adding / (transitions // envs) * 1e6}  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "replay.npz"
        figures["save_seconds"] = common.per_call(functools.partial(buffer.save, path))["wall"]
        clock = common.Stopwatch()
        loaded = FrameReplay.load(path)
        figures["load_seconds"], figures["file_bytes"] = clock.read()["wall"], path.stat().st_size
    a, b = buffer.sample(32), loaded.sample(32)
    assert a.obs.tobytes() == b.obs.tobytes() and a.next_obs.tobytes() == b.next_obs.tobytes()
    held, grown = len(buffer), after - before
    print(f"\n--fill {transitions:,} ({game}, live): resident memory +{grown / 1e9:.3f} GB ({grown / held:,.0f} B a "
          f"transition; nbytes {buffer.nbytes / held:,.0f}); save {figures['save_seconds']:.1f} s, "
          f"{figures['file_bytes'] / 1e9:.3f} GB; load {figures['load_seconds']:.1f} s; {figures}")  # fmt: skip
    return figures


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    add = parser.add_argument
    parts = ["bytes", "sample", "add", "peers"]
    add("--only", nargs="*", choices=parts, default=parts[:3], help="parts; none: --fill (default: bytes sample add)")
    add("--fill", type=integer, default=0, help="transitions to fill (default: 0: no --fill)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(1)
    print(common.describe_machine())
    figures: dict[str, Any] = {}
    plays = {name: record(name) for name in PLAYS} if {"bytes", "sample", "peers"} & set(args.only) else {}
    if "bytes" in args.only:
        sb3 = {f"SB3 ReplayBuffer optimize_memory_usage={o}": sb3_buffer(80_000, ENVS, o) for o in (True, False)}
        figures["bytes"] = bytes_table(plays, lambda play: {**ours(play), **sb3})
    first = next(iter(plays.values()), None)  # the one the sample and peers parts sample
    if "sample" in args.only:
        figures["sample"] = sample_times(sample_buffers(first, 40_000), ROUNDS, 200)
    if "peers" in args.only:
        from sb3_extra_buffers.compressed.compression_methods import COMPRESSION_METHOD_MAP

        peers = functools.partial(sample_buffers, transitions=10_000, methods=COMPRESSION_METHOD_MAP)
        figures["peers_bytes"] = bytes_table(plays, peers)
        figures["peers_sample"] = sample_times(peers(first), ROUNDS, 200)
    if "add" in args.only:
        figures["add"] = add_table(ENVS, 2000)
    if args.fill:
        figures["fill"] = fill(args.fill, ENVS, "MsPacman")
    common.save(__file__, args, figures, argv)


if __name__ == "__main__":
    main()
