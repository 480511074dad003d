"""RayGamePool: the GamePool API with its games on Ray actors, on as many machines as the Ray cluster has.

Each actor hosts a `GameBlock` or a whole local `GamePool` (`RayGamePool`'s `actors`); everything else is `GamePool`'s
code. It needs ``pip install -e ".[ray]"``, and on every node this process's atari_game and ale-py (Ray guide).

    with RayGamePool(64, "Breakout", address="auto") as pool:   # an existing cluster; "local" starts one here
        obs, info = pool.reset(seed=0)
        obs, rewards, terminations, truncations, info = pool.step(pool.action_space.sample())
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import signal
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from atari_game.extras import install_command
from atari_game.pool import GamePool
from atari_game.pool_errors import CommandFailed, PoolError, WorkerDied, WorkerHandle, describe_worker
from atari_game.pool_worker import GameBlock
from atari_game.segment import Layout
from atari_game.validation import check_choice
from atari_game.worker import prepare_worker_process

# How long an actor may take to start, or to come back after a restart (Ray first has to notice a lost node, ~20 s).
START_TIMEOUT = 120.0
# How long a cluster's address may take to accept a TCP connection (Ray itself retries for minutes).
CONNECT_TIMEOUT = 10.0
# How long a new pool waits for the CPUs its actors need to come free (a pool closed just before frees them later).
FREE_CPU_WAIT = 10.0
# The addresses a pool takes, as its error message says them.
ADDRESSES = 'None, "auto", "local", "HOST:PORT" (a node, usually port 6379) or "ray://HOST:PORT" (Ray Client)'
# The kinds of actor a pool can run its envs in (RayGamePool's `actors`).
ACTORS = ("worker", "node")
# How long a node actor may take to stop its pool's worker processes and end itself, before it is killed.
CLOSE_TIMEOUT = 5.0
# Ray's single-machine mode (`single_machine_mode`; the default on macOS and Windows), read by every Ray process.
SINGLE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

# The Ray connection a pool made (its job id), and the pools using it: the last one to close ends it.
_connection: dict[str, Any] = {"job": None, "pools": set()}


@functools.cache
def _ray() -> Any:
    try:
        import ray
    except ImportError as error:
        raise ImportError(f"RayGamePool needs Ray: {install_command('ray')}") from error
    return ray


@functools.cache
def _remote(actor_class: type) -> Any:
    return _ray().remote(actor_class)


def versions() -> dict[str, str]:
    """The versions of atari_game and ale-py (the emulator: another release may play other frames) in this process."""
    found = {}
    for package in ("atari_game", "ale-py"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
            found[package] = "not installed"
    return found


def check_address(address: str | None) -> None:
    """A `ValueError` naming the valid forms unless `address` is one of `ADDRESSES`."""
    if address in (None, "auto", "local"):
        return
    if not isinstance(address, str) or not re.fullmatch(r"(ray://)?(\[[0-9a-fA-F:.]+\]|[\w.-]+):\d{1,5}", address):
        raise ValueError(f"address must be {ADDRESSES}, got {address!r}")


@contextlib.contextmanager
def single_machine_mode() -> Iterator[None]:
    """Ray's single-machine mode for the Ray processes started inside: a node given 127.0.0.1 keeps it (else Ray takes
    the machine's address), its servers on 127.0.0.1 only. A driver of such a cluster needs it too (the tests')."""
    from ray._private import ray_constants

    # Read from the environment by every Ray process, and at import by this one (its constant).
    saved = os.environ.get(SINGLE_MACHINE), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[SINGLE_MACHINE], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved[1]
        os.environ.pop(SINGLE_MACHINE, None)
        if saved[0] is not None:
            os.environ[SINGLE_MACHINE] = saved[0]


def _start_local(ray: Any) -> None:
    """Start a new Ray on this machine that opens no door: its servers on 127.0.0.1, no dashboard, Ray's token auth."""
    with single_machine_mode():
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False)


def connect(address: str | None) -> Any:
    """Ray, connected to `address` (see `RayGamePool`) unless it is already; one made here ends with its last pool."""
    ray = _ray()
    if ray.is_initialized():
        return ray
    check_address(address)
    # `ray.init` sets a SIGTERM handler of its own (one that exits at once): a caller's (a trainer's) is put back.
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        _init(ray, address)
    finally:
        if callable(sigterm) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, sigterm)
    _connection["job"] = ray.get_runtime_context().get_job_id()  # ours: the last pool using it ends it
    return ray


