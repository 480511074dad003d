"""What the pool, Ray and trainer tests share: their options, tiny trainer configs, and what a pool's processes
leave behind, read from /proc (Linux).

The test files import these plain functions and constants with ``from support import ...`` (pytest puts tests/ on
sys.path, as for reference.py); the fixtures they share (`pool_factory`, the Ray `cluster`, `torch_threads`) are in
conftest.py.
"""

import contextlib
import ipaddress
import os
import re
import time

import numpy as np

from atari_game.replay import FrameReplay

# A pool of Breakout as the Atari benchmarks play it: FIRE after each reset, up to 30 no-ops.
OPTIONS = {"game": "Breakout", "fire_reset": True, "noop_max": 30}

# One node of the tests' two-node Ray clusters on this machine (conftest.py's `cluster`), on 127.0.0.1 only.
NODE = {"num_cpus": 2, "object_store_memory": 100 << 20, "node_ip_address": "127.0.0.1"}


def worker_pids(pool) -> list[int]:
    """The pids of a local `GamePool`'s worker processes, in the order of its workers (worker i plays its i-th block
    of envs)."""
    return [worker.process.pid for worker in pool._workers]


def gone(pid: int) -> bool:
    """Whether process `pid` has ended: a zombie its parent has not reaped yet, or no process at all (reaped before
    /proc/PID/stat is opened, or between the open and the read)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1].startswith("Z")
    except (FileNotFoundError, ProcessLookupError):
        return True


def all_gone(pids: list[int], within: float = 5.0) -> bool:
    """Whether every process of `pids` has ended (`gone`) within `within` seconds, checked every 50 ms."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(gone(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


def children(pid: int | None = None) -> list[int]:
    """The pids of the live (not `gone`) child processes of process `pid` (this one by default), those of all its
    threads; [] once `pid` has ended."""
    pid = os.getpid() if pid is None else pid
    found = []
    with contextlib.suppress(FileNotFoundError):  # ended meanwhile: it has none
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as listing:
                found += [int(child) for child in listing.read().split()]
    return [child for child in found if not gone(child)]


def descendants(pid: int) -> list[int]:
    """The live processes that process `pid` started, and theirs, each before its own children (a pool's fork server
    before the workers it forked)."""
    return [process for child in children(pid) for process in (child, *descendants(child))]


def open_descriptors(pid: int | str = "self") -> dict[str, str]:
    """Process `pid`'s open descriptors (this process's by default): by number, what /proc says each is (a path,
    ``/memfd:NAME (deleted)``, ``pipe:[INODE]``, ...); {} once the process has ended. This process's listing counts
    the descriptor of the listing itself, closed by the time it is read, as nothing."""
    links = {}
    with contextlib.suppress(OSError):  # ended meanwhile
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):  # closed meanwhile
                links[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
    return links


def mapped_and_open(pid: int | str = "self") -> set[str]:
    """What process `pid` (this one by default) has mapped into its memory or open, as /proc names it: the paths of
    /proc/PID/maps (a library, ``/memfd:NAME (deleted)``, ``/dev/shm/NAME``, ...) and its `open_descriptors`' links;
    an empty set once the process has ended."""
    paths = set(open_descriptors(pid).values())
    with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:  # ended meanwhile
        paths.update(fields[5].strip() for line in maps if len(fields := line.split(maxsplit=5)) == 6)
    return paths


def held_segments(*pids: int) -> set[str]:
    """The names of the pool segments (``atari_game_<creator's pid>_<8 hex digits>``) that the processes `pids`,
    this one if none is given, have open or mapped. A pool's memory is an anonymous file, which /proc names
    ``/memfd:NAME`` (or, on a machine without memfd, the deleted ``/dev/shm/NAME_xxxx``): it has no name in
    /dev/shm to list."""
    paths = set().union(*map(mapped_and_open, pids or ["self"]))
    return set(re.findall(r"atari_game_\d+_[0-9a-f]{8}", "\n".join(paths)))


def held_here(segment: str) -> bool:
    """Whether this process still has the pool segment named `segment` open or mapped."""
    return segment in held_segments()


# Trainer configs that train in seconds, as keyword arguments of `ppo.Config` and `dqn.Config`. (fp32 named: auto's
# probe in each of two runs could choose differently on a busy machine.)
PPO_TINY = {"num_envs": 4, "n_steps": 16, "n_minibatches": 2, "n_epochs": 2, "total_frames": 512, "video": False}
PPO_TINY |= {"precision": "fp32"}
DQN_TINY = {"num_envs": 4, "batch_size": 8, "buffer_size": 1000, "learning_starts": 100, "total_frames": 1600}
DQN_TINY |= {"target_network_frequency": 50, "log_every": 400, "checkpoint_every": 800, "exploration_fraction": 1}
DQN_TINY |= {"video": False, "precision": "fp32"}


def filled_buffer(config, seed: int) -> FrameReplay:
    """A memory of 2 envs with 60 steps of random frames, actions (of 4) and rewards stored, episodes ending now and
    then, with the n-step returns and priorities of a DQN or IQN `config`; its sampling generator seeded `seed`."""
    rng = np.random.default_rng(0)
    buffer = FrameReplay(256, 2, (4, 84, 84), n_step=config.n_step, prioritized=config.prioritized, seed=seed)
    obs = rng.integers(0, 255, (2, 4, 84, 84), dtype=np.uint8)
    for step in range(60):
        next_obs = np.concatenate([obs[:, 1:], rng.integers(0, 255, (2, 1, 84, 84), dtype=np.uint8)], axis=1)
        terminated, truncated = np.array([step % 17 == 16, step % 23 == 22]), np.zeros(2, bool)
        buffer.add(obs, rng.integers(0, 4, 2), rng.choice([-1.0, 0.0, 1.0], 2), next_obs, terminated, truncated)
        obs = next_obs
    return buffer


def command_line(config: dict) -> list[str]:
    """A config's fields (`PPO_TINY`, ...) as a trainer's command-line options, ``--num-envs=4`` and so on, less
    `video`: a command says ``--no-video``."""
    return [f"--{name.replace('_', '-')}={value}" for name, value in config.items() if name != "video"]


def loopback(ip: str) -> bool:
    """Whether the IP address `ip` (v4 or v6) is this machine's own, ``::ffff:127.0.0.1`` too."""
    address = ipaddress.ip_address(ip)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback
