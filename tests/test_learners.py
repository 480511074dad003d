"""--learners K: data-parallel learners placed by Ray Train on the two-node Ray cluster of the Ray pool's tests (this
machine): PPO's update the very one of a single learner, the learners' weights identical, DQN's learners each with
a memory of its own envs, a learner killed mid-run, and bad input, each an error naming the fix."""

import contextlib
import csv
import signal
import socket
import subprocess
import sys
import time
import types

import learners_group
import psutil
import pytest
import ray
import torch
import torch.multiprocessing
from support import DQN_TINY, PPO_TINY, command_line, loopback

from atari_game import dqn, learners, ppo
from atari_game.algorithms import parse_args
from atari_game.replay import FrameReplay

# The largest difference allowed between the weights of 2 learners and of 1 after 3 PPO updates. The two compute the
# same sums in another order (each learner sums its share of a minibatch, then the all-reduce adds the shares), so
# they differ by float32 rounding: about 1e-7 of a value per sum, a few sums deep per weight per update, and Adam
# divides each step by the gradient's running scale plus eps 1e-5, which bounds how far it magnifies a rounding
# difference. Measured: 7.5e-7; 1e-5 leaves a margin of 13x, and is still 25x below one Adam step (lr 2.5e-4).
WEIGHT_TOLERANCE = 1e-5


def rows(run_dir):
    with (run_dir / "progress.csv").open() as file:
        return list(csv.DictReader(file))


def update_rows(run_dir):
    return [row for row in rows(run_dir) if row["frames_per_second"]] if (run_dir / "progress.csv").exists() else []


# Before the runs below: after a Ray Train run in this process, Ray's count of free CPUs (ray.available_resources)
# has hung in two runs of three here (train_on_learners then stops with an error after 30 s).
def test_more_learners_than_the_cluster_can_place_is_an_error_in_seconds_leaving_nothing(cluster, tmp_path):
    config = ppo.Config(**PPO_TINY, ray=cluster.address, learners=5, run_dir=str(tmp_path / "run"))
    start = time.monotonic()
    with pytest.raises(learners.LearnersFailed) as error:
        learners.train_on_learners(config, ppo.train, tmp_path / "run", 5, cluster.address)
    assert time.monotonic() - start < 30
    assert str(error.value) == (
        f"--learners 5 needs a CPU for each learner, and the Ray cluster at {cluster.address} has 4 free (of 4): use "
        "--learners 4 or fewer, or add nodes"
    )
    assert not ray_train_workers() and ray.available_resources().get("CPU") == 4


def test_two_learners_compute_the_update_of_one(cluster, tmp_path):
    # 3 updates of 4 envs: one learner here, and 2 learners of 2 envs placed by Ray Train (one per node).
    config = ppo.Config(**{**PPO_TINY, "total_frames": 3 * 4 * 64})
    ppo.train(ppo.Config(**{**vars(config), "run_dir": str(tmp_path / "one")}))
    shared = ppo.Config(**{**vars(config), "run_dir": str(tmp_path / "two"), "ray": cluster.address, "learners": 2})
    ctrl_c = signal.getsignal(signal.SIGINT)
    learners.train_on_learners(shared, ppo.train, tmp_path / "two", 2, cluster.address)
    assert signal.getsignal(signal.SIGINT) is ctrl_c  # Ray Train's own handler not left behind

    one, two = torch.load(tmp_path / "one/checkpoint.pt"), torch.load(tmp_path / "two/checkpoint.pt")
    difference = max((one["agent"][name] - two["agent"][name]).abs().max().item() for name in one["agent"])
    assert 0 < difference < WEIGHT_TOLERANCE, difference  # (0: a bit-for-bit copy would be a sign of a mix-up)
    # The same games, and the same losses: each update's statistics are the whole minibatch's, not a learner's.
    updates = {name: update_rows(tmp_path / name) for name in ("one", "two")}
    assert len(updates["two"]) == 3 and [row["frames"] for row in updates["two"]] == ["256", "512", "768"]
    for a, b in zip(updates["one"], updates["two"], strict=True):
        for statistic in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"):
            assert float(b[statistic]) == pytest.approx(float(a[statistic]), rel=1e-4, abs=1e-6), statistic
    games = {
        name: sorted((row["frames"], row["game_return"], row["game_length"]) for row in rows(tmp_path / name))
        for name in updates
    }
    assert games["two"] == games["one"]
    # The envs: 2 worker processes of each learner (its 2 CPUs, 2 pools of 1 env), on the 2 nodes.
    assert {(row["env_nodes"], row["env_workers"]) for row in updates["two"]} == {("2", "4")}
    assert float(updates["two"][-1]["sync_seconds"]) > 0 and float(updates["one"][-1]["sync_seconds"]) == 0
    # Ray Train keeps the last checkpoint, the one the run's directory holds.
    [kept] = (tmp_path / "two/ray_train").glob("checkpoint_*/checkpoint.pt")
    assert torch.equal(torch.load(kept)["agent"]["actor.weight"], two["agent"]["actor.weight"])


