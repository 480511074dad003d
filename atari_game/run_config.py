"""The settings every run has (`RunConfig`, which each trainer's ``Config`` extends) and the command line made from
them: our own argparse (the Design page says why), the rules a run's flags must keep, `--resume`'s config and the
run's directory.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import importlib
import importlib.util
import inspect
import itertools
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, NoReturn, TypeVar, cast

import torch

from atari_game.arguments import add_old_spelling, game_name, integer, protocol_name
from atari_game.checkpoints import load_checkpoint
from atari_game.extras import install_command
from atari_game.game import LIFE_LOSS_MODES, GameOptions, action_meanings, display_name, resolve_game
from atari_game.learners import learners_problem
from atari_game.networks import PRECISIONS, TRUNKS
from atari_game.protocols import get_protocol
from atari_game.ray_pool import check_address
from atari_game.validation import at_least, broken_rule, flag_of

# --- the run's config, and the command line made from it ------------------------------------------------


@dataclasses.dataclass
class RunConfig:
    """The settings every run has, whichever trainer runs it: the game and how it is played, the envs, where the
    run computes, writes and resumes; each trainer's ``Config`` (`atari_game.ppo.Config`, `atari_game.dqn.Config`)
    adds its algorithm's. Each field is a flag of ``atari-game train`` (``num_envs``: ``--num-envs``; a boolean
    ``video``: ``--video`` / ``--no-video``) whose ``--help`` is the first paragraph of the field's docstring.

    `RESUMABLE` names the fields a ``--resume`` may change; a trainer's ``Config`` adds its own to its base's."""

    #: What a resumed run's flags may change: how long, where and on what it runs, and what it shows and saves; of
    #: what it learns only the total, which the schedules (PPO's learning rate, DQN's epsilon and beta) then follow.
    RESUMABLE: ClassVar[tuple[str, ...]] = (
        "total_frames", "run_dir", "resume", "eval", "video", "device", "checkpoint_every", "ray", "learners"
    )  # fmt: skip

    game: str = "Breakout"
    """The game, in any usual spelling (``atari-game games`` lists them)."""
    seed: int = 1
    """Seeds all of the run's randomness: the network's initialisation, the agent's random actions and minibatches,
    and the envs (env k: seed + k)."""
    total_frames: int = 10_000_000
    """Emulator frames to train for, all envs together (4 per agent step), rounded down to whole updates (PPO) or
    whole steps of every env (DQN)."""
    num_envs: int = 8
    """Games played at once, each in its own env of a GamePool."""
    # How the games are played: by default as DeepMind and CleanRL train.
    life_loss: str = "terminal"
    """What a lost life does: terminal ends the episode and the game goes on (DeepMind's); reset restarts the
    game; ignore goes on (an episode is a whole game)."""
    clip_rewards: bool = True
    """Learn from rewards clipped to their sign (-1, 0, 1); returns are reported unclipped."""
    noop_max: int = 30
    """Each game starts with 1..noop_max NOOP frames, drawn at random (0: none)."""
    fire_reset: bool = True
    """Press FIRE to start each game (and each life, with --life-loss terminal), in the games that have FIRE."""
    protocol: str = ""
    """A named protocol that fixes how the games are played, as papers train: machado (sticky actions, all 18
    actions, no life-loss signal) or nature (DQN's: 30 no-ops, a lost life terminal); none: the flags as given. Its
    settings of life_loss, noop_max and fire_reset replace their defaults, and one given otherwise is refused. The
    run's config and checkpoint record it; atari-game evaluate scores the agent under it (docs/guides/evaluate.md)."""
    # Where the run computes.
    ray: str = ""
    """Run the envs on a Ray cluster's actors (a RayGamePool), the learner where the command runs (with --learners,
    the learners too, each with its envs): auto (the cluster `ray start` runs on this machine, or RAY_ADDRESS),
    HOST:PORT or ray://HOST:PORT (a cluster elsewhere), local (a new Ray on this machine, listening on 127.0.0.1
    only); none: this machine's worker processes (a GamePool). Needs the ray extra and atari_game on every node
    (docs/guides/ray.md); the same seed gives the same run."""
    learners: int = 0
    """Learner processes that Ray Train places on the --ray cluster, spread over its nodes: each plays num_envs /
    learners of the envs in a local GamePool over its CPUs and learns with a replica of the networks, the gradients
    summed over all of them every step (PPO: the very update of one learner); 0: one learner where the command runs
    (with --ray, its envs on Ray actors). Rank 0 writes the run's files: on a cluster, --run-dir on a shared file
    system."""
    device: str = "auto"
    """Where the networks run: auto (CUDA when present, else the CPU), cpu, cuda, cuda:N, or any device torch names."""
    precision: str = "auto"
    """What the networks compute in: auto (bf16 where this machine has it natively and a start-up probe finds it
    faster: CPUs with AVX512-BF16 or AMX, CUDA devices with bf16; else fp32), fp32, or bf16 (bfloat16 autocast for the
    convolutions and the dense layer; weights, optimizer, losses and targets stay fp32; the Results page compares
    them). A run repeats bit for bit in its precision on the same machine; auto's choice depends on the machine, so
    name fp32 where runs must repeat on any. The checkpoint records the choice, and --resume keeps it."""
    # Where the run writes, and what it does instead of starting anew.
    run_dir: str = ""
    """The directory the run writes into; none: runs/<Game>-<seed> (PPO) or runs/<Game>-<seed>-dqn (DQN),
    the game named as `atari-game games` lists it."""
    resume: bool = False
    """Continue the run in --run-dir from its checkpoint: its networks, optimizer, schedules, random generators and
    frame count, and DQN's replay memory (replay.npz; without it, the memory refills for --learning-starts
    transitions); the games in progress are not saved, so it starts new ones. Given again, flags may change only how
    long, where and on what it runs."""
    eval: str = ""
    """A checkpoint.pt: play and record one game with its agent (eval.mp4 beside it), not train; none: train."""
    video: bool = True
    """At the end, record one whole game of the trained agent as agent.mp4."""
    checkpoint_every: int = 1_000_000
    """Emulator frames between checkpoints (each also saved at the end): one at the first update or step of the envs
    past each multiple."""

    @property
    def final_frames(self) -> int:
        """The emulator frames the run ends at: `total_frames`, rounded down as each trainer's ``Config`` says."""
        return self.total_frames


#: A trainer's config: `RunConfig` or a subclass (`parse_config` returns the class it is given).
ConfigT = TypeVar("ConfigT", bound=RunConfig)

# How a flag's value is read: by its field's name, else by its field's type. Counts take 1e6 and 10_000_000 too.
FLAG_TYPES: dict[str, Callable[[str], Any]] = {
    "game": game_name, "protocol": protocol_name, "int": integer, "float": float, "str": str
}  # fmt: skip
# The flags renamed, by their spelling until 0.2 (taken until 0.3, with a note).
OLD_FLAGS = {"--n-envs": "--num-envs"}
# The fields whose values come from a fixed set.
FLAG_CHOICES = {"life_loss": LIFE_LOSS_MODES, "precision": PRECISIONS, "network": tuple(TRUNKS)}


def field_docs(config_class: type) -> dict[str, str]:
    """The docstring of each field of the dataclass `config_class` and of its dataclass bases (the string literal
    right below the field, as tyro reads it), by field name; a subclass's replaces its base's."""
    docs: dict[str, str] = {}
    for cls in reversed([cls for cls in config_class.__mro__ if dataclasses.is_dataclass(cls)]):
        class_def = cast(ast.ClassDef, ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0])
        for field, doc in itertools.pairwise(class_def.body):
            # A field (an annotated name) right above a string literal: its docstring.
            match field, doc:
                case ast.AnnAssign(target=ast.Name(id=name)), ast.Expr(value=ast.Constant(value=str(text))):
                    docs[name] = inspect.cleandoc(text)
    return docs


def shown_default(value: Any) -> str:
    """How --help shows a field's default: ``10_000_000`` for an integer (a form the flag takes), ``none`` for ""."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:_}"
    if isinstance(value, float):
        return f"{value:g}"
    return value or "none"


def config_parser(config_class: type, doc: str, prog: str | None = None) -> argparse.ArgumentParser:
    """The command line of the dataclass `config_class`: ``--field-name value`` for every field, ``--[no-]flag``
    for booleans, each helped by its field's docstring (`field_docs`), default and choices; `doc`'s first line
    describes the command, `prog` names it. Without defaults (``argparse.SUPPRESS``): --resume sees what was given.
    No abbreviations: DQN's --n-step given to PPO would be its --n-steps, the other trainer's flag taken silently.
    A one-line usage: argparse's own errors (a misspelt game, a bad number) show it above the problem, not 25 lines."""
    parser = argparse.ArgumentParser(
        prog=prog,
        usage="%(prog)s [-h] [--flag VALUE ...] (--help lists the flags)",
        description=doc.splitlines()[0],
        argument_default=argparse.SUPPRESS,
        allow_abbrev=False,
    )
    docs = field_docs(config_class)
    for field in dataclasses.fields(config_class):
        flag = flag_of(field.name)
        # The docstring's first paragraph on one line, without its reST markup; argparse formats % itself.
        about = " ".join(docs.get(field.name, "").split("\n\n")[0].split()).replace("``", "").replace("%", "%%")
        about = f"{about} (default: {shown_default(field.default)})"
        kind = str(field.type)  # "int", "float", ...: the trainers' modules postpone their annotations
        if kind == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, help=about)
        elif field.name in FLAG_CHOICES:
            parser.add_argument(flag, choices=FLAG_CHOICES[field.name], help=about)
        else:
            metavar = kind.upper() if kind in ("int", "float") else None
            parser.add_argument(flag, type=FLAG_TYPES.get(field.name, FLAG_TYPES[kind]), metavar=metavar, help=about)
    for old, new in OLD_FLAGS.items():
        add_old_spelling(parser, old, new)
    return parser


