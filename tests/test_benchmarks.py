"""The benchmark scripts read both trainers' outputs right and fit the parent's costs right (the runs themselves
are too long for CI)."""

import argparse
import json
import os
import subprocess
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

import dqn_final_agents
import dqn_learning
import dqn_speed
import mechanisms
import numpy as np
import parent_cpu
import ppo_learning
import ppo_speed
import precision_learning
import pytest
import restart_states
import sync_breakdown
import torch
import update_breakdown
from torch import nn

from atari_game import Game, GamePool
from atari_game.benchmark import game_options_json, our_game
from atari_game.dqn import Config
from atari_game.pool_worker import GameBlock
from atari_game.training import game_options
from atari_game.worker import available_cores

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


# What CleanRL's dqn_atari.py prints: a line per whole game, and past learning_starts "SPS" every 100 steps.
FAKE_CLEANRL_DQN = """
import sys
expected = ["--seed", "3", "--total-timesteps", "1000", "--buffer-size", "1000", "--learning-starts", "200",
            "--exploration-fraction", "0.4"]
assert sys.argv[1:] == expected, sys.argv
print("global_step=150, episodic_return=[1.]")
print("SPS: 300")  # global_step 300: 1 s
print("SPS: 200")  # global_step 400: 2 s
print("global_step=420, episodic_return=[4.]")
print("SPS: 125")  # global_step 500: 4 s
"""


def test_cleanrl_dqn_is_launched_with_the_settings_and_read_from_its_output(tmp_path):
    script = tmp_path / "cleanrl" / "dqn_atari.py"
    script.parent.mkdir()
    script.write_text(FAKE_CLEANRL_DQN)
    options = dqn_speed.dqn_options(1_000, 200, 1_000, 0.4, seed=3)
    run = dqn_speed.cleanrl(sys.executable, str(script), options, tmp_path / "work")
    # The last SPS is end to end; from learning starts on, 200 steps (300 to 500) took 3 s. Frames: 4 a step.
    assert (run.steps_per_s, run.learning_steps_per_s) == (125.0, pytest.approx(200 / 3))
    assert run.games == [(600, 1.0), (1680, 4.0)] and run.peak_rss_mb > 0


def test_our_dqn_run_is_read_from_its_progress_csv(tmp_path):
    rows = [
        "frames,seconds,game_return,game_length,epsilon,frames_per_second,act_seconds,env_seconds,store_seconds,learn_seconds",
        "400,1.0,,,0.5,400,0.25,0.25,0.125,0.5",
        "440,,3.0,120,,,,,,",
        "800,3.0,,,0.01,266.7,0.125,0.125,0.125,1.75",
        "1200,5.0,,,0.01,240,0.125,0.125,0.125,1.75",
    ]
    (tmp_path / "progress.csv").write_text("\n".join(rows) + "\n")
    run = dqn_speed.read_progress(tmp_path / "progress.csv", learning_starts=200)  # 800 frames on: 100 steps in 2 s
    assert run == dqn_speed.Run(
        60.0, 50.0, [(440, 3.0)], seconds={"act": 0.5, "env": 0.5, "store": 0.375, "learn": 4.0}
    )
    assert dqn_speed.where_the_time_went([run]) == "act 9 %, env 9 %, store 7 %, learn 74 %"


def test_dqn_learning_report_adds_speed_and_memory(capsys):
    games = [(10_000 * k, float(k)) for k in range(1, 31)]
    dqn_learning.report("x", dqn_speed.Run(150.0, 120.0, games, peak_rss_mb=2_345.6), frames=300_000)
    out = capsys.readouterr().out
    assert "30 games; mean of the first 20 10.50, of the last 20 20.50" in out and "150 agent steps/s" in out
    assert "x: 120 agent steps/s from learning starts on; peak RSS 2,346 MB" in out
    assert dqn_speed.cleanrl_peak_rss("\tMaximum resident set size (kbytes): 2048000\n") == 2000.0


def test_dqn_learning_means_over_seeds_and_their_difference(capsys):
    # Two runs a side; the last 20 games of each return r (20 of them), the first 10 return 0.
    def run(r: float) -> dqn_speed.Run:
        return dqn_speed.Run(100.0, 90.0, [(10_000 * k, 0.0 if k <= 10 else r) for k in range(1, 31)])

    dqn_learning.summarize("x", [run(10.0), run(20.0)], frames=300_000)
    dqn_learning.compare([run(10.0), run(20.0)], [run(12.0), run(14.0)])
    out = capsys.readouterr().out
    # The bins: games at 10k..100k (0), 110k..200k (10 and 20: mean 15), 210k..300k (15).
    assert "x, mean of 2 runs: last 20 15.0 (10.0 / 20.0); per 100k frames: 0.0, 15.0, 15.0" in out
    # 15 - 13 = +2.0; standard error sqrt(50 / 2 + 2 / 2) = 5.1.
    assert "last 20, atari_game - CleanRL: +2.0 (standard error 5.1; within one standard error)" in out


