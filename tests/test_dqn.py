"""The DQN example: its counting in transitions, its TD targets, and a tiny run end to end (outputs, resume, eval)."""

import copy
import csv
import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from support import filled_buffer
from test_cli import steps_played, video_frames

from atari_game import dqn
from atari_game.algorithms import parse_args
from atari_game.checkpoints import save_checkpoint
from atari_game.replay import FrameReplay

DQN = Path(__file__).parent.parent / "examples" / "dqn.py"
# 4 envs, batches of 8; learning from the 100th transition on, a target update every 50, a row every 400 frames
# (100 transitions), epsilon falling over the whole run.
TINY = ["--num-envs", "4", "--batch-size", "8", "--buffer-size", "1000", "--learning-starts", "100"]
TINY += ["--target-network-frequency", "50", "--log-every", "400", "--checkpoint-every", "800"]
TINY += ["--exploration-fraction", "1"]


def run(cwd, *args, status=0):
    """examples/dqn.py with `args`, run in `cwd` (a tmp_path: never where a user's runs are), ending with `status`."""
    command = [sys.executable, str(DQN), *args]
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert result.returncode == status, result.stderr[-3000:]
    return result


def update_rows(run_dir):
    with (run_dir / "progress.csv").open() as file:
        return [row for row in csv.DictReader(file) if row["epsilon"]]


def test_gradient_steps_and_target_updates_count_transitions_of_all_envs():
    config = dqn.Config(learning_starts=5_000, train_frequency=4, target_network_frequency=1_000)
    # CleanRL's conditions on its global_step (one env): the reference every grouping must reproduce.
    learn = {t for t in range(20_000) if t > 5_000 and t % 4 == 0}
    target = {t for t in range(20_000) if t > 5_000 and t % 1_000 == 0}
    for num_envs in (1, 8, 24):
        events = [
            dqn.learning_events(config, t, t + num_envs, 5_000) for t in range(0, 20_000 - 20_000 % num_envs, num_envs)
        ]
        done = 20_000 - 20_000 % num_envs
        assert {t for step in events for t, event in step if event == "learn"} == {t for t in learn if t < done}
        assert {t for step in events for t, event in step if event == "target"} == {t for t in target if t < done}
        # Each learn event is one gradient step, so after learning starts num_envs / 4 of them per pool step.
        if num_envs == 8:
            assert {sum(event == "learn" for _, event in step) for step in events[700:]} == {2}
    # A resumed run learns again only past learning_starts more transitions (its memory starts empty).
    assert dqn.learning_events(config, 12_000, 12_008, 12_000 + 5_000) == []


