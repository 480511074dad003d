"""Tests that kill the mutants benchmarks/mutation.py found surviving: each names the mutant (file, line as of its
run, the change) and checks the behaviour it broke against values worked out by hand."""

import dataclasses
import json
import os
import re
import signal
import socket
import struct
import threading
import time
from pathlib import Path

import ale_py
import cv2
import numpy as np
import pytest
from test_replay_codecs import rewritten

from atari_game import FrameReplay, Game, action_meanings, game_modes
from atari_game import pool as pool_module
from atari_game.game import CONTINUOUS_ACTION_HIGH, CONTINUOUS_ACTION_LOW, GameOptions
from atari_game.pool import GamePool, PoolError
from atari_game.pool_worker import POOL_STEP_BYTES, GameBlock
from atari_game.replay import FILE_FORMAT
from atari_game.segment import layout


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


def test_actions_at_the_int32_bounds_are_stored_and_one_past_them_refused():
    # Mutant: replay.py:282, ``actions.max() > int32 max`` made ``>=``: the largest int32 action refused.
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


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_float_observations_with_signed_zeros_and_nans_come_back_bit_for_bit(compression, dtype):
    # Mutants: replay.py:108, `_bits` comparing float32 frames by value (``not`` added, or 4 bytes left out of its
    # sizes), and replay.py:131, 8 or 2 bytes left out (float64, float16 frames): -0.0 == 0.0 would make a slot of
    # zeros and one of negative zeros one frame, stored once.
    buffer = FrameReplay(4, 1, (2, 2, 2), dtype=dtype, compression=compression)
    zeros = np.zeros((2, 2), dtype)
    obs = np.stack([zeros, -zeros])[None]  # slot 0 holds 0.0, slot 1 -0.0: equal as floats, not as bits
    next_obs = np.stack([-zeros, np.full((2, 2), np.nan, dtype)])[None]
    buffer.add(obs, np.zeros(1, int), np.zeros(1), next_obs, np.zeros(1, bool), np.zeros(1, bool))
    batch = buffer.get(buffer.indices())
    assert batch.obs.tobytes() == obs.tobytes() and batch.next_obs.tobytes() == next_obs.tobytes()
    assert np.signbit(batch.obs[0, :, 0, 0]).tolist() == [False, True]


@pytest.mark.parametrize(("name", "bounds"), [("gamma", "[0.0, 1.0]"), ("priority_epsilon", "[0.0, inf]")])
def test_a_negative_gamma_or_priority_epsilon_is_refused_and_zero_taken(name, bounds):
    # Mutants: replay.py:190 and :195, their lower bound 0.0 made -1.0.
    with pytest.raises(ValueError, match=re.escape(f"{name} must be a number in {bounds}, got -0.5")):
        FrameReplay(4, 1, (2, 2, 2), **{name: -0.5})
    assert getattr(FrameReplay(4, 1, (2, 2, 2), **{name: 0.0}), name) == 0.0


@pytest.mark.parametrize(
    ("capacity", "num_envs", "leaves"),
    [(1, 1, 1), (8, 2, 8), (8, 1, 8), (9, 1, 16), (12, 3, 16)],
)
def test_the_priority_trees_have_a_leaf_per_transition_slot_rounded_up_to_a_power_of_two(capacity, num_envs, leaves):
    # Mutants: replay.py:237, ``num_envs * slots - 1`` made ``- 0`` or ``+ 1``: twice the leaves when the slots are a
    # power of two (8 slots: 16 leaves), or one more. Two float64 trees of 2 * leaves nodes each.
    shape = (2, 2, 2)
    extra = (
        FrameReplay(capacity, num_envs, shape, prioritized=True).nbytes - FrameReplay(capacity, num_envs, shape).nbytes
    )
    assert extra == 2 * (2 * leaves) * 8


@pytest.mark.parametrize(
    ("name", "bad", "message", "lowest"),
    [
        ("stack", 0, "stack must be an integer >= 1, got 0", 1),
        ("beta", -0.5, "beta must be a number in [0.0, 1.0]", 0.0),
    ],
)
def test_a_stack_below_one_or_a_negative_beta_is_refused_and_the_lowest_taken(name, bad, message, lowest):
    # Mutants: replay.py:346, `stack`'s lower bound 1 made 0 (a stack of no frames), and replay.py:363, `beta`'s
    # lower bound 0.0 made -1.0 (importance-sampling weights that grow with the priority).
    with pytest.raises(ValueError, match=re.escape(message)):
        FrameReplay(4, 1, (2, 2, 2), prioritized=True, **{name: bad})
    assert getattr(FrameReplay(4, 1, (2, 2, 2), prioritized=True, **{name: lowest}), name) == lowest


