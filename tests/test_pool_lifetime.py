"""A GamePool's shared memory and tickets are the kernel's to free: nothing of them has a name in /dev/shm.

A job scheduler that kills a run with ``kill -9`` of its whole process group (the parent, the workers and
multiprocessing's helper processes together) leaves no process to clean up; whatever the pool had named in /dev/shm
would stay there until the machine restarts. The pool's memory is an anonymous file and its tickets a pipe, both
gone with the last process that holds them.

The checks read /proc (Linux); other processes of the machine (training runs) may make and delete /dev/shm entries of
their own meanwhile, so an entry counts as the pool's when its processes hold it or its name bears one of their pids.
"""

import errno
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from support import descendants, mapped_and_open, open_descriptors

from atari_game import GamePool
from atari_game.game import GameOptions
from atari_game.local_transport import LIVENESS_CHECK_SECONDS
from atari_game.segment import create, layout, padded

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.path.isdir("/dev/shm"), reason="reads /proc and /dev/shm (Linux)"
)

SCRIPT = textwrap.dedent(
    """
    import time
    from atari_game import GamePool

    if __name__ == "__main__":
        pool = GamePool(4, "Pong")
        pool.reset(seed=0)
        print("ready", flush=True)
        time.sleep(600)
    """
)


def dev_shm() -> set[str]:
    return set(os.listdir("/dev/shm"))


def stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state, parent, process group, ...); [] once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rpartition(")")[2].split()
    except OSError:
        return []


def processes() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def group(pgid: int) -> list[int]:
    """The live processes of the process group `pgid` (a dead one its parent has not reaped yet does not count)."""
    return [pid for pid in processes() if (fields := stat(pid)) and fields[2] == str(pgid) and fields[0] != "Z"]


def held(pids: list[int]) -> set[str]:
    """What the processes `pids` have mapped or open that is not a plain library or device: the files of their
    shared memory, as /proc names them (``/dev/shm/NAME``, ``/memfd:NAME (deleted)``, ``pipe:[INODE]``, ...)."""
    paths = set().union(*map(mapped_and_open, pids))
    return {path for path in paths if path.startswith(("/dev/shm/", "/memfd:"))}


def named_in_dev_shm(paths: set[str]) -> set[str]:
    """The entries of /dev/shm that `paths` (as `held` gives them) still name."""
    return {path.removeprefix("/dev/shm/") for path in paths if path.startswith("/dev/shm/")} & dev_shm()


def pools_of(pids: list[int], entries: set[str]) -> set[str]:
    """The /dev/shm `entries` whose names say one of `pids` made them (a named segment, ``atari_game_PID_...``)."""
    return {name for name in entries for pid in pids if name.startswith(f"atari_game_{pid}_")}


def wait_for_line(process: subprocess.Popen, within: float) -> str:
    """The next line `process` prints, or what it printed if it ends or `within` seconds pass first."""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=within):
            return f"(nothing within {within} s)"
    return process.stdout.readline()


