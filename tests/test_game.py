"""What `Game` promises: observations, episode statistics, every option's semantics, names and bad input."""

import dataclasses
import math
import re

import ale_py
import cv2
import numpy as np
import pytest

from atari_game import Game, GameOptions, action_meanings, game_difficulties, game_modes, list_games, resolve_game
from atari_game import game as game_module
from atari_game.game import CONTINUOUS_ACTION_HIGH, CONTINUOUS_ACTION_LOW, FIXED_RESTART_GAMES

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
    # A size of another height than width is (height, width): cv2 takes (width, height), and given a square it
    # would resize into an array of its own, leaving the observation's frames blank.
    game = Game("Pong", size=(100, 80), stack=2)
    obs = game.reset()
    assert obs.shape == (2, 100, 80) == game.observation_shape and obs[-1].any()
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


def test_a_game_has_no_lives_before_its_first_reset():
    # No game has started, so none are left: not 1, nor -1.
    game = Game("Breakout")
    assert game.lives == 0
    game.reset()
    assert game.lives == 5


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
    previous, ends = game.reset(), 0
    for action in random_actions(game, 300):
        obs, _, done, _ = game.step(action)
        if done:
            final = game.final_observation
            assert np.array_equal(final[:-1], previous[1:]) and final[-1].any()
            assert not np.shares_memory(final, obs)
            ends += 1
        previous = obs
    assert ends >= 1


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
    one = Game("Breakout", noop_max=1)  # the smallest noop start: one NOOP frame, not none
    one.reset()
    assert one.ale.getEpisodeFrameNumber() == 1


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


def test_a_probability_option_takes_0_to_1_inclusive():
    # A negative probability is refused; sticky actions that always repeat are taken.
    with pytest.raises(ValueError, match=re.escape("sticky_actions must be a probability in [0, 1], got -0.1")):
        Game("Breakout", sticky_actions=-0.1)
    # Always repeated, the last action before any is ALE's NOOP: moving the paddle right does nothing.
    right, still = Game("Breakout", sticky_actions=1.0), Game("Breakout", sticky_actions=1.0)
    right.reset()
    still.reset()
    assert all(np.array_equal(right.step(2)[0], still.step(0)[0]) for _ in range(30))


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


def test_reset_takes_seed_0_as_a_new_game_seeded_0_and_refuses_a_negative_seed():
    # 0 is the lowest seed, and the default one: refusing it, or taking -1, would be off by one either way.
    def noop_starts(game, **seed):
        # Breakout's screen stands still through the no-ops: the seed shows in how many each game began with.
        game.reset(**seed)
        starts = [game.ale.getEpisodeFrameNumber()]
        for _ in range(5):
            game.reset()
            starts.append(game.ale.getEpisodeFrameNumber())
        return starts

    game = Game("Breakout", seed=5, noop_max=30)
    game.reset()
    game.step(1)
    seeded_0 = noop_starts(game, seed=0)
    assert seeded_0 == noop_starts(Game("Breakout", seed=0, noop_max=30))
    assert seeded_0 != noop_starts(Game("Breakout", seed=5, noop_max=30))
    assert np.array_equal(game.reset(seed=0), Game("Breakout", seed=0, noop_max=30).reset())
    with pytest.raises(ValueError, match=re.escape("seed must be an integer >= 0, got -1")):
        game.reset(seed=-1)


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


@pytest.mark.parametrize(
    ("name", "rom"),
    [
        ("Battle Zone", "battle_zone"), ("Q*bert", "qbert"), ("Montezuma's Revenge", "montezuma_revenge"),
        ("Up'n Down", "up_n_down"), ("H.E.R.O.", "hero"), ("Pitfall!", "pitfall"), ("Pitfall II", "pitfall2"),
        ("Ms. Pac-Man", "ms_pacman"), ("Kung-Fu Master", "kung_fu_master"), ("Yars' Revenge", "yars_revenge"),
    ],
)  # fmt: skip
def test_a_papers_spelling_names_its_rom(name, rom):
    # Published score tables (Nature's, Rainbow's, Machado's) write names so; atari-game report reads them.
    assert resolve_game(name) == rom


def test_an_unknown_name_is_refused_with_the_closest_names():
    with pytest.raises(ValueError, match=r"unknown game 'Battle Zon3' \(closest: BattleZone"):
        resolve_game("Battle Zon3")


