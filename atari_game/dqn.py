"""DQN on Atari with atari_game: CleanRL's dqn_atari.py with Rainbow-lite switches, on a GamePool and a FrameReplay.

    python examples/dqn.py --game Breakout --total-frames 10000000    # train (or: atari-game train --algorithm dqn ...)
    python examples/dqn.py --eval runs/Breakout-1-dqn/checkpoint.pt     # play one game with a trained agent

Standard DQN (Mnih et al. 2015) with CleanRL's settings and, by default, the Rainbow-lite switches on: Double DQN's
target (``--double``), 3-step returns (``--n-step 3``) and proportional prioritized replay (``--prioritized``);
``--cleanrl`` turns the three off. Every field of `Config` is a flag (``--num-envs 4``, ``--no-clip-rewards``). The
Training DQN guide says how it counts transitions (as CleanRL does) and what a run writes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, overload

import numpy as np
import torch
from torch import nn

from atari_game.algorithm import Algorithm, BatchPolicy, Policy
from atari_game.checkpoints import restore_torch_generators, save_checkpoint, torch_generators
from atari_game.game import action_meanings
from atari_game.learners import Learners
from atari_game.networks import TRUNKS, Trunk, on_device
from atari_game.pool import GamePool
from atari_game.replay import FrameReplay
from atari_game.run import finish_run, passes, run_files, set_precision, start_run
from atari_game.run_config import RunConfig, full_action_space, observation_shape
from atari_game.run_envs import env_placement, make_pools
from atari_game.run_log import whole_games
from atari_game.validation import POSITIVE, at_least, between, broken_rule


@dataclasses.dataclass
class Config(RunConfig):
    """All settings of a DQN run: `RunConfig`'s and DQN's own below, whose defaults are CleanRL's dqn_atari.py ones
    but for the Rainbow-lite switches (``cleanrl`` turns them off). Each is a flag of ``atari-game train --algorithm
    dqn`` and ``examples/dqn.py``, as `RunConfig` says. A transition is one agent step of one env: 4 emulator frames."""

    network: str = "nature"
    """The network's trunk: nature (the Nature-DQN CNN) or impala (the IMPALA CNN: about 4x the learning's CPU time,
    for more learned from the same frames)."""
    learning_rate: float = 1e-4
    """Adam's learning rate."""
    adam_epsilon: float = 1e-8
    """Adam's epsilon, added to the root of its second moment (PyTorch's default; Dopamine's agents take 0.01 / 32)."""
    buffer_size: int = 1_000_000
    """Transitions the replay memory holds (the oldest are overwritten)."""
    gamma: float = 0.99
    """The discount per agent step, in [0, 1]."""
    target_network_frequency: int = 1_000
    """Transitions (of all envs together) between copies of the Q-network into the target network."""
    batch_size: int = 32
    """Transitions sampled for each gradient step."""
    start_e: float = 1.0
    """Epsilon (the probability of a random action) at the start of the run."""
    end_e: float = 0.01
    """Epsilon at the end of its fall and after it."""
    exploration_fraction: float = 0.1
    """The share of the run's transitions over which epsilon falls linearly from start_e to end_e, in (0, 1]."""
    learning_starts: int = 80_000
    """Transitions played (of all envs together) before the first gradient step, and again after a --resume whose
    replay memory was not saved (--no-save-memory)."""
    train_frequency: int = 4
    """Transitions (of all envs together) per gradient step."""
    # The Rainbow-lite switches, on by default: Double DQN's target, n-step returns, proportional prioritized replay.
    cleanrl: bool = False
    """CleanRL's dqn_atari.py algorithm: plain one-step DQN with uniform replay, as --no-double --n-step 1
    --no-prioritized (which it sets, whatever else the command line says)."""
    double: bool = True
    """Double DQN's target: the Q-network picks the next action, the target network values it."""
    n_step: int = 3
    """Agent steps of reward summed into each learning target (n-step returns; 1: one-step DQN)."""
    prioritized: bool = True
    """Proportional prioritized replay: sample transitions in proportion to ``|TD error| ** alpha``."""
    alpha: float = 0.6
    """Prioritized replay's exponent, >= 0 (0: uniform sampling)."""
    beta: float = 0.4
    """Prioritized replay's importance-sampling exponent at the start, in [0, 1], annealed linearly to 1 over the
    run."""
    compression: str = "zstd"
    """How the replay memory stores its frames: zstd (each frame compressed when stored, with a dictionary trained on
    the first 4,096; 1M transitions in 0.2-0.4 GB) or none (as they are: 7.3 GB). The samples are the same either way.
    """
    save_memory: bool = True
    """Save the replay memory beside each checkpoint (replay.npz), so that --resume goes on with it."""
    torch_threads: int = 0
    """Torch's threads, for inference and learning alike; 0: one per available core.

    All cores by default: the gradient steps are ~90 % of the wall time. On a machine busy with other work, 1: OpenMP
    threads that lose their core to another process spin-wait for it."""
    log_every: int = 40_000
    """Emulator frames between rows of progress.csv."""
    eval_epsilon: float = 0.01
    """Epsilon of the recorded games (agent.mp4 and --eval), in [0, 1]: a greedy agent can get stuck forever."""

    #: What a --resume may change besides `RunConfig`'s: how it logs, saves and shows, and on how many threads.
    RESUMABLE = (*RunConfig.RESUMABLE, "log_every", "torch_threads", "eval_epsilon", "save_memory")

    def __post_init__(self) -> None:
        if self.cleanrl:  # CleanRL's algorithm: the Rainbow-lite switches off
            self.double, self.n_step, self.prioritized = False, 1, False

    @property
    def total_transitions(self) -> int:
        """The run's transitions: whole pool steps of num_envs transitions, 4 frames each."""
        return self.total_frames // (4 * self.num_envs) * self.num_envs

    @property
    def final_frames(self) -> int:
        """The emulator frames the run ends at: `total_frames` rounded down to whole steps of every env."""
        return 4 * self.total_transitions


