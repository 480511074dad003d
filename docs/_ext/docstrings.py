"""The library's docstrings as napoleon should read them.

* A field's, property's or constant's docstring is prose. Napoleon would take the text before its first colon for a
  type (``"Seeds the network (env k: seed + k)"`` would document the type ``Seeds the network (env k``).
* An ``Args:`` entry may name several parameters (``game, seed, **game_options: as for Game``); napoleon escapes the
  stars of a lone ``**name`` only, and reST would read the others as the start of bold text.
* A NamedTuple's fields are documented in its ``Attributes:`` section, not again as "Alias for field number 0".
* A module's docstring shows its example as a block indented under a paragraph, which reST would read as a quote:
  it is shown as code, Python's or (a command line) bash's.
"""

from __future__ import annotations

import re
from typing import Any

from sphinx.application import Sphinx

# A colon napoleon splits on: not part of a role (:class:) or a double colon (::).
SPLIT_COLON = re.compile(r"(?<!:):(?!:)")
# What stands for such a colon while napoleon reads the line.
HIDDEN_COLON = "\x00colon\x00"
# An Args entry that names several parameters, one of them starred.
SEVERAL_NAMES = re.compile(r"^(\s+)((?:\*{0,2}\w+, )+\*{0,2}\w+):")


# A module docstring's example: indented under a paragraph that is no list item and does not end with ``::``.
LIST_ITEM = re.compile(r"([-*+] |\d+\. )")
# A command line, shown as bash; any other example is Python.
COMMAND = re.compile(r"\s*(\$ |pip |python |atari-game |ray )")


def examples_as_code(lines: list[str]) -> None:
    paragraph = None  # the first line of the paragraph the next indented block would be under
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.strip() and not line.startswith(" "):
            if index == 0 or not lines[index - 1].strip():
                paragraph = index
        elif (
            line.startswith("    ")
            and paragraph is not None
            and not lines[index - 1].strip()
            and not lines[index - 2].rstrip().endswith("::")
            and not LIST_ITEM.match(lines[paragraph])
        ):
            lines[index:index] = [f".. code-block:: {'bash' if COMMAND.match(line) else 'python'}", ""]
            index += 2
            while index < len(lines) and (not lines[index].strip() or lines[index].startswith("    ")):
                index += 1
            paragraph = None
            continue
        index += 1


def before_napoleon(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    if what == "module":
        examples_as_code(lines)
    first = next((index for index, line in enumerate(lines) if line.strip()), None)
    if what in ("attribute", "data", "property") and first is not None:
        lines[first] = SPLIT_COLON.sub(HIDDEN_COLON, lines[first])  # napoleon reads a type from this line only
    for index, line in enumerate(lines):
        if (several := SEVERAL_NAMES.match(line)) and "*" in several[2]:
            lines[index] = several[1] + several[2].replace("*", r"\*") + line[several.end(2) :]


def after_napoleon(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    lines[:] = [line.replace(HIDDEN_COLON, ":") for line in lines]


def skip_field_aliases(app: Sphinx, what: str, name: str, obj: Any, skip: bool, options: Any) -> bool | None:
    return True if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number") else None


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx.ext.napoleon")
    # Before napoleon's own handler (priority 500), which parses what this one mends.
    app.connect("autodoc-process-docstring", before_napoleon, priority=400)
    app.connect("autodoc-process-docstring", after_napoleon, priority=600)
    app.connect("autodoc-skip-member", skip_field_aliases)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