def _init(ray: Any, address: str | None) -> None:
    """`ray.init` for `connect`'s `address`, with the errors a user can act on."""
    if address is None and not os.environ.get("RAY_ADDRESS"):
        try:  # a cluster `ray start` runs on this machine, else a new local Ray
            ray.init(address="auto")
        except ConnectionError:
            _start_local(ray)
    elif address == "local":
        _start_local(ray)
    elif address == "auto":
        try:
            ray.init(address="auto")
        except ConnectionError as error:
            raise ConnectionError(
                f"{error} (address 'auto' is a cluster `ray start` runs on this machine, or RAY_ADDRESS): start "
                "one with `ray start --head`, give its address, or use 'local' for a new Ray in this process"
            ) from None
    else:
        # Ray would retry an address where nothing answers for minutes: refuse it within CONNECT_TIMEOUT.
        given = address or os.environ["RAY_ADDRESS"]
        host, _, port = given.removeprefix("ray://").rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
        except OSError as error:
            raise ConnectionError(
                f"no Ray cluster answers at {given} ({error}): start one there (`ray start --head` on that machine), "
                "check the host and port (6379 for a node, ray://HOST:10001 for Ray Client), and that no firewall "
                "between the two machines blocks the port (docs/guides/ray.md)"
            ) from None
        try:
            ray.init(address=address)
        except RuntimeError as error:
            if not str(error).startswith("Version mismatch"):
                raise
            raise RuntimeError(
                f"{str(error).strip()}\nRay refuses a driver whose Ray or Python version differs from the "
                "cluster's: run this process with the cluster's Ray and Python (pip install ray==<its Ray>, in a "
                "virtual environment of its Python), or start the cluster with this machine's (docs/guides/ray.md)"
            ) from None


def free_cpus(address: str | None = None) -> float:
    """The CPUs no task or actor holds on the Ray cluster at `address`, connecting as `connect` does."""
    return connect(address).available_resources().get("CPU", 0.0)


def _check_versions(wanted: dict[str, str]) -> None:
    """Refuse, in an actor before any game starts, a node whose atari_game or ale-py is not `wanted`, the pool's."""
    if (found := versions()) != wanted:
        raise RuntimeError(
            f"node {_ray().util.get_node_ip_address()} has {found}, the pool's process {wanted}: install the same "
            f"versions on every node (atari_game: `pip install -e .` in a clone of this one's commit; ale-py: "
            f"`pip install ale-py=={wanted['ale-py']}`; docs/guides/ray.md)"
        )


def _location() -> tuple[int, str, str]:
    """This actor's process id, node id and node address: which incarnation it is (a restart keeps the handle only)."""
    ray = _ray()
    return os.getpid(), ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()


def _reply(answer: tuple[str, list[int], Any], arrays: dict[str, np.ndarray], rows: list[int], same_step: bool) -> dict:
    """What an actor sends back for a command `answer`ed: the rows `rows` of its `arrays` that the parent reads (of a
    failed command: none)."""
    if answer[0] != "ok":
        return {}
    names = ["obs", "rewards", "terminations", "truncations", "lives", "ended", "game_ended"]
    if answer[2]:  # episodes ended: their statistics
        names += ["episode_return", "episode_length", "game_return", "game_length"]
        if same_step:
            names.append("final_obs")  # only same-step autoreset writes the ended episodes' last observations
    return {name: arrays[name][rows] for name in names}


class GameActor:
    """A Ray actor hosting one `GameBlock` over arrays of its own: one call per step for all its games."""

    def __init__(
        self, env_ids: list[int], seeds: list, next_step_autoreset: bool, options: list, layout: dict, wanted: dict
    ):
        _check_versions(wanted)
        prepare_worker_process()
        self.arrays = {name: np.zeros((len(env_ids), *shape[1:]), dtype) for name, (shape, dtype) in layout.items()}
        self.block = GameBlock(env_ids, seeds, next_step_autoreset, options, self.arrays)
        self.location = _location()

    def where(self) -> tuple[int, str, str]:
        """The process id, node id and node address this actor runs on."""
        return self.location

    def run(self, command: str, data: Any, actions: np.ndarray | None) -> tuple[tuple, dict, tuple[int, str, str]]:
        """`GameBlock.run` (a step lists its envs, with their `actions`), the results of its envs, and where it runs."""
        rows = [self.block.row[i] for i in (data if command == "step" else self.block.env_ids)]
        if command == "step":
            self.arrays["actions"][rows] = actions
        answer = self.block.run(command, data)
        return answer, _reply(answer, self.arrays, rows, not self.block.next_step_autoreset), self.location


