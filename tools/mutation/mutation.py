"""Mutation testing of the hot paths: how many small deliberate bugs in them do their tests catch?

    pip install -e ".[mutation]"
    python tools/mutation/mutation.py [--target replay pool game] [--max-mutants N] [--jobs 2] [--seed 0]
                                      [--results F] [--no-select] [--state DIR] [--resume | --recheck]

A maintainer's tool, not part of the package nor of its test run: see tools/mutation/README.md.

For each target it makes the mutants that cosmic-ray makes of the target's code (an operator, comparison, number,
boolean, ``break``/``continue``, exception or decorator changed; an operator only to its counterpart, see
`COUNTERPARTS`), runs the target's tests against each, and prints per target the mutants tested, killed (a test
failed), survived (every test passed), not covered (no test runs the mutated lines), timed out (the tests hung:
detected too), errors (cosmic-ray could not test it) and the score ``(killed + timed out) / (killed + timed out +
survived + not covered)``, then every survivor, those not covered too, with its file, line and diff:

- ``replay``: ``atari_game/replay.py``, with ``tests/test_replay.py``, ``tests/test_replay_codecs.py`` (its files,
  its compression) and ``tests/test_sb3_replay.py``;
- ``pool``: the step and restart paths, `GameBlock`'s methods in ``atari_game/pool_worker.py`` and the methods of
  `GamePool` in ``atari_game/pool.py`` named in `POOL_FUNCTIONS` and of `LocalTransport` in
  ``atari_game/local_transport.py`` named in `TRANSPORT_FUNCTIONS`, with ``tests/test_pool_values.py`` and
  ``tests/test_pool.py``;
- ``game``: ``atari_game/game.py``, with ``tests/test_game.py``, ``tests/test_game_properties.py`` and
  ``tests/test_reference.py`` (Gymnasium's own wrappers, the reference).

The tests written to kill the survivors of earlier runs live in those files, beside the tests of what they test.

Tests marked ``timing`` are left out: a wall-clock bound missed on a busy machine is not a mutant caught. Every test
command stops at its first failure (``-x``), so a killed mutant costs less than the whole test files.

**Each mutant runs only the tests that ran its lines** (``--no-select``: the whole test files). A target's tests run
once, unmutated, under coverage.py with a label per test (a dynamic context): pytest's process sets it at each
test's start (``-p mutation``, `pytest_runtest_logstart`); the processes the tests start, the pool's workers
(forkserver or spawn, ``concurrency = multiprocessing``) and the scripts they run (``patch = subprocess``), label
each call into the package with the test running then (`RunningTest`, loaded by coverage.py from this module), so
that ``GameBlock.play``, run only in workers, has its tests. From it, each line of a statement gets the tests that
ran the statement, or "every test" where it ran outside one (at import; a worker's loop between commands)
(`statement_tests`). cosmic-ray's test command is then ``mutation.py select TARGET`` in the job's copy
(`run_selected`): it finds the mutated lines by comparing the copy's files with the originals, and runs their tests
quickest first, as the coverage run timed them, each file's together (pytest replaces it), or prints that none ran
them: the mutant is "not covered" (it counts as survived). A test that never runs a line cannot see it changed, so
the outcome is the whole files' (checked on samples: see README.md beside this script), at a fraction of the cost. A
selected test that a mutant hangs fails after five times the longest selected test's time in the coverage run, at
least 60 s (pytest-timeout), so that a hang costs a minute or two, not the run's timeout.

It never touches the checkout: it copies the checkout's working tree (its tracked files, and the untracked ones git
does not ignore, so new tests count before they are committed) into ``--state`` (default: the system's temporary
directory), one copy per job, and mutates and tests there. The tests import the copy (``PYTHONPATH``), and so do the
pool's worker processes: they are started by the test process (forkserver or spawn) with its ``sys.path``.

**Resumable**: Ctrl-C or SIGTERM stops the jobs and keeps the run in ``--state`` (the copies, the map of tests and
a cosmic-ray session per job, which records each mutant's outcome as it comes); ``--resume`` with the same options
goes on with the mutants not tested yet (the one a job was testing again), and starts the targets not started yet.
Without ``--resume`` a target's run starts afresh.

**Rechecked**: after tests were written for a run's survivors, ``--recheck`` tests each survivor (and each mutant not
covered) again against the working tree's tests now, in a fresh copy with its own map of tests: it applies the
survivor's diff there (one that no longer applies, the file changed since, is an error), runs its selected tests,
prints each outcome with the test that killed it, and the run's score with these outcomes. What still survives is
either equivalent (no test can tell it from the code) or a blind spot left.

**Why cosmic-ray (8.x), not mutmut (3.x).** cosmic-ray writes each mutant into the file on disk and runs the test
command in a new process, so every process that imports the module, the pool's workers included, runs the mutant.
mutmut 3 writes every mutant of a function into one module behind a trampoline that picks one by an environment
variable, runs the mutants in forks of its own process, and runs for each only the tests that called its function
in that process. Tried on ``replay.py`` (mutmut 3.8.1), its first run of the tests fails: ``test_replay.py`` plays
real pools, whose forkserver workers import the main module again, here mutmut's own script, which looks for its
configuration in the test's working directory and exits, so every worker dies. Even past that, code that only the
workers run (`GameBlock.play`) would have no test that called it in mutmut's process, so its mutants would not be
tested ("no tests"). cosmic-ray starts a new interpreter per mutant, which the selection of tests and ``--jobs``
temper. See the Contributing page for the scores.

``--max-mutants N`` tests a random sample of N mutants per target (``--seed`` picks it), for a quick look; ``--jobs``
runs that many mutants at a time, each job in a copy of its own. ``--results FILE`` writes every mutant's outcome
as JSON lines (path, line, operator, outcome, diff), also when stopped (the targets finished). A run prints the CPU
seconds per mutant it took (those of its processes, the test processes' leftovers included: it reaps them). Not run
in CI: the whole run takes hours on two cores.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import ctypes
import dataclasses
import difflib
import json
import os
import random
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# The checkout (or a job's copy of it): this file is tools/mutation/mutation.py in it.
ROOT = Path(__file__).resolve().parents[2]
# This script's folder, relative to ROOT: a job's copy runs it from there as the test command (``select``), and the
# coverage run imports it from there as a plugin of pytest (``-p mutation``) and of coverage.py (``plugins``).
HERE = Path("tools", "mutation")
# What to install when cosmic-ray is missing.
EXTRA = "mutation"
# How often a run says how far it got.
PROGRESS_SECONDS = 60
# Where a run keeps its copies, cosmic-ray sessions and maps of tests, so that one stopped can go on (--resume).
STATE = Path(tempfile.gettempdir()) / "atari-game-mutation"
# prctl's option that makes a process the reaper of the orphans below it (linux/prctl.h).
PR_SET_CHILD_SUBREAPER = 36
# The command line of multiprocessing's resource tracker, which deletes what the processes it tracks left behind.
RESOURCE_TRACKER = b"multiprocessing.resource_tracker"
# How long a stopped job's resource trackers get to delete what its killed processes left.
TRACKER_SECONDS = 5.0


@dataclasses.dataclass(frozen=True)
class Target:
    """Files to mutate, each with the functions to mutate in it (None: the whole file), the tests to run, and tests of
    them left out (pytest node ids)."""

    functions: dict[str, tuple[str, ...] | None]
    tests: tuple[str, ...]
    deselect: tuple[str, ...] = ()


# The pool's step and restart paths: GameBlock's commands (run in the workers) and GamePool's step, send and recv
# with what they call to send commands, take answers, read results, and replace a dead worker.
POOL_FUNCTIONS = (
    "GamePool.step",
    "GamePool.send",
    "GamePool.recv",
    "GamePool._send_steps",
    "GamePool._send",
    "GamePool._step_all",
    "GamePool._book_step_of_all",
    "GamePool._step_each",
    "GamePool._finish_in_flight",
    "GamePool._collect",
    "GamePool._results",
    "GamePool._read",
    "GamePool._worker_died",
    "GamePool._seeds",
)
# The local transport's side of them: how commands go out and answers come back.
TRANSPORT_FUNCTIONS = (
    "LocalTransport.post",
    "LocalTransport.step_all",
    "LocalTransport.read_pool_step",
    "LocalTransport.next_answer",
    "LocalTransport.replace",
)
# In the order a run takes them by default: the quickest first.
TARGETS = {
    "replay": Target(
        {"atari_game/replay.py": None},
        ("tests/test_replay.py", "tests/test_replay_codecs.py", "tests/test_sb3_replay.py"),
    ),
    "pool": Target(
        {
            "atari_game/pool_worker.py": ("GameBlock.run", "GameBlock.step", "GameBlock.play", "GameBlock.reset"),
            "atari_game/pool.py": POOL_FUNCTIONS,
            "atari_game/local_transport.py": TRANSPORT_FUNCTIONS,
        },
        ("tests/test_pool_values.py", "tests/test_pool.py"),
        # Ctrl-C at random moments of 20 steps: on unmutated code it once hung past pytest's 300 s with both cores
        # busy, which a run would count as a mutant killed (test_a_step_interrupted_by_ctrl_c_is_finished_by_the_next
        # still interrupts a step).
        deselect=("tests/test_pool.py::test_ctrl_c_at_any_moment_of_a_step_leaves_the_pool_in_step",),
    ),
    "game": Target(
        {"atari_game/game.py": None},
        ("tests/test_game.py", "tests/test_game_properties.py", "tests/test_reference.py"),
    ),
}
# cosmic-ray replaces each binary operator by each of 11 others, each comparison by each of 7 (most of its mutants;
# docs/contributing.md gives the counts): only the replacement by its counterpart is kept, as mutmut makes them
# (``+`` by ``-``, ``<`` by ``<=``, ``not x`` by ``x``), and every mutant of the other operators.
COUNTERPARTS = {
    "ReplaceBinaryOperator": (
        "Add_Sub Sub_Add Mul_Div Div_Mul FloorDiv_Div Mod_Div Pow_Mul "
        "BitAnd_BitOr BitOr_BitAnd BitXor_BitAnd LShift_RShift RShift_LShift"
    ),
    "ReplaceComparisonOperator": "Lt_LtE LtE_Lt Gt_GtE GtE_Gt Eq_NotEq NotEq_Eq Is_IsNot IsNot_Is In_NotIn NotIn_In",
    "ReplaceUnaryOperator": "Delete_Not Delete_Invert USub_UAdd",
}
# The outcomes of a mutant, in the report's order: detected ones first.
OUTCOMES = ("killed", "timed out", "survived", "not covered", "error", "not run")


# --- the copies of the checkout ---------------------------------------------------------------------------------


def working_tree_files(root: Path) -> list[str]:
    """The checkout's files as git sees them: tracked (unless deleted) and untracked but not ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted({name for name in listed.split("\0") if name and (root / name).is_file()})


