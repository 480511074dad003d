"""The games a run plays: the `Game` options of a trainer's config, its pools (local or on Ray), where they run, and
the one recorded game of a trained agent.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from gymnasium.vector import AutoresetMode

from atari_game.game import Game
from atari_game.learners import Learners
from atari_game.networks import torch_threads
from atari_game.play import play_game
from atari_game.pool import GamePool
from atari_game.ray_pool import RayGamePool, free_cpus
from atari_game.run_config import RunConfig, game_options
from atari_game.worker import available_cores


def make_pools(config: RunConfig, n_pools: int, learners: Learners) -> list[GamePool]:
    """The envs of a trainer's `config` that `learners` plays (all of them for one learner) in `n_pools` pools of
    equal size (env i: seed ``seed + i``, as in one pool), with same-step autoreset (a truncated episode's final
    observation is there to bootstrap from): `GamePool`s on this machine's cores (a Ray Train learner's: its CPUs)
    or, with ``config.ray`` and one learner here, `RayGamePool`s on the cluster's free CPUs (``restart_workers``)."""
    size = config.num_envs // learners.count // n_pools
    options = {"autoreset_mode": AutoresetMode.SAME_STEP, **game_options(config)}
    make: Callable[..., GamePool] = GamePool
    cpus = learners.cores
    if config.ray and not learners.on_ray_train:
        make = functools.partial(RayGamePool, address=config.ray, restart_workers=True)
        cpus = int(free_cpus(config.ray))
    n_workers = max(1, min(size, cpus // n_pools))
    pools: list[GamePool] = []
    try:
        for k in range(n_pools):
            pools.append(make(size, seed=config.seed + learners.envs.start + k * size, n_workers=n_workers, **options))
    except BaseException:  # a pool that cannot start: the others stop too
        for pool in pools:
            pool.close()
        raise
    return pools


def env_placement(pools: Sequence[GamePool], learners: Learners | None = None) -> tuple[dict[str, int], str]:
    """Where the envs of `pools` (of all `learners` where Ray Train placed them) run now: progress.csv's columns
    ``env_nodes`` and ``env_workers`` (worker processes or Ray actors), and a line for the log naming them."""
    num_envs = sum(pool.num_envs for pool in pools)
    if learners is not None and learners.on_ray_train:
        import ray

        workers = sum(pool.n_workers for pool in pools)
        places = learners.gather([(ray.get_runtime_context().get_node_id(), workers)])
        n_nodes, workers = len({node for node, _ in places}), sum(count for _, count in places)
        line = f"envs: {learners.num_envs} in {workers} worker processes of {learners.count} learners on {n_nodes} node"
        return {"env_nodes": n_nodes, "env_workers": workers}, line + "s" * (n_nodes > 1)
    if not isinstance(pools[0], RayGamePool):
        workers = sum(pool.n_workers for pool in pools)
        return {
            "env_nodes": 1,
            "env_workers": workers,
        }, f"envs: {num_envs} in {workers} worker processes on this machine"
    actors = [place for pool in pools if isinstance(pool, RayGamePool) for place in pool.placement()]
    nodes: dict[tuple[str, str], list[int]] = {}
    for node, address, env_ids in actors:
        nodes.setdefault((node, address), []).extend(env_ids)
    where = "; ".join(f"node {node:.8} at {address}: {len(ids)} envs" for (node, address), ids in nodes.items())
    line = f"envs: {num_envs} in {len(actors)} Ray actors on {len(nodes)} node{'s' * (len(nodes) > 1)} ({where})"
    return {"env_nodes": len(nodes), "env_workers": len(actors)}, line


def record_game(policy: Callable[[np.ndarray], int], config: RunConfig, path: Path) -> tuple[float, int]:
    """Play one whole game with `policy` (the game options of `config`, seeded ``config.seed + 10_000``, a game
    not trained on), write it as a colour .mp4 at `path` (a frame per agent step), and return its (unclipped) score
    and its length in agent steps."""
    game = Game(seed=config.seed + 10_000, **game_options(config))
    with torch_threads(available_cores()):
        return play_game(game, policy, path)
