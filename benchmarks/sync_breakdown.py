"""Where the wall time of GamePool's sync step goes: the workers' work, waiting for the slowest worker, and the
time between steps; and what the same work takes outside the pool.

    python benchmarks/sync_breakdown.py --envs 8 16 32 --steps 1500 [--game Pong]
    python benchmarks/sync_breakdown.py --envs 16 32 --options '{"life_loss": "terminal", "fire_reset": true}'

(`--options`: Game options over the throughput benchmark's; those above play an episode a life, as the trainers do.)

Each worker process stamps (with time.perf_counter, one clock for all processes) when it starts and ends its
share of every step. From those stamps and the wall time per step, for N envs on one worker per core:

- *work*: the mean time a worker spends on its envs in a step (emulation, preprocessing, writing the rows);
- *waiting for the slowest worker*: the mean of (slowest worker's time - mean worker's time): a core idles
  at the end of a step while another worker still plays. The line after it says how much of that comes from
  steps in which an episode started (in next-step autoreset, the step after the last one ended; a game restart:
  ALE's `reset_game` costs as much CPU as ~75 emulated frames, then come 1..30 NOOPs: 13-22 agent steps of work,
  depending on the machine, or only the NOOPs' 1-6 in a game of `atari_game.game.FIXED_RESTART_GAMES`, which
  restores the state its restarts reach; that lands on one worker while the others wait);
- *between steps*: the wall time per step minus the span from the first worker's start to the last one's end:
  the parent reading the answers, building the results (and copying the observations), this loop drawing
  random actions, and the wake-ups of the parent and the workers;
- *alone*: one worker's share of the envs (a `GameBlock` of N / workers games) stepped in this process, with
  nothing else running and no waiting between steps: the same work outside the pool. A worker's *work* above
  it is what running in the pool adds to the work itself (a worker that slept between steps starts cold, and
  it shares the cores with the parent and the other workers).

Before the pools it prints what one game restart costs (CPU time of `Game.reset` in this process) in
`Game.play` steps, and for each N what a perfect split of the episode starts' work between the workers would save:
the waiting in the steps where an episode started, as a share of the wall time (that much of the step a core idles
while the other restarts a game; a shared queue of env steps, as the C++ pools have, could take it back).

The stamps come from a wrapper around the workers' `GameBlock.run`, installed before the pool forks its workers
(start_method="fork"); it adds two clock reads per worker and step.
"""

from __future__ import annotations

import argparse
import mmap
import time
from typing import Any

import numpy as np

from atari_game import pool as pool_module
from atari_game import pool_worker, segment
from atari_game.benchmark import GAME, MACHINE, add_options_argument, game_name, our_game
from atari_game.cli import count
from atari_game.game import Game, GameOptions, action_meanings

# A shared anonymous mapping made before the fork, so that every worker writes its stamps where the parent
# reads them: (the worker's first env, step, [start, end]).
MAX_ENVS, MAX_STEPS = 256, 100_000
WARM_UP = 10


def shared_stamps() -> np.ndarray:
    """The stamps array, in an anonymous shared mapping that forked workers write to and the parent reads."""
    buffer = mmap.mmap(-1, MAX_ENVS * MAX_STEPS * 2 * 8)
    return np.frombuffer(buffer, np.float64).reshape(MAX_ENVS, MAX_STEPS, 2)


def install_stamps(stamps: np.ndarray) -> None:
    """Wrap GameBlock.run so that each step of a worker stamps its start and end into `stamps`."""
    block_run = pool_worker.GameBlock.run

    def stamped_block_run(block: pool_worker.GameBlock, command: str, data: object) -> tuple:
        start = time.perf_counter()
        answer = block_run(block, command, data)
        if command == "step":
            step = getattr(block, "stamp_count", 0)
            stamps[block.env_ids[0], step] = start, time.perf_counter()
            block.stamp_count = step + 1
        return answer

    pool_worker.GameBlock.run = stamped_block_run


