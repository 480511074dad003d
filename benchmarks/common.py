"""What the benchmark scripts share: flags, the machine, a stopwatch, alternating rounds, and results files (``script``,
``command``, ``date``, ``machine``, ``versions``, ``figures``: docs/contributing.md, "Benchmarks")."""

import argparse
import contextlib
import csv
import datetime
import functools
import importlib.metadata
import json
import math
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

BENCHMARKS = Path(__file__).resolve().parent
REPO = BENCHMARKS.parent
TEXT_COLUMNS = ("precision",)  # progress.csv's columns that are not numbers
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")  # what the CPU path of torch and OpenCV uses
PACKAGES = ("atari_game", "ale-py", "numpy", "opencv-python", "torch", "zstandard", "stable-baselines3", "ray")
# The start of what CleanRL's python runs (``python -c CLEANRL_START + code SCRIPT ARGUMENT...``): ale_py imported (it
# registers the Atari ids), and cleanrl_utils, beside the cleanrl folder of SCRIPT, on the path.
CLEANRL_START = "import os, runpy, sys, ale_py\nsys.path.insert(0, os.path.dirname(os.path.dirname(sys.argv[1])))\n"


@functools.cache
def machine() -> dict[str, Any]:
    """The CPU (its model, the cores this process may use, which of `CPU_FLAGS` it has), the OS and Python."""
    cpuinfo = Path("/proc/cpuinfo")
    info = cpuinfo.read_text() if cpuinfo.exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", info, re.MULTILINE)
    flags = set(re.search(r"^flags\s*:(.*)$", info, re.MULTILINE).group(1).split()) if "flags" in info else set()
    return {
        "cpu": model.group(1).strip() if model else platform.processor() or platform.machine(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
        "cpu_flags": [flag for flag in CPU_FLAGS if flag in flags],
        "system": platform.platform(),
        "python": platform.python_version(),
    }


def describe_machine() -> str:
    """The machine in a line: "AMD EPYC, 2 cores, avx2 avx512f avx512_bf16"."""
    found, flags = machine(), " ".join(machine()["cpu_flags"])
    return f"{found['cpu']}, {found['cores']} cores" + (f", {flags}" if flags else "")


def versions() -> dict[str, str]:
    """The installed releases of `PACKAGES`, and ``git describe --dirty`` of this checkout."""
    found = {}
    for name in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    git = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True)
    if git.returncode == 0:
        found["git"] = git.stdout.strip()
    return found


class Stopwatch:
    """Wall and CPU seconds of this process since it was made (user and system: at the kernel's ticks)."""

    def __init__(self) -> None:
        self.usage = resource.getrusage(resource.RUSAGE_SELF)
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> dict[str, float]:
        usage, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time() - self.cpu
        user, system = usage.ru_utime - self.usage.ru_utime, usage.ru_stime - self.usage.ru_stime
        return {"wall": time.perf_counter() - self.wall, "cpu": cpu, "user": user, "system": system}


def per_call(call: Callable[[], object], calls: int = 1, seconds: float = 0.0, warm_up: int = 0) -> dict[str, float]:
    """The `Stopwatch` reading per call of `call` (>= `calls` calls, >= `seconds`, after `warm_up`) and ``calls``."""
    for _ in range(warm_up):
        call()
    clock, done = Stopwatch(), 0
    while done < calls or time.perf_counter() - clock.wall < seconds:
        call()
        done += 1
    return {**{key: value / done for key, value in clock.read().items()}, "calls": float(done)}


def turns(names: list[str], round_number: int) -> list[str]:
    """`names` rotated by the round's number: each round starts with another, so drift hits all alike."""
    shift = round_number % len(names)
    return names[shift:] + names[:shift]


def alternate(measures: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list]:
    """Each of `measures`' results, one per round of `rounds`, the rounds taking `turns`."""
    found: dict[str, list] = {name: [] for name in measures}
    for round_number in range(rounds):
        for name in turns(list(measures), round_number):
            found[name].append(measures[name]())
    return found


