"""`Game` against Gymnasium's AtariPreprocessing + FrameStackObservation: bit-identical, step by step."""

import functools

import numpy as np
import pytest
from reference import assert_same_as_reference, ram_reference_env, reference_env, rgb_layout

from atari_game import Game
from atari_game.game import CONTINUOUS_ACTION_HIGH, CONTINUOUS_ACTION_LOW

SEED, STEPS = 3, 3000


def random_actions(game):
    return np.random.default_rng(SEED).integers(game.n_actions, size=STEPS)


@pytest.mark.parametrize(
    ("game", "options"),
    [
        ("Breakout", {}),
        ("Pong", {}),
        ("MsPacman", {}),
        ("SpaceInvaders", {}),
        # The seeding mirrors ale-py's, so NOOP starts and sticky actions match the reference too.
        ("Breakout", {"noop_max": 30}),
        ("Seaquest", {"noop_max": 30, "sticky_actions": 0.25}),
        # Two frames a step, max-pooled as four are (game.py :635, ``frame_skip > 1`` made ``> 2``, pooled none).
        ("Breakout", {"frame_skip": 2}),
    ],
)
def test_bit_identical_to_gymnasium_preprocessing(game, options):
    ours = Game(game, seed=SEED, life_loss="reset", **options)
    assert_same_as_reference(ours, reference_env(game, **options), random_actions(ours), SEED)


@pytest.mark.slow
@pytest.mark.parametrize(("game", "channels_last"), [("Breakout", False), ("Pong", True), ("MsPacman", False)])
def test_rgb_is_gymnasium_colour_preprocessing(game, channels_last):
    ours = Game(game, seed=SEED, obs_type="rgb", channels_last=channels_last)
    reference = reference_env(game, grayscale_obs=False)
    layout = functools.partial(rgb_layout, channels_last=channels_last)
    assert_same_as_reference(ours, reference, random_actions(ours), SEED, layout)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("game", "obs_type"), [("Breakout", "grayscale"), ("SpaceInvaders", "rgb"), ("Seaquest", "grayscale")]
)
def test_scale_obs_is_gymnasium_scale_obs(game, obs_type):
    # Gymnasium's float32 uint8 / 255, bit for bit (and so the uint8 observations / 255).
    ours = Game(game, seed=SEED, obs_type=obs_type, scale_obs=True, noop_max=30)
    reference = reference_env(game, grayscale_obs=obs_type == "grayscale", scale_obs=True, noop_max=30)
    layout = rgb_layout if obs_type == "rgb" else np.asarray
    assert_same_as_reference(ours, reference, random_actions(ours), SEED, layout)


@pytest.mark.slow
@pytest.mark.parametrize(("game", "mode", "difficulty"), [("Breakout", 4, 1), ("SpaceInvaders", 3, 1), ("Pong", 1, 2)])
def test_mode_and_difficulty_are_gymnasium_ones(game, mode, difficulty):
    ours = Game(game, seed=SEED, mode=mode, difficulty=difficulty)
    reference = reference_env(game, mode=mode, difficulty=difficulty)
    assert_same_as_reference(ours, reference, random_actions(ours), SEED)
    # The flavour matters: the default game plays differently.
    default = Game(game, seed=SEED)
    default.reset(), ours.reset()
    steps = [(default.step(a)[0], ours.step(a)[0]) for a in random_actions(ours)[:300]]
    assert not all(np.array_equal(a, b) for a, b in steps)


@pytest.mark.slow
@pytest.mark.parametrize(("game", "threshold"), [("Breakout", 0.5), ("Pong", 0.3), ("SpaceInvaders", 0.5)])
def test_continuous_actions_are_gymnasium_continuous(game, threshold):
    ours = Game(game, seed=SEED, continuous=True, continuous_action_threshold=threshold)
    reference = reference_env(game, continuous=True, continuous_action_threshold=threshold)
    actions = np.random.default_rng(SEED).uniform(CONTINUOUS_ACTION_LOW, CONTINUOUS_ACTION_HIGH, size=(STEPS, 3))
    assert_same_as_reference(ours, reference, actions.astype(np.float32), SEED)


@pytest.mark.parametrize("game", ["Breakout", "Pong", "MsPacman"])
def test_ram_is_gymnasium_ram_observation(game):
    # ale-py's RAM env ends episodes at game over only (life_loss="ignore") and plays no frame after it.
    ours = Game(game, seed=SEED, obs_type="ram", life_loss="ignore")
    assert_same_as_reference(ours, ram_reference_env(game), random_actions(ours), SEED)