def test_the_zstd_dictionary_is_trained_when_the_memory_has_written_its_4096th_frame():
    # Mutants: replay.py:183, the count of frames written starting at 1 or -1 instead of 0, and replay.py:64, 4,096
    # (the documented count) made 4,095 or 4,097: the dictionary trained one frame early or late. The first add
    # writes 4 + 1 frames (a fresh stack and next_obs's new frame), each sliding add after it 1.
    buffer = FrameReplay(4096, 1, (4, 2, 2), compression="zstd")
    sliding_adds(buffer, 4096 - 4)
    assert buffer._frames.compressor is not None  # 4,096 frames written: trained
    buffer = FrameReplay(4096, 1, (4, 2, 2), compression="zstd")
    sliding_adds(buffer, 4096 - 5)
    assert buffer._frames.compressor is None  # 4,095: held as they are


def test_a_full_memory_of_episodes_of_200_steps_holds_its_capacity():
    # Mutant: replay.py:392, the frame slots' margin ``FRAME_MARGIN * slots`` (3 %: 30 frames here) made ``/ slots``
    # (then 2 * stack = 8): each episode's first observation takes 3 frames more than its transitions (its stack), so
    # 1,000 transitions of 5-6 episodes need up to 1,018 frames, and with 1,008 the oldest transitions were evicted.
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


def test_prioritized_sampling_takes_priorities_to_the_power_0_6_by_default():
    # Mutant: replay.py:329, the default alpha 0.6 (the prioritized replay paper's) made 1.6.
    assert FrameReplay(4, 1, (2, 2, 2), prioritized=True).alpha == 0.6


def test_a_dtype_numpy_cannot_read_is_refused_naming_the_kinds_it_takes():
    # Mutant: replay.py:354, ``except TypeError`` replaced: numpy's own error instead of one naming what to pass.
    with pytest.raises(TypeError, match=re.escape("dtype must be a numpy dtype such as np.uint8 or np.float32, got")):
        FrameReplay(4, 1, (2, 2, 2), dtype="eight bits")


def test_a_beta_above_one_given_to_sample_is_refused_and_one_taken():
    # Mutant: replay.py:616, `sample`'s beta upper bound 1.0 made 2.0 (weights that over-correct the sampling).
    buffer = FrameReplay(4, 1, (2, 2, 2), prioritized=True, seed=0)
    sliding_adds(buffer, 2)
    with pytest.raises(ValueError, match=re.escape("beta must be a number in [0.0, 1.0], got 1.5")):
        buffer.sample(2, beta=1.5)
    assert buffer.sample(2, beta=1.0).weights.max() == 1.0  # (weights are normalised by their largest)