def test_the_learners_collectives_give_the_whole_minibatchs_values_on_every_learner():
    with socket.socket() as probe:  # a free port on loopback for the group's rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    results = torch.multiprocessing.Manager().dict()
    torch.multiprocessing.spawn(learners_group.ranks_in_a_group, args=(port, results), nprocs=2)
    # What one process computes from the whole minibatch.
    generator = torch.Generator().manual_seed(0)
    values, inputs = torch.randn(12, generator=generator), torch.randn(12, 5, generator=generator)
    minibatch, model = torch.tensor([11, 0, 5, 6, 9, 2]), torch.nn.Linear(5, 1)
    torch.manual_seed(0)
    model.reset_parameters()
    ((model(inputs[minibatch]).squeeze(-1) - values[minibatch]) ** 2).mean().backward()
    for rank in (0, 1):
        # As floats: pytest 9.2's approx refuses a tuple of tensors (9.0 took it).
        whole = (values[minibatch].mean().item(), values[minibatch].std().item())
        assert results[rank]["mean_std"] == pytest.approx(whole, 1e-6)
        assert torch.allclose(torch.tensor(results[rank]["gradient"]), model.weight.grad, atol=1e-6)
        assert results[rank]["count"] == 6  # the shares: 2 and 4 samples, every sample once
    assert results[0]["gradient"] == results[1]["gradient"]  # bit for bit
    # A single bit of difference between the learners' weights is found, on both, at the check after it.
    for rank in (0, 1):
        assert results[f"error {rank}"].startswith("the learners' weights differ after the change (digests by rank: [")


def test_a_learners_share_of_a_minibatch_is_its_envs_samples_in_its_own_rollout():
    # A rollout of 3 steps x 6 envs, flattened step-major; learner r of 3 holds envs 2r and 2r + 1.
    minibatch = torch.tensor([17, 0, 7, 12, 3, 8, 14])  # (step, env): (2,5) (0,0) (1,1) (2,0) (0,3) (1,2) (2,2)
    shares = [learners.Learners(rank=rank, count=3, num_envs=6).share(minibatch).tolist() for rank in range(3)]
    # In each learner's rollout of 3 steps x 2 envs: (step, env - 2r) flattened, in the minibatch's order.
    assert shares == [[0, 3, 4], [1, 2, 4], [5]]
    assert learners.Learners(num_envs=6).share(minibatch).tolist() == minibatch.tolist()


@pytest.mark.parametrize(
    "trainer, flags, problem",
    [
        (ppo, ["--learners", "2"], "--learners 2 needs --ray ADDRESS, the cluster Ray Train places the learners on"),
        (ppo, ["--learners", "3", "--ray", "local"], "--num-envs 8 must divide among --learners 3"),
        (ppo, ["--learners", "2", "--ray", "local", "--num-envs", "6"], "--num-envs 6 / --learners 2 must be even"),
        (dqn, ["--learners", "2", "--ray", "local", "--batch-size", "33"], "batch_size 33 must divide among"),
        (ppo, ["--learners", "-1", "--ray", "local"], "learners must be"),
    ],
)
def test_bad_learners_are_usage_errors(tmp_path, capsys, trainer, flags, problem):
    with pytest.raises(SystemExit) as exit_:
        parse_args(trainer.ALGORITHM.name, [*flags, "--run-dir", str(tmp_path / "run")])
    assert exit_.value.code == 2 and problem in capsys.readouterr().err


def test_without_ray_train_the_error_names_the_extra(monkeypatch):
    def missing(name):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(learners, "importlib", types.SimpleNamespace(import_module=missing))  # (this module's alone)
    assert learners.learners_problem(2, "local", 8) == learners.MISSING
    assert learners.MISSING.endswith('its dependencies): pip install "atari_game[ray]"')


def ray_train_workers():
    """The Ray Train learners of this test's cluster, whose processes descend from this one (another pytest worker's
    or a user's Ray on the machine is not counted)."""
    found = []
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if "ray::RayTrainWorker" in " ".join(process.cmdline()):
                found.append(process)
    return found


