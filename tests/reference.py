"""Gymnasium's own Atari preprocessing, the reference `Game` must match bit for bit."""

from __future__ import annotations

import ale_py
import gymnasium as gym

gym.register_envs(ale_py)


def reference_env(game: str, *, noop_max: int = 0, sticky_actions: float = 0.0) -> gym.Env:
    """``FrameStackObservation(AtariPreprocessing(ALE/<game>-v5))`` configured as `Game(life_loss="reset")`."""
    env = gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=sticky_actions)
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=noop_max, frame_skip=4, terminal_on_life_loss=True, screen_size=84
    )
    return gym.wrappers.FrameStackObservation(env, 4)
