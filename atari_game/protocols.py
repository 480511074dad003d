"""Named evaluation protocols: the settings papers train and evaluate Atari agents under, as one argument.

Scores are comparable only between agents that played the same game the same way: with or without sticky actions,
the minimal or the full action set, a lost life ending the episode or not, how games start and how long they may
last, and how the agent acts when it is scored. A `Protocol` fixes exactly those settings, each cited to the paper
that defines it, for training (``Game(protocol="machado")``, ``atari-game train --protocol machado``) and for
evaluation (`atari_game.evaluate`, ``atari-game evaluate``). Options a protocol does not fix (``fire_reset``,
``clip_rewards``, the observation's size, ...) are the agent's own choice and stay free; setting a fixed one to
another value is refused by name.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
from collections.abc import Mapping
from typing import Any

from atari_game.validation import check_choice

#: What a protocol fixes settings for: training, or scoring.
PHASES = ("train", "evaluate")


@dataclasses.dataclass(frozen=True)
class Protocol:
    """One named protocol.

    Attributes:
        name: what ``protocol=`` and ``--protocol`` take.
        title: the paper, as a reference.
        train: the `GameOptions` it fixes for training.
        evaluate: the `GameOptions` it fixes for evaluation (the games that are scored).
        eval_epsilon: the probability that a scored step's action is replaced by a uniformly random one, whatever the
            agent (0: the agent's own actions; a DQN acts greedily, a PPO agent samples from its policy).
        sources: for each fixed option (and ``eval_epsilon``), where the paper says so.
    """

    name: str
    title: str
    train: Mapping[str, Any]
    evaluate: Mapping[str, Any]
    eval_epsilon: float
    sources: Mapping[str, str]

    def fixed(self, phase: str) -> Mapping[str, Any]:
        """The options it fixes for `phase`: "train" (`train`) or "evaluate" (`evaluate`); a ValueError otherwise."""
        return self.train if check_choice("phase", phase, PHASES) == "train" else self.evaluate

    def describe(self) -> str:
        """One line for a run's log: the name, the paper, and the options it fixes for training."""
        options = ", ".join(f"{name}={value!r}" for name, value in self.train.items())
        return f"protocol {self.name} ({self.title}): {options}"


def _frozen(**options: Any) -> Mapping[str, Any]:
    return types.MappingProxyType(options)


_MACHADO_GAME = _frozen(
    sticky_actions=0.25, full_action_space=True, life_loss="ignore", noop_max=0, fire_reset=False,
    max_episode_frames=108_000,
)  # fmt: skip
#: Machado et al. 2018's recommended setting, for training and scoring alike.
MACHADO = Protocol(
    name="machado",
    title="Machado et al. 2018, Revisiting the Arcade Learning Environment, JAIR 61",
    # The same game for training and evaluation: the paper scores the agent in the setting it learned in.
    train=_MACHADO_GAME,
    evaluate=_MACHADO_GAME,
    eval_epsilon=0.0,
    sources=_frozen(
        sticky_actions="sticky actions with probability 0.25 are the stochasticity it recommends (section 5.2)",
        full_action_space="all 18 actions: the agent is not told which actions a game uses (section 6)",
        life_loss="an episode ends at game over only: no life-loss signal (section 3.1, episode termination)",
        noop_max="no no-op starts: sticky actions make the games stochastic instead (section 5)",
        fire_reset="no game-specific help such as pressing FIRE for the agent (section 3)",
        max_episode_frames=(
            "episodes capped at 108,000 frames, 30 minutes of play: the cap of ale-py's v5 games, which follow the"
            " paper, and of the protocol as Hafner et al. 2021 (DreamerV2, experimental setup) state it"
        ),
        eval_epsilon=(
            "the agent as it plays, no evaluation epsilon: the paper scores performance during training (section 4.2)"
        ),
    ),
)

#: DQN's setting (Mnih et al. 2015): a lost life is terminal in training only; scored with epsilon 0.05.
NATURE = Protocol(
    name="nature",
    title="Mnih et al. 2015, Human-level control through deep reinforcement learning, Nature 518",
    train=_frozen(sticky_actions=0.0, full_action_space=False, life_loss="terminal", noop_max=30),
    # Scored on whole games: a lost life ends an episode only for learning.
    evaluate=_frozen(
        sticky_actions=0.0, full_action_space=False, life_loss="ignore", noop_max=30, max_episode_frames=18_000
    ),
    eval_epsilon=0.05,
    sources=_frozen(
        sticky_actions="a deterministic emulator; starts differ by their no-ops only (Methods, evaluation procedure)",
        full_action_space="the game's minimal set of legal actions, 4 to 18 (Methods, preprocessing)",
        life_loss="the lives counter marks the end of an episode during training only (Methods, training details)",
        noop_max="each game starts with up to 30 no-op actions (Methods; Extended Data Table 1, no-op max)",
        max_episode_frames="scored games last up to 5 minutes, 18,000 frames (Methods, evaluation procedure)",
        eval_epsilon="scored with an epsilon-greedy policy, epsilon 0.05 (Methods, evaluation procedure)",
    ),
)

#: Every protocol by its name: ``machado`` and ``nature``.
PROTOCOLS: Mapping[str, Protocol] = types.MappingProxyType({p.name: p for p in (MACHADO, NATURE)})


def get_protocol(name: str) -> Protocol:
    """The protocol called `name` (one of `PROTOCOLS`); a `ValueError` naming the valid ones otherwise."""
    if isinstance(name, str) and name in PROTOCOLS:
        return PROTOCOLS[name]
    close = difflib.get_close_matches(str(name), PROTOCOLS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"protocol: unknown protocol {name!r}{hint}; the protocols are {', '.join(PROTOCOLS)}")


def protocol_conflict(name: str, options: Mapping[str, Any], phase: str = "train") -> str:
    """What in `options` contradicts what protocol `name` fixes for `phase` ("train" or "evaluate"): the option,
    both values and the paper's reason; "" when nothing does (options it does not fix are free)."""
    protocol = get_protocol(name)
    for option, value in protocol.fixed(phase).items():
        if option in options and options[option] != value:
            return (
                f"{option}={options[option]!r} conflicts with protocol {name!r}, which sets {option}={value!r} "
                f"({protocol.sources[option]}): leave {option} out, or drop the protocol"
            )
    return ""


def apply_protocol(name: str, options: Mapping[str, Any], phase: str = "train") -> dict[str, Any]:
    """`options` with the settings protocol `name` fixes for `phase` ("train" or "evaluate") filled in; a `ValueError`
    from `protocol_conflict` where one was given another value (the scores would no longer be the protocol's)."""
    if problem := protocol_conflict(name, options, phase):
        raise ValueError(problem)
    return {**options, **get_protocol(name).fixed(phase)}


def trained_protocol(config: Mapping[str, Any]) -> str:
    """The protocol a trainer's saved `config` trained under: its own, or for a run without one, the protocol whose
    training settings its game options match (e.g. the trainers' defaults are ``nature``'s), or ""."""
    if config.get("protocol"):
        return str(config["protocol"])
    options = {
        "life_loss": config.get("life_loss"),
        "noop_max": config.get("noop_max"),
        "sticky_actions": 0.0,
        "full_action_space": False,
    }
    return next((name for name in PROTOCOLS if not protocol_conflict(name, options)), "")
