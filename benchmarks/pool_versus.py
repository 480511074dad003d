"""GamePool's agent steps/s and its parent's CPU, a process per side and round: this checkout against a git revision
(``--base REV``) or each speed mechanism on against off (``--without M``); docs/design.md gives the commands, e.g.
``python benchmarks/pool_versus.py --base main``. It prints medians and ratios, and writes them as common.py says.
"""

import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import tempfile
from itertools import cycle, product
from pathlib import Path
from typing import Any

import common
import numpy as np

LOOPS = ("sync", "async")
MECHANISMS = ("restored-restarts", "the-watch", "one-wake-up")


def measure(switched_off: str | None, loop: str, n: int, seconds: float, options: dict, slow_tasks: str | None) -> dict:
    """One side's agent steps/s, parent CPU µs (user, system) per batch step and `atari_game` folder (`run_side`'s)."""
    import atari_game
    from atari_game import GamePool, pool_worker
    from atari_game import game as game_module

    if switched_off == "restored-restarts":  # every restart emulated
        game_module.FIXED_RESTART_GAMES = frozenset()
    elif switched_off == "the-watch":  # every worker sleeps on its pipe as soon as it has answered
        pool_worker.CommandWatch.wait = lambda *_: None  # type: ignore[method-assign]
    elif switched_off == "one-wake-up":  # a command per worker, the parent woken by each answer
        GamePool._step_all = GamePool._step_each  # type: ignore[method-assign]
    batch = n // 2 if loop == "async" else n
    with GamePool(n, batch_size=batch, start_method="fork", **options) as pool:
        if slow_tasks:
            pid = pool._workers[0].process.pid
            Path(slow_tasks).write_text(str(pid))
            if Path(slow_tasks).parent.name not in Path(f"/proc/{pid}/cgroup").read_text():
                raise RuntimeError(f"the first worker (pid {pid}) did not go into {Path(slow_tasks).parent}")
        actions = np.random.default_rng(0).integers(pool.single_action_space.n, size=(1000, n))
        pool.reset(seed=0)
        if loop == "sync":
            step = pool.step
        else:
            pool.send(np.zeros(n, np.int64))

            def step(row: np.ndarray) -> None:  # twice the first N/2 envs to finish, sent straight back: N agent steps
                for half in (row[:batch], row[batch : 2 * batch]):
                    pool.send(half, pool.recv()[4]["env_id"])

        rows = cycle(actions)
        spent = common.per_call(lambda: step(next(rows)), seconds=seconds, warm_up=20)
    figures = {"steps_per_s": n / spent["wall"], "user_us": 1e6 * spent["user"], "system_us": 1e6 * spent["system"]}
    return {**figures, "package": str(Path(atari_game.__file__).parent)}


def run_side(source: Path, *arguments: Any) -> dict:
    """`measure(*arguments)` in a new process that imports atari_game from `source` (a folder holding the package)."""
    command = [sys.executable, __file__, "--child", json.dumps(arguments)]
    env = {**os.environ, "PYTHONPATH": str(source)}  # ahead of the editable install
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=source, check=True)
    result = json.loads(done.stdout.splitlines()[-1])
    if Path(result["package"]) != source / "atari_game":  # an install that PYTHONPATH does not override
        raise RuntimeError(f"the side in {source} imported atari_game from {result['package']}: not a comparison")
    return result


def slow_cgroup(fraction: float) -> str:
    """The file that takes a process into a CPU cgroup giving its tasks `fraction` of a core (periods >= 2 ms)."""
    period = max(2000, round(1000 / fraction))
    quota = round(period * fraction)
    v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
    try:
        group = (v1 if (v1 / "cpu.cfs_quota_us").exists() else v2) / "atari_game_slow_worker"
        group.mkdir(exist_ok=True)
        if group.parent == v1:
            (group / "cpu.cfs_period_us").write_text(str(period))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (group / "cpu.max").write_text(f"{quota} {period}")
        return str(group / "cgroup.procs")
    except OSError as error:
        raise SystemExit(f"--slow-worker needs root and a cgroup cpu controller: {error}") from None


