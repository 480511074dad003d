"""`Algorithm`: what the rest of the package knows of a trainer, one record each (`atari_game.algorithms` lists them).

A trainer's module (`atari_game.ppo`, `atari_game.dqn`) keeps its algorithm to itself and ends with its record,
``ALGORITHM = Algorithm(...)``: its config, its ``train``, how to build and load its network, and how that network acts.
Training (`atari_game.algorithms.main`), evaluation (`atari_game.evaluate_checkpoint`) and the command line reach a
trainer through its record only, so that a new agent is one module and its line in the registry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from atari_game.learners import Learners
from atari_game.networks import Trunk
from atari_game.run_config import RunConfig

#: A policy for one game: an observation ``uint8 (4, 84, 84)`` in, an action out.
Policy = Callable[[np.ndarray], int]
#: A policy for a batch of games: observations ``uint8 (n, 4, 84, 84)`` in, ``n`` actions (``int64``) out.
BatchPolicy = Callable[[np.ndarray], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One trainer, as the registry gives it to training, evaluation and the command line.

    Attributes:
        name: how it is named everywhere: ``atari-game train --algorithm NAME``, ``examples/NAME.py``, the
            checkpoint's ``"algorithm"``, an evaluation's default algorithm, ``runs/<Game>-<seed>-NAME`` (PPO's runs,
            the first, have no suffix).
        doc: its module's docstring; the first line describes its command in ``--help``.
        config: its ``Config``, a `RunConfig` subclass whose fields are its flags.
        check: what is wrong with a config as its run, as a usage error says it ("" if nothing).
        train: trains as a config says and returns the run directory; its second argument, the process's place
            among the run's learners (`atari_game.learners.Learners`).
        build: a new network as a config says (its game, its protocol's action set: the minimal one or all 18, its
            own network settings), on a device, as train builds it.
        network_key: the key of the checkpoint that holds the weights of the network `build` makes.
        policy: a loaded network as a policy for one game, on a device, acting as the given config says (DQN: its
            ``eval_epsilon``, seeded with its ``seed``); used by ``--eval`` and ``atari-game play``.
        batch_policy: a loaded network on the CPU as a policy for a batch of games (``atari-game evaluate``: PPO
            samples from its policy with torch's generator, DQN acts greedily and the protocol adds its epsilon).
        acting: how `policy` acts under a config, for the lines of ``--eval`` and ``atari-game play``
            ("epsilon 0.01"); None: as it trained (`acting_of` then gives "").
    """

    name: str
    doc: str
    config: type[RunConfig]
    check: Callable[[Any], str]
    train: Callable[[Any, Learners], Path]
    build: Callable[[Any, torch.device], nn.Module]
    network_key: str
    policy: Callable[[Any, torch.device, Any], Policy]
    batch_policy: Callable[[Any], BatchPolicy]
    acting: Callable[[Any], str] | None = None

    def acting_of(self, config: RunConfig) -> str:
        """How `policy` acts under `config` ("epsilon 0.01"), or "" where it acts as it trained."""
        return self.acting(config) if self.acting else ""

    def load(self, saved: dict, device: torch.device) -> tuple[nn.Module, RunConfig]:
        """The network of a checkpoint `saved` (`atari_game.checkpoints.load_checkpoint`) on `device`, computing in
        the precision it trained in (before ``--precision``: fp32), and the config it trained with."""
        config = self.config(**saved["config"])
        network = self.build(config, device)
        network.load_state_dict(saved[self.network_key])
        cast(Trunk, network.get_submodule("trunk")).bf16 = config.precision == "bf16"
        return network, config
