"""GamePoolVecEnv: SB3's VecEnv contract, the same games as local `Game`s, Monitor-style statistics, PPO."""

import os
import signal
import subprocess
import sys
import warnings

import gymnasium
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecMonitor
from support import all_gone, held_here, held_segments, worker_pids

from atari_game import Game
from atari_game.pool import PoolError
from atari_game.sb3 import GamePoolVecEnv

BREAKOUT = {"game": "Breakout", "fire_reset": True}


@pytest.fixture
def make_env(closing):
    """VecEnvs closed after the test, whatever happens in it."""
    return closing(GamePoolVecEnv)


def test_import_without_sb3_names_the_extra_to_install():
    # A None entry in sys.modules makes `import stable_baselines3` fail, as on a machine without it.
    code = "import sys; sys.modules['stable_baselines3'] = None; import atari_game.sb3"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0
    assert "ImportError: atari_game.sb3 needs Stable-Baselines3 and torch" in result.stderr
    assert 'pip install torch==2.13.0 && pip install "atari_game[sb3]"' in result.stderr


def test_spaces_shapes_and_dtypes(make_env):
    env = make_env(3, seed=0, n_workers=2, **BREAKOUT)
    assert env.num_envs == 3 and env.observation_space == gymnasium.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert env.action_space == gymnasium.spaces.Discrete(4)
    obs = env.reset()
    assert obs.shape == (3, 4, 84, 84) and obs.dtype == np.uint8
    assert env.reset_infos == [{"lives": 5, "game_name": "breakout"}] * 3
    obs, rewards, dones, infos = env.step(np.array([0, 1, 2]))
    assert obs.shape == (3, 4, 84, 84) and obs.dtype == np.uint8
    assert rewards.shape == (3,) and rewards.dtype == np.float32
    assert dones.shape == (3,) and dones.dtype == np.bool_
    assert infos == [{"lives": 5, "game_name": "breakout", "TimeLimit.truncated": False}] * 3


@pytest.mark.parametrize(
    ("options", "shape", "dtype"),
    [
        ({"obs_type": "rgb"}, (12, 84, 84), np.uint8),
        ({"obs_type": "ram", "scale_obs": True, "continuous": True}, (4, 128), np.float32),
        ({"obs_type": "rgb", "channels_last": True, "scale_obs": True}, (84, 84, 12), np.float32),
    ],
)
def test_spaces_follow_the_observation_type_scaling_and_continuous_actions(make_env, options, shape, dtype):
    env = make_env(2, seed=0, n_workers=1, **BREAKOUT, **options)
    assert env.observation_space == gymnasium.spaces.Box(0, 1.0 if dtype == np.float32 else 255, shape, dtype)
    assert env.action_space == env.pool.single_action_space
    assert isinstance(env.action_space, gymnasium.spaces.Box) == bool(options.get("continuous"))
    obs = env.reset()
    assert obs.shape == (2, *shape) and obs.dtype == dtype
    obs, *_ = env.step(np.stack([env.action_space.sample() for _ in range(2)]))
    assert obs.shape == (2, *shape) and obs.dtype == dtype


