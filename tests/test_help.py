"""Help on every flag (a description, its default, its choices), counts written as 1e6, and the hints for options
under the names other libraries give them."""

import argparse
import dataclasses
import importlib
import re
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from atari_game import Game, GamePool, arguments, benchmark, cli, dqn, iqn, ppo
from atari_game.game import FOREIGN_OPTIONS, GameOptions
from atari_game.run_config import config_parser, field_docs

ROOT = Path(__file__).parent.parent


def script_parsers() -> dict[str, argparse.ArgumentParser]:
    """The parser of every script of examples/ and benchmarks/ that has a command line of its own, by its path."""
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmarks import their common module
    parsers = {}
    for path in sorted([*ROOT.glob("examples/*.py"), *ROOT.glob("benchmarks/*.py")]):
        if "argparse" not in path.read_text():
            continue
        spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up
        spec.loader.exec_module(module)
        parsers[str(path.relative_to(ROOT))] = module.build_parser()
    return parsers


def all_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command line: atari-game and its commands, every trainer (examples/ppo.py, dqn.py and iqn.py run them too),
    and the scripts'."""
    top = cli.build_parser()
    commands = next(action for action in top._actions if isinstance(action, argparse._SubParsersAction))
    return {
        "atari-game": top,
        **{f"atari-game {name}": parser for name, parser in commands.choices.items() if name not in cli.FORWARDED},
        "atari-game bench": benchmark.build_parser(),
        "atari-game train": cli.trainer_parser(),
        "atari-game train --algorithm ppo": config_parser(ppo.Config, ppo.__doc__),
        "atari-game train --algorithm dqn": config_parser(dqn.Config, dqn.__doc__),
        "atari-game train --algorithm iqn": config_parser(iqn.Config, iqn.__doc__),
        **script_parsers(),
    }


def shown_as(value) -> list[str]:
    """The ways a help may write a default."""
    if isinstance(value, bool):
        return [str(value), "on" if value else "off"]
    if isinstance(value, list):
        return [" ".join(map(str, value)), "all"]
    if isinstance(value, int):
        return [str(value), f"{value:_}", f"{value:,}"]
    return [str(value)]


def test_every_flag_has_a_description_its_default_and_its_choices():
    parsers = all_parsers()
    # The scripts with a command line of their own: a walk that found none would check nothing.
    assert {"examples/demo.py", "benchmarks/trainers.py", "benchmarks/step_costs.py"} <= set(parsers)
    flags = 0
    for name, parser in parsers.items():
        whole_help = " ".join(parser.format_help().split())  # also fails on a help with a stray %
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            where = f"{name} {'/'.join(action.option_strings) or action.dest}"
            about = action.help % {**vars(action), "prog": parser.prog} if action.help else ""
            description = re.sub(r"\((default|required)\b.*", "", about).strip(" .")
            assert description, f"{where} has no description"
            if isinstance(action, argparse._SubParsersAction):
                assert all(choice.help for choice in action._choices_actions), f"{where}: a command without help"
                continue
            if not action.option_strings:  # a positional argument: given always
                continue
            flags += 1
            if action.required:
                assert "(required)" in about, where
                continue
            assert "(default: " in about, f"{where}'s help does not give its default: {about!r}"
            if action.default not in (None, argparse.SUPPRESS):
                shown = about.split("(default: ")[1]
                assert any(shown.startswith(text) for text in shown_as(action.default)), (where, about)
            for choice in action.choices or []:
                assert str(choice) in whole_help, f"{where}: the choice {choice!r} is not shown"
    assert flags > 100


