"""Which games play on exactly after their state moves to another emulator and back, as a pool's loans move them?

    python benchmarks/moved_games.py --plays 2000

A lending pool (`atari_game.lending`) plays an env on a spare `Game` of the borrowing worker: its `GameState` goes
there, one play happens, and the state comes back. That is exact only if ALE's saved state holds everything the
emulator's next frames depend on. For every game bundled with ale-py this plays one Game that never moves against
one whose every other play happens on a spare Game of another seed, with the same seed, options and random actions
(next-step autoreset, as a lending pool plays), and prints the games whose observation, reward, end of episode or
lives ever differ, and where first. `atari_game.lending.UNMOVABLE_GAMES` must name every game printed (their envs
are never lent); run it again with each new ale-py release. ``--without-rng`` moves ALE's state without its
environment generator (cloneState(include_rng=False)), to see where that cheaper move would be exact.
"""

from __future__ import annotations

import argparse

import ale_py
import numpy as np

from atari_game import Game, list_games
from atari_game.game import resolve_game
from atari_game.lending import UNMOVABLE_GAMES

OPTIONS = {"noop_max": 30, "max_episode_frames": 2000}  # NOOP starts, and a restart at least every 500 plays


def first_difference(name: str, plays: int, with_rng: bool) -> str | None:
    """Where a game of `name` moved out for every other play first differs from one left in place (None: nowhere)."""
    in_place, moved, spare = (Game(game=name, seed=seed, **OPTIONS) for seed in (7, 7, 99))
    for game in (in_place, moved, spare):
        game.reset()
    expected, got = np.zeros((2, *in_place.observation_shape), np.uint8)
    for t, action in enumerate(np.random.default_rng(1).integers(in_place.n_actions, size=plays).tolist()):
        for game in (in_place, moved):
            if game.next_episode_due:
                game.start_next_episode()
        reference = in_place.play(action, expected, start_next=False)
        if t % 2:
            spare.set_state(moved.get_state(with_rng=with_rng))
            result = spare.play(action, got, start_next=False)
            moved.set_state(spare.get_state(with_rng=with_rng))
        else:
            result = moved.play(action, got, start_next=False)
        if result != reference or in_place.lives != moved.lives or not np.array_equal(expected, got):
            return f"play {t}: {int((expected != got).sum())} pixels, reward {reference[0]} / {result[0]}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plays", type=int, default=2000)
    parser.add_argument("--games", nargs="+", default=list_games())
    parser.add_argument("--without-rng", action="store_true", help="move ALE's state without its generator")
    args = parser.parse_args()
    differing = []
    for name in args.games:
        where = first_difference(name, args.plays, with_rng=not args.without_rng)
        if where:
            differing.append(resolve_game(name))
            print(f"{name}: differs from {where}", flush=True)
    missing = sorted(set(differing) - UNMOVABLE_GAMES) or "none"
    how = "without" if args.without_rng else "with"
    print(
        f"ale-py {ale_py.__version__}, {args.plays} plays, state moved {how} ALE's generator: "
        f"{len(differing)} of {len(args.games)} games differ; not in UNMOVABLE_GAMES: {missing}"
    )


if __name__ == "__main__":
    main()
