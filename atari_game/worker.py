"""The labml tutorial's one-process-per-game protocol, made safe to use.

Code written for the tutorial runs unchanged::

    worker = Worker(47)
    worker.child.send(("step", action))
    obs, reward, done, episode_info = worker.child.recv()
    worker.child.send(("reset", None))
    obs = worker.child.recv()
    worker.child.send(("close", None))

What it adds: a failed command is answered with a `WorkerError` carrying the worker's traceback (the
convenience methods `Worker.step`, `Worker.reset` and `Worker.recv` raise it) and the worker goes on
serving; a worker that dies shows up as an error at once instead of a hang; `Worker.close` leaves no
process behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import signal
import socket
import traceback
from multiprocessing.connection import Connection
from typing import Any

import cv2
import numpy as np

from atari_game.game import Game, GameOptions

# Fork is fast but unsafe once the parent runs threads (torch, for one); forkserver forks from a clean
# single-threaded server instead. Where it does not exist, spawn.
DEFAULT_START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def start_context(start_method: str | None) -> multiprocessing.context.BaseContext:
    """The multiprocessing context for workers; a forkserver imports atari_game once, not in every child."""
    context = multiprocessing.get_context(start_method or DEFAULT_START_METHOD)
    if context.get_start_method() == "forkserver":
        # Takes effect if this process has not started its fork server yet; '__main__' is the default.
        context.set_forkserver_preload(["__main__", "atari_game"])
    return context


def prepare_worker_process() -> None:
    """What every worker process does first."""
    # Ctrl-C reaches the whole process group; the parent decides when its workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The workers already fill the cores: cv2's own threads would only fight them.
    cv2.setNumThreads(1)
    # Workers are batch CPU work: under SCHED_BATCH a worker woken by a command does not preempt the parent,
    # which would otherwise be held up before it can wake the next worker (Linux; any user may ask).
    if hasattr(os, "SCHED_BATCH"):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


class WorkerError(RuntimeError):
    """A worker failed a command or died; the message names the worker and holds its traceback."""


class ParentEnd(Connection):
    """The parent's end of a worker's pipe: a dead worker always reads as `EOFError`.

    A process killed with unread data in its socket makes the kernel reset the connection instead of
    closing it; tutorial code expects (at worst) EOFError, so that is what it gets.
    """

    def recv(self) -> Any:
        try:
            return super().recv()
        except ConnectionResetError as error:
            raise EOFError("the worker's end of the pipe is gone") from error


def end_process(process: multiprocessing.process.BaseProcess, pipe_end: Connection) -> None:
    """Make sure a worker process that was asked to close is gone, then release its pipe and handles."""
    process.join(timeout=2)
    if process.is_alive():  # it did not listen: it is stuck or was never reading
        process.kill()
        process.join()
    pipe_end.close()
    process.close()


def pipe() -> tuple[ParentEnd, Connection]:
    """A duplex pipe as `multiprocessing.Pipe()` makes it: (the parent's end, the child's end)."""
    parent_socket, child_socket = socket.socketpair()
    return ParentEnd(parent_socket.detach()), Connection(child_socket.detach())


def worker_process(remote: Connection, seed: int, **game_options: Any) -> None:
    """Run one `Game` in this process and serve commands from `remote` until ``("close", None)``.

    ``("step", action)`` is answered with ``game.step(action)``, ``("reset", None)`` with ``game.reset()``.
    A command that fails is answered with a `WorkerError` instead, and the worker keeps serving.
    The worker also stops when the parent's end of the pipe closes.
    """
    prepare_worker_process()
    name = f"worker (seed={seed}, pid={os.getpid()})"
    try:
        game = Game(seed=seed, **game_options)
    except Exception as error:
        remote.send(_failure(name, "start", error))
        return
    while True:
        try:
            message = remote.recv()
        except EOFError:  # the parent is gone: nobody left to serve
            return
        try:
            command, data = message
            if command == "step":
                reply = game.step(data)
            elif command == "reset":
                reply = game.reset()
            elif command == "close":
                remote.close()
                return
            else:
                raise ValueError(f"unknown command {command!r}; valid commands: 'step', 'reset', 'close'")
        except Exception as error:
            reply = _failure(name, message, error)
        remote.send(reply)


def _failure(name: str, message: Any, error: Exception) -> WorkerError:
    return WorkerError(
        f"{name} failed on {message!r}: {type(error).__name__}: {error}\n\n"
        f"Traceback in the worker:\n{traceback.format_exc()}"
    )


class Worker:
    """One `Game` in its own process, driven through a `multiprocessing` Pipe as in the labml tutorial.

    ``Worker(seed, **game_options)`` validates the options here, in the parent, then starts
    `worker_process` in a child process. ``.child`` is the parent's end of the pipe, ``.process`` the
    child. `start_method` is a `multiprocessing` start method; the default is `DEFAULT_START_METHOD`.
    Use it as a context manager, or call `close`.
    """

    def __init__(self, seed: int, *, start_method: str | None = None, **game_options: Any) -> None:
        options = GameOptions.from_kwargs(seed=seed, **game_options)
        context = start_context(start_method)
        self.child, remote = pipe()
        kwargs = dataclasses.asdict(options)
        args = (remote, kwargs.pop("seed"))
        self.process = context.Process(target=worker_process, args=args, kwargs=kwargs, daemon=True)
        self.process.start()
        # Drop the parent's copy of the child's end: then a dead child reads as EOF, never as a hang.
        remote.close()
        self.name = f"worker (seed={seed}, pid={self.process.pid})"
        self.closed = False

    def step(self, action: int) -> tuple[np.ndarray, float, bool, dict[str, Any] | None]:
        """``game.step(action)`` in the worker; raises `WorkerError` if it failed or the worker died."""
        self.send("step", action)
        return self.recv()

    def reset(self) -> np.ndarray:
        """``game.reset()`` in the worker; raises `WorkerError` if it failed or the worker died."""
        self.send("reset", None)
        return self.recv()

    def send(self, command: str, data: Any) -> None:
        """Send a command without waiting, to step many workers at once; collect each reply with `recv`."""
        if self.closed:
            raise WorkerError(f"{self.name} is closed")
        try:
            self.child.send((command, data))
        except OSError as error:  # BrokenPipeError and friends: the child is gone
            raise self._death() from error

    def recv(self) -> Any:
        """The reply to the last command sent; raises `WorkerError` if it failed or the worker died."""
        if self.closed:
            raise WorkerError(f"{self.name} is closed")
        try:
            reply = self.child.recv()
        except (EOFError, OSError) as error:
            raise self._death() from error
        if isinstance(reply, WorkerError):
            raise reply
        return reply

    def _death(self) -> WorkerError:
        self.process.join(timeout=1)
        return WorkerError(f"{self.name} died (exit code {self.process.exitcode})")

    def close(self) -> None:
        """Stop the worker; when this returns its process is gone. Calling it again does nothing."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):  # already dead: reaped below
            self.child.send(("close", None))
        end_process(self.process, self.child)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Worker({self.name}{', closed' if self.closed else ''})"
