"""What the trainers (atari_game/ppo.py, atari_game/dqn.py) share; each keeps its algorithm to itself.

The Nature-DQN CNN, the settings every run has (`RunConfig`, which each trainer's ``Config`` extends) and the command
line made from them (our own argparse: the Design page says why), the run log, the device, checkpoints, the learning
curve and the video of one game: a run of either trainer writes the same files the same way.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import csv
import dataclasses
import difflib
import functools
import importlib
import importlib.util
import inspect
import itertools
import pickle
import re
import shlex
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar, cast

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from torch import nn
from tqdm import tqdm

from atari_game.arguments import TRAINERS, game_name, integer, protocol_name
from atari_game.extras import install_command
from atari_game.game import LIFE_LOSS_MODES, Game, GameOptions, action_meanings, display_name, resolve_game
from atari_game.learners import Learners, LearnersFailed, learners_problem, train_on_learners
from atari_game.play import play_game
from atari_game.pool import GamePool, PoolError
from atari_game.protocols import PROTOCOLS, get_protocol, trained_protocol
from atari_game.ray_pool import RayGamePool, check_address, free_cpus
from atari_game.validation import at_least, broken_rule, flag_of
from atari_game.worker import available_cores, check_main_guard, sigterm_as_ctrl_c, start_context

# --- the network ----------------------------------------------------------------------------------------


class NatureCNN(nn.Sequential):
    """The Nature-DQN CNN trunk (Mnih et al. 2015): ``uint8`` ``(batch, 4, 84, 84)`` in, float ``(batch, 512)`` out.

    `init` is applied to each layer as it is built (PPO's orthogonal initialisation; the default keeps PyTorch's).
    The observations are scaled here, on the device, once reordered to channels-last while still ``uint8`` (4x less
    memory to move): the faster layout for CPU convolutions, which `on_device` gives the weights too. With ``bf16``
    set (by `choose_precision`), the layers compute under bfloat16 autocast; weights and features stay ``float32``."""

    def __init__(self, init: Callable[[nn.Module], nn.Module] = lambda module: module) -> None:
        super().__init__(
            init(nn.Conv2d(4, 32, 8, stride=4)),
            nn.ReLU(),
            init(nn.Conv2d(32, 64, 4, stride=2)),
            nn.ReLU(),
            init(nn.Conv2d(64, 64, 3, stride=1)),
            nn.ReLU(),
            nn.Flatten(),
            init(nn.Linear(64 * 7 * 7, 512)),
            nn.ReLU(),
        )
        self.bf16 = False

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``uint8`` observations ``(batch, 4, 84, 84)`` in, float features ``(batch, 512)`` out."""
        x = obs.contiguous(memory_format=torch.channels_last).float().div_(255.0)
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            return super().forward(x).float()


#: A network type (`torch.nn.Module` or a subclass): `on_device` returns the type it is given.
NetworkT = TypeVar("NetworkT", bound=nn.Module)


def on_device(network: NetworkT, device: torch.device) -> NetworkT:
    """`network` moved to `device`, its weights channels-last to match `NatureCNN`'s channels-last activations."""
    return network.to(device).to(memory_format=torch.channels_last)  # type: ignore[call-overload]  # (stubs omit it)


def pick_device(name: str) -> torch.device:
    """``"auto"``: CUDA when present, else the CPU; anything else as torch names it (``"cpu"``, ``"cuda:1"``)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


# --- precision: fp32, or bfloat16 where the hardware has it ------------------------------------------

PRECISIONS = ("auto", "fp32", "bf16")


def native_bf16(device: torch.device) -> bool | None:
    """Whether `device` computes bfloat16 natively: a CUDA device that says so, a CPU with AVX512-BF16 or AMX
    (read from /proc/cpuinfo); None where that cannot be told (another OS, another device type)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return None
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return bool(re.search(r"\b(avx512_bf16|amx_bf16)\b", cpuinfo))


