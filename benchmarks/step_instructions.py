"""Instructions per agent step of one game, counted by valgrind's callgrind: ours against ale-py's C++ vector env
and a bare ALE loop. Counts do not drift with the machine's load as timings do, so they show what a change to the
per-step code costs.

    python benchmarks/step_instructions.py --steps 400        # needs valgrind (apt install valgrind)

Each system (`play`) plays Breakout with the throughput benchmark's settings and the same random actions, in a
process of its own under callgrind, for S and then 2S agent steps: (count(2S) - count(S)) / S is one agent step
without the start-up. It prints each system's count and writes them as common.py says.
"""

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import common
import numpy as np

from atari_game import arguments
from atari_game.benchmark import GAME, OUR_GAME, ale_vector_env, bare_steps

SYSTEMS = ("game", "ale-vector", "bare-ale")


def play(system: str, steps: int) -> None:
    """Play `steps` agent steps of Breakout with `system` (run in the process callgrind counts): ``game``,
    atari_game's `Game.play` into an observation row, as a pool worker runs it; ``ale-vector``, ale-py's
    `AtariVectorEnv` with one env and one thread; ``bare-ale``, the least any Python pool must do
    (`bare_steps`: ALE's own work for the same steps, the emulation limit's loop)."""
    actions = np.random.default_rng(0).integers(4, size=steps)
    if system == "game":
        from atari_game import Game

        game = Game(seed=0, **OUR_GAME)
        game.reset()
        row = np.zeros(game.observation_shape, np.uint8)
        for action in actions:
            game.play(int(action), row)
    elif system == "ale-vector":
        env = ale_vector_env(1, threads=1)
        env.reset(seed=0)
        for action in actions:
            env.step(np.array([action]))
        env.close()
    elif system == "bare-ale":
        bare_steps(GAME, actions)
    else:
        raise ValueError(f"system must be one of {', '.join(SYSTEMS)}, got {system!r}")


def count(system: str, steps: int, directory: Path) -> int:
    """Instructions callgrind counts in a process that plays `steps` agent steps with `system`."""
    log = directory / f"{system}-{steps}.log"
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={directory / 'callgrind.out'}"]
    command += [f"--log-file={log}", sys.executable, __file__, "--play", system, "--steps", str(steps)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return int(re.search(r"Collected : (\d+)", log.read_text()).group(1))


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    add = parser.add_argument
    add("--steps", type=arguments.count, default=400, help="S: each runs S and 2S agent steps (default: %(default)s)")
    add("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS), help="the systems to count (default: all)")
    add("--play", choices=SYSTEMS, help=argparse.SUPPRESS)  # the counted process
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.play:
        return play(args.play, args.steps)
    print(f"Instructions per agent step, Breakout (callgrind, {args.steps} and {2 * args.steps} steps)")
    figures = {}
    with tempfile.TemporaryDirectory() as directory:
        for system in args.systems:
            low, high = (count(system, steps, Path(directory)) for steps in (args.steps, 2 * args.steps))
            figures[system] = (high - low) / args.steps
            print(f"{system:12} {figures[system]:12,.0f}", flush=True)
    common.save(__file__, args, figures, argv)


if __name__ == "__main__":
    main()
