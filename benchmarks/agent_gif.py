"""A short looping GIF of a checkpoint's agent playing one game, in the emulator's colours at the game's speed:
``python benchmarks/agent_gif.py CHECKPOINT OUT.gif`` (docs/results.md); its length written as common.py says.
"""

import argparse
from pathlib import Path

import common
import torch
from PIL import Image

from atari_game.algorithms import trained_policy
from atari_game.arguments import seed
from atari_game.game import Game


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    add = parser.add_argument
    add("checkpoint", type=Path, help="a checkpoint.pt of atari-game train (PPO or DQN)")
    add("gif", type=Path, help="the GIF to write")
    add("--seconds", type=float, default=30.0, help="game time to show (default: %(default)s)")
    add("--seed", type=seed, default=10_001, help="the game's seed (default: %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:  # a missing file, or one that is no checkpoint, is a usage error, as in atari-game play --checkpoint
        policy, options, _ = trained_policy(args.checkpoint)
    except ValueError as error:
        parser.error(str(error))
    game = Game(seed=args.seed, **options)
    torch.manual_seed(args.seed)  # PPO's policy samples its actions: the same GIF every time
    steps = int(args.seconds * 60 / game.options.frame_skip)  # the Atari draws 60 frames a second, a step frame_skip
    obs, frames = game.reset(), []
    for step in range(steps):
        if step % 2 == 0:
            frames.append(Image.fromarray(game.screen_rgb()))
        obs, _, _, info = game.step(policy(obs))
        if info is not None and "game_reward" in info:  # the whole game is over
            break
    duration_ms = round(1000 * 2 * game.options.frame_skip / 60)  # GIFs count in milliseconds
    frames[0].save(args.gif, save_all=True, append_images=frames[1:], duration=duration_ms, loop=0, optimize=True)
    seconds, size = len(frames) * duration_ms / 1000, args.gif.stat().st_size
    print(f"{args.gif}: {len(frames)} frames ({seconds:.0f} s), {size / 1e6:.2f} MB")
    common.save(__file__, args, {"frames": len(frames), "seconds": seconds, "bytes": size}, argv)


if __name__ == "__main__":
    main()
