"""Where an agent step's time goes, ours against ale-py's C++ vector env: ``instructions`` by library (callgrind), and
``time``, CPU µs per agent step and a sync step's split (docs/performance.md, "Where a sync step's time goes", gives
the commands, e.g. ``python benchmarks/step_costs.py``). It prints its tables and writes them as common.py says.
"""

import argparse
import collections
import contextlib
import functools
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
# In `ready`: ALE's own work (`bare_steps`, the emulation limit's loop), `Game.play`, a worker's `GameBlock` of N envs,
# the parent of a sync `GamePool` of N envs (N: --num-envs; callgrind follows no worker), ale-py's vector env, 1 thread.
SYSTEMS = ("bare-ale", "game", "block", "parent", "ale-vector")
# The libraries instructions are split by (`library`). ale-py's vector env resizes with an OpenCV built into its own
# library, so its resize counts as ALE's.
LIBRARIES = ("ALE", "OpenCV", "numpy", "Python", "libc", "other")
SEVERAL = ("block", "parent", "ale-vector")  # the systems that step --num-envs envs at once (the others: one)
WARM_UP = 20  # the pool's steps before its figures start (replayed, as they were played)
POOL_WORKERS = 2  # the `parent` and the timed pool's workers: the 2-core machines the docs' tables come from
ROUNDS, SECONDS = 5, 2.0  # time: alternating rounds, and each system's seconds in a round


@contextlib.contextmanager
def ready(system: str, n_envs: int) -> Iterator[Callable[[np.ndarray], None]]:
    """A function that plays a ``(steps, envs)`` array of actions on `system`, made and reset."""
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


def play(system: str, steps: int, n_envs: int) -> None:
    """Make `system` and play `steps` agent steps of Breakout (whole batches of its envs): the process counted."""
    n = n_envs if system in SEVERAL else 1
    with ready(system, n_envs) as run:
        run(np.random.default_rng(0).integers(4, size=(steps // n, n)))


def game_block(env_ids: list[int]) -> GameBlock:
    """A worker's `GameBlock` of the envs `env_ids` (a row each), reset as a pool's ``reset(seed=0)`` resets them."""
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
    command += [sys.executable, __file__, "--play", system, "--steps", str(steps), "--num-envs", str(n_envs)]
    # No OpenBLAS threads (numpy's, OpenCV's): they spin for a while after start-up, a count that varies run to run.
    quiet = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=quiet)
    return by_library(out.read_text())


def by_library(text: str) -> dict[str, int]:
    """A callgrind output's instructions (``Ir``) by `LIBRARIES`, each function's own: a call's cost line is not."""
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
    steps = max(args.steps // args.num_envs, 1) * args.num_envs  # whole batches of the systems with several envs
    print(f"\nInstructions per agent step, Breakout (callgrind, {steps} and {2 * steps} steps; thousands)")
    print(f"{'system':12}" + "".join(f"{column:>9}" for column in columns), flush=True)
    figures = {}
    with tempfile.TemporaryDirectory() as directory:
        for system in args.systems:
            low, high = (count(system, played, args.num_envs, Path(directory)) for played in (steps, 2 * steps))
            split = {name: (high.get(name, 0) - low.get(name, 0)) / steps for name in columns[:-1]}
            figures[system] = {**split, "total": sum(split.values())}
            print(f"{system:12}" + "".join(f"{figures[system][column] / 1e3:9,.0f}" for column in columns), flush=True)
    return figures


def cpu_per_step(system: str, n_envs: int, seconds: float = SECONDS) -> float:
    """CPU µs per agent step of `system` (not ``parent``) in this process, after it is made and warmed up."""
    n, rng = n_envs if system in SEVERAL else 1, np.random.default_rng(1)
    rows = max(256 // n, 1)  # a call's steps: enough that the call's own cost is noise
    with ready(system, n_envs) as run:
        run(rng.integers(4, size=(max(64 // n, 1), n)))
        spent = common.per_call(lambda: run(rng.integers(4, size=(rows, n))), seconds=seconds)
    return 1e6 * spent["cpu"] / (rows * n)


def sync_pool(n_envs: int, seconds: float = SECONDS) -> tuple[dict[str, float], np.ndarray]:
    """A sync `GamePool`'s µs per agent step (wall x workers, CPU, `replayed_blocks`'), and the actions played."""
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
    figures = {key: 1e6 * value / n_envs for key, value in figures.items()}
    play, wait = replayed_blocks(np.array(played))
    return {**figures, "play": play, "wait": wait}, np.array(played)


def replayed_blocks(actions: np.ndarray) -> tuple[float, float]:
    """A pool's steps replayed by its workers' `GameBlock`s in turn: CPU µs per agent step, and the share left idle."""
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
    """CPU µs per agent step of every system but ``parent``, and a sync step's split (docs/performance.md); printed."""
    alone = ["bare-ale", "game", "ale-vector"]
    measures = {system: functools.partial(cpu_per_step, system, args.num_envs) for system in alone}
    rounds = common.alternate({**measures, "pool": lambda: sync_pool(args.num_envs)[0]}, ROUNDS)
    figures = {system: float(np.median(rounds[system])) for system in alone}
    pool = {key: float(np.median([row[key] for row in rounds["pool"]])) for key in rounds["pool"][0]}
    total, play, wait = pool["wall_x_workers"], pool["play"], pool["wait"]
    split = {"play": play, "parent": POOL_WORKERS * pool["parent"], "wait": play * wait / (1 - wait)}
    split["rest"] = total - sum(split.values())
    figures.update({f"pool_{key}": value for key, value in pool.items()})
    figures.update({f"split_{key}": value for key, value in split.items()})
    print(f"\nCPU µs per agent step on this CPU, Breakout (medians of {ROUNDS} rounds of {SECONDS:g} s)")
    for system in alone:
        print(f"{system:12} {figures[system]:8.1f}   (envs: {args.num_envs if system in SEVERAL else 1})")
    print(f"\nA sync GamePool of {args.num_envs} envs on {POOL_WORKERS} workers, µs of their cores per agent step:")
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
    add("--num-envs", type=arguments.count, default=8, help="envs of the systems of several (default: %(default)s)")
    add("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS), help="instructions: systems (default: all)")
    add("--play", choices=SYSTEMS, help=argparse.SUPPRESS)  # the counted process
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.play:
        return play(args.play, args.steps, args.num_envs)
    figures = {}
    if "instructions" in args.parts:
        figures["instructions"] = instructions(args)
    if "time" in args.parts:
        figures["cpu_us"] = timings(args)
    common.save(__file__, args, figures, argv)


if __name__ == "__main__":
    main()