def usage_error(parser: argparse.ArgumentParser, problem: str) -> NoReturn:
    """Exit as `parser.error` does (status 2, ``PROG: error: PROBLEM``) without the 25 lines of usage that hide it."""
    parser.exit(2, f"{parser.prog}: error: {problem}\n")


def unknown_flags(config_class: type, unknown: list[str], others: Mapping[str, type[RunConfig]]) -> str:
    """What the trainer of `config_class` says of the arguments it does not know: the closest of its own flags, or,
    for a flag of one of the `others` (the other trainers' configs by name: PPO's --n-steps given to DQN), whose it
    is."""
    first = unknown[0].split("=")[0]
    fields = dataclasses.fields(config_class)
    flags = [flag_of(field.name) for field in fields]
    flags += [flag_of("no_" + field.name) for field in fields if str(field.type) == "bool"]
    closest = difflib.get_close_matches(first, flags, n=3, cutoff=0.6) if first.startswith("--") else []
    hint = f" (closest: {', '.join(closest)})" if closest else ""
    owners = [
        other
        for other, other_config in others.items()
        if first in {flag_of(field.name) for field in dataclasses.fields(other_config)}
    ]
    if owners:  # "--n-step is DQN's and IQN's: atari-game train --algorithm dqn or iqn, or examples/dqn.py or iqn.py"
        whose = " and ".join(f"{other.upper()}'s" for other in owners)
        hint = (
            f" ({first} is {whose}: atari-game train --algorithm {' or '.join(owners)}, or "
            f"examples/{'.py or '.join(owners)}.py)"
        )
    return f"unrecognized arguments: {' '.join(unknown)}{hint}"


