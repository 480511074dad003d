"""`Game` against Gymnasium's AtariPreprocessing + FrameStackObservation: bit-identical, step by step."""

import numpy as np
import pytest
from reference import reference_env

from atari_game import Game


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
    ],
)
def test_bit_identical_to_gymnasium_preprocessing(game, options):
    seed, steps = 3, 3000
    ours = Game(game, seed=seed, life_loss="reset", **options)
    reference = reference_env(game, **options)
    reference_obs, _ = reference.reset(seed=seed)
    assert np.array_equal(ours.reset(), reference_obs)

    actions = np.random.default_rng(seed).integers(ours.n_actions, size=steps)
    episodes = 0
    for t, action in enumerate(actions):
        obs, reward, done, _ = ours.step(action)
        reference_obs, reference_reward, terminated, truncated, _ = reference.step(action)
        if terminated or truncated:
            # Game starts the next episode inside step: compare with the reference's observation after reset.
            reference_obs, _ = reference.reset()
            episodes += 1
        assert done == (terminated or truncated), f"done differs at step {t}"
        assert reward == reference_reward, f"reward differs at step {t}"
        assert np.array_equal(obs, reference_obs), f"observation differs at step {t}"
    # The comparison must have crossed episode boundaries to mean anything.
    assert episodes >= 2
