"""The Ray backend's cost: RayGamePool on a two-node Ray cluster against GamePool, and PPO's data-parallel learners
(docs/performance.md, "Ray" and "Data-parallel learners", gives the commands, e.g. ``python benchmarks/ray_pool.py``,
after ``pip install -e ".[ray,train]"``). It prints each part's figures and writes them as common.py says.
"""

import argparse
import contextlib
import functools
import itertools
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import common
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing

from atari_game.benchmark import our_game
from atari_game.pool import GamePool

OBS_BYTES = 4 * 84 * 84  # one env's observation: uint8, 4 frames of 84 x 84
PARTS = ("calls", "pools", "ppo", "learners", "allreduce", "model")
NODES = (2, 4, 16, 64)
LINKS_GBPS = (10, 25)
CORES = ENVS_PER_CORE = 16  # the modelled nodes' cores, and their learners' envs per core
ENVS, ROUNDS, SECONDS = (8, 32), 3, 5.0  # the pools part's numbers of envs (PPO runs the first), rounds, seconds each
# The runs of the learners part by name: (the envs on the cluster, learners placed there by Ray Train; 0: the learner
# here).
LEARNER_RUNS = {"local": (False, 0), "RayGamePool": (True, 0), "1 learner": (True, 1), "2 learners": (True, 2)}


class Echo:
    """A Ray actor that answers each call with `nbytes` bytes, as a GameActor answers with its envs' results."""

    def __init__(self) -> None:
        self.data = np.zeros(64 * OBS_BYTES, np.uint8)

    def get(self, nbytes: int) -> np.ndarray:
        return self.data[:nbytes]


def round_trips(ray, actors: list, nbytes: int, calls: int) -> dict[str, float]:
    """The `Stopwatch` reading per round trip of all `actors` called at once, each returning `nbytes`."""
    return common.per_call(lambda: ray.get([actor.get.remote(nbytes) for actor in actors]), calls, warm_up=1)


