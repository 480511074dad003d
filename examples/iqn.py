"""IQN on Atari with atari_game: the trainer lives in atari_game/iqn.py (so `atari-game train --algorithm iqn` runs it).

python examples/iqn.py --game Breakout --protocol machado
python examples/iqn.py --network nature          # the Nature-DQN CNN (default: the IMPALA CNN)
python examples/iqn.py --help
"""

from atari_game.algorithms import main

if __name__ == "__main__":
    main("iqn")
