"""The benchmark scripts at tiny sizes (the runs themselves are too long for CI): they read both trainers' outputs
right, write their figures where a later run compares against them, refuse what they lack by name, and keep to the
commands the docs give."""

import argparse
import ast
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

import agent_gif
import common
import dopamine_scores
import dqn_final_agents
import numpy as np
import pool_versus
import pytest
import replay_memory
import restart_states
import run_figures
import step_costs
import torch
import trainers
import update_breakdown
from torch import nn

from atari_game import Game, GamePool
from atari_game.benchmark import OUR_GAME, game_options_json
from atari_game.dqn import Config
from atari_game.run_config import game_options
from atari_game.score_files import load_scores
from atari_game.scores import ATARI_5, atari5_median, human_normalized

ROOT = Path(__file__).parent.parent
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(path.stem for path in BENCHMARKS.glob("*.py") if path.stem != "common")


def parse(script: str, *arguments: str):
    """`arguments` parsed by `script`'s command line."""
    return importlib.import_module(script).build_parser().parse_args(list(arguments))


# --- the suite -------------------------------------------------------------------------------------------------


def doc_commands() -> list[tuple[str, str, list[str]]]:
    """Every ``python benchmarks/X.py ...`` command the docs and the README give: (page, script, its arguments)."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = " ".join(page.read_text().split())  # a command may wrap across the page's lines
        for script, arguments in re.findall(r"`(?:sudo )?python benchmarks/(\w+)\.py([^`]*)`", text):
            found.append((str(page.relative_to(ROOT)), script, shlex.split(arguments)))
    return found


def test_every_script_is_cited_by_the_docs_and_every_cited_command_parses():
    commands = doc_commands()
    assert {script for _, script, _ in commands} - {"common"} == set(SCRIPTS)  # no script the docs do not cite
    for page, script, arguments in commands:
        assert (BENCHMARKS / f"{script}.py").is_file(), f"{page} cites benchmarks/{script}.py, which is gone"
        try:
            parse(script, *arguments)
        except SystemExit:
            pytest.fail(f"{page}: python benchmarks/{script}.py {shlex.join(arguments)} does not parse")


def test_no_script_imports_another_and_each_says_its_command_and_what_it_writes():
    for script in SCRIPTS:
        source = (BENCHMARKS / f"{script}.py").read_text()
        tree = ast.parse(source)
        imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}  # fmt: skip
        imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert imported & set(SCRIPTS) == set(), f"{script} imports another script"
        doc = ast.get_docstring(tree)
        assert f"python benchmarks/{script}.py" in doc and "common.py" in doc, script
        assert not re.search(r"default=[\"'](/work|/root|/home)", source), f"{script}: a machine's path as a default"


def test_a_results_file_holds_the_command_machine_versions_and_figures(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(common, "BENCHMARKS", tmp_path)
    args = common.parser("x").parse_args([])
    path = common.save("benchmarks/learn_step.py", args, {"a": {"ms": np.float64(2.0)}, "n": 3}, ["--repeats", "3"])
    assert path.parent == tmp_path / "results" and re.fullmatch(r"learn_step-[a-z0-9-]+-\d+c-[\d-]+\.json", path.name)
    results = json.loads(path.read_text())
    assert results["command"] == "python benchmarks/learn_step.py --repeats 3"
    assert results["machine"]["cores"] >= 1 and isinstance(results["machine"]["cpu_flags"], list)
    assert {"numpy", "ale-py"} <= set(results["versions"]) and results["figures"] == {"a": {"ms": 2.0}, "n": 3}
    assert f"figures: {path}" in capsys.readouterr().out


def test_compare_prints_each_figures_ratio_to_an_earlier_run(tmp_path, capsys):
    old = tmp_path / "old.json"
    common.save("x.py", common.parser("x").parse_args(["--out", str(old)]), {"rate": 100.0, "runs": [{"ms": 4.0}]}, [])
    args = common.parser("x").parse_args(["--out", str(tmp_path / "new.json"), "--compare", str(old)])
    common.save("x.py", args, {"rate": 125.0, "runs": [{"ms": 2.0}], "label": "text"}, [])
    out = capsys.readouterr().out
    assert "rate: 125 / 100 = 1.250x" in out and "runs/0/ms: 2 / 4 = 0.500x" in out and "label" not in out
    done = subprocess.run([sys.executable, str(BENCHMARKS / "common.py"), str(old), str(tmp_path / "new.json")],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert "rate: 125 / 100 = 1.250x" in done.stdout


# --- trainers.py ---------------------------------------------------------------------------------------------

# What CleanRL's ppo_atari.py prints: one line per finished game (its return is an array), SPS every update.
FAKE_CLEANRL_PPO = """
import sys
assert sys.argv[1:] == ["--env-id", "BreakoutNoFrameskip-v4", "--seed", "3", "--total-timesteps", "2048"], sys.argv
print("global_step=96, episodic_return=[2.]")
print("SPS: 180")
print("global_step=1800, episodic_return=[11.]")
print("SPS: 175")
"""
# What dqn_atari.py prints: a line per whole game, and past learning_starts "SPS" every 100 steps.
FAKE_CLEANRL_DQN = """
import sys
expected = ["--env-id", "BreakoutNoFrameskip-v4", "--seed", "3", "--total-timesteps", "1000", "--buffer-size", "1000",
            "--learning-starts", "200", "--exploration-fraction", "0.4"]