def test_a_replay_batch_is_read_only():
    # Mutant: replay.py:71, `ReplayBatch` no longer frozen: a batch's fields could be replaced after sampling.
    buffer = FrameReplay(4, 1, (2, 2, 2))
    sliding_adds(buffer, 2)
    batch = buffer.sample(2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.rewards = np.ones(2)  # type: ignore[misc]


def saved_with(tmp_path, change) -> Path:
    """A memory of 8 slots (4 of them empty: length -1) saved as `FrameReplay.save` writes it, then its arrays
    passed through `change` (a dict of them in, one out)."""
    buffer = FrameReplay(8, 1, (2, 2, 2), compression="zstd", seed=0)
    sliding_adds(buffer, 2)
    path = tmp_path / "replay.npz"
    buffer.save(path)
    path.write_bytes(rewritten(path.read_bytes(), change))
    return path


def test_a_saved_frame_length_below_minus_one_is_refused(tmp_path):
    # Mutant: replay.py:261, ``lengths.min() < -1`` made ``< -2``: a slot of length -2 loaded as an empty one.
    def damage(arrays):
        lengths = arrays["frames.lengths"].copy()
        lengths[lengths == -1] = -2  # the empty slots: the bytes still add up
        return {**arrays, "frames.lengths": lengths}

    with pytest.raises(ValueError, match="the frames' lengths do not add up to the bytes stored"):
        FrameReplay.load(saved_with(tmp_path, damage))


def test_a_header_of_another_format_is_refused_for_its_format(tmp_path):
    # Mutant: replay.py:796, ``not isinstance(header, dict) or ...`` made ``and``: another format's header was let
    # through, to fail later on a key it lacks, with a message that does not say why.
    header = np.frombuffer(b'{"format": "other", "version": 1}', np.uint8)
    path = saved_with(tmp_path, lambda arrays: {**arrays, "header": header})
    with pytest.raises(ValueError, match=re.escape(f"its header names no {FILE_FORMAT} file")):
        FrameReplay.load(path)


def test_a_memory_is_saved_as_format_version_1_which_loads(tmp_path):
    # Mutant: replay.py:68, the file format's version 1 made 2: this release's files would be refused by the
    # releases that read version 1, and theirs by this one.
    versions = []

    def read_version(arrays: dict) -> dict:
        versions.append(json.loads(arrays["header"].tobytes())["version"])
        return arrays

    assert FrameReplay.load(saved_with(tmp_path, read_version)).stack == 2
    assert versions == [1]


def test_a_batch_of_no_transitions_is_refused():
    # Mutant: replay.py:610, batch_size's lowest 1 made 0: ``sample(0)`` of a memory with transitions gave an empty
    # batch instead of the error the docstring promises.
    buffer = FrameReplay(8, 1, (2, 2, 2), seed=0)
    sliding_adds(buffer, 3)
    with pytest.raises(ValueError, match=re.escape("batch_size must be an integer >= 1, got 0")):
        buffer.sample(0)


def test_a_saved_array_of_its_dtype_but_another_shape_is_refused(tmp_path):
    # Mutant: replay.py:279, ``dtype differs or shape differs`` made ``and``: an array of the right dtype and the
    # wrong shape was loaded (numpy broadcast it, or failed later with a message naming no file).
    # (replay.py:280, the message's ``shape or '1-D'`` made ``and``: it named 1-D for a 2-D array.)
    shapes = []

    def narrowed(arrays: dict) -> dict:
        shapes.append(arrays["_rewards"].shape)
        return {**arrays, "_rewards": arrays["_rewards"][:, :1]}

    path = saved_with(tmp_path, narrowed)
    rows, slots = shapes[0]
    message = f"its array '_rewards' is float32 ({rows}, 1), not float32 ({rows}, {slots})"
    with pytest.raises(ValueError, match=re.escape(message)):
        FrameReplay.load(path)


def test_the_sum_tree_finds_the_leaf_whose_prefix_sums_hold_each_target():
    # Mutants: replay.py:752, ``targets >= left_sum`` made ``>``: a target equal to a leaf's first prefix sum went to
    # the leaf before it; ``right_sum > 0`` made ``> -1``: a target at the total (rounding) went into an empty
    # subtree, a slot with no transition.
    buffer = FrameReplay(4, 1, (1, 2, 2), prioritized=True, seed=0)  # 4 leaves
    buffer._set_leaves(np.array([0, 1]), np.array([1.0, 2.0]))  # prefix sums: leaf 0 [0, 1), leaf 1 [1, 3)
    targets = np.array([0.0, 0.5, 1.0, 2.5, 3.0])
    assert buffer._find(targets).tolist() == [0, 0, 1, 1, 1]


# --- game.py -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "name"),
    [
        ((0.0, 0.0, 0.0), "NOOP"),
        ((1.0, 0.0, 0.0), "RIGHT"),
        ((1.0, np.pi, 0.0), "LEFT"),
        ((1.0, np.pi / 2, 0.0), "UP"),
        ((1.0, -np.pi / 2, 1.0), "DOWNFIRE"),
        ((1.0, np.pi / 4, 0.0), "UPRIGHT"),
        ((0.3, np.pi / 2, 0.2), "NOOP"),  # every component within the threshold, 0.5
        ((0.0, 0.0, 0.9), "FIRE"),
        ((0.5, np.pi / 2, 0.5), "NOOP"),  # y and fire at the threshold exactly: not beyond it
        ((0.5, -np.pi / 2, 0.0), "NOOP"),
        ((0.5, 0.0, 0.0), "NOOP"),  # x at the threshold exactly, right and left
        ((0.5, np.pi, 0.0), "NOOP"),
    ],
)
def test_a_continuous_action_is_the_joystick_position_and_fire_beyond_the_threshold(action, name):
    # Mutants: game.py:836-840, the joystick's position and its comparisons with the threshold (``y < -threshold``
    # made ``not y < -threshold``: DOWN where the stick is centred; ``>`` made ``>=``; ``radius * cos`` made ``/``),
    # and ``fire > threshold`` made ``not fire > threshold``. The expected names are worked out by hand from
    # x = radius cos(angle), y = radius sin(angle) against the threshold 0.5.
    game = Game("Breakout", continuous=True)
    assert game._ale_action(np.array(action, np.float32))[0] == ale_py.Action.__members__[name]


