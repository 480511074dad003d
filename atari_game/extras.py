"""How to install one of pyproject.toml's optional extras: the command every "not installed" error ends with.

The command names the installed package, ``pip install "atari_game[EXTRA]"``, not the clone: pip sees atari_game
already installed, from a wheel or editable from a clone (``pip install -e .``, as the getting-started page says),
keeps it as it is and adds the extra's packages, so the one command serves both, run anywhere (``pip install -e
".[EXTRA]"`` needs the clone's folder, which a wheel's user does not have). The extras whose packages import torch
install it first, exactly as ``pip install torch==2.13.0`` (a looser spec lets pip pull gigabytes of CUDA packages).
"""

from __future__ import annotations

#: The extras whose packages import torch: the trainers and Stable-Baselines3.
TORCH_EXTRAS = ("train", "sb3")


def install_command(extra: str) -> str:
    """The command that adds the extra `extra` (``"ray"``, ``"train"``, ...) to an installed atari_game."""
    command = f'pip install "atari_game[{extra}]"'
    if extra in TORCH_EXTRAS:
        command = f"pip install torch==2.13.0 && {command}"
    return command
