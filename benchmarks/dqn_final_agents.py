"""How good the final agents of DQN runs are: each run's last Q-network plays the same fresh games, in both envs.

    python benchmarks/dqn_final_agents.py --ours runs/ours-1/checkpoint.pt runs/ours-2/checkpoint.pt \\
        --cleanrl runs/cleanrl-1/runs/<run name>/dqn_atari.cleanrl_model --games 50

A run's last 20 training games (dqn_learning.py's measure, the issue's) are few, played while epsilon-greedy and
while the policy still changes: one seed's figure moves by several points. Here every run's final network
(our checkpoint.pt, or the file CleanRL's dqn_atari.py writes with --save-model: the same Nature-CNN layers in
the same order) plays `--games` whole games with epsilon `--epsilon` (0.01: the end of training's), unclipped
returns across lives. Every network plays the same games (the same seeds), in two environments:

- atari_game's `Game` with the DQN trainer's settings (a life loss ends an episode, 1-30 NOOPs, FIRE at each
  life's start), in a `GamePool` of `--games` envs, one game each;
- CleanRL's own wrapper stack (its make_env: NOOP reset, max-and-skip, episodic life, FIRE reset, resize and
  grayscale, frame stack), one env after the other, run by `--cleanrl-python` (CleanRL's venv; see dqn_speed.py).

A network scored alike in both says the two environments pose the same game to an agent, so a gap between the
trainers' results is in the learning, not in the environment. The script prints each network's mean with its
standard error, each side's mean over its runs, and the difference of the sides (Welch's standard error, over
runs: the seed-to-seed spread is what a difference of two trainers has to beat).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch
from dqn_learning import difference
from dqn_speed import add_cleanrl_arguments
from gymnasium.vector import AutoresetMode

from atari_game import GamePool
from atari_game.cli import count, seed
from atari_game.dqn import Config, QNetwork, build_q_network, choose_actions, load_q_network
from atari_game.training import game_options

# Played by CleanRL's python, set up as dqn_speed.py launches CleanRL: its make_env (from dqn_atari.py, imported
# without running it), its QNetwork loaded from a list of tensors, `games` whole games one after the other; the
# returns printed as JSON.
CLEANRL_GAMES = """
import importlib.util, json, os, sys, types
import ale_py  # registers the Atari ids
import gymnasium as gym, numpy as np, torch
script, weights, games, epsilon, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
sys.path.insert(0, os.path.dirname(os.path.dirname(script)))  # cleanrl_utils, beside its cleanrl folder
spec = importlib.util.spec_from_file_location("dqn_atari", script)
dqn_atari = importlib.util.module_from_spec(spec)
sys.argv = [script]  # its module level parses nothing, but keep tyro away from our arguments
spec.loader.exec_module(dqn_atari)
torch.set_num_threads(1)
tensors = torch.load(weights)
# CleanRL's own QNetwork (it asks its env for the number of actions), with the tensors in its layers' order.
network = dqn_atari.QNetwork(types.SimpleNamespace(single_action_space=gym.spaces.Discrete(tensors[-1].shape[0])))
for parameter, tensor in zip(network.parameters(), tensors, strict=True):
    parameter.data.copy_(tensor)
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
    """Our checkpoint's Q-network, or a CleanRL model file's (its ``network.0`` ... ``network.9`` state dict, loaded
    into our layers in order: the shapes must match one by one)."""
    saved = torch.load(path, map_location="cpu")
    if "q_network" in saved:
        return load_q_network(path, torch.device("cpu"))[0]
    network = build_q_network("Breakout", torch.device("cpu"))
    names = list(network.state_dict())
    shapes = [tuple(tensor.shape) for tensor in saved.values()]
    if shapes != [tuple(tensor.shape) for tensor in network.state_dict().values()]:
        raise SystemExit(f"{path}: not a Breakout Nature-CNN Q-network (layer shapes {shapes})")
    network.load_state_dict(dict(zip(names, saved.values(), strict=True)))
    return network


