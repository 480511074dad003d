"""What `Game` promises: observations, episode statistics, every option's semantics, names and bad input."""

import math

import numpy as np
import pytest

from atari_game import Game, GameOptions, action_meanings, list_games, resolve_game

NOOP, FIRE = 0, 1


def play(game, actions):
    """Step through `actions`; return the step tuples."""
    return [game.step(action) for action in actions]


def random_actions(game, steps, seed=0):
    return np.random.default_rng(seed).integers(game.n_actions, size=steps)


# --- observations -----------------------------------------------------------------------------------


def test_observation_shape_dtype_and_reset_fills_every_slot():
    game = Game("Breakout")
    obs = game.reset()
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert game.observation_shape == (4, 84, 84)
    assert all(np.array_equal(obs[i], obs[0]) for i in range(4))
    assert obs.any()  # a real screen, not an empty buffer


def test_stack_is_oldest_first_and_shifts_by_one_frame():
    game = Game("Breakout", fire_reset=True)
    previous = game.reset()
    for obs, _, done, _ in play(game, random_actions(game, 200)):
        if not done:
            assert np.array_equal(obs[:-1], previous[1:])
        previous = obs


def test_returned_observation_is_never_mutated_later():
    game = Game("Breakout", fire_reset=True)
    first = game.reset()
    kept = first.copy()
    steps = play(game, random_actions(game, 100))
    assert np.array_equal(first, kept)
    assert not np.array_equal(steps[-1][0], kept)  # the game did move on
    assert not np.shares_memory(steps[0][0], steps[1][0])


def test_channels_last_and_size_options():
    first = Game("Pong", seed=5)
    last = Game("Pong", seed=5, channels_last=True)
    assert np.array_equal(last.reset(), first.reset().transpose(1, 2, 0))
    for action in random_actions(first, 20):
        assert np.array_equal(last.step(action)[0], first.step(action)[0].transpose(1, 2, 0))
    assert last.observation_shape == (84, 84, 4)
    game = Game("Pong", size=(100, 80), stack=2)
    assert game.reset().shape == (2, 100, 80) == game.observation_shape
    assert game.step(0)[0].shape == (2, 100, 80)


@pytest.mark.parametrize("channels_last", [False, True])
def test_play_writes_what_step_returns_into_the_array_it_is_given(channels_last):
    stepped = Game("Breakout", seed=3, fire_reset=True, channels_last=channels_last)
    played = Game("Breakout", seed=3, fire_reset=True, channels_last=channels_last)
    out = np.full(played.observation_shape, 7, np.uint8)
    stepped.reset(), played.reset()
    ends = 0
    for action in random_actions(stepped, 300):
        obs, reward, done, info = stepped.step(action)
        assert played.play(int(action), out=out) == (reward, done, info)
        assert np.array_equal(out, obs)
        if done:
            assert np.array_equal(played.final_observation, stepped.final_observation)
            ends += 1
    assert ends >= 1


def test_step_before_reset_is_refused():
    game = Game("Pong")
    with pytest.raises(RuntimeError, match="reset"):
        game.step(0)


# --- episode statistics and life-loss modes ---------------------------------------------------------


def collect_episodes(game, steps, seed=0):
    """Play random actions; return [(step rewards, episode_info)] for every finished episode."""
    episodes, rewards = [], []
    for _, reward, done, info in play(game, random_actions(game, steps, seed)):
        rewards.append(reward)
        assert (info is not None) == done
        if done:
            episodes.append((rewards, info))
            rewards = []
    return episodes


def test_episode_info_is_the_exact_sum_and_length():
    game = Game("Breakout", fire_reset=True)
    game.reset()
    episodes = collect_episodes(game, 1500)
    assert len(episodes) >= 5 and any(info["reward"] > 0 for _, info in episodes)
    for rewards, info in episodes:
        assert info == {"reward": sum(rewards), "length": len(rewards), "truncated": False}


