"""atari_game.aggregates, score_files and report: the aggregate statistics against independent computations, the
inputs and their errors, and the report's files."""

import csv
import dataclasses
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from atari_game.aggregates import (
    NO_INTERVAL,
    interquartile_mean,
    mean_hns,
    median_hns,
    optimality_gap,
    probability_of_improvement,
    score_profile,
    stratified_resample,
)
from atari_game.evaluation import Evaluation
from atari_game.report import format_summary, write_report
from atari_game.score_files import Score, load_scores
from atari_game.scores import ATARI_5, ATARI_57, HUMAN_SCORES, RANDOM_SCORES, atari5_median, human_normalized

RAINBOW = Path(__file__).parent / "data" / "rainbow_scores.csv"
GAMES = ("pong", "breakout", "ms_pacman", "qbert", "seaquest", "enduro", "boxing")


def raw_score(game, hns):
    """The raw score whose human-normalized score is `hns`."""
    return RANDOM_SCORES[game] + hns * (HUMAN_SCORES[game] - RANDOM_SCORES[game])


HEADER = ("algorithm", "game", "run_seed", "score")


def write_csv(path, rows, header=HEADER):
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def hns_csv(path, algorithm, matrix, games=GAMES):
    """A CSV of `matrix` (runs, games) of HNS, as raw scores."""
    rows = [
        (algorithm, game, run, raw_score(game, matrix[run, g]))
        for run in range(len(matrix))
        for g, game in enumerate(games)
    ]
    return write_csv(path, rows)


def evaluation(path, algorithm="ppo", game="pong", run_seed=1, mean=20.3, protocol="nature", **changes):
    """An evaluation JSON as ``atari-game evaluate`` writes it."""
    data = {
        "format": "atari_game.evaluation",
        "version": 1,
        "algorithm": algorithm,
        "game": game,
        "run_seed": run_seed,
        "protocol": protocol,
        "checkpoint": "runs/ppo-Pong-1/checkpoint.pt",
        "frames_trained": 10_000_000,
        "evaluation_seed": 0,
        "episodes": [{"return": mean, "length": 7000}],
        "mean": mean,
        "sem": None,
        "hns": None,
    } | changes
    path.write_text(json.dumps(data))
    return path


# --- the statistics ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("runs", [1, 3, 5, 6])
def test_aggregates_match_independent_computations(runs):
    # Ties on purpose: rounded scores, so IQM's cut falls among equal values.
    matrix = np.round(np.random.default_rng(runs).lognormal(0, 1, (runs, len(GAMES))), 1)
    columns = list(matrix.T)
    assert interquartile_mean(columns) == pytest.approx(scipy.stats.trim_mean(matrix, 0.25, axis=None))
    assert median_hns(columns) == pytest.approx(np.median(matrix.mean(0)))
    assert mean_hns(columns) == pytest.approx(matrix.mean())
    assert optimality_gap(columns) == pytest.approx(1 - np.minimum(matrix, 1).mean())  # rliable's formula


@pytest.mark.parametrize("n", range(1, 13))
def test_iqm_trims_as_scipy_for_every_count(n):
    scores = np.random.default_rng(n).normal(size=n)
    assert interquartile_mean([scores]) == pytest.approx(scipy.stats.trim_mean(scores, 0.25))


def test_statistics_of_resamples_are_those_of_each_resample():
    runs = [np.random.default_rng(g).normal(size=g + 2) for g in range(4)]  # 2 to 5 runs: ragged
    resampled = stratified_resample(runs, 50, np.random.default_rng(0))
    assert [x.shape for x in resampled] == [(50, g + 2) for g in range(4)]
    assert all(np.isin(r, x).all() for r, x in zip(resampled, runs, strict=True))  # each game's own runs
    for b in (0, 17, 49):
        one = [x[b] for x in resampled]
        pooled = np.concatenate(one)
        assert interquartile_mean(resampled)[b] == pytest.approx(scipy.stats.trim_mean(pooled, 0.25))
        assert median_hns(resampled)[b] == pytest.approx(np.median([x.mean() for x in one]))
        assert mean_hns(resampled)[b] == pytest.approx(np.mean([x.mean() for x in one]))  # each game weighs 1


