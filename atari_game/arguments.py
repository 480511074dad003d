"""The argparse types of every command line: ``atari-game`` and its commands, the trainers' flags, the scripts of
examples/ and benchmarks/. Each reads one value as the user writes it (counts as ``1e6`` or ``10_000_000``, games
in any usual spelling) and refuses a bad one with a usage error that says what to write.
"""

from __future__ import annotations

import argparse
import decimal
import difflib
import sys
from pathlib import Path
from typing import Any

from atari_game.game import resolve_game
from atari_game.play import check_video_path
from atari_game.protocols import get_protocol
from atari_game.validation import check_agent_name


class OldSpelling(argparse.Action):
    """A flag's spelling before 0.2, hidden from --help: it stores its value as the flag `new` does and says, on
    stderr, that the flag is `new` now (the old spelling is taken until 0.3)."""

    def __init__(self, option_strings: list[str], dest: str, new: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)  # type: ignore[arg-type]
        self.new = new

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object, option: str | None = None
    ) -> None:
        print(f"{parser.prog}: {option} is now {self.new} ({option} is taken until 0.3)", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_old_spelling(parser: argparse.ArgumentParser, old: str, new: str) -> None:
    """Take the flag `old` as `parser`'s flag `new` (its type, count and choices), hidden from --help: `OldSpelling`."""
    # (argparse has no public look-up of an action by its flag)
    action = next(action for action in parser._actions if new in action.option_strings)
    same: dict[str, Any] = {"type": action.type} if action.type is not None else {}
    parser.add_argument(
        old, dest=action.dest, action=OldSpelling, new=new, nargs=action.nargs, choices=action.choices, **same
    )


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


def label(text: str) -> str:
    """An argparse type: an agent's name, as `check_agent_name` takes it."""
    try:
        return check_agent_name(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("algorithm ")) from None


def game_name(name: str) -> str:
    """An argparse type: a bundled game, as given, or a usage error naming the closest ones and `atari-game games`."""
    try:
        resolve_game(name)
    except ValueError as error:
        # ("game: " off the front: argparse's own "argument game: " names it already.)
        message = str(error).removeprefix("game: ").replace("atari_game.list_games()", "`atari-game games`")
        raise argparse.ArgumentTypeError(message) from None
    return name


def protocol_name(name: str) -> str:
    """An argparse type: a protocol of `atari_game.protocols` by name, or ``none`` (returned as "")."""
    if name == "none":
        return ""
    try:
        return scoring_protocol(name)
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"{error}, or none") from None


def scoring_protocol(name: str) -> str:
    """An argparse type: a protocol of `atari_game.protocols` by name (`atari-game evaluate` scores under one)."""
    if name == "none":
        raise argparse.ArgumentTypeError(
            "scores are under a protocol, machado or nature: leave --protocol out for the run's own"
        )
    try:
        return get_protocol(name).name
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("protocol: ")) from None


def checkpoint_file(text: str) -> Path:
    """An argparse type: a file that exists (a checkpoint.pt, or an agent file of ``atari-game export``)."""
    path = Path(text)
    if path.is_dir():  # a folder: name the checkpoints in it, if there are any
        inside = sorted(str(file) for file in path.glob("*.pt"))
        hint = f"; its .pt files: {', '.join(inside)}" if inside else ", with no .pt file in it"
        raise argparse.ArgumentTypeError(f"{text} is a folder{hint}")
    if not path.is_file():  # a misspelt name: the closest .pt files beside it
        beside = [str(file) for file in path.parent.glob("*.pt")] if path.parent.is_dir() else []
        closest = difflib.get_close_matches(str(path), beside, n=2, cutoff=0.8)
        raise argparse.ArgumentTypeError(
            f"no such checkpoint file: {text}" + (f" (closest: {', '.join(closest)})" if closest else "")
        )
    return path


def mp4_file(text: str) -> Path:
    """An argparse type: the path of an .mp4 video."""
    try:
        check_video_path(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return Path(text)
