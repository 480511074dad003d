"""A run's checkpoint.pt: saved atomically, with torch's generators, and loaded with errors that say what the file
is.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch


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


#: The config fields renamed since a checkpoint may have been saved, by their old names.
RENAMED_FIELDS = {"n_envs": "num_envs"}


def load_checkpoint(checkpoint: str | Path) -> dict:
    """A checkpoint of any trainer loaded on the CPU, ``"algorithm"`` naming it ("ppo", "dqn"); else a `ValueError`.
    The checkpoints of earlier releases name it ``"algo"`` (or, PPO's first ones, not at all), and their configs may
    hold fields since renamed (`RENAMED_FIELDS`): read with today's names."""
    if Path(checkpoint).suffix == ".npz":  # a DQN run's replay.npz, say, which torch would call a bad archive
        beside = Path(checkpoint).with_name("checkpoint.pt")
        named = f": the run's checkpoint is {beside}" if beside.is_file() else ""
        raise ValueError(f"{checkpoint} is a numpy archive (a DQN run's replay memory?), not a checkpoint{named}")
    saved = torch_file(checkpoint, "a checkpoint.pt of atari-game train")
    if not isinstance(saved, dict) or "config" not in saved:
        raise ValueError(f"{checkpoint} is not a checkpoint.pt of atari-game train (it holds no config)")
    # (PPO's first checkpoints did not name their trainer; until 0.2 the key was "algo")
    config = {RENAMED_FIELDS.get(name, name): value for name, value in saved["config"].items()}
    return {"algorithm": saved.pop("algo", "ppo"), **saved, "config": config}
