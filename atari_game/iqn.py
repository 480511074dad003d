"""IQN on Atari with atari_game: implicit quantile networks on the IMPALA CNN, on DQN's loop.

    atari-game train --algorithm iqn --game Breakout --protocol machado      # train
    python examples/iqn.py --eval runs/Breakout-1-iqn/checkpoint.pt            # play one game with a trained agent

IQN (Dabney et al. 2018) learns the whole distribution of the return: the network maps an observation and a
quantile level tau in (0, 1) to that quantile of each action's return, and learns from the quantile Huber loss between
N sampled quantiles of the action taken and N' of the bootstrapped target. It acts on the mean of K quantiles. The
defaults are Dopamine's IQN (n-step 3, uniform replay, Adam 5e-5, a target network copied every 8,000 transitions,
learning from the 20,000th) on the IMPALA CNN, the network of the strongest published agent at 10M frames, but for
Adam's epsilon: PyTorch's 1e-8, not Dopamine's 0.01/32, which stalls this network's dense layers (the guide's
settings). Everything else (acting, the replay memory, epsilon, logs, checkpoints, --resume, several learners) is DQN's
loop (`atari_game.dqn.train`); the Training IQN guide says what differs and what it costs.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional

from atari_game import dqn
from atari_game.game import action_meanings
from atari_game.learners import Learners
from atari_game.networks import TRUNKS, Trunk, on_device
from atari_game.run_config import full_action_space
from atari_game.validation import POSITIVE, at_least, broken_rule


@dataclasses.dataclass
class Config(dqn.Config):
    """All settings of an IQN run: DQN's (`atari_game.dqn.Config`), some with Dopamine's IQN defaults, and IQN's own
    below. Each is a flag of ``atari-game train --algorithm iqn`` and ``examples/iqn.py``."""

    # DQN's settings that Dopamine's IQN sets otherwise (its n-step 3 is DQN's default already; its Adam epsilon,
    # 0.01/32, is not taken: DQN's 1e-8 is, and the Training IQN guide says why).
    network: str = "impala"
    learning_rate: float = 5e-5
    target_network_frequency: int = 8_000
    learning_starts: int = 20_000
    double: bool = False
    prioritized: bool = False
    # IQN's own.
    num_tau_samples: int = 32
    """N: the quantile levels sampled for the Q-network's quantiles of each transition in a gradient step."""
    num_tau_prime_samples: int = 32
    """N': the quantile levels sampled for the target network's quantiles, the targets of the N above."""
    num_quantile_samples: int = 32
    """K: the quantiles averaged for the Q-values the agent acts on and picks the target's action with, at the
    evenly spaced levels (k + 0.5) / K: the same actions every time for the same observation."""
    quantile_embedding_dim: int = 64
    """The cosines cos(pi i tau), i = 0 .. n-1, that embed a quantile level tau before its dense layer."""
    kappa: float = 1.0
    """The quantile Huber loss's threshold: quadratic within kappa of the target, linear beyond."""


RULES = {
    "num_tau_samples": at_least(1),
    "num_tau_prime_samples": at_least(1),
    "num_quantile_samples": at_least(1),
    "quantile_embedding_dim": at_least(1),
    "kappa": POSITIVE,
}


def check_config(config: Config) -> str:
    """What is wrong with `config` as an IQN run, as a usage error would say it; "" if nothing is."""
    if config.cleanrl:
        return "--cleanrl is DQN's (CleanRL's dqn_atari.py algorithm): IQN's one-step version is --n-step 1"
    return dqn.check_config(config) or broken_rule(config, RULES)


# --- the agent ------------------------------------------------------------------------------------------