def test_the_tutorials_game_seed_is_breakout_with_that_seed():
    tutorial, named = Game(47), Game("Breakout", seed=47)
    assert tutorial.name == "Breakout" and tutorial.options == named.options
    assert Game(np.int64(47)).options == named.options
    with pytest.raises(TypeError, match="game must be a string such as 'Breakout', got int 47"):
        Game(47, seed=3)  # a seed given twice: no guessing which one is meant


def test_an_unknown_game_names_the_three_closest():
    with pytest.raises(ValueError, match=r"unknown game 'Breakot'.*closest: Breakout"):
        Game("Breakot")
    with pytest.raises(ValueError, match=re.escape("(closest: SpaceWar, MsPacman, SpaceInvaders);")):
        Game("Space")


@pytest.mark.slow
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
    # Played as the integer they hold: 10 steps of it move the paddle (LEFT, RIGHT) as a twin given int(action) does.
    game, twin, other = Game("Breakout"), Game("Breakout"), Game("Breakout")
    game.reset(), twin.reset(), other.reset()
    for _ in range(10):
        obs, *_ = game.step(action)
        expected, *_ = twin.step(int(action))
        elsewhere, *_ = other.step(2 if int(action) == 3 else 3)
    assert np.array_equal(obs, expected)
    if int(action) in (2, 3):  # (NOOP and FIRE leave a waiting Breakout's screen alike)
        assert not np.array_equal(obs, elsewhere)


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
        ({"game": 3.0}, TypeError, "game must be a string"),
        ({"frameskip": 4}, TypeError, "unknown game option 'frameskip': use frame_skip \\(emulator frames per agent"),
        ({"noop_maxx": 3}, TypeError, r"unknown game option 'noop_maxx' \(did you mean 'noop_max'\?\)"),  # misspelt
        ({"obs_type": "color"}, ValueError, r"obs_type must be one of \('grayscale', 'rgb', 'ram'\), got 'color'"),
        ({"obs_type": None}, ValueError, r"obs_type must be one of \('grayscale', 'rgb', 'ram'\)"),
        ({"scale_obs": 1}, TypeError, "scale_obs must be True or False, got int 1"),
        ({"mode": 3}, ValueError, "mode: 3 is not a mode of Breakout \\(Breakout's modes are 0, 4, 8, .*, 44, or None"),
        ({"mode": "4"}, TypeError, "mode must be an integer or None \\(Breakout's modes are 0, 4,"),
        ({"mode": True}, TypeError, "mode must be an integer or None"),
        ({"difficulty": 2}, ValueError, r"difficulty: 2 is not a difficulty of Breakout \(.*difficulties are 0, 1, or"),
        ({"difficulty": 1.0}, TypeError, "difficulty must be an integer or None"),
        ({"game": "Pong", "difficulty": 4}, ValueError, "Pong's difficulties are 0, 1, 2, 3"),
        ({"continuous": "yes"}, TypeError, "continuous must be True or False"),
        (
            {"continuous": True, "continuous_action_threshold": 1.5},
            ValueError,
            r"threshold must be a number in \[0, 1\]",
        ),
        ({"continuous": True, "continuous_action_threshold": math.nan}, ValueError, r"must be a number in \[0, 1\]"),
        ({"continuous": True, "continuous_action_threshold": "0.5"}, TypeError, r"must be a number in \[0, 1\]"),
        ({"continuous_action_threshold": 0.3}, ValueError, "continuous_action_threshold=0.3 needs continuous=True"),
        ({"random_starts": -1}, ValueError, "random_starts must be an integer >= 0, got -1"),
        ({"random_starts": 2.0}, TypeError, "random_starts must be an integer >= 0, got float"),
    ],
)
def test_bad_options_name_the_argument_and_the_valid_range(options, error, message):
    with pytest.raises(error, match=message):
        Game(**options)
    with pytest.raises(error, match=message):
        GameOptions.from_kwargs(**options)


def test_a_game_is_seeded_with_0_and_truncated_at_108000_frames_unless_told():
    # 108,000 emulator frames are 30 minutes at 60 Hz, the limit of Machado et al. and of Gymnasium's v5 ids.
    for options in (Game("Breakout").options, GameOptions.from_kwargs(game="Breakout")):  # (a pool's are the latter)
        assert options.seed == 0 and options.max_episode_frames == 108_000


