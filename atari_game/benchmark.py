"""Agent steps per second of atari_game's GamePool against the other ways to run Atari games, in one run.

    pip install -e ".[bench]" && atari-game bench --num-envs 4 8 16 32 --rounds 4 --seconds 5

Every system plays with the same settings (docs/performance.md lists them), in `--rounds` rounds, each measuring the
systems in turn in an order that rotates, so that a noisy machine's drift hits all of them alike: compare the paired
ratios. ``--parent-grid`` measures instead the parent's own CPU per batch step of a GamePool over workers x envs, fitted
as per-step + per-worker x W + per-env x N (docs/performance.md, "One parent, many cores").
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import json
import math
import multiprocessing
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from atari_game import GamePool, RayGamePool, Worker
from atari_game.arguments import add_old_spelling, count
from atari_game.arguments import game_name as known_game
from atari_game.extras import install_command
from atari_game.game import FIXED_RESTART_GAMES, action_meanings, display_name, resolve_game, rom_path
from atari_game.worker import available_cores

FRAME_SKIP, NOOP_MAX, MAX_FRAMES = 4, 30, 108_000
# The settings above as atari_game's Game options (frame-skip 4 and the 84x84 stack of 4 are its defaults).
GAME = "Breakout"
OUR_GAME = {"game": GAME, "noop_max": NOOP_MAX, "life_loss": "ignore", "max_episode_frames": MAX_FRAMES}
CORES = available_cores()


def our_game(game: str) -> dict[str, Any]:
    """OUR_GAME's options for `game` instead of Breakout."""
    return {**OUR_GAME, "game": game}


# An --options value that plays episodes as the trainers do (one per life, FIRE to start).
TRAINERS_EPISODES = '{"life_loss": "terminal", "fire_reset": true}'


def add_options_argument(parser: argparse.ArgumentParser) -> None:
    """Give a benchmark script ``--options``: Game options over OUR_GAME's, as a JSON object (default: none)."""
    parser.add_argument(
        "--options",
        type=game_options_json,
        default={},
        help=f"Game options over the throughput benchmark's, as JSON: '{TRAINERS_EPISODES}' plays episodes as the "
        "trainers do (default: {}: the benchmark's)",
    )


def game_options_json(text: str) -> dict[str, Any]:
    """``--options``' value: a JSON object, else an error that shows one."""
    try:
        options = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not JSON ({error}); for example '{TRAINERS_EPISODES}'") from None
    if not isinstance(options, dict):
        raise argparse.ArgumentTypeError(f"a JSON object of Game options, for example '{TRAINERS_EPISODES}'")
    return options


def game_name(name: str) -> str:
    """`--game`'s value as Gymnasium names the game ("ms_pacman" -> "MsPacman"), checked by `arguments.game_name`."""
    return display_name(resolve_game(known_game(name)))