def probe_ms(trunk: NatureCNN, device: torch.device, bf16: bool, batch: int = 32, repeats: int = 5) -> float:
    """The fastest of `repeats` forward + backward passes, in ms, of a copy of `trunk` (its gradients and the seeded
    global generator untouched) on `batch` random observations, after 3 that warm up (and build bf16's kernels)."""
    probe = copy.deepcopy(trunk)
    probe.bf16 = bf16
    generator = torch.Generator().manual_seed(0)
    obs = torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8, generator=generator).to(device)
    times = []
    for _ in range(3 + repeats):
        start = time.perf_counter()
        probe(obs).sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return 1000 * min(times[3:])


def choose_precision(name: str, trunk: NatureCNN, device: torch.device, resumed: bool = False) -> tuple[str, str]:
    """The precision a run computes in, ``"fp32"`` or ``"bf16"``, for the flag value `name` (one of `PRECISIONS`;
    a `resumed` run's is its checkpoint's), and a log line saying why; sets ``trunk.bf16``. ``auto`` takes bf16 where
    `device` has it natively (`native_bf16`) and `probe_ms` finds it at least 10 % faster, with learning's threads."""
    if name == "auto":
        if native_bf16(device) is False:
            chosen, why = "fp32", f"auto: {device} has no native bfloat16"
        else:
            fp32_ms, bf16_ms = probe_ms(trunk, device, False), probe_ms(trunk, device, True)
            chosen = "bf16" if bf16_ms < 0.9 * fp32_ms else "fp32"
            why = f"auto: a forward + backward pass of 32 observations: {fp32_ms:.1f} ms fp32, {bf16_ms:.1f} ms bf16"
    else:
        chosen, why = name, "the run's own, kept by --resume" if resumed else ""
        if name == "bf16" and not native_bf16(device):
            why += ("; " if why else "") + f"{device} may have no native bfloat16, which makes bf16 slower than fp32"
    trunk.bf16 = chosen == "bf16"
    return chosen, f"precision {chosen}" + (f" ({why})" if why else "")


# --- the run's config, and the command line made from it ------------------------------------------------


@dataclasses.dataclass
class RunConfig:
    """The settings every run has, whichever trainer runs it: the game and how it is played, the envs, where the
    run computes, writes and resumes; each trainer's ``Config`` (`atari_game.ppo.Config`, `atari_game.dqn.Config`)
    adds its algorithm's. Each field is a flag of ``atari-game train`` (``n_envs``: ``--n-envs``; a boolean
    ``video``: ``--video`` / ``--no-video``) whose ``--help`` is the first paragraph of the field's docstring."""

    game: str = "Breakout"
    """The game, in any usual spelling (``atari-game games`` lists them)."""
    seed: int = 1
    """Seeds all of the run's randomness: the network's initialisation, the agent's random actions and minibatches,
    and the envs (env k: seed + k)."""
    total_frames: int = 10_000_000
    """Emulator frames to train for, all envs together (4 per agent step), rounded down to whole updates (PPO) or
    whole steps of every env (DQN)."""
    n_envs: int = 8
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
    """Learner processes that Ray Train places on the --ray cluster, spread over its nodes: each plays n_envs /
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
# The fields whose values come from a fixed set.
FLAG_CHOICES = {"life_loss": LIFE_LOSS_MODES, "precision": PRECISIONS}


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
    return parser


def usage_error(parser: argparse.ArgumentParser, problem: str) -> NoReturn:
    """Exit as `parser.error` does (status 2, ``PROG: error: PROBLEM``) without the 25 lines of usage that hide it."""
    parser.exit(2, f"{parser.prog}: error: {problem}\n")


def trainer_of(config_class: type) -> str:
    """The trainer (one of `TRAINERS`) whose config `config_class` is: its module's name, ``dqn`` for dqn.Config."""
    return config_class.__module__.rsplit(".", 1)[-1]