def test_game_options_cannot_be_changed_once_made():
    # A Game's arrays were made for the options it was given: changed under it, they would no longer fit.
    game = Game("Breakout")
    with pytest.raises(dataclasses.FrozenInstanceError):
        game.options.frame_skip = 2


# --- observation types, scaling, modes, continuous actions, random starts -----------------------------


@pytest.mark.parametrize("scale_obs", [False, True])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize(
    ("obs_type", "shape", "shape_last"),
    [("grayscale", (4, 84, 84), (84, 84, 4)), ("rgb", (12, 84, 84), (84, 84, 12)), ("ram", (4, 128), (128, 4))],
)
def test_observation_shape_and_dtype_of_every_obs_type(obs_type, shape, shape_last, channels_last, scale_obs):
    game = Game("Breakout", obs_type=obs_type, channels_last=channels_last, scale_obs=scale_obs)
    dtype = np.float32 if scale_obs else np.uint8
    assert game.observation_shape == game.options.observation_shape == (shape_last if channels_last else shape)
    assert game.options.observation_dtype == dtype
    assert game.options.observation_high == (1.0 if scale_obs else 255)  # the largest value, not one below it
    for obs in [game.reset()] + [obs for obs, *_ in play(game, random_actions(game, 20))]:
        assert obs.shape == game.observation_shape and obs.dtype == dtype
        assert obs.min() >= 0 and obs.max() <= (1.0 if scale_obs else 255) and obs.any()


def test_rgb_layouts_stack_whole_colour_frames_oldest_first():
    first, last = Game("MsPacman", seed=4, obs_type="rgb"), Game("MsPacman", seed=4, obs_type="rgb", channels_last=True)
    gray = Game("MsPacman", seed=4)
    previous = first.reset()
    last.reset(), gray.reset()
    for action in random_actions(first, 100):
        obs, _, done, _ = first.step(action)
        # (12, h, w) is 4 frames of (R, G, B), the numbers of (h, w, 12): channel 3i + c is frame i, colour c.
        assert np.array_equal(last.step(action)[0], obs.reshape(4, 3, 84, 84).transpose(2, 3, 0, 1).reshape(84, 84, 12))
        gray.step(action)
        if not done:
            assert np.array_equal(obs[:-3], previous[3:])  # the stack moves one whole colour frame
        previous = obs
    assert not np.array_equal(obs[-3], obs[-2])  # really colour: the channels differ


def test_ram_is_the_console_ram_after_the_step_s_last_frame_and_never_pooled():
    game = Game("Breakout", obs_type="ram", fire_reset=True)
    previous = game.reset()
    assert np.array_equal(previous[-1], game.ale.getRAM())
    for action in random_actions(game, 200):
        obs, _, done, _ = game.step(action)
        assert np.array_equal(obs[-1], game.ale.getRAM())  # a done step: the next episode's first RAM
        if not done:
            assert np.array_equal(obs[:-1], previous[1:])
        previous = obs


def test_scale_obs_is_the_uint8_observation_divided_by_255():
    raw, scaled = Game("Pong", seed=1, obs_type="ram"), Game("Pong", seed=1, obs_type="ram", scale_obs=True)
    assert np.array_equal(scaled.reset(), raw.reset().astype(np.float32) / 255)
    for action in random_actions(raw, 100):
        assert np.array_equal(scaled.step(action)[0], raw.step(action)[0].astype(np.float32) / 255)


def test_observation_types_do_not_change_the_trajectory():
    games = [Game("Breakout", seed=2, fire_reset=True, obs_type=obs_type) for obs_type in ("grayscale", "rgb", "ram")]
    for game in games:
        game.reset()
    for action in random_actions(games[0], 300):
        steps = [game.step(action)[1:] for game in games]
        assert steps[0] == steps[1] == steps[2]


