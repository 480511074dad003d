"""The tutorial Worker protocol, its error and process-death paths, and that no process outlives a Worker."""

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types

import numpy as np
import pytest
from support import all_gone

from atari_game import DEFAULT_START_METHOD, Game, Worker, WorkerError, worker_process
from atari_game.worker import start_context


@pytest.mark.parametrize("start_method", ["forkserver", "spawn", "fork"])
def test_tutorial_protocol_unchanged_and_identical_to_a_local_game(start_method):
    local = Game("Breakout", seed=47, fire_reset=True)
    worker = Worker(47, start_method=start_method, game="Breakout", fire_reset=True)
    # Exactly the tutorial's calls, on the raw pipe.
    worker.child.send(("reset", None))
    assert np.array_equal(worker.child.recv(), local.reset())
    for action in np.random.default_rng(0).integers(4, size=100):
        worker.child.send(("step", action))
        obs, reward, done, info = worker.child.recv()
        local_obs, *local_rest = local.step(action)
        assert np.array_equal(obs, local_obs) and [reward, done, info] == local_rest
    worker.child.send(("close", None))
    worker.process.join(timeout=5)
    assert worker.process.exitcode == 0
    worker.close()


def test_convenience_methods_and_context_manager():
    with Worker(3, game="Pong") as worker:
        assert worker.reset().shape == (4, 84, 84)
        obs, reward, done, info = worker.step(0)
        assert obs.shape == (4, 84, 84) and reward == 0.0 and not done and info is None
        pid = worker.process.pid
    assert worker.closed and all_gone([pid])


def test_a_failed_command_raises_with_the_workers_traceback_and_the_worker_goes_on():
    with Worker(5) as worker:
        worker.reset()
        with pytest.raises(WorkerError) as caught:
            worker.step(7)
        message = str(caught.value)
        assert f"pid={worker.process.pid}" in message and "seed=5" in message
        assert "ValueError: action must be an integer in [0, 4)" in message
        assert "Traceback in the worker" in message and "_check_action" in message
        assert worker.step(1)[0].shape == (4, 84, 84)  # still serving


def test_unknown_command_is_answered_not_fatal():
    with Worker(0) as worker:
        worker.child.send(("jump", None))
        reply = worker.child.recv()  # raw users get the error back instead of a hang
        assert isinstance(reply, WorkerError) and "unknown command 'jump'" in str(reply)
        worker.send("jump", None)
        with pytest.raises(WorkerError, match="valid commands: 'step', 'reset', 'close'"):
            worker.recv()
        worker.child.send("step")  # the tutorial's message without its data
        reply = worker.child.recv()
        assert isinstance(reply, WorkerError) and 'a command is a pair: ("step", action)' in str(reply)
        assert worker.reset().shape == (4, 84, 84)


def test_step_before_reset_is_reported():
    with Worker(0) as worker, pytest.raises(WorkerError, match="call reset"):
        worker.step(0)


def test_killed_worker_is_detected_quickly_and_close_still_works():
    worker = Worker(0)
    worker.reset()
    os.kill(worker.process.pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"worker \(seed=0, pid=\d+\) died \(exit code -9\)"):
        worker.step(0)
    assert time.monotonic() - start < 2
    pid = worker.process.pid
    worker.close()
    worker.close()  # idempotent
    assert all_gone([pid])
    with pytest.raises(WorkerError, match="is closed"):
        worker.step(0)


def test_killed_worker_gives_raw_users_eof_not_a_hang():
    worker = Worker(0)
    worker.child.send(("reset", None))
    worker.child.recv()
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.child.send(("step", 0))  # the pipe's buffer still takes it
    with pytest.raises(EOFError):
        worker.child.recv()
    worker.close()


def test_bad_options_fail_in_the_parent_before_any_process_starts():
    before = len(multiprocessing.active_children())
    with pytest.raises(ValueError, match="frame_skip must be an integer >= 1"):
        Worker(0, frame_skip=0)
    with pytest.raises(TypeError, match="unknown game option 'stak'"):
        Worker(0, stak=4)
    with pytest.raises(ValueError, match=r"start_method must be one of \[.*\] \(or None: 'forkserver'\), got 'forks'"):
        Worker(0, start_method="forks")
    assert len(multiprocessing.active_children()) == before


