"""mutation.py, the mutation-testing driver beside this file: its outcomes, report and choice of mutants, its
selection of the tests per mutant (by the lines each test ran), and its resumable runs.

Not part of the package's test run (pytest's testpaths is tests/): it needs the mutation extra (coverage.py,
cosmic-ray). Run it with ``pip install -e ".[mutation]" && python -m pytest tools/mutation`` (see README.md here).
"""

import difflib
import json
import os
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import mutation


def mutant(line, worker_outcome="normal", test_outcome="killed", output="", diff=""):
    """One mutant as mutation.py records it from a cosmic-ray session (worker_outcome None: not run)."""
    result = {"worker_outcome": worker_outcome, "test_outcome": test_outcome, "output": output, "diff": diff}
    return {
        "job_id": f"j{line}",
        "path": "atari_game/replay.py",
        "line": line,
        "operator": "core/X",
        "result": None if worker_outcome is None else result,
    }


def test_mutation_outcomes_scores_and_survivors_are_read_from_cosmic_rays_results():
    diff = "--- mutation diff ---\n--- aatari_game/replay.py\n+++ batari_game/replay.py\n@@ -12 +12 @@\n-a + 1\n+a - 1"
    records = [
        mutant(3),
        mutant(4),
        mutant(5, output="timeout"),  # cosmic-ray's timeout: killed, with the output "timeout"
        mutant(12, test_outcome="survived", diff=diff),
        mutant(7, worker_outcome="exception", test_outcome="incompetent"),
        mutant(8, worker_outcome="no-test", test_outcome=None),
        mutant(9, worker_outcome=None),
    ]
    assert [mutation.outcome(record) for record in records] == [
        "killed",
        "killed",
        "timed out",
        "survived",
        "error",
        "error",
        "not run",
    ]
    summary = mutation.summarize(records)
    assert summary.made == 7
    assert summary.counts == {"killed": 2, "timed out": 1, "survived": 1, "not covered": 0, "error": 2, "not run": 1}
    assert summary.score == 3 / 4  # errors and mutants not run count neither way
    assert mutation.summarize([mutant(1, worker_outcome=None)]).score is None

    lines = mutation.report({"replay": records, "pool": [mutant(2)]}).splitlines()
    assert lines[:3] == [
        "target    mutants  killed  survived  not covered  timed out  errors  not run    score",
        "replay          7       2         1            0          1       2        1   75.0 %",
        "pool            1       1         0            0          0       0        0  100.0 %",
    ]
    # Each survivor: file:line and operator, then its diff.
    assert lines[3:] == [
        "",
        "Survivors of replay: 1",
        "atari_game/replay.py:12  core/X",
        *("    " + line for line in diff.splitlines()),
        "",
        "Survivors of pool: 0",
    ]


def test_mutation_records_are_made_from_cosmic_rays_work_items_and_results():
    spec = types.SimpleNamespace(module_path=Path("atari_game/pool.py"), start_pos=(41, 8), operator_name="core/Y")
    item = types.SimpleNamespace(job_id="abc", mutations=(spec,))
    result = types.SimpleNamespace(
        worker_outcome=types.SimpleNamespace(value="normal"),
        test_outcome=types.SimpleNamespace(value="survived"),
        output=None,
        diff="d",
    )
    expected = {"job_id": "abc", "path": "atari_game/pool.py", "line": 41, "operator": "core/Y"}
    assert mutation.as_record(item, None) == {**expected, "result": None}
    outcome = {"worker_outcome": "normal", "test_outcome": "survived", "output": "", "diff": "d"}
    assert mutation.as_record(item, result) == {**expected, "result": outcome}


FUNCTIONS = """
def free(x):
    return x


class Block:
    def step(self):
        return 1

    @staticmethod
    def play():
        return 2
"""


def test_mutation_tests_the_lines_of_the_named_functions_only():
    assert mutation.function_lines(FUNCTIONS, ["free"]) == {2, 3}
    assert mutation.function_lines(FUNCTIONS, ["Block.step", "Block.play"]) == {7, 8, 10, 11, 12}  # the decorator too
    message = "no function Block.run, step in the source; it defines Block.play, Block.step, free"
    with pytest.raises(ValueError, match=re.escape(message)):
        mutation.function_lines(FUNCTIONS, ["Block.run", "step"])
    lines = {"a/x.py": {7, 8}, "a/y.py": None}
    assert [mutation.wanted(path, line, lines) for path, line in [("a/x.py", 7), ("a/x.py", 9), ("a/y.py", 1)]] == [
        True,
        False,
        True,
    ]
    assert not mutation.wanted(Path("a/z.py"), 1, lines)  # a file outside the target


