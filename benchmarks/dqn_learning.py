"""How well atari_game's DQN learns Breakout against CleanRL's dqn_atari.py, same budget, seed and settings.

    python benchmarks/dqn_learning.py --run-dir runs/dqn-learning          # both trainers, one after the other
    python benchmarks/dqn_learning.py --skip-cleanrl --run-dir runs/ours     # ours only
    python benchmarks/dqn_learning.py --ours-dir runs/ours --cleanrl-output out.txt --cleanrl-time err.txt
    python benchmarks/dqn_learning.py --ours-dir runs/ours-1 runs/ours-2 --cleanrl-output c1.txt c2.txt  # seeds
    python benchmarks/dqn_learning.py --rainbow-lite --skip-cleanrl --seed 2 --run-dir runs/rainbow-2
    python benchmarks/dqn_learning.py --ours-dir runs/rainbow-*/atari_game --cleanrl-last-20 21.5 26.1 23.7

Both trainers run CleanRL's defaults except the issue's four settings: 250,000 agent steps (1M frames), a
replay memory of 250,000 transitions, learning from the 20,000th and epsilon falling over the first 40 % of the
run (see dqn_speed.py for CleanRL's venv). For each, the script prints the mean whole-game return (unclipped,
across lives) of the first and last 20 games and per 100k frames, the end-to-end agent steps/s and the peak
RSS of the trainer process (os.wait4's; for a CleanRL run read from files, /usr/bin/time -v's). It can also
report from runs made before: our run directories (``--ours-dir``, each with its progress.csv) and CleanRL
outputs (``--cleanrl-output``, with ``--cleanrl-time`` for their peak RSS). Given several runs of a side (one
per seed), it also prints their mean last-20 return and curve, and the difference of the two sides' means with
its standard error: one seed's last-20 return varies by several points, so single runs tell little apart.
Ours runs CleanRL's algorithm (``--cleanrl``); ``--rainbow-lite`` runs it with its default Rainbow-lite switches
on (``--no-cleanrl``: ``--double --n-step 3 --prioritized``). ``--cleanrl-last-20``
compares ours with CleanRL runs' last-20 returns reported before (the Results page lists them per seed).
A random agent scores about 1.7. The issue's target: our last-20 mean at least CleanRL's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from dqn_speed import Run as DQNRun
from dqn_speed import cleanrl, cleanrl_peak_rss, dqn_options, ours, parser_with_cleanrl, read_cleanrl, read_progress
from ppo_learning import per_100k
from ppo_learning import report as report_returns

from atari_game.cli import count


def report(name: str, run: DQNRun, frames: int) -> None:
    """The PPO benchmark's line (first and last 20 games, per 100k frames, agent steps/s), then speed and memory."""
    report_returns(name, run, frames)
    memory = f"; peak RSS {run.peak_rss_mb:,.0f} MB" if run.peak_rss_mb is not None else ""
    print(f"{name}: {run.learning_steps_per_s:.0f} agent steps/s from learning starts on{memory}", flush=True)


def last_20(run: DQNRun) -> float:
    """The mean whole-game return of the run's last 20 games: the issue's measure."""
    return float(np.mean([r for _, r in run.games][-20:]))


def summarize(name: str, runs: list[DQNRun], frames: int) -> None:
    """The mean over several runs (seeds) of the last-20 return and of the return per 100k frames."""
    finals = [last_20(run) for run in runs]
    curve = np.nanmean([per_100k(run.games, frames) for run in runs], axis=0)
    print(
        f"{name}, mean of {len(runs)} runs: last 20 {np.mean(finals):.1f} "
        f"({' / '.join(f'{f:.1f}' for f in finals)}); per 100k frames: {', '.join(f'{m:.1f}' for m in curve)}"
    )


def difference(a: list[float], b: list[float], names: tuple[str, str] = ("atari_game", "CleanRL")) -> str:
    """The difference of two sides' means, `a`'s minus `b`'s (named by `names`), with its standard error (Welch's:
    unequal variances; over runs, so the seed-to-seed spread is what it has to beat)."""
    error = np.sqrt(np.var(a, ddof=1) / len(a) + np.var(b, ddof=1) / len(b))
    gap = np.mean(a) - np.mean(b)
    within = "within" if abs(gap) <= error else "not within"
    return f"{names[0]} - {names[1]}: {gap:+.1f} (standard error {error:.1f}; {within} one standard error)"


def compare(ours: list[DQNRun], theirs: list[DQNRun]) -> None:
    """The difference of the mean last-20 returns, with its standard error."""
    print(f"last 20, {difference([last_20(run) for run in ours], [last_20(run) for run in theirs])}")


