"""The ``{games-table}`` directive: every bundled game, read from the code at build time, so the table cannot drift.

One row a game: its name (what `Game`, the CLI and the env ids take), its minimal action count, the lives it starts
with, and whether its restarts are restored (`atari_game.game.FIXED_RESTART_GAMES`). A game's facts
come from one load of its ROM (~0.08 s of CPU, ALE's reset included), two games at a time; once per build.
"""

from __future__ import annotations

import functools
from concurrent.futures import ProcessPoolExecutor
from typing import Any, NamedTuple

import ale_py
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

from atari_game.game import FIXED_RESTART_CHECKED_ON, FIXED_RESTART_GAMES, list_games, resolve_game


class Row(NamedTuple):
    name: str
    actions: int
    lives: int
    restored: bool


def row(name: str) -> Row:
    """One game's row, from its ROM as a `Game` loads it (loading resets the game: its lives are the starting ones).
    One load: `action_meanings` and a `Game` would load each ROM twice, and the table is the build's slowest part."""
    rom = resolve_game(name)
    ale = ale_py.ALEInterface()
    ale.loadROM(ale_py.roms.get_rom_path(rom))
    actions = len(ale.getMinimalActionSet())
    return Row(name, actions, ale.lives(), rom in FIXED_RESTART_GAMES)


@functools.cache
def rows() -> tuple[Row, ...]:
    # Two processes: the ROM loads take most of the build's time, and the CI machine has two cores.
    with ProcessPoolExecutor(max_workers=2) as workers:
        return tuple(workers.map(row, list_games(), chunksize=8))


HEADER = ("Game", "Actions", "Lives", "Restarts")


def table_row(cells: tuple[str, ...], name_as_code: bool) -> nodes.row:
    line = nodes.row()
    for column, text in enumerate(cells):
        content = nodes.literal(text=text) if name_as_code and column == 0 else nodes.Text(text)
        line += nodes.entry("", nodes.paragraph("", "", content))
    return line


def table(body: list[tuple[str, ...]]) -> nodes.table:
    """A docutils table of `HEADER` and the `body` rows, the games' names as code."""
    group = nodes.tgroup(cols=len(HEADER))
    group += [nodes.colspec(colwidth=1) for _ in HEADER]
    group += nodes.thead("", table_row(HEADER, name_as_code=False))
    group += nodes.tbody("", *(table_row(cells, name_as_code=True) for cells in body))
    return nodes.table("", group, classes=["games"])  # (custom.css fits it to a phone)


class GamesTable(SphinxDirective):
    """The table of `rows`, and a sentence counting them."""

    def run(self) -> list[nodes.Node]:
        games = rows()
        restored = sum(game.restored for game in games)
        releases = " and ".join(FIXED_RESTART_CHECKED_ON)
        count = nodes.paragraph(
            text=f"{len(games)} games. Restarts are restored in {restored} of them with ale-py {releases}, the "
            "releases they were checked on (with any other, every restart is emulated), without sticky actions, in "
            "the game's default mode and difficulty."
        )
        body = [
            (game.name, str(game.actions), str(game.lives), "restored" if game.restored else "emulated")
            for game in games
        ]
        return [count, table(body)]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("games-table", GamesTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
