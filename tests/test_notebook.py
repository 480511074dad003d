"""examples/quickstart.ipynb runs top to bottom in a fresh kernel and shows what it says it shows."""

import hashlib
import os
import re
import time
import uuid
from pathlib import Path

import nbformat
import numpy as np
import pytest
from ipykernel.kernelspec import write_kernel_spec
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

from atari_game import DEFAULT_START_METHOD, Game, worker

# Runs the quickstart notebook in a Jupyter kernel, its pools and a PPO run: a minute.
pytestmark = pytest.mark.slow

# multiprocessing's class of a process started by each method.
PROCESS_CLASSES = {"fork": "ForkProcess", "forkserver": "ForkServerProcess", "spawn": "SpawnProcess"}

NOTEBOOK = Path(__file__).parent.parent / "examples" / "quickstart.ipynb"
MARKER = "ATARI_GAME_NOTEBOOK_TEST"


def processes_marked(token: str) -> list[int]:
    """The pids of this user's processes whose environment holds ``MARKER=token`` (found through /proc)."""
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"{MARKER}={token}".encode() in environ.read_bytes():
                pids.append(int(environ.parent.name))
        except OSError:  # another user's process, or one that just ended
            pass
    return pids


def execute(notebook: nbformat.NotebookNode, tmp_path: Path) -> tuple[dict, list[int]]:
    """Run `notebook` in a fresh kernel working in `tmp_path`; return its cells by id and the pids of the processes
    it left behind."""
    # The kernel runs this interpreter, whatever kernels the machine has (or lacks): a "python3" kernel spec
    # written here comes first on JUPYTER_PATH. So `pip install -e ".[test]"` is all a fresh machine needs.
    write_kernel_spec(tmp_path / "kernels" / "python3")
    token = uuid.uuid4().hex
    env = {
        **os.environ,
        # Every process the kernel starts (the fork server, pool workers, spawned interpreters) inherits this,
        # so any still running after the kernel has shut down can be found.
        MARKER: token,
        # Figures as inline images, even where the environment asks for another backend (MPLBACKEND=Agg in CI).
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(tmp_path))
        # The kernel works in tmp_path: whatever the notebook writes lands there, not in the repository.
        client = NotebookClient(
            notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        )
        client.execute(env=env)  # raises CellExecutionError, naming the cell, if a cell fails; shuts the kernel down
    deadline = time.monotonic() + 10  # the kernel is gone; give its children a moment to notice
    while processes_marked(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    return {cell.id: cell for cell in notebook.cells}, processes_marked(token)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """examples/quickstart.ipynb, executed once."""
    return execute(nbformat.read(NOTEBOOK, as_version=4), tmp_path_factory.mktemp("notebook"))


def stdout(run, cell_id: str) -> str:
    return "".join(out.text for out in run[0][cell_id].outputs if out.output_type == "stream" and out.name == "stdout")


def data(run, cell_id: str, mime: str) -> list[str]:
    """The `mime` ("image/png", "text/html", ...) representations a cell displayed."""
    return [out.data[mime] for out in run[0][cell_id].outputs if mime in out.get("data", {})]


def test_the_notebook_is_stored_without_outputs():
    # Outputs (images, a 650 kB animation) would bloat every diff; Jupyter makes them afresh.
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"cell {cell.id} has stored outputs"


def stderr(run, cell_id: str) -> str:
    return "".join(out.text for out in run[0][cell_id].outputs if out.get("name") == "stderr")


def test_every_cell_runs_without_writing_to_stderr_but_the_trainers_progress_bar(run):
    # Failing cells already made execute() raise; stderr would hold warnings, such as leaked shared memory.
    for cell in run[0].values():
        if cell.cell_type == "code":
            assert cell.execution_count is not None
            if cell.id != "train":
                assert stderr(run, cell.id) == "", f"cell {cell.id} wrote to stderr"
    # tqdm redraws its bar after a carriage return: every redraw is the bar, ending at 1.54k of 1.54k frames; a
    # redraw shorter than the one before ends in the spaces that clear it (a rate with fewer digits, say).
    bars = re.split(r"[\r\n]+", stderr(run, "train").strip())
    others = [bar for bar in bars if not re.fullmatch(r"\s*\d+%\|.*\| [\d.k]+/1\.54k \[.*frame/s.*\] *", bar)]
    assert others == [], others
    assert bars[-1].lstrip().startswith("100%|")


def test_the_pool_starts_inside_the_kernel_and_shows_its_spaces(run):
    text = stdout(run, "pool")
    assert re.search(rf"GamePool\(8 x 'breakout', \d workers\) started with {DEFAULT_START_METHOD}", text), text
    assert "one env:   Box(0, 255, (4, 84, 84), uint8) Discrete(4) ('NOOP', 'FIRE', 'RIGHT', 'LEFT')" in text
    assert "the pool:  Box(0, 255, (8, 4, 84, 84), uint8) MultiDiscrete([4 4 4 4 4 4 4 4])" in text
    assert "obs uint8 (8, 4, 84, 84)" in stdout(run, "step")


def test_the_stacked_frames_are_shown_as_one_image_with_4_axes(run):
    assert len(data(run, "frames", "image/png")) == 1
    assert data(run, "frames", "text/plain")[0].endswith("with 4 Axes>")


def test_the_clip_is_an_inline_animation_of_151_frames(run):
    (html,) = data(run, "clip", "text/html")
    assert "new Animation(" in html
    assert html.count("data:image/png;base64,") == 151  # the first screen and one per step
    assert not data(run, "clip", "image/png")  # the figure was closed: no still image besides the animation


def test_episode_returns_are_collected_and_plotted(run):
    text = stdout(run, "returns")
    match = re.fullmatch(r"(\d+) episodes: mean return \d+\.\d\d, mean length (\d+) steps\n", text)
    assert match, text
    # 300 steps of 8 random Breakout paddles lose dozens of lives, each after tens of steps.
    assert int(match[1]) >= 10
    assert 5 <= int(match[2]) <= 300
    assert len(data(run, "histogram", "image/png")) == 1


def test_the_pool_is_closed_and_spawn_works_inside_the_kernel(run):
    assert "closed)" in stdout(run, "close")
    text = stdout(run, "spawn")
    assert re.search(r"GamePool\(2 x 'breakout', \d workers\)", text), text
    assert "env 0 matches Game(seed=0): True" in text


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds processes through /proc")
def test_no_process_outlives_the_kernel(run):
    assert run[1] == []


def test_the_tutorial_worker_loop_runs_in_the_kernel_with_the_default_start_method(run):
    assert stdout(run, "worker").splitlines()[0] == (
        f"4 workers ({PROCESS_CLASSES[DEFAULT_START_METHOD]}), 100 steps: obs uint8 (4, 4, 84, 84)"
    )


def test_a_few_ppo_updates_train_and_write_into_a_temporary_directory(run):
    precision, placement, written, *updates = stdout(run, "train").splitlines()
    # What the trainer computes in (auto's choice: fp32, or bf16 and the probe's times), said first; then where the
    # envs run.
    assert re.fullmatch(r"precision (fp32|bf16) \(auto: .*\)", precision), precision
    assert re.fullmatch(r"envs: 4 in \d worker processes on this machine", placement), placement
    assert written == "written: checkpoint.pt, learning_curve.png, progress.csv"
    # 3 updates of 4 envs x 32 steps x 4 frames; a fresh agent's entropy is near ln(4) = 1.386.
    assert [line.split(" frames:")[0] for line in updates] == ["512", "1024", "1536"]
    assert all(1.3 <= float(line.split("entropy ")[1]) <= 1.39 for line in updates), updates


# --- the tutorial's code copied into a notebook -------------------------------------------------------------

# The tutorial's loop over 4 Workers, in the notebook that defines them: it prints the class of the processes and a
# digest of every observation, reward, end and episode record, for the test to compare with local Games.
TUTORIAL_LOOP = """\
import hashlib

workers = [Worker(47 + i) for i in range(4)]
for worker in workers:
    worker.child.send(("reset", None))
digest = hashlib.sha256(np.stack([worker.child.recv() for worker in workers]).tobytes())
for actions in np.random.default_rng(0).integers(4, size=(300, 4)).tolist():
    for worker, action in zip(workers, actions):
        worker.child.send(("step", action))
    for worker in workers:
        obs, reward, done, info = worker.child.recv()
        digest.update(obs.tobytes() + repr((reward, done, info)).encode())
for worker in workers:
    worker.child.send(("close", None))
    worker.process.join()
print(type(workers[0].process).__name__, [worker.process.exitcode for worker in workers], digest.hexdigest())
"""
# Another start method, asked for by name, is refused before any process starts, naming the fix.
REFUSED = """\
for method in ("forkserver", "spawn"):
    try:
        Worker(0, start_method=method)
    except RuntimeError as error:
        print(error)
"""


def tutorial_digest() -> str:
    """What `TUTORIAL_LOOP` prints as its digest, from 4 Games played here."""
    games = [Game(47 + i) for i in range(4)]
    digest = hashlib.sha256(np.stack([game.reset() for game in games]).tobytes())
    for actions in np.random.default_rng(0).integers(4, size=(300, 4)).tolist():
        for game, action in zip(games, actions, strict=True):
            obs, reward, done, info = game.step(action)
            digest.update(obs.tobytes() + repr((reward, done, info)).encode())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def copied(tmp_path_factory):
    """A notebook whose first cell is atari_game/worker.py pasted whole, as a student copies the tutorial's code:
    its `worker_process` and `Worker` are then the notebook's own, defined in a ``__main__`` without a file."""
    cells = [
        new_code_cell(Path(worker.__file__).read_text(), id="copy"),
        new_code_cell(TUTORIAL_LOOP, id="loop"),
        new_code_cell(REFUSED, id="refused"),
    ]
    return execute(new_notebook(cells=cells), tmp_path_factory.mktemp("copied"))


def test_the_tutorials_worker_copied_into_a_notebook_starts_with_fork_and_plays_as_local_games(copied):
    assert stdout(copied, "loop") == f"ForkProcess [0, 0, 0, 0] {tutorial_digest()}\n"
    assert stderr(copied, "copy") == stderr(copied, "loop") == "" and copied[1] == []  # no process left behind


def test_another_start_method_for_a_copied_worker_is_refused_in_the_kernel_naming_the_fix(copied):
    refusals = stdout(copied, "refused").splitlines()  # (test_worker.py checks the whole message)
    assert [line.split(", and a new process started with ")[1].split(" cannot")[0] for line in refusals] == [
        "'forkserver'",
        "'spawn'",
    ]
    assert all(line.startswith("worker_process is defined in an interactive session") for line in refusals)
    assert all(line.endswith('import it from there, or start it with start_method="fork".') for line in refusals)
