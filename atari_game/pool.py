"""GamePool: N games in a few workers, the Gymnasium VectorEnv API, EnvPool-style async, over any `Transport`
(`LocalTransport`, the default, or `atari_game.ray_pool.RayTransport`): this module is what every transport shares.

    with GamePool(16, "Breakout", noop_max=30) as pool:
        obs, info = pool.reset(seed=0)                  # uint8 (16, 4, 84, 84)
        obs, rewards, terminations, truncations, info = pool.step(pool.action_space.sample())
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, cast

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode
from typing_extensions import TypeVar

from atari_game.game import GameOptions, check_continuous_actions
from atari_game.local_transport import LocalTransport
from atari_game.pool_errors import CommandFailed, PoolError, WorkerDied, WorkerHandle
from atari_game.segment import Layout, layout
from atari_game.spaces import action_space, observation_space
from atari_game.validation import check_choice, check_count, check_int, renamed_option
from atari_game.worker import interrupts_deferred

#: The type of a transport's handles on its workers, a `WorkerHandle`: `LocalWorker` for `LocalTransport` (the
#: default), `RayActor` for `RayTransport`. Unsaid (a bare ``GamePool`` annotation, a pool made without a transport)
#: it is any handle type, so that ``GamePool`` names every pool, a `RayGamePool` too.
W = TypeVar("W", bound=WorkerHandle, default=Any)


class Transport(Protocol[W]):
    """Where a `GamePool`'s workers run, and how its commands and their answers travel; `W` is its handles' type.

    The Design page says when the pool calls each method. `workers` are its handles, one per block, in order: the pool
    keeps its books of each in the handle (`WorkerHandle`) and gives the handles back to the methods below. An answer
    is ``(status, ids, payload)``: ``("ok", ids, ...)``, the envs answered (their results in the arrays);
    ``("error", [], CommandFailed)``, a command that raised; ``("died", [], WorkerDied)``, a worker that died.
    """

    workers: list[W]

    def default_n_workers(self) -> int:
        """How many workers a pool has by default."""

    def open(self, layout: Layout, arguments: Callable[[list[int]], tuple]) -> dict[str, np.ndarray]:
        """Make what the workers need; return the arrays of `layout` (a row per env) for actions and results.
        `arguments(env_ids)`: `GameBlock`'s arguments for a block but the arrays (its seeds change with restarts)."""

    def start(self, blocks: list[list[int]]) -> None:
        """Start a worker for each block of env ids; `workers` holds their handles."""

    def replace(self, worker: W) -> W:
        """A worker for a dead one's envs, in its place in `workers`; raises `PoolError` if there can be none."""

    def post(self, worker: W, command: str, data: Any) -> None:
        """Send `GameBlock.run`'s ``(command, data)``; a step's actions are in the arrays (``data``: the envs it plays,
        None for all of the worker's)."""

    def step_all(self) -> bool:
        """Step every env, each worker all of its envs; True if every worker answered ``"ok"``. Else (False, or an
        exception) the pool books a step of every worker and takes the answers in with `next_answer`."""

    def next_answer(self, busy: set[W], everything: bool) -> tuple[W, tuple[str, list[int], Any]]:
        """Wait for the next answer of a `busy` worker: the worker and its answer (see above); its results are in the
        arrays. With `everything` the pool waits for all its commands in flight, and the transport waits for them at
        once (one wait for all of them, not one an answer)."""

    def close(self) -> None:
        """Stop the workers and free what `open` made; nothing if it did not run."""


