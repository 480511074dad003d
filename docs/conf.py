"""The atari_game documentation site: MyST Markdown pages, the furo theme, the API reference from the docstrings.

    sphinx-build -W --keep-going -n -b html docs docs/_build/html

It builds offline (no intersphinx, nothing fetched) and without a warning; tests/test_docs.py builds it in the tests.
"""

import sys
from importlib import metadata
from pathlib import Path

# Our own extensions: the games table, the CLI parsers, `atari_game.Game` as a name for `atari_game.game.Game`, the
# docstrings as napoleon should read them.
sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "atari_game"
author = "atari_game contributors"
copyright = "atari_game contributors"
release = metadata.version("atari_game")

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "docstrings",
    "sphinxarg.ext",
    "sphinx_copybutton",
    "api_names",
    "games_table",
]

source_suffix = {".md": "markdown"}
# Flags stay --flags and quotes stay straight: the pages are about code.
smartquotes = False
exclude_patterns = ["_build"]
# `{note}` blocks fenced with ::: and term/definition lists; [text](page.md#a-heading) links to headings.
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# autosummary lists the package's names (api_names.py) and, on each module's page, its classes that have a page of
# their own. It writes no pages: those are docs/reference/api/*.md, an automodule or an autoclass each.
autosummary_generate = False

html_theme = "furo"
html_title = f"atari_game {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
# Pages are Markdown in the repository: no "show source" link to a copy of them.
html_show_sourcelink = False
html_copy_source = False

# The docstrings: Google style (Args:, Attributes:, Returns:), members in source order, type hints in the signature.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# Each object under its module's heading: `Game`, not `atari_game.game.Game`, on every entry.
add_module_names = False
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# A docstring's `name` is a cross-reference when it names something documented here, plain code otherwise.
default_role = "name-or-code"

# -n checks every cross-reference. Other libraries' names (type hints, base classes) are not documented here and,
# offline, cannot link to their sites: those, and only those, are let through; a broken reference to one of ours fails.
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|torch|nn|gymnasium|gym|ale_py|ray|stable_baselines3|tqdm|matplotlib|cv2)(\..*)?"),
    (r"py:.*", r"(multiprocessing|collections|pathlib|typing|types|argparse|dataclasses|enum|contextlib|io)\..*"),
    (r"py:.*", r"(Path|Callable|Iterator|Iterable|Sequence|Mapping|NDArray|ArrayLike|DType|Any|Connection)"),
]
# Copy the code of a `$ ` or `>>> ` line without its prompt.
copybutton_prompt_text = r"\$ |>>> "
copybutton_prompt_is_regexp = True
