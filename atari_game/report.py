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

import csv
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from atari_game.evaluation import FORMAT, VERSION
from atari_game.extras import install_command
from atari_game.game import display_name, resolve_game
from atari_game.scores import ATARI5_STATED_ERROR, ATARI_5, ATARI_57, atari5_median, human_normalized

#: The columns a CSV input must have (in any order; others are ignored).
CSV_COLUMNS = ("algorithm", "game", "seed", "score")
#: What the report says for an algorithm with a single run in some game.
NO_INTERVAL = "one run per game: no interval (needs two or more seeds a game)"
#: The coverage of the intervals.
CONFIDENCE = 0.95


class Score(NamedTuple):
    """One run (one training seed) of one algorithm on one game: `score` is the mean return of its evaluation
    episodes; `game` is the ale-py ROM id; `source` is the file (and for a CSV, the line) it was read from; `frames`
    the emulator frames the agent trained for, where its evaluation says (a CSV row's: unknown, None)."""

    algorithm: str
    game: str
    seed: int
    score: float
    source: str
    frames: int | None = None


# --- statistics ------------------------------------------------------------------------------------------------------


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


def _estimate(
    statistic: Callable[[Sequence[np.ndarray]], np.ndarray], runs: list[np.ndarray], resampled: list[np.ndarray] | None
) -> dict[str, Any]:
    """`statistic`'s point estimate, and its percentile interval over `resampled` (None: no interval)."""
    interval = None
    if resampled is not None:
        low, high = np.percentile(statistic(resampled), [50 * (1 - CONFIDENCE), 50 * (1 + CONFIDENCE)], axis=0)
        interval = [low.tolist(), high.tolist()]
    return {"point": statistic(runs).tolist(), "interval": interval}


#: The aggregates of each algorithm, by their name in ``report.json``, and their columns' titles in ``report.md``.
AGGREGATES = {"mean": mean_hns, "median": median_hns, "iqm": interquartile_mean, "optimality_gap": optimality_gap}
LABELS = {"mean": "Mean", "median": "Median", "iqm": "IQM", "optimality_gap": "Optimality gap"}

# --- inputs ----------------------------------------------------------------------------------------------------------


def _row_score(row: Mapping[str, str | None], source: str) -> Score:
    """The `Score` of one CSV row; `ValueError` saying what is wrong with it."""
    algorithm, game, seed, score = (row[column] for column in CSV_COLUMNS)
    if algorithm is None or game is None or seed is None or score is None:
        raise ValueError("fewer values than the header has columns")
    if not algorithm.strip():
        raise ValueError("no algorithm")
    if not seed.strip().isdigit():
        raise ValueError(f"seed {seed!r} is not a non-negative integer")
    try:
        value = float(score)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"score {score!r} is not a finite number")
    return Score(algorithm.strip(), resolve_game(game), int(seed), value, source)


def _read_csv(path: Path) -> list[Score]:
    """The rows of a CSV of published or collected scores."""
    with path.open(newline="") as file:
        reader = csv.DictReader(file)
        missing = [column for column in CSV_COLUMNS if column not in (reader.fieldnames or ())]
        if missing:
            # The per-game CSV beside an evaluation's JSON has episodes, not runs: the JSON is what reports read.
            hint = ""
            if "episode" in (reader.fieldnames or ()):
                beside = path.with_suffix(".json")
                hint = f"; give {beside}, the evaluation" if beside.is_file() else "; give the evaluation's .json"
            raise ValueError(
                f"{path}, line 1: the header must contain {','.join(CSV_COLUMNS)} (missing {', '.join(missing)}){hint}"
            )
        scores = []
        for row in reader:
            source = f"{path}, line {reader.line_num}"
            try:
                scores.append(_row_score(row, source))
            except ValueError as error:
                raise ValueError(f"{source}: {error}") from None
    return scores


