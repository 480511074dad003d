"""FrameReplay against Stable-Baselines3's ReplayBuffer: bytes per transition, sampling speed, a filled 1M buffer.

pip install -e ".[sb3]" && python benchmarks/replay_memory.py [--fill 1000000]

1. Bytes per transition of ``(4, 84, 84)`` uint8 observations, 8 envs, from each buffer's arrays (``nbytes``):
   FrameReplay at 1M transitions (allocated lazily, so it costs nothing here) and SB3's ReplayBuffer with and
   without ``optimize_memory_usage`` (built at a smaller size: at 1M its 28 and 56 GB may not even be
   allocatable; its bytes per transition do not depend on the size).
2. ``sample(32)`` (obs and next_obs) of both, filled with the same real Breakout transitions, in alternating
   rounds, timed in CPU time (``time.process_time``): FrameReplay's numpy batch, the same turned into torch
   tensors (what a learner does), and SB3's ``sample`` with ``optimize_memory_usage=True`` (as CleanRL's
   ``dqn_atari.py`` uses it), which returns torch tensors; and, to separate the memory layout from that
   conversion, SB3's own numpy indexing alone. Ratios are SB3's time over FrameReplay's. Torch runs on one
   thread (``--torch-threads``): with two, its copy of a batch into a tensor busy-waits for a second thread,
   which on a loaded machine costs SB3's sample ~8 ms of CPU for a 0.9 MB copy.
3. ``--fill N``: a FrameReplay of N transitions filled to the brim: its ``nbytes``, the process's resident memory
   before and after (the difference is the buffer's) and its peak RSS (which includes the speed test's buffers).

The transitions come from a few thousand steps of a real GamePool (Breakout, life-loss episodes, 30 NOOPs and
FIRE, random actions), replayed cyclically: each env's frames go on from where its stack stands, with the
cycle number written into one pixel of every new frame, so that every frame is new and episodes start and end
where the real ones did.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import gymnasium
import numpy as np
import torch
from stable_baselines3.common.buffers import ReplayBuffer

from atari_game import FrameReplay, GamePool
from atari_game.cli import count, integer

SHAPE = (4, 84, 84)


class RecordedPlay:
    """Real pool steps, kept as each env's new frame per step and, where an episode ended, its next first frame."""

    def __init__(self, envs: int, steps: int, seed: int = 0) -> None:
        options = {"life_loss": "terminal", "noop_max": 30, "fire_reset": True}
        with GamePool(envs, "Breakout", seed=seed, autoreset_mode="SameStep", **options) as pool:
            obs, _ = pool.reset()
            self.start = obs.copy()
            self.frames = np.zeros((steps, envs, *SHAPE[1:]), np.uint8)
            self.firsts = np.zeros((steps, envs, *SHAPE[1:]), np.uint8)
            self.terminations = np.zeros((steps, envs), bool)
            self.truncations = np.zeros((steps, envs), bool)
            self.rewards = np.zeros((steps, envs))
            self.actions = np.random.default_rng(seed).integers(0, pool.single_action_space.n, (steps, envs))
            for step in range(steps):
                obs, self.rewards[step], terms, truncs, info = pool.step(self.actions[step])
                self.terminations[step], self.truncations[step] = terms, truncs
                self.frames[step] = obs[:, -1]
                for env in np.flatnonzero(terms | truncs):
                    self.frames[step, env] = info["final_obs"][env][-1]  # the true final observation's frame
                    self.firsts[step, env] = obs[env, -1]  # the next episode's first frame, in every slot
        self.envs, self.steps = envs, steps

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


def sb3_buffer(capacity: int, envs: int, optimize: bool) -> ReplayBuffer:
    space = gymnasium.spaces.Box(0, 255, SHAPE, np.uint8)
    return ReplayBuffer(
        capacity,
        space,
        gymnasium.spaces.Discrete(4),
        "cpu",
        envs,
        optimize_memory_usage=optimize,
        handle_timeout_termination=not optimize,  # SB3 refuses both at once
    )


def sb3_bytes(buffer: ReplayBuffer) -> int:
    return sum(value.nbytes for value in vars(buffer).values() if isinstance(value, np.ndarray))


