"""The trainers' network trunk and where and in what precision it computes: the Nature-DQN CNN, the device,
fp32 or bfloat16, and torch's threads.
"""

from __future__ import annotations

import contextlib
import copy
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

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


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's thread count `count` within the block, and the caller's again after it (a notebook's torch as it was)."""
    callers = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(callers)
