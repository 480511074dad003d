"""FrameReplay: every sample exact against a plain buffer of whole stacks, on real GamePools; n-step, priorities;
each with the frames stored as they are and compressed (`CODECS`)."""

import dataclasses
import math
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atari_game import FrameReplay, GamePool, replay
from atari_game.replay import FRAME_MARGIN

# Each exactness test runs with every compression. The dictionary is trained after 16 frames here, not 4,096, so
# that the tests go through all three states of the compressed frames: held raw, then compressed with a trained
# dictionary (real frames) or, where the frames are too few or too small to train one, with plain zstd.
CODECS = pytest.mark.parametrize("compression", replay.COMPRESSIONS)


@pytest.fixture(autouse=True)
def dictionary_after_16_frames(monkeypatch):
    monkeypatch.setattr(replay, "DICTIONARY_FRAMES", 16)


class PlainReplay:
    """The reference: every transition's whole obs and next_obs, by transition id (``t * num_envs + env``)."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs, self.added, self.transitions = num_envs, np.zeros(num_envs, np.int64), {}

    def add(self, obs, actions, rewards, next_obs, terminations, truncations, valid=None):
        for env in np.flatnonzero(np.ones(self.num_envs, bool) if valid is None else valid):
            transition = (obs[env].copy(), actions[env], rewards[env], next_obs[env].copy())
            self.transitions[self.added[env] * self.num_envs + env] = (*transition, terminations[env], truncations[env])
            self.added[env] += 1


def check_exact(buffer: FrameReplay, plain: PlainReplay) -> np.ndarray:
    """Every sampleable transition equals the reference's; returns the sampleable ids."""
    ids = buffer.indices()
    assert len(ids) == len(buffer) and len(np.unique(ids)) == len(ids)
    # Only the last `slots` transitions of each env can be held: an overwritten slot is never sampled.
    transitions, envs = np.divmod(ids, buffer.num_envs)
    assert (transitions >= plain.added[envs] - buffer.slots).all() and (transitions < plain.added[envs]).all()
    batch = buffer.get(ids)
    assert np.array_equal(batch.indices, ids)
    for k, i in enumerate(ids.tolist()):
        obs, action, reward, next_obs, terminated, _ = plain.transitions[i]
        assert batch.obs[k].dtype == obs.dtype and batch.obs[k].tobytes() == obs.tobytes(), i
        assert batch.next_obs[k].tobytes() == next_obs.tobytes(), i
        assert (batch.actions[k], batch.rewards[k], batch.dones[k]) == (action, np.float32(reward), terminated)
    assert (batch.weights == 1).all() and (batch.discounts == np.float32(buffer.gamma)).all()
    # And sample draws from exactly those transitions.
    assert np.isin(buffer.sample(len(ids)).indices, ids).all()
    return ids


def play(pool: GamePool, buffer: FrameReplay, plain: PlainReplay, steps: int, seed: int = 0, kill_at=None) -> int:
    """Random play into both buffers, one pool step at a time; returns how many episodes ended."""
    rng = np.random.default_rng(seed)
    obs, _ = pool.reset(seed=seed)
    same_step = pool.autoreset_mode.value == "SameStep"
    valid, episodes = np.ones(pool.num_envs, bool), 0
    for step in range(steps):
        if step == kill_at:
            os.kill(pool._workers[0].process.pid, signal.SIGKILL)
        actions = rng.integers(0, pool.single_action_space.n, pool.num_envs)
        new_obs, rewards, terminations, truncations, info = pool.step(actions)
        next_obs = new_obs.copy()
        if same_step and "final_obs" in info:  # the true final observation, CleanRL's real_next_obs
            for env in np.flatnonzero(info["_final_obs"]):
                next_obs[env] = info["final_obs"][env]
        # Next-step autoreset: the step after an episode end is the reset step, not a transition.
        args = (obs, actions, rewards, next_obs, terminations, truncations, None if same_step else valid)
        buffer.add(*args)
        plain.add(*args)
        episodes += int((terminations | truncations).sum())
        obs, valid = new_obs, same_step | ~(terminations | truncations)
    return episodes


POOLS = {
    "breakout-terminal-samestep": ("Breakout", "SameStep", {"life_loss": "terminal"}),
    "breakout-reset-nextstep-truncation": ("Breakout", "NextStep", {"max_episode_frames": 120}),
    "pong-channels-last-truncation": ("Pong", "SameStep", {"channels_last": True, "max_episode_frames": 200}),
    "pong-stack2-size42-nextstep": ("Pong", "NextStep", {"stack": 2, "size": (42, 42), "max_episode_frames": 160}),
    "mspacman-terminal-nextstep": ("MsPacman", "NextStep", {"life_loss": "terminal", "noop_max": 30}),
    # RGB, channels-last: each frame is 3 channels in the last axis, (84, 84, 12) for 4 frames.
    "seaquest-rgb-channels-last": ("Seaquest", "SameStep", {"obs_type": "rgb", "channels_last": True}),
}


@pytest.mark.slow
@CODECS
@pytest.mark.parametrize("name", POOLS)
def test_samples_equal_the_added_transitions_on_real_pools(name, compression):
    game, mode, options = POOLS[name]
    with GamePool(3, game, seed=1, n_workers=1, autoreset_mode=mode, **options) as pool:
        shape = pool.single_observation_space.shape
        # 150 transitions in 3 envs: the buffer wraps around several times over 300 steps.
        channels_last, stack = options.get("channels_last", False), pool.options.stack
        buffer = FrameReplay(150, 3, shape, stack=stack, channels_last=channels_last, seed=0, compression=compression)
        plain = PlainReplay(3)
        episodes = play(pool, buffer, plain, 300)
    assert episodes > 0, "the run must cross episode ends"
    assert plain.added.min() > buffer.slots, "the run must wrap the buffer around"
    check_exact(buffer, plain)
    # The Game's episodes start with one frame in every slot: its frames never run out, nothing is evicted early.
    assert len(buffer) == 150
    # Compressed with a dictionary, the frames take a small share of their raw bytes (index and pointers included).
    frames = buffer.frame_slots * buffer.num_envs * math.prod(buffer.frame_shape)
    assert buffer.nbytes > frames if compression is None else buffer.nbytes < frames / 4


