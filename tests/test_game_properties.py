"""Properties of `Game` that hold whatever its options and actions: Hypothesis draws both (four games, every option
that changes what a step returns), plays the actions, and checks each step against what the options promise and
against a twin Game of the same seed that does not clip rewards."""

import cv2
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from atari_game import Game
from atari_game.game import LIFE_LOSS_MODES, OBS_TYPES, GameOptions, action_meanings

GAMES = ("Breakout", "Pong", "Seaquest", "MsPacman")


@st.composite
def game_options(draw: st.DrawFn) -> dict:
    """Keyword options of a `Game`: any combination that changes its observations, rewards or episodes."""
    game = draw(st.sampled_from(GAMES))
    return {
        "game": game,
        "seed": draw(st.integers(0, 1 << 16)),
        "frame_skip": draw(st.integers(1, 5)),
        "stack": draw(st.integers(1, 4)),
        "size": draw(st.one_of(st.just(84), st.tuples(st.integers(1, 100), st.integers(1, 100)))),
        "channels_last": draw(st.booleans()),
        "obs_type": draw(st.sampled_from(OBS_TYPES)),
        "scale_obs": draw(st.booleans()),
        "life_loss": draw(st.sampled_from(LIFE_LOSS_MODES)),
        "noop_max": draw(st.integers(0, 30)),
        # Only games with FIRE accept fire_reset (MsPacman has none).
        "fire_reset": "FIRE" in action_meanings(game) and draw(st.booleans()),
        "clip_rewards": draw(st.booleans()),
        "random_starts": draw(st.integers(0, 3)),
        "full_action_space": draw(st.booleans()),
        # Truncations end episodes within 200 steps even in Pong, which has no lives to lose; a limit past 1,000
        # frames (200 steps of 5) plays as no limit, None.
        "max_episode_frames": draw(st.integers(20, 1000)),
    }


# Agent actions, taken modulo the game's count. A drawn length: Hypothesis's lists of up to 200 are mostly a few long,
# too short to end an episode.
ACTIONS = st.integers(50, 200).flatmap(lambda length: st.lists(st.integers(0, 17), min_size=length, max_size=length))


def frames(obs: np.ndarray, options: GameOptions) -> np.ndarray:
    """An observation as its frames, oldest first, in `GameOptions.stack_shape` (``(stack, h, w)``,
    ``(stack, h, w, 3)`` or ``(stack, 128)``): its documented layout undone."""
    colours = 3 if options.obs_type == "rgb" else 1
    if options.channels_last:  # (*frame, stack * colours)
        stacked = np.moveaxis(obs.reshape(*obs.shape[:-1], options.stack, colours), -2, 0)
    else:  # (stack * colours, *frame)
        stacked = np.moveaxis(obs.reshape(options.stack, colours, *obs.shape[1:]), 1, -1)
    return stacked.reshape(options.stack_shape)


def current_frame(game: Game) -> np.ndarray:
    """The frame the emulator shows now, processed as a one-frame step makes it (no pooling, area resize)."""
    options = game.options
    if options.obs_type == "ram":
        frame = game.ale.getRAM()
    else:
        screen = game.screen_rgb() if options.obs_type == "rgb" else game.ale.getScreenGrayscale()
        height, width = options.frame_size
        frame = cv2.resize(screen, (width, height), interpolation=cv2.INTER_AREA)
    return frame.astype(np.float32) / np.float32(255) if options.scale_obs else frame


def check_observation(obs: np.ndarray, options: GameOptions) -> np.ndarray:
    """`obs` has the options' shape and dtype; its frames."""
    assert obs.shape == options.observation_shape and obs.dtype == options.observation_dtype
    return frames(obs, options)


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(game_options(), ACTIONS)
def test_every_step_keeps_the_promises_of_the_options(options, actions):
    game, unclipped = Game(**options), Game(**{**options, "clip_rewards": False})
    opts = game.options
    first = game.reset()
    assert np.array_equal(first, unclipped.reset())
    stacked = check_observation(first, opts)
    assert (stacked == stacked[-1]).all()  # a new episode: every slot its first frame
    episode_steps, episode_reward, game_steps, game_reward = 0, 0.0, 0, 0.0
    for action in actions:
        action %= game.n_actions
        obs, reward, done, info = game.step(action)
        # Same seed, same actions: the same trajectory; clipping changes the reward only, to its sign.
        twin_obs, twin_reward, twin_done, twin_info = unclipped.step(action)
        assert np.array_equal(obs, twin_obs) and (done, info) == (twin_done, twin_info)
        assert reward == (np.sign(twin_reward) if opts.clip_rewards else twin_reward)
        if opts.clip_rewards:
            assert reward in (-1.0, 0.0, 1.0)
        episode_steps, episode_reward = episode_steps + 1, episode_reward + twin_reward
        game_steps, game_reward = game_steps + 1, game_reward + twin_reward

        now = check_observation(obs, opts)
        # The stack slides by one: the step's observation (on a done step, the ended episode's last one) holds the
        # previous frames one slot older.
        last = frames(game.final_observation, opts) if done else now
        assert np.array_equal(last[:-1], stacked[1:])
        if not done and (opts.frame_skip == 1 or opts.obs_type == "ram"):  # nothing max-pooled: the newest slot
            assert np.array_equal(now[-1], current_frame(game))  # is the screen (or RAM) the step ended on
        assert (info is None) == (not done)
        if done:
            assert (now == now[-1]).all()  # the next episode's first observation: every slot one frame
            assert (info["length"], info["reward"]) == (episode_steps, episode_reward)
            episode_steps, episode_reward = 0, 0.0
            # A whole game is reported when it ends, in the modes where an episode is not a game.
            if "game_length" in info:
                assert opts.life_loss != "reset"
                assert (info["game_length"], info["game_reward"]) == (game_steps, game_reward)
            if "game_length" in info or opts.life_loss == "reset":
                game_steps, game_reward = 0, 0.0
        stacked = now
