"""FrameReplay against sb3-extra-buffers' CompressedReplayBuffer: bytes per transition and sample(32), same frames.

sb3-extra-buffers (PyPI, featured in SB3's docs) compresses each stored observation of SB3's ReplayBuffer. Run it
from a virtual environment that sees this one's packages (its own pins do not clash: stable-baselines3 and numpy):

    python -m venv --system-site-packages /work/peers/sb3x-venv
    /work/peers/sb3x-venv/bin/pip install "sb3-extra-buffers[fast]"      # zstd, lz4, isal (igzip), numba (rle-jit)
    /work/peers/sb3x-venv/bin/python benchmarks/replay_peers.py --recordings /tmp/recordings

1. Bytes per transition of every compression method sb3-extra-buffers registers (at its default level), with and
   without ``optimize_memory_usage`` (one compressed observation per transition, or obs and next_obs apart), and
   FrameReplay's, each holding the same ``--transitions`` transitions of each recorded game (``replay_memory.py``'s
   recordings): theirs counted as their own example counts them (``sys.getsizeof`` of the object arrays and of
   every compressed observation) plus their action, reward, done and timeout arrays; ours ``nbytes``.
2. ``sample(32)`` on the first game's transitions, all as torch tensors (SB3's ``sample``; ours
   ``FrameReplay.sample`` and ``torch.as_tensor``), in alternating rounds, CPU time (``time.process_time``),
   against SB3's own uncompressed ReplayBuffer.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable

import numpy as np
import torch
from replay_memory import PLAYS, SHAPE, RecordedPlay, cpu_times, record, sb3_buffer
from stable_baselines3.common.buffers import ReplayBuffer

from atari_game import FrameReplay
from atari_game.cli import count


def their_methods() -> list[str]:
    """Every compression method sb3-extra-buffers registers where it runs (its optional backends installed)."""
    from sb3_extra_buffers.compressed.compression_methods import COMPRESSION_METHOD_MAP

    return list(COMPRESSION_METHOD_MAP)


def their_buffer(capacity: int, envs: int, method: str, optimize: bool) -> ReplayBuffer:
    from sb3_extra_buffers.compressed import CompressedReplayBuffer, find_buffer_dtypes

    dtypes = find_buffer_dtypes(SHAPE, compression_method=method)
    return sb3_buffer(capacity, envs, optimize, CompressedReplayBuffer, dtypes=dtypes, compression_method=method)


def their_bytes(buffer: ReplayBuffer) -> int:
    """What the buffer holds: its object arrays with every compressed observation, and its other arrays."""
    total = 0
    for value in vars(buffer).values():
        if isinstance(value, np.ndarray) and value.dtype == object:
            total += sys.getsizeof(value) + sum(sys.getsizeof(blob) for blob in value.flat if blob is not None)
        elif isinstance(value, np.ndarray):
            total += value.nbytes
    return total


def fill(buffer: ReplayBuffer | FrameReplay, play: RecordedPlay, transitions: int) -> None:
    for obs, actions, rewards, next_obs, terminations, truncations in play.transitions(transitions // play.envs):
        if isinstance(buffer, FrameReplay):
            buffer.add(obs, actions, rewards, next_obs, terminations, truncations)
        else:
            infos = [{"TimeLimit.truncated": bool(truncated)} for truncated in truncations]
            buffer.add(obs, next_obs, actions, rewards, terminations | truncations, infos)


def buffers(play: RecordedPlay, transitions: int, methods: list[str]) -> dict[str, ReplayBuffer | FrameReplay]:
    """Ours (each compression) and theirs (each method, with and without optimize_memory_usage), filled alike."""
    made: dict[str, ReplayBuffer | FrameReplay] = {
        "FrameReplay zstd": FrameReplay(transitions, play.envs, SHAPE, seed=0, compression="zstd"),
        "FrameReplay None": FrameReplay(transitions, play.envs, SHAPE, seed=0),
    }
    for method in methods:
        for optimize in (True, False):
            made[f"sb3-extra-buffers {method} optimize={optimize}"] = their_buffer(
                transitions, play.envs, method, optimize
            )
    for buffer in made.values():
        fill(buffer, play, transitions)
    return made


def nbytes(buffer: ReplayBuffer | FrameReplay) -> float:
    """Bytes per transition held."""
    if isinstance(buffer, FrameReplay):
        return buffer.nbytes / len(buffer)
    return their_bytes(buffer) / (buffer.buffer_size * buffer.n_envs)


def speed(made: dict[str, ReplayBuffer | FrameReplay], play: RecordedPlay, rounds: int, batches: int) -> None:
    transitions = len(made["FrameReplay None"])
    sb3 = sb3_buffer(transitions, play.envs, optimize=False)
    fill(sb3, play, transitions)
    np.random.seed(0)  # SB3 samples with numpy's global generator

    def ours(buffer: FrameReplay) -> Callable[[], object]:
        def sample() -> object:
            batch = buffer.sample(32)
            return torch.as_tensor(batch.obs), torch.as_tensor(batch.next_obs)

        return sample

    systems = {"SB3 ReplayBuffer (uncompressed)": lambda: sb3.sample(32)}
    for name, buffer in made.items():
        systems[name] = ours(buffer) if isinstance(buffer, FrameReplay) else (lambda buffer=buffer: buffer.sample(32))
    times = cpu_times(systems, rounds, batches)
    sb3_time = statistics.median(times["SB3 ReplayBuffer (uncompressed)"])
    print(
        f"\nsample(32) as torch tensors, {transitions:,} transitions; CPU µs, median of {rounds} rounds of {batches}:"
    )
    for name, values in sorted(times.items(), key=lambda item: statistics.median(item[1])):
        median = statistics.median(values)
        print(f"  {name:52s} {median:9,.0f} µs   {median / sb3_time:6.2f}x SB3's")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--games",
        nargs="+",
        choices=list(PLAYS),
        default=list(PLAYS),
        help="the recordings; the first also feeds the speed test (default: all)",
    )
    parser.add_argument("--envs", type=count, default=8, help="envs of the recordings (default: %(default)s)")
    parser.add_argument(
        "--record-steps", type=count, default=12_500, help="pool steps of each recording (default: %(default)s)"
    )
    parser.add_argument(
        "--checkpoint",
        default="runs/Breakout-1/checkpoint.pt",
        help="the checkpoint whose agent plays Breakout-trained (default: %(default)s)",
    )
    parser.add_argument("--recordings", default="", help="where replay_memory.py keeps them (default: none)")
    parser.add_argument(
        "--transitions", type=count, default=10_000, help="transitions every buffer holds (default: %(default)s)"
    )
    parser.add_argument("--rounds", type=count, default=5, help="alternating rounds (default: %(default)s)")
    parser.add_argument("--batches", type=count, default=20, help="sample(32) calls per round (default: %(default)s)")
    parser.add_argument("--no-speed", action="store_true", help="only the bytes table (default: off: both tables)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    torch.set_num_threads(1)
    methods = their_methods()
    print(f"sb3-extra-buffers' compression methods: {', '.join(methods)}")
    table: dict[str, dict[str, float]] = {}
    first = None
    for name in args.games:
        play = record(name, args.envs, args.record_steps, args.checkpoint, args.recordings)
        transitions = min(args.transitions, play.steps * play.envs)
        made = buffers(play, transitions, methods)
        for system, buffer in made.items():
            table.setdefault(system, {})[name] = nbytes(buffer)
        if first is None:
            first = made, play
        print(f"{name}: {transitions:,} transitions", flush=True)
    print("\nBytes per transition held, (4, 84, 84) uint8, 8 envs:")
    print(f"  {'':52s}" + "".join(f"{name:>17s}" for name in args.games))
    for system, sizes in sorted(table.items(), key=lambda item: max(item[1].values())):
        print(f"  {system:52s}" + "".join(f"{sizes[name]:17,.0f}" for name in args.games))
    if not args.no_speed and first is not None:
        speed(*first, args.rounds, args.batches)


if __name__ == "__main__":
    main()