# --compression's values, and FrameReplay's compression for each.
COMPRESSIONS = {"zstd": "zstd", "none": None}

RULES = {
    "learning_rate": POSITIVE,
    "adam_epsilon": POSITIVE,
    "gamma": between(0, 1),
    "batch_size": at_least(1),
    "alpha": at_least(0),
    "beta": between(0, 1),
    "eval_epsilon": between(0, 1),
    "log_every": at_least(1),
}


def check_config(config: Config) -> str:
    """What is wrong with `config` as a DQN run, as a usage error would say it; "" if nothing is."""
    if problem := broken_rule(config, RULES):
        return problem
    if config.total_frames < 4 * config.num_envs:
        return f"total_frames must be at least one step of every env, 4 * num_envs = {4 * config.num_envs}"
    # A gradient step samples from what was stored before its pool step (see train) and n-step transitions
    # become sampleable n_step - 1 steps late: learning_starts must leave a batch's worth in the memory.
    least = config.batch_size + config.num_envs * config.n_step
    if config.learning_starts < least:
        return (
            f"--learning-starts {config.learning_starts} must be at least --batch-size + --num-envs x --n-step = "
            f"{least}"
        )
    if config.buffer_size < config.learning_starts:
        return f"--buffer-size {config.buffer_size} must be at least --learning-starts {config.learning_starts}"
    if not 0 <= config.end_e <= config.start_e <= 1 or not 0 < config.exploration_fraction <= 1:
        return "epsilon needs 0 <= end_e <= start_e <= 1 and 0 < exploration_fraction <= 1"
    if min(config.num_envs, config.n_step, config.train_frequency, config.target_network_frequency) < 1:
        return "num_envs, n_step, train_frequency and target_network_frequency must be at least 1"
    # A run that ends before its first gradient step (learning_events' first "learn") plays and never learns.
    if problem := no_gradient_step(config, config.learning_starts):
        return f"--learning-starts {config.learning_starts:,} {problem} or lower --learning-starts"
    if config.torch_threads < 0:
        return "torch_threads must be 0 (one per core) or more"
    if config.learners and config.batch_size % config.learners:
        return f"batch_size {config.batch_size} must divide among --learners {config.learners} (each samples its share)"
    if config.compression not in COMPRESSIONS:
        return f"--compression must be one of {', '.join(COMPRESSIONS)}, got {config.compression!r}"
    if config.network not in TRUNKS:
        return f"--network must be one of {', '.join(TRUNKS)}, got {config.network!r}"
    return ""


# --- the agent ------------------------------------------------------------------------------------------


