"""``atari-game report``: the aggregates of `atari_game.aggregates` over the scores of `atari_game.score_files`,
written as ``report.json``, ``report.md`` and a plot of the performance profiles, and summed up in a few lines."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from atari_game.aggregates import CONFIDENCE, algorithm_aggregates, improvement
from atari_game.extras import install_command
from atari_game.game import display_name
from atari_game.score_files import read_inputs
from atari_game.scores import ATARI_5, ATARI_57, human_normalized

#: The plot of the performance profiles, beside ``report.md``.
PROFILES = "performance_profiles.png"
#: What a report without matplotlib says instead of its plot.
NO_PLOT = f"the performance-profile plot needs the report extra (matplotlib): {install_command('report')}"
#: The title of each of `atari_game.aggregates.AGGREGATES` in ``report.md`` and the summary.
LABELS = {"mean": "Mean", "median": "Median", "iqm": "IQM", "optimality_gap": "Optimality gap"}
#: What the report says of an evaluation's games that the frame cap cut.
CAPPED = "cut at the frame cap, not ended by the game (their returns are the scores when the cap stopped them)"


def _algorithm(
    raw: Mapping[str, np.ndarray],
    hns: Mapping[str, np.ndarray],
    protocols: list[str],
    frames: list[int | None],
    taus: np.ndarray,
    resamples: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """One algorithm's entry in ``report.json``: what it was scored under and trained for, its counts, and its
    `algorithm_aggregates`, from its raw and (in the 57) HNS scores per game and the training budgets of its runs in
    the 57 (`frames`, None where an evaluation does not say)."""
    runs = list(hns.values())
    entry = {
        "protocols": protocols,
        "frames_trained": sorted({n for n in frames if n is not None}),
        "frames_unknown": frames.count(None),
        "games": len(runs),
        "runs": sum(map(len, runs)),
        "games_without_hns": sorted(set(raw) - set(hns)),
    }
    return entry | algorithm_aggregates(hns, taus, resamples, rng)


def write_report(inputs: Sequence[str | Path], out: str | Path, *, resamples: int = 10_000, seed: int = 0) -> dict:
    """Write ``report.md``, ``report.json`` and ``performance_profiles.png`` (`PROFILES`) into `out` (created) for the
    scores of `inputs` (see `load_scores`), and return what ``report.json`` holds.

    Aggregates are over each algorithm's games of `ATARI_57` (games outside it have no human-normalized score: they
    appear in the per-game table only); intervals come from `resamples` stratified bootstrap resamples drawn from
    ``numpy.random.default_rng(seed)``, so a report is the same for the same inputs and seed. Each statistic is a
    ``{"point": value, "interval": [low, high] or None}``.

    Without matplotlib (the ``report`` extra) it writes the rest, removes a plot an earlier report left in `out`,
    says in ``report.md`` that the plot is missing and warns `NO_PLOT` (a `UserWarning`).

    Raises `FileNotFoundError` for an input that does not exist, `ValueError` for a bad input (see `load_scores`),
    no scores, `out` a file or `resamples` below 1, all before anything is written.
    """
    if resamples < 1:
        raise ValueError(f"resamples must be an integer >= 1, got {resamples}")
    if Path(out).exists() and not Path(out).is_dir():  # before the work, not after it
        raise ValueError(f"{out} is a file: the report needs a folder to write report.md, report.json and the PNG in")
    scores, protocols, outdated, capped = read_inputs(inputs)
    if not scores:
        raise ValueError(f"no scores in {', '.join(map(str, inputs)) or 'no inputs'}")
    # Each algorithm's raw scores per game, runs in run seed order.
    lists: dict[str, dict[str, list[float]]] = {}
    for score in sorted(scores, key=lambda s: (s.algorithm, display_name(s.game), s.run_seed)):
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
        "capped_evaluations": capped,
        "algorithms": {a: _algorithm(raw[a], hns[a], protocols[a], frames[a], taus, resamples, rng) for a in raw},
        "probability_of_improvement": [
            pair for x in raw for y in raw if x != y and (pair := improvement(x, y, hns, resamples, rng))
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
    plotted = _plot_profiles(report, path / PROFILES)
    (path / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (path / "report.md").write_text(_markdown(report, plotted))
    if not plotted:
        warnings.warn(NO_PLOT, stacklevel=2)
    return report


def _plot_profiles(report: Mapping[str, Any], path: Path) -> bool:
    """Draw each algorithm's performance profile into `path`, with its interval as a band where it has one; return
    whether it could (False without matplotlib)."""
    try:  # matplotlib's Figure: no pyplot, so no backend or global state
        from matplotlib.figure import Figure
    except ImportError:  # the numbers stand without the plot; a plot of other scores must not stand beside them
        path.unlink(missing_ok=True)
        return False
    figure = Figure(figsize=(6, 4), layout="constrained")
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
    return True


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


def _markdown(report: Mapping[str, Any], plotted: bool) -> str:
    """``report.md``: the report's numbers as Markdown tables, with what they mean, and the plot if it was drawn."""
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
        f"- `{evaluation}`: {cut} of {games} games {CAPPED}."
        for evaluation, (cut, games) in report["capped_evaluations"].items()
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
        f"![The fraction of runs above each human-normalized score]({PROFILES})"
        if plotted
        else f"Not drawn: {NO_PLOT}.",
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
    """The few lines ``atari-game report`` prints: each algorithm's aggregates of human-normalized scores ("HNS Mean
    0.484, Median ...") and Atari-5 estimate, and the probabilities of improvement."""
    lines = []
    for algorithm, entry in report["algorithms"].items():
        games, runs = _counted(entry["games"], "game"), _counted(entry["runs"], "run")
        trained = f", {_frames_cell(entry['frames_trained'])} frames trained" if entry["frames_trained"] else ""
        lines.append(f"{algorithm} ({', '.join(entry['protocols'])}): {games}, {runs}{trained}")
        if entry["games"]:
            lines.append("  HNS " + ", ".join(f"{label} {_cell(entry[name])}" for name, label in LABELS.items()))
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
    lines += [
        f"note: {evaluation}: {cut} of {games} games {CAPPED}"
        for evaluation, (cut, games) in report["capped_evaluations"].items()
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