def export(root: Path, files: Sequence[str], destination: Path) -> None:
    """Copy `files` (paths relative to `root`) into `destination`, keeping their layout."""
    for name in files:
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, destination / name)


# --- which mutants -----------------------------------------------------------------------------------------------


def function_lines(source: str, names: Sequence[str]) -> set[int]:
    """The line numbers of the functions `names` (``"Class.method"`` or ``"function"``) in Python `source`.

    Raises ValueError naming the functions it does not define, so that a renamed function cannot silently drop out of
    a target.
    """
    found: dict[str, range] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    # Its decorators are part of it (cosmic-ray removes them).
                    first = min([child.lineno, *(decorator.lineno for decorator in child.decorator_list)])
                    found[name] = range(first, child.end_lineno + 1)  # type: ignore[operator]
                visit(child, name + ".")

    visit(ast.parse(source), "")
    missing = [name for name in names if name not in found]
    if missing:
        raise ValueError(f"no function {', '.join(missing)} in the source; it defines {', '.join(sorted(found))}")
    return {line for name in names for line in found[name]}


def selected_lines(directory: Path, target: Target) -> dict[str, set[int] | None]:
    """Per file of `target`, the lines whose mutants are tested (None: all of them)."""
    return {
        path: None if names is None else function_lines((directory / path).read_text(), names)
        for path, names in target.functions.items()
    }


