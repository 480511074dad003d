"""A GamePool whose shared memory does not fit in /dev/shm fails at once, saying why; one that fits works.

Each case runs a script in a private mount namespace whose /dev/shm is a 4 MiB tmpfs (as in a container
started with a small ``--shm-size``); without the reservation, the pool that does not fit would start and
its processes die of SIGBUS later, when a page of the segment cannot be had.
"""

import functools
import subprocess
import sys
import textwrap

import pytest

from atari_game.game import GameOptions
from atari_game.segment import layout, padded

SCRIPT = textwrap.dedent(
    """
    import multiprocessing, os
    from atari_game import GameOptions, GamePool
    from atari_game.segment import create, layout

    if __name__ == "__main__":
        # 5.4 MiB of memory in an anonymous file (memfd): /dev/shm's size is no limit to it.
        segment = create(layout(200, GameOptions("Pong"), same_step=False), 200)
        print("memfd", segment.size, flush=True)
        segment.close()
        del os.memfd_create  # as on macOS, or where a sandbox refuses it: a file in /dev/shm, whose size counts
        with GamePool(8, "Pong", n_workers=2) as pool:  # 0.8 MiB: fits
            pool.reset(seed=0)
            print("fits", pool.step(pool.action_space.sample())[0].shape, flush=True)
        with GamePool(64, "Pong", n_workers=2) as pool:  # 1.8 MiB: fits
            pool.reset(seed=0)
            print("fits", pool.step(pool.action_space.sample())[0].shape, flush=True)
        try:
            GamePool(200, "Pong", n_workers=1)  # 5.4 MiB: does not
        finally:
            left = [name for name in os.listdir("/dev/shm") if name.startswith("atari_game_")]
            print("left", left, len(multiprocessing.active_children()), flush=True)
    """
)


@functools.cache
def small_shm_command() -> list[str]:
    """The command that runs a shell command with a 4 MiB /dev/shm of its own; skips where it is not permitted."""
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
    mount = "mount -t tmpfs -o size=4M tmpfs /dev/shm"
    try:
        probe = subprocess.run([*command, mount], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        pytest.skip("no unshare command here: cannot give a test its own /dev/shm")
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private /dev/shm here (needs root or CAP_SYS_ADMIN): {probe.stderr.strip()}")
    return [*command, f"{mount} && exec {sys.executable} script.py"]


@pytest.mark.slow
def test_a_pool_that_does_not_fit_in_dev_shm_fails_at_once_saying_why(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    result = subprocess.run(small_shm_command(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    arrays = layout(200, GameOptions(game="Pong"), same_step=False)
    needed = sum(padded(shape, dtype) for shape, dtype in arrays.values())
    # By hand, each array in whole 64-byte lines: the observations 200 x 4 x 84 x 84 bytes, six 8-byte columns
    # (actions, rewards, the episode's and the game's return and length), four bool columns (256 bytes each), lives
    # (int32: 800 bytes in 832), and the commands (200 x 8 int64).
    assert needed == 200 * 4 * 84 * 84 + 6 * 1600 + 4 * 256 + 832 + 200 * 8 * 8
    # An anonymous memory file does not count against /dev/shm.
    assert result.stdout.splitlines()[0] == f"memfd {needed}", result.stderr
    # A file in /dev/shm does: the pools that fit work there.
    assert result.stdout.splitlines()[1] == "fits (8, 4, 84, 84)"
    assert result.stdout.splitlines()[2] == "fits (64, 4, 84, 84)"
    # The one that does not fit is refused before any worker starts, with nothing left behind.
    assert result.stdout.splitlines()[3] == "left [] 0"
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"OSError: [Errno 28] no room in shared memory (/dev/shm) for the pool's 200 envs: they need {needed:,} bytes "
        f"({needed / 2**20:.1f} MiB), {needed // 200:,} bytes each, and 4,194,304 bytes (4.0 MiB) are free. Give "
        "/dev/shm more room (Docker: docker run --shm-size=2g ...; its default is 64 MB) or use fewer envs"
    )
