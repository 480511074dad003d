"""The pool parent's own CPU per batch step: this checkout's GamePool against another revision's, side by side.

    python benchmarks/parent_cpu.py --base HEAD~1 --envs 8 16 --rounds 6 --steps 500
    python benchmarks/parent_cpu.py --base HEAD~1 --envs 256 --workers 64 --zero-copy --loops sync --steps 30

A change to what the parent does between the workers' answers (`step`, `send`, `recv`) moves its CPU by µs to
tens of µs per call: far less than a throughput run on a noisy machine resolves, but it is the parent's share of
every step, and at a few envs per worker, or async, the cores spend it instead of emulating. The parent's own CPU
time (user and system, from getrusage; the workers' is not counted) is steadier. The revision `--base` is exported
from git into a temporary folder; each round runs, for every N and loop, one process of each side (which goes first
alternates), each playing the throughput benchmark's games and settings (`copy=True` and one worker per core unless
`--zero-copy` and `--workers` say otherwise; more workers than cores is fine, as only the parent's CPU counts): the
sync loop (`step`) and the async one (`send`/`recv` with batch N/2, EnvPool's loop, as `atari-game bench` plays it).
It prints the medians and this checkout's over the base's, round by round: the parent's CPU, and the agent steps/s
(which also show changes to the workers).

    sudo python benchmarks/parent_cpu.py --base HEAD~1 --envs 16 32 --loops sync --slow-worker 0.5

puts the first worker of every pool in a CPU cgroup that gives it half a core (a quota in every 2 ms period): a
core that other work shares, or that a cloud host slows down for seconds at a time, as workers meet it (async
stepping, `--loops async`, lets the caller go on without it). It needs root and cgroup v1's cpu controller or
cgroup v2's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
LOOPS = ("sync", "async")


def measure(loop: str, n: int, steps: int, options: dict, slow_tasks: str | None = None) -> dict[str, float | str]:
    """One side's parent CPU µs (user, system) per batch step of N envs, its agent steps/s (after a warm-up) and
    the folder its `atari_game` came from: run in a process whose `atari_game` is that side's. With `slow_tasks` (a
    cgroup's processes file, from `slow_cgroup`), the pool's first worker goes into that cgroup."""
    import atari_game
    from atari_game import GamePool

    batch = n // 2 if loop == "async" else n
    with GamePool(n, batch_size=batch, **options) as pool:
        if slow_tasks:
            pid = pool._workers[0].process.pid
            Path(slow_tasks).write_text(str(pid))
            if Path(slow_tasks).parent.name not in Path(f"/proc/{pid}/cgroup").read_text():
                raise RuntimeError(f"the first worker (pid {pid}) did not go into {Path(slow_tasks).parent}")
        # Random actions of the game's own action set (`options` name the game).
        actions = np.random.default_rng(0).integers(pool.single_action_space.n, size=(steps + 20, n))
        pool.reset(seed=0)
        if loop == "sync":
            step = pool.step
        else:
            pool.send(np.zeros(n, np.int64))

            def step(row: np.ndarray) -> None:
                # Twice the first n/2 envs to finish, sent straight back: n agent steps.
                for half in (row[:batch], row[batch : 2 * batch]):
                    pool.send(half, pool.recv()[4]["env_id"])

        for row in actions[:20]:
            step(row)
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for row in actions[20:]:
            step(row)
        after, elapsed = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - start
    return {
        "user_us": 1e6 * (after.ru_utime - before.ru_utime) / steps,
        "system_us": 1e6 * (after.ru_stime - before.ru_stime) / steps,
        "steps_per_s": n * steps / elapsed,
        "package": str(Path(atari_game.__file__).parent),
    }


def run_side(source: Path, *arguments: Any) -> dict[str, float | str]:
    """`measure(*arguments)` in a new process that imports atari_game from `source` (a folder holding the package)."""
    command = [sys.executable, __file__, "--child", json.dumps(arguments)]
    env = {**os.environ, "PYTHONPATH": str(source)}  # ahead of the editable install
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=source, check=True)
    result = json.loads(done.stdout.splitlines()[-1])
    if Path(result["package"]) != source / "atari_game":  # an install that PYTHONPATH does not override
        raise RuntimeError(f"the side in {source} imported atari_game from {result['package']}: not a comparison")
    return result


def slow_cgroup(fraction: float) -> str:
    """Make a CPU cgroup whose tasks get `fraction` of a core (at least 0.05) in every period of 2 ms (longer where
    the quota would be under the kernel's 1 ms); return the file that takes a process into it."""
    period = max(2000, round(1000 / fraction))
    quota = round(period * fraction)
    v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
    try:
        if (v1 / "cpu.cfs_quota_us").exists():
            group = v1 / "atari_game_slow_worker"
            group.mkdir(exist_ok=True)
            (group / "cpu.cfs_period_us").write_text(str(period))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
            return str(group / "cgroup.procs")
        group = v2 / "atari_game_slow_worker"
        group.mkdir(exist_ok=True)
        (group / "cpu.max").write_text(f"{quota} {period}")
        return str(group / "cgroup.procs")
    except OSError as error:
        raise SystemExit(f"--slow-worker needs root and a cgroup cpu controller: {error}") from None


def remove_cgroup(procs: str) -> None:
    """Remove the cgroup of `slow_cgroup` (whose processes file is `procs`), once its processes are gone."""
    Path(procs).parent.rmdir()


def export(revision: str, folder: Path) -> None:
    """The package as it is at `revision`, into `folder`."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", revision, "atari_game"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)


def build_parser() -> argparse.ArgumentParser:
    from atari_game.benchmark import add_options_argument
    from atari_game.cli import count

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base", required=True, help="the git revision to compare with, e.g. HEAD~1 or main (required)"
    )
    parser.add_argument(
        "--envs", type=count, nargs="+", default=[8, 16], help="numbers of envs N to measure (default: 8 16)"
    )
    parser.add_argument(
        "--loops",
        nargs="+",
        choices=LOOPS,
        default=list(LOOPS),
        help="the stepping loops to measure: sync (step) and async (send/recv, batch N/2) (default: sync async)",
    )
    parser.add_argument(
        "--rounds", type=count, default=6, help="rounds, each running both sides once (default: %(default)s)"
    )
    parser.add_argument(
        "--steps", type=count, default=500, help="batch steps of N envs per measurement (default: %(default)s)"
    )
    parser.add_argument("--workers", type=count, help="worker processes (default: one per core)")
    parser.add_argument(
        "--zero-copy", action="store_true", help="copy=False, as the benchmark's --parent-grid (default: off)"
    )
    parser.add_argument(
        "--slow-worker",
        type=float,
        help="the share of a core the first worker gets, in [0.05, 1), e.g. 0.5 (default: off; needs root)",
    )
    add_options_argument(parser)
    return parser


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(measure(*json.loads(sys.argv[2]))))
        return
    from atari_game.benchmark import MACHINE, OUR_GAME

    parser = build_parser()
    args = parser.parse_args()
    if args.slow_worker is not None and not 0.05 <= args.slow_worker < 1:
        parser.error(f"--slow-worker must be in [0.05, 1), got {args.slow_worker}")
    slow_tasks = slow_cgroup(args.slow_worker) if args.slow_worker else None
    options = {**OUR_GAME, **args.options, "n_workers": args.workers, "copy": not args.zero_copy}

    workers = f"{args.workers} workers" if args.workers else "a worker per core"
    print(f"parent CPU per batch step, this checkout against {args.base}; {MACHINE}", flush=True)
    slow = f"; the first worker on {args.slow_worker:.0%} of a core" if slow_tasks else ""
    settings = "".join(f", {name}={value!r}" for name, value in args.options.items())
    print(f"{workers}, copy={not args.zero_copy}{slow}{settings}", flush=True)
    with tempfile.TemporaryDirectory() as base, contextlib.ExitStack() as cleanup:
        if slow_tasks:
            cleanup.callback(remove_cgroup, slow_tasks)
        export(args.base, Path(base))
        sides = {"base": Path(base), "this": REPO}
        for n in args.envs:
            for loop in args.loops:
                runs: dict[str, list[dict]] = {"base": [], "this": []}
                for round_number in range(args.rounds):
                    for side in ("base", "this") if round_number % 2 == 0 else ("this", "base"):
                        runs[side].append(run_side(sides[side], loop, n, args.steps, options, slow_tasks))
                report(loop, n, runs)


def report(loop: str, n: int, runs: dict[str, list[dict]]) -> None:
    """Each side's medians, and this checkout's parent CPU (user + system) over the base's, round by round."""
    for side, measurements in runs.items():
        user, system, rate = (
            np.median([m[key] for m in measurements]) for key in ("user_us", "system_us", "steps_per_s")
        )
        cpu = f"{user:6.0f} µs user + {system:5.0f} µs system per batch step"
        print(f"{loop:5} N={n:3} {side:4}: parent {cpu}; {rate:6,.0f} agent steps/s")
    ratios = [
        (this["user_us"] + this["system_us"]) / (base["user_us"] + base["system_us"])
        for this, base in zip(runs["this"], runs["base"], strict=True)
    ]
    spread = f"{np.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
    print(f"{loop:5} N={n:3} this / base parent CPU per round: median {spread}", flush=True)
    # The same rounds' throughput: workers' changes show here, not in the parent's CPU.
    rates = [this["steps_per_s"] / base["steps_per_s"] for this, base in zip(runs["this"], runs["base"], strict=True)]
    faster = sum(rate >= 1 for rate in rates)
    spread = f"{np.median(rates):.2f} ({min(rates):.2f}-{max(rates):.2f}; at least as fast in {faster}/{len(rates)})"
    print(f"{loop:5} N={n:3} this / base agent steps/s per round: median {spread}", flush=True)


if __name__ == "__main__":
    main()
