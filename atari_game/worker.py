"""The labml tutorial's one-process-per-game protocol, made safe to use.

Code written for the tutorial runs unchanged; a failed command is answered with a `WorkerError` (the worker goes on
serving), a dead worker is an error at once instead of a hang, and `Worker.close` leaves no process behind (the
Worker guide shows it all).
"""

from __future__ import annotations

import _signal
import ast
import contextlib
import dataclasses
import functools
import linecache
import multiprocessing
import os
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any

import cv2
import numpy as np

from atari_game.game import Game, GameOptions

#: The `multiprocessing` start method of `Worker` and `GamePool` unless told: "forkserver", which forks from a clean
#: single-threaded server (fork is fast but unsafe once the parent runs threads, torch's for one), else "spawn".
DEFAULT_START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"


def available_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS has one, else all of the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def start_context(
    start_method: str | None, target: Callable[..., Any] | None = None
) -> multiprocessing.context.BaseContext:
    """The multiprocessing context for worker processes that run `target` (a fork server preloads atari_game).

    `start_method` None is `DEFAULT_START_METHOD`, or "fork" for a `target` defined in a main module that new
    processes do not load (a notebook's cells, ``python -c``, a package's ``__main__``; the Worker guide says why).

    Raises:
        ValueError: `start_method` is no start method of this platform.
        RuntimeError: `target` is defined interactively and `start_method` (or, on a platform without "fork", any
            method) starts processes that cannot find it; the message names the fix.
    """
    methods = multiprocessing.get_all_start_methods()
    if start_method is not None and start_method not in methods:
        default = f"None: {DEFAULT_START_METHOD!r}"
        raise ValueError(f"start_method must be one of {methods} (or {default}), got {start_method!r}")
    main = sys.modules["__main__"]
    if target is not None and getattr(target, "__module__", None) == "__main__" and not _main_is_rerun(main):
        if start_method is None and "fork" in methods:
            start_method = "fork"
        elif start_method != "fork":
            fork = ', or start it with start_method="fork"' if "fork" in methods else ""
            raise RuntimeError(
                f"{target.__qualname__} is defined in an interactive session (a notebook, or python -c), and a new "
                f"process started with {start_method or DEFAULT_START_METHOD!r} cannot find it: it looks the "
                "function up in the main module, which it does not load (a notebook's has no file). Fix: put the "
                f"code in a module (a .py file beside the notebook) and import it from there{fork}."
            )
    context = multiprocessing.get_context(start_method or DEFAULT_START_METHOD)
    if context.get_start_method() == "forkserver":
        # Takes effect if this process has not started its fork server yet; '__main__' is the default.
        context.set_forkserver_preload(["__main__", "atari_game"])
    return context


def check_main_guard(context: multiprocessing.context.BaseContext, starting: str, fork_fix: bool = True) -> None:
    """Refuse, before any process starts, to start `starting` from the top level of a main script that every new
    process will run again (under "spawn" and "forkserver"; the Worker guide says why).

    Notebooks, ``python -c``, a package's ``__main__.py`` and "fork" re-run nothing, so they pass. `fork_fix`: the
    message offers ``start_method="fork"`` as a fix too (not for a caller that takes no start method).

    Raises:
        RuntimeError: naming the script, the line and the fixes; always for a script read from a pipe.
    """
    method, main = context.get_start_method(), sys.modules["__main__"]
    if method == "fork" or not _main_is_rerun(main):
        return
    fork = ', or pass start_method="fork" (fast, but unsafe once the process runs threads, as it does after importing'
    fork = f"{fork} torch)" if fork_fix else ""
    if main.__spec__ is None and not os.path.isfile(main.__file__ or ""):  # a script read from a pipe: "<stdin>"
        raise RuntimeError(
            f"{starting} cannot start under the {method!r} start method from a script read from {main.__file__}: "
            f"every new process first runs the main script again, and that one is no file. Fix: save the script "
            f"to a file and run that{fork}."
        )
    # The main module's own frame, if this call comes from its top-level code (directly or through functions).
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)):
        frame = frame.f_back
    if frame is None:  # called after the script's top level ran, or from another thread
        return
    script, line, guard = frame.f_code.co_filename, frame.f_lineno, 'if __name__ == "__main__":'
    guarded = _guarded_lines(script)
    if guarded is None or line is None or line in guarded:  # inside the guard, or no source to tell: let it be
        return
    raise RuntimeError(
        f"{starting} is started at the top level of {script} (line {line}: "
        f"`{linecache.getline(script, line).strip()}`), outside an `{guard}` block. Under the {method!r} "
        f"start method every new process first runs that script again, and there it would start {starting} "
        "of its own, which multiprocessing refuses: the new process would die at once. "
        f"Fix: put the script's top-level code under `{guard}`{fork}."
    )


