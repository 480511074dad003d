"""The PPO example runs end to end on a tiny budget: finite losses, every output written, resume and eval."""

import csv
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from support import all_gone, descendants
from test_cli import steps_played, video_frames

from atari_game.ppo import UPDATE_FIELDS

PPO = Path(__file__).parent.parent / "examples" / "ppo.py"
TINY = ["--num-envs", "4", "--n-steps", "16", "--n-minibatches", "2", "--n-epochs", "2", "--checkpoint-every", "512"]


def run(cwd, *args, status=0):
    """examples/ppo.py with `args`, run in `cwd` (a tmp_path: never where a user's runs are), ending with `status`."""
    command = [sys.executable, str(PPO), *args]
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert result.returncode == status, result.stderr[-3000:]
    return result


def update_rows(run_dir):
    with (run_dir / "progress.csv").open() as file:
        return [row for row in csv.DictReader(file) if row["policy_loss"]]


@pytest.mark.slow
def test_train_resume_and_eval(tmp_path):
    run_dir = tmp_path / "run"
    first = run(tmp_path, "--total-frames", "1024", "--run-dir", str(run_dir), *TINY)  # 4 updates of 4 envs x 16 x 4
    chosen = first.stdout.split()[1]  # "precision bf16 (auto: ...)": what auto, the default, chose here
    assert chosen in ("fp32", "bf16")
    rows = update_rows(run_dir)
    assert [int(row["frames"]) for row in rows] == [256, 512, 768, 1024]
    # What every update logs: the losses, entropy, approx-KL, clip fraction, frames/s and where the time went.
    for row in rows:
        assert row["precision"] == chosen  # on every update row
        for name in set(UPDATE_FIELDS) - {"precision"}:
            assert math.isfinite(float(row[name])), (name, row)
    assert (run_dir / "checkpoint.pt").stat().st_size > 1_000_000  # the Nature CNN's weights and Adam's state
    assert (run_dir / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert video_frames(run_dir / "agent.mp4") > 10  # one whole game, one frame per agent step

    # --resume continues the run as it was trained (its config comes from the checkpoint: no need to repeat TINY, and
    # a flag that would change the learning is refused), the frame count and the schedule, and appends to the log.
    refused = run(tmp_path, "--run-dir", str(run_dir), "--resume", "--n-steps", "32", status=2)
    assert "as it was trained, with --n-steps 16: drop the flags" in refused.stderr
    result = run(tmp_path, "--total-frames", "1536", "--run-dir", str(run_dir), "--resume", "--no-video")
    assert [int(row["frames"]) for row in update_rows(run_dir)] == [256, 512, 768, 1024, 1280, 1536]
    done = f"done: {run_dir}/progress.csv, learning_curve.png, checkpoint.pt\n"  # no video
    assert result.stdout.endswith(f"{done}to score its agent: atari-game evaluate {run_dir}/checkpoint.pt\n")

    result = run(tmp_path, "--eval", str(run_dir / "checkpoint.pt"))
    assert "Breakout: one game scored" in result.stdout
    assert video_frames(run_dir / "eval.mp4") == steps_played(result.stdout)  # a frame a step


@pytest.mark.slow
def test_sync_rollout_and_bad_arguments(tmp_path):
    run(tmp_path, "--total-frames", "256", "--run-dir", str(tmp_path / "sync"), "--no-async-envs", "--no-video", *TINY)
    assert len(update_rows(tmp_path / "sync")) == 1
    bad = run(tmp_path, "--num-envs", "3", status=2)  # in tmp_path: the default run directory runs/Breakout-1 is free
    assert "--async-envs plays two halves of the envs in turn: --num-envs 3 must be even (or" in bad.stderr


def test_a_trainer_run_where_the_test_stands_meets_a_users_earlier_run():
    # conftest.py runs every test where a user's runs are: a trainer run there (not in a tmp_path) is refused, as
    # test_sync_rollout_and_bad_arguments's bad-arguments run was after the README's first command.
    refused = run(None, "--num-envs", "3", status=2)
    assert "runs/Breakout-1 holds a run already (runs/Breakout-1/checkpoint.pt)" in refused.stderr


@pytest.mark.slow
@pytest.mark.parametrize("how", ["Ctrl-C", "SIGTERM"])
def test_ctrl_c_or_sigterm_stops_a_run_with_a_line_saying_how_to_go_on_and_no_traceback(tmp_path, how):
    run_dir = tmp_path / "run"
    # (-X faulthandler: a run that does not stop is made to show where every thread of it waits, by SIGABRT.)
    command = [sys.executable, "-X", "faulthandler", str(PPO), "--total-frames", "1e6", "--run-dir", str(run_dir)]
    command += ["--no-video", *TINY]
    # SIGTERM (a scheduler's, or `kill`'s) stops a run as Ctrl-C does, even a background job's, which ignores Ctrl-C
    # (the child keeps SIGINT ignored across exec). Ctrl-C's run starts as a terminal's would, SIGINT not ignored,
    # whatever this process inherited (pytest-xdist's workers, a background job's pytest, ignore it).
    ctrl_c = signal.signal(signal.SIGINT, signal.default_int_handler if how == "Ctrl-C" else signal.SIG_IGN)
    try:
        child = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, ctrl_c)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "checkpoint.pt").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # a few updates more: the run is between checkpoints
        pids = descendants(child.pid)
        child.send_signal(signal.SIGINT if how == "Ctrl-C" else signal.SIGTERM)
        try:
            _, stderr = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGABRT)
            where = child.communicate(timeout=30)[1][-6000:]
            raise AssertionError(f"still running 60 s after {how}:\n{where}") from None
    finally:
        child.kill()
    frames = torch.load(run_dir / "checkpoint.pt")["frames"]
    assert child.returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.splitlines()[-1] == (
        f"stopped ({how}): {run_dir}/checkpoint.pt holds the run at {frames:,} frames; "
        f"--resume --run-dir {run_dir} goes on"
    )
    assert pids and all_gone(pids, within=10)  # the run's workers (and the fork server) went with it
    # And goes on from there: the log keeps what the checkpoint holds, and the resumed run adds its next update.
    run(tmp_path, "--total-frames", str(frames + 256), "--run-dir", str(run_dir), "--resume")
    logged = [int(row["frames"]) for row in update_rows(run_dir)]
    assert logged == list(range(256, frames + 257, 256))