def test_an_unknown_game_names_the_three_closest():
    # Mutant: game.py:135, three close names made four.
    with pytest.raises(ValueError, match=re.escape("(closest: SpaceWar, MsPacman, SpaceInvaders);")):
        Game("Space")


def test_a_misspelt_option_names_the_one_meant():
    # game.py:330 was not covered: no test misspelt an option. (Its mutant, one close match made two, is equivalent:
    # only the first is named.)
    with pytest.raises(TypeError, match=re.escape("unknown game option 'noop_maxx' (did you mean 'noop_max'?)")):
        Game("Breakout", noop_maxx=3)


def test_a_game_is_seeded_with_0_and_truncated_at_108000_frames_unless_told():
    # Mutants: game.py:301, the default seed 0 made 1, and :311, the default truncation after 108,000 emulator
    # frames (30 minutes at 60 Hz, as Machado et al. and Gymnasium's v5 ids) made 107,999.
    for options in (Game("Breakout").options, GameOptions.from_kwargs(game="Breakout")):  # (a pool's are the latter)
        assert options.seed == 0 and options.max_episode_frames == 108_000


def test_a_noop_max_of_1_starts_each_game_with_one_noop_frame():
    # Mutant: game.py:739, ``noop_max > 0`` made ``> 1``: noop_max=1 then started with none.
    for noop_max, frames in ((0, 0), (1, 1)):
        game = Game("Breakout", noop_max=noop_max, fire_reset=False)
        game.reset()
        assert game.ale.getEpisodeFrameNumber() == frames


def test_a_continuous_action_with_two_bad_entries_names_the_first():
    # Mutant: game.py:200, the first bad entry (``argwhere(bad)[0]``) made the last.
    game = Game("Breakout", continuous=True)
    game.reset()
    with pytest.raises(ValueError, match=re.escape("got 1.5 at index (0,)")):
        game.step([1.5, 0.0, np.nan])
    assert game.step([1.0, 0.0, 0.0])[0].shape == (4, 84, 84)  # still usable


def test_a_fire_outside_0_to_1_is_refused_and_the_bounds_cannot_be_changed():
    # Mutants: game.py:52 and :53, fire's bounds 0.0 made -1.0 and 1.0 made 2.0: fire outside its [0, 1] taken;
    # :54, the bounds left writable: any caller could change every Game's action space.
    game = Game("Breakout", continuous=True)
    game.reset()
    with pytest.raises(ValueError, match=re.escape("fire in [0, 1]) as floats of shape (3,), got -0.5 at index (2,)")):
        game.step([1.0, 0.0, -0.5])
    with pytest.raises(ValueError, match=re.escape("fire in [0, 1]) as floats of shape (3,), got 1.5 at index (2,)")):
        game.step([1.0, 0.0, 1.5])
    for bounds in (CONTINUOUS_ACTION_LOW, CONTINUOUS_ACTION_HIGH):
        with pytest.raises(ValueError, match="read-only"):
            bounds[2] = 0.5


def test_a_frame_size_of_another_height_than_width_is_height_by_width():
    # Mutant: game.py:557, cv2's (width, height) made (width, width): a frame 64 x 64 instead of 84 x 64.
    game = Game("Breakout", size=(84, 64))
    obs = game.reset()
    assert obs.shape == (4, 84, 64) and obs[-1].any()
    assert game.step(1)[0].shape == (4, 84, 64)


def test_a_frame_skip_of_1_shows_each_frame_as_it_is_without_max_pooling():
    # Written for game.py:635, ``frame_skip > 1`` made ``>= 1`` (with one frame a step, max-pool with the second
    # screen), which turned out equivalent: at frame_skip 1 the second screen is never written and stays zeros.
    # The expected frame is ALE's grayscale screen, area-resized as Gymnasium's AtariPreprocessing resizes it.
    game = Game("Breakout", frame_skip=1, noop_max=0)
    game.reset()
    for action in [1] * 5 + [2] * 40:  # FIRE, then RIGHT: the paddle moves away from where it was
        obs = game.step(action)[0]
        expected = cv2.resize(game.ale.getScreenGrayscale(), (84, 84), interpolation=cv2.INTER_AREA)
        assert np.array_equal(obs[-1], expected)