def _main_is_rerun(main: Any) -> bool:
    """Whether a "spawn" or "forkserver" child runs the main module again, as ``multiprocessing.spawn`` decides."""
    name = getattr(main.__spec__, "name", None)
    if name is not None:  # python -m name: re-run, unless it is a package's __main__
        return name != "__main__" and not name.endswith(".__main__")
    path = getattr(main, "__file__", None)  # a script: re-run; notebooks and python -c have no file
    return path is not None and os.path.splitext(os.path.basename(path))[0] != "ipython"


@functools.cache
def _guarded_lines(path: str) -> frozenset[int] | None:
    """The lines of the script at `path` inside ``if __name__ == "__main__":`` blocks; None without its source."""
    source = "".join(linecache.getlines(path))
    if not source:  # not a readable file: no telling
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # edited since it started: no telling either
        return None
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node.test):
            last = node.body[-1]
            lines.update(range(node.body[0].lineno, (last.end_lineno or last.lineno) + 1))
    return frozenset(lines)


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"``, either way round, also as part of a larger condition."""
    return any(
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.Eq)
        and {ast.unparse(node.left), ast.unparse(node.comparators[0])} == {"__name__", "'__main__'"}
        for node in ast.walk(test)
    )


def prepare_worker_process() -> None:
    """What every worker process does first."""
    # Ctrl-C reaches the whole process group; the parent decides when its workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The workers already fill the cores: cv2's own threads would only fight them.
    cv2.setNumThreads(1)
    # Under SCHED_BATCH a worker woken by a command does not preempt the parent (Design page; Linux, any user may ask).
    if hasattr(os, "SCHED_BATCH"):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