def test_sync_breakdown_splits_each_steps_wall_time_from_every_workers_stamps(monkeypatch):
    # The stamping wrappers go again after the test.
    monkeypatch.setattr(GameBlock, "run", GameBlock.run)
    stamps = sync_breakdown.shared_stamps()
    sync_breakdown.install_stamps(stamps)
    row = sync_breakdown.breakdown(our_game("Pong"), 4, 30, stamps)  # raises if a worker missed a step's stamp
    assert row["workers"] == min(4, available_cores())
    assert row["work"] > 0 and row["waiting"] >= 0 and row["work"] + row["waiting"] < row["wall"]
    assert 0 < row["between"] < row["wall"] and 0 <= row["restart_steps"] <= 1
    assert row["alone"] > 0  # one worker's share of the Pong games, stepped in this process


def test_mechanisms_measures_each_side_in_a_process_of_its_own(capsys, monkeypatch):
    # Each mechanism switched off in a child of its own: this process keeps them all.
    for mechanism in (None, *mechanisms.MECHANISMS):
        assert mechanisms.run_side(mechanism, "Pong", 2, 0.2) > 0
    assert GamePool._step_all is not GamePool._step_each
    monkeypatch.setattr(sys, "argv", ["mechanisms.py", "--mechanisms", "the-watch", "--envs", "2", "--rounds", "2",
                                      "--seconds", "0.2", "--game", "Pong"])  # fmt: skip
    mechanisms.main()
    assert "the-watch         N=  2: with " in capsys.readouterr().out


def test_a_game_restart_costs_more_than_a_step():
    # ALE's reset_game emulates ~70 frames and the NOOP start up to 30 more: a step emulates 4. (Seaquest: Breakout
    # restores the state its restarts reach, FIXED_RESTART_GAMES, so there only the NOOP start remains.)
    restart, play = sync_breakdown.restart_cost(our_game("Seaquest"), plays=50, restarts=5)
    assert restart > 5 * play > 0


def test_throughput_benchmark_plays_the_game_asked_for_with_all_its_actions(tmp_path, capsys):
    from atari_game.benchmark import main, measure

    drawn = []
    measure(drawn.append, 3, 6, 0.05, np.random.default_rng(0))
    assert {int(action) for actions in drawn for action in actions} == set(range(6))  # Pong's 6, not Breakout's 4
    main(["--envs", "2", "--rounds", "1", "--seconds", "0.3", "--systems", "atari_game GamePool",
          "--game", "space_invaders", "--json", str(tmp_path / "t.json")])  # fmt: skip
    assert "SpaceInvaders, N=2: agent steps/s" in capsys.readouterr().out
    assert json.loads((tmp_path / "t.json").read_text())["game"] == "SpaceInvaders"
    with pytest.raises(SystemExit):
        main(["--game", "Pongg"])
    assert "unknown game 'Pongg' (closest: Pong" in capsys.readouterr().err


def test_ratios_are_paired_round_by_round_and_summarised_with_their_spread():
    from atari_game.benchmark import describe_ratios, paired_ratios

    ours = [{"steps_per_s": rate} for rate in (90.0, 200.0, 120.0)]
    theirs = [{"steps_per_s": rate} for rate in (100.0, 160.0, 120.0)]  # the machine got faster in round 2
    ratios = paired_ratios(ours, theirs)
    assert ratios.tolist() == [0.9, 1.25, 1.0]
    assert describe_ratios(ratios) == "1.00x (0.90-1.25, 2/3)"  # round 3's tie counts as at least as fast
    with pytest.raises(ValueError):  # rounds must pair up
        paired_ratios(ours, theirs[:2])


def test_restart_states_tells_games_that_restart_to_one_state_from_those_that_do_not(capsys, monkeypatch):
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
    args = ["--resets", "20", "--histories", "3", "--plays", "300", "--games", "Breakout", "Alien"]
    monkeypatch.setattr(sys, "argv", ["restart_states.py", *args])
    restart_states.main()
    out = capsys.readouterr().out
    assert "1 of 2 games restart to one state: breakout\nin FIXED_RESTART_GAMES but not printed: none" in out


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


