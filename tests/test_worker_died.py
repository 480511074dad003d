"""`WorkerDied` and `CommandFailed`: a dead worker's and a failed command's reports as fields, which nothing parses
back out of their messages."""

import copy
import dataclasses
import os
import pickle
import signal

import numpy as np
import pytest
from support import OPTIONS, worker_pids

from atari_game import PoolError, WorkerDied
from atari_game.game import GameOptions
from atari_game.pool import GamePool
from atari_game.pool_errors import CommandFailed

REWORDED = "a worker is no more"


@pytest.fixture
def reworded(monkeypatch):
    """Every `WorkerDied` and `CommandFailed` message says something else: whatever read the message would now misread
    it."""
    for report in (WorkerDied, CommandFailed):
        monkeypatch.setattr(report, "__str__", lambda self: REWORDED)


def test_the_fields_follow_from_the_exit_code_and_make_the_message():
    died = WorkerDied(pid=12, env_ids=[2, 3], exitcode=-9)
    assert isinstance(died, PoolError)
    assert (died.signal, died.cause, died.node, died.hosted, died.fatal) == (
        "SIGKILL",
        "killed by SIGKILL",
        None,
        None,
        False,
    )
    assert str(died) == "pool worker (pid 12, envs 2-3) died (exit code -9)"
    assert WorkerDied(pid=12, env_ids=[0], exitcode=3).cause == "exited with code 3"
    assert WorkerDied(pid=12, env_ids=[0], exitcode=3).signal is None
    assert WorkerDied(pid=12, env_ids=[0], exitcode=-200).signal == 200  # no name
    fatal = died.replace(fatal=True, cause="it died while sending the traceback of an error")
    assert str(fatal) == (
        "pool worker (pid 12, envs 2-3) died (it died while sending the traceback of an error); the pool cannot go on: "
        "close() it, or use restart_workers=True"
    )
    actor = WorkerDied(kind="ray actor", pid=7, env_ids=(0, 1), node="1a2b3c4d5e", address="10.0.0.2", hosted=died)
    moved = actor.with_env_offset(4)
    assert (moved.env_ids, moved.hosted.env_ids, moved.hosted.pid, moved.pid) == ((4, 5), (6, 7), 12, 7)
    assert str(moved) == (
        "ray actor (pid 7 on node 1a2b3c4d at 10.0.0.2, envs 4-5) died (its pool worker (pid 12, envs 6-7) died "
        "(exit code -9))"
    )
    for again in (pickle.loads(pickle.dumps(moved)), copy.copy(moved)):
        assert (
            again.fields() == moved.fields() | {"hosted": again.hosted}
            and again.hosted.fields() == moved.hosted.fields()
        )


def test_a_local_pools_dead_worker_is_reported_by_its_fields_whatever_the_wording(reworded, closing):
    pool = closing(GamePool)(4, n_workers=2, **OPTIONS)
    pool.reset()
    victim = worker_pids(pool)[1]
    os.kill(victim, signal.SIGKILL)
    for _ in range(2):  # the step that finds it, and every call after it
        with pytest.raises(WorkerDied) as caught:
            pool.step([0, 0, 0, 0])
        died = caught.value
        assert str(died) == REWORDED
        assert (died.pid, died.env_ids, died.exitcode, died.signal, died.fatal) == (victim, (2, 3), -9, "SIGKILL", True)
        assert (died.kind, died.node, died.hosted) == ("pool worker", None, None)
    # What a node actor asks of its pool: the same report, as the answer.
    block_pool = closing(GamePool)(4, n_workers=2, **OPTIONS)
    block_pool.reset()
    victim = worker_pids(block_pool)[0]
    os.kill(victim, signal.SIGKILL)
    (status, ids, died), _ = block_pool.run_block("step", None, np.zeros(4, np.int64))
    assert (status, ids) == ("died", []) and (died.pid, died.env_ids, died.signal) == (victim, (0, 1), "SIGKILL")