def test_score_profile_is_the_fraction_of_runs_above_each_tau():
    runs = [np.array([0.5, 1.0, 2.0]), np.array([0.0, 3.0])]
    taus = np.array([-1.0, 0.0, 1.0, 2.5, 5.0])
    # Per game: strictly above tau, then the mean over the two games.
    expected = [(3 / 3 + 2 / 2) / 2, (3 / 3 + 1 / 2) / 2, (1 / 3 + 1 / 2) / 2, (0 + 1 / 2) / 2, 0]
    np.testing.assert_allclose(score_profile(runs, taus), expected)


def test_probability_of_improvement():
    rng = np.random.default_rng(0)
    x = [rng.normal(size=4) for _ in range(3)]
    assert probability_of_improvement([v + 100 for v in x], x) == 1.0
    assert probability_of_improvement(x, [v + 100 for v in x]) == 0.0
    assert probability_of_improvement(x, x) == 0.5
    # By hand: game 1, pairs (1,2) 0, (1,3) 0, (3,2) 1, (3,3) 0.5, (4,2) 1, (4,3) 1 -> 3.5 / 6; game 2, 0 of 1.
    assert probability_of_improvement(
        [np.array([1.0, 3, 4]), np.array([0.0])], [np.array([2.0, 3]), np.array([1.0])]
    ) == (pytest.approx((3.5 / 6 + 0) / 2))
    # Mann-Whitney's U over the pairs, as rliable computes it with scipy.
    u = [scipy.stats.mannwhitneyu(a, b).statistic / (len(a) * len(b)) for a, b in zip(x, x[::-1], strict=True)]
    assert probability_of_improvement(x, x[::-1]) == pytest.approx(np.mean(u))


# --- the report -------------------------------------------------------------------------------------------------


def test_bootstrap_intervals_hold_their_point_and_narrow_with_seeds(tmp_path):
    rng, games = np.random.default_rng(0), ATARI_57[:20]
    widths = {}
    for runs in (3, 12):
        path = hns_csv(tmp_path / f"{runs}.csv", "ppo", rng.normal(1, 0.5, (runs, len(games))), games)
        entry = write_report([path], tmp_path / f"out{runs}", resamples=2000)["algorithms"]["ppo"]
        assert entry["runs"] == runs * len(games) and entry["no_interval"] is None
        for name in ("mean", "median", "iqm", "optimality_gap"):
            low, high = entry[name]["interval"]
            assert low <= entry[name]["point"] <= high, name
            widths[runs, name] = high - low
    for name in ("mean", "median", "iqm", "optimality_gap"):
        assert widths[12, name] < 0.8 * widths[3, name], name