def _cpu_model() -> str:
    with open("/proc/cpuinfo") as info:
        names = [line.split(":", 1)[1].strip() for line in info if line.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


MACHINE = f"{_cpu_model()}, {CORES} cores"


# --- the systems: each builder returns (step(actions), close()) for N envs of `game` -------------------


def build_ours(n: int, game: str, on_ray: bool = False, n_workers: int | None = None) -> tuple[Callable, Callable]:
    # On Ray: a new local Ray instance with one actor per core, the same games through Ray.
    pool: GamePool | RayGamePool
    if on_ray:
        pool = RayGamePool(n, address="local", n_workers=n_workers, **our_game(game))
    else:
        pool = GamePool(n, n_workers=n_workers, **our_game(game))
    pool.reset(seed=0)
    return (lambda actions: pool.step(actions)), pool.close


def build_ours_async(n: int, game: str, n_workers: int | None = None) -> tuple[Callable, Callable]:
    batch = max(n // 2, 1)
    pool = GamePool(n, n_workers=n_workers, batch_size=batch, **our_game(game))
    pool.reset(seed=0)
    pool.send(np.zeros(n, np.int64))

    def step(actions: np.ndarray) -> None:
        # EnvPool's async loop, twice (n agent steps): take the first n/2 envs to finish, send them straight back.
        for half in (actions[:batch], actions[batch : 2 * batch]):
            pool.send(half, pool.recv()[4]["env_id"])

    return step, pool.close


def ale_vector_env(n: int, threads: int = CORES, game: str = GAME) -> Any:
    """ale-py's C++ `AtariVectorEnv` of `n` envs of `game` on `threads` threads, with the benchmark's settings."""
    from ale_py.vector_env import AtariVectorEnv

    return AtariVectorEnv(
        resolve_game(game),
        num_envs=n,
        batch_size=n,
        num_threads=threads,
        frameskip=FRAME_SKIP,
        maxpool=True,
        grayscale=True,
        img_height=84,
        img_width=84,
        stack_num=4,
        noop_max=NOOP_MAX,
        repeat_action_probability=0.0,
        episodic_life=False,
        life_loss_info=False,
        reward_clipping=False,
        use_fire_reset=False,
        full_action_space=False,
        max_num_frames_per_episode=MAX_FRAMES,
    )


def build_ale_vector(n: int, game: str) -> tuple[Callable, Callable]:
    env = ale_vector_env(n, game=game)
    env.reset(seed=0)
    return (lambda actions: env.step(actions)), env.close


def _envpool(n: int, batch_size: int, game: str) -> Any:
    import envpool

    return envpool.make(
        f"{display_name(resolve_game(game))}-v5",
        env_type="gymnasium",
        num_envs=n,
        batch_size=batch_size,
        num_threads=CORES,
        seed=0,
        frame_skip=FRAME_SKIP,
        stack_num=4,
        img_height=84,
        img_width=84,
        gray_scale=True,
        use_inter_area_resize=True,
        noop_max=NOOP_MAX,
        repeat_action_probability=0.0,
        episodic_life=False,
        zero_discount_on_life_loss=False,
        reward_clip=False,
        use_fire_reset=False,
        full_action_space=False,
        max_episode_steps=MAX_FRAMES // FRAME_SKIP,
    )


def build_envpool(n: int, game: str) -> tuple[Callable, Callable]:
    env = _envpool(n, n, game)
    env.reset()
    return (lambda actions: env.step(actions)), env.close


def build_envpool_async(n: int, game: str) -> tuple[Callable, Callable]:
    batch = max(n // 2, 1)
    env = _envpool(n, batch, game)
    env.async_reset()

    def step(actions: np.ndarray) -> None:
        # The same loop as build_ours_async: twice, the first n/2 envs to finish, sent straight back.
        for half in (actions[:batch], actions[batch : 2 * batch]):
            env.send(half, env.recv()[4]["env_id"])

    return step, env.close


def _gymnasium_env(game: str) -> Any:
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env_id = f"ALE/{display_name(resolve_game(game))}-v5"
    env = gym.make(env_id, frameskip=1, repeat_action_probability=0.0, max_num_frames_per_episode=MAX_FRAMES)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP, screen_size=84)
    return gym.wrappers.FrameStackObservation(env, 4)


def build_gymnasium_async(n: int, game: str) -> tuple[Callable, Callable]:
    import gymnasium as gym

    make_env = functools.partial(_gymnasium_env, game)
    env = gym.vector.AsyncVectorEnv([make_env] * n, shared_memory=True, context="forkserver")
    env.reset(seed=0)
    return (lambda actions: env.step(actions)), env.close


def build_tutorial(n: int, game: str) -> tuple[Callable, Callable]:
    workers = [Worker(i, **our_game(game)) for i in range(n)]
    for worker in workers:
        worker.reset()

    def step(actions: np.ndarray) -> None:
        # The tutorial's loop: send every worker its action, then collect each pickled result.
        for worker, action in zip(workers, actions, strict=True):
            worker.child.send(("step", int(action)))
        for worker in workers:
            worker.child.recv()

    def close() -> None:
        for worker in workers:
            worker.close()

    return step, close


SYSTEMS: dict[str, Callable[..., tuple[Callable, Callable]]] = {
    "atari_game GamePool": build_ours,
    "ale-py AtariVectorEnv": build_ale_vector,
    "EnvPool (sync)": build_envpool,
    "atari_game GamePool async": build_ours_async,
    "EnvPool async": build_envpool_async,
    "Gymnasium AsyncVectorEnv": build_gymnasium_async,
    "tutorial Worker per game": build_tutorial,
    "atari_game RayGamePool": functools.partial(build_ours, on_ray=True),
}
# Measured unless --systems says otherwise; the Ray backend has a benchmark of its own, benchmarks/ray_pool.py.
DEFAULT_SYSTEMS = [name for name in SYSTEMS if name != "atari_game RayGamePool"]
# The two async systems, compared with each other.
ASYNC = ("atari_game GamePool async", "EnvPool async")
# The systems that are atari_game's pools (--pool-workers sets their worker processes).
OURS = ("atari_game GamePool", "atari_game GamePool async", "atari_game RayGamePool")


# --- measuring ------------------------------------------------------------------------------------------


def cpu_seconds() -> float:
    """User + system CPU time of this process, its threads and all its descendants, from /proc."""
    total, pending = 0.0, [os.getpid()]
    while pending:
        pid = pending.pop()
        try:
            total += _process_cpu(pid)
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    pending += [int(child) for child in children.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def _process_cpu(pid: int) -> float:
    """User + system CPU seconds of one process (its threads included), from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(step: Callable, n: int, n_actions: int, seconds: float, rng: np.random.Generator) -> dict[str, float]:
    """Random-action steps (of `n_actions`) for about `seconds` after a warm-up: agent steps/s, CPU µs per step."""
    for _ in range(10):
        step(rng.integers(n_actions, size=n))
    steps, cpu_start, start = 0, cpu_seconds(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        step(rng.integers(n_actions, size=n))
        steps += n
    elapsed, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
    return {"steps_per_s": steps / elapsed, "cpu_us_per_step": 1e6 * cpu / steps}


def bare_emulator(rom: str = "breakout", max_frames: int = 0) -> Any:
    """A bare `ALEInterface` of the ale-py ROM `rom`: seed 0, no sticky actions, `max_frames` (0: unlimited), quiet."""
    import ale_py

    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.setInt("max_num_frames_per_episode", max_frames)
    ale.loadROM(rom_path(rom))
    return ale


def bare_steps(game: str, actions: np.ndarray, seconds: float = math.inf, ale: Any = None) -> int:
    """ALE's own work for agent steps of `game` (`actions` index its minimal action set) with the benchmark's
    settings, restarting as a `Game` does, and nothing a pool adds; returns the steps played (as `seconds` allow).
    `ale`: a `bare_emulator` of the game to play on (default: a new one, about 0.1 s of CPU to make)."""
    import cv2

    rom, rng = resolve_game(game), np.random.default_rng(0)
    ale = bare_emulator(rom, max_frames=MAX_FRAMES) if ale is None else ale
    restores = rom in FIXED_RESTART_GAMES
    minimal, restart_state = ale.getMinimalActionSet(), None
    screens, pooled = np.zeros((2, 210, 160), np.uint8), np.zeros((210, 160), np.uint8)
    stack = np.zeros((4, 84, 84), np.uint8)
    deadline, steps = time.perf_counter() + seconds, 0
    for action in actions:
        for frame in range(FRAME_SKIP):
            ale.act(minimal[action])
            if frame >= FRAME_SKIP - 2:
                ale.getScreenGrayscale(screens[frame - FRAME_SKIP + 2])
        if ale.game_over():
            if restart_state is not None:
                ale.restoreState(restart_state)
            else:
                ale.reset_game()
                if restores:
                    restart_state = ale.cloneState(include_rng=False)
            for _ in range(rng.integers(1, NOOP_MAX + 1)):
                ale.act(minimal[0])
        np.maximum(screens[0], screens[1], out=pooled)
        stack[:-1] = stack[1:]
        cv2.resize(pooled, (84, 84), dst=stack[-1], interpolation=cv2.INTER_AREA)
        steps += 1
        if time.perf_counter() > deadline:
            break
    return steps


def _bare_rate(game: str, seconds: float, start_at: float) -> float:
    """Agent steps/s of `bare_steps` over `seconds`, from the wall-clock time `start_at` on (in a limit process)."""
    actions = np.random.default_rng(os.getpid()).integers(len(action_meanings(game)), size=1_000_000)
    time.sleep(max(0.0, start_at - time.time()))
    start = time.perf_counter()
    return bare_steps(game, actions, seconds) / (time.perf_counter() - start)


def emulation_limit(executor: concurrent.futures.ProcessPoolExecutor, seconds: float, game: str = GAME) -> float:
    """The emulation limit, the agent steps/s no pool can pass: `bare_steps` on every core at once for `seconds`."""
    start_at = time.time() + 0.2
    return sum(executor.map(_bare_rate, [game] * CORES, [seconds] * CORES, [start_at] * CORES))


# --- the parent's share: what one parent can feed ---------------------------------------------------------


def parent_cpu(num_envs: int, n_workers: int, steps: int, game: str = GAME) -> dict[str, float]:
    """The parent's own CPU µs per batch step of a `copy=False` GamePool of `game`, and its workers' per agent step."""
    actions = np.random.default_rng(0).integers(len(action_meanings(game)), size=(steps + 5, num_envs))
    with GamePool(num_envs, n_workers=n_workers, copy=False, **our_game(game)) as pool:
        pool.reset(seed=0)
        for row in actions[:5]:  # warm-up
            pool.step(row)
        pids = [worker.process.pid for worker in pool._workers]
        workers_start, start = sum(map(_process_cpu, pids)), time.process_time()
        for row in actions[5:]:
            pool.step(row)
        parent, workers = time.process_time() - start, sum(map(_process_cpu, pids)) - workers_start
    return {"parent_us_per_step": 1e6 * parent / steps, "worker_us_per_agent_step": 1e6 * workers / steps / num_envs}


def fit_parent(grid: list[dict[str, float]]) -> tuple[float, float, float]:
    """Least-squares fit of the parent's CPU per batch step as per-step + per-worker x W + per-env x N (µs)."""
    design = np.array([[1.0, run["workers"], run["envs"]] for run in grid])
    cost = np.array([run["parent_us_per_step"] for run in grid])
    per_step, per_worker, per_env = np.linalg.lstsq(design, cost, rcond=None)[0]
    return float(per_step), float(per_worker), float(per_env)


def ceiling(fit: tuple[float, float, float], n_workers: int, num_envs: int) -> float:
    """Env steps/s one parent can drive at W workers x N envs, if the workers were infinitely fast."""
    per_step, per_worker, per_env = fit
    return num_envs / (per_step + per_worker * n_workers + per_env * num_envs) * 1e6


def parent_grid(game: str, workers: list[int], envs: list[int], steps: int, json_path: Path) -> None:
    """Measure the parent's CPU per batch step over W x N (N >= W), fit it and print the ceiling it implies."""
    grid = []
    for n_workers in workers:
        for num_envs in [n for n in envs if n >= n_workers]:
            run = {"workers": n_workers, "envs": num_envs, **parent_cpu(num_envs, n_workers, steps, game)}
            grid.append(run)
            print(
                f"W={n_workers:3} N={num_envs:4}: parent {run['parent_us_per_step']:8,.0f} µs per batch step, "
                f"workers {run['worker_us_per_agent_step']:5,.0f} µs per agent step",
                flush=True,
            )
    fit = fit_parent(grid)
    print(f"\nparent CPU per batch step ≈ {fit[0]:.1f} µs + {fit[1]:.2f} µs x workers + {fit[2]:.2f} µs x envs")
    for n_workers, num_envs in ((16, 64), (64, 256), (256, 1024)):
        rate = ceiling(fit, n_workers, num_envs)
        print(f"one parent's ceiling at {n_workers} workers x {num_envs} envs: {rate:,.0f} env steps/s")
    print(f"and at most {1e6 / fit[2]:,.0f} env steps/s however many envs per worker (1 / per-env cost)")
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"machine": MACHINE, "game": game, "grid": grid, "fit_us": fit}, indent=1))
    print(f"\nall measurements: {json_path}")


