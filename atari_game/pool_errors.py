"""How a pool's failures travel: `PoolError`, and `WorkerDied`, a dead worker's report as fields, from any pool."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from signal import Signals
from typing import Any


class PoolError(RuntimeError):
    """A pool worker failed or died (`WorkerDied`); the message names the worker, its envs and its traceback if any."""


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


class WorkerDied(PoolError):
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

    def fields(self) -> dict[str, Any]:
        """The fields, by name: what `replace` and pickling copy."""
        names = ("pid", "env_ids", "exitcode", "signal", "cause", "node", "address", "kind", "hosted", "fatal")
        return {name: getattr(self, name) for name in names}

    def replace(self, **changes: Any) -> WorkerDied:
        """A copy with the fields `changes` names changed, as `dataclasses.replace` makes one."""
        return type(self)(**{**self.fields(), **changes})

    def with_env_offset(self, offset: int) -> WorkerDied:
        """A copy with env ids (the `hosted` death's too) `offset` more, as the pool of a hosted block numbers them."""
        hosted = None if self.hosted is None else self.hosted.with_env_offset(offset)
        return self.replace(env_ids=[i + offset for i in self.env_ids], hosted=hosted)

    def __reduce__(self) -> tuple[Any, tuple[()]]:  # pickled by its fields (Ray sends a node actor's to the parent)
        return functools.partial(type(self), **self.fields()), ()

    def __str__(self) -> str:
        if self.hosted is not None:
            detail = f"its {self.hosted.replace(fatal=False)}"
        elif self.exitcode is not None and self.cause == _cause_of(self.exitcode):
            detail = f"exit code {self.exitcode}"
        else:
            detail = self.cause
        message = f"{describe_worker(self.kind, self.pid, self.env_ids, self.node, self.address)} died ({detail})"
        return f"{message}; the pool cannot go on: close() it, or use restart_workers=True" if self.fatal else message
