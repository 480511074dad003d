"""The training figures docs/results.md gives for a run, from its progress.csv: ``python benchmarks/run_figures.py
RUN_DIR`` prints the mean return per ``--every`` frames, of the last 100 and 20 games, and its parts, and writes them
as common.py says. With ``--scores FILE --algorithm NAME`` it also puts the run's row into a CSV for ``atari-game
report``: its mean training return over the last ``--every`` frames, the figure Dopamine reports for its agents
(``benchmarks/dopamine_scores.py``), so the two compare like with like.
"""

import argparse
import csv
from pathlib import Path

import common
import numpy as np

from atari_game.arguments import count
from atari_game.checkpoints import load_checkpoint
from atari_game.game import resolve_game
from atari_game.score_files import CSV_COLUMNS


def parts(updates: list[dict[str, float]]) -> list[dict[str, float]]:
    """Each part of the run (a ``--resume`` starts another): the frames it began at (``frames - frames_per_second *
    seconds``, or a checkpoint's row within progress.csv's rounding of that), its last frames, seconds, frames/s."""
    found: list[dict[str, float]] = []
    logged = [0]  # the rows a part can begin at: the run's start, or a checkpoint's row
    begun, begun_error = 0.0, 0.0  # the part's start as its rows estimate it, and how far off that estimate may be
    for row in updates:
        frames, seconds, rate = int(row["frames"]), row["seconds"], row["frames_per_second"]
        # Each row's estimate is off by its seconds' rounding (0.05 s) and by the frames it logs at, a multiple of
        # log_every, where its frames/s counts its pool step's (up to 4 x num_envs frames on: 1,024 at 256 envs).
        start, error = frames - rate * seconds, rate * 0.05 + 1_024
        # Another part: its clock started again, or (one too short for that to show) it began elsewhere.
        if not found or seconds < found[-1]["seconds"] or abs(start - begun) > error + begun_error:
            near = [row for row in logged if abs(row - start) <= error]
            found.append({"from": near[-1] if near else round(start)})
            begun, begun_error = start, error
        found[-1].update({"to": frames, "seconds": seconds, "frames_per_second": rate})
        logged.append(frames)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    parser.add_argument("run_dir", type=Path, help="a run directory, holding progress.csv")
    parser.add_argument("--every", type=count, default=1_000_000, help="frames per mean (default: %(default)s)")
    parser.add_argument(
        "--scores",
        type=Path,
        help="a CSV (algorithm,game,run_seed,score) to put the run's mean return over its last --every frames into, "
        "replacing the row of the same algorithm, game and seed (default: none)",
    )
    parser.add_argument(
        "--algorithm", help="the algorithm the --scores row is under, as `atari-game report` shows it (default: none)"
    )
    return parser


def put_score(path: Path, algorithm: str, game: str, seed: int, score: float) -> None:
    """Write the CSV at `path` with the row (algorithm, game, seed, score), in place of one for the same run."""
    rows = []
    if path.is_file():
        with path.open(newline="") as file:
            rows = [
                row
                for row in csv.DictReader(file)
                if (row["algorithm"], row["game"], row["run_seed"]) != (algorithm, game, str(seed))
            ]
    rows.append({"algorithm": algorithm, "game": game, "run_seed": str(seed), "score": f"{score:.4f}"})
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.run_dir / "progress.csv").is_file():
        parser.error(f"{args.run_dir} holds no progress.csv: name a run directory of atari-game train")
    if (args.scores is None) != (args.algorithm is None):
        parser.error("--scores and --algorithm go together: the CSV to write and the algorithm its row is under")
    if args.scores and not (args.run_dir / "checkpoint.pt").is_file():
        parser.error(f"{args.run_dir} holds no checkpoint.pt, where --scores reads the run's game and seed")
    games, updates = common.read_progress(args.run_dir)
    if not games:
        parser.error(f"{args.run_dir / 'progress.csv'} holds no whole game yet")
    frames = int(max([frames for frames, _ in games] + [row["frames"] for row in updates]))
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
    if args.scores:
        # The games that ended in the last --every frames, as Dopamine's iteration averages its training games.
        last = [r for f, r in games if f > frames - args.every]
        config = load_checkpoint(args.run_dir / "checkpoint.pt")["config"]
        put_score(args.scores, args.algorithm, resolve_game(config["game"]), config["seed"], float(np.mean(last)))
        print(f"{args.scores}: {args.algorithm}, {config['game']}, seed {config['seed']}: {np.mean(last):,.1f}")


if __name__ == "__main__":
    main()
