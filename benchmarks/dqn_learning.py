"""How well atari_game's DQN learns Breakout against CleanRL's dqn_atari.py, same budget, seed and settings.

    python benchmarks/dqn_learning.py --run-dir runs/dqn-learning          # both trainers, one after the other
    python benchmarks/dqn_learning.py --skip-cleanrl --run-dir runs/ours     # ours only
    python benchmarks/dqn_learning.py --ours-dir runs/ours --cleanrl-output out.txt --cleanrl-time err.txt

Both trainers run CleanRL's defaults except the issue's four settings: 250,000 agent steps (1M frames), a
replay memory of 250,000 transitions, learning from the 20,000th and epsilon falling over the first 40 % of the
run (see dqn_speed.py for CleanRL's venv). For each, the script prints the mean whole-game return (unclipped,
across lives) of the first and last 20 games and per 100k frames, the end-to-end agent steps/s and the peak
RSS of the trainer process (os.wait4's; for a CleanRL run read from files, /usr/bin/time -v's). It can also
report from runs made before: our run directory (``--ours-dir``, its progress.csv and out.txt) and a CleanRL
output (``--cleanrl-output``, with ``--cleanrl-time`` for its peak RSS). A random agent scores about 1.7.
The issue's target: our last-20 mean at least CleanRL's.
"""

from __future__ import annotations

from pathlib import Path

from dqn_speed import Run as DQNRun
from dqn_speed import cleanrl, cleanrl_peak_rss, dqn_options, ours, parser_with_cleanrl, read_cleanrl, read_progress
from ppo_learning import report as report_returns


def report(name: str, run: DQNRun, frames: int) -> None:
    """The PPO benchmark's line (first and last 20 games, per 100k frames, agent steps/s), then speed and memory."""
    report_returns(name, run, frames)
    memory = f"; peak RSS {run.peak_rss_mb:,.0f} MB" if run.peak_rss_mb is not None else ""
    print(f"{name}: {run.learning_steps_per_s:.0f} agent steps/s from learning starts on{memory}", flush=True)


def main() -> None:
    parser = parser_with_cleanrl(__doc__)
    parser.add_argument("--steps", type=int, default=250_000, help="agent steps (CleanRL's total-timesteps)")
    parser.add_argument("--buffer-size", type=int, default=250_000)
    parser.add_argument("--learning-starts", type=int, default=20_000)
    parser.add_argument("--exploration-fraction", type=float, default=0.4)
    parser.add_argument("--run-dir", type=Path, default=Path("runs/dqn-learning"), help="where new runs write")
    parser.add_argument("--ours-dir", type=Path, help="report our run already made there instead of running it")
    parser.add_argument("--skip-cleanrl", action="store_true", help="run and report ours only")
    parser.add_argument("--cleanrl-output", type=Path, help="report this CleanRL output instead of running it")
    parser.add_argument("--cleanrl-time", type=Path, help="its /usr/bin/time -v output, for the peak RSS")
    args = parser.parse_args()

    options = dqn_options(args.steps, args.learning_starts, args.buffer_size, args.exploration_fraction, args.seed)
    frames = 4 * args.steps
    print(f"Breakout DQN, seed {args.seed}, {args.steps:,} agent steps = {frames:,} frames each", flush=True)
    if args.ours_dir:
        run = read_progress(args.ours_dir / "progress.csv", args.learning_starts)
        peak = args.ours_dir / "peak_rss_mb.txt"  # written when this script made the run
        if peak.exists():
            run.peak_rss_mb = float(peak.read_text())
        report("atari_game", run, frames)
    else:
        run = ours(options, args.run_dir / "atari_game")
        (args.run_dir / "atari_game" / "peak_rss_mb.txt").write_text(f"{run.peak_rss_mb:.1f}\n")
        report("atari_game", run, frames)
    if args.cleanrl_output:
        run = read_cleanrl(args.cleanrl_output.read_text(), args.learning_starts)
        if args.cleanrl_time:
            run.peak_rss_mb = cleanrl_peak_rss(args.cleanrl_time.read_text())
        report("CleanRL", run, frames)
    elif not args.skip_cleanrl:
        report("CleanRL", cleanrl(args.cleanrl_python, args.cleanrl_script, options, args.run_dir / "cleanrl"), frames)


if __name__ == "__main__":
    main()