class InterruptHold:
    """SIGINT's handler within `interrupts_deferred`: it takes a Ctrl-C in (`held`), and stops at once on a second.
    Another signal's handler may pass its signal here to be held the same way (a trainer's SIGTERM)."""

    def __init__(self) -> None:
        self.held: list[int] = []

    def __call__(self, signum: int, frame: Any) -> None:
        self.held.append(signum)
        if len(self.held) > 1:  # Ctrl-C again: the user will not wait
            raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) until the block is done, then deliver it to the handler it would have reached.

    A command and its reply, or a pool's books of what it sent and what was answered, are then never left half done.
    A second Ctrl-C within the block raises `KeyboardInterrupt` at once; outside the main thread it runs as it is.
    A signal passed to the `InterruptHold` by its own handler (a trainer's SIGTERM) is held the same way, and is the
    one delivered after the block.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hold = InterruptHold()
    # signal's C module: signal.signal would try to wrap each handler in an enum, ~5 µs a call, on every pool step.
    previous = _signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        _signal.signal(signal.SIGINT, previous)
        if len(hold.held) == 1:
            signal.raise_signal(hold.held[0])


@contextlib.contextmanager
def sigterm_as_ctrl_c(received: list[int]) -> Iterator[None]:
    """Within the block, SIGTERM (a scheduler preempting the job, `kill`) stops a run as Ctrl-C does: held while a pool
    step's books are open, then `KeyboardInterrupt`, even where SIGINT is ignored (a background job); `received` then
    holds SIGTERM. A second SIGTERM (or Ctrl-C) within a held step stops at once. Outside the main thread the block
    runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    run = os.getpid()

    def stop(signum: int, frame: Any) -> None:
        if os.getpid() != run:  # a worker forked from the run has this handler too: there SIGTERM ends it, as anywhere
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        received[:] = [signum]  # (a held SIGTERM comes here twice: when sent, and when its pool step ends)
        hold = signal.getsignal(signal.SIGINT)
        if isinstance(hold, InterruptHold):  # in a pool step: it delivers SIGTERM again when the step is done
            hold(signum, frame)
        else:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:  # (None: a handler set outside Python, which Python cannot put back)
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


class WorkerError(RuntimeError):
    """A worker failed a command or died; the message names the worker and holds its traceback."""


class ParentEnd(Connection):
    """The parent's end of a worker's pipe: a dead worker always reads as `EOFError`, as tutorial code expects, even
    when the kernel resets the connection (a process killed with unread data in its socket)."""

    def recv(self) -> Any:
        """The next object the worker sent; `EOFError` once the worker is gone, however it went."""
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


def worker_process(remote: Connection, seed: int | None, **game_options: Any) -> None:
    """Run one `Game` in this process and serve commands from `remote` until ``("close", None)``.

    ``("step", action)`` is answered with ``game.step(action)``, ``("reset", None)`` with ``game.reset()``, a command
    that fails with a `WorkerError` (the worker keeps serving). The worker also stops when the parent's end closes.
    """
    prepare_worker_process()
    name = f"worker (seed={seed}, pid={os.getpid()})"
    try:
        game = Game(seed=seed, **game_options)
    except Exception as error:
        remote.send(_failure(name, "start", error))
        return
    reply: object  # what step or reset returned, or a WorkerError
    while True:
        try:
            message = remote.recv()
        except EOFError:  # the parent is gone: nobody left to serve
            return
        try:
            if not (isinstance(message, (tuple, list)) and len(message) == 2):
                raise ValueError('a command is a pair: ("step", action), ("reset", None) or ("close", None)')
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

    ``Worker(seed, **game_options)`` validates the options in the parent, then starts `worker_process` in a child
    process: ``.child`` is the parent's end of the pipe, ``.process`` the child. `start_method`: see `start_context`;
    under "forkserver" and "spawn" a script must start it under ``if __name__ == "__main__":`` (`check_main_guard`
    says so at once). Use it as a context manager, or call `close`.
    """

    def __init__(self, seed: int | None, *, start_method: str | None = None, **game_options: Any) -> None:
        options = GameOptions.from_kwargs(seed=seed, **game_options)
        context = start_context(start_method, worker_process)  # (this module's, or its copy in a notebook)
        check_main_guard(context, "a Worker")
        self.child, remote = pipe()
        kwargs = dataclasses.asdict(options)
        # (Every start method's context has Process; typeshed declares it on each, not on BaseContext.)
        self.process = context.Process(  # type: ignore[attr-defined]
            target=worker_process, args=(remote, kwargs.pop("seed")), kwargs=kwargs, daemon=True
        )
        self.process.start()
        # Drop the parent's copy of the child's end: then a dead child reads as EOF, never as a hang.
        remote.close()
        self.name = f"worker (seed={seed}, pid={self.process.pid})"
        self.closed = False

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, dict[str, Any] | None]:
        """``game.step(action)`` in the worker; raises `WorkerError` if it failed or the worker died."""
        with interrupts_deferred():  # Ctrl-C after the reply is in: never a reply left for the next command
            self.send("step", action)
            return self.recv()

    def reset(self) -> np.ndarray:
        """``game.reset()`` in the worker; raises `WorkerError` if it failed or the worker died."""
        with interrupts_deferred():
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
            self.child.poll(None)  # wait where Ctrl-C stops at once: no byte of the reply is taken yet
            with interrupts_deferred():  # a reply is read whole or not at all
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
