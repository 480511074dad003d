"""The atari-game command: games, play (random and trained), the forwarded commands, clear errors."""

import ast
import csv
import graphlib
import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from atari_game import cli
from atari_game.algorithms import parse_args


def atari_game(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "atari_game", *args], capture_output=True, text=True, **kwargs)


def video_frames(path):
    """The frames of the .mp4 at `path`, each checked to be the full-colour screen (not the 84x84 input)."""
    capture = cv2.VideoCapture(str(path))
    frames = 0
    while True:
        ok, frame = capture.read()
        if not ok:
            return frames
        assert frame.shape == (210, 160, 3)
        frames += 1


def steps_played(stdout):
    """The length of the game a "... one game scored S in N steps ..." line reports: N."""
    return int(stdout.split(" in ")[1].split()[0])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny `atari-game train` run (PPO, 2 updates of 2 envs x 32 agent steps) in a directory of its own, where it
    writes its default run directory runs/Pong-3: (the directory, the command's result)."""
    directory = tmp_path_factory.mktemp("train")
    run = ["--game", "Pong", "--seed", "3", "--total-frames", "512", "--no-video", "--checkpoint-every", "256"]
    tiny = ["--num-envs", "2", "--n-steps", "32", "--n-epochs", "1", "--n-minibatches", "2"]
    return directory, atari_game("train", *run, *tiny, cwd=directory, timeout=300)


@pytest.mark.slow
def test_games_lists_every_game_with_its_actions():
    result = atari_game("games")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert len(lines) == 104  # the games ale-py 0.12.1 bundles: another release may bundle more
    assert "Breakout            4 actions: NOOP FIRE RIGHT LEFT" in lines
    assert any(line.startswith("MsPacman            9 actions: NOOP UP RIGHT LEFT DOWN") for line in lines)


@pytest.mark.slow
def test_play_a_random_game_and_record_it(tmp_path):
    video = tmp_path / "pong.mp4"
    result = atari_game("play", "pong", "--record", str(video), "--seed", "3", timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Pong, random agent: one game scored -")
    steps = steps_played(result.stdout)
    assert video_frames(video) == steps


@pytest.mark.slow
def test_train_writes_its_log_and_checkpoint_in_its_run_directory(trained):
    import torch

    directory, result = trained
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = directory / "runs" / "Pong-3"  # runs/<game>-<seed> without --run-dir
    assert result.stdout.endswith(
        "done: runs/Pong-3/progress.csv, learning_curve.png, checkpoint.pt\n"
        "to score its agent: atari-game evaluate runs/Pong-3/checkpoint.pt\n"
    )
    with (run_dir / "progress.csv").open() as file:
        updates = [row for row in csv.DictReader(file) if row["policy_loss"]]
    assert [int(row["frames"]) for row in updates] == [256, 512]  # one row per update of 2 x 32 x 4 frames
    saved = torch.load(run_dir / "checkpoint.pt")
    assert (saved["algorithm"], saved["update"], saved["frames"]) == ("ppo", 2, 512)
    assert (saved["config"]["game"], saved["config"]["seed"], saved["config"]["n_steps"]) == ("Pong", 3, 32)
    assert (run_dir / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert not (run_dir / "agent.mp4").exists()  # --no-video


@pytest.mark.slow
def test_play_a_trained_checkpoint_and_record_it(trained, tmp_path):
    directory, _ = trained
    checkpoint, video = directory / "runs" / "Pong-3" / "checkpoint.pt", tmp_path / "agent.mp4"
    result = atari_game("play", "pong", "--checkpoint", str(checkpoint), "--record", str(video), "--seed", "4")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Pong, trained agent: one game scored -")  # an agent of 512 frames loses
    assert result.stdout.endswith(f"; video: {video}\n")
    steps = steps_played(result.stdout)
    assert steps > 100 and video_frames(video) == steps  # one frame per agent step of the whole game
    # Another game's agent is a usage error naming both games.
    result = atari_game("play", "Breakout", "--checkpoint", str(checkpoint))
    assert result.returncode == 2 and result.stderr.endswith(
        f"atari-game play: error: {checkpoint} was trained on Pong, not Breakout\n"
    ), result.stderr


@pytest.mark.slow
def test_bench_prints_its_table_and_writes_every_measurement(tmp_path):
    args = ["--num-envs", "2", "--rounds", "1", "--seconds", "0.3", "--systems", "atari_game GamePool"]
    result = atari_game("bench", *args, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "Breakout, N=2: agent steps/s, mean of 1 alternating rounds; % limit: of the emulation" in result.stdout
    row = next(line for line in lines if line.startswith("atari_game GamePool "))
    steps_per_s = float(row.split()[2].replace(",", ""))
    assert steps_per_s > 0
    assert row.endswith(" 1.00x  1.00x (1.00-1.00, 1/1)")  # the only system: ours / itself, in its one round
    measured = json.loads((tmp_path / "runs" / "bench.json").read_text())
    rounds = measured["runs"]["2"]["systems"]["atari_game GamePool"]
    assert len(rounds) == 1 and round(rounds[0]["steps_per_s"]) == round(steps_per_s)
    # The emulation limit, measured in the same round: ALE's own work for the same steps, one process per core.
    (limit,) = measured["runs"]["2"]["limit_steps_per_s"]
    share = float(row.split()[5].rstrip("%"))
    assert limit > 0 and round(100 * rounds[0]["steps_per_s"] / limit) == share


def test_bench_pool_workers_sets_the_workers_of_our_pools_only(monkeypatch, tmp_path):
    from atari_game import benchmark

    built = {}

    def builder(name):
        def build(n, game, **options):
            built[name] = options
            return (lambda actions: None), (lambda: None)

        return build

    for name in ("atari_game GamePool", "atari_game GamePool async", "EnvPool async"):
        monkeypatch.setitem(benchmark.SYSTEMS, name, builder(name))
    monkeypatch.setattr(benchmark, "emulation_limit", lambda *args: 1.0)
    args = [
        "--num-envs",
        "4",
        "--rounds",
        "1",
        "--seconds",
        "0.05",
        "--pool-workers",
        "8",
        "--json",
        str(tmp_path / "b"),
    ]
    benchmark.main([*args, "--systems", "atari_game GamePool", "atari_game GamePool async", "EnvPool async"])
    # At most a worker per env (as GamePool allows); the C++ pools keep their thread per core.
    expected = {"atari_game GamePool": {"n_workers": 4}, "atari_game GamePool async": {"n_workers": 4}}
    assert built == {**expected, "EnvPool async": {}}
    assert json.loads((tmp_path / "b").read_text())["pool_workers"] == 8


def test_a_random_agent_plays_a_whole_game_with_all_its_lives():
    from atari_game import Game
    from atari_game.play import play_game

    result = atari_game("play", "Breakout", "--seed", "2", timeout=300)
    assert result.returncode == 0, result.stderr
    steps = steps_played(result.stdout)
    # The same agent (its generator seeded as the CLI seeds it) in a Game that ends only at game over.
    rng = np.random.default_rng(2)
    game = Game("Breakout", seed=2, fire_reset=False, life_loss="ignore")
    score, length = play_game(game, lambda obs: int(rng.integers(4)))
    assert result.stdout.startswith(f"Breakout, random agent: one game scored {score:g} in {length} steps")
    one_life = play_game(Game("Breakout", seed=2, fire_reset=False), lambda obs: int(rng.integers(4)))[1]
    assert steps == length > one_life  # all five lives played, not the first


def test_train_with_a_misspelt_game_or_option_is_a_usage_error_and_makes_no_run_directory(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    for algo, option, expected in [
        ("ppo", ["--game", "Pongg"], "unknown game 'Pongg' (closest: Pong"),
        ("dqn", ["--game", "Pongg"], "unknown game 'Pongg' (closest: Pong"),
        ("ppo", ["--life-loss", "bogus"], "--life-loss: invalid choice: 'bogus' (choose from 'reset', 'terminal', "),
        ("dqn", ["--total-frames", "1e6.5"], "--total-frames: expected an integer (1000000, 1_000_000 or 1e6), got"),
        ("ppo", ["--num-envs", "0.5"], "--num-envs: expected a whole number (1000000, 1_000_000 or 1e6), got '0.5'"),
        ("ppo", ["--n-steps", "0"], "--n-steps must be at least 1, got 0"),
        ("ppo", ["--learning-rate", "nan"], "--learning-rate must be a number > 0, got nan"),
        (
            "ppo",
            ["--total-frames", "1e3"],
            "--total-frames must be at least one update's 4 x --num-envs x --n-steps = 4096",
        ),
        ("dqn", ["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        # A misspelt flag, or the other trainer's: the closest of this trainer's.
        ("ppo", ["--totl-frames", "5"], "unrecognized arguments: --totl-frames 5 (closest: --total-frames)"),
        ("dqn", ["--n-steps", "3"], "unrecognized arguments: --n-steps 3 (--n-steps is PPO's: atari-game train --algo"),
        # Not an abbreviation of PPO's --n-steps: DQN's and IQN's flag, named as such; IQN's own, named as IQN's.
        (
            "ppo",
            ["--n-step", "3"],
            "unrecognized arguments: --n-step 3 (--n-step is DQN's and IQN's: atari-game train --algorithm dqn or iqn, "
            "or examples/dqn.py or iqn.py)",
        ),
        ("dqn", ["--kappa", "2"], "--kappa 2 (--kappa is IQN's: atari-game train --algorithm iqn, or examples/iqn.py)"),
        ("ppo", ["--total-frame", "5"], "unrecognized arguments: --total-frame 5 (closest: --total-frames)"),
        ("dqn", ["--seed", "-1"], "--seed must be at least 0, got -1"),
        ("dqn", ["--device", "cudaa"], "--device must be auto, cpu, cuda or cuda:N"),
    ]:
        with pytest.raises(SystemExit) as exit_:  # a usage error, not a traceback
            cli.main(["train", "--algorithm", algo, *option])
        error = capsys.readouterr().err
        assert exit_.value.code == 2 and expected in error, error
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_run_never_overwrites_a_run_and_resume_or_eval_need_a_real_checkpoint(tmp_path):
    import torch

    (tmp_path / "runs" / "Pong-1").mkdir(parents=True)
    (tmp_path / "runs" / "Pong-1" / "checkpoint.pt").write_bytes(b"hours of training")
    torch.save({"algo": "dqn", "config": {}}, tmp_path / "dqn.pt")
    for args, expected in [
        (["--game", "Pong"], "runs/Pong-1 holds a run already (runs/Pong-1/checkpoint.pt): --resume continues it"),
        # The game's name in the run directory is list_games' spelling, whatever the flag's.
        (["--game", "ALE/Pong-v5"], "runs/Pong-1 holds a run already (runs/Pong-1/checkpoint.pt)"),
        (["--game", "Pong", "--resume", "--seed", "2"], "--resume: there is no checkpoint runs/Pong-2/checkpoint.pt"),
        (["--eval", "missing.pt"], "--eval: there is no checkpoint missing.pt"),
        (["--eval", "dqn.pt"], "--eval dqn.pt is a dqn checkpoint: atari-game train --algorithm dqn --eval"),
        (["--eval", "runs/Pong-1/checkpoint.pt"], "is not a checkpoint.pt of atari-game train"),
    ]:
        result = atari_game("train", *args, cwd=tmp_path, timeout=120)
        assert result.returncode == 2 and expected in result.stderr, result.stderr
        # One line: the problem, without the trainer's usage block above it.
        assert result.stderr.startswith("atari-game train --algorithm ppo: error: ") and result.stderr.count("\n") == 1
    assert (tmp_path / "runs" / "Pong-1" / "checkpoint.pt").read_bytes() == b"hours of training"
    assert sorted(path.name for path in (tmp_path / "runs").iterdir()) == ["Pong-1"]


@pytest.mark.slow
def test_play_refuses_a_negative_seed_a_missing_or_foreign_checkpoint_and_a_video_that_is_no_mp4(tmp_path):
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.pt").write_text("a run's checkpoint")
    (tmp_path / "empty").mkdir()
    for args, expected, status in [
        (["--seed", "-1"], "argument --seed: the seed must be an integer >= 0, got '-1'", 2),
        (["--checkpoint", "missing.pt"], "argument --checkpoint: no such checkpoint file: missing.pt", 2),
        (["--checkpoint", "note.pt"], "argument --checkpoint: no such checkpoint file: note.pt (closest: notes.pt)", 2),
        (["--checkpoint", "run"], "argument --checkpoint: run is a folder; its .pt files: run/checkpoint.pt", 2),
        (["--checkpoint", "empty"], "argument --checkpoint: empty is a folder, with no .pt file in it", 2),
        (["--record", "b.gif"], "argument --record: the video must be an .mp4 file, got 'b.gif'", 2),
        (["--checkpoint", "notes.pt"], "notes.pt is not a checkpoint.pt of atari-game train", 2),
    ]:
        result = atari_game("play", "Breakout", *args, cwd=tmp_path, timeout=120)
        assert result.returncode == status and expected in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_video_goes_into_a_new_folder_and_one_that_cannot_be_written_is_an_error_not_silence(tmp_path):
    result = atari_game("play", "Pong", "--record", str(tmp_path / "new" / "x.mp4"), timeout=120)
    assert result.returncode == 0 and video_frames(tmp_path / "new" / "x.mp4") > 100, result.stderr
    (tmp_path / "notes.txt").write_text("a file, where the video's folder would be")
    result = atari_game("play", "Pong", "--record", str(tmp_path / "notes.txt" / "x.mp4"), timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    expected = (
        f"atari-game play: cannot write the video {tmp_path}/notes.txt/x.mp4: its folder cannot be made or written to"
    )
    assert result.stderr.strip() == expected


def test_unknown_game_is_a_usage_error_naming_the_closest():
    result = atari_game("play", "Breakot")
    assert result.returncode == 2
    assert "error: argument game: unknown game 'Breakot' (closest: Breakout" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_evaluate_and_report_refuse_what_they_cannot_do_before_doing_any_of_it(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.pt").write_text("a run's checkpoint")
    (tmp_path / "s.csv").write_text("algorithm,game,seed,score\nppo,pong,1,20\n")
    for args, expected in [
        (["evaluate", "run"], "argument CHECKPOINT: run is a folder; its .pt files: run/checkpoint.pt"),
        (
            ["evaluate", "run/checkpoint.pt", "--episodes", "2", "--num-envs", "3"],
            "argument --num-envs: at most --episodes (2)",
        ),
        (["evaluate", "run/checkpoint.pt", "--out", "s.csv"], "argument --out: s.csv is a file; name a folder"),
        (["evaluate", "run/checkpoint.pt", "--algorithm", "a|b"], "argument --algorithm: must be a non-empty name"),
        (["report", "s.csv", "--out", "s.csv/sub"], "s.csv/sub"),
        (["report", "s.csv", "--out", "s.csv"], "s.csv is a file: the report needs a folder"),
    ]:
        result = atari_game(*args, cwd=tmp_path, timeout=120)
        assert result.returncode == 2 and expected in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_evaluate_scores_under_a_named_protocol_only(capsys):
    # "none" would read as "no protocol", which evaluate does not do: left out, the run's own protocol is used.
    for name, expected in (
        ("none", "scores are under a protocol, machado or nature: leave --protocol out for the run's own"),
        ("natur", "unknown protocol 'natur' (did you mean 'nature'?); the protocols are machado, nature"),
    ):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["evaluate", __file__, "--protocol", name])
        assert exit_.value.code == 2
        assert f"error: argument --protocol: {expected}\n" in capsys.readouterr().err


def test_forwarded_commands_have_their_own_help(capsys):
    for command, option in (("train", "--total-frames"), ("bench", "--num-envs")):
        with pytest.raises(SystemExit) as exit_:
            cli.main([command, "--help"])
        assert exit_.value.code == 0 and option in capsys.readouterr().out


def test_train_runs_ppo_unless_told_dqn_or_iqn(capsys):
    # Each trainer's own options: PPO's clip coefficient, DQN's replay memory, IQN's quantile levels.
    helps = []
    for algo in ([], ["--algorithm", "dqn"], ["--algorithm", "iqn"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["train", *algo, "--help"])
        assert exit_.value.code == 0
        helps.append(capsys.readouterr().out)
    ppo, dqn, iqn = helps
    assert "--clip-coef" in ppo and "--buffer-size" not in ppo
    assert "--buffer-size" in dqn and "--double" in dqn and "--clip-coef" not in dqn and "--kappa" not in dqn
    assert "--buffer-size" in iqn and "--num-tau-samples" in iqn and "--kappa" in iqn and "--clip-coef" not in iqn
    with pytest.raises(SystemExit):
        cli.main(["train", "--algorithm", "sarsa"])
    assert "invalid choice: 'sarsa' (choose from 'ppo', 'dqn', 'iqn')" in capsys.readouterr().err


def test_a_missing_extra_names_what_to_install():
    # torch made unimportable, as on a machine without the train extra.
    code = "import sys; sys.modules['torch'] = None; from atari_game.cli import main; main(['train'])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert "atari-game train needs 'torch', which is not installed" in result.stderr
    # From the clone, as the docs install it (atari_game is not on PyPI), torch first and pinned.
    assert 'pip install torch==2.13.0 && pip install "atari_game[train]"' in result.stderr


def test_counts_take_the_forms_papers_write_them_in(tmp_path, monkeypatch):

    monkeypatch.chdir(tmp_path)  # parsing looks for a run to overwrite in runs/
    assert parse_args("ppo", ["--total-frames", "1e6", "--num-envs", "16"]).total_frames == 1_000_000
    config = parse_args("dqn", ["--total-frames", "2.5e6", "--buffer-size", "100_000", "--learning-starts", "8e4"])
    assert (config.total_frames, config.buffer_size, config.learning_starts) == (2_500_000, 100_000, 80_000)
    assert not (tmp_path / "runs").exists()


# A trainer's usage line: its flags are too many for one (--help lists them).
TRAINER_USAGE = "[-h] [--flag VALUE ...] (--help lists the flags)"


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        (["games", "--bogus"], "usage: atari-game games [-h]\n"),
        (["play", "Breakout", "--bogus"], "usage: atari-game play [-h] [--checkpoint CHECKPOINT]"),
        (["play", "Breakout", "--seed", "1.5"], "usage: atari-game play [-h]"),
        (["bench", "--bogus"], "usage: atari-game bench [-h] [--num-envs NUM_ENVS [NUM_ENVS ...]]"),
        (["bench", "--rounds", "0"], "usage: atari-game bench [-h]"),
        (["train", "--bogus"], f"usage: atari-game train --algorithm ppo {TRAINER_USAGE}\n"),
        (["train", "--algorithm", "dqn", "--bogus"], f"usage: atari-game train --algorithm dqn {TRAINER_USAGE}\n"),
        (["train", "--algorithm", "sarsa"], "usage: atari-game train [--algorithm {ppo,dqn,iqn}] [the trainer's flags"),
    ],
)
def test_a_usage_error_shows_its_commands_usage(command, usage, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(command)
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith(usage), error
    assert f"{usage.split()[1]} {command[0]}" in error.splitlines()[-1]  # "atari-game play: error: ..."


def test_an_unknown_game_names_the_command_that_lists_the_games(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for command in (["play", "Breakot"], ["train", "--game", "Breakot"], ["bench", "--game", "Breakot"]):
        with pytest.raises(SystemExit):
            cli.main(command)
        error = capsys.readouterr().err.splitlines()[-1]
        assert "--game: " in error or command[0] == "play"
        assert error.endswith(
            "unknown game 'Breakot' (closest: Breakout, Qbert, BankHeist); `atari-game games` lists all 104"
        )
    assert not (tmp_path / "runs").exists()


def test_train_help_gives_algo_then_the_trainers_flags(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--algorithm", "dqn", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert shown.startswith("usage: atari-game train [--algorithm {ppo,dqn,iqn}]")
    assert (
        "--algorithm {ppo,dqn,iqn} the trainer: atari_game/ppo.py, atari_game/dqn.py or atari_game/iqn.py "
        "(default: ppo)" in shown
    )
    assert "usage: atari-game train --algorithm dqn [-h]" in shown
    assert "--total-frames INT Emulator frames to train for, all envs together (4 per agent step)" in shown


def test_the_package_imports_without_a_cycle():
    # The command line's modules once imported each other (cli and training, cli and benchmark), held apart only by
    # imports inside functions, and training found the trainers by importlib: every import of one atari_game module
    # by another, at the top or in a function, goes one way, and none is by a name computed at run time.
    package = Path(cli.__file__).parent
    modules = {path.stem for path in package.glob("*.py")}
    graph, computed = {}, []
    for path in package.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__"
            ):  # fmt: skip
                name = node.args[0]
                if not (isinstance(name, ast.Constant) and not str(name.value).startswith("atari_game")):
                    computed.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "atari_game":
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("atari_game."):
                imported.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[1] for alias in node.names if alias.name.startswith("atari_game.")}
        graph[path.stem] = (imported & modules) - {path.stem}
    graphlib.TopologicalSorter(graph).prepare()  # a cycle raises CycleError, naming its modules
    assert not computed, f"atari_game modules imported by a computed name: {computed}"


def test_version_names_the_release_with_the_emulator_and_python(capsys):
    import atari_game

    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    release = re.search(r'^version = "(.+)"$', pyproject, re.MULTILINE).group(1)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and atari_game.__version__ == release
    shown = capsys.readouterr().out
    assert shown.startswith(f"atari-game {release} (ale-py {importlib.metadata.version('ale-py')}, gymnasium ")
    assert shown.endswith(f", Python {sys.version.split()[0]})\n")


def test_a_trainer_called_from_python_names_itself_in_its_errors_not_the_interpreters_script(capsys):
    # A notebook's kernel or `python -c` is sys.argv[0] there: the error names the function that was called.
    from atari_game.algorithms import main

    for name in ("ppo", "dqn", "iqn"):
        with pytest.raises(SystemExit) as exit_:
            main(name, ["--num-envs", "x"])
        lines = capsys.readouterr().err.splitlines()
        assert exit_.value.code == 2 and lines[0].startswith(f"usage: atari_game.algorithms.main('{name}') [-h]")
        assert lines[-1].startswith(f"atari_game.algorithms.main('{name}'): error: argument --num-envs: expected an")