def wanted(path: str | Path, line: int, lines: dict[str, set[int] | None]) -> bool:
    """Whether a mutation at `line` of file `path` is in the `lines` that `selected_lines` gives."""
    selected = lines.get(Path(path).as_posix(), set())
    return selected is None or line in selected


def kept_operator(name: str) -> bool:
    """Whether mutants of cosmic-ray's operator `name` (``core/ReplaceBinaryOperator_Add_Sub``) are tested: those
    of the families in `COUNTERPARTS` only by a counterpart, those of any other operator all."""
    family, _, replacement = name.removeprefix("core/").partition("_")
    return family not in COUNTERPARTS or replacement in COUNTERPARTS[family].split()


# --- cosmic-ray -----------------------------------------------------------------------------------------------------


def cosmic_ray() -> Any:
    """The cosmic_ray package's session database module, or SystemExit naming the extra that installs it."""
    try:
        from cosmic_ray import work_db
    except ImportError as error:
        message = f"tools/mutation/mutation.py needs cosmic-ray: pip install -e '.[{EXTRA}]' ({error})"
        raise SystemExit(message) from error
    return work_db


def runner_command(directory: Path, target: Target) -> list[str]:
    """The pytest command line, without the tests to run, for `target` in the copy `directory`: it stops at the first
    failure, leaves out the ``timing`` tests and the target's deselected ones."""
    # -n 0: the tests in pytest's own process, not in pyproject's xdist workers (the coverage run labels them there).
    pytest = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-n", "0", "-m", "not timing"]
    deselected = [f"--deselect={test}" for test in target.deselect]
    return [*pytest, *deselected, f"--basetemp={directory / '.pytest-tmp'}"]


def test_command(directory: Path, name: str, select: bool) -> str:
    """The command cosmic-ray runs for each mutant of target `name` in the copy `directory` (it splits it as a shell
    would, and runs it in a session of its own): the target's test files, or with `select` the tests that ran the
    mutated lines (`run_selected`)."""
    if select:
        return shlex.join([sys.executable, str(directory / HERE / "mutation.py"), "select", name])
    return shlex.join([*runner_command(directory, TARGETS[name]), *TARGETS[name].tests])


def write_config(directory: Path, name: str, select: bool, timeout: float) -> Path:
    """cosmic-ray's configuration for target `name` in the copy `directory` (its local distributor: one mutant at a
    time)."""
    config = directory / "mutation.toml"
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = {json.dumps(list(TARGETS[name].functions))}\n"
        f"timeout = {timeout:.1f}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(test_command(directory, name, select))}\n"
        "\n[cosmic-ray.distributor]\n"
        'name = "local"\n'
    )
    return config


def run_checked(command: Sequence[str], directory: Path, env: dict[str, str]) -> str:
    """Run `command` in `directory`; its output, or SystemExit with it if it fails."""
    done = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{shlex.join(command)} failed in {directory}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


def as_record(item: Any, result: Any) -> dict[str, Any]:
    """One mutant of a cosmic-ray session as a plain record: its path, line, operator, and result (None: not run)."""
    (mutation,) = item.mutations
    record: dict[str, Any] = {
        "job_id": item.job_id,
        "path": Path(mutation.module_path).as_posix(),
        "line": mutation.start_pos[0],
        "operator": mutation.operator_name,
        "result": None,
    }
    if result is not None:
        record["result"] = {
            "worker_outcome": str(getattr(result.worker_outcome, "value", result.worker_outcome)),
            "test_outcome": None if result.test_outcome is None else str(result.test_outcome.value),
            "output": result.output or "",
            "diff": result.diff or "",
        }
    return record


def read_session(work_db: Any, session: Path) -> list[dict[str, Any]]:
    """Every mutant of a session as `as_record` gives it, run or not."""
    with work_db.use_db(str(session), work_db.WorkDB.Mode.open) as db:
        done = [as_record(item, result) for item, result in db.completed_work_items]
        return done + [as_record(item, None) for item in db.pending_work_items]


# --- which tests ran each line --------------------------------------------------------------------------------------
# One run of a target's tests under coverage.py labels every line it runs with the test running then (a dynamic
# context): `pytest_runtest_logstart` sets it in pytest's process, `RunningTest` in the processes the tests start
# (pool workers, scripts). A mutant then runs only the tests that ran its lines: a test that never runs a line
# cannot see it changed.

# The directory, for every process of the coverage run, where pytest writes the running test's id (``current``),
# every test's id in the order they ran (``order``) and the seconds each phase of a test took (``seconds``).
TESTS_DIR = "ATARI_GAME_MUTATION_TESTS"
# The package's code that `RunningTest` leaves unlabelled, labelling the calls it makes instead: the functions that
# loop for a worker process's whole life, serving test after test (a pool of a module-scoped fixture), and the
# modules' bodies (run at import, also by pytest's process before any test: unlabelled there too).
UNLABELLED = ("pool_worker", "worker_process", "<module>")
# A selected test fails as hung after HANG_FACTOR times the longest selected test's time in the coverage run, and
# no sooner than HANG_SECONDS (pytest-timeout).
HANG_FACTOR, HANG_SECONDS = 5, 60
# What the test command prints when no test runs a mutated line: the mutant is "not covered".
NOT_COVERED = "mutation.py: no test runs the mutated lines"
# pytest's process in the coverage run (`pytest_configure` adds it): a child forked from it is not.
PYTEST_PROCESSES: set[int] = set()


