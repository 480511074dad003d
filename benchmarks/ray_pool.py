"""The Ray backend's cost: RayGamePool against the local GamePool, side by side in one run.

pip install -e ".[ray]" && python benchmarks/ray_pool.py --envs 8 16 32 --rounds 4 --seconds 5

Both run the throughput benchmark's games (atari_game/benchmark.py) with one worker per core: GamePool's
worker processes, and RayGamePool's actors on a new local Ray instance. The table's last column is the
local pool's speed over each system's.
"""

import sys

from atari_game.benchmark import main

if __name__ == "__main__":
    systems = ["--systems", "atari_game GamePool", "atari_game RayGamePool"]
    main([*systems, "--json", "benchmarks/ray_pool.json", *sys.argv[1:]])
