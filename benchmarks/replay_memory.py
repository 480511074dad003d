"""FrameReplay against Stable-Baselines3's ReplayBuffer: bytes per transition per game and compression, the time
of sample and add, a filled memory's resident size, saving and loading it.

pip install -e ".[sb3,zstd]" && python benchmarks/replay_memory.py --recordings /tmp/recordings [--fill 1000000]

1. Bytes per transition of ``(4, 84, 84)`` uint8 observations of 8 envs, ``nbytes / len``: FrameReplay with its
   frames as they are and with ``compression="zstd"``, each filled with ``--record-steps`` pool steps of real play
   (Breakout, Pong, Seaquest, MsPacman with random actions; Breakout played by the PPO agent of ``--checkpoint``);
   SB3's ReplayBuffer with and without ``optimize_memory_usage`` from its arrays (its bytes do not depend on the
   frames).
2. ``sample(32)`` (obs and next_obs) on the first game's transitions, in alternating rounds, timed in CPU time
   (``time.process_time``): FrameReplay's numpy batch and the same turned into torch tensors (what a learner does),
   with each compression; SB3's ``sample`` with ``optimize_memory_usage=True`` (as CleanRL's ``dqn_atari.py`` uses
   it), which returns torch tensors; and SB3's own numpy indexing alone. Ratios are SB3's time over each one's.
   Torch runs on one thread (``--torch-threads``): with two, its copy of a batch into a tensor busy-waits for a
   second thread, which on a loaded machine costs SB3's sample ~8 ms of CPU for a 0.9 MB copy.
3. ``add`` of one pool step against the pool step: a GamePool of 8 envs playing Breakout; per step, its wall time
   and the CPU time of adding it to a FrameReplay with each compression (alternating which goes first).
4. ``--fill N``: a ``compression="zstd"`` FrameReplay of N transitions filled to the brim by live play of
   ``--fill-game`` (random actions): its ``nbytes``, the process's resident memory before and after (the
   difference is the memory's) and its peak RSS; then ``save`` (time, file size) and ``load`` (time; the loaded
   memory samples what the filled one does).

``--recordings DIR`` keeps the recorded play there (one .npz per game), for the next run and for
``benchmarks/replay_peers.py``. The speed test's transitions are the recording replayed cyclically when it is too
short: each env's frames go on from where its stack stands, with the cycle number written into one pixel of every
new frame, so that every frame is new and episodes start and end where the real ones did.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import torch
from stable_baselines3.common.buffers import ReplayBuffer

from atari_game import FrameReplay, GamePool
from atari_game.cli import count, integer
from atari_game.game import action_meanings
from atari_game.replay import COMPRESSIONS
from atari_game.training import trained_policy

SHAPE = (4, 84, 84)
# The recordings: name -> (game, played by the trained agent).
PLAYS = {
    "Breakout": ("Breakout", False),
    "Pong": ("Pong", False),
    "Seaquest": ("Seaquest", False),
    "MsPacman": ("MsPacman", False),
    "Breakout-trained": ("Breakout", True),
}


class RecordedPlay:
    """Real pool steps, kept as each env's new frame per step and, where an episode ended, its next first frame.

    `policy` (one observation in, one action out, as `atari_game.training.trained_policy` gives) plays every env;
    None: random actions. `options`: the pool's game options (default: DeepMind's life-loss episodes, 30 NOOPs, FIRE
    where the game has it).
    """

    def __init__(
        self,
        envs: int,
        steps: int,
        seed: int = 0,
        game: str = "Breakout",
        policy: Callable[[np.ndarray], int] | None = None,
        options: dict | None = None,
    ) -> None:
        fire = "FIRE" in action_meanings(game)
        options = options or {"life_loss": "terminal", "noop_max": 30, "fire_reset": fire}
        with GamePool(envs, game, seed=seed, autoreset_mode="SameStep", **options) as pool:
            obs, _ = pool.reset()
            self.start = obs.copy()
            self.frames = np.zeros((steps, envs, *SHAPE[1:]), np.uint8)
            self.firsts = np.zeros((steps, envs, *SHAPE[1:]), np.uint8)
            self.terminations = np.zeros((steps, envs), bool)
            self.truncations = np.zeros((steps, envs), bool)
            self.rewards = np.zeros((steps, envs))
            self.actions = np.random.default_rng(seed).integers(0, pool.single_action_space.n, (steps, envs))
            for step in range(steps):
                if policy is not None:
                    self.actions[step] = [policy(observation) for observation in obs]
                obs, self.rewards[step], terms, truncs, info = pool.step(self.actions[step])
                self.terminations[step], self.truncations[step] = terms, truncs
                self.frames[step] = obs[:, -1]
                for env in np.flatnonzero(terms | truncs):
                    self.frames[step, env] = info["final_obs"][env][-1]  # the true final observation's frame
                    self.firsts[step, env] = obs[env, -1]  # the next episode's first frame, in every slot
        self.envs, self.steps = envs, steps

    ARRAYS = ("start", "frames", "firsts", "terminations", "truncations", "rewards", "actions")

    def save(self, path: Path) -> None:
        np.savez(path, **{name: getattr(self, name) for name in self.ARRAYS})

    @classmethod
    def load(cls, path: Path) -> RecordedPlay:
        record = cls.__new__(cls)
        with np.load(path) as arrays:
            for name in cls.ARRAYS:
                setattr(record, name, arrays[name])
        record.steps, record.envs = record.frames.shape[:2]
        return record

    def transitions(self, count: int):
        """`count` pool steps as ``(obs, actions, rewards, next_obs, terminations, truncations)``, cyclically."""
        obs = self.start.copy()
        for step in range(count):
            k, cycle = step % self.steps, step // self.steps
            frames = self.frames[k].copy()
            frames[:, 0, 0] ^= np.uint8(cycle % 256)  # a new frame each cycle
            next_obs = np.concatenate([obs[:, 1:], frames[:, None]], axis=1)
            ended = self.terminations[k] | self.truncations[k]
            yield obs, self.actions[k], self.rewards[k], next_obs, self.terminations[k], self.truncations[k]
            firsts = self.firsts[k, ended]
            firsts[:, 0, 0] ^= np.uint8(cycle % 256)
            obs = next_obs
            obs[ended] = firsts[:, None]  # the next episode's first observation: its first frame in every slot


def cpu_times(systems: dict[str, Callable[[], object]], rounds: int, batches: int) -> dict[str, list[float]]:
    """Each system's CPU µs per call, one figure per round: `batches` calls each, the systems alternating in every
    round, so that drift on a shared machine hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(rounds):
        for name, call in systems.items():
            start = time.process_time()
            for _ in range(batches):
                call()
            times[name].append((time.process_time() - start) / batches * 1e6)
    return times


