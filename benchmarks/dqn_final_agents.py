"""How good DQN runs' final Q-networks (ours or CleanRL's) are on the same fresh games in both envs (docs/results.md:
``python benchmarks/dqn_final_agents.py``). It prints the means and their difference, and writes them as common.py says.
"""

import argparse
import functools
import json
import subprocess
import tempfile
from pathlib import Path

import common
import numpy as np
import torch

from atari_game.arguments import count
from atari_game.checkpoints import torch_file
from atari_game.dqn import ALGORITHM, Config, QNetwork, build_q_network, choose_actions
from atari_game.evaluation import evaluate
from atari_game.run_config import game_options

CPU = torch.device("cpu")
SEED, EPSILON = 10_000, 0.01  # game g's seed is SEED + g (no training's); the agents' epsilon, as in evaluation

# Played by CleanRL's python after common.CLEANRL_START: its make_env and QNetwork (from dqn_atari.py, imported
# without running it) play `games` whole games one after the other; the returns printed as JSON.
CLEANRL_GAMES = """
import json, types
import gymnasium as gym, numpy as np, torch
script, weights, games, epsilon, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
sys.argv = [script]  # its module level parses nothing, but keep tyro away from our arguments
dqn_atari = types.SimpleNamespace(**runpy.run_path(script, run_name="dqn_atari"))  # all but its __main__ part
torch.set_num_threads(1)
tensors = torch.load(weights)
# CleanRL's own QNetwork (it asks its env for the number of actions), with the tensors in its layers' order.
network = dqn_atari.QNetwork(types.SimpleNamespace(single_action_space=gym.spaces.Discrete(tensors[-1].shape[0])))
network.load_state_dict(dict(zip(network.state_dict(), tensors, strict=True)))
rng, returns = np.random.default_rng(seed), []
for game in range(games):
    env = dqn_atari.make_env("BreakoutNoFrameskip-v4", seed + game, 0, False, "eval")()
    obs, _ = env.reset(seed=seed + game)
    while True:
        if rng.random() < epsilon:
            action = int(rng.integers(env.action_space.n))
        else:
            with torch.no_grad():
                action = int(network(torch.tensor(np.asarray(obs)[None], dtype=torch.float32)).argmax())  # it scales
        obs, _, terminated, truncated, info = env.step(action)
        if "episode" in info:  # RecordEpisodeStatistics sits inside the life-loss wrapper: a whole game ended
            returns.append(float(np.ravel(info["episode"]["r"])[0]))
            break
        if terminated or truncated:  # a life lost: the wrapper stack's reset plays on (NOOP, FIRE, RIGHT)
            obs, _ = env.reset()
print(json.dumps(returns))
"""


def load_network(path: Path) -> QNetwork:
    """Our checkpoint's Q-network, or a CleanRL model file's (its layers in order); a `ValueError` for neither."""
    saved = torch_file(path, "a checkpoint or a CleanRL model file")
    if isinstance(saved, dict) and "q_network" in saved:
        return ALGORITHM.load(saved, CPU)[0]
    network = build_q_network("Breakout", CPU)
    shapes = [tuple(getattr(tensor, "shape", ())) for tensor in saved.values()] if isinstance(saved, dict) else []
    if shapes != [tuple(tensor.shape) for tensor in network.state_dict().values()]:
        raise ValueError(f"{path} is not a DQN checkpoint or a Breakout Nature-CNN Q-network (layer shapes {shapes})")
    network.load_state_dict(dict(zip(network.state_dict(), saved.values(), strict=True)))
    return network


def play_atari_game(network: QNetwork, games: int, epsilon: float, seed: int) -> list[float]:
    """The returns of `games` whole games in atari_game's env (the DQN trainer's), env i seeded seed + i."""
    options, rng = game_options(Config()), np.random.default_rng(seed)
    game, protocol = options.pop("game"), options.pop("protocol")  # the trainer's default: no protocol
    policy = functools.partial(choose_actions, network, epsilons=np.full(games, epsilon), rng=rng, device=CPU)
    return evaluate(policy, game, protocol, games, seed, games, **options).returns.tolist()


def play_cleanrl(network: QNetwork, games: int, epsilon: float, seed: int, python: str, script: str) -> list[float]:
    """The returns of `games` whole games in CleanRL's env (its make_env's), by its python, game g seeded seed + g."""
    with tempfile.TemporaryDirectory() as folder:
        weights = Path(folder) / "weights.pt"
        torch.save([tensor.contiguous() for tensor in network.state_dict().values()], weights)
        code = common.CLEANRL_START + CLEANRL_GAMES
        command = [python, "-c", code, script, str(weights), str(games), str(epsilon), str(seed)]
        child = subprocess.run(command, capture_output=True, text=True)
    if child.returncode:
        raise SystemExit(f"CleanRL's env failed ({child.returncode}): {child.stderr[-2000:]}")
    return json.loads(child.stdout.splitlines()[-1])


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    add = parser.add_argument
    add("--ours", type=Path, nargs="*", default=[], help="our runs' checkpoint.pt files (default: none)")
    add("--cleanrl", type=Path, nargs="*", default=[], help="CleanRL's .cleanrl_model files (default: none)")
    add("--games", type=count, default=50, help="whole games per network and env (default: %(default)s)")
    common.add_cleanrl_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.ours and not args.cleanrl:
        parser.error("give --ours checkpoints, --cleanrl model files, or both")
    cleanrl = common.cleanrl_paths(parser, args, "dqn")
    torch.set_num_threads(1)  # the pool's workers take the other cores
    # Every network loaded before any is played: a wrong file is a usage error at once, not an hour in.
    networks = {}
    for path in [*args.ours, *args.cleanrl]:
        try:
            networks[path] = load_network(path)
        except ValueError as error:  # (load_network says an unreadable file is one too)
            parser.error(str(error))
    # Each run's mean, by env and trainer.
    means = {env: {"atari_game": [], "CleanRL": []} for env in ("atari_game", "CleanRL")}
    figures: dict = {"runs": [], "differences": {}}
    for trainer, paths in (("atari_game", args.ours), ("CleanRL", args.cleanrl)):
        for path in paths:
            played = (networks[path], args.games, EPSILON, SEED)  # the network, and how it plays
            for env in means:
                returns = play_atari_game(*played) if env == "atari_game" else play_cleanrl(*played, *cleanrl)
                mean, error = float(np.mean(returns)), float(np.std(returns, ddof=1) / np.sqrt(len(returns)))
                means[env][trainer].append(mean)
                figures["runs"].append({"trainer": trainer, "run": str(path), "env": env, "mean": mean, "error": error})
                print(f"{trainer} run {path}, in {env}'s env: {mean:5.1f} (standard error {error:.1f}) over "
                      f"{args.games} games", flush=True)  # fmt: skip

    for env, sides in means.items():
        for trainer, runs in sides.items():
            if runs:
                each = " / ".join(f"{m:.1f}" for m in runs)
                print(f"in {env}'s env, {trainer}, mean of {len(runs)}: {np.mean(runs):.1f} ({each})")
        if len(sides["atari_game"]) > 1 and len(sides["CleanRL"]) > 1:
            line, figures["differences"][env] = common.difference(*sides.values(), names=tuple(sides))
            print(f"in {env}'s env, {line}")
    common.save(__file__, args, figures, argv)


if __name__ == "__main__":
    main()
