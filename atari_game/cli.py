"""The `atari-game` command (also `python -m atari_game`): games, play, bench, train.

atari-game games                                        # the bundled games, their actions
atari-game play Breakout --record breakout.mp4          # a random agent plays one whole game
atari-game play Breakout --checkpoint runs/Breakout-1/checkpoint.pt --record agent.mp4
atari-game bench --envs 16                              # GamePool against the other Atari vector envs
atari-game train --game Pong --total-frames 2000000     # the PPO example (atari-game train --help)
atari-game train --algo dqn --game Pong                 # the DQN example (atari-game train --algo dqn --help)
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

import numpy as np

from atari_game.game import Game, action_meanings, list_games, resolve_game
from atari_game.play import check_video_path, play_game

TRAINERS = ("ppo", "dqn")  # atari_game.ppo and atari_game.dqn
TRAIN_EXTRA = 'pip install torch==2.13.0 && pip install "atari_game[train]"'


def game_name(name: str) -> str:
    """An argparse type: a bundled game, or a usage error naming the closest ones."""
    try:
        resolve_game(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return name


def seed(text: str) -> int:
    """An argparse type: a game seed, an integer >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"the seed must be an integer >= 0, got {text!r}")
    return int(text)


def checkpoint_file(text: str) -> Path:
    """An argparse type: a file that exists (a checkpoint.pt)."""
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no such checkpoint file: {text}")
    return Path(text)


def mp4_file(text: str) -> Path:
    """An argparse type: the path of an .mp4 video."""
    try:
        check_video_path(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return Path(text)


def missing_extra(command: str, error: ImportError, install: str) -> None:
    # An optional dependency is not installed: say which, and how to get it, instead of a traceback.
    sys.exit(f"atari-game {command} needs {error.name!r}, which is not installed: {install}")


def games() -> None:
    try:
        for name in list_games():
            meanings = action_meanings(name)
            print(f"{name:18} {len(meanings):2} actions: {' '.join(meanings)}", flush=True)
    except BrokenPipeError:
        # Piped into `head`, which has read enough: stop quietly, as command-line tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def play(args: argparse.Namespace) -> None:
    if args.checkpoint:
        try:
            from atari_game.training import trained_policy
        except ImportError as error:
            missing_extra("play --checkpoint", error, TRAIN_EXTRA)
        policy, options = trained_policy(args.checkpoint, args.game)
    else:
        rng = np.random.default_rng(args.seed)
        n_actions = len(action_meanings(args.game))
        # A whole game, all its lives: the random agent presses FIRE itself when it draws it.
        options = {"game": args.game, "fire_reset": False, "life_loss": "ignore"}
        policy = lambda obs: int(rng.integers(n_actions))  # noqa: E731
    # The score is the whole game's, unclipped, whatever the options: play_game reads it from the Game's statistics.
    game = Game(seed=args.seed, **options)
    score, length = play_game(game, policy, args.record)
    agent = "trained agent" if args.checkpoint else "random agent"
    recorded = f"; video: {args.record}" if args.record else ""
    print(f"{game.name}, {agent}: one game scored {score:g} in {length} steps{recorded}")


def bench(arguments: list[str]) -> None:
    from atari_game.benchmark import main as run_benchmark

    run_benchmark(arguments)


def train(arguments: list[str]) -> None:
    # --algo picks the trainer (PPO unless told); every other option is the trainer's own.
    chooser = argparse.ArgumentParser(prog="atari-game train", add_help=False, allow_abbrev=False)
    chooser.add_argument("--algo", choices=TRAINERS, default="ppo")
    choice, options = chooser.parse_known_args(arguments)
    try:
        trainer = importlib.import_module(f"atari_game.{choice.algo}")
    except ImportError as error:
        missing_extra("train", error, TRAIN_EXTRA)
    if "-h" in options or "--help" in options:
        print(f"atari-game train [--algo {{{','.join(TRAINERS)}}}] (default: ppo), then {choice.algo}'s options:\n")
    trainer.main(options, prog=f"atari-game train --algo {choice.algo}")


# These commands have their own options (and --help): everything after the command name goes to them.
FORWARDED = {"bench": (bench, "the throughput benchmark"), "train": (train, "train the PPO (default) or DQN example")}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in FORWARDED:
        return FORWARDED[argv[0]][0](argv[1:])

    parser = argparse.ArgumentParser(prog="atari-game", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("games", help="list the bundled games with their actions")
    play_parser = commands.add_parser("play", help="play one whole game (random or trained agent), optionally recorded")
    play_parser.add_argument("game", type=game_name, help="e.g. Breakout, Pong, MsPacman")
    play_parser.add_argument(
        "--checkpoint", type=checkpoint_file, help="a checkpoint.pt from `atari-game train` (else: random)"
    )
    play_parser.add_argument("--record", type=mp4_file, metavar="OUT.mp4", help="write the game as a colour video")
    play_parser.add_argument("--seed", type=seed, default=0, help="the game's seed, an integer >= 0 (default 0)")
    for name, (_, about) in FORWARDED.items():
        commands.add_parser(name, help=f"{about} (see: atari-game {name} --help)")
    args = parser.parse_args(argv)
    if args.command == "games":
        games()
    else:
        play(args)


if __name__ == "__main__":
    main()