def unknown_flags(config_class: type, unknown: list[str]) -> str:
    """What the trainer of `config_class` says of the arguments it does not know: the closest of its own flags, or,
    for the other trainer's flag (PPO's --n-steps given to DQN), whose it is."""
    first = unknown[0].split("=")[0]
    fields = dataclasses.fields(config_class)
    flags = [flag_of(field.name) for field in fields]
    flags += [flag_of("no_" + field.name) for field in fields if str(field.type) == "bool"]
    closest = difflib.get_close_matches(first, flags, n=3, cutoff=0.6) if first.startswith("--") else []
    hint = f" (closest: {', '.join(closest)})" if closest else ""
    for other in set(TRAINERS) - {trainer_of(config_class)}:
        others = importlib.import_module(f"atari_game.{other}").Config
        if first in {flag_of(field.name) for field in dataclasses.fields(others)}:
            hint = f" ({first} is {other.upper()}'s: atari-game train --algo {other}, or examples/{other}.py)"
    return f"unrecognized arguments: {' '.join(unknown)}{hint}"


def parse_config(
    config_class: type[ConfigT],
    argv: list[str] | None,
    doc: str,
    check: Callable[[ConfigT], str],
    prog: str | None = None,
) -> ConfigT:
    """The config (a `config_class`) of the command line `argv`; with ``--resume``, the run's own (`resumed_config`).
    What `check(config)` returns ("" if nothing is wrong) is a usage error (exit status 2), as are values out of
    `RUN_RULES`, a bad env option, a checkpoint that is missing or another trainer's, and a new run over an old one.
    Flags given from Python (`argv` a list) and no `prog`: the messages name ``atari_game.<trainer>.main``, not the
    interpreter's script (``-c``, a notebook's kernel)."""
    if prog is None and argv is not None:
        prog = f"atari_game.{trainer_of(config_class)}.main"
    parser = config_parser(config_class, doc, prog)
    namespace, unknown = parser.parse_known_args(argv)
    if unknown:  # a misspelt flag, or another trainer's: argparse's own way (the usage, then the problem)
        parser.error(unknown_flags(config_class, unknown))
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
    algo = trainer_of(config_class)
    run_dir = run_directory(config, algo)
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
        if saved["algo"] != algo:
            fix = f"atari-game train --algo {saved['algo']} {flag} ..."
            usage_error(parser, f"{flag} {checkpoint} is a {saved['algo']} checkpoint: {fix}")
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
    problem = problem or learners_problem(config.learners, config.ray, config.n_envs) or check(config)
    try:  # a misspelt game or a bad env option is a usage error too, found before the run directory is made
        GameOptions.from_kwargs(**game_options(config))
    except (TypeError, ValueError) as error:
        problem = problem or str(error)
    if problem:
        usage_error(parser, problem)
    return config


# What a resumed run's flags may change: how long, where and on what it runs, and what it shows and saves; of what it
# learns only the total, which the schedules (PPO's learning rate, DQN's epsilon and beta) then follow.
RUN_FIELDS = (
    "total_frames", "run_dir", "resume", "eval", "video", "device", "checkpoint_every", "log_every", "torch_threads",
    "eval_epsilon", "ray", "learners", "save_memory",
)  # fmt: skip


def resumed_config(config_class: type[ConfigT], given: dict, saved: dict, run_dir: Path) -> tuple[ConfigT | None, str]:
    """The config a resumed run goes on with: the checkpoint's (`saved`) with the `RUN_FIELDS` given, and a problem
    ("" if none) when another given flag differs from the run's (a resumed run continues exactly)."""
    fields = {field.name for field in dataclasses.fields(config_class)}
    saved = {name: value for name, value in saved.items() if name in fields}  # a field since removed is dropped
    saved.setdefault("precision", "fp32")  # the checkpoints from before --precision computed in fp32
    changed = [
        f"{flag_of(name)} {saved[name]}"
        for name in given
        if name not in RUN_FIELDS and name in saved and given[name] != saved[name]
    ]
    if changed:
        return None, (
            f"--resume continues {run_dir} as it was trained, with {', '.join(changed)}: drop the flags "
            "that differ, or start a new run with --run-dir"
        )
    return config_class(**{**saved, **given}), ""


