"""RayGamePool on a real two-node Ray cluster on this machine: the local pool's games, spread, faults, leaks."""

import contextlib
import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import ray
from gymnasium.vector import AutoresetMode
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from support import NODE, OPTIONS, all_gone, held_segments, loopback
from test_pool_values import LocalEnv, check_reset, play_async, send

import atari_game
from atari_game import Game
from atari_game.pool import GamePool, PoolError, WorkerDied
from atari_game.pool_errors import CommandFailed
from atari_game.ray_pool import FREE_CPU_WAIT, RayGamePool, _ray


@pytest.fixture
def ray_pool(cluster, closing):
    """Ray pools on the cluster, closed after the test, whatever happens in it."""
    return closing(RayGamePool)


def pids(pool):
    return [worker.where[0] for worker in pool._workers]


def pool_workers(actor_pid):
    """The worker processes of a node actor's pool: the children of its forkserver, in the order they started."""
    [server] = [child for child in psutil.Process(actor_pid).children() if "forkserver" in " ".join(child.cmdline())]
    return [child.pid for child in sorted(server.children(), key=psutil.Process.create_time)]


def fork_server_folders(actor_pids):
    """The folders of the sockets the node actors' fork servers listen on (multiprocessing's /tmp/pymp-*)."""
    folders = set()
    for pid in actor_pids:
        [server] = [child for child in psutil.Process(pid).children() if "forkserver" in " ".join(child.cmdline())]
        folders |= {Path(socket.laddr).parent for socket in server.net_connections("unix") if socket.laddr}
    return folders


