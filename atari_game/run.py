"""A training run's set-up and tear-down, the same for every trainer: its directory and precision before the envs
start, its files while it plays (progress bar, progress.csv, the envs closed whatever fails), and its curve and video
at the end. Each trainer's ``train`` holds its algorithm between `start_run` and `finish_run`."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from tqdm import tqdm

from atari_game.algorithm import Policy
from atari_game.learners import Learners
from atari_game.networks import Trunk, choose_precision, pick_device, torch_threads
from atari_game.pool import GamePool
from atari_game.protocols import get_protocol
from atari_game.run_config import ConfigT, RunConfig, run_directory
from atari_game.run_envs import env_placement, record_game
from atari_game.run_log import RunLog, plot_learning_curve, progress_bar


def passes(every: int, before: int, frames: int) -> bool:
    """Whether going from `before` to `frames` emulator frames passes a multiple of `every`: a row or a checkpoint
    is due where an update or a step of the envs, which moves many frames at once, passes one."""
    return frames // every > before // every


def start_run(config: RunConfig, algorithm: str) -> tuple[Path, torch.device]:
    """A run of the trainer `algorithm` starting, before its networks are built: its directory made, torch's
    generator seeded with ``config.seed``; returns the run directory and the device the networks go on."""
    run_dir = run_directory(config, algorithm)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    return run_dir, pick_device(config.device)


def set_precision(
    config: ConfigT, trunks: Sequence[Trunk], device: torch.device, learners: Learners, threads: int
) -> ConfigT:
    """`config` with the precision the run computes in (`choose_precision`: probed with `threads` before the env
    workers start and take the cores; every learner takes the first one's choice), set on each of `trunks`; the first
    learner prints the choice and the protocol."""
    with torch_threads(threads):
        precision, about = choose_precision(config.precision, trunks[0], device, resumed=config.resume)
    precision = learners.first(precision)
    for trunk in trunks:
        trunk.bf16 = precision == "bf16"
    if learners.lead:
        print(about)
        if config.protocol:
            print(get_protocol(config.protocol).describe())
    return dataclasses.replace(config, precision=precision)


@contextlib.contextmanager
def run_files(
    config: ConfigT,
    run_dir: Path,
    pools: Sequence[GamePool],
    learners: Learners,
    frames: int,
    update_fields: Sequence[str],
) -> Iterator[tuple[RunLog | None, tqdm, dict[str, int]]]:
    """While a run plays `pools` (from `frames` emulator frames on): its log (`RunLog` with the trainer's
    `update_fields`; None but on the first learner, which alone writes the run's files), its progress bar and where its
    envs run (`env_placement`'s columns). Whatever ends the block, the bar, the pools and the log are closed and torch's
    threads are the caller's again."""
    callers_threads = torch.get_num_threads()
    progress, log = None, None
    try:
        # Where the envs run, for the log (asked of the cluster for Ray actors: it can fail), and the bar below it.
        placement, where = env_placement(pools, learners)
        if learners.lead:
            print(where)
        progress = progress_bar(config.final_frames, frames, shown=learners.lead)
        resumed_at = frames if config.resume else None
        log = RunLog(run_dir, update_fields, resumed_at=resumed_at) if learners.lead else None
        yield log, progress, placement
    finally:
        if progress is not None:
            progress.close()
        for pool in pools:
            pool.close()
        if log:
            log.close()
        torch.set_num_threads(callers_threads)


def finish_run(config: ConfigT, run_dir: Path, title: str, log: RunLog | None, policy: Policy) -> Path:
    """A run's end on the first learner (the one with the `log`): learning_curve.png titled `title` and, with
    ``config.video``, agent.mp4 of one game played by `policy`; returns `run_dir`."""
    if log:
        plot_learning_curve(log.games, run_dir / "learning_curve.png", title)
        if config.video:
            record_game(policy, config, run_dir / "agent.mp4")
    return run_dir