def test_life_loss_reset_restarts_the_game_on_every_lost_life():
    game = Game("Breakout", fire_reset=True, life_loss="reset")
    game.reset()
    full_lives = game.lives
    dones = 0
    for _, _, done, info in play(game, random_actions(game, 600)):
        if done:
            dones += 1
            assert game.lives == full_lives  # a fresh game, not the next life
            assert "game_reward" not in info
    assert dones >= 5


def test_life_loss_terminal_continues_the_game_and_reports_whole_games():
    game = Game("Breakout", fire_reset=True, life_loss="terminal")
    game.reset()
    full_lives = game.lives
    episodes = collect_episodes(game, 3000)
    whole_games = len(episodes) // full_lives
    assert whole_games >= 2
    game_reward, game_length = 0.0, 0
    for number, (rewards, info) in enumerate(episodes[: whole_games * full_lives], start=1):
        game_reward += sum(rewards)
        game_length += len(rewards)
        # Only every `full_lives`-th episode ends a game: the life losses before it did not restart it.
        if number % full_lives == 0:
            assert info["game_reward"] == game_reward and info["game_length"] == game_length
            game_reward, game_length = 0.0, 0
        else:
            assert "game_reward" not in info


def test_life_loss_terminal_keeps_playing_the_same_game():
    game = Game("Breakout", fire_reset=True, life_loss="terminal")
    game.reset()
    for action in random_actions(game, 400):
        frames_before = game.ale.getEpisodeFrameNumber()
        if game.step(action)[2]:
            # The emulator's frame count did not start over: the game went on with one life fewer.
            assert game.lives == 4 and game.ale.getEpisodeFrameNumber() > frames_before
            return
    pytest.fail("no life was lost")


def test_life_loss_ignore_ends_episodes_only_at_game_over():
    game = Game("Breakout", fire_reset=True, life_loss="ignore")
    game.reset()
    episodes = collect_episodes(game, 3000)
    assert len(episodes) >= 2
    for rewards, info in episodes:
        assert info["game_reward"] == info["reward"] == sum(rewards)
        assert info["game_length"] == info["length"] == len(rewards)
    assert game.lives == 5


def test_game_without_lives_ends_only_at_game_over():
    game = Game("Pong")
    game.reset()
    assert game.lives == 0
    episodes = collect_episodes(game, 1500)
    assert len(episodes) == 1
    rewards, info = episodes[0]
    assert info["reward"] == sum(rewards)
    assert 21 in (rewards.count(-1.0), rewards.count(1.0))  # a game of Pong ends when a side has 21 points


def test_truncation_ends_the_episode_on_the_step_that_reaches_the_limit():
    game = Game("Pong", max_episode_frames=400)
    game.reset()
    steps = play(game, [NOOP] * 250)
    done_at = [t for t, (_, _, done, _) in enumerate(steps) if done]
    assert done_at == [99, 199]  # 100 steps of 4 frames each, then again after the restart
    assert steps[99][3]["truncated"] is True and steps[99][3]["length"] == 100


def test_final_observation_is_the_last_observation_of_the_ended_episode():
    truncated, endless = Game("Pong", max_episode_frames=400), Game("Pong", max_episode_frames=None)
    truncated.reset(), endless.reset()
    for t in range(100):
        obs, _, done, _ = truncated.step(t % 6)
        endless_obs, *_ = endless.step(t % 6)
    assert done and truncated.final_observation is not None
    # What the episode would have shown had it gone on, not the next episode's first observation.
    assert np.array_equal(truncated.final_observation, endless_obs)
    assert not np.array_equal(obs, endless_obs)


def test_final_observation_of_an_episode_ended_mid_step_holds_its_final_screen():
    game = Game("Breakout", fire_reset=True)
    previous = game.reset()
    for action in random_actions(game, 300):
        obs, _, done, _ = game.step(action)
        if done:
            final = game.final_observation
            assert np.array_equal(final[:-1], previous[1:]) and final[-1].any()
            assert not np.shares_memory(final, obs)
        previous = obs


