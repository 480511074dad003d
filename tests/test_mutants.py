"""Tests that kill the mutants benchmarks/mutation.py found surviving: each names the mutant (file, line as of its
run, the change) and checks the behaviour it broke against values worked out by hand."""

import numpy as np
import pytest

from atari_game import FrameReplay


def sliding_adds(buffer: FrameReplay, steps: int, seed: int = 0) -> None:
    """`steps` transitions into every env of `buffer`, each obs sliding on by one random frame (nothing ends)."""
    rng = np.random.default_rng(seed)
    shape = (buffer.num_envs, *buffer.observation_shape)
    obs = rng.integers(0, 256, shape, dtype=np.uint8)
    nothing = np.zeros(buffer.num_envs, bool)
    for _ in range(steps):
        frame = rng.integers(0, 256, (buffer.num_envs, 1, *shape[2:]), dtype=np.uint8)
        next_obs = np.concatenate([obs[:, 1:], frame], 1)
        buffer.add(obs, np.zeros(buffer.num_envs, int), np.zeros(buffer.num_envs), next_obs, nothing, nothing)
        obs = next_obs


@pytest.mark.parametrize(
    ("dtype", "wrong"),
    [(np.uint8, np.uint16), (np.uint8, np.uint32), (np.float32, np.float64), (np.float32, np.float16)],
)
@pytest.mark.parametrize("name", ["obs", "next_obs"])
def test_observations_of_the_right_kind_but_another_dtype_are_refused(dtype, wrong, name):
    # Mutant: replay.py:278, the loop that compares each observation's dtype with the buffer's made to iterate over
    # nothing. A uint16 array passes the kind check ("u") and would be stored as uint8, its values cut to 8 bits.
    buffer = FrameReplay(4, 1, (2, 2, 2), dtype=dtype)
    obs = np.zeros((1, 2, 2, 2), dtype)
    step = {"obs": obs, "next_obs": obs.copy()} | {name: np.full((1, 2, 2, 2), 300, wrong)}
    expected = f"{name} must be {np.dtype(dtype)} observations (stored exactly, never converted), got dtype"
    with pytest.raises(TypeError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        buffer.add(**step, actions=np.zeros(1, int), rewards=np.zeros(1), terminations=[False], truncations=[False])
    assert len(buffer) == 0


def test_prioritized_sampling_after_eviction_draws_the_transition_of_the_leaf_found():
    # Mutant: replay.py:425, ``oldest + (ring - oldest) % slots`` (the transition held in ring slot `ring`) with
    # ``-`` made ``>>``. It changes nothing while no transition was evicted (oldest 0), so the buffer here holds
    # 4 slots and got 7 transitions: transitions 3, 4, 5 and 6 are held (3 evicted), in ring slots 3, 0, 1, 2.
    buffer = FrameReplay(4, 1, (2, 2, 2), prioritized=True, alpha=1.0, seed=0)
    sliding_adds(buffer, 7)
    assert buffer.indices().tolist() == [3, 4, 5, 6]
    # Transition 5 (ring slot 1) takes all but 3e-12 of the priority: every draw finds its leaf.
    buffer.update_priorities(np.array([3, 4, 5, 6]), np.array([0.0, 0.0, 1e6, 0.0]))
    draws = np.concatenate([buffer.sample(4).indices for _ in range(8)])  # a batch is at most len(buffer)
    assert draws.tolist() == [5] * 32
