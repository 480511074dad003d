"""The DQN trainer's agent steps/s with its replay memory's frames compressed (zstd) and stored as they are.

    python benchmarks/replay_dqn_speed.py --steps 16000 --learning-starts 4000 --rounds 3

Both variants run CleanRL's defaults on Breakout (8 envs) but for the run's length, the replay size and when
learning starts, one after the other (alternating which goes first), for `--rounds` rounds, as
``dqn_speed.py`` runs ours: each reports its end-to-end agent steps/s and its rate from learning starts on, from its
progress.csv, its peak resident memory, and the seconds it spent storing transitions and learning (sampling
the memory and the gradient steps). The ratio is zstd's rate over the uncompressed one's, per round.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from dqn_speed import dqn_options, ours

from atari_game.cli import count, integer

VARIANTS = ("none", "zstd")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=integer, default=16_000, help="transitions per run (default: %(default)s)")
    parser.add_argument(
        "--learning-starts", type=integer, default=4_000, help="transitions before learning (default: %(default)s)"
    )
    parser.add_argument(
        "--buffer-size", type=integer, default=100_000, help="the replay memory's size (default: %(default)s)"
    )
    parser.add_argument("--rounds", type=count, default=3, help="runs of each variant (default: %(default)s)")
    return parser


def main() -> None:
    args = build_parser().parse_args()
    options = dqn_options(args.steps, args.learning_starts, args.buffer_size, 0.1, seed=1)
    ratios, learning_ratios = [], []
    with tempfile.TemporaryDirectory() as directory:
        for round_ in range(args.rounds):
            runs = {}
            for variant in VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]:
                run_dir = Path(directory) / f"{variant}-{round_}"
                extra = [
                    "--compression",
                    variant,
                    "--no-video",
                    "--no-save-memory",
                    "--log-every",
                    str(args.steps // 2),
                ]
                runs[variant] = ours(options, run_dir, extra)
                run = runs[variant]
                print(
                    f"round {round_} {variant:4s}: {run.steps_per_s:6.1f} agent steps/s end to end, "
                    f"{run.learning_steps_per_s:6.1f} from learning starts on; peak RSS {run.peak_rss_mb:,.0f} MB; "
                    f"seconds storing {run.seconds['store']:.1f}, sampling and learning {run.seconds['learn']:.1f}",
                    flush=True,
                )
            ratios.append(runs["zstd"].steps_per_s / runs["none"].steps_per_s)
            learning_ratios.append(runs["zstd"].learning_steps_per_s / runs["none"].learning_steps_per_s)
    print(
        f"zstd / none, agent steps/s: end to end median {statistics.median(ratios):.3f} "
        f"({', '.join(f'{r:.3f}' for r in ratios)}); from learning starts on median "
        f"{statistics.median(learning_ratios):.3f} ({', '.join(f'{r:.3f}' for r in learning_ratios)})"
    )


if __name__ == "__main__":
    main()
