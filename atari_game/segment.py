"""The shared-memory segment of a `GamePool`: the same named arrays in the parent and in every worker process.

`layout` names the arrays, `create` makes the segment in the parent (an anonymous file, its memory taken at once), a
worker maps it as a `Segment` from a file descriptor (`SegmentFile`), never by name, and `arrays` gives numpy views.
"""

from __future__ import annotations

import contextlib
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


def layout(num_envs: int, options: GameOptions, same_step: bool) -> Layout:
    """The segment's arrays, by name: ``(shape, dtype)``, a row per env (``commands``: used by each worker's first)."""
    return {
        "obs": ((num_envs, *options.observation_shape), options.observation_dtype),
        # Only same-step autoreset reports final observations apart (next-step returns them as obs): no rows otherwise.
        "final_obs": ((num_envs if same_step else 0, *options.observation_shape), options.observation_dtype),
        # Continuous actions are (radius, angle, fire) rows, float32 as the Game computes with them.
        "actions": ((num_envs, 3), np.float32) if options.continuous else ((num_envs,), np.int64),
        "rewards": ((num_envs,), np.float64),
        "terminations": ((num_envs,), np.bool_),
        "truncations": ((num_envs,), np.bool_),
        "lives": ((num_envs,), np.int32),
        # The episode statistics of the step that ended an episode (the Game's episode info).
        "ended": ((num_envs,), np.bool_),
        "episode_return": ((num_envs,), np.float64),
        "episode_length": ((num_envs,), np.int64),
        "game_ended": ((num_envs,), np.bool_),
        "game_return": ((num_envs,), np.float64),
        "game_length": ((num_envs,), np.int64),
        # The commands sent to the worker whose first env is the row (a cache line each), for its `CommandWatch`.
        "commands": ((num_envs, 8), np.int64),
    }


def padded(shape: tuple[int, ...], dtype: Any) -> int:
    """The bytes an array takes in the segment: whole 64-byte cache lines, so that no two processes write to one."""
    return -(-int(np.prod(shape)) * np.dtype(dtype).itemsize // 64) * 64


@dataclasses.dataclass(frozen=True)
class SegmentFile:
    """The segment's file as a worker's argument: its descriptor `fd`, `size` in bytes and `name` (for /proc/PID/fd's
    ``/memfd:NAME (deleted)``); pickled ("forkserver", "spawn"), it travels as its descriptor, as a Connection does."""

    fd: int
    size: int
    name: str

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _rebuild_file, (reduction.DupFd(self.fd), self.size, self.name)


def _rebuild_file(duplicate: Any, size: int, name: str) -> SegmentFile:
    return SegmentFile(duplicate.detach(), size, name)


class Segment:
    """The segment's file, mapped into this process: `buf`, the memory (None once closed), `size` and `name`."""

    def __init__(self, file: SegmentFile) -> None:
        self.file, self.size, self.name = file, file.size, file.name
        self.buf: mmap.mmap | None = mmap.mmap(file.fd, file.size)

    def close(self) -> None:
        """Close the descriptor and unmap the memory (once); BufferError while views exist: the last one unmaps it."""
        if self.buf is not None:
            buf, self.buf = self.buf, None  # (ours dropped either way: the views alone keep the mapping)
            os.close(self.file.fd)  # (the mapping holds a descriptor of its own)
            buf.close()


def arrays(segment: Segment, names: Layout) -> dict[str, np.ndarray]:
    """Numpy views of the arrays `names` holds (a `layout`) over the memory of `segment`, each keeping it mapped."""
    if segment.buf is None:
        raise ValueError(f"the segment {segment.name} is closed")
    views, offset = {}, 0
    for name, (shape, dtype) in names.items():
        # frombuffer holds the buffer (np.ndarray(buffer=...) lets it go), so the mapping cannot close under a view.
        views[name] = np.frombuffer(segment.buf, dtype, int(np.prod(shape)), offset).reshape(shape)
        offset += padded(shape, dtype)
    return views


def create(names: Layout, num_envs: int) -> Segment:
    """A new segment for `names` (`num_envs` envs), its memory taken now: no room is an OSError at once, not a
    SIGBUS."""
    size = sum(padded(shape, dtype) for shape, dtype in names.values())
    # Named after the library and the parent's pid, so that /proc's listings of a process's files say whose it is.
    name = f"atari_game_{os.getpid()}_{secrets.token_hex(4)}"
    fd, directory = _anonymous_file(name)
    try:
        os.ftruncate(fd, size)
        _reserve(fd, size, num_envs, directory)
        return Segment(SegmentFile(fd, size, name))
    except BaseException:
        os.close(fd)  # nothing is left behind, whatever went wrong
        raise


def _anonymous_file(name: str) -> tuple[int, str | None]:
    """A new file that no directory names, and the directory whose room its pages take (None: memory alone)."""
    if hasattr(os, "memfd_create"):  # missing on macOS
        with contextlib.suppress(OSError):  # refused (a seccomp filter, vm.memfd_noexec = 2): the file below instead
            return os.memfd_create(name, os.MFD_CLOEXEC), None
    # A file deleted once open (a process killed in between leaves it), in memory where /dev/shm exists.
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    fd, path = tempfile.mkstemp(prefix=f"{name}_", dir=directory)
    os.unlink(path)
    return fd, directory


def _reserve(fd: int, size: int, num_envs: int, directory: str | None) -> None:
    """Take the file's pages now; where there is no room (ENOSPC, ENOMEM), an `OSError` saying where it was short."""
    if not hasattr(os, "posix_fallocate"):  # macOS: no way to take the pages ahead
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.ENOMEM):
            raise
        need = f"the pool's {num_envs} envs: they need {_mib(size)}, {size // num_envs:,} bytes each"
        free = "" if directory is None else f", and {_mib(shutil.disk_usage(directory).free)} are free"
        if directory is None:  # a memfd: RAM (or swap) charged to the process's memory cgroup, not /dev/shm's room
            message = (
                f"no room in memory for {need}. The pool's shared memory takes RAM (or swap) and counts against this "
                "process's memory limit (its container's or job's), not /dev/shm's size: free memory, raise the "
                "limit or use fewer envs"
            )
        elif directory == "/dev/shm":
            message = (
                f"no room in shared memory (/dev/shm) for {need}{free}. Give /dev/shm more room (Docker: docker "
                "run --shm-size=2g ...; its default is 64 MB) or use fewer envs"
            )
        else:
            message = f"no room in {directory} for {need}{free}. Free room there or use fewer envs"
        raise OSError(error.errno, message) from None


def _mib(n_bytes: int) -> str:
    return f"{n_bytes:,} bytes ({n_bytes / 2**20:.1f} MiB)"
