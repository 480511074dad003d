"""Dopamine's published Atari-5 learning curves as scores for ``atari-game report``.

``python benchmarks/dopamine_scores.py DOPAMINE_DIR --frames 2000000 --csv docs/results/dopamine-2m.csv`` writes, for
each of the agents the Results page compares against and each game of the Atari-5, one ``algorithm,game,run_seed,score``
row per seed: the seed's mean training return in the million frames that end at --frames. It prints each agent's Atari-5
estimate from its mean over the seeds, and writes those figures as common.py says.

DOPAMINE_DIR is a checkout of github.com/google/dopamine; its ``baselines/atari/data/GAME.json`` (and
``GAME_Impala.json`` for the agents on the IMPALA CNN) hold, for each agent, 5 seeds and each iteration of 1M frames
(250,000 agent steps), the mean return of the games the agent trained on in that iteration, under sticky actions: our
`machado` protocol, scored as Dopamine reports its agents. The rows keep the file's order of the 5 values of an agent
and iteration as run seeds 0-4.
"""

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path

import common
import numpy as np

from atari_game.score_files import CSV_COLUMNS
from atari_game.scores import ATARI_5, atari5_median, human_normalized

#: Each agent's label stem in the CSV (``dopamine-STEM-2m``) -> its file's suffix and Dopamine's name for it.
AGENTS = {
    "dqn": ("", "DQN"),
    "rainbow": ("", "Rainbow"),
    "iqn": ("", "IQN"),
    "rainbow-impala": ("_Impala", "Rainbow"),
    "iqn-impala": ("_Impala", "IQN"),
}
SEEDS = 5
FRAMES_PER_ITERATION = 1_000_000


def scores(dopamine_dir: Path, frames: int) -> list[tuple[str, str, int, float]]:
    """The ``(algorithm, game, run_seed, score)`` rows for the iteration that ends at `frames`, agents and games in the
    order of `AGENTS` and `ATARI_5`."""
    iteration, label = frames // FRAMES_PER_ITERATION - 1, f"{frames // FRAMES_PER_ITERATION}m"
    rows = []
    for stem, (suffix, name) in AGENTS.items():
        for game in ATARI_5:
            path = dopamine_dir / "baselines" / "atari" / "data" / f"{game.replace('_', '')}{suffix}.json"
            values: dict[tuple[str, int], list[float]] = defaultdict(list)
            for entry in json.loads(path.read_text()):
                values[entry["Agent"], entry["Iteration"]].append(float(entry["Value"]))
            found = values.get((name, iteration), [])
            if len(found) != SEEDS:
                raise ValueError(f"{path}: {len(found)} values of {name!r} at iteration {iteration}, not {SEEDS}")
            rows += [(f"dopamine-{stem}-{label}", game, seed, value) for seed, value in enumerate(found)]
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    parser.add_argument("dopamine_dir", type=Path, help="a checkout of github.com/google/dopamine")
    parser.add_argument(
        "--frames", type=int, default=10_000_000, help="the budget, a multiple of 1,000,000 (default: %(default)s)"
    )
    parser.add_argument("--csv", type=Path, required=True, help="the CSV to write, for `atari-game report` (required)")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.frames < FRAMES_PER_ITERATION or args.frames % FRAMES_PER_ITERATION:
        parser.error(f"--frames {args.frames}: Dopamine records each 1M frames; give a multiple of 1,000,000")
    if not (args.dopamine_dir / "baselines" / "atari" / "data").is_dir():
        parser.error(f"{args.dopamine_dir} has no baselines/atari/data: give a checkout of github.com/google/dopamine")
    try:
        rows = scores(args.dopamine_dir, args.frames)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    with args.csv.open("w", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        writer.writerows((algorithm, game, seed, f"{score:.4f}") for algorithm, game, seed, score in rows)
    print(f"{args.csv}: {len(rows)} rows, {len(AGENTS)} agents at {args.frames:,} frames")
    # Each agent's mean over its seeds per game, and the Atari-5 estimate of those means (as `atari-game report`'s).
    figures: dict[str, dict] = {}
    for algorithm in dict.fromkeys(row[0] for row in rows):
        means = {game: float(np.mean([row[3] for row in rows if row[:2] == (algorithm, game)])) for game in ATARI_5}
        estimate = atari5_median({game: human_normalized(game, mean) for game, mean in means.items()})
        figures[algorithm] = {"means": means, "atari5": estimate}
        print(f"{algorithm}: Atari-5 {estimate:.3f}; " + ", ".join(f"{g} {m:,.0f}" for g, m in means.items()))
    common.save(__file__, args, figures, argv)


if __name__ == "__main__":
    main()