def parse_config(
    algorithm: str,
    config_class: type[ConfigT],
    doc: str,
    check: Callable[[ConfigT], str],
    argv: list[str] | None,
    prog: str | None = None,
    others: Mapping[str, type[RunConfig]] | None = None,
) -> ConfigT:
    """The config (a `config_class`, the trainer `algorithm`'s) of the command line `argv`; with ``--resume``, the
    run's own (`resumed_config`). What `check(config)` returns ("" if nothing is wrong) is a usage error (exit status
    2), as are values out of `RUN_RULES`, a bad env option, a checkpoint that is missing or another trainer's, and a
    new run over an old one; a flag of one of the `others` (the other trainers' configs by name) is named as theirs.
    `doc`'s first line describes the command in ``--help``, `prog` names it (default: the script's name)."""
    parser = config_parser(config_class, doc, prog)
    namespace, unknown = parser.parse_known_args(argv)
    if unknown:  # a misspelt flag, or another trainer's: argparse's own way (the usage, then the problem)
        parser.error(unknown_flags(config_class, unknown, others or {}))
    given = vars(namespace)
    config = config_class(**given)
    # A protocol's settings replace the defaults of the flags it fixes; a flag given with another value is refused.
    if config.protocol:
        protocol = get_protocol(config.protocol)
        fixed = {name: value for name, value in protocol.train.items() if hasattr(config, name)}
        for name, value in fixed.items():
            if name in given and given[name] != value:
                flag = flag_of(name)
                usage_error(
                    parser,
                    f"{flag} {given[name]} conflicts with --protocol {protocol.name}, which sets {flag} {value} "
                    f"({protocol.sources[name]}): drop {flag}, or --protocol",
                )
        config = dataclasses.replace(config, **fixed)
    run_dir = run_directory(config, algorithm)
    checkpoint = Path(config.eval) if config.eval else run_dir / "checkpoint.pt"
    # A new run never overwrites a checkpoint; --eval's and --resume's, read once, must be this trainer's.
    if not config.eval and not config.resume and checkpoint.exists():
        usage_error(
            parser,
            f"{run_dir} holds a run already ({checkpoint}): --resume continues it, "
            "--run-dir DIR starts a new one elsewhere (or delete the directory)",
        )
    if config.eval or config.resume:
        flag = "--eval" if config.eval else "--resume"
        if not checkpoint.is_file():
            usage_error(parser, f"{flag}: there is no checkpoint {checkpoint}")
        try:
            saved = load_checkpoint(checkpoint)
        except ValueError as error:
            usage_error(parser, str(error))
        if saved["algorithm"] != algorithm:
            fix = f"atari-game train --algorithm {saved['algorithm']} {flag} ..."
            usage_error(parser, f"{flag} {checkpoint} is a {saved['algorithm']} checkpoint: {fix}")
        if not config.eval:
            resumed, problem = resumed_config(config_class, given, saved["config"], run_dir)
            config = resumed or usage_error(parser, problem)
            # A run at its end already: say so, rather than rewrite its curve, video and checkpoint as if it trained.
            if saved["frames"] >= config.final_frames:
                print(
                    f"{run_dir} is trained to {saved['frames']:,} frames, where --total-frames "
                    f"{config.total_frames:,} ends: nothing to train (a larger --total-frames goes on)"
                )
                raise SystemExit(0)
    problem = broken_rule(config, RUN_RULES) or device_problem(config.device) or ray_problem(config.ray)
    problem = problem or learners_problem(config.learners, config.ray, config.num_envs) or check(config)
    try:  # a misspelt game or a bad env option is a usage error too, found before the run directory is made
        GameOptions.from_kwargs(**game_options(config))
    except (TypeError, ValueError) as error:
        problem = problem or str(error)
    if problem:
        usage_error(parser, problem)
    return config