def test_no_worker_outlives_its_parent(tmp_path):
    # A parent that dies without closing its workers (SIGKILL: no cleanup runs at all). (TMPDIR: its fork server's
    # socket folder, pymp-*, which multiprocessing removes at exit, stays after the kill: in pytest's folder.)
    script = textwrap.dedent(
        """
        import os, signal
        from atari_game import Worker
        workers = [Worker(seed) for seed in range(2)]
        for worker in workers:
            worker.reset()
        print(" ".join(str(worker.process.pid) for worker in workers), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    environment = {**os.environ, "TMPDIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=environment)
    pids = [int(pid) for pid in result.stdout.split()]
    assert len(pids) == 2
    assert all_gone(pids, within=10)


def test_no_process_remains_after_close():
    workers = [Worker(seed) for seed in range(3)]
    pids = [worker.process.pid for worker in workers]
    for worker in workers:
        worker.close()
    assert all_gone(pids)
    # Each one joined too (no zombie left), and none that an earlier test left: the suite's check that no test leaks.
    assert not multiprocessing.active_children()


def test_ctrl_c_during_a_step_never_leaves_a_reply_for_the_next_command(ctrl_c_raises):
    rng = np.random.default_rng(0)
    with Worker(0, game="Pong") as worker:
        worker.reset()
        for _ in range(20):
            timer = threading.Timer(rng.uniform(0.0005, 0.005), os.kill, (os.getpid(), signal.SIGINT))
            with pytest.raises(KeyboardInterrupt):
                timer.start()  # in the block: on a loaded machine the signal can come before start() returns
                while True:
                    worker.step(0)
            timer.join()
            assert worker.reset().shape == (4, 84, 84)  # reset's own reply, not an earlier step's 4-tuple


def test_ctrl_c_is_held_until_the_block_ends_and_a_second_one_stops_at_once(ctrl_c_raises):
    from atari_game.worker import interrupts_deferred

    done = []
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the interrupt waits for the block
        done.append("block")
    assert done == ["block"]
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        done.append("never")  # the second Ctrl-C stopped the block
    assert done == ["block"] and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # A process that ignores Ctrl-C goes on ignoring it, held or not.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            done.append("ignored")
        assert done == ["block", "ignored"] and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_the_first_ctrl_c_stops_a_recv_that_waits_with_nothing_sent(ctrl_c_raises):
    with Worker(0) as worker:
        worker.reset()
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            worker.recv()  # a notebook user's slip: no command is pending, so no reply will come
        assert time.monotonic() - start < 2  # one Ctrl-C, not a second one
        assert worker.step(0)[0].shape == (4, 84, 84)  # nothing was read: the worker is in step


# --- a worker function defined in a notebook ------------------------------------------------------------


@pytest.fixture
def notebook_function(monkeypatch):
    """A function defined in an interactive ``__main__`` (a notebook's: no file, no spec), made the main module."""
    main = types.ModuleType("__main__")
    exec("def worker_process(remote, seed):\n    pass\n", vars(main))
    monkeypatch.setitem(sys.modules, "__main__", main)
    return main.worker_process


def test_a_function_defined_in_a_notebook_starts_with_fork_by_default_and_with_fork_only(notebook_function):
    assert start_context(None, notebook_function).get_start_method() == "fork"
    assert start_context("fork", notebook_function).get_start_method() == "fork"
    assert start_context(None, worker_process).get_start_method() == DEFAULT_START_METHOD  # atari_game's own
    for method in ("forkserver", "spawn"):
        with pytest.raises(RuntimeError) as caught:
            start_context(method, notebook_function)
        assert str(caught.value) == (
            f"worker_process is defined in an interactive session (a notebook, or python -c), and a new process "
            f"started with {method!r} cannot find it: it looks the function up in the main module, which it does "
            "not load (a notebook's has no file). Fix: put the code in a module (a .py file beside the notebook) "
            'and import it from there, or start it with start_method="fork".'
        )


def test_without_fork_a_function_defined_in_a_notebook_is_refused_naming_the_fix(notebook_function, monkeypatch):
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])  # Windows
    with pytest.raises(RuntimeError, match=r"a new process started with '\w+' cannot find it") as caught:
        start_context(None, notebook_function)
    assert str(caught.value).endswith(
        "Fix: put the code in a module (a .py file beside the notebook) and import it from there."
    )
    assert start_context(None, worker_process).get_start_method() == DEFAULT_START_METHOD
