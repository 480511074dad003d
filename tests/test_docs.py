"""The documentation keeps to the code: the site builds without a warning, every Python block of every page and of the
README runs as a saved script, every code line shows whole on the page, every public name has a docstring and an entry
in the API reference, the package type-checks, and CI runs the README's test command.

A ```` ```python ```` block runs; a ```` ```{code-block} python ```` block (rendered the same) is shown, not run.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import re
import resource
import subprocess
import sys
import types
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from test_readme import QUICK_START, TEST_COMMAND

import atari_game
import atari_game.report
import atari_game.score_files

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"

# The modules the API reference documents, and why the others are not in it.
PUBLIC_MODULES = (
    "game", "protocols", "worker", "pool", "ray_pool", "env", "spaces", "replay", "sb3", "evaluation", "scores",
    "score_files", "aggregates", "report", "ppo", "dqn", "iqn", "algorithms", "algorithm", "run_config", "run",
    "run_envs", "run_log", "checkpoints", "networks", "learners", "arguments", "local_transport",
    "pool_errors",
)  # fmt: skip
INTERNAL_MODULES = {
    "__main__": "`python -m atari_game`, the command line",
    "cli": "the command line: its commands and flags are in the CLI reference",
    "benchmark": "`atari-game bench`: in the CLI reference",
    "play": "`atari-game play`'s loop",
    "pool_worker": "the pool's worker side",
    "segment": "the pool's shared-memory layout",
    "rendezvous": "how `--learners` learners on a local Ray cluster meet: Ray Train's torch backend on 127.0.0.1",
    "validation": "the checks behind the API's argument errors, which the functions that raise them document",
    "extras": "the install command that the errors of a missing optional extra end with",
}

# Each block may use this much CPU time per process (a trainer's block trains for seconds, not minutes).
BLOCK_CPU_SECONDS = 120
BLOCK_TIMEOUT_SECONDS = 300


# --- the build -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as CI builds it: warnings are errors (-W), every reference is checked (-n)."""
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html", str(DOCS), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0 and not build.stderr, f"the docs build warned or failed:\n{build.stderr}"
    return out


@pytest.mark.slow
def test_the_site_builds_without_a_warning(site: Path) -> None:
    pages = {path.relative_to(site).as_posix() for path in site.rglob("*.html")}
    assert {"index.html", "reference/api.html", "reference/cli.html", "reference/games.html"} <= pages


@pytest.mark.slow
def test_the_games_table_lists_every_game_with_its_facts(site: Path) -> None:
    html = (site / "reference/games.html").read_text()
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", html, flags=re.DOTALL)
    cells = [[re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)]
             for row in rows]  # fmt: skip
    games = {row[0]: row[1:] for row in cells if row}
    assert len(games) == len(atari_game.list_games()) == 104
    assert games["Breakout"] == ["4", "5", "restored"]
    assert games["Pong"] == ["6", "0", "restored"]
    assert games["Seaquest"] == ["18", "4", "emulated"]


@pytest.mark.slow
def test_the_cli_reference_shows_every_flag(site: Path) -> None:
    html = (site / "reference/cli.html").read_text()
    for flag in ("--record", "--checkpoint", "--total-frames", "--life-loss", "--buffer-size", "--num-envs"):
        assert f">{flag}" in html, flag


@pytest.mark.parametrize("algo", ["ppo", "dqn", "iqn"])
def test_an_example_takes_the_flags_of_its_trainer(algo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI reference documents `atari-game train --algorithm X` once and says examples/X.py takes the same flags.
    monkeypatch.syspath_prepend(str(DOCS / "_ext"))
    cli_parsers = importlib.import_module("cli_parsers")
    flags = [
        [(action.option_strings, action.help, action.choices) for action in parser._actions]
        for parser in (getattr(cli_parsers, f"example_{algo}")(), getattr(cli_parsers, f"train_{algo}")())
    ]
    assert flags[0] == flags[1] and len(flags[0]) > 20


# --- every Python block runs ---------------------------------------------------------------------------------


def pages() -> list[Path]:
    """Every Markdown page of the site, and the README."""
    site = [page for page in DOCS.rglob("*.md") if "_build" not in page.relative_to(DOCS).parts]
    return sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *site])