def measure_calls(ray, calls: int) -> dict:
    """Round trips by size on the driver's node and the other (fitted to a + b * bytes), the driver's CPU per call."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    driver = ray.get_runtime_context().get_node_id()
    nodes = [driver, *(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != driver)]

    sizes = [0, OBS_BYTES, 4 * OBS_BYTES, 16 * OBS_BYTES, 64 * OBS_BYTES]
    echo, found = ray.remote(num_cpus=0)(Echo), {}
    for where, node in zip(("same node", "other node"), nodes[:2], strict=True):
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


def measure_pool(make: Callable[..., GamePool], rng: np.random.Generator) -> dict[str, float]:
    """Agent steps/s of `make`'s pool, the learner's CPU ms a step, its Ray calls and bytes a step (no episode ends)."""
    with make(**our_game("Breakout")) as pool:
        n = pool.num_envs
        pool.reset(seed=0)
        obs, rewards, terminations, truncations, info = pool.step(np.zeros(n, np.int64))
        size = sum(array.nbytes for array in (obs, rewards, terminations, truncations, info["lives"])) + 2 * n
        spent = common.per_call(lambda: pool.step(rng.integers(4, size=n)), seconds=SECONDS, warm_up=10)
        calls = 0 if type(pool) is GamePool else pool.n_workers  # GamePool's workers: local, told by a byte each way
    figures = {"steps_per_s": n / spent["wall"], "learner_cpu_ms_per_step": 1e3 * spent["cpu"]}
    return {**figures, "calls": calls, "bytes": size}


def measure_pools(address: str, node_cpus: int) -> dict:
    """`measure_pool` of GamePool and RayGamePool with actors per worker and per node, in alternating rounds."""
    from atari_game.ray_pool import RayGamePool

    rng, found = np.random.default_rng(0), {}
    for n in ENVS:
        # One pool at a time: the two Ray pools each take every CPU of the cluster.
        makers = {
            "GamePool": functools.partial(GamePool, n, n_workers=min(n, common.machine()["cores"])),
            "actors per worker": functools.partial(RayGamePool, n, n_workers=min(n, 2 * node_cpus), address=address),
            "actors per node": functools.partial(RayGamePool, n, actors="node", address=address),
        }
        measures = {name: functools.partial(measure_pool, make, rng) for name, make in makers.items()}
        found[n] = runs = common.alternate(measures, ROUNDS)
        for name, rounds_ in runs.items():
            rate, cpu = (np.median([run[key] for run in rounds_]) for key in ("steps_per_s", "learner_cpu_ms_per_step"))
            calls, size = rounds_[0]["calls"], rounds_[0]["bytes"]
            print(f"N={n} {name}: {rate:,.0f} agent steps/s, learner CPU {cpu:.2f} ms a step, {calls} Ray calls and "
                  f"{size:,} bytes a step", flush=True)  # fmt: skip
    return found


def measure_ppo(address: str, n_envs: int) -> dict:
    """Agent steps/s of 3 PPO updates (128 steps of `n_envs` envs) on RayGamePool and GamePool, and of the rollouts."""
    found = {}
    for name, flags in (("RayGamePool", ["--ray", address]), ("GamePool", [])):
        rows = common.ppo_run(n_envs, 3, *flags)
        found[name] = {
            "steps_per_s": rows[-1]["frames_per_second"] / 4,
            "learn_seconds_per_update": float(np.mean([row["learn_seconds"] for row in rows])),
            "rollout_steps_per_s": len(rows) * n_envs * 128 / sum(row["rollout_seconds"] for row in rows),
        }
        print(f"PPO on {name}: {found[name]}", flush=True)
    return found


def measure_learners(address: str, n_envs: int) -> dict:
    """Agent steps/s and each phase's mean seconds per update after the first of 4 in fp32, for each `LEARNER_RUNS`."""
    found = {}
    for name, (on_cluster, learners) in LEARNER_RUNS.items():
        flags = ["--ray", address] * on_cluster + ["--learners", str(learners)] * bool(learners)
        rows = common.ppo_run(n_envs, 4, "--precision", "fp32", *flags)
        found[name] = {"steps_per_s": (len(rows) - 1) * n_envs * 128 / (rows[-1]["seconds"] - rows[0]["seconds"])}
        for phase in ("rollout", "learn", "sync"):
            found[name][f"{phase}_seconds"] = float(np.mean([row[f"{phase}_seconds"] for row in rows[1:]]))
        print(f"PPO, {name}: {found[name]}", flush=True)
    return found


def timed_allreduces(rank: int, meet: str, floats: int, repeats: int, times: dict) -> None:
    """One of 2 gloo processes: the median seconds of all-reduces of `floats` float32 and of one, into `times`."""
    dist.init_process_group("gloo", init_method=f"file://{meet}", rank=rank, world_size=2)
    try:
        for name, size, count in (("gradients", floats, repeats), ("one_number", 1, 20 * repeats)):
            reduce = functools.partial(dist.all_reduce, torch.ones(size))
            seconds = common.median_seconds(reduce, count, before=dist.barrier)
            if rank == 0:
                times[name] = seconds
    finally:
        dist.destroy_process_group()


def measure_allreduce(repeats: int = 20) -> dict:
    """The time and latency of all-reducing PPO's gradients (and 5 statistics) here; a learner's bytes per update."""
    from atari_game import ppo

    floats = sum(parameter.numel() for parameter in ppo.build_agent("Breakout", torch.device("cpu")).parameters()) + 5
    per_update = ppo.Config().n_epochs * ppo.Config().n_minibatches
    small = 4 * 3 * per_update  # bytes: each minibatch's advantage sum, count and squared deviations
    times = torch.multiprocessing.Manager().dict()
    with tempfile.TemporaryDirectory() as folder:
        torch.multiprocessing.spawn(timed_allreduces, args=(f"{folder}/meet", floats, repeats, times), nprocs=2)
    found = {
        "gradient_bytes": 4 * floats,
        "allreduces_per_update": per_update,
        "bytes_per_update": per_update * 4 * floats + small,
        "gradients_seconds": times["gradients"],
        "latency_seconds": times["one_number"],
        "seconds_per_update": per_update * times["gradients"] + 2 * times["one_number"],
    }
    print(f"all-reduce on loopback: {found}", flush=True)
    return found