def test_sigterm_in_a_pool_step_waits_for_the_step_and_stops_the_run_where_ctrl_c_is_ignored():
    from atari_game.worker import interrupts_deferred, sigterm_as_ctrl_c

    received, done = [], []
    sigterm = signal.getsignal(signal.SIGTERM)
    ctrl_c = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a background job
    try:
        with pytest.raises(KeyboardInterrupt), sigterm_as_ctrl_c(received):
            with interrupts_deferred():  # what a pool step holds its books in
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)  # the signal waits for the block
                done.append("step")
            done.append("never")  # delivered when the block ended
    finally:
        signal.signal(signal.SIGINT, ctrl_c)
    assert done == ["step"] and received == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) == sigterm  # the run's handler goes with it


def test_a_worker_forked_within_a_run_still_ends_on_sigterm():
    from atari_game import Worker
    from atari_game.worker import sigterm_as_ctrl_c

    # A forked worker has the run's SIGTERM handler too; there it ends the worker, as SIGTERM ends any process.
    with sigterm_as_ctrl_c([]), Worker(0, game="Pong", start_method="fork") as worker:
        worker.reset()
        worker.process.terminate()
        worker.process.join(timeout=10)
        assert worker.process.exitcode == -signal.SIGTERM


def test_the_learning_curve_leaves_matplotlib_as_the_caller_had_it(tmp_path):
    # A notebook's backend stays its own: the curve is drawn without pyplot (which would take "Agg" for good).
    import matplotlib

    from atari_game.run_log import plot_learning_curve

    callers = matplotlib.get_backend()
    matplotlib.use("svg")  # a backend the caller chose, which the old matplotlib.use("Agg") replaced
    try:
        plot_learning_curve([(400, 1.0, 25), (800, 3.0, 30)], tmp_path / "curve.png", "PPO on Breakout")
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(callers)
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_ctrl_c_before_the_first_checkpoint_says_there_is_nothing_to_resume(tmp_path):
    from atari_game import ppo
    from atari_game.algorithms import interrupted

    config = ppo.Config(run_dir=str(tmp_path / "run"))
    assert interrupted(config, "ppo") == (
        f"stopped (Ctrl-C) before the run's first checkpoint: {tmp_path}/run holds nothing to resume"
    )


def test_a_replay_memory_given_as_a_checkpoint_names_the_checkpoint_beside_it(tmp_path):
    from atari_game.checkpoints import load_checkpoint

    (tmp_path / "run").mkdir()
    archive = r"replay\.npz is a numpy archive \(a DQN run's replay memory\?\), not a checkpoint"
    with pytest.raises(ValueError, match=archive + "$"):  # no checkpoint beside it: none named
        load_checkpoint(tmp_path / "run" / "replay.npz")
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"a run's checkpoint")
    with pytest.raises(ValueError, match=archive + f": the run's checkpoint is {tmp_path}/run/checkpoint\\.pt$"):
        load_checkpoint(tmp_path / "run" / "replay.npz")