def fences(text: str, first_line: int = 1) -> list[tuple[int, str, str]]:
    """(line, info, code) of every fenced block of Markdown `text`, including those inside a MyST directive's
    fenced body (````` ````{note} `````); `first_line` is the line `text` starts on."""
    found = []
    for token in MarkdownIt("commonmark").parse(text):
        if token.type == "fence" and token.map is not None:
            line, info = first_line + token.map[0], token.info.strip()
            found.append((line, info, token.content))
            if info.startswith("{") and not info.startswith(("{code-block}", "{eval-rst}", "{literalinclude}")):
                found += fences(token.content, line + 1)
    return found


def python_blocks() -> list[tuple[str, str]]:
    """(page:line, code) of every ```python block of every page, the line being the fence's."""
    return [
        (f"{page.relative_to(ROOT).as_posix()}:{line}", code)
        for page in pages()
        for line, info, code in fences(page.read_text())
        if info == "python"
    ]


BLOCKS = python_blocks()


def test_no_block_is_left_out_by_a_near_miss_of_its_language() -> None:
    # ```py or ```python3 would render as Python and silently not run: the runnable spelling is ```python.
    near_misses = [
        f"{page.relative_to(ROOT)}:{line} ```{info}"
        for page in pages()
        for line, info, _ in fences(page.read_text())
        if info.lower() in {"py", "python3", "py3", "ipython", "ipython3"}
    ]
    assert not near_misses, f"write ```python (runs) or ```{{code-block}} python (shown only): {near_misses}"


def limit_cpu() -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (BLOCK_CPU_SECONDS, BLOCK_CPU_SECONDS))


@pytest.mark.slow
@pytest.mark.timeout(BLOCK_TIMEOUT_SECONDS + 30)
@pytest.mark.parametrize("where, code", BLOCKS, ids=[where for where, _ in BLOCKS])
def test_python_block_runs_as_a_saved_script(where: str, code: str, tmp_path: Path) -> None:
    # As a user runs it: saved to a file, `python file.py` in a fresh directory, nothing added (no main guard).
    script = tmp_path / (re.sub(r"\W", "_", where) + ".py")
    script.write_text(code)
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, script.name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_SECONDS,
        preexec_fn=limit_cpu,
    )
    assert run.returncode == 0, f"{where} failed as a script:\n{run.stderr[-4000:]}"


# --- every code line shows whole on the page -----------------------------------------------------------------

# furo's column shows about 90 characters of code at 1280 px; past that a block scrolls sideways, hiding line ends.
CODE_LINE_LENGTH = 88
# The README's two commands stay one line each, to copy as they are (CI runs the second exactly).
ONE_LINE_COMMANDS = {QUICK_START, TEST_COMMAND}


@pytest.mark.parametrize("path", sorted((DOCS / "results").glob("*evaluation*.json")), ids=lambda path: path.name)
def test_the_results_page_shows_each_committed_evaluation_as_its_file_has_it(path: Path) -> None:
    # docs/results/ holds the evaluations behind the Results page: a file replaced there must change the page too.
    result = atari_game.score_files.load_scores([path])[0]
    data = json.loads(path.read_text())
    decimals = 0 if abs(data["mean"]) >= 100 else 1
    shown = f"**{data['mean']:,.{decimals}f}** ± {data['sem']:,.{decimals}f}"
    page = (DOCS / "results.md").read_text()
    assert shown in page and f"{data['hns']:.2f}" in page, f"{result.game}: {shown}, HNS {data['hns']:.2f}"
    assert path.name in page