def build_parser() -> argparse.ArgumentParser:
    """`atari-game bench`'s command line."""
    parser = argparse.ArgumentParser(prog="atari-game bench", description=__doc__.splitlines()[0])
    add = parser.add_argument
    unmeasured = ", ".join(repr(name) for name in SYSTEMS if name not in DEFAULT_SYSTEMS)
    add(
        "--num-envs",
        type=count,
        nargs="+",
        help="numbers of envs N to measure (default: 4 8 16 32; --parent-grid: 64 128 256)",
    )
    add_old_spelling(parser, "--envs", "--num-envs")
    add(
        "--parent-grid",
        action="store_true",
        help="measure instead the parent's CPU per batch step over --workers x --num-envs (default: off)",
    )
    add(
        "--workers",
        type=count,
        nargs="+",
        default=[2, 8, 16, 32, 64],
        help="numbers of worker processes W, for --parent-grid (default: 2 8 16 32 64)",
    )
    add(
        "--pool-workers",
        type=count,
        help="worker processes of atari_game's pools, for the comparison (default: one per core)",
    )
    add(
        "--steps",
        type=count,
        default=100,
        help="batch steps of N envs per --parent-grid measurement (default: %(default)s)",
    )
    add(
        "--rounds",
        type=count,
        default=4,
        help="rounds, each measuring every system once in turn (default: %(default)s)",
    )
    add("--seconds", type=float, default=5.0, help="seconds of stepping per system per round (default: %(default)s)")
    add(
        "--systems",
        nargs="+",
        default=DEFAULT_SYSTEMS,
        choices=list(SYSTEMS),
        metavar="SYSTEM",
        help=f"the systems to measure, quoted, of: {', '.join(map(repr, SYSTEMS))} (default: all but {unmeasured})",
    )
    add("--game", type=game_name, default=GAME, help="the game (`atari-game games` lists them) (default: %(default)s)")
    add(
        "--json",
        type=Path,
        default=Path("runs/bench.json"),
        help="where every measurement is written (--parent-grid: parent.json beside it) (default: %(default)s)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.parent_grid:
        return parent_grid(
            args.game, args.workers, args.num_envs or [64, 128, 256], args.steps, args.json.with_name("parent.json")
        )
    rng = np.random.default_rng(0)
    results: dict[str, Any] = {"machine": MACHINE, "game": args.game, "pool_workers": args.pool_workers, "runs": {}}
    # The processes that measure the `emulation_limit`, one per core, started now (not during a measurement).
    with concurrent.futures.ProcessPoolExecutor(CORES, mp_context=multiprocessing.get_context("spawn")) as executor:
        list(executor.map(time.sleep, [0.5] * CORES))  # each busy while the next is asked for: CORES processes
        for n in args.num_envs or [4, 8, 16, 32]:
            results["runs"][n] = compare(n, args, executor, rng)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1))
    print(f"\nall measurements: {args.json}")


