"""How the pages name the API: `atari_game.Game` links to `atari_game.game.Game`, and a docstring's `name` is a link
when it names something documented, plain code otherwise.

The API reference documents every object once, in the module that defines it: on the module's page, or a class on
a page of its own. Users import the package's names (``from atari_game import Game``), so a reference to
``atari_game.<name>`` of ``atari_game.__all__`` resolves to the object's own entry. Docstrings write `name` both for
documented objects and for arguments and fields: the default role links the first and shows the second as code, where
Sphinx's own would warn about a missing reference.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.domains.python import PyXRefRole
from sphinx.environment import BuildEnvironment
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective

import atari_game


class NameOrCode(PyXRefRole):
    """``py:obj``, marked so that a missing target is shown as code instead of reported."""

    def run(self) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        self.name = "py:obj"
        return super().run()

    def result_nodes(
        self, document: nodes.document, env: BuildEnvironment, node: nodes.Element, is_ref: bool
    ) -> tuple[list[nodes.Node], list[nodes.system_message]]:
        node["code_if_missing"] = True
        return [node], []


def home_of(env: BuildEnvironment, name: str) -> str | None:
    """Where `atari_game.<name>` is documented: the one documented object ``atari_game.<module>.<name>``."""
    homes = [
        full
        for full in env.get_domain("py").objects  # type: ignore[attr-defined]
        if full.startswith("atari_game.") and full.count(".") == 2 and full.rsplit(".", 1)[1] == name
    ]
    return homes[0] if len(homes) == 1 else None


def resolve(app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: nodes.Element) -> Any:
    if node.get("refdomain") != "py":
        return None
    package, _, name = node["reftarget"].partition(".")
    home = home_of(env, name) if package == "atari_game" and name in atari_game.__all__ else None
    if home is not None:
        domain = env.get_domain("py")
        return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], home, node, contnode)
    return contnode if node.get("code_if_missing") else None


def defined_in(name: str) -> str:
    """The module that defines ``atari_game.<name>``: a class's or function's own, or for a constant the module whose
    ``#:`` comment documents it."""
    obj = getattr(atari_game, name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        return obj.__module__
    for module in pkgutil.iter_modules(atari_game.__path__, "atari_game."):
        if module.name.endswith(".__main__"):
            continue  # importing it runs the command line
        defines = vars(importlib.import_module(module.name)).get(name) is obj
        if defines and ("", name) in ModuleAnalyzer.for_module(module.name).find_attr_docs():
            return module.name
    raise ValueError(f"atari_game.{name} is a constant without a #: comment where it is defined: document it there")


class PackageNames(SphinxDirective):
    """A table of ``atari_game.__all__``: each name with the first line of its documentation, linked to it."""

    def run(self) -> list[nodes.Node]:
        names = [f"   ~{defined_in(name)}.{name}" for name in sorted(atari_game.__all__, key=str.lower)]
        table = nodes.container()
        self.state.nested_parse(StringList([".. autosummary::", "   :nosignatures:", "", *names]), 0, table)
        return table.children


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx.ext.autosummary")
    app.add_role("name-or-code", NameOrCode())
    app.add_directive("package-names", PackageNames)
    app.connect("missing-reference", resolve)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
