"""The checks of arguments and settings, each written once: a check names what it checks and says what is valid.
The API's arguments raise `TypeError` for a value of the wrong type, `ValueError` for one out of range; a trainer's
config fields have rules, which its command line reports as usage errors (`broken_rule`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np


def check_int(name: str, value: Any, low: int) -> int:
    """`value` as an int: an integer (Python's or numpy's, not a bool) >= `low`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= {low}, got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value}")
    return int(value)


def check_count(name: str, value: Any, low: int, high: int) -> int:
    """`value` as an int: an integer (Python's or numpy's, not a bool) in [`low`, `high`]."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer in [{low}, {high}], got {type(value).__name__} {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


def check_choice(name: str, value: Any, choices: tuple[Any, ...]) -> Any:
    """`value`, one of `choices`; a `ValueError` naming them for any other value."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """`value` as a bool: Python's or numpy's."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def check_number(name: str, value: Any, low: float, high: float, what: str = "a number") -> float:
    """`value` as a float: a real number (not a bool, not NaN) in [`low`, `high`]; `what` names it ("a probability")."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be {what} in [{low}, {high}], got {type(value).__name__} {value!r}")
    if not low <= value <= high:  # also refuses NaN
        raise ValueError(f"{name} must be {what} in [{low}, {high}], got {value}")
    return float(value)


def check_agent_name(name: Any) -> str:
    """`name` as an evaluation records an agent: without surrounding spaces; a `ValueError` for one that is not a
    non-empty `str`, or holds a ``|`` or a line break (which would break the tables of ``atari-game report``)."""
    if not isinstance(name, str) or not name.strip() or any(mark in name for mark in "|\n\r"):
        raise ValueError(f"algorithm must be a non-empty name (str) without '|' or line breaks, got {name!r}")
    return name.strip()


def check_array(name: str, value: Any, shape: tuple[int, ...], kinds: str, what: str) -> np.ndarray:
    """`value` as an array of `shape` whose dtype kind is one of `kinds` (numpy's letters); `what` says what is
    valid in the message ("bools, one per env")."""
    array = np.asarray(value)
    if array.shape != shape:
        raise ValueError(f"{name} must have shape {shape} ({what}), got shape {array.shape}")
    if array.dtype.kind not in kinds:
        raise TypeError(f"{name} must be {what}, got dtype {array.dtype}")
    return array


#: A rule of a config field: (test, what the valid values are). NaN fails every test.
Rule = tuple[Callable[[Any], bool], str]


def at_least(low: float) -> Rule:
    """A rule for `broken_rule`: a value >= `low`, and how to say so."""
    return (lambda value: value >= low), f"at least {low}"


def between(low: float, high: float) -> Rule:
    """A rule for `broken_rule`: a value in [`low`, `high`], and how to say so."""
    return (lambda value: low <= value <= high), f"in [{low}, {high}]"


#: A rule for `broken_rule`: a finite number > 0.
POSITIVE: Rule = ((lambda value: 0 < value < float("inf")), "a number > 0")


def flag_of(name: str) -> str:
    """The command-line flag of the config field `name`: ``--total-frames`` for ``total_frames``."""
    return "--" + name.replace("_", "-")


def broken_rule(config: Any, rules: dict[str, Rule]) -> str:
    """The usage error of the first field of `config` that breaks its rule in `rules` ("" if none does)."""
    for name, (valid, what) in rules.items():
        value = getattr(config, name)
        if not valid(value):
            return f"{flag_of(name)} must be {what}, got {value}"
    return ""


def renamed(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn (`FutureWarning`, shown to users by default) that the argument `old` is spelt `new` now: the old spelling
    is taken until 0.3. `stacklevel` points the warning at the caller's line (3: the caller of the function calling
    this one)."""
    warnings.warn(f"{old} is now {new} ({old} is taken until 0.3)", FutureWarning, stacklevel=stacklevel)


def renamed_option(options: dict[str, Any], old: str, new: str, value: Any, stacklevel: int = 4) -> Any:
    """The argument `new` given as `value`, or under its old name `old` among the keywords `options` (taken out of
    them, with `renamed`'s warning, `stacklevel` for it); a `TypeError` where both are given."""
    if old not in options:
        return value
    renamed(old, new, stacklevel=stacklevel)
    if value is not None:
        raise TypeError(f"{new} and {old} (its old name) are both given: give {new} alone")
    return options.pop(old)
