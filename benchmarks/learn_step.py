"""What a PPO minibatch step and a DQN gradient step (stand-in losses) cost under each option of the CPU path
(docs/performance.md: ``python benchmarks/learn_step.py``), and what one gradient step of each value-based agent
costs with its own loss, trunk and precision (``--agents``: the Training IQN guide's table), in median ms, printed and
written as common.py says.
"""

import argparse
from collections.abc import Callable

import common
import torch

from atari_game import dqn, iqn, ppo
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


def agent_step(config: dqn.Config, q_learning: dqn.QLearning) -> Callable[[], None]:
    """One gradient step of a value-based agent as its trainer takes it (its loss, Adam as the trainer builds it),
    on a batch of random observations, 18 actions."""
    q_network, target = q_learning.build(config, CPU), q_learning.build(config, CPU)
    q_network.trunk.bf16 = target.trunk.bf16 = config.precision == "bf16"
    optimizer = torch.optim.Adam(q_network.parameters(), lr=config.learning_rate, eps=config.adam_epsilon, fused=True)
    size = config.batch_size
    obs, next_obs = (torch.randint(0, 256, (size, 4, 84, 84), dtype=torch.uint8) for _ in range(2))
    batch = dqn.Transitions(obs, torch.randint(0, 18, (size,)), torch.zeros(size), torch.full((size,), 0.97),
                            torch.zeros(size), next_obs)  # fmt: skip

    def step() -> None:
        losses = q_learning.loss(config, q_network, target, batch)[0]
        optimizer.zero_grad()
        losses.mean().backward()
        optimizer.step()

    return step


def agents(repeats: int, cores: int) -> dict[str, dict[str, float]]:
    """Each value-based agent's gradient step (DQN's default Rainbow-lite, IQN's Dopamine settings) on each trunk,
    fp32 and bf16, with all cores: median ms, and the hours of learning alone in a 10M-frame run (625,000 steps)."""
    torch.set_num_threads(cores)
    figures: dict[str, dict[str, float]] = {}
    print(f"\nOne gradient step of each agent, batch 32, ms (median of {repeats}), {common.describe_machine()}:")
    for name, config_class, q_learning in (("DQN", dqn.Config, dqn.DQN), ("IQN", iqn.Config, iqn.IQN)):
        for network in ("nature", "impala"):
            for precision in ("fp32", "bf16"):
                config = config_class(protocol="machado", network=network, precision=precision)
                option = f"{name}, {network}, {precision}"
                ms = 1000 * common.median_seconds(agent_step(config, q_learning), repeats, 5)
                hours = ms * 625_000 / 3.6e6
                figures[option] = {"ms": ms, "hours_per_10M_frames": hours}
                print(f"  {option:24} {ms:7.1f}   {hours:5.1f} h of learning per 10M frames")
    return figures


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    parser.add_argument("--repeats", type=count, default=30, help="timed steps per option (default: %(default)s)")
    parser.add_argument(
        "--agents",
        action="store_true",
        help="time each value-based agent's gradient step instead of the CPU options (default: off)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    cores = common.machine()["cores"]
    if args.agents:
        common.save(__file__, args, agents(args.repeats, cores), argv)
        return
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
