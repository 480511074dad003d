"""Mutation testing of the hot paths: how many small deliberate bugs in them do their tests catch?

    pip install -e ".[mutation]"
    python benchmarks/mutation.py [--target replay pool game] [--max-mutants N] [--jobs 2] [--seed 0] [--results F]

For each target it makes the mutants that cosmic-ray makes of the target's code (an operator, comparison, number,
boolean, ``break``/``continue``, exception or decorator changed; an operator only to its counterpart, see
`COUNTERPARTS`), runs the target's tests against each, and prints
per target the mutants tested, killed (a test failed), survived (every test passed), timed out (the tests hung:
detected too), errors (cosmic-ray could not test it) and the score ``(killed + timed out) / (killed + timed out +
survived)``, then every survivor with its file, line and diff:

- ``replay``: ``atari_game/replay.py``, with ``tests/test_replay.py`` and ``tests/test_sb3_replay.py``;
- ``pool``: the step and restart paths, `GameBlock`'s methods in ``atari_game/pool_worker.py`` and the methods of
  `GamePool` in ``atari_game/pool.py`` named in `POOL_FUNCTIONS`, with ``tests/test_pool_values.py`` and
  ``tests/test_pool.py``;
- ``game``: ``atari_game/game.py``, with ``tests/test_game.py`` and ``tests/test_game_properties.py``;

and each also with ``tests/test_mutants.py``, the tests written to kill the survivors of earlier runs.

Tests marked ``timing`` are left out: a wall-clock bound missed on a busy machine is not a mutant caught. Every test
command stops at its first failure (``-x``), so a killed mutant costs less than the whole test files.

It never touches the checkout: it copies the checkout's working tree (its tracked files, and the untracked ones git
does not ignore, so new tests count before they are committed) into a temporary directory, one copy per job,
mutates and tests there, and deletes the copies when it ends, also on Ctrl-C. The tests import the copy
(``PYTHONPATH``), and so do the pool's worker processes: they are started by the test process (forkserver or spawn)
with its ``sys.path``.

**Why cosmic-ray (8.x), not mutmut (3.x).** cosmic-ray writes each mutant into the file on disk and runs the test
command in a new process, so every process that imports the module, the pool's workers included, runs the mutant.
mutmut 3 writes every mutant of a function into one module behind a trampoline that picks one by an environment
variable, runs the mutants in forks of its own process, and runs for each only the tests that called its function
in that process. Tried on ``replay.py`` (mutmut 3.8.1), its first run of the tests fails: ``test_replay.py`` plays
real pools, whose forkserver workers import the main module again, here mutmut's own script, which looks for its
configuration in the test's working directory and exits, so every worker dies. Even past that, code that only the
workers run (`GameBlock.play`) would have no test that called it in mutmut's process, so its mutants would not be
tested ("no tests"). cosmic-ray is slower (a new interpreter per mutant, and the test files up to their first
failure), which ``--jobs`` and ``--max-mutants`` temper. See the Contributing page for the scores.

``--max-mutants N`` tests a random sample of N mutants per target (``--seed`` picks it), for a quick look; ``--jobs``
runs that many mutants at a time, each job in a copy of its own. ``--results FILE`` writes every mutant's outcome
as JSON lines (path, line, operator, outcome, diff). Not run in CI: the whole run takes hours on two cores.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import os
import random
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

from atari_game.cli import count, seed

ROOT = Path(__file__).resolve().parent.parent
# What to install when cosmic-ray is missing.
EXTRA = "mutation"
# How often a run says how far it got.
PROGRESS_SECONDS = 60


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
    "GamePool._post",
    "GamePool._send",
    "GamePool._step_all",
    "GamePool._read_pool_step",
    "GamePool._hand_over",
    "GamePool._next_answer",
    "GamePool._step_each",
    "GamePool._finish_in_flight",
    "GamePool._collect",
    "GamePool._results",
    "GamePool._read",
    "GamePool._add_episode_info",
    "GamePool._worker_died",
    "GamePool._restart_envs",
    "GamePool._replace",
    "GamePool._seeds",
)
# In the order a run takes them by default: the quickest first.
TARGETS = {
    "replay": Target(
        {"atari_game/replay.py": None}, ("tests/test_replay.py", "tests/test_sb3_replay.py", "tests/test_mutants.py")
    ),
    "pool": Target(
        {
            "atari_game/pool_worker.py": ("GameBlock.run", "GameBlock.step", "GameBlock.play", "GameBlock.reset"),
            "atari_game/pool.py": POOL_FUNCTIONS,
        },
        ("tests/test_pool_values.py", "tests/test_pool.py", "tests/test_mutants.py"),
        # Ctrl-C at random moments of 20 steps: on unmutated code it once hung past pytest's 300 s with both cores
        # busy, which a run would count as a mutant killed (test_a_step_interrupted_by_ctrl_c_is_finished_by_the_next
        # still interrupts a step).
        deselect=("tests/test_pool.py::test_ctrl_c_at_any_moment_of_a_step_leaves_the_pool_in_step",),
    ),
    "game": Target(
        {"atari_game/game.py": None}, ("tests/test_game.py", "tests/test_game_properties.py", "tests/test_mutants.py")
    ),
}
# cosmic-ray replaces each binary operator by each of 11 others, each comparison by each of 7 (1,856 mutants of
# replay.py, 1,298 of them binary operators): only the replacement by its counterpart is kept, as mutmut makes
# them (``+`` by ``-``, ``<`` by ``<=``, ``not x`` by ``x``), and every mutant of the other operators.
COUNTERPARTS = {
    "ReplaceBinaryOperator": (
        "Add_Sub Sub_Add Mul_Div Div_Mul FloorDiv_Div Mod_Div Pow_Mul "
        "BitAnd_BitOr BitOr_BitAnd BitXor_BitAnd LShift_RShift RShift_LShift"
    ),
    "ReplaceComparisonOperator": "Lt_LtE LtE_Lt Gt_GtE GtE_Gt Eq_NotEq NotEq_Eq Is_IsNot IsNot_Is In_NotIn NotIn_In",
    "ReplaceUnaryOperator": "Delete_Not Delete_Invert USub_UAdd",
}
# The outcomes of a mutant, in the report's order: detected ones first.
OUTCOMES = ("killed", "timed out", "survived", "error", "not run")


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
        raise SystemExit(f"benchmarks/mutation.py needs cosmic-ray: pip install -e '.[{EXTRA}]' ({error})") from error
    return work_db


def test_command(directory: Path, target: Target) -> str:
    """The command that runs `target`'s tests in the copy `directory`, stopping at the first failure (cosmic-ray
    splits it as a shell would, and runs it in a session of its own)."""
    pytest = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not timing"]
    deselected = [f"--deselect={test}" for test in target.deselect]
    return shlex.join([*pytest, *deselected, f"--basetemp={directory / '.pytest-tmp'}", *target.tests])


def write_config(directory: Path, target: Target, timeout: float) -> Path:
    """cosmic-ray's configuration for `target` in the copy `directory` (its local distributor: one mutant at a time)."""
    config = directory / "mutation.toml"
    config.write_text(
        "[cosmic-ray]\n"
        f"module-path = {json.dumps(list(target.functions))}\n"
        f"timeout = {timeout:.1f}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(test_command(directory, target))}\n"
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


# --- outcomes and the report -----------------------------------------------------------------------------------------


def outcome(record: dict[str, Any]) -> str:
    """One of `OUTCOMES`: cosmic-ray reports a timeout as killed with the output "timeout"; a mutant whose worker
    failed (an exception, a crash) or that could not start the tests is an error."""
    result = record["result"]
    if result is None:
        return "not run"
    if result["worker_outcome"] != "normal" or result["test_outcome"] not in ("killed", "survived"):
        return "error"
    if result["test_outcome"] == "survived":
        return "survived"
    return "timed out" if result["output"] == "timeout" else "killed"


@dataclasses.dataclass(frozen=True)
class Summary:
    """The mutants of one target by outcome, and the score ``(killed + timed out) / (killed + timed out +
    survived)`` (None when none of them ran to an end)."""

    made: int
    counts: dict[str, int]

    @property
    def score(self) -> float | None:
        detected = self.counts["killed"] + self.counts["timed out"]
        decided = detected + self.counts["survived"]
        return detected / decided if decided else None


def summarize(records: Sequence[dict[str, Any]]) -> Summary:
    counts = dict.fromkeys(OUTCOMES, 0)
    for record in records:
        counts[outcome(record)] += 1
    return Summary(len(records), counts)


def report(results: dict[str, list[dict[str, Any]]]) -> str:
    """The table of every target's summary, then each target's survivors (file:line, operator, the diff)."""
    header = f"{'target':<8}{'mutants':>9}{'killed':>8}{'survived':>10}{'timed out':>11}{'errors':>8}{'not run':>9}"
    lines = [header + f"{'score':>9}"]
    for name, records in results.items():
        summary = summarize(records)
        counts = summary.counts
        score = "-" if summary.score is None else f"{100 * summary.score:.1f} %"
        lines.append(
            f"{name:<8}{summary.made:>9}{counts['killed']:>8}{counts['survived']:>10}{counts['timed out']:>11}"
            f"{counts['error']:>8}{counts['not run']:>9}{score:>9}"
        )
    for name, records in results.items():
        survivors = sorted((r for r in records if outcome(r) == "survived"), key=lambda r: (r["path"], r["line"]))
        lines += ["", f"Survivors of {name}: {len(survivors)}"]
        for record in survivors:
            lines.append(f"{record['path']}:{record['line']}  {record['operator']}")
            lines += ["    " + line for line in record["result"]["diff"].splitlines() if line.strip()]
    return "\n".join(lines)


# --- a run ----------------------------------------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    """The processes below `pid`, children first (from /proc: a test command runs in a session of its own, out of
    reach of its job's process group)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        except OSError:  # it ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, queue = [], [pid]
    while queue:
        below = children.get(queue.pop(0), [])
        found += below
        queue += below
    return found


def stop(processes: Sequence[subprocess.Popen]) -> None:
    """End the job processes still running and every process below them, each with its process group."""
    for process in processes:
        if process.poll() is None:
            for pid in [process.pid, *descendants(process.pid)]:
                with contextlib.suppress(OSError):  # gone already
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
        process.wait()


def run_target(
    name: str, target: Target, files: Sequence[str], scratch: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Make `target`'s mutants, run its tests against them in `args.jobs` copies at once, and return their records."""
    work_db = cosmic_ray()
    copies = [scratch / name / f"job{job}" for job in range(args.jobs)]
    for copy in copies:
        export(ROOT, files, copy)
    first, env = copies[0], dict(os.environ, PYTHONPATH=str(copies[0]))

    # The tests must import the copy, and pass on it unmutated; their time sets the timeout.
    imported = run_checked([sys.executable, "-c", "import atari_game; print(atari_game.__file__)"], first, env)
    if not Path(imported.strip()).is_relative_to(first):
        raise SystemExit(f"the tests would import {imported.strip()}, not the copy in {first}")
    started = time.perf_counter()
    run_checked(shlex.split(test_command(first, target)), first, env)
    baseline = time.perf_counter() - started
    timeout = 2 * baseline + 30  # jobs side by side run slower; a hang still ends
    print(f"{name}: the tests pass unmutated in {baseline:.0f} s; timeout per mutant {timeout:.0f} s", flush=True)

    # Every mutant cosmic-ray makes of the files, then only those in the selected functions (and the sample).
    config = write_config(first, target, timeout)
    session = first / "session.sqlite"
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

    # One session per job, each with every `jobs`-th mutant, run side by side.
    sessions = [copy / "session.sqlite" for copy in copies]
    for copy, job_session in zip(copies[1:], sessions[1:], strict=True):
        shutil.copy2(session, job_session)
        write_config(copy, target, timeout)
    for job, job_session in enumerate(sessions):
        with work_db.use_db(str(job_session), work_db.WorkDB.Mode.open) as db:
            db.clear()
            db.add_work_items(items[job :: args.jobs])
    processes: list[subprocess.Popen] = []
    try:
        for copy, job_session in zip(copies, sessions, strict=True):
            command = [sys.executable, "-m", "cosmic_ray.cli", "exec", str(copy / "mutation.toml"), str(job_session)]
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
            if time.perf_counter() - last >= PROGRESS_SECONDS:
                print(f"{name}: {sum(tested(work_db, s) for s in sessions)}/{len(items)} mutants tested", flush=True)
                last = time.perf_counter()
        for copy, job in zip(copies, processes, strict=True):
            if job.returncode:
                log = (copy / "exec.log").read_text()
                raise SystemExit(f"{name}: cosmic-ray exec failed ({job.returncode}) in {copy}:\n{log[-3000:]}")
    finally:
        stop(processes)
    return [record for job_session in sessions for record in read_session(work_db, job_session)]


def place(item: Any) -> tuple:
    """Where a cosmic-ray work item's mutation is, and which: its file, position, operator and occurrence."""
    (mutation,) = item.mutations
    return str(mutation.module_path), tuple(mutation.start_pos), mutation.operator_name, mutation.occurrence


def tested(work_db: Any, session: Path) -> int:
    """How many mutants of a session have a result."""
    with work_db.use_db(str(session), work_db.WorkDB.Mode.open) as db:
        return int(db.num_results)


def build_parser() -> argparse.ArgumentParser:
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
        "--results", type=Path, help="also write every mutant's outcome to this file, as JSON lines (default: none)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    cosmic_ray()  # before copying anything
    # SIGTERM ends the run as Ctrl-C does: the jobs are stopped and the copies deleted.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    files = working_tree_files(ROOT)
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="atari-game-mutation-") as scratch:
        for name in dict.fromkeys(args.target):
            results[name] = run_target(name, TARGETS[name], files, Path(scratch), args)
            if args.results:
                with args.results.open("w") as out:
                    for target, records in results.items():
                        for record in records:
                            out.write(json.dumps({"target": target, "outcome": outcome(record), **record}) + "\n")
    print(report(results))


if __name__ == "__main__":
    main()
