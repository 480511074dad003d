"""End-to-end agent steps/s of atari_game's DQN against CleanRL's dqn_atari.py, alternating, in one run.

    python benchmarks/dqn_speed.py --cleanrl-python /work/peers/cleanrl-venv/bin/python \\
        --cleanrl-script /work/peers/cleanrl/cleanrl/dqn_atari.py --steps 40000 --learning-starts 10000 --rounds 2

CleanRL is not part of this repository. Its dqn_atari.py runs unmodified in a venv of its own (gymnasium==0.29.1,
ale-py==0.9.0, numpy<2, tyro, tensorboard, torch==2.13.0), with `cleanrl_utils` (beside its `cleanrl` folder) on
the path and `ale_py` imported first to register the Atari ids; this script launches it so. Both trainers run
CleanRL's defaults on Breakout but for the run's length, the replay size and when learning starts (the same for
both), one after the other, for `--rounds` rounds. Each reports its own end-to-end agent steps/s (CleanRL's
"SPS", ours from progress.csv: both timed from after the envs and the replay memory are built) and its rate
from learning starts on (CleanRL's from its SPS lines). A transition is one agent step of one env: CleanRL's
--total-timesteps N is our --total-frames 4N. Absolute numbers belong to the machine they were measured on:
compare the ratio.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from ppo_speed import add_precision_argument

from atari_game.cli import count, integer, seed

# How CleanRL's script is started: `ale_py` imported (the Atari ids), `cleanrl_utils` on the path, then the
# script as __main__, its arguments after it.
CLEANRL_LAUNCH = (
    "import runpy, sys, os, ale_py; sys.argv = sys.argv[1:]; "
    "sys.path.insert(0, os.path.dirname(os.path.dirname(sys.argv[0]))); "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


@dataclasses.dataclass
class Run:
    """One training run: agent steps/s end to end and from learning starts on, whole games as (emulator frames,
    return), the trainer process's peak resident memory in MB (None when not measured) and, for ours, the
    seconds spent choosing actions, waiting for the envs, storing transitions and learning."""

    steps_per_s: float
    learning_steps_per_s: float
    games: list[tuple[int, float]]
    peak_rss_mb: float | None = None
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)


def run_child(command: list[str], output: Path, cwd: str | Path | None = None) -> float:
    """Run `command` with its stdout (and stderr) in the file `output`; return its peak RSS in MB (os.wait4's)."""
    with output.open("w") as file:
        child = subprocess.Popen(command, stdout=file, stderr=subprocess.STDOUT, cwd=cwd)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise RuntimeError(f"{command[:6]} failed ({child.returncode}); its output: {output}")
    return usage.ru_maxrss / 1024  # kilobytes on Linux


def dqn_options(steps: int, learning_starts: int, buffer_size: int, exploration_fraction: float, seed: int) -> dict:
    """The settings both trainers get, in CleanRL's units (transitions)."""
    return {
        "seed": seed,
        "total-timesteps": steps,
        "buffer-size": buffer_size,
        "learning-starts": learning_starts,
        "exploration-fraction": exploration_fraction,
    }


def ours(options: dict, run_dir: Path, extra: list[str] = ()) -> Run:
    """atari_game's DQN trainer with CleanRL's algorithm (--cleanrl) and `options`, writing into `run_dir`; `extra`
    flags come last."""
    run_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "atari_game", "train", "--algo", "dqn", "--cleanrl", "--run-dir", str(run_dir)]
    for name, value in options.items():
        # CleanRL's --total-timesteps counts agent steps: 4 emulator frames each.
        command += ["--total-frames", str(4 * value)] if name == "total-timesteps" else [f"--{name}", str(value)]
    peak = run_child([*command, *extra], run_dir / "out.txt")
    run = read_progress(run_dir / "progress.csv", options["learning-starts"])
    return dataclasses.replace(run, peak_rss_mb=peak)


def read_progress(path: Path, learning_starts: int) -> Run:
    """Our run's speed and games, from its progress.csv (agent steps are frames / 4)."""
    with path.open() as file:
        rows = list(csv.DictReader(file))
    updates = [row for row in rows if row["epsilon"]]
    learning = [row for row in updates if int(row["frames"]) >= 4 * learning_starts]
    first, last = learning[0], learning[-1]
    learning_rate = (
        (int(last["frames"]) - int(first["frames"])) / 4 / (float(last["seconds"]) - float(first["seconds"]))
    )
    games = [(int(row["frames"]), float(row["game_return"])) for row in rows if row["game_return"]]
    seconds = {name: sum(float(row[f"{name}_seconds"]) for row in updates) for name in ("act", "env", "store", "learn")}
    return Run(float(last["frames_per_second"]) / 4, learning_rate, games, seconds=seconds)


