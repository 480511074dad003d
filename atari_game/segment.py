"""The shared-memory segment of a `GamePool`: the same named arrays in the parent and in every worker process.

One segment holds a row per env of everything a step returns (observations, rewards, flags, lives, episode
statistics), the actions, and each worker's count of commands sent. `layout` names the arrays, `create` makes the
segment in the parent (its memory taken at once, so a full /dev/shm is an error at the start, not a SIGBUS later),
`attach` opens it in a worker, and `arrays` gives numpy views of it, each array on cache lines of its own.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import signal
from multiprocessing import resource_tracker, shared_memory
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
    # returns them as the step's obs, and reserving rows it never writes would halve the envs /dev/shm holds.
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


def arrays(segment: shared_memory.SharedMemory, names: Layout) -> dict[str, np.ndarray]:
    """Numpy views over the memory of `segment` of the arrays `names` holds (a `layout`)."""
    if segment.buf is None:
        raise ValueError(f"the segment {segment.name} is closed")
    views, offset = {}, 0
    for name, (shape, dtype) in names.items():
        views[name] = np.ndarray(shape, dtype=dtype, buffer=segment.buf, offset=offset)
        offset += padded(shape, dtype)
    return views


def create(names: Layout, n_envs: int) -> shared_memory.SharedMemory:
    """A new segment for the arrays `names` holds (a `layout` of `n_envs` envs), its memory taken now: where there is
    no room, an error at once.

    A segment's pages are only taken from /dev/shm when first touched, and one that cannot be had then
    kills the process touching it (a worker, or the parent) with SIGBUS, long after the start.
    """
    size = sum(padded(shape, dtype) for shape, dtype in names.values())
    _start_resource_tracker()
    # Named after the library and the parent's pid, so that a segment in /dev/shm says whose it is.
    name = f"atari_game_{os.getpid()}_{secrets.token_hex(4)}"
    segment = shared_memory.SharedMemory(name=name, create=True, size=size)
    if not hasattr(os, "posix_fallocate"):  # macOS: no way to take the pages ahead
        return segment
    try:
        os.posix_fallocate(segment._fd, 0, size)  # type: ignore[attr-defined]  # (SharedMemory's descriptor, POSIX)
    except OSError as error:
        segment.close()
        segment.unlink()  # nothing is left behind, whatever went wrong
        if error.errno not in (errno.ENOSPC, errno.ENOMEM):
            raise
        # Linux keeps POSIX shared memory in /dev/shm: its free room is what the pool did not fit in.
        free = f"{_mib(shutil.disk_usage('/dev/shm').free)} are free" if os.path.isdir("/dev/shm") else "less is free"
        raise OSError(
            error.errno,
            f"no room in shared memory (/dev/shm) for the pool's {n_envs} envs: they need {_mib(size)}, "
            f"{size // n_envs:,} bytes each, and {free}. Give /dev/shm more room (Docker: docker run "
            "--shm-size=2g ...; its default is 64 MB) or use fewer envs",
        ) from None
    return segment


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker, the process that deletes the segment when the parent dies without
    closing the pool, with SIGHUP blocked (a blocked signal stays blocked in the process it starts, and the tracker
    unblocks only SIGINT and SIGTERM): a closed terminal or ssh session hangs up its whole process group, and a
    tracker that died with it would leave the segment in /dev/shm. A tracker that is running already is left as it
    is; a SIGHUP that comes meanwhile reaches this process when the mask is restored."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks, and no SIGHUP to fear
        resource_tracker.ensure_running()
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _mib(n_bytes: int) -> str:
    return f"{n_bytes:,} bytes ({n_bytes / 2**20:.1f} MiB)"


def attach(name: str) -> shared_memory.SharedMemory:
    """Open the parent's segment; the parent alone deletes it."""
    try:
        return shared_memory.SharedMemory(name, track=False)  # type: ignore[call-arg]  # (Python 3.13+)
    except TypeError:
        # Before 3.13 attaching registers the name again with the resource tracker, which every process of
        # the pool shares with the parent: harmless, as it keeps a set of names.
        return shared_memory.SharedMemory(name)


# --- the games of one worker ----------------------------------------------------------------------------