def listening(processes):
    """The addresses `processes` listen on (those still running)."""
    found = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            found += [c.laddr.ip for c in process.net_connections("inet") if c.status == psutil.CONN_LISTEN]
    return found


@pytest.mark.timing
def test_dqn_learners_each_with_its_memory_survive_a_learner_killed_mid_run(cluster, tmp_path):
    # 2 DQN learners of 2 envs each, from the command line, a checkpoint every 2 rows; one learner killed after 3 rows.
    run_dir, total = tmp_path / "run", 4000
    command = [sys.executable, "-m", "atari_game", "train", "--algorithm", "dqn", "--ray", cluster.address]
    command += command_line(DQN_TINY)
    command += [
        "--learners",
        "2",
        "--torch-threads",
        "1",
        "--no-video",
        "--total-frames",
        str(total),
        "--run-dir",
        str(run_dir),
    ]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 200
        while len(update_rows(run_dir)) < 3 and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
        [victim, other] = ray_train_workers()
        # The learners (the group's rendezvous store, gloo's sockets) and the whole cluster listen on loopback only.
        learners_listening = listening([victim, other])
        everything = listening(psutil.Process().children(recursive=True))
        assert len(learners_listening) >= 3 and len(everything) >= 10
        assert all(map(loopback, everything)), everything
        log = (run_dir / "progress.csv").stat().st_ino
        victim.kill()
        killed = time.monotonic()
        # The restarted learners write progress.csv anew (up to their checkpoint): a new file.
        while (run_dir / "progress.csv").stat().st_ino == log and run.poll() is None:
            time.sleep(0.2)
        restarted = time.monotonic() - killed
        stdout, stderr = run.communicate(timeout=250)
        done = time.monotonic() - killed
    finally:
        run.kill()
    assert run.returncode == 0, stderr[-3000:]
    print(f"a learner killed after 3 rows: the learners restarted {restarted:.1f} s later, the run done {done:.1f} s")
    assert restarted < 120
    done_lines = f"done: {run_dir}/progress.csv, learning_curve.png, checkpoint.pt\n"
    assert stdout.endswith(f"{done_lines}to score its agent: atari-game evaluate {run_dir}/checkpoint.pt\n")
    # Restarted from the checkpoint at 3,200 frames: every row once, each with the run's count of gradient steps
    # (25 per 100 transitions, all learners together) once learning started, after 100 transitions.
    updates = update_rows(run_dir)
    assert [int(row["frames"]) for row in updates] == list(range(400, total + 1, 400))
    assert [int(row["gradient_steps"]) for row in updates] == [0, 24] + [25] * (len(updates) - 2)
    # Each learner's memory holds its own 2 envs' transitions: half the run's, in half the run's buffer_size.
    for rank in (0, 1):
        memory = FrameReplay.load(run_dir / f"replay-{rank}-of-2.npz")
        assert (memory.num_envs, memory.capacity, memory.added) == (2, 500, total // 4 // 2)
    saved = torch.load(run_dir / "checkpoint.pt")
    assert saved["frames"] == total and len(saved["numpy_rng"]) == 2
    # Nothing left: the learners' processes gone with the run (Ray ends a finished driver's actors).
    deadline = time.monotonic() + 20
    while ray_train_workers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ray_train_workers()


def test_ctrl_c_stops_the_learners_with_the_line_saying_how_to_go_on(cluster, tmp_path):
    # Ray Train aborts its run on Ctrl-C (its own handler), and Ray's wait then ends with SystemExit: the run stops as
    # a single learner's does. (SIGTERM takes the single learner's way: test_ppo, and test_ray_pool for ray.init.)
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "atari_game", "train", "--ray", cluster.address, "--learners", "2"]
    command += command_line(PPO_TINY)
    command += ["--no-video", "--total-frames", "1000000", "--checkpoint-every", "512", "--run-dir", str(run_dir)]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 200
        while not (run_dir / "checkpoint.pt").exists() and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=120)
    finally:
        run.kill()
    frames = torch.load(run_dir / "checkpoint.pt")["frames"]
    line = f"stopped (Ctrl-C): {run_dir}/checkpoint.pt holds the run at {frames:,} frames; --resume --run-dir {run_dir}"
    assert run.returncode == 1 and f"{line} goes on" in stderr.splitlines(), stderr[-3000:]
    deadline = time.monotonic() + 30
    while ray_train_workers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ray_train_workers()