def pytest_configure(config: Any) -> None:
    """pytest's hook (the coverage run passes ``-p mutation``): this is pytest's process."""
    PYTEST_PROCESSES.add(os.getpid())


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    """pytest's hook, called before a test's setup: label the lines run from here on (its setup, call and teardown,
    up to the next test's start) with its id, in this process and, through ``current``, in those it starts."""
    import coverage

    coverage.Coverage.current().switch_context(nodeid)
    tests = Path(os.environ[TESTS_DIR])
    with (tests / "order").open("a") as order:
        order.write(nodeid + "\n")
    (tests / "current.new").write_text(nodeid)
    os.replace(tests / "current.new", tests / "current")  # a worker never reads half an id


class RunningTest:
    """A coverage.py plugin (a dynamic context; every process of the coverage run loads it, ``plugins = mutation``):
    outside pytest's process, each outermost call of the package's code (but `UNLABELLED`'s) is labelled with the
    test running when it starts, as pytest's process wrote it. Other lines of these processes stay unlabelled:
    they count as run by every test."""

    def __init__(self) -> None:
        directory = os.environ.get(TESTS_DIR)  # None in a process whose environment a test replaced
        self.current = None if directory is None else Path(directory) / "current"
        self.package = str(ROOT / "atari_game") + os.sep

    def dynamic_context(self, frame: Any) -> str | None:
        code = frame.f_code
        if (
            self.current is None
            or os.getpid() in PYTEST_PROCESSES
            or code.co_name in UNLABELLED
            or not code.co_filename.startswith(self.package)
        ):
            return None
        with contextlib.suppress(FileNotFoundError):  # before the first test
            return self.current.read_text()
        return None


def pytest_runtest_logreport(report: Any) -> None:
    """pytest's hook, after each phase of a test (setup, call, teardown): note how long it took."""
    with (Path(os.environ[TESTS_DIR]) / "seconds").open("a") as seconds:
        seconds.write(f"{report.duration}\t{report.nodeid}\n")


def coverage_init(reg: Any, options: dict[str, str]) -> None:
    """coverage.py's entry point of the plugin module."""
    reg.add_dynamic_context(RunningTest())


def statement_tests(source: str, contexts: dict[int, list[str]], order: Sequence[str]) -> dict[int, list[int] | None]:
    """Which tests ran each line of the Python `source` that belongs to a statement, from coverage.py's `contexts`
    (line -> the labels it ran under, ``""``: outside any test), as indices in `order`, the tests' ids: None when it
    ran outside a test (at import, in a worker between commands), so that any test may depend on it; ``[]`` when it
    never ran. Every line of a statement spanning several lines gets the tests of the whole statement."""
    from coverage.parser import PythonParser

    parser = PythonParser(text=source)
    parser.parse_source()
    statement = {line: parser.first_line(line) for line in range(1, len(source.splitlines()) + 1)}
    ran: dict[int, set[str]] = {}
    for line, labels in contexts.items():
        ran.setdefault(statement.get(line, line), set()).update(labels)
    index = {test: i for i, test in enumerate(order)}
    tests: dict[int, list[int] | None] = {}
    for line, first in statement.items():
        if first in parser.statements:
            labels = ran.get(first, set())
            tests[line] = None if "" in labels else sorted(index[label] for label in labels)
    return tests


def map_tests(name: str, copy: Path, env: dict[str, str]) -> float:
    """Run target `name`'s tests once in the unmutated `copy` under coverage.py (they must pass), and write to
    ``tests.json`` beside the copy which tests ran each line of the target's files (`statement_tests`); return how
    long the run took, in seconds."""
    import coverage

    target, directory = TARGETS[name], copy.parent
    config = directory / "coverage.rc"
    config.write_text(
        "[run]\n"
        f"data_file = {directory / 'coverage' / 'data'}\n"
        "parallel = true\n"
        # The pool's workers (forkserver or spawn) and the Pythons that tests start are measured too.
        "concurrency = multiprocessing,thread\n"
        "patch = subprocess\n"
        f"include = {copy / 'atari_game'}/*\n"
        "plugins = mutation\n"
        # pytest's process sets its labels itself, beside the plugin's.
        "disable_warnings = dynamic-conflict\n"
    )
    (directory / "coverage").mkdir(exist_ok=True)
    for kept in ("order", "seconds"):
        (directory / kept).unlink(missing_ok=True)
    env = dict(env, PYTHONPATH=os.pathsep.join([str(copy), str(copy / HERE)]), **{TESTS_DIR: str(directory)})
    command = [sys.executable, "-m", "coverage", "run", f"--rcfile={config}", *runner_command(copy, target)[1:]]
    started = time.perf_counter()
    # (Under coverage.py, at the lowest priority beside other work, a test can take several times its usual time:
    # pytest's timeout of a hang is raised for this run.)
    run_checked([*command, "-p", "mutation", "-o", "timeout=1200", *target.tests], copy, env)
    seconds = time.perf_counter() - started
    # The processes left behind (a forkserver) write their data as they end.
    with contextlib.suppress(ChildProcessError):  # none left (orphans come to this process, a subreaper: see main)
        while True:
            os.wait()

    measured = coverage.Coverage(config_file=str(config))
    measured.combine(strict=True)
    data = measured.get_data()
    order = (directory / "order").read_text().splitlines()
    durations = dict.fromkeys(order, 0.0)
    for line in (directory / "seconds").read_text().splitlines():
        duration, test = line.split("\t", 1)
        durations[test] += float(duration)
    lines = {}
    for path in target.functions:
        if str(copy / path) not in data.measured_files():
            raise SystemExit(f"{name}: coverage.py measured no line of {copy / path}: the tests import another copy")
        contexts = data.contexts_by_lineno(str(copy / path))
        lines[path] = statement_tests((copy / path).read_text(), contexts, order)
    (directory / "tests.json").write_text(
        json.dumps({"tests": order, "seconds": [durations[test] for test in order], "lines": lines})
    )
    return seconds


