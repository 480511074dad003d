"""The `atari-game` command (also `python -m atari_game`): games, play, bench, train, evaluate, report.

atari-game games                                        # the bundled games, their actions
atari-game play Breakout --record breakout.mp4          # a random agent plays one whole game
atari-game play Breakout --checkpoint runs/Breakout-1/checkpoint.pt --record agent.mp4
atari-game bench --envs 16                              # GamePool against the other Atari vector envs
atari-game train --game Pong --total-frames 2000000     # the PPO example (atari-game train --help)
atari-game train --algo dqn --game Pong                 # the DQN example (atari-game train --algo dqn --help)
atari-game evaluate runs/Pong-1/checkpoint.pt           # 30 whole games under the run's protocol: mean, SE, HNS
atari-game report runs/*/ --out report                  # IQM, median, mean of HNS with intervals, Atari-5, profiles
"""

from __future__ import annotations

import argparse
import decimal
import importlib
import os
import sys
from pathlib import Path

import numpy as np

from atari_game.game import Game, action_meanings, list_games, resolve_game
from atari_game.play import check_video_path, play_game
from atari_game.protocols import get_protocol

TRAINERS = ("ppo", "dqn")  # atari_game.ppo and atari_game.dqn
TRAIN_EXTRA = 'pip install torch==2.13.0 && pip install "atari_game[train]"'
# Counts are written in every way Python and papers write them.
INTEGER_EXAMPLES = "1000000, 1_000_000 or 1e6"


def integer(text: str) -> int:
    """An argparse type: an exact integer, written as one (``10000000``, ``10_000_000``, ``-1``) or as a number
    whose value is whole (``1e7``, ``2.5e6``, ``1000.0``); ``0.5``, ``1e6.5`` and ``nan`` are usage errors."""
    try:
        # Decimal, not float: 2.5e6 is exact, and so is an integer of more digits than a float holds.
        value = decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise argparse.ArgumentTypeError(f"expected an integer ({INTEGER_EXAMPLES}), got {text!r}") from None
    if not value.is_finite() or value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"expected a whole number ({INTEGER_EXAMPLES}), got {text!r}")
    if value.adjusted() > 18:  # 1e999999999 would take int() minutes to build
        raise argparse.ArgumentTypeError(f"{text!r} is too large: at most 1e18")
    return int(value)


