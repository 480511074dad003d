"""Play one whole game with any policy, and record it as a colour video if asked."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

from atari_game.game import Game


def check_video_path(video: str | Path) -> None:
    """A `ValueError` unless `video` names an .mp4 file: the one container OpenCV's mp4v codec is sure to write."""
    if Path(video).suffix.lower() != ".mp4":
        raise ValueError(f"the video must be an .mp4 file, got {str(video)!r}")


def play_game(game: Game, policy: Callable[[np.ndarray], int], video: Path | None = None) -> tuple[float, int]:
    """Play `game` from a reset until the whole game is over; return its unclipped score and length in steps.

    `policy` maps an observation (``uint8``, the Game's observation shape) to an action. With `video` (an .mp4 path;
    its folder is made if missing), the emulator's full-colour screen (210x160, not the 84x84 input) is written at one
    frame per agent step. A whole game ends at game over or truncation (with ``life_loss="reset"``, every episode).
    """
    writer = None
    if video is not None:
        check_video_path(video)
        with contextlib.suppress(OSError):  # its folder made, as `atari-game evaluate --out`'s (if not: see below)
            Path(video).parent.mkdir(parents=True, exist_ok=True)
        # Real-time playback: the Atari draws 60 frames/s and an agent step lasts frame_skip of them.
        writer = cv2.VideoWriter(str(video), cv2.VideoWriter.fourcc(*"mp4v"), 60 / game.options.frame_skip, (160, 210))
        if not writer.isOpened():  # OpenCV would otherwise write nothing and say nothing
            raise OSError(f"cannot write the video {video}: its folder cannot be made or written to")
    obs = game.reset()
    try:
        while True:
            if writer is not None:
                writer.write(cv2.cvtColor(game.screen_rgb(), cv2.COLOR_RGB2BGR))
            obs, _, _, info = game.step(policy(obs))
            # info is the ended episode's on a done step (else None): the game's, if the whole game ended.
            if info is not None and ("game_reward" in info or game.options.life_loss == "reset"):
                return info.get("game_reward", info["reward"]), info.get("game_length", info["length"])
    finally:
        if writer is not None:
            writer.release()
