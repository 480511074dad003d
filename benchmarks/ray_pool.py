"""The Ray backend's cost: RayGamePool on a two-node Ray cluster against the local GamePool, and where a step goes.

    pip install -e ".[ray,train]" && python benchmarks/ray_pool.py            # all three parts, ~5 min on 2 cores
    python benchmarks/ray_pool.py --parts pools --node-cpus 2                  # actors per worker against per node

On `common.ray_cluster`'s two nodes, the parts: ``calls``, the round trip of a Ray actor call by the bytes it returns
and the node, and the driver's CPU per call with k actors called at once (`measure_calls`); ``pools``, agent steps/s
and the learner's CPU per step of GamePool against RayGamePool with an actor per CPU (``actors="worker"``) and per node
(``actors="node"``) (`measure_pools`); ``ppo``, a short PPO run on each (`measure_ppo`). It writes every figure as
common.py says.
"""

import argparse
import csv
import functools
import itertools
import tempfile
from pathlib import Path

import common
import numpy as np

from atari_game import ppo
from atari_game.benchmark import our_game
from atari_game.pool import GamePool

OBS_BYTES = 4 * 84 * 84  # one env's observation: uint8, 4 frames of 84 x 84
PARTS = ("calls", "pools", "ppo")


class Echo:
    """A Ray actor that answers each call with `nbytes` bytes, as a GameActor answers with its envs' results."""

    def __init__(self) -> None:
        self.data = np.zeros(64 * OBS_BYTES, np.uint8)

    def get(self, nbytes: int) -> np.ndarray:
        return self.data[:nbytes]


def round_trips(ray, actors: list, nbytes: int, calls: int) -> dict[str, float]:
    """The `Stopwatch` reading per round trip of `calls`, after one: all `actors` called at once, returning `nbytes`."""
    return common.per_call(lambda: ray.get([actor.get.remote(nbytes) for actor in actors]), calls, warm_up=1)