def changed_lines(original: str, mutant: str) -> set[int]:
    """The lines of `original` (from 1) that `mutant` changes or deletes, or before which it inserts lines."""
    matcher = difflib.SequenceMatcher(None, original.splitlines(), mutant.splitlines(), autojunk=False)
    return {
        line
        for tag, first, end, _, _ in matcher.get_opcodes()
        if tag != "equal"
        for line in range(first + 1, max(end, first + 1) + 1)
    }


def selected_tests(lines: dict[str, dict[int, list[int] | None]], changed: dict[str, set[int]]) -> list[int] | None:
    """The tests (indices) that ran any of the `changed` lines of each file, as `statement_tests` maps them in
    `lines`: None (every test) if one of them ran outside a test or belongs to no statement, ``[]`` if none ran."""
    chosen: set[int] = set()
    for path, numbers in changed.items():
        for line in numbers:
            tests = lines[path].get(line)
            if tests is None:
                return None
            chosen.update(tests)
    return sorted(chosen)


def quickest_first(tests: Sequence[str], seconds: Sequence[float]) -> list[str]:
    """The `tests` (pytest ids), each taking its `seconds`, in the order a mutant runs them: each file's quickest
    first, and the files in the order of their quickest test. The tests stop at the first failure, so a mutant that
    one of them kills costs less when it comes early; and each file's tests run together, so that a fixture it shares
    among them (a module's pool) is set up once."""
    files: dict[str, list[str]] = {}
    for _, test in sorted(zip(seconds, tests, strict=True)):
        files.setdefault(test.split("::")[0], []).append(test)
    return [test for group in files.values() for test in group]


def run_selected(name: str) -> None:
    """The test command of a run with selection, run in a job's copy (this script's copy): compare the copy's files of
    target `name` with the originals beside it, and run the tests that ran the changed lines, quickest first
    (`quickest_first`; pytest replaces this process), or print `NOT_COVERED` and succeed if none did."""
    target, directory = TARGETS[name], ROOT.parent
    selection = json.loads((directory / "tests.json").read_text())
    lines = {path: {int(line): tests for line, tests in table.items()} for path, table in selection["lines"].items()}
    changed = {
        path: changed_lines((directory / "original" / path).read_text(), (ROOT / path).read_text())
        for path in target.functions
    }
    chosen = selected_tests(lines, changed)
    if chosen == []:
        print(NOT_COVERED, flush=True)
        return
    if chosen is None:
        tests, seconds = list(target.tests), selection["seconds"]
    else:
        seconds = [selection["seconds"][i] for i in chosen]
        tests = quickest_first([selection["tests"][i] for i in chosen], seconds)
    # A test that a mutant hangs fails after several times the longest one's time under coverage.py (itself slower
    # than without), not after pytest's 300 s: a hang costs a minute or two, not the run's timeout.
    hang = max(HANG_SECONDS, HANG_FACTOR * max(seconds, default=0.0))
    command = [*runner_command(ROOT, target), "-o", f"timeout={hang:.0f}", *tests]
    os.execv(command[0], command)


# --- outcomes and the report -----------------------------------------------------------------------------------------


def outcome(record: dict[str, Any]) -> str:
    """One of `OUTCOMES`: cosmic-ray reports a timeout as killed with the output "timeout", and a mutant whose lines
    no test runs as survived with the output `NOT_COVERED`; a mutant whose worker failed (an exception, a crash) or
    that could not start the tests is an error."""
    result = record["result"]
    if result is None:
        return "not run"
    if result["worker_outcome"] != "normal" or result["test_outcome"] not in ("killed", "survived"):
        return "error"
    if result["test_outcome"] == "survived":
        return "not covered" if result["output"].startswith(NOT_COVERED) else "survived"
    return "timed out" if result["output"] == "timeout" else "killed"


@dataclasses.dataclass(frozen=True)
class Summary:
    """The mutants of one target by outcome, and the score ``(killed + timed out) / (killed + timed out + survived +
    not covered)`` (None when none of them ran to an end)."""

    made: int
    counts: dict[str, int]

    @property
    def score(self) -> float | None:
        detected = self.counts["killed"] + self.counts["timed out"]
        decided = detected + self.counts["survived"] + self.counts["not covered"]
        return detected / decided if decided else None


def summarize(records: Sequence[dict[str, Any]]) -> Summary:
    counts = dict.fromkeys(OUTCOMES, 0)
    for record in records:
        counts[outcome(record)] += 1
    return Summary(len(records), counts)


def report(results: dict[str, list[dict[str, Any]]]) -> str:
    """The table of every target's summary, then each target's survivors, those not covered too (file:line,
    operator, the diff)."""
    header = f"{'target':<8}{'mutants':>9}{'killed':>8}{'survived':>10}{'not covered':>13}{'timed out':>11}"
    lines = [header + f"{'errors':>8}{'not run':>9}{'score':>9}"]
    for name, records in results.items():
        summary = summarize(records)
        counts = summary.counts
        score = "-" if summary.score is None else f"{100 * summary.score:.1f} %"
        lines.append(
            f"{name:<8}{summary.made:>9}{counts['killed']:>8}{counts['survived']:>10}{counts['not covered']:>13}"
            f"{counts['timed out']:>11}{counts['error']:>8}{counts['not run']:>9}{score:>9}"
        )
    for name, records in results.items():
        survivors = [r for r in records if outcome(r) in ("survived", "not covered")]
        lines += ["", f"Survivors of {name}: {len(survivors)}"]
        for record in sorted(survivors, key=lambda r: (r["path"], r["line"])):
            covered = "  (not covered)" if outcome(record) == "not covered" else ""
            lines.append(f"{record['path']}:{record['line']}  {record['operator']}{covered}")
            lines += ["    " + line for line in record["result"]["diff"].splitlines() if line.strip()]
    return "\n".join(lines)


