"""The shared-memory segment of a `GamePool`: the same named arrays in the parent and in every worker process.

One segment holds a row per env of everything a step returns (observations, rewards, flags, lives, episode
statistics), the actions, and each worker's count of commands sent. `layout` names the arrays, `create` makes the
segment in the parent (its memory taken at once, so no room is an error at the start, not a SIGBUS later), `attach`
maps it in a worker, and `arrays` gives numpy views of it, each array on cache lines of its own.

The segment is an anonymous file (Linux's `memfd_create`; elsewhere a temporary file deleted as soon as it is open):
it has no name in /dev/shm or anywhere else, and the kernel frees it when the last process that holds it (open or
mapped) ends, however it ends, `kill -9` of the whole process group included. It reaches a worker as a file
descriptor (`SegmentFile`), never by name.
"""

from __future__ import annotations

import dataclasses
import errno
import mmap
import os
import secrets
import shutil
import tempfile
from multiprocessing import reduction
from typing import Any

import numpy as np

from atari_game.game import GameOptions

# The segment's arrays by name: (shape, dtype).
Layout = dict[str, tuple[tuple[int, ...], Any]]


def layout(n_envs: int, options: GameOptions, same_step: bool) -> Layout:
    """The segment's arrays, by name: ``(shape, dtype)``, a row per env (``commands``: a row per env too, used by
    each worker's first env)."""
    obs = ((n_envs, *options.observation_shape), options.observation_dtype)
    # Only same-step autoreset reports final observations beside the next episode's first: next-step mode
    # returns them as the step's obs, and reserving rows it never writes would halve the envs that fit in memory.
    final_obs = ((n_envs if same_step else 0, *options.observation_shape), options.observation_dtype)
    # Continuous actions are (radius, angle, fire) rows, float32 as the Game computes with them.
    actions = ((n_envs, 3), np.float32) if options.continuous else ((n_envs,), np.int64)
    return {
        "obs": obs,
        "final_obs": final_obs,
        "actions": actions,
        "rewards": ((n_envs,), np.float64),
        "terminations": ((n_envs,), np.bool_),
        "truncations": ((n_envs,), np.bool_),
        "lives": ((n_envs,), np.int32),
        # The episode statistics of the step that ended an episode (the Game's episode info).
        "ended": ((n_envs,), np.bool_),
        "episode_return": ((n_envs,), np.float64),
        "episode_length": ((n_envs,), np.int64),
        "game_ended": ((n_envs,), np.bool_),
        "game_return": ((n_envs,), np.float64),
        "game_length": ((n_envs,), np.int64),
        # The commands the parent has sent to the worker whose first env is the row (a cache line per row), for
        # the worker's watch (`atari_game.pool_worker.CommandWatch`).
        "commands": ((n_envs, 8), np.int64),
    }