class ValueNetwork(nn.Module):
    """What DQN's loop acts with: a `trunk` (its precision set on it), `n_actions`, and `q_values`, whose argmax is
    the greedy action (`QNetwork`; `atari_game.iqn.QuantileNetwork`)."""

    trunk: Trunk
    n_actions: int

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """``uint8`` observations ``(batch, 4, 84, 84)`` in, float Q-values ``(batch, n_actions)`` out."""
        raise NotImplementedError


class QNetwork(ValueNetwork):
    """A trunk (the Nature-DQN CNN by default) with one Q-value per action; PyTorch's default initialisation, as
    CleanRL's."""

    def __init__(self, n_actions: int, trunk: Trunk | None = None) -> None:
        super().__init__()
        self.trunk = trunk or TRUNKS["nature"]()
        self.head = nn.Linear(self.trunk.features, n_actions)
        self.n_actions = n_actions

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``uint8`` observations ``(batch, 4, 84, 84)`` in, float Q-values ``(batch, n_actions)`` out."""
        return self.head(self.trunk(obs))

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """The Q-values the agent acts on (greedily, the argmax): here `forward`'s."""
        return self(obs)


def build_q_network(
    game: str, device: torch.device, full_action_space: bool = False, network: str = "nature"
) -> QNetwork:
    """A new `QNetwork` on the trunk `network` (a name in `atari_game.networks.TRUNKS`) for `game`'s minimal action
    set (all 18 with `full_action_space`), on `device` (`on_device`)."""
    return on_device(QNetwork(len(action_meanings(game, full_action_space)), TRUNKS[network]()), device)


@overload
def epsilon(config: Config, transition: int) -> float: ...
@overload
def epsilon(config: Config, transition: np.ndarray) -> np.ndarray: ...
def epsilon(config: Config, transition: int | np.ndarray) -> float | np.ndarray:
    """Epsilon for the action of `transition` (0-based, counted over all envs): linear from start_e to end_e over
    the first exploration_fraction of the run's transitions, then end_e (CleanRL's linear_schedule)."""
    duration = config.exploration_fraction * config.total_transitions
    return np.maximum(config.start_e + (config.end_e - config.start_e) * transition / duration, config.end_e)


def choose_actions(
    q_network: ValueNetwork, obs: np.ndarray, epsilons: np.ndarray, rng: np.random.Generator, device: torch.device
) -> np.ndarray:
    """Epsilon-greedy actions (``int64``, one per row of `obs`), env k exploring with probability `epsilons[k]`, in one
    pass of the greedy envs through ``q_network.q_values``; `rng` draws the same numbers whatever the network says:
    the seed's exploration."""
    explore = rng.random(len(obs)) < epsilons
    actions = rng.integers(q_network.n_actions, size=len(obs))
    if not explore.all():
        with torch.inference_mode():
            q_values = q_network.q_values(torch.from_numpy(obs[~explore]).to(device))
        actions[~explore] = q_values.argmax(1).cpu().numpy()
    return actions


# --- training -------------------------------------------------------------------------------------------