def test_observations_range_up_to_255_or_to_1_when_scaled():
    # Mutant: game.py:430 (not covered), the largest observation value 255 made 254.
    assert Game("Breakout").options.observation_high == 255
    assert Game("Breakout", scale_obs=True).options.observation_high == 1.0


def test_a_probability_option_takes_0_to_1_inclusive():
    # Mutants: game.py:220, ``0.0 <= value <= 1.0`` made ``-1.0 <=`` (a negative probability taken) or ``< 1.0``
    # (sticky actions that always repeat refused).
    with pytest.raises(ValueError, match=re.escape("sticky_actions must be a probability in [0, 1], got -0.1")):
        Game("Breakout", sticky_actions=-0.1)
    # Always repeated, the last action before any is ALE's NOOP: moving the paddle right does nothing.
    right, still = Game("Breakout", sticky_actions=1.0), Game("Breakout", sticky_actions=1.0)
    right.reset()
    still.reset()
    assert all(np.array_equal(right.step(2)[0], still.step(0)[0]) for _ in range(30))


def test_game_options_cannot_be_changed_once_made():
    # Mutant: game.py:244, GameOptions not frozen: a Game's options could be changed under it (its arrays were made
    # for the ones it was given).
    game = Game("Breakout")
    with pytest.raises(dataclasses.FrozenInstanceError):
        game.options.frame_skip = 2


def test_reset_takes_seed_0_as_a_new_game_seeded_0_and_refuses_a_negative_seed():
    # Mutants: game.py:571, the seed's lowest value 0 made 1 (seed 0 refused) or -1 (a negative seed taken).
    game = Game("Breakout", seed=5, noop_max=30)
    game.reset()
    game.step(1)
    assert np.array_equal(game.reset(seed=0), Game("Breakout", seed=0, noop_max=30).reset())
    with pytest.raises(ValueError, match=re.escape("seed must be an integer >= 0, got -1")):
        game.reset(seed=-1)


def test_a_game_has_no_lives_before_its_first_reset():
    # Mutant: game.py:560, the lives before the first reset 0 made 1 or -1: no game has started, so none are left.
    game = Game("Breakout")
    assert game.lives == 0
    game.reset()
    assert game.lives == 5


def test_a_roms_facts_are_read_once_per_game(monkeypatch):
    # Mutant: game.py:148, the cache of a ROM's facts removed: every option check and action list would load the ROM
    # again (~0.1 s each; a GamePool checks its options in the parent and in each worker).
    meanings = action_meanings("Pong")
    monkeypatch.setattr(ale_py, "ALEInterface", lambda: pytest.fail("a ROM was loaded again for its facts"))
    assert action_meanings("Pong") == meanings
    assert game_modes("Pong") == (0, 1)


# --- the pool (atari_game/pool.py, atari_game/pool_worker.py) ---------------------------------------------------


def test_a_game_block_step_says_whether_an_episode_ended():
    # Mutants: pool_worker.py:87, the flag starting True: a RayGamePool actor would send every env's episode
    # statistics after every step (ray_pool._reply sends them only after a step that ended an episode); :98, not
    # set when one ended: it would never send them.
    options = {"game": "Breakout", "max_episode_frames": 40}  # truncated at the 10th step of 4 frames
    shapes = layout(2, Game(**options).options, same_step=True)
    arrays = {name: np.zeros(shape, dtype) for name, (shape, dtype) in shapes.items()}
    block = GameBlock([0, 1], [0, 1], False, [options, options], arrays)
    # Mutant: pool_worker.py:80, a reset answered as if an episode had ended (the same Ray reply, bigger).
    assert block.run("reset", ({0: 0, 1: 1}, [])) == ("ok", [], False)
    ended = [block.step([0, 1]) for _ in range(12)]
    assert ended == [False] * 9 + [True] + [False] * 2
    assert arrays["ended"].tolist() == [False, False] and block.step([1]) is False