def resumed_config(config_class: type[ConfigT], given: dict, saved: dict, run_dir: Path) -> tuple[ConfigT | None, str]:
    """The config a resumed run goes on with: the checkpoint's (`saved`) with the ``RESUMABLE`` fields given, and a
    problem ("" if none) when another given flag differs from the run's (a resumed run continues exactly)."""
    fields = {field.name for field in dataclasses.fields(config_class)}
    saved = {name: value for name, value in saved.items() if name in fields}  # a field since removed is dropped
    saved.setdefault("precision", "fp32")  # the checkpoints from before --precision computed in fp32
    changed = [
        f"{flag_of(name)} {saved[name]}"
        for name in given
        if name not in config_class.RESUMABLE and name in saved and given[name] != saved[name]
    ]
    if changed:
        return None, (
            f"--resume continues {run_dir} as it was trained, with {', '.join(changed)}: drop the flags "
            "that differ, or start a new run with --run-dir"
        )
    return config_class(**{**saved, **given}), ""


# The rules of `RunConfig`'s fields (see `atari_game.validation`); each trainer checks its own fields' rules.
RUN_RULES = {
    "seed": at_least(0), "total_frames": at_least(1), "num_envs": at_least(1), "learners": at_least(0),
    "checkpoint_every": at_least(1),
}  # fmt: skip