def build_parser() -> argparse.ArgumentParser:
    parser = parser_with_cleanrl(__doc__)
    parser.add_argument(
        "--steps",
        type=count,
        default=250_000,
        help="transitions (agent steps) per run: CleanRL's --total-timesteps, our --total-frames / 4 "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--buffer-size", type=count, default=250_000, help="transitions the replay memory holds (default: %(default)s)"
    )
    parser.add_argument(
        "--learning-starts",
        type=count,
        default=20_000,
        help="transitions played before the first gradient step (default: %(default)s)",
    )
    parser.add_argument(
        "--exploration-fraction",
        type=float,
        default=0.4,
        help="the share of the run over which epsilon falls (default: %(default)s)",
    )
    parser.add_argument(
        "--run-dir", type=Path, default=Path("runs/dqn-learning"), help="where new runs write (default: %(default)s)"
    )
    parser.add_argument(
        "--ours-dir",
        type=Path,
        nargs="+",
        help="report our runs made in these directories instead of running ours (default: none)",
    )
    parser.add_argument("--skip-cleanrl", action="store_true", help="run and report ours only (default: off)")
    parser.add_argument(
        "--cleanrl-output",
        type=Path,
        nargs="+",
        help="report these CleanRL outputs instead of running CleanRL (default: none)",
    )
    parser.add_argument(
        "--cleanrl-time",
        type=Path,
        nargs="+",
        help="their /usr/bin/time -v outputs (peak RSS), one per --cleanrl-output (default: none)",
    )
    parser.add_argument(
        "--rainbow-lite",
        action="store_true",
        help="run ours with its Rainbow-lite switches on, its default (default: off: --cleanrl, CleanRL's algorithm)",
    )
    parser.add_argument(
        "--torch-threads", type=int, default=0, help="our trainer's --torch-threads; 0: one per core (default: 0)"
    )
    parser.add_argument(
        "--cleanrl-last-20",
        type=float,
        nargs="+",
        help="CleanRL runs' last-20 returns, one per seed, to compare ours with (default: none)",
    )
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.cleanrl_time and len(args.cleanrl_time) != len(args.cleanrl_output or []):
        parser.error("--cleanrl-time needs one file per --cleanrl-output, in the same order")

    options = dqn_options(args.steps, args.learning_starts, args.buffer_size, args.exploration_fraction, args.seed)
    frames = 4 * args.steps
    reading_only = args.ours_dir and (args.cleanrl_output or args.skip_cleanrl)
    runs_now = "" if reading_only else f", new runs with seed {args.seed}"
    print(f"Breakout DQN, {args.steps:,} agent steps = {frames:,} frames per run{runs_now}", flush=True)
    ours_runs, cleanrl_runs = [], []
    for directory in args.ours_dir or []:
        run = read_progress(directory / "progress.csv", args.learning_starts)
        peak = directory / "peak_rss_mb.txt"  # written when this script made the run
        if peak.exists():
            run.peak_rss_mb = float(peak.read_text())
        ours_runs.append(run)
    if not args.ours_dir:
        extra = ["--torch-threads", str(args.torch_threads)] + (["--no-cleanrl"] if args.rainbow_lite else [])
        run = ours(options, args.run_dir / "atari_game", extra)
        (args.run_dir / "atari_game" / "peak_rss_mb.txt").write_text(f"{run.peak_rss_mb:.1f}\n")
        ours_runs.append(run)
    for k, output in enumerate(args.cleanrl_output or []):
        run = read_cleanrl(output.read_text(), args.learning_starts)
        if args.cleanrl_time:
            run.peak_rss_mb = cleanrl_peak_rss(args.cleanrl_time[k].read_text())
        cleanrl_runs.append(run)
    if not args.cleanrl_output and not args.skip_cleanrl:
        cleanrl_runs.append(cleanrl(args.cleanrl_python, args.cleanrl_script, options, args.run_dir / "cleanrl"))
    for name, runs in (("atari_game", ours_runs), ("CleanRL", cleanrl_runs)):
        for run in runs:
            report(name, run, frames)
        if len(runs) > 1:
            summarize(name, runs, frames)
    if len(ours_runs) > 1 and len(cleanrl_runs) > 1:
        compare(ours_runs, cleanrl_runs)
    if len(ours_runs) > 1 and args.cleanrl_last_20 and len(args.cleanrl_last_20) > 1:
        print(f"last 20, {difference([last_20(run) for run in ours_runs], args.cleanrl_last_20)} (CleanRL's as given)")


if __name__ == "__main__":
    main()