def median_seconds(step: Callable, repeats: int, warm_up: int = 0, before: Callable = lambda: None) -> float:
    """The median wall seconds of `repeats` calls of `step`, after `warm_up` untimed ones, each after `before()`."""
    for _ in range(warm_up):
        step()
    times = []
    for _ in range(repeats):
        before()
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


@contextlib.contextmanager
def ray_cluster(node_cpus: int) -> Iterator[str]:
    """The address of two Ray nodes of `node_cpus` CPUs each on this machine, on 127.0.0.1, this process the driver."""
    import ray
    from ray.cluster_utils import Cluster

    from atari_game.ray_pool import single_machine_mode

    node: dict[str, Any] = {"num_cpus": node_cpus, "object_store_memory": 200 << 20, "node_ip_address": "127.0.0.1"}
    with single_machine_mode():
        cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            yield cluster.address
        finally:
            ray.shutdown()
            cluster.shutdown()


def mean_returns(games: list[tuple[int, float]], frames: int, every: int) -> list[float]:
    """The mean return of the `games` (frames at their end, return) ending in each `every` frames (NaN: none)."""
    spans = [[r for f, r in games if start < f <= start + every] for start in range(0, frames, every)]
    return [float(np.mean(span)) if span else float("nan") for span in spans]


def read_progress(run_dir: Path) -> tuple[list[tuple[int, float]], list[dict[str, float]]]:
    """A run's whole games as (frames at their end, return), and its update rows (with ``seconds``) as numbers (their
    `TEXT_COLUMNS` left out)."""
    with (run_dir / "progress.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    games = [(int(row["frames"]), float(row["game_return"])) for row in rows if row["game_return"]]
    updates = [row for row in rows if row["seconds"]]
    return games, [
        {key: float(value) for key, value in row.items() if value and key not in TEXT_COLUMNS} for row in updates
    ]


def ppo_run(n_envs: int, updates: int, *flags: str) -> list[dict[str, float]]:
    """The update rows of a PPO run of `updates` updates of `n_envs` envs and `flags`, run by ``atari-game train``."""
    with tempfile.TemporaryDirectory() as run_dir:
        command = [sys.executable, "-m", "atari_game", "train", "--n-envs", str(n_envs), "--run-dir", run_dir]
        command += ["--total-frames", str(4 * n_envs * 128 * updates), "--no-video", *flags]
        subprocess.run(command, check=True, capture_output=True)
        return read_progress(Path(run_dir))[1]


def parser(doc: str) -> argparse.ArgumentParser:
    """A script's command line, described by its docstring's first paragraph, with ``--out`` and ``--compare``."""
    made = argparse.ArgumentParser(description=" ".join(doc.split("\n\n")[0].split()))
    default = "benchmarks/results/<script>-<cpu>-<cores>c-<date>-<time>.json"
    made.add_argument("--out", type=Path, help=f"the figures' file (default: {default})")
    made.add_argument("--compare", type=Path, help="an earlier results file: print each figure's ratio (default: none)")
    return made


def add_cleanrl_arguments(made: argparse.ArgumentParser) -> None:
    """``--cleanrl-python`` and ``--cleanrl-script``: where CleanRL's venv and script are (see `cleanrl_paths`)."""
    add = made.add_argument
    add("--cleanrl-python", help="the python of CleanRL's own venv (default: $CLEANRL_PYTHON)")
    add("--cleanrl-script", help="CleanRL's <algo>_atari.py (default: $CLEANRL_DIR/cleanrl/<algo>_atari.py)")


def cleanrl_paths(made: argparse.ArgumentParser, args: argparse.Namespace, algo: str) -> tuple[str, str]:
    """CleanRL's python and `algo`'s script, from the flags or CLEANRL_PYTHON and CLEANRL_DIR (its checkout)."""
    python = args.cleanrl_python or os.environ.get("CLEANRL_PYTHON")
    checkout = os.environ.get("CLEANRL_DIR")
    script = args.cleanrl_script or (checkout and str(Path(checkout) / "cleanrl" / f"{algo}_atari.py"))
    if not python:
        made.error("CleanRL's runs need its venv's python: pass --cleanrl-python PATH or set CLEANRL_PYTHON")
    if not script:
        made.error(f"CleanRL's runs need {algo}_atari.py: pass --cleanrl-script PATH or set CLEANRL_DIR (its checkout)")
    for flag, path in (("--cleanrl-python", python), ("--cleanrl-script", script)):
        if not Path(path).is_file():
            made.error(f"{flag} {path}: no such file")
    return python, str(Path(script).resolve())


def save(script: str, args: argparse.Namespace, figures: dict, argv: list[str] | None = None) -> Path:
    """The file written: `figures` with the command line, machine and versions; with ``--compare``, ratios printed."""
    name = Path(script).stem
    now = datetime.datetime.now()
    cpu = re.sub(r"[^a-z0-9]+", "-", machine()["cpu"].lower()).strip("-")
    path = args.out or BENCHMARKS / "results" / f"{name}-{cpu}-{machine()['cores']}c-{now:%Y-%m-%d-%H%M%S}.json"
    command = shlex.join(["python", f"benchmarks/{name}.py", *(sys.argv[1:] if argv is None else argv)])
    results = {"script": name, "command": command, "date": now.isoformat(timespec="seconds"), "machine": machine(),
               "versions": versions(), "figures": figures}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=lambda value: getattr(value, "tolist", lambda: str(value))()))
    print(f"figures: {path}")
    if args.compare:
        print("\n".join(compare(json.loads(args.compare.read_text()), json.loads(path.read_text()))))
    return path