def record(name: str, envs: int, steps: int, checkpoint: str, directory: str) -> RecordedPlay:
    """The recording `name` of `PLAYS`: loaded from `directory` where it is there with as many steps, else played
    (and kept there)."""
    path = Path(directory) / f"{name}-{envs}x{steps}.npz" if directory else None
    if path is not None and path.exists():
        return RecordedPlay.load(path)
    game, trained = PLAYS[name]
    if trained:
        policy, options = trained_policy(checkpoint, game)
        options.pop("game", None)
        play = RecordedPlay(envs, steps, game=game, policy=policy, options=options)
    else:
        play = RecordedPlay(envs, steps, game=game)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        play.save(path)
    return play


def filled(play: RecordedPlay, compression: str | None, transitions: int | None = None) -> FrameReplay:
    """A FrameReplay holding `transitions` (default: the whole recording's) of `play`'s transitions."""
    steps = (transitions or play.steps * play.envs) // play.envs
    buffer = FrameReplay(steps * play.envs, play.envs, SHAPE, seed=0, compression=compression)
    for step in play.transitions(steps):
        buffer.add(*step)
    return buffer


def sb3_buffer(
    capacity: int, envs: int, optimize: bool, buffer_class: type[ReplayBuffer] = ReplayBuffer, **options: Any
) -> ReplayBuffer:
    """SB3's `buffer_class` (its ReplayBuffer, or a subclass taking `options` more) for `SHAPE` uint8 observations."""
    space = gymnasium.spaces.Box(0, 255, SHAPE, np.uint8)
    return buffer_class(
        capacity,
        space,
        gymnasium.spaces.Discrete(4),
        "cpu",
        envs,
        optimize_memory_usage=optimize,
        handle_timeout_termination=not optimize,  # SB3 refuses both at once
        **options,
    )


def sb3_bytes(buffer: ReplayBuffer) -> int:
    return sum(value.nbytes for value in vars(buffer).values() if isinstance(value, np.ndarray))


def memory_table(plays: dict[str, RecordedPlay]) -> None:
    envs = next(iter(plays.values())).envs
    print(f"Bytes per transition (nbytes / transitions held), (4, 84, 84) uint8, {envs} envs:")
    print(f"  {'':24s}" + "".join(f"{name:>18s}" for name in plays))
    for compression in COMPRESSIONS:
        sizes = []
        for play in plays.values():
            buffer = filled(play, compression)
            sizes.append(f"{buffer.nbytes / len(buffer):18,.0f}")
        print(f"  {f'FrameReplay {compression}':24s}" + "".join(sizes))
    for optimize in (True, False):
        per_transition = sb3_bytes(sb3_buffer(80_000, envs, optimize)) / 80_000
        print(f"  SB3 ReplayBuffer optimize_memory_usage={optimize}: {per_transition:,.0f}")
    transitions = sum(len(filled(play, None)) for play in plays.values())
    print(f"  ({transitions:,} transitions in all, each game's whole recording)")


