"""The local transport of a `GamePool`: worker processes on this machine, one shared-memory segment, the wake-up path.

A step is a byte into each worker's pipe (`atari_game.pool_worker`) and its first env's id back into one answer
socket, the last worker to finish waking the parent (the Design page's "A pool step"); rare commands and failed
commands' reports (`CommandFailed`) go pickled through the pipes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import socket
import struct
import sys
import weakref
from collections.abc import Callable
from multiprocessing import connection
from typing import Any

import numpy as np

from atari_game.pool_errors import WorkerDied, WorkerHandle, describe_worker
from atari_game.pool_worker import MESSAGE, POOL_STEP_BYTES, POOL_STEP_TAGS, STEP_ALL, pool_worker
from atari_game.segment import Layout, Segment, arrays, create
from atari_game.worker import ParentEnd, available_cores, check_main_guard, end_process, pipe, start_context

# How long the parent waits for answers before it checks that the workers it waits for are alive.
LIVENESS_CHECK_SECONDS = 0.5
# What an answer slot holds until an answer is read into it (answers are env ids, or -1 - id on failure).
NO_ANSWER = np.iinfo(np.int32).min


@dataclasses.dataclass(eq=False)  # handles are the same only if they are one object
class LocalWorker(WorkerHandle):
    """The parent's handle on one worker process (`WorkerHandle`: its envs and the pool's books of it).

    Attributes:
        process (multiprocessing.process.BaseProcess): the worker process.
        pipe (ParentEnd): the parent's end of its pipe, for pickled commands and failed commands' reports.
        command_fd (int): the pipe's descriptor, for the one-byte commands of `LocalTransport.step_all`'s loop.
    """

    process: Any
    pipe: ParentEnd
    command_fd: int

    def describe(self) -> str:
        """How a message names it: ``"pool worker (pid 12, envs 0-3)"``."""
        return describe_worker("pool worker", self.process.pid, self.env_ids)

    def died(self, **fields: Any) -> WorkerDied:
        """The report of its death, once its process has ended; `fields` as `WorkerDied` takes them."""
        self.process.join(timeout=1)
        return WorkerDied(pid=self.process.pid, env_ids=self.env_ids, exitcode=self.process.exitcode, **fields)


def _read_part(answers: np.ndarray) -> list[int]:
    """The answers a read put into `answers` (whole ones, from the start: each is sent whole), not `NO_ANSWER`."""
    return answers[answers != NO_ANSWER].tolist()


def _send_message(worker: LocalWorker, command: str, data: Any) -> None:
    """A pickled command for the worker: the `MESSAGE` byte, then the message."""
    with contextlib.suppress(OSError):  # a dead worker: the parent notices when it waits for the answer
        os.write(worker.pipe.fileno(), MESSAGE)
        worker.pipe.send((command, data))


def _shut_down(
    workers: list[LocalWorker], segment: Segment, ends: tuple[socket.socket | connection.Connection, ...]
) -> None:
    """Stop every worker, then close the segment and the `ends` of the sockets and pipes (for `weakref.finalize`)."""
    for worker in workers:  # ask all first, so they stop in parallel
        _send_message(worker, "close", None)
    for worker in workers:
        end_process(worker.process, worker.pipe)
    for end in ends:
        end.close()
    with contextlib.suppress(BufferError):  # the caller holds copy=False arrays: the memory goes with the last of them
        segment.close()


class LocalTransport:
    """A `GamePool`'s `Transport` as processes on this machine; `start_method` as `GamePool` takes it.

    Its shared memory, nameless, is taken whole as the pool starts: no room is an `OSError` at once (Pool guide)."""

    def __init__(self, start_method: str | None = None) -> None:
        self.context = start_context(start_method)
        self.workers: list[LocalWorker] = []

    def default_n_workers(self) -> int:
        """One worker per core this process may run on."""
        return available_cores()

    def open(self, layout: Layout, arguments: Callable[[list[int]], tuple]) -> dict[str, np.ndarray]:
        """Create the segment (its memory taken now), sockets, tickets' pipe and their finalizer; return its arrays."""
        check_main_guard(self.context, "a GamePool")
        self.layout, self.arguments, num_envs = layout, arguments, layout["actions"][0][0]  # (a row per env)
        # Every worker gets the child's ends: answers, and the wake-up of a whole-pool step.
        (parent_end, child_end), (wake_end, wake_child) = socket.socketpair(), socket.socketpair()
        self.answers = (parent_end, connection.Connection(child_end.detach()))
        self.wake = (wake_end, connection.Connection(wake_child.detach()))
        # How the last worker of a whole-pool step knows it is last: a pipe of a ticket per worker but one, whose read
        # end does not wait (a flag all workers' copies share), with room for `num_envs` (any pipe holds PIPE_BUF + 1).
        self.ticket_fds = take, put = os.pipe()
        os.set_blocking(take, False)
        if sys.platform.startswith("linux") and num_envs - 1 > select.PIPE_BUF:
            import fcntl  # (POSIX: imported here, so that the package imports where it is missing)

            fcntl.fcntl(put, fcntl.F_SETPIPE_SZ, num_envs)
        self.tickets = (connection.Connection(take, writable=False), connection.Connection(put, readable=False))
        self.tickets_left, self.step_tag = False, 0  # (tickets_left: the pipe may hold tickets no worker took)
        # The segment last: where it has no room, what came before closes itself as it is collected.
        self.segment = create(layout, num_envs)
        self.finalizer = weakref.finalize(
            self, _shut_down, self.workers, self.segment, (*self.answers, *self.wake, *self.tickets)
        )
        # The parent's reads give up after LIVENESS_CHECK_SECONDS, so that it can check the workers it waits for.
        timeout = struct.pack("ll", *divmod(int(LIVENESS_CHECK_SECONDS * 1e6), 1_000_000))  # struct timeval
        for end in (parent_end, wake_end):
            end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeout)
        self.unread: list[int] = []  # answers read from the socket, not yet taken in
        self.owner: dict[int, LocalWorker] = {}  # the worker of each first env id (an answer names its worker so)
        self.shared = arrays(self.segment, layout)
        return self.shared

    def close(self) -> None:
        """Stop the workers and close the segment (once; nothing if `open` did not get as far)."""
        self.shared = {}  # drop our views, so the segment can really close
        if hasattr(self, "finalizer"):
            self.finalizer()

    def start(self, blocks: list[list[int]]) -> None:
        """A worker process for each block of env ids, in `workers`."""
        for env_ids in blocks:  # (each in `workers` as soon as it runs: a failed start leaves none unstopped)
            self.workers.append(self._spawn(env_ids))

    def replace(self, worker: LocalWorker) -> LocalWorker:
        """A new worker for a dead one's envs, in its place in `workers`."""
        end_process(worker.process, worker.pipe)
        replacement = self._spawn(worker.env_ids)
        self.workers[self.workers.index(worker)] = replacement
        return replacement

    def _spawn(self, env_ids: list[int]) -> LocalWorker:
        self.shared["commands"][env_ids[0]] = 0  # a new worker has read no command (a replacement neither)
        parent_end, child_end = pipe()
        channels = (self.answers[1], self.wake[1], self.tickets[0])  # what every worker shares with the parent
        args = (child_end, *channels, self.segment.file, self.layout, *self.arguments(env_ids))
        process = self.context.Process(target=pool_worker, args=args, daemon=True)  # type: ignore[attr-defined]
        process.start()
        child_end.close()  # only the child holds it now, so a dead child reads as EOF
        worker = LocalWorker(env_ids, process=process, pipe=parent_end, command_fd=parent_end.fileno())
        self.owner[env_ids[0]] = worker
        return worker

    def post(self, worker: LocalWorker, command: str, data: Any) -> None:
        """`Transport.post`: a step of all the worker's envs is one byte (it reads the actions from the segment)."""
        if command == "step" and data is None:
            # (try costs nothing here, contextlib.suppress a call per command)
            try:  # noqa: SIM105
                os.write(worker.command_fd, STEP_ALL)
            except OSError:  # a dead worker: next_answer notices it
                pass
        else:
            _send_message(worker, command, data)
        self.shared["commands"][worker.env_ids[0], 0] += 1  # after the byte: a watching worker reads it at once

    def step_all(self) -> bool:
        """Step every env with one byte to each worker, one wake-up (the last worker's) and one read of all answers;
        True if every worker answered and none failed, else False (or it raises), what was read kept for next_answer."""
        # A ticket for every worker but one, once any a step left are read away (Design page): no command is in flight.
        take, put = self.ticket_fds
        if self.tickets_left:
            with contextlib.suppress(BlockingIOError):  # (fewer than there are workers: one read takes them all)
                os.read(take, len(self.workers))
        self.tickets_left = True  # until every worker has answered, and so taken its ticket
        if len(self.workers) > 1:
            os.write(put, bytes(len(self.workers) - 1))
        self.step_tag = (self.step_tag + 1) % POOL_STEP_TAGS
        command, commands = POOL_STEP_BYTES[self.step_tag], self.shared["commands"]
        for worker in self.workers:
            # (try costs nothing here, contextlib.suppress a call per worker)
            try:  # noqa: SIM105
                os.write(worker.command_fd, command)
            except OSError:  # a dead worker: its answer never comes, and the general machinery finds out why
                pass
            commands[worker.env_ids[0], 0] += 1  # after the byte: a watching worker reads it at once
        answers = np.full(len(self.workers), NO_ANSWER, np.int32)
        try:
            self.read_pool_step(answers, command)
        except BaseException:  # Ctrl-C: the next call takes the answers still due in, as after any command
            self.unread += _read_part(answers)  # (what was read, even if the interrupt came as the read returned)
            raise
        if answers.min() >= 0:  # every worker answered, none failed
            self.tickets_left = False
            return True
        self.unread += _read_part(answers)
        return False

    def read_pool_step(self, answers: np.ndarray, command: bytes) -> None:
        """Sleep until the last worker of a whole-pool step sends `command` back (skipping late wake-ups of earlier
        steps), then read the answers into `answers`; after `LIVENESS_CHECK_SECONDS` without it, read what came."""
        view = answers.data.cast("B")
        try:
            while command not in self.wake[0].recv(64):
                pass
            woken = True
        except BlockingIOError:  # no wake-up in time: a dead or slow worker
            woken = False
        try:
            got = self.answers[0].recv_into(view, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            got = 0
        if woken and got < len(view):
            with contextlib.suppress(BlockingIOError):
                self.answers[0].recv_into(view[got:], 0, socket.MSG_WAITALL)

    def next_answer(self, busy: set[LocalWorker], everything: bool) -> tuple[LocalWorker, tuple[str, list[int], Any]]:
        """`Transport.next_answer` (the payload: None or a `CommandFailed`): one read sleeps until every answer in
        flight (`everything`) or the first is in, giving up after `LIVENESS_CHECK_SECONDS` to see if its workers are
        alive."""
        while not self.unread:
            answers = np.full(sum(len(worker.in_flight) for worker in busy) if everything else 1, NO_ANSWER, np.int32)
            try:
                self.answers[0].recv_into(answers.data, 0, socket.MSG_WAITALL)  # what came, if it gave up
            except BlockingIOError:  # nothing came
                pass
            finally:  # what was read is kept, even if Ctrl-C came as the read returned
                self.unread += _read_part(answers)
            if self.unread:
                break
            # Nothing came in LIVENESS_CHECK_SECONDS: see whether a worker it waits for died.
            by_sentinel = {worker.process.sentinel: worker for worker in busy}
            dead = connection.wait(list(by_sentinel), timeout=0)
            if dead and not self.answer_waiting():  # (first take an answer it sent before it died)
                worker = by_sentinel[dead[0]]
                return worker, ("died", [], worker.died())
        first = self.unread.pop(0)
        worker = self.owner[first if first >= 0 else -1 - first]
        if first >= 0:
            return worker, ("ok", worker.in_flight[0], None)
        try:  # the report follows the answer
            return worker, ("error", [], worker.pipe.recv())
        except (EOFError, OSError):  # (OSError: the pipe ended in the middle of it)
            return worker, ("died", [], worker.died(cause="it died while sending the traceback of an error"))

    def answer_waiting(self) -> bool:
        """Whether an answer is in the socket, unread."""
        try:
            return bool(self.answers[0].recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except BlockingIOError:
            return False
