"""The benchmark scripts read both trainers' outputs right and fit the parent's costs right (the runs themselves
are too long for CI)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

import ppo_learning
import ppo_speed

# What CleanRL's ppo_atari.py prints: one line per finished game (its return is an array), SPS every update.
FAKE_CLEANRL = """
import sys
assert sys.argv[1:] == ["--env-id", "BreakoutNoFrameskip-v4", "--seed", "3", "--total-timesteps", "2048"], sys.argv
print("global_step=96, episodic_return=[2.]")
print("SPS: 180")
print("global_step=1800, episodic_return=[11.]")
print("SPS: 175")
"""


def test_cleanrl_games_and_speed_are_read_from_its_output(tmp_path):
    script = tmp_path / "ppo_atari.py"
    script.write_text(FAKE_CLEANRL)
    run = ppo_speed.cleanrl(sys.executable, str(script), updates=2, seed=3)
    # Its global_step counts agent steps: 4 emulator frames each. The last SPS is the run's.
    assert run == ppo_speed.Run(175.0, [(384, 2.0), (7200, 11.0)])


def test_learning_report_gives_first_and_last_twenty_and_each_100k(capsys):
    games = [(10_000 * k, float(k)) for k in range(1, 31)]  # returns 1..30 at 10k..300k frames
    ppo_learning.report("x", ppo_speed.Run(250.0, games), frames=300_000)
    line = capsys.readouterr().out
    assert "30 games; mean of the first 20 10.50, of the last 20 20.50" in line
    assert "per 100k frames: 5.5, 15.5, 25.5" in line and "250 agent steps/s" in line


def test_the_parent_fit_recovers_its_costs_and_the_ceiling_follows_from_them():
    from atari_game.benchmark import ceiling, fit_parent

    grid = [
        {"workers": w, "envs": n, "parent_us_per_step": 30.0 + 4.0 * w + 0.5 * n} for w in (2, 8, 64) for n in (64, 256)
    ]
    assert [round(cost, 9) for cost in fit_parent(grid)] == [30.0, 4.0, 0.5]
    assert round(ceiling((30.0, 4.0, 0.5), 64, 256), 6) == round(256 / (30 + 256 + 128) * 1e6, 6)