def test_mutation_targets_name_functions_their_modules_define():
    root = mutation.ROOT
    lines = mutation.selected_lines(root, mutation.TARGETS["pool"])
    assert lines["atari_game/pool_worker.py"] and lines["atari_game/pool.py"]
    assert all(mutation.selected_lines(root, target) for target in mutation.TARGETS.values())
    assert all((root / test).is_file() for target in mutation.TARGETS.values() for test in target.tests)


def test_mutation_without_cosmic_ray_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cosmic_ray", None)  # an import of it fails
    with pytest.raises(SystemExit, match=r"needs cosmic-ray: pip install -e '\.\[mutation\]'"):
        mutation.cosmic_ray()
    with pytest.raises(SystemExit):
        mutation.build_parser().parse_args(["--jobs", "0"])
    assert mutation.build_parser().parse_args(["--target", "pool", "replay"]).target == ["pool", "replay"]


def test_mutation_keeps_each_operator_replaced_by_its_counterpart_only():
    kept = [
        "core/ReplaceBinaryOperator_Add_Sub",
        "core/ReplaceComparisonOperator_Lt_LtE",
        "core/ReplaceUnaryOperator_Delete_Not",
        "core/NumberReplacer",
        "core/ZeroIterationForLoop",
    ]
    dropped = [
        "core/ReplaceBinaryOperator_Add_Pow",
        "core/ReplaceComparisonOperator_Lt_Is",
        "core/ReplaceUnaryOperator_USub_Not",
    ]
    assert [mutation.kept_operator(name) for name in kept + dropped] == [True] * len(kept) + [False] * len(dropped)


def test_mutation_runs_each_targets_tests_to_the_first_failure_in_one_process_without_the_timing_and_deselected_ones():
    root = mutation.ROOT
    target = mutation.TARGETS["pool"]
    command = shlex.split(mutation.test_command(Path("/copy"), "pool", select=False))
    pytest = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-n", "0", "-m", "not timing"]
    assert command[:11] == pytest
    tests = ["tests/test_pool_values.py", "tests/test_pool.py"]
    assert command[-3:] == ["--basetemp=/copy/.pytest-tmp", *tests]
    # Each test left out still exists (a renamed one would silently come back in).
    for test in target.deselect:
        assert f"--deselect={test}" in command
        path, name = test.split("::")
        assert f"def {name}(" in (root / path).read_text()


SOURCE = """import os

LIMIT = 1


def grow(a):
    b = (a +
         LIMIT)
    if b > 2:
        return b
    return 0
"""


def test_each_line_of_a_statement_gets_the_tests_that_ran_the_statement():
    # coverage.py records a multi-line statement on any of its lines (here 7 for one test, 8 for another), and lines
    # run outside a test (imports, definitions: "") may matter to every test.
    contexts = {1: [""], 3: [""], 6: [""], 7: ["t1"], 8: ["t2"], 9: ["t1", "t2"], 11: ["t2"]}
    tests = mutation.statement_tests(SOURCE, contexts, ["t1", "t2", "t3"])
    assert tests == {1: None, 3: None, 6: None, 7: [0, 1], 8: [0, 1], 9: [0, 1], 10: [], 11: [1]}
    # Line 10 never ran: no test can see a change to it. Blank lines belong to no statement.
    assert mutation.selected_tests({"m.py": tests}, {"m.py": {10}}) == []
    assert mutation.selected_tests({"m.py": tests}, {"m.py": {8, 11}}) == [0, 1]
    assert mutation.selected_tests({"m.py": tests}, {"m.py": {11, 3}}) is None
    assert mutation.selected_tests({"m.py": tests}, {"m.py": {4}}) is None  # a line of no statement: every test


