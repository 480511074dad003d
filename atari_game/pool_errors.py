"""How a pool's failures travel: `PoolError`; `WorkerDied` and `CommandFailed`, a dead worker's and a failed command's
reports as fields (`PoolReport`), the same from any pool over any transport; and `WorkerHandle`, what every transport's
handle on a worker has: the pool's books of it and the name its reports give it."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from signal import Signals
from traceback import format_exception
from typing import Any, ClassVar, TypeVar

#: A `PoolReport`'s own type: what its copies (`PoolReport.replace`) are.
Report = TypeVar("Report", bound="PoolReport")


class PoolError(RuntimeError):
    """A pool call failed: a worker's command raised (`CommandFailed`), a worker died (`WorkerDied`), or the call was
    not valid then (a closed pool, ``recv`` before ``send``); the message says which, naming the worker and its envs."""


class PoolReport(PoolError):
    """A `PoolError` that is a report as fields: its message is built from them alone (`__str__`), and it is copied
    (`replace`) and pickled by them, so that it crosses any transport (a worker's pipe, a Ray actor's answer) whole. A
    program reads the fields, never the message.

    Attributes:
        env_ids (tuple[int, ...]): the envs the report is about, numbered as the pool raising it numbers them.
    """

    #: The names of the fields, as the constructor takes them (keywords).
    FIELDS: ClassVar[tuple[str, ...]] = ()
    env_ids: tuple[int, ...]

    def fields(self) -> dict[str, Any]:
        """The fields, by name: what `replace` and pickling copy."""
        return {name: getattr(self, name) for name in self.FIELDS}

    def replace(self: Report, **changes: Any) -> Report:
        """A copy with the fields `changes` names changed, as `dataclasses.replace` makes one."""
        return type(self)(**{**self.fields(), **changes})

    def with_env_offset(self: Report, offset: int) -> Report:
        """A copy with env ids `offset` more, as the pool of a hosted block (a node actor's) numbers them."""
        return self.replace(env_ids=[i + offset for i in self.env_ids])

    def __reduce__(self) -> tuple[Any, tuple[()]]:  # pickled by its fields (a worker's pipe, Ray's answers)
        return functools.partial(type(self), **self.fields()), ()


def describe_worker(
    kind: str, pid: int | None, env_ids: Sequence[int], node: str | None = None, address: str | None = None
) -> str:
    """How a message names a worker: ``"pool worker (pid 12, envs 0-3)"``, a Ray actor with its node and address."""
    place = f"pid {pid}" if node is None else f"pid {pid} on node {node:.8} at {address}"
    return f"{kind} ({'not running yet' if pid is None else place}, envs {env_ids[0]}-{env_ids[-1]})"


def _signal_of(exitcode: int | None) -> str | int | None:
    """The signal a negative `exitcode` (`multiprocessing`'s ``-N``) names, by name if it has one."""
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return Signals(-exitcode).name
    except ValueError:
        return -exitcode


def _cause_of(exitcode: int | None) -> str:
    """How a process that ended with `exitcode` died, in words."""
    if exitcode is None:
        return "it died"
    found = _signal_of(exitcode)
    return f"exited with code {exitcode}" if found is None else f"killed by {found}"


class WorkerDied(PoolReport):
    """A worker of a `GamePool` or `RayGamePool` died: the report, as fields.

    Without ``restart_workers`` the pool raises it, and raises it again (a copy) from every later call: the pool cannot
    go on. Its message is built from the fields alone (`__str__`, the one place of its wording); a program (or a node
    actor handing a death on) reads the fields, never the message. ``except PoolError`` catches it.

    Attributes:
        pid (int | None): the process id of the worker that died (of a Ray actor: the actor's process); None for
            a Ray actor that never ran.
        env_ids (tuple[int, ...]): the ids of the envs it hosted (a contiguous block, as the pool raising it numbers
            them), every one of which lost its game.
        exitcode (int | None): its exit code, as `multiprocessing.Process.exitcode` gives it (``-N``: killed by
            signal ``N``); None where unknown (a Ray actor).
        signal (str | int | None): the signal that killed it, by name (``"SIGKILL"``) or by number; None if none did
            or it is unknown. By default, read from a negative `exitcode`.
        cause (str): how it died, in words (by default, read from `exitcode`): ``"killed by SIGKILL"``, ``"exited with
            code 1"``, ``"it died while sending the traceback of an error"``, a Ray error (``"ActorDiedError: ..."``),
            ``"restarted by Ray as pid 13 on node 1a2b3c4d"``, a node actor's ``"a worker process of its pool died"``.
        node (str | None): for a Ray actor, the id of the node it ran on (hex); None in a local pool.
        address (str | None): for a Ray actor, that node's IP address; None in a local pool.
        kind (str): what died: ``"pool worker"`` (a `GamePool` worker process) or ``"ray actor"``.
        hosted (WorkerDied | None): for a node actor (``actors="node"``), the death of the worker process of its pool
            that brought it down, its `env_ids` numbered as this pool numbers its envs; None otherwise.
        fatal (bool): the pool that raised it (made without ``restart_workers``) cannot go on; the message says so.
    """

    FIELDS = ("pid", "env_ids", "exitcode", "signal", "cause", "node", "address", "kind", "hosted", "fatal")

    def __init__(
        self,
        *,
        pid: int | None,
        env_ids: Sequence[int],
        exitcode: int | None = None,
        signal: str | int | None = None,
        cause: str | None = None,
        node: str | None = None,
        address: str | None = None,
        kind: str = "pool worker",
        hosted: WorkerDied | None = None,
        fatal: bool = False,
    ) -> None:
        super().__init__()
        self.pid, self.env_ids, self.exitcode = pid, tuple(int(i) for i in env_ids), exitcode
        self.signal = _signal_of(exitcode) if signal is None else signal
        self.cause = _cause_of(exitcode) if cause is None else cause
        self.node, self.address, self.kind, self.hosted, self.fatal = node, address, kind, hosted, fatal

    def with_env_offset(self, offset: int) -> WorkerDied:
        """A copy with env ids (the `hosted` death's too) `offset` more, as the pool of a hosted block numbers them."""
        hosted = None if self.hosted is None else self.hosted.with_env_offset(offset)
        return super().with_env_offset(offset).replace(hosted=hosted)

    def __str__(self) -> str:
        if self.hosted is not None:
            detail = f"its {self.hosted.replace(fatal=False)}"
        elif self.exitcode is not None and self.cause == _cause_of(self.exitcode):
            detail = f"exit code {self.exitcode}"
        else:
            detail = self.cause
        message = f"{describe_worker(self.kind, self.pid, self.env_ids, self.node, self.address)} died ({detail})"
        return f"{message}; the pool cannot go on: close() it, or use restart_workers=True" if self.fatal else message


class CommandFailed(PoolReport):
    """A command of a `GamePool`'s or `RayGamePool`'s worker raised an exception: the report, as fields.

    The worker lives on, and so does the pool: the call that took the answer (``reset``, ``step``, ``recv``) raises it
    once every answer it waited for is in. The worker builds it where the exception was raised (`of`) and sends it
    whole; the pool that takes the answer names the worker. Its message is built from the fields alone (`__str__`);
    ``except PoolError`` catches it.

    Attributes:
        env_ids (tuple[int, ...]): the envs of the command: those a step played; a reset's, its worker's envs.
        error_type (str): the class name of the exception the command raised: ``"IndexError"``.
        message (str): the exception's message, ``str(exception)``.
        traceback (str): its traceback as the worker formatted it (``Traceback (most recent call last): ...``, ending
            with the ``error_type: message`` line).
        worker (str | None): the worker that ran the command, as messages name it: ``"pool worker (pid 12, envs
            0-3)"``, ``"ray actor (pid 12 on node 1a2b3c4d at 10.0.0.2, envs 0-3)"`` (a node actor's pool's worker is
            named in the traceback); None in the worker, until the pool that takes the answer names it.
    """

    FIELDS = ("env_ids", "error_type", "message", "traceback", "worker")

    def __init__(
        self, *, env_ids: Sequence[int], error_type: str, message: str, traceback: str, worker: str | None = None
    ) -> None:
        super().__init__()
        self.env_ids, self.error_type, self.message = tuple(int(i) for i in env_ids), error_type, message
        self.traceback, self.worker = traceback, worker

    @classmethod
    def of(cls, error: BaseException, env_ids: Sequence[int], traceback: str | None = None) -> CommandFailed:
        """The report of `error`, raised by a command of the envs `env_ids`; `traceback`: its text where `error` no
        longer holds its own (an exception Ray sent back), else formatted from `error`."""
        text = "".join(format_exception(error)) if traceback is None else traceback
        return cls(env_ids=env_ids, error_type=type(error).__name__, message=str(error), traceback=text)

    def __str__(self) -> str:
        who = self.worker or "a worker"
        return f"{who} failed on envs {list(self.env_ids)}: {self.error_type}: {self.message}\n{self.traceback}"


@dataclasses.dataclass(eq=False)  # handles are the same only if they are one object
class WorkerHandle:
    """A transport's handle on one worker (`local_transport.LocalWorker`, `ray_pool.RayActor`), with the books its
    `GamePool` keeps of it; a transport's handle type extends it with what the transport needs.

    Attributes:
        env_ids (list[int]): the envs it hosts, a contiguous block in ascending order.
        in_flight (list[list[int]]): the pool's books: the env ids of each command sent to it and not yet answered,
            oldest first (a step's envs; a reset's: none, its envs are reported by the pool's ``reset`` itself).
    """

    env_ids: list[int]
    in_flight: list[list[int]] = dataclasses.field(default_factory=list, kw_only=True)

    def describe(self) -> str:
        """How a message names it: ``"pool worker (pid 12, envs 0-3)"``; each transport's handle says."""
        raise NotImplementedError