assert sys.argv[1:] == expected, sys.argv
print("global_step=150, episodic_return=[1.]")
print("SPS: 300")  # global_step 300: 1 s
print("SPS: 200")  # global_step 400: 2 s
print("global_step=420, episodic_return=[4.]")
print("SPS: 125")  # global_step 500: 4 s
"""


def fake_cleanrl(tmp_path: Path, algo: str, source: str) -> tuple[str, str]:
    script = tmp_path / "checkout" / "cleanrl" / f"{algo}_atari.py"
    script.parent.mkdir(parents=True)
    script.write_text(source)
    return sys.executable, str(script)


def test_cleanrl_ppo_is_launched_unmodified_and_read_from_its_output(tmp_path):
    args = parse("trainers", "--algorithm", "ppo", "--frames", "8192")
    run = trainers.trained("CleanRL", 3, args, tmp_path / "run", fake_cleanrl(tmp_path, "ppo", FAKE_CLEANRL_PPO))
    # Its global_step counts agent steps: 4 emulator frames each. The last SPS is the run's.
    assert (run.steps_per_s, run.learning_steps_per_s, run.games) == (175.0, 175.0, [(384, 2.0), (7200, 11.0)])
    assert run.peak_rss_mb > 0 and (tmp_path / "run" / "peak_rss_mb.txt").is_file()


def test_cleanrl_dqn_is_launched_with_the_settings_and_read_from_its_output(tmp_path):
    args = parse(
        "trainers", "--algorithm", "dqn", "--frames", "4000", "--buffer-size", "1000", "--learning-starts", "200"
    )
    run = trainers.trained("CleanRL", 3, args, tmp_path / "run", fake_cleanrl(tmp_path, "dqn", FAKE_CLEANRL_DQN))
    # The last SPS is end to end; from learning starts on, 200 steps (300 to 500) took 3 s.
    assert (run.steps_per_s, run.learning_steps_per_s) == (125.0, pytest.approx(200 / 3))
    assert run.games == [(600, 1.0), (1680, 4.0)]


PROGRESS = [
    "frames,seconds,game_return,game_length,epsilon,frames_per_second,act_seconds,env_seconds,store_seconds,learn_seconds",
    "400,1.0,,,0.5,400,0.25,0.25,0.125,0.5",
    "440,,3.0,120,,,,,,",
    "800,3.0,,,0.01,266.7,0.125,0.125,0.125,1.75",
    "1200,5.0,,,0.01,240,0.125,0.125,0.125,1.75",
]


def test_our_run_is_read_from_its_progress_csv_and_reported(tmp_path, capsys):
    (tmp_path / "progress.csv").write_text("\n".join(PROGRESS) + "\n")
    run = trainers.read_progress(tmp_path, learning_starts=200)  # 800 frames on: 100 steps in 2 s
    assert run == trainers.Run(60.0, 50.0, [(440, 3.0)], seconds={"act": 0.5, "env": 0.5, "store": 0.375, "learn": 4.0})
    run.peak_rss_mb = 2_345.6
    trainers.report("x", run, 300_000, "dqn")
    assert capsys.readouterr().out == (
        "x: 1 games; mean of the first 20 3.00, of the last 20 3.00; per 100k frames: 3.0, nan, nan; 60 agent steps/s "
        "(50 from learning starts on); peak RSS 2,346 MB; wall time act 9 %, env 9 %, store 7 %, learn 74 %\n"
    )


def test_the_report_gives_first_and_last_twenty_and_each_100k(capsys):
    games = [(10_000 * k, float(k)) for k in range(1, 31)]  # returns 1..30 at 10k..300k frames
    figures = trainers.report("x", trainers.Run(250.0, 250.0, games), 300_000, "ppo")
    line = capsys.readouterr().out
    assert "30 games; mean of the first 20 10.50, of the last 20 20.50" in line
    assert "per 100k frames: 5.5, 15.5, 25.5" in line and "250 agent steps/s" in line and "learning" not in line
    assert (figures["first_20"], figures["last_20"], figures["per_100k"]) == (10.5, 20.5, [5.5, 15.5, 25.5])


def test_run_figures_keeps_one_part_whose_frames_per_second_fall_as_learning_starts(tmp_path, capsys):
    # A DQN run's rows, resumed at 250,016 frames: fast while its memory refills, slower once it learns; each row's
    # frames a multiple of 40,000, its frames/s counted from its pool step's. One part, not two.
    rows = ["frames,seconds,game_return,frames_per_second"]
    rows += ["200000,1157.5,,172.8", "240000,1168.5,,205.4", "260000,,30.0,"]
    rows += ["280000,7.5,,4011.44", "320000,17.0,,4127.36", "360000,88.8,,1239.14", "400000,149.9,,1000.57"]
    rows += ["440000,212.2,,895.44", "480000,273.1,,842.16", "520000,382.6,,705.60"]
    (tmp_path / "progress.csv").write_text("\n".join(rows) + "\n")
    run_figures.main([str(tmp_path), "--out", str(tmp_path / "figures.json")])
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("part")] == [
        "part 1: frames 0 to 240,000 in 1,168 s, 205 frames/s",
        "part 2: frames 249,914 to 520,000 in 383 s, 706 frames/s",
    ]


def test_run_figures_reads_a_resumed_runs_games_and_parts_from_its_progress_csv(tmp_path, capsys):
    # Games 1..130 end every 15k frames with returns 1..130; a first part runs to its checkpoint at 1M frames in
    # 100 s, a second, resumed there, to 2M in 1,500 s (stopped for a while): its clock starts again.
    # (The update rows name their precision, as DQN's and PPO's do: text among the numbers.)
    rows = ["frames,seconds,game_return,game_length,frames_per_second,precision"]
    rows += [f"{15_000 * k},,{k},100,," for k in range(1, 131)]
    rows += [f"{row},bf16" for row in ("500000,50.0,,,10000.0", "1000000,100.0,,,10000.0", "1500000,1000.0,,,500.0")]
    rows += ["2000000,1500.0,,,666.67,bf16"]
    # A third, fast, resumed from a checkpoint between two rows (at 2,010,000; seconds rounded as progress.csv does):
    # 50,000 frames/s from rows 4,096 frames apart, which the rounding of seconds must not split into parts.
    rows += [f"{2_010_000 + 4096 * k},{4096 * k / 50_000:.1f},,,50000.0,bf16" for k in range(1, 6)]
    (tmp_path / "progress.csv").write_text("\n".join(rows) + "\n")
    run_figures.main([str(tmp_path), "--out", str(tmp_path / "figures.json")])
    assert capsys.readouterr().out.splitlines() == [
        f"{tmp_path}: 130 whole games in 2,030,480 frames",
        "mean return per 1M frames: 33.5, 98.5, nan",  # games 1-66 end by 1M frames (990k), 67-130 after
        "last 100 games: 80.5 (last 20: 120.5)",
        "part 1: frames 0 to 1,000,000 in 100 s, 10,000 frames/s",
        "part 2: frames 1,000,000 to 2,000,000 in 1,500 s, 667 frames/s",
        f"part 3: frames {2_014_096 - 50_000 * 0.1:,.0f} to 2,030,480 in 0 s, 50,000 frames/s",  # its first row's
        f"figures: {tmp_path / 'figures.json'}",
    ]
    figures = json.loads((tmp_path / "figures.json").read_text())["figures"]
    assert figures["means"][:2] == [33.5, 98.5] and np.isnan(figures["means"][2])  # no game ended after 2M frames
    # The third part's start, between rows, from its rows' frames/s and rounded seconds: off by at most 0.05 s of them.
    [first, second, third] = figures["parts"]
    assert (first["from"], second["from"], third["to"]) == (0, 1_000_000, 2_030_480)
    assert abs(third["from"] - 2_010_000) <= 0.05 * 50_000
    # With --scores, its row for `atari-game report`: the mean of the games that ended in the last --every frames,
    # under the run's game and seed (from its checkpoint), in place of an older row of the same run; others kept.
    scores = tmp_path / "scores.csv"
    scores.write_text("algorithm,game,run_seed,score\ndqn-2m,qbert,1,5.0\ndqn-2m,pong,4,1.0\n")
    torch.save({"algorithm": "dqn", "config": {"game": "Pong", "seed": 4}}, tmp_path / "checkpoint.pt")
    run_figures.main(
        [str(tmp_path), "--out", str(tmp_path / "f.json"), "--scores", str(scores), "--algorithm", "dqn-2m"]
    )
    assert (
        capsys.readouterr().out.splitlines()[-1] == f"{scores}: dqn-2m, Pong, seed 4: 99.5"
    )  # games 69-130: 1,030,480 on
    assert scores.read_text() == "algorithm,game,run_seed,score\ndqn-2m,qbert,1,5.0\ndqn-2m,pong,4,99.5000\n"
    with pytest.raises(SystemExit) as exit_:
        run_figures.main([str(tmp_path), "--scores", str(scores)])
    assert exit_.value.code == 2 and "--scores and --algorithm go together" in capsys.readouterr().err
    # Not a run directory, or one without a whole game yet: a usage error naming it.
    for folder, problem in ((tmp_path / "none", "holds no progress.csv"), (tmp_path, "holds no whole game yet")):
        if folder == tmp_path:
            (tmp_path / "progress.csv").write_text(rows[0] + "\n" + "40000,10.0,,,4000.0\n")
        with pytest.raises(SystemExit) as exit_:
            run_figures.main([str(folder)])
        assert exit_.value.code == 2 and problem in capsys.readouterr().err


@pytest.mark.parametrize("rainbow_lite", [False, True])
def test_our_dqn_runs_as_cleanrl_or_with_its_rainbow_lite_switches_in_the_sides_precision(tmp_path, rainbow_lite):
    args = parse("trainers", "--algorithm", "dqn", "--torch-threads", "1", *(["--rainbow-lite"] * rainbow_lite))
    command = trainers.command("bf16", 2, args, tmp_path, None)
    assert ("--cleanrl" in command) != rainbow_lite and "--no-save-memory" in command
    for flag, value in {"--precision": "bf16", "--torch-threads": "1", "--buffer-size": "250000", "--seed": "2",
                        "--total-frames": "1000000", "--exploration-fraction": "0.4"}.items():  # fmt: skip
        assert command[command.index(flag) + 1] == value
    assert "--torch-threads" not in trainers.command("atari_game", 2, parse("trainers"), tmp_path, None)  # PPO's


def fake_runs(runs: list, tmp_path: Path):
    """A run_child that leaves what each trainer would, its returns and speeds set by the side and the seed."""

    def run_child(command, output, cwd=None):
        seed = int(command[command.index("--seed") + 1])
        if "-c" in command:  # CleanRL's, at 100 agent steps/s
            games = "".join(f"global_step={1000 * k}, episodic_return=[{10 + 2 * seed}.]\n" for k in range(1, 25))
            output.write_text(games + "SPS: 100\n")
        else:  # ours, 2.5 times as fast; bf16 a point lower
            run_dir = Path(command[command.index("--run-dir") + 1])
            ret = 12 + seed - ("bf16" in command)
            rows = [f"{4000 * k},,{ret},100,," for k in range(1, 25)] + ["100000,40.0,,,1000"]
            (run_dir / "progress.csv").write_text("frames,seconds,game_return,game_length,frames_per_second\n"
                                                  + "\n".join(rows) + "\n")  # fmt: skip
        runs.append(command)
        return 1000.0

    return run_child


def test_trainers_runs_every_side_per_seed_and_compares_them(tmp_path, monkeypatch, capsys):
    runs = []
    monkeypatch.setattr(trainers, "run_child", fake_runs(runs, tmp_path))
    python, script = fake_cleanrl(tmp_path, "ppo", "")
    out = tmp_path / "results.json"
    given = ["--frames", "100000", "--seeds", "1", "2", "--run-dir", str(tmp_path / "runs"), "--out", str(out)]
    trainers.main([*given, "--cleanrl-python", python, "--cleanrl-script", script])
    printed = capsys.readouterr().out
    assert len(runs) == 4 and [run[0] for run in runs] == [sys.executable, python, python, sys.executable]  # turns
    assert "atari_game, mean of 2: last 20 13.5 (13.0 / 14.0)" in printed
    assert "atari_game / CleanRL, agent steps/s, seed by seed: 2.50x (2.50-2.50, 2/2)" in printed
    assert "last 20, atari_game - CleanRL: +0.5 (standard error 1.1; within one standard error)" in printed
    figures = json.loads(out.read_text())["figures"]
    assert figures["means"]["CleanRL"]["steps_per_s"] == 100 and figures["difference"]["difference"] == 0.5
    # Again: every run finished there, so each is read, none run again; no CleanRL needed for the given last side.
    trainers.main([*given, "--sides", "atari_game", "CleanRL", "--given-last-20", "10", "12"])
    given_line = (
        "last 20, atari_game - CleanRL: +2.5 (standard error 1.1; not within one standard error) (CleanRL's as given)"
    )
    assert len(runs) == 4 and given_line in capsys.readouterr().out


def test_a_precision_side_against_another(tmp_path, monkeypatch, capsys):
    runs = []
    monkeypatch.setattr(trainers, "run_child", fake_runs(runs, tmp_path))
    trainers.main(["--frames", "100000", "--sides", "bf16", "fp32", "--seeds", "1", "2", "--out", str(tmp_path / "r")])
    assert [run[run.index("--precision") + 1] for run in runs] == ["bf16", "fp32", "fp32", "bf16"]
    assert "last 20, bf16 - fp32: -1.0 (standard error 0.7; not within one standard error)" in capsys.readouterr().out


def test_cleanrl_left_unnamed_is_refused_naming_the_flag_and_the_variable(monkeypatch, capsys):
    monkeypatch.delenv("CLEANRL_PYTHON", raising=False)
    monkeypatch.delenv("CLEANRL_DIR", raising=False)
    with pytest.raises(SystemExit):
        trainers.main(["--algorithm", "dqn"])
    assert "pass --cleanrl-python PATH or set CLEANRL_PYTHON" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        trainers.main(["--cleanrl-python", sys.executable])
    assert "pass --cleanrl-script PATH or set CLEANRL_DIR" in capsys.readouterr().err
    monkeypatch.setenv("CLEANRL_PYTHON", "/nowhere/python")
    with pytest.raises(SystemExit):
        dqn_final_agents.main(["--ours", __file__, "--cleanrl-script", __file__])  # (a file that exists)
    assert "--cleanrl-python /nowhere/python: no such file" in capsys.readouterr().err


# --- the pool ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_pool_versus_compares_a_revision_exported_from_git_with_this_checkout(tmp_path):
    pool_versus.export("HEAD", tmp_path)
    assert (tmp_path / "atari_game" / "pool.py").is_file()
    for source in (tmp_path, common.REPO):  # each side imports its own package, or run_side refuses
        for loop in pool_versus.LOOPS:
            result = pool_versus.run_side(source, None, loop, 2, 0.2, {**OUR_GAME, "n_workers": 1}, None)
            assert result["package"] == str(source / "atari_game")
            assert result["user_us"] + result["system_us"] > 0 and result["steps_per_s"] > 0


@pytest.mark.slow
def test_pool_versus_switches_each_mechanism_off_in_a_process_of_its_own(tmp_path, capsys):
    for mechanism in pool_versus.MECHANISMS:
        assert pool_versus.run_side(common.REPO, mechanism, "sync", 2, 0.2, {**OUR_GAME, "game": "Pong"}, None)
    assert GamePool._step_all is not GamePool._step_each  # this process keeps them all
    pool_versus.main(["--without", "the-watch", "--num-envs", "2", "--rounds", "2", "--seconds", "0.2",
                      "--loops", "sync", "--out", str(tmp_path / "r.json")])  # fmt: skip
    assert "the-watch sync  N=  2 with / without, agent steps/s, round by round: " in capsys.readouterr().out
    ratios = json.loads((tmp_path / "r.json").read_text())["figures"]["the-watch, sync, N=2"]["ratios"]
    assert set(ratios) == {"agent steps/s", "parent CPU"} and len(ratios["parent CPU"]) == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="a CPU cgroup needs root")
def test_pool_versus_can_slow_the_first_worker_down_with_a_cpu_cgroup():
    try:
        tasks = pool_versus.slow_cgroup(0.5)
    except SystemExit as error:  # root, but no writable cgroup cpu controller (a container)
        pytest.skip(str(error))
    try:
        result = pool_versus.run_side(common.REPO, None, "sync", 4, 0.3, {**OUR_GAME, "n_workers": 2}, tasks)
        assert result["steps_per_s"] > 0  # (measure checks that the worker went into the cgroup)
        assert not Path(tasks).read_text().split()  # and the worker is gone with its pool
    finally:
        Path(tasks).parent.rmdir()


def test_step_costs_plays_each_system_as_callgrind_would_count_it():
    for system in step_costs.SYSTEMS:
        step_costs.play(system, 8, 4)
    with pytest.raises(ValueError, match="system must be one of bare-ale, game, block, parent, ale-vector, got 'ale'"):
        step_costs.play("ale", 8, 4)  # not counted as some other system's


@pytest.mark.slow
def test_step_costs_replays_a_pools_steps_as_the_same_emulation():
    # The time part takes a sync pool's play from its envs replayed in one process: the same games, frame for frame.
    stepped, actions = step_costs.sync_pool(4, 0.2)
    assert set(stepped) == {"wall_x_workers", "workers", "parent", "play", "wait"} and actions.shape[1] == 4
    with GamePool(4, n_workers=2, **OUR_GAME) as pool:
        pool.reset(seed=0)
        for row in actions:
            obs = pool.step(row)[0]
    blocks = [step_costs.game_block([0, 1]), step_costs.game_block([2, 3])]
    for row in actions:
        for block in blocks:
            step_costs.play_block(block, row)
    np.testing.assert_array_equal(np.concatenate([block.arrays["obs"] for block in blocks]), obs)
    play, wait = step_costs.replayed_blocks(actions)
    assert play > 0 and 0 <= wait < 1


def test_step_costs_splits_callgrind_counts_by_library_counting_each_function_once():
    site = "/usr/lib/python3.11/site-packages"
    text = f"""events: Ir
