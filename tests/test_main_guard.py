"""A script without `if __name__ == "__main__":` fails at once with the cause and the fixes; with it, it works.

Under "forkserver" and "spawn" every new process runs the main script again: each case here is a real script
run in a fresh interpreter, as a new user runs the tutorial's code.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from atari_game import DEFAULT_START_METHOD, worker

# What each script starts, and what it prints once the processes answered.
STARTS = {
    "Worker": """
        from atari_game import Worker
        w = Worker(0{options})
        w.child.send(("reset", None))
        print(w.child.recv().shape)
        w.close()
    """,
    "GamePool": """
        from atari_game import GamePool
        pool = GamePool(2, "Pong", n_workers=1{options})
        print(pool.reset(seed=0)[0].shape)
        pool.close()
    """,
    "make_vec": """
        import gymnasium
        import atari_game
        envs = gymnasium.make_vec(
            "atari_game/Pong-v0", num_envs=2, vectorization_mode="vector_entry_point", n_workers=1{options}
        )
        print(envs.reset(seed=0)[0].shape)
        envs.close()
    """,
}
SHAPES = {"Worker": "(4, 84, 84)", "GamePool": "(2, 4, 84, 84)", "make_vec": "(2, 4, 84, 84)"}
LINES = {"Worker": "w = Worker(0", "GamePool": 'pool = GamePool(2, "Pong"', "make_vec": "envs = gymnasium.make_vec("}


def script(start, guarded, options=""):
    """The script's source: the code of `start` at its top level, or under the guard inside a function."""
    code = textwrap.dedent(STARTS[start]).format(options=options)
    if not guarded:
        return code
    return f"def main():\n{textwrap.indent(code, '    ')}\n\nif __name__ == '__main__':\n    main()\n"


def run(args, cwd, stdin=None):
    return subprocess.run([sys.executable, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=120)


def assert_refused(result, source, start, method="forkserver"):
    assert result.returncode == 1 and result.stdout == ""
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"RuntimeError: a {'GamePool' if start == 'make_vec' else start} is started at the top")
    line = next(n for n, text in enumerate(source.splitlines(), 1) if text.startswith(LINES[start]))
    assert f"(line {line}: `{LINES[start]}" in last
    assert f'outside an `if __name__ == "__main__":` block. Under the {method!r} start method' in last
    assert (
        'Fix: put the script\'s top-level code under `if __name__ == "__main__":`, or pass start_method="fork"' in last
    )
    # Refused in the parent: no process started, so no child's traceback.
    assert "bootstrapping phase" not in result.stderr and "forkserver.py" not in result.stderr


@pytest.mark.parametrize("start", list(STARTS))
def test_an_unguarded_script_is_refused_at_once_with_the_cause_and_the_fixes(tmp_path, start):
    source = script(start, guarded=False)
    (tmp_path / "first_contact.py").write_text(source)
    assert_refused(run(["first_contact.py"], tmp_path), source, start)


@pytest.mark.parametrize("start", list(STARTS))
def test_the_same_script_guarded_works(tmp_path, start):
    (tmp_path / "first_contact.py").write_text(script(start, guarded=True))
    result = run(["first_contact.py"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == SHAPES[start].split()


def test_python_dash_m_is_refused_unguarded_under_spawn_and_works_guarded(tmp_path):
    source = script("Worker", guarded=False, options=', start_method="spawn"')
    (tmp_path / "unguarded.py").write_text(source)
    assert_refused(run(["-m", "unguarded"], tmp_path), source, "Worker", method="spawn")
    (tmp_path / "guarded.py").write_text(script("GamePool", guarded=True))
    result = run(["-m", "guarded"], tmp_path)
    assert result.returncode == 0 and result.stdout.split() == SHAPES["GamePool"].split(), result.stderr


def test_fork_python_dash_c_and_a_packages_main_need_no_guard(tmp_path):
    # None of them re-runs the script in the new process.
    (tmp_path / "forked.py").write_text(script("GamePool", guarded=False, options=', start_method="fork"'))
    result = run(["forked.py"], tmp_path)
    assert result.returncode == 0 and result.stdout.split() == SHAPES["GamePool"].split(), result.stderr
    result = run(["-c", script("Worker", guarded=False)], tmp_path)
    assert result.returncode == 0 and result.stdout.split() == SHAPES["Worker"].split(), result.stderr
    (tmp_path / "tutorial").mkdir()
    (tmp_path / "tutorial" / "__main__.py").write_text(script("Worker", guarded=False))
    result = run(["-m", "tutorial"], tmp_path)
    assert result.returncode == 0 and result.stdout.split() == SHAPES["Worker"].split(), result.stderr


def test_a_script_read_from_a_pipe_is_refused_even_guarded(tmp_path):
    # A new process cannot run "<stdin>" again, guard or not.
    result = run(["-"], tmp_path, stdin=script("Worker", guarded=True))
    assert result.returncode == 1 and result.stdout == "" and "forkserver.py" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "RuntimeError: a Worker cannot start under the 'forkserver' start method from a script read from <stdin>: "
        "every new process first runs the main script again, and that one is no file. Fix: save the script to a "
        'file and run that, or pass start_method="fork" (fast, but unsafe once the process runs threads, as it does '
        "after importing torch)."
    )


# The trainer called from a script, as the "From Python" snippet of the Training PPO guide does (unguarded here).
TRAINER = """from atari_game.algorithms import main
main("ppo", ["--total-frames", "4096", "--run-dir", "run", "--no-video"])
"""


def test_a_trainer_called_from_a_scripts_top_level_is_refused_with_the_fixes_a_trainer_has(tmp_path):
    # The trainer takes no start method: the message offers only the fixes that apply, and no run directory is made.
    (tmp_path / "train.py").write_text(TRAINER)
    result = run(["train.py"], tmp_path)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1 and not (tmp_path / "run").exists(), result.stderr
    assert last.startswith("RuntimeError: the PPO trainer's GamePool is started at the top level of ")
    assert last.endswith('Fix: put the script\'s top-level code under `if __name__ == "__main__":`.')
    result = run(["-"], tmp_path, stdin=TRAINER)
    assert result.stderr.strip().splitlines()[-1].endswith("Fix: save the script to a file and run that.")
    assert not (tmp_path / "run").exists()


# atari_game/worker.py copied whole, then its Worker used: the tutorial's code pasted rather than imported.
COPIED_WORKER = """
w = Worker(0)
print(type(w.process).__name__, *w.reset().shape)
w.close()
"""


def test_the_worker_copied_into_python_dash_c_starts_with_fork_and_into_a_script_with_the_default(tmp_path):
    # Under python -c its worker_process exists only in this process: a forkserver child could not find it.
    copy = Path(worker.__file__).read_text()
    result = run(["-c", copy + COPIED_WORKER], tmp_path)
    assert result.returncode == 0 and result.stdout.split() == ["ForkProcess", "4", "84", "84"], result.stderr
    # A script's new processes run it again (guarded) and find its worker_process there.
    (tmp_path / "copied.py").write_text(f"{copy}\nif __name__ == '__main__':\n{textwrap.indent(COPIED_WORKER, '    ')}")
    result = run(["copied.py"], tmp_path)
    expected = {"forkserver": "ForkServerProcess", "spawn": "SpawnProcess"}[DEFAULT_START_METHOD]
    assert result.returncode == 0 and result.stdout.split() == [expected, "4", "84", "84"], result.stderr
