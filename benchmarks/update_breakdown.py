"""Where a trainer's wall time goes, in ms per 1,000 agent steps by precision, from a timer around each call of its
work (docs/performance.md gives the commands: ``python benchmarks/update_breakdown.py``), written as common.py says.
"""

import argparse
import tempfile
import time
from collections import defaultdict
from itertools import product
from typing import Any

import common
import torch

from atari_game import dqn, ppo
from atari_game.algorithms import ALGORITHMS
from atari_game.arguments import count
from atari_game.networks import PRECISIONS
from atari_game.pool import GamePool
from atari_game.replay import FrameReplay


class Clock:
    """Wall seconds by (phase, what), from timers wrapped around methods and functions (`wrap`)."""

    def __init__(self) -> None:
        self.seconds: dict[tuple[str, str], float] = defaultdict(float)
        self.phase, self.on = "loop", True

    def wrap(self, owner: Any, name: str, what: str, phase: str = "", starts: bool = False) -> None:
        """Time ``owner.name`` as `what` in its caller's phase, or as `phase`'s total; `starts`: timers on."""
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            outer, start = self.phase, time.perf_counter()
            self.phase, self.on = phase or outer, self.on or starts
            try:
                return original(*args, **kwargs)
            finally:
                if self.on:
                    self.seconds[(self.phase, what)] += time.perf_counter() - start
                self.phase = outer

        setattr(owner, name, timed)

    def table(self) -> dict[str, float]:
        """Seconds by line: each timed call, and each phase's rest (its total less the calls timed inside it)."""
        timed = {key: seconds for key, seconds in self.seconds.items() if key[1] != "total"}
        lines = {f"{phase}: {what}": seconds for (phase, what), seconds in timed.items()}
        for (phase, what), seconds in self.seconds.items():
            if what == "total":
                lines[f"{phase}: the rest"] = seconds - sum(s for (p, _), s in timed.items() if p == phase)
        return lines


def instrument(clock: Clock, algo: str) -> None:
    """Timers around `algo`'s phases and the calls of its work."""
    for name in ("send", "recv"):
        clock.wrap(GamePool, name, "env steps (send, recv)")
    clock.wrap(torch.Tensor, "backward", "backward")
    if algo == "ppo":
        clock.wrap(ppo, "collect", "total", phase="rollout")
        clock.wrap(ppo, "learn", "total", phase="learn")
        for name in ("act", "value"):
            clock.wrap(ppo.Agent, name, "the network")  # inference in the rollout, the forward pass in learn
        clock.wrap(torch.nn.utils, "clip_grad_norm_", "optimizer (clipping, Adam)")
        clock.wrap(torch.optim.Adam, "step", "optimizer (clipping, Adam)")
        return
    clock.wrap(dqn, "choose_actions", "total", phase="act")
    # The timers start with the first gradient step: the table is the learning phase's.
    clock.wrap(dqn, "gradient_step", "total", phase="learn", starts=True)
    clock.wrap(FrameReplay, "add", "storing transitions")
    clock.wrap(FrameReplay, "sample", "sampling the memory")
    clock.wrap(dqn.QNetwork, "forward", "the networks")  # the Q-network acting; the Q and target networks learning
    clock.wrap(torch.optim.Adam, "step", "optimizer (Adam)")


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    add = parser.add_argument
    add("--algorithm", choices=ALGORITHMS, default="ppo", help="the trainer (default: %(default)s)")
    add("--updates", type=count, default=8, help="PPO: updates per run, 1,024 agent steps each (default: %(default)s)")
    add("--steps", type=count, default=12_000, help="DQN: transitions (agent steps) per run (default: %(default)s)")
    add("--learning-starts", type=count, default=2_000, help="DQN: the table's start (default: %(default)s)")
    add("--rounds", type=count, default=2, help="rounds of one run per precision (default: %(default)s)")
    add("--precision", nargs="+", choices=PRECISIONS, default=["fp32", "bf16"], help="columns (default: fp32 bf16)")
    add("--compression", choices=dqn.COMPRESSIONS, nargs="+", default=["zstd"], help="DQN: columns (default: zstd)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    clock = Clock()
    instrument(clock, args.algorithm)
    compressions = args.compression if args.algorithm == "dqn" else ["none"]
    # The runs of a round, each a (precision, compression) and the table's column for it.
    variants = {(p, c): p if len(compressions) == 1 else f"{p} {c}" for p, c in product(args.precision, compressions)}
    tables: dict[str, dict[str, float]] = {column: defaultdict(float) for column in variants.values()}
    # Each column's agent steps over the rounds (DQN's from learning's start on).
    steps = args.rounds * (1024 * args.updates if args.algorithm == "ppo" else args.steps - args.learning_starts)
    for _ in range(args.rounds):
        for (precision, compression), column in variants.items():
            clock.seconds.clear()
            clock.on = args.algorithm == "ppo"  # DQN's timers: off until the first gradient step
            with tempfile.TemporaryDirectory() as run_dir:
                settings = {"run_dir": run_dir, "video": False, "precision": precision}
                if args.algorithm == "ppo":
                    ppo.train(ppo.Config(total_frames=4 * 1024 * args.updates, **settings))
                else:
                    settings |= {"buffer_size": args.steps, "learning_starts": args.learning_starts, "cleanrl": True}
                    settings |= {"compression": compression, "save_memory": False}
                    dqn.train(dqn.Config(total_frames=4 * args.steps, **settings))
            for line, seconds in clock.table().items():
                tables[column][line] += seconds
    lines = sorted({line for table in tables.values() for line in table})  # the phases' lines together
    print(f"\n{args.algorithm.upper()}, Breakout, ms of wall time per 1,000 agent steps ({args.rounds} runs each):")
    print(f"{'':48}" + "".join(f"{column:>12}" for column in tables))
    figures: dict[str, dict[str, float]] = {column: {} for column in tables}
    for line in [*lines, "total"]:  # (the time outside the timed calls, logging and checkpoints, is not in it)
        for column in tables:
            seconds = sum(tables[column].values()) if line == "total" else tables[column].get(line, 0.0)
            figures[column][line] = 1000 * 1000 * seconds / steps
        print(f"{line:48}" + "".join(f"{figures[column][line]:12.1f}" for column in tables))
    common.save(__file__, args, figures, argv)


if __name__ == "__main__":
    main()