class NodeActor:
    """A Ray actor hosting a local `GamePool` of its envs in `n_workers` worker processes, one Ray call a step for all:
    it takes a `GameActor`'s arguments but the layout and answers its calls by `GamePool.run_block` over its pool."""

    def __init__(
        self, env_ids: list[int], seeds: list, next_step_autoreset: bool, options: list, wanted: dict, n_workers: int
    ):
        _check_versions(wanted)
        shared = {name: value for name, value in options[0].items() if name != "game"}
        mode = AutoresetMode.NEXT_STEP if next_step_autoreset else AutoresetMode.SAME_STEP
        # The parent's seeds of a block are consecutive (seed + i), as a pool of the block's envs seeds them.
        games = [env["game"] for env in options]
        self.make_pool = functools.partial(
            GamePool, len(env_ids), games, seeds[0], n_workers=n_workers, autoreset_mode=mode, copy=False, **shared
        )
        self.pool = self.make_pool()
        self.first, self.env_ids, self.same_step = env_ids[0], env_ids, not next_step_autoreset
        self.location = _location()

    where = GameActor.where

    def run(self, command: str, data: Any, actions: np.ndarray | None) -> tuple[tuple, dict, tuple[int, str, str]]:
        """`GameActor.run`; its pool's dead worker is answered ``("died", [], its WorkerDied)``, the pool restarted, a
        failed command ``("error", [], its CommandFailed)``, each with the parent's env ids."""
        first = self.first
        local: Any  # the command's data, as the hosted pool numbers its envs
        if command == "step":
            rows = [i - first for i in data]
            local = None if data == self.env_ids else rows  # all its envs: the pool's one-byte-a-worker step
        else:
            rows = list(range(len(self.env_ids)))
            seeds, owed = data
            local = ({i - first: seed for i, seed in seeds.items()}, [i - first for i in owed])
        (status, ids, payload), arrays = self.pool.run_block(command, local, actions)
        if status == "died":  # its pool cannot go on: a new one
            self.pool.close()
            self.pool = self.make_pool()
        if status != "ok":  # a report: its env ids as the parent numbers them
            payload = payload.with_env_offset(first)
        answer = (status, [i + first for i in ids], payload)
        return answer, _reply(answer, arrays, rows, self.same_step), self.location

    def close(self) -> None:
        """Close the pool, then end the actor (not restarted) as a Python program ends: its exit handlers remove its
        fork server's ``/tmp/pymp-*``, which `ray.kill` would leave. The caller's reference resolves to its death."""
        self.pool.close()
        _ray().actor.exit_actor()


@dataclasses.dataclass(eq=False)  # handles are the same only if they are one object
class RayActor(WorkerHandle):
    """The parent's handle on one actor (`WorkerHandle`: its envs and the pool's books of it).

    Attributes:
        actor (ray.actor.ActorHandle | None): Ray's handle on the `GameActor` or `NodeActor`; None until launched.
        where (tuple[int, str, str] | None): `GameActor.where`, its pid, node id and node address, once it runs.
        calls (list[ray.ObjectRef]): the object refs of its unanswered calls, in the order of `in_flight`.
    """

    actor: Any
    where: tuple[int, str, str] | None = None
    calls: list[Any] = dataclasses.field(default_factory=list)

    def describe(self) -> str:
        """How a message names it: ``"ray actor (pid 12 on node 1a2b3c4d at 10.0.0.2, envs 0-3)"``."""
        pid, node, address = self.where or (None, None, None)
        return describe_worker("ray actor", pid, self.env_ids, node, address)

    def died(self, **fields: Any) -> WorkerDied:
        """The report of its death; `fields` as `WorkerDied` takes them."""
        pid, node, address = self.where or (None, None, None)
        return WorkerDied(kind="ray actor", pid=pid, env_ids=self.env_ids, node=node, address=address, **fields)


def _node_cpus(ray: Any) -> list[float]:
    """The CPUs of each live node that has any."""
    return [cpus for node in ray.nodes() if node["Alive"] and (cpus := node["Resources"].get("CPU", 0))]