@pytest.mark.parametrize(
    "variant", [{}, {"double": True}, {"n_step": 3}, {"prioritized": True}, {"double": True, "n_step": 3}]
)
def test_gradient_step_minimises_the_td_error_of_each_variant(variant):
    torch.manual_seed(0)
    config = dataclasses.replace(dqn.Config(total_frames=4_000, batch_size=8), **variant)
    q_network, target_network = dqn.QNetwork(4), dqn.QNetwork(4)
    # The reference: the same batch (same seed, same adds), the TD target written out from the papers.
    before, frozen_target = copy.deepcopy(q_network), copy.deepcopy(target_network)
    batch = filled_buffer(config, seed=5).sample(8, beta=config.beta + (1 - config.beta) * 100 / 1_000)
    with torch.no_grad():
        next_q = frozen_target(torch.from_numpy(batch.next_obs))
        # Double DQN: the online network picks the next action, the target network values it.
        picker = before(torch.from_numpy(batch.next_obs)) if config.double else next_q
        chosen = picker.argmax(1)
        bootstrap = next_q[torch.arange(8), chosen] * torch.from_numpy(~batch.dones).float()
        target = torch.from_numpy(batch.rewards) + torch.from_numpy(batch.discounts) * bootstrap
        q_taken = before(torch.from_numpy(batch.obs))[torch.arange(8), torch.from_numpy(batch.actions)]
        expected = (torch.from_numpy(batch.weights) * (target - q_taken) ** 2).mean().item()
    if config.n_step == 3:
        assert (batch.discounts < 0.99).any()  # some 3-step returns: discounts gamma**2 or gamma**3

    buffer = filled_buffer(config, seed=5)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=config.learning_rate)
    loss, _ = dqn.gradient_step(config, q_network, target_network, optimizer, buffer, torch.device("cpu"), 100)
    assert loss == pytest.approx(expected, rel=1e-5)
    # The step went down the TD error: the same batch's loss against the same targets is lower after it.
    with torch.no_grad():
        q_after = q_network(torch.from_numpy(batch.obs))[torch.arange(8), torch.from_numpy(batch.actions)]
        after = (torch.from_numpy(batch.weights) * (target - q_after) ** 2).mean().item()
    assert after < expected
    assert any(not torch.equal(a, b) for a, b in zip(q_network.parameters(), before.parameters(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(target_network.parameters(), frozen_target.parameters(), strict=True))
    if config.prioritized:  # the TD errors became the sampled transitions' priorities: the weights differ now
        assert len(np.unique(buffer.sample(64).weights)) > 2


@pytest.mark.slow
def test_train_resume_and_eval(tmp_path):
    run_dir = tmp_path / "run"
    first = run(tmp_path, "--total-frames", "1600", "--run-dir", str(run_dir), *TINY)  # 400 transitions of 4 envs
    chosen = first.stdout.split()[1]  # "precision bf16 (auto: ...)": what auto, the default, chose here
    assert chosen in ("fp32", "bf16")
    rows = update_rows(run_dir)
    assert [int(row["frames"]) for row in rows] == [400, 800, 1200, 1600]
    # Learning starts after transition 100 (0-based, as CleanRL's global_step): 104, 108, ... then 25 per row.
    assert [int(row["gradient_steps"]) for row in rows] == [0, 24, 25, 25]
    assert rows[0]["td_loss"] == ""
    for row in rows[1:]:
        assert row["precision"] == chosen  # on every update row
        for name in set(dqn.UPDATE_FIELDS) - {"precision"}:
            assert math.isfinite(float(row[name])), (name, row)
    # Epsilon falls linearly from 1 to 0.01 over the run's 400 transitions.
    assert [float(row["epsilon"]) for row in rows] == pytest.approx([1 - 0.99 * t / 400 for t in (100, 200, 300, 400)])
    saved = torch.load(run_dir / "checkpoint.pt")
    assert saved["algorithm"] == "dqn" and saved["steps"] == 400 and saved["frames"] == 1600
    assert (run_dir / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert video_frames(run_dir / "agent.mp4") > 10  # one whole game, one frame per agent step

    # --resume continues the frame count and the epsilon schedule (over the new budget's 600 transitions), and
    # learns on at once from the replay memory saved beside the checkpoint (replay.npz).
    run(tmp_path, "--total-frames", "2400", "--run-dir", str(run_dir), "--resume", "--no-video", *TINY)
    rows = update_rows(run_dir)
    assert [int(row["frames"]) for row in rows] == [400, 800, 1200, 1600, 2000, 2400]
    assert [int(row["gradient_steps"]) for row in rows[4:]] == [25, 25]
    assert [float(row["epsilon"]) for row in rows[4:]] == pytest.approx([1 - 0.99 * t / 600 for t in (500, 600)])

    result = run(tmp_path, "--eval", str(run_dir / "checkpoint.pt"))
    assert "Breakout: one game scored" in result.stdout
    assert video_frames(run_dir / "eval.mp4") == steps_played(result.stdout)  # a frame a step


@pytest.mark.slow
def test_the_variants_run_and_bad_arguments_are_usage_errors(tmp_path):
    variants = ["--double", "--n-step", "3", "--prioritized"]
    run(tmp_path, "--total-frames", "800", "--run-dir", str(tmp_path), *variants, *TINY)
    assert [int(row["gradient_steps"]) for row in update_rows(tmp_path)] == [0, 24]
    bad = run(tmp_path, "--learning-starts", "10", status=2)  # in tmp_path: runs/Breakout-1-dqn is free
    assert "--learning-starts 10 must be at least --batch-size + --num-envs x --n-step = " in bad.stderr
    # A run too short to reach its first gradient step (at transition 104) would play and never learn: refused.
    short = run(tmp_path, "--total-frames", "431", *TINY, status=2)
    assert (
        "--learning-starts 100 leaves this run no gradient step: its first is due at transition 104, and the run plays "
        "104 (--total-frames 431 in whole steps of its 4 envs, 4 frames each); raise --total-frames to at least 432 or "
        "lower --learning-starts"
    ) in short.stderr
    longer = parse_args("dqn", ["--total-frames", "432", "--run-dir", str(tmp_path / "longer"), *TINY])
    assert dqn.learning_events(longer, 0, longer.total_transitions, 100)[0] == (104, "learn")  # the least that learns
    too_short = dataclasses.replace(longer, total_frames=431)
    assert "learn" not in {event for _, event in dqn.learning_events(too_short, 0, too_short.total_transitions, 100)}


@pytest.mark.slow
def test_play_a_dqn_checkpoint(tmp_path):
    # An untrained agent's checkpoint, as the trainer writes it.
    q_network = dqn.QNetwork(4)
    optimizer, rng = torch.optim.Adam(q_network.parameters()), np.random.default_rng(0)
    save_checkpoint(
        tmp_path / "checkpoint.pt",
        dqn.checkpoint_state(q_network, q_network, optimizer, [rng.bit_generator.state], 0, dqn.Config()),
    )
    result = subprocess.run(
        [sys.executable, "-m", "atari_game", "play", "Breakout", "--checkpoint", "checkpoint.pt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    # It acts as --eval does, and says so: a game of an agent that explores is one draw, not evaluate's score.
    assert result.stdout.startswith("Breakout, trained agent (epsilon 0.01): one game scored")


def test_a_restarted_worker_s_envs_bootstrap_from_the_observation_their_lost_step_was_taken_in(tmp_path, monkeypatch):
    # A lost Ray node's envs are restarted and reported truncated, their observation the new game's first: the
    # transition stored for that step must bootstrap from where it was taken, not from another game's start.
    real_receive, real_add, calls, stored = dqn.receive, FrameReplay.add, [], []

    def receive(pool):
        next_obs, rewards, terminations, truncations, real_next_obs, info = real_receive(pool)
        calls.append(None)
        if len(calls) == 5:  # envs 1 and 3 restarted (info's arrays in the order the envs answered)
            info["worker_restarted"] = np.isin(info["env_id"], [1, 3])
            truncations[[1, 3]] = True
        return next_obs, rewards, terminations, truncations, real_next_obs, info

    def add(self, obs, actions, rewards, next_obs, terminations, truncations, valid=None):
        stored.append((obs.copy(), next_obs.copy(), truncations.copy()))
        return real_add(self, obs, actions, rewards, next_obs, terminations, truncations, valid)

    monkeypatch.setattr(dqn, "receive", receive)
    monkeypatch.setattr(FrameReplay, "add", add)
    dqn.train(
        dqn.Config(
            total_frames=160, num_envs=4, buffer_size=100, learning_starts=1000, run_dir=str(tmp_path), video=False
        )
    )
    obs, next_obs, truncations = stored[4]
    assert list(truncations) == [False, True, False, True]
    assert all(np.array_equal(next_obs[k], obs[k]) for k in (1, 3))
    assert not any(np.array_equal(next_obs[k], obs[k]) for k in (0, 2))  # the others as played: a frame on
    assert not any(np.array_equal(step[1][k], step[0][k]) for step in stored[:4] for k in range(4))


def test_rainbow_lite_is_the_default_and_cleanrl_is_one_flag_away(tmp_path):
    def parsed(*flags):  # (a new run's directory: the scratch directory holds a user's runs/Breakout-1-dqn)
        return parse_args("dqn", [*flags, "--run-dir", str(tmp_path / "new")])

    default, cleanrl = parsed(), parsed("--cleanrl")
    assert (default.double, default.n_step, default.prioritized) == (True, 3, True)
    assert (cleanrl.double, cleanrl.n_step, cleanrl.prioritized) == (False, 1, False)
    # It sets all three whatever else is given; each switch alone still turns one off.
    assert parsed("--cleanrl", "--double").double is False
    assert parsed("--no-prioritized").n_step == 3 and parsed("--no-prioritized").prioritized is False


def test_a_dqn_runs_line_says_that_atari_game_train_resumes_it_with_algo_dqn(tmp_path):
    # `atari-game train` takes PPO's flags unless told: the line of a DQN run names --algorithm dqn.
    from atari_game import dqn
    from atari_game.algorithms import interrupted

    (tmp_path / "run").mkdir()
    torch.save({"frames": 2048}, tmp_path / "run" / "checkpoint.pt")
    assert interrupted(dqn.Config(run_dir=str(tmp_path / "run")), "dqn", "SIGTERM") == (
        f"stopped (SIGTERM): {tmp_path}/run/checkpoint.pt holds the run at 2,048 frames; --resume --run-dir "
        f"{tmp_path}/run goes on (atari-game train: with --algorithm dqn)"
    )
