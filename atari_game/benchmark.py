"""Agent steps per second of atari_game's GamePool against the other ways to run Atari games, in one run.

    pip install -e ".[bench]" && atari-game bench --envs 4 8 16 32 --rounds 4 --seconds 5

Every system runs with identical settings: Breakout, frame-skip 4, max-pool, grayscale 84x84 (area
interpolation), stack 4, noop_max 30, no sticky actions, no reward clipping, the game reset only at game
over, random actions. For each N the systems are built once, then measured in turn for `--rounds` rounds,
the order rotating each round so that drift on a noisy machine hits all of them alike. The table gives
mean agent steps/s, the CPU time (all processes and threads) per agent step, and ratios; `--json` keeps
every measurement. Absolute numbers belong to the machine they were measured on: compare ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from atari_game import GamePool, Worker

FRAME_SKIP, NOOP_MAX, MAX_FRAMES = 4, 30, 108_000
# The settings above as atari_game's Game options (frame-skip 4 and the 84x84 stack of 4 are its defaults).
OUR_GAME = {"game": "Breakout", "noop_max": NOOP_MAX, "life_loss": "ignore", "max_episode_frames": MAX_FRAMES}
CORES = len(os.sched_getaffinity(0))


# --- the systems: each builder returns (step(actions), close()) for N envs ------------------------------


def build_ours(n: int) -> tuple[Callable, Callable]:
    pool = GamePool(n, **OUR_GAME)
    pool.reset(seed=0)
    return (lambda actions: pool.step(actions)), pool.close


def build_ours_on_ray(n: int) -> tuple[Callable, Callable]:
    from atari_game.ray_pool import RayGamePool

    # A new local Ray instance with one actor per core: the same games as build_ours, through Ray.
    pool = RayGamePool(n, address="local", **OUR_GAME)
    pool.reset(seed=0)
    return (lambda actions: pool.step(actions)), pool.close


def build_ale_vector(n: int) -> tuple[Callable, Callable]:
    from ale_py.vector_env import AtariVectorEnv

    env = AtariVectorEnv(
        "breakout",
        num_envs=n,
        batch_size=n,
        num_threads=CORES,
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
    env.reset(seed=0)
    return (lambda actions: env.step(actions)), env.close


def build_envpool(n: int) -> tuple[Callable, Callable]:
    import envpool

    env = envpool.make(
        "Breakout-v5",
        env_type="gymnasium",
        num_envs=n,
        batch_size=n,
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
    env.reset()
    return (lambda actions: env.step(actions)), env.close


def _gymnasium_env() -> Any:
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make("ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.0, max_num_frames_per_episode=MAX_FRAMES)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP, screen_size=84)
    return gym.wrappers.FrameStackObservation(env, 4)


def build_gymnasium_async(n: int) -> tuple[Callable, Callable]:
    import gymnasium as gym

    env = gym.vector.AsyncVectorEnv([_gymnasium_env] * n, shared_memory=True, context="forkserver")
    env.reset(seed=0)
    return (lambda actions: env.step(actions)), env.close


def build_tutorial(n: int) -> tuple[Callable, Callable]:
    workers = [Worker(i, **OUR_GAME) for i in range(n)]
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


SYSTEMS: dict[str, Callable[[int], tuple[Callable, Callable]]] = {
    "atari_game GamePool": build_ours,
    "ale-py AtariVectorEnv": build_ale_vector,
    "EnvPool (sync)": build_envpool,
    "Gymnasium AsyncVectorEnv": build_gymnasium_async,
    "tutorial Worker per game": build_tutorial,
    "atari_game RayGamePool": build_ours_on_ray,
}
# Measured unless --systems says otherwise; the Ray backend has a benchmark of its own, benchmarks/ray_pool.py.
DEFAULT_SYSTEMS = [name for name in SYSTEMS if name != "atari_game RayGamePool"]
# The extra that installs each system's package, for the message when it is missing.
EXTRAS = {"atari_game RayGamePool": "ray"}


# --- measuring ------------------------------------------------------------------------------------------


def cpu_seconds() -> float:
    """User + system CPU time of this process, its threads and all its descendants, from /proc."""
    tick, total, pending = os.sysconf("SC_CLK_TCK"), 0, [os.getpid()]
    while pending:
        pid = pending.pop()
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    pending += [int(child) for child in children.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / tick


def measure(step: Callable, n: int, seconds: float, rng: np.random.Generator) -> dict[str, float]:
    """Random-action steps for about `seconds` after a short warm-up: agent steps/s and CPU µs per step."""
    for _ in range(10):
        step(rng.integers(4, size=n))
    steps, cpu_start, start = 0, cpu_seconds(), time.perf_counter()
    while time.perf_counter() - start < seconds:
        step(rng.integers(4, size=n))
        steps += n
    elapsed, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
    return {"steps_per_s": steps / elapsed, "cpu_us_per_step": 1e6 * cpu / steps}


def emulator_ceiling(seconds: float) -> float:
    """Raw `ALEInterface.act` frames/s on one core (resets not timed) x cores / frame-skip: agent steps/s."""
    import ale_py
    from ale_py import roms

    ale = ale_py.ALEInterface()
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(roms.get_rom_path("breakout"))
    actions = ale.getMinimalActionSet()
    choices = np.random.default_rng(0).integers(len(actions), size=100_000)
    frames, emulating = 0, 0.0
    while emulating < seconds:
        start = time.perf_counter()
        for choice in choices[:1000]:
            ale.act(actions[choice])
            if ale.game_over():
                emulating += time.perf_counter() - start
                ale.reset_game()
                start = time.perf_counter()
            frames += 1
        emulating += time.perf_counter() - start
        choices = np.roll(choices, 1000)
    return frames / emulating * CORES / FRAME_SKIP


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="atari-game bench", description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--systems", nargs="+", default=DEFAULT_SYSTEMS, choices=list(SYSTEMS), metavar="SYSTEM")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/throughput.json"))
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    results: dict[str, Any] = {"machine": f"{platform.processor() or platform.machine()}, {CORES} cores", "runs": {}}
    for n in args.envs:
        built, skipped = {}, {}
        for name in args.systems:
            try:
                built[name] = SYSTEMS[name](n)
            except ImportError as error:
                skipped[name] = f"not installed ({error}): pip install -e '.[{EXTRAS.get(name, 'bench')}]'"
        ceilings, runs = [], {name: [] for name in built}
        try:
            for round_number in range(args.rounds):
                ceilings.append(emulator_ceiling(args.seconds / 2))
                order = list(built)[round_number % len(built) :] + list(built)[: round_number % len(built)]
                for name in order:
                    runs[name].append(measure(built[name][0], n, args.seconds, rng))
                    print(
                        f"N={n} round {round_number + 1}: {name}: {runs[name][-1]['steps_per_s']:,.0f} steps/s",
                        flush=True,
                    )
        finally:
            for _, close in built.values():
                close()
        results["runs"][n] = {"ceiling_steps_per_s": ceilings, "systems": runs, "skipped": skipped}
        print_table(n, float(np.mean(ceilings)), runs, skipped)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1))
    print(f"\nall measurements: {args.json}")


def print_table(n: int, ceiling: float, runs: dict[str, list[dict]], skipped: dict[str, str]) -> None:
    ours = float(np.mean([run["steps_per_s"] for run in runs["atari_game GamePool"]]))
    rounds = len(runs["atari_game GamePool"])
    print(f"\nN={n}: agent steps/s, mean of {rounds} alternating rounds (emulator ceiling {ceiling:,.0f} = raw ALE")
    print(f"frames/s on one core x {CORES} cores / frame-skip {FRAME_SKIP})")
    print(f"{'system':28} {'steps/s':>9} {'± sd':>7} {'CPU µs/step':>12} {'% ceiling':>10} {'ours / it':>10}")
    for name, measurements in runs.items():
        rates = [run["steps_per_s"] for run in measurements]
        cpu = np.mean([run["cpu_us_per_step"] for run in measurements])
        mean = float(np.mean(rates))
        share = 100 * mean / ceiling
        print(f"{name:28} {mean:9,.0f} {np.std(rates):7,.0f} {cpu:12,.0f} {share:9.0f}% {ours / mean:9.2f}x")
    for name, reason in skipped.items():
        print(f"{name:28} skipped: {reason}")


if __name__ == "__main__":
    main()