def restarted(actor, dead_pid, within):
    """Whether Ray has the actor running again, in a new process, within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):  # restarting
            if ray.get(actor.where.remote(), timeout=5)[0] != dead_pid:
                return True
        time.sleep(0.2)
    return False


def play(pool, steps, seed=0):
    """Reset with `seed`, then `steps` seeded random steps: every observation, reward, flag and statistic."""
    obs, _ = pool.reset(seed=seed)
    record = [obs]
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        obs, rewards, terms, truncs, info = pool.step(rng.integers(0, 4, pool.num_envs))
        record += [obs, rewards, terms, truncs, info["lives"]]
        for key in ("episode", "game"):
            if key in info:
                record += [info[f"_{key}"], info[key]["r"], info[key]["l"]]
        if "final_obs" in info:
            record += [np.stack(info["final_obs"][info["_final_obs"]])]
    return record


def assert_plays_as_a_local_pool(pool, options):
    """300 seeded random steps of `pool` give every value a local `GamePool` of the same `options` gives, episodes and
    whole games ending along the way."""
    with GamePool(pool.num_envs, n_workers=1, **options) as local:
        expected = play(local, 300, seed=5)
    played = play(pool, 300, seed=5)
    assert len(played) == len(expected) > 1500
    assert all(np.array_equal(a, b) for a, b in zip(played, expected, strict=True))


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_same_seed_same_games_as_the_local_pool_with_actors_spread_over_both_nodes(ray_pool, mode):
    options = {**OPTIONS, "life_loss": "terminal", "autoreset_mode": mode}
    pool = ray_pool(4, n_workers=2, **options)
    assert {worker.where[1] for worker in pool._workers} == {node["NodeID"] for node in ray.nodes()}
    assert_plays_as_a_local_pool(pool, options)


def test_a_mixed_pool_plays_the_same_games_as_the_local_one(ray_pool):
    options = {**OPTIONS, "game": ["Breakout", "Kaboom", "Kaboom", "Breakout"]}  # the same 4 actions
    pool = ray_pool(4, n_workers=2, **options)
    with GamePool(4, n_workers=1, **options) as local:
        expected = play(local, 100, seed=5)
    assert pool.games == local.games == ("breakout", "kaboom", "kaboom", "breakout")
    played = play(pool, 100, seed=5)
    assert all(np.array_equal(a, b) for a, b in zip(played, expected, strict=True))
    assert pool.step(np.zeros(4, np.int64))[4]["game_name"].tolist() == list(pool.games)


def test_async_send_recv_returns_the_first_actors_to_finish(ray_pool):
    pool = ray_pool(4, n_workers=2, batch_size=2, **OPTIONS)
    pool.reset(seed=0)
    pool.send(np.zeros(4, np.int64))
    first = pool.recv()
    second = pool.recv()
    ids = sorted(first[4]["env_id"].tolist() + second[4]["env_id"].tolist())
    assert ids == [0, 1, 2, 3] and first[0].shape == (2, 4, 84, 84)
    pool.send([1, 1], env_ids=[3, 0])
    _, *_, info = pool.recv()
    assert sorted(info["env_id"].tolist()) == [0, 3]
    pool.send([1], env_ids=[0])  # two calls in flight on one actor
    pool.send([1], env_ids=[1])
    _, *_, info = pool.recv()
    assert info["env_id"].tolist() == [0, 1]
    with pytest.raises(PoolError, match="only 0 are"):
        pool.recv()


def test_bad_input_is_refused_before_anything_is_sent(ray_pool):
    with pytest.raises(ValueError, match=r"actors must be one of \('worker', 'node'\), got 'nodes'"):
        RayGamePool(4, actors="nodes")
    with pytest.raises(TypeError, match="actor_options must be a dict"):
        RayGamePool(4, actor_options=1)
    with pytest.raises(TypeError, match="start_method is for local worker processes"):
        RayGamePool(4, start_method="spawn")
    with pytest.raises(ValueError, match="life_loss"):
        RayGamePool(4, life_loss="sometimes")
    with pytest.raises(ValueError, match=r"Invalid option keyword num_cpu .*'num_cpus'"):  # Ray's own check
        RayGamePool(4, actor_options={"num_cpu": 1})
    assert ray.is_initialized()  # a failed pool leaves the caller's connection alone
    pool = ray_pool(4, n_workers=2, **OPTIONS)
    pool.reset()
    with pytest.raises(ValueError, match=r"actions must be in \[0, 4\) for breakout"):
        pool.step([0, 1, 2, 9])
    assert pool.step([0, 1, 2, 3])[0].shape == (4, 4, 84, 84)


def test_a_killed_actor_is_reported_within_two_seconds_and_close_kills_the_rest(cluster):
    pool = RayGamePool(4, n_workers=2, **OPTIONS)
    pool.reset()
    victim = pids(pool)[1]
    os.kill(victim, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(PoolError, match=rf"ray actor \(pid {victim} on node \w+ at [\d.]+, envs 2-3\) died"):
        pool.step([0, 0, 0, 0])
    assert time.monotonic() - start < 2
    with pytest.raises(PoolError, match="cannot go on"):
        pool.step([0, 0, 0, 0])
    pool.close()
    pool.close()
    assert all_gone(pids(pool), within=10)


@pytest.mark.parametrize(
    ("actors", "failing_envs", "stray_error"), [("worker", (2, 3), "KeyError"), ("node", (3,), "IndexError")]
)
def test_a_failed_command_is_the_local_pools_report_and_the_pool_goes_on(
    ray_pool, unchecked, actors, failing_envs, stray_error
):
    # failing_envs: the envs of the command that raised (a node actor's pool has a worker process per env here).
    pool = ray_pool(4, n_workers=2, actors=actors, **OPTIONS)
    pool.reset()
    unchecked(pool)  # an action the parent would refuse reaches an actor: its Game raises
    with pytest.raises(CommandFailed) as caught:
        pool.step([0, 0, 0, 99])
    failed = caught.value
    assert isinstance(failed, PoolError) and failed.worker == pool._workers[1].describe()
    assert re.fullmatch(r"ray actor \(pid \d+ on node \w+ at [\d.]+, envs 2-3\)", failed.worker)
    assert (failed.env_ids, failed.error_type) == (failing_envs, "IndexError")
    assert failed.message == "list index out of range"
    assert failed.traceback.endswith("IndexError: list index out of range\n") and "in play" in failed.traceback
    # A call that raises in the actor itself, not in its games (an env it does not host): Ray's error, as a report.
    pool._send(pool._workers[0], "step", [3], [3])
    with pytest.raises(CommandFailed) as caught:
        pool._finish_in_flight()
    assert (caught.value.worker, caught.value.env_ids) == (pool._workers[0].describe(), (3,))
    assert caught.value.error_type == stray_error and stray_error in caught.value.traceback
    del pool._check_actions
    assert pool.step([0, 1, 2, 3])[0].shape == (4, 4, 84, 84)


def test_restart_workers_uses_rays_actor_restart_and_reports_the_envs_truncated(ray_pool):
    pool = ray_pool(4, n_workers=2, restart_workers=True, **OPTIONS)
    pool.reset()
    for _ in range(5):
        pool.step([1, 1, 1, 1])
    actor, victim = pool._workers[0].actor, pids(pool)[0]
    os.kill(victim, signal.SIGKILL)
    obs, _, terms, truncs, info = pool.step([0, 0, 0, 0])
    assert list(truncs) == [True, True, False, False] and not terms.any()
    assert list(info["worker_restarted"]) == [True, True, False, False]
    fresh = Game(seed=0 + 0 + 4, **OPTIONS).reset()  # env 0's new game: seed + i + restarts * num_envs
    assert np.array_equal(obs[0], fresh)
    assert pool._workers[0].actor is actor and pids(pool)[0] != victim  # Ray restarted the same actor
    obs, _, _, truncs, info = pool.step([0, 0, 0, 0])
    assert not truncs.any() and "worker_restarted" not in info
    assert np.array_equal(obs[0], fresh)  # next-step autoreset: the reset step the truncation owed
    # Killed between calls: Ray restarts it before the next call, and the pool still notices.
    victim = pids(pool)[0]
    os.kill(victim, signal.SIGKILL)
    assert restarted(actor, victim, within=30)
    _, _, _, truncs, info = pool.step([0, 0, 0, 0])
    assert list(info["worker_restarted"]) == [True, True, False, False] and list(truncs) == [True, True, False, False]


def test_a_lost_node_is_survived_with_restart_workers(ray_pool, cluster):
    node = cluster.add_node(**{**NODE, "num_cpus": 1})
    cluster.wait_for_nodes()
    # Soft affinity: on the new node while it lives, anywhere after.
    place = NodeAffinitySchedulingStrategy(node.node_id, soft=True)
    pool = ray_pool(2, n_workers=1, restart_workers=True, actor_options={"scheduling_strategy": place}, **OPTIONS)
    pool.reset()
    assert pool._workers[0].where[1] == node.node_id
    cluster.remove_node(node, allow_graceful=False)
    start = time.monotonic()
    # The actor's process outlives its node's raylet for a moment, and answers while it does.
    while time.monotonic() - start < 60:
        obs, _, terms, truncs, info = pool.step([0, 0])
        if "worker_restarted" in info:
            break
    assert list(info["worker_restarted"]) == [True, True] and truncs.all() and not terms.any()
    assert pool._workers[0].where[1] != node.node_id and time.monotonic() - start < 60
    assert np.array_equal(obs[1], Game(seed=0 + 1 + 2, **OPTIONS).reset())
    pool.step([0, 0])


# The start of the driver scripts below: how many child processes the script's process has left.
CHILDREN = """
import os


