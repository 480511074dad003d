"""atari_game's trainers against CleanRL's scripts, or against themselves in other settings (``--sides``), on Breakout
with the same budget, seeds and hyperparameters (docs/performance.md and docs/results.md give the commands, e.g.
``python benchmarks/trainers.py --algorithm ppo``). Per seed every side trains once, in rotating turns; a run finished
in RUN_DIR/<side>-<seed> is read, not run again. It prints runs, means and ratios, and writes them as common.py says.

CleanRL is not part of this repository: its scripts run unmodified in a venv of their own (gymnasium==0.29.1,
ale-py==0.9.0, numpy<2, tyro, tensorboard, torch==2.13.0), started with ``ale_py`` imported and ``cleanrl_utils`` on
the path. Give ``--cleanrl-python`` and ``--cleanrl-script``, or set CLEANRL_PYTHON and CLEANRL_DIR (the checkout).
"""

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import common
import numpy as np

from atari_game.algorithms import ALGORITHMS
from atari_game.arguments import count, seed
from atari_game.benchmark import describe_ratios
from atari_game.validation import flag_of

FRAMES_PER_UPDATE = 4 * 8 * 128  # PPO: CleanRL's 8 envs x 128 steps of 4 frames
OURS = {"atari_game": [], **{name: ["--precision", name] for name in ("auto", "fp32", "bf16")}}
OURS |= {name: ["--compression", name] for name in ("none", "zstd")}
RATES = {"steps_per_s": "agent steps/s", "learning_steps_per_s": "from learning starts on"}
# CleanRL's script run as __main__, its arguments after it.
CLEANRL_LAUNCH = common.CLEANRL_START + "sys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')"


@dataclasses.dataclass
class Run:
    """One training run: its rates, whole games as (frames, return), peak RSS and, for ours, progress.csv's seconds."""

    steps_per_s: float
    learning_steps_per_s: float
    games: list[tuple[int, float]]
    peak_rss_mb: float | None = None
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)

    def mean_return(self, games: slice) -> float:
        returns = [r for _, r in self.games][games]
        return float(np.mean(returns)) if returns else float("nan")


def run_child(command: list[str], output: Path, cwd: Path | None = None) -> float:
    """Run `command` with its stdout and stderr in the file `output`; return its peak RSS in MB (os.wait4's)."""
    with output.open("w") as file:
        child = subprocess.Popen(command, stdout=file, stderr=subprocess.STDOUT, cwd=cwd)
        _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"{command[:6]} failed ({os.waitstatus_to_exitcode(status)}); its output: {output}")
    return usage.ru_maxrss / 1024  # kilobytes on Linux