def test_report_files_and_numbers(tmp_path):
    rng = np.random.default_rng(1)
    games = (*ATARI_5, "pong")
    ppo, dqn = rng.lognormal(0, 0.5, (3, len(games))), rng.lognormal(-1, 0.5, (2, len(games)))
    inputs = [hns_csv(tmp_path / "ppo.csv", "ppo", ppo, games), hns_csv(tmp_path / "dqn.csv", "dqn", dqn, games)]
    # A game outside the 57 is listed with its raw score and left out of the aggregates.
    inputs.append(write_csv(tmp_path / "other.csv", [("ppo", "Adventure", 0, 1.0), ("ppo", "Adventure", 1, 0.0)]))
    report = write_report(inputs, tmp_path / "out", resamples=500, seed=3)

    # The files: JSON as returned, a real PNG, the Markdown naming what it leaves out.
    out = tmp_path / "out"
    assert json.loads((out / "report.json").read_text()) == report
    assert (out / "performance_profiles.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (out / "report.md").read_text()
    assert "Adventure left out of the aggregates" in markdown
    assert "\n  Adventure left out of the aggregates: no human-normalized score outside the 57 games" in format_summary(
        report
    )  # the console says so too
    assert "| Adventure | ppo | 2 | 0.5 ± 0.5 | — |" in markdown
    assert str(inputs[0]) in markdown and "ppo: as published" in markdown
    assert NO_INTERVAL not in markdown

    # The numbers: the aggregates over the six games of the 57, Atari-5 from the per-game means.
    entry = report["algorithms"]["ppo"]
    assert (entry["games"], entry["runs"], entry["games_without_hns"]) == (6, 18, ["adventure"])
    assert entry["median"]["point"] == pytest.approx(np.median(ppo.mean(0)))
    assert entry["iqm"]["point"] == pytest.approx(scipy.stats.trim_mean(ppo, 0.25, axis=None))
    estimate = entry["atari5"]["estimate"]
    assert estimate["point"] == pytest.approx(atari5_median(dict(zip(games, ppo.mean(0), strict=False))))
    assert estimate["interval"][0] <= estimate["point"] <= estimate["interval"][1]
    assert f"(stated error ±10.4%: ±{0.104 * estimate['point']:.3f})" in markdown
    pairs = {(p["x"], p["y"]): p for p in report["probability_of_improvement"]}
    assert pairs["ppo", "dqn"]["games"] == 6
    assert pairs["ppo", "dqn"]["point"] == pytest.approx(1 - pairs["dqn", "ppo"]["point"])
    assert pairs["ppo", "dqn"]["point"] == pytest.approx(probability_of_improvement(list(ppo.T), list(dqn.T)))
    # The same seed, the same report; another seed, other intervals.
    assert write_report(inputs, tmp_path / "again", resamples=500, seed=3) == report
    assert write_report(inputs, tmp_path / "other", resamples=500, seed=4)["algorithms"] != report["algorithms"]
    assert "ppo (as published): 6 games, 18 runs" in format_summary(report)


def test_one_run_per_game_prints_no_interval(tmp_path):
    rows = [("agent", game, 0, raw_score(game, 1.0 + g)) for g, game in enumerate(GAMES)]
    rows.append(("agent", "pong", 1, raw_score("pong", 2.0)))  # two runs in one game are not enough
    report = write_report([write_csv(tmp_path / "one.csv", rows)], tmp_path / "out", resamples=100)
    entry = report["algorithms"]["agent"]
    assert entry["no_interval"] == NO_INTERVAL
    assert all(entry[name]["interval"] is None for name in ("mean", "median", "iqm", "optimality_gap"))
    assert entry["atari5"]["missing"] == ["BattleZone", "DoubleDunk", "NameThisGame", "Phoenix"]
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert f"- agent: {NO_INTERVAL}." in markdown
    assert "[" not in markdown.split("## Aggregates")[1].split("## Atari-5")[0]  # points only
    assert "missing BattleZone, DoubleDunk, NameThisGame, Phoenix" in markdown
    assert "One algorithm: nothing to compare." in markdown
    assert NO_INTERVAL in format_summary(report)
    one = write_report([write_csv(tmp_path / "single.csv", rows[:1])], tmp_path / "single", resamples=100)
    assert format_summary(one).startswith("agent (as published): 1 game, 1 run\n")
    # Two algorithms on one game: their comparison counts one game, as the Results page's DQN and PPO do.
    pair = [("agent", GAMES[0], 0, raw_score(GAMES[0], 1.0)), ("other", GAMES[0], 0, raw_score(GAMES[0], 0.5))]
    two = write_report([write_csv(tmp_path / "pair.csv", pair)], tmp_path / "pair", resamples=100)
    assert format_summary(two).endswith("P(agent > other) = 1.000 over 1 game\nP(other > agent) = 0.000 over 1 game")


def test_rainbow_median_is_the_median_of_its_per_game_hns(tmp_path):
    rows = list(csv.DictReader(RAINBOW.open()))
    expected = np.median(
        [human_normalized(row["game"], float(row["score"])) for row in rows if row["game"] in ATARI_57]
    )
    report = write_report([RAINBOW], tmp_path / "out", resamples=10)
    assert report["algorithms"]["Rainbow"]["median"] == {"point": pytest.approx(expected), "interval": None}
    # The report's Atari-5 estimate from the same table lies within the authors' stated error of that median.
    atari5 = report["algorithms"]["Rainbow"]["atari5"]
    assert atari5["missing"] == [] and atari5["stated_error"] == 0.104
    assert abs(atari5["estimate"]["point"] - expected) <= 0.104 * expected


def test_without_matplotlib_the_report_writes_its_numbers_and_names_the_extra(tmp_path, monkeypatch):
    path = write_csv(tmp_path / "s.csv", [("a", "pong", 0, 1.0)])
    out = tmp_path / "out"
    out.mkdir()
    (out / "performance_profiles.png").write_bytes(b"the plot of an earlier report")
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    needs = 'the performance-profile plot needs the report extra (matplotlib): pip install "atari_game[report]"'
    with pytest.warns(UserWarning, match=f"^{re.escape(needs)}$"):
        report = write_report([path], out, resamples=10)
    assert json.loads((out / "report.json").read_text()) == report and report["algorithms"]["a"]["runs"] == 1
    # No plot, and none of other scores beside these: the page says why instead.
    assert sorted(file.name for file in out.iterdir()) == ["report.json", "report.md"]
    markdown = (out / "report.md").read_text()
    assert f"## Performance profiles\n\nNot drawn: {needs}.\n" in markdown and ".png" not in markdown


def test_atari_game_report_without_matplotlib_or_with_an_old_file_says_so_a_line_each(tmp_path):
    # A fresh interpreter in which matplotlib cannot be imported, as where the report extra is not installed.
    path = write_csv(tmp_path / "s.csv", [("a", "pong", 0, 1.0)], header=("algorithm", "game", "seed", "score"))
    out = tmp_path / "out"
    script = "import sys; sys.modules['matplotlib'] = None; from atari_game.cli import main; main(sys.argv[1:])"
    args = ["report", str(path), "--out", str(out), "--resamples", "10"]
    run = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines() == [
        f"note: {path} calls 'run_seed' by its old name 'seed', read for one more release: rename it 'run_seed'",
        'note: the performance-profile plot needs the report extra (matplotlib): pip install "atari_game[report]"',
    ]
    assert run.stdout.endswith(f"written to {out}: report.md, report.json\n")
    assert sorted(file.name for file in out.iterdir()) == ["report.json", "report.md"]


# --- inputs -----------------------------------------------------------------------------------------------------


def test_csv_in_any_column_order_and_any_spelling(tmp_path):
    rows = [("1.5", "x", "ALE/MsPacman-v5", "Rainbow", "0"), ("-3", "", "Pong", "dqn", "2")]
    path = write_csv(tmp_path / "s.csv", rows, header=("score", "notes", "game", "algorithm", "run_seed"))
    assert load_scores([path]) == [
        Score("Rainbow", "ms_pacman", 0, 1.5, f"{path}, line 2"),
        Score("dqn", "pong", 2, -3.0, f"{path}, line 3"),
    ]


def test_the_old_spelling_of_the_run_seed_is_read_for_one_release_with_a_warning(tmp_path):
    # The files of the release before: an evaluation's "seed", a CSV's seed column.
    old_json = evaluation(tmp_path / "old.json", run_seed=4)
    data = json.loads(old_json.read_text())
    data["seed"] = data.pop("run_seed")
    old_json.write_text(json.dumps(data))
    old_csv = write_csv(tmp_path / "old.csv", [("dqn", "pong", 5, 1.0)], header=("algorithm", "game", "seed", "score"))
    with pytest.warns(DeprecationWarning) as caught:
        scores = load_scores([old_json, old_csv])
    assert [(score.algorithm, score.run_seed) for score in scores] == [("ppo", 4), ("dqn", 5)]
    assert [str(warning.message) for warning in caught] == [
        f"{file} calls 'run_seed' by its old name 'seed', read for one more release: rename it 'run_seed'"
        for file in (old_json, old_csv)
    ]
    with pytest.warns(DeprecationWarning, match=r"^Score\.seed is now Score\.run_seed; the old name goes"):
        assert scores[0].seed == 4
    # A file with both spellings is read by the current one, and says nothing.
    both = write_csv(
        tmp_path / "both.csv", [("a", "pong", 1, 2, 3.0)], header=("algorithm", "game", "seed", "run_seed", "score")
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_scores([both])[0].run_seed == 2


def test_the_budget_notes_count_the_aggregated_runs_and_ignore_whole_update_differences(tmp_path):
    # PPO's 10M frames in whole updates of 8 and of 16 envs (9,998,336 and 9,994,240): one budget, shown as a range.
    eight = evaluation(tmp_path / "a.json", run_seed=1, frames_trained=9_998_336)
    sixteen = evaluation(tmp_path / "b.json", run_seed=2, frames_trained=9_994_240)
    # A game outside the 57 trained for less: not in the aggregates, so not in their budget.
    other = evaluation(tmp_path / "c.json", game="Adventure", run_seed=1, frames_trained=1_000_000)
    summary = format_summary(write_report([eight, sixteen, other], tmp_path / "out", resamples=10))
    assert summary.startswith("ppo (nature): 1 game, 2 runs, 9,994,240-9,998,336 frames trained\n")
    assert summary.endswith("\n  Adventure left out of the aggregates: no human-normalized score outside the 57 games")
    assert "mix" not in summary and "not all known" not in summary
    # A published row of the same algorithm says no budget: counted.
    row = write_csv(tmp_path / "s.csv", [("ppo", "Breakout", 0, 30.0)])
    summary = format_summary(write_report([eight, sixteen, row], tmp_path / "out", resamples=10))
    assert "\n  its runs' budgets are not all known: 1 run without one" in summary and "mix" not in summary


def test_evaluations_and_run_directories(tmp_path):
    run = tmp_path / "ppo-Pong-1"
    (run / "nested").mkdir(parents=True)
    first = evaluation(run / "evaluation.json", run_seed=1, mean=20.0)
    second = evaluation(run / "evaluation-breakout.json", game="Breakout", run_seed=1, mean=300.0)
    evaluation(run / "nested" / "evaluation.json", run_seed=9)  # not read: directories are not searched below
    (run / "progress.json").write_text("{}")  # not an evaluation*.json: not read
    single = evaluation(tmp_path / "other.json", run_seed=2, mean=19.0, frames_trained=2_000_000)
    assert load_scores([run, single]) == [
        Score("ppo", "breakout", 1, 300.0, str(second), 10_000_000),
        Score("ppo", "pong", 1, 20.0, str(first), 10_000_000),
        Score("ppo", "pong", 2, 19.0, str(single), 2_000_000),
    ]
    report = write_report([run, single], tmp_path / "out", resamples=10)
    assert report["algorithms"]["ppo"]["protocols"] == ["nature"]
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "Protocols: ppo: nature." in markdown
    # Agents trained for different budgets: the budgets shown, and the mix said, on the page and the console.
    assert report["algorithms"]["ppo"]["frames_trained"] == [2_000_000, 10_000_000]
    assert "| ppo | 2,000,000-10,000,000 | 2 | 3 |" in markdown
    mixed = "its runs trained for different numbers of frames, 2,000,000 to 10,000,000: the aggregates mix them"
    assert f"- ppo: {mixed}." in markdown
    summary = format_summary(report)
    assert summary.startswith("ppo (nature): 2 games, 3 runs, 2,000,000-10,000,000 frames trained\n")
    assert f"\n  {mixed}" in summary
    one_budget = write_report([run], tmp_path / "out", resamples=10)
    assert format_summary(one_budget).startswith("ppo (nature): 2 games, 2 runs, 10,000,000 frames trained\n")
    assert "mix" not in format_summary(one_budget)


def test_an_evaluation_with_games_cut_at_the_frame_cap_is_noted_where_the_report_is_read(tmp_path):
    # Two of three games stood still until machado's cap: their returns are the cap's, not whole games'.
    returns, lengths = np.array([-2.0, 2.0, -20.0]), np.array([26_996, 26_996, 3_000])
    cut = np.array([True, True, False])
    capped = Evaluation("double_dunk", "machado", 0, returns, lengths, "dqn", 1, truncated=cut)
    path = capped.save(tmp_path / "dqn-DoubleDunk-evaluation-machado.json")
    whole = dataclasses.replace(capped, truncated=np.zeros(3, bool)).save(tmp_path / "whole" / "evaluation.json")
    older = evaluation(tmp_path / "ppo-Pong-evaluation-nature.json")  # no "truncated" key: nothing to note
    report = write_report([path, older], tmp_path / "out", resamples=10)
    assert report["capped_evaluations"] == {str(path): (2, 3)}
    assert json.loads((tmp_path / "out" / "report.json").read_text())["capped_evaluations"] == {str(path): [2, 3]}
    said = "2 of 3 games cut at the frame cap, not ended by the game (their returns are the scores when the cap stopped"
    said += " them)"
    assert f"- `{path}`: {said}." in (tmp_path / "out" / "report.md").read_text().splitlines()
    assert format_summary(report).endswith(f"\nnote: {path}: {said}")
    report = write_report([whole, older], tmp_path / "out", resamples=10)
    assert report["capped_evaluations"] == {} and "note" not in format_summary(report)


def test_an_evaluation_older_than_its_checkpoint_is_noted_where_the_report_is_read(tmp_path):
    # A run resumed after its evaluation: the score is of the agent the checkpoint held before.
    checkpoint = tmp_path / "run" / "checkpoint.pt"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"the agent")
    before = evaluation(tmp_path / "run" / "evaluation-nature.json", checkpoint=str(checkpoint))
    report = write_report([before], tmp_path / "out", resamples=10)
    assert report["outdated_evaluations"] == {} and "note" not in format_summary(report)
    stamp = before.stat().st_mtime
    os.utime(checkpoint, (stamp + 60, stamp + 60))  # saved a minute after the evaluation
    report = write_report([tmp_path / "run"], tmp_path / "out", resamples=10)
    assert report["outdated_evaluations"] == {str(before): str(checkpoint)}
    assert json.loads((tmp_path / "out" / "report.json").read_text())["outdated_evaluations"] == {
        str(before): str(checkpoint)
    }
    assert format_summary(report).endswith(
        f"\nnote: {checkpoint} was saved after {before}, which scores the agent it held before: atari-game evaluate "
        f"{checkpoint} scores it as it is now"
    )
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert f"- `{before}` scores an older agent: `{checkpoint}` was saved after it." in markdown


@pytest.mark.parametrize(
    ("header", "row", "message"),
    [
        (("algorithm", "game", "score"), ("a", "pong", "1"), r"s\.csv, line 1: the header must contain "
         r"algorithm,game,run_seed,score \(missing run_seed\)"),
        (HEADER, ("a", "pong", "0", "lots"), r"s\.csv, line 2: score 'lots' is not a "
         "finite number"),
        (HEADER, ("a", "pong", "0", "nan"), r"line 2: score 'nan' is not a finite"),
        (HEADER, ("a", "Breakot", "0", "1"), r"s\.csv, line 2: game: unknown game "
         r"'Breakot' \(closest: Breakout"),
        (HEADER, ("a", "pong", "x", "1"), r"line 2: run_seed 'x' is not a non-negative"),
        (HEADER, ("a", "pong", "0"), r"line 2: fewer values than the header"),
        (HEADER, (" ", "pong", "0", "1"), r"line 2: no algorithm"),
    ],
)  # fmt: skip
def test_bad_csv(tmp_path, header, row, message):
    path = write_csv(tmp_path / "s.csv", [row], header=header)
    with pytest.raises(ValueError, match=message):
        load_scores([path])


def test_bad_inputs(tmp_path):
    csv_path = write_csv(tmp_path / "s.csv", [("ppo", "pong", 1, 2.0)])
    # A JSON that is not an evaluation.
    other = tmp_path / "config.json"
    other.write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match=r"config\.json: expected an evaluation written by `atari-game evaluate` "
                       r"\(format 'atari_game.evaluation', version 1\), got format 'something else'"):  # fmt: skip
        load_scores([other])
    bad = evaluation(tmp_path / "bad.json")
    bad.write_text(json.dumps({key: value for key, value in json.loads(bad.read_text()).items() if key != "mean"}))
    with pytest.raises(ValueError, match=r"bad\.json: the evaluation has no 'mean' field"):
        load_scores([bad])
    # A run directory not yet evaluated.
    (tmp_path / "run").mkdir()
    with pytest.raises(
        ValueError,
        match=r"run has no \*evaluation\*\.json, nor do its run directories: "
        r"run `atari-game evaluate RUN/checkpoint\.pt` first \(it writes RUN/evaluation-PROTOCOL\.json; with --out "
        r".*run, .*run/RUN-evaluation-PROTOCOL\.json\), or name evaluation JSONs or score CSVs",
    ):
        load_scores([tmp_path / "run"])
    # One that holds its checkpoint: the command that evaluates it.
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"a run's checkpoint")
    with pytest.raises(
        ValueError, match=rf"run holds a run but no evaluation: run `atari-game evaluate {tmp_path}/run/"
    ):
        load_scores([tmp_path / "run"])
    with pytest.raises(FileNotFoundError, match=r"nowhere: no such file or run directory"):
        load_scores([tmp_path / "nowhere"])
    # The per-game CSV beside an evaluation, given instead of its JSON.
    per_game = write_csv(tmp_path / "evaluation-nature.csv", [(0, -21.0, 800)], header=("episode", "return", "length"))
    with pytest.raises(
        ValueError, match=r"\(missing algorithm, game, run_seed, score\); give the evaluation's \.json$"
    ):
        load_scores([per_game])
    beside = evaluation(tmp_path / "evaluation-nature.json")
    with pytest.raises(
        ValueError, match=rf"\(missing algorithm, game, run_seed, score\); give {beside}, the evaluation$"
    ):
        load_scores([per_game])
    beside.unlink()
    # A report written over a file.
    with pytest.raises(ValueError, match=r"s\.csv is a file: the report needs a folder to write report\.md"):
        write_report([csv_path], csv_path, resamples=10)
    # Another kind of file.
    (tmp_path / "scores.txt").write_text("")
    with pytest.raises(ValueError, match=r"scores\.txt: expected a \.csv of scores, an evaluation \.json or a run"):
        load_scores([tmp_path / "scores.txt"])
    # The same run twice, from two inputs.
    again = evaluation(tmp_path / "evaluation.json", run_seed=1)
    with pytest.raises(
        ValueError, match=rf"'ppo', game 'pong', run seed 1 appears twice: in {csv_path}, line 2 and in {again}"
    ):
        load_scores([csv_path, again])
    # A run directory holding the run's evaluations under two protocols: which one is for the user to name.
    run = tmp_path / "ppo-Pong-3"
    run.mkdir()
    nature = evaluation(run / "evaluation-nature.json", run_seed=3)
    evaluation(run / "evaluation-machado.json", run_seed=3, protocol="machado")
    with pytest.raises(
        ValueError, match=r"run seed 3 appears twice: .*; give the evaluation to report by its file name$"
    ):
        load_scores([run])
    assert [score.source for score in load_scores([nature])] == [str(nature)]
    # Given by name, the two are one run under two protocols: said so.
    machado_file = run / "evaluation-machado.json"
    with pytest.raises(ValueError, match=r"; one run evaluated under nature and machado\? give the one to report$"):
        load_scores([nature, machado_file])
    # One file given more than once, by name and in its folder, in either order, or by name twice: counted once.
    machado_file.unlink()
    for inputs in ([run, nature], [nature, run], [nature, nature]):
        assert [score.source for score in load_scores(inputs)] == [str(nature)]
    # Two evaluations of one name and seed, named file by file (in one folder or two): two agents that need names of
    # their own, or one run evaluated twice.
    (tmp_path / "elsewhere").mkdir()
    twice = evaluation(tmp_path / "elsewhere" / "evaluation-nature.json", run_seed=3)
    beside_it = evaluation(run / "dqn-variant-evaluation-nature.json", run_seed=3)
    agents = r"; two agents\? name them apart: atari-game evaluate --algorithm NAME \(from Python, .*\)$"
    for other in (twice, beside_it):
        with pytest.raises(ValueError, match=rf"run seed 3 appears twice: in {nature} and in {other}{agents}"):
            load_scores([nature, other])
    # One algorithm under two protocols.
    machado = evaluation(tmp_path / "machado.json", run_seed=2, protocol="machado")
    conflict = (
        r"'ppo' was evaluated under different protocols: machado \(.*machado\.json\), nature \(.*evaluation\.json\)"
    )
    with pytest.raises(ValueError, match=conflict + "; scores under different protocols are not comparable"):
        load_scores([again, machado])