def test_the_results_page_shows_the_report_over_the_committed_evaluations(tmp_path: Path) -> None:
    # What `atari-game report docs/results` prints (its defaults: 10,000 resamples, seed 0), as the page shows it.
    report = atari_game.report.write_report([DOCS / "results"], tmp_path)
    assert atari_game.report.format_summary(report) in (DOCS / "results.md").read_text()


@pytest.mark.slow
def test_the_results_page_shows_the_atari5_estimates_at_2m_and_10m_frames_as_the_report_gives_them(tmp_path: Path):
    # `atari-game report docs/results/dopamine-10m.csv` (and -2m): each agent's estimate and its interval on the page.
    page = (DOCS / "results.md").read_text()
    for budget in ("2m", "10m"):
        report = atari_game.report.write_report([DOCS / "results" / f"dopamine-{budget}.csv"], tmp_path / budget)
        for algorithm, found in report["algorithms"].items():
            estimate, (low, high) = found["atari5"]["estimate"]["point"], found["atari5"]["estimate"]["interval"]
            assert f"{estimate:.3f} [{low:.3f}, {high:.3f}]" in page, f"{algorithm}: {estimate:.3f}"
    # `atari-game report docs/results/dopamine-2m.csv docs/results/dqn-2m-training.csv`: Rainbow-lite DQN's, one seed a
    # game (no interval), on the page beside them.
    report = atari_game.report.write_report([DOCS / "results" / "dqn-2m-training.csv"], tmp_path / "ours")
    estimate = report["algorithms"]["dqn-2m-training"]["atari5"]["estimate"]["point"]
    assert f"| Atari-5 estimate | **{estimate:.3f}** |" in page, f"dqn-2m-training: {estimate:.3f}"


def test_every_code_line_fits_the_page() -> None:
    # Every code block: ```python, ```{code-block} python, ```bash, ```text, a bare ```; not a directive's body.
    too_long = [
        f"{page.relative_to(ROOT)}:{line + 1 + i} ({len(text)} characters)"
        for page in pages()
        for line, info, code in fences(page.read_text())
        if not info.startswith("{") or info.startswith("{code-block}")
        for i, text in enumerate(code.splitlines())
        if len(text) > CODE_LINE_LENGTH and text not in ONE_LINE_COMMANDS
    ]
    assert not too_long, f"code lines longer than {CODE_LINE_LENGTH} characters (wrap them): {too_long}"


# --- every public name is documented -------------------------------------------------------------------------


def test_every_module_is_documented_or_said_internal() -> None:
    modules = {module.name for module in pkgutil.iter_modules(atari_game.__path__)}
    assert modules == set(PUBLIC_MODULES) | set(INTERNAL_MODULES)


def own_doc(obj: object) -> str:
    """The docstring written for `obj` itself: not inherited, not the signature a dataclass or NamedTuple makes up."""
    target = obj.fget if isinstance(obj, property) else getattr(obj, "__func__", obj)
    if inspect.isclass(target):
        doc = vars(target).get("__doc__") or ""
        return "" if doc.startswith(f"{target.__name__}(") else doc.strip()
    return (getattr(target, "__doc__", None) or "").strip()


def public_names() -> dict[str, object]:
    """Every public class and function of the public modules, and the public methods and properties their classes
    define, by full name (``atari_game.game.Game.step``)."""
    names: dict[str, object] = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(f"atari_game.{module_name}")
        for name, obj in vars(module).items():
            if name.startswith("_") or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if obj.__module__ != module.__name__:
                continue  # imported from elsewhere: documented where it is defined
            names[f"{module.__name__}.{name}"] = obj
            for member_name, member in vars(obj).items() if inspect.isclass(obj) else ():
                if not member_name.startswith("_") and isinstance(
                    member, (property, staticmethod, classmethod, types.FunctionType)
                ):
                    names[f"{module.__name__}.{name}.{member_name}"] = member
    return names


PUBLIC = public_names()


def test_every_public_name_has_a_docstring() -> None:
    undocumented = sorted(name for name, obj in PUBLIC.items() if not own_doc(obj))
    assert not undocumented, f"public names without a docstring: {undocumented}"