def command(side: str, seed_: int, args: argparse.Namespace, run_dir: Path, script: tuple[str, str] | None) -> list:
    """The command line of `side`'s run with `seed_` into `run_dir` (`script`: CleanRL's python and script)."""
    # Both trainers get DQN's settings as CleanRL's flags (in transitions).
    names = ("buffer_size", "learning_starts", "exploration_fraction") if args.algorithm == "dqn" else ()
    settings = [word for name in names for word in (flag_of(name), str(getattr(args, name)))]
    if side == "CleanRL":
        flags = ["--env-id", "BreakoutNoFrameskip-v4", "--seed", str(seed_), "--total-timesteps", str(args.frames // 4)]
        return [script[0], "-u", "-c", CLEANRL_LAUNCH, script[1], *flags, *settings]  # -u: readable as it runs
    ours = [sys.executable, "-m", "atari_game", "train", "--algorithm", args.algorithm, "--seed", str(seed_)]
    ours += ["--total-frames", str(args.frames), "--run-dir", str(run_dir), "--no-video", *OURS[side]]
    if args.algorithm == "dqn":  # (PPO's trainer takes no --torch-threads: it sets its own per phase)
        ours += [*settings, "--torch-threads", str(args.torch_threads), "--log-every", str(args.frames // 10)]
        ours += ["--no-save-memory"] + ([] if args.rainbow_lite else ["--cleanrl"])
    return ours


def trained(side: str, seed_: int, args: argparse.Namespace, run_dir: Path, script: tuple[str, str] | None) -> Run:
    """The run of `side` with `seed_` in `run_dir`: made now, unless it finished there before (peak_rss_mb.txt)."""
    finished = run_dir / "peak_rss_mb.txt"
    if not finished.exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("checkpoint.pt", "progress.csv"):  # an unfinished run starts again
            (run_dir / stale).unlink(missing_ok=True)
        cwd = run_dir if side == "CleanRL" else None  # CleanRL's runs/ folder goes there
        finished.write_text(f"{run_child(command(side, seed_, args, run_dir, script), run_dir / 'out.txt', cwd):.1f}\n")
    learning_starts = args.learning_starts if args.algorithm == "dqn" else None
    if side == "CleanRL":
        run = read_cleanrl((run_dir / "out.txt").read_text(), learning_starts)
    else:
        run = read_progress(run_dir, learning_starts or 0)
    return dataclasses.replace(run, peak_rss_mb=float(finished.read_text()))


def read_progress(run_dir: Path, learning_starts: int) -> Run:
    """Our run from its progress.csv (agent steps are 4 frames), its *_seconds summed."""
    games, logged = common.read_progress(run_dir)
    learning = [row for row in logged if row["frames"] >= 4 * learning_starts]
    first, last = learning[0], learning[-1]
    rate = last["frames_per_second"] / 4
    if last is not first:
        rate = (last["frames"] - first["frames"]) / 4 / (last["seconds"] - first["seconds"])
    times = dict.fromkeys(name for row in logged for name in row if name.endswith("_seconds"))
    seconds = {name.removesuffix("_seconds"): sum(row.get(name, 0) for row in logged) for name in times}
    return Run(last["frames_per_second"] / 4, rate, games, seconds=seconds)


def read_cleanrl(output: str, learning_starts: int | None) -> Run:
    """A CleanRL run from its ``global_step=N, episodic_return=[R]`` (N in agent steps) and ``SPS: n`` lines."""
    # dqn_atari.py prints an SPS, since its start, every 100th global_step past `learning_starts`.
    speeds = [int(s) for s in re.findall(r"^SPS: (\d+)", output, re.MULTILINE)]
    rate = float(speeds[-1])
    if learning_starts is not None and len(speeds) > 1:
        first_step = (learning_starts // 100 + 1) * 100  # the global_step of the first SPS line
        last_step = first_step + 100 * (len(speeds) - 1)
        rate = (last_step - first_step) / (last_step / speeds[-1] - first_step / speeds[0])
    games = re.findall(r"global_step=(\d+), episodic_return=\[?([-\d.]+)", output)
    return Run(float(speeds[-1]), rate, [(4 * int(step), float(r)) for step, r in games])


def report(name: str, run: Run, frames: int, algo: str) -> dict:
    """Print the run's line; return its figures."""
    first, last = run.mean_return(slice(20)), run.mean_return(slice(-20, None))
    per_100k = common.mean_returns(run.games, frames, 100_000)
    figures = {"games": len(run.games), "first_20": first, "last_20": last, "per_100k": per_100k}
    figures |= {key: getattr(run, key) for key in (*RATES, "peak_rss_mb", "seconds")}
    line = f"{name}: {len(run.games)} games; mean of the first 20 {first:.2f}, of the last 20 {last:.2f}; per 100k "
    line += f"frames: {', '.join(f'{m:.1f}' for m in figures['per_100k'])}; {run.steps_per_s:.0f} agent steps/s"
    line += f" ({run.learning_steps_per_s:.0f} from learning starts on)" if algo == "dqn" else ""
    line += f"; peak RSS {run.peak_rss_mb:,.0f} MB" if run.peak_rss_mb is not None else ""
    whole = sum(run.seconds.values())
    if whole:
        line += "; wall time " + ", ".join(f"{what} {100 * s / whole:.0f} %" for what, s in run.seconds.items())
    print(line, flush=True)
    return figures


def build_parser() -> argparse.ArgumentParser:
    parser = common.parser(__doc__)
    add = parser.add_argument
    add("--algorithm", choices=ALGORITHMS, default="ppo", help="the trainers (default: %(default)s)")
    sides = {"choices": (*OURS, "CleanRL"), "default": ["atari_game", "CleanRL"]}
    add("--sides", nargs="+", **sides, help="ratios are to the last (default: atari_game CleanRL)")
    add("--seeds", type=seed, nargs="+", default=[1], help="the seeds, one run each (default: 1)")
    add("--frames", type=count, default=1_000_000, help="emulator frames per run (default: %(default)s)")
    add("--run-dir", type=Path, help="where runs go and are found (default: a temporary folder)")
    add("--buffer-size", type=count, default=250_000, help="DQN: replay memory transitions (default: %(default)s)")
    add("--learning-starts", type=count, default=20_000, help="DQN: transitions before learning (default: %(default)s)")
    add("--exploration-fraction", type=float, default=0.4, help="DQN: epsilon's fall (default: %(default)s)")
    add("--rainbow-lite", action="store_true", help="DQN: ours as Rainbow-lite (default: off: --cleanrl)")
    add("--torch-threads", type=int, default=0, help="DQN: our --torch-threads, 0: one per core (default: 0)")
    add("--given-last-20", type=float, nargs="+", help="the last side's, a seed each, instead of runs (default: none)")
    common.add_cleanrl_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    unit = FRAMES_PER_UPDATE if args.algorithm == "ppo" else 4
    args.frames -= args.frames % unit
    if not args.frames or len(set(args.sides)) != len(args.sides) or len(args.sides) < 1 + bool(args.given_last_20):
        parser.error(f"--frames must be at least {unit}; --sides distinct, two at least with --given-last-20")
    running = args.sides[:-1] if args.given_last_20 else args.sides
    script = common.cleanrl_paths(parser, args, args.algorithm) if "CleanRL" in running else None
    print(f"Breakout {args.algorithm.upper()}, {args.frames:,} frames, seeds {args.seeds}; {common.describe_machine()}")
    runs: dict[str, list[Run]] = {side: [] for side in running}
    figures: dict = {"algo": args.algorithm, "frames": args.frames, "runs": [], "means": {}, "ratios": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for k, seed_ in enumerate(args.seeds):
            for side in common.turns(running, k):
                run_dir = (args.run_dir or Path(scratch)) / f"{side}-{seed_}"
                runs[side].append(trained(side, seed_, args, run_dir, script))
                row = report(f"{side}, seed {seed_}", runs[side][-1], args.frames, args.algorithm)
                figures["runs"].append({"side": side, "seed": seed_, **row})
    for side, done in runs.items():
        finals = [run.mean_return(slice(-20, None)) for run in done]
        curve = np.mean([common.mean_returns(run.games, args.frames, 100_000) for run in done], axis=0)
        rates = {key: float(np.mean([getattr(run, key) for run in done])) for key in RATES}
        figures["means"][side] = {"last_20": finals, "per_100k": curve, **rates}
        each, points = " / ".join(f"{f:.1f}" for f in finals), ", ".join(f"{m:.1f}" for m in curve)
        print(f"{side}, mean of {len(done)}: last 20 {np.mean(finals):.1f} ({each}); per 100k frames: {points}; "
              f"{rates['steps_per_s']:.0f} agent steps/s")  # fmt: skip
    first, base = args.sides[0], args.sides[-1]
    keys = RATES if args.algorithm == "dqn" else {"steps_per_s": RATES["steps_per_s"]}
    for side in [side for side in running if side != base and base in runs]:
        for key, what in keys.items():
            ratios = np.array([getattr(a, key) / getattr(b, key) for a, b in zip(runs[side], runs[base], strict=True)])
            figures["ratios"][f"{side} / {base}, {what}"] = ratios
            print(f"{side} / {base}, {what}, seed by seed: {describe_ratios(ratios)}")
    ours = figures["means"][first]["last_20"]
    theirs = args.given_last_20 or figures["means"].get(base, {}).get("last_20", [])
    if first != base and len(ours) > 1 and len(theirs) > 1:
        line, figures["difference"] = common.difference(ours, theirs, (first, base))
        print(f"last 20, {line}" + (f" ({base}'s as given)" if args.given_last_20 else ""))
    common.save(__file__, args, figures, argv)


if __name__ == "__main__":
    main()
