"""What each speed mechanism of the pool earns: GamePool with it against GamePool without it, side by side.

    python benchmarks/mechanisms.py --mechanisms restored-restarts the-watch one-wake-up --envs 4 16 32 --rounds 6

Each round runs, for every N and mechanism, one process with the mechanism and one without (which goes first
alternates), each stepping a `GamePool` with the throughput benchmark's settings (Breakout, next-step autoreset, 30
NOOPs, episodes of a whole game, random actions, a worker per core) for `--seconds`. The pools start their workers
with "fork", so that a mechanism switched off in the measuring process is off in its workers too:

- ``restored-restarts``: `FIXED_RESTART_GAMES` emptied, so ALE emulates every restart;
- ``the-watch``: `WATCH_SECONDS` = 0, so a worker that has answered sleeps on its pipe at once;
- ``one-wake-up``: every whole-pool step the general way (`GamePool._step_each`: a command per worker, the parent
  woken by each answer), not one byte per worker and one wake-up by the last to finish.

It prints, per mechanism and N, both sides' median agent steps/s and the median of the per-round ratios
(with / without), their range and the rounds in which the mechanism was faster. The docs' Design page gives the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

MECHANISMS = ("restored-restarts", "the-watch", "one-wake-up")


def steps_per_second(switched_off: str | None, game: str, n_envs: int, seconds: float) -> float:
    """Agent steps/s of a GamePool of `n_envs` envs of `game` with the mechanism `switched_off` off (None: all on),
    after 20 warm-up steps."""
    from atari_game import GamePool, pool_worker
    from atari_game import game as game_module
    from atari_game.benchmark import our_game

    if switched_off == "restored-restarts":
        game_module.FIXED_RESTART_GAMES = frozenset()
    elif switched_off == "the-watch":
        pool_worker.WATCH_SECONDS = 0.0
    elif switched_off == "one-wake-up":
        GamePool._step_all = GamePool._step_each  # type: ignore[method-assign]
    with GamePool(n_envs, start_method="fork", **our_game(game)) as pool:
        actions = np.random.default_rng(0).integers(pool.single_action_space.n, size=(4000, n_envs))
        pool.reset(seed=0)
        for row in actions[:20]:
            pool.step(row)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            pool.step(actions[steps % len(actions)])
            steps += 1
        return n_envs * steps / (time.perf_counter() - start)


def run_side(*arguments: object) -> float:
    """`steps_per_second(*arguments)` in a new process, so that a mechanism switched off stays off there alone."""
    command = [sys.executable, __file__, "--child", json.dumps(arguments)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout.splitlines()[-1]))


def build_parser() -> argparse.ArgumentParser:
    from atari_game.benchmark import GAME, game_name
    from atari_game.cli import count

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mechanisms",
        nargs="+",
        choices=MECHANISMS,
        default=list(MECHANISMS),
        help=f"the mechanisms to switch off, one at a time (default: {' '.join(MECHANISMS)})",
    )
    parser.add_argument(
        "--envs", type=count, nargs="+", default=[4, 16, 32], help="numbers of envs N to measure (default: 4 16 32)"
    )
    parser.add_argument(
        "--rounds", type=count, default=6, help="rounds, each running both sides once (default: %(default)s)"
    )
    parser.add_argument(
        "--seconds", type=float, default=4.0, help="seconds of stepping per side per round (default: %(default)s)"
    )
    parser.add_argument(
        "--game", type=game_name, default=GAME, help="the game (`atari-game games` lists them) (default: %(default)s)"
    )
    return parser


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(steps_per_second(*json.loads(sys.argv[2]))))
        return
    from atari_game.benchmark import MACHINE

    args = build_parser().parse_args()
    print(f"GamePool with each mechanism against without it, {args.game}, a worker per core; {MACHINE}", flush=True)
    for n_envs in args.envs:
        for mechanism in args.mechanisms:
            rates: dict[str, list[float]] = {"with": [], "without": []}
            for round_number in range(args.rounds):
                for side in ("with", "without") if round_number % 2 == 0 else ("without", "with"):
                    switched_off = None if side == "with" else mechanism
                    rates[side].append(run_side(switched_off, args.game, n_envs, args.seconds))
            ratios = np.array(rates["with"]) / np.array(rates["without"])
            spread = f"{np.median(ratios):.3f} ({ratios.min():.3f}-{ratios.max():.3f})"
            print(
                f"{mechanism:17} N={n_envs:3}: with {np.median(rates['with']):6,.0f}, without "
                f"{np.median(rates['without']):6,.0f} agent steps/s; with / without {spread}, "
                f"faster in {int((ratios > 1).sum())}/{args.rounds}",
                flush=True,
            )


if __name__ == "__main__":
    main()
