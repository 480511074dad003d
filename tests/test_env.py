"""AtariGameEnv and the atari_game/<Name>-v0 registrations: Gymnasium's checker, the exact trajectory of a
plain Game, seeding, rendering, and make_vec in every vectorization mode under Gymnasium's vector wrappers."""

import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers.vector import NormalizeReward, RecordEpisodeStatistics

from atari_game import AtariGameEnv, Game, GamePool, list_games, register_games
from atari_game import game as game_module

OPTIONS = {"fire_reset": True, "noop_max": 30}


@pytest.fixture
def no_warnings():
    """Turn every warning (Gymnasium's checkers warn rather than fail) into an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# --- the Gymnasium API ------------------------------------------------------------------------------------


@pytest.mark.parametrize("life_loss", ["reset", "terminal"])
def test_check_env_passes_without_warnings(no_warnings, life_loss):
    # Made through gym.make, so that check_env also builds it with every render mode from its spec.
    env = gym.make("atari_game/Breakout-v0", render_mode="rgb_array", life_loss=life_loss, **OPTIONS)
    check_env(env.unwrapped)
    env.close()


def test_a_closed_env_refuses_to_play_on():
    env = gym.make("atari_game/Pong-v0")
    env.reset(seed=0)
    env.close()
    for call in (lambda: env.step(0), lambda: env.reset()):
        with pytest.raises(RuntimeError, match=r"AtariGameEnv\('Pong'\) is closed: make a new one"):
            call()


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        {"obs_type": "rgb"},
        {"obs_type": "rgb", "channels_last": True, "scale_obs": True},
        {"obs_type": "ram"},
        {"obs_type": "grayscale", "scale_obs": True, "mode": 4, "difficulty": 1, "random_starts": 5},
        {"continuous": True, "obs_type": "ram", "scale_obs": True},
    ],
)
def test_check_env_passes_with_every_observation_type_and_continuous_actions(options):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # ale-py's own continuous bounds, (0, -pi, 0)..(1, pi, 1), are not the [-1, 1] box the checker suggests.
        warnings.filterwarnings("ignore", message=".*we recommend using a symmetric and normalized space")
        env = gym.make("atari_game/Breakout-v0", render_mode="rgb_array", **options)
        check_env(env.unwrapped)
    options = env.unwrapped.game.options
    assert env.observation_space.shape == options.observation_shape
    assert env.observation_space.dtype == options.observation_dtype
    assert env.observation_space.high.max() == (1.0 if options.scale_obs else 255)
    expected_actions = (
        gym.spaces.Box(np.float32([0, -np.pi, 0]), np.float32([1, np.pi, 1]))
        if options.continuous
        else gym.spaces.Discrete(4)
    )
    assert env.action_space == expected_actions
    obs, _ = env.reset(seed=0)
    for _ in range(30):
        assert env.observation_space.contains(obs)
        obs, *_ = env.step(env.action_space.sample())
    env.close()


def test_make_passes_the_options_and_reports_the_spaces(no_warnings):
    env = gym.make("atari_game/MsPacman-v0", frame_skip=3, size=(64, 48), channels_last=True, life_loss="terminal")
    game = env.unwrapped.game
    assert game.name == "MsPacman" and game.options.frame_skip == 3 and game.options.life_loss == "terminal"
    assert env.observation_space == gym.spaces.Box(0, 255, (64, 48, 4), np.uint8)
    assert env.action_space == gym.spaces.Discrete(9)
    # Real-time video: the Atari's 60 frames per second, frame_skip of them per step.
    assert env.metadata["render_fps"] == 20
    obs, info = env.reset(seed=0)
    assert obs.shape == (64, 48, 4) and obs.dtype == np.uint8 and info == {"lives": 3}
    env.close()


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"frame_skip": 0}, ValueError, "frame_skip must be an integer >= 1, got 0"),
        ({"frameskip": 4}, TypeError, "unknown game option 'frameskip': use frame_skip \\(emulator frames"),
        ({"seed": 3}, TypeError, "seed=3 is not a constructor option .* seed them with reset\\(seed=...\\)"),
        ({"render_mode": "human"}, ValueError, "render_mode must be None or one of \\['rgb_array'\\], got 'human'"),
        ({"game": "Brekout"}, ValueError, "unknown game 'Brekout' \\(closest: Breakout"),
    ],
)
def test_bad_arguments_name_the_problem_and_the_valid_choices(options, error, message):
    with pytest.raises(error, match=message):
        AtariGameEnv(**options)


def test_reset_options_are_refused():
    env = AtariGameEnv()
    with pytest.raises(ValueError, match="reset options are not supported, got \\{'full': True\\}"):
        env.reset(options={"full": True})


# --- the same trajectory as a plain Game ------------------------------------------------------------------


@pytest.mark.parametrize(("life_loss", "max_episode_frames"), [("reset", 400), ("terminal", 1000)])
def test_env_plays_exactly_the_trajectory_of_a_plain_game(life_loss, max_episode_frames):
    options = {**OPTIONS, "life_loss": life_loss, "max_episode_frames": max_episode_frames}
    # The plain Game steps with its next episode left to start_next_episode (as the env leaves it to reset()), so
    # its lives on a done step are those the episode ended with; test_game checks that it plays as Game.step does.
    game, env = Game("Breakout", seed=5, **options), AtariGameEnv("Breakout", **options)
    obs, info = env.reset(seed=5)
    assert np.array_equal(obs, game.reset()) and info == {"lives": 5}
    seen = {"terminated": 0, "truncated": 0, "game": 0, "continued": 0}
    for action in np.random.default_rng(0).integers(4, size=1000):
        lives = game.lives
        expected_obs, expected_reward, done, episode = game.step(action, start_next=False)
        obs, reward, terminated, truncated, info = env.step(action)
        assert np.array_equal(obs, expected_obs) and reward == expected_reward and info["lives"] == game.lives
        if not done:
            assert not terminated and not truncated and "episode" not in info
            continue
        # The done step: the ended episode's last observation and lives, its statistics, and why it ended.
        assert np.array_equal(obs, game.final_observation)
        assert (terminated, truncated) == (not episode["truncated"], episode["truncated"])
        assert info["lives"] < lives if terminated else info["lives"] == lives  # Breakout ends episodes by lost lives
        assert info["episode"] == {"r": episode["reward"], "l": episode["length"]}
        if "game_reward" in episode:
            assert info["game"] == {"r": episode["game_reward"], "l": episode["game_length"]}
        else:
            assert "game" not in info
        seen["terminated" if terminated else "truncated"] += 1
        seen["game"] += "game" in info
        # reset() starts the next episode: a life loss in terminal mode goes on with the lives left instead of
        # restarting the game.
        obs, info = env.reset()
        assert np.array_equal(obs, game.start_next_episode()) and info == {"lives": game.lives}
        seen["continued"] += info["lives"] < 5
    assert seen["terminated"] >= 10 and seen["truncated"] >= 1
    if life_loss == "terminal":
        assert seen["game"] >= 2 and seen["continued"] >= 8
    else:
        assert seen["game"] == 0 and seen["continued"] == 0


def test_reset_in_mid_episode_restarts_the_game():
    options = {**OPTIONS, "life_loss": "terminal"}
    game, env = Game("Breakout", seed=2, **options), AtariGameEnv("Breakout", **options)
    game.reset()
    env.reset(seed=2)
    # Lose a life, take the continuation of the game, play a few steps into it, then reset.
    done, steps = False, 0
    while not done:
        _, _, done, _ = game.step(3)
        _, _, terminated, truncated, _ = env.step(3)
        assert terminated == done and not truncated
        steps += 1
    assert env.reset()[1] == {"lives": 4}
    for _ in range(5):
        game.step(0)
        env.step(0)
    obs, info = env.reset()
    assert np.array_equal(obs, game.reset()) and info == {"lives": 5}
    for _ in range(steps):
        expected_obs, expected_reward, _, _ = game.step(3)
        obs, reward, _, _, _ = env.step(3)
        assert np.array_equal(obs, expected_obs) and reward == expected_reward


def play(env, seed, actions):
    """The observations and rewards of `actions` played from ``reset(seed=seed)``, resetting after each done."""
    observations, rewards = [env.reset(seed=seed)[0]], []
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(action)
        observations.append(obs)
        rewards.append(reward)
        if terminated or truncated:
            observations.append(env.reset()[0])
    return np.stack(observations), rewards


def test_reset_with_a_seed_replays_the_same_trajectory_and_another_seed_another():
    env = AtariGameEnv("Breakout", sticky_actions=0.25, **OPTIONS)
    actions = np.random.default_rng(1).integers(4, size=200)
    first = play(env, 3, actions)
    again, other = play(env, 3, actions), play(env, 4, actions)
    assert np.array_equal(first[0], again[0]) and first[1] == again[1]
    assert not (len(first[0]) == len(other[0]) and np.array_equal(first[0], other[0]))


# --- rendering --------------------------------------------------------------------------------------------


def test_render_returns_the_colour_screen():
    env = gym.make("atari_game/Breakout-v0", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8
    assert np.array_equal(frame, env.unwrapped.game.ale.getScreenRGB())
    env.step(1)
    assert env.render() is not frame  # a fresh array each call: a video keeps every frame
    env.close()
    assert AtariGameEnv().render() is None


def test_render_after_a_restored_restart_is_the_screen_the_restart_shows(monkeypatch):
    # Breakout restores the state its restarts reach (FIXED_RESTART_GAMES), and ALE's state holds no screen: a video
    # (RecordVideo renders after every reset) must not start on the last frame of the game before.
    restoring = gym.make("atari_game/Breakout-v0", render_mode="rgb_array")
    monkeypatch.setattr(game_module, "FIXED_RESTART_GAMES", frozenset())
    emulating = gym.make("atari_game/Breakout-v0", render_mode="rgb_array")
    resets = 0
    for env in (restoring, emulating):
        env.reset(seed=3)
    for action in np.random.default_rng(0).integers(4, size=600).tolist():
        restoring.step(action)
        _, _, terminated, truncated, _ = emulating.step(action)
        if terminated or truncated:  # (both envs end together: their observations are the same)
            for env in (restoring, emulating):
                env.reset()
            resets += 1
        assert np.array_equal(restoring.render(), emulating.render())
    assert resets >= 3
    restoring.close()
    emulating.close()


def test_render_collection_collects_a_frame_per_reset_and_step():
    # What RecordVideo records (it needs moviepy, an optional dependency; this checks the frames it would get).
    env = gym.make("atari_game/Breakout-v0", render_mode="rgb_array_list")
    env.reset(seed=0)
    for _ in range(5):
        env.step(1)
    frames = env.render()
    assert len(frames) == 6 and all(frame.shape == (210, 160, 3) and frame.dtype == np.uint8 for frame in frames)
    assert not np.array_equal(frames[0], frames[-1])
    env.close()


# --- registration -----------------------------------------------------------------------------------------


def test_every_game_is_registered_once_with_both_entry_points(no_warnings):
    ids = [f"atari_game/{name}-v0" for name in list_games()]
    assert "atari_game/Breakout-v0" in ids and "atari_game/MsPacman-v0" in ids
    for env_id in ids:
        spec = gym.spec(env_id)
        assert spec.entry_point == "atari_game.env:AtariGameEnv"
        assert spec.vector_entry_point == "atari_game.env:make_game_pool"
    specs = dict(gym.registry)
    register_games()  # again: no warning, nothing replaced
    assert dict(gym.registry) == specs


def test_importing_atari_game_loads_no_rom_and_starts_no_process():
    check = (
        "import multiprocessing, gymnasium, atari_game;"
        "assert atari_game.game._rom_facts.cache_info().currsize == 0;"
        "assert not multiprocessing.active_children();"
        "assert 'atari_game/Pong-v0' in gymnasium.registry"
    )
    subprocess.run([sys.executable, "-W", "error", "-c", check], check=True)


# --- make_vec ---------------------------------------------------------------------------------------------


def test_make_vec_plays_the_same_games_in_every_vectorization_mode(no_warnings):
    actions = np.random.default_rng(2).integers(4, size=(200, 2))
    runs = {}
    for mode in ("sync", "async", "vector_entry_point"):
        envs = gym.make_vec("atari_game/Breakout-v0", num_envs=2, vectorization_mode=mode, **OPTIONS)
        assert envs.observation_space == gym.spaces.Box(0, 255, (2, 4, 84, 84), np.uint8)
        assert isinstance(envs.unwrapped, GamePool) == (mode == "vector_entry_point")
        obs, _ = envs.reset(seed=0)  # env i is seeded with 0 + i in every mode
        steps, episodes = [obs], []
        for row in actions:
            obs, rewards, terminations, truncations, info = envs.step(row)
            assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
            steps += [obs, rewards, terminations, truncations, info["lives"]]
            if "episode" in info:
                episodes.append((info["_episode"], info["episode"]["r"], info["episode"]["l"]))
        envs.close()
        runs[mode] = steps, episodes
    assert np.logical_or.reduce([mask for mask, _, _ in runs["sync"][1]]).all()  # every env ended episodes
    for mode in ("async", "vector_entry_point"):
        assert all(np.array_equal(a, b) for a, b in zip(runs[mode][0], runs["sync"][0], strict=True)), mode
        assert all(np.array_equal(a, b) for a, b in zip(runs[mode][1], runs["sync"][1], strict=True)), mode


def test_make_vec_passes_pool_options_and_refuses_rendering():
    with gym.make_vec("atari_game/Pong-v0", num_envs=3, vectorization_mode="vector_entry_point", n_workers=1) as envs:
        assert len(envs.unwrapped._workers) == 1 and envs.single_action_space.n == 6
    with pytest.raises(ValueError, match=r"a GamePool does not render; use make_vec.*vectorization_mode='sync'"):
        gym.make_vec("atari_game/Pong-v0", num_envs=2, vectorization_mode="vector_entry_point", render_mode="rgb_array")
    # The count is named as make_vec names it.
    with pytest.raises(ValueError, match=r"^num_envs must be an integer in \[1, 65536\], got 0$"):
        gym.make_vec("atari_game/Pong-v0", num_envs=0, vectorization_mode="vector_entry_point")


def test_make_vec_takes_a_list_of_games_for_a_mixed_pool(no_warnings):
    games = ["Pong", "SpaceInvaders", "DemonAttack"]  # their minimal action sets are the same 6
    # The call's game replaces the id's: any atari_game id gives the pool.
    with gym.make_vec(
        "atari_game/Breakout-v0", num_envs=3, vectorization_mode="vector_entry_point", game=games
    ) as envs:
        assert envs.unwrapped.games == ("pong", "space_invaders", "demon_attack") and envs.single_action_space.n == 6
        obs, info = envs.reset(seed=4)
        assert all(np.array_equal(obs[i], Game(game, seed=4 + i).reset()) for i, game in enumerate(games))
        assert info["game_name"].tolist() == ["pong", "space_invaders", "demon_attack"]
    # The single envs of "sync" and "async" play one game each: a list says where it belongs.
    with pytest.raises(TypeError, match=r"an AtariGameEnv plays one game, got a list of 3; .*'vector_entry_point'"):
        gym.make_vec("atari_game/Breakout-v0", num_envs=3, vectorization_mode="sync", game=games)


def test_make_vec_takes_the_new_options_with_matching_spaces(no_warnings):
    options = {"obs_type": "rgb", "scale_obs": True, "continuous": True, "random_starts": 3}
    with gym.make_vec("atari_game/Pong-v0", num_envs=2, vectorization_mode="vector_entry_point", **options) as envs:
        assert envs.single_observation_space == gym.spaces.Box(0, 1, (12, 84, 84), np.float32)
        assert envs.single_action_space.shape == (3,) and envs.action_space.shape == (2, 3)
        obs, _ = envs.reset(seed=0)
        for _ in range(10):
            assert envs.observation_space.contains(obs)
            obs, *_ = envs.step(envs.action_space.sample())


def test_pool_under_record_episode_statistics_and_normalize_reward(no_warnings):
    # The pool's own info already holds "episode", which the wrapper refuses to overwrite: it gets its own key.
    envs = gym.make_vec("atari_game/Breakout-v0", num_envs=2, vectorization_mode="vector_entry_point", **OPTIONS)
    statistics = RecordEpisodeStatistics(envs, stats_key="wrapper_episode")
    wrapped = NormalizeReward(statistics)
    wrapped.reset(seed=0)
    returns, ended = np.zeros(2), 0
    for row in np.random.default_rng(3).integers(4, size=(200, 2)):
        _, rewards, terminations, truncations, info = wrapped.step(row)
        # NormalizeReward divides by the running return's deviation; the statistics stay in raw rewards.
        returns += rewards * np.sqrt(wrapped.return_rms.var + wrapped.epsilon)
        if "_episode" in info:
            mask = info["_episode"]
            assert np.array_equal(info["_wrapper_episode"], mask)
            assert np.array_equal(mask, terminations | truncations)
            assert np.allclose(info["wrapper_episode"]["r"][mask], info["episode"]["r"][mask])
            assert np.allclose(info["wrapper_episode"]["r"][mask], returns[mask])
            assert np.array_equal(info["wrapper_episode"]["l"][mask], info["episode"]["l"][mask])
            returns[mask], ended = 0.0, ended + mask.sum()
    assert ended >= 4 and len(statistics.return_queue) == ended
    wrapped.close()
