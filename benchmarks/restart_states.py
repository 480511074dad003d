"""Which games restart to one and the same emulator state, so that a Game may restore it instead of emulating ALE's
reset (docs/design.md, "Restored restarts"; when to run ``python benchmarks/restart_states.py``: docs/contributing.md).
Three checks per game, samples, not proof; it prints the games that pass and writes them as common.py says.
"""

import argparse
import re
from typing import Any
from unittest import mock

import ale_py
import common
import numpy as np

from atari_game import Game, game, list_games
from atari_game.arguments import game_name
from atari_game.benchmark import bare_emulator
from atari_game.game import RAM_SIZE, resolve_game

AFTER_PLAY, PLAY_FRAMES = 50, 3000
RESETS, HISTORIES, PLAYS = 1000, 200, 3000  # restarts from random RAM (check 1), restores (2), agent steps (3)
HISTORY_FRAMES, FRAMES_AFTER = 400, 60
# Restarts at every life lost and at least every 100 or 500 plays; after 1-30 NOOPs, 1-2 (the frames right after the
# restart, where stale frame buffers would show) and none (the first observation is then the screen the reset ended
# on, which ALE's state does not hold).
OPTIONS = (
    {"noop_max": 30, "max_episode_frames": 2000},
    {"noop_max": 2, "max_episode_frames": 400},
    {"max_episode_frames": 400},
)
# The console generator's state in ALE's saved state: its length, then 624 numbers and its position, as text.
CONSOLE_GENERATOR = re.compile(rb"(?s).{4}(\d+ ){600,}\d+")
# Also left out: ALE's count of frames emulated (getFrameNumber; nothing in the emulation reads it), and the length
# of the console's part of the state, which the generator's text changes.
FRAME_COUNT, CONSOLE_LENGTH = slice(8, 12), slice(24, 28)  # (the episode's frame count follows it)


def restart_state(ale: ale_py.ALEInterface) -> bytes:
    """ALE's state, as restarts are compared: without the generators and ALE's frame count."""
    state = bytearray(ale.cloneState(include_rng=False).__getstate__())
    for counter in (FRAME_COUNT, CONSOLE_LENGTH):
        state[counter] = bytes(counter.stop - counter.start)
    return CONSOLE_GENERATOR.sub(b"", bytes(state))


def play_randomly(ale: ale_py.ALEInterface, frames: int, rng: np.random.Generator) -> None:
    """Up to `frames` frames of random actions of the game's minimal set, to a game over at most."""
    actions = ale.getMinimalActionSet()
    for _ in range(frames):
        ale.act(actions[rng.integers(len(actions))])
        if ale.game_over():
            return


def states_differ(name: str, resets: int) -> str | None:
    """How restarts of `name` reached different states (None: they never did)."""
    ale, rng = bare_emulator(resolve_game(name)), np.random.default_rng(0)
    ale.reset_game()
    first = restart_state(ale)
    for k in range(resets + AFTER_PLAY):
        if k < resets:  # RAM of any content: whatever a game before could have left there
            for index, value in enumerate(rng.integers(256, size=RAM_SIZE).tolist()):
                ale.setRAM(index, value)
        else:  # a game played on
            play_randomly(ale, int(rng.integers(PLAY_FRAMES)), rng)
        ale.reset_game()
        if restart_state(ale) != first:
            return f"restart {k + 1} reached another state {'from random RAM' if k < resets else 'after random play'}"
    return None


def histories_differ(name: str, histories: int) -> str | None:
    """Where the frames after a restored restart of `name` first depended on the game played before (None: never)."""
    one, other = bare_emulator(resolve_game(name)), bare_emulator(resolve_game(name))
    one.reset_game()
    restarted, rng = one.cloneState(include_rng=False), np.random.default_rng(1)
    actions = one.getMinimalActionSet()
    for history in range(histories):
        for ale in (one, other):  # each its own game
            play_randomly(ale, int(rng.integers(1, HISTORY_FRAMES)), rng)
            ale.restoreState(restarted)
        for frame, action in enumerate(rng.integers(len(actions), size=FRAMES_AFTER).tolist()):
            one.act(actions[action])
            other.act(actions[action])
            differ = int((one.getScreen() != other.getScreen()).sum())
            if differ:
                return f"history {history + 1}: {differ} pixels of frame {frame + 1} after the restart"
    return None


def plays_differ(name: str, plays: int, options: dict[str, Any]) -> str | None:
    """Where a restoring Game of `name` and `options` first differs from an emulating one (None: nowhere)."""
    # Restoring under the release installed, whether or not it is one of FIXED_RESTART_CHECKED_ON yet.
    restored = dict(FIXED_RESTART_GAMES=frozenset({resolve_game(name)}), FIXED_RESTART_CHECKED_ON=(ale_py.__version__,))
    with mock.patch.multiple(game, **restored):
        restoring = Game(game=name, seed=7, **options)
    with mock.patch.object(game, "FIXED_RESTART_GAMES", frozenset()):
        emulating = Game(game=name, seed=7, **options)
    restarts = 0
    for t, action in enumerate(np.random.default_rng(1).integers(restoring.n_actions, size=plays).tolist()):
        if t == 0:
            expected, got = emulating.reset(), restoring.reset()
        else:
            expected, reward, done, info = emulating.step(action)
            got, *restored = restoring.step(action)
            if [reward, done, info] != restored:
                return f"play {t}: reward, done, episode {reward}, {done}, {info} / {', '.join(map(str, restored))}"
            restarts += done
        if emulating.lives != restoring.lives or not np.array_equal(expected, got):
            return f"play {t}: {int((expected != got).sum())} pixels, lives {emulating.lives} / {restoring.lives}"
    return None if restarts else f"no restart in {plays} plays: nothing compared"


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    add = parser.add_argument
    games = list_games()
    add("--games", nargs="+", type=game_name, default=games, help=f"the games (default: all {len(games)})")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    found = {}
    for name in args.games:  # where the first of the three checks that it fails found a difference
        where = states_differ(name, RESETS) or histories_differ(name, HISTORIES)
        for options in OPTIONS:
            where = where or plays_differ(name, PLAYS, options)
        found[name] = where = where or "one state"
        print(f"{name}: {where}", flush=True)
    fixed = [resolve_game(name) for name, where in found.items() if where == "one state"]
    wrongly_listed = sorted((game.FIXED_RESTART_GAMES & set(map(resolve_game, args.games))) - set(fixed))
    print(
        f"ale-py {ale_py.__version__}, {RESETS} + {AFTER_PLAY} restarts, {HISTORIES} histories, "
        f"{PLAYS} plays of {len(OPTIONS)} options: {len(fixed)} of {len(args.games)} games restart to one "
        f"state: {', '.join(fixed) or 'none'}\n"
        f"in FIXED_RESTART_GAMES but not printed: {', '.join(wrongly_listed) or 'none'}; "
        f"FIXED_RESTART_CHECKED_ON: {', '.join(game.FIXED_RESTART_CHECKED_ON)}"
    )
    figures = {"games": found, "one_state": fixed, "restoring": len(fixed), "wrongly_listed": wrongly_listed}
    common.save(__file__, args, figures, argv)


if __name__ == "__main__":
    main()