def compare(
    n: int, args: argparse.Namespace, limit_executor: concurrent.futures.ProcessPoolExecutor, rng: np.random.Generator
) -> dict[str, Any]:
    """Measure `args.systems` (`n` envs) for `args.rounds` rounds, each after the emulation limit; print, return it."""
    game, built, skipped = args.game, {}, {}
    for name in args.systems:
        try:
            workers = {"n_workers": min(args.pool_workers, n)} if args.pool_workers and name in OURS else {}
            built[name] = SYSTEMS[name](n, game, **workers)
        except ImportError as error:
            # Ours say what to install themselves; a peer's ImportError only names its module.
            skipped[name] = f"not installed ({error})" + ("" if name in OURS else f": {install_command('bench')}")
    if not built:  # every system asked for is missing: say why, measure nothing
        for name, reason in skipped.items():
            print(f"{name}: skipped: {reason}")
        return {"limit_steps_per_s": [], "systems": {}, "skipped": skipped}
    limits: list[float] = []
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in built}
    n_actions = len(action_meanings(game))
    try:
        for round_number in range(args.rounds):
            limits.append(emulation_limit(limit_executor, args.seconds, game))
            order = list(built)[round_number % len(built) :] + list(built)[: round_number % len(built)]
            for name in order:
                runs[name].append(measure(built[name][0], n, n_actions, args.seconds, rng))
                print(
                    f"N={n} round {round_number + 1}: {name}: {runs[name][-1]['steps_per_s']:,.0f} steps/s", flush=True
                )
    finally:
        for _, close in built.values():
            close()
    print_table(game, n, limits, runs, skipped)
    return {"limit_steps_per_s": limits, "systems": runs, "skipped": skipped}


