"""The spellings of 0.1 that 0.2 renamed, each taken for one more release with a word saying its new name."""

import subprocess
import sys

import pytest

from atari_game import GamePool, cli
from atari_game.algorithms import parse_args


def test_a_pool_takes_n_envs_with_a_warning_and_needs_a_count():
    with pytest.warns(FutureWarning, match=r"n_envs is now num_envs \(n_envs is taken until 0\.3\)"):
        pool = GamePool(n_envs=2, game="Pong")
    with pool:
        assert pool.num_envs == 2 and pool.reset()[0].shape == (2, 4, 84, 84)
    with pytest.raises(TypeError, match=r"GamePool\(num_envs, game\): how many envs is missing"):
        GamePool(game="Pong")
    with pytest.warns(FutureWarning), pytest.raises(TypeError, match=r"num_envs and n_envs \(its old name\) are both"):
        GamePool(2, n_envs=2, game="Pong")


def test_a_trainer_takes_n_envs_and_train_takes_algo_with_a_note(tmp_path, capsys):
    config = parse_args("dqn", ["--n-envs", "4", "--run-dir", str(tmp_path / "run")])
    assert config.num_envs == 4
    assert "--n-envs is now --num-envs (--n-envs is taken until 0.3)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--algo", "dqn", "--help"])
    shown = capsys.readouterr()
    assert exit_.value.code == 0 and "--buffer-size" in shown.out
    assert "atari-game train: --algo is now --algorithm (--algo is taken until 0.3)" in shown.err
    assert "--algo " not in shown.out and "--n-envs" not in shown.out  # the old spellings are not offered


@pytest.mark.parametrize("command", [["evaluate", "--episodes", "2"], ["bench", "--seconds", "0.01", "--rounds", "1"]])
def test_evaluate_and_bench_take_envs_as_num_envs_with_a_note(tmp_path, command):
    # Evaluate's --envs 3 against --episodes 2 is refused under the new name: the value reached the new flag.
    arguments = [*command, "--envs", "3"]
    if command[0] == "evaluate":
        (tmp_path / "run.pt").write_bytes(b"")
        arguments.append("run.pt")
    else:  # (and bench stops at a system it does not know, before measuring)
        arguments += ["--systems", "nothing"]
    result = subprocess.run(
        [sys.executable, "-m", "atari_game", *arguments], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert f"atari-game {command[0]}: --envs is now --num-envs (--envs is taken until 0.3)" in result.stderr
    assert result.returncode == 2
    if command[0] == "evaluate":
        assert "atari-game evaluate: error: argument --num-envs: at most --episodes (2), got 3" in result.stderr
