"""Scoring an agent as papers do: whole games under a named protocol, played on a `GamePool` over the cores.

``evaluate(policy, game, protocol="nature", episodes=30)`` takes any agent: `policy` maps a batch of observations to
a batch of actions. ``evaluate_checkpoint(path)`` scores a checkpoint of ``atari-game train`` (``atari-game
evaluate`` is its command line). An `Evaluation` holds every game's return and says what it means: mean, standard
error, human-normalized score; ``save`` writes it as the JSON file ``atari-game report`` reads, and a CSV.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from atari_game.game import GameOptions, display_name, resolve_game
from atari_game.pool import GamePool
from atari_game.protocols import PROTOCOLS, apply_protocol, get_protocol, trained_protocol
from atari_game.scores import ATARI_57, human_normalized
from atari_game.validation import check_agent_name, check_count, check_int, renamed, renamed_option

#: The ``format`` and ``version`` of the JSON an `Evaluation` is saved as (``atari-game report`` checks both).
FORMAT, VERSION = "atari_game.evaluation", 1

Policy = Callable[[np.ndarray], Any]


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """The scored games of one agent on one game.

    Attributes:
        game: the ROM id, e.g. ``"ms_pacman"``.
        protocol: the protocol the games were played under (`atari_game.protocols`), or "" for options as given.
        evaluation_seed: the evaluation's seed, `evaluate`'s `seed` (env ``i`` of the pool: ``evaluation_seed + i``;
            the epsilon draws: ``evaluation_seed``).
        returns: ``float64 (episodes,)``, each game's whole return (all its lives, unclipped), in the order env 0's
            games, env 1's games, ...
        lengths: ``int64 (episodes,)``, each game's length in agent steps.
        algorithm: what played (a trainer's name for a checkpoint); ``atari-game report`` groups by it.
        run_seed: the seed of the training run that made the agent; ``atari-game report`` counts runs by it.
        checkpoint: the checkpoint's path, or "".
        frames_trained: the emulator frames the agent was trained for, if known.
        truncated: ``bool (episodes,)``, whether each game was cut at the ``max_episode_frames`` it was played
            under instead of ending (its return is then what the agent had scored by the cap), or None where not
            recorded.
    """

    game: str
    protocol: str
    evaluation_seed: int
    returns: np.ndarray
    lengths: np.ndarray
    algorithm: str = "agent"
    run_seed: int = 0
    checkpoint: str = ""
    frames_trained: int | None = None
    truncated: np.ndarray | None = None

    @property
    def seed(self) -> int:
        """`evaluation_seed` by its old name, for one more release (a `DeprecationWarning`)."""
        warnings.warn(
            "Evaluation.seed is now Evaluation.evaluation_seed; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.evaluation_seed

    @property
    def mean(self) -> float:
        """The mean return over the games."""
        return float(self.returns.mean())

    @property
    def sem(self) -> float:
        """The standard error of `mean`: the sample standard deviation over the root of the game count (NaN for one)."""
        n = len(self.returns)
        return float(self.returns.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan

    @property
    def hns(self) -> float | None:
        """The human-normalized score of `mean` (`atari_game.scores`), or None for a game outside the 57."""
        return float(human_normalized(self.game, self.mean)) if self.game in ATARI_57 else None

    def summary(self) -> str:
        """One line: the game, who played, the mean return with its standard error, the HNS, and how many games the
        frame cap cut (where any did: their returns are the cap's, not the game's end)."""
        hns = f", HNS {self.hns:.3f}" if self.hns is not None else " (no human-normalized score for this game)"
        protocol = self.protocol or "no protocol"
        n = len(self.returns)
        spread = f"+- {self.sem:.1f} (standard error)" if n > 1 else "(no standard error with fewer than two games)"
        cut = 0 if self.truncated is None else int(self.truncated.sum())
        capped = f"; {cut} of {n} cut at the frame cap, not ended by the game" if cut else ""
        return (
            f"{display_name(self.game)}: {self.algorithm} (run seed {self.run_seed}), {n} game{'s' * (n != 1)} under "
            f"{protocol}: mean {self.mean:.1f} {spread}{hns}{capped}"
        )

    def to_json(self) -> dict[str, Any]:
        """Everything, as the JSON object ``atari-game report`` reads (`FORMAT`, `VERSION`)."""
        episodes = [{"return": float(r), "length": int(n)} for r, n in zip(self.returns, self.lengths, strict=True)]
        if self.truncated is not None:  # (an evaluation built without them writes what it has)
            for episode, cut in zip(episodes, self.truncated.tolist(), strict=True):
                episode["truncated"] = cut
        return {
            "format": FORMAT,
            "version": VERSION,
            "algorithm": self.algorithm,
            "game": self.game,
            "run_seed": self.run_seed,
            "protocol": self.protocol,
            "checkpoint": self.checkpoint,
            "frames_trained": self.frames_trained,
            "evaluation_seed": self.evaluation_seed,
            "episodes": episodes,
            "mean": self.mean,
            "sem": None if math.isnan(self.sem) else self.sem,
            "hns": self.hns,
        }

    def save(self, path: str | Path) -> Path:
        """Write `to_json` to `path` (a ``.json`` file, its folder made if needed) and each game's return, length and
        (where recorded) truncation, 0 or 1, to the ``.csv`` beside it; return the JSON's path."""
        path = Path(path).with_suffix(".json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        columns = {"return": self.returns.tolist(), "length": self.lengths.tolist()}
        if self.truncated is not None:
            columns["truncated"] = self.truncated.astype(int).tolist()
        with path.with_suffix(".csv").open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(("episode", *columns))  # as the JSON's "episodes"
            writer.writerows(zip(range(len(self.returns)), *columns.values(), strict=True))
        return path


def evaluate(
    policy: Policy,
    game: str,
    protocol: str | None = "nature",
    episodes: int = 30,
    seed: int = 0,
    num_envs: int | None = None,
    *,
    algorithm: str = "agent",
    run_seed: int = 0,
    **options: Any,
) -> Evaluation:
    """Play `episodes` whole games of `game` with `policy` under `protocol`, and return their scores.

    Args:
        policy: the agent: ``policy(obs) -> actions``, `obs` a batch of observations (``uint8 (num_envs, 4, 84, 84)``
            by default; `GameOptions.observation_shape`), `actions` ``num_envs`` integers in ``[0, n_actions)`` (the
            protocol's action set: all 18 under ``machado``). It is called once per step with every env's
            observation.
        game: any spelling `resolve_game` takes; an unknown name raises `ValueError` naming the closest.
        protocol: a name in `PROTOCOLS`: its evaluation settings (`Protocol.evaluate`) and its epsilon, with which a
            uniformly random action replaces the policy's; None: `options` as given, whole games (``life_loss``
            "ignore"), no epsilon.
        episodes: how many games; env ``i`` plays games ``i, i + num_envs, ...`` of the count (an even split), so
            that which games are scored does not depend on which end first.
        seed: env ``i`` is seeded ``seed + i``, the epsilon draws with `seed`: the same seed gives the same games.
        num_envs: games played at once, 1 to `episodes` (default: ``min(episodes, 8)``), in the pool's default number
            of workers (one per env, up to one per core).
        algorithm, run_seed: who played, as the result records them (`Evaluation`): ``atari-game report`` groups
            runs by `algorithm` and counts them by `run_seed`, so give each agent's runs their own.
        options: more `GameOptions` (e.g. ``fire_reset=True``); one that contradicts the protocol is refused, and
            so is ``continuous=True``. (``n_envs``, `num_envs`'s name until 0.2, is taken with a `FutureWarning`.)

    Returns:
        The `Evaluation`: the games' returns, lengths (in agent steps) and truncations (cut at the
        ``max_episode_frames`` they were played under) in the order of the count above, with who played, the
        protocol and `seed` (its `evaluation_seed`).

    Raises:
        TypeError: `episodes`, `seed`, `num_envs` or `run_seed` not an integer; an unknown game option.
        ValueError: one of them out of range, an unknown game or protocol, an option against the protocol, or a
            policy whose actions are not ``num_envs`` integers in ``[0, n_actions)`` (named as it returned them).
    """
    episodes = check_int("episodes", episodes, 1)
    # The labels go into the JSON the report reads: plain ints and a name.
    seed, run_seed = check_int("seed", seed, 0), check_int("run_seed", run_seed, 0)
    algorithm = check_agent_name(algorithm)
    epsilon = 0.0
    if protocol is not None:
        options = apply_protocol(protocol, options, "evaluate")
        epsilon = get_protocol(protocol).eval_epsilon
    options.setdefault("life_loss", "ignore")
    if options.get("continuous"):  # the actions are the action set's indices, one per env
        raise ValueError(
            "evaluate scores agents that choose among the action set's actions: continuous=True is not supported"
        )
    num_envs = renamed_option(options, "n_envs", "num_envs", num_envs)
    # More envs than games would play games that are never counted.
    num_envs = (
        min(episodes, 8) if num_envs is None else check_count("num_envs (at most episodes)", num_envs, 1, episodes)
    )
    # Env i's share of the games: the first episodes % num_envs envs play one more.
    quota = np.full(num_envs, episodes // num_envs) + (np.arange(num_envs) < episodes % num_envs)
    scores: list[list[tuple[float, int, bool]]] = [[] for _ in range(num_envs)]
    rng = np.random.default_rng(seed)
    with GamePool(num_envs, game, seed, autoreset_mode=AutoresetMode.SAME_STEP, **options) as pool:
        n_actions = len(pool.action_meanings)
        obs, _ = pool.reset()
        while any(len(done) < want for done, want in zip(scores, quota, strict=True)):
            returned = policy(obs)
            actions = np.asarray(returned)
            if actions.shape != (num_envs,):  # a scalar, None, logits: name what the policy must return
                got = "None" if returned is None else f"shape {actions.shape}"
                if actions.shape in ((num_envs, n_actions), (n_actions,)):
                    got += " (a score per action? return the chosen actions, e.g. their argmax)"
                raise ValueError(f"policy must return one action per observation, shape ({num_envs},); got {got}")
            if actions.dtype.kind not in "iu":  # floats, bools: not actions, though numpy would cast them
                raise TypeError(f"policy must return integer actions in [0, {n_actions}), got dtype {actions.dtype}")
            # The protocol's epsilon: a random action instead of the agent's, drawn the same whatever the agent does.
            explore = rng.random(num_envs) < epsilon
            actions = np.where(explore, rng.integers(n_actions, size=num_envs), actions)
            obs, _, _, truncations, info = pool.step(actions)
            # A whole game's return (all its lives, unclipped) and whether the frame cap cut it, counted until the
            # env's share is played.
            for i in np.flatnonzero(info.get("_game", ())):
                if len(scores[i]) < quota[i]:
                    scores[i].append((float(info["game"]["r"][i]), int(info["game"]["l"][i]), bool(truncations[i])))
    played = [game for env in scores for game in env]
    return Evaluation(
        game=resolve_game(game),
        protocol=protocol or "",
        evaluation_seed=seed,
        returns=np.array([r for r, _, _ in played], dtype=np.float64),
        lengths=np.array([n for _, n, _ in played], dtype=np.int64),
        algorithm=algorithm,
        run_seed=run_seed,
        truncated=np.array([cut for _, _, cut in played], dtype=bool),
    )


def evaluate_checkpoint(
    checkpoint: str | Path,
    protocol: str | None = None,
    episodes: int = 30,
    seed: int = 0,
    num_envs: int | None = None,
    algorithm: str | None = None,
    *,
    n_envs: int | None = None,
) -> tuple[Evaluation, str]:
    """Score the agent of a checkpoint of ``atari-game train`` (any trainer) with `evaluate`; return the
    evaluation and a note ("" if none) when `protocol` is not the one the run trained under. `algorithm` labels the
    result for ``atari-game report`` (default: the trainer's name, "ppo", "dqn" or "iqn"); the run's seed is its
    ``run_seed``.

    `protocol` None: the run's own (`trained_protocol`); a run that trained under none raises `ValueError` asking
    for one. Under another protocol than the run's the games are scored with a note, unless the two give the agent
    different action sets, which is refused. The options a protocol leaves free (``fire_reset``) are the run's.
    A PPO agent samples from its policy (torch seeded with `seed`); a DQN agent acts greedily. `n_envs` is
    `num_envs`'s name until 0.2, taken with a `FutureWarning`.
    """
    import torch

    from atari_game.algorithms import batch_policy
    from atari_game.checkpoints import load_checkpoint
    from atari_game.networks import torch_threads
    from atari_game.run_config import game_options

    if n_envs is not None:
        renamed("n_envs", "num_envs")
        num_envs = n_envs if num_envs is None else num_envs
    saved = load_checkpoint(checkpoint)
    policy, config = batch_policy(saved)
    trained = trained_protocol(saved["config"])
    protocol = protocol or trained
    if not protocol:
        raise ValueError(
            f"{checkpoint} trained under no protocol and matches none: name one to score it under "
            f"({', '.join(PROTOCOLS)})"
        )
    note = ""
    if trained and not saved["config"].get("protocol"):
        note = f"scored under {trained}, the protocol whose game settings {checkpoint} trained with (it named none)"
    if protocol != trained:
        note = f"{checkpoint} trained under {trained or 'no protocol'}, scored under {protocol}"
        learned = GameOptions.from_kwargs(**game_options(config)).n_actions
        # Each protocol's action count for this game: the one scored under, and those the agent fits (the way out).
        takes = {
            name: GameOptions.from_kwargs(game=config.game, **get_protocol(name).evaluate).n_actions
            for name in PROTOCOLS
        }
        scored = takes[protocol]
        if learned != scored:
            fits = [name for name, n_actions in takes.items() if n_actions == learned]
            raise ValueError(
                f"{note}: its agent chooses among {learned} actions, {protocol}'s games take {scored}; score it under "
                f"{' or '.join(fits) or 'none of ours'}, or map its actions onto "
                f"{protocol}'s in your own policy with atari_game.evaluate (docs/guides/evaluate.md)"
            )
    fixed = get_protocol(protocol).evaluate
    free = {name: value for name, value in game_options(config).items() if name not in (*fixed, "protocol", "game")}
    torch.manual_seed(seed)
    with torch_threads(1):  # inference beside the pool's workers, as in training
        result = evaluate(
            policy,
            config.game,
            protocol,
            episodes,
            seed,
            num_envs,
            algorithm=algorithm or saved["algorithm"],
            run_seed=config.seed,
            **free,
        )
    frames = int(saved.get("frames", 0)) or None
    result = dataclasses.replace(result, checkpoint=str(checkpoint), frames_trained=frames)
    return result, note
