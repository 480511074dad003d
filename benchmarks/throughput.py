"""The throughput benchmark: atari_game/benchmark.py (also `atari-game bench`).

pip install -e ".[bench]" && python benchmarks/throughput.py --envs 4 8 16 32 --rounds 4 --seconds 5
"""

from atari_game.benchmark import main

if __name__ == "__main__":
    main()
