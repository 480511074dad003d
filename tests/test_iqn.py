"""The IQN trainer: its network and quantile Huber loss against the paper's formulas written out, a gradient step, its
settings and errors, and a tiny run end to end (outputs, resume, eval, evaluate, play)."""

import csv
import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support import filled_buffer
from test_cli import steps_played

from atari_game import dqn, iqn
from atari_game.algorithms import parse_args
from atari_game.evaluation import evaluate_checkpoint
from atari_game.networks import ImpalaCNN, NatureCNN

IQN = Path(__file__).parent.parent / "examples" / "iqn.py"
CPU = torch.device("cpu")


def small_networks(config: iqn.Config) -> tuple[iqn.QuantileNetwork, iqn.QuantileNetwork]:
    """A Q-network and a target network with other weights, for 4 actions, as `config` says."""
    build = lambda: iqn.QuantileNetwork(4, NatureCNN(), config.quantile_embedding_dim, config.num_quantile_samples)  # noqa: E731
    return build(), build()


def test_the_network_is_the_papers_embedding_times_the_features_then_two_dense_layers():
    torch.manual_seed(0)
    network = iqn.QuantileNetwork(6, NatureCNN(), embedding_dim=8, num_quantile_samples=4)
    obs = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    taus = torch.tensor([[0.1, 0.5, 0.9], [0.25, 0.75, 0.3]])
    quantiles = network(obs, taus)
    assert quantiles.shape == (2, 3, 6) and quantiles.dtype == torch.float32
    features = network.trunk(obs)
    for b in range(2):
        for n in range(3):
            # phi(tau) = ReLU(sum_i cos(pi i tau) w_i + b), i = 0 .. 7 (Dabney et al. 2018, eq. 4)
            cosines = torch.tensor([math.cos(math.pi * i * taus[b, n].item()) for i in range(8)])
            phi = torch.relu(network.embedding.weight @ cosines + network.embedding.bias)
            hidden = torch.relu(network.hidden.weight @ (features[b] * phi) + network.hidden.bias)
            expected = network.head.weight @ hidden + network.head.bias
            assert torch.allclose(quantiles[b, n], expected, atol=1e-5)
    # The agent acts on the mean of K = 4 quantiles at the levels 1/8, 3/8, 5/8, 7/8: the same values every time.
    levels = torch.tensor([[0.125, 0.375, 0.625, 0.875]] * 2)
    assert torch.allclose(network.q_values(obs), network(obs, levels).mean(1), atol=1e-6)
    assert torch.equal(network.q_values(obs), network.q_values(obs))


def test_the_trunks_hand_on_their_features():
    obs = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    assert ImpalaCNN()(obs).shape == (3, ImpalaCNN.features) == (3, 256)
    assert NatureCNN()(obs).shape == (3, NatureCNN.features) == (3, 512)
    config = iqn.Config(game="Pong")
    network = iqn.build_quantile_network(config, CPU)
    assert isinstance(network.trunk, ImpalaCNN) and network.q_values(obs).shape == (3, 6)  # Pong's minimal set
    # fp16, it fits in the repository's 4 MB an agent: 1.24M weights.
    assert sum(parameter.numel() for parameter in network.parameters()) * 2 < 4e6


def written_out_losses(config, q_network, target_network, batch, taus, next_taus):
    """Each sample's quantile Huber loss, from the paper's formulas (Dabney et al. 2018, eq. 3 and 10) one pair of
    quantile levels at a time: sum over the N levels of the mean over the N' targets."""
    losses = []
    for b in range(len(batch.actions)):
        with torch.no_grad():
            # The next action: the greedy one of the target network's mean (the Q-network's with double).
            picker = q_network if config.double else target_network
            next_action = picker.q_values(batch.next_obs[b : b + 1])[0].argmax().item()
            next_quantiles = target_network(batch.next_obs[b : b + 1], next_taus[b : b + 1])[0, :, next_action]
            goes_on = 1.0 - batch.dones[b].item()
            targets = [batch.rewards[b].item() + batch.discounts[b].item() * goes_on * z for z in next_quantiles]
        quantiles = q_network(batch.obs[b : b + 1], taus[b : b + 1])[0, :, batch.actions[b]]
        total = 0.0
        for i, tau in enumerate(taus[b].tolist()):
            for target in targets:
                error = target - quantiles[i]
                kappa = config.kappa
                huber = 0.5 * error**2 if abs(error.item()) <= kappa else kappa * (abs(error) - 0.5 * kappa)
                total = total + abs(tau - (error.item() < 0)) * huber / kappa / len(targets)
        losses.append(total)
    return torch.stack(losses)