def test_episode_statistics_are_zero_for_the_envs_whose_episode_goes_on(closing):
    # Mutant: pool.py:752, the lengths of the envs whose episode goes on made 1: Gymnasium's vector statistics
    # (RecordEpisodeStatistics) hold 0 there, beside the mask.
    pool = closing(GamePool)(4, seed=1, n_workers=2, game="Breakout")
    pool.reset()
    rng, partly = np.random.default_rng(0), 0
    for _ in range(300):
        *_, info = pool.step(rng.integers(4, size=4))
        if "episode" in info and not info["_episode"].all():
            mask, episode = info["_episode"], info["episode"]
            assert not episode["r"][~mask].any() and not episode["l"][~mask].any()
            assert (episode["l"][mask] > 0).all()
            partly += 1
            if partly == 3:  # steps where some envs' episodes ended and others' went on
                return
    pytest.fail(f"only {partly} of 300 steps ended some envs' episodes and not others'")


def test_each_workers_count_of_commands_is_raised_in_its_first_envs_row(closing):
    # Mutants: pool.py:385 (a whole-pool step) and :357 (any other command, `_post`), the count of commands raised
    # in a worker's last env's row, in another column, by 2 or not at all: a worker watching for its next command
    # reads its first env's row, and would miss it (and sleep until the command's byte woke it: the same values,
    # slower; the watch's timing test sees it too) or take one command for two.
    pool = closing(GamePool)(6, n_workers=2, batch_size=3, game="Breakout")  # envs 0-2 and 3-5
    commands = pool._shared["commands"]
    before = commands.copy()
    pool.reset()  # a command to each worker
    for _ in range(5):
        pool.step([0] * 6)
    pool.send([0, 0, 0], env_ids=[3, 4, 5])  # a command to the second worker only
    pool.recv()
    raised = commands - before
    assert raised[:, 0].tolist() == [6, 0, 0, 7, 0, 0] and not raised[:, 1:].any()


def test_a_whole_pool_step_that_the_first_worker_fails_is_reported(closing, unchecked):
    # Mutant: pool.py:392, ``answers.min() >= 0`` made ``>= -1``: the failed answer of the worker whose first env is
    # 0, -1 - 0, would pass for an answer: its error unreported, its envs' results what the segment held.
    pool = closing(GamePool)(4, n_workers=2, game="Breakout")
    pool.reset()
    unchecked(pool)  # a bad action reaches the worker
    with pytest.raises(PoolError, match=r"(?s)envs 0-1\) failed on envs \[0, 1\].*IndexError"):
        pool.step([99, 0, 0, 0])


def test_a_game_is_reported_only_for_the_envs_whose_game_ended_in_that_step(closing):
    # Mutant: pool.py:749, the game mask ``ended & game_ended`` made ``|``: an env whose last episode ended its game
    # keeps game_ended set in the segment until its next episode ends, and would be reported again meanwhile.
    pool = closing(GamePool)(4, seed=2, n_workers=2, game="Breakout", life_loss="terminal")
    pool.reset()
    # Breakout's game has 5 lives, an episode each here: every 5th episode of an env ends its game.
    rng, episodes, stale = np.random.default_rng(1), np.zeros(4, int), 0
    for _ in range(3000):
        *_, info = pool.step(rng.integers(4, size=4))
        if "episode" in info:
            ended, game = info["_episode"], info.get("_game", np.zeros(4, bool))
            game_over = episodes % 5 == 0  # (before this step's) the env's last episode ended its game
            episodes += ended
            assert game.tolist() == (ended & (episodes % 5 == 0)).tolist()
            stale += int((game_over & (episodes > 0) & ~ended).any())
            if stale == 3:  # steps where an env whose game had ended went on beside an episode that ended
                return
    pytest.fail(f"only {stale} steps of 3,000 had an env whose game had ended go on beside an episode that ended")


def timed_steps(pool: GamePool, steps: int) -> list[float]:
    """The seconds each of `steps` whole-pool steps of `pool` took (all envs play action 0)."""
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        pool.step([0] * pool.num_envs)
        seconds.append(time.perf_counter() - start)
    return seconds


# The parent gives up waiting for a whole-pool step's wake-up after this long in the tests below (not the library's
# 0.5 s), so that only a step slowed down for seconds by busy processes is read the general way.
PATIENT = 5.0