def flat(value: Any, prefix: str = "") -> dict[str, float]:
    """Every finite number in `value` (nested dicts and lists) by its path: {"runs/0/steps_per_s": 512.0, ...}."""
    if isinstance(value, dict | list):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        return {path: n for key, item in items for path, n in flat(item, f"{prefix}{key}/").items()}
    real = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return {prefix.rstrip("/"): float(value)} if real else {}


def compare(old: dict, new: dict) -> list[str]:
    """Lines: each figure of the `new` results that the `old` ones have too, with its ratio to the old one."""
    lines = [f"against {old['command']} ({old['date']}, {old['machine']['cpu']}, {old['machine']['cores']} cores)"]
    if old["machine"] != new["machine"]:
        lines.append("(another machine: compare ratios within each run, not these)")
    before, now = flat(old["figures"]), flat(new["figures"])
    common = [key for key in now if before.get(key)]
    lines += [f"{key}: {now[key]:.4g} / {before[key]:.4g} = {now[key] / before[key]:.3f}x" for key in common]
    return lines if common else [*lines, "no figure in common"]


def difference(a: list[float], b: list[float], names: tuple[str, str]) -> tuple[str, dict[str, float]]:
    """`a`'s mean minus `b`'s with its standard error (Welch's, over runs): a line, and the figures."""
    error = float(np.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b)))
    gap = float(np.mean(a) - np.mean(b))
    within = "within" if abs(gap) <= error else "not within"
    line = f"{names[0]} - {names[1]}: {gap:+.1f} (standard error {error:.1f}; {within} one standard error)"
    return line, {"difference": gap, "standard_error": error}


def build_parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(description="Each figure of a results file against an earlier one's.")
    made.add_argument("old", type=Path, help="the earlier results file")
    made.add_argument("new", type=Path, help="the later results file")
    return made


if __name__ == "__main__":
    arguments = build_parser().parse_args()
    print("\n".join(compare(json.loads(arguments.old.read_text()), json.loads(arguments.new.read_text()))))