# --- a run ----------------------------------------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """The processes below `pid`, children first (from /proc: a test command runs in a session of its own, out of
    reach of its job's process group)."""
    children: dict[int, list[int]] = {}
    for process in (int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()):
        fields = stat_fields(process)
        if fields:  # (not ended meanwhile)
            children.setdefault(int(fields[1]), []).append(process)
    found, queue = [], [pid]
    while queue:
        below = children.get(queue.pop(0), [])
        found += below
        queue += below
    return found


def stop(processes: Sequence[subprocess.Popen]) -> None:
    """End the job processes still running and every process below them, each with its process group.

    A killed test cannot delete the named shared memory and semaphores multiprocessing made for it: the resource
    tracker that multiprocessing started for the tests does, once every process that holds its pipe is gone. So it
    is spared until then (up to `TRACKER_SECONDS`), and ends with its group after."""
    for process in processes:
        if process.poll() is None:
            below = [process.pid, *descendants(process.pid)]
            groups, trackers = set(), []
            for pid in below:
                with contextlib.suppress(OSError):  # gone already
                    groups.add(os.getpgid(pid))
                    if RESOURCE_TRACKER in Path(f"/proc/{pid}/cmdline").read_bytes():
                        trackers.append(pid)
                    else:
                        os.kill(pid, signal.SIGKILL)
            process.wait()
            deadline = time.monotonic() + TRACKER_SECONDS
            while any(map(running, trackers)) and time.monotonic() < deadline:
                time.sleep(0.05)
            for group in groups:  # the trackers, and what else of the groups is no longer below the job
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGKILL)


def stat_fields(pid: int) -> list[str]:
    """The fields of process `pid`'s /proc/PID/stat after its command name (which may hold spaces): its state first,
    then its parent's pid; none if it has ended."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def running(pid: int) -> bool:
    """Whether process `pid` runs (not ended, nor a zombie waiting to be reaped)."""
    return stat_fields(pid)[:1] not in ([], ["Z"])


def mutant_timeout(baseline: float) -> float:
    """The seconds a mutant's tests may take, from the `baseline` seconds of the target's tests unmutated: jobs side
    by side run slower, and a hang still ends."""
    return 2 * baseline + 30


def start_target(name: str, files: Sequence[str], directory: Path, args: argparse.Namespace) -> None:
    """Set up a run of target `name` in `directory` (emptied first): a copy of the working tree `files` per job, the
    originals of the target's files, the tests' map (with selection) and one cosmic-ray session per job, each with
    every `args.jobs`-th mutant; ``started.json`` last, so that a run stopped before it starts again."""
    work_db, target = cosmic_ray(), TARGETS[name]
    shutil.rmtree(directory, ignore_errors=True)
    copies = [directory / f"job{job}" for job in range(args.jobs)]
    for copy in copies:
        export(ROOT, files, copy)
    export(ROOT, list(target.functions), directory / "original")
    first, env = copies[0], dict(os.environ, PYTHONPATH=str(copies[0]))

    # The tests must import the copy, and pass on it unmutated; their time sets the timeout.
    imported = run_checked([sys.executable, "-c", "import atari_game; print(atari_game.__file__)"], first, env)
    if not Path(imported.strip()).is_relative_to(first):
        raise SystemExit(f"the tests would import {imported.strip()}, not the copy in {first}")
    if args.select:
        baseline = map_tests(name, first, env)
    else:
        started = time.perf_counter()
        run_checked([*runner_command(first, target), *target.tests], first, env)
        baseline = time.perf_counter() - started
    timeout = mutant_timeout(baseline)
    print(f"{name}: the tests pass unmutated in {baseline:.0f} s; timeout per mutant {timeout:.0f} s", flush=True)

    # Every mutant cosmic-ray makes of the files, then only those in the selected functions (and the sample).
    config = write_config(first, name, args.select, timeout)
    session = directory / "mutants.sqlite"
    run_checked([sys.executable, "-m", "cosmic_ray.cli", "init", str(config), str(session)], first, env)
    lines = selected_lines(first, target)
    with work_db.use_db(str(session), work_db.WorkDB.Mode.open) as db:
        items = sorted(db.work_items, key=place)  # not by job id, a random one: the same --seed, the same sample
    made = len(items)
    items = [
        item
        for item in items
        if kept_operator(item.mutations[0].operator_name)
        and wanted(item.mutations[0].module_path, item.mutations[0].start_pos[0], lines)
    ]
    kept = len(items)
    if args.max_mutants is not None and kept > args.max_mutants:
        items = sorted(random.Random(args.seed).sample(items, args.max_mutants), key=place)
    print(
        f"{name}: cosmic-ray made {made} mutants of {', '.join(target.functions)}, {kept} of them of the selected "
        f"operators and functions; testing {len(items)}",
        flush=True,
    )
    for job, copy in enumerate(copies):
        write_config(copy, name, args.select, timeout)
        shutil.copy2(session, copy / "session.sqlite")
        with work_db.use_db(str(copy / "session.sqlite"), work_db.WorkDB.Mode.open) as db:
            db.clear()
            db.add_work_items(items[job :: args.jobs])
    (directory / "started.json").write_text(json.dumps(run_options(args)))


def run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options that make a run's mutants and tests: a resumed run must be given the same."""
    return {"max_mutants": args.max_mutants, "seed": args.seed, "jobs": args.jobs, "select": args.select}


