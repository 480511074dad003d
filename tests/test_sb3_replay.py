"""FrameReplayBuffer: SB3's DQN trains on it, and its samples equal SB3's own buffers' for the same adds."""

import gymnasium
import numpy as np
import pytest
import torch
from stable_baselines3 import DQN
from stable_baselines3.common.buffers import NStepReplayBuffer, ReplayBuffer

from atari_game.sb3 import FrameReplayBuffer, GamePoolVecEnv


def test_sb3_dqn_trains_with_it_on_a_game_pool():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small batches: one thread is fastest and leaves the cores to the workers
    try:
        with GamePoolVecEnv(2, "Breakout", seed=0, life_loss="terminal", n_workers=1) as env:
            small = {"features_extractor_kwargs": {"features_dim": 64}}
            model = DQN(
                "CnnPolicy", env, buffer_size=1_000, learning_starts=32, batch_size=8, train_freq=4,
                replay_buffer_class=FrameReplayBuffer, policy_kwargs=small, seed=0, device="cpu",
            )  # fmt: skip
            model.learn(total_timesteps=200)
    finally:
        torch.set_num_threads(threads)
    assert isinstance(model.replay_buffer, FrameReplayBuffer) and model._n_updates > 0
    assert len(model.replay_buffer.replay) == model.num_timesteps  # every transition the 2 envs played
    assert all(torch.isfinite(parameter).all() for parameter in model.q_net.parameters())


def sb3_adds(steps: int, **options):
    """What SB3's off-policy algorithms pass to ``add`` while 3 envs play randomly: (obs, next_obs, ...)."""
    adds = []
    with GamePoolVecEnv(3, "Breakout", seed=4, n_workers=1, **options) as env:
        obs, rng = env.reset(), np.random.default_rng(0)
        for _ in range(steps):
            actions = rng.integers(0, env.action_space.n, 3)
            new_obs, rewards, dones, infos = env.step(actions)
            next_obs = new_obs.copy()  # SB3's _store_transition: the terminal observation on done steps
            for i in np.flatnonzero(dones):
                next_obs[i] = infos[i]["terminal_observation"]
            adds.append((obs, next_obs, actions, rewards, dones, infos))
            obs = new_obs
        spaces = env.observation_space, env.action_space
    return adds, spaces


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("optimize_memory_usage", [False, True])
def test_samples_equal_sb3_replay_buffers_for_the_same_adds_and_seeds(optimize_memory_usage, compression):
    # Life losses (terminations) and truncations; 150 steps wrap the 40 slots per env around.
    adds, spaces = sb3_adds(150, life_loss="terminal", max_episode_frames=240)
    assert any(info.get("TimeLimit.truncated") for add in adds for info in add[5])
    timeouts = not optimize_memory_usage  # SB3 refuses both at once
    options = {"optimize_memory_usage": optimize_memory_usage, "handle_timeout_termination": timeouts}
    # Ours compressed too: its 144 frame slots all written (150 steps), the dictionary is trained on them.
    buffers = [
        ReplayBuffer(120, *spaces, "cpu", n_envs=3, **options),
        FrameReplayBuffer(120, *spaces, "cpu", n_envs=3, **options, compression=compression),
    ]
    for add in adds:
        for buffer in buffers:
            buffer.add(*add)
    for seed in range(5):
        theirs, ours = [], []
        for buffer, samples in zip(buffers, (theirs, ours), strict=True):
            np.random.seed(seed)
            samples.extend(buffer.sample(64))
        if optimize_memory_usage:
            # SB3's one-array layout keeps no terminal observation: on a done step its next_observations is the
            # next episode's first one (the non-optimized comparison shows ours is the terminal one).
            done = theirs[3][:, 0] > 0
            assert done.any()
            theirs[2][done] = ours[2][done]
        assert theirs[5] is None and ours[5] is None  # no n-step discounts
        for mine, sb3 in zip(ours[:5], theirs[:5], strict=True):
            assert mine.dtype == sb3.dtype and mine.shape == sb3.shape
            assert torch.equal(mine, sb3)


def test_n_step_samples_equal_sb3_n_step_buffer_where_the_n_steps_are_stored():
    adds, spaces = sb3_adds(100, life_loss="terminal", max_episode_frames=240)
    theirs = NStepReplayBuffer(300, *spaces, "cpu", n_envs=3, n_steps=3, gamma=0.9)
    ours = FrameReplayBuffer(300, *spaces, "cpu", n_envs=3, n_steps=3, gamma=0.9)
    for add in adds:
        theirs.add(*add)
        ours.add(*add)
    batch_inds = np.arange(98)  # every slot whose 3 steps are all stored (SB3 would cut the last two short)
    samples = []
    for buffer in (theirs, ours):
        np.random.seed(0)
        samples.append(buffer._get_samples(batch_inds))
    for name in ("observations", "actions", "next_observations", "dones"):
        assert torch.equal(getattr(samples[0], name), getattr(samples[1], name)), name
    for name in ("rewards", "discounts"):  # summed in float32 by SB3, in float64 here
        torch.testing.assert_close(getattr(samples[1], name), getattr(samples[0], name))
    assert (samples[1].discounts < 0.9**2).any() and (samples[1].discounts > 0.9**3 - 1e-6).any()


def test_it_refuses_spaces_it_cannot_store():
    box = gymnasium.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    with pytest.raises(TypeError, match="action_space must be Discrete"):
        FrameReplayBuffer(100, box, gymnasium.spaces.Box(-1, 1, (2,)))
    with pytest.raises(TypeError, match="observation_space must be a gymnasium Box"):
        FrameReplayBuffer(100, gymnasium.spaces.Discrete(3), gymnasium.spaces.Discrete(3))