# The rules of `RunConfig`'s fields (see `atari_game.validation`); each trainer checks its own fields' rules.
RUN_RULES = {"seed": at_least(0), "total_frames": at_least(1), "n_envs": at_least(1), "learners": at_least(0)}


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


def interrupted(config: RunConfig, algo: str, why: str = "Ctrl-C") -> str:
    """What a run of `algo` stopped by Ctrl-C (or `why`: SIGTERM, envs that cannot go on) says: its checkpoint, how to
    go on."""
    run_dir = run_directory(config, algo)
    checkpoint = run_dir / "checkpoint.pt"
    if not checkpoint.exists():
        return f"stopped ({why}) before the run's first checkpoint: {run_dir} holds nothing to resume"
    frames = torch.load(checkpoint, map_location="cpu")["frames"]
    # (`atari-game train` takes PPO's flags unless told: a DQN run resumes there with --algo dqn.)
    cli = "" if algo == "ppo" else f" (atari-game train: with --algo {algo})"
    return (
        f"stopped ({why}): {checkpoint} holds the run at {frames:,} frames; --resume --run-dir {run_dir} goes on{cli}"
    )


def run_trainer(
    config: ConfigT, algo: str, train: Callable[[ConfigT, Learners], Path], evaluate: Callable[[ConfigT], None]
) -> None:
    """What the command of the trainer `algo` does with its `config`: `evaluate` with ``--eval``, else `train` (one
    learner here, or ``config.learners`` placed by Ray Train) and print its files; if it stops, `interrupted`'s line."""
    if config.eval:
        evaluate(config)
        return
    # Called from a script's top level: refused before the run starts, with the fix a trainer's caller has.
    if not config.ray:
        check_main_guard(start_context(None), f"the {algo.upper()} trainer's GamePool", fork_fix=False)
    sigterms: list[int] = []
    try:
        with sigterm_as_ctrl_c(sigterms):
            if config.learners:
                run_dir = train_on_learners(config, train, run_directory(config, algo), config.learners, config.ray)
            else:
                run_dir = train(config, Learners(n_envs=config.n_envs))
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM stops the run at once; its last checkpoint stays for --resume
        raise SystemExit(interrupted(config, algo, "SIGTERM" if sigterms else "Ctrl-C")) from None
    except (PoolError, LearnersFailed) as error:  # the envs or learners cannot go on (a node lost, no CPUs): the same
        raise SystemExit(interrupted(config, algo, str(error))) from None
    video = ", agent.mp4" if config.video else ""
    print(f"done: {run_dir}/progress.csv, learning_curve.png{video}, checkpoint.pt")
    # The next step, in the field's terms: a run whose settings match no protocol names the one to score under.
    protocol = "" if trained_protocol(dataclasses.asdict(config)) else " --protocol NAME"
    unmatched = f" ({' or '.join(PROTOCOLS)}: its settings match neither's, so name the one to score under)"
    command = f"atari-game evaluate {shlex.quote(str(run_dir / 'checkpoint.pt'))}{protocol}"
    print(f"to score its agent: {command}{unmatched if protocol else ''}")


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