def resume_target(name: str, directory: Path, args: argparse.Namespace) -> None:
    """Make the run of target `name` in `directory` ready to go on: check it was started with the same options, and
    put the original files back in its copies (a job stopped while it tested a mutant leaves it in its copy)."""
    started = json.loads((directory / "started.json").read_text())
    if started != run_options(args):
        given = ", ".join(f"{key} {value}" for key, value in run_options(args).items())
        raise SystemExit(f"{name}: the run in {directory} was started with {started}, not {given}: give the same")
    for copy in sorted(directory.glob("job*")):
        export(directory / "original", list(TARGETS[name].functions), copy)


def run_target(name: str, files: Sequence[str], args: argparse.Namespace) -> None:
    """Test target `name`'s mutants not tested yet, `args.jobs` at a time, each job in its copy under `args.state`,
    where the run stays, so that one stopped goes on with ``--resume``."""
    work_db, directory = cosmic_ray(), args.state / name
    if args.resume and (directory / "started.json").is_file():
        resume_target(name, directory, args)
    else:
        start_target(name, files, directory, args)
    copies = sorted(directory.glob("job*"))
    sessions = [copy / "session.sqlite" for copy in copies]
    total, done = len(target_records(directory)), sum(tested(work_db, s) for s in sessions)
    print(f"{name}: {done}/{total} mutants tested already", flush=True)

    # One job per copy, side by side, each testing its session's mutants not tested yet.
    processes: list[subprocess.Popen] = []
    cpu, wall = children_cpu(), time.perf_counter()
    try:
        for copy, session in zip(copies, sessions, strict=True):
            command = [sys.executable, "-m", "cosmic_ray.cli", "exec", str(copy / "mutation.toml"), str(session)]
            with (copy / "exec.log").open("w") as log:  # the job writes to its own copy of the file
                job = subprocess.Popen(
                    command,
                    cwd=copy,
                    env=dict(os.environ, PYTHONPATH=str(copy)),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stop() ends it with all it started
                )
            processes.append(job)
        last = time.perf_counter()
        while any(process.poll() is None for process in processes):
            time.sleep(1)
            reap_orphans({process.pid for process in processes})
            if time.perf_counter() - last >= PROGRESS_SECONDS:
                print(f"{name}: {sum(tested(work_db, s) for s in sessions)}/{total} mutants tested", flush=True)
                last = time.perf_counter()
        for copy, job in zip(copies, processes, strict=True):
            if job.returncode:
                log = (copy / "exec.log").read_text()
                raise SystemExit(f"{name}: cosmic-ray exec failed ({job.returncode}) in {copy}:\n{log[-3000:]}")
    finally:
        stop(processes)
        reap_orphans(set())
        # Also when stopped: then the mutant a job was testing adds its CPU time so far.
        now = sum(tested(work_db, s) for s in sessions) - done
        if now:
            cpu, wall = children_cpu() - cpu, time.perf_counter() - wall
            print(f"{name}: {now} mutants tested in {wall:.0f} s, {cpu / now:.1f} CPU s per mutant", flush=True)


def applied(source: str, diff: str) -> str | None:
    """`source` with cosmic-ray's `diff` of it applied (one hunk: a mutation changes one place), or None when the
    hunk's lines before the change are not in `source` exactly once (the file changed since the run)."""
    hunks = diff.split("\n@@")[1:]
    if len(hunks) != 1:
        return None
    old, new = [], []
    for line in hunks[0].splitlines()[1:]:  # after the @@ line
        if line[:1] in (" ", "-", ""):
            old.append(line[1:])
        if line[:1] in (" ", "+", ""):
            new.append(line[1:])
    before, after = "".join(f"{line}\n" for line in old), "".join(f"{line}\n" for line in new)
    return source.replace(before, after) if source.count(before) == 1 else None