def device_problem(name: str) -> str:
    """What is wrong with the device `name` ("" if nothing): a name torch does not know, or CUDA where there is none."""
    if name == "auto":
        return ""
    try:
        device = torch.device(name)
    except RuntimeError:
        return f"--device must be auto, cpu, cuda or cuda:N (any device torch names), got {name!r}"
    if device.type == "cuda" and not torch.cuda.is_available():
        return f"--device {name}: this torch sees no CUDA device (use --device auto or cpu)"
    return ""


def ray_problem(address: str) -> str:
    """What is wrong with --ray `address` ("" if nothing, or none given): a form Ray does not take, or no Ray."""
    if not address:
        return ""
    try:
        check_address(address)
    except ValueError as error:
        return f"--ray: {error}".replace("None, ", "")
    if importlib.util.find_spec("ray") is None:
        return f"--ray needs Ray, which is not installed: {install_command('ray')}"
    return ""


def run_directory(config: RunConfig, algo: str) -> Path:
    """Where a run writes: ``--run-dir``, else ``runs/<Game>-<seed>`` (PPO) or ``runs/<Game>-<seed>-dqn``, the game
    named as `list_games` names it, however it was spelt ("ALE/Pong-v5", "pong": ``runs/Pong-1``)."""
    if config.run_dir:
        return Path(config.run_dir)
    return Path(f"runs/{display_name(resolve_game(config.game))}-{config.seed}{'' if algo == 'ppo' else '-' + algo}")


def game_options(config: RunConfig) -> dict:
    """The `Game` options of a trainer's `config` (game, protocol, life_loss, clip_rewards, noop_max, fire_reset)."""
    # FIRE only for games that have it (Breakout waits for it; Freeway has no FIRE button).
    return {
        "game": config.game,
        "protocol": config.protocol or None,
        "life_loss": config.life_loss,
        "clip_rewards": config.clip_rewards,
        "noop_max": config.noop_max,
        "fire_reset": config.fire_reset and "FIRE" in action_meanings(config.game),
    }


def full_action_space(config: RunConfig) -> bool:
    """Whether a trainer's network chooses among all 18 actions (its protocol says so) or the game's minimal set."""
    return bool(config.protocol) and bool(get_protocol(config.protocol).train.get("full_action_space"))


def observation_shape(config: RunConfig) -> tuple[int, ...]:
    """The shape of one observation of a trainer's envs (`GameOptions.observation_shape`), before any env starts."""
    return GameOptions.from_kwargs(**game_options(config)).observation_shape