def test_kill_9_of_the_whole_process_group_leaves_nothing_in_dev_shm(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    before = dev_shm()
    # Its own session and process group, as a job scheduler (or setsid) starts a run. (TMPDIR: the fork server's
    # socket folder, pymp-*, which Python's multiprocessing removes at exit, stays after kill -9: in pytest's folder.)
    process = subprocess.Popen(
        [sys.executable, "script.py"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    try:
        assert wait_for_line(process, within=120) == "ready\n"
        pgid = os.getpgid(process.pid)
        assert pgid == process.pid
        processes = group(pgid)
        # The parent, a worker per core (at most 4) and multiprocessing's helpers (forkserver, resource tracker).
        assert process.pid in processes and len(processes) >= 3, processes
        holding = held(processes)
        during = dev_shm()
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    deadline = time.monotonic() + 30
    while group(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert group(pgid) == [], "a process of the group survived kill -9"
    new = dev_shm() - before
    # What the pool's processes held by name, or named after themselves, is gone with them (before the change:
    # atari_game_PID_HEX, the segment, and sem.mp-XXXXXXXX, the tickets' named semaphore).
    left = (named_in_dev_shm(holding) | pools_of(processes, during)) & new
    assert left == set(), f"kill -9 left {sorted(left)} in /dev/shm"
    assert pools_of(processes, new) == set()


def test_the_segment_and_the_tickets_have_no_name_while_the_pool_runs():
    before = dev_shm()
    with GamePool(4, "Pong", n_workers=2) as pool:
        pool.reset(seed=0)
        pool.step(pool.action_space.sample())  # a whole-pool step: the tickets in use
        processes = [os.getpid(), *descendants(os.getpid())]
        holding = held(processes)
        new = dev_shm() - before
        # Nothing the pool's processes hold has a name in /dev/shm, and no entry bears the pool's pids.
        assert named_in_dev_shm(holding) & new == set()
        assert pools_of(processes, new) == set()
        # The segment is mapped in the parent and in each worker, an anonymous file with no name left anywhere.
        segment = {path for path in held([os.getpid()]) if "atari_game_" in path}
        assert segment and all(path.endswith(" (deleted)") for path in segment), segment
        for worker in pool._workers:
            assert {path for path in held([worker.process.pid]) if "atari_game_" in path} == segment


def test_a_segment_the_kernel_will_not_give_is_refused_at_once_saying_so_and_leaving_no_descriptor(monkeypatch):
    def no_room(fd, offset, length):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(os, "posix_fallocate", no_room)
    arrays = layout(200, GameOptions(game="Pong"), same_step=False)
    needed = sum(padded(shape, dtype) for shape, dtype in arrays.values())
    before = open_descriptors()
    with pytest.raises(OSError, match=r"no room in memory") as raised:
        create(arrays, 200)
    assert raised.value.errno == errno.ENOMEM and str(raised.value) == (
        f"[Errno 12] no room in memory for the pool's 200 envs: they need {needed:,} bytes ({needed / 2**20:.1f} "
        f"MiB), {needed // 200:,} bytes each. The pool's shared memory takes RAM (or swap) and counts against this "
        "process's memory limit (its container's or job's), not /dev/shm's size: free memory, raise the limit or use "
        "fewer envs"
    )
    assert open_descriptors() == before


def test_without_memfd_create_the_segment_is_a_file_in_dev_shm_deleted_at_once(monkeypatch):
    # As on macOS (in the temporary directory there), or where a sandbox refuses memfd_create.
    monkeypatch.delattr(os, "memfd_create")
    before = dev_shm()
    with GamePool(4, "Pong", n_workers=2) as pool:
        obs, _ = pool.reset(seed=0)
        assert pool.step(pool.action_space.sample())[0].shape == obs.shape == (4, 4, 84, 84)
        name = pool._transport.segment.name
        links = [link for link in open_descriptors().values() if name in link]
        assert links and all(link.startswith(f"/dev/shm/{name}_") and link.endswith(" (deleted)") for link in links)
        assert not pools_of([os.getpid()], dev_shm() - before)


@pytest.mark.timing
def test_tickets_left_by_workers_killed_in_a_step_do_not_slow_the_steps_after_it():
    # Two workers of three die before a whole-pool step: the one left takes one of the two tickets, and the other stays
    # in the pipe. Left there, it would make the next step's last worker think it is not, and the parent would wait
    # for a wake-up until its liveness check gave up (each such step takes one ticket away, so one step per ticket).
    with GamePool(3, "Pong", n_workers=3, restart_workers=True) as pool:
        pool.reset(seed=0)
        for worker in pool._workers[:2]:
            os.kill(worker.process.pid, signal.SIGKILL)
            worker.process.join()
        assert pool.step([0, 0, 0])[3].tolist() == [True, True, False]  # the two restarted
        seconds = []
        for _ in range(5):
            start = time.monotonic()
            pool.step([0, 0, 0])
            seconds.append(time.monotonic() - start)
        assert max(seconds) < LIVENESS_CHECK_SECONDS, seconds
        with pytest.raises(BlockingIOError):  # and no ticket is left after a step
            os.read(pool._transport.ticket_fds[0], 1)
