"""GamePool: N games in a few worker processes, observations in shared memory, the Gymnasium VectorEnv API.

The tutorial design pickles every observation through a pipe, one process per game. Here each worker
process hosts a block of games (`Game` objects) and writes their observations, rewards, flags and episode statistics
straight into one shared-memory segment (`atari_game.segment`). A step costs a few bytes each way per worker and
nothing per game: the parent writes the actions into the segment and one byte into each worker's pipe; each worker
(`atari_game.pool_worker`) answers with its first env's id, four bytes into one answer socket that all workers
share. In a step of the whole pool the last worker to finish (a shared pipe holds a ticket, a byte, for each of the
others) also wakes the parent, so the parent sleeps once a step, not once a worker, and reads every answer with one
call. A worker that has answered watches its count of commands in the segment for a millisecond before it sleeps,
so a caller that steps again at once wakes nobody. Rare commands (reset, close) and errors go as pickled messages
through the workers' own pipes.

This module is the parent's side: the `VectorEnv` API, and the books of what was sent to which worker and answered.

    with GamePool(16, "Breakout", noop_max=30) as pool:
        obs, info = pool.reset(seed=0)                  # uint8 (16, 4, 84, 84)
        obs, rewards, terminations, truncations, info = pool.step(pool.action_space.sample())
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import os
import select
import socket
import struct
import sys
import weakref
from collections.abc import Sequence
from multiprocessing import connection
from signal import Signals
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

from atari_game.game import GameOptions, check_continuous_actions
from atari_game.pool_worker import MESSAGE, POOL_STEP_BYTES, POOL_STEP_TAGS, STEP_ALL, pool_worker
from atari_game.segment import Segment, arrays, create, layout
from atari_game.spaces import action_space, observation_space
from atari_game.validation import check_count, check_int
from atari_game.worker import (
    ParentEnd,
    available_cores,
    check_main_guard,
    end_process,
    interrupts_deferred,
    pipe,
    start_context,
)

AUTORESET_MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)
# How long the parent waits for answers before it checks that the workers it waits for are alive (a dead
# worker is reported within this, plus the second `end_process`-style join allows).
LIVENESS_CHECK_SECONDS = 0.5
# What an answer slot holds until an answer is read into it (answers are env ids, or -1 - id on failure).
NO_ANSWER = np.iinfo(np.int32).min
# How the message of a pool broken by a dead worker ends (without restart_workers).
CANNOT_GO_ON = "; the pool cannot go on: close() it, or use restart_workers=True"


class PoolError(RuntimeError):
    """A pool worker failed or died (a death is its subclass `WorkerDied`); the message names the worker, its envs
    and (if any) its traceback."""


def _describe_worker(
    kind: str, pid: int | None, env_ids: Sequence[int], node: str | None = None, address: str | None = None
) -> str:
    """How a message names a worker: ``"pool worker (pid 12, envs 0-3)"``, or for a Ray actor
    ``"ray actor (pid 12 on node 1a2b3c4d at 10.0.0.2, envs 0-3)"`` (``not running yet`` without a pid)."""
    if pid is None:
        place = "not running yet"
    else:
        place = f"pid {pid}" if node is None else f"pid {pid} on node {node:.8} at {address}"
    return f"{kind} ({place}, envs {env_ids[0]}-{env_ids[-1]})"


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
    go on. Its message is built from the fields alone (`__str__`); a program reads the fields, never the message.
    A subclass of `PoolError`, so ``except PoolError`` catches it.

    Attributes:
        pid (int | None): the process id of the worker that died (of a Ray actor: the actor's process); None for
            a Ray actor that never ran.
        env_ids (tuple[int, ...]): the ids of the envs it hosted, as the pool raising it numbers them (a
            contiguous block). Every one of them lost its game.
        exitcode (int | None): its exit code, as `multiprocessing.Process.exitcode` gives it (``-N``: killed by
            signal ``N``); None where unknown (a Ray actor).
        signal (str | int | None): the signal that killed it, by name (``"SIGKILL"``), or by number for one that
            has no name; None if no signal killed it, or it is unknown. By default, read from a negative `exitcode`.
        cause (str): how it died, in words: ``"killed by SIGKILL"``, ``"exited with code 1"``, ``"it died while
            sending the traceback of an error"``, a Ray error (``"ActorDiedError: ..."``), ``"restarted by Ray as
            pid 13 on node 1a2b3c4d"``, or for a node actor ``"a worker process of its pool died"``. By default,
            read from `exitcode`.
        node (str | None): for a Ray actor, the id of the node it ran on (hex); None in a local pool.
        address (str | None): for a Ray actor, that node's IP address; None in a local pool.
        kind (str): what died: ``"pool worker"`` (a `GamePool` worker process) or ``"ray actor"``.
        hosted (WorkerDied | None): for a `RayGamePool` node actor (``actors="node"``), the death of the worker
            process of the actor's pool that brought the actor down, its `env_ids` numbered as this pool numbers its
            envs; None otherwise.
        fatal (bool): the pool that raised it cannot go on (it was made without ``restart_workers``); the message
            then says to close it.
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
        """A copy whose env ids (the `hosted` death's too) are `offset` more: the report of a pool hosting a block of
        another pool's envs, as the other pool numbers them."""
        hosted = None if self.hosted is None else self.hosted.with_env_offset(offset)
        return self.replace(env_ids=[i + offset for i in self.env_ids], hosted=hosted)

    def __reduce__(self) -> tuple[Any, tuple[()]]:  # pickled by its fields (Ray sends a node actor's to the parent)
        return functools.partial(type(self), **self.fields()), ()

    def __str__(self) -> str:
        """The one place the wording of a dead worker's report is made, from the fields."""
        if self.hosted is not None:
            detail = f"its {self.hosted.replace(fatal=False)}"
        elif self.exitcode is not None and self.cause == _cause_of(self.exitcode):
            detail = f"exit code {self.exitcode}"
        else:
            detail = self.cause
        message = f"{_describe_worker(self.kind, self.pid, self.env_ids, self.node, self.address)} died ({detail})"
        return f"{message}{CANNOT_GO_ON}" if self.fatal else message


# --- the parent -----------------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)  # handles are the same only if they are one object
class _Worker:
    """The parent's handle on one worker process and the envs it hosts."""

    process: Any
    pipe: ParentEnd
    env_ids: list[int]
    in_flight: list[list[int]] = dataclasses.field(default_factory=list)  # the ids of each unanswered command
    command_fd: int = dataclasses.field(init=False)  # the pipe's descriptor, for GamePool._step_all's loop

    def __post_init__(self) -> None:
        self.command_fd = self.pipe.fileno()

    def describe(self) -> str:
        return _describe_worker("pool worker", self.process.pid, self.env_ids)

    def died(self, **fields: Any) -> WorkerDied:
        """The report of its death; `fields` as `WorkerDied` takes them."""
        return WorkerDied(pid=self.process.pid, env_ids=self.env_ids, **fields)


def _read_part(answers: np.ndarray) -> list[int]:
    """The answers read into `answers`, which a read fills from the start (each answer's four bytes are sent
    whole, so a read that stops early stops between answers); the slots after them still hold `NO_ANSWER`."""
    return answers[answers != NO_ANSWER].tolist()


def _send_message(worker: _Worker, command: str, data: Any) -> None:
    """A pickled command for the worker: the `MESSAGE` byte, then the message."""
    with contextlib.suppress(OSError):  # a dead worker: the parent notices when it waits for the answer
        os.write(worker.pipe.fileno(), MESSAGE)
        worker.pipe.send((command, data))


def _ticket_pipe(n_envs: int) -> tuple[connection.Connection, connection.Connection]:
    """A pipe for the tickets of a whole-pool step, a byte each, as ``(the read end, the write end)``; reads from it
    do not wait (a file status flag: every worker's copy shares it), and it holds the tickets of `n_envs` workers.

    Tickets for up to ``PIPE_BUF + 1`` workers fit in any pipe; Linux is asked for room for more.
    """
    take, put = os.pipe()
    os.set_blocking(take, False)
    if sys.platform.startswith("linux") and n_envs - 1 > select.PIPE_BUF:
        import fcntl  # (POSIX)

        fcntl.fcntl(put, fcntl.F_SETPIPE_SZ, n_envs)
    return connection.Connection(take, writable=False), connection.Connection(put, readable=False)


def _shut_down(
    workers: list[_Worker], segment: Segment, ends: tuple[socket.socket | connection.Connection, ...]
) -> None:
    """Stop every worker, then close the segment and the `ends` of the answer and wake-up sockets and of the tickets'
    pipe; a plain function, so `weakref.finalize` can hold it. The kernel frees each of them once no process holds it
    (a worker still starting when the pool closes got its own descriptors as it was started)."""
    for worker in workers:  # ask all first, so they stop in parallel
        _send_message(worker, "close", None)
    for worker in workers:
        end_process(worker.process, worker.pipe)
    for end in ends:
        end.close()
    with contextlib.suppress(BufferError):  # the caller holds copy=False arrays: the memory goes with the last of them
        segment.close()


def _check_games(
    n_envs: int, game: str | Sequence[str], seed: int | None, game_options: dict[str, Any]
) -> tuple[GameOptions, tuple[str, ...]]:
    """The options every env shares (with env 0's game) and each env's game as its ROM id, from one game
    name or a list of one per env; each game is validated with the options, before any process starts."""
    if isinstance(game, str):
        games = [game] * n_envs
    elif isinstance(game, (list, tuple)):
        if len(game) != n_envs:
            raise ValueError(f"game: a list of games names one game per env, got {len(game)} for n_envs={n_envs}")
        for i, name in enumerate(game):
            if not isinstance(name, str):
                raise TypeError(f"game[{i}] must be a game name such as 'Breakout', got {type(name).__name__} {name!r}")
        games = list(game)
    else:
        raise TypeError(f"game must be a game name or a list of one per env, got {type(game).__name__} {game!r}")
    # Every game with the same options: GameOptions says if an option does not fit a game (mode, fire_reset).
    by_name = {name: GameOptions.from_kwargs(game=name, seed=seed, **game_options) for name in dict.fromkeys(games)}
    roms = tuple(by_name[name].game for name in games)
    # One pool has one action space (continuous actions are one Box for every game); observations are alike
    # anyway, their shape following the options alone.
    shared = by_name[games[0]]
    by_actions: dict[tuple[str, ...], list[str]] = {}
    for options in by_name.values():
        by_actions.setdefault(options.action_meanings, []).append(options.game)
    if len(by_actions) > 1 and not shared.continuous:
        sets = [
            f"{len(actions)} actions ({', '.join(actions)}) in {_describe_games(tuple(having))}"
            for actions, having in list(by_actions.items())[:4]
        ]
        more = f"; and {len(by_actions) - 4} more action sets" if len(by_actions) > 4 else ""
        # ALE gives all 18 actions to nearly every game, but not all (with ale-py 0.12, LostLuggage and Skiing have 9).
        fix = (
            "choose games with the same full action set (ALE gives a few games fewer than 18)"
            if shared.full_action_space
            else "pass full_action_space=True (ALE's 18 actions in nearly every game), or choose games with the same "
            "minimal action set (atari_game.action_meanings(game) lists a game's)"
        )
        kind = "full" if shared.full_action_space else "minimal"
        raise ValueError(
            f"game: these games' {kind} action sets differ, and a pool has one action space: "
            f"{'; '.join(sets)}{more}. To mix them, {fix}"
        )
    return shared, roms


def _describe_games(games: tuple[str, ...]) -> str:
    """The distinct games of `games` for a message: ``"breakout"``, ``"breakout, pong"``, or the first four
    and how many more."""
    distinct = list(dict.fromkeys(games))
    more = f" and {len(distinct) - 4} more games" if len(distinct) > 4 else ""
    return ", ".join(distinct[:4]) + more


class GamePool(gymnasium.vector.VectorEnv):
    """`n_envs` games (each a `Game`) in `n_workers` processes: the Gymnasium `VectorEnv` API, EnvPool-style async.

    Args:
        n_envs: how many games. Env ``i`` is seeded with ``seed + i``.
        game, seed, **game_options: as for `Game`, all validated here before any process starts. `game` may
            also be a list naming each env's game (length `n_envs`): a mixed pool, for multi-task work. Every
            game takes the same options (each validated for each game: a `mode` it lacks, `fire_reset` without
            FIRE are refused naming the game) and so has the same observation space. The games must share
            one action space: with ``full_action_space=True`` ALE's full set (18 actions in all games but
            LostLuggage and Skiing), with ``continuous`` the same `Box`; otherwise their minimal action sets
            must be the same (Pong, SpaceInvaders and DemonAttack share 6; Breakout and Kaboom 4). Games
            whose sets differ raise a `ValueError` naming the sets and the fix.
        n_workers: worker processes (default: one per available core, at most `n_envs`); the envs are
            split into contiguous blocks, one per worker.
        autoreset_mode: Gymnasium's ``AutoresetMode.NEXT_STEP`` (the default) or ``SAME_STEP`` (the
            tutorial's), with the semantics Gymnasium documents. Next-step: the step that ends an episode
            returns its final observation; the env's next step ignores its action and returns the next
            episode's first observation with reward 0. Same-step: the step that ends an episode returns the
            next episode's first observation, and the final one in ``info["final_obs"]``.
        batch_size: how many envs `recv` returns (default: all).
        copy: False makes `step` and `reset` return the shared observation array itself, valid until the
            next call, for zero-copy consumers.
        restart_workers: replace a worker that dies: its envs restart with new seeds and are reported
            truncated with ``info["worker_restarted"]``. Without it, a dead worker raises `WorkerDied`.
        start_method: a `multiprocessing` start method; the default, `DEFAULT_START_METHOD`, is
            "forkserver" on Linux ("fork" is unsafe once the parent has threads, as it has after
            importing torch). "fork" and "spawn" work too. Under "forkserver" and "spawn" a script must start
            the pool under ``if __name__ == "__main__":`` (`check_main_guard` says so at once).

    ``step(actions)`` takes integer actions of shape ``(n_envs,)`` (with ``continuous=True``, floats of shape
    ``(n_envs, 3)``) and returns ``obs`` (``uint8``, ``(n_envs, 4, 84, 84)`` by default; in general
    ``(n_envs, *GameOptions.observation_shape)`` of ``observation_dtype``), ``rewards`` (float64),
    ``terminations`` (a life or the game was lost, as `life_loss` says), ``truncations``
    (`max_episode_frames` reached) and ``info``: ``lives`` for every env (the lives its observation's game has: on a
    next-step done step the ended episode's, on a same-step one the next episode's), and for envs whose episode ended
    ``info["episode"]["r"|"l"]`` (unclipped return and length)
    with the mask ``info["_episode"]``, the layout of Gymnasium's vector ``RecordEpisodeStatistics``; when
    `life_loss` is not "reset" and a whole game ended, also ``info["game"]["r"|"l"]`` with ``info["_game"]``.
    ``info["game_name"]`` (object array, with the mask ``info["_game_name"]``, all True) names each env's game
    by its ROM id, as `games` does; on a whole `step` these two arrays are the same read-only arrays every time.

    Attributes: ``games``, the ROM id of each env's game (a tuple of `n_envs`, e.g. ``("breakout", "kaboom")``);
    ``options``, the `GameOptions` every env shares, with env 0's ``game``; ``action_meanings``, the actions all
    envs share.

    Async, as in EnvPool: ``send(actions, env_ids)`` starts those envs; ``recv()`` waits until `batch_size`
    envs have finished and returns them (the first to finish) with ``info["env_id"]`` (and their
    ``info["game_name"]``).

    A synchronous step ends when the slowest worker ends: with a core slower than the others (other work on it, or
    a cloud host), async stepping (``batch_size < n_envs``) lets the caller go on with the envs that are ready.

    The shared memory (an anonymous file, not in /dev/shm where Linux's ``memfd_create`` exists) is all taken when
    the pool starts: where there is no room for it, the pool raises `OSError` at once, saying how much it needs. It
    has no name, so the kernel frees it with the last process of the pool, even after ``kill -9`` of them all.
    """

    def __init__(
        self,
        n_envs: int,
        game: str | Sequence[str] = "Breakout",
        seed: int | None = 0,
        *,
        n_workers: int | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        batch_size: int | None = None,
        copy: bool = True,
        restart_workers: bool = False,
        start_method: str | None = None,
        **game_options: Any,
    ) -> None:
        # Validate everything before any process or shared memory exists.
        n_envs = check_count("n_envs", n_envs, 1, 1 << 16)
        self.options, self.games = _check_games(n_envs, game, seed, game_options)
        if n_workers is not None:
            n_workers = check_count("n_workers", n_workers, 1, n_envs)
        self.batch_size = check_count("batch_size", n_envs if batch_size is None else batch_size, 1, n_envs)
        modes = [mode.value for mode in AUTORESET_MODES]
        if autoreset_mode not in AUTORESET_MODES and autoreset_mode not in modes:
            raise ValueError(f"autoreset_mode must be one of {modes}, got {autoreset_mode!r}")
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.copy, self.restart_workers = bool(copy), bool(restart_workers)
        self._context = start_context(start_method)
        n_workers = n_workers or min(n_envs, self._default_n_workers())

        # What Gymnasium's VectorEnv promises.
        self.action_meanings = self.options.action_meanings
        self.num_envs = n_envs
        self.single_observation_space = observation_space(self.options)
        self.single_action_space = action_space(self.options)
        self.observation_space = gymnasium.vector.utils.batch_space(self.single_observation_space, n_envs)
        self.action_space = gymnasium.vector.utils.batch_space(self.single_action_space, n_envs)
        self.metadata = {"autoreset_mode": self.autoreset_mode}
        # info["game_name"] of a whole step, made once: read-only, so every step can hand out the same arrays.
        self._game_names = np.array(self.games, dtype=object)
        self._every_env = np.ones(n_envs, bool)
        self._game_names.flags.writeable = self._every_env.flags.writeable = False

        # The arrays and the workers; a finalizer owns both from the moment they exist, so that close(),
        # garbage collection and interpreter exit all leave nothing behind.
        self._layout = layout(n_envs, self.options, same_step=self.autoreset_mode == AutoresetMode.SAME_STEP)
        self._workers: list[Any] = []
        self._shared = self._open()
        self._restarts = 0  # workers replaced so far: a replacement's games get seeds never used before
        self._ready: list[int] = []  # envs finished by their worker and not yet returned by recv()
        self._pending = np.zeros(n_envs, bool)  # envs sent and not yet returned by recv()
        self._busy: set[Any] = set()  # the workers with unanswered commands
        self._restarted: set[int] = set()  # envs restarted with a new worker, not yet reported
        self._broken: PoolError | None = None  # what broke the pool: raised (a copy) by every call
        self._was_reset = False  # Gymnasium's order: reset() before the first step() or send()
        for block in np.array_split(np.arange(n_envs), n_workers):  # contiguous blocks, one per worker
            self._workers.append(self._start_worker(block.tolist()))
        self._owner = {i: worker for worker in self._workers for i in worker.env_ids}
        self._all_ids = np.arange(n_envs)

    def _seeds(self, env_ids: list[int]) -> list[int | None]:
        """The seeds of envs `env_ids` in new games: a replaced worker's games get seeds never used before."""
        base = self.options.seed
        return [None if base is None else base + i + self._restarts * self.num_envs for i in env_ids]

    def _block_arguments(self, env_ids: list[int]) -> tuple:
        """What `GameBlock` takes for the envs `env_ids`, but the arrays."""
        options = dataclasses.asdict(self.options)
        del options["seed"]
        per_env = [{**options, "game": self.games[i]} for i in env_ids]
        return env_ids, self._seeds(env_ids), self.autoreset_mode == AutoresetMode.NEXT_STEP, per_env

    # --- the local transport: worker processes and a shared-memory segment (RayGamePool overrides these) ---

    def _default_n_workers(self) -> int:
        return available_cores()

    def _open(self) -> dict[str, np.ndarray]:
        """Create the shared segment (its memory reserved now), the answer socket, the tickets' pipe and the finalizer
        that closes them with the workers; return the segment's arrays."""
        check_main_guard(self._context, "a GamePool")
        # Every worker gets the child's ends: answers, and the wake-up of a whole-pool step.
        (parent_end, child_end), (wake_end, wake_child) = socket.socketpair(), socket.socketpair()
        self._answers = (parent_end, connection.Connection(child_end.detach()))
        self._wake = (wake_end, connection.Connection(wake_child.detach()))
        # How the last worker of a whole-pool step knows it is last: (the read end, the write end) of a pipe of tickets.
        self._tickets = _ticket_pipe(self.num_envs)
        self._ticket_fds = (self._tickets[0].fileno(), self._tickets[1].fileno())  # (for _step_all)
        self._tickets_left = False  # whether the pipe may hold tickets that no worker took (_step_all)
        self._step_tag = 0
        # The segment last: where it has no room, what came before closes itself as it is collected.
        self._segment = create(self._layout, self.num_envs)
        self._finalizer: weakref.finalize = weakref.finalize(
            self, _shut_down, self._workers, self._segment, (*self._answers, *self._wake, *self._tickets)
        )
        # The parent's reads give up after LIVENESS_CHECK_SECONDS, so that it can check the workers it waits for.
        timeout = struct.pack("ll", *divmod(int(LIVENESS_CHECK_SECONDS * 1e6), 1_000_000))  # struct timeval
        for end in (parent_end, wake_end):
            end.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeout)
        self._unread: list[int] = []  # answers read from the socket, not yet taken in
        return arrays(self._segment, self._layout)

    def _start_worker(self, env_ids: list[int]) -> Any:
        self._shared["commands"][env_ids[0]] = 0  # a new worker has read no command (a replacement neither)
        parent_end, child_end = pipe()
        channels = (self._answers[1], self._wake[1], self._tickets[0])  # what every worker shares with the parent
        args = (child_end, *channels, self._segment.file, self._layout, *self._block_arguments(env_ids))
        process = self._context.Process(target=pool_worker, args=args, daemon=True)  # type: ignore[attr-defined]
        process.start()
        child_end.close()  # only the child holds it now, so a dead child reads as EOF
        return _Worker(process, parent_end, env_ids)

    def _replace(self, worker: Any) -> Any:
        """A new worker for a dead one's envs."""
        end_process(worker.process, worker.pipe)
        return self._start_worker(worker.env_ids)

    def _post(self, worker: Any, command: str, data: Any, ids: list[int]) -> None:
        """Send `GameBlock.run`'s command to the worker; `ids` are the envs a step plays (the worker reads
        their actions from the shared segment). Stepping all its envs is one byte."""
        if command == "step" and data is None:
            # (try costs nothing here, contextlib.suppress a call per command)
            try:  # noqa: SIM105
                os.write(worker.command_fd, STEP_ALL)
            except OSError:  # a dead worker: _next_answer notices it
                pass
        else:
            _send_message(worker, command, data)
        self._shared["commands"][worker.env_ids[0], 0] += 1  # after the byte: a watching worker reads it at once

    def _step_all(self) -> None:
        """Step every env, each worker all of its envs: `step`'s common case, with as little Python as can be.

        One byte to each worker, one sleep until the last of them to finish wakes the parent, one read of all
        their answers. (Woken by each answer instead, the parent would wake up to once a worker, and each
        wake-up costs it more CPU than all of its Python in a step.) Each worker got one command and answers it
        once, so one answer per worker, none of them an error (negative), is the whole step. Anything else (an
        error, a dead or slow worker: the wait gives up after `LIVENESS_CHECK_SECONDS`) hands over to the
        general machinery with what came, set up as if `_send` had sent each command and `_next_answer` had
        read what came, so that errors, deaths and restarts are handled as for any command.
        """
        if self._busy:  # answers still due (a step interrupted by Ctrl-C): every command the general way
            return self._step_each()
        # A ticket for every worker but the last. Nothing is in flight, so no worker takes one meanwhile: a step that
        # did not end with every worker's answer may have left tickets (a worker died before taking its own), which
        # would make a later step's last worker think it is not; read them away first.
        take, put = self._ticket_fds
        if self._tickets_left:
            with contextlib.suppress(BlockingIOError):  # (fewer than there are workers: one read takes them all)
                os.read(take, len(self._workers))
        self._tickets_left = True  # until every worker has answered, and so taken its ticket
        if len(self._workers) > 1:
            os.write(put, bytes(len(self._workers) - 1))
        self._step_tag = (self._step_tag + 1) % POOL_STEP_TAGS
        command, commands = POOL_STEP_BYTES[self._step_tag], self._shared["commands"]
        for worker in self._workers:
            # (try costs nothing here, contextlib.suppress a call per worker)
            try:  # noqa: SIM105
                os.write(worker.command_fd, command)
            except OSError:  # a dead worker: its answer never comes, and the general machinery finds out why
                pass
            commands[worker.env_ids[0], 0] += 1  # after the byte: a watching worker reads it at once
        answers = np.full(len(self._workers), NO_ANSWER, np.int32)
        try:
            self._read_pool_step(answers, command)
        except BaseException:  # Ctrl-C: the next call takes the answers still due in, as after any command
            self._hand_over(answers)  # (what was read, even if the interrupt came as the read returned)
            raise
        if answers.min() >= 0:  # every worker answered, none failed
            self._tickets_left = False
            return
        self._hand_over(answers)
        self._finish_in_flight()

    def _read_pool_step(self, answers: np.ndarray, command: bytes) -> None:
        """Sleep until the last worker of a whole-pool step sends `command` back (skipping late wake-ups of
        earlier steps), then read the answers into `answers`; after `LIVENESS_CHECK_SECONDS` without it, read
        what came. A woken parent may still wait for a worker caught between taking its ticket and answering."""
        view = answers.data.cast("B")
        try:
            while command not in self._wake[0].recv(64):
                pass
            woken = True
        except BlockingIOError:  # no wake-up in time: a dead or slow worker
            woken = False
        try:
            got = self._answers[0].recv_into(view, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            got = 0
        if woken and got < len(view):
            with contextlib.suppress(BlockingIOError):
                self._answers[0].recv_into(view[got:], 0, socket.MSG_WAITALL)

    def _hand_over(self, answers: np.ndarray) -> None:
        """Book `_step_all`'s commands as `_send` does, and the `answers` it read as `_next_answer` does."""
        for worker in self._workers:
            worker.in_flight.append(worker.env_ids)
        self._busy.update(self._workers)
        self._unread += _read_part(answers)

    def _next_answer(self, busy: set[Any], everything: bool) -> tuple[Any, tuple[str, list[int], Any]]:
        """Wait for the next answer of any of the `busy` workers: ``(status, the envs it sent, None or a
        traceback)`` as `GameBlock.run` answers, or ``("died", [], a WorkerDied)``.

        With `everything`, one read sleeps until the answers to every command in flight are in (one wake-up
        per step, not one per worker), else until the first. A read gives up after `LIVENESS_CHECK_SECONDS`
        and the parent checks that the workers it waits for are alive. The socket's send() and recv() order
        the memory: what a worker wrote to the segment before answering is what the parent reads after.
        """
        while not self._unread:
            answers = np.full(sum(len(worker.in_flight) for worker in busy) if everything else 1, NO_ANSWER, np.int32)
            try:
                self._answers[0].recv_into(answers.data, 0, socket.MSG_WAITALL)  # what came, if it gave up
            except BlockingIOError:  # nothing came
                pass
            finally:  # what was read is kept, even if Ctrl-C came as the read returned
                self._unread += _read_part(answers)
            if self._unread:
                break
            # Nothing came in LIVENESS_CHECK_SECONDS: see whether a worker it waits for died.
            by_sentinel = {worker.process.sentinel: worker for worker in busy}
            dead = connection.wait(list(by_sentinel), timeout=0)
            if dead and not self._answer_waiting():  # (first take an answer it sent before it died)
                worker = by_sentinel[dead[0]]
                worker.process.join(timeout=1)
                return worker, ("died", [], worker.died(exitcode=worker.process.exitcode))
        first = self._unread.pop(0)
        worker = self._owner[first if first >= 0 else -1 - first]
        if first >= 0:
            return worker, ("ok", worker.in_flight[0], None)
        try:  # the traceback follows the answer
            return worker, ("error", worker.in_flight[0], worker.pipe.recv())
        except (EOFError, OSError):  # (OSError: the pipe ended in the middle of it)
            worker.process.join(timeout=1)
            cause = "it died while sending the traceback of an error"
            return worker, ("died", [], worker.died(exitcode=worker.process.exitcode, cause=cause))

    def _answer_waiting(self) -> bool:
        try:
            return bool(self._answers[0].recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except BlockingIOError:
            return False

    # --- the VectorEnv API ------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Restart every game; `seed` (an int: env ``i`` gets ``seed + i``, or one per env) re-seeds them."""
        with interrupts_deferred():  # Ctrl-C once the books of what was sent and answered are straight
            self._check_usable(stepping=False)
            if options:
                raise ValueError(f"reset options are not supported (got {options!r}): every env is reset")
            if seed is None or isinstance(seed, (int, np.integer)):
                seeds = [None if seed is None else int(seed) + i for i in range(self.num_envs)]
            elif isinstance(seed, (Sequence, np.ndarray)) and len(seed) == self.num_envs:
                seeds = list(seed)
            else:
                raise ValueError(f"seed must be None, an int or a list of {self.num_envs} seeds, got {seed!r}")
            for i, env_seed in enumerate(seeds):  # checked here, so a bad seed leaves every env as it was
                if env_seed is not None:
                    check_int(f"the seed of env {i}", env_seed, low=0)
            self._finish_in_flight()  # whatever send() started is void now
            # Reset every worker; one replaced meanwhile (restart_workers) was reset with seeds of its own, so it is
            # reset again with these.
            answered: list[_Worker] = []
            while unanswered := [worker for worker in self._workers if worker not in answered]:
                for worker in unanswered:
                    self._send(worker, "reset", ({i: seeds[i] for i in worker.env_ids}, []), [])
                answered += unanswered
                self._finish_in_flight()
            # After a reset nothing is pending, owed or to be reported as restarted.
            self._ready.clear()
            self._pending[:] = False
            self._restarted.clear()
            self._was_reset = True
            info = {"lives": self._shared["lives"].copy(), "_lives": np.ones(self.num_envs, bool)}
            info["game_name"], info["_game_name"] = self._game_names, self._every_env
            return self._observations(), info

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Play one step of every env; see the class docstring."""
        with interrupts_deferred():  # Ctrl-C once the books of what was sent and answered are straight
            self._check_usable()
            if self._pending.any():
                raise PoolError("step() while send() results are pending: recv() them first")
            self._shared["actions"][:] = self._check_actions(actions, self.num_envs)
            self._step_all()
            self._ready.clear()
            return self._results(self._all_ids, whole=True)

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Start a step of the envs `env_ids` (default: all) with `actions`; collect the results with `recv`."""
        with interrupts_deferred():  # Ctrl-C once the books of what was sent and answered are straight
            self._check_usable()
            ids = np.arange(self.num_envs) if env_ids is None else np.asarray(env_ids)
            # Checked as a list: for a batch's few envs Python's set, min and max cost less than numpy's calls.
            if ids.ndim != 1 or ids.dtype.kind not in "iu" or len(set(listed := ids.tolist())) != len(listed):
                raise ValueError(f"env_ids must be distinct integers, got {env_ids!r}")
            if listed and (min(listed) < 0 or max(listed) >= self.num_envs):
                raise ValueError(f"env_ids must be in [0, {self.num_envs}), got {env_ids!r}")
            busy = ids[self._pending[ids]]
            if busy.size:
                raise ValueError(f"envs {sorted(busy.tolist())} were sent and not yet returned by recv()")
            self._shared["actions"][ids] = self._check_actions(actions, len(ids))
            self._pending[ids] = True
            self._send_steps(listed)

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Wait for `batch_size` envs to finish and return them, first finished first, with ``info["env_id"]``."""
        with interrupts_deferred():  # Ctrl-C once the books of what was sent and answered are straight
            self._check_usable()
            sent = int(np.count_nonzero(self._pending))
            if sent < self.batch_size:
                raise PoolError(f"recv() needs batch_size={self.batch_size} envs sent; only {sent} are")
            while len(self._ready) < self.batch_size:
                self._collect()
            ids = np.array(self._ready[: self.batch_size])
            del self._ready[: self.batch_size]
            self._pending[ids] = False
            return self._results(ids, whole=False)

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the workers and close the shared memory; `close()` calls it once."""
        self._shared = {}  # drop our views, so the segment can really close
        if hasattr(self, "_finalizer"):  # absent if __init__ failed before creating anything
            self._finalizer()

    def __enter__(self) -> GamePool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def n_workers(self) -> int:
        """How many worker processes the envs run in (a `RayGamePool`: how many Ray actors)."""
        return len(self._workers)

    def run_block(
        self, command: str, data: Any, actions: np.ndarray | None = None
    ) -> tuple[tuple[str, list[int], Any], dict[str, np.ndarray]]:
        """Carry out one of `GameBlock.run`'s commands over this pool's envs, as if they were one block of envs
        ``0 .. n_envs - 1``: what a `RayGamePool` node actor asks of the pool it hosts, below the `VectorEnv` API.

        ``("step", ids)`` plays the envs `ids` (None: all, the workers' fast path) with `actions` (one per env of
        `ids`, checked by the caller); ``("reset", (seeds, owed))`` resets the envs `seeds` maps to their seeds and
        owes those in `owed` a next-step reset step. Returns the answer, ``("ok", ids, ended)`` as `GameBlock.run`
        gives it (``ended``: an episode ended), ``("error", ids, message)``, or ``("died", [], error)`` when a
        worker died, with its `WorkerDied` (the pool is then broken: close it); and the pool's arrays
        (`segment.layout`'s, one row per env: views of its shared memory, overwritten by the next command). Nothing is
        reported by `recv`.

        Raises ValueError for a pool made with ``restart_workers=True``: a dead worker is the caller's to restart
        (its arrays would not say which envs a replacement restarted).
        """
        if self.restart_workers:
            raise ValueError("run_block needs a pool made with restart_workers=False: its caller restarts the block")
        with interrupts_deferred():  # Ctrl-C once the books of what was sent and answered are straight
            self._check_usable(stepping=False)
            ids: list[int] = []
            try:
                if command == "step":
                    ids = self._all_ids.tolist() if data is None else list(data)
                    self._shared["actions"][ids] = actions
                    if data is None:
                        self._step_all()
                    else:
                        self._send_steps(ids)
                        self._finish_in_flight()
                elif command == "reset":
                    seeds, owed = data
                    for worker in self._workers:
                        if mine := {i: seeds[i] for i in worker.env_ids if i in seeds}:
                            self._send(worker, "reset", (mine, owed), [])
                    self._finish_in_flight()
                else:
                    raise ValueError(f"unknown command {command!r}; valid commands: 'step', 'reset'")
            except PoolError as error:
                if self._broken is not None:
                    return ("died", [], self._broken), self._shared
                return ("error", ids, str(error)), self._shared
            finally:
                self._ready.clear()  # answers for this call, not for recv()
            return ("ok", ids, bool(self._shared["ended"][ids].any())), self._shared

    # --- talking to the workers -------------------------------------------------------------------------

    def _send_steps(self, ids: list[int]) -> None:
        """A step command to each worker with envs among `ids`: one byte if they are all its envs."""
        mine: dict[Any, list[int]] = {}
        for i in ids:
            mine.setdefault(self._owner[i], []).append(i)
        for worker, envs in mine.items():
            self._send(worker, "step", None if envs == worker.env_ids else envs, envs)

    def _send(self, worker: Any, command: str, data: Any, ids: list[int]) -> None:
        self._post(worker, command, data, ids)
        worker.in_flight.append(ids)
        self._busy.add(worker)

    def _step_each(self) -> None:
        """Step every env the general way: a command per worker, every answer (and any still due) taken in."""
        for worker in self._workers:
            self._send(worker, "step", None, worker.env_ids)
        self._finish_in_flight()

    def _finish_in_flight(self) -> None:
        """Wait for every answer; a failed command is raised only after all, so no answer is left unread."""
        failure = None
        while self._busy:
            try:
                self._collect(everything=True)
            except PoolError as error:
                if self._broken:
                    raise
                failure = failure or error
        if failure:
            raise failure

    def _collect(self, everything: bool = False) -> None:
        """Wait for the next answer from any busy worker and take it in (one: a dead worker's replacement
        is waited for in here too, which may take other answers, so a list of ready pipes would go stale)."""
        worker, (status, ids, payload) = self._next_answer(self._busy, everything)
        if status == "died":
            return self._worker_died(worker, payload)
        worker.in_flight.pop(0)
        if not worker.in_flight:
            self._busy.discard(worker)
        if status == "error":
            raise PoolError(f"{worker.describe()} failed on envs {list(ids)}:\n{payload}")
        self._ready.extend(ids)

    def _worker_died(self, worker: Any, died: WorkerDied) -> None:
        if not self.restart_workers:
            self._broken = died.replace(fatal=True)
            raise self._broken
        # Replace it: same envs, new seeds; the envs it was stepping are reported truncated, the others on
        # their next return.
        owed = [i for sent in worker.in_flight for i in sent]
        self._restarts += 1
        self._busy.discard(worker)
        replacement = self._replace(worker)
        self._workers[self._workers.index(worker)] = replacement
        self._owner.update(dict.fromkeys(replacement.env_ids, replacement))
        self._restart_envs(replacement, replacement.env_ids, owed)
        self._ready.extend(owed)

    def _restart_envs(self, worker: Any, env_ids: list[int], owed: list[int]) -> None:
        """Reset envs `env_ids` of `worker` with new seeds, reported as restarted, and so truncated, at their next
        return (`_results`); those `owed` (the step in progress) are owed a next-step reset step."""
        self._send(worker, "reset", (dict(zip(env_ids, self._seeds(env_ids), strict=True)), owed), [])
        while worker.in_flight:
            self._collect()
        self._restarted.update(env_ids)

    def _check_usable(self, stepping: bool = True) -> None:
        if self.closed:
            raise PoolError("the pool is closed")
        if self._broken is not None:
            raise copy.copy(self._broken)  # (a copy: each raise its own traceback)
        if stepping and not self._was_reset:
            raise PoolError("call reset() before the first step() or send()")

    def _check_actions(self, actions: Any, count: int) -> np.ndarray:
        """Actions as an int64 array of shape (count,) (continuous: float32 (count, 3)), refused before anything
        is sent if they are not valid."""
        if self.options.continuous:
            return check_continuous_actions(actions, (count, 3), name="actions")
        n_actions = len(self.action_meanings)  # a Python int: a numpy int64 compared with uint64 below is 1.5 µs dearer
        array = np.asarray(actions)
        if array.shape != (count,):
            raise ValueError(f"actions must have shape ({count},), one per env, got shape {array.shape}")
        if array.dtype.kind not in "iu":
            raise TypeError(f"actions must be integers in [0, {n_actions}), got dtype {array.dtype}")
        checked = array.astype(np.int64, copy=False)
        # One pass: seen as unsigned, a negative action is huge, so a max below n_actions means all are in range
        # (an unsigned one too big for int64 wraps to negative, so it is caught as well).
        if count and checked.view(np.uint64).max() >= n_actions:
            bad = np.flatnonzero((array < 0) | (array >= n_actions))[0]
            raise ValueError(
                f"actions must be in [0, {n_actions}) for {_describe_games(self.games)} "
                f"({', '.join(self.action_meanings)}); entry {bad} is {array[bad]}"
            )
        return checked

    def _results(self, ids: np.ndarray, whole: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """The step results of envs `ids` (`whole`: every env, in order), read from the shared segment, with
        their info; every array is a copy, but the observations of a whole step with copy=False."""
        shared, rows = self._shared, None if whole else ids
        obs = self._observations() if whole else shared["obs"][ids]
        rewards, terminations, truncations = (
            self._read("rewards", rows),
            self._read("terminations", rows),
            self._read("truncations", rows),
        )
        info: dict[str, Any] = {"lives": self._read("lives", rows), "_lives": np.ones(len(ids), bool)}
        if whole:
            info["game_name"], info["_game_name"] = self._game_names, self._every_env
        else:
            info["env_id"], info["game_name"], info["_game_name"] = ids, self._game_names[ids], np.ones(len(ids), bool)
        if self._restarted:
            restarted = np.array([i in self._restarted for i in ids.tolist()])
            self._restarted.difference_update(ids.tolist())
            truncations |= restarted
            info["worker_restarted"], info["_worker_restarted"] = restarted, restarted.copy()
        ended = self._read("ended", rows)
        if ended.any():
            self._add_episode_info(info, rows, ended)
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                final_obs = np.full(len(ids), None, dtype=object)
                for k in np.flatnonzero(ended):
                    final_obs[k] = shared["final_obs"][ids[k]].copy()
                info["final_obs"], info["_final_obs"] = final_obs, ended.copy()
                info["final_info"] = {key: info[key] for key in ("episode", "_episode", "game", "_game") if key in info}
                info["_final_info"] = ended.copy()
        return obs, rewards, terminations, truncations, info

    def _observations(self) -> np.ndarray:
        # copy=False hands out the shared array itself, valid until the next call.
        return self._shared["obs"].copy() if self.copy else self._shared["obs"]

    def _read(self, name: str, rows: np.ndarray | None) -> np.ndarray:
        """A copy of the shared array `name`'s rows `rows` (None: all of them, in order: a plain copy, cheaper
        than indexing with an arange of every env)."""
        return self._shared[name].copy() if rows is None else self._shared[name][rows]

    def _add_episode_info(self, info: dict[str, Any], rows: np.ndarray | None, ended: np.ndarray) -> None:
        """``info["episode"]`` (and ``info["game"]``) of envs `rows` (None: all), whose episodes `ended` (a mask),
        in the vector RecordEpisodeStatistics layout; vectorised from the statistics the workers wrote."""
        for key, mask in (("episode", ended), ("game", ended & self._read("game_ended", rows))):
            if mask.any():
                returns = np.where(mask, self._read(f"{key}_return", rows), 0.0)
                info[key] = {"r": returns, "l": np.where(mask, self._read(f"{key}_length", rows), 0)}
                info[f"_{key}"] = mask

    def __repr__(self) -> str:
        state = ", closed" if self.closed else ""
        distinct = len(set(self.games))
        games = (
            f"{self.num_envs} x {self.games[0]!r}"
            if distinct == 1
            else f"{self.num_envs} envs of {distinct} games: {_describe_games(self.games)}"
        )
        workers = f"{len(self._workers)} worker{'s' if len(self._workers) != 1 else ''}"
        return f"{type(self).__name__}({games}, {workers}{state})"
