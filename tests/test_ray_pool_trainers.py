"""Both trainers with --ray alone (the envs on a RayGamePool, the one learner here; --learners is
tests/test_learners.py) on a two-node Ray cluster on this machine: the same seed gives the same run as on the local
GamePool (losses and weights bit for bit), the log and progress.csv say where the envs ran, bad --ray values are
usage errors."""

import csv
import multiprocessing
import re
import subprocess
import sys
import time

import pytest
import ray
import torch
from support import DQN_TINY, NODE, OPTIONS, PPO_TINY, command_line

from atari_game import dqn, ppo, run, run_config, run_envs
from atari_game.algorithms import parse_args
from atari_game.pool import GamePool
from atari_game.ray_pool import FREE_CPU_WAIT, RayGamePool
from atari_game.worker import available_cores


def rows(run_dir):
    """progress.csv's update rows without their seconds and placement, and its whole games (sorted: the envs of
    one step log theirs in the order their workers answered)."""
    with (run_dir / "progress.csv").open() as file:
        every = list(csv.DictReader(file))
    timing = {"seconds", "frames_per_second", "env_nodes", "env_workers"}
    updates = [
        {name: value for name, value in row.items() if name not in timing and not name.endswith("_seconds")}
        for row in every
        if not row["game_return"]
    ]
    games = sorted((row["frames"], row["game_return"], row["game_length"]) for row in every if row["game_return"])
    return updates, games, [(row["env_nodes"], row["env_workers"]) for row in every if not row["game_return"]]