def padded(shape: tuple[int, ...], dtype: Any) -> int:
    """The bytes an array of `shape` and `dtype` takes in the segment: whole 64-byte cache lines, so that two
    processes never write to one line."""
    return -(-int(np.prod(shape)) * np.dtype(dtype).itemsize // 64) * 64


@dataclasses.dataclass(frozen=True)
class SegmentFile:
    """The segment's file as a worker's argument: its descriptor `fd` in this process, its `size` in bytes and its
    `name` (``atari_game_PID_HEX``, for people: /proc/PID/maps and /proc/PID/fd show ``/memfd:NAME (deleted)``).

    Pickled, as multiprocessing pickles a new process's arguments under "forkserver" and "spawn", it travels as its
    descriptor, duplicated into the process that unpickles it, as a `multiprocessing.connection.Connection` does
    (`multiprocessing.reduction.DupFd`); a process started with "fork" inherits the descriptor itself.
    """

    fd: int
    size: int
    name: str

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _rebuild_file, (reduction.DupFd(self.fd), self.size, self.name)


def _rebuild_file(duplicate: Any, size: int, name: str) -> SegmentFile:
    return SegmentFile(duplicate.detach(), size, name)


class Segment:
    """The segment's file, mapped into this process: `buf`, the memory (None once closed), `size` and `name`. (The
    mapping, Python's `mmap.mmap`, holds a duplicate of the file's descriptor of its own until it is unmapped.)"""

    def __init__(self, file: SegmentFile) -> None:
        self.file, self.size, self.name = file, file.size, file.name
        self.buf: mmap.mmap | None = mmap.mmap(file.fd, file.size)
        self._closed = False

    def close(self) -> None:
        """Close the file's descriptor and unmap the memory (a second call does nothing).

        Raises BufferError while numpy views of the memory (`arrays`) exist, the descriptor closed all the same: the
        memory is then unmapped when the last of them goes.
        """
        if not self._closed:
            self._closed = True
            os.close(self.file.fd)
        buf, self.buf = self.buf, None  # (ours dropped either way: the views alone keep the mapping)
        if buf is not None:
            buf.close()


def arrays(segment: Segment, names: Layout) -> dict[str, np.ndarray]:
    """Numpy views over the memory of `segment` of the arrays `names` holds (a `layout`); each view (and each view of
    it) keeps the memory mapped while it lives, closed segment or not."""
    if segment.buf is None:
        raise ValueError(f"the segment {segment.name} is closed")
    views, offset = {}, 0
    for name, (shape, dtype) in names.items():
        # frombuffer holds the buffer (np.ndarray(buffer=...) lets it go), so the mapping cannot close under a view.
        views[name] = np.frombuffer(segment.buf, dtype, int(np.prod(shape)), offset).reshape(shape)
        offset += padded(shape, dtype)
    return views


def create(names: Layout, n_envs: int) -> Segment:
    """A new segment for the arrays `names` holds (a `layout` of `n_envs` envs), its memory taken now: where there is
    no room, an `OSError` at once, saying where the room was short.

    A file's pages are only taken when first touched, and one that cannot be had then kills the process touching it
    (a worker, or the parent) with SIGBUS, long after the start.
    """
    size = sum(padded(shape, dtype) for shape, dtype in names.values())
    # Named after the library and the parent's pid, so that /proc's listings of a process's files say whose it is.
    name = f"atari_game_{os.getpid()}_{secrets.token_hex(4)}"
    fd, directory = _anonymous_file(name)
    try:
        os.ftruncate(fd, size)
        _reserve(fd, size, n_envs, directory)
        return Segment(SegmentFile(fd, size, name))
    except BaseException:
        os.close(fd)  # nothing is left behind, whatever went wrong
        raise


def attach(file: SegmentFile) -> Segment:
    """Map the parent's segment in a worker, from the file it was given; the worker closes it when it ends."""
    return Segment(file)


def _anonymous_file(name: str) -> tuple[int, str | None]:
    """A new empty file that no directory names, and the directory whose room its pages take (None: memory alone).

    Linux's `os.memfd_create` makes one that never had a name. Where it is missing (macOS) or refused (a seccomp
    filter; ``vm.memfd_noexec = 2``), a temporary file is deleted as soon as it is open, in /dev/shm (memory) where
    there is one, else in the temporary directory; a process killed between the two leaves it there.
    """
    if hasattr(os, "memfd_create"):
        try:
            return os.memfd_create(name, os.MFD_CLOEXEC), None
        except OSError:  # refused: the file below instead
            pass
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    fd, path = tempfile.mkstemp(prefix=f"{name}_", dir=directory)
    os.unlink(path)
    return fd, directory


def _reserve(fd: int, size: int, n_envs: int, directory: str | None) -> None:
    """Take the file's pages now; where there is no room (ENOSPC, ENOMEM), an `OSError` saying where it was short.

    A memfd is shared memory outside any mount's size limit, /dev/shm's included: its pages take RAM (or swap) and
    are charged to the memory cgroup of the process (a container's or a job's memory limit). The kernel refuses them
    with ENOSPC where its overcommit accounting says no (``vm.overcommit_memory = 2``), with ENOMEM past the cgroup's
    limit when its OOM killer found nothing to end; short of that it may reclaim and swap other memory, or end a
    process of the cgroup, first. A file in /dev/shm, or in a directory, takes that file system's room.
    """
    if not hasattr(os, "posix_fallocate"):  # macOS: no way to take the pages ahead
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.ENOMEM):
            raise
        need = f"the pool's {n_envs} envs: they need {_mib(size)}, {size // n_envs:,} bytes each"
        if directory is None:
            message = (
                f"no room in memory for {need}. The pool's shared memory takes RAM (or swap) and counts against this "
                "process's memory limit (its container's or job's), not /dev/shm's size: free memory, raise the "
                "limit or use fewer envs"
            )
        elif directory == "/dev/shm":
            free = f"{_mib(shutil.disk_usage(directory).free)} are free"
            message = (
                f"no room in shared memory (/dev/shm) for {need}, and {free}. Give /dev/shm more room (Docker: docker "
                "run --shm-size=2g ...; its default is 64 MB) or use fewer envs"
            )
        else:
            free = f"{_mib(shutil.disk_usage(directory).free)} are free"
            message = f"no room in {directory} for {need}, and {free}. Free room there or use fewer envs"
        raise OSError(error.errno, message) from None


def _mib(n_bytes: int) -> str:
    return f"{n_bytes:,} bytes ({n_bytes / 2**20:.1f} MiB)"


# --- the games of one worker ----------------------------------------------------------------------------
