"""How well atari_game's PPO learns Breakout against CleanRL's ppo_atari.py, same frame budget and seed.

    python benchmarks/ppo_learning.py --cleanrl-python ~/cleanrl/venv/bin/python \\
        --cleanrl-script ~/cleanrl/ppo_atari.py --frames 1000000 --seed 1

Runs the two trainers one after the other (about 15 and 25 minutes on a 2-core CPU) with the same
hyperparameters (see ppo_speed.py for CleanRL's venv), then prints, for each, the mean whole-game return
(unclipped, across lives) of the last 20 games, per 100k frames, and the end-to-end agent steps/s. A random
agent scores about 1.7. The issue's target: atari_game's last-20 mean at least CleanRL's.
"""

from __future__ import annotations

import argparse

import numpy as np
from ppo_speed import STEPS_PER_UPDATE, Run, cleanrl, ours, parser_with_cleanrl

from atari_game.cli import count, seed


def per_100k(games: list[tuple[int, float]], frames: int) -> list[float]:
    """The mean return of the games that ended in each 100k frames of the run (NaN where none ended)."""
    bins = [[r for f, r in games if start < f <= start + 100_000] for start in range(0, frames, 100_000)]
    return [float(np.mean(b)) if b else float("nan") for b in bins]


def report(name: str, run: Run, frames: int) -> None:
    returns = [r for _, r in run.games]
    per_bin = ", ".join(f"{m:.1f}" for m in per_100k(run.games, frames))
    print(
        f"{name}: {len(returns)} games; mean of the first 20 {np.mean(returns[:20]):.2f}, of the last 20 "
        f"{np.mean(returns[-20:]):.2f}; per 100k frames: {per_bin}; {run.steps_per_s:.0f} agent steps/s"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = parser_with_cleanrl(__doc__)
    parser.add_argument(
        "--frames",
        type=count,
        default=1_000_000,
        help=f"emulator frames per run, rounded down to whole updates of {4 * STEPS_PER_UPDATE:,} frames "
        "(default: %(default)s)",
    )
    parser.add_argument("--seed", type=seed, default=1, help="both trainers' seed (default: %(default)s)")
    return parser


def main() -> None:
    args = build_parser().parse_args()

    updates = args.frames // (4 * STEPS_PER_UPDATE)
    frames = 4 * STEPS_PER_UPDATE * updates
    print(f"Breakout PPO, seed {args.seed}, {updates} updates = {frames:,} frames each", flush=True)
    report("atari_game", ours(updates, [], seed=args.seed), frames)
    report("CleanRL", cleanrl(args.cleanrl_python, args.cleanrl_script, updates, seed=args.seed), frames)


if __name__ == "__main__":
    main()