def recheck_target(name: str, files: Sequence[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Test again the survivors (and those not covered) of target `name`'s run kept in `args.state`, against the
    tests of the working tree now, after tests were written for them: in a fresh copy with its own map of tests, each
    survivor's diff applied in turn (`applied`) and its selected tests run (`run_selected`). Their records, each
    with its outcome now (a diff that no longer applies, the target's file changed since, is an error)."""
    run = args.state / name
    survivors = [record for record in target_records(run) if outcome(record) in ("survived", "not covered")]
    directory = args.state / f"{name}-recheck"
    shutil.rmtree(directory, ignore_errors=True)
    copy, original = directory / "job0", directory / "original"
    export(ROOT, files, copy)
    export(ROOT, list(TARGETS[name].functions), original)
    env = dict(os.environ, PYTHONPATH=str(copy))
    timeout = mutant_timeout(map_tests(name, copy, env))
    print(f"{name}: rechecking {len(survivors)} survivors of the run in {run} against the tests now", flush=True)

    rechecked = []
    for record in survivors:
        result = {"worker_outcome": "normal", "test_outcome": "killed", "output": "", "diff": record["result"]["diff"]}
        target = copy / record["path"]
        mutant = applied(target.read_text(), result["diff"])
        if mutant is None:
            result.update(worker_outcome="exception", output="the diff no longer applies: the file changed")
        else:
            target.write_text(mutant)
            command = [sys.executable, str(copy / HERE / "mutation.py"), "select", name]
            test = subprocess.Popen(
                command,
                cwd=copy,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # its own session, as cosmic-ray's: stop() ends it with the workers it starts
            )
            try:
                output = test.communicate(timeout=timeout)[0]
            except subprocess.TimeoutExpired:
                stop([test])
                output = "timeout"
            except BaseException:  # Ctrl-C, SIGTERM: the tests and their workers end too
                stop([test])
                raise
            passed = test.returncode == 0 and output != "timeout"
            result.update(test_outcome="survived" if passed else "killed", output=output)
        export(original, list(TARGETS[name].functions), copy)  # the next survivor starts from the original
        reap_orphans(set())
        rechecked.append({**record, "result": result})
        failed = [line.removeprefix("FAILED ") for line in result["output"].splitlines() if line.startswith("FAILED ")]
        by = f" by {failed[0]}" if failed else ""
        print(
            f"{name}: {record['path']}:{record['line']} {record['operator']}: {outcome(rechecked[-1])}{by}", flush=True
        )
    return rechecked


def target_records(directory: Path) -> list[dict[str, Any]]:
    """Every mutant's record (`as_record`) of the target's run in `directory`, tested or not."""
    work_db = cosmic_ray()
    return [
        record for job in sorted(directory.glob("job*")) for record in read_session(work_db, job / "session.sqlite")
    ]


def children_cpu() -> float:
    """The CPU seconds of this process's children that have ended, and of theirs that they waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def reap_orphans(jobs: set[int]) -> None:
    """Wait for the ended processes handed to this one (a subreaper, see `main`), but the `jobs` (their Popen waits
    for them), so that their CPU time counts in `children_cpu`: a test's forkserver outlives the test's process."""
    while True:
        try:
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # no child left
            return
        if ended is None or ended.si_pid in jobs:
            return
        os.waitpid(ended.si_pid, 0)


def place(item: Any) -> tuple:
    """Where a cosmic-ray work item's mutation is, and which: its file, position, operator and occurrence."""
    (mutation,) = item.mutations
    return str(mutation.module_path), tuple(mutation.start_pos), mutation.operator_name, mutation.occurrence


def tested(work_db: Any, session: Path) -> int:
    """How many mutants of a session have a result."""
    with work_db.use_db(str(session), work_db.WorkDB.Mode.open) as db:
        return int(db.num_results)


def build_parser() -> argparse.ArgumentParser:
    # Imported here, not at the top: coverage.py imports this module as its plugin in every process it measures,
    # before it measures anything, and the package's modules must be imported (at import, measured) by the tests.
    from atari_game.arguments import count, seed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--target",
        nargs="+",
        choices=list(TARGETS),
        default=list(TARGETS),
        help="the code to mutate, with its tests (default: all)",
    )
    parser.add_argument(
        "--max-mutants",
        type=count,
        help="test a random sample of this many mutants per target, for a quick look (default: every mutant)",
    )
    parser.add_argument("--seed", type=seed, default=0, help="picks the --max-mutants sample (default: %(default)s)")
    parser.add_argument(
        "--jobs",
        type=count,
        default=1,
        help="mutants tested at a time, each in a copy of its own (default: %(default)s)",
    )
    parser.add_argument(
        "--no-select",
        dest="select",
        action="store_false",
        help="turn the test selection off: every mutant runs its target's whole test files, not only the tests that "
        "ran its lines (default: on)",
    )
    parser.add_argument(
        "--state",
        type=Path,
        default=STATE,
        help="where the run keeps its copies, sessions and maps of tests (default: %(default)s)",
    )
    again = parser.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        help="go on with the run kept in --state: its targets' mutants not tested yet, a target it has not started "
        "from the start (default: off: a new run)",
    )
    again.add_argument(
        "--recheck",
        action="store_true",
        help="test the survivors of the run kept in --state again, against the tests of the working tree now (after "
        "tests were written for them): which are killed now, which still survive (default: off)",
    )
    parser.add_argument(
        "--results", type=Path, help="also write every mutant's outcome to this file, as JSON lines (default: none)"
    )
    return parser


def write_results(path: Path, results: dict[str, list[dict[str, Any]]]) -> None:
    """Every record of `results` (target -> records) as a line of JSON, with its target and outcome."""
    with path.open("w") as out:
        for target, records in results.items():
            for record in records:
                out.write(json.dumps({"target": target, "outcome": outcome(record), **record}) + "\n")


def recheck(files: Sequence[str], args: argparse.Namespace) -> None:
    """``--recheck``: the survivors of each target's run tested again (`recheck_target`), reported as a run's
    mutants are, then each run's score with the outcomes now."""
    missing = [name for name in dict.fromkeys(args.target) if not (args.state / name / "started.json").is_file()]
    if missing:
        raise SystemExit(f"no run of {', '.join(missing)} in {args.state} to recheck; start one without --recheck")
    results = {name: recheck_target(name, files, args) for name in dict.fromkeys(args.target)}
    if args.results:
        write_results(args.results, results)
    print(report(results))
    for name, rechecked in results.items():
        now = {record["job_id"]: record for record in rechecked}
        records = [now.get(record["job_id"], record) for record in target_records(args.state / name)]
        score = summarize(records).score
        shown = "-" if score is None else f"{100 * score:.1f} %"
        print(f"{name}: the run's score with the survivors' outcomes now: {shown}")


def main(argv: Sequence[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["select"]:  # the test command of a run with selection, in a job's copy
        run_selected(*argv[1:])
        return
    args = build_parser().parse_args(argv)
    cosmic_ray()  # before copying anything
    # SIGTERM stops the run as Ctrl-C does: the jobs are stopped; the run stays in --state, to go on with --resume.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # A subreaper: the processes the tests leave behind become this one's children, so their CPU time is counted.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    files = working_tree_files(ROOT)
    if args.recheck:
        recheck(files, args)
        return
    begun: list[str] = []
    stopped = False
    try:
        for name in dict.fromkeys(args.target):
            begun.append(name)
            run_target(name, files, args)
    except KeyboardInterrupt:
        stopped = True
    # What the targets begun have so far: all of it when the run ended, the mutants tested when it was stopped.
    results = {
        name: target_records(args.state / name) for name in begun if (args.state / name / "started.json").is_file()
    }
    if args.results:
        write_results(args.results, results)
    print(report(results))
    if stopped:
        again = f"python tools/mutation/mutation.py --resume --state {args.state}"
        sys.exit(f"stopped; to go on: {again} and the same options")


if __name__ == "__main__":
    main()