class QuantileNetwork(dqn.ValueNetwork):
    """IQN's network: a trunk's features of the observation, multiplied element-wise by an embedding of the quantile
    level tau, then a dense layer of 512 and one output per action: that action's tau-quantile of the return.

    The embedding multiplies the trunk's last features (512 for the Nature CNN, 256 for IMPALA's), where the paper
    and Dopamine multiply the convolutions' output (3,136 or 3,872 wide) and then apply the trunk's dense layer to each
    tau: the same network shape, at a seventh of the CPU time of Dopamine's for the same N (the guide's table)."""

    frequencies: torch.Tensor
    acting_taus: torch.Tensor

    def __init__(self, n_actions: int, trunk: Trunk, embedding_dim: int = 64, num_quantile_samples: int = 32) -> None:
        super().__init__()
        self.trunk = trunk
        self.n_actions = n_actions
        self.embedding = nn.Linear(embedding_dim, trunk.features)
        self.hidden = nn.Linear(trunk.features, 512)
        self.head = nn.Linear(512, n_actions)
        # pi i for the cosines of the embedding, and the K levels the agent acts on (not weights: not in the state).
        self.register_buffer("frequencies", math.pi * torch.arange(embedding_dim), persistent=False)
        self.register_buffer("acting_taus", (torch.arange(num_quantile_samples) + 0.5) / num_quantile_samples, False)

    def quantiles(self, features: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        """The quantiles at `taus` ``(batch, n)`` of the return of each action after the trunk's `features`
        ``(batch, trunk.features)``: float ``(batch, n, n_actions)``."""
        embedded = functional.relu(self.embedding(torch.cos(taus.unsqueeze(-1) * self.frequencies)))
        # The head computes like the trunk (bfloat16 under bf16): n times the batch, it costs as much as the trunk.
        with torch.autocast(features.device.type, dtype=torch.bfloat16, enabled=self.trunk.bf16):
            hidden = functional.relu(self.hidden(features.unsqueeze(1) * embedded))
            return self.head(hidden).float()

    def forward(self, obs: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        """``uint8`` observations ``(batch, 4, 84, 84)`` and quantile levels ``(batch, n)`` in, the quantiles of each
        action's return out: float ``(batch, n, n_actions)``."""
        return self.quantiles(self.trunk(obs), taus)

    def mean_values(self, features: torch.Tensor) -> torch.Tensor:
        """Each action's mean return after the trunk's `features`: the mean of its quantiles at the K acting levels,
        float ``(batch, n_actions)``."""
        return self.quantiles(features, self.acting_taus.expand(len(features), -1)).mean(1)

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """The Q-values the agent acts on: each action's mean return (`mean_values`), ``(batch, n_actions)``."""
        return self.mean_values(self.trunk(obs))


def build_quantile_network(config: Config, device: torch.device) -> QuantileNetwork:
    """A new `QuantileNetwork` as `config` says (its game's action set, --network, the embedding, K), on `device`."""
    n_actions = len(action_meanings(config.game, full_action_space(config)))
    network = QuantileNetwork(
        n_actions, TRUNKS[config.network](), config.quantile_embedding_dim, config.num_quantile_samples
    )
    return on_device(network, device)


# --- training -------------------------------------------------------------------------------------------


def quantile_loss(
    config: Config, q_network: QuantileNetwork, target_network: QuantileNetwork, batch: dqn.Transitions
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """IQN's `atari_game.dqn.Loss`: each sample's quantile Huber loss (summed over its N quantiles, averaged over the
    N' targets, as Dopamine's), the same as its priority, and the mean of its N quantiles as its Q-value."""
    size = len(batch.actions)
    # The targets: N' quantiles of the n-step return plus the discounted return of the next action, which the target
    # network picks by its mean (the Q-network with --double), where the episode goes on.
    with torch.no_grad():
        next_features = target_network.trunk(batch.next_obs)
        picker = q_network.q_values(batch.next_obs) if config.double else target_network.mean_values(next_features)
        next_actions = picker.argmax(1)
        next_taus = torch.rand(size, config.num_tau_prime_samples, device=batch.obs.device)
        next_quantiles = target_network.quantiles(next_features, next_taus)
        next_returns = next_quantiles[torch.arange(size), :, next_actions]  # (batch, N')
        bootstrap = (batch.discounts * (1.0 - batch.dones)).unsqueeze(1)
        targets = batch.rewards.unsqueeze(1) + bootstrap * next_returns
    # N quantiles of the action taken, each against every target: errors (batch, N, N').
    taus = torch.rand(size, config.num_tau_samples, device=batch.obs.device)
    quantiles = q_network(batch.obs, taus)[torch.arange(size), :, batch.actions]  # (batch, N)
    errors = targets.unsqueeze(1) - quantiles.unsqueeze(2)
    huber = functional.huber_loss(errors, torch.zeros_like(errors), reduction="none", delta=config.kappa)
    # The quantile regression weight |tau - 1{error < 0}|: over-estimates of a low quantile cost more, and so on.
    weights = (taus.unsqueeze(2) - (errors.detach() < 0).float()).abs()
    losses = (weights * huber / config.kappa).mean(2).sum(1)
    return losses, losses.detach(), quantiles.detach().mean(1)


#: IQN's part of DQN's loop.
IQN = dqn.QLearning(name="iqn", title="IQN", build=build_quantile_network, loss=quantile_loss)


def train(config: Config, learners: Learners | None = None) -> Path:
    """Train IQN as `config` says and return the run directory: `atari_game.dqn.train` with IQN's network and loss."""
    return dqn.train(config, learners, IQN)


#: IQN, as the registry (`atari_game.algorithms`) lists it: DQN's record (its checkpoint's keys, its epsilon-greedy
#: policies on `QuantileNetwork.q_values`) with IQN's config, training and network.
ALGORITHM = dataclasses.replace(
    dqn.ALGORITHM,
    name="iqn",
    doc=__doc__,
    config=Config,
    check=check_config,
    train=train,
    build=build_quantile_network,
)
