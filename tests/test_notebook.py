"""examples/quickstart.ipynb runs top to bottom in a fresh kernel and shows what it says it shows."""

import os
import re
import time
import uuid
from pathlib import Path

import nbformat
import pytest
from ipykernel.kernelspec import write_kernel_spec
from nbclient import NotebookClient

from atari_game import DEFAULT_START_METHOD

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


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Execute the notebook once; return its cells by id and the pids of the processes it left behind."""
    tmp_path = tmp_path_factory.mktemp("notebook")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
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


def test_every_cell_runs_without_writing_to_stderr(run):
    # Failing cells already made execute() raise; stderr would hold warnings, such as leaked shared memory.
    for cell in run[0].values():
        if cell.cell_type == "code":
            assert cell.execution_count is not None
            assert not [out for out in cell.outputs if out.get("name") == "stderr"], f"cell {cell.id} wrote to stderr"


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