def test_a_trainer_flag_is_documented_once_in_its_config_field():
    for config in (ppo.Config, dqn.Config, iqn.Config):
        docs = field_docs(config)
        assert set(docs) == {field.name for field in dataclasses.fields(config)}  # every field, nothing else
        # (an old spelling, hidden from --help, shares its field's dest)
        actions = config_parser(config, "x")._actions
        helps = {action.dest: action.help for action in actions if action.help != argparse.SUPPRESS}
        for field in dataclasses.fields(config):
            first_paragraph = " ".join(docs[field.name].split("\n\n")[0].split()).replace("``", "")
            assert helps[field.name].startswith(first_paragraph.replace("%", "%%") + " (default: ")
    # The default as the flag takes it; choices from the game's own list; the docstring's second paragraph stays out.
    ppo_help = " ".join(config_parser(ppo.Config, ppo.__doc__).format_help().split())
    assert "rounded down to whole updates (PPO) or whole steps of every env (DQN). (default: 10_000_000)" in ppo_help
    assert "--life-loss {reset,terminal,ignore}" in ppo_help and "(default: terminal)" in ppo_help
    dqn_help = " ".join(config_parser(dqn.Config, dqn.__doc__).format_help().split())
    assert (
        "--torch-threads INT Torch's threads, for inference and learning alike; 0: one per available core." in dqn_help
    )
    assert "spin-wait" not in dqn_help and "--buffer-size INT Transitions the replay memory holds" in dqn_help
    assert "--double, --no-double Double DQN's target" in dqn_help and "(default: False)" in dqn_help


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e6", 1_000_000), ("10_000_000", 10_000_000), ("1.5e3", 1500), ("2.5E6", 2_500_000), ("1000.0", 1000),
     ("-1", -1), ("123456789012345678", 123456789012345678)],
)  # fmt: skip
def test_an_integer_is_read_exactly_however_it_is_written(text, value):
    assert arguments.integer(text) == value and type(arguments.integer(text)) is int


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1e6.5", "expected an integer (1000000, 1_000_000 or 1e6), got '1e6.5'"),
        ("ten", "expected an integer (1000000, 1_000_000 or 1e6), got 'ten'"),
        ("0.5", "expected a whole number (1000000, 1_000_000 or 1e6), got '0.5'"),
        ("1e-3", "expected a whole number (1000000, 1_000_000 or 1e6), got '1e-3'"),
        ("nan", "expected a whole number (1000000, 1_000_000 or 1e6), got 'nan'"),
        ("1e999999999", "'1e999999999' is too large: at most 1e18"),
    ],
)
def test_a_count_that_is_no_whole_number_is_refused(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        arguments.integer(text)


def test_counts_and_seeds_have_their_lower_bounds():
    assert arguments.count("1") == 1 and arguments.seed("0") == 0 and arguments.seed("1e3") == 1000
    with pytest.raises(argparse.ArgumentTypeError, match="must be at least 1, got '0'"):
        arguments.count("0")
    with pytest.raises(argparse.ArgumentTypeError, match="the seed must be an integer >= 0, got '-1'"):
        arguments.seed("-1")


def test_every_trainer_count_takes_1e6():
    for config in (ppo.Config, dqn.Config, iqn.Config):
        counts = [field.name for field in dataclasses.fields(config) if field.type == "int"]
        given = [word for name in counts for word in (f"--{name.replace('_', '-')}", "1e6")]
        args = vars(config_parser(config, "x").parse_args(given))
        assert args == dict.fromkeys(counts, 1_000_000)


def test_options_under_other_libraries_names_say_what_to_write():
    with pytest.raises(TypeError, match=r"unknown game option 'repeat_action_probability': use sticky_actions \(the"):
        Game(repeat_action_probability=0.25)
    with pytest.raises(TypeError, match="'max_episode_steps': use max_episode_frames=frame_skip \\* steps \\(it count"):
        GamePool(2, max_episode_steps=1000)  # refused before any worker starts
    with pytest.raises(TypeError, match="'terminal_on_life_loss': use life_loss=\"terminal\""):
        gym.make("atari_game/Breakout-v0", terminal_on_life_loss=True)
    with pytest.raises(TypeError, match=r"'frameskip': use frame_skip \(emulator frames per agent step\); valid"):
        gym.make_vec("atari_game/Pong-v0", 2, frameskip=4)
    with pytest.raises(TypeError, match=r"unknown game option 'stackk' \(did you mean 'stack'\?\)"):
        Game(stackk=3)  # a name no library uses: the closest of ours
    # Each hint names an option of ours, for a name that is not one.
    ours = {field.name for field in dataclasses.fields(GameOptions)}
    for name, hint in FOREIGN_OPTIONS.items():
        assert name not in ours and re.match(r"\w+", hint).group() in ours, (name, hint)
