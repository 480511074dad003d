"""The `atari-game` command (also `python -m atari_game`): games, play, evaluate, report, export, bench, train.

The command-line guide (docs/guides/cli.md) shows each command at work.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

import atari_game
from atari_game import benchmark
from atari_game.arguments import (
    add_old_spelling,
    checkpoint_file,
    count,
    game_name,
    label,
    mp4_file,
    scoring_protocol,
    seed,
)
from atari_game.evaluation import evaluate_checkpoint
from atari_game.extras import install_command
from atari_game.game import Game, action_meanings, list_games
from atari_game.play import play_game
from atari_game.report import PROFILES, format_summary, write_report


def missing_extra(command: str, error: ImportError, extra: str) -> None:
    # An optional dependency is not installed: say which, and how to get it, instead of a traceback.
    sys.exit(f"atari-game {command} needs {error.name!r}, which is not installed: {install_command(extra)}")


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
            from atari_game.algorithms import trained_policy
        except ImportError as error:
            missing_extra("play --checkpoint", error, "train")
        try:
            policy, options, acting = trained_policy(args.checkpoint, args.game)
        except ValueError as error:  # no checkpoint, or another game's: a usage error, as evaluate's
            args.command_parser.error(str(error))
    else:
        rng = np.random.default_rng(args.seed)
        n_actions = len(action_meanings(args.game))
        # A whole game, all its lives: the random agent presses FIRE itself when it draws it.
        options = {"game": args.game, "fire_reset": False, "life_loss": "ignore"}
        policy = lambda obs: int(rng.integers(n_actions))  # noqa: E731
    # The score is the whole game's, unclipped, whatever the options: play_game reads it from the Game's statistics.
    game = Game(seed=args.seed, **options)
    try:
        score, length = play_game(game, policy, args.record)
    except OSError as error:  # a video that cannot be written: one line, not a traceback
        raise SystemExit(f"atari-game play: {error}") from None
    agent = (f"trained agent ({acting})" if acting else "trained agent") if args.checkpoint else "random agent"
    recorded = f"; video: {args.record}" if args.record else ""
    print(f"{game.name}, {agent}: one game scored {score:g} in {length} steps{recorded}")


def trainer_parser() -> argparse.ArgumentParser:
    """`atari-game train`'s own flag, --algorithm, choosing among the registry's trainers (the first the default);
    every other flag is the chosen trainer's (its `Config`'s fields). --algo, its spelling until 0.2, is taken with a
    warning. (It imports the trainers, and so torch: the ``train`` extra.)"""
    from atari_game.algorithms import ALGORITHMS

    names = list(ALGORITHMS)
    usage = f"atari-game train [--algorithm {{{','.join(names)}}}] [the trainer's flags, below with --help]"
    parser = argparse.ArgumentParser(prog="atari-game train", usage=usage, add_help=False, allow_abbrev=False)
    modules = [f"atari_game/{name}.py" for name in names]
    trainers = f"{', '.join(modules[:-1])} or {modules[-1]}" if len(modules) > 1 else modules[0]
    parser.add_argument(
        "--algorithm", choices=names, default=names[0], help=f"the trainer: {trainers} (default: {names[0]})"
    )
    add_old_spelling(parser, "--algo", "--algorithm")
    return parser


def train(arguments: list[str]) -> None:
    try:
        from atari_game.algorithms import main

        chooser = trainer_parser()
    except ImportError as error:
        missing_extra("train", error, "train")
    choice, options = chooser.parse_known_args(arguments)
    if "-h" in options or "--help" in options:
        print(chooser.format_help())
    main(choice.algorithm, options, prog=f"atari-game train --algorithm {choice.algorithm}")


def evaluate(args: argparse.Namespace) -> None:
    # Refused before any checkpoint loads or game is played.
    if args.num_envs is not None and args.num_envs > args.episodes:
        args.command_parser.error(f"argument --num-envs: at most --episodes ({args.episodes}), got {args.num_envs}")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        args.command_parser.error(f"argument --out: {args.out} is a file; name a folder for the evaluations")
    for checkpoint in args.checkpoints:
        try:
            result, note = evaluate_checkpoint(
                checkpoint, args.protocol, args.episodes, args.seed, args.num_envs, args.algorithm
            )
        except ImportError as error:  # torch, which it imports to load the checkpoint
            missing_extra("evaluate", error, "train")
        except ValueError as error:
            args.command_parser.error(str(error))
        if note:
            print(f"note: {note}")
        name = f"evaluation-{result.protocol}.json"
        if checkpoint.stem != "checkpoint":  # two checkpoints of one run keep an evaluation each
            name = f"{checkpoint.stem}-{name}"
        # RUN is the checkpoint's folder even when it is named from there ("checkpoint.pt": a folder ".", no name).
        path = args.out / f"{checkpoint.absolute().parent.name}-{name}" if args.out else checkpoint.parent / name
        replaced = " (replacing the evaluation there before)" if path.exists() else ""
        result.save(path)
        print(f"{result.summary()}; written to {path} and {path.with_suffix('.csv')}{replaced}", flush=True)


def report(args: argparse.Namespace) -> None:
    # What the report warns of (no plot without matplotlib, an input's old spelling) is a line for its user each.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            summary = write_report(args.inputs, args.out, resamples=args.resamples, seed=args.seed)
        except (ValueError, OSError) as error:  # bad inputs; a folder that cannot be read or written
            args.command_parser.error(str(error))
    for warning in caught:
        print(f"note: {warning.message}", file=sys.stderr)
    print(format_summary(summary))
    plot = f", {PROFILES}" if (args.out / PROFILES).is_file() else ""
    print(f"written to {args.out}: report.md, report.json{plot}")


def export(args: argparse.Namespace) -> None:
    try:
        from atari_game.algorithms import export_agent
        from atari_game.checkpoints import load_checkpoint
    except ImportError as error:  # torch, to read and write the weights
        missing_extra("export", error, "train")
    # Refused before the checkpoint loads: an OUT that would replace it, or in no folder (torch's error is obscure).
    if args.out.resolve() == args.checkpoint.resolve():
        args.command_parser.error(f"argument OUT: {args.out} is the checkpoint itself; name another file")
    if not args.out.parent.is_dir():
        args.command_parser.error(f"argument OUT: no folder {args.out.parent} to write {args.out.name} into")
    try:
        path = export_agent(args.checkpoint, args.out)
    except ValueError as error:
        args.command_parser.error(str(error))
    except OSError as error:  # a folder that cannot be written
        args.command_parser.error(f"argument OUT: cannot write {args.out}: {error.strerror or error}")
    game = load_checkpoint(path)["config"]["game"]
    print(
        f"written to {path} ({path.stat().st_size / 1e6:.1f} MB): atari-game evaluate {path}, or watch it with "
        f"atari-game play {game} --checkpoint {path}"
    )


# These commands have their own options (and --help): everything after the command name goes to them.
FORWARDED: dict[str, tuple[Callable[[list[str]], None], str]] = {
    "bench": (benchmark.main, "the throughput benchmark"),
    "train": (train, "train PPO (default), DQN or IQN"),
}


def build_parser() -> argparse.ArgumentParser:
    """The `atari-game` command's parser: its commands, and the flags of `games` and `play` (`bench` and `train`
    parse their own: `atari_game.benchmark.build_parser`, `trainer_parser` and the trainers' `Config`)."""
    parser = argparse.ArgumentParser(prog="atari-game", description=__doc__.splitlines()[0])
    versions = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in ("ale-py", "gymnasium", "numpy"))
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {atari_game.__version__} ({versions}, Python {sys.version.split()[0]})",
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do (`atari-game COMMAND --help`: its flags)"
    )

    def command(name: str, about: str) -> argparse.ArgumentParser:
        """A command's parser: `about` in the list of commands, and atop its own --help."""
        parser = commands.add_parser(name, help=about, description=f"{about[0].upper()}{about[1:]}.")
        parser.set_defaults(command_parser=parser)  # for the usage error of a flag it does not know (see main)
        return parser

    command("games", "list the bundled games with their actions")
    play_parser = command("play", "play one whole game (random or trained agent), optionally recorded")
    play_parser.add_argument(
        "game", type=game_name, help="the game, e.g. Breakout, Pong, MsPacman (`atari-game games` lists them)"
    )
    play_parser.add_argument(
        "--checkpoint",
        type=checkpoint_file,
        help="a checkpoint.pt of `atari-game train`, or an agent file of `atari-game export` (as agents/*.pt), whose "
        "agent plays as its run's --eval does (DQN's and IQN's with epsilon 0.01): one game, where `atari-game "
        "evaluate` scores 30 (default: none: a random agent)",
    )
    play_parser.add_argument(
        "--record", type=mp4_file, metavar="OUT.mp4", help="write the game as a colour video (default: none)"
    )
    play_parser.add_argument(
        "--seed", type=seed, default=0, help="the game's seed, an integer >= 0 (default: %(default)s)"
    )
    evaluate_parser = command(
        "evaluate", "score trained agents: whole games under a protocol, mean, standard error and HNS"
    )
    evaluate_parser.add_argument(
        "checkpoints",
        nargs="+",
        type=checkpoint_file,
        metavar="CHECKPOINT",
        help="checkpoint.pt files of `atari-game train`, or agent files of `atari-game export` (as agents/*.pt)",
    )
    evaluate_parser.add_argument(
        "--episodes", type=count, default=30, help="whole games per checkpoint (default: %(default)s)"
    )
    evaluate_parser.add_argument(
        "--protocol",
        type=scoring_protocol,
        default=None,
        help="the protocol to score under: machado or nature (default: the one the run trained under)",
    )
    evaluate_parser.add_argument(
        "--seed",
        type=seed,
        default=0,
        help="env i is seeded seed + i; the same seed, --episodes and --num-envs, the same games (default: "
        "%(default)s)",
    )
    evaluate_parser.add_argument(
        "--num-envs",
        type=count,
        default=None,
        help="games played at once, at most --episodes (default: the smaller of --episodes and 8)",
    )
    add_old_spelling(evaluate_parser, "--envs", "--num-envs")
    evaluate_parser.add_argument(
        "--algorithm",
        type=label,
        default=None,
        help="the agent's name in the evaluation, by which atari-game report groups runs: give two variants of a "
        "trainer names of their own (default: the trainer's name: ppo, dqn or iqn)",
    )
    evaluate_parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="a folder for the JSON and CSV, as OUT/RUN-evaluation-PROTOCOL.json, RUN the checkpoint's folder (default:"
        " beside each checkpoint, evaluation-PROTOCOL.json); a checkpoint named NAME.pt, not checkpoint.pt, adds"
        " NAME- before evaluation",
    )
    report_parser = command(
        "report", "aggregate scores across games: IQM, median, mean of HNS with confidence intervals, Atari-5"
    )
    report_parser.add_argument(
        "inputs",
        nargs="+",
        type=Path,
        metavar="INPUT",
        help="run directories (or a folder of them, or an `atari-game evaluate --out` folder), evaluation JSONs of"
        " `atari-game evaluate`, or CSVs of algorithm,game,run_seed,score rows",
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
    export_parser = command(
        "export", "write a checkpoint's agent alone, in fp16, to share it: evaluate and play load it"
    )
    export_parser.add_argument(
        "checkpoint", type=checkpoint_file, metavar="CHECKPOINT", help="a checkpoint.pt of `atari-game train`"
    )
    export_parser.add_argument("out", type=Path, metavar="OUT", help="the agent's file, e.g. agents/dqn-Pong.pt")
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
    commands = {"games": lambda _: games(), "play": play, "evaluate": evaluate, "report": report, "export": export}
    commands[args.command](args)


if __name__ == "__main__":
    main()