def no_gradient_step(config: Config, learning_after: int) -> str:
    """What a run learning after transition `learning_after` (`learning_events`' argument) lacks if its first gradient
    step falls at or past its end, as the end of a usage error ("leaves this run no gradient step: ..."); else ""."""
    first_step = (learning_after // config.train_frequency + 1) * config.train_frequency
    if first_step < config.total_transitions:
        return ""
    least = 4 * config.num_envs * -(-(first_step + 1) // config.num_envs)
    return (
        f"leaves this run no gradient step: its first is due at transition {first_step:,}, and the run plays "
        f"{config.total_transitions:,} (--total-frames {config.total_frames:,} in whole steps of its {config.num_envs} "
        f"envs, 4 frames each); raise --total-frames to at least {least:,}"
    )


def learning_events(config: Config, first: int, stop: int, learning_after: int) -> list[tuple[int, str]]:
    """The gradient steps ("learn") and target-network updates ("target") due for the transitions `first` to
    ``stop - 1`` (0-based, over all envs), in order, as (transition, event): CleanRL's conditions on its global_step
    (t a multiple of train_frequency, target_network_frequency; past `learning_after`), whatever the number of envs."""
    events = []
    for t in range(max(first, learning_after + 1), stop):
        if t % config.train_frequency == 0:
            events.append((t, "learn"))
        if t % config.target_network_frequency == 0:
            events.append((t, "target"))
    return events


# What progress.csv holds every log_every frames: the losses' means since the previous row, and where time went.
UPDATE_FIELDS = (
    "precision",
    "env_nodes",
    "env_workers",
    "td_loss",
    "q_values",
    "epsilon",
    "gradient_steps",
    "frames_per_second",
    "act_seconds",
    "env_seconds",
    "store_seconds",
    "learn_seconds",
    "sync_seconds",
)


class Transitions(NamedTuple):
    """A sampled batch of ``n`` transitions as tensors on the learning device: ``uint8`` observations ``(n, 4, 84, 84)``
    and next observations, ``int64`` actions, and float n-step rewards, discounts (gamma to the steps summed) and
    dones (1.0 where the episode ended within them: no bootstrap)."""

    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    discounts: torch.Tensor
    dones: torch.Tensor
    next_obs: torch.Tensor


#: A trainer's loss on a batch: (its config, Q-network, target network, `Transitions`) in, each sample's loss (with
#: its gradient), its new priority and the Q-value of its action (both without) out, each ``(n,)``.
Loss = Callable[[Any, Any, Any, Transitions], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


@dataclasses.dataclass(frozen=True)
class QLearning:
    """What a value-based trainer brings to DQN's loop (`train`), which does everything else (acting, the memory,
    the schedules, target updates, logs, checkpoints, resume): DQN's own is `DQN`, IQN's `atari_game.iqn.IQN`.

    Attributes:
        name: its name in the registry and in its checkpoints.
        title: how its learning curve names it ("DQN on Pong").
        build: a new network as a config says, on a device.
        loss: its loss on a batch (`Loss`).
    """

    name: str
    title: str
    build: Callable[[Any, torch.device], ValueNetwork]
    loss: Loss


def train(config: Config, learners: Learners | None = None, q_learning: QLearning | None = None) -> Path:
    """Train DQN (or another `q_learning`, as IQN) as `config` says and return the run directory, which then holds
    progress.csv, checkpoint.pt, learning_curve.png and (with ``video``) agent.mp4; with ``resume``, continue the run
    saved there. `learners`: this process's place among the run's learners (`atari_game.learners`; by default, the
    only one), each playing its share of the envs into a memory of its own (``buffer_size / learners``), all taking
    the same gradient steps."""
    learners = learners or Learners(num_envs=config.num_envs)
    q_learning = q_learning or DQN
    run_dir, device = start_run(config, q_learning.name)
    threads = config.torch_threads or learners.cores  # torch's, while it plays and learns
    # Exploration (which envs explore, and their random actions): each learner its own stream, the first the seed's.
    rng = np.random.default_rng(config.seed * learners.count + learners.rank)

    q_network = q_learning.build(config, device)
    target_network = q_learning.build(config, device)
    target_network.load_state_dict(q_network.state_dict())
    config = set_precision(config, [q_network.trunk, target_network.trunk], device, learners, threads)
    # Adam as CleanRL's, in its fused implementation: the same update in one kernel, in about a fifth less CPU time.
    optimizer = torch.optim.Adam(q_network.parameters(), lr=config.learning_rate, eps=config.adam_epsilon, fused=True)
    steps = 0  # transitions played, over all envs
    checkpoint_path = run_dir / "checkpoint.pt"
    if config.resume:  # from the run's checkpoint, or the one Ray Train restarts the learners from
        saved = torch.load(learners.restart or checkpoint_path, map_location=device)
        q_network.load_state_dict(saved["q_network"])
        target_network.load_state_dict(saved["target_network"])
        optimizer.load_state_dict(saved["optimizer"])
        steps = saved["steps"]
        restore_torch_generators(saved, device)
        # Each learner's exploration generator, as saved by rank; resumed with another number of learners, anew.
        rng_states = saved["numpy_rng"] if isinstance(saved["numpy_rng"], list) else [saved["numpy_rng"]]
        if len(rng_states) == learners.count:
            rng.bit_generator.state = rng_states[learners.rank]
    replay_path = run_dir / learners.file_name("replay.npz")  # each learner's own memory
    buffer, learning_after = replay_memory(
        config, observation_shape(config), steps, saved if config.resume else None, replay_path, learners
    )
    # A resumed run whose emptied memory would refill past its end plays on and never learns (check_config sees a
    # new run's start only).
    if config.resume and (problem := no_gradient_step(config, learning_after)):
        raise SystemExit(
            f"--resume: the replay memory refills for --learning-starts {config.learning_starts:,} transitions from "
            f"the checkpoint's {steps:,}, which {problem} (or resume with the memory saved, --save-memory)"
        )

    # The envs, started once the run can begin (one that cannot resume starts no process), and closed by the finally
    # whatever fails from here: same-step autoreset, so the true final observation of an episode is there to store.
    [pool] = make_pools(config, 1, learners)
    with run_files(config, run_dir, [pool], learners, 4 * steps, UPDATE_FIELDS) as (log, progress, placement):
        torch.set_num_threads(threads)
        obs = pool.reset()[0]
        games: list[tuple[int, float, int]] = []  # the whole games this learner's envs ended since the last row
        losses: list[tuple[float, float]] = []  # (TD loss, mean Q) of each gradient step since the last row
        seconds = dict.fromkeys(("act", "env", "store", "learn"), 0.0)
        start, start_steps = time.perf_counter(), steps
        while steps < config.total_transitions:
            # Act on what the envs show, with the network as it is (CleanRL's order: act, step, then learn).
            clock = time.perf_counter()
            epsilons = epsilon(config, steps + np.arange(config.num_envs))[learners.envs]
            actions = choose_actions(q_network, obs, epsilons, rng, device)
            pool.send(actions)

            # While the envs step, learn: the gradient steps and target updates due for the transitions in flight
            # (the memory without them; env k's action lags by the steps due before it: the DQN guide says more).
            learn_start = time.perf_counter()
            seconds["act"] += learn_start - clock
            for t, event in learning_events(config, steps, steps + config.num_envs, learning_after):
                if event == "learn":
                    losses.append(
                        gradient_step(
                            config, q_network, target_network, optimizer, buffer, device, t, learners, q_learning.loss
                        )
                    )
                else:
                    target_network.load_state_dict(q_network.state_dict())
            recv_start = time.perf_counter()
            seconds["learn"] += recv_start - learn_start

            next_obs, rewards, terminations, truncations, real_next_obs, info = receive(pool)
            store_start = time.perf_counter()
            seconds["env"] += store_start - recv_start
            # A restarted worker's envs (a lost Ray node) have no next observation: a truncation from the one acted on.
            if "worker_restarted" in info:  # (info's arrays are in the order the envs answered)
                restarted = info["worker_restarted"][np.argsort(info["env_id"])]
                real_next_obs[restarted] = obs[restarted]
            buffer.add(obs, actions, rewards, real_next_obs, terminations, truncations)
            obs = next_obs
            steps += config.num_envs
            games += whole_games(info, 4 * steps)
            seconds["store"] += time.perf_counter() - store_start

            # A row, a checkpoint, where this pool step's frames passed a multiple of log_every, checkpoint_every.
            frames, before = 4 * steps, 4 * (steps - config.num_envs)
            done = steps >= config.total_transitions
            row = passes(config.log_every, before, frames)
            if row or done:
                # Every learner's games into the first one's log, weights compared, the envs' places (Ray actors move).
                games = learners.gather(games)
                learners.check_identical(q_network, f"at {frames:,} frames")
                if not learners.on_ray_train:
                    placement = env_placement([pool])[0]
                if log:
                    log.record_games(games)
                games = []
            if row and log:
                elapsed = time.perf_counter() - start
                stats: dict[str, float | str] = {
                    "precision": config.precision,
                    **placement,
                    "epsilon": float(epsilon(config, steps)),
                    "gradient_steps": len(losses),
                    "frames_per_second": 4 * (steps - start_steps) / elapsed,
                    **{f"{name}_seconds": value for name, value in seconds.items()},
                    "sync_seconds": learners.sync_seconds,
                }
                if losses:
                    stats["td_loss"], stats["q_values"] = np.mean(losses, axis=0).tolist()
                log.update(frames, elapsed, stats)
                progress.set_postfix(game_return=f"{log.recent_return():.1f}", fps=f"{stats['frames_per_second']:.0f}")
            if row:
                losses.clear()
                seconds = dict.fromkeys(seconds, 0.0)
                learners.sync_seconds = 0.0
            progress.update(4 * config.num_envs)
            if passes(config.checkpoint_every, before, frames) or done:
                if config.save_memory:  # first: a checkpoint.pt is never newer than its replay.npz
                    buffer.save(replay_path)
                # Every learner's exploration generator (where they differ, with the memories each saves itself).
                rng_states = learners.gather([rng.bit_generator.state])
                saved = checkpoint_state(
                    q_network, target_network, optimizer, rng_states, steps, config, q_learning.name
                )
                # How many transitions the memory saved with it had seen: --resume checks that it is this one's.
                if learners.lead:
                    save_checkpoint(checkpoint_path, {**saved, "replay_added": buffer.added})
                learners.report(checkpoint_path, frames)
    policy = agent_policy(q_network, device, config.eval_epsilon, config.seed)
    return finish_run(config, run_dir, f"{q_learning.title} on {config.game}", log, policy)


def replay_memory(
    config: Config,
    observation_shape: tuple[int, ...],
    steps: int,
    checkpoint: dict | None,
    path: Path,
    learners: Learners,
) -> tuple[FrameReplay, int]:
    """This learner's replay memory (its share of buffer_size, of its envs, with its own generator) and the
    transition learning waits for (`learning_events`' `learning_after`): empty for a new run, learning after
    learning_starts transitions; resumed from `checkpoint` at `steps`, the memory saved at `path`, learning on as if
    the run never stopped (none there or --no-save-memory: empty, learning after learning_starts more). Exits naming
    `path` if it is no whole memory, or not this checkpoint's."""
    if checkpoint is not None and config.save_memory and path.exists():
        try:
            buffer = FrameReplay.load(path)
        except ValueError as error:
            raise SystemExit(f"--resume: {error}. Delete it to resume with an emptied memory.") from None
        if buffer.added != checkpoint.get("replay_added"):
            raise SystemExit(
                f"--resume: {path} is not the memory of the checkpoint beside it: it has seen {buffer.added:,} "
                f"transitions, the checkpoint's memory {checkpoint.get('replay_added', 'an unknown number of')} (a "
                "run stopped between the two writes?). Delete it to resume with an emptied memory."
            )
        # Learning began learning_starts transitions after this memory's first one, as in the run that never stopped.
        return buffer, steps - buffer.added * learners.count + config.learning_starts
    if checkpoint is not None and config.save_memory:
        print(f"No replay memory at {path}: it refills for --learning-starts {config.learning_starts} transitions")
    buffer = FrameReplay(
        config.buffer_size // learners.count,
        config.num_envs // learners.count,
        observation_shape,
        n_step=config.n_step,
        gamma=config.gamma,
        prioritized=config.prioritized,
        alpha=config.alpha,
        beta=config.beta,
        seed=(config.seed + steps) * learners.count + learners.rank,
        compression=COMPRESSIONS[config.compression],
    )
    return buffer, steps + config.learning_starts


def receive(pool: GamePool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    """The step's results in env order (`recv` gives them as the workers finished): obs, rewards, terminations,
    truncations, the true next observations (an ended episode's ``info["final_obs"]``, else obs) and info."""
    obs, rewards, terminations, truncations, info = pool.recv()
    real_next_obs = obs.copy()
    if "_final_obs" in info:
        for k in np.flatnonzero(info["_final_obs"]):
            real_next_obs[k] = info["final_obs"][k]
    order = np.argsort(info["env_id"])
    return obs[order], rewards[order], terminations[order], truncations[order], real_next_obs[order], info


def gradient_step(
    config: Config,
    q_network: ValueNetwork,
    target_network: ValueNetwork,
    optimizer: torch.optim.Optimizer,
    buffer: FrameReplay,
    device: torch.device,
    transition: int,
    learners: Learners | None = None,
    loss_of: Loss | None = None,
) -> tuple[float, float]:
    """One gradient step on a batch from the memory (due at `transition`) with the loss `loss_of` (default: DQN's
    `td_loss`); returns its loss and mean Q. Several `learners` each sample their share of the batch from their own
    memory and all take the whole batch's step."""
    learners = learners or Learners(num_envs=config.num_envs)
    # Prioritized replay's importance-sampling exponent: annealed linearly from beta to 1 over the run.
    beta = config.beta + (1.0 - config.beta) * min(1.0, transition / config.total_transitions)
    batch = buffer.sample(config.batch_size // learners.count, beta=beta)
    obs, next_obs = torch.from_numpy(batch.obs).to(device), torch.from_numpy(batch.next_obs).to(device)
    actions = torch.from_numpy(batch.actions).to(device)
    rewards, discounts, weights, dones = (
        torch.from_numpy(array).to(device).float()
        for array in (batch.rewards, batch.discounts, batch.weights, batch.dones)
    )
    losses, priorities, q_value = (loss_of or td_loss)(
        config, q_network, target_network, Transitions(obs, actions, rewards, discounts, dones, next_obs)
    )
    # The mean loss over the whole batch (this learner's sum over its samples, divided by the batch's size); each
    # sample weighted by its importance weight (all ones without priorities).
    loss = (weights * losses).sum() / config.batch_size
    optimizer.zero_grad()
    loss.backward()
    # The whole batch's gradient, loss and mean Q on every learner (one learner: as they are).
    statistics = torch.stack([loss.detach(), q_value.sum() / config.batch_size])
    statistics = learners.sum_gradients(q_network.parameters(), statistics)
    optimizer.step()
    if config.prioritized:
        buffer.update_priorities(batch.indices, priorities.cpu().numpy())
    return statistics[0].item(), statistics[1].item()


def td_loss(
    config: Config, q_network: ValueNetwork, target_network: ValueNetwork, batch: Transitions
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DQN's `Loss`: each sample's squared TD error, its absolute TD error as its priority, and its Q-value."""
    # The TD target: the n-step return plus the discounted value of next_obs where the episode goes on (--double).
    with torch.no_grad():
        next_q = target_network(batch.next_obs)
        if config.double:
            next_value = next_q.gather(1, q_network(batch.next_obs).argmax(1, keepdim=True)).squeeze(1)
        else:
            next_value = next_q.max(1).values
        td_target = batch.rewards + batch.discounts * next_value * (1.0 - batch.dones)
    q_value = q_network(batch.obs).gather(1, batch.actions.unsqueeze(1)).squeeze(1)
    td_error = td_target - q_value
    return td_error**2, td_error.detach().abs(), q_value.detach()


def checkpoint_state(
    q_network: ValueNetwork,
    target_network: ValueNetwork,
    optimizer: torch.optim.Optimizer,
    rng_states: list[dict],
    steps: int,
    config: Config,
    algorithm: str = "dqn",
) -> dict:
    """What checkpoint.pt of a run of the trainer `algorithm` holds: everything --resume needs but the replay memories
    (replay.npz beside it, one per learner), the learners' exploration generators' `rng_states` by rank included, and
    the config for --eval."""
    return {
        "algorithm": algorithm,
        "q_network": q_network.state_dict(),
        "target_network": target_network.state_dict(),
        "optimizer": optimizer.state_dict(),
        "steps": steps,
        "frames": 4 * steps,
        **torch_generators(next(q_network.parameters()).device),
        "numpy_rng": rng_states,
        "config": dataclasses.asdict(config),
    }


# --- results: a trained agent's policy ------------------------------------------------------------------


def agent_policy(q_network: ValueNetwork, device: torch.device, eval_epsilon: float, seed: int) -> Policy:
    """The Q-network as a policy for one game: an observation in, an epsilon-greedy action out (`eval_epsilon`, its
    draws seeded with `seed`)."""
    rng = np.random.default_rng(seed)

    def policy(obs: np.ndarray) -> int:
        return int(choose_actions(q_network, obs[None], np.array([eval_epsilon]), rng, device)[0])

    return policy


def batch_policy(q_network: ValueNetwork) -> BatchPolicy:
    """The Q-network (on the CPU) as a greedy policy for a batch of games: ``(n, *obs_shape)`` in, ``n`` argmax
    actions of its `ValueNetwork.q_values` out (an evaluation adds its protocol's epsilon)."""

    def policy(obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return q_network.q_values(torch.from_numpy(obs)).argmax(1).numpy()

    return policy


def build(config: Config, device: torch.device) -> QNetwork:
    """A new `QNetwork` as `config` says (its game, the protocol's action set, its --network), on `device`: the
    registry's builder (`Algorithm.build`)."""
    return build_q_network(config.game, device, full_action_space(config), config.network)


#: DQN's part of its loop.
DQN = QLearning(name="dqn", title="DQN", build=build, loss=td_loss)

#: DQN, as the registry (`atari_game.algorithms`) lists it.
ALGORITHM = Algorithm(
    name="dqn",
    doc=__doc__,
    config=Config,
    check=check_config,
    train=train,
    build=build,
    network_key="q_network",
    policy=lambda q_network, device, config: agent_policy(q_network, device, config.eval_epsilon, config.seed),
    batch_policy=batch_policy,
    acting=lambda config: f"epsilon {config.eval_epsilon:g}",
)