def children():
    tasks = os.listdir("/proc/self/task")
    return [pid for task in tasks for pid in open(f"/proc/self/task/{task}/children").read().split()]
"""


CONNECT = (
    CHILDREN
    + """
import os, signal, sys
import ray
from atari_game.ray_pool import RayGamePool
def mine(signum, frame):
    pass
signal.signal(signal.SIGTERM, mine)
pool = RayGamePool(2, n_workers=1, address=sys.argv[1])
kept = signal.getsignal(signal.SIGTERM) is mine
pool.reset()
pool.step([0, 1])
node = pool._workers[0].where[1]
pool.close()
print(node, ray.is_initialized(), len(children()), kept)
"""
)


LISTENING = """
import json, psutil
from atari_game.ray_pool import RayGamePool
with RayGamePool(2, n_workers=1, address="local") as pool:
    pool.reset()
    pool.step([0, 1])
    found = []
    for process in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            listening = [c.laddr.ip for c in process.net_connections("inet") if c.status == psutil.CONN_LISTEN]
            found.append((" ".join(process.cmdline()), process.environ().get("RAY_AUTH_MODE"), listening))
        except psutil.NoSuchProcess:  # a short-lived helper
            pass
print(json.dumps(found))
"""


@pytest.mark.slow
def test_a_local_ray_listens_on_loopback_only_without_dashboard_and_with_token_authentication():
    run = subprocess.run([sys.executable, "-c", LISTENING], capture_output=True, text=True, timeout=120)
    processes = json.loads(run.stdout.splitlines()[-1])
    sockets = {(command.split()[0].rsplit("/", 1)[-1], ip) for command, _, ips in processes for ip in ips}
    assert not [(name, ip) for name, ip in sockets if not loopback(ip)]
    # Without its single-machine mode, Ray had these 7 on every interface; now: the GCS, the raylet (2), the
    # runtime-env agent, the actor, an idle worker and the driver's own core worker, all on 127.0.0.1.
    names = {name for name, _ in sockets}
    assert {"gcs_server", "raylet", "ray::GameActor"} <= names and len(processes) >= 5
    # Ray still starts its dashboard's head (usage statistics only, no frontend); but no dashboard process listens.
    dashboards = [ips for command, _, ips in processes if "ray/dashboard/" in command.split(" ", 2)[1]]
    assert dashboards and not any(dashboards)
    assert {mode for command, mode, _ in processes if "gcs_server" in command} == {"token"}


@pytest.mark.parametrize("where", ["cluster", "local"])
def test_it_connects_to_a_cluster_or_starts_a_local_ray_that_close_stops(cluster, where):
    address = cluster.address if where == "cluster" else "local"
    run = subprocess.run([sys.executable, "-c", CONNECT, address], capture_output=True, text=True, timeout=120)
    node, connected, children, kept = run.stdout.split()
    assert connected == "False" and children == "0"  # disconnected, and nothing of a local Ray is left running
    assert kept == "True"  # the caller's SIGTERM handler (a trainer's), which ray.init replaces, is put back
    cluster_nodes = {node["NodeID"] for node in ray.nodes()}
    assert (node in cluster_nodes) == (where == "cluster")


def test_without_ray_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    _ray.cache_clear()
    try:
        needs = 'RayGamePool needs Ray: pip install "atari_game[ray]"'
        with pytest.raises(ImportError, match=re.escape(needs)):
            RayGamePool(4)
    finally:
        _ray.cache_clear()


@pytest.mark.parametrize("actors", ["worker", "node"])
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_async_batches_carry_each_envs_values_as_local_games_stepped_alike(ray_pool, mode, actors):
    num_envs, seed = 4, 6
    pool = ray_pool(num_envs, seed=seed, actors=actors, n_workers=2, batch_size=2, autoreset_mode=mode, **OPTIONS)
    local = [LocalEnv(seed + i, mode == "SameStep", **OPTIONS) for i in range(num_envs)]
    check_reset(pool.reset(), [env.reset() for env in local])
    rng, pending = np.random.default_rng(3), {}
    send(pool, pending, list(range(num_envs)), rng)
    # Each env sent its next action as soon as it comes back: observations, rewards, flags, lives and final
    # observations checked against its local Game, across episode ends.
    steps = play_async(pool, local, pending, rng, 200)
    assert sum(step.ended_lives is not None for step in steps) >= 3


UNREACHABLE = (
    CHILDREN
    + """