def export(revision: str, folder: Path) -> None:
    """The package as it is at `revision`, into `folder`."""
    git = ["git", "-C", str(common.REPO), "archive", revision, "atari_game"]
    archive = subprocess.run(git, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)


def report(name: str, loop: str, n: int, runs: dict[str, list[dict]]) -> dict:
    """Print each side's medians and the first side's figures over the second's, round by round; return them."""
    from atari_game.benchmark import describe_ratios

    for side, measured in runs.items():
        user, system, rate = (np.median([m[key] for m in measured]) for key in ("user_us", "system_us", "steps_per_s"))
        print(f"{name} {loop:5} N={n:3} {side:7}: {rate:7,.0f} agent steps/s, parent {user:5.0f} µs user + "
              f"{system:4.0f} µs system per batch step")  # fmt: skip
    first, second = runs.values()
    figures = {"agent steps/s": lambda m: m["steps_per_s"], "parent CPU": lambda m: m["user_us"] + m["system_us"]}
    ratios = {what: np.array([f(a) / f(b) for a, b in zip(first, second, strict=True)]) for what, f in figures.items()}
    for what, values in ratios.items():
        print(f"{name} {loop:5} N={n:3} {' / '.join(runs)}, {what}, round by round: {describe_ratios(values)}")
    return {"sides": runs, "ratios": ratios}


def build_parser() -> argparse.ArgumentParser:
    from atari_game.arguments import count

    parser = common.parser(__doc__)
    add = parser.add_argument
    sides = parser.add_mutually_exclusive_group(required=True)
    sides.add_argument("--base", help="the git revision to compare this checkout with, e.g. main (default: none)")
    sides.add_argument("--without", nargs="+", choices=MECHANISMS, help="mechanisms to switch off (default: none)")
    add("--num-envs", type=count, nargs="+", default=[8, 16], help="numbers of envs N (default: 8 16)")
    add("--loops", nargs="+", choices=LOOPS, default=list(LOOPS), help="the stepping loops (default: sync async)")
    add("--rounds", type=count, default=6, help="rounds, each side once (default: %(default)s)")
    add("--seconds", type=float, default=4.0, help="stepping per side and round (default: %(default)s)")
    add("--slow-worker", type=float, help="the first worker's share of a core, in [0.05, 1) (default: off; root)")
    return parser


def main(argv: list[str] | None = None) -> None:
    if sys.argv[1:2] == ["--child"] and argv is None:
        print(json.dumps(measure(*json.loads(sys.argv[2]))))
        return
    from atari_game.benchmark import OUR_GAME

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.slow_worker is not None and not 0.05 <= args.slow_worker < 1:
        parser.error(f"--slow-worker must be in [0.05, 1), got {args.slow_worker}")
    slow = f"; the first worker on {args.slow_worker:.0%} of a core" if args.slow_worker else ""
    print(f"GamePool, {OUR_GAME}, a worker per core{slow}; {common.describe_machine()}", flush=True)
    figures: dict = {}
    with tempfile.TemporaryDirectory() as base, contextlib.ExitStack() as cleanup:
        slow_tasks = slow_cgroup(args.slow_worker) if args.slow_worker else None
        if slow_tasks:
            cleanup.callback(Path(slow_tasks).parent.rmdir)  # once its processes are gone
        if args.base:
            export(args.base, Path(base))
        # Each comparison by name: its two sides, each as (the folder atari_game comes from, the mechanism off).
        comparisons = {"this / base": {"this": (common.REPO, None), "base": (Path(base), None)}} if args.base else {}
        for mechanism in args.without or []:
            comparisons[mechanism] = {"with": (common.REPO, None), "without": (common.REPO, mechanism)}
        for n, loop, (name, sides) in product(args.num_envs, args.loops, comparisons.items()):
            measured = (loop, n, args.seconds, OUR_GAME, slow_tasks)  # after each side's (source, mechanism off)
            runs = {side: functools.partial(run_side, *where, *measured) for side, where in sides.items()}
            figures[f"{name}, {loop}, N={n}"] = report(name, loop, n, common.alternate(runs, args.rounds))
    common.save(__file__, args, figures, argv)


if __name__ == "__main__":
    main()