def cleanrl(python: str, script: str, options: dict, work_dir: Path) -> Run:
    """CleanRL's dqn_atari.py with `options`, run in `work_dir` (its runs/ folder goes there)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    command = [python, "-u", "-c", CLEANRL_LAUNCH, script]  # -u: its output unbuffered, readable as it runs
    for name, value in options.items():
        command += [f"--{name}", str(value)]
    peak = run_child(command, work_dir / "out.txt", cwd=work_dir)
    run = read_cleanrl((work_dir / "out.txt").read_text(), options["learning-starts"])
    return dataclasses.replace(run, peak_rss_mb=peak)


def read_cleanrl(output: str, learning_starts: int) -> Run:
    """A CleanRL dqn_atari.py run from what it printed: its last "SPS" (end to end), the rate from learning starts
    on, and its games. It prints ``SPS: n`` (global_step / seconds since its start, truncated) at every
    global_step past learning_starts that is a multiple of 100, and ``global_step=N, episodic_return=[R]`` per
    whole game (it records statistics outside its life-loss wrapper)."""
    speeds = [int(s) for s in re.findall(r"^SPS: (\d+)", output, re.MULTILINE)]
    first_step = (learning_starts // 100 + 1) * 100  # the global_step of the first SPS line
    last_step = first_step + 100 * (len(speeds) - 1)
    learning_rate = (last_step - first_step) / (last_step / speeds[-1] - first_step / speeds[0])
    games = re.findall(r"global_step=(\d+), episodic_return=\[?([-\d.]+)", output)
    return Run(float(speeds[-1]), learning_rate, [(4 * int(step), float(r)) for step, r in games])


def cleanrl_peak_rss(time_output: str) -> float:
    """The peak RSS in MB from the output of ``/usr/bin/time -v`` ("Maximum resident set size (kbytes): N")."""
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_output).group(1)) / 1024


def add_cleanrl_arguments(parser: argparse.ArgumentParser, script_use: str = "") -> None:
    """Give `parser` --cleanrl-python and --cleanrl-script: where CleanRL's venv and dqn_atari.py are (`script_use`:
    what the benchmark takes from the script, for its help)."""
    parser.add_argument(
        "--cleanrl-python",
        default="/work/peers/cleanrl-venv/bin/python",
        help="the python of CleanRL's own venv (default: %(default)s)",
    )
    parser.add_argument(
        "--cleanrl-script",
        default="/work/peers/cleanrl/cleanrl/dqn_atari.py",
        help=f"CleanRL's dqn_atari.py{script_use} (default: %(default)s)",
    )


def parser_with_cleanrl(doc: str) -> argparse.ArgumentParser:
    """A command line that takes where CleanRL is (both DQN benchmarks run it), described by `doc`'s first line."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_cleanrl_arguments(parser)
    parser.add_argument("--seed", type=seed, default=1, help="both trainers' seed (default: %(default)s)")
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = parser_with_cleanrl(__doc__)
    parser.add_argument(
        "--steps",
        type=count,
        default=40_000,
        help="transitions (agent steps) per run: CleanRL's --total-timesteps, our --total-frames / 4, also the "
        "replay memory's size (default: %(default)s)",
    )
    parser.add_argument(
        "--learning-starts",
        type=count,
        default=10_000,
        help="transitions played before the first gradient step (default: %(default)s)",
    )
    parser.add_argument(
        "--rounds", type=count, default=2, help="rounds, each running every trainer in turn (default: %(default)s)"
    )
    parser.add_argument(
        "--torch-threads",
        type=integer,
        nargs="+",
        default=[0],
        help="our trainer's --torch-threads, one run each per round; 0: one per core (default: 0)",
    )
    add_precision_argument(parser, "our trainer's --precision, one run each per round and thread count")
    return parser


def main() -> None:
    args = build_parser().parse_args()

    options = dqn_options(args.steps, args.learning_starts, args.steps, 0.1, args.seed)
    variants = {
        (threads, precision): f"atari_game {precision}, torch threads {threads or 'all'}"
        for threads in args.torch_threads
        for precision in args.precision
    }
    runs: dict[str, list[Run]] = {name: [] for name in variants.values()} | {"CleanRL": []}
    with tempfile.TemporaryDirectory() as scratch:
        for round_number in range(args.rounds):
            for (threads, precision), name in variants.items():
                # A progress.csv row every tenth of the run, so that the learning phase's rate has rows to come from.
                extra = ["--no-video", "--torch-threads", str(threads), "--log-every", str(4 * args.steps // 10)]
                extra += ["--precision", precision]
                run_dir = Path(scratch) / f"ours-{threads}-{precision}-{round_number}"
                runs[name].append(ours(options, run_dir, extra))
            runs["CleanRL"].append(cleanrl(args.cleanrl_python, args.cleanrl_script, options, Path(scratch)))
            rates = [
                f"{name} {rs[-1].steps_per_s:.0f} ({rs[-1].learning_steps_per_s:.0f} learning)"
                for name, rs in runs.items()
            ]
            print(f"round {round_number + 1}: " + ", ".join(rates), flush=True)
    baseline = {
        key: np.mean([getattr(r, key) for r in runs["CleanRL"]]) for key in ("steps_per_s", "learning_steps_per_s")
    }
    print(
        f"\nBreakout DQN, {args.steps:,} agent steps each (learning from {args.learning_starts:,}), "
        f"mean of {args.rounds} alternating rounds, agent steps/s:"
    )
    for name, rs in runs.items():
        end_to_end, learning = np.mean([r.steps_per_s for r in rs]), np.mean([r.learning_steps_per_s for r in rs])
        print(
            f"{name:36} end to end {end_to_end:6.0f} ({end_to_end / baseline['steps_per_s']:4.2f}x CleanRL); "
            f"learning phase {learning:6.0f} ({learning / baseline['learning_steps_per_s']:4.2f}x)"
        )
    for name in variants.values():
        print(f"{name}: wall time " + where_the_time_went(runs[name]))


def where_the_time_went(runs: list[Run]) -> str:
    """Our runs' wall time split (summed over runs): choosing actions, waiting for the envs, storing, learning."""
    totals = {name: sum(run.seconds[name] for run in runs) for name in runs[0].seconds}
    whole = sum(totals.values())
    return ", ".join(f"{name} {100 * value / whole:.0f} %" for name, value in totals.items())


if __name__ == "__main__":
    main()