def test_mode_and_difficulty_survive_reset_with_a_seed():
    def observations(game):
        return [obs for obs, *_ in play(game, random_actions(game, 150))]

    flavoured = Game("SpaceInvaders", seed=0, mode=5, difficulty=1)
    flavoured.reset(seed=9)  # reloads the ROM, which resets the mode: it must be set again
    fresh = Game("SpaceInvaders", seed=9, mode=5, difficulty=1)
    fresh.reset()
    plain = Game("SpaceInvaders", seed=9)
    plain.reset()
    expected = observations(fresh)
    assert all(np.array_equal(a, b) for a, b in zip(observations(flavoured), expected, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(observations(plain), expected, strict=True))


def test_modes_and_difficulties_are_listed_per_game():
    assert game_modes("Breakout") == tuple(range(0, 45, 4)) and game_difficulties("breakout") == (0, 1)
    assert game_modes("Pong") == (0, 1) and game_difficulties("ALE/Pong-v5") == (0, 1, 2, 3)


def test_a_roms_facts_are_read_once_per_game(monkeypatch):
    # Loading a ROM takes ~0.1 s, and every option check and action list needs its facts (a GamePool checks its
    # options in the parent and in each worker).
    meanings = action_meanings("Pong")
    monkeypatch.setattr(ale_py, "ALEInterface", lambda: pytest.fail("a ROM was loaded again for its facts"))
    assert action_meanings("Pong") == meanings
    assert game_modes("Pong") == (0, 1)


def test_continuous_games_take_polar_actions_and_map_them_onto_all_18():
    game = Game("Breakout", continuous=True)
    assert game.n_actions is None and len(game.action_meanings) == 18
    game.reset()
    for action in ([1.0, 0.0, 1.0], np.array([0.5, -3.0, 0.0], dtype=np.float64), (0, 0, 0)):
        assert game.step(action)[0].shape == (4, 84, 84)


@pytest.mark.parametrize(
    ("action", "name"),
    [
        ((0.0, 0.0, 0.0), "NOOP"),
        ((1.0, 0.0, 0.0), "RIGHT"),
        ((1.0, np.pi, 0.0), "LEFT"),
        ((1.0, np.pi / 2, 0.0), "UP"),
        ((1.0, -np.pi / 2, 1.0), "DOWNFIRE"),
        ((1.0, np.pi / 4, 0.0), "UPRIGHT"),
        ((0.3, np.pi / 2, 0.2), "NOOP"),  # every component within the threshold, 0.5
        ((0.0, 0.0, 0.9), "FIRE"),
        ((0.5, np.pi / 2, 0.5), "NOOP"),  # y and fire at the threshold exactly: not beyond it
        ((0.5, -np.pi / 2, 0.0), "NOOP"),
        ((0.5, 0.0, 0.0), "NOOP"),  # x at the threshold exactly, right and left
        ((0.5, np.pi, 0.0), "NOOP"),
    ],
)
def test_a_continuous_action_is_the_joystick_position_and_fire_beyond_the_threshold(action, name):
    # The expected names are worked out by hand from x = radius cos(angle), y = radius sin(angle) against the
    # threshold 0.5: a direction or fire only beyond it, never at it (a centred stick is NOOP, not DOWN).
    game = Game("Breakout", continuous=True)
    assert game._ale_action(np.array(action, np.float32))[0] == ale_py.Action.__members__[name]


@pytest.mark.parametrize(
    ("action", "error", "message"),
    [
        (
            1,
            ValueError,
            r"action must be \(radius in \[0, 1\], angle in \[-pi, pi\], fire in \[0, 1\]\).*got shape \(\)",
        ),
        ([1.0, 0.0], ValueError, r"of shape \(3,\), got shape \(2,\)"),
        ([1.0, 0.0, math.nan], ValueError, r"got nan at index \(2,\)"),
        ([1.5, 0.0, 0.0], ValueError, r"got 1.5 at index \(0,\)"),
        ([1.5, 0.0, math.nan], ValueError, r"got 1.5 at index \(0,\)"),  # two bad entries: the first is named
        ([1.0, 4.0, 0.0], ValueError, r"got 4.0 at index \(1,\)"),
        ([-0.1, 0.0, 0.0], ValueError, r"at index \(0,\)"),
        (["1", "0", "0"], TypeError, "got dtype <U1"),
        ([True, False, True], TypeError, "got dtype bool"),
        ([1.0, [0.0], 0.0], TypeError, "action must be"),
        (None, TypeError, "got dtype object"),
    ],
)
def test_bad_continuous_actions_are_refused_and_leave_the_game_usable(action, error, message):
    game = Game("Breakout", continuous=True)
    game.reset()
    frames = game.ale.getEpisodeFrameNumber()
    with pytest.raises(error, match=message):
        game.step(action)
    assert game.ale.getEpisodeFrameNumber() == frames
    game.step([1.0, 0.0, 0.0])


def test_a_fire_outside_0_to_1_is_refused_and_the_bounds_cannot_be_changed():
    # The bounds are every Game's action space: writable, any caller could change them for all.
    game = Game("Breakout", continuous=True)
    game.reset()
    with pytest.raises(ValueError, match=re.escape("fire in [0, 1]) as floats of shape (3,), got -0.5 at index (2,)")):
        game.step([1.0, 0.0, -0.5])
    with pytest.raises(ValueError, match=re.escape("fire in [0, 1]) as floats of shape (3,), got 1.5 at index (2,)")):
        game.step([1.0, 0.0, 1.5])
    for bounds in (CONTINUOUS_ACTION_LOW, CONTINUOUS_ACTION_HIGH):
        with pytest.raises(ValueError, match="read-only"):
            bounds[2] = 0.5


def start_draws(seed, resets, random_starts, n_actions, noop_max=0):
    """The Game's seeded draws for `resets` game restarts: (NOOP count, random-start count) for each."""
    rng = np.random.default_rng(int(np.random.SeedSequence(seed).generate_state(n_words=2)[0]))
    draws = []
    for _ in range(resets):
        noops = int(rng.integers(1, noop_max + 1)) if noop_max else 0
        count = int(rng.integers(0, random_starts + 1))
        for _ in range(count):
            rng.integers(n_actions)
        draws.append((noops, count))
    return draws


@pytest.mark.parametrize("options", [{}, {"noop_max": 30, "fire_reset": True}])
@pytest.mark.parametrize("n", [1, 3])  # 1: game.py's ``random_starts > 0`` made ``> 1`` played none
def test_random_starts_play_0_to_n_seeded_random_actions_after_the_noop_start(options, n):
    resets, frame_skip = 60, 4
    game = Game("Breakout", seed=8, random_starts=n, **options)
    frames = []
    for _ in range(resets):
        game.reset()
        frames.append(game.ale.getEpisodeFrameNumber())
    # The NOOP start's frames, then frame_skip frames per random action, then the FIRE step: the draws are
    # the NOOP count first, then the random-start count and its actions, from the Game's seeded generator.
    draws = start_draws(8, resets, n, game.n_actions, options.get("noop_max", 0))
    fire = frame_skip if options else 0
    assert frames == [noops + frame_skip * count + fire for noops, count in draws]
    assert {count for _, count in draws} == set(range(n + 1))  # 0..n inclusive
    again = Game("Breakout", seed=8, random_starts=n, **options)
    assert [again.reset() is not None and again.ale.getEpisodeFrameNumber() for _ in range(resets)] == frames


def test_random_starts_rewards_and_actions_are_not_part_of_the_episode():
    # Space Invaders scores during the random start; the same actions played as agent steps by a plain
    # game show what the random start earned, which the episode must not count.
    seed, n = 5, 60  # 58 random actions, 15 points
    started = Game("SpaceInvaders", seed=seed, random_starts=n, life_loss="ignore")
    started.reset()
    rng = np.random.default_rng(int(np.random.SeedSequence(seed).generate_state(n_words=2)[0]))
    start_actions = [rng.integers(started.n_actions) for _ in range(rng.integers(0, n + 1))]
    plain = Game("SpaceInvaders", seed=seed, life_loss="ignore")
    plain.reset()
    start_reward = sum(plain.step(action)[1] for action in start_actions)
    assert start_reward > 0 and len(start_actions) > 0
    for action in random_actions(started, 3000):
        _, reward, done, info = started.step(action)
        _, plain_reward, plain_done, plain_info = plain.step(action)
        # The same emulator from here on: the random start was the plain game's first agent steps.
        assert np.array_equal(started.ale.getRAM(), plain.ale.getRAM()) or done
        assert reward == plain_reward and done == plain_done
        if done:
            assert info["reward"] == plain_info["reward"] - start_reward
            assert info["length"] == plain_info["length"] - len(start_actions)
            return
    pytest.fail("no game ended")


# --- a deferred next episode, and a game moved between Games (what pools lend envs with) ---------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        {"noop_max": 30},
        {"life_loss": "terminal", "fire_reset": True, "noop_max": 30, "max_episode_frames": 2000},
        {"game": "Seaquest", "life_loss": "terminal", "random_starts": 5, "obs_type": "rgb"},
        {"game": "Adventure", "mode": 2, "max_episode_frames": 400},  # its restarts draw from ALE's generator
    ],
    ids=["reset", "terminal-truncated", "seaquest-rgb", "adventure"],
)
def test_a_game_moved_between_games_and_its_next_episode_deferred_plays_exactly_as_one_game(options):
    options = {"game": "Breakout", **options}
    one = Game(seed=3, **options)  # plays every step itself and starts each episode at once
    owner, other = Game(seed=3, **options), Game(seed=99, **options)  # the game moves to `other` every third step
    one.reset(), owner.reset(), other.reset()
    out = np.zeros(owner.observation_shape, owner.options.observation_dtype)
    episodes = 0
    for t, action in enumerate(random_actions(one, 2500, seed=1)):
        obs, reward, done, info = one.step(action)
        player = owner
        if t % 3 == 0:
            other.set_state(owner.get_state())
            player = other
        assert player.play(action, out, start_next=False) == (reward, done, info)
        if player is other:
            owner.set_state(other.get_state())
        if done:
            episodes += 1
            # Deferred, the done step returns the episode's last observation; the next one starts on demand.
            assert np.array_equal(out, one.final_observation) and owner.next_episode_due
            with pytest.raises(RuntimeError, match="start_next_episode"):
                owner.play(action, out)
            assert np.array_equal(owner.start_next_episode(out), obs) and not owner.next_episode_due
        assert np.array_equal(out, obs) and owner.lives == one.lives
    assert episodes >= 3