def make_pools(config: RunConfig, n_pools: int, learners: Learners) -> list[GamePool]:
    """The envs of a trainer's `config` that `learners` plays (all of them for one learner) in `n_pools` pools of
    equal size (env i: seed ``seed + i``, as in one pool), with same-step autoreset (a truncated episode's final
    observation is there to bootstrap from): `GamePool`s on this machine's cores (a Ray Train learner's: its CPUs)
    or, with ``config.ray`` and one learner here, `RayGamePool`s on the cluster's free CPUs (``restart_workers``)."""
    size = config.n_envs // learners.count // n_pools
    options = {"autoreset_mode": AutoresetMode.SAME_STEP, **game_options(config)}
    make: Callable[..., GamePool] = GamePool
    cpus = learners.cores
    if config.ray and not learners.on_ray_train:
        make = functools.partial(RayGamePool, address=config.ray, restart_workers=True)
        cpus = int(free_cpus(config.ray))
    n_workers = max(1, min(size, cpus // n_pools))
    pools: list[GamePool] = []
    try:
        for k in range(n_pools):
            pools.append(make(size, seed=config.seed + learners.envs.start + k * size, n_workers=n_workers, **options))
    except BaseException:  # a pool that cannot start: the others stop too
        for pool in pools:
            pool.close()
        raise
    return pools


def env_placement(pools: Sequence[GamePool], learners: Learners | None = None) -> tuple[dict[str, int], str]:
    """Where the envs of `pools` (of all `learners` where Ray Train placed them) run now: progress.csv's columns
    ``env_nodes`` and ``env_workers`` (worker processes or Ray actors), and a line for the log naming them."""
    n_envs = sum(pool.num_envs for pool in pools)
    if learners is not None and learners.on_ray_train:
        import ray

        workers = sum(pool.n_workers for pool in pools)
        places = learners.gather([(ray.get_runtime_context().get_node_id(), workers)])
        n_nodes, workers = len({node for node, _ in places}), sum(count for _, count in places)
        line = f"envs: {learners.n_envs} in {workers} worker processes of {learners.count} learners on {n_nodes} node"
        return {"env_nodes": n_nodes, "env_workers": workers}, line + "s" * (n_nodes > 1)
    if not isinstance(pools[0], RayGamePool):
        workers = sum(pool.n_workers for pool in pools)
        return {"env_nodes": 1, "env_workers": workers}, f"envs: {n_envs} in {workers} worker processes on this machine"
    actors = [place for pool in pools if isinstance(pool, RayGamePool) for place in pool.placement()]
    nodes: dict[tuple[str, str], list[int]] = {}
    for node, address, env_ids in actors:
        nodes.setdefault((node, address), []).extend(env_ids)
    where = "; ".join(f"node {node:.8} at {address}: {len(ids)} envs" for (node, address), ids in nodes.items())
    line = f"envs: {n_envs} in {len(actors)} Ray actors on {len(nodes)} node{'s' * (len(nodes) > 1)} ({where})"
    return {"env_nodes": len(nodes), "env_workers": len(actors)}, line


def progress_bar(total_frames: int, frames: int, shown: bool = True) -> tqdm:
    """The bar a run shows (hidden unless `shown`): emulator frames done of `total_frames`, from `frames` on."""
    return tqdm(
        total=total_frames, initial=frames, unit="frame", unit_scale=True, dynamic_ncols=True, disable=not shown
    )


# --- logging --------------------------------------------------------------------------------------------


class RunLog:
    """progress.csv (and TensorBoard when installed), and the whole games so far. Its columns are `GAME_FIELDS` and
    the trainer's `update_fields`: a game's row fills frames, game_return and game_length, an update's the others."""

    GAME_FIELDS = ("frames", "seconds", "game_return", "game_length")

    def __init__(self, run_dir: Path, update_fields: Sequence[str], resumed_at: int | None = None) -> None:
        """A new progress.csv in `run_dir`; or, for a run resumed from its checkpoint at `resumed_at` frames, the
        existing one without the rows logged after that checkpoint (the resumed run plays those frames again)."""
        self.path = run_dir / "progress.csv"
        self.fields = (*self.GAME_FIELDS, *update_fields)
        rows = []
        if resumed_at is not None and self.path.exists():
            with self.path.open() as file:
                rows = [row for row in csv.DictReader(file) if int(row["frames"]) <= resumed_at]
        # (frames, whole-game return, length in agent steps) of every game logged
        self.games = [
            (int(row["frames"]), float(row["game_return"]), int(row["game_length"]))
            for row in rows
            if row["game_return"]
        ]
        # Written whole and then renamed, as the checkpoints are: a crash here leaves the old log, never half of it.
        with self.path.with_suffix(".tmp").open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=self.fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        self.path.with_suffix(".tmp").replace(self.path)
        self.file = self.path.open("a", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=self.fields)
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard: SummaryWriter | None = SummaryWriter(str(run_dir))
        except ImportError:
            self.tensorboard = None

    def game_ended(self, frames: int, game_return: float, length: int) -> None:
        """Log a whole game that ended at `frames` emulator frames: its return and its `length` in agent steps."""
        self.games.append((frames, game_return, length))
        # One CSV row per whole game, so the curve has every game; the update rows leave these columns empty.
        self.writer.writerow({"frames": frames, "game_return": game_return, "game_length": length})
        if self.tensorboard:
            self.tensorboard.add_scalar("charts/game_return", game_return, frames)

    def record_games(self, games: list[tuple[int, float, int]]) -> None:
        """Log `games`, as `whole_games` lists them."""
        for game in games:
            self.game_ended(*game)

    def update(self, frames: int, seconds: float, stats: dict[str, float | str]) -> None:
        """Log the `stats` of an update (`update_fields`) at `frames` emulator frames, `seconds` into the run."""
        self.writer.writerow({"frames": frames, "seconds": f"{seconds:.1f}", **stats})
        self.file.flush()
        if self.tensorboard:
            for name, value in stats.items():
                if not isinstance(value, str):
                    self.tensorboard.add_scalar(f"losses/{name}", value, frames)

    def recent_return(self, games: int = 20) -> float:
        """The mean return of the last `games` whole games; NaN before the first."""
        return float(np.mean([r for _, r, _ in self.games[-games:]])) if self.games else float("nan")

    def close(self) -> None:
        """Flush and close progress.csv (and TensorBoard's files)."""
        self.file.close()
        if self.tensorboard:
            self.tensorboard.close()


def whole_games(info: dict, frames: int) -> list[tuple[int, float, int]]:
    """(`frames`, return, length in agent steps) of each whole game (unclipped, all lives) a step's `info` ended."""
    if "game" not in info:
        return []
    return [(frames, float(info["game"]["r"][k]), int(info["game"]["l"][k])) for k in np.flatnonzero(info["_game"])]


def torch_generators(device: torch.device) -> dict[str, torch.Tensor]:
    """The states of torch's random generators, for a checkpoint: the CPU's and, on a CUDA `device`, that device's."""
    states = {"torch_rng": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda_rng"] = torch.cuda.get_rng_state(device)
    return states


def restore_torch_generators(saved: dict, device: torch.device) -> None:
    """Put torch's random generators back as `torch_generators` saved them in `saved`, a checkpoint loaded with any
    ``map_location`` (the setters take CPU tensors only); one made on the CPU leaves a CUDA generator as seeded."""
    torch.set_rng_state(saved["torch_rng"].cpu())
    if device.type == "cuda" and "cuda_rng" in saved:
        torch.cuda.set_rng_state(saved["cuda_rng"].cpu(), device)


def save_checkpoint(path: Path, saved: dict) -> None:
    """`torch.save` `saved` to `path` atomically: a crash mid-write never leaves a half-written checkpoint."""
    torch.save(saved, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)


# --- results: the learning curve and a video of one game ------------------------------------------------


def plot_learning_curve(games: list[tuple[int, float, int]], path: Path, title: str) -> None:
    """Every whole game's return against emulator frames, with a moving mean, saved as a PNG titled `title`."""
    # matplotlib's Figure, not pyplot: no backend chosen, no global state (a notebook's plots stay as they were).
    from matplotlib.figure import Figure
    from matplotlib.ticker import EngFormatter

    figure = Figure(figsize=(8, 4.5))
    axes = figure.subplots()
    if games:
        frames, returns = np.array([g[0] for g in games]), np.array([g[1] for g in games])
        axes.plot(frames, returns, ".", alpha=0.3, label="one game")
        window = max(1, min(20, len(returns) // 5))
        smooth = np.convolve(returns, np.ones(window) / window, mode="valid")
        axes.plot(frames[window - 1 :], smooth, label=f"mean of {window} games")
        axes.legend()
    axes.set(xlabel="emulator frames", ylabel="whole-game return (unclipped)", title=title)
    axes.xaxis.set_major_formatter(EngFormatter(sep=""))  # 2M, not 0.2 under a 1e7
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's thread count `count` within the block, and the caller's again after it (a notebook's torch as it was)."""
    callers = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(callers)


def record_game(policy: Callable[[np.ndarray], int], config: RunConfig, path: Path) -> tuple[float, int]:
    """Play one whole game with `policy` (the game options of `config`, seeded ``config.seed + 10_000``, a game
    not trained on), write it as a colour .mp4 at `path` (a frame per agent step), and return its (unclipped) score
    and its length in agent steps."""
    game = Game(seed=config.seed + 10_000, **game_options(config))
    with torch_threads(available_cores()):
        return play_game(game, policy, path)


def torch_file(path: str | Path, what: str) -> Any:
    """What `torch.save` wrote at `path`, loaded on the CPU; a `ValueError` saying "cannot read" for a file that
    cannot be read, or that `path` is not `what`, and why, for one torch cannot load."""
    try:
        return torch.load(path, map_location="cpu")
    except OSError as error:  # a file that cannot be read (missing, a folder)
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None
    except Exception as error:  # of many kinds: another format, a truncated copy
        # (torch's text on a pickle it refuses advises loading it unsafely: not for this reader)
        first_line = str(error).split("\n")[0]
        unpickled = isinstance(error, pickle.UnpicklingError)
        reason = "not a file torch.save wrote" if unpickled else f"{type(error).__name__}: {first_line}"
        raise ValueError(f"{path} is not {what} ({reason})") from None


def load_checkpoint(checkpoint: str | Path) -> dict:
    """A checkpoint of either trainer loaded on the CPU, ``"algo"`` naming it ("ppo", "dqn"); else a `ValueError`."""
    if Path(checkpoint).suffix == ".npz":  # a DQN run's replay.npz, say, which torch would call a bad archive
        beside = Path(checkpoint).with_name("checkpoint.pt")
        named = f": the run's checkpoint is {beside}" if beside.is_file() else ""
        raise ValueError(f"{checkpoint} is a numpy archive (a DQN run's replay memory?), not a checkpoint{named}")
    saved = torch_file(checkpoint, "a checkpoint.pt of atari-game train")
    if not isinstance(saved, dict) or "config" not in saved:
        raise ValueError(f"{checkpoint} is not a checkpoint.pt of atari-game train (it holds no config)")
    return {"algo": "ppo", **saved}  # PPO's first checkpoints did not name their trainer


def trained_policy(checkpoint: str | Path, game: str | None = None) -> tuple[Callable[[np.ndarray], int], dict]:
    """For `atari-game play --checkpoint`: the CPU policy of a checkpoint of either trainer, and its game options;
    a `ValueError` for a file that is no checkpoint, or one trained on another `game` than the one named (None: the
    checkpoint's own)."""
    saved = load_checkpoint(checkpoint)
    policy, config = importlib.import_module(f"atari_game.{saved['algo']}").checkpoint_policy(saved)
    if game is not None and resolve_game(game) != resolve_game(config.game):
        raise ValueError(f"{checkpoint} was trained on {config.game}, not {game}")
    return policy, game_options(config)