def speed_table(play: RecordedPlay, transitions: int, rounds: int, batches: int) -> None:
    ours = {compression: filled(play, compression, transitions) for compression in COMPRESSIONS}
    envs = play.envs
    sb3 = sb3_buffer(transitions, envs, optimize=True)
    for obs, actions, rewards, next_obs, terminations, _ in play.transitions(transitions // envs + 1):
        sb3.add(obs, next_obs, actions, rewards, terminations, [{} for _ in range(envs)])
    np.random.seed(0)  # SB3 samples with numpy's global generator

    def as_torch(batch):
        return torch.as_tensor(batch.obs), torch.as_tensor(batch.next_obs), torch.as_tensor(batch.actions)

    def sb3_numpy():  # SB3's indexing in sample(), without its conversion to torch
        rows = (np.random.randint(1, sb3.buffer_size, size=32) + sb3.pos) % sb3.buffer_size
        env = np.random.randint(0, envs, size=32)
        return sb3.observations[rows, env], sb3.observations[(rows + 1) % sb3.buffer_size, env], sb3.actions[rows, env]

    systems: dict[str, Callable[[], object]] = {}
    for compression, buffer in ours.items():
        systems[f"FrameReplay {compression} (numpy)"] = lambda buffer=buffer: buffer.sample(32)
        systems[f"FrameReplay {compression} + torch.as_tensor"] = lambda buffer=buffer: as_torch(buffer.sample(32))
    systems["SB3 ReplayBuffer.sample (torch)"] = lambda: sb3.sample(32)
    systems["SB3's indexing alone (numpy)"] = sb3_numpy
    times = cpu_times(systems, rounds, batches)
    sb3_time = statistics.median(times["SB3 ReplayBuffer.sample (torch)"])
    print(
        f"\nsample(32), {len(ours[None]):,} transitions of real frames, {envs} envs; CPU µs per batch, "
        f"median of {rounds} alternating rounds of {batches}:"
    )
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:40s} {median:8.0f} µs   SB3 sample / this: {sb3_time / median:6.2f}x")


def add_table(envs: int, steps: int) -> None:
    """The wall time of a pool step of `envs` envs against the CPU time of adding it, with each compression."""
    buffers = {
        compression: FrameReplay(steps * envs, envs, SHAPE, compression=compression) for compression in COMPRESSIONS
    }
    step_times, add_times = [], {compression: [] for compression in COMPRESSIONS}
    rng = np.random.default_rng(0)
    with GamePool(envs, "Breakout", seed=0, autoreset_mode="SameStep", life_loss="terminal") as pool:
        obs, _ = pool.reset()
        for step in range(steps):
            actions = rng.integers(0, pool.single_action_space.n, envs)
            start = time.perf_counter()
            next_obs, rewards, terminations, truncations, info = pool.step(actions)
            step_times.append(time.perf_counter() - start)
            real_next_obs = next_obs.copy()
            for env in np.flatnonzero(terminations | truncations):
                real_next_obs[env] = info["final_obs"][env]
            order = COMPRESSIONS if step % 2 else COMPRESSIONS[::-1]
            for compression in order:
                start = time.process_time()
                buffers[compression].add(obs, actions, rewards, real_next_obs, terminations, truncations)
                add_times[compression].append(time.process_time() - start)
            obs = next_obs
    step_time = statistics.median(step_times)
    print(f"\nadd of one pool step of {envs} envs (Breakout), {steps} steps; a pool step: {step_time * 1e6:,.0f} µs")
    print("  (medians: the pool step's wall time, add's CPU time; the mean counts the zstd dictionary's training)")
    for compression, values in add_times.items():
        median, mean = statistics.median(values), statistics.mean(values)
        print(
            f"  FrameReplay {compression!s:5s} add: {median * 1e6:6.0f} µs = {median / step_time:6.1%} of a pool "
            f"step; mean {mean * 1e6:6.0f} µs = {mean / step_time:6.1%}, longest {max(values) * 1e3:.0f} ms"
        )


