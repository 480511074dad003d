"""--resume goes on from a checkpoint with exactly what the run that never stopped held there, for both trainers.

Each test trains three tiny runs in a tmp_path with the Python API: one that never stops, one that stops right after
its first checkpoint (as a killed run would), and the stopped one resumed (through `parse_config`, as the command
line resumes: the run's config comes from its checkpoint) to the end. What the trainer holds at the start of each
step (the networks' weights, Adam's moments and step count, the learning rate or epsilon, the random generators) is
watched, and compared with ``torch.equal`` and ``==``, never approximately.

What cannot be equal, and why (the trainers' documented behaviour, not a test's tolerance): the games in progress
are not in a checkpoint. A resumed run's pools start new games (PPO and DQN alike), so its rollouts after the resume
differ from the never-stopped run's, and so do the weights they are learned into.

So the tests compare everything at the first step after the resume, and at the end what does not depend on the
games played: the step counts, the schedule, and DQN's exploration generator (which draws the same numbers whatever
the network says). DQN's replay memory is saved beside its checkpoint (replay.npz): a DQN run's gradient steps due
while its first pool step after the resume plays draw from the memory as it was saved (the new transitions enter it
after them), so their batches, losses and weights are the never-stopped run's too, as are the memory's whole content
and its sampling generator there. Without the saved memory (``save_memory=False``) the resumed run refills it for
``learning_starts`` transitions, skipping the gradient steps due then.
"""

import copy
import csv
import dataclasses
import multiprocessing
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from atari_game import dqn, ppo, replay
from atari_game.algorithms import parse_args
from atari_game.worker import available_cores


class Stopped(Exception):
    """Raised right after a run's first checkpoint is written: the run stops there, as a killed one would."""


def held(networks: list[torch.nn.Module], optimizer: torch.optim.Optimizer, more: dict[str, Any]) -> dict[str, Any]:
    """A copy of what a run holds now: the networks' weights, the optimizer's state (Adam's moments and step, the
    learning rate), torch's generator, and `more` (the trainer's own: its frame count, epsilon, numpy generator)."""
    return {
        "weights": [copy.deepcopy(network.state_dict()) for network in networks],
        "optimizer": copy.deepcopy(optimizer.state_dict()),
        "torch_rng": torch.get_rng_state(),
        **copy.deepcopy(more),
    }