def breakdown(options: dict[str, Any], n_envs: int, steps: int, stamps: np.ndarray) -> dict[str, float]:
    """Run `steps` sync steps of `n_envs` envs with the Game `options` and split their mean wall time (seconds) as
    the docstring says."""
    rng, n_actions = np.random.default_rng(0), len(action_meanings(options["game"]))
    ended = np.zeros(WARM_UP + steps, bool)  # an episode ended in the step (the next one starts in the next)
    with pool_module.GamePool(n_envs, start_method="fork", **options) as pool:
        pool.reset(seed=0)
        for t in range(WARM_UP):
            ended[t] = np.any(pool.step(rng.integers(n_actions, size=n_envs))[2:4])
        start = time.perf_counter()
        for t in range(WARM_UP, WARM_UP + steps):
            ended[t] = np.any(pool.step(rng.integers(n_actions, size=n_envs))[2:4])
        wall = (time.perf_counter() - start) / steps
        firsts = [worker.env_ids[0] for worker in pool._workers]
    used = stamps[firsts, WARM_UP : WARM_UP + steps]
    if not (used[..., 1] > 0).all():
        raise RuntimeError("a worker did not stamp every step: were the stamps installed before the pool started?")
    begin, end = used[..., 0], used[..., 1]
    work = end - begin
    span = end.max(0) - begin.min(0)
    waiting = work.max(0) - work.mean(0)
    restart = ended[WARM_UP - 1 : WARM_UP + steps - 1]
    return {
        "workers": len(firsts),
        "wall": wall,
        "work": work.mean(),
        "waiting": waiting.mean(),
        "restart_share": waiting[restart].sum() / waiting.sum(),
        "restart_steps": restart.mean(),
        "between": wall - span.mean(),
        "alone": alone(options, n_envs // len(firsts), steps),
    }


def alone(options: dict[str, Any], n_envs: int, steps: int) -> float:
    """Mean wall time (seconds) of one step of a `GameBlock` of `n_envs` games with the Game `options`, played in
    this process over arrays of its own: a worker's work with no pool around it."""
    names = segment.layout(n_envs, GameOptions.from_kwargs(**options), same_step=False)  # next-step autoreset
    arrays = {name: np.zeros(shape, dtype) for name, (shape, dtype) in names.items()}
    ids = list(range(n_envs))
    block = pool_worker.GameBlock(ids, ids, True, [options] * n_envs, arrays)
    block.reset(dict.fromkeys(ids), [])
    n_actions = len(action_meanings(options["game"]))
    actions = np.random.default_rng(1).integers(n_actions, size=(WARM_UP + steps, n_envs))
    for row in actions[:WARM_UP]:
        arrays["actions"][:] = row
        block.step(ids)
    start = time.perf_counter()
    for row in actions[WARM_UP:]:
        arrays["actions"][:] = row
        block.step(ids)
    return (time.perf_counter() - start) / steps


def restart_cost(options: dict[str, Any], plays: int = 2000, restarts: int = 100) -> tuple[float, float]:
    """CPU seconds of one game restart (`Game.reset`: ALE's `reset_game`, the NOOP start, the first observation)
    and of one `Game.play` (the episode starts it makes included), in this process, with the Game `options` and
    random actions."""
    single = Game(seed=0, **options)
    single.reset()
    row = np.zeros(single.observation_shape, np.uint8)
    actions = np.random.default_rng(0).integers(len(action_meanings(options["game"])), size=plays)
    start = time.process_time()
    for action in actions:
        single.play(int(action), row)
    play = (time.process_time() - start) / plays
    start = time.process_time()
    for _ in range(restarts):
        single.reset()
    return (time.process_time() - start) / restarts, play


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--envs", type=count, nargs="+", default=[8, 16, 32], help="numbers of envs N to measure (default: 8 16 32)"
    )
    parser.add_argument(
        "--steps", type=count, default=1500, help="sync steps of N envs per measurement (default: %(default)s)"
    )
    parser.add_argument(
        "--game", type=game_name, default=GAME, help="the game (`atari-game games` lists them) (default: %(default)s)"
    )
    add_options_argument(parser)
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.steps + WARM_UP > MAX_STEPS or max(args.envs) > MAX_ENVS:
        parser.error(f"--steps must be at most {MAX_STEPS - WARM_UP} and --envs at most {MAX_ENVS}")
    stamps = shared_stamps()
    install_stamps(stamps)
    options = {**our_game(args.game), **args.options}
    settings = "".join(f", {name}={value!r}" for name, value in args.options.items() if name != "game")
    print(f"GamePool sync step, {options['game']}{settings}, random actions, one worker per core ({MACHINE})")
    restart, play = restart_cost(options)
    print(
        f"a game restart: {1e6 * restart:,.0f} µs of CPU, as much as {restart / play:.1f} plays of {1e6 * play:.0f} µs"
    )
    for n_envs in args.envs:
        row = breakdown(options, n_envs, args.steps, stamps)
        wall = row["wall"]
        print(
            f"N={n_envs} ({row['workers']} workers): {1e6 * wall:,.0f} µs per step = "
            f"work {1e6 * row['work']:,.0f} ({row['work'] / wall:.0%}) + "
            f"waiting for the slowest worker {1e6 * row['waiting']:,.0f} ({row['waiting'] / wall:.0%}) + "
            f"between steps {1e6 * row['between']:,.0f} ({row['between'] / wall:.0%}); "
            f"{row['restart_share']:.0%} of the waiting in the {row['restart_steps']:.0%} of steps "
            f"where an episode started (a perfect split of those starts would save "
            f"{row['restart_share'] * row['waiting'] / wall:.1%}); "
            f"the same work alone {1e6 * row['alone']:,.0f} µs per step "
            f"(a worker's work in the pool: {row['work'] / row['alone'] - 1:+.0%})",
            flush=True,
        )


if __name__ == "__main__":
    main()
