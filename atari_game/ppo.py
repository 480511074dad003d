"""PPO on Atari with atari_game: the algorithm of CleanRL's ppo_atari.py, on a GamePool.

    python examples/ppo.py --game Breakout --total-frames 1000000     # train (or: atari-game train ...)
    python examples/ppo.py --eval runs/Breakout-1/checkpoint.pt       # play one game with a trained agent

Standard PPO with the well-known Atari settings (the Training PPO guide lists its parts, its settings and what a run
writes); every field of `Config` is a flag (``--num-envs 16``, ``--no-anneal-lr``).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from atari_game.algorithm import Algorithm, BatchPolicy, Policy
from atari_game.checkpoints import restore_torch_generators, save_checkpoint, torch_generators
from atari_game.game import action_meanings
from atari_game.learners import Learners
from atari_game.networks import NatureCNN, on_device
from atari_game.pool import GamePool
from atari_game.run import finish_run, passes, run_files, set_precision, start_run
from atari_game.run_config import RunConfig, full_action_space, observation_shape
from atari_game.run_envs import env_placement, make_pools
from atari_game.run_log import whole_games
from atari_game.validation import POSITIVE, at_least, between, broken_rule


@dataclasses.dataclass
class Config(RunConfig):
    """All settings of a PPO run: `RunConfig`'s and PPO's own below, whose defaults are the well-known Atari ones
    (CleanRL's ppo_atari.py). Each is a flag of ``atari-game train`` and ``examples/ppo.py``, as `RunConfig` says."""

    n_steps: int = 128
    """Agent steps per env per update (the rollout's length)."""
    n_epochs: int = 4
    """Passes over each rollout's num_envs * n_steps agent steps."""
    n_minibatches: int = 4
    """Minibatches per epoch: each a gradient step on num_envs * n_steps / n_minibatches agent steps."""
    learning_rate: float = 2.5e-4
    """Adam's learning rate (at the start, with --anneal-lr)."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over the run."""
    gamma: float = 0.99
    """The discount per agent step, in [0, 1]."""
    gae_lambda: float = 0.95
    """GAE's lambda, in [0, 1]: 0 bootstraps from the next value, 1 sums the whole episode's rewards."""
    clip_coef: float = 0.1
    """How far the probability ratio of an action may move from 1 in an update (PPO's epsilon), > 0."""
    clip_value_loss: bool = True
    """Clip the value loss as the policy's: new values within clip_coef of the rollout's."""
    ent_coef: float = 0.01
    """The entropy bonus's weight in the loss, >= 0."""
    vf_coef: float = 0.5
    """The value loss's weight in the loss, >= 0."""
    max_grad_norm: float = 0.5
    """The gradient's L2 norm is clipped to this, > 0."""
    async_envs: bool = True
    """Overlap env stepping with inference: two halves of the envs take turns (the pool's send/recv); needs an even
    num_envs."""
    checkpoint_every: int = 200_000

    @property
    def batch_size(self) -> int:
        """Agent steps an update learns from: ``num_envs * n_steps``."""
        return self.num_envs * self.n_steps

    @property
    def final_frames(self) -> int:
        """The emulator frames the run ends at: `total_frames` rounded down to whole updates."""
        return self.total_frames // (4 * self.batch_size) * 4 * self.batch_size


RULES = {
    "learning_rate": POSITIVE,
    "gamma": between(0, 1),
    "n_steps": at_least(1),
    "n_epochs": at_least(1),
    "n_minibatches": at_least(1),
    "gae_lambda": between(0, 1),
    "clip_coef": POSITIVE,
    "ent_coef": at_least(0),
    "vf_coef": at_least(0),
    "max_grad_norm": POSITIVE,
}


def check_config(config: Config) -> str:
    """What is wrong with `config` as a PPO run, as a usage error would say it; "" if nothing is."""
    if problem := broken_rule(config, RULES):
        return problem
    if config.batch_size % config.n_minibatches:
        return (
            f"--n-minibatches {config.n_minibatches} must divide a rollout's --num-envs x --n-steps = "
            f"{config.num_envs} x {config.n_steps} = {config.batch_size} agent steps"
        )
    if config.async_envs and config.num_envs // max(1, config.learners) % 2:
        envs, whose = f"--num-envs {config.num_envs}", "the"
        if config.learners > 1:
            envs, whose = f"{envs} / --learners {config.learners}", "each learner's"
        return f"--async-envs plays two halves of {whose} envs in turn: {envs} must be even (or --no-async-envs)"
    if config.total_frames < 4 * config.batch_size:
        return f"--total-frames must be at least one update's 4 x --num-envs x --n-steps = {4 * config.batch_size}"
    # Counted in updates until 0.2 (50 by default): a count below one update's frames is one of those.
    update_frames = 4 * config.batch_size
    if config.checkpoint_every < update_frames:
        return (
            f"--checkpoint-every {config.checkpoint_every} is under one update's 4 x --num-envs x --n-steps = "
            f"{update_frames} frames: it counts emulator frames (it counted updates before 0.2; "
            f"{config.checkpoint_every} updates are --checkpoint-every {config.checkpoint_every * update_frames})"
        )
    return ""


# --- the agent ------------------------------------------------------------------------------------------


def layer(module: nn.Module, std: float = np.sqrt(2), bias: float = 0.0) -> nn.Module:
    """Orthogonal weights and constant bias: the initialisation PPO's results depend on."""
    nn.init.orthogonal_(module.get_parameter("weight"), std)
    nn.init.constant_(module.get_parameter("bias"), bias)
    return module


class Agent(nn.Module):
    """The Nature-DQN CNN trunk with a policy head (logits) and a value head, shared as in CleanRL."""

    def __init__(self, n_actions: int) -> None:
        super().__init__()
        self.trunk = NatureCNN(init=layer)
        self.actor = layer(nn.Linear(512, n_actions), std=0.01)
        self.critic = layer(nn.Linear(512, 1), std=1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """``uint8`` observations ``(batch, 4, 84, 84)`` in, float values ``(batch,)`` out."""
        return self.critic(self.trunk(obs)).squeeze(-1)

    def act(
        self, obs: torch.Tensor, action: torch.Tensor | None = None, uniform: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample an action (or score `action`): action, log-probability, entropy, value. Row i's action is the one
        whose interval of the cumulative probabilities holds its own draw `uniform[i]` (in [0, 1); default: torch's)."""
        hidden = self.trunk(obs)
        # Without argument checks: the logits come from the network, and the checks cost ~0.1 ms a call.
        distribution = torch.distributions.Categorical(logits=self.actor(hidden), validate_args=False)
        if action is None:
            uniform = torch.rand(len(obs), device=obs.device) if uniform is None else uniform.to(obs.device)
            cumulative = distribution.probs.cumsum(-1)
            action = torch.searchsorted(cumulative, uniform.unsqueeze(-1), right=True).squeeze(-1)
            action = action.clamp_max(cumulative.shape[-1] - 1)  # a draw above a sum rounded below 1
        return action, distribution.log_prob(action), distribution.entropy(), self.critic(hidden).squeeze(-1)


# --- training -------------------------------------------------------------------------------------------

# What progress.csv holds for each update, besides frames and seconds.
UPDATE_FIELDS = (
    "precision",
    "env_nodes",
    "env_workers",
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_fraction",
    "frames_per_second",
    "rollout_seconds",
    "learn_seconds",
    "sync_seconds",
)


def train(config: Config, learners: Learners | None = None) -> Path:
    """Train PPO as `config` says and return the run directory, which then holds progress.csv, checkpoint.pt,
    learning_curve.png and (with ``video``) agent.mp4; with ``resume``, continue the run saved there (new games).
    `learners`: this process's place among the run's learners (`atari_game.learners`; by default, the only one)."""
    learners = learners or Learners(num_envs=config.num_envs)
    run_dir, device = start_run(config, "ppo")
    cores = learners.cores
    agent = build_agent(config.game, device, full_action_space(config))
    config = set_precision(config, [agent.trunk], device, learners, torch.get_num_threads())

    # Adam in its fused implementation: the same update in one kernel, 6 % faster (benchmarks/learn_step.py).
    optimizer = torch.optim.Adam(agent.parameters(), lr=config.learning_rate, eps=1e-5, fused=True)
    n_updates = config.total_frames // (4 * config.batch_size)
    first_update, frames = 0, 0
    checkpoint_path = run_dir / "checkpoint.pt"
    rollout = Rollout(config, observation_shape(config), learners)
    if config.resume:  # from the run's checkpoint, or the one Ray Train restarts the learners from
        saved = torch.load(learners.restart or checkpoint_path, map_location=device)
        agent.load_state_dict(saved["agent"])
        optimizer.load_state_dict(saved["optimizer"])
        first_update, frames = saved["update"], saved["frames"]
        restore_torch_generators(saved, device)
        if "action_rng" in saved:  # (the checkpoints from before it drew the actions from torch's generator)
            rollout.generator.set_state(saved["action_rng"])

    # The envs, started once the run can begin, and closed whatever fails from here: with async_envs, two pools of
    # half the envs each, each with half the worker processes (or actors).
    pools = make_pools(config, 2 if config.async_envs else 1, learners)
    with run_files(config, run_dir, pools, learners, frames, UPDATE_FIELDS) as (log, progress, placement):
        for k, pool in enumerate(pools):
            rollout.next_obs[k * pool.num_envs : (k + 1) * pool.num_envs] = torch.from_numpy(pool.reset()[0])
        start, start_frames = time.perf_counter(), frames
        for update in range(first_update, n_updates):
            # Anneal the learning rate linearly to zero over the whole run (a resumed run continues the schedule).
            if config.anneal_lr:
                optimizer.param_groups[0]["lr"] = config.learning_rate * (1.0 - update / n_updates)

            # Collect n_steps per env. Inference beside the env workers gets one thread; learning gets all cores.
            torch.set_num_threads(1)
            rollout_start = time.perf_counter()
            games = collect(config, pools, agent, device, rollout, frames)
            frames += 4 * config.batch_size
            torch.set_num_threads(cores)
            learn_start = time.perf_counter()
            learners.sync_seconds = 0.0
            stats: dict[str, float | str] = {"precision": config.precision, **placement}
            stats.update(learn(config, agent, optimizer, device, rollout, learners))
            # Where the wall time goes: playing (env steps and inference), and learning (of it, summing over learners).
            stats["rollout_seconds"] = learn_start - rollout_start
            stats["learn_seconds"] = time.perf_counter() - learn_start
            stats["sync_seconds"] = learners.sync_seconds
            learners.check_identical(agent, f"after update {update + 1}")
            # Every learner's games, in the first one's log and curve; the envs may have moved (Ray actors).
            games = learners.gather(games)
            if not learners.on_ray_train:
                placement = env_placement(pools)[0]
            seconds = time.perf_counter() - start
            stats["frames_per_second"] = (frames - start_frames) / seconds
            progress.update(4 * config.batch_size)
            if log:
                log.record_games(games)
                log.update(frames, seconds, stats)
                progress.set_postfix(game_return=f"{log.recent_return():.1f}", fps=f"{stats['frames_per_second']:.0f}")
            # A checkpoint where this update's frames passed a multiple of checkpoint_every, and at the end.
            if passes(config.checkpoint_every, frames - 4 * config.batch_size, frames) or update + 1 == n_updates:
                state = checkpoint_state(agent, optimizer, update + 1, frames, config, rollout.generator)
                if learners.lead:
                    save_checkpoint(checkpoint_path, state)
                learners.report(checkpoint_path, frames)
    return finish_run(config, run_dir, f"PPO on {config.game}", log, agent_policy(agent, device))


class Rollout:
    """One update's rollout of one learner's envs (observations ``uint8``). `generator` draws the actions' uniforms
    (`Agent.act`) for every env of the run on every learner: an env's actions do not depend on how envs are shared."""

    def __init__(self, config: Config, obs_shape: tuple[int, ...], learners: Learners) -> None:
        steps, envs = config.n_steps, config.num_envs // learners.count
        self.envs = learners.envs
        self.obs = torch.zeros((steps, envs, *obs_shape), dtype=torch.uint8)
        self.actions = torch.zeros((steps, envs), dtype=torch.long)
        self.logprobs, self.rewards, self.dones, self.values = (torch.zeros((steps, envs)) for _ in range(4))
        # What the envs show now: the observation to act on, and whether it starts a new episode.
        self.next_obs = torch.zeros((envs, *obs_shape), dtype=torch.uint8)
        self.next_done = torch.zeros(envs)
        self.generator = torch.Generator().manual_seed(config.seed)


def collect(
    config: Config, pools: list[GamePool], agent: Agent, device: torch.device, rollout: Rollout, frames: int
) -> list[tuple[int, float, int]]:
    """Play n_steps per env into `rollout` and return the whole games that ended (`whole_games`). Two pools (async)
    take turns: one half's games step in the workers while the policy acts for the other."""
    # Each pool's envs are a contiguous slice of the rollout's columns (slices, not index arrays: no gathers).
    halves = [slice(k * pools[0].num_envs, (k + 1) * pools[0].num_envs) for k in range(len(pools))]
    # The uniforms of this learner's envs' actions, out of the draws for every env of the run.
    uniforms = torch.rand((config.n_steps, config.num_envs), generator=rollout.generator)[:, rollout.envs]
    games: list[tuple[int, float, int]] = []

    def send(k: int, step: int) -> None:
        envs = halves[k]
        rollout.obs[step, envs], rollout.dones[step, envs] = rollout.next_obs[envs], rollout.next_done[envs]
        with torch.inference_mode():
            action, logprob, _, value = agent.act(rollout.next_obs[envs].to(device), uniform=uniforms[step, envs])
        rollout.actions[step, envs] = action.cpu()
        rollout.logprobs[step, envs] = logprob.cpu()
        rollout.values[step, envs] = value.cpu()
        pools[k].send(action.cpu().numpy())

    def receive(k: int, step: int) -> None:
        obs, reward, terminated, truncated, info = pools[k].recv()
        # recv returns the envs in the order their workers finished: each row goes back to its env's column.
        envs = halves[k].start + torch.from_numpy(info["env_id"])
        reward = bootstrap_truncated(config, agent, device, reward, truncated, info)
        rollout.rewards[step, envs] = torch.from_numpy(reward)
        rollout.next_obs[envs] = torch.from_numpy(obs)
        rollout.next_done[envs] = torch.from_numpy(terminated | truncated).float()
        games.extend(whole_games(info, frames + 4 * config.num_envs * (step + 1)))

    if len(pools) == 1:
        for step in range(config.n_steps):
            send(0, step)
            receive(0, step)
        return games
    send(1, 0)
    for step in range(config.n_steps):
        send(0, step)
        receive(1, step)
        if step + 1 < config.n_steps:
            send(1, step + 1)
        receive(0, step)
    return games


def bootstrap_truncated(
    config: Config, agent: Agent, device: torch.device, reward: np.ndarray, truncated: np.ndarray, info: dict
) -> np.ndarray:
    """`reward` plus, for a truncated episode, the discounted value of its final obs (none if its worker died)."""
    reward = reward.astype(np.float32)
    truncated = truncated & info.get("_final_obs", False)
    if truncated.any():
        final = torch.from_numpy(np.stack(info["final_obs"][truncated]))
        with torch.inference_mode():
            reward[truncated] += config.gamma * agent.value(final.to(device)).cpu().numpy()
    return reward


def learn(
    config: Config,
    agent: Agent,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    rollout: Rollout,
    learners: Learners | None = None,
) -> dict[str, float]:
    """GAE, then n_epochs of clipped-PPO minibatch updates; returns the loss statistics of the last minibatch (the
    clip fraction: of all of them). Several `learners`, each with the rollout of its envs, take together the very step
    of one learner with the whole rollout (the same minibatches, advantages normalised over each, gradients summed)."""
    learners = learners or Learners(num_envs=config.num_envs)
    with torch.inference_mode():
        next_value = agent.value(rollout.next_obs.to(device)).cpu()
    rewards, dones, values = rollout.rewards, rollout.dones, rollout.values
    advantages = torch.zeros_like(rewards)
    last_advantage: torch.Tensor | float = 0.0
    for t in reversed(range(config.n_steps)):
        next_nonterminal = 1.0 - (rollout.next_done if t == config.n_steps - 1 else dones[t + 1])
        following_value = next_value if t == config.n_steps - 1 else values[t + 1]
        delta = rewards[t] + config.gamma * following_value * next_nonterminal - values[t]
        advantages[t] = last_advantage = delta + config.gamma * config.gae_lambda * next_nonterminal * last_advantage
    returns = advantages + values

    # Flatten the rollout onto the device once. The observations are stored (batch, h, w, stack), the convolutions'
    # layout: a minibatch is one index_select of whole rows (tensor indexing costs 10x) and the permute back is free.
    b_obs = rollout.obs.reshape(-1, *rollout.obs.shape[2:]).to(device).permute(0, 2, 3, 1).contiguous()
    b_actions, b_logprobs = rollout.actions.reshape(-1).to(device), rollout.logprobs.reshape(-1).to(device)
    b_advantages, b_returns = advantages.reshape(-1).to(device), returns.reshape(-1).to(device)
    b_values = values.reshape(-1).to(device)
    # Every epoch's minibatches, drawn first, and this learner's samples of each (one learner: all of them); the
    # advantages are normalised per minibatch, with the mean and deviation of all its samples, computed for all at once.
    minibatch = config.batch_size // config.n_minibatches
    minibatches = [
        learners.share(indices)
        for _ in range(config.n_epochs)
        for indices in torch.randperm(config.batch_size, device=device).split(minibatch)
    ]
    means, stds = learners.mean_std([b_advantages[indices] for indices in minibatches])
    clip_fractions = []
    for indices, mean, std in zip(minibatches, means, stds, strict=True):
        obs = b_obs.index_select(0, indices).permute(0, 3, 1, 2)
        _, new_logprob, entropy, new_value = agent.act(obs, b_actions[indices])
        log_ratio = new_logprob - b_logprobs[indices]
        ratio = log_ratio.exp()

        # Sums over this learner's samples / the minibatch's size: summed over the learners, the minibatch's means.
        advantage = (b_advantages[indices] - mean) / (std + 1e-8)
        clipped_ratio = ratio.clamp(1 - config.clip_coef, 1 + config.clip_coef)
        policy_loss = torch.max(-advantage * ratio, -advantage * clipped_ratio).sum() / minibatch

        # The value loss, clipped around the rollout's values as in the PPO reference implementation.
        value_error = (new_value - b_returns[indices]) ** 2
        if config.clip_value_loss:
            clipped = b_values[indices] + (new_value - b_values[indices]).clamp(-config.clip_coef, config.clip_coef)
            value_error = torch.max(value_error, (clipped - b_returns[indices]) ** 2)
        value_loss = 0.5 * value_error.sum() / minibatch
        entropy_loss = entropy.sum() / minibatch

        loss = policy_loss - config.ent_coef * entropy_loss + config.vf_coef * value_loss
        optimizer.zero_grad()
        loss.backward()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - log_ratio).sum() / minibatch
            clip_fraction = ((ratio - 1.0).abs() > config.clip_coef).sum() / minibatch
            statistics = torch.stack([policy_loss, value_loss, entropy_loss, approx_kl, clip_fraction])
        # The whole minibatch's gradient and statistics on every learner (one learner: as they are).
        statistics = learners.sum_gradients(agent.parameters(), statistics)
        nn.utils.clip_grad_norm_(agent.parameters(), config.max_grad_norm)
        optimizer.step()
        clip_fractions.append(statistics[4].item())
    return {
        "policy_loss": statistics[0].item(),
        "value_loss": statistics[1].item(),
        "entropy": statistics[2].item(),
        "approx_kl": statistics[3].item(),
        "clip_fraction": float(np.mean(clip_fractions)),
    }


def checkpoint_state(
    agent: Agent,
    optimizer: torch.optim.Optimizer,
    update: int,
    frames: int,
    config: Config,
    action_generator: torch.Generator,
) -> dict:
    """What checkpoint.pt holds: what --resume goes on from (not the games in progress) and the config for --eval."""
    return {
        "algorithm": "ppo",
        "agent": agent.state_dict(),
        "optimizer": optimizer.state_dict(),
        "update": update,
        "frames": frames,
        **torch_generators(next(agent.parameters()).device),
        "action_rng": action_generator.get_state(),
        "config": dataclasses.asdict(config),
    }


# --- results: a trained agent's policy ------------------------------------------------------------------


def agent_policy(agent: Agent, device: torch.device) -> Policy:
    """The agent as a policy for one game: an observation in, an action sampled from its policy out."""

    def policy(obs: np.ndarray) -> int:
        with torch.inference_mode():
            return int(agent.act(torch.from_numpy(obs).unsqueeze(0).to(device))[0])

    return policy


def build_agent(game: str, device: torch.device, full_action_space: bool = False) -> Agent:
    """A new `Agent` for `game`'s minimal action set (all 18 with `full_action_space`), on `device` (`on_device`)."""
    return on_device(Agent(len(action_meanings(game, full_action_space))), device)


def batch_policy(agent: Agent) -> BatchPolicy:
    """The agent (on the CPU) as a policy for a batch of games: observations ``(n, *obs_shape)`` in, ``n`` actions
    sampled from its policy out, with torch's generator."""

    def policy(obs: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return agent.act(torch.from_numpy(obs))[0].numpy()

    return policy


#: PPO, as the registry (`atari_game.algorithms`) lists it.
ALGORITHM = Algorithm(
    name="ppo",
    doc=__doc__,
    config=Config,
    check=check_config,
    train=train,
    build=lambda config, device: build_agent(config.game, device, full_action_space(config)),
    network_key="agent",
    policy=lambda agent, device, config: agent_policy(agent, device),
    batch_policy=batch_policy,
)