ob=(1) {site}/ale_py/_ale_py.cpython-311-x86_64-linux-gnu.so
fn=(1) act
10 500
+2 20
cob=(2) {site}/cv2/cv2.abi3.so
cfn=(2) resize
calls=1 0
12 300
ob=(2)
fn=(2)
3 300
ob=(3) /usr/lib/libpython3.11.so.1.0
fn=(3) eval
1 7
2
ob=(4) {site}/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so
fn=(4) copy
* 4
ob=(5) /usr/lib/x86_64-linux-gnu/libc.so.6
fn=(5) memcpy
1 9
ob=(6) /usr/lib/python3.11/lib-dynload/_socket.cpython-311-x86_64-linux-gnu.so
fn=(6) recv
1 1
ob=(7) /usr/lib/x86_64-linux-gnu/libz.so.1
fn=(7) inflate
1 2
"""
    # The call's line (300, resize's inclusive cost) is not ALE's: resize's own 300 is OpenCV's, counted once.
    assert step_costs.by_library(text) == {"ALE": 520, "OpenCV": 300, "Python": 8, "numpy": 4, "libc": 9, "other": 2}


def test_the_parent_fit_recovers_its_costs_and_the_ceiling_follows_from_them():
    from atari_game.benchmark import ceiling, fit_parent

    grid = [
        {"workers": w, "envs": n, "parent_us_per_step": 30.0 + 4.0 * w + 0.5 * n} for w in (2, 8, 64) for n in (64, 256)
    ]
    assert [round(cost, 9) for cost in fit_parent(grid)] == [30.0, 4.0, 0.5]
    assert round(ceiling((30.0, 4.0, 0.5), 64, 256), 6) == round(256 / (30 + 256 + 128) * 1e6, 6)


@pytest.mark.slow
def test_throughput_benchmark_plays_the_game_asked_for_with_all_its_actions(tmp_path, capsys):
    from atari_game.benchmark import main, measure

    drawn = []
    measure(drawn.append, 3, 6, 0.05, np.random.default_rng(0))
    assert {int(action) for actions in drawn for action in actions} == set(range(6))  # Pong's 6, not Breakout's 4
    main(["--num-envs", "2", "--rounds", "1", "--seconds", "0.3", "--systems", "atari_game GamePool",
          "--game", "space_invaders", "--json", str(tmp_path / "t.json")])  # fmt: skip
    assert "SpaceInvaders, N=2: agent steps/s" in capsys.readouterr().out
    assert json.loads((tmp_path / "t.json").read_text())["game"] == "SpaceInvaders"
    with pytest.raises(SystemExit):
        main(["--game", "Pongg"])
    assert "unknown game 'Pongg' (closest: Pong" in capsys.readouterr().err


@pytest.mark.slow
def test_the_benchmark_takes_any_choice_of_systems_its_ratios_over_ours_where_one_was_measured(
    tmp_path, capsys, monkeypatch
):
    from atari_game import benchmark
    from atari_game.benchmark import main

    common = ["--num-envs", "2", "--rounds", "1", "--seconds", "0.2", "--json", str(tmp_path / "t.json")]
    main([*common, "--systems", "ale-py AtariVectorEnv", "atari_game GamePool async"])
    out = capsys.readouterr().out
    assert "(ours: atari_game GamePool async)" in out
    assert re.search(r"atari_game GamePool async .* 1\.00x  1\.00x \(1\.00-1\.00, 1/1\)", out)
    main([*common, "--systems", "ale-py AtariVectorEnv"])
    out = capsys.readouterr().out
    assert "(ours: none measured)" in out
    assert re.search(r"ale-py AtariVectorEnv .*%\s+-\s+-$", out, re.MULTILINE)

    # Every system asked for missing: why, and nothing measured.
    def missing(*args, **kwargs):
        raise ImportError("No module named 'envpool'")

    monkeypatch.setitem(benchmark.SYSTEMS, "EnvPool async", missing)
    main([*common, "--systems", "EnvPool async"])
    out = capsys.readouterr().out
    skipped = """EnvPool async: skipped: not installed (No module named 'envpool'): pip install "atari_game[bench]"\n"""
    assert skipped in out


def test_ratios_are_paired_round_by_round_and_summarised_with_their_spread():
    from atari_game.benchmark import describe_ratios, paired_ratios

    ours = [{"steps_per_s": rate} for rate in (90.0, 200.0, 120.0)]
    theirs = [{"steps_per_s": rate} for rate in (100.0, 160.0, 120.0)]  # the machine got faster in round 2
    ratios = paired_ratios(ours, theirs)
    assert ratios.tolist() == [0.9, 1.25, 1.0]
    assert describe_ratios(ratios) == "1.00x (0.90-1.25, 2/3)"  # round 3's tie counts as at least as fast
    with pytest.raises(ValueError):  # rounds must pair up
        paired_ratios(ours, theirs[:2])


def test_benchmark_options_are_a_json_object_of_game_options_and_anything_else_says_what_to_write():
    assert game_options_json('{"life_loss": "terminal", "fire_reset": true}') == {
        "life_loss": "terminal",
        "fire_reset": True,
    }
    for text, message in (("life_loss=terminal", "not JSON"), ('["terminal"]', "a JSON object")):
        with pytest.raises(argparse.ArgumentTypeError, match=message) as error:
            game_options_json(text)
        assert '{"life_loss": "terminal", "fire_reset": true}' in str(error.value)


@pytest.mark.slow
def test_restart_states_tells_games_that_restart_to_one_state_from_those_that_do_not(tmp_path, capsys, monkeypatch):
    # As ale-py 0.12.1 plays them: Alien's restarts depend on the timer's draw or the RAM before; Amidar's first frame
    # after a restored restart shows rows of the game before (frame buffers are not in ALE's state).
    assert restart_states.states_differ("Breakout", resets=30) is None
    assert restart_states.states_differ("Alien", resets=30) == "restart 1 reached another state from random RAM"
    assert restart_states.histories_differ("Breakout", histories=5) is None
    assert restart_states.histories_differ("Amidar", histories=5).endswith("pixels of frame 1 after the restart")
    assert restart_states.plays_differ("Pong", plays=20, options=restart_states.OPTIONS[2]).startswith("no restart")
    # ALE (ale-py 0.12.1) neither resets nor saves Atlantis II's count of lives: a restored restart reports the game
    # before's, first at play 80 of this run.
    assert restart_states.plays_differ("Atlantis2", 300, restart_states.OPTIONS[2]) == "play 80: 0 pixels, lives 6 / 5"
    out = tmp_path / "r.json"
    for name, value in {"RESETS": 20, "HISTORIES": 3, "PLAYS": 300}.items():
        monkeypatch.setattr(restart_states, name, value)
    restart_states.main(["--games", "Breakout", "Alien", "--out", str(out)])
    assert "1 of 2 games restart to one state: breakout\nin FIXED_RESTART_GAMES but not printed: none" in (
        capsys.readouterr().out
    )
    assert json.loads(out.read_text())["figures"]["one_state"] == ["breakout"]


# --- the replay memory ---------------------------------------------------------------------------------------


def test_a_recording_replays_the_pools_transitions_exactly():
    play, ended = replay_memory.RecordedPlay(2, 120, "Breakout"), 0
    live = replay_memory.live_play(2, 120, "Breakout")  # the same pool and actions, played again
    for replayed, (transition, _, _) in zip(play.transitions(120), live, strict=True):
        for got, expected in zip(replayed, transition, strict=True):
            np.testing.assert_array_equal(got, expected)
        ended += int((transition[4] | transition[5]).sum())
    assert ended  # episodes ended in it, and the recording starts the next ones as the pool does
    with pytest.raises(ValueError, match="holds 120 pool steps, not 121: raise RECORD_STEPS"):
        next(play.transitions(121))


def test_replay_memory_writes_bytes_per_transition_of_each_buffer(tmp_path, capsys, monkeypatch):
    out = tmp_path / "r.json"
    for name, value in {"PLAYS": {"Pong": False}, "ENVS": 2, "RECORD_STEPS": 10}.items():
        monkeypatch.setattr(replay_memory, name, value)
    replay_memory.main(["--only", "bytes", "--out", str(out)])
    table = json.loads(out.read_text())["figures"]["bytes"]
    assert table["FrameReplay zstd"]["Pong"] < table["FrameReplay None"]["Pong"] < 4 * 84 * 84 * 2
    plain, optimized = (table[f"SB3 ReplayBuffer optimize_memory_usage={o}"]["Pong"] for o in (False, True))
    assert plain == pytest.approx(2 * optimized, rel=0.01)  # obs and next_obs, or one array for both
    assert "FrameReplay zstd" in capsys.readouterr().out


# --- the trainers' time and the final agents -----------------------------------------------------------------


def test_the_breakdown_splits_each_phase_into_the_calls_timed_in_it_and_the_rest(monkeypatch):
    now = [0.0]  # a clock that moves only when the fake work below says so
    monkeypatch.setattr(update_breakdown.time, "perf_counter", lambda: now[0])

    def work(seconds, then=None):
        now[0] += seconds
        return then() if then else None

    fake = types.SimpleNamespace()
    fake.inner = lambda: work(1.0)
    fake.outer = lambda: work(2.0, fake.inner)
    clock = update_breakdown.Clock()
    clock.wrap(fake, "inner", "inner call")
    clock.wrap(fake, "outer", "total", phase="phase")
    fake.outer()
    fake.outer()
    fake.inner()  # outside every phase: the loop's
    assert clock.table() == {"phase: inner call": 2.0, "loop: inner call": 1.0, "phase: the rest": 4.0}


@pytest.mark.slow
def test_final_agents_loads_cleanrl_models_and_plays_whole_games_in_our_env(tmp_path):
    # CleanRL's QNetwork: one Sequential named "network", scaling inside forward; its saved state dict's keys.
    cleanrl = nn.Sequential(
        nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 4),
    )  # fmt: skip
    torch.save({f"network.{name}": tensor for name, tensor in cleanrl.state_dict().items()}, tmp_path / "m.pt")
    network = dqn_final_agents.load_network(tmp_path / "m.pt")
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.allclose(network(obs), cleanrl(obs.float() / 255.0), atol=1e-5)

    # A network that always picks FIRE: each env's one whole game is the game of a Game with the env's seed.
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.zero_()
        network.head.bias[1] = 1.0
    returns = dqn_final_agents.play_atari_game(network, games=3, epsilon=0.0, seed=70)
    expected = []
    for seed in (70, 71, 72):
        game = Game(seed=seed, **game_options(Config()))
        game.reset()
        info = None
        while not (info and "game_reward" in info):
            _, _, _, info = game.step(1)
        expected.append(info["game_reward"])
    assert returns == expected and np.isfinite(returns).all()


def test_a_file_that_is_no_checkpoint_is_a_usage_error_of_the_scripts_that_load_one(tmp_path, capsys):
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    with pytest.raises(SystemExit) as exit_:
        agent_gif.main([str(tmp_path / "notes.pt"), str(tmp_path / "a.gif")])
    assert exit_.value.code == 2 and "notes.pt is not a checkpoint.pt of atari-game train" in capsys.readouterr().err
    assert not (tmp_path / "a.gif").exists()
    with pytest.raises(SystemExit) as exit_:
        agent_gif.main([str(tmp_path / "missing.pt"), str(tmp_path / "a.gif")])
    assert exit_.value.code == 2 and "cannot read" in capsys.readouterr().err
    # dqn_final_agents loads every network before it plays: a missing or foreign file stops it at once. (The files
    # are read after parsing: the docs' commands name checkpoints that exist only after a run.)
    cleanrl = ["--cleanrl-python", sys.executable, "--cleanrl-script", __file__]
    for flag in ("--ours", "--cleanrl"):
        for name, problem in (("missing.pt", "cannot read"), ("notes.pt", "is not a checkpoint or a CleanRL model")):
            with pytest.raises(SystemExit) as exit_:
                dqn_final_agents.main([flag, str(tmp_path / name), *cleanrl])
            assert exit_.value.code == 2 and problem in capsys.readouterr().err


@pytest.mark.slow
def test_agent_gif_shows_the_checkpoints_agent_playing_in_colour_at_the_games_speed(tmp_path):
    from PIL import Image

    from atari_game import ppo

    config = ppo.Config(game="Pong")
    agent = ppo.build_agent(config.game, torch.device("cpu"))
    optimizer = torch.optim.Adam(agent.parameters())
    ppo.save_checkpoint(
        tmp_path / "checkpoint.pt", ppo.checkpoint_state(agent, optimizer, 0, 0, config, torch.Generator())
    )
    command = [sys.executable, str(BENCHMARKS / "agent_gif.py"), str(tmp_path / "checkpoint.pt"),
               str(tmp_path / "a.gif"), "--seconds", "3", "--out", str(tmp_path / "r.json")]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "a.gif: 23 frames (3 s)" in result.stdout  # 45 agent steps of 4 frames in 3 s, every second one shown
    gif = Image.open(tmp_path / "a.gif")
    # The emulator's colour screen; each shown frame lasts 2 agent steps of 4 frames at 60 Hz (GIFs count in 10 ms).
    assert gif.size == (160, 210) and gif.mode == "P" and gif.info["duration"] == 130
    assert gif.n_frames > 5
    assert json.loads((tmp_path / "r.json").read_text())["figures"]["frames"] == 23


def test_dopamine_scores_are_each_seeds_training_return_in_the_million_frames_ending_at_the_budget(tmp_path, capsys):
    # A Dopamine checkout's data: per game (and per game on the IMPALA CNN), each agent's 5 seeds per iteration.
    data = tmp_path / "baselines" / "atari" / "data"
    data.mkdir(parents=True)
    for game in ("battlezone", "doubledunk", "namethisgame", "phoenix", "qbert"):
        for suffix, offset in (("", 0), ("_Impala", 1000)):
            entries = [
                {"Iteration": iteration, "Value": offset + 100 * iteration + seed, "Agent": agent}
                for agent in ("DQN", "Rainbow", "IQN", "C51")
                for iteration in range(10)
                for seed in range(5)
            ]
            (data / f"{game}{suffix}.json").write_text(json.dumps(entries))
    out = tmp_path / "dopamine-2m.csv"
    dopamine_scores.main([str(tmp_path), "--frames", "2000000", "--csv", str(out), "--out", str(tmp_path / "f.json")])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"{out}: 125 rows, 5 agents at 2,000,000 frames"
    # Each agent's Atari-5 estimate from its seeds' means (seeds 0-4: 102 more than the iteration's hundreds).
    means = {game: 102.0 for game in ATARI_5}
    figures = json.loads((tmp_path / "f.json").read_text())["figures"]
    assert figures["dopamine-dqn-2m"] == {
        "means": means,
        "atari5": pytest.approx(atari5_median({g: human_normalized(g, m) for g, m in means.items()})),
    }
    assert printed[1].startswith("dopamine-dqn-2m: Atari-5 ")
    rows = out.read_text().splitlines()
    assert rows[:3] == [
        "algorithm,game,run_seed,score",
        "dopamine-dqn-2m,battle_zone,0,100.0000",
        "dopamine-dqn-2m,battle_zone,1,101.0000",
    ]
    assert "dopamine-iqn-impala-2m,qbert,4,1104.0000" in rows and not any("c51" in row for row in rows)
    # The report reads it as 5 agents with 5 runs on each of the 5 games.
    scores = load_scores([out])
    assert len(scores) == 125 and {score.algorithm for score in scores} == {
        f"dopamine-{a}-2m" for a in dopamine_scores.AGENTS
    }
    # A budget between Dopamine's iterations, past its 10, or a folder without its data: usage errors naming them.
    (data / "qbert.json").write_text(
        json.dumps([e for e in json.loads((data / "qbert.json").read_text()) if e["Iteration"] < 9])
    )
    for flags, problem in (
        (["--frames", "2500000"], "give a multiple of 1,000,000"),
        (["--frames", "10000000"], "0 values of 'DQN' at iteration 9, not 5"),
    ):
        with pytest.raises(SystemExit) as exit_:
            dopamine_scores.main([str(tmp_path), *flags, "--csv", str(out)])
        assert exit_.value.code == 2 and problem in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        dopamine_scores.main([str(data), "--csv", str(out)])
    assert exit_.value.code == 2 and "has no baselines/atari/data" in capsys.readouterr().err
