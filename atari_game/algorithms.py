"""The registry of trainers, and what their command line does: `ALGORITHMS` by name, `main` (``atari-game train``,
``examples/ppo.py``), the one game ``--eval`` plays, and a checkpoint's agent as a policy (``atari-game play`` and
``atari-game evaluate``).

A new agent is a module ending with its `Algorithm` record, named in the tuple below; nothing else changes.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import torch

from atari_game import dqn, iqn, ppo
from atari_game.algorithm import Algorithm, BatchPolicy, Policy
from atari_game.checkpoints import load_checkpoint, save_checkpoint
from atari_game.game import resolve_game
from atari_game.learners import Learners, LearnersFailed, train_on_learners
from atari_game.networks import pick_device
from atari_game.pool import PoolError
from atari_game.protocols import PROTOCOLS, trained_protocol
from atari_game.run_config import RunConfig, game_options, parse_config, run_directory
from atari_game.run_envs import record_game
from atari_game.worker import check_main_guard, sigterm_as_ctrl_c, start_context

#: The trainers by name, the first the default of ``atari-game train``.
ALGORITHMS: dict[str, Algorithm] = {
    algorithm.name: algorithm for algorithm in (ppo.ALGORITHM, dqn.ALGORITHM, iqn.ALGORITHM)
}


def get_algorithm(name: str) -> Algorithm:
    """The trainer called `name`; a `ValueError` naming the trainers there are for any other name."""
    if name not in ALGORITHMS:
        raise ValueError(f"no trainer is called {name!r}: the trainers are {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


def parse_args(name: str, argv: list[str] | None = None, prog: str | None = None) -> RunConfig:
    """The config of the trainer `name` from the command line `argv` (default: ``sys.argv[1:]``), as
    `atari_game.run_config.parse_config` reads it; `prog` names the command in its messages (flags given from
    Python: ``atari_game.algorithms.main``, not the interpreter's script, ``-c`` or a notebook's kernel)."""
    algorithm = get_algorithm(name)
    if prog is None and argv is not None:
        prog = f"atari_game.algorithms.main({name!r})"
    others = {other.name: other.config for other in ALGORITHMS.values() if other.name != name}
    return parse_config(name, algorithm.config, algorithm.doc, algorithm.check, argv, prog, others)


def main(name: str, argv: list[str] | None = None, prog: str | None = None) -> None:
    """The command line of the trainer `name` (``examples/ppo.py``, ``atari-game train --algorithm NAME``): with
    ``--eval``, play one game with a checkpoint's agent (`play_checkpoint`); else train, print where the run's files
    are and how to score its agent. `argv` defaults to ``sys.argv[1:]``, `prog` names the command."""
    algorithm = get_algorithm(name)
    config = parse_args(name, argv, prog)
    if config.eval:
        play_checkpoint(config, algorithm)
        return
    run_dir = run_trainer(config, algorithm)
    video = ", agent.mp4" if config.video else ""
    print(f"done: {run_dir}/progress.csv, learning_curve.png{video}, checkpoint.pt")
    # The next step, in the field's terms: a run whose settings match no protocol names the one to score under.
    protocol = "" if trained_protocol(dataclasses.asdict(config)) else " --protocol NAME"
    unmatched = f" ({' or '.join(PROTOCOLS)}: its settings match neither's, so name the one to score under)"
    command = f"atari-game evaluate {shlex.quote(str(run_dir / 'checkpoint.pt'))}{protocol}"
    print(f"to score its agent: {command}{unmatched if protocol else ''}")


def run_trainer(config: RunConfig, algorithm: Algorithm) -> Path:
    """Train `algorithm` as `config` says, with one learner here or ``config.learners`` placed by Ray Train, and
    return the run directory; stopped (Ctrl-C, SIGTERM, envs or learners that cannot go on), exit with `interrupted`'s
    line."""
    # Called from a script's top level: refused before the run starts, with the fix a trainer's caller has.
    if not config.ray:
        check_main_guard(start_context(None), f"the {algorithm.name.upper()} trainer's GamePool", fork_fix=False)
    sigterms: list[int] = []
    try:
        with sigterm_as_ctrl_c(sigterms):
            if config.learners:
                run_dir = run_directory(config, algorithm.name)
                return train_on_learners(config, algorithm.train, run_dir, config.learners, config.ray)
            return algorithm.train(config, Learners(num_envs=config.num_envs))
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM stops the run at once; its last checkpoint stays for --resume
        raise SystemExit(interrupted(config, algorithm.name, "SIGTERM" if sigterms else "Ctrl-C")) from None
    except (PoolError, LearnersFailed) as error:  # the envs or learners cannot go on (a node lost, no CPUs): the same
        raise SystemExit(interrupted(config, algorithm.name, str(error))) from None


def interrupted(config: RunConfig, name: str, why: str = "Ctrl-C") -> str:
    """What a run of the trainer `name` stopped by Ctrl-C (or `why`: SIGTERM, envs that cannot go on) says: its
    checkpoint, how to go on."""
    run_dir = run_directory(config, name)
    checkpoint = run_dir / "checkpoint.pt"
    if not checkpoint.exists():
        return f"stopped ({why}) before the run's first checkpoint: {run_dir} holds nothing to resume"
    frames = torch.load(checkpoint, map_location="cpu")["frames"]
    # (`atari-game train` takes the first trainer's flags unless told: another's run resumes there with --algorithm.)
    cli = "" if name == next(iter(ALGORITHMS)) else f" (atari-game train: with --algorithm {name})"
    return (
        f"stopped ({why}): {checkpoint} holds the run at {frames:,} frames; --resume --run-dir {run_dir} goes on{cli}"
    )


def play_checkpoint(config: RunConfig, algorithm: Algorithm) -> None:
    """``--eval``: play and record one whole game with the agent of the checkpoint ``config.eval`` (eval.mp4 beside
    it), acting as `config` says (its seed; DQN's eval_epsilon), and print its unclipped score and length in steps."""
    device = pick_device(config.device)
    network, trained = algorithm.load(load_checkpoint(config.eval), device)
    path = Path(config.eval).with_name("eval.mp4")
    score, length = record_game(
        algorithm.policy(network, device, config), dataclasses.replace(trained, seed=config.seed), path
    )
    acting = algorithm.acting_of(config)
    print(
        f"{trained.game}: one game scored {score:g} in {length} steps (unclipped{', ' + acting if acting else ''}); "
        f"video: {path}"
    )


def trained_policy(checkpoint: str | Path, game: str | None = None) -> tuple[Policy, dict, str]:
    """For ``atari-game play --checkpoint``: the CPU policy of a checkpoint of any trainer (acting as it trained:
    DQN's eval_epsilon, seeded with its run's seed), its game options and how it acts ("epsilon 0.01"; "" as it
    trained); a `ValueError` for a file that is no checkpoint, or one trained on another `game` than the one named
    (None: the checkpoint's own)."""
    saved = load_checkpoint(checkpoint)
    algorithm = get_algorithm(saved["algorithm"])
    network, config = algorithm.load(saved, torch.device("cpu"))
    if game is not None and resolve_game(game) != resolve_game(config.game):
        raise ValueError(f"{checkpoint} was trained on {config.game}, not {game}")
    return algorithm.policy(network, torch.device("cpu"), config), game_options(config), algorithm.acting_of(config)


def export_agent(checkpoint: str | Path, out: str | Path) -> Path:
    """Write the agent of a checkpoint of any trainer to `out` alone, to share or keep in a repository: its trainer's
    name, config, frames trained and network weights, the floating-point ones in fp16 (half of fp32's size; loaded, the
    network computes as it trained, with weights rounded to fp16's 11 significant bits). ``atari-game evaluate`` and
    ``atari-game play --checkpoint`` load it as they load a checkpoint; it holds nothing to ``--resume`` from. A
    `ValueError` for a file that is no checkpoint; returns `out` as a `Path`."""
    saved = load_checkpoint(checkpoint)
    algorithm = get_algorithm(saved["algorithm"])
    weights = {
        name: tensor.half() if tensor.is_floating_point() else tensor
        for name, tensor in saved[algorithm.network_key].items()
    }
    agent = {"algorithm": algorithm.name, "config": saved["config"], "frames": saved.get("frames", 0)}
    save_checkpoint(Path(out), {**agent, algorithm.network_key: weights})
    return Path(out)


def batch_policy(saved: dict) -> tuple[BatchPolicy, RunConfig]:
    """For `atari_game.evaluation`: the agent of a loaded checkpoint `saved` on the CPU as a policy for a batch of
    games (`Algorithm.batch_policy`), and the config it trained with."""
    algorithm = get_algorithm(saved["algorithm"])
    network, config = algorithm.load(saved, torch.device("cpu"))
    return algorithm.batch_policy(network), config
