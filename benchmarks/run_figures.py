"""The training figures the Results page gives for a run, read from its progress.csv: how its games went, and its parts.

    python benchmarks/run_figures.py runs/dqn-Qbert-1

Prints, for the run directory of either trainer (`atari-game train`, the examples), the mean return of its whole games
per ``--every`` frames (0-1M, 1-2M, ...: a game counts where it ended), the mean of its last 100 games and of its last
20, and its parts (a run continued with ``--resume`` is a part per process): each part's frames, wall seconds and
frames per second, time it stood stopped included (progress.csv cannot tell that time from running). Writes them as
common.py says.
"""

import argparse
import csv
from pathlib import Path

import common
import numpy as np

from atari_game.arguments import count


def read_progress(run_dir: Path) -> tuple[list[tuple[int, float]], list[tuple[int, float, float]]]:
    """progress.csv's whole games as (frames at their end, return), and its update rows as (frames, seconds,
    frames_per_second)."""
    games, updates = [], []
    with (run_dir / "progress.csv").open(newline="") as file:
        for row in csv.DictReader(file):
            if row["game_return"]:
                games.append((int(row["frames"]), float(row["game_return"])))
            if row["seconds"]:
                updates.append((int(row["frames"]), float(row["seconds"]), float(row["frames_per_second"])))
    return games, updates


def parts(updates: list[tuple[int, float, float]]) -> list[dict[str, float]]:
    """Each part of the run (one process: a ``--resume`` starts another): the frames it began at, its last row's
    frames and seconds, and its frames/s. A row's frames/s is over its part so far, so the part began at ``frames -
    frames_per_second * seconds``, to within what progress.csv's rounding of seconds (to 0.1 s) leaves: a row that
    close (the checkpoint's, which --resume keeps) is taken as the start. A part resumed from ends at its last row
    before that checkpoint: --resume drops the rows after it, which the next part plays again."""
    found: list[dict[str, float]] = []
    logged = [0]  # the rows a part can begin at: the run's start, or a checkpoint's row
    for frames, seconds, rate in updates:
        start, error = frames - rate * seconds, rate * 0.05 + 1  # (each row's estimate is off by up to `error`)
        if not found or abs(start - found[-1]["from"]) > 2 * error:  # another start than the part's: a new part
            near = [row for row in logged if abs(row - start) <= error]
            found.append({"from": near[-1] if near else round(start)})
        found[-1].update({"to": frames, "seconds": seconds, "frames_per_second": rate})
        logged.append(frames)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    parser.add_argument("run_dir", type=Path, help="a run directory, holding progress.csv")
    parser.add_argument("--every", type=count, default=1_000_000, help="frames per mean (default: %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.run_dir / "progress.csv").is_file():
        parser.error(f"{args.run_dir} holds no progress.csv: name a run directory of atari-game train")
    games, updates = read_progress(args.run_dir)
    if not games:
        parser.error(f"{args.run_dir / 'progress.csv'} holds no whole game yet")
    frames = max(row[0] for row in updates + games)
    means, run_parts = common.mean_returns(games, frames, args.every), parts(updates)
    last_100, last_20 = float(np.mean([r for _, r in games[-100:]])), float(np.mean([r for _, r in games[-20:]]))
    print(f"{args.run_dir}: {len(games):,} whole games in {frames:,} frames")
    print(f"mean return per {args.every / 1e6:g}M frames: " + ", ".join(f"{m:,.1f}" for m in means))
    print(f"last 100 games: {last_100:,.1f} (last 20: {last_20:,.1f})")
    for number, part in enumerate(run_parts, 1):
        print(
            f"part {number}: frames {part['from']:,} to {part['to']:,} in {part['seconds']:,.0f} s, "
            f"{part['frames_per_second']:,.0f} frames/s"
        )
    figures = {"games": len(games), "frames": frames, "means": means, "last_100": last_100, "last_20": last_20}
    common.save(__file__, args, {**figures, "parts": run_parts}, argv)


if __name__ == "__main__":
    main()