@pytest.mark.slow
@CODECS
def test_a_worker_killed_and_restarted_mid_run_keeps_samples_exact(compression):
    with GamePool(4, "Breakout", seed=2, n_workers=2, restart_workers=True, autoreset_mode="SameStep") as pool:
        buffer, plain = FrameReplay(400, 4, (4, 84, 84), compression=compression), PlainReplay(4)
        play(pool, buffer, plain, 60, kill_at=30)
    assert [plain.transitions[30 * 4 + env][5] for env in range(4)] == [True, True, False, False]  # restarted
    check_exact(buffer, plain)


@CODECS
def test_arbitrary_data_with_no_shared_frames_is_exact_and_evicted_early_when_frames_run_out(compression):
    rng = np.random.default_rng(0)
    shape, num_envs = (4, 6, 5), 2
    buffer, plain = FrameReplay(200, num_envs, shape, compression=compression), PlainReplay(num_envs)
    for _ in range(150):
        obs, next_obs = (rng.integers(0, 3, (num_envs, *shape), dtype=np.uint8) for _ in range(2))
        dones = rng.random((2, num_envs)) < 0.1
        args = (obs, rng.integers(0, 4, num_envs), rng.normal(size=num_envs), next_obs, *dones)
        buffer.add(*args)
        plain.add(*args)
        check_exact(buffer, plain)
    # Each transition needs up to 2 * stack frames here: the frames run out long before the 100 slots per env.
    assert 0 < len(buffer) < 100 * num_envs


