"""Gymnasium's own Atari preprocessing, the reference `Game` must match bit for bit, and the comparison."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ale_py
import gymnasium as gym
import numpy as np

gym.register_envs(ale_py)


def reference_env(
    game: str,
    *,
    noop_max: int = 0,
    frame_skip: int = 4,
    sticky_actions: float = 0.0,
    grayscale_obs: bool = True,
    scale_obs: bool = False,
    **ale_options: Any,
) -> gym.Env:
    """``FrameStackObservation(AtariPreprocessing(ALE/<game>-v5))`` configured as `Game(life_loss="reset")`;
    `ale_options` (``mode``, ``difficulty``, ``continuous``, ...) go to ``gym.make``."""
    env = gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=sticky_actions, **ale_options)
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=frame_skip,
        terminal_on_life_loss=True,
        screen_size=84,
        grayscale_obs=grayscale_obs,
        scale_obs=scale_obs,
    )
    return gym.wrappers.FrameStackObservation(env, 4)


def ram_reference_env(game: str) -> gym.Env:
    """``FrameStackObservation(ALE/<game>-v5 with obs_type="ram")``, 4 frames a step: the RAM after each step's
    last frame, as `Game(obs_type="ram", life_loss="ignore")` (AtariPreprocessing takes only screens)."""
    env = gym.make(f"ALE/{game}-v5", obs_type="ram", frameskip=4, repeat_action_probability=0.0)
    return gym.wrappers.FrameStackObservation(env, 4)


def rgb_layout(reference_obs: np.ndarray, channels_last: bool = False) -> np.ndarray:
    """The reference's stacked colour frames ``(4, h, w, 3)`` in `Game`'s rgb layout: ``(12, h, w)``, each
    frame's R, G, B consecutive, oldest frame first; ``(h, w, 12)`` channels-last."""
    stack, height, width, _ = reference_obs.shape
    if channels_last:
        return reference_obs.transpose(1, 2, 0, 3).reshape(height, width, stack * 3)
    return reference_obs.transpose(0, 3, 1, 2).reshape(stack * 3, height, width)


def assert_same_as_reference(
    ours: Any,
    reference: gym.Env,
    actions: Any,
    seed: int,
    layout: Callable[[np.ndarray], np.ndarray] = np.asarray,
) -> None:
    """Play `actions` on the `Game` `ours` and on `reference` from `seed`: observations (in `layout`), rewards and
    done flags must be identical at every step, across at least two episode ends."""
    reference_obs, _ = reference.reset(seed=seed)
    obs = ours.reset()
    assert obs.dtype == reference_obs.dtype and np.array_equal(obs, layout(reference_obs))
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
        assert np.array_equal(obs, layout(reference_obs)), f"observation differs at step {t}"
    # The comparison must have crossed episode boundaries to mean anything.
    assert episodes >= 2
