"""End-to-end agent steps/s of atari_game's PPO against CleanRL's ppo_atari.py, alternating, in one run.

    python benchmarks/ppo_speed.py --cleanrl-python ~/cleanrl/venv/bin/python \\
        --cleanrl-script ~/cleanrl/ppo_atari.py --updates 8 --rounds 2

CleanRL is not part of this repository. Its ppo_atari.py runs unmodified but for an added `import ale_py`
(to register the Atari ids) in a venv of its own: gymnasium==0.29.1, ale-py==0.9.0, numpy<2, tyro,
tensorboard and torch==2.13.0. Both trainers run the same hyperparameters (CleanRL's defaults: 8 envs x
128 steps, 4 epochs of 4 minibatches) on Breakout for `--updates` updates each, one after the other, for
`--rounds` rounds; each reports its own steps/s (timed from after its envs are built). Absolute numbers
belong to the machine they were measured on: compare the ratio.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from atari_game.cli import count
from atari_game.training import PRECISIONS

STEPS_PER_UPDATE = 8 * 128


@dataclasses.dataclass
class Run:
    """One training run: its end-to-end agent steps/s and its whole games as (emulator frames, return)."""

    steps_per_s: float
    games: list[tuple[int, float]]


def ours(updates: int, extra: list[str], seed: int = 1) -> Run:
    """atari_game's trainer for `updates` updates, as its progress.csv reports it (4 frames an agent step)."""
    with tempfile.TemporaryDirectory() as run_dir:
        command = [sys.executable, "-m", "atari_game", "train", "--total-frames", str(4 * STEPS_PER_UPDATE * updates)]
        command += ["--run-dir", run_dir, "--no-video", "--seed", str(seed), *extra]
        subprocess.run(command, check=True, capture_output=True)
        return read_run(Path(run_dir))


def read_run(run_dir: Path) -> Run:
    """A run of our trainer, from its progress.csv: its last frames/s (4 frames an agent step) and its games."""
    with (run_dir / "progress.csv").open() as file:
        rows = list(csv.DictReader(file))
    speed = [float(row["frames_per_second"]) / 4 for row in rows if row["frames_per_second"]][-1]
    return Run(speed, [(int(row["frames"]), float(row["game_return"])) for row in rows if row["game_return"]])


def cleanrl(python: str, script: str, updates: int, seed: int = 1) -> Run:
    """CleanRL's ppo_atari.py for `updates` updates: the "SPS" it prints last, and the games it prints."""
    with tempfile.TemporaryDirectory() as run_dir:
        command = [python, script, "--env-id", "BreakoutNoFrameskip-v4", "--seed", str(seed)]
        command += ["--total-timesteps", str(STEPS_PER_UPDATE * updates)]
        result = subprocess.run(command, check=True, capture_output=True, text=True, cwd=run_dir)
    # Its global_step counts agent steps of all envs; its episodic_return is a whole game's (it records
    # statistics outside its life-loss wrapper).
    games = re.findall(r"global_step=(\d+), episodic_return=\[?([-\d.]+)", result.stdout)
    return Run(float(re.findall(r"SPS: (\d+)", result.stdout)[-1]), [(4 * int(s), float(r)) for s, r in games])


def add_precision_argument(parser: argparse.ArgumentParser, about: str) -> None:
    """Give `parser` --precision: the trainer's precisions to run, fp32 and bf16 unless told (`about`: its help)."""
    parser.add_argument(
        "--precision", nargs="+", choices=PRECISIONS, default=["fp32", "bf16"], help=f"{about} (default: fp32 bf16)"
    )


def parser_with_cleanrl(doc: str) -> argparse.ArgumentParser:
    """A command line that takes where CleanRL is (both PPO benchmarks run it), described by `doc`'s first line."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--cleanrl-python", required=True, help="the python of CleanRL's own venv (required)")
    parser.add_argument(
        "--cleanrl-script", required=True, help="CleanRL's ppo_atari.py (with `import ale_py`) (required)"
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = parser_with_cleanrl(__doc__)
    parser.add_argument(
        "--updates",
        type=count,
        default=8,
        help=f"PPO updates per run, {STEPS_PER_UPDATE:,} agent steps each (default: %(default)s)",
    )
    parser.add_argument(
        "--rounds", type=count, default=2, help="rounds, each running every trainer in turn (default: %(default)s)"
    )
    add_precision_argument(parser, "our trainer's --precision, one run each per round")
    parser.add_argument(
        "--sync-envs", action="store_true", help="also run ours with --no-async-envs, in each precision (default: off)"
    )
    return parser


def main() -> None:
    args = build_parser().parse_args()

    # Our variants, by name: the flags each adds to the defaults.
    variants = {f"atari_game {precision}": ["--precision", precision] for precision in args.precision}
    if args.sync_envs:
        variants |= {f"{name}, sync envs": [*flags, "--no-async-envs"] for name, flags in variants.items()}
    runs: dict[str, list[float]] = {name: [] for name in variants} | {"CleanRL": []}
    for round_number in range(args.rounds):
        for name, flags in variants.items():
            runs[name].append(ours(args.updates, flags).steps_per_s)
        runs["CleanRL"].append(cleanrl(args.cleanrl_python, args.cleanrl_script, args.updates).steps_per_s)
        print(f"round {round_number + 1}: " + ", ".join(f"{name} {rates[-1]:.0f}" for name, rates in runs.items()))
    baseline = float(np.mean(runs["CleanRL"]))
    print(f"\nBreakout PPO, {args.updates} updates each, mean of {args.rounds} alternating rounds (agent steps/s):")
    for name, rates in runs.items():
        print(f"{name:28} {np.mean(rates):7.0f}   {np.mean(rates) / baseline:5.2f}x CleanRL")


if __name__ == "__main__":
    main()
