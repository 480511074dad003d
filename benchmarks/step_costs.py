"""Where an agent step's time goes, ours against ale-py's C++ vector env (docs/performance.md, "Where a sync step's time
goes", gives the commands, e.g. ``python benchmarks/step_costs.py --envs 8``): ``instructions`` by library (valgrind's
callgrind), and ``time``, CPU µs per agent step and a sync step's wall time split. Each system (`SYSTEMS`, `ready`) is
counted for S and 2S agent steps: (count(2S) - count(S)) / S is one step without the start-up. It prints its tables and
writes the figures as common.py says.
"""

import argparse
import collections
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import common
import numpy as np

from atari_game import Game, GamePool, arguments
from atari_game.benchmark import (
    GAME,
    MAX_FRAMES,
    OUR_GAME,
    _process_cpu,
    ale_vector_env,
    bare_emulator,
    bare_steps,
)
from atari_game.game import GameOptions, resolve_game
from atari_game.pool_worker import GameBlock
from atari_game.segment import layout

PARTS = ("instructions", "time")
# In `ready`: ALE's own work (`bare_steps`, the emulation limit's loop), `Game.play`, a worker's `GameBlock` of --envs
# envs, the parent of a sync `GamePool` of --envs envs (callgrind follows no worker), ale-py's vector env on one thread.
SYSTEMS = ("bare-ale", "game", "block", "parent", "ale-vector")
# The libraries instructions are split by (`library`). ale-py's vector env resizes with an OpenCV built into its own
# library, so its resize counts as ALE's.
LIBRARIES = ("ALE", "OpenCV", "numpy", "Python", "libc", "other")
WARM_UP = 20  # the pool's steps before its figures start (replayed, as they were played)
POOL_WORKERS = 2  # the `parent` and the timed pool's workers: the 2-core machines the docs' tables come from


@contextlib.contextmanager
def ready(system: str, n_envs: int) -> Iterator[Callable[[np.ndarray], None]]:
    """`system` made and reset, for as long as the block lasts: a function that plays a ``(steps, width(system,
    n_envs))`` array of actions, a row per step of its envs."""
    if system == "bare-ale":
        ale = bare_emulator(resolve_game(GAME), max_frames=MAX_FRAMES)
        yield lambda actions: bare_steps(GAME, actions[:, 0], ale=ale)
    elif system == "game":
        game = Game(seed=0, **OUR_GAME)
        game.reset()
        row = np.zeros(game.observation_shape, np.uint8)
        yield lambda actions: [game.play(int(action), row) for action in actions[:, 0]]
    elif system == "block":
        block = game_block(list(range(n_envs)))
        yield lambda actions: [play_block(block, row) for row in actions]
    elif system == "parent":
        with GamePool(n_envs, n_workers=POOL_WORKERS, **OUR_GAME) as pool:
            pool.reset(seed=0)
            yield lambda actions: [pool.step(row) for row in actions]
    elif system == "ale-vector":
        env = ale_vector_env(n_envs, threads=1)
        env.reset(seed=0)
        try:
            yield lambda actions: [env.step(row) for row in actions]
        finally:
            env.close()
    else:
        raise ValueError(f"system must be one of {', '.join(SYSTEMS)}, got {system!r}")


def width(system: str, n_envs: int) -> int:
    """The envs `system` steps at once."""
    return n_envs if system in ("block", "parent", "ale-vector") else 1