API_PAGES = "reference/api.html", "reference/api/*.html"
# An entry of the API reference: autodoc gives each its full name as its HTML id.
ENTRY = re.compile(r'<dt class="sig sig-object py" id="([^"]+)"')


def api_pages(site: Path) -> list[Path]:
    """The API reference: its index (docs/reference/api.md) and its pages (docs/reference/api/), a module's or a
    class's each."""
    return [path for pattern in API_PAGES for path in sorted(site.glob(pattern))]


def documented_ids(site: Path) -> list[str]:
    """The objects the API reference documents, one per entry: a name documented twice is there twice."""
    return [full for page in api_pages(site) for full in ENTRY.findall(page.read_text())]


@pytest.mark.slow
def test_every_public_name_is_in_the_api_reference(site: Path) -> None:
    documented = set(documented_ids(site))
    missing = sorted(set(PUBLIC) - documented)
    assert not missing, f"public names missing from the API reference (docs/reference/api/): {missing}"


@pytest.mark.slow
def test_every_name_the_package_exports_is_in_the_api_reference(site: Path) -> None:
    documented = documented_ids(site)
    for name in atari_game.__all__:
        # Documented once, in its module: a class's or function's own, a constant's where its #: comment is. Another
        # module's object of the same name (`ppo.evaluate` beside `atari_game.evaluate`) is another name.
        obj = getattr(atari_game, name)
        homes = [
            full
            for full in documented
            if re.fullmatch(rf"atari_game\.\w+\.{name}", full)
            and getattr(importlib.import_module(full.rpartition(".")[0]), name) is obj
        ]
        expected = [f"{obj.__module__}.{name}"] if inspect.isclass(obj) or inspect.isfunction(obj) else homes[:1]
        assert homes == expected != [], f"atari_game.{name}: documented as {homes}"


@pytest.mark.slow
def test_the_api_reference_documents_each_name_once(site: Path) -> None:
    # A class on its own page is excluded from its module's page (:exclude-members:), not documented on both.
    documented = documented_ids(site)
    twice = sorted({full for full in documented if documented.count(full) > 1})
    assert not twice, f"documented more than once in the API reference: {twice}"


@pytest.mark.slow
def test_each_public_module_has_its_page(site: Path) -> None:
    for module in PUBLIC_MODULES:
        page = site / f"reference/api/{module}.html"
        assert page.is_file() and f'id="module-atari_game.{module}"' in page.read_text(), module


@pytest.mark.slow
def test_a_class_page_documents_its_class_and_its_members_only(site: Path) -> None:
    # reference/api/<module>.<Class>.html: the class and what it defines, each linked from its module's page.
    class_pages = [page for page in api_pages(site) if page.stem.count(".") == 1]
    assert len(class_pages) >= 10
    for page in class_pages:
        full = f"atari_game.{page.stem}"
        module_page = (site / f"reference/api/{page.stem.split('.')[0]}.html").read_text()
        entries = ENTRY.findall(page.read_text())
        assert entries[0] == full and all(entry.startswith(f"{full}.") for entry in entries[1:]), page.name
        assert f'href="{page.name}#{full}"' in module_page, f"{page.name} is not linked from its module's page"


# --- types and CI --------------------------------------------------------------------------------------------


@pytest.mark.slow  # mypy over the package: half a minute
def test_the_package_type_checks() -> None:
    # mypy at its default strictness (settings in pyproject.toml: only which untyped libraries to skip).
    check = subprocess.run([sys.executable, "-m", "mypy", "atari_game"], cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout[-6000:]


def test_the_package_says_it_is_typed() -> None:
    assert (ROOT / "atari_game" / "py.typed").is_file()


def test_ci_runs_the_readme_test_command() -> None:
    command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert "python -m pytest" in command and '".[test,' in command and "docs" in command
    assert command in (ROOT / "README.md").read_text().splitlines()
