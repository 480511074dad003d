"""DQN on Atari with atari_game: the trainer lives in atari_game/dqn.py (so `atari-game train --algorithm dqn` runs it).

python examples/dqn.py --game Breakout --total-frames 10000000
python examples/dqn.py --cleanrl                 # CleanRL's dqn_atari.py algorithm (default: Rainbow-lite)
python examples/dqn.py --help
"""

from atari_game.algorithms import main

if __name__ == "__main__":
    main("dqn")
