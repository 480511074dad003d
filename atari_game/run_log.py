"""What a run writes as it trains: progress.csv (and TensorBoard), its progress bar, the whole games and the
learning curve.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm


def progress_bar(total_frames: int, frames: int, shown: bool = True) -> tqdm:
    """The bar a run shows (hidden unless `shown`): emulator frames done of `total_frames`, from `frames` on."""
    return tqdm(
        total=total_frames, initial=frames, unit="frame", unit_scale=True, dynamic_ncols=True, disable=not shown
    )


# --- logging --------------------------------------------------------------------------------------------


class RunLog:
    """progress.csv (and TensorBoard when installed), and the whole games so far. Its columns are `GAME_FIELDS` and
    the trainer's `update_fields`: a game's row fills frames, game_return and game_length, an update's the others."""

    GAME_FIELDS = ("frames", "seconds", "game_return", "game_length")

    def __init__(self, run_dir: Path, update_fields: Sequence[str], resumed_at: int | None = None) -> None:
        """A new progress.csv in `run_dir`; or, for a run resumed from its checkpoint at `resumed_at` frames, the
        existing one without the rows logged after that checkpoint (the resumed run plays those frames again)."""
        self.path = run_dir / "progress.csv"
        self.fields = (*self.GAME_FIELDS, *update_fields)
        rows = []
        if resumed_at is not None and self.path.exists():
            with self.path.open() as file:
                rows = [row for row in csv.DictReader(file) if int(row["frames"]) <= resumed_at]
        # (frames, whole-game return, length in agent steps) of every game logged
        self.games = [
            (int(row["frames"]), float(row["game_return"]), int(row["game_length"]))
            for row in rows
            if row["game_return"]
        ]
        # Written whole and then renamed, as the checkpoints are: a crash here leaves the old log, never half of it.
        with self.path.with_suffix(".tmp").open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=self.fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        self.path.with_suffix(".tmp").replace(self.path)
        self.file = self.path.open("a", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=self.fields)
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard: SummaryWriter | None = SummaryWriter(str(run_dir))
        except ImportError:
            self.tensorboard = None

    def game_ended(self, frames: int, game_return: float, length: int) -> None:
        """Log a whole game that ended at `frames` emulator frames: its return and its `length` in agent steps."""
        self.games.append((frames, game_return, length))
        # One CSV row per whole game, so the curve has every game; the update rows leave these columns empty.
        self.writer.writerow({"frames": frames, "game_return": game_return, "game_length": length})
        if self.tensorboard:
            self.tensorboard.add_scalar("charts/game_return", game_return, frames)

    def record_games(self, games: list[tuple[int, float, int]]) -> None:
        """Log `games`, as `whole_games` lists them."""
        for game in games:
            self.game_ended(*game)

    def update(self, frames: int, seconds: float, stats: dict[str, float | str]) -> None:
        """Log the `stats` of an update (`update_fields`) at `frames` emulator frames, `seconds` into the run."""
        self.writer.writerow({"frames": frames, "seconds": f"{seconds:.1f}", **stats})
        self.file.flush()
        if self.tensorboard:
            for name, value in stats.items():
                if not isinstance(value, str):
                    self.tensorboard.add_scalar(f"losses/{name}", value, frames)

    def recent_return(self, games: int = 20) -> float:
        """The mean return of the last `games` whole games; NaN before the first."""
        return float(np.mean([r for _, r, _ in self.games[-games:]])) if self.games else float("nan")

    def close(self) -> None:
        """Flush and close progress.csv (and TensorBoard's files)."""
        self.file.close()
        if self.tensorboard:
            self.tensorboard.close()


def whole_games(info: dict, frames: int) -> list[tuple[int, float, int]]:
    """(`frames`, return, length in agent steps) of each whole game (unclipped, all lives) a step's `info` ended."""
    if "game" not in info:
        return []
    return [(frames, float(info["game"]["r"][k]), int(info["game"]["l"][k])) for k in np.flatnonzero(info["_game"])]


# --- results: the learning curve and a video of one game ------------------------------------------------


def plot_learning_curve(games: list[tuple[int, float, int]], path: Path, title: str) -> None:
    """Every whole game's return against emulator frames, with a moving mean, saved as a PNG titled `title`."""
    # matplotlib's Figure, not pyplot: no backend chosen, no global state (a notebook's plots stay as they were).
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    figure = Figure(figsize=(8, 4.5))
    axes = figure.subplots()
    if games:
        frames, returns = np.array([g[0] for g in games]), np.array([g[1] for g in games])
        axes.plot(frames, returns, ".", alpha=0.3, label="one game")
        window = max(1, min(20, len(returns) // 5))
        smooth = np.convolve(returns, np.ones(window) / window, mode="valid")
        axes.plot(frames[window - 1 :], smooth, label=f"mean of {window} games")
        axes.legend()
    axes.set(xlabel="emulator frames", ylabel="whole-game return (unclipped)", title=title)
    axes.xaxis.set_major_formatter(EngFormatter(sep=""))  # 2M, not 0.2 under a 1e7
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