def assert_equal(a: Any, b: Any, where: str = "") -> None:
    """`a` and `b` are equal, tensors by `torch.equal` (same shape, dtype and every element), all else by ``==``."""
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_equal(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_equal(x, y, f"{where}[{k}]")
    else:
        assert a == b, where


def watched_train(
    monkeypatch: pytest.MonkeyPatch,
    trainer: Any,
    config: Any,
    build: str,
    step: str,
    more: Callable[[tuple], dict[str, Any]],
    at: set[int],
    stop: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Train `config` with `trainer` (atari_game.ppo or .dqn) and return what the run held at the start of the calls
    numbered `at` (0-based) of its per-step function `step`, and at the end; with `stop`, raise `Stopped` right
    after the first checkpoint. `build` names the trainer's network builder (every network built is watched, in
    order), `more(args)` reads the trainer's own state from the arguments of a `step` call."""
    networks: list[torch.nn.Module] = []
    optimizers: list[torch.optim.Optimizer] = []
    states: list[dict[str, Any]] = []
    calls = 0

    class WatchedAdam(torch.optim.Adam):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            optimizers.append(self)

    def built(*args: Any) -> torch.nn.Module:
        networks.append(build_network(*args))
        return networks[-1]

    def stepped(*args: Any) -> Any:
        nonlocal calls
        if calls in at:
            states.append(held(networks, optimizers[0], more(args)))
        calls += 1
        return run_step(*args)

    def saved_then_stopped(path: Path, saved: dict) -> None:
        save_checkpoint(path, saved)
        raise Stopped

    build_network, run_step, save_checkpoint = getattr(trainer, build), getattr(trainer, step), trainer.save_checkpoint
    with monkeypatch.context() as patch:
        patch.setattr(torch.optim, "Adam", WatchedAdam)
        patch.setattr(trainer, build, built)
        patch.setattr(trainer, step, stepped)
        if stop:
            patch.setattr(trainer, "save_checkpoint", saved_then_stopped)
            with pytest.raises(Stopped):
                trainer.train(config)
        else:
            trainer.train(config)
    return states, held(networks, optimizers[0], {})


# Each test trains and resumes runs (slow). The trainers set torch's thread count for the process: the tests after
# these get theirs back.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("torch_threads")]


def logged_frames(run_dir: Path, column: str) -> list[int]:
    """The frame counts of progress.csv's rows that fill `column` (an update's, not a game's)."""
    with (run_dir / "progress.csv").open() as file:
        return [int(row["frames"]) for row in csv.DictReader(file) if row[column]]


# Each precision, named: auto chooses by timing a probe, and two runs could choose differently on a busy machine.
PRECISIONS = pytest.mark.parametrize("precision", ["fp32", "bf16"])


@PRECISIONS
def test_ppo_resumes_with_the_weights_optimizer_schedule_and_generator_of_the_run_that_never_stopped(
    tmp_path, monkeypatch, precision
):
    # 4 updates of 2 envs x 16 agent steps x 4 frames; the first checkpoint after update 2 (of 0..3).
    config = ppo.Config(
        total_frames=512, num_envs=2, n_steps=16, n_epochs=1, n_minibatches=2, checkpoint_every=256, video=False,
        precision=precision,
    )  # fmt: skip

    def more(args: tuple) -> dict[str, Any]:  # collect(config, pools, agent, device, rollout, frames)
        return {"frames": args[5], "action_rng": args[4].generator.get_state()}

    watch = {"trainer": ppo, "build": "build_agent", "step": "collect", "more": more}
    never_stopped = dataclasses.replace(config, run_dir=str(tmp_path / "never-stopped"))
    at_resume, at_end = watched_train(monkeypatch, config=never_stopped, at={2}, **watch)
    stopped = dataclasses.replace(config, run_dir=str(tmp_path / "stopped"))
    watched_train(monkeypatch, config=stopped, at=set(), stop=True, **watch)
    assert logged_frames(tmp_path / "stopped", "policy_loss") == [128, 256]
    resumed = parse_args("ppo", ["--run-dir", stopped.run_dir, "--resume"])
    assert resumed.precision == precision
    resumed_first, resumed_end = watched_train(monkeypatch, config=resumed, at={0}, **watch)

    # Update 2 starts from the same state either way: weights, Adam's moments and step count, the annealed learning
    # rate, torch's generator (the next minibatches), the actions' generator and the frame count.
    assert resumed_first[0]["frames"] == 256
    assert_equal(resumed_first[0], at_resume[0])
    # At the end the same number of Adam steps, at the same learning rate: 4 updates x 1 epoch x 2 minibatches. The
    # weights and moments differ, learned from the new games the resumed run's pools started.
    for end in (at_end, resumed_end):
        assert {state["step"].item() for state in end["optimizer"]["state"].values()} == {8.0}
        assert end["optimizer"]["param_groups"][0]["lr"] == 2.5e-4 * (1 - 3 / 4)
    assert logged_frames(tmp_path / "stopped", "policy_loss") == [128, 256, 384, 512]  # the log goes on


# 24 pool steps of 2 envs (48 transitions); gradient steps every 4 transitions past the 8th, a target update every 8;
# epsilon falls over the whole run; the first checkpoint after 24 transitions (pool step 12 of 0..23). CleanRL's
# algorithm (one-step targets, uniform replay), whose every stored transition is sampleable at once.
DQN_CONFIG = dqn.Config(
    cleanrl=True,
    total_frames=192,
    num_envs=2,
    batch_size=4,
    buffer_size=64,
    learning_starts=8,
    target_network_frequency=8,
    exploration_fraction=1.0,
    log_every=96,
    checkpoint_every=96,
    video=False,
)


def dqn_more(args: tuple) -> dict[str, Any]:  # choose_actions(q_network, obs, epsilons, rng, device)
    return {"epsilons": args[2].tolist(), "numpy_rng": args[3].bit_generator.state}


DQN_WATCH = {"trainer": dqn, "build": "build_q_network", "step": "choose_actions", "more": dqn_more}


def watch_gradient_steps(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Each gradient step's transition, TD loss and mean Q, and the memory it sampled (every sampleable transition
    and the sampling generator's state before the batch), appended to the list returned, run after run."""
    steps: list[dict[str, Any]] = []
    gradient_step = dqn.gradient_step

    def watched(*args: Any) -> tuple[float, float]:  # (config, q_network, target, optimizer, buffer, device, t)
        buffer = args[4]
        memory = dataclasses.asdict(buffer.get(buffer.indices()))
        generator = copy.deepcopy(buffer._rng.bit_generator.state)
        result = gradient_step(*args)
        steps.append({"transition": args[6], "loss": result, "memory": memory, "generator": generator})
        return result

    monkeypatch.setattr(dqn, "gradient_step", watched)
    return steps


@PRECISIONS
def test_dqn_resumes_with_the_networks_optimizer_schedule_generators_and_memory_of_the_run_that_never_stopped(
    tmp_path, monkeypatch, precision
):
    monkeypatch.setattr(replay, "DICTIONARY_FRAMES", 16)  # the memory is saved compressed with a trained dictionary
    config = dataclasses.replace(DQN_CONFIG, precision=precision)
    gradient_steps = watch_gradient_steps(monkeypatch)
    never_stopped = dataclasses.replace(config, run_dir=str(tmp_path / "never-stopped"))
    at_resume, at_end = watched_train(monkeypatch, config=never_stopped, at={12, 13, 14, 23}, **DQN_WATCH)
    never_stopped_steps = gradient_steps[:]
    stopped = dataclasses.replace(config, run_dir=str(tmp_path / "stopped"))
    watched_train(monkeypatch, config=stopped, at=set(), stop=True, **DQN_WATCH)
    assert (tmp_path / "stopped" / "replay.npz").exists()
    resumed = parse_args("dqn", ["--run-dir", stopped.run_dir, "--resume"])
    assert resumed.precision == precision and resumed.compression == "zstd"
    del gradient_steps[:]
    resumed_first, resumed_end = watched_train(monkeypatch, config=resumed, at={0, 1, 2, 11}, **DQN_WATCH)

    # Pool step 12 starts from the same state either way: the Q-network, the target network (copied at transition
    # 16), Adam's moments and step count, epsilon (1 - 0.99 * 24 / 48), and both generators.
    assert resumed_first[0]["epsilons"] == pytest.approx([1 - 0.99 * 24 / 48, 1 - 0.99 * 25 / 48])
    assert_equal(resumed_first[0], at_resume[0])
    # Its gradient step (transition 24) samples the memory as saved: the same transitions, the same generator, so the
    # same batch and loss; and pool steps 13 and 14 start from the same weights, target network and Adam state.
    assert [step["transition"] for step in never_stopped_steps] == list(range(12, 48, 4))
    first, same = gradient_steps[0], never_stopped_steps[3]
    assert first["transition"] == 24 and first["loss"] == same["loss"]
    assert first["generator"] == same["generator"] and first["memory"].keys() == same["memory"].keys()
    for name, values in first["memory"].items():
        assert values.tobytes() == same["memory"][name].tobytes(), name
    assert len(first["memory"]["indices"]) == 24  # 12 pool steps of 2 envs, all sampleable
    assert_equal(resumed_first[1], at_resume[1])
    assert_equal(resumed_first[2], at_resume[2])
    # From transition 28 on, the batches may hold transitions of the resumed run's new games. But the last pool step
    # acts with the same epsilon and exploration draws (the generator draws the same numbers whatever the network
    # says), and both runs took a gradient step at each of transitions 12, 16, ..., 44: Adam's step count 9.
    assert_equal(resumed_first[3]["epsilons"], at_resume[3]["epsilons"])
    assert_equal(resumed_first[3]["numpy_rng"], at_resume[3]["numpy_rng"])
    assert [step["transition"] for step in gradient_steps] == list(range(24, 48, 4))
    steps = [{state["step"].item() for state in end["optimizer"]["state"].values()} for end in (at_end, resumed_end)]
    assert steps == [{9.0}, {9.0}]
    assert logged_frames(tmp_path / "stopped", "epsilon") == [96, 192]


def test_dqn_without_its_saved_memory_resumes_refilling_it(tmp_path, monkeypatch):
    config = dataclasses.replace(DQN_CONFIG, run_dir=str(tmp_path / "stopped"), save_memory=False)
    watched_train(monkeypatch, config=config, at=set(), stop=True, **DQN_WATCH)
    assert not (tmp_path / "stopped" / "replay.npz").exists()
    # Shortened to 36 transitions, the run would refill its memory past its end (learning after transition 24 + 8, the
    # first gradient step due at 36): refused before any env worker started, naming the least length that learns.
    short = parse_args("dqn", ["--run-dir", config.run_dir, "--resume", "--total-frames", "144"])
    message = (
        "--resume: the replay memory refills for --learning-starts 8 transitions from the checkpoint's 24, which leaves"
        " this run no gradient step: its first is due at transition 36, and the run plays 36 (--total-frames 144 in "
        "whole steps of its 2 envs, 4 frames each); raise --total-frames to at least 152 (or resume with the memory "
        "saved, --save-memory)"
    )
    with pytest.raises(SystemExit, match=re.escape(message)):
        dqn.train(short)
    assert not multiprocessing.active_children()
    # Whether to save the memory is not what the run learns: a resumed run may turn it on.
    resumed = parse_args("dqn", ["--run-dir", config.run_dir, "--resume", "--save-memory"])
    assert resumed.save_memory
    _, resumed_end = watched_train(monkeypatch, config=resumed, at=set(), **DQN_WATCH)
    assert replay.FrameReplay.load(tmp_path / "stopped" / "replay.npz").added == 48 - 24
    # Adam's steps: 3 fewer than the 9 of a run that never stopped (transitions 12, 16, ..., 44): the resumed one
    # skips those due at 24, 28 and 32 while its emptied memory refills for learning_starts transitions.
    assert {state["step"].item() for state in resumed_end["optimizer"]["state"].values()} == {6.0}


def test_dqn_refuses_to_resume_on_a_corrupt_or_another_checkpoints_memory(tmp_path, monkeypatch):
    stopped = tmp_path / "stopped"
    config = dataclasses.replace(DQN_CONFIG, run_dir=str(stopped))
    watched_train(monkeypatch, config=config, at=set(), stop=True, **DQN_WATCH)
    memory = stopped / "replay.npz"
    whole = memory.read_bytes()
    memory.write_bytes(whole[: len(whole) // 2])
    resume = ["--run-dir", str(stopped), "--resume"]
    # Refused before any env worker started, and with torch's threads as the caller had them (a notebook's).
    callers, chosen = torch.get_num_threads(), available_cores() + 2  # (a count the run would not set)
    torch.set_num_threads(chosen)
    try:
        with pytest.raises(SystemExit, match=f"--resume: {memory}: not a whole FrameReplay file .* Delete it"):
            dqn.train(parse_args("dqn", resume))
        assert not multiprocessing.active_children() and torch.get_num_threads() == chosen
    finally:
        torch.set_num_threads(callers)
    # A memory saved at another moment of the run (here: one more transition added, then saved).
    (tmp_path / "copy.npz").write_bytes(whole)
    buffer = replay.FrameReplay.load(tmp_path / "copy.npz")
    obs = np.zeros((2, 4, 84, 84), np.uint8)
    buffer.add(obs, [0, 0], [0.0, 0.0], obs, np.zeros(2, bool), np.zeros(2, bool))
    buffer.save(memory)
    with pytest.raises(SystemExit, match=f"--resume: {memory} is not the memory of the checkpoint beside it: it has"):
        dqn.train(parse_args("dqn", resume))
    assert not multiprocessing.active_children()


@pytest.mark.parametrize(("trainer", "unit"), [(ppo, 4 * 8 * 128), (dqn, 4 * 8)])  # a whole update; a step of 8 envs
def test_resuming_a_run_at_its_end_says_there_is_nothing_to_train_and_rewrites_nothing(trainer, unit, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    algo = trainer.__name__.rsplit(".", 1)[-1]
    torch.save({"algo": algo, "config": {"total_frames": 4_096_000}, "frames": 4_096_000}, run / "checkpoint.pt")
    # The same end, or one short of the next whole update (PPO) or step of the envs (DQN): the trainer rounds down.
    for total in (4_096_000, 4_096_000 + unit - 1, 1_000_000):
        with pytest.raises(SystemExit) as exit_:
            parse_args(trainer.ALGORITHM.name, ["--run-dir", str(run), "--resume", "--total-frames", str(total)])
        assert exit_.value.code == 0
        assert capsys.readouterr().out == (
            f"{run} is trained to 4,096,000 frames, where --total-frames {total:,} ends: nothing to train (a larger "
            "--total-frames goes on)\n"
        )
    assert [path.name for path in run.iterdir()] == ["checkpoint.pt"]
    config = parse_args(
        trainer.ALGORITHM.name, ["--run-dir", str(run), "--resume", "--total-frames", str(4_096_000 + unit)]
    )
    assert config.resume and config.final_frames == 4_096_000 + unit
