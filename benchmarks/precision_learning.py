"""Whether bf16 learns as fp32 does: atari_game's trainer in both precisions, the same seeds and budget.

    python benchmarks/precision_learning.py --algo ppo --seeds 1 2 3 --frames 1000000 --out runs/precision-ppo
    python benchmarks/precision_learning.py --algo dqn --seeds 1 2 --frames 1000000 --out runs/precision-dqn
    python benchmarks/precision_learning.py --algo dqn --seeds 1 2 --fp32-last-20 16.3 24.5 20.7 23.6 19.0 25.1
    python benchmarks/precision_learning.py --algo dqn --rainbow-lite --seeds 1 2 --fp32-last-20 30.5 31.1

For each seed, runs ``--precision fp32`` and ``--precision bf16`` one after the other, each into
OUT/<precision>-<seed>; a run that finished there before is read, not run again, so an interrupted benchmark goes on
where it stopped. PPO runs its defaults; DQN runs dqn_learning.py's settings (CleanRL's defaults but for a replay
memory of 250,000 transitions, learning from the 20,000th and epsilon falling over the first 40 % of the run), with
CleanRL's algorithm or, with ``--rainbow-lite``, the trainer's default. Prints each run's mean whole-game return
(unclipped, across lives) of the first and last 20 games, per 100k frames, and its agent steps/s; then each
precision's mean over the seeds, and bf16's mean minus fp32's with its standard error. The issue's target: bf16's
mean within one standard error of fp32's. ``--fp32-last-20`` runs bf16 only and compares it with fp32 runs' last-20
returns reported before (the Results page's DQN table, one per seed): fp32 is the trainers' default, so its seeds
may already have been run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from dqn_learning import difference, last_20, summarize
from dqn_speed import run_child
from ppo_learning import report
from ppo_speed import Run, read_run

from atari_game.cli import count, seed

# Our DQN's flags for dqn_learning.py's settings (in transitions, as CleanRL counts).
DQN_SETTINGS = ["--buffer-size", "250000", "--learning-starts", "20000", "--exploration-fraction", "0.4"]


def trained(
    algo: str, frames: int, seed_: int, precision: str, run_dir: Path, threads: int = 0, rainbow_lite: bool = False
) -> Run:
    """The run of `algo` with this seed and precision in `run_dir`: made now, unless it finished there before. DQN
    runs CleanRL's algorithm, or with `rainbow_lite` the trainer's default Rainbow-lite switches."""
    output = run_dir / "out.txt"
    if not (output.exists() and "done:" in output.read_text()):
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("checkpoint.pt", "progress.csv"):  # an unfinished run starts again
            (run_dir / stale).unlink(missing_ok=True)
        command = [sys.executable, "-m", "atari_game", "train", "--algo", algo, "--total-frames", str(frames)]
        command += ["--seed", str(seed_), "--precision", precision, "--run-dir", str(run_dir), "--no-video"]
        if algo == "dqn":  # (PPO's trainer takes no --torch-threads: it sets its own per phase)
            algorithm = [] if rainbow_lite else ["--cleanrl"]  # (Rainbow-lite: the trainer's default)
            command += ["--torch-threads", str(threads), *DQN_SETTINGS, *algorithm]
        run_child(command, output)
    return read_run(run_dir)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=("ppo", "dqn"), default="ppo", help="the trainer (default: %(default)s)")
    parser.add_argument("--seeds", type=seed, nargs="+", default=[1, 2, 3], help="the seeds (default: 1 2 3)")
    parser.add_argument(
        "--frames", type=count, default=1_000_000, help="emulator frames per run (default: %(default)s)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("runs/precision-learning"), help="the runs' directory (default: %(default)s)"
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=0,
        help="each DQN run's --torch-threads (PPO's trainer picks its own); 0: one per core (default: 0)",
    )
    parser.add_argument(
        "--rainbow-lite",
        action="store_true",
        help="DQN: the trainer's default algorithm, its Rainbow-lite switches on, with dqn_learning.py's settings "
        "(default: off: CleanRL's algorithm)",
    )
    parser.add_argument(
        "--fp32-last-20",
        type=float,
        nargs="+",
        help="fp32 runs' last-20 returns reported before, one per seed: run bf16 only and compare with them "
        "(default: none: run both)",
    )
    return parser


def main() -> None:
    args = build_parser().parse_args()
    print(f"Breakout {args.algo.upper()}, {args.frames:,} frames per run, seeds {args.seeds}", flush=True)
    runs: dict[str, list[Run]] = {"bf16": []} if args.fp32_last_20 else {"fp32": [], "bf16": []}
    for seed_ in args.seeds:
        for precision, done in runs.items():
            done.append(
                trained(
                    args.algo,
                    args.frames,
                    seed_,
                    precision,
                    args.out / f"{precision}-{seed_}",
                    args.torch_threads,
                    args.rainbow_lite,
                )
            )
            report(f"{precision}, seed {seed_}", done[-1], args.frames)
    for precision, done in runs.items():
        summarize(precision, done, args.frames)
        print(f"{precision}: {np.mean([run.steps_per_s for run in done]):.0f} agent steps/s, mean of the runs")
    bf16 = [last_20(run) for run in runs["bf16"]]
    fp32 = args.fp32_last_20 or [last_20(run) for run in runs["fp32"]]
    if len(bf16) > 1 and len(fp32) > 1:
        given = " (fp32's as given)" if args.fp32_last_20 else ""
        print(f"last 20, {difference(bf16, fp32, names=('bf16', 'fp32'))}{given}")


if __name__ == "__main__":
    main()