def measure_calls(ray, nodes: list[str], calls: int) -> dict:
    """Round trips by size (0 to 64 observations) on the driver's node and the other (each fitted to a + b * bytes),
    and the driver's CPU per call with k actors at once."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    sizes = [0, OBS_BYTES, 4 * OBS_BYTES, 16 * OBS_BYTES, 64 * OBS_BYTES]
    echo, found = ray.remote(num_cpus=0)(Echo), {}
    for where, node in zip(("same node", "other node"), nodes, strict=True):
        actor = echo.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        seconds = [min(round_trips(ray, [actor], size, calls)["wall"] for _ in range(3)) for size in sizes]  # best of 3
        slope, intercept = np.polyfit(sizes, seconds, 1)
        found[where] = {"bytes": sizes, "seconds": seconds, "a_seconds": intercept, "b_seconds_per_byte": slope}
        trips = zip(sizes, seconds, strict=True)
        print(f"{where}: " + ", ".join(f"{size / 1e3:.0f} kB {trip * 1e3:.2f} ms" for size, trip in trips))
        print(f"  a = {intercept * 1e3:.2f} ms, b = {slope * 1e9:.2f} ns/byte ({1 / slope / 1e9:.2f} GB/s)")
        ray.kill(actor)
    # A pool step of k actors of e envs: k calls sent, then all awaited. The driver's CPU per call and per byte is what
    # bounds the learner's process: one process takes every result.
    found["parallel"] = []
    for k, envs in itertools.product((1, 2, 4, 8), (1, 16)):
        actors = [echo.options(scheduling_strategy="SPREAD").remote() for _ in range(k)]
        spent = round_trips(ray, actors, envs * OBS_BYTES, calls)
        wall, cpu = spent["wall"], spent["cpu"] / k
        found["parallel"].append({"actors": k, "envs": envs, "step_seconds": wall, "driver_cpu_seconds_per_call": cpu})
        print(f"{k} actors at once, {envs} obs each: {wall * 1e3:.2f} ms a step, driver CPU {cpu * 1e3:.2f} ms a call")
        for actor in actors:
            ray.kill(actor)
    return found


def measure_pool(pool: GamePool, seconds: float, rng: np.random.Generator) -> dict[str, float]:
    """`pool` reset, then stepped at random for about `seconds` after a warm-up: agent steps/s, this process's CPU (the
    learner's: its threads, not its children) per pool step, its Ray calls, and the bytes a step of every env brings
    back when no episode ends (observations, rewards, lives and 4 flags: terminated, truncated, ended, game ended)."""
    n = pool.num_envs
    pool.reset(seed=0)
    obs, rewards, terminations, truncations, info = pool.step(np.zeros(n, np.int64))
    size = sum(array.nbytes for array in (obs, rewards, terminations, truncations, info["lives"])) + 2 * n
    spent = common.per_call(lambda: pool.step(rng.integers(4, size=n)), seconds=seconds, warm_up=10)
    calls = 0 if type(pool) is GamePool else pool.n_workers  # GamePool's workers: local, told by a byte each way
    return {
        "steps_per_s": n / spent["wall"],
        "learner_cpu_ms_per_step": 1e3 * spent["cpu"],
        "calls": calls,
        "bytes": size,
    }


def measure_pools(address: str, envs: list[int], node_cpus: int, rounds: int, seconds: float) -> dict:
    """`measure_pool` of GamePool and RayGamePool with actors per worker and per node, N envs, rounds taking turns."""
    from atari_game.ray_pool import RayGamePool

    rng, found, game = np.random.default_rng(0), {}, our_game("Breakout")
    for n in envs:
        # One pool at a time: the two Ray pools each take every CPU of the cluster.
        makers = {
            "GamePool": functools.partial(GamePool, n, n_workers=min(n, common.machine()["cores"]), **game),
            "actors per worker": functools.partial(RayGamePool, n, n_workers=min(n, 2 * node_cpus), address=address),
            "actors per node": functools.partial(RayGamePool, n, actors="node", address=address),
        }
        found[n] = runs = {name: [] for name in makers}
        for round_number in range(rounds):  # each round in another order
            for name in common.turns(list(makers), round_number):
                with makers[name](**game) as pool:
                    runs[name].append(measure_pool(pool, seconds, rng))
        for name, rounds_ in runs.items():
            rate, cpu = (np.median([run[key] for run in rounds_]) for key in ("steps_per_s", "learner_cpu_ms_per_step"))
            calls, size = rounds_[0]["calls"], rounds_[0]["bytes"]
            print(f"N={n} {name}: {rate:,.0f} agent steps/s, learner CPU {cpu:.2f} ms a step, {calls} Ray calls and "
                  f"{size:,} bytes a step", flush=True)  # fmt: skip
    return found


def measure_ppo(address: str, n_envs: int) -> dict:
    """Agent steps/s of 3 PPO updates (128 steps of `n_envs` envs) on RayGamePool and GamePool, and of the rollouts."""
    found = {}
    for name, ray_address in (("RayGamePool", address), ("GamePool", "")):
        with tempfile.TemporaryDirectory() as run_dir:
            frames = 3 * 4 * n_envs * 128
            ppo.train(ppo.Config(n_envs=n_envs, total_frames=frames, video=False, run_dir=run_dir, ray=ray_address))
            with (Path(run_dir) / "progress.csv").open() as file:
                rows = [row for row in csv.DictReader(file) if row["policy_loss"]]
        rollout = sum(float(row["rollout_seconds"]) for row in rows)
        learn = float(np.mean([float(row["learn_seconds"]) for row in rows]))
        found[name] = {
            "steps_per_s": float(rows[-1]["frames_per_second"]) / 4,
            "learn_seconds_per_update": learn,
            "rollout_steps_per_s": len(rows) * n_envs * 128 / rollout,
        }
        print(f"PPO on {name}: {found[name]}", flush=True)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    add = parser.add_argument
    add("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to measure (default: all)")
    add("--envs", type=int, nargs="+", default=[8, 32], help="numbers of envs N (default: 8 32)")
    add("--node-cpus", type=int, default=1, help="CPUs of each of the 2 Ray nodes (default: 1)")
    add("--rounds", type=int, default=3, help="rounds of the pools part (default: %(default)s)")
    add("--seconds", type=float, default=5.0, help="seconds per pool per round (default: %(default)s)")
    add("--calls", type=int, default=200, help="calls per round-trip figure (default: 200)")
    return parser


def main(argv: list[str] | None = None) -> None:
    import ray

    args = build_parser().parse_args(argv)
    results: dict = {"node_cpus": args.node_cpus}
    with common.ray_cluster(args.node_cpus) as address:
        print(f"{common.describe_machine()}; 2 Ray nodes of {args.node_cpus} CPUs each", flush=True)
        driver_node = ray.get_runtime_context().get_node_id()
        other = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != driver_node]
        if "calls" in args.parts:
            results["calls"] = measure_calls(ray, [driver_node, other[0]], args.calls)
        if "pools" in args.parts:
            results["pools"] = measure_pools(address, args.envs, args.node_cpus, args.rounds, args.seconds)
        if "ppo" in args.parts:
            results["ppo"] = measure_ppo(address, args.envs[0])
    common.save(__file__, args, results, argv)


if __name__ == "__main__":
    main()
