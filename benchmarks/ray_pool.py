"""The Ray backend's cost (docs/performance.md, "Ray" and "Data-parallel learners", gives the commands): RayGamePool
on a two-node Ray cluster against the local GamePool, where a step goes, and PPO's data-parallel learners.

    pip install -e ".[ray,train]" && python benchmarks/ray_pool.py

The parts, on `common.ray_cluster`'s two nodes: ``calls``, Ray actor calls' round trips and the driver's CPU
(`measure_calls`); ``pools``, GamePool against RayGamePool with an actor per worker and per node (`measure_pools`);
``ppo``, a short PPO run on each (`measure_ppo`); ``learners``, the PPO runs of `LEARNER_RUNS`. Off the cluster:
``allreduce``, between 2 gloo processes on loopback (`measure_allreduce`); ``model``, `NODES` nodes of 16 cores
(`model`). It writes the figures as common.py says.
"""

import argparse
import contextlib
import functools
import itertools
import json
import tempfile
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
CLUSTER_PARTS = ("calls", "pools", "ppo", "learners")
NODES = (2, 4, 16, 64)
LINKS_GBPS = (10, 25)
CORES = ENVS_PER_CORE = 16  # the modelled nodes' cores, and their learners' envs per core
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
    """For each run of `LEARNER_RUNS`: agent steps/s of 4 PPO updates in fp32 (`common.ppo_run`) after the first, and
    the mean seconds per update of its phases there."""
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
    """One of 2 gloo processes on this machine, meeting at the file `meet`: the median seconds of `repeats` all-reduces
    of `floats` float32 and of one, into `times` (rank 0's)."""
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
    """The all-reduce of PPO's gradients (the Breakout agent's parameters and 5 statistics, float32) on this machine:
    its time and latency, and the bytes a learner puts into an update's all-reduces (default config: the gradients'
    per minibatch, 4 epochs x 4 minibatches; two of the minibatches' advantage sums, counts and squared deviations)."""
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
    """Agent steps/s and scaling efficiency of PPO on `k` nodes of `CORES` cores (``CORES * ENVS_PER_CORE`` envs each,
    playing and learning at `steps_per_core` agent steps/s per core), links of `gbps` Gb/s, one node at `slow` times the
    others' speed: the model of docs/performance.md, "Data-parallel learners"; the two all-reduces of the advantages'
    statistics cost their latency."""
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
    add("--envs", type=int, nargs="+", default=[8, 32], help="numbers of envs N; PPO runs the first (default: 8 32)")
    add("--node-cpus", type=int, default=1, help="CPUs of each of the 2 Ray nodes (default: 1)")
    add("--rounds", type=int, default=3, help="rounds of the pools part (default: %(default)s)")
    add("--seconds", type=float, default=5.0, help="seconds per pool per round (default: %(default)s)")
    add("--steps-per-core", type=float, help="the model's agent steps/s per core (default: the local PPO run's)")
    add(
        "--results", type=Path, help="earlier results whose learners and allreduce the model uses (default: this run's)"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    import ray

    args = build_parser().parse_args(argv)
    results: dict = json.loads(args.results.read_text())["figures"] if args.results else {}
    results["node_cpus"] = args.node_cpus
    on_cluster = set(args.parts) & set(CLUSTER_PARTS)
    with common.ray_cluster(args.node_cpus) if on_cluster else contextlib.nullcontext() as address:
        print(f"{common.describe_machine()}; 2 Ray nodes of {args.node_cpus} CPUs each", flush=True)
        if "calls" in args.parts:
            driver_node = ray.get_runtime_context().get_node_id()
            other = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != driver_node]
            results["calls"] = measure_calls(ray, [driver_node, other[0]], 200)
        if "pools" in args.parts:
            results["pools"] = measure_pools(address, args.envs, args.node_cpus, args.rounds, args.seconds)
        if "ppo" in args.parts:
            results["ppo"] = measure_ppo(address, args.envs[0])
        if "learners" in args.parts:
            results["learners"] = measure_learners(address, args.envs[0])
    if "allreduce" in args.parts:
        results["allreduce"] = measure_allreduce()
    if "model" in args.parts:
        per_core = args.steps_per_core or results["learners"]["local"]["steps_per_s"] / common.machine()["cores"]
        results["model"] = model_table(per_core, results["allreduce"])
    common.save(__file__, args, results, argv)


if __name__ == "__main__":
    main()
