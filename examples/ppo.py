"""PPO on Atari with atari_game: the trainer lives in atari_game/ppo.py (so `atari-game train` runs it too).

python examples/ppo.py --game Breakout --total-frames 1000000
python examples/ppo.py --help
"""

from atari_game.algorithms import main

if __name__ == "__main__":
    main("ppo")