def test_clip_rewards_clips_the_step_reward_but_not_the_statistics():
    raw, clipped = Game("MsPacman", seed=2), Game("MsPacman", seed=2, clip_rewards=True)
    raw.reset(), clipped.reset()
    actions = random_actions(raw, 1000)
    raw_steps, clipped_steps = play(raw, actions), play(clipped, actions)
    raw_rewards = [reward for _, reward, _, _ in raw_steps]
    assert max(raw_rewards) >= 10  # a dot is worth 10 points
    assert [reward for _, reward, _, _ in clipped_steps] == [float(np.sign(r)) for r in raw_rewards]
    assert [info for *_, info in clipped_steps] == [info for *_, info in raw_steps]


# --- starts: NOOP, FIRE; sticky actions; determinism ------------------------------------------------


def test_noop_max_starts_each_game_after_a_random_number_of_noops():
    game = Game("Breakout", noop_max=30, seed=1)
    starts = []
    for _ in range(30):
        game.reset()
        starts.append(game.ale.getEpisodeFrameNumber())
    assert all(1 <= frames <= 30 for frames in starts)
    assert len(set(starts)) > 10
    again = Game("Breakout", noop_max=30, seed=1)
    assert [again.reset() is not None and again.ale.getEpisodeFrameNumber() for _ in range(30)] == starts
    plain = Game("Breakout")
    plain.reset()
    assert plain.ale.getEpisodeFrameNumber() == 0


def test_fire_reset_launches_the_ball_after_reset_and_after_each_life():
    # Breakout waits for FIRE: with only NOOPs, no life can ever be lost without fire_reset.
    waiting = Game("Breakout")
    waiting.reset()
    assert not any(done for _, _, done, _ in play(waiting, [NOOP] * 300))
    firing = Game("Breakout", fire_reset=True, life_loss="terminal")
    firing.reset()
    assert firing.ale.getEpisodeFrameNumber() == 4  # one agent step of FIRE
    infos = [info for _, _, done, info in play(firing, [NOOP] * 1500) if done]
    assert len(infos) >= 5 and "game_reward" in infos[4]  # FIRE pressed after every lost life too


def test_fire_reset_is_refused_for_games_without_fire():
    with pytest.raises(ValueError, match=r"Freeway has no FIRE action.*NOOP, UP, DOWN"):
        Game("Freeway", fire_reset=True)


def test_sticky_actions_change_the_trajectory():
    plain, sticky = Game("Breakout", fire_reset=True), Game("Breakout", fire_reset=True, sticky_actions=0.25)
    plain.reset(), sticky.reset()
    actions = random_actions(plain, 300)
    plain_obs = [obs for obs, *_ in play(plain, actions)]
    sticky_obs = [obs for obs, *_ in play(sticky, actions)]
    assert not all(np.array_equal(a, b) for a, b in zip(plain_obs, sticky_obs, strict=True))


@pytest.mark.parametrize("options", [{}, {"noop_max": 30, "sticky_actions": 0.25, "life_loss": "terminal"}])
def test_same_seed_same_trajectory_other_seed_other_trajectory(options):
    def trajectory(seed):
        game = Game("MsPacman", seed=seed, **options)
        obs = [game.reset()]
        for o, reward, done, info in play(game, random_actions(game, 500)):
            obs.append((o, reward, done, info))
        return obs

    first, second = trajectory(11), trajectory(11)
    assert np.array_equal(first[0], second[0])
    for a, b in zip(first[1:], second[1:], strict=True):
        assert np.array_equal(a[0], b[0]) and a[1:] == b[1:]
    if options:  # seeds only matter where something is random
        other = trajectory(12)
        assert not all(np.array_equal(a[0], b[0]) for a, b in zip(first[1:], other[1:], strict=True))


def test_full_action_space():
    assert Game("Breakout", full_action_space=True).n_actions == 18
    assert action_meanings("Breakout") == ("NOOP", "FIRE", "RIGHT", "LEFT")