def test_tic_tac_toe_3d_moved_to_another_game_and_back_plays_on_differently():
    # Why `GameState` names it among the games ALE's saved state does not restore exactly: moved out for play 29 and
    # back, the next play differs from the game left in place (ale-py 0.12.1). A release that mends it fails this
    # test: then the docstring's list loses it.
    options = {"game": "TicTacToe3D", "noop_max": 30}
    one, owner, other = Game(seed=7, **options), Game(seed=7, **options), Game(seed=99, **options)
    one.reset(), owner.reset(), other.reset()
    out, moved_out = np.zeros((2, *one.observation_shape), np.uint8)
    differ = []
    for t, action in enumerate(np.random.default_rng(1).integers(one.n_actions, size=40).tolist()):
        one.play(action, out, start_next=False)
        if t == 29:
            other.set_state(owner.get_state())
            other.play(action, moved_out, start_next=False)
            owner.set_state(other.get_state())
        else:
            owner.play(action, moved_out, start_next=False)
        differ.append(int((out != moved_out).sum()))
    assert not any(differ[:30]) and differ[30] > 0  # from the play after the move back


def test_a_reset_while_the_next_episode_is_due_restarts_as_if_it_had_started():
    # Seaquest's RAM survives a restart, and the NOOP start draws from the generator: both must see the deferred
    # restart before the reset's own.
    options = {"game": "Seaquest", "noop_max": 30}
    started, deferred = Game(seed=4, **options), Game(seed=4, **options)
    started.reset(), deferred.reset()
    for action in random_actions(started, 5000, seed=2):
        _, _, done, _ = started.step(action)
        deferred.play(action, start_next=False)
        if done:
            break
    assert deferred.next_episode_due
    assert np.array_equal(deferred.reset(), started.reset()) and not deferred.next_episode_due
    assert np.array_equal(deferred.ale.getRAM(), started.ale.getRAM())
    for action in random_actions(started, 300, seed=3):
        ours, theirs = deferred.step(action), started.step(action)
        assert np.array_equal(ours[0], theirs[0]) and ours[1:] == theirs[1:]
    # A seeded reset reloads the game: nothing of a deferred episode is left.
    while not deferred.play(0, start_next=False)[1]:
        pass
    assert np.array_equal(deferred.reset(seed=8), Game(seed=8, **options).reset())