@dataclasses.dataclass
class Books(Generic[W]):
    """A `GamePool`'s state between calls, in one place (as Gymnasium's `AsyncVectorEnv` keeps its state), but what
    it keeps of each worker, in the worker's handle (`WorkerHandle.in_flight`)."""

    pending: np.ndarray  # bool per env: sent by send() and not yet returned by recv()
    ready: list[int] = dataclasses.field(default_factory=list)  # envs answered by their worker, not yet returned
    busy: set[W] = dataclasses.field(default_factory=set)  # the workers with unanswered commands
    restarted: set[int] = dataclasses.field(default_factory=set)  # envs restarted with a new worker, not yet reported
    restarts: int = 0  # workers replaced so far: a replacement's games get seeds never used before
    broken: PoolError | None = None  # what broke the pool: raised (a copy) by every call
    was_reset: bool = False  # Gymnasium's order: reset() before the first step() or send()

    def reset(self) -> None:
        """The books after a reset of every env: nothing pending, owed or to be reported as restarted."""
        self.ready.clear()
        self.pending[:] = False
        self.restarted.clear()
        self.was_reset = True


# A pool's own arguments under other libraries' names (the pool hands the keywords it does not know to the games).
OTHER_NAMES = {
    "envs": "the count is the first argument, num_envs",
    **dict.fromkeys(("workers", "num_workers", "num_threads"), "use n_workers= (the worker processes)"),
}


def _check_arguments(
    pool: str, num_envs: Any, game: Any, seed: int | None, game_options: dict[str, Any]
) -> tuple[int, GameOptions, tuple[str, ...]]:
    """`num_envs` in [1, 65536] (the likeliest slips named), the options every env shares and each env's ROM id.
    ``n_envs=``, its name until 0.2, is taken from `game_options` with a `FutureWarning`."""
    num_envs = renamed_option(game_options, "n_envs", "num_envs", num_envs, stacklevel=5)
    if num_envs is None:
        raise TypeError(f"{pool}(num_envs, game): how many envs is missing, as in {pool}(8, 'Breakout')")
    if isinstance(num_envs, str) and not num_envs.isdigit():
        count = game if isinstance(game, int) else 8
        raise TypeError(f"{pool}(num_envs, game): the count comes first, as in {pool}({count}, {num_envs!r})")
    if foreign := sorted(game_options.keys() & OTHER_NAMES.keys()):
        raise TypeError(f"{pool}: unknown argument {foreign[0]!r}: {OTHER_NAMES[foreign[0]]}")
    num_envs = check_count("num_envs", num_envs, 1, 1 << 16)
    if isinstance(game, str):
        games = [game] * num_envs
    elif isinstance(game, (list, tuple)):
        if len(game) != num_envs:
            raise ValueError(f"game: a list of games names one game per env, got {len(game)} for num_envs={num_envs}")
        for i, name in enumerate(game):
            if not isinstance(name, str):
                raise TypeError(f"game[{i}] must be a game name such as 'Breakout', got {type(name).__name__} {name!r}")
        games = list(game)
    else:
        raise TypeError(f"game must be a game name or a list of one per env, got {type(game).__name__} {game!r}")
    # GameOptions says if an option does not fit a game (mode, fire_reset).
    by_name = {name: GameOptions.from_kwargs(game=name, seed=seed, **game_options) for name in dict.fromkeys(games)}
    roms = tuple(by_name[name].game for name in games)
    # One pool has one action space (continuous actions are one Box for every game).
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
    return num_envs, shared, roms


def _check_seeds(seed: int | list[int | None] | None, num_envs: int) -> list[int | None]:
    """`GamePool.reset`'s `seed` (None, an int: env ``i`` gets ``seed + i``, or one per env) as one seed per env."""
    if seed is None or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)):
        seeds = [None if seed is None else int(seed) + i for i in range(num_envs)]
    elif isinstance(seed, (Sequence, np.ndarray)) and not isinstance(seed, (str, bytes)):
        if len(seed) != num_envs:
            raise ValueError(f"seed: a list of seeds gives one per env, {num_envs}, got {len(seed)}")
        seeds = list(seed)
    else:  # a float, a string: the wrong kind of thing, as Game.reset says
        raise TypeError(f"seed must be None, an int or a list of {num_envs} seeds, got {type(seed).__name__} {seed!r}")
    for i, env_seed in enumerate(seeds):
        if env_seed is not None:
            check_int(f"the seed of env {i}", env_seed, low=0)
    return seeds