def test_a_whole_pool_step_whose_answers_all_came_is_not_read_again_the_general_way(closing, monkeypatch):
    # Mutants: pool.py:392, ``answers.min() >= 0`` made ``> 0`` or ``>= 1``: the answer of the worker whose first env
    # is 0 is 0, so every step would be booked and read again the general way (`_hand_over`, `_finish_in_flight`);
    # :370, ``if self._busy`` made ``if not``: every step would be sent and read the general way (`_step_each`).
    # The same values, at several times the parent's cost.
    monkeypatch.setattr(pool_module, "LIVENESS_CHECK_SECONDS", PATIENT)
    pool = closing(GamePool)(4, n_workers=2, game="Breakout")
    pool.reset()
    general = []
    finish_in_flight = pool._finish_in_flight
    monkeypatch.setattr(pool, "_finish_in_flight", lambda: (general.append(1), finish_in_flight()))
    seconds = timed_steps(pool, 20)
    assert general == [] or max(seconds) >= PATIENT


def test_recv_returns_the_first_envs_done_without_waiting_for_a_stopped_worker(closing, monkeypatch):
    # Mutants: pool.py:637, `_collect`'s default ``everything=False`` made True, and :433, the read's size the other
    # way round or 2: recv() would wait for every answer in flight (or two), up to the liveness timeout, not for
    # the first: the same batch, late.
    monkeypatch.setattr(pool_module, "LIVENESS_CHECK_SECONDS", PATIENT)
    pool = closing(GamePool)(4, n_workers=2, batch_size=2, game="Breakout")  # envs 0-1 and 2-3
    pool.reset()
    stopped = pool._workers[1].process.pid
    os.kill(stopped, signal.SIGSTOP)
    resume = threading.Timer(PATIENT, os.kill, (stopped, signal.SIGCONT))  # (a late recv gets its answer)
    resume.start()
    try:
        pool.send([0, 0, 0, 0])
        *_, info = pool.recv()
        waited = not resume.is_alive()
    finally:
        resume.cancel()
        os.kill(stopped, signal.SIGCONT)
    assert sorted(info["env_id"].tolist()) == [0, 1] and not waited


def test_a_whole_pool_step_with_a_worker_already_gone_reports_it_dead(closing):
    # Mutant: pool.py:383 (not covered), the write of the step's byte to a worker that is gone (its pipe broken)
    # would raise its OSError out of step() instead of leaving the death to the general machinery.
    pool = closing(GamePool)(4, n_workers=2, game="Breakout")
    pool.reset()
    worker = pool._workers[0]
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.join()  # gone, and its end of the pipe with it
    with pytest.raises(PoolError, match=r"envs 0-1\) died"):
        pool.step([0] * 4)


def test_a_failed_command_is_reported_for_its_own_worker_and_envs(closing, unchecked):
    # Mutants: pool.py:450, the env of a failed answer (-1 - id) read as -id: with an env a worker, the next
    # worker's (or none); :454, a failed command's envs taken from the last command in flight to its worker, not the
    # first (the one answered).
    pool = closing(GamePool)(2, n_workers=2, batch_size=1, game="Breakout")
    pool.reset()
    unchecked(pool)  # a bad action reaches the worker
    with pytest.raises(PoolError, match=rf"\(pid {pool._workers[0].process.pid}, envs 0-0\) failed on envs \[0\]"):
        pool.step([99, 0])
    pool = closing(GamePool)(2, n_workers=1, batch_size=1, game="Breakout")
    pool.reset()
    unchecked(pool)
    pool.send([99], env_ids=[0])  # fails
    pool.send([0], env_ids=[1])  # queued behind it, to the same worker
    with pytest.raises(PoolError, match=r"failed on envs \[0\]"):
        pool.recv()


def test_a_whole_pool_step_wakes_the_parent_once_and_leaves_no_wake_up_behind(closing, monkeypatch):
    # Mutants: pool.py:375, a ticket fewer than workers - 1, or none: two or more workers would each find no
    # ticket left, take themselves for the last and wake the parent; the next step would then read a stale wake-up
    # before its own. With one ticket fewer than workers, one worker wakes the parent, once a step.
    monkeypatch.setattr(pool_module, "LIVENESS_CHECK_SECONDS", PATIENT)
    # Mutant: pool.py:377, the step's tag not changed (``+ 0``): a late wake-up of the step before, which the
    # parent skips by its tag, would be taken for this step's, and this step's left behind.
    pool = closing(GamePool)(6, n_workers=3, game="Breakout")
    pool.reset()
    for t in range(30):
        if t % 2:  # a late wake-up of the step before
            os.write(pool._wake[1].fileno(), POOL_STEP_BYTES[pool._step_tag])
        (seconds,) = timed_steps(pool, 1)
        time.sleep(0.01)  # (another wake-up, sent as the parent woke, is in by now)
        if seconds < PATIENT:  # woken, not given up on
            with pytest.raises(BlockingIOError):
                pool._wake[0].recv(64, socket.MSG_DONTWAIT)


