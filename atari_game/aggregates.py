"""Aggregate statistics over runs and games, as the field reports Atari results: offline, with numpy only.

This is the protocol of Agarwal et al. 2021 ("Deep RL at the Edge of the Statistical Precipice", NeurIPS), computed
as their library rliable computes it. Every run's score is human-normalized (HNS, `atari_game.scores`); an
algorithm's runs on a game form one stratum, and a statistic's 95 % interval is the 2.5th and 97.5th percentiles
(numpy's linear interpolation) of the statistic over resamples that draw, within each game independently, as many
runs as the game has, with replacement (the stratified bootstrap). Games may have unequal numbers of runs: each
statistic below takes one array per game, ``runs[g]`` of shape ``(..., runs in game g)`` (leading axes: resamples),
and reduces the last axis.

Where rliable takes a rectangular ``(runs, games)`` matrix, the means here weigh each game equally (the mean over
games of a per-game mean over runs), which is exactly rliable's value when every game has the same number of runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from atari_game.game import display_name
from atari_game.scores import ATARI5_STATED_ERROR, ATARI_5, atari5_median

#: What the report says for an algorithm with a single run in some game.
NO_INTERVAL = "one run per game: no interval (needs two or more seeds a game)"
#: The coverage of the intervals.
CONFIDENCE = 0.95


def game_means(runs: Sequence[np.ndarray]) -> np.ndarray:
    """The mean over runs of each game: shape ``(..., games)``."""
    return np.stack([np.mean(x, -1) for x in runs], -1)


def mean_hns(runs: Sequence[np.ndarray]) -> np.ndarray:
    """The mean over games of the per-game mean HNS (rliable's ``aggregate_mean``)."""
    return game_means(runs).mean(-1)


def median_hns(runs: Sequence[np.ndarray]) -> np.ndarray:
    """The median over games of the per-game mean HNS, the "median human-normalized score" of papers (and of
    rliable's ``aggregate_median``); with an even number of games, the mean of the two middle ones."""
    return np.median(game_means(runs), -1)


def interquartile_mean(runs: Sequence[np.ndarray]) -> np.ndarray:
    """The IQM: the mean of all run x game scores pooled, after dropping ``int(0.25 * n)`` of the ``n`` scores from
    each end of their sorted order, as ``scipy.stats.trim_mean(scores, 0.25, axis=None)`` (rliable's
    ``aggregate_iqm``). The cut is a count of scores, not a weight: scores tied at a cut are kept or dropped by
    position, and when ``n`` is not a multiple of 4 less than a quarter is dropped (``n = 3``: the plain mean).
    Pooled, a game weighs as many runs as it has."""
    pooled = np.sort(np.concatenate(runs, -1), -1)
    n = pooled.shape[-1]
    cut = int(0.25 * n)
    return pooled[..., cut : n - cut].mean(-1)


def optimality_gap(runs: Sequence[np.ndarray]) -> np.ndarray:
    """How far below human level, on average: the mean over games of the per-game mean of ``max(0, 1 - HNS)``
    (rliable's ``aggregate_optimality_gap`` with ``gamma=1``). Lower is better."""
    return mean_hns([np.maximum(1.0 - x, 0.0) for x in runs])


def score_profile(runs: Sequence[np.ndarray], taus: np.ndarray) -> np.ndarray:
    """The performance profile (rliable's score distribution): for each ``tau``, the fraction of runs whose HNS is
    strictly above it, averaged over games. Shape ``(..., len(taus))``."""
    # Summed game by game: a stack of every game's (resamples, taus) would hold them all at once.
    return sum(np.count_nonzero(x[..., None] > taus, -2) / x.shape[-1] for x in runs) / len(runs)


def probability_of_improvement(x_runs: Sequence[np.ndarray], y_runs: Sequence[np.ndarray]) -> np.ndarray:
    """P(X > Y): per game, the Mann-Whitney statistic ``P(x > y) + 0.5 P(x = y)`` over all pairs of a run of X and
    a run of Y, averaged over games (``x_runs[g]`` and ``y_runs[g]`` are the same game's runs)."""
    per_game = [
        np.mean((x[..., :, None] > y[..., None, :]) + 0.5 * (x[..., :, None] == y[..., None, :]), (-2, -1))
        for x, y in zip(x_runs, y_runs, strict=True)
    ]
    return np.mean(per_game, 0)


def stratified_resample(runs: Sequence[np.ndarray], resamples: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Bootstrap resamples of 1-D `runs`: each game's runs drawn with replacement, as many as it has, independently
    of the other games. Shapes ``(resamples, runs in game g)``."""
    return [x[rng.integers(0, len(x), (resamples, len(x)))] for x in runs]


#: The aggregates of each algorithm, by their name in ``report.json``.
AGGREGATES = {"mean": mean_hns, "median": median_hns, "iqm": interquartile_mean, "optimality_gap": optimality_gap}


def estimate(
    statistic: Callable[[Sequence[np.ndarray]], np.ndarray], runs: list[np.ndarray], resampled: list[np.ndarray] | None
) -> dict[str, Any]:
    """`statistic`'s point estimate on `runs`, and its `CONFIDENCE` percentile interval over `resampled` (None: no
    interval), as ``{"point": value, "interval": [low, high] or None}`` (lists for a statistic with an axis)."""
    interval = None
    if resampled is not None:
        low, high = np.percentile(statistic(resampled), [50 * (1 - CONFIDENCE), 50 * (1 + CONFIDENCE)], axis=0)
        interval = [low.tolist(), high.tolist()]
    return {"point": statistic(runs).tolist(), "interval": interval}


def atari5_estimate(runs: Sequence[np.ndarray]) -> np.ndarray:
    """`atari5_median` of the per-game mean HNS of `runs`, the games of `ATARI_5` in order."""
    median = lambda means: atari5_median(dict(zip(ATARI_5, means, strict=True)))  # noqa: E731
    return np.apply_along_axis(median, -1, game_means(runs))


def algorithm_aggregates(
    hns: Mapping[str, np.ndarray], taus: np.ndarray, resamples: int, rng: np.random.Generator
) -> dict[str, Any]:
    """One algorithm's `AGGREGATES`, performance profile at `taus` and Atari-5 estimate, each an `estimate`, from its
    HNS runs per game of the 57 (`hns`, ROM id: 1-D array), with intervals from `resamples` stratified resamples
    drawn from `rng`. ``no_interval`` says why there is none (`NO_INTERVAL`), ``atari5`` which games it lacks."""
    runs = list(hns.values())
    # An interval from one run a game would resample nothing in that game: report none rather than a false one.
    intervals = bool(runs) and min(map(len, runs)) >= 2
    resampled = stratified_resample(runs, resamples, rng) if intervals else None
    entry: dict[str, Any] = {"no_interval": NO_INTERVAL if runs and not intervals else None}
    if runs:
        entry.update({name: estimate(statistic, runs, resampled) for name, statistic in AGGREGATES.items()})
        entry["profile"] = estimate(lambda r: score_profile(r, taus), runs, resampled)
    # Aitchison et al.'s estimate needs all five games; its interval, two or more runs in each of them.
    missing = [game for game in ATARI_5 if game not in hns]
    entry["atari5"] = {"missing": [display_name(game) for game in missing], "stated_error": ATARI5_STATED_ERROR}
    if not missing:
        five = [hns[game] for game in ATARI_5]
        five_resampled = stratified_resample(five, resamples, rng) if min(map(len, five)) >= 2 else None
        entry["atari5"]["estimate"] = estimate(atari5_estimate, five, five_resampled)
    return entry


def improvement(
    x: str, y: str, hns: Mapping[str, Mapping[str, np.ndarray]], resamples: int, rng: np.random.Generator
) -> dict[str, Any] | None:
    """P(x > y) (`probability_of_improvement`) as an `estimate` with ``x``, ``y`` and the number of ``games``: on the
    games of the 57 both algorithms have in `hns` (algorithm: ROM id: HNS runs), both resampled independently; None
    if they share no game."""
    games = sorted(set(hns[x]) & set(hns[y]), key=display_name)
    if not games:
        return None
    runs = [hns[x][game] for game in games] + [hns[y][game] for game in games]
    resampled = stratified_resample(runs, resamples, rng) if min(map(len, runs)) >= 2 else None
    n = len(games)
    return {"x": x, "y": y, "games": n} | estimate(lambda r: probability_of_improvement(r[:n], r[n:]), runs, resampled)
