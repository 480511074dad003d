"""Scoring agents: `evaluate` plays exactly the games local `Game`s play with the same seeds and epsilon draws,
splits the games evenly over the envs, repeats for a seed; `atari-game evaluate` scores checkpoints under the run's
protocol (or another, with a note), refuses what cannot be compared, and writes what `atari-game report` reads."""

import dataclasses
import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pytest

from atari_game import Evaluation, Game, evaluate
from atari_game.algorithms import parse_args
from atari_game.protocols import get_protocol
from atari_game.scores import human_normalized


def scripted(obs: np.ndarray) -> np.ndarray:
    """A policy that depends on what it sees (so the observations must match too), deterministic."""
    return obs.astype(np.int64).sum(axis=(1, 2, 3)) % 4


def lockstep_games(game, seed, num_envs, episodes, epsilon, options):
    """What `evaluate` must find, played without a pool: Games seeded seed + i stepped together, each step's actions
    the policy's with the same epsilon draws, each env's whole games counted until its share is played; their
    returns, and whether the frame cap cut each."""
    games = [Game(game, seed=seed + i, **options) for i in range(num_envs)]
    obs = np.stack([g.reset() for g in games])
    quota = [episodes // num_envs + (i < episodes % num_envs) for i in range(num_envs)]
    scores = [[] for _ in range(num_envs)]
    rng = np.random.default_rng(seed)
    while any(len(s) < q for s, q in zip(scores, quota, strict=True)):
        actions = scripted(obs)
        explore = rng.random(num_envs) < epsilon
        actions = np.where(explore, rng.integers(games[0].n_actions, size=num_envs), actions)
        for i, g in enumerate(games):
            obs[i], _, done, info = g.step(int(actions[i]))
            if done and len(scores[i]) < quota[i]:
                scores[i].append((info["game_reward"], info["truncated"]))
    played = [game for env in scores for game in env]
    return [r for r, _ in played], [cut for _, cut in played]


def test_evaluate_plays_the_games_local_games_play_with_the_same_seeds_and_epsilon_draws():
    result = evaluate(scripted, "Breakout", protocol="nature", episodes=5, seed=7, num_envs=2, fire_reset=True)
    options = {**get_protocol("nature").evaluate, "fire_reset": True}
    expected, cut = lockstep_games("Breakout", 7, 2, 5, 0.05, options)
    assert result.returns.tolist() == expected and result.truncated.tolist() == cut == [False] * 5
    assert (result.game, result.protocol, result.evaluation_seed, len(result.lengths)) == ("breakout", "nature", 7, 5)
    assert result.mean == pytest.approx(np.mean(expected))
    assert result.sem == pytest.approx(np.std(expected, ddof=1) / math.sqrt(5))
    assert result.hns == pytest.approx(human_normalized("breakout", np.mean(expected)))
    # No protocol: the options as given, whole games, no epsilon (games of at most 2,000 frames here: the scripted
    # policy keeps Breakout's balls in play until the cap).
    options = {"fire_reset": True, "max_episode_frames": 2_000}
    unnamed = evaluate(scripted, "Breakout", None, 3, 7, 2, **options)
    expected, cut = lockstep_games("Breakout", 7, 2, 3, 0.0, {**options, "life_loss": "ignore"})
    assert unnamed.returns.tolist() == expected and unnamed.truncated.tolist() == cut
    # The games the cap cut (here all three) are counted and said: their returns are not whole games'.
    assert cut == [True] * 3
    assert unnamed.summary().endswith("; 3 of 3 cut at the frame cap, not ended by the game")


def test_evaluate_refuses_bad_input_by_name():
    with pytest.raises(ValueError, match="episodes must be an integer >= 1, got 0"):
        evaluate(scripted, "Breakout", episodes=0)
    with pytest.raises(TypeError, match=r"episodes must be an integer >= 1, got float 2\.5"):
        evaluate(scripted, "Breakout", episodes=2.5)
    with pytest.raises(ValueError, match="continuous=True is not supported"):
        evaluate(scripted, "Breakout", episodes=2, continuous=True)
    for num_envs in (0, 3):
        with pytest.raises(
            ValueError, match=rf"num_envs \(at most episodes\) must be an integer in \[1, 2\], got {num_envs}"
        ):
            evaluate(scripted, "Breakout", episodes=2, num_envs=num_envs)
    with pytest.raises(ValueError, match="life_loss='terminal' conflicts with protocol 'nature', which sets"):
        evaluate(scripted, "Breakout", life_loss="terminal")
    with pytest.raises(ValueError, match=r"unknown game 'Breakot' \(closest: Breakout"):
        evaluate(scripted, "Breakot")
    # Not one action per observation: a scalar (even for one env), None, a column, a score per action.
    expected = r"policy must return one action per observation, shape \({n},\); got {got}"
    for returned, n, got in [
        (lambda obs: 0, 2, r"shape \(\)"),
        (lambda obs: 0, 1, r"shape \(\)"),
        (lambda obs: None, 1, "None"),
        (lambda obs: np.zeros((len(obs), 1), int), 2, r"shape \(2, 1\)$"),
        (lambda obs: np.zeros((len(obs), 4)), 2, r"shape \(2, 4\) \(a score per action\? return the chosen actions"),
        (lambda obs: np.zeros(4), 1, r"shape \(4,\) \(a score per action\?"),
    ]:
        with pytest.raises(ValueError, match=expected.format(n=n, got=got)):
            evaluate(returned, "Breakout", episodes=2, num_envs=n)
    # Floats or bools of the right shape are not actions, though numpy would cast them.
    for dtype in (np.float32, bool):
        with pytest.raises(
            TypeError, match=rf"policy must return integer actions in \[0, 4\), got dtype {np.dtype(dtype)}"
        ):
            evaluate(lambda obs, dtype=dtype: np.zeros(len(obs), dtype), "Breakout", episodes=2)
    # The labels the report reads.
    for name in (" ", "a|b", "two\nlines"):  # (report.md's table cells and rows)
        with pytest.raises(ValueError, match="algorithm must be a non-empty name \\(str\\) without '\\|' or line"):
            evaluate(scripted, "Breakout", episodes=1, algorithm=name)
    assert evaluate(scripted, "Breakout", episodes=1, algorithm=" dqn ").algorithm == "dqn"
    with pytest.raises(ValueError, match="run_seed must be an integer >= 0, got -1"):
        evaluate(scripted, "Breakout", episodes=1, run_seed=-1)


def test_an_evaluation_saves_the_json_report_reads_and_a_csv_of_its_games(tmp_path):
    result = Evaluation("pong", "nature", 0, np.array([-21.0, -19.0]), np.array([800, 900]), "ppo", 3, "c.pt", 512)
    path = result.save(tmp_path / "out" / "evaluation-nature")
    data = json.loads(path.read_text())
    assert {k: data[k] for k in ("format", "version", "algorithm", "game", "run_seed", "protocol", "mean")} == {
        "format": "atari_game.evaluation",
        "version": 1,
        "algorithm": "ppo",
        "game": "pong",
        "run_seed": 3,
        "protocol": "nature",
        "mean": -20.0,
    }
    assert data["episodes"] == [{"return": -21.0, "length": 800}, {"return": -19.0, "length": 900}]
    assert path.with_suffix(".csv").read_text().splitlines() == ["episode,return,length", "0,-21.0,800", "1,-19.0,900"]
    assert "Pong: ppo (run seed 3), 2 games under nature: mean -20.0 +- 1.0 (standard error), HNS" in result.summary()
    # With the truncations `evaluate` records: a key of each game, a CSV column.
    cut = dataclasses.replace(result, truncated=np.array([False, True])).save(tmp_path / "cut-evaluation-nature")
    assert [game["truncated"] for game in json.loads(cut.read_text())["episodes"]] == [False, True]
    assert cut.with_suffix(".csv").read_text().splitlines() == [
        "episode,return,length,truncated",
        "0,-21.0,800,0",
        "1,-19.0,900,1",
    ]
    one = Evaluation("pong", "nature", 0, np.array([-21.0]), np.array([800]))
    assert (
        "Pong: agent (run seed 0), 1 game under nature: mean -21.0 (no standard error with fewer than two games)"
        in one.summary()
    )


def test_evaluate_labels_the_agent_and_its_run_as_given(tmp_path):
    result = evaluate(scripted, "Breakout", episodes=1, seed=np.int64(2), algorithm="mine", run_seed=np.int64(4))
    assert (result.algorithm, result.run_seed, result.evaluation_seed) == ("mine", 4, 2)
    with pytest.warns(DeprecationWarning, match=r"^Evaluation\.seed is now Evaluation\.evaluation_seed; the old name"):
        assert result.seed == 2  # the old name, for one more release
    assert result.summary().startswith("Breakout: mine (run seed 4), 1 game under nature")
    saved = json.loads(result.save(tmp_path / "mine-evaluation-nature.json").read_text())  # numpy seeds saved as ints
    assert (saved["algorithm"], saved["run_seed"], saved["evaluation_seed"]) == ("mine", 4, 2) and "seed" not in saved


# --- atari-game evaluate -------------------------------------------------------------------------------------


def atari_game(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "atari_game", *args], capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny PPO runs on Breakout: one with the default settings (nature's), one with life_loss reset (none's)."""
    directory = tmp_path_factory.mktemp("runs")
    tiny = ["--game", "Breakout", "--total-frames", "256", "--no-video", "--num-envs", "2", "--n-steps", "32"]
    tiny += ["--n-epochs", "1", "--n-minibatches", "2"]
    for name, more in (("default", []), ("reset", ["--life-loss", "reset"])):
        done = atari_game("train", *tiny, *more, "--run-dir", str(directory / name), timeout=300)
        assert done.returncode == 0, done.stderr
        # Its last line gives the command that scores it; the run of no protocol's settings must name one.
        score_it = f"to score its agent: atari-game evaluate {directory / name / 'checkpoint.pt'}"
        if name == "reset":
            score_it += (
                " --protocol NAME (machado or nature: its settings match neither's, so name the one to score under)"
            )
        assert done.stdout.endswith(score_it + "\n")
    return directory


@pytest.mark.slow
def test_scoring_training_and_recording_leave_torchs_thread_count_as_they_found_it(runs, tmp_path):
    # Each sets torch's threads for its own work (1 beside the pool's workers, every core to learn); a notebook that
    # chose its own count keeps it afterwards.
    import torch

    from atari_game import ppo
    from atari_game.evaluation import evaluate_checkpoint
    from atari_game.run_envs import record_game
    from atari_game.worker import available_cores

    callers = torch.get_num_threads()
    chosen = available_cores() + 2  # a count none of them sets
    torch.set_num_threads(chosen)
    try:
        evaluate_checkpoint(runs / "default" / "checkpoint.pt", episodes=1, num_envs=1)
        assert torch.get_num_threads() == chosen
        tiny = [
            "--total-frames",
            "256",
            "--num-envs",
            "2",
            "--n-steps",
            "32",
            "--n-epochs",
            "1",
            "--n-minibatches",
            "2",
        ]
        ppo.train(parse_args("ppo", [*tiny, "--no-video", "--run-dir", str(tmp_path / "run")]))
        assert torch.get_num_threads() == chosen
        record_game(lambda obs: 1, ppo.Config(game="Breakout"), tmp_path / "fire.mp4")  # FIRE until the game is over
        assert torch.get_num_threads() == chosen
    finally:
        torch.set_num_threads(callers)


@pytest.mark.slow
def test_a_checkpoint_is_scored_under_its_runs_protocol_the_same_for_a_seed(runs, tmp_path):
    checkpoint = runs / "default" / "checkpoint.pt"
    first = atari_game("evaluate", str(checkpoint), "--episodes", "2", "--seed", "5", timeout=300)
    assert first.returncode == 0, first.stderr
    expected = f"note: scored under nature, the protocol whose game settings {checkpoint} trained with (it named none)"
    assert expected in first.stdout
    assert "Breakout: ppo (run seed 1), 2 games under nature: mean" in first.stdout
    data = json.loads((runs / "default" / "evaluation-nature.json").read_text())
    assert (data["protocol"], data["evaluation_seed"], data["frames_trained"], len(data["episodes"])) == (
        "nature",
        5,
        256,
        2,
    )
    again = atari_game("evaluate", str(checkpoint), "--episodes", "2", "--seed", "5", timeout=300)
    assert json.loads((runs / "default" / "evaluation-nature.json").read_text()) == data, again.stderr
    assert "evaluation-nature.csv (replacing the evaluation there before)" in again.stdout
    # --out DIR gathers the evaluations of many runs in one folder, which the report reads as it is.
    out = atari_game("evaluate", str(checkpoint), "--episodes", "2", "--seed", "5", "--out", str(tmp_path / "evals"))
    assert json.loads((tmp_path / "evals" / "default-evaluation-nature.json").read_text()) == data, out.stderr
    # Named from its own folder, the checkpoint's evaluation is still named after that folder (not "-evaluation-...").
    here = atari_game("evaluate", "checkpoint.pt", "--episodes", "2", "--seed", "5", "--out", str(tmp_path / "here"),
                      cwd=runs / "default")  # fmt: skip
    named_here = json.loads((tmp_path / "here" / "default-evaluation-nature.json").read_text())
    assert named_here["episodes"] == data["episodes"], here.stderr
    report = atari_game("report", str(tmp_path / "evals"), "--out", str(tmp_path / "report"), "--resamples", "10")
    assert report.returncode == 0 and "Breakout" in (tmp_path / "report" / "report.md").read_text(), report.stderr
    # The same run under another name (--algorithm): the report holds both agents, as it would two variants.
    named = atari_game("evaluate", str(checkpoint), "--episodes", "2", "--algorithm", "variant", "--out", str(tmp_path))
    assert "Breakout: variant (run seed 1), 2 games under nature: mean" in named.stdout, named.stderr
    both_agents = [str(tmp_path / "evals"), str(tmp_path / "default-evaluation-nature.json")]
    report = atari_game("report", *both_agents, "--out", str(tmp_path / "report"), "--resamples", "10")
    assert set(json.loads((tmp_path / "report" / "report.json").read_text())["algorithms"]) == {"ppo", "variant"}
    # Another checkpoint of the same run keeps an evaluation of its own, named after it.
    shutil.copy(checkpoint, runs / "default" / "best.pt")
    both = atari_game("evaluate", str(checkpoint), str(runs / "default" / "best.pt"), "--episodes", "2", "--seed", "5")
    best = json.loads((runs / "default" / "best-evaluation-nature.json").read_text())
    assert best["episodes"] == data["episodes"], both.stderr
    assert (runs / "default" / "best-evaluation-nature.csv").exists()
    assert json.loads((runs / "default" / "evaluation-nature.json").read_text()) == data
    (runs / "default" / "best.pt").unlink()
    for written in (runs / "default").glob("best-evaluation-nature.*"):
        written.unlink()  # the fixture's run folder is shared with other tests


@pytest.mark.slow
def test_a_checkpoint_under_a_protocol_it_cannot_play_or_with_none_is_refused_naming_why(runs):
    refused = atari_game("evaluate", str(runs / "default" / "checkpoint.pt"), "--protocol", "machado")
    assert refused.returncode == 2
    assert (
        "trained under nature, scored under machado: its agent chooses among 4 actions, machado's games take 18; score"
        " it under nature, or map its actions onto machado's in your own policy with atari_game.evaluate"
    ) in refused.stderr
    unnamed = atari_game("evaluate", str(runs / "reset" / "checkpoint.pt"))
    assert unnamed.returncode == 2
    assert "trained under no protocol and matches none: name one to score it under (machado, nature)" in unnamed.stderr
    named = atari_game(
        "evaluate", str(runs / "reset" / "checkpoint.pt"), "--protocol", "nature", "--episodes", "1", timeout=300
    )
    assert named.returncode == 0, named.stderr
    assert "trained under no protocol, scored under nature" in named.stdout


# --- atari-game report over evaluations -----------------------------------------------------------------------


def test_atari_game_report_reads_the_evaluations_of_a_directory_of_runs(tmp_path):
    # Two seeds of one algorithm on Pong and Breakout, saved as atari-game evaluate saves them.
    for seed, (pong, breakout) in enumerate([(-20.0, 10.0), (-10.0, 20.0)]):
        for game, score in (("pong", pong), ("breakout", breakout)):
            returns, lengths = np.array([score, score + 2.0]), np.array([100, 100])
            run = tmp_path / "runs" / f"{game}-{seed}"
            Evaluation(game, "nature", 0, returns, lengths, "ppo", seed, str(run / "checkpoint.pt")).save(
                run / "evaluation-nature.json"
            )
    done = atari_game("report", str(tmp_path / "runs"), "--out", str(tmp_path / "report"), "--resamples", "200")
    assert done.returncode == 0, done.stderr
    assert "ppo" in done.stdout and f"written to {tmp_path / 'report'}" in done.stdout
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    # The median of the per-game mean HNS: Pong's mean is -14 (two runs of -19 and -9), Breakout's 16.
    expected = np.median([human_normalized("pong", -14.0), human_normalized("breakout", 16.0)])
    assert (tmp_path / "report" / "performance_profiles.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "report" / "report.md").exists()
    ppo = report["algorithms"]["ppo"]
    assert (ppo["games"], ppo["runs"], ppo["protocols"]) == (2, 4, ["nature"])
    assert ppo["median"]["point"] == pytest.approx(expected)
    low, high = ppo["median"]["interval"]
    assert low <= expected <= high
    nothing = atari_game("report", str(tmp_path / "runs" / "pong-0" / "nothing"))
    assert nothing.returncode == 2 and "no such file or run directory" in nothing.stderr
