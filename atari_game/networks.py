"""The trainers' network trunks and where and in what precision they compute: the Nature-DQN CNN, the IMPALA CNN,
the device, fp32 or bfloat16, and torch's threads.
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

    #: The width of the features it hands on.
    features = 512

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``uint8`` observations ``(batch, 4, 84, 84)`` in, float features ``(batch, 512)`` out."""
        return scaled_forward(super().forward, obs, self.bf16)


def scaled_forward(layers: Callable[[torch.Tensor], torch.Tensor], obs: torch.Tensor, bf16: bool) -> torch.Tensor:
    """A trunk's `layers` on ``uint8`` observations `obs`: reordered channels-last while ``uint8`` (4x less memory to
    move), scaled to [0, 1], computed under bfloat16 autocast with `bf16`, and handed back as ``float32``."""
    x = obs.contiguous(memory_format=torch.channels_last).float().div_(255.0)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        return layers(x).float()


class ResidualBlock(nn.Module):
    """IMPALA's residual block: ``x + conv(relu(conv(relu(x))))``, two 3x3 convolutions that keep the shape."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Features ``(batch, channels, height, width)`` in, the same shape out."""
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ImpalaCNN(nn.Module):
    """The IMPALA CNN trunk (Espeholt et al. 2018, its "deep" network, as Dopamine's and Procgen's baselines use it):
    ``uint8`` ``(batch, 4, 84, 84)`` in, float ``(batch, 256)`` out.

    Three stages of a 3x3 convolution (16, 32, 32 channels), a 3x3 max-pool of stride 2 and two `ResidualBlock`s;
    then a ReLU and a dense layer of 256. About 7x the Nature CNN's multiply-adds (66M against 9.4M an observation),
    for a network that learns more from the same frames (the Atari results of the IQN and Rainbow IMPALA variants).
    Observations scaled, laid out and computed (``bf16``) as in `NatureCNN`; PyTorch's default initialisation."""

    #: The width of the features it hands on.
    features = 256

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 4
        for width in (16, 32, 32):
            layers += [nn.Conv2d(channels, width, 3, padding=1), nn.MaxPool2d(3, stride=2, padding=1)]
            layers += [ResidualBlock(width), ResidualBlock(width)]
            channels = width
        # 84 -> 42 -> 21 -> 11 pixels a side after the three pools.
        layers += [nn.ReLU(), nn.Flatten(), nn.Linear(32 * 11 * 11, self.features), nn.ReLU()]
        self.layers = nn.Sequential(*layers)
        self.bf16 = False

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``uint8`` observations ``(batch, 4, 84, 84)`` in, float features ``(batch, 256)`` out."""
        return scaled_forward(self.layers, obs, self.bf16)


#: A trunk: `NatureCNN` or `ImpalaCNN` (each with ``features`` and ``bf16``).
Trunk = NatureCNN | ImpalaCNN

#: The trunks by the name a trainer's ``--network`` gives.
TRUNKS: dict[str, Callable[[], Trunk]] = {"nature": NatureCNN, "impala": ImpalaCNN}


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


def probe_ms(trunk: Trunk, device: torch.device, bf16: bool, batch: int = 32, repeats: int = 5) -> float:
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


def choose_precision(name: str, trunk: Trunk, device: torch.device, resumed: bool = False) -> tuple[str, str]:
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
