"""The registry of trainers: every trainer is found through its record, and the rest of the package names none."""

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

from atari_game import algorithms, cli, dqn, ppo
from atari_game.algorithm import Algorithm
from atari_game.algorithms import ALGORITHMS, get_algorithm, parse_args
from atari_game.checkpoints import load_checkpoint, save_checkpoint
from atari_game.run_config import RunConfig

PACKAGE = Path(algorithms.__file__).parent


def test_each_trainer_is_one_record_under_its_own_name():
    assert list(ALGORITHMS) == ["ppo", "dqn", "iqn"]  # the first is atari-game train's default
    for name, algorithm in ALGORITHMS.items():
        assert isinstance(algorithm, Algorithm) and algorithm.name == name
        assert issubclass(algorithm.config, RunConfig) and algorithm.doc.splitlines()[0]
        # What a --resume may change is the base's and, for DQN, its own logging, memory and threads besides.
        assert set(RunConfig.RESUMABLE) <= set(algorithm.config.RESUMABLE)
        assert {field.name for field in dataclasses.fields(algorithm.config)} >= set(algorithm.config.RESUMABLE)
    assert set(dqn.Config.RESUMABLE) - set(ppo.Config.RESUMABLE) == {
        "log_every", "torch_threads", "eval_epsilon", "save_memory"
    }  # fmt: skip


def test_an_unknown_trainer_is_refused_naming_the_trainers_there_are():
    with pytest.raises(ValueError, match=r"no trainer is called 'sarsa': the trainers are ppo, dqn, iqn"):
        get_algorithm("sarsa")


def test_no_module_but_the_registry_names_a_trainer_module():
    # A new agent is its module and its line in the registry: nothing else imports a trainer by name, but IQN, which
    # is DQN's loop with its own network and loss.
    importers = set()
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module == "atari_game":
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.removeprefix("atari_game.")]
            if set(names) & set(ALGORITHMS):
                importers.add(path.stem)
    assert importers == {"algorithms", "iqn"}


@pytest.mark.parametrize("name", ["ppo", "dqn", "iqn"])
def test_a_checkpoint_loads_through_its_record_with_the_names_of_earlier_releases(tmp_path, name):
    # A checkpoint of 0.1 names its trainer "algo" and its config's env count "n_envs": read with today's names.
    algorithm = get_algorithm(name)
    config = algorithm.config(game="Pong", run_dir=str(tmp_path), precision="bf16")
    network = algorithm.build(config, torch.device("cpu"))
    saved_config = {
        ("n_envs" if key == "num_envs" else key): value for key, value in dataclasses.asdict(config).items()
    }
    save_checkpoint(
        tmp_path / "checkpoint.pt", {"algo": name, algorithm.network_key: network.state_dict(), "config": saved_config}
    )
    saved = load_checkpoint(tmp_path / "checkpoint.pt")
    assert saved["algorithm"] == name and "algo" not in saved and saved["config"]["num_envs"] == config.num_envs
    loaded, trained = algorithm.load(saved, torch.device("cpu"))
    assert trained == config and loaded.get_submodule("trunk").bf16  # as it trained
    for mine, theirs in zip(loaded.state_dict().values(), network.state_dict().values(), strict=True):
        assert torch.equal(mine, theirs)
    # Its policies: one action for one game, one per game for a batch.
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8).numpy()
    assert 0 <= algorithm.policy(loaded, torch.device("cpu"), trained)(obs[0]) < 6
    assert algorithm.batch_policy(loaded)(obs).shape == (3,)


def test_ppo_checkpoint_every_counts_frames_and_an_update_count_is_refused_with_its_frames(tmp_path, capsys):
    # Until 0.2 PPO's --checkpoint-every counted updates (50): a count under one update's frames is one of those.
    run = ["--run-dir", str(tmp_path / "run"), "--num-envs", "2", "--n-steps", "16", "--n-minibatches", "2"]
    assert parse_args("ppo", [*run, "--checkpoint-every", "128"]).checkpoint_every == 128
    with pytest.raises(SystemExit) as exit_:
        parse_args("ppo", [*run, "--checkpoint-every", "50"])
    assert exit_.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "--checkpoint-every 50 is under one update's 4 x --num-envs x --n-steps = 128 frames: it counts emulator "
            "frames (it counted updates before 0.2; 50 updates are --checkpoint-every 6400)"
        )
    )


@pytest.mark.parametrize("name", ["ppo", "dqn", "iqn"])
def test_an_exported_agent_is_its_network_in_fp16_and_loads_as_a_checkpoint(tmp_path, name, capsys):
    algorithm = get_algorithm(name)
    config = algorithm.config(game="Pong", run_dir=str(tmp_path), precision="fp32")
    network = algorithm.build(config, torch.device("cpu"))
    saved = {"algorithm": name, algorithm.network_key: network.state_dict(), "config": dataclasses.asdict(config)}
    save_checkpoint(tmp_path / "checkpoint.pt", {**saved, "frames": 4096, "optimizer": {"state": "big"}})
    cli.main(["export", str(tmp_path / "checkpoint.pt"), str(tmp_path / "agent.pt")])
    printed = capsys.readouterr().out
    assert printed.startswith(f"written to {tmp_path}/agent.pt (")
    assert printed.endswith(f"watch it with atari-game play Pong --checkpoint {tmp_path}/agent.pt\n")
    agent = torch.load(tmp_path / "agent.pt")
    assert set(agent) == {"algorithm", "config", "frames", algorithm.network_key} and agent["frames"] == 4096
    # Its weights are the network's rounded to fp16; loaded, the network is fp32 again, computing as it trained.
    for key, tensor in network.state_dict().items():
        assert agent[algorithm.network_key][key].dtype == torch.float16
        assert torch.equal(agent[algorithm.network_key][key], tensor.half())
    loaded, trained = algorithm.load(load_checkpoint(tmp_path / "agent.pt"), torch.device("cpu"))
    assert trained == config and all(p.dtype == torch.float32 for p in loaded.parameters())
    for mine, theirs in zip(loaded.state_dict().values(), network.state_dict().values(), strict=True):
        assert torch.equal(mine, theirs.half().float())
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8).numpy()
    assert algorithm.batch_policy(loaded)(obs).shape == (3,)


def test_export_refuses_what_it_cannot_write_or_read(tmp_path, capsys):
    torch.save({"not": "a checkpoint"}, tmp_path / "other.pt")
    for arguments, expected in (
        ([str(tmp_path / "other.pt"), str(tmp_path / "a.pt")], "holds no config"),
        ([str(tmp_path / "other.pt"), str(tmp_path / "other.pt")], f"{tmp_path}/other.pt is the checkpoint itself"),
        ([str(tmp_path / "other.pt"), str(tmp_path / "no" / "a.pt")], f"no folder {tmp_path}/no to write a.pt into"),
        ([str(tmp_path / "missing.pt"), str(tmp_path / "a.pt")], f"no such checkpoint file: {tmp_path}/missing.pt"),
    ):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["export", *arguments])
        assert exit_.value.code == 2 and expected in capsys.readouterr().err, arguments
    assert not (tmp_path / "a.pt").exists()