@pytest.mark.parametrize("variant", [{}, {"double": True}, {"kappa": 0.02}, {"n_step": 1}])
def test_the_quantile_huber_loss_is_the_papers_written_out(variant):
    torch.manual_seed(0)
    config = dataclasses.replace(iqn.Config(batch_size=6, num_tau_samples=3, num_tau_prime_samples=5), **variant)
    q_network, target_network = small_networks(config)
    sampled = filled_buffer(config, seed=1).sample(6)
    batch = dqn.Transitions(
        *(torch.from_numpy(getattr(sampled, name)) for name in ("obs", "actions")),
        *(torch.from_numpy(getattr(sampled, name)).float() for name in ("rewards", "discounts", "dones")),
        torch.from_numpy(sampled.next_obs),
    )
    # The loss draws the N' target levels, then the N levels, from torch's generator.
    torch.manual_seed(7)
    next_taus, taus = torch.rand(6, 5), torch.rand(6, 3)
    torch.manual_seed(7)
    losses, priorities, q_values = iqn.quantile_loss(config, q_network, target_network, batch)
    expected = written_out_losses(config, q_network, target_network, batch, taus, next_taus)
    assert torch.allclose(losses, expected, rtol=1e-5, atol=1e-7) and losses.requires_grad
    assert torch.equal(priorities, losses.detach()) and not priorities.requires_grad
    taken = q_network(batch.obs, taus)[torch.arange(6), :, batch.actions].mean(1)
    assert torch.allclose(q_values, taken, atol=1e-6)
    if config.kappa < 0.1:  # errors on both sides of kappa: the linear part is exercised too
        assert (losses > 0).all()


def test_a_gradient_step_lowers_the_quantile_loss_of_its_batch():
    torch.manual_seed(0)
    config = iqn.Config(total_frames=4_000, batch_size=8, num_tau_samples=8, num_tau_prime_samples=8)
    q_network, target_network = small_networks(config)
    optimizer = torch.optim.Adam(q_network.parameters(), lr=1e-3)

    def loss_of_the_batch() -> float:  # the same batch, the same quantile levels
        buffer = filled_buffer(config, seed=5)
        torch.manual_seed(3)
        sampled = buffer.sample(8)
        batch = dqn.Transitions(
            *(torch.from_numpy(getattr(sampled, name)) for name in ("obs", "actions")),
            *(torch.from_numpy(getattr(sampled, name)).float() for name in ("rewards", "discounts", "dones")),
            torch.from_numpy(sampled.next_obs),
        )
        with torch.no_grad():
            return iqn.quantile_loss(config, q_network, target_network, batch)[0].mean().item()

    before = loss_of_the_batch()
    torch.manual_seed(3)
    loss, _ = dqn.gradient_step(
        config, q_network, target_network, optimizer, filled_buffer(config, seed=5), CPU, 100, None, iqn.quantile_loss
    )
    assert loss == pytest.approx(before, rel=1e-5)  # uniform replay: every weight 1, the batch's mean
    assert loss_of_the_batch() < before