@pytest.fixture
def reset_games(monkeypatch):
    """The number of ALE ``reset_game`` calls made since the test started (a one-element list)."""
    calls, reset_game = [0], ale_py.ALEInterface.reset_game

    def counted(ale):
        calls[0] += 1
        reset_game(ale)

    monkeypatch.setattr(ale_py.ALEInterface, "reset_game", counted)
    return calls


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("Breakout", {}),
        ("Breakout", {"noop_max": 30}),
        ("SpaceInvaders", {"noop_max": 30}),  # (its screen moves during NOOPs: the restart screen is for no NOOPs)
        ("SpaceInvaders", {"obs_type": "rgb"}),
        ("Pong", {"obs_type": "ram", "max_episode_frames": 1200}),
    ],
)
def test_a_game_that_restarts_to_one_state_restores_it_and_plays_as_if_it_had_emulated_the_restart(
    name, options, reset_games, monkeypatch
):
    # Without NOOPs the restart's first observation is the screen ALE's reset ended on, which its state does not hold;
    # so is what `screen_rgb` (a video's frame) shows until a frame is emulated.
    assert resolve_game(name) in FIXED_RESTART_GAMES
    restoring = Game(name, seed=6, **options)
    monkeypatch.setattr(game_module, "FIXED_RESTART_GAMES", frozenset())
    emulating = Game(name, seed=6, **options)
    assert np.array_equal(restoring.reset(), emulating.reset())
    restarts = 0
    for action in random_actions(restoring, 1500, seed=2):
        calls = reset_games[0]
        ours, theirs = restoring.step(action), emulating.step(action)
        assert np.array_equal(ours[0], theirs[0]) and ours[1:] == theirs[1:] and restoring.lives == emulating.lives
        assert np.array_equal(restoring.screen_rgb(), emulating.ale.getScreenRGB())
        restarts += theirs[2]
        assert reset_games[0] == calls + theirs[2]  # only the emulating game called ALE's reset
    assert restarts >= 3


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("Breakout", {"sticky_actions": 0.25}),
        ("Breakout", {"mode": 0}),
        ("Breakout", {"difficulty": 0}),
        ("Seaquest", {}),
    ],
)
def test_restarts_are_emulated_with_sticky_actions_in_a_mode_or_difficulty_chosen_and_in_other_games(
    name, options, reset_games
):
    game = Game(name, seed=1, **options)
    game.reset()
    restarts = sum(game.step(action)[2] for action in random_actions(game, 1000, seed=3))
    assert restarts >= 2 and reset_games[0] == 1 + restarts