@CODECS
@pytest.mark.parametrize(
    ("shape", "stack", "channels_last", "dtype"),
    [
        ((6, 5, 7), 2, False, np.uint8),
        ((5, 7, 6), 3, True, np.uint8),
        ((4, 5, 3), None, False, np.float32),
        ((84, 84, 12), 4, True, np.uint8),  # RGB channels-last: a frame is 3 channels inside the last axis
    ],
)
def test_frames_of_several_channels_and_float_observations_are_exact(shape, stack, channels_last, dtype, compression):
    """Observations slid one frame (of ``channels`` channels) at a time, as a stacked RGB or float env gives."""
    rng = np.random.default_rng(1)
    num_envs, axis = 2, -1 if channels_last else 1  # the stack axis of a batch of observations
    depth = shape[-1 if channels_last else 0]
    channels = depth // (stack or depth)
    buffer = FrameReplay(
        60, num_envs, shape, stack=stack, channels_last=channels_last, dtype=dtype, compression=compression
    )
    plain = PlainReplay(num_envs)
    obs = rng.normal(size=(num_envs, *shape)).astype(dtype)
    if dtype == np.float32:
        obs[0, 0] = -0.0  # -0.0 and 0.0 are different bits: kept exactly
    for step in range(80):
        fresh = np.take(rng.normal(size=obs.shape).astype(dtype), range(channels), axis)  # one new frame
        next_obs = np.concatenate([np.delete(obs, range(channels), axis), fresh], axis=axis)
        terminations = np.array([step % 17 == 16, False])
        args = (obs, np.array([1, 2]), np.array([0.5, 1.0]), next_obs, terminations, np.zeros(2, bool))
        buffer.add(*args)
        plain.add(*args)
        # An episode starts, as in a Game, with one frame in every slot.
        first = np.concatenate([fresh] * (depth // channels), axis=axis)
        obs = np.where(terminations.reshape(-1, 1, 1, 1), first, next_obs)
    check_exact(buffer, plain)
    assert len(buffer) == 60  # sliding observations share their frames: nothing evicted early


@CODECS
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_observations_with_signed_zeros_and_nans_come_back_bit_for_bit(compression, dtype):
    # Frames are compared by their bits, at every float width: compared by value, -0.0 == 0.0 would make a slot of
    # zeros and one of negative zeros one frame, stored once (and NaN would never equal itself).
    buffer = FrameReplay(4, 1, (2, 2, 2), dtype=dtype, compression=compression)
    zeros = np.zeros((2, 2), dtype)
    obs = np.stack([zeros, -zeros])[None]  # slot 0 holds 0.0, slot 1 -0.0: equal as floats, not as bits
    next_obs = np.stack([-zeros, np.full((2, 2), np.nan, dtype)])[None]
    buffer.add(obs, np.zeros(1, int), np.zeros(1), next_obs, np.zeros(1, bool), np.zeros(1, bool))
    batch = buffer.get(buffer.indices())
    assert batch.obs.tobytes() == obs.tobytes() and batch.next_obs.tobytes() == next_obs.tobytes()
    assert np.signbit(batch.obs[0, :, 0, 0]).tolist() == [False, True]


def test_frame_bytes_per_transition_stay_within_three_percent_of_one_frame():
    capacity, num_envs, shape = 1_000_000, 8, (4, 84, 84)
    buffer = FrameReplay(capacity, num_envs, shape)  # lazily allocated: nothing is resident yet
    frame, observation = 84 * 84, 4 * 84 * 84
    metadata = 8 + 3 + 4 + 4 + 2  # frame position, 3 small offsets, action, reward, 2 flags
    bound = capacity * ((1 + FRAME_MARGIN) * frame + metadata) + num_envs * (observation + 5 * 8)
    assert buffer.nbytes <= bound and buffer.nbytes / capacity < 7_300
    prioritized = FrameReplay(capacity, num_envs, shape, prioritized=True)
    trees = 2 * 2 * 2**20 * 8  # two trees over 2^20 leaves, float64
    assert prioritized.nbytes <= bound + trees


@pytest.mark.parametrize(
    ("capacity", "num_envs", "leaves"),
    [(1, 1, 1), (8, 2, 8), (8, 1, 8), (9, 1, 16), (12, 3, 16)],
)
def test_the_priority_trees_have_a_leaf_per_transition_slot_rounded_up_to_a_power_of_two(capacity, num_envs, leaves):
    # Two float64 trees of 2 * leaves nodes each: exactly a power of two of slots takes that many leaves, not twice
    # as many (8 slots: 16 leaves), nor one more.
    shape = (2, 2, 2)
    extra = (
        FrameReplay(capacity, num_envs, shape, prioritized=True).nbytes - FrameReplay(capacity, num_envs, shape).nbytes
    )
    assert extra == 2 * (2 * leaves) * 8


def test_a_full_memory_of_episodes_of_200_steps_holds_its_capacity():
    # Each episode's first observation takes 3 frames more than its transitions (its stack), so 1,000 transitions of
    # 5-6 episodes need up to 1,018 frames: the frame slots' margin, FRAME_MARGIN of the slots (30 frames here),
    # holds them, where a margin of 2 * stack (8) would evict the oldest transitions early.
    buffer = FrameReplay(1000, 1, (4, 2, 2))
    rng = np.random.default_rng(0)
    for _ in range(7):
        obs = rng.integers(0, 256, (1, 4, 2, 2), dtype=np.uint8)  # a new episode: a fresh stack
        for step in range(200):
            next_obs = np.concatenate([obs[:, 1:], rng.integers(0, 256, (1, 1, 2, 2), dtype=np.uint8)], 1)
            ended = np.array([step == 199])
            buffer.add(obs, np.zeros(1, int), np.zeros(1), next_obs, ended, np.zeros(1, bool))
            obs = next_obs
    assert len(buffer) == 1000


# A child process that fills a zstd FrameReplay of 1M transitions with frames like a game's (a still background, a
# 6 x 6 object each env moves about) and prints its resident bytes grown since before the memory, and the memory's
# nbytes: empty, and after each count of transitions in argv.
FILL_AND_MEASURE = """
import os, sys
import numpy as np
from atari_game import FrameReplay

def resident():
    with open("/proc/self/statm") as file:
        return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

envs, rng = 8, np.random.default_rng(0)
before = resident()
buffer = FrameReplay(1_000_000, envs, (4, 84, 84), compression="zstd", seed=0)
print(resident() - before, buffer.nbytes)
background = np.zeros((84, 84), np.uint8)
background[::12], background[:, ::21] = 90, 40
positions = rng.integers(0, 78, (envs, 2))
obs, no = np.repeat(background[None, None], envs, 0).repeat(4, 1), np.zeros(envs, bool)
for transitions in map(int, sys.argv[1:]):
    while len(buffer) < transitions:
        positions[:] = (positions + rng.integers(-2, 3, (envs, 2))) % 78
        frames = np.repeat(background[None], envs, 0)
        for env, (row, column) in enumerate(positions):
            frames[env, row : row + 6, column : column + 6] = 200 + env
        next_obs = np.concatenate([obs[:, 1:], frames[:, None]], 1)
        buffer.add(obs, np.zeros(envs, np.int64), np.zeros(envs, np.float32), next_obs, no, no)
        obs = next_obs
    print(resident() - before, buffer.nbytes)
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident size from Linux's /proc")
def test_a_compressed_memory_becomes_resident_only_as_it_fills_and_as_much_as_nbytes_says(tmp_path):
    script = tmp_path / "fill.py"
    script.write_text(FILL_AND_MEASURE)
    output = subprocess.run([sys.executable, str(script), "20000", "60000"], capture_output=True, text=True, check=True)
    (empty, _), (resident_20k, nbytes_20k), (resident_60k, nbytes_60k) = (
        map(int, line.split()) for line in output.stdout.splitlines()
    )
    # Empty, a memory of 1M transitions holds its frames' pointers (8 MB) resident, not 7 GB of frames.
    assert empty < 16 * 2**20
    # Filling it, resident memory grows as nbytes does (compressed frames, ~200 bytes each here), not by 7 KB a frame
    # (zstandard's worst-case output buffers kept whole: 430 MB more over these 40,000 transitions).
    assert resident_60k - resident_20k < 1.5 * (nbytes_60k - nbytes_20k) + 4 * 2**20


@CODECS
def test_n_step_returns_match_a_brute_force_computation(compression):
    rng = np.random.default_rng(3)
    n, gamma, num_envs, shape = 3, 0.9, 2, (2, 3, 3)
    buffer = FrameReplay(40, num_envs, shape, n_step=n, gamma=gamma, compression=compression)
    plain = PlainReplay(num_envs)
    obs = rng.integers(0, 255, (num_envs, *shape), dtype=np.uint8)
    for _ in range(70):
        next_obs = rng.integers(0, 255, obs.shape, dtype=np.uint8)
        terminations, truncations = rng.random((2, num_envs)) < 0.15
        args = (obs, rng.integers(0, 4, num_envs), rng.integers(-2, 3, num_envs), next_obs, terminations, truncations)
        buffer.add(*args)
        plain.add(*args)
        obs = next_obs
        ids = buffer.indices()
        batch = buffer.get(ids)
        for k, i in enumerate(ids.tolist()):
            env, t = i % num_envs, i // num_envs
            ret, steps = 0.0, 0
            for j in range(n):
                step = plain.transitions[(t + j) * num_envs + env]
                ret, steps = ret + gamma**j * step[2], j + 1
                if step[4] or step[5]:
                    break
            assert batch.rewards[k] == pytest.approx(ret, abs=1e-5)
            assert batch.discounts[k] == np.float32(gamma**steps)
            assert batch.obs[k].tobytes() == plain.transitions[i][0].tobytes()
            assert batch.next_obs[k].tobytes() == step[3].tobytes() and batch.dones[k] == step[4]
        # Not yet sampleable: the last n - 1 transitions of an env whose episode has not ended since.
        for env in range(num_envs):
            t = plain.added[env] - 1
            ended = plain.transitions[t * num_envs + env][4] or plain.transitions[t * num_envs + env][5]
            assert (t * num_envs + env in ids) == bool(ended)


def slide(buffer: FrameReplay, rng: np.random.Generator, steps: int) -> None:
    """`steps` adds to every env of `buffer` (channels first), each obs sliding on by one random frame, no episode
    end."""
    shape = (buffer.num_envs, *buffer.observation_shape)
    obs = rng.integers(0, 255, shape, dtype=np.uint8)
    nothing = np.zeros(buffer.num_envs, bool)
    for _ in range(steps):
        next_obs = np.concatenate([obs[:, 1:], rng.integers(0, 255, (shape[0], 1, *shape[2:]), dtype=np.uint8)], 1)
        buffer.add(obs, np.zeros(buffer.num_envs, int), np.zeros(buffer.num_envs), next_obs, nothing, nothing)
        obs = next_obs


def filled(prioritized=True, **kwargs) -> FrameReplay:
    """A buffer of 4 transitions per env, 2 envs, tiny random observations."""
    buffer = FrameReplay(8, 2, (2, 2, 2), prioritized=prioritized, seed=5, **kwargs)
    slide(buffer, np.random.default_rng(4), 4)
    return buffer


def draw(buffer: FrameReplay, batches: int) -> np.ndarray:
    """The ids of `batches` batches of 8."""
    return np.concatenate([buffer.sample(8).indices for _ in range(batches)])


def test_prioritized_sampling_frequencies_follow_the_priorities():
    buffer = filled(alpha=0.5)
    ids = buffer.indices()
    priorities = np.array([0.0, 1.0, 4.0, 9.0, 16.0, 25.0, 0.0, 36.0])  # two at zero (plus epsilon)
    buffer.update_priorities(ids, priorities)
    expected = np.sqrt(priorities + buffer.priority_epsilon)
    expected /= expected.sum()
    draws = draw(buffer, 2500)
    counts = (draws[:, None] == ids).sum(0)
    # Binomial standard deviation at most 0.0036 here: 0.015 is over 4 of them, and 0.03 of a share is far more.
    assert np.abs(counts / len(draws) - expected).max() < 0.015
    assert counts[0] < 20 and counts[6] < 20  # priority epsilon**0.5 = 0.001: almost never


def test_prioritized_weights_are_the_normalised_importance_weights():
    buffer = filled(alpha=1.0, beta=0.5)
    ids = buffer.indices()
    priorities = np.arange(1.0, 9.0)
    buffer.update_priorities(ids, priorities)
    p = priorities + buffer.priority_epsilon
    probabilities = p / p.sum()
    weights = (len(ids) * probabilities) ** -0.5
    weights /= weights.max()
    np.testing.assert_allclose(buffer.get(ids).weights, weights, rtol=1e-6)
    batch = buffer.sample(8, beta=1.0)  # beta overridden per batch, e.g. annealed to 1
    np.testing.assert_allclose(batch.weights, p.min() / p[(batch.indices[:, None] == ids).argmax(1)], rtol=1e-6)


@CODECS
def test_update_priorities_changes_what_is_sampled_and_evicted_transitions_are_never_sampled(compression):
    buffer = filled(compression=compression)
    ids = buffer.indices()
    buffer.update_priorities(ids[[0, 0]], np.array([3.0, 1e6]))  # one transition dominates (its last priority)
    assert (draw(buffer, 8) == ids[0]).mean() > 0.95
    slide(buffer, np.random.default_rng(6), 4)  # every slot is overwritten: the old priorities must be gone
    assert not np.isin(buffer.indices(), ids).any()
    assert not np.isin(draw(buffer, 8), ids).any()
    buffer.update_priorities(ids, np.ones(len(ids)))  # evicted ids are skipped, not revived
    assert not np.isin(draw(buffer, 8), ids).any()
    # New transitions got the largest priority seen, the 1e6 one's: against one set to 1, their weights say so.
    new = buffer.indices()
    buffer.update_priorities(new[:1], np.array([1.0]))
    ratio = ((1e6 + buffer.priority_epsilon) / (1 + buffer.priority_epsilon)) ** buffer.alpha
    np.testing.assert_allclose(buffer.get(new).weights, [1.0] + [ratio**-buffer.beta] * 7, rtol=1e-6)


def test_prioritized_sampling_after_eviction_draws_the_transition_of_the_leaf_found():
    # A leaf is a ring slot; the transition it holds is ``oldest + (ring - oldest) % slots``, which only an evicted
    # transition (oldest > 0) tells apart from the slot itself. The buffer here holds 4 slots and got 7
    # transitions: transitions 3, 4, 5 and 6 are held (3 evicted), in ring slots 3, 0, 1, 2.
    buffer = FrameReplay(4, 1, (2, 2, 2), prioritized=True, alpha=1.0, seed=0)
    slide(buffer, np.random.default_rng(0), 7)
    assert buffer.indices().tolist() == [3, 4, 5, 6]
    # Transition 5 (ring slot 1) takes all but 3e-12 of the priority: every draw finds its leaf.
    buffer.update_priorities(np.array([3, 4, 5, 6]), np.array([0.0, 0.0, 1e6, 0.0]))
    draws = np.concatenate([buffer.sample(4).indices for _ in range(8)])  # a batch is at most len(buffer)
    assert draws.tolist() == [5] * 32


def test_the_sum_tree_finds_the_leaf_whose_prefix_sums_hold_each_target():
    # Each leaf holds the targets in [its first prefix sum, the next): a target equal to a leaf's first prefix sum
    # is that leaf's, not the one before; a target at the total (rounding) stays out of an empty subtree, a slot with
    # no transition.
    buffer = FrameReplay(4, 1, (1, 2, 2), prioritized=True, seed=0)  # 4 leaves
    buffer._set_leaves(np.array([0, 1]), np.array([1.0, 2.0]))  # prefix sums: leaf 0 [0, 1), leaf 1 [1, 3)
    targets = np.array([0.0, 0.5, 1.0, 2.5, 3.0])
    assert buffer._find(targets).tolist() == [0, 0, 1, 1, 1]


def test_prioritized_sampling_takes_priorities_to_the_power_0_6_by_default():
    assert FrameReplay(4, 1, (2, 2, 2), prioritized=True).alpha == 0.6  # the prioritized replay paper's alpha


def test_n_step_transitions_not_yet_ready_have_no_priority():
    buffer = FrameReplay(20, 1, (1, 2, 2), n_step=3, prioritized=True, seed=0)
    obs = np.zeros((1, 1, 2, 2), np.uint8)
    for step in range(4):
        buffer.add(obs + step, np.zeros(1, int), np.ones(1), obs + step + 1, np.zeros(1, bool), np.zeros(1, bool))
    assert list(buffer.indices()) == [0, 1]
    assert set(buffer.sample(2).indices.tolist()) | set(buffer.sample(2).indices.tolist()) == {0, 1}


@CODECS
@pytest.mark.parametrize("prioritized", [False, True])
def test_the_same_seed_gives_the_same_batches(prioritized, compression):
    first, second = filled(prioritized, compression=compression), filled(prioritized, compression=compression)
    batches = [first.sample(8), second.sample(8)]
    assert np.array_equal(batches[0].indices, batches[1].indices)
    assert np.array_equal(batches[0].obs, batches[1].obs)


def test_a_replay_batch_is_read_only():
    # A batch's fields cannot be replaced after sampling (a learner's update cannot swap the rewards it was given).
    buffer = FrameReplay(4, 1, (2, 2, 2))
    slide(buffer, np.random.default_rng(0), 2)
    batch = buffer.sample(2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.rewards = np.ones(2)  # type: ignore[misc]


BAD_CONSTRUCTORS = [
    ({"capacity": 0}, ValueError, "capacity must be an integer >= 1, got 0"),
    ({"capacity": 2.5}, TypeError, "capacity must be an integer >= 1, got float 2.5"),
    ({"capacity": 1}, ValueError, "capacity must be at least num_envs"),
    ({"num_envs": 0}, ValueError, "num_envs must be an integer >= 1, got 0"),
    ({"observation_shape": (4, 0, 84)}, ValueError, r"observation_shape\[1\] must be an integer >= 1, got 0"),
    ({"observation_shape": 84}, TypeError, "observation_shape must be a tuple of positive integers, got 84"),
    ({"stack": 3}, ValueError, "stack must divide"),
    ({"dtype": "U3"}, TypeError, "dtype must be a boolean, integer or float dtype, got <U3"),
    ({"dtype": "eight bits"}, TypeError, r"dtype must be a numpy dtype such as np\.uint8 or np\.float32, got"),
    ({"n_step": 0}, ValueError, "n_step must be an integer >= 1, got 0"),
    ({"gamma": 1.5}, ValueError, r"gamma must be a number in \[0.0, 1.0\], got 1.5"),
    ({"gamma": float("nan")}, ValueError, r"gamma must be a number in \[0.0, 1.0\], got nan"),
    ({"gamma": True}, TypeError, r"gamma must be a number in \[0.0, 1.0\], got bool True"),  # (not taken as 1.0)
    ({"alpha": -1.0}, ValueError, r"alpha must be a number in \[0.0, inf\], got -1.0"),
    ({"beta": 2.0}, ValueError, r"beta must be a number in \[0.0, 1.0\], got 2.0"),
    ({"prioritized": "yes"}, TypeError, "prioritized must be True or False, got str 'yes'"),
    ({"seed": -1}, ValueError, "seed must be an integer >= 0, got -1"),
    ({"compression": "lz4"}, ValueError, r"compression must be one of \(None, 'zstd'\), got 'lz4'"),
]


@pytest.mark.parametrize(("change", "error", "message"), BAD_CONSTRUCTORS)
def test_bad_constructor_arguments_are_refused_by_name(change, error, message):
    arguments = {"capacity": 100, "num_envs": 2, "observation_shape": (4, 84, 84), **change}
    with pytest.raises(error, match=message):
        FrameReplay(**arguments)


@pytest.mark.parametrize(
    ("name", "bad", "message", "lowest"),
    [
        ("gamma", -0.5, "gamma must be a number in [0.0, 1.0], got -0.5", 0.0),
        ("priority_epsilon", -0.5, "priority_epsilon must be a number in [0.0, inf], got -0.5", 0.0),
        ("stack", 0, "stack must be an integer >= 1, got 0", 1),  # a stack of no frames
        ("beta", -0.5, "beta must be a number in [0.0, 1.0]", 0.0),  # weights that would grow with the priority
    ],
)
def test_a_setting_below_its_lowest_is_refused_and_the_lowest_taken(name, bad, message, lowest):
    with pytest.raises(ValueError, match=re.escape(message)):
        FrameReplay(4, 1, (2, 2, 2), prioritized=True, **{name: bad})
    assert getattr(FrameReplay(4, 1, (2, 2, 2), prioritized=True, **{name: lowest}), name) == lowest


def good_step(num_envs=2, shape=(2, 3, 3)):
    obs = np.arange(num_envs * np.prod(shape), dtype=np.uint8).reshape(num_envs, *shape)
    return {
        "obs": obs,
        "actions": np.zeros(num_envs, int),
        "rewards": np.zeros(num_envs),
        "next_obs": obs + 1,
        "terminations": np.zeros(num_envs, bool),
        "truncations": np.zeros(num_envs, bool),
    }


BAD_ADDS = [
    ("obs", np.zeros((2, 2, 3, 4), np.uint8), ValueError, "obs must have shape"),
    ("obs", np.zeros((2, 2, 3, 3), np.float32), TypeError, "obs must be uint8"),
    ("next_obs", np.zeros((3, 2, 3, 3), np.uint8), ValueError, "next_obs must have shape"),
    ("actions", np.zeros(3, int), ValueError, "actions must have shape"),
    ("actions", np.zeros(2), TypeError, "actions must be integer"),
    ("actions", np.array([0, 2**40]), ValueError, "actions must fit in int32"),
    ("rewards", np.array([0.0, np.nan]), ValueError, "rewards must be finite"),
    ("terminations", np.zeros(2, int), TypeError, "terminations must be bools"),
    ("truncations", np.zeros(1, bool), ValueError, "truncations must have shape"),
]


@pytest.mark.parametrize(("name", "value", "error", "message"), BAD_ADDS)
def test_bad_adds_are_refused_by_name_and_leave_the_buffer_as_it_was(name, value, error, message):
    buffer = FrameReplay(10, 2, (2, 3, 3), seed=0)
    buffer.add(**good_step())
    before = buffer.get(buffer.indices())
    with pytest.raises(error, match=message):
        buffer.add(**{**good_step(), name: value})
    with pytest.raises(TypeError, match="valid must be bools"):
        buffer.add(**good_step(), valid=np.ones(2, int))
    after = buffer.get(buffer.indices())
    assert (
        len(buffer) == 2 and np.array_equal(before.obs, after.obs) and np.array_equal(before.next_obs, after.next_obs)
    )
    buffer.add(**{**good_step(), "obs": good_step()["next_obs"], "next_obs": good_step()["next_obs"] + 1})
    assert len(buffer) == 4  # still usable


@pytest.mark.parametrize(
    ("dtype", "wrong"),
    [(np.uint8, np.uint16), (np.uint8, np.uint32), (np.float32, np.float64), (np.float32, np.float16)],
)
@pytest.mark.parametrize("name", ["obs", "next_obs"])
def test_observations_of_the_right_kind_but_another_dtype_are_refused(dtype, wrong, name):
    # Each observation's dtype is compared with the buffer's, not only its kind: a uint16 array passes the kind check
    # ("u") and would be stored as uint8, its values cut to 8 bits.
    buffer = FrameReplay(4, 1, (2, 2, 2), dtype=dtype)
    obs = np.zeros((1, 2, 2, 2), dtype)
    step = {"obs": obs, "next_obs": obs.copy()} | {name: np.full((1, 2, 2, 2), 300, wrong)}
    expected = f"{name} must be {np.dtype(dtype)} observations (stored exactly, never converted), got dtype"
    with pytest.raises(TypeError, match=re.escape(expected)):
        buffer.add(**step, actions=np.zeros(1, int), rewards=np.zeros(1), terminations=[False], truncations=[False])
    assert len(buffer) == 0


def test_actions_at_the_int32_bounds_are_stored_and_one_past_them_refused():
    buffer = FrameReplay(4, 1, (2, 2, 2))
    obs = np.zeros((1, 2, 2, 2), np.uint8)
    step = {"obs": obs, "next_obs": obs + 1, "rewards": np.zeros(1), "terminations": [False], "truncations": [False]}
    for action in (2**31 - 1, -(2**31)):
        buffer.add(**step, actions=np.array([action]))
        step = step | {"obs": step["next_obs"], "next_obs": step["next_obs"] + 1}
    assert buffer.get(buffer.indices()).actions.tolist() == [2**31 - 1, -(2**31)]
    for action in (2**31, -(2**31) - 1):
        with pytest.raises(ValueError, match="actions must fit in int32"):
            buffer.add(**step, actions=np.array([action]))


def test_bad_samples_and_priorities_are_refused_by_name_and_leave_the_buffer_usable():
    empty = FrameReplay(10, 2, (2, 3, 3))
    with pytest.raises(ValueError, match="add transitions before sampling"):
        empty.sample(1)
    buffer = filled()
    with pytest.raises(ValueError, match="batch_size must be at most the 8"):
        buffer.sample(9)
    with pytest.raises(TypeError, match="batch_size"):
        buffer.sample(2.0)
    with pytest.raises(ValueError, match=re.escape("batch_size must be an integer >= 1, got 0")):
        buffer.sample(0)  # not an empty batch
    with pytest.raises(ValueError, match="beta"):
        buffer.sample(2, beta=-0.1)
    with pytest.raises(ValueError, match=re.escape("beta must be a number in [0.0, 1.0], got 1.5")):
        buffer.sample(2, beta=1.5)  # weights that over-correct the sampling
    assert buffer.sample(2, beta=1.0).weights.max() == 1.0  # taken (equal priorities: every weight 1)
    ids = buffer.indices()
    buffer.update_priorities(ids, np.arange(1.0, 9.0))
    weights = buffer.get(ids).weights
    for priorities, error in [(np.full(8, np.nan), ValueError), (-np.ones(8), ValueError), (np.ones(7), ValueError)]:
        with pytest.raises(error, match="priorities"):
            buffer.update_priorities(ids, priorities)
    with pytest.raises(TypeError, match="indices"):
        buffer.update_priorities(ids.astype(float), np.ones(8))
    with pytest.raises(ValueError, match="cannot be sampled now"):
        buffer.get(np.array([ids.max() + 2]))
    for never in (-1, ids.max() + 2):  # an id no batch gave is a mistake, not an eviction to skip
        with pytest.raises(ValueError, match=f"transition id {never} .* was never sampleable here"):
            buffer.update_priorities(np.array([ids[0], never]), np.ones(2))
    assert np.array_equal(buffer.get(ids).weights, weights)  # the priorities are as they were
    buffer.update_priorities(ids[-1:], np.array([0.5]))  # ...and a good update is taken: now the smallest
    assert buffer.get(ids[-1:]).weights[0] == 1 and (buffer.get(ids[:-1]).weights < 1).all()
    with pytest.raises(ValueError, match="prioritized=True"):
        filled(prioritized=False).update_priorities(ids, np.ones(8))
    assert buffer.sample(8).obs.shape == (8, 2, 2, 2)


# --- against an independent model of the frames each env still holds ----------------------------------------


@dataclasses.dataclass
class Transition:
    obs: np.ndarray
    action: int
    reward: np.float32
    next_obs: np.ndarray
    terminated: bool
    truncated: bool
    oldest_frame: int  # the serial of the oldest frame its obs and next_obs use


class HeldFrames:
    """What a FrameReplay must hold, from its documented rules alone (not from its arithmetic of frame positions).

    Each frame an env stores gets the env's next serial number, and the env holds its last ``frame_slots`` frames
    (``slots`` plus 3 %, at least ``2 * stack`` more). An observation is the serials of its `stack` slots: one that
    continues the env's last added next_obs reuses its serials; a next_obs that is its obs shifted by a frame adds
    one; any other observation is stored whole, its equal leading slots as one frame (as a Game's episode starts).
    A transition can be sampled while it is among its env's last ``slots``, every frame of its obs and next_obs is
    held, and its n steps are added or its episode ended within them. With priorities, a transition gets the largest
    priority given so far when it becomes sampleable.
    """

    def __init__(self, buffer: FrameReplay) -> None:
        self.buffer, self.num_envs, self.stack = buffer, buffer.num_envs, buffer.stack
        self.slots = buffer.capacity // buffer.num_envs
        self.frame_slots = self.slots + max(2 * buffer.stack, math.ceil(FRAME_MARGIN * self.slots))
        self.written = [0] * self.num_envs
        self.last_next: list[tuple[np.ndarray, list[int]] | None] = [None] * self.num_envs  # next_obs, its serials
        self.transitions: list[list[Transition]] = [[] for _ in range(self.num_envs)]
        self.priorities: dict[int, float] = {}
        self.max_priority = 1.0

    def add(self, obs, actions, rewards, next_obs, terminations, truncations, valid=None) -> None:
        """Add to the buffer and to the model."""
        self.buffer.add(obs, actions, rewards, next_obs, terminations, truncations, valid)
        for env in np.flatnonzero(np.ones(self.num_envs, bool) if valid is None else valid):
            last = self.last_next[env]
            if last is not None and obs[env].tobytes() == last[0].tobytes():
                obs_frames = last[1]
            else:
                obs_frames = self.store(env, obs[env])
            if next_obs[env][:-1].tobytes() == obs[env][1:].tobytes():
                next_frames = [*obs_frames[1:], self.written[env]]
                self.written[env] += 1
            else:
                next_frames = self.store(env, next_obs[env])
            self.last_next[env] = next_obs[env].copy(), next_frames
            transition = Transition(
                obs[env].copy(),
                int(actions[env]),
                np.float32(rewards[env]),
                next_obs[env].copy(),
                bool(terminations[env]),
                bool(truncations[env]),
                min(obs_frames + next_frames),
            )
            self.transitions[env].append(transition)
        for i in self.sampleable():
            self.priorities.setdefault(i, self.max_priority**self.buffer.alpha)

    def store(self, env: int, frames: np.ndarray) -> list[int]:
        """The serials of an observation stored whole: its leading slots equal to the first are one frame."""
        lead = next((k for k in range(1, self.stack) if frames[k].tobytes() != frames[0].tobytes()), self.stack)
        first = self.written[env]
        self.written[env] += self.stack - lead + 1
        return [first] * lead + [first + k for k in range(1, self.stack - lead + 1)]

    def sampleable(self) -> list[int]:
        """The ids of the transitions that can be sampled, env by env, oldest first."""
        ids = []
        for env, transitions in enumerate(self.transitions):
            ends = [step.terminated or step.truncated for step in transitions]
            for t, step in enumerate(transitions):
                kept = t >= len(transitions) - self.slots and step.oldest_frame >= self.written[env] - self.frame_slots
                if kept and (t + self.buffer.n_step <= len(transitions) or any(ends[t:])):
                    ids.append(t * self.num_envs + env)
        return ids

    def update_priorities(self, ids: np.ndarray, priorities: np.ndarray) -> None:
        """Update the buffer's priorities and the model's: ids no longer sampleable are skipped, the last one counts."""
        self.buffer.update_priorities(ids, priorities)
        held = set(self.sampleable())
        for i, priority in zip(ids.tolist(), priorities.tolist(), strict=True):
            if i in held:
                self.priorities[i] = (priority + self.buffer.priority_epsilon) ** self.buffer.alpha
                self.max_priority = max(self.max_priority, priority + self.buffer.priority_epsilon)

    def check(self, batch) -> None:
        """Every transition of `batch` is sampleable, and exactly what was added (n-step returns summed here)."""
        held = self.sampleable()
        assert set(batch.indices.tolist()) <= set(held)
        gamma, n = self.buffer.gamma, self.buffer.n_step
        smallest = min(self.priorities[i] for i in held) if self.buffer.prioritized else 1.0
        for k, i in enumerate(batch.indices.tolist()):
            t, env = divmod(i, self.num_envs)
            steps = self.transitions[env][t : t + n]
            last = next((j for j, step in enumerate(steps) if step.terminated or step.truncated), n - 1)
            assert batch.obs[k].tobytes() == steps[0].obs.tobytes(), i
            assert batch.next_obs[k].tobytes() == steps[last].next_obs.tobytes(), i
            assert (batch.actions[k], batch.dones[k]) == (steps[0].action, steps[last].terminated), i
            expected = sum(gamma**j * float(step.reward) for j, step in enumerate(steps[: last + 1]))
            assert batch.rewards[k] == pytest.approx(expected, rel=1e-6), i
            assert batch.discounts[k] == np.float32(gamma ** (last + 1)), i
            weight = (self.priorities[i] / smallest) ** -self.buffer.beta if self.buffer.prioritized else 1.0
            assert batch.weights[k] == pytest.approx(weight, rel=1e-5), i


# One env's step: obs continues the env's last next_obs or is fresh (its first `lead` slots one frame); next_obs is
# obs shifted by a new frame or fresh; the step ends the episode or not; and (in the next-step mode) it is skipped.
ENV_STEPS = st.tuples(
    st.sampled_from(["continues", "fresh"]),
    st.integers(1, 4),
    st.sampled_from(["shifted", "fresh"]),
    st.sampled_from(["", "", "terminated", "truncated"]),
    st.booleans(),
)


@st.composite
def replay_runs(draw):
    """A FrameReplay's settings and a run of adds (each a step of every env) that reaches its eviction boundaries."""
    num_envs, stack, slots = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 8))
    settings = {
        "capacity": slots * num_envs + draw(st.integers(0, num_envs - 1)),  # each env holds capacity // num_envs
        "num_envs": num_envs,
        "observation_shape": (stack, 2),
        "n_step": draw(st.integers(1, 3)),
        "gamma": 0.9,
        "prioritized": draw(st.booleans()),
    }
    steps = st.lists(ENV_STEPS, min_size=num_envs, max_size=num_envs)
    return settings, draw(st.booleans()), draw(st.lists(steps, min_size=1, max_size=40)), draw(st.integers(0, 9))


@pytest.mark.slow
@CODECS
@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # the fixture's setting is the same in every run
)
@given(run=replay_runs())
def test_held_transitions_and_every_sample_match_a_model_of_the_frames_each_env_still_holds(run, compression):
    settings, next_step, steps, seed = run
    rng = np.random.default_rng(seed)
    model = HeldFrames(FrameReplay(**settings, seed=seed, compression=compression))
    num_envs, stack = settings["num_envs"], settings["observation_shape"][0]
    serial = iter(range(1, 1 << 16))  # every new frame differs from every other: two bytes of a counter

    def frames(count: int) -> list[np.ndarray]:
        return [np.array(divmod(next(serial), 256), np.uint8) for _ in range(count)]

    next_obs, ended = np.zeros((num_envs, stack, 2), np.uint8), np.zeros(num_envs, bool)
    for row in steps:
        obs = next_obs.copy()
        next_obs = np.empty_like(obs)
        for env, (obs_kind, lead, next_kind, *_) in enumerate(row):
            lead = min(lead, stack)
            if obs_kind == "fresh":
                obs[env] = frames(1) * lead + frames(stack - lead)
            next_obs[env] = [*obs[env][1:], *frames(1)] if next_kind == "shifted" else frames(stack)
        terminations = np.array([step[3] == "terminated" for step in row])
        truncations = np.array([step[3] == "truncated" for step in row])
        # Next-step autoreset: the step after an episode end is not a transition (and a few others are skipped).
        valid = ~ended & ~np.array([step[4] for step in row]) if next_step else None
        model.add(
            obs, rng.integers(0, 4, num_envs), rng.integers(-1, 2, num_envs), next_obs, terminations, truncations, valid
        )
        ended = terminations | truncations

        ids = np.array(model.sampleable(), np.int64)
        assert len(model.buffer) == len(ids) and np.array_equal(model.buffer.indices(), ids)
        if len(ids):
            model.check(model.buffer.get(ids))
            batch = model.buffer.sample(min(len(ids), 6))
            model.check(batch)
            if settings["prioritized"]:
                model.update_priorities(batch.indices, rng.choice([0.0, 0.5, 3.0], len(batch.indices)))
                model.check(model.buffer.sample(min(len(ids), 6)))