def _shut_down(actors: list[RayActor], pool_id: int, node_actors: bool) -> None:
    """End every actor, and the Ray connection a pool made once no pool uses it (for `weakref.finalize`)."""
    ray = _ray()
    ours = pool_id in _connection["pools"]
    _connection["pools"].discard(pool_id)
    if not ray.is_initialized():  # Ray already shut down (at interpreter exit, say): the actors went with it
        return
    if node_actors:  # a node actor's pool ends its workers now, not when they find their parent gone
        closing = [actor.actor.close.remote() for actor in actors if actor.actor is not None]
        ray.wait(closing, num_returns=len(closing), timeout=CLOSE_TIMEOUT)
    for actor in actors:
        with contextlib.suppress(Exception):  # already dead
            ray.kill(actor.actor)
    if ours and not _connection["pools"]:
        _connection["job"] = None
        ray.shutdown()


class RayGamePool(GamePool[RayActor]):
    """`GamePool` with its games on Ray actors: the same `VectorEnv` API, sync and async, on a Ray cluster.

    Args:
        num_envs, game, seed, autoreset_mode, batch_size, copy, **game_options: as for `GamePool` (`game` may
            be a list naming each env's game); the same seed gives the same observations as a local `GamePool`.
        actors: what each actor hosts: ``"worker"``, one block of games in the actor's own process (a `GamePool`
            worker's loop); ``"node"``, a local `GamePool` of its block with a worker process per CPU of the actor
            (``actor_options["num_cpus"]``, default: the CPUs of the cluster's smallest node), one Ray call a step per
            node (the Ray guide says which to choose). A dead worker process of a node actor is the actor's death.
        n_workers: Ray actors, each a contiguous block of envs (default: as many as the cluster's free CPUs allow
            with `actor_options`, at most `num_envs`; with ``actors="node"``, one per node that has an actor's CPUs).
        address: the Ray cluster to connect to if this process has not called ``ray.init()``: ``"auto"`` (the cluster
            ``ray start`` started on this machine, or ``RAY_ADDRESS``), ``"HOST:PORT"`` (a node of it),
            ``"ray://HOST:10001"`` (Ray Client), ``"local"`` (a new Ray on this machine, listening on 127.0.0.1 only),
            or None (``RAY_ADDRESS`` if set, else a cluster running on this machine, else ``"local"``). The last pool
            using a connection a pool made ends it; one the caller made is left alone. An address that does not answer
            within `CONNECT_TIMEOUT` seconds raises `ConnectionError`; too few free CPUs, or a node whose atari_game or
            ale-py differs from this process's (or lacks it), `PoolError` (the Ray guide says more).
        actor_options: Ray's ``.options()`` for each actor, e.g. ``{"num_cpus": 2}`` or a custom resource; the
            default is ``{"num_cpus": 1, "scheduling_strategy": "SPREAD"}`` (spread over the nodes).
        restart_workers: as for `GamePool`, Ray restarting a dead actor (``max_restarts=-1``) or one lost with its
            node; without it, a dead actor raises `WorkerDied` (a `PoolError`) naming it and its envs.
    """

    def __init__(
        self,
        num_envs: int | None = None,
        game: str | Sequence[str] = "Breakout",
        seed: int | None = 0,
        *,
        actors: str = "worker",
        n_workers: int | None = None,
        address: str | None = None,
        actor_options: dict[str, Any] | None = None,
        restart_workers: bool = False,
        **pool_options: Any,
    ) -> None:
        for name in ("start_method", "transport"):  # a RayGamePool's transport is Ray
            if name in pool_options:
                raise TypeError(f"{name} is for local worker processes (a GamePool); Ray starts its actors itself")
        self.actors, transport = actors, RayTransport(actors, address, actor_options, restart_workers)
        pool_options.update(n_workers=n_workers, restart_workers=restart_workers, transport=transport)
        super().__init__(num_envs, game, seed, **pool_options)

    def placement(self) -> list[tuple[str, str, list[int]]]:
        """Where the envs run now: each actor's node id and address (after a lost node, Ray's new one) and env ids."""
        return [(worker.where[1], worker.where[2], worker.env_ids) for worker in self._workers if worker.where]


