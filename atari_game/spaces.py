"""The Gymnasium spaces of a game's observations and actions, read from its `GameOptions`.

`AtariGameEnv`, `GamePool` (and so `RayGamePool`, `make_vec` and the SB3 adapter) all take their spaces from here,
so that a space always matches what `Game.step` returns.
"""

from __future__ import annotations

import gymnasium
import numpy as np

from atari_game.game import CONTINUOUS_ACTION_HIGH, CONTINUOUS_ACTION_LOW, GameOptions


def observation_space(options: GameOptions) -> gymnasium.spaces.Box:
    """``Box(0, 255, shape, uint8)``, or ``Box(0, 1, shape, float32)`` with ``scale_obs``; the shape is
    `GameOptions.observation_shape` (``(4, 84, 84)`` by default)."""
    return gymnasium.spaces.Box(0, options.observation_high, options.observation_shape, options.observation_dtype)


def action_space(options: GameOptions) -> gymnasium.spaces.Space:
    """``Discrete(n_actions)``, or with ``continuous`` ale-py's ``Box([0, -pi, 0], [1, pi, 1], (3,), float32)``
    of ``(radius, angle, fire)``."""
    if options.continuous:
        return gymnasium.spaces.Box(CONTINUOUS_ACTION_LOW, CONTINUOUS_ACTION_HIGH, dtype=np.float32)
    return gymnasium.spaces.Discrete(len(options.action_meanings))