def model(steps_per_core: float, allreduce: dict, k: int, gbps: float, slow: float = 1.0) -> dict[str, float]:
    """Agent steps/s and scaling efficiency of PPO on `k` nodes, one at `slow` speed: docs/performance.md's model."""
    samples = CORES * ENVS_PER_CORE * 128
    compute = samples / (CORES * steps_per_core)
    steps = 2 * (k - 1) * allreduce["latency_seconds"]
    ring = 2 * (k - 1) / k * allreduce["gradient_bytes"] / (gbps * 1e9 / 8) + steps
    update = compute / slow + allreduce["allreduces_per_update"] * ring + 2 * steps
    return {"steps_per_s": k * samples / update, "efficiency": compute / update}


def model_table(per_core: float, allreduce: dict) -> dict:
    """`model` for each of `NODES` and `LINKS_GBPS`, and with one node at half speed."""
    table: dict = {"steps_per_core": per_core}
    for gbps, k in itertools.product(LINKS_GBPS, NODES):
        even, slow = model(per_core, allreduce, k, gbps), model(per_core, allreduce, k, gbps, slow=0.5)
        table[f"{k} nodes, {gbps} Gb/s"] = {**even, "one_node_at_half_speed_steps_per_s": slow["steps_per_s"]}
        line = f"{k:3} nodes of {CORES} cores, {gbps} Gb/s: {even['steps_per_s']:9,.0f} agent steps/s, "
        print(f"{line}{even['efficiency']:.1%}; one node at half speed: {slow['steps_per_s']:9,.0f}", flush=True)
    return table


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    add = parser.add_argument
    add("--parts", nargs="+", choices=PARTS, default=list(PARTS[:3]), help="what to measure (default: calls pools ppo)")
    add("--node-cpus", type=int, default=1, help="CPUs of each of the 2 Ray nodes (default: 1)")
    add("--steps-per-core", type=float, help="the model's agent steps/s per core (default: the local PPO run's)")
    add("--results", type=Path, help="earlier results for the model's learners and allreduce (default: this run's)")
    return parser


def main(argv: list[str] | None = None) -> None:
    import ray

    args = build_parser().parse_args(argv)
    results: dict = json.loads(args.results.read_text())["figures"] if args.results else {}
    results["node_cpus"] = args.node_cpus
    on_cluster = set(args.parts) & set(PARTS[:4])  # calls, pools, ppo, learners
    with common.ray_cluster(args.node_cpus) if on_cluster else contextlib.nullcontext() as address:
        print(f"{common.describe_machine()}; 2 Ray nodes of {args.node_cpus} CPUs each", flush=True)
        if "calls" in args.parts:
            results["calls"] = measure_calls(ray, 200)
        if "pools" in args.parts:
            results["pools"] = measure_pools(address, args.node_cpus)
        if "ppo" in args.parts:
            results["ppo"] = measure_ppo(address, ENVS[0])
        if "learners" in args.parts:
            results["learners"] = measure_learners(address, ENVS[0])
    if "allreduce" in args.parts:
        results["allreduce"] = measure_allreduce()
    if "model" in args.parts:
        per_core = args.steps_per_core or results["learners"]["local"]["steps_per_s"] / common.machine()["cores"]
        results["model"] = model_table(per_core, results["allreduce"])
    common.save(__file__, args, results, argv)


if __name__ == "__main__":
    main()