class RayTransport:
    """`GamePool`'s `Transport` over Ray actors, a `GameActor` or `NodeActor` per block of envs (`RayGamePool` says what
    its arguments take): `next_answer` copies each call's results into the pool's arrays (plain: none are shared)."""

    def __init__(
        self, actors: str, address: str | None, actor_options: dict[str, Any] | None, restart_workers: bool
    ) -> None:
        check_choice("actors", actors, ACTORS)
        if actor_options is not None and not isinstance(actor_options, dict):
            raise TypeError(f"actor_options must be a dict of Ray actor options, got {actor_options!r}")
        check_address(address)
        self.actors, self.address, self.restart_workers = actors, address, bool(restart_workers)
        # A node actor's CPUs default to a node's, known once connected (`connect`).
        cpus = {"num_cpus": 1} if actors == "worker" else {}
        self.actor_options = {**cpus, "scheduling_strategy": "SPREAD", **(actor_options or {})}
        self.workers: list[RayActor] = []

    def connect(self) -> Any:
        """Ray, connected to `address` unless this process is connected already; a node actor's CPUs set."""
        ray = connect(self.address)
        if _connection["job"] == ray.get_runtime_context().get_job_id():
            _connection["pools"].add(id(self))
        if self.actors == "node" and "num_cpus" not in self.actor_options:
            self.actor_options["num_cpus"] = min(_node_cpus(ray), default=1)
        return ray

    def default_n_workers(self) -> int:
        """As many actors as the cluster's free CPUs allow (a node actor: one per node that has its CPUs)."""
        ray, each = self.connect(), max(self.actor_options.get("num_cpus", 1), 1e-9)
        if self.actors == "node":
            return max(1, sum(cpus >= each for cpus in _node_cpus(ray)))
        return max(1, int(ray.available_resources().get("CPU", 0.0) // each))

    def open(self, layout: Layout, arguments: Callable[[list[int]], tuple]) -> dict[str, np.ndarray]:
        """Plain arrays the actors' results are copied into, and the finalizer that kills the actors."""
        self.connect()
        self.layout, self.arguments = layout, arguments
        self.finalizer = weakref.finalize(self, _shut_down, self.workers, id(self), self.actors == "node")
        self.shared = {name: np.zeros(shape, dtype) for name, (shape, dtype) in layout.items()}
        return self.shared

    def close(self) -> None:
        """End the actors (once; nothing if `open` did not run): see `_shut_down`."""
        if hasattr(self, "finalizer"):
            self.finalizer()

    def start(self, blocks: list[list[int]]) -> None:
        """An actor for each block once their CPUs are free, each waited for: one that cannot start fails here."""
        self.workers += [RayActor(env_ids, actor=None) for env_ids in blocks]
        # Ray would leave the actors waiting for as long as the CPUs they ask for stay taken: wait FREE_CPU_WAIT.
        ray, needed = _ray(), len(self.workers) * self.actor_options.get("num_cpus", 1)
        deadline = time.monotonic() + FREE_CPU_WAIT
        while (free := free_cpus()) < needed and time.monotonic() < deadline:
            time.sleep(0.2)
        if free < needed:
            total = ray.cluster_resources().get("CPU", 0.0)
            raise PoolError(
                f"the Ray cluster has {free:g} of its {total:g} CPUs free, and the pool's {len(self.workers)} actors "
                f"need {needed:g} ({self.actor_options.get('num_cpus', 1):g} each): pass fewer n_workers (or a "
                "smaller num_cpus in actor_options), add nodes, or stop what holds the CPUs (`ray list actors`)"
            )
        options = {"max_restarts": -1 if self.restart_workers else 0, **self.actor_options}
        for worker in self.workers:
            block = self.arguments(worker.env_ids)
            if self.actors == "node":  # its pool makes its own arrays, a worker process per CPU, at most one per env
                n_workers = min(len(worker.env_ids), max(1, int(self.actor_options["num_cpus"])))
                worker.actor = _remote(NodeActor).options(**options).remote(*block, versions(), n_workers)
            else:
                worker.actor = _remote(GameActor).options(**options).remote(*block, self.layout, versions())
        for worker in self.workers:
            worker.where = self._locate(worker)

    def _locate(self, worker: RayActor) -> tuple[int, str, str]:
        """Where the actor runs, once it runs; a `PoolError` naming why if it cannot."""
        ray, start, starved = _ray(), time.monotonic(), None
        call = worker.actor.where.remote()
        while True:
            try:
                return ray.get(call, timeout=1.0)
            except ray.exceptions.ActorUnavailableError:  # its node is lost and Ray has not noticed yet
                time.sleep(0.5)
                call = worker.actor.where.remote()
            except ray.exceptions.GetTimeoutError:
                pass
            except Exception as error:  # its __init__ failed: the cause is the last line of Ray's report
                cause = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip().splitlines()[-1]
                if "No module named 'atari_game'" in cause:
                    cause += f": install atari_game {versions()['atari_game']} on every node (docs/guides/ray.md)"
                raise PoolError(f"{worker.describe()} could not start: {cause}") from error
            now = time.monotonic()
            if now - start > START_TIMEOUT:
                hint = f"do actor_options {self.actor_options} ask for more than any node has?"
                raise PoolError(f"{worker.describe()} could not be started within {START_TIMEOUT:.0f} s ({hint})")
            # Lost with a node Ray knows is dead, and no node has the free CPUs to restart it.
            lost = worker.where is not None and worker.where[1] not in {n["NodeID"] for n in ray.nodes() if n["Alive"]}
            starved = (starved or now) if lost and free_cpus() < self.actor_options.get("num_cpus", 1) else None
            if starved is not None and now - starved > FREE_CPU_WAIT:
                raise PoolError(
                    f"{worker.describe()} was lost with its node, and for {FREE_CPU_WAIT:.0f} s no node has had the "
                    f"CPUs to restart it: add a node, or start again with fewer actors (a trainer's --resume takes "
                    "the CPUs left)"
                )

    def replace(self, worker: RayActor) -> RayActor:
        """The same actor once Ray has restarted it, in its place in `workers`; the calls it lost are void."""
        replacement = RayActor(worker.env_ids, actor=worker.actor, where=self._locate(worker))
        self.workers[self.workers.index(worker)] = replacement
        return replacement

    def post(self, worker: RayActor, command: str, data: Any) -> None:
        """Call the actor's `GameActor.run`; a step names its envs (`data`, None: all the actor's) and carries their
        actions."""
        if command == "step":
            ids = worker.env_ids if data is None else data
            worker.calls.append(worker.actor.run.remote(command, ids, self.shared["actions"][ids]))
        else:
            worker.calls.append(worker.actor.run.remote(command, data, None))

    def step_all(self) -> bool:
        """A step call to every actor; the pool takes the answers in (GamePool's one-read fast path is local)."""
        for worker in self.workers:
            self.post(worker, "step", None)
        return False

    def next_answer(self, busy: set[RayActor], everything: bool) -> tuple[RayActor, tuple[str, list[int], Any]]:
        """The answer of the first call of the `busy` actors to finish, its results copied into `shared`; with
        `everything`, once every actor's first call has (one wait for them all, not one a call). An actor that died, or
        that Ray restarted since it last answered, is ``("died", [], WorkerDied)``, a call that raised ``("error", [],
        CommandFailed)``."""
        ray = _ray()
        first_calls = {worker.calls[0]: worker for worker in busy}
        [done, *_], _ = ray.wait(list(first_calls), num_returns=len(first_calls) if everything else 1)
        worker = first_calls[done]
        try:
            answer, results, location = ray.get(done)
        except ray.exceptions.RayTaskError as error:  # GameActor.run itself raised: the actor lives on
            worker.calls.pop(0)
            # Ray's message holds the actor's traceback; a reset's envs are all the actor's, as GameBlock reports them.
            failed = CommandFailed.of(error.cause, worker.in_flight[0] or worker.env_ids, traceback=str(error))
            return worker, ("error", [], failed)
        except ray.exceptions.RayError as error:  # the actor died, or its node was lost with the result
            return worker, ("died", [], worker.died(cause=f"{type(error).__name__}: {str(error).splitlines()[0]}"))
        if location != worker.where:  # Ray restarted the actor since it last answered: its games are new
            cause = f"restarted by Ray as pid {location[0]} on node {location[1]:.8}"
            return worker, ("died", [], worker.died(cause=cause))
        if answer[0] == "died":  # a node actor's worker process died (the actor has started its pool again)
            return worker, ("died", [], worker.died(cause="a worker process of its pool died", hosted=answer[2]))
        worker.calls.pop(0)
        ids = answer[1] or worker.env_ids  # a reset's answer names no envs, but its results cover all
        for name, values in results.items():  # zero-copy reads from the object store, one copy into ours
            self.shared[name][ids] = values
        return worker, answer