import os, sys, time
from atari_game.ray_pool import RayGamePool
start = time.monotonic()
try:
    RayGamePool(2, address=sys.argv[1])
except ConnectionError as error:
    print(f"{time.monotonic() - start:.1f} {len(children())} {error}")
"""
)


@pytest.mark.timing
def test_an_address_that_does_not_answer_fails_within_seconds_naming_the_fixes():
    run = subprocess.run([sys.executable, "-c", UNREACHABLE, "127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    seconds, children, message = run.stdout.split(" ", 2)
    assert float(seconds) < 30 and children == "0"  # Ray alone would retry for 2 minutes
    assert message.startswith("no Ray cluster answers at 127.0.0.1:1 ([Errno 111] Connection refused): start one")
    assert "`ray start --head`" in message and "firewall" in message


@pytest.mark.timing
def test_a_cluster_without_free_cpus_is_refused_within_seconds_naming_the_fixes(ray_pool):
    holder = ray_pool(4, n_workers=4, **OPTIONS)  # the cluster's 4 CPUs
    start = time.monotonic()
    with pytest.raises(PoolError, match=r"has 0 of its 4 CPUs free, and the pool's 1 actors need 1 \(1 each\): pass"):
        RayGamePool(2, n_workers=1, **OPTIONS)
    assert FREE_CPU_WAIT <= time.monotonic() - start < FREE_CPU_WAIT + 20  # it waits for CPUs a closing pool frees
    holder.close()
    pool = ray_pool(2, n_workers=2, **OPTIONS)  # the failed pool left nothing: its CPUs come free with holder's
    assert pool.reset()[0].shape == (2, 4, 84, 84)


# What a worker's sitecustomize makes of its node: no atari_game, or atari_game 9.9.9 (the code stays this one's).
NODES = {
    "without atari_game": """
