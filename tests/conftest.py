"""What several test modules share, and the directory every test runs in."""

import os
import signal
from pathlib import Path

import numpy as np
import pytest
from support import NODE

from atari_game.pool import GamePool
from atari_game.worker import available_cores

# What a user's work leaves where they run the trainers: the README's first command (`python examples/ppo.py --game
# Breakout ...`) writes runs/Breakout-1/, and a DQN run of the same seed runs/Breakout-1-dqn/.
USERS_RUNS = {
    "runs/Breakout-1/checkpoint.pt": b"hours of PPO training",
    "runs/Breakout-1/progress.csv": b"frames,seconds,game_return,game_length\n",
    "runs/Breakout-1-dqn/checkpoint.pt": b"hours of DQN training",
}


def changed_runs(directory: Path) -> list[str]:
    """The files under `directory`/runs that differ from `USERS_RUNS` (new, changed or gone), by name."""
    files = [path for path in directory.glob("runs/**/*") if path.is_file()]
    found = {path.relative_to(directory).as_posix(): path.read_bytes() for path in files}
    return sorted(name for name in found.keys() | USERS_RUNS.keys() if found.get(name) != USERS_RUNS.get(name))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """pytest-xdist's workers for ``-n auto`` (pyproject's addopts): one per core this process may run on, at most 4.
    Each test file runs on one worker, and beyond 4 the longest files (the Ray ones, 2-3 minutes each) set the time,
    while each worker holds its own torch and Ray clusters in memory. ``-n 0`` runs the tests in pytest's process."""
    return min(available_cores(), 4)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks `slow` every test that uses a Ray cluster (`cluster`, directly or through a fixture of its own): starting
    one takes seconds, and each such test tens of seconds. The other slow tests carry their marker in their file."""
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


# A test not marked slow that takes longer than this (its set-up, call and tear-down together) is named at the end
# of the run: the contributor's loop, `-m "not slow"`, stays a few minutes only while its tests stay fast. Not a
# failure: a busy machine can slow any test down.
FAST_TEST_SECONDS = 20.0
unmarked_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Adds up the seconds of each test not marked slow (with pytest-xdist, in pytest's own process, which gets every
    worker's reports)."""
    if "slow" not in report.keywords:
        unmarked_seconds[report.nodeid] = unmarked_seconds.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    """Names the tests not marked slow that took longer than `FAST_TEST_SECONDS`, slowest first."""
    slow = sorted((seconds, test) for test, seconds in unmarked_seconds.items() if seconds > FAST_TEST_SECONDS)
    if slow:
        terminalreporter.write_sep("=", f"not marked slow, over {FAST_TEST_SECONDS:.0f} s: mark them or speed them up")
        for seconds, test in reversed(slow):
            terminalreporter.write_line(f"{seconds:.1f} s {test}")


@pytest.fixture(autouse=True, scope="session")
def sb3_logs_in_pytests_own_temporary_directory(tmp_path_factory):
    """Stable-Baselines3 makes a folder in the system's temporary directory (``SB3-<date and time>``, empty unless
    asked to log) for every model that learns; $SB3_LOGDIR, which the tests' subprocesses inherit, keeps them all in
    one folder of pytest's own, removed with the rest."""
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3_logs"))
    yield
    del os.environ["SB3_LOGDIR"]


@pytest.fixture(autouse=True)
def in_a_directory_holding_a_users_runs(tmp_path_factory, monkeypatch):
    """Every test runs in a scratch directory that holds a user's earlier runs (`USERS_RUNS`), and must leave them.

    A test that runs a trainer, the CLI or an example where it stands, instead of in a tmp_path of its own, meets
    them and fails (refused: "runs/Breakout-1 holds a run already") whether or not the checkout it runs from holds
    runs: such a test passes in a fresh clone and fails only after the README's first command, as
    test_ppo.py's bad-arguments case did. A test that writes into runs/ there fails too: in the checkout it would
    overwrite or add to a user's work.
    """
    directory = tmp_path_factory.mktemp("cwd")
    for name, content in USERS_RUNS.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(content)
    monkeypatch.chdir(directory)
    yield
    changed = changed_runs(directory)
    assert not changed, f"the test changed a user's runs where it ran (give it a tmp_path of its own): {changed}"


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C (SIGINT) raises `KeyboardInterrupt` in this process during the test, as it does in a terminal: a pytest
    started as a background job (``python -m pytest &`` in a script, as CI runners may) inherits SIGINT ignored, and
    Python then installs no handler of its own, so a test that sends itself SIGINT would wait forever."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def closing():
    """``closing(cls)`` is a factory for `cls` whose objects are closed after the test, whatever happens in it."""
    made = []

    def factory(cls):
        def make(*args, **kwargs):
            made.append(cls(*args, **kwargs))
            return made[-1]

        return make

    yield factory
    for thing in made:
        thing.close()


@pytest.fixture
def pool_factory(closing):
    """``pool_factory(...)`` makes a `GamePool` of those arguments, closed after the test, whatever happens in it."""
    return closing(GamePool)


@pytest.fixture(scope="module")
def cluster():
    """A Ray cluster of two nodes of 2 CPUs on this machine (`support.NODE`), listening on 127.0.0.1 only, that
    notices a lost node within a few seconds, and this process connected to it: one per test module that uses it.
    (Ray is imported here, not above: the tests that need no cluster run without the ray extra.)"""
    import ray
    from ray.cluster_utils import Cluster

    from atari_game.ray_pool import single_machine_mode

    # Ray notices a lost node after this many missed health checks (default: 5 of 3 s).
    health_checks = {"health_check_period_ms": 500, "health_check_failure_threshold": 4}
    head = {**NODE, "include_dashboard": False, "_system_config": health_checks}
    with single_machine_mode():
        cluster = Cluster(initialize_head=True, head_node_args=head)
        cluster.add_node(**NODE)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def torch_threads():
    """The trainers set torch's thread count for the process: the tests after a test that uses this get theirs back.
    (torch is imported here, not above: most tests run without it.)"""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def unchecked():
    """``unchecked(pool)`` lets any integer action past `pool`'s own check of actions, so that one its games refuse
    reaches a worker, whose failure the test is about; ``del pool._check_actions`` puts the check back."""

    def let_through(pool):
        pool._check_actions = lambda actions, count: np.asarray(actions, np.int64)

    return let_through