def test_a_new_seed_restarts_by_emulating_once_more(reset_games):
    game = Game("Breakout", seed=1)
    game.reset(), game.reset(), game.reset(seed=2), game.reset()
    assert reset_games[0] == 2


def test_get_state_before_reset_is_refused():
    with pytest.raises(RuntimeError, match="reset"):
        Game().get_state()


def test_set_state_refuses_another_games_or_options_state_and_leaves_the_game_as_it_was():
    game, twin = Game("Breakout", seed=3), Game("Breakout", seed=3)
    game.reset(), twin.reset()
    pong, small = Game("Pong", seed=0), Game("Breakout", seed=0, size=(42, 42))
    pong.reset(), small.reset()
    with pytest.raises(ValueError, match=r"state is not a state of Breakout: it comes from another game"):
        game.set_state(pong.get_state())
    with pytest.raises(
        ValueError,
        match=r"other options or another game: its frame stack is uint8 \(4, 42, 42\), this Game's uint8 \(4, 84, 84\)",
    ):
        game.set_state(small.get_state())
    with pytest.raises(TypeError, match=r"state must be a GameState from Game.get_state\(\), got dict"):
        game.set_state({})
    # Refused, the game plays on as its twin, which was never asked.
    for action in [1, 2, 3, 0] * 10:
        played, expected = game.step(action), twin.step(action)
        assert np.array_equal(played[0], expected[0]) and played[1:3] == expected[1:3]


@pytest.fixture
def unchecked_release(monkeypatch):
    """ale-py reporting a release that `FIXED_RESTART_GAMES` was not checked on, its warning not given yet."""
    monkeypatch.setattr(ale_py, "__version__", "0.10.1")
    game_module._warn_unchecked_release.cache_clear()
    yield
    game_module._warn_unchecked_release.cache_clear()