def test_the_changed_lines_are_those_of_the_original_a_mutant_replaces_deletes_or_inserts_before():
    assert mutation.changed_lines(SOURCE, SOURCE.replace("b > 2", "b >= 2")) == {9}
    assert mutation.changed_lines(SOURCE, SOURCE.replace("    b = (a +\n", "    b = (a -\n")) == {7}
    assert mutation.changed_lines("a\nb\nc\n", "a\nc\n") == {2}
    assert mutation.changed_lines("a\nb\n", "a\nx\ny\nb\n") == {2}
    assert mutation.changed_lines(SOURCE, SOURCE) == set()


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A run's directory for target "game" as `map_tests` leaves it, with this script's copy in job0 (`ROOT`):
    the original game.py, a map where tests 0 and 2 of three (taking 3, 1 and 0.5 s) ran line 9, test 1 line 11, and
    line 3 ran at import."""
    name = "atari_game/game.py"
    (tmp_path / "original" / "atari_game").mkdir(parents=True)
    (tmp_path / "job0" / "atari_game").mkdir(parents=True)
    (tmp_path / "original" / name).write_text(SOURCE)
    lines = {"1": None, "3": None, "6": None, "7": [], "8": [], "9": [0, 2], "10": [0], "11": [1]}
    tests = ["tests/test_game.py::test_a", "tests/test_game.py::test_b[x y]", "tests/test_reference.py::test_c"]
    seconds = [3.0, 1.0, 0.5]
    (tmp_path / "tests.json").write_text(json.dumps({"tests": tests, "seconds": seconds, "lines": {name: lines}}))
    monkeypatch.setattr(mutation, "ROOT", tmp_path / "job0")
    ran = []
    monkeypatch.setattr(os, "execv", lambda path, command: ran.append(command))
    return types.SimpleNamespace(mutant=tmp_path / "job0" / name, ran=ran)


def test_a_mutant_runs_the_tests_that_ran_its_lines_quickest_first(job, capsys):
    job.mutant.write_text(SOURCE.replace("b > 2", "b >= 2"))
    mutation.main(["select", "game"])
    (command,) = job.ran
    base = mutation.runner_command(job.mutant.parent.parent, mutation.TARGETS["game"])
    # A hung test fails after 60 s: 5 times the longest selected test's 3 s is less.
    assert command == [*base, "-o", "timeout=60", "tests/test_reference.py::test_c", "tests/test_game.py::test_a"]
    assert capsys.readouterr().out == ""


def test_a_selected_test_hangs_after_five_times_the_longest_selected_tests_time(job):
    job.mutant.write_text(SOURCE.replace("b > 2", "b >= 2"))
    selection = json.loads((job.mutant.parent.parent.parent / "tests.json").read_text())
    (job.mutant.parent.parent.parent / "tests.json").write_text(json.dumps({**selection, "seconds": [30.0, 90.0, 0.5]}))
    mutation.main(["select", "game"])
    assert job.ran[0][-4:] == ["-o", "timeout=150", "tests/test_reference.py::test_c", "tests/test_game.py::test_a"]
    # A mutant that runs every test file: the longest of them all.
    job.mutant.write_text(SOURCE.replace("LIMIT = 1", "LIMIT = 2"))
    mutation.main(["select", "game"])
    assert job.ran[1][-len(mutation.TARGETS["game"].tests) - 2 :][:2] == ["-o", "timeout=450"]


def test_the_quickest_tests_come_first_and_each_files_tests_together():
    tests = ["a.py::slow", "b.py::quick", "a.py::quick", "b.py::slow", "c.py::one"]
    seconds = [5.0, 0.1, 0.2, 9.0, 1.0]
    expected = ["b.py::quick", "b.py::slow", "a.py::quick", "a.py::slow", "c.py::one"]
    assert mutation.quickest_first(tests, seconds) == expected


def test_a_mutant_of_a_line_run_at_import_runs_every_test_file(job):
    job.mutant.write_text(SOURCE.replace("LIMIT = 1", "LIMIT = 2"))
    mutation.main(["select", "game"])
    tests = list(mutation.TARGETS["game"].tests)
    assert job.ran[0][-len(tests) :] == tests


def test_a_mutant_of_lines_no_test_ran_runs_nothing_and_says_it_is_not_covered(job, capsys):
    job.mutant.write_text(SOURCE.replace("    b = (a +\n", "    b = (a -\n"))
    mutation.main(["select", "game"])
    assert job.ran == []
    assert capsys.readouterr().out == mutation.NOT_COVERED + "\n"


def not_covered(line):
    """A mutant the test command found no test for, as mutation.py records it from cosmic-ray."""
    result = {"worker_outcome": "normal", "test_outcome": "survived", "output": mutation.NOT_COVERED + "\n", "diff": ""}
    return {"job_id": "j", "path": "atari_game/game.py", "line": line, "operator": "core/X", "result": result}


def test_a_mutant_not_covered_is_its_own_outcome_and_counts_as_survived_in_the_score():
    killed = not_covered(3) | {"result": not_covered(3)["result"] | {"test_outcome": "killed", "output": "F"}}
    survived = not_covered(4) | {"result": not_covered(4)["result"] | {"output": "1 passed"}}
    records = [killed, survived, not_covered(5) | {"result": not_covered(5)["result"] | {"diff": "-a\n+b"}}]
    assert [mutation.outcome(record) for record in records] == ["killed", "survived", "not covered"]
    summary = mutation.summarize(records)
    assert summary.counts["not covered"] == 1 and summary.score == 1 / 3
    lines = mutation.report({"game": records}).splitlines()
    assert lines[1] == "game            3       1         1            1          0       0        0   33.3 %"
    assert lines[3:] == [
        "Survivors of game: 2",
        "atari_game/game.py:4  core/X",
        "atari_game/game.py:5  core/X  (not covered)",
        "    -a",
        "    +b",
    ]


def test_a_worker_labels_each_call_into_the_package_with_the_test_running_when_it_starts(tmp_path, monkeypatch):
    monkeypatch.setenv(mutation.TESTS_DIR, str(tmp_path))
    labels = mutation.RunningTest()
    package = str(mutation.ROOT / "atari_game")

    def frame(name, path=f"{package}/pool_worker.py"):
        return types.SimpleNamespace(f_code=types.SimpleNamespace(co_name=name, co_filename=path))

    assert labels.dynamic_context(frame("run")) is None  # before the first test
    (tmp_path / "current").write_text("tests/test_pool.py::test_a")
    assert labels.dynamic_context(frame("run")) == "tests/test_pool.py::test_a"
    (tmp_path / "current").write_text("tests/test_pool.py::test_b")
    assert labels.dynamic_context(frame("play", f"{package}/game.py")) == "tests/test_pool.py::test_b"
    # The worker's loop serves every test; module bodies run at import; other code is not the package's.
    assert [labels.dynamic_context(frame(name)) for name in ("pool_worker", "<module>")] == [None, None]
    assert labels.dynamic_context(frame("run", "/usr/lib/python3.11/threading.py")) is None
    # pytest's process labels its lines itself.
    monkeypatch.setattr(mutation, "PYTEST_PROCESSES", {os.getpid()})
    assert labels.dynamic_context(frame("run")) is None


def test_a_resumed_run_needs_the_options_it_was_started_with_and_puts_the_originals_back(tmp_path):
    args = mutation.build_parser().parse_args(["--target", "game", "--max-mutants", "40", "--state", str(tmp_path)])
    directory = tmp_path / "game"
    (directory / "original" / "atari_game").mkdir(parents=True)
    (directory / "job0" / "atari_game").mkdir(parents=True)
    (directory / "original" / "atari_game" / "game.py").write_text(SOURCE)
    (directory / "job0" / "atari_game" / "game.py").write_text(SOURCE.replace("+", "-"))  # a job stopped mid-mutant
    (directory / "started.json").write_text(json.dumps(mutation.run_options(args)))
    mutation.resume_target("game", directory, args)
    assert (directory / "job0" / "atari_game" / "game.py").read_text() == SOURCE

    other = mutation.build_parser().parse_args(["--target", "game", "--no-select", "--state", str(tmp_path)])
    started = "{'max_mutants': 40, 'seed': 0, 'jobs': 1, 'select': True}"
    given = "max_mutants None, seed 0, jobs 1, select False"
    with pytest.raises(SystemExit, match=re.escape(f"game: the run in {directory} was started with {started}, not")):
        mutation.resume_target("game", directory, other)
    with pytest.raises(SystemExit, match=re.escape(given)):
        mutation.resume_target("game", directory, other)


def test_a_recheck_tests_each_survivor_again_with_the_tests_now_and_scores_the_run_with_them(
    tmp_path, monkeypatch, capsys
):
    # A run of target "game" whose survivors are: a paddle strength of 2 (test_reference's Breakout game kills it
    # now), a line no test ran (still not covered) and a diff of a line since changed (it no longer applies).
    path = "atari_game/game.py"
    source = (mutation.ROOT / path).read_text()
    strength = source.index("return self._actions[action], 1.0")
    line = source.count("\n", 0, strength) + 1
    noop = source.index("ale_py.Action.NOOP")

    def survivor(job_id: str, mutated: str, outcome: str = "") -> dict:
        diff = "".join(
            difflib.unified_diff(source.splitlines(True), mutated.splitlines(True), f"a/{path}", f"b/{path}")
        )
        result = {"worker_outcome": "normal", "test_outcome": "survived", "output": outcome, "diff": diff}
        return {"job_id": job_id, "path": path, "line": line, "operator": "core/NumberReplacer", "result": result}

    killed = {"job_id": "k", "path": path, "line": 1, "operator": "core/AddNot", "result": None}
    records = [
        survivor("strength", source[:strength] + source[strength:].replace("1.0", "2.0", 1)),
        survivor("unrun", source[:noop] + source[noop:].replace("NOOP", "FIRE", 1), mutation.NOT_COVERED),
        survivor("stale", source[:strength] + source[strength:].replace("1.0", "3.0", 1)),
        killed,
    ]
    # cosmic-ray's diffs end without a newline; the stale one's has a line of context the file no longer has.
    records[0]["result"]["diff"] = records[0]["result"]["diff"].rstrip("\n")
    records[2]["result"]["diff"] = records[2]["result"]["diff"].replace(" # ale-py's continuous", " # another")
    records[3]["result"] = {"worker_outcome": "normal", "test_outcome": "killed", "output": "F", "diff": ""}
    (tmp_path / "game").mkdir()
    (tmp_path / "game" / "started.json").write_text("{}")
    monkeypatch.setattr(mutation, "target_records", lambda directory: records)

    def map_tests(name, copy, env):  # only test_reference's Breakout game ran the paddle strength's line
        test = "tests/test_reference.py::test_bit_identical_to_gymnasium_preprocessing[Breakout-options0]"
        lines = {str(number): [] for number in range(1, source.count("\n") + 2)}
        lines[str(line)] = [0]
        (copy.parent / "tests.json").write_text(json.dumps({"tests": [test], "seconds": [1.0], "lines": {path: lines}}))
        return 10.0

    monkeypatch.setattr(mutation, "map_tests", map_tests)
    # (Not through main(): it needs cosmic-ray, which the tests' install leaves out, and makes the process a subreaper.)
    arguments = ["--recheck", "--target", "game", "--state", str(tmp_path), "--results", str(tmp_path / "r.jsonl")]
    mutation.recheck(mutation.working_tree_files(mutation.ROOT), mutation.build_parser().parse_args(arguments))
    out = capsys.readouterr().out
    assert f"game: {path}:{line} core/NumberReplacer: killed by tests/test_reference.py::test_bit_identical" in out
    assert f"game: {path}:{line} core/NumberReplacer: not covered\n" in out
    assert f"game: {path}:{line} core/NumberReplacer: error\n" in out
    outcomes = [json.loads(row)["outcome"] for row in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert outcomes == ["killed", "not covered", "error"]
    # The run's score counts the survivor killed now: 2 killed of 3 decided (the error is not decided).
    assert "game: the run's score with the survivors' outcomes now: 66.7 %" in out
    # The copy is left with the original file.
    assert (tmp_path / "game-recheck" / "job0" / path).read_text() == source


def test_a_recheck_of_a_target_without_a_run_says_so_before_rechecking_any(tmp_path):
    (tmp_path / "game").mkdir()
    (tmp_path / "game" / "started.json").write_text("{}")
    arguments = ["--recheck", "--target", "game", "pool", "--state", str(tmp_path)]
    with pytest.raises(SystemExit, match=re.escape(f"no run of pool in {tmp_path} to recheck; start one without")):
        mutation.recheck([], mutation.build_parser().parse_args(arguments))


def test_stopped_tests_leave_no_shared_memory_or_semaphore_behind(tmp_path):
    # A test stopped with SIGKILL (Ctrl-C or SIGTERM of a run, a recheck's timeout) cannot close what multiprocessing
    # made for it: named shared memory and semaphores (in /dev/shm) would stay until the machine restarts, unless
    # multiprocessing's resource tracker outlives it and deletes them. (Plain multiprocessing objects, not a pool's:
    # what the pool names, if anything, is its own tests' business.)
    script = tmp_path / "holds_shared_memory.py"
    script.write_text(
        "import multiprocessing, time\n"
        "from multiprocessing import shared_memory\n"
        "if __name__ == '__main__':\n"
        "    memory = shared_memory.SharedMemory(create=True, size=4096)  # named, in /dev/shm\n"
        "    tickets = multiprocessing.get_context('forkserver').Semaphore(0)  # a named semaphore\n"
        "    print(memory.name, tickets._semlock.name, flush=True)\n"
        "    time.sleep(60)\n"
    )
    test = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        memory, semaphore = test.stdout.readline().split()
        left = [Path("/dev/shm", memory.lstrip("/")), Path("/dev/shm", "sem." + semaphore.lstrip("/"))]
        assert all(path.exists() for path in left)
    finally:
        mutation.stop([test])
        test.stdout.close()
    assert test.returncode == -9 and not [path for path in left if path.exists()]