@pytest.mark.parametrize(
    "options",
    [
        # Raw rewards; short truncation, so that both terminated and truncated episodes come up.
        {**BREAKOUT, "clip_rewards": False, "max_episode_frames": 200},
        # Clipped rewards to learn on; MsPacman scores 10 and more a dot, so the clipped sum differs.
        {"game": "MsPacman", "clip_rewards": True, "max_episode_frames": 400},
        # A mixed pool: three games with the same 9 actions, each env playing its own.
        {"game": ["MsPacman", "Asterix", "CrazyClimber"], "clip_rewards": True, "max_episode_frames": 400},
    ],
    ids=["raw", "clipped", "mixed"],
)
def test_plays_the_local_games_with_terminal_observations_and_unclipped_episode_stats(make_env, options):
    num_envs, seed = 3, 4
    env = make_env(num_envs, seed=seed, n_workers=2, **options)
    # The truth: local Games with the same seeds and actions, with raw rewards (clipping changes nothing else).
    names = [options["game"]] * num_envs if isinstance(options["game"], str) else options["game"]
    games = [Game(seed=seed + i, **{**options, "game": name, "clip_rewards": False}) for i, name in enumerate(names)]
    assert np.array_equal(env.reset(), np.stack([game.reset() for game in games]))
    raw_sums, clipped_sums, lengths = np.zeros(num_envs), np.zeros(num_envs), np.zeros(num_envs, int)
    ended = {"terminated": 0, "truncated": 0, "clipping_shows": 0}
    for actions in np.random.default_rng(0).integers(env.action_space.n, size=(300, num_envs)):
        obs, rewards, dones, infos = env.step(actions)
        for i, game in enumerate(games):
            game_obs, raw, done, episode = game.step(actions[i])
            assert np.array_equal(obs[i], game_obs)  # on a done step: the next episode's first observation
            assert rewards[i] == np.float32(np.sign(raw) if options["clip_rewards"] else raw)
            assert dones[i] == done and infos[i]["lives"] == game.lives and infos[i]["game_name"] == game.options.game
            raw_sums[i], clipped_sums[i], lengths[i] = raw_sums[i] + raw, clipped_sums[i] + rewards[i], lengths[i] + 1
            if not done:
                assert "terminal_observation" not in infos[i] and "episode" not in infos[i]
                assert infos[i]["TimeLimit.truncated"] is False
                continue
            assert np.array_equal(infos[i]["terminal_observation"], game.final_observation)
            assert infos[i]["TimeLimit.truncated"] is episode["truncated"]
            # Monitor's layout: unclipped return, length in agent steps, seconds since the VecEnv was built.
            stats = infos[i]["episode"]
            assert stats["r"] == raw_sums[i] and stats["l"] == lengths[i] and 0 < stats["t"] < 600
            ended["truncated" if episode["truncated"] else "terminated"] += 1
            ended["clipping_shows"] += clipped_sums[i] != raw_sums[i]
            raw_sums[i] = clipped_sums[i] = lengths[i] = 0
    assert ended["truncated"] >= 3
    if options["clip_rewards"]:
        assert ended["clipping_shows"] >= 3
    else:
        assert ended["terminated"] >= 10


def test_with_terminal_life_loss_every_life_is_done_but_episode_stats_are_whole_games(make_env):
    # SB3's own Atari stack (Monitor under EpisodicLifeEnv) reports whole games: so does the adapter.
    num_envs = 2
    env = make_env(num_envs, seed=0, life_loss="terminal", **BREAKOUT)
    env.reset()
    game_rewards, game_lengths = np.zeros(num_envs), np.zeros(num_envs, int)
    lives_lost = games = 0
    for actions in np.random.default_rng(1).integers(4, size=(400, num_envs)):
        _, rewards, dones, infos = env.step(actions)
        game_rewards, game_lengths = game_rewards + rewards, game_lengths + 1
        for i in np.flatnonzero(dones):
            assert "terminal_observation" in infos[i]
            if "episode" not in infos[i]:  # a lost life: done, and the game goes on
                assert infos[i]["lives"] >= 1
                lives_lost += 1
                continue
            assert infos[i]["episode"]["r"] == game_rewards[i] and infos[i]["episode"]["l"] == game_lengths[i]
            assert infos[i]["lives"] == 5  # the next game has begun
            game_rewards[i], game_lengths[i] = 0, 0
            games += 1
    assert games >= 2 and lives_lost >= 4 * games


def local_trajectory(seed, actions, **options):
    """The observations a local `Game` seeded with `seed` shows over `actions`, first one included."""
    game = Game(seed=seed, **options)
    return np.stack([game.reset()] + [game.step(action)[0] for action in actions])


def test_seed_applies_to_the_next_reset_only_and_options_are_refused(make_env):
    # Sticky actions and NOOP starts make the seed visible in the observations.
    options = {**BREAKOUT, "noop_max": 30, "sticky_actions": 0.25}
    env = make_env(2, seed=0, **options)
    actions = np.random.default_rng(2).integers(4, size=(40, 2))
    assert env.seed(10) == [10, 11]
    played = np.stack([env.reset()] + [env.step(row)[0] for row in actions], axis=1)
    for i in range(2):
        assert np.array_equal(played[i], local_trajectory(10 + i, actions[:, i], **options))
        assert not np.array_equal(played[i], local_trajectory(0 + i, actions[:, i], **options))
    assert env._seeds == [None, None]  # SB3's rule: the next reset() restarts the games without re-seeding
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got -1"):
        env.seed(-1)  # refused here, not at the next reset (inside SB3's evaluate_policy, say)
    assert env._seeds == [None, None]
    env.set_options({"difficulty": 1})
    with pytest.raises(ValueError, match="reset options are not supported"):
        env.reset()