def test_parent_cpu_compares_a_revision_exported_from_git_with_this_checkout(tmp_path):
    from atari_game.benchmark import OUR_GAME

    parent_cpu.export("HEAD", tmp_path)
    assert (tmp_path / "atari_game" / "pool.py").is_file()
    for source in (tmp_path, parent_cpu.REPO):  # each side imports its own package, or run_side refuses
        for loop in parent_cpu.LOOPS:
            result = parent_cpu.run_side(source, loop, 2, 5, {**OUR_GAME, "n_workers": 1})
            assert result["package"] == str(source / "atari_game")
            assert result["user_us"] + result["system_us"] > 0 and result["steps_per_s"] > 0


@pytest.mark.skipif(os.geteuid() != 0, reason="a CPU cgroup needs root")
def test_parent_cpu_can_slow_the_first_worker_down_with_a_cpu_cgroup():
    from atari_game.benchmark import OUR_GAME

    try:
        tasks = parent_cpu.slow_cgroup(0.5)
    except SystemExit as error:  # root, but no writable cgroup cpu controller (a container)
        pytest.skip(str(error))
    try:
        result = parent_cpu.run_side(parent_cpu.REPO, "sync", 4, 20, {**OUR_GAME, "n_workers": 2}, tasks)
        assert result["steps_per_s"] > 0  # (measure checks that the worker went into the cgroup)
        assert not Path(tasks).read_text().split()  # and the worker is gone with its pool
    finally:
        parent_cpu.remove_cgroup(tasks)


def test_benchmark_options_are_a_json_object_of_game_options_and_anything_else_says_what_to_write():
    assert game_options_json('{"life_loss": "terminal", "fire_reset": true}') == {
        "life_loss": "terminal",
        "fire_reset": True,
    }
    for text, message in (("life_loss=terminal", "not JSON"), ('["terminal"]', "a JSON object")):
        with pytest.raises(argparse.ArgumentTypeError, match=message) as error:
            game_options_json(text)
        assert '{"life_loss": "terminal", "fire_reset": true}' in str(error.value)


def test_precision_learning_reads_a_finished_run_instead_of_running_it_again(tmp_path):
    run_dir = tmp_path / "fp32-1"
    run_dir.mkdir()
    (run_dir / "out.txt").write_text(f"done: {run_dir}/progress.csv, learning_curve.png, checkpoint.pt\n")
    (run_dir / "progress.csv").write_text(
        "frames,seconds,game_return,game_length,frames_per_second\n100,,2.0,10,\n4096,1.0,,,4000\n160,,3.5,12,\n"
    )
    # Had it run, the one-update budget of 4096 frames and --algo ppo would have rewritten the files.
    run = precision_learning.trained("ppo", 4096, 1, "fp32", run_dir)
    assert run == ppo_speed.Run(1000.0, [(100, 2.0), (160, 3.5)])


@pytest.mark.parametrize("rainbow_lite", [False, True])
def test_precision_learning_runs_dqn_as_cleanrl_or_with_its_default_rainbow_lite_switches(
    tmp_path, monkeypatch, rainbow_lite
):
    commands = []

    def run_child(command, output):  # the run, as the trainer would leave it
        commands.append(command)
        (tmp_path / "progress.csv").write_text(
            "frames,seconds,game_return,game_length,frames_per_second\n4096,1.0,,,4000\n"
        )

    monkeypatch.setattr(precision_learning, "run_child", run_child)
    precision_learning.trained("dqn", 4096, 1, "bf16", tmp_path, threads=1, rainbow_lite=rainbow_lite)
    (command,) = commands
    assert ("--cleanrl" in command) != rainbow_lite
    assert command[command.index("--precision") + 1] == "bf16" and command[command.index("--torch-threads") + 1] == "1"
    assert command[command.index("--buffer-size") + 1] == "250000"


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


def test_agent_gif_shows_the_checkpoints_agent_playing_in_colour_at_the_games_speed(tmp_path):
    from PIL import Image

    from atari_game import ppo

    config = ppo.Config(game="Pong")
    agent = ppo.build_agent(config.game, torch.device("cpu"))
    optimizer = torch.optim.Adam(agent.parameters())
    ppo.save_checkpoint(tmp_path / "checkpoint.pt", ppo.checkpoint_state(agent, optimizer, 0, 0, config))
    script = Path(__file__).parent.parent / "benchmarks" / "agent_gif.py"
    command = [sys.executable, str(script), str(tmp_path / "checkpoint.pt"), str(tmp_path / "a.gif"), "--seconds", "3"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "a.gif: 23 frames (3 s)" in result.stdout  # 45 agent steps of 4 frames in 3 s, every second one shown
    gif = Image.open(tmp_path / "a.gif")
    # The emulator's colour screen; each shown frame lasts 2 agent steps of 4 frames at 60 Hz (GIFs count in 10 ms).
    assert gif.size == (160, 210) and gif.mode == "P" and gif.info["duration"] == 130
    assert gif.n_frames > 5