@pytest.mark.parametrize(
    "trainer, tiny, network, loss", [(ppo, PPO_TINY, "agent", "policy_loss"), (dqn, DQN_TINY, "q_network", "td_loss")]
)
def test_the_same_seed_gives_the_same_run_on_the_cluster_as_on_the_local_pool(
    cluster, tmp_path, trainer, tiny, network, loss
):
    runs = {}
    for where in ("", cluster.address):
        run_dir = tmp_path / ("ray" if where else "local")
        trainer.train(trainer.Config(**tiny, ray=where, run_dir=str(run_dir)))
        runs[where] = rows(run_dir), torch.load(run_dir / "checkpoint.pt")[network]
    (local, games, local_placement), local_weights = runs[""]
    (on_ray, ray_games, ray_placement), ray_weights = runs[cluster.address]
    assert len(local) >= 2 and local[-1][loss]  # updates with losses: PPO 2, DQN 4 (the last 3 learnt)
    assert on_ray == local and ray_games == games
    assert all(torch.equal(ray_weights[name], weights) for name, weights in local_weights.items())
    # The 4 envs ran on this node in PPO's 2 pools (async_envs) or DQN's 1, each with a share of the cores (at most a
    # worker per env, at least one), and in 4 actors on Ray's 2 nodes of 2 CPUs.
    pools = 2 if trainer is ppo else 1
    local_workers = pools * max(1, min(tiny["num_envs"] // pools, available_cores() // pools))
    assert set(local_placement) == {("1", str(local_workers))} and set(ray_placement) == {("2", "4")}


def test_the_command_line_trains_on_the_cluster_and_says_where(cluster, tmp_path):
    command = [sys.executable, "-m", "atari_game", "train", "--algorithm", "dqn", "--ray", cluster.address]
    command += command_line(DQN_TINY)
    command += ["--no-video", "--total-frames", "800", "--run-dir", str(tmp_path / "run")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "envs: 4 in 4 Ray actors on 2 nodes (node " in result.stdout
    done = f"done: {tmp_path / 'run'}/progress.csv, learning_curve.png, checkpoint.pt\n"
    assert result.stdout.endswith(f"{done}to score its agent: atari-game evaluate {tmp_path / 'run'}/checkpoint.pt\n")
    # Its actors went with it: the cluster's 4 CPUs are free again.
    deadline = time.monotonic() + 10
    while ray.available_resources().get("CPU") != 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU") == 4


@pytest.mark.timing
@pytest.mark.parametrize("room", [True, False], ids=["room to restart", "no room"])
def test_a_lost_node_is_survived_or_stops_the_run_naming_it_and_resume_goes_on(cluster, tmp_path, room):
    # A PPO run of 60 updates of 16 steps, a checkpoint after each: 2 envs in 2 actors, one per node (the lost
    # node's actor restarts on the head's free CPU), or 4 in 4, two per node (the head has no CPU free for them).
    run_dir, driver_node, num_envs = tmp_path / "run", ray.get_runtime_context().get_node_id(), 2 if room else 4
    command = [sys.executable, "-m", "atari_game", "train", "--ray", cluster.address, "--run-dir", str(run_dir)]
    command += ["--num-envs", str(num_envs), "--n-steps", "16", "--n-minibatches", "2", "--n-epochs", "1"]
    command += ["--no-async-envs", "--checkpoint-every", str(4 * 16 * num_envs), "--no-video"]
    run = subprocess.Popen(
        [*command, "--total-frames", str(60 * 64 * num_envs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while len(update_rows(run_dir)) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        [victim] = [node for node in cluster.worker_nodes if node.node_id != driver_node]
        cluster.remove_node(victim, allow_graceful=False)  # its raylet, object store and actors killed
        lost, lost_at = time.monotonic(), len(update_rows(run_dir))
        _, stderr = run.communicate(timeout=300)
        seconds = time.monotonic() - lost
    finally:
        run.kill()
        cluster.add_node(**NODE)  # the cluster as it was, for the tests after this one
    rows = update_rows(run_dir)
    assert rows[lost_at - 1]["env_nodes"] == "2"
    if room:  # the lost actor restarted on the head (its envs truncated): every update done, on one node after
        assert run.returncode == 0, stderr[-3000:]
        assert len(rows) == 60 and rows[-1]["env_nodes"] == "1"
        assert max(float(row["rollout_seconds"]) for row in rows) < 30  # Ray noticed within seconds; nothing hung
    else:  # stopped once Ray noticed and no CPU came free for FREE_CPU_WAIT, naming the lost actor's node
        assert run.returncode == 1 and seconds < 60
        message = stderr.decode().strip().splitlines()[-1]
        assert re.fullmatch(
            rf"stopped \(ray actor \(pid \d+ on node {victim.node_id[:8]} at [\d.]+, envs [0-3]-[0-3]\) was lost with "
            rf"its node, and for {FREE_CPU_WAIT:.0f} s no node has had the CPUs to restart it: .*\): "
            rf"{run_dir}/checkpoint.pt holds the run at [\d,]+ frames; --resume --run-dir {run_dir} goes on",
            message,
        ), message
    # --resume goes on from the last checkpoint (on the node left and the one added since): each update once.
    result = subprocess.run(
        [*command, "--total-frames", str(62 * 64 * num_envs), "--resume"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert [int(row["frames"]) for row in update_rows(run_dir)] == [64 * num_envs * update for update in range(1, 63)]


def update_rows(run_dir):
    if not (run_dir / "progress.csv").exists():
        return []
    with (run_dir / "progress.csv").open() as file:
        return [row for row in csv.DictReader(file) if row["frames_per_second"]]


@pytest.mark.parametrize(
    "address, problem",
    [
        ("nowhere", '--ray: address must be "auto", "local", "HOST:PORT"'),
        ("http://10.0.0.1:6379", "got 'http://10.0.0.1:6379'"),
    ],
)
def test_a_bad_ray_address_is_a_usage_error(tmp_path, capsys, address, problem):
    with pytest.raises(SystemExit) as exit_:
        parse_args("ppo", ["--ray", address, "--run-dir", str(tmp_path / "run")])
    assert exit_.value.code == 2 and problem in capsys.readouterr().err


def test_without_ray_the_error_names_the_extra(monkeypatch):
    monkeypatch.setattr(run_config.importlib.util, "find_spec", lambda name: None)
    assert run_config.ray_problem("auto") == ('--ray needs Ray, which is not installed: pip install "atari_game[ray]"')
    assert run_config.ray_problem("") == ""


def test_env_placement_counts_worker_processes_or_actors_and_nodes(cluster, closing):
    local = [closing(GamePool)(2, n_workers=n, **OPTIONS) for n in (1, 2)]
    columns, line = run_envs.env_placement(local)
    assert columns == {"env_nodes": 1, "env_workers": 3} and line == "envs: 4 in 3 worker processes on this machine"
    # One node actor per node, each with a local pool of 2 worker processes: 2 actors on 2 nodes.
    pool = closing(RayGamePool)(4, actors="node", **OPTIONS)
    columns, line = run_envs.env_placement([pool])
    assert columns == {"env_nodes": 2, "env_workers": 2} and pool.n_workers == 2
    node = r"node \w{8} at [\d.]+: 2 envs"
    assert re.fullmatch(rf"envs: 4 in 2 Ray actors on 2 nodes \({node}; {node}\)", line), line


@pytest.mark.parametrize("trainer, tiny", [(ppo, PPO_TINY), (dqn, DQN_TINY)], ids=["ppo", "dqn"])
def test_a_run_failing_to_place_its_envs_stops_them(tmp_path, monkeypatch, trainer, tiny):
    # Where the envs run is asked of the cluster (a Ray actor may be gone by then): the envs started just before are
    # closed by the run's finally, not left to the garbage collector.
    def lost(*args, **kwargs):
        raise RuntimeError("the cluster is gone")

    monkeypatch.setattr(run, "env_placement", lost)
    with pytest.raises(RuntimeError, match="the cluster is gone"):
        trainer.train(trainer.Config(**tiny, run_dir=str(tmp_path / "run")))
    assert not multiprocessing.active_children()