def test_under_an_ale_py_release_not_checked_every_restart_is_emulated_and_one_warning_says_how_to_check(
    unchecked_release, reset_games, monkeypatch
):
    with pytest.warns(RuntimeWarning) as caught:
        unchecked = Game("Breakout", seed=6, noop_max=30)
        Game("Pong")  # a second Game of the list: no second warning
    assert [str(warning.message) for warning in caught] == [
        "ale-py 0.10.1 is not a release that atari_game's restored restarts (FIXED_RESTART_GAMES) were checked on "
        "(0.12.1), so every restart is emulated by ALE's reset_game: the same play, ~4 ms a restart instead of "
        "~20 µs. To check this release, run `python benchmarks/restart_states.py` in atari_game's repository, then "
        "add the release to FIXED_RESTART_CHECKED_ON in atari_game/game.py (and keep in FIXED_RESTART_GAMES only the "
        "games it prints)."
    ]
    assert caught[0].filename == __file__  # it points at the Game made here
    monkeypatch.setattr(game_module, "FIXED_RESTART_GAMES", frozenset())  # ALE's own reset at every restart
    emulating = Game("Breakout", seed=6, noop_max=30)
    assert np.array_equal(unchecked.reset(), emulating.reset())
    restarts = 0
    for action in random_actions(unchecked, 1000, seed=2):
        calls = reset_games[0]
        ours, theirs = unchecked.step(action), emulating.step(action)
        assert np.array_equal(ours[0], theirs[0]) and ours[1:] == theirs[1:]
        restarts += ours[2]
        assert reset_games[0] == calls + 2 * ours[2]  # both Games called ALE's reset at each restart: none restored
    assert restarts >= 3


def test_a_frame_skip_of_1_shows_each_frame_as_it_is_without_max_pooling():
    # With one frame a step there is no second screen to max-pool with. The expected frame is ALE's grayscale screen,
    # area-resized as Gymnasium's AtariPreprocessing resizes it.
    game = Game("Breakout", frame_skip=1, noop_max=0)
    game.reset()
    for action in [1] * 5 + [2] * 40:  # FIRE, then RIGHT: the paddle moves away from where it was
        obs = game.step(action)[0]
        expected = cv2.resize(game.ale.getScreenGrayscale(), (84, 84), interpolation=cv2.INTER_AREA)
        assert np.array_equal(obs[-1], expected)


def test_each_newest_frame_is_the_max_of_its_steps_last_two_screens_or_the_screen_an_episode_ended_on_mid_step():
    # The expected frames come from a frame_skip=1 twin that plays the same frames, its raw screens read from ALE and
    # processed here: the max of a step's last two screens, or where the episode ended before the step's last frame,
    # that final screen alone (never a screen left from an earlier step). No fire_reset: its FIRE lasts frame_skip.
    options = {"game": "Breakout", "life_loss": "terminal", "noop_max": 30}
    game, twin = Game(seed=3, **options), Game(seed=3, **options, frame_skip=1)
    obs = game.reset()
    twin.reset()

    def processed(screen):
        return cv2.resize(screen, (84, 84), interpolation=cv2.INTER_AREA)

    stack = [processed(twin.ale.getScreenGrayscale())] * 4
    assert np.array_equal(obs, stack)
    mid_step_ends = 0
    for action in random_actions(game, 400, seed=4):
        obs, _, done, _ = game.step(action)
        screens, twin_done = [], False
        while len(screens) < 4 and not twin_done:
            twin_done = twin.step(action, start_next=False)[2]  # (a game over restarts later: its screen first)
            screens.append(twin.ale.getScreenGrayscale())
        assert twin_done == done
        stack = [*stack[1:], processed(np.maximum(*screens[2:]) if len(screens) == 4 else screens[-1])]
        if done:
            assert np.array_equal(game.final_observation, stack)
            mid_step_ends += len(screens) < 4
            # The next episode starts from the screen this one ended on (after a game over, from the restart's).
            twin.start_next_episode()
            stack = [processed(twin.ale.getScreenGrayscale())] * 4
        assert np.array_equal(obs, stack)
    assert mid_step_ends >= 5