class WatchedAnswers:
    """Put in place of the parent's end of `pool`'s answer socket: it counts the parent's reads; `late` (bytes:
    answers) is sent on the socket just after the first read, as by a worker that answers while the parent reads."""

    def __init__(self, pool: GamePool, late: bytes = b"") -> None:
        self.end, self.child, self.late, self.reads = pool._answers[0], pool._answers[1], late, 0
        pool._answers = (self, self.child)

    def recv_into(self, *args: object) -> int:
        try:
            return self.end.recv_into(*args)
        finally:
            self.reads += 1
            if self.reads == 1 and self.late:
                os.write(self.child.fileno(), self.late)

    def __getattr__(self, name: str) -> object:
        return getattr(self.end, name)


def answer(worker_first_env: int) -> bytes:
    """A worker's answer as it writes it: the first env of its block."""
    return struct.pack("=i", worker_first_env)


@pytest.mark.parametrize("late", [True, False], ids=["an answer late", "every answer in"])
def test_a_woken_parent_reads_every_answer_of_a_whole_pool_step_once(closing, late):
    # Mutants: pool.py:405, ``woken = True`` made False, and :412, ``woken`` negated: a worker takes its ticket before
    # it answers, so the last one can wake the parent while another is between its ticket and its answer. The woken
    # parent must wait for that answer; reading only what was in, it would hand the whole step to the general way
    # (booked as a command each, read again). :412, ``got < len(view)`` made ``<=``: with every answer in, a
    # second read (of nothing).
    pool = closing(GamePool)(4, n_workers=2, game="Breakout")  # envs 0-1 and 2-3
    command = POOL_STEP_BYTES[1]
    os.write(pool._answers[1].fileno(), answer(2) if late else answer(2) + answer(0))
    os.write(pool._wake[1].fileno(), command)  # the last worker's wake-up
    watched = WatchedAnswers(pool, late=answer(0) if late else b"")
    answers = np.full(2, pool_module.NO_ANSWER, np.int32)
    pool._read_pool_step(answers, command)
    assert answers.tolist() == [2, 0]
    assert watched.reads == (2 if late else 1)


def test_a_parent_not_woken_takes_the_answers_that_came_and_waits_no_more(closing, monkeypatch):
    # Mutants: pool.py:407, a wait for the wake-up that gave up taken as woken, and :412, ``woken and`` made ``or``:
    # the parent would wait again for the answers still missing, up to LIVENESS_CHECK_SECONDS more (a dead worker's
    # never come) before the general way checks that the workers are alive. Not woken, it reads what came and leaves
    # any later answer to the general way.
    monkeypatch.setattr(pool_module, "LIVENESS_CHECK_SECONDS", 0.05)  # the wait for the wake-up that never comes
    pool = closing(GamePool)(4, n_workers=2, game="Breakout")
    os.write(pool._answers[1].fileno(), answer(2))
    WatchedAnswers(pool, late=answer(0))
    answers = np.full(2, pool_module.NO_ANSWER, np.int32)
    pool._read_pool_step(answers, POOL_STEP_BYTES[1])
    assert answers.tolist() == [2, pool_module.NO_ANSWER]
    assert pool._answers[0].recv(8, socket.MSG_DONTWAIT) == answer(0)  # left in the socket


def test_a_reset_reads_every_workers_answer_at_once(closing, monkeypatch):
    # Mutant: pool.py:629, `_finish_in_flight` collecting with ``everything=False``: it would read (and sleep until)
    # one answer at a time, waking the parent once a worker instead of once.
    monkeypatch.setattr(pool_module, "LIVENESS_CHECK_SECONDS", PATIENT)
    pool = closing(GamePool)(6, n_workers=3, game="Breakout")
    pool.reset()  # (the workers started: a slow start would pass for a read given up on)
    watched = WatchedAnswers(pool)
    start = time.perf_counter()
    pool.reset()
    assert watched.reads == 1 or time.perf_counter() - start >= PATIENT