import sys


class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "atari_game":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, Hide())
""",
    "with another version": """
from importlib import metadata

installed = metadata.version
metadata.version = lambda name: "9.9.9" if name == "atari_game" else installed(name)
""",
}


@pytest.mark.timing
@pytest.mark.parametrize("node", NODES)
def test_a_node_without_atari_game_or_with_another_version_is_named_with_the_fix(ray_pool, tmp_path, node):
    # The actor's worker gets a PYTHONPATH with that sitecustomize (Ray puts the driver's directory first on its
    # workers' sys.path, so a package shadowing atari_game there would not do).
    (tmp_path / "sitecustomize.py").write_text(NODES[node])
    ours, ale = atari_game.__version__, importlib.metadata.version("ale-py")  # what the node is compared with
    if node == "without atari_game":
        expected = re.escape(
            f"No module named 'atari_game': install atari_game {ours} on every node (docs/guides/ray.md)"
        )
    else:
        expected = re.escape(
            f"has {{'atari_game': '9.9.9', 'ale-py': '{ale}'}}, the pool's process {{'atari_game': '{ours}', "
            f"'ale-py': '{ale}'}}: install the same versions on every node (atari_game: `pip install -e .` in a clone "
            f"of this one's commit; ale-py: `pip install ale-py=={ale}`; docs/guides/ray.md)"
        )
    shadowed = {"runtime_env": {"env_vars": {"PYTHONPATH": str(tmp_path)}}}
    start = time.monotonic()
    with pytest.raises(PoolError, match=r"ray actor \(not running yet, envs 0-1\) could not start: .*" + expected):
        RayGamePool(2, n_workers=1, actor_options=shadowed, **OPTIONS)
    assert time.monotonic() - start < 30
    assert ray_pool(2, n_workers=1, **OPTIONS).reset()[0].shape == (2, 4, 84, 84)  # the cluster is unharmed


# --- node actors: one actor per node, hosting a local GamePool -----------------------------------------------


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_node_actors_host_a_local_pool_each_and_play_the_local_pools_games(ray_pool, mode):
    options = {**OPTIONS, "life_loss": "terminal", "autoreset_mode": mode}
    pool = ray_pool(4, actors="node", **options)
    # By default one actor per node, taking the node's 2 CPUs, with a pool of 2 worker processes.
    assert pool.n_workers == 2 and pool._transport.actor_options["num_cpus"] == 2
    assert [envs for _, _, envs in pool.placement()] == [[0, 1], [2, 3]]
    assert {node for node, _, _ in pool.placement()} == {node["NodeID"] for node in ray.nodes() if node["Alive"]}
    assert [len(pool_workers(pid)) for pid in pids(pool)] == [2, 2]
    assert_plays_as_a_local_pool(pool, options)


def test_a_node_actors_dead_worker_restarts_the_actors_envs_or_breaks_the_pool_naming_it(ray_pool):
    pool = ray_pool(4, actors="node", restart_workers=True, **OPTIONS)
    pool.reset()
    for _ in range(5):
        pool.step([1, 1, 1, 1])
    actor_pid, [first, second] = pids(pool)[1], pool_workers(pids(pool)[1])
    os.kill(second, signal.SIGKILL)
    obs, _, terms, truncs, info = pool.step([0, 0, 0, 0])
    # The actor's envs (both of its workers') start again with new seeds, reported truncated.
    assert list(truncs) == [False, False, True, True] and not terms.any()
    assert list(info["worker_restarted"]) == [False, False, True, True]
    for i in (2, 3):  # seed + i + restarts * num_envs, as for any restart
        assert np.array_equal(obs[i], Game(seed=0 + i + 4, **OPTIONS).reset())
    assert pids(pool)[1] == actor_pid and first not in pool_workers(actor_pid)  # the same actor, a new pool
    assert all_gone([first, second], within=10)
    _, _, _, truncs, info = pool.step([0, 0, 0, 0])
    assert not truncs.any() and "worker_restarted" not in info
    # The node actor itself killed: Ray restarts it, as it restarts a worker's actor.
    os.kill(actor_pid, signal.SIGKILL)
    _, _, _, truncs, info = pool.step([0, 0, 0, 0])
    assert list(info["worker_restarted"]) == [False, False, True, True] and pids(pool)[1] != actor_pid
    # Without restart_workers, a dead worker breaks the pool, named with the parent's numbering of its envs.
    pool.close()  # (its CPUs for the next)
    broken = ray_pool(4, actors="node", **OPTIONS)
    broken.reset()
    victim = pool_workers(pids(broken)[1])[1]
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(
        PoolError,
        match=rf"ray actor \(pid {pids(broken)[1]} on node \w+ at [\d.]+, envs 2-3\) died \(its pool worker "
        rf"\(pid {victim}, envs 3-3\) died \(exit code -9\)\); the pool cannot go on",
    ) as caught:
        broken.step([0, 0, 0, 0])
    died = caught.value  # the same, as fields: the actor, and its worker process with the parent's env ids
    assert (died.kind, died.pid, died.env_ids, died.node) == (
        "ray actor",
        pids(broken)[1],
        (2, 3),
        broken._workers[1].where[1],
    )
    assert (died.hosted.pid, died.hosted.env_ids, died.hosted.exitcode, died.hosted.signal) == (
        victim,
        (3,),
        -9,
        "SIGKILL",
    )


@pytest.mark.parametrize("restart_workers", [False, True])  # True: actors Ray restarts, unless they end themselves
def test_closing_a_pool_of_node_actors_leaves_no_process_and_no_shared_memory(cluster, restart_workers):
    pool = RayGamePool(4, actors="node", restart_workers=restart_workers, **OPTIONS)
    pool.reset()
    pool.step([0, 1, 2, 3])
    actors = pids(pool)
    processes = [*actors, *(pid for actor in actors for pid in pool_workers(actor))]
    assert len(processes) == 6 and len(held_segments(*actors)) == 2
    folders = fork_server_folders(actors)
    assert len(folders) == 2 and all(folder.is_dir() for folder in folders)
    pool.close()
    assert all_gone(processes, within=10) and held_segments(*actors) == set()
    assert not any(folder.exists() for folder in folders)  # the actors ended as programs do, not killed
    deadline = time.monotonic() + 10  # its CPUs free again
    while ray.available_resources().get("CPU") != 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU") == 4


def test_node_actors_take_the_cpus_asked_for_a_worker_process_each(ray_pool):
    pool = ray_pool(6, actors="node", n_workers=3, actor_options={"num_cpus": 1}, **OPTIONS)
    assert [envs for _, _, envs in pool.placement()] == [[0, 1], [2, 3], [4, 5]]
    assert [len(pool_workers(pid)) for pid in pids(pool)] == [1, 1, 1]
    assert pool.reset(seed=3)[0].shape == (6, 4, 84, 84)


VERSION_MISMATCH = (
    CHILDREN
    + """