def count(text: str) -> int:
    """An argparse type: an `integer` >= 1 (a number of envs, steps, rounds, games)."""
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def seed(text: str) -> int:
    """An argparse type: a game seed, an `integer` >= 0."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"the seed must be an integer >= 0, got {text!r}")
    return value


def game_name(name: str) -> str:
    """An argparse type: a bundled game, returned as given, or a usage error naming the closest games and the
    command that lists them all."""
    try:
        resolve_game(name)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).replace("atari_game.list_games()", "`atari-game games`")) from None
    return name


def protocol_name(name: str) -> str:
    """An argparse type: a protocol of `atari_game.protocols` by name, or ``none`` (returned as "")."""
    if name == "none":
        return ""
    try:
        return get_protocol(name).name
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error}, or none") from None


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


def trainer_parser() -> argparse.ArgumentParser:
    """`atari-game train`'s own flag, --algo; every other flag is the chosen trainer's (its `Config`'s fields)."""
    usage = f"atari-game train [--algo {{{','.join(TRAINERS)}}}] [the trainer's flags, below with --help]"
    parser = argparse.ArgumentParser(prog="atari-game train", usage=usage, add_help=False, allow_abbrev=False)
    trainers = " or ".join(f"atari_game/{name}.py" for name in TRAINERS)
    parser.add_argument("--algo", choices=TRAINERS, default="ppo", help=f"the trainer: {trainers} (default: ppo)")
    return parser


def train(arguments: list[str]) -> None:
    chooser = trainer_parser()
    choice, options = chooser.parse_known_args(arguments)
    try:
        trainer = importlib.import_module(f"atari_game.{choice.algo}")
    except ImportError as error:
        missing_extra("train", error, TRAIN_EXTRA)
    if "-h" in options or "--help" in options:
        print(chooser.format_help())
    trainer.main(options, prog=f"atari-game train --algo {choice.algo}")


def evaluate(args: argparse.Namespace) -> None:
    try:
        from atari_game.evaluation import evaluate_checkpoint
    except ImportError as error:
        missing_extra("evaluate", error, TRAIN_EXTRA)
    for checkpoint in args.checkpoints:
        try:
            result, note = evaluate_checkpoint(checkpoint, args.protocol or None, args.episodes, args.seed, args.envs)
        except ValueError as error:
            args.command_parser.error(str(error))
        if note:
            print(f"note: {note}")
        name = f"evaluation-{result.protocol}.json"
        path = result.save(
            args.out / f"{Path(checkpoint).parent.name}-{name}" if args.out else checkpoint.parent / name
        )
        print(f"{result.summary()}; written to {path} and {path.with_suffix('.csv')}", flush=True)


def report(args: argparse.Namespace) -> None:
    from atari_game.report import format_summary, write_report

    try:
        summary = write_report(args.inputs, args.out, resamples=args.resamples, seed=args.seed)
    except ImportError as error:
        missing_extra("report", error, 'pip install "atari_game[report]"')
    except (ValueError, FileNotFoundError) as error:
        args.command_parser.error(str(error))
    print(format_summary(summary))
    print(f"written to {args.out}: report.md, report.json, performance_profiles.png")


# These commands have their own options (and --help): everything after the command name goes to them.
FORWARDED = {"bench": (bench, "the throughput benchmark"), "train": (train, "train the PPO (default) or DQN example")}


def build_parser() -> argparse.ArgumentParser:
    """The `atari-game` command's parser: its commands, and the flags of `games` and `play` (`bench` and `train`
    parse their own: `atari_game.benchmark.build_parser`, `trainer_parser` and the trainers' `Config`)."""
    parser = argparse.ArgumentParser(prog="atari-game", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do (`atari-game COMMAND --help`: its flags)"
    )
    games_parser = commands.add_parser("games", help="list the bundled games with their actions")
    play_parser = commands.add_parser("play", help="play one whole game (random or trained agent), optionally recorded")
    play_parser.add_argument(
        "game", type=game_name, help="the game, e.g. Breakout, Pong, MsPacman (`atari-game games` lists them)"
    )
    play_parser.add_argument(
        "--checkpoint",
        type=checkpoint_file,
        help="a checkpoint.pt of `atari-game train` whose agent plays (default: none: a random agent)",
    )
    play_parser.add_argument(
        "--record", type=mp4_file, metavar="OUT.mp4", help="write the game as a colour video (default: none)"
    )
    play_parser.add_argument(
        "--seed", type=seed, default=0, help="the game's seed, an integer >= 0 (default: %(default)s)"
    )
    evaluate_parser = commands.add_parser(
        "evaluate", help="score trained agents: whole games under a protocol, mean, standard error and HNS"
    )
    evaluate_parser.add_argument(
        "checkpoints",
        nargs="+",
        type=checkpoint_file,
        metavar="CHECKPOINT",
        help="checkpoint.pt files of `atari-game train`",
    )
    evaluate_parser.add_argument(
        "--episodes", type=count, default=30, help="whole games per checkpoint (default: %(default)s)"
    )
    evaluate_parser.add_argument(
        "--protocol",
        type=protocol_name,
        default=None,
        help="the protocol to score under: machado or nature (default: the one the run trained under)",
    )
    evaluate_parser.add_argument(
        "--seed",
        type=seed,
        default=0,
        help="env i is seeded seed + i; the same seed, the same games (default: %(default)s)",
    )
    evaluate_parser.add_argument(
        "--envs", type=count, default=None, help="games played at once (default: the smaller of --episodes and 8)"
    )
    evaluate_parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where the JSON and CSV go (default: beside each checkpoint, evaluation-PROTOCOL.json)",
    )
    report_parser = commands.add_parser(
        "report", help="aggregate scores across games: IQM, median, mean of HNS with confidence intervals, Atari-5"
    )
    report_parser.add_argument(
        "inputs",
        nargs="+",
        type=Path,
        metavar="INPUT",
        help="run directories, evaluation JSONs of `atari-game evaluate`, or CSVs of algorithm,game,seed,score rows",
    )
    report_parser.add_argument(
        "--out",
        type=Path,
        default=Path("report"),
        help="the directory it writes report.md, report.json and performance_profiles.png into (default: %(default)s)",
    )
    report_parser.add_argument(
        "--resamples", type=count, default=10_000, help="bootstrap resamples per interval (default: %(default)s)"
    )
    report_parser.add_argument("--seed", type=seed, default=0, help="the bootstrap's seed (default: %(default)s)")
    # Each command's parser, for the usage error of a flag it does not know (see main).
    for command_parser in (games_parser, play_parser, evaluate_parser, report_parser):
        command_parser.set_defaults(command_parser=command_parser)
    for name, (_, about) in FORWARDED.items():
        commands.add_parser(name, help=f"{about} (see: atari-game {name} --help)")
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in FORWARDED:
        return FORWARDED[argv[0]][0](argv[1:])
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # argparse reports a command's unknown flags with the top-level usage: report them with the command's
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    {"games": lambda _: games(), "play": play, "evaluate": evaluate, "report": report}[args.command](args)


if __name__ == "__main__":
    main()