def test_a_failed_commands_report_holds_the_exception_as_fields_and_crosses_whole():
    try:
        [][1]
    except IndexError as error:
        failed = CommandFailed.of(error, [2, 3])  # as a worker makes it
    assert isinstance(failed, PoolError) and failed.worker is None
    assert (failed.env_ids, failed.error_type, failed.message) == ((2, 3), "IndexError", "list index out of range")
    assert failed.traceback.startswith("Traceback (most recent call last):") and "[][1]" in failed.traceback
    assert failed.traceback.endswith("IndexError: list index out of range\n")
    # Named by the pool that takes the answer, renumbered by a node actor, pickled by a worker's pipe or Ray.
    named = failed.replace(worker="ray actor (pid 7 on node 1a2b3c4d at 10.0.0.2, envs 4-7)").with_env_offset(4)
    assert (named.env_ids, failed.env_ids) == ((6, 7), (2, 3))
    assert str(named) == (
        "ray actor (pid 7 on node 1a2b3c4d at 10.0.0.2, envs 4-7) failed on envs [6, 7]: IndexError: list index out of "
        f"range\n{failed.traceback}"
    )
    for again in (pickle.loads(pickle.dumps(named)), copy.copy(named)):
        assert type(again) is CommandFailed and again.fields() == named.fields()


def test_a_local_pools_failed_command_is_reported_by_its_fields_whatever_the_wording(reworded, closing, unchecked):
    pool = closing(GamePool)(4, n_workers=2, **OPTIONS)
    pool.reset()
    unchecked(pool)  # an action the parent would refuse reaches a worker: its Game raises
    failing = worker_pids(pool)[1]
    with pytest.raises(CommandFailed) as caught:
        pool.step([0, 0, 0, 99])
    failed = caught.value
    assert str(failed) == REWORDED and isinstance(failed, PoolError)
    assert (failed.worker, failed.env_ids) == (f"pool worker (pid {failing}, envs 2-3)", (2, 3))
    assert (failed.error_type, failed.message) == ("IndexError", "list index out of range")
    del pool._check_actions
    assert pool.step([0, 1, 2, 3])[0].shape == (4, 4, 84, 84)  # the pool goes on
    # What a node actor asks of its pool: the same report, as the answer, and the pool goes on.
    block_pool = closing(GamePool)(4, n_workers=2, **OPTIONS)
    block_pool.reset()
    (status, ids, failed), _ = block_pool.run_block("step", [1, 3], np.array([0, 99]))
    assert (status, ids, type(failed)) == ("error", [], CommandFailed)
    assert (failed.env_ids, failed.error_type) == ((3,), "IndexError")
    assert failed.worker == f"pool worker (pid {worker_pids(block_pool)[1]}, envs 2-3)"
    (status, ids, _), _ = block_pool.run_block("step", None, np.zeros(4, np.int64))
    assert (status, ids) == ("ok", [0, 1, 2, 3])


@pytest.mark.slow
def test_a_node_actor_renumbers_its_pools_dead_worker_by_the_fields_whatever_the_wording(reworded):
    # The node actor's own code, run here (Ray connected for its location) so that the wording is changed in it too.
    ray = pytest.importorskip("ray")
    from atari_game.ray_pool import NodeActor, single_machine_mode, versions

    ours = not ray.is_initialized()
    if ours:  # a Ray of its own, listening on 127.0.0.1 only
        with single_machine_mode():
            ray.init(
                address="local", _node_ip_address="127.0.0.1", num_cpus=1, include_dashboard=False, log_to_driver=False
            )
    try:
        options = dataclasses.asdict(GameOptions.from_kwargs(seed=0, **OPTIONS))
        del options["seed"]
        actor = NodeActor([10, 11, 12, 13], [10, 11, 12, 13], True, [options] * 4, versions(), 2)
        try:
            actor.run("reset", ({i: i for i in range(10, 14)}, []), None)
            (status, ids, failed), results, _ = actor.run("step", [11, 13], np.array([0, 99]))
            assert (status, ids, results, str(failed)) == ("error", [], {}, REWORDED)
            assert (failed.env_ids, failed.error_type) == ((13,), "IndexError")  # the hosted pool's env 3
            victim = worker_pids(actor.pool)[1]
            os.kill(victim, signal.SIGKILL)
            (status, ids, died), results, _ = actor.run("step", [10, 11, 12, 13], np.zeros(4, np.int64))
            assert (status, ids, results) == ("died", [], {}) and str(died) == REWORDED
            # The hosted pool's envs 2-3 are the parent's 12-13.
            assert (died.pid, died.env_ids, died.exitcode, died.signal) == (victim, (12, 13), -9, "SIGKILL")
            assert worker_pids(actor.pool)[1] != victim  # its pool started again
        finally:
            actor.pool.close()  # (NodeActor.close also ends the actor's process: this one is the test's)
    finally:
        if ours:
            ray.shutdown()