# --- names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Breakout", "breakout", "BreakoutNoFrameskip-v4", "ALE/Breakout-v5", " Breakout"])
def test_breakout_spellings(name):
    assert resolve_game(name) == "breakout"


@pytest.mark.parametrize("name", ["MsPacman", "ms_pacman", "MsPacmanNoFrameskip-v4", "ALE/MsPacman-v5"])
def test_ms_pacman_spellings(name):
    assert resolve_game(name) == "ms_pacman"
    assert Game(name).name == "MsPacman"


def test_unknown_game_names_the_closest():
    with pytest.raises(ValueError, match=r"unknown game 'Breakot'.*closest: Breakout"):
        Game("Breakot")


def test_every_listed_game_plays():
    games = list_games()
    assert len(games) == 104 and {"Breakout", "MsPacman", "Pong", "TicTacToe3D"} <= set(games)
    for name in games:  # each must load: a multiplayer-only ROM would exit the process
        game = Game(name)
        assert game.reset().shape == (4, 84, 84)
        game.step(0)


# --- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "error", "message"),
    [
        (-1, ValueError, r"action must be an integer in \[0, 4\) for Breakout \(NOOP, FIRE, RIGHT, LEFT\), got -1"),
        (4, ValueError, r"\[0, 4\).*got 4"),
        (1.0, TypeError, "got float 1.0"),
        (math.nan, TypeError, "got float nan"),
        (None, TypeError, "got NoneType None"),
        ("1", TypeError, "got str"),
        (True, TypeError, "got the bool True"),
        (np.array([1]), TypeError, r"got ndarray of shape \(1,\)"),
        (np.zeros((2, 2), dtype=int), TypeError, r"shape \(2, 2\)"),
        (np.float32(2), TypeError, "got float32"),
    ],
)
def test_bad_actions_are_refused_and_leave_the_game_usable(action, error, message):
    game = Game("Breakout")
    game.reset()
    frames = game.ale.getEpisodeFrameNumber()
    with pytest.raises(error, match=message):
        game.step(action)
    assert game.ale.getEpisodeFrameNumber() == frames  # nothing was played
    assert game.step(0)[0].shape == (4, 84, 84)


@pytest.mark.parametrize("action", [np.int64(3), np.uint8(2), np.array(1), 0])
def test_integer_like_actions_are_accepted(action):
    game = Game("Breakout")
    game.reset()
    game.step(action)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"frame_skip": 0}, ValueError, "frame_skip must be an integer >= 1, got 0"),
        ({"frame_skip": 2.5}, TypeError, "frame_skip must be an integer"),
        ({"stack": 0}, ValueError, "stack must be an integer >= 1"),
        ({"size": -1}, ValueError, "size must be an integer >= 1, got -1"),
        ({"size": (84,)}, ValueError, r"size must be an integer or a \(height, width\) pair"),
        ({"life_loss": "never"}, ValueError, r"life_loss must be one of \('reset', 'terminal', 'ignore'\)"),
        ({"sticky_actions": 2}, ValueError, r"sticky_actions must be a probability in \[0, 1\], got 2"),
        ({"sticky_actions": math.nan}, ValueError, "sticky_actions must be a probability"),
        ({"sticky_actions": "0.25"}, TypeError, "sticky_actions must be a probability"),
        ({"noop_max": -1}, ValueError, "noop_max must be an integer >= 0"),
        ({"max_episode_frames": 0}, ValueError, "max_episode_frames must be an integer >= 1"),
        ({"channels_last": "yes"}, TypeError, "channels_last must be True or False"),
        ({"seed": -1}, ValueError, "seed must be an integer >= 0"),
        ({"game": 3}, TypeError, "game must be a string"),
        ({"frameskip": 4}, TypeError, "unknown game option 'frameskip' \\(did you mean 'frame_skip'\\?\\); valid"),
    ],
)
def test_bad_options_name_the_argument_and_the_valid_range(options, error, message):
    with pytest.raises(error, match=message):
        Game(**options)
    with pytest.raises(error, match=message):
        GameOptions.from_kwargs(**options)