def play_atari_game(network: QNetwork, games: int, epsilon: float, seed: int) -> list[float]:
    """`games` whole games in atari_game's env, one per env of a pool (env i seeded seed + i); their returns."""
    options = game_options(Config())
    returns = np.full(games, np.nan)
    rng = np.random.default_rng(seed)
    with GamePool(games, seed=seed, autoreset_mode=AutoresetMode.SAME_STEP, **options) as pool:
        obs, _ = pool.reset()
        while np.isnan(returns).any():
            actions = choose_actions(network, obs, np.full(games, epsilon), rng, torch.device("cpu"))
            obs, _, _, _, info = pool.step(actions)
            if "_game" in info:  # keep each env's first game only
                first = info["_game"] & np.isnan(returns)
                returns[first] = info["game"]["r"][first]
    return returns.tolist()


def play_cleanrl(network: QNetwork, games: int, epsilon: float, seed: int, python: str, script: str) -> list[float]:
    """`games` whole games in CleanRL's env, by CleanRL's python (game g seeded seed + g); their returns."""
    with tempfile.TemporaryDirectory() as folder:
        weights = Path(folder) / "weights.pt"
        torch.save([tensor.contiguous() for tensor in network.state_dict().values()], weights)
        command = [python, "-c", CLEANRL_GAMES, script, str(weights), str(games), str(epsilon), str(seed)]
        child = subprocess.run(command, capture_output=True, text=True)
    if child.returncode:
        raise SystemExit(f"CleanRL's env failed ({child.returncode}): {child.stderr[-2000:]}")
    return json.loads(child.stdout.splitlines()[-1])


def describe(returns: list[float]) -> str:
    return f"{np.mean(returns):5.1f} (standard error {np.std(returns, ddof=1) / np.sqrt(len(returns)):.1f})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ours", type=Path, nargs="*", default=[], help="our runs' checkpoint.pt files (default: none)"
    )
    parser.add_argument(
        "--cleanrl", type=Path, nargs="*", default=[], help="CleanRL's .cleanrl_model files (default: none)"
    )
    parser.add_argument(
        "--games", type=count, default=50, help="whole games per network and env (default: %(default)s)"
    )
    parser.add_argument(
        "--epsilon", type=float, default=0.01, help="the probability of a random action (default: %(default)s)"
    )
    parser.add_argument(
        "--seed",
        type=seed,
        default=10_000,
        help="game g's seed is seed + g; not a training seed (default: %(default)s)",
    )
    add_cleanrl_arguments(parser, ", whose make_env and QNetwork are used")
    parser.add_argument("--skip-cleanrl-env", action="store_true", help="play in atari_game's env only (default: off)")
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if not args.ours and not args.cleanrl:
        parser.error("give --ours checkpoints, --cleanrl model files, or both")
    torch.set_num_threads(1)  # the pool's workers take the other cores

    envs = ["atari_game"] + ([] if args.skip_cleanrl_env else ["CleanRL"])
    means: dict[tuple[str, str], list[float]] = {}  # (trainer, env) -> each run's mean
    for trainer, paths in (("atari_game", args.ours), ("CleanRL", args.cleanrl)):
        for path in paths:
            network = load_network(path)
            for env in envs:
                if env == "atari_game":
                    returns = play_atari_game(network, args.games, args.epsilon, args.seed)
                else:
                    returns = play_cleanrl(
                        network, args.games, args.epsilon, args.seed, args.cleanrl_python, args.cleanrl_script
                    )
                means.setdefault((trainer, env), []).append(float(np.mean(returns)))
                print(f"{trainer} run {path}, in {env}'s env: {describe(returns)} over {args.games} games", flush=True)

    for env in envs:
        sides = {trainer: means.get((trainer, env), []) for trainer in ("atari_game", "CleanRL")}
        for trainer, runs in sides.items():
            if runs:
                each = " / ".join(f"{m:.1f}" for m in runs)
                print(f"in {env}'s env, {trainer}, mean of {len(runs)}: {np.mean(runs):.1f} ({each})")
        if len(sides["atari_game"]) > 1 and len(sides["CleanRL"]) > 1:
            print(f"in {env}'s env, {difference(sides['atari_game'], sides['CleanRL'])}")


if __name__ == "__main__":
    main()