def test_attributes_methods_wrappers_and_render(make_env):
    env = make_env(3, seed=0, **BREAKOUT)
    assert env.get_attr("action_meanings") == [("NOOP", "FIRE", "RIGHT", "LEFT")] * 3
    assert env.get_attr("render_mode", indices=[2]) == [None] and env.has_attr("options")
    assert not env.has_attr("no_such_attribute")
    with pytest.raises(NotImplementedError, match="worker processes"):
        env.set_attr("frame_skip", 2)
    with pytest.raises(NotImplementedError, match="get_attr\\('action_meanings'\\)"):
        env.env_method("get_action_meanings")
    with pytest.raises(NotImplementedError, match="does not render"):
        env.render()
    # The envs report Monitor's statistics themselves: SB3 must neither miss them nor overwrite them silently.
    assert env.env_is_wrapped(Monitor) == [True] * 3
    assert env.env_is_wrapped(gymnasium.wrappers.TimeLimit, indices=0) == [False]
    with pytest.warns(UserWarning, match="already wrapped with a `Monitor`"):
        VecMonitor(env)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"autoreset_mode": "NextStep"}, TypeError, "sets autoreset_mode itself"),
        ({"copy": False}, TypeError, "sets copy itself"),
        ({"frame_skip": 0}, ValueError, "frame_skip must be an integer >= 1"),
    ],
)
def test_bad_options_are_refused_before_any_process_starts(kwargs, error, message):
    memory_before = held_segments()
    with pytest.raises(error, match=message):
        GamePoolVecEnv(2, **kwargs)
    assert not held_segments() - memory_before


def test_a_restarted_worker_shows_as_truncated_envs_without_a_terminal_observation(make_env):
    env = make_env(4, seed=0, n_workers=2, restart_workers=True, **BREAKOUT)
    env.reset()
    os.kill(worker_pids(env.pool)[0], signal.SIGKILL)
    _, _, dones, infos = env.step(np.zeros(4, int))
    assert list(dones) == [True, True, False, False]
    assert infos[0] == {"lives": 5, "game_name": "breakout", "TimeLimit.truncated": True, "worker_restarted": True}
    assert "worker_restarted" not in infos[2]


def test_close_leaves_no_process_and_no_shared_memory():
    with GamePoolVecEnv(2, seed=0, **BREAKOUT) as env:
        env.reset()
        env.step(np.array([1, 1]))
        pids, segment = worker_pids(env.pool), env.pool._transport.segment.name
    assert all_gone(pids) and not held_here(segment)
    env.close()  # twice is fine
    with pytest.raises(PoolError, match="closed"):
        env.reset()


@pytest.mark.slow
def test_ppo_cnn_policy_trains_on_it_without_transpose_or_warnings(make_env):
    # The SB3-standard Atari setting: every lost life ends an episode, clipped rewards, whole games reported.
    env = make_env(4, seed=0, life_loss="terminal", clip_rewards=True, **BREAKOUT)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small batches: one thread is fastest and leaves the cores to the workers
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "not wrapped with Monitor", no channel-order warnings
            model = PPO(
                "CnnPolicy",
                env,
                n_steps=64,
                batch_size=64,
                n_epochs=1,
                policy_kwargs={"features_extractor_kwargs": {"features_dim": 64}},
                seed=0,
                device="cpu",
            )
            assert model.get_env() is env  # channel-first uint8 is an image as it is: no VecTransposeImage
            model.learn(total_timesteps=2048)
            returns, lengths = evaluate_policy(
                model, env, n_eval_episodes=2, deterministic=False, return_episode_rewards=True, warn=True
            )
    finally:
        torch.set_num_threads(threads)
    assert model.num_timesteps == 2048
    # Whole games: a life lasts at least 24 steps here, so a game of 5 lives at least 100; 512 steps per env
    # end at least one game in each.
    assert len(model.ep_info_buffer) >= 4
    assert all(set(episode) == {"r", "l", "t"} and episode["l"] >= 100 for episode in model.ep_info_buffer)
    assert len(returns) == len(lengths) == 2 and min(lengths) >= 100
