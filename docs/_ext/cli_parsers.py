"""The command-line parsers, for the CLI reference: each caught as the user's ``--help`` reaches it.

Each command builds its parser where it parses (`atari_game.cli.main`, the trainers' `parse_config`). Instead of
rebuilding them here, run the command with ``--help`` and catch the parser at the moment it would print its help:
the reference shows exactly what ``--help`` shows, and needs no change when a command does. sphinx-argparse renders
the parsers these functions return (``:module: cli_parsers`` ``:func: <name>``), their help as plain text.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import runpy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from atari_game import cli

ROOT = Path(__file__).resolve().parents[2]


class Caught(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def catch(command: Callable[[], object]) -> argparse.ArgumentParser:
    """The parser whose help `command` prints (it must be given ``--help``), caught instead of printed."""

    def caught(parser: argparse.ArgumentParser, file: object = None) -> NoReturn:
        raise Caught(parser)

    print_help = argparse.ArgumentParser.print_help
    argparse.ArgumentParser.print_help = caught  # type: ignore[method-assign]
    try:
        # What a command prints before its parser's help (`atari-game train` names the trainer) is not the parser's.
        with contextlib.redirect_stdout(io.StringIO()):
            command()
    except Caught as found:
        return as_plain_text(found.parser)
    finally:
        argparse.ArgumentParser.print_help = print_help  # type: ignore[method-assign]
    raise RuntimeError(f"{command} printed no --help")


def as_text(help: str) -> str:
    """A help text as reST that reads as it does in a terminal: its `code` spans as code, the rest as it is (in reST,
    ``|x|``, ``*`` or ``_`` would be markup)."""
    # re.split with a group: the text between spans at even indices, the spans' code at odd ones.
    parts = re.split(r"`([^`]+)`", help)
    return "".join(
        f"``{part}``" if index % 2 else re.sub(r"([\\*|_])", r"\\\1", part) for index, part in enumerate(parts)
    )


def as_plain_text(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser` (a fresh one) with every help text `as_text`, its subcommands' included."""
    for action in parser._actions:
        if action.help:
            action.help = as_text(action.help)
        for subparser in (action.choices or {}).values() if isinstance(action, argparse._SubParsersAction) else ():
            as_plain_text(subparser)
    return parser


def script(path: str) -> argparse.ArgumentParser:
    """The parser of a script of the repository, run as ``python <path> --help`` runs it."""
    argv = sys.argv
    sys.argv = [path, "--help"]
    try:
        return catch(lambda: runpy.run_path(str(ROOT / path), run_name="__main__"))
    finally:
        sys.argv = argv


def atari_game() -> argparse.ArgumentParser:
    return catch(lambda: cli.main(["--help"]))


def train() -> argparse.ArgumentParser:
    """`atari-game train`'s own flag, which picks the trainer (its --help prints it above the trainer's)."""
    return as_plain_text(cli.trainer_parser())


def train_ppo() -> argparse.ArgumentParser:
    return catch(lambda: cli.main(["train", "--help"]))


def train_dqn() -> argparse.ArgumentParser:
    return catch(lambda: cli.main(["train", "--algorithm", "dqn", "--help"]))


def train_iqn() -> argparse.ArgumentParser:
    return catch(lambda: cli.main(["train", "--algorithm", "iqn", "--help"]))


def bench() -> argparse.ArgumentParser:
    return catch(lambda: cli.main(["bench", "--help"]))


def example_ppo() -> argparse.ArgumentParser:
    return script("examples/ppo.py")


def example_dqn() -> argparse.ArgumentParser:
    return script("examples/dqn.py")


def example_iqn() -> argparse.ArgumentParser:
    return script("examples/iqn.py")
