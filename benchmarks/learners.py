"""Data-parallel learners (``--learners K``): PPO's speed with 1 and 2 learners placed by Ray Train against the local
trainer, the all-reduce's cost, and a model of k nodes from those costs.

    pip install -e ".[ray,train]" && python benchmarks/learners.py      # ~6 min on 2 cores

On `common.ray_cluster`'s two nodes, the parts: ``ppo``, agent steps/s of PPO runs (`ppo_run`) with the local trainer
(a GamePool over this machine's cores), with ``--ray`` alone (the envs on a RayGamePool, the learner here), and with 1
and 2 learners (``--learners``), and where an update's time goes (rollout, learning, and of it the all-reduces,
waiting for the slower learner included); ``allreduce``, the cost of the all-reduces between 2 gloo processes on
loopback (`measure_allreduce`); ``model``, agent steps/s and scaling efficiency of `NODES` nodes of ``--cores`` cores
from those costs, and with one node at half speed (`model`). It writes every figure as common.py says.
"""

import argparse
import csv
import functools
import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import common
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing

PARTS = ("ppo", "allreduce", "model")
NODES = (2, 4, 16, 64)
LINKS_GBPS = (10, 25)
# The runs of the ppo part by name: (the envs on the cluster, learners placed there by Ray Train; 0: the learner here).
PPO_RUNS = {"local": (False, 0), "RayGamePool": (True, 0), "1 learner": (True, 1), "2 learners": (True, 2)}


def ppo_run(n_envs: int, updates: int, ray: str = "", learners: int = 0) -> dict[str, float]:
    """A PPO run's agent steps/s (the whole run, after its first update) and the mean seconds per update of its
    phases, read from its progress.csv; run by the command line, in a process of its own, as a user runs it."""
    with tempfile.TemporaryDirectory() as run_dir:
        command = [sys.executable, "-m", "atari_game", "train", "--n-envs", str(n_envs), "--run-dir", run_dir]
        command += ["--total-frames", str(4 * n_envs * 128 * updates), "--no-video", "--precision", "fp32"]
        command += ["--ray", ray] * bool(ray) + ["--learners", str(learners)] * bool(learners)
        subprocess.run(command, check=True, capture_output=True)
        with (Path(run_dir) / "progress.csv").open() as file:
            rows = [row for row in csv.DictReader(file) if row["policy_loss"]]
    seconds = float(rows[-1]["seconds"]) - float(rows[0]["seconds"])
    found = {"steps_per_s": (len(rows) - 1) * n_envs * 128 / seconds}
    for phase in ("rollout", "learn", "sync"):
        found[f"{phase}_seconds"] = float(np.mean([float(row[f"{phase}_seconds"]) for row in rows[1:]]))
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


def measure_allreduce(repeats: int) -> dict:
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


def model(
    steps_per_core: float, allreduce: dict, k: int, cores: int, gbps: float, envs_per_core: int, slow: float = 1.0
) -> dict[str, float]:
    """Agent steps/s and scaling efficiency of PPO on `k` nodes of `cores` cores (``cores * envs_per_core`` envs each,
    playing and learning at `steps_per_core` agent steps/s per core), links of `gbps` Gb/s, one node at `slow` times the
    others' speed: the model of docs/performance.md, "Data-parallel learners"; the two all-reduces of the advantages'
    statistics cost their latency."""
    samples = cores * envs_per_core * 128
    compute = samples / (cores * steps_per_core)
    steps = 2 * (k - 1) * allreduce["latency_seconds"]
    ring = 2 * (k - 1) / k * allreduce["gradient_bytes"] / (gbps * 1e9 / 8) + steps
    update = compute / slow + allreduce["allreduces_per_update"] * ring + 2 * steps
    return {"steps_per_s": k * samples / update, "efficiency": compute / update}


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    add = parser.add_argument
    add("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to measure (default: all)")
    add("--envs", type=int, default=8, help="PPO's envs, all learners together (default: %(default)s)")
    add("--updates", type=int, default=4, help="PPO updates per run; the first is not timed (default: %(default)s)")
    add("--node-cpus", type=int, default=1, help="CPUs of each of the 2 Ray nodes (default: %(default)s)")
    add("--repeats", type=int, default=20, help="all-reduces of the gradients timed (default: %(default)s)")
    add("--cores", type=int, default=16, help="the modelled nodes' cores (default: %(default)s)")
    add("--envs-per-core", type=int, default=16, help="the modelled learners' envs per core (default: %(default)s)")
    add("--steps-per-core", type=float, help="the model's agent steps/s per core (default: the local trainer's)")
    add("--results", type=Path, help="earlier results whose ppo and allreduce the model uses (default: this run's)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    results: dict = {"node_cpus": args.node_cpus}
    if args.results:
        results.update(json.loads(args.results.read_text())["figures"])
    print(common.describe_machine(), flush=True)
    if "ppo" in args.parts:
        results["ppo"] = {}
        with common.ray_cluster(args.node_cpus) as address:
            for name, (on_cluster, learners) in PPO_RUNS.items():
                results["ppo"][name] = ppo_run(args.envs, args.updates, address if on_cluster else "", learners)
                print(f"PPO, {name}: {results['ppo'][name]}", flush=True)
    if "allreduce" in args.parts:
        results["allreduce"] = measure_allreduce(args.repeats)
    if "model" in args.parts:
        per_core = args.steps_per_core or results["ppo"]["local"]["steps_per_s"] / common.machine()["cores"]
        results["model"] = table = {"steps_per_core": per_core}
        for gbps, k in itertools.product(LINKS_GBPS, NODES):  # and with one node at half speed
            even = model(per_core, results["allreduce"], k, args.cores, gbps, args.envs_per_core)
            slow = model(per_core, results["allreduce"], k, args.cores, gbps, args.envs_per_core, slow=0.5)
            table[f"{k} nodes, {gbps} Gb/s"] = {**even, "one_node_at_half_speed_steps_per_s": slow["steps_per_s"]}
            line = f"{k:3} nodes of {args.cores} cores, {gbps} Gb/s: {even['steps_per_s']:9,.0f} agent steps/s, "
            print(f"{line}{even['efficiency']:.1%}; one node at half speed: {slow['steps_per_s']:9,.0f}", flush=True)
    common.save(__file__, args, results, argv)


if __name__ == "__main__":
    main()