def test_dopamines_settings_are_the_defaults_and_bad_ones_are_usage_errors(tmp_path, capsys):
    config = parse_args("iqn", ["--run-dir", str(tmp_path / "new")])
    assert (config.network, config.n_step, config.double, config.prioritized) == ("impala", 3, False, False)
    # Adam's epsilon is PyTorch's, not Dopamine's 0.01/32, under which this network's dense layers hardly learn.
    assert (config.learning_rate, config.adam_epsilon, config.target_network_frequency) == (5e-5, 1e-8, 8_000)
    assert (config.num_tau_samples, config.num_tau_prime_samples, config.num_quantile_samples) == (32, 32, 32)
    # DQN's defaults are its own.
    dqn_config = parse_args("dqn", ["--run-dir", str(tmp_path / "dqn")])
    assert (dqn_config.network, dqn_config.learning_rate, dqn_config.adam_epsilon) == ("nature", 1e-4, 1e-8)
    for flags, message in (
        (["--num-tau-samples", "0"], "--num-tau-samples must be at least 1, got 0"),
        (["--kappa", "0"], "--kappa must be a number > 0, got 0.0"),
        (["--network", "resnet"], "argument --network: invalid choice: 'resnet' (choose from 'nature', 'impala')"),
        (["--cleanrl"], "--cleanrl is DQN's (CleanRL's dqn_atari.py algorithm): IQN's one-step version is --n-step 1"),
    ):
        with pytest.raises(SystemExit) as exit_:
            parse_args("iqn", [*flags, "--run-dir", str(tmp_path / "new")])
        assert exit_.value.code == 2 and message in capsys.readouterr().err, flags


def run(cwd, *args, status=0):
    """examples/iqn.py with `args`, run in `cwd` (a tmp_path), ending with `status`."""
    result = subprocess.run([sys.executable, str(IQN), *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert result.returncode == status, result.stderr[-3000:]
    return result


# 4 envs, batches of 8, learning from the 100th transition, a row every 400 frames; the Nature trunk and few quantile
# levels, to train in seconds.
TINY = ["--num-envs", "4", "--batch-size", "8", "--buffer-size", "1000", "--learning-starts", "100"]
TINY += ["--target-network-frequency", "50", "--log-every", "400", "--checkpoint-every", "800", "--network", "nature"]
TINY += ["--num-tau-samples", "4", "--num-tau-prime-samples", "4", "--precision", "fp32"]


@pytest.mark.slow
def test_train_resume_eval_evaluate_and_play(tmp_path):
    run_dir = tmp_path / "run"
    run(tmp_path, "--game", "Pong", "--total-frames", "1600", "--run-dir", str(run_dir), "--no-video", *TINY)
    with (run_dir / "progress.csv").open() as file:
        rows = [row for row in csv.DictReader(file) if row["epsilon"]]
    assert [int(row["gradient_steps"]) for row in rows] == [0, 24, 25, 25]  # DQN's counting
    assert all(math.isfinite(float(row["td_loss"])) and float(row["td_loss"]) > 0 for row in rows[1:])
    saved = torch.load(run_dir / "checkpoint.pt")
    assert saved["algorithm"] == "iqn" and saved["frames"] == 1600 and saved["config"]["network"] == "nature"

    # --resume goes on from the checkpoint with its memory: 50 more gradient steps (200 transitions), no refill.
    run(tmp_path, "--total-frames", "2400", "--run-dir", str(run_dir), "--resume", "--no-video", *TINY[:-2])
    resumed = torch.load(run_dir / "checkpoint.pt")
    assert resumed["frames"] == 2400 and resumed["config"]["num_tau_samples"] == 4
    assert {state["step"].item() for state in resumed["optimizer"]["state"].values()} == {74 + 50}

    result = run(tmp_path, "--eval", str(run_dir / "checkpoint.pt"))
    assert "Pong: one game scored" in result.stdout and steps_played(result.stdout) > 0
    evaluation, _ = evaluate_checkpoint(run_dir / "checkpoint.pt", episodes=2, num_envs=2)
    assert evaluation.algorithm == "iqn" and len(evaluation.returns) == 2
    assert all(-21 <= score <= 21 for score in evaluation.returns)
    play = subprocess.run(
        [sys.executable, "-m", "atari_game", "play", "Pong", "--checkpoint", str(run_dir / "checkpoint.pt")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert play.returncode == 0 and play.stdout.startswith("Pong, trained agent (epsilon 0.01): one game scored"), (
        play.stderr
    )
