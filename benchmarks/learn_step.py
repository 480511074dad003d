"""What a PPO minibatch step and a DQN gradient step (stand-in losses) cost under each option of the CPU path
(docs/performance.md: ``python benchmarks/learn_step.py``), in median ms, printed and written as common.py says.
"""

import argparse
from collections.abc import Callable

import common
import torch

from atari_game import dqn, ppo
from atari_game.arguments import count

CPU = torch.device("cpu")


def ppo_step(fused: bool, compiled: bool, bf16: bool) -> Callable[[], None]:
    """A PPO minibatch step on 256 random observations as ppo.learn takes it: actor-critic, backward, clipping, Adam."""
    agent = ppo.build_agent("Breakout", CPU)
    agent.trunk.bf16 = bf16
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5, fused=fused)
    act = torch.compile(agent.act) if compiled else agent.act
    obs = torch.randint(0, 256, (256, 4, 84, 84), dtype=torch.uint8)
    actions = torch.randint(0, 4, (256,))

    def step() -> None:
        _, logprob, entropy, value = act(obs, actions)
        loss = -logprob.mean() - 0.01 * entropy.mean() + 0.5 * (value**2).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
        optimizer.step()

    return step


def dqn_step(fused: bool, compiled: bool, bf16: bool) -> Callable[[], None]:
    """One DQN gradient step on random observations, as dqn.gradient_step takes it."""
    q_network, target = dqn.build_q_network("Breakout", CPU), dqn.build_q_network("Breakout", CPU)
    q_network.trunk.bf16 = target.trunk.bf16 = bf16
    optimizer = torch.optim.Adam(q_network.parameters(), lr=1e-4, fused=fused)
    q, q_target = (torch.compile(q_network), torch.compile(target)) if compiled else (q_network, target)
    obs, next_obs = (torch.randint(0, 256, (32, 4, 84, 84), dtype=torch.uint8) for _ in range(2))
    actions = torch.randint(0, 4, (32, 1))

    def step() -> None:
        with torch.no_grad():
            target_value = q_target(next_obs).max(1).values
        loss = ((target_value - q(obs).gather(1, actions).squeeze(1)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    parser.add_argument("--repeats", type=count, default=30, help="timed steps per option (default: %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    cores = common.machine()["cores"]
    # (name, fused Adam, torch.compile, bf16, threads)
    options = [
        ("fp32, default Adam", False, False, False, cores),
        ("fp32, fused Adam", True, False, False, cores),
        ("fp32, torch.compile", False, True, False, cores),
        ("fp32, one thread", False, False, False, 1),
        ("bf16 autocast", False, False, True, cores),
        ("bf16 autocast, fused Adam", True, False, True, cores),
    ]
    figures: dict[str, dict[str, float]] = {}
    for name, build in (("PPO minibatch of 256", ppo_step), ("DQN gradient step, batch 32", dqn_step)):
        print(f"\n{name}, ms (median of {args.repeats}), {common.describe_machine()}:")
        figures[name] = {}
        for option, fused, compiled, bf16, threads in options:
            torch.set_num_threads(threads)
            # (5 untimed steps first: kernels built, compiled graphs traced)
            ms = figures[name][option] = 1000 * common.median_seconds(build(fused, compiled, bf16), args.repeats, 5)
            print(f"  {option:32} {ms:7.1f}   {next(iter(figures[name].values())) / ms:4.2f}x")
    common.save(__file__, args, figures, argv)


if __name__ == "__main__":
    main()