def memory_table(envs: int) -> None:
    capacity = 1_000_000
    print(f"Bytes per transition, (4, 84, 84) uint8, {envs} envs:")
    rows = [
        ("FrameReplay", FrameReplay(capacity, envs, SHAPE).nbytes / capacity),
        ("FrameReplay prioritized=True", FrameReplay(capacity, envs, SHAPE, prioritized=True).nbytes / capacity),
    ]
    for optimize in (True, False):
        small = sb3_buffer(80_000, envs, optimize)
        rows.append((f"SB3 ReplayBuffer optimize_memory_usage={optimize}", sb3_bytes(small) / 80_000))
    for name, per_transition in rows:
        print(f"  {name:48s} {per_transition:9,.0f} B   1M transitions: {per_transition * capacity / 1e9:5.2f} GB")


def speed_table(envs: int, transitions: int, record: RecordedPlay, rounds: int, batches: int) -> None:
    ours = FrameReplay(transitions, envs, SHAPE, seed=0)
    prioritized = FrameReplay(transitions, envs, SHAPE, prioritized=True, seed=0)
    sb3 = sb3_buffer(transitions, envs, optimize=True)
    for obs, actions, rewards, next_obs, terminations, truncations in record.transitions(transitions // envs + 1):
        ours.add(obs, actions, rewards, next_obs, terminations, truncations)
        prioritized.add(obs, actions, rewards, next_obs, terminations, truncations)
        sb3.add(obs, next_obs, actions, rewards, terminations, [{} for _ in range(envs)])
    np.random.seed(0)  # SB3 samples with numpy's global generator

    def as_torch(batch):
        return torch.as_tensor(batch.obs), torch.as_tensor(batch.next_obs), torch.as_tensor(batch.actions)

    def sb3_numpy():  # SB3's indexing in sample(), without its conversion to torch
        rows = (np.random.randint(1, sb3.buffer_size, size=32) + sb3.pos) % sb3.buffer_size
        env = np.random.randint(0, envs, size=32)
        return sb3.observations[rows, env], sb3.observations[(rows + 1) % sb3.buffer_size, env], sb3.actions[rows, env]

    systems = {
        "FrameReplay.sample (numpy)": lambda: ours.sample(32),
        "FrameReplay.sample + torch.as_tensor": lambda: as_torch(ours.sample(32)),
        "FrameReplay prioritized.sample (numpy)": lambda: prioritized.sample(32),
        "SB3 ReplayBuffer.sample (torch)": lambda: sb3.sample(32),
        "SB3's indexing alone (numpy)": sb3_numpy,
    }
    times: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(rounds):  # alternating, so that drift on a shared machine hits all alike
        for name, sample in systems.items():
            start = time.process_time()
            for _ in range(batches):
                sample()
            times[name].append((time.process_time() - start) / batches * 1e6)
    sb3_time = statistics.median(times["SB3 ReplayBuffer.sample (torch)"])
    print(
        f"\nsample(32), {len(ours):,} transitions of real Breakout frames, {envs} envs; CPU µs per batch, "
        f"median of {rounds} alternating rounds of {batches}:"
    )
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:40s} {median:8.0f} µs   SB3 sample / this: {sb3_time / median:6.2f}x")


def resident_bytes() -> int:
    """This process's resident memory now (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def fill(transitions: int, envs: int, record: RecordedPlay) -> None:
    before = resident_bytes()
    buffer = FrameReplay(transitions, envs, SHAPE, seed=0)
    start = time.process_time()
    for step in record.transitions(transitions // envs):
        buffer.add(*step)
    seconds = time.process_time() - start
    after, peak = resident_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        f"\n--fill {transitions:,}: {len(buffer):,} transitions held, nbytes {buffer.nbytes / 1e9:.3f} GB "
        f"({buffer.nbytes / len(buffer):,.0f} B per transition held); resident memory {before / 1e9:.3f} GB before "
        f"the buffer, {after / 1e9:.3f} GB filled (+{(after - before) / 1e9:.3f} GB), peak RSS {peak / 1e9:.3f} GB; "
        f"{transitions / seconds:,.0f} transitions/s added (CPU time)"
    )
    batch = buffer.sample(32)
    assert batch.obs.shape == (32, *SHAPE)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", type=count, default=8, help="envs of the pool and the buffers (default: %(default)s)")
    parser.add_argument(
        "--record-steps", type=count, default=2000, help="real pool steps to replay cyclically (default: %(default)s)"
    )
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
        "--fill", type=integer, default=0, help="also fill a FrameReplay of this many transitions (default: 0: none)"
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
    memory_table(args.envs)
    record = RecordedPlay(args.envs, args.record_steps)
    speed_table(args.envs, args.transitions, record, args.rounds, args.batches)
    if args.fill:
        fill(args.fill, args.envs, record)


if __name__ == "__main__":
    main()