def _describe_games(games: tuple[str, ...]) -> str:
    """The distinct games of `games` for a message: ``"breakout, pong"``, or the first four and how many more."""
    distinct = list(dict.fromkeys(games))
    more = f" and {len(distinct) - 4} more games" if len(distinct) > 4 else ""
    return ", ".join(distinct[:4]) + more


class GamePool(gymnasium.vector.VectorEnv, Generic[W]):
    """`num_envs` games (each a `Game`) in `n_workers` processes: the Gymnasium `VectorEnv` API, EnvPool-style async.

    Args:
        num_envs: how many games. Env ``i`` is seeded with ``seed + i``.
        game, seed, **game_options: as for `Game`, all validated before any process starts. `game` may also list
            each env's game (length `num_envs`): a mixed pool, whose games take the same options and share one action
            space: ALE's full set (``full_action_space=True``), the `Box` of ``continuous``, or the same minimal set
            (the Pool guide says which games share one); other mixes raise a `ValueError` naming the sets and the fix.
        n_workers: worker processes (default: one per available core, at most `num_envs`), each a contiguous block.
        autoreset_mode: Gymnasium's ``AutoresetMode.NEXT_STEP`` (the default) or ``SAME_STEP`` (the tutorial's), with
            the semantics Gymnasium documents (the Concepts page shows both); same-step reports the final observation
            of an ended episode in ``info["final_obs"]``.
        batch_size: how many envs `recv` returns (default: all).
        copy: False makes `step` and `reset` return the shared observation array itself, valid until the next call.
        restart_workers: replace a worker that dies: its envs restart with new seeds and are reported truncated with
            ``info["worker_restarted"]``. Without it, a dead worker raises `WorkerDied`.
        start_method: a `multiprocessing` start method (default `DEFAULT_START_METHOD`, "forkserver" on Linux: the
            Worker guide says why); all but "fork" need a script to start the pool under ``if __name__ == "__main__":``.
        transport: where the workers run (a `Transport` whose handles are of type `W`); the default is
            ``LocalTransport(start_method)``, processes on this machine. `RayGamePool` passes a `RayTransport`.

    ``step(actions)`` takes integer actions ``(num_envs,)`` (``continuous=True``: floats ``(num_envs, 3)``) and returns
    ``obs`` (``(num_envs, *GameOptions.observation_shape)`` of ``observation_dtype``: ``uint8 (num_envs, 4, 84, 84)`` by
    default), ``rewards`` (float64), ``terminations`` (a life or the game was lost, as `life_loss` says),
    ``truncations`` (`max_episode_frames` reached) and ``info``: ``lives`` for every env (its observation's game's: on
    a next-step done step the ended episode's, on a same-step one the next episode's); for envs whose episode ended
    ``info["episode"]["r"|"l"]`` (unclipped return and length) with the mask ``info["_episode"]``, as Gymnasium's
    vector ``RecordEpisodeStatistics``; when `life_loss` is not "reset" and a whole game ended, also ``info["game"]``,
    ``info["_game"]``; ``info["game_name"]`` (object array, mask ``info["_game_name"]``), each env's ROM id: the same
    read-only arrays every whole `step`.

    Attributes: ``games``, the ROM id of each env's game (a tuple of `num_envs`, e.g. ``("breakout", "kaboom")``);
    ``options``, the `GameOptions` every env shares, with env 0's ``game``; ``action_meanings``, the envs' actions.

    Async, as in EnvPool: ``send(actions, env_ids)`` starts those envs; ``recv()`` waits until `batch_size` envs have
    finished and returns them (the first to finish) with ``info["env_id"]`` (and their ``info["game_name"]``).
    """

    def __init__(
        self,
        num_envs: int | None = None,
        game: str | Sequence[str] = "Breakout",
        seed: int | None = 0,
        *,
        n_workers: int | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        batch_size: int | None = None,
        copy: bool = True,
        restart_workers: bool = False,
        start_method: str | None = None,
        transport: Transport[W] | None = None,
        **game_options: Any,
    ) -> None:
        # Validate everything before any process or shared memory exists.
        num_envs, self.options, self.games = _check_arguments(type(self).__name__, num_envs, game, seed, game_options)
        n_workers = None if n_workers is None else check_count("n_workers", n_workers, 1, num_envs)
        self.batch_size = check_count("batch_size", num_envs if batch_size is None else batch_size, 1, num_envs)
        mode = autoreset_mode.value if isinstance(autoreset_mode, AutoresetMode) else autoreset_mode
        check_choice("autoreset_mode", mode, (AutoresetMode.NEXT_STEP.value, AutoresetMode.SAME_STEP.value))
        if transport is not None and start_method is not None:
            raise TypeError("start_method is for local worker processes; the transport given starts its own workers")
        self.autoreset_mode = AutoresetMode(mode)
        self.copy, self.restart_workers = bool(copy), bool(restart_workers)
        # (no transport given: W is LocalWorker, which a type checker cannot tell from the None)
        self._transport = cast(Transport[W], LocalTransport(start_method)) if transport is None else transport

        # What Gymnasium's VectorEnv promises.
        self.num_envs, self.action_meanings = num_envs, self.options.action_meanings
        self.single_observation_space = observation_space(self.options)
        self.single_action_space = action_space(self.options)
        self.observation_space = gymnasium.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gymnasium.vector.utils.batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": self.autoreset_mode}
        # info["game_name"] of a whole step, made once: read-only, so every step can hand out the same arrays.
        self._game_names, self._every_env = np.array(self.games, dtype=object), np.ones(num_envs, bool)
        self._game_names.flags.writeable = self._every_env.flags.writeable = False
        self._books: Books[W] = Books(pending=np.zeros(num_envs, bool))
        self._all_ids = np.arange(num_envs)

        # The arrays and the workers, closed by close() (or the transport's finalizer) whatever happens from here.
        try:
            n_workers = n_workers or min(num_envs, self._transport.default_n_workers())
            shapes = layout(num_envs, self.options, same_step=self.autoreset_mode == AutoresetMode.SAME_STEP)
            self._shared = self._transport.open(shapes, self._block_arguments)
            # (the transport's list: replacements take their places in it)
            self._workers = self._transport.workers
            self._transport.start([block.tolist() for block in np.array_split(self._all_ids, n_workers)])
        except BaseException:  # a worker that cannot start, Ctrl-C: leave nothing behind
            self.close()
            raise
        self._owner = {i: worker for worker in self._workers for i in worker.env_ids}

    def _seeds(self, env_ids: list[int]) -> list[int | None]:
        """The seeds of envs `env_ids` in new games: a replaced worker's games get seeds never used before."""
        base = self.options.seed
        return [None if base is None else base + i + self._books.restarts * self.num_envs for i in env_ids]

    def _block_arguments(self, env_ids: list[int]) -> tuple:
        """What `GameBlock` takes for the envs `env_ids`, but the arrays."""
        options = dataclasses.asdict(self.options)
        del options["seed"]
        per_env = [{**options, "game": self.games[i]} for i in env_ids]
        return env_ids, self._seeds(env_ids), self.autoreset_mode == AutoresetMode.NEXT_STEP, per_env

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Restart every game; `seed` (an int: env ``i`` gets ``seed + i``, or one per env) re-seeds them; without
        one, the games' generators go on (a second reset does not replay the first). Voids whatever `send` started.

        Raises TypeError for a seed of the wrong type, ValueError for a bad seed value or any `options` (before any env
        is reset), `PoolError` on a closed pool, and the worker's failure as `step` does."""
        with interrupts_deferred():  # Ctrl-C once the books of what was sent and answered are straight
            self._check_usable(stepping=False)
            if options:
                raise ValueError(f"reset options are not supported (got {options!r}): every env is reset")
            seeds = _check_seeds(seed, self.num_envs)  # checked first, so a bad seed leaves every env as it was
            self._finish_in_flight()  # whatever send() started is void now
            # Reset every worker; one replaced meanwhile (restart_workers) had seeds of its own: reset it again.
            answered: list[W] = []
            while unanswered := [worker for worker in self._workers if worker not in answered]:
                for worker in unanswered:
                    self._send(worker, "reset", ({i: seeds[i] for i in worker.env_ids}, []), [])
                answered += unanswered
                self._finish_in_flight()
            self._books.reset()
            obs, _, _, _, info = self._results(self._all_ids, whole=True)  # (no episode ended, no env restarted)
            return obs, info

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Play one step of every env (see the class docstring).

        Raises TypeError or ValueError for actions of the wrong dtype, shape or range (nothing is sent, the pool stays
        usable); `PoolError` before `reset`, while `send` results are pending, or on a closed pool; `CommandFailed` (a
        `PoolError`: the exception's type, message and traceback as fields; the pool stays usable) when a worker's
        command raised; `WorkerDied` (a `PoolError`) when a worker died and `restart_workers` is off, then on every
        later call."""
        with interrupts_deferred():  # Ctrl-C once the books of what was sent and answered are straight
            self._check_usable()
            if self._books.pending.any():
                raise PoolError("step() while send() results are pending: recv() them first")
            self._shared["actions"][:] = self._check_actions(actions, self.num_envs)
            self._step_all()
            self._books.ready.clear()
            return self._results(self._all_ids, whole=True)

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Start a step of the envs `env_ids` (default: all) with `actions`; collect the results with `recv`.

        Raises ValueError for `env_ids` that are not distinct integers in range or already sent and not received, and
        for bad actions as `step` does; `PoolError` before `reset` or on a closed pool."""
        with interrupts_deferred():  # Ctrl-C once the books of what was sent and answered are straight
            self._check_usable()
            ids = self._all_ids if env_ids is None else np.asarray(env_ids)
            # Checked as a list: for a batch's few envs Python's set, min and max cost less than numpy's calls.
            if ids.ndim != 1 or ids.dtype.kind not in "iu" or len(set(listed := ids.tolist())) != len(listed):
                raise ValueError(f"env_ids must be distinct integers, got {env_ids!r}")
            if listed and (min(listed) < 0 or max(listed) >= self.num_envs):
                raise ValueError(f"env_ids must be in [0, {self.num_envs}), got {env_ids!r}")
            busy = ids[self._books.pending[ids]]
            if busy.size:
                raise ValueError(f"envs {sorted(busy.tolist())} were sent and not yet returned by recv()")
            self._shared["actions"][ids] = self._check_actions(actions, len(ids))
            self._books.pending[ids] = True
            self._send_steps(listed)

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Wait for `batch_size` envs to finish and return them, first finished first, with ``info["env_id"]``; the
        arrays are copies (rows picked by env), whatever `copy`.

        Raises `PoolError` when fewer than `batch_size` envs were sent, and a worker's failure as `step` does."""
        with interrupts_deferred():  # Ctrl-C once the books of what was sent and answered are straight
            self._check_usable()
            sent = int(np.count_nonzero(self._books.pending))
            if sent < self.batch_size:
                raise PoolError(f"recv() needs batch_size={self.batch_size} envs sent; only {sent} are")
            while len(self._books.ready) < self.batch_size:
                self._collect()
            ids = np.array(self._books.ready[: self.batch_size])
            del self._books.ready[: self.batch_size]
            self._books.pending[ids] = False
            return self._results(ids, whole=False)

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the workers and close the shared memory; `close()` calls it once."""
        self._shared = {}  # drop our views, so the segment can really close
        self._transport.close()

    def __enter__(self) -> GamePool[W]:
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
        """Carry out one of `GameBlock.run`'s commands over all envs as one block, below the `VectorEnv` API.

        For a `RayGamePool` node actor's pool, made without ``restart_workers`` (else a ValueError: the caller restarts
        a dead block). ``("step", ids)`` plays the envs `ids` (None: all) with `actions` (one per env of `ids`, checked
        by the caller); ``("reset", (seeds, owed))`` as `GameBlock.run` takes it. `recv` reports none of it. Returns
        the answer, ``("ok", ids, ended)``, ``("error", [], its CommandFailed)`` (the first command that raised, its
        worker named; the pool goes on) or ``("died", [], its WorkerDied)`` (the pool is then broken: close it), and
        the pool's arrays (a row per env, overwritten by the next command)."""
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
            except WorkerDied as died:  # (the pool's books.broken)
                return ("died", [], died), self._shared
            except CommandFailed as failed:
                return ("error", [], failed), self._shared
            finally:
                self._books.ready.clear()  # answers for this call, not for recv()
            return ("ok", ids, bool(self._shared["ended"][ids].any())), self._shared

    def _send_steps(self, ids: list[int]) -> None:
        """A step command to each worker with envs among `ids`: one byte if they are all its envs."""
        mine: dict[W, list[int]] = {}
        for i in ids:
            mine.setdefault(self._owner[i], []).append(i)
        for worker, envs in mine.items():
            self._send(worker, "step", None if envs == worker.env_ids else envs, envs)

    def _send(self, worker: W, command: str, data: Any, ids: list[int]) -> None:
        self._transport.post(worker, command, data)
        worker.in_flight.append(ids)
        self._books.busy.add(worker)

    def _step_all(self) -> None:
        """Step every env by the transport's fast path, booking and finishing what it leaves undone the general way."""
        if self._books.busy:  # answers still due (a step interrupted by Ctrl-C): every command the general way
            return self._step_each()
        try:
            done = self._transport.step_all()
        except BaseException:
            self._book_step_of_all()
            raise
        if not done:
            self._book_step_of_all()
            self._finish_in_flight()

    def _book_step_of_all(self) -> None:
        """Book a step of all its envs for every worker, as `_send` books a command."""
        for worker in self._workers:
            worker.in_flight.append(worker.env_ids)
        self._books.busy.update(self._workers)

    def _step_each(self) -> None:
        """Step every env the general way: a command per worker, every answer (and any still due) taken in."""
        for worker in self._workers:
            self._send(worker, "step", None, worker.env_ids)
        self._finish_in_flight()

    def _finish_in_flight(self) -> None:
        """Wait for every answer; a failed command is raised only after all, so no answer is left unread."""
        failure = None
        while self._books.busy:
            try:
                self._collect(everything=True)
            except PoolError as error:
                if self._books.broken:
                    raise
                failure = failure or error
        if failure:
            raise failure

    def _collect(self, everything: bool = False) -> None:
        """Take in the next answer of any busy worker (one: replacing a dead worker may take others in too)."""
        worker, (status, ids, payload) = self._transport.next_answer(self._books.busy, everything)
        if status == "died":
            return self._worker_died(worker, payload)
        worker.in_flight.pop(0)
        if not worker.in_flight:
            self._books.busy.discard(worker)
        if status == "error":  # the worker's report, named as this pool names the worker
            raise payload.replace(worker=worker.describe())
        self._books.ready.extend(ids)

    def _worker_died(self, worker: W, died: WorkerDied) -> None:
        if not self.restart_workers:
            self._books.broken = died.replace(fatal=True)
            raise self._books.broken
        # Replace it: same envs, new seeds; the envs it was stepping are reported truncated now, the others later.
        owed = [i for sent in worker.in_flight for i in sent]
        self._books.restarts += 1
        self._books.busy.discard(worker)
        try:
            replacement = self._transport.replace(worker)
        except PoolError as error:  # no replacement can start (a Ray actor lost with its node, say)
            self._books.broken = error
            raise
        # Its envs reset with new seeds (reported truncated by `_results`); those owed get reset steps.
        env_ids = replacement.env_ids
        self._owner.update(dict.fromkeys(env_ids, replacement))
        self._send(replacement, "reset", (dict(zip(env_ids, self._seeds(env_ids), strict=True)), owed), [])
        while replacement.in_flight:
            self._collect()
        self._books.restarted.update(env_ids)
        self._books.ready.extend(owed)

    def _check_usable(self, stepping: bool = True) -> None:
        if self.closed:
            raise PoolError("the pool is closed")
        if self._books.broken is not None:
            raise copy.copy(self._books.broken)  # (a copy: each raise its own traceback)
        if stepping and not self._books.was_reset:
            raise PoolError("call reset() before the first step() or send()")

    def _check_actions(self, actions: Any, count: int) -> np.ndarray:
        """`count` envs' actions as int64 ``(count,)`` (continuous: float32 ``(count, 3)``), refused if not valid."""
        if self.options.continuous:
            return check_continuous_actions(actions, (count, 3), name="actions")
        n_actions = len(self.action_meanings)  # a Python int: a numpy int64 compared with uint64 below is 1.5 µs dearer
        array = np.asarray(actions)
        if array.shape != (count,):
            raise ValueError(f"actions must have shape ({count},), one per env, got shape {array.shape}")
        if array.dtype.kind not in "iu":
            raise TypeError(f"actions must be integers in [0, {n_actions}), got dtype {array.dtype}")
        checked = array.astype(np.int64, copy=False)
        # One pass: seen as unsigned, a negative action (or an unsigned one too big for int64) is >= n_actions.
        if count and checked.view(np.uint64).max() >= n_actions:
            bad = np.flatnonzero((array < 0) | (array >= n_actions))[0]
            raise ValueError(
                f"actions must be in [0, {n_actions}) for {_describe_games(self.games)} "
                f"({', '.join(self.action_meanings)}); entry {bad} is {array[bad]}"
            )
        return checked

    def _results(self, ids: np.ndarray, whole: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """The step results of envs `ids` (`whole`: every env, in order) and their info, from the shared arrays."""
        rows = None if whole else ids
        obs, rewards, terminations, truncations = (
            self._read(name, rows) for name in ("obs", "rewards", "terminations", "truncations")
        )
        info: dict[str, Any] = {"lives": self._read("lives", rows), "_lives": np.ones(len(ids), bool)}
        if whole:
            info["game_name"], info["_game_name"] = self._game_names, self._every_env
        else:
            info["env_id"], info["game_name"], info["_game_name"] = ids, self._game_names[ids], np.ones(len(ids), bool)
        if self._books.restarted:
            restarted = np.array([i in self._books.restarted for i in ids.tolist()])
            self._books.restarted.difference_update(ids.tolist())
            truncations |= restarted
            info["worker_restarted"], info["_worker_restarted"] = restarted, restarted.copy()
        ended = self._read("ended", rows)
        if ended.any():
            # The vector RecordEpisodeStatistics layout, from the statistics the workers wrote.
            for key, mask in (("episode", ended), ("game", ended & self._read("game_ended", rows))):
                if mask.any():
                    returns = np.where(mask, self._read(f"{key}_return", rows), 0.0)
                    info[key] = {"r": returns, "l": np.where(mask, self._read(f"{key}_length", rows), 0)}
                    info[f"_{key}"] = mask
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                final_obs = np.full(len(ids), None, dtype=object)
                for k in np.flatnonzero(ended):
                    final_obs[k] = self._shared["final_obs"][ids[k]].copy()
                info["final_obs"], info["_final_obs"] = final_obs, ended.copy()
                info["final_info"] = {key: info[key] for key in ("episode", "_episode", "game", "_game") if key in info}
                info["_final_info"] = ended.copy()
        return obs, rewards, terminations, truncations, info

    def _read(self, name: str, rows: np.ndarray | None) -> np.ndarray:
        """A copy of the shared array `name`'s rows `rows` (None: all); all of ``obs`` with copy=False is the array."""
        if rows is None:  # all, in order: a plain copy, cheaper than indexing with an arange
            return self._shared[name].copy() if self.copy or name != "obs" else self._shared[name]
        return self._shared[name][rows]

    def __repr__(self) -> str:
        state = ", closed" if self.closed else ""
        games, distinct = f"{self.num_envs} x {self.games[0]!r}", len(set(self.games))
        if distinct > 1:
            games = f"{self.num_envs} envs of {distinct} games: {_describe_games(self.games)}"
        workers = f"{len(self._workers)} worker{'s' if len(self._workers) != 1 else ''}"
        return f"{type(self).__name__}({games}, {workers}{state})"
