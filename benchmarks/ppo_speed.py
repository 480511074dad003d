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
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

STEPS_PER_UPDATE = 8 * 128


def ours(updates: int, extra: list[str]) -> float:
    """Agent steps/s of atari_game's trainer over `updates` updates (its own frames/s, 4 frames a step)."""
    with tempfile.TemporaryDirectory() as run_dir:
        command = [
            sys.executable,
            "-m",
            "atari_game",
            "train",
            "--total-frames",
            str(4 * STEPS_PER_UPDATE * updates),
            "--run-dir",
            run_dir,
            "--no-video",
            "--seed",
            "1",
            *extra,
        ]
        subprocess.run(command, check=True, capture_output=True)
        with (Path(run_dir) / "progress.csv").open() as file:
            rows = [row for row in csv.DictReader(file) if row["frames_per_second"]]
    return float(rows[-1]["frames_per_second"]) / 4


def cleanrl(python: str, script: str, updates: int) -> float:
    """Agent steps/s CleanRL reports (its "SPS") after `updates` updates."""
    with tempfile.TemporaryDirectory() as run_dir:
        command = [
            python,
            script,
            "--env-id",
            "BreakoutNoFrameskip-v4",
            "--seed",
            "1",
            "--total-timesteps",
            str(STEPS_PER_UPDATE * updates),
        ]
        result = subprocess.run(command, check=True, capture_output=True, text=True, cwd=run_dir)
    return float(re.findall(r"SPS: (\d+)", result.stdout)[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cleanrl-python", required=True, help="the python of CleanRL's own venv")
    parser.add_argument("--cleanrl-script", required=True, help="CleanRL's ppo_atari.py (with `import ale_py`)")
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    runs: dict[str, list[float]] = {"atari_game (async envs)": [], "atari_game (sync envs)": [], "CleanRL": []}
    for round_number in range(args.rounds):
        runs["atari_game (async envs)"].append(ours(args.updates, []))
        runs["CleanRL"].append(cleanrl(args.cleanrl_python, args.cleanrl_script, args.updates))
        runs["atari_game (sync envs)"].append(ours(args.updates, ["--no-async-envs"]))
        print(f"round {round_number + 1}: " + ", ".join(f"{name} {rates[-1]:.0f}" for name, rates in runs.items()))
    baseline = float(np.mean(runs["CleanRL"]))
    print(f"\nBreakout PPO, {args.updates} updates each, mean of {args.rounds} alternating rounds (agent steps/s):")
    for name, rates in runs.items():
        print(f"{name:26} {np.mean(rates):7.0f}   {np.mean(rates) / baseline:5.2f}x CleanRL")


if __name__ == "__main__":
    main()