def resident_bytes() -> int:
    """This process's resident memory now (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def fill(transitions: int, envs: int, game: str) -> None:
    """Live play of `game` into a zstd FrameReplay of `transitions`: its resident memory, then save and load."""
    before = resident_bytes()
    buffer = FrameReplay(transitions, envs, SHAPE, seed=0, compression="zstd")
    rng = np.random.default_rng(0)
    start, adding = time.perf_counter(), 0.0
    fire = "FIRE" in action_meanings(game)
    with GamePool(
        envs, game, seed=0, autoreset_mode="SameStep", life_loss="terminal", noop_max=30, fire_reset=fire
    ) as pool:
        obs, _ = pool.reset()
        for _ in range(transitions // envs):
            actions = rng.integers(0, pool.single_action_space.n, envs)
            next_obs, rewards, terminations, truncations, info = pool.step(actions)
            real_next_obs = next_obs.copy()
            for env in np.flatnonzero(terminations | truncations):
                real_next_obs[env] = info["final_obs"][env]
            clock = time.process_time()
            buffer.add(obs, actions, rewards, real_next_obs, terminations, truncations)
            adding += time.process_time() - clock
            obs = next_obs
    seconds = time.perf_counter() - start
    after, peak = resident_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        f"\n--fill {transitions:,} ({game}, live, random actions, {seconds:.0f} s): {len(buffer):,} transitions held, "
        f"nbytes {buffer.nbytes / 1e9:.3f} GB ({buffer.nbytes / len(buffer):,.0f} B per transition held); resident "
        f"memory {before / 1e9:.3f} GB before the memory, {after / 1e9:.3f} GB filled (+{(after - before) / 1e9:.3f} "
        f"GB, {(after - before) / len(buffer):,.0f} B per transition), peak RSS {peak / 1e9:.3f} GB; adding "
        f"{adding / (transitions // envs) * 1e6:,.0f} µs CPU per pool step"
    )
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "replay.npz"
        start = time.perf_counter()
        buffer.save(path)
        saving = time.perf_counter() - start
        start = time.perf_counter()
        loaded = FrameReplay.load(path)
        loading = time.perf_counter() - start
        print(
            f"  save: {saving:.1f} s, {os.path.getsize(path) / 1e9:.3f} GB ({os.path.getsize(path) / len(buffer):,.0f} "
            f"B per transition); load: {loading:.1f} s"
        )
    a, b = buffer.sample(32), loaded.sample(32)
    assert a.obs.tobytes() == b.obs.tobytes() and a.next_obs.tobytes() == b.next_obs.tobytes()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--envs", type=count, default=8, help="envs of the pools and the buffers (default: %(default)s)"
    )
    parser.add_argument(
        "--record-steps",
        type=count,
        default=12_500,
        help="pool steps of each game's recording (default: %(default)s: 100,000 transitions of 8 envs)",
    )
    parser.add_argument(
        "--games",
        nargs="+",
        choices=list(PLAYS),
        default=list(PLAYS),
        help="the recordings of the bytes table; the first also feeds the speed test (default: all)",
    )
    parser.add_argument(
        "--checkpoint",
        default="runs/Breakout-1/checkpoint.pt",
        help="the checkpoint whose agent plays Breakout-trained (default: %(default)s)",
    )
    parser.add_argument("--recordings", default="", help="a directory to keep the recordings in (default: none)")
    parser.add_argument(
        "--transitions",
        type=count,
        default=40_000,
        help="transitions the speed test's buffers hold (default: %(default)s)",
    )
    parser.add_argument(
        "--rounds", type=count, default=5, help="alternating rounds of the speed test (default: %(default)s)"
    )
    parser.add_argument(
        "--batches", type=count, default=200, help="sample(32) calls per buffer per round (default: %(default)s)"
    )
    parser.add_argument(
        "--add-steps", type=count, default=2000, help="pool steps of the add test (default: %(default)s)"
    )
    parser.add_argument(
        "--fill",
        type=integer,
        default=0,
        help="also fill a zstd FrameReplay of this many transitions (default: 0: none)",
    )
    parser.add_argument("--fill-game", default="MsPacman", help="the game --fill plays (default: %(default)s)")
    parser.add_argument(
        "--only",
        nargs="*",
        choices=["bytes", "sample", "add"],
        default=["bytes", "sample", "add"],
        help="which of the tables to print; none (--only alone): only --fill's (default: all)",
    )
    parser.add_argument(
        "--torch-threads",
        type=count,
        default=1,
        help="torch's intra-op threads (see the docstring) (default: %(default)s)",
    )
    return parser


def main() -> None:
    args = build_parser().parse_args()
    torch.set_num_threads(args.torch_threads)
    if "bytes" in args.only or "sample" in args.only:
        plays = {
            name: record(name, args.envs, args.record_steps, args.checkpoint, args.recordings) for name in args.games
        }
    if "bytes" in args.only:
        memory_table(plays)
    if "sample" in args.only:
        speed_table(next(iter(plays.values())), args.transitions, args.rounds, args.batches)
    if "add" in args.only:
        add_table(args.envs, args.add_steps)
    if args.fill:
        fill(args.fill, args.envs, args.fill_game)


if __name__ == "__main__":
    main()
