"""How to install one of pyproject.toml's optional extras: the command every "not installed" error ends with.

atari_game installs from its clone (``pip install -e .``, as the getting-started page says), not from PyPI, so the
command is run in the clone; the extras whose packages import torch install it first, exactly as ``pip install
torch==2.13.0`` (a looser spec lets pip pull gigabytes of CUDA packages).
"""

from __future__ import annotations

#: The extras whose packages import torch: the trainers and Stable-Baselines3.
TORCH_EXTRAS = ("train", "sb3")


def install_command(extra: str) -> str:
    """The command that installs the extra `extra` (``"ray"``, ``"train"``, ...), and where to run it."""
    command = f'pip install -e ".[{extra}]"'
    if extra in TORCH_EXTRAS:
        command = f"pip install torch==2.13.0 && {command}"
    return f"{command} (in the atari_game clone)"