def paired_ratios(ours: list[dict], theirs: list[dict]) -> np.ndarray:
    """Our steps/s over theirs, round by round: back to back, the two share most of a noisy machine's drift."""
    return np.array([a["steps_per_s"] / b["steps_per_s"] for a, b in zip(ours, theirs, strict=True)])


def describe_ratios(ratios: np.ndarray) -> str:
    """The median of paired ratios, their range, and in how many rounds ours was at least as fast."""
    ahead = int(np.count_nonzero(ratios >= 1))
    return f"{np.median(ratios):.2f}x ({ratios.min():.2f}-{ratios.max():.2f}, {ahead}/{len(ratios)})"


def mean_rate(runs: list[dict]) -> float:
    return float(np.mean([run["steps_per_s"] for run in runs]))


def print_table(game: str, n: int, limits: list[float], runs: dict[str, list[dict]], skipped: dict[str, str]) -> None:
    # Ratios over the first of our systems measured (the sync GamePool where asked for); with none of ours, none.
    reference = next((name for name in OURS if name in runs), None)
    print(f"\n{game}, N={n}: agent steps/s, mean of {len(limits)} alternating rounds; % limit: of the emulation limit")
    print(f"(ALE's own work for the same steps, one process per core: {np.mean(limits):,.0f} steps/s); ours / it per")
    print(
        "round: the median of the rounds' ratios, their range, and the rounds in which ours was at least as fast"
        f" (ours: {reference or 'none measured'})"
    )
    header = f"{'system':28} {'steps/s':>9} {'± sd':>7} {'CPU µs/step':>12} {'% limit':>8} {'ours / it':>10}"
    print(f"{header}  ours / it per round")
    for name, measurements in runs.items():
        rates = np.array([run["steps_per_s"] for run in measurements])
        cpu = np.mean([run["cpu_us_per_step"] for run in measurements])
        share = 100 * np.median(rates / np.array(limits))  # each round against its own limit
        mean, sd = rates.mean(), rates.std()
        ratio, per_round = f"{'-':>9} ", "-"  # no system of ours to compare with
        if reference:
            ratio = f"{mean_rate(runs[reference]) / mean:9.2f}x"
            per_round = describe_ratios(paired_ratios(runs[reference], measurements))
        print(f"{name:28} {mean:9,.0f} {sd:7,.0f} {cpu:12,.0f} {share:7.0f}% {ratio}  {per_round}")
    for name, reason in skipped.items():
        print(f"{name:28} skipped: {reason}")
    if all(name in runs for name in ASYNC):
        ours_async, theirs = (runs[name] for name in ASYNC)
        per_round = describe_ratios(paired_ratios(ours_async, theirs))
        overall = mean_rate(ours_async) / mean_rate(theirs)
        print(f"async (send/recv, batch_size N/2): GamePool / EnvPool = {overall:.2f}x; per round {per_round}")


if __name__ == "__main__":
    main()
