"""Which games restart to one and the same emulator state, so that a Game may restore that state instead of emulating
ALE's reset again?

    python benchmarks/restart_states.py [--resets 1000] [--histories 200] [--plays 3000] [--games Breakout Pong]

ALE's ``reset_game`` resets the console and then emulates about 70 frames (60 NOOP frames, two soft resets, the
ROM's starting actions): ~3.9 ms, as much CPU as 15 plays. In many games it always ends in the same state, and a
`Game` of one of `atari_game.game.FIXED_RESTART_GAMES` restores that state, saved at its first restart, instead
(~20 µs). Three things could make that inexact:

- what a reset reaches can depend on the console's own generator (not ALE's environment generator, which only
  sticky actions and Adventure's restarts read): a reset starts the RIOT's timer at 25 + a draw % 75, and
  cartridges with RAM of their own fill it with draws;
- and on the game before it: a reset does not clear the RIOT's 128 bytes of RAM (it resets the processor, the TIA,
  the timer and the cartridge's bank); a game's own start-up code may or may not, and may keep some (a high score);
- a restore leaves what ALE's state does not hold as the game before left it: the TIA's two frame buffers (a frame
  that does not draw every row shows rows of the one before the last) and, in ale-py 0.12.1, the TIA's flag of a
  frame cut short (ALE's fix #732 came after it).

For each game (its default mode and difficulty, no sticky actions) this checks all three, then the whole:

1. *states*: `--resets` restarts, each from RAM set to random bytes (any history a game could leave there; in 1,000
   restarts some of the timer's 75 start values goes undrawn with probability 1e-4), then `AFTER_PLAY` restarts each
   after up to `PLAY_FRAMES` frames of random play (what a game writes to keep across restarts, as its high score):
   every restart must reach one state (ALE's ``cloneState`` without the environment generator, with the console's
   generator and ALE's count of frames left out: nothing but a reset reads the one, nothing at all the other);
2. *histories*: two emulators play `--histories` times different random games (up to `HISTORY_FRAMES` frames, to a
   game over at most), restore the state a restart reaches, and play the same `FRAMES_AFTER` random frames: every
   screen must be equal;
3. *plays*: a Game that restores its saved state against one that emulates every restart, with the same seed and
   random actions, for `--plays` plays with each of `OPTIONS`: every observation, reward, end of episode, episode
   statistics and lives count must agree.

It prints the games that pass, under whatever ale-py release is installed (restoring as if the release were checked).
`FIXED_RESTART_GAMES` must name only games printed; run it again with each new ale-py release, then add the release
to `atari_game.game.FIXED_RESTART_CHECKED_ON` (Games restore their restarts only under the releases listed there).
It rests on samples: a game could still keep something across restarts that only a state random play never reaches
sets.
"""

from __future__ import annotations

import argparse
import re
from typing import Any
from unittest import mock

import ale_py
import numpy as np

from atari_game import Game, game, list_games
from atari_game.benchmark import bare_emulator
from atari_game.cli import count, game_name
from atari_game.game import RAM_SIZE, resolve_game

AFTER_PLAY, PLAY_FRAMES = 50, 3000
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
            return f"restart {k + 1} reached another state " + (
                "from random RAM" if k < resets else "after random play"
            )
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
    """Where a Game of `name` and `options` restoring its restarts first differs from one emulating them (None:
    nowhere)."""
    # Restoring under the release installed, whether or not it is one of FIXED_RESTART_CHECKED_ON yet.
    with mock.patch.multiple(
        game, FIXED_RESTART_GAMES=frozenset({resolve_game(name)}), FIXED_RESTART_CHECKED_ON=(ale_py.__version__,)
    ):
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
    if restarts == 0:
        return f"no restart in {plays} plays: nothing compared"
    return None


def first_difference(name: str, resets: int, histories: int, plays: int) -> str | None:
    """The first of the three checks that `name` fails, and where (None: it passes them all)."""
    where = states_differ(name, resets) or histories_differ(name, histories)
    for options in OPTIONS:
        where = where or plays_differ(name, plays, options)
    return where


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--resets",
        type=count,
        default=1000,
        help="restarts from random RAM per game, check 1 (the timer's 75 values) (default: %(default)s)",
    )
    parser.add_argument(
        "--histories",
        type=count,
        default=200,
        help="restores after two different games, check 2 (default: %(default)s)",
    )
    parser.add_argument(
        "--plays", type=count, default=3000, help="agent steps with each of OPTIONS, check 3 (default: %(default)s)"
    )
    parser.add_argument(
        "--games",
        nargs="+",
        type=game_name,
        default=list_games(),
        help=f"the games to check (default: all {len(list_games())})",
    )
    return parser


def main() -> None:
    args = build_parser().parse_args()
    fixed = []
    for name in args.games:
        where = first_difference(name, args.resets, args.histories, args.plays)
        print(f"{name}: {where or 'one state'}", flush=True)
        if not where:
            fixed.append(resolve_game(name))
    wrongly_listed = sorted((game.FIXED_RESTART_GAMES & set(map(resolve_game, args.games))) - set(fixed))
    print(
        f"ale-py {ale_py.__version__}, {args.resets} + {AFTER_PLAY} restarts, {args.histories} histories, "
        f"{args.plays} plays of {len(OPTIONS)} options: {len(fixed)} of {len(args.games)} games restart to one "
        f"state: {', '.join(fixed) or 'none'}\n"
        f"in FIXED_RESTART_GAMES but not printed: {', '.join(wrongly_listed) or 'none'}; "
        f"FIXED_RESTART_CHECKED_ON: {', '.join(game.FIXED_RESTART_CHECKED_ON)}"
    )


if __name__ == "__main__":
    main()