def _read_evaluation(path: Path) -> tuple[Score, str, str]:
    """The score of an evaluation JSON written by ``atari-game evaluate``, its protocol, and the checkpoint it scored
    if that was saved after the evaluation (a run resumed since: the score is of an older agent), else ""."""
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        raise ValueError(f"{path}: not a JSON file ({error})") from None
    got = (data.get("format"), data.get("version")) if isinstance(data, dict) else (None, None)
    if got != (FORMAT, VERSION):
        raise ValueError(
            f"{path}: expected an evaluation written by `atari-game evaluate` (format {FORMAT!r}, version {VERSION}), "
            f"got format {got[0]!r}, version {got[1]!r}"
        )
    try:
        frames = None if data.get("frames_trained") is None else int(data["frames_trained"])
        game, mean = resolve_game(data["game"]), float(data["mean"])
        score = Score(str(data["algorithm"]), game, int(data["seed"]), mean, str(path), frames)
        checkpoint = Path(str(data.get("checkpoint") or ""))
        newer = checkpoint.is_file() and checkpoint.stat().st_mtime > path.stat().st_mtime
        return score, str(data["protocol"]) or "no protocol", str(checkpoint) if newer else ""
    except KeyError as error:
        raise ValueError(f"{path}: the evaluation has no {error} field") from None
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from None


def _read_inputs(paths: Sequence[str | Path]) -> tuple[list[Score], dict[str, list[str]], dict[str, str]]:
    """The scores of all inputs, checked for duplicate runs, each algorithm's protocols, and the evaluations whose
    checkpoint was saved after them (evaluation file: checkpoint)."""
    scores: list[Score] = []
    evaluated: dict[str, dict[str, str]] = {}  # algorithm -> protocol -> first file
    published: set[str] = set()  # algorithms with CSV rows
    read: set[Path] = set()  # the files read so far: one given more than once (by name, in its folder) counts once
    by_name: set[Path] = set()  # the files given by name (whether or not a folder given holds them too)
    protocol_of: dict[str, str] = {}  # each evaluation file's protocol
    outdated: dict[str, str] = {}  # evaluation file -> its checkpoint, saved after it
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or run directory")
        # A run directory stands for its evaluations, a directory of runs (runs/) for theirs, and so does the folder
        # of `atari-game evaluate --out DIR` (its files named RUN-evaluation-PROTOCOL.json).
        files = [path]
        if path.is_dir():
            files = sorted(path.glob("*evaluation*.json")) or sorted(path.glob("*/*evaluation*.json"))
        if not files and (path / "checkpoint.pt").is_file():  # a run not evaluated yet: the command that does it
            raise ValueError(
                f"{path} holds a run but no evaluation: run `atari-game evaluate {path / 'checkpoint.pt'}` first "
                "(it writes evaluation-PROTOCOL.json there)"
            )
        if not files:
            raise ValueError(
                f"{path} has no *evaluation*.json, nor do its run directories: run `atari-game evaluate "
                f"RUN/checkpoint.pt` first (it writes RUN/evaluation-PROTOCOL.json; with --out {path}, "
                f"{path}/RUN-evaluation-PROTOCOL.json), or give the files `Evaluation.save` wrote by name"
            )
        for file in files:
            resolved = file.resolve()
            if file == path:
                by_name.add(resolved)
            if resolved in read:
                continue
            read.add(resolved)
            if file.suffix == ".csv":
                rows = _read_csv(file)
                scores += rows
                published.update(score.algorithm for score in rows)
            elif file.suffix == ".json":
                score, protocol, newer = _read_evaluation(file)
                scores.append(score)
                if newer:
                    outdated[score.source] = newer
                protocol_of[score.source] = protocol
                evaluated.setdefault(score.algorithm, {}).setdefault(protocol, score.source)
            else:
                raise ValueError(f"{file}: expected a .csv of scores, an evaluation .json or a run directory")
    # One run is one score: the same one twice would count twice.
    seen: dict[tuple[str, str, int], str] = {}
    for score in scores:
        key = score[:3]
        if key in seen:
            # Two evaluation files in one folder given, which stands for all of them (a second protocol, checkpoint):
            # name the one to report. Two given by name: one run under two protocols, or two agents under one name.
            both_json = Path(seen[key]).suffix == Path(score.source).suffix == ".json"
            one_run = both_json and Path(seen[key]).parent == Path(score.source).parent
            hint = ""
            if one_run and not {Path(seen[key]).resolve(), Path(score.source).resolve()} <= by_name:
                hint = "; give the evaluation to report by its file name"
            elif both_json and protocol_of[seen[key]] != protocol_of[score.source]:
                hint = (
                    f"; one run evaluated under {protocol_of[seen[key]]} and {protocol_of[score.source]}? give the one "
                    "to report"
                )
            elif both_json:
                hint = (
                    "; two agents? name them apart: atari-game evaluate --algorithm NAME (from Python, "
                    "atari_game.evaluate(..., algorithm=NAME))"
                )
            raise ValueError(
                f"algorithm {score.algorithm!r}, game {score.game!r}, seed {score.seed} appears twice: in "
                f"{seen[key]} and in {score.source}{hint}"
            )
        seen[key] = score.source
    # Scores played under different settings measure different things.
    for algorithm, protocols in evaluated.items():
        if len(protocols) > 1:
            named = ", ".join(f"{name} ({source})" for name, source in sorted(protocols.items()))
            raise ValueError(
                f"algorithm {algorithm!r} was evaluated under different protocols: {named}; scores under different "
                "protocols are not comparable"
            )
    protocols_of = {
        algorithm: sorted(evaluated.get(algorithm, {})) + (["as published"] if algorithm in published else [])
        for algorithm in sorted({score.algorithm for score in scores})
    }
    return scores, protocols_of, outdated