def play(system: str, steps: int, n_envs: int) -> None:
    """Make `system` and play `steps` agent steps of Breakout (rounded down to whole batches of its envs), in the
    process callgrind counts."""
    n = width(system, n_envs)
    with ready(system, n_envs) as run:
        run(np.random.default_rng(0).integers(4, size=(steps // n, n)))


def game_block(env_ids: list[int]) -> GameBlock:
    """A worker's `GameBlock` of the envs `env_ids` over arrays of the pool's layout (a row each), reset as a pool's
    ``reset(seed=0)`` resets them (env i seeded i), with a `GamePool`'s default next-step autoreset."""
    options = GameOptions(**OUR_GAME)
    arrays = {name: np.zeros(shape, dtype) for name, (shape, dtype) in layout(len(env_ids), options, False).items()}
    block = GameBlock(env_ids, env_ids, True, [OUR_GAME] * len(env_ids), arrays)
    block.reset({i: i for i in env_ids}, [])
    return block


def play_block(block: GameBlock, actions: np.ndarray) -> None:
    """Step `block`'s envs with their actions in `actions`, a row of one per env of the pool, as its worker does."""
    block.arrays["actions"][:] = actions[block.env_ids]
    block.step(block.env_ids)


def count(system: str, steps: int, n_envs: int, directory: Path) -> dict[str, int]:
    """Instructions callgrind counts in a process that plays `steps` agent steps with `system`, by library."""
    out = directory / f"{system}-{steps}.out"
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", f"--log-file={directory / 'log'}"]
    command += [sys.executable, __file__, "--play", system, "--steps", str(steps), "--envs", str(n_envs)]
    # No OpenBLAS threads (numpy's, OpenCV's): they spin for a while after start-up, a count that varies run to run.
    quiet = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=quiet)
    return by_library(out.read_text())


def by_library(text: str) -> dict[str, int]:
    """The instructions of a callgrind output file (its only event, ``Ir``) by the `LIBRARIES` their code is in,
    each function's own (exclusive) count: the cost line after a ``calls=`` line is the call's inclusive cost."""
    names: dict[str, str] = {}  # callgrind names each object once, as "(id) path", then by "(id)" alone
    totals: collections.Counter = collections.Counter()
    library, after_call = "other", False
    for line in text.splitlines():
        if line and (line[0].isdigit() or line[0] in "+-*"):
            fields = line.split()  # a position, then the count (none: zero)
            if not after_call and len(fields) > 1:
                totals[library] += int(fields[1])
            after_call = False
        elif line.startswith(("ob=", "cob=")):
            ident, _, path = line.split("=", 1)[1].partition(" ")
            names[ident] = path or names[ident]
            if line.startswith("ob="):
                library = library_of(names[ident])
        elif line.startswith("calls="):
            after_call = True
    return dict(totals)


def library_of(path: str) -> str:
    """Which of `LIBRARIES` the shared object at `path` belongs to (the libraries each ships with counted as its)."""
    name = Path(path).name
    if "_ale_py" in name:
        return "ALE"
    if "/cv2/" in path or "opencv" in path:
        return "OpenCV"
    if "/numpy" in path:
        return "numpy"
    if name.startswith(("libpython", "python")) or "/lib-dynload/" in path:  # (lib-dynload: its compiled modules)
        return "Python"
    return "libc" if name.startswith("libc.") else "other"


def instructions(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Instructions per agent step of each system, by library; printed as a table."""
    columns = [*LIBRARIES, "total"]
    steps = max(args.steps // args.envs, 1) * args.envs  # whole batches of the systems with several envs
    print(f"\nInstructions per agent step, Breakout (callgrind, {steps} and {2 * steps} steps; thousands)")
    print(f"{'system':12}" + "".join(f"{column:>9}" for column in columns), flush=True)
    figures = {}
    with tempfile.TemporaryDirectory() as directory:
        for system in args.systems:
            low, high = (count(system, played, args.envs, Path(directory)) for played in (steps, 2 * steps))
            split = {name: (high.get(name, 0) - low.get(name, 0)) / steps for name in columns[:-1]}
            figures[system] = {**split, "total": sum(split.values())}
            print(f"{system:12}" + "".join(f"{figures[system][column] / 1e3:9,.0f}" for column in columns), flush=True)
    return figures


def cpu_per_step(system: str, n_envs: int, seconds: float) -> float:
    """CPU µs per agent step of `system` (not ``parent``) in this process, for about `seconds` after it is made and
    warmed up (making an emulator takes as long as some 250 steps)."""
    n, rng = width(system, n_envs), np.random.default_rng(1)
    rows = max(256 // n, 1)  # a call's steps: enough that the call's own cost is noise
    with ready(system, n_envs) as run:
        run(rng.integers(4, size=(max(64 // n, 1), n)))
        spent = common.per_call(lambda: run(rng.integers(4, size=(rows, n))), seconds=seconds)
    return 1e6 * spent["cpu"] / (rows * n)


def sync_pool(n_envs: int, seconds: float) -> tuple[dict[str, float], np.ndarray]:
    """A sync `GamePool` of `n_envs` envs on `POOL_WORKERS` workers, stepped for about `seconds` after `WARM_UP`
    steps: per agent step, the wall µs times the workers (what the cores had to give), the workers' CPU µs and the
    parent's own; and the actions it played, a row per step (the warm-up's first)."""
    rng, played = np.random.default_rng(0), []
    with GamePool(n_envs, n_workers=POOL_WORKERS, **OUR_GAME) as pool:

        def step() -> None:
            played.append(rng.integers(4, size=n_envs))
            pool.step(played[-1])

        pool.reset(seed=0)
        for _ in range(WARM_UP):
            step()
        pids = [worker.process.pid for worker in pool._workers]
        workers = sum(map(_process_cpu, pids))
        spent = common.per_call(step, seconds=seconds)
        workers = (sum(map(_process_cpu, pids)) - workers) / spent["calls"]
    figures = {"wall_x_workers": spent["wall"] * POOL_WORKERS, "workers": workers, "parent": spent["cpu"]}
    return {key: 1e6 * value / n_envs for key, value in figures.items()}, np.array(played)


def replayed_blocks(actions: np.ndarray) -> tuple[float, float]:
    """A pool's steps played again in this process by its `POOL_WORKERS` workers' `GameBlock`s, one after the other,
    from the same seeds with the same `actions` (the same emulation): the CPU µs per agent step after `WARM_UP` steps,
    and the share of a sync step's cores that the wait for the slower block leaves idle."""
    n_envs = actions.shape[1]
    blocks = [game_block(ids.tolist()) for ids in np.array_split(np.arange(n_envs), POOL_WORKERS)]
    busy, slowest, start = 0.0, 0.0, 0.0
    for step, row in enumerate(actions):
        if step == WARM_UP:
            start = time.process_time()
        times = []
        for block in blocks:
            begin = time.perf_counter()
            play_block(block, row)
            times.append(time.perf_counter() - begin)
        if step >= WARM_UP:
            busy, slowest = busy + sum(times), slowest + max(times)
    cpu = time.process_time() - start
    return 1e6 * cpu / ((len(actions) - WARM_UP) * n_envs), 1 - busy / (POOL_WORKERS * slowest)


def timings(args: argparse.Namespace) -> dict[str, float]:
    """CPU µs per agent step of every system but ``parent`` on this CPU, and where a sync pool's step goes; printed.

    A sync step's wall time on the workers' cores (wall x workers) is split into the envs' play (`replayed_blocks`:
    the same work alone in this process), the parent's own part (both cores wait for it: twice its CPU), the wait for
    the slower worker (its share of the play in the replay: a lower bound, the plays of two processes side by side can
    vary more) and the rest: wake-ups, the workers' reads and writes, the play's slowdown beside the other worker."""
    alone = ["bare-ale", "game", "ale-vector"]
    rounds: dict[str, list] = {system: [] for system in [*alone, "pool"]}
    for round_number in range(args.rounds):
        for system in common.turns([*alone, "pool"], round_number):
            if system == "pool":
                stepped, actions = sync_pool(args.envs, args.seconds)
                rounds[system].append(dict(zip(("play", "wait"), replayed_blocks(actions), strict=True), **stepped))
            else:
                rounds[system].append(cpu_per_step(system, args.envs, args.seconds))
    figures = {system: float(np.median(rounds[system])) for system in alone}
    pool = {key: float(np.median([row[key] for row in rounds["pool"]])) for key in rounds["pool"][0]}
    total, play, wait = pool["wall_x_workers"], pool["play"], pool["wait"]
    split = {"play": play, "parent": POOL_WORKERS * pool["parent"], "wait": play * wait / (1 - wait)}
    split["rest"] = total - sum(split.values())
    figures.update({f"pool_{key}": value for key, value in pool.items()})
    figures.update({f"split_{key}": value for key, value in split.items()})
    print(f"\nCPU µs per agent step on this CPU, Breakout (medians of {args.rounds} rounds of {args.seconds:g} s)")
    for system in alone:
        print(f"{system:12} {figures[system]:8.1f}   (envs: {width(system, args.envs)})")
    print(
        f"\nA sync GamePool of {args.envs} envs on {POOL_WORKERS} workers, per agent step (µs of the workers' cores):"
    )
    for key, what in (
        ("play", "the envs' play (the blocks, replaying the pool's steps)"),
        ("parent", "the parent's own part, both cores waiting"),
        ("wait", "the wait for the slower worker (as replayed)"),
        ("rest", "the rest: wake-ups, reads and writes, the play's slowdown"),
    ):
        print(f"  {what:58} {split[key]:8.1f}  {split[key] / total:6.1%}")
    print(f"  {'wall x workers':58} {total:8.1f}  100.0%")
    print(f"  (the workers' CPU: {pool['workers']:.1f} µs, their watch's spinning included)")
    print(f"the pool's share of the emulation limit (bare-ale / wall x workers): {figures['bare-ale'] / total:.1%}")
    return figures


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    add = parser.add_argument
    add("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to measure (default: all)")
    add("--steps", type=arguments.count, default=400, help="counted for S and 2S agent steps (default: %(default)s)")
    add("--envs", type=arguments.count, default=8, help="envs of the systems of several (default: %(default)s)")
    add("--rounds", type=arguments.count, default=5, help="time: alternating rounds (default: %(default)s)")
    add("--seconds", type=float, default=2.0, help="time: per system and round (default: %(default)s)")
    add("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS), help="instructions: systems (default: all)")
    add("--play", choices=SYSTEMS, help=argparse.SUPPRESS)  # the counted process
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.play:
        return play(args.play, args.steps, args.envs)
    figures = {}
    if "instructions" in args.parts:
        figures["instructions"] = instructions(args)
    if "time" in args.parts:
        figures["cpu_us"] = timings(args)
    common.save(__file__, args, figures, argv)


if __name__ == "__main__":
    main()