import os, sys, time
import ray._private.utils
from atari_game.ray_pool import RayGamePool

# What Ray compares with the cluster's (its Ray and Python versions): another Ray release, for this process only.
found = ray._private.utils.compute_version_info()
ray._private.utils.compute_version_info = lambda: ("2.59.0", found[1])
start = time.monotonic()
try:
    RayGamePool(2, address=sys.argv[1])
except RuntimeError as error:
    print(f"{time.monotonic() - start:.1f} {len(children())} {ray.is_initialized()}")
    print(error)
"""
)


@pytest.mark.timing
def test_a_driver_whose_ray_differs_from_the_clusters_is_refused_within_seconds_naming_the_fix(cluster):
    run = subprocess.run(
        [sys.executable, "-c", VERSION_MISMATCH, cluster.address], capture_output=True, text=True, timeout=60
    )
    seconds, children, connected = run.stdout.splitlines()[0].split()
    assert float(seconds) < 30 and children == "0" and connected == "False"
    message = "\n".join(run.stdout.splitlines()[1:])
    assert message.startswith(f"Version mismatch: The cluster was started with:\n    Ray: {ray.__version__}\n")
    assert "This process on node " in message and "Ray: 2.59.0" in message
    assert message.endswith(
        "Ray refuses a driver whose Ray or Python version differs from the cluster's: run this process with the "
        "cluster's Ray and Python (pip install ray==<its Ray>, in a virtual environment of its Python), or start the "
        "cluster with this machine's (docs/guides/ray.md)"
    )


def test_run_block_plays_a_local_pools_envs_as_one_block_and_names_a_dead_worker(closing):
    # What a node actor asks of its pool, here without Ray: GameBlock.run's answers, and the rows as the pool's.
    pool = closing(GamePool)(4, n_workers=2, batch_size=2, **OPTIONS)
    block_pool = closing(GamePool)(4, n_workers=2, **OPTIONS)
    obs, _ = pool.reset(seed=2)
    answer, arrays = block_pool.run_block("reset", ({i: 2 + i for i in range(4)}, []))
    assert answer == ("ok", [], False) and np.array_equal(arrays["obs"], obs)
    for actions in ([1, 1, 2, 3], [0, 3, 3, 0]):
        expected = pool.step(actions)
        answer, arrays = block_pool.run_block("step", None, np.array(actions))
        assert answer == ("ok", [0, 1, 2, 3], False)
        assert all(
            np.array_equal(arrays[name], value) for name, value in zip(["obs", "rewards"], expected[:2], strict=True)
        )
    pool.send([2, 1], env_ids=[3, 1])
    obs, *_, info = pool.recv()
    answer, arrays = block_pool.run_block("step", [3, 1], np.array([2, 1]))
    assert answer == ("ok", [3, 1], False) and np.array_equal(arrays["obs"][info["env_id"]], obs)
    with pytest.raises(ValueError, match="unknown command 'jump'; valid commands: 'step', 'reset'"):
        block_pool.run_block("jump", None)
    # A replaced worker's restarted envs are reported by step() and recv(), which a block's caller does not call.
    with pytest.raises(ValueError, match="run_block needs a pool made with restart_workers=False: its caller"):
        closing(GamePool)(2, restart_workers=True, **OPTIONS).run_block("reset", ({0: 0, 1: 1}, []))
    victim = block_pool._workers[1].process.pid
    os.kill(victim, signal.SIGKILL)
    answer, _ = block_pool.run_block("step", None, np.zeros(4, np.int64))
    status, ids, died = answer
    assert (status, ids) == ("died", []) and isinstance(died, WorkerDied)
    assert (died.pid, died.env_ids, died.exitcode, died.signal) == (victim, (2, 3), -9, "SIGKILL")
    assert str(died.replace(fatal=False)) == f"pool worker (pid {victim}, envs 2-3) died (exit code -9)"