def load_scores(paths: Sequence[str | Path]) -> list[Score]:
    """All scores of `paths`, in input order. A path is a CSV with the columns `CSV_COLUMNS` (published tables:
    seed 0), an evaluation JSON of ``atari-game evaluate``, or a run directory (its ``evaluation*.json``); a file
    given more than once (by name, in its folder) counts once. Raises `ValueError` naming the file (and line) of a
    bad input, two scores of one algorithm, game and seed, or an algorithm evaluated under different protocols, and
    `FileNotFoundError` for a path that does not exist."""
    return _read_inputs(paths)[0]


# --- the report ------------------------------------------------------------------------------------------------------


def _atari5(runs: Sequence[np.ndarray]) -> np.ndarray:
    """`atari5_median` of the per-game mean HNS of `runs`, the games of `ATARI_5` in order."""
    estimate = lambda means: atari5_median(dict(zip(ATARI_5, means, strict=True)))  # noqa: E731
    return np.apply_along_axis(estimate, -1, game_means(runs))


def _algorithm(
    raw: Mapping[str, np.ndarray],
    hns: Mapping[str, np.ndarray],
    protocols: list[str],
    frames: list[int | None],
    taus: np.ndarray,
    resamples: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """One algorithm's aggregates, profile and Atari-5 estimate, from its raw and (in the 57) HNS scores per game and
    the training budgets of its runs in the 57 (`frames`, None where an evaluation does not say)."""
    runs = list(hns.values())
    # An interval from one run a game would resample nothing in that game: report none rather than a false one.
    intervals = bool(runs) and min(map(len, runs)) >= 2
    resampled = stratified_resample(runs, resamples, rng) if intervals else None
    entry: dict[str, Any] = {
        "protocols": protocols,
        "frames_trained": sorted({n for n in frames if n is not None}),
        "frames_unknown": frames.count(None),
        "games": len(runs),
        "runs": sum(map(len, runs)),
        "games_without_hns": sorted(set(raw) - set(hns)),
        "no_interval": NO_INTERVAL if runs and not intervals else None,
    }
    if runs:
        entry.update({name: _estimate(statistic, runs, resampled) for name, statistic in AGGREGATES.items()})
        entry["profile"] = _estimate(lambda r: score_profile(r, taus), runs, resampled)
    # Aitchison et al.'s estimate needs all five games; its interval, two or more runs in each of them.
    missing = [game for game in ATARI_5 if game not in hns]
    entry["atari5"] = {"missing": [display_name(game) for game in missing], "stated_error": ATARI5_STATED_ERROR}
    if not missing:
        five = [hns[game] for game in ATARI_5]
        five_resampled = stratified_resample(five, resamples, rng) if min(map(len, five)) >= 2 else None
        entry["atari5"]["estimate"] = _estimate(_atari5, five, five_resampled)
    return entry


def _improvement(
    x: str, y: str, hns: Mapping[str, Mapping[str, np.ndarray]], resamples: int, rng: np.random.Generator
) -> dict[str, Any] | None:
    """P(x > y) on the games of the 57 both have (None if there is none), both algorithms resampled independently."""
    games = sorted(set(hns[x]) & set(hns[y]), key=display_name)
    if not games:
        return None
    runs = [hns[x][game] for game in games] + [hns[y][game] for game in games]
    resampled = stratified_resample(runs, resamples, rng) if min(map(len, runs)) >= 2 else None
    n = len(games)
    return {"x": x, "y": y, "games": n} | _estimate(lambda r: probability_of_improvement(r[:n], r[n:]), runs, resampled)


def write_report(inputs: Sequence[str | Path], out: str | Path, *, resamples: int = 10_000, seed: int = 0) -> dict:
    """Write ``report.md``, ``report.json`` and ``performance_profiles.png`` into `out` (created) for the scores of
    `inputs` (see `load_scores`), and return what ``report.json`` holds.

    Aggregates are over each algorithm's games of `ATARI_57` (games outside it have no human-normalized score: they
    appear in the per-game table only); intervals come from `resamples` stratified bootstrap resamples drawn from
    ``numpy.random.default_rng(seed)``, so a report is the same for the same inputs and seed. Each statistic is a
    ``{"point": value, "interval": [low, high] or None}``.

    Raises `FileNotFoundError` for an input that does not exist, `ValueError` for a bad input (see `load_scores`),
    no scores, `out` a file or `resamples` below 1, and `ImportError` without matplotlib (the ``report`` extra), all
    before anything is written.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be an integer >= 1, got {resamples}")
    if Path(out).exists() and not Path(out).is_dir():  # before the work, not after it
        raise ValueError(f"{out} is a file: the report needs a folder to write report.md, report.json and the PNG in")
    scores, protocols, outdated = _read_inputs(inputs)
    if not scores:
        raise ValueError(f"no scores in {', '.join(map(str, inputs)) or 'no inputs'}")
    try:  # matplotlib's Figure (no pyplot: no backend or global state), before the work that needs it
        from matplotlib.figure import Figure
    except ImportError as error:
        needs = f"atari-game report's performance profiles need matplotlib: {install_command('report')}"
        raise ImportError(needs, name="matplotlib") from error
    # Each algorithm's raw scores per game, runs in seed order.
    lists: dict[str, dict[str, list[float]]] = {}
    for score in sorted(scores, key=lambda s: (s.algorithm, display_name(s.game), s.seed)):
        lists.setdefault(score.algorithm, {}).setdefault(score.game, []).append(score.score)
    raw = {algorithm: {game: np.array(x) for game, x in games.items()} for algorithm, games in lists.items()}
    # The frames each algorithm's aggregated runs trained for (None: unknown), as their evaluations say: a report
    # should not mix budgets.
    frames = {a: [s.frames for s in scores if s.algorithm == a and s.game in ATARI_57] for a in raw}
    hns = {
        a: {game: human_normalized(game, x) for game, x in games.items() if game in ATARI_57}
        for a, games in raw.items()
    }
    # Profiles up to 8 (rliable's Atari figures), or the best score where all are lower.
    best = max((x.max() for games in hns.values() for x in games.values()), default=0.0)
    taus = np.linspace(0.0, min(8.0, best) if best > 0 else 1.0, 81)
    rng = np.random.default_rng(seed)
    report: dict[str, Any] = {
        "format": "atari_game.report",
        "version": 1,
        "inputs": [str(path) for path in inputs],
        "resamples": resamples,
        "seed": seed,
        "confidence": CONFIDENCE,
        "taus": taus.tolist(),
        "outdated_evaluations": outdated,
        "algorithms": {a: _algorithm(raw[a], hns[a], protocols[a], frames[a], taus, resamples, rng) for a in raw},
        "probability_of_improvement": [
            pair for x in raw for y in raw if x != y and (pair := _improvement(x, y, hns, resamples, rng))
        ],
        "games": [
            {
                "game": game,
                "algorithm": algorithm,
                "runs": len(x),
                "mean_score": float(x.mean()),
                "sem": float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else None,
                "hns": float(human_normalized(game, x.mean())) if game in ATARI_57 else None,
            }
            for game in sorted({game for games in raw.values() for game in games}, key=display_name)
            for algorithm, games in raw.items()
            if (x := games.get(game)) is not None
        ],
    }
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    _plot_profiles(report, path / "performance_profiles.png", Figure)
    (path / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (path / "report.md").write_text(_markdown(report))
    return report


def _plot_profiles(report: Mapping[str, Any], path: Path, figure_class: Any) -> None:
    """Each algorithm's performance profile, with its interval as a band where it has one."""
    figure = figure_class(figsize=(6, 4), layout="constrained")
    axes = figure.subplots()
    for algorithm, entry in report["algorithms"].items():
        if "profile" in entry:
            profile = entry["profile"]
            line = axes.plot(report["taus"], profile["point"], label=algorithm)[0]
            if profile["interval"] is not None:
                axes.fill_between(report["taus"], *profile["interval"], color=line.get_color(), alpha=0.2)
    axes.set(xlabel="human-normalized score τ", ylabel="fraction of runs with score > τ", ylim=(0, 1))
    if axes.lines:
        axes.legend()
    figure.savefig(path, dpi=120)


def _cell(estimate: Mapping[str, Any] | None) -> str:
    """``point [low, high]``, or the point alone without an interval, or a dash without an estimate."""
    if estimate is None:
        return "—"
    text = f"{estimate['point']:.3f}"
    if estimate["interval"] is not None:
        text += " [{:.3f}, {:.3f}]".format(*estimate["interval"])
    return text


def _atari5_cell(atari5: Mapping[str, Any]) -> str:
    """The Atari-5 estimate with the authors' stated (relative) error, or the games it lacks."""
    if atari5["missing"]:
        return f"missing {', '.join(atari5['missing'])}"
    error = atari5["stated_error"]
    return f"{_cell(atari5['estimate'])} (stated error ±{error:.1%}: ±{error * atari5['estimate']['point']:.3f})"


def _markdown(report: Mapping[str, Any]) -> str:
    """``report.md``: the report's numbers as Markdown tables, with what they mean."""
    algorithms = report["algorithms"]
    lines = [
        "# Atari evaluation report",
        "",
        f"Inputs: {', '.join(f'`{path}`' for path in report['inputs'])}.",
        "",
        "Protocols: " + "; ".join(f"{a}: {', '.join(e['protocols'])}" for a, e in algorithms.items()) + ".",
        "",
        "Human-normalized scores (HNS: 0 is random play, 1 human) aggregated as Agarwal et al. 2021 (rliable): mean "
        "and median over games of each game's mean HNS over runs; IQM, the mean of the middle half of all run x game "
        "HNS; optimality gap, the mean over games of max(0, 1 - HNS) (lower is better). "
        f"{report['confidence']:.0%} intervals: percentiles over {report['resamples']} stratified bootstrap "
        f"resamples of the runs within each game (seed {report['seed']}).",
        "",
        "## Aggregates",
        "",
        "| Algorithm | Frames trained | Games | Runs | " + " | ".join(LABELS.values()) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(LABELS),
    ]
    lines += [
        f"| {a} | {_frames_cell(e['frames_trained']) or '—'} | {e['games']} | {e['runs']} | "
        + " | ".join(_cell(e.get(name)) for name in LABELS)
        + " |"
        for a, e in algorithms.items()
    ]
    lines.append("")
    for algorithm, entry in algorithms.items():
        lines += [f"- {algorithm}: {note}." for note in _notes(entry)]
    lines += [
        f"- `{evaluation}` scores an older agent: `{checkpoint}` was saved after it."
        for evaluation, checkpoint in report["outdated_evaluations"].items()
    ]
    lines += [
        "",
        "## Atari-5",
        "",
        f"Aitchison et al. 2023's regression estimate of the median HNS over the 57 games from the five games "
        f"{', '.join(map(display_name, ATARI_5))}, with the authors' stated error.",
        "",
        "| Algorithm | Estimated median HNS |",
        "|---|---|",
        *(f"| {a} | {_atari5_cell(e['atari5'])} |" for a, e in algorithms.items()),
        "",
        "## Probability of improvement",
        "",
        "P(X > Y): per game, the probability that a run of X scores higher than a run of Y (ties count half), "
        "averaged over the games both have.",
        "",
    ]
    pairs = report["probability_of_improvement"]
    alone = "One algorithm: nothing to compare." if len(algorithms) < 2 else "No two algorithms share a game."
    lines += ["| X | Y | Games | P(X > Y) |", "|---|---|---:|---:|"] if pairs else [alone]
    lines += [f"| {p['x']} | {p['y']} | {p['games']} | {_cell(p)} |" for p in pairs]
    lines += [
        "",
        "## Performance profiles",
        "",
        "![The fraction of runs above each human-normalized score](performance_profiles.png)",
        "",
        "## Per game",
        "",
        "Score: the mean over runs ± its standard error (two or more runs).",
        "",
        "| Game | Algorithm | Runs | Score | HNS |",
        "|---|---|---:|---:|---:|",
    ]
    for row in report["games"]:
        score = f"{row['mean_score']:.1f}" + (f" ± {row['sem']:.1f}" if row["sem"] is not None else "")
        hns = "—" if row["hns"] is None else f"{row['hns']:.3f}"
        lines.append(f"| {display_name(row['game'])} | {row['algorithm']} | {row['runs']} | {score} | {hns} |")
    return "\n".join(lines) + "\n"


def format_summary(report: Mapping[str, Any]) -> str:
    """The few lines ``atari-game report`` prints: each algorithm's aggregates and Atari-5 estimate, and the
    probabilities of improvement."""
    lines = []
    for algorithm, entry in report["algorithms"].items():
        games, runs = _counted(entry["games"], "game"), _counted(entry["runs"], "run")
        trained = f", {_frames_cell(entry['frames_trained'])} frames trained" if entry["frames_trained"] else ""
        lines.append(f"{algorithm} ({', '.join(entry['protocols'])}): {games}, {runs}{trained}")
        if entry["games"]:
            lines.append("  " + ", ".join(f"{label} {_cell(entry[name])}" for name, label in LABELS.items()))
        lines.append(f"  Atari-5 median estimate: {_atari5_cell(entry['atari5'])}")
        lines += [f"  {note}" for note in _notes(entry)]
    lines += [
        f"P({p['x']} > {p['y']}) = {_cell(p)} over {_counted(p['games'], 'game')}"
        for p in report["probability_of_improvement"]
    ]
    lines += [
        f"note: {checkpoint} was saved after {evaluation}, which scores the agent it held before: atari-game "
        f"evaluate {checkpoint} scores it as it is now"
        for evaluation, checkpoint in report["outdated_evaluations"].items()
    ]
    return "\n".join(lines)


def _frames_cell(frames: list[int]) -> str:
    """The training budgets of an algorithm's runs: "10,000,000", "2,000,000-10,000,000", or "" if none is known."""
    if not frames:
        return ""
    return f"{frames[0]:,}" if len(frames) == 1 else f"{frames[0]:,}-{frames[-1]:,}"


def _notes(entry: Mapping[str, Any]) -> list[str]:
    """What to know about an algorithm's aggregates: why they have no interval, runs of different training budgets,
    games left out of them."""
    notes = [entry["no_interval"]] if entry["no_interval"] else []
    budgets = entry["frames_trained"]
    if budgets and budgets[-1] > 1.01 * budgets[0]:  # (whole updates of different sizes differ by less)
        notes.append(
            f"its runs trained for different numbers of frames, {budgets[0]:,} to {budgets[-1]:,}: the aggregates "
            "mix them"
        )
    if budgets and entry["frames_unknown"]:
        notes.append(f"its runs' budgets are not all known: {_counted(entry['frames_unknown'], 'run')} without one")
    if entry["games_without_hns"]:
        left_out = ", ".join(map(display_name, entry["games_without_hns"]))
        notes.append(f"{left_out} left out of the aggregates: no human-normalized score outside the 57 games")
    return notes


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun if count == 1 else noun + 's'}"
