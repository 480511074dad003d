"""Run N games through tutorial-style Workers with random actions; print throughput and episode statistics.

python examples/demo.py --game Breakout --workers 8 --steps 1000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from atari_game import Worker, action_meanings, list_games
from atari_game.arguments import count, game_name, seed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    games = f"the game, one of {len(list_games())} (`atari-game games` lists them)"
    parser.add_argument("--game", default="Breakout", type=game_name, help=f"{games} (default: Breakout)")
    parser.add_argument(
        "--workers", type=count, default=8, help="games, one Worker process each (default: %(default)s)"
    )
    parser.add_argument(
        "--steps", type=count, default=1000, help="agent steps per game, 4 frames each (default: %(default)s)"
    )
    parser.add_argument(
        "--seed", type=seed, default=0, help="game k's seed is seed + k, an integer >= 0 (default: %(default)s)"
    )
    return parser


def main() -> None:
    args = build_parser().parse_args()

    # The tutorial's trainer setup: one Worker per game, seeded apart, reset before the first step.
    # FIRE starts the games that wait for it (Breakout); games without FIRE (MsPacman) need none.
    fire_reset = "FIRE" in action_meanings(args.game)
    workers = [Worker(args.seed + i, game=args.game, fire_reset=fire_reset, noop_max=30) for i in range(args.workers)]
    try:
        for worker in workers:
            worker.child.send(("reset", None))
        for worker in workers:
            worker.recv()
        n_actions = len(action_meanings(args.game))
        rng = np.random.default_rng(args.seed)
        episodes = []

        start = time.perf_counter()
        for _ in range(args.steps):
            # Send every game its action first, then collect: the games step in parallel.
            for worker in workers:
                worker.send("step", int(rng.integers(n_actions)))
            for worker in workers:
                _, _, _, episode_info = worker.recv()
                if episode_info is not None:
                    episodes.append(episode_info)
        seconds = time.perf_counter() - start
    finally:
        for worker in workers:
            worker.close()

    steps = args.steps * args.workers
    print(f"{args.game}: {args.workers} workers x {args.steps} steps = {steps:,} agent steps in {seconds:.1f} s")
    print(f"throughput: {steps / seconds:,.0f} agent steps/s = {4 * steps / seconds:,.0f} emulator frames/s")
    if episodes:
        rewards = [episode["reward"] for episode in episodes]
        lengths = [episode["length"] for episode in episodes]
        print(
            f"episodes (one life each): {len(episodes)}, reward mean {np.mean(rewards):.2f} "
            f"(min {min(rewards):g}, max {max(rewards):g}), length mean {np.mean(lengths):.1f} steps"
        )


if __name__ == "__main__":
    main()
