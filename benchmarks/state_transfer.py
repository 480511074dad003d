"""Can an env move between worker processes, exactly and cheaply? ALE's state, cloned, pickled and restored.

    python benchmarks/state_transfer.py
    python benchmarks/state_transfer.py --games Breakout Seaquest --restarts 5

A pool whose envs could move between workers could share its env steps out like the C++ pools' queues do
(see the README's Speed section). This checks the two things that needs, per game:

- **Exact.** Play random actions to the end of a game, then restart it two ways: in place (``reset_game`` and
  7 NOOPs), and in a second emulator that restored the first's pickled state, whose post-restart state a third
  emulator restores in turn. The third and the first then play the same 300 random frames: their rewards, screens,
  RAM, frame counts and lives must be equal. A restart is the hard case: some games (Seaquest) keep RAM across
  ``reset_game``, so a restart depends on the state it starts from.
- **Cheap.** CPU time (best of 5 rounds of 200) of an env step (4 frames and the grayscale screen), of cloning
  and pickling the state, and of unpickling and restoring it: the move's cost in env steps.
"""

from __future__ import annotations

import argparse
import pickle
import time

import ale_py
import numpy as np

from atari_game.benchmark import bare_emulator
from atari_game.game import GameOptions


def emulator(game: str) -> ale_py.ALEInterface:
    """An emulator of `game` (a name as `Game` takes it) with the benchmark's settings: no sticky actions."""
    return bare_emulator(GameOptions(game=game).game)


def same(a: ale_py.ALEInterface, b: ale_py.ALEInterface) -> bool:
    """Whether two emulators show the same screen and hold the same RAM, frame counts and lives."""
    counts = [(ale.getFrameNumber(), ale.getEpisodeFrameNumber(), ale.lives()) for ale in (a, b)]
    return (
        np.array_equal(a.getScreenRGB(), b.getScreenRGB())
        and np.array_equal(a.getRAM(), b.getRAM())
        and (counts[0] == counts[1])
    )


def exact(game: str, restarts: int) -> bool:
    """Whether restarts done in a second emulator, moved back into a third, play on exactly as in place."""
    here, helper = emulator(game), emulator(game)
    actions, rng = here.getMinimalActionSet(), np.random.default_rng(0)
    for _ in range(restarts):
        while not here.game_over():
            here.act(actions[rng.integers(len(actions))])
        helper.restoreState(pickle.loads(pickle.dumps(here.cloneState())))
        for ale in (here, helper):
            ale.reset_game()
            for _ in range(7):
                ale.act(ale_py.Action.NOOP)
        there = emulator(game)
        there.restoreState(pickle.loads(pickle.dumps(helper.cloneState())))
        frames = [actions[rng.integers(len(actions))] for _ in range(300)]
        if sum(here.act(a) for a in frames) != sum(there.act(a) for a in frames) or not same(here, there):
            return False
    return True


def costs(game: str, rounds: int = 5, repeats: int = 200) -> dict[str, float]:
    """CPU µs of an env step, of clone + pickle and of unpickle + restore (best of `rounds`)."""
    ale, other = emulator(game), emulator(game)
    actions, rng, screen = ale.getMinimalActionSet(), np.random.default_rng(0), np.empty((210, 160), np.uint8)
    best = dict.fromkeys(("step", "clone", "restore"), float("inf"))
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(repeats):
            action = actions[rng.integers(len(actions))]
            for _ in range(4):
                ale.act(action)
            ale.getScreenGrayscale(screen)
            if ale.game_over():
                ale.reset_game()
        stepped = time.process_time()
        for _ in range(repeats):
            blob = pickle.dumps(ale.cloneState())
        cloned = time.process_time()
        for _ in range(repeats):
            other.restoreState(pickle.loads(blob))
        restored = time.process_time()
        for name, seconds in (("step", stepped - start), ("clone", cloned - stepped), ("restore", restored - cloned)):
            best[name] = min(best[name], seconds / repeats * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", default=["Breakout", "Seaquest", "Pong", "MsPacman", "SpaceInvaders"])
    parser.add_argument("--restarts", type=int, default=5)
    args = parser.parse_args()
    for game in args.games:
        cost = costs(game)
        step = cost["step"]
        print(
            f"{game}: {'exact' if exact(game, args.restarts) else 'NOT exact'} over {args.restarts} restarts; "
            f"env step {step:.0f} µs, clone + pickle {cost['clone']:.0f} µs ({cost['clone'] / step:.2f} steps), "
            f"unpickle + restore {cost['restore']:.0f} µs ({cost['restore'] / step:.2f} steps)",
            flush=True,
        )


if __name__ == "__main__":
    main()
