"""FrameReplay: a replay memory for stacked-frame observations that stores each frame once, every sample exact.

    buffer = FrameReplay(capacity=1_000_000, num_envs=8, observation_shape=(4, 84, 84))
    buffer.add(obs, actions, rewards, next_obs, terminations, truncations)  # one pool step, arrays over the envs
    batch = buffer.sample(32)  # batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.dones, ...

Each env keeps a ring of single frames, one new frame per transition; where an observation does not continue the one
before, its frames start a new *segment* (the Design page says how, the Replay guide what it costs).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from atari_game.extras import install_command
from atari_game.validation import check_array, check_bool, check_choice, check_int, check_number

# Extra frame slots per env, as a share of its transition slots: they hold the frames of segment starts.
FRAME_MARGIN = 0.03
# compression="zstd": frames held raw until DICTIONARY_FRAMES are written (or every slot), then a dictionary trained.
COMPRESSIONS = (None, "zstd")
DICTIONARY_FRAMES = 4096
DICTIONARY_BYTES = 16384
ZSTD_LEVEL = 3
# The file format of FrameReplay.save.
FILE_FORMAT, FILE_VERSION = "atari_game.FrameReplay", 1


@dataclasses.dataclass(frozen=True)
class ReplayBatch:
    """A batch of `B` transitions, numpy arrays.

    Attributes:
        obs: ``(B, *observation_shape)`` of the buffer's dtype, the observations the actions were taken in.
        actions: ``int64 (B,)``.
        rewards: ``float32 (B,)``: the reward, or with ``n_step > 1`` the discounted sum of the ``k`` rewards
            from this transition on, ``sum(gamma**j * r[t + j] for j < k)``.
        next_obs: ``(B, *observation_shape)``: the observation ``k`` steps on, or the final observation of the
            episode when it ended within them.
        dones: ``bool (B,)``: the episode terminated within the ``k`` steps (no bootstrap). A truncation is not
            a done: its ``next_obs`` is the final observation to bootstrap from.
        discounts: ``float32 (B,)``: ``gamma**k``, the discount of the bootstrap value in the TD target
            ``rewards + discounts * (1 - dones) * max_a Q(next_obs, a)``. ``k`` is `n_step`, or fewer steps when
            the episode ended earlier.
        weights: ``float32 (B,)``: importance-sampling weights with ``prioritized=True``, ones otherwise, so a
            learner can always multiply its per-sample losses by them.
        indices: ``int64 (B,)``: the transitions' ids, for `FrameReplay.update_priorities` and `FrameReplay.get`.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    dones: np.ndarray
    discounts: np.ndarray
    weights: np.ndarray
    indices: np.ndarray


def _bits(array: np.ndarray) -> np.ndarray:
    # Compare observations bit for bit: as floats, -0.0 == 0.0 and NaN != NaN would break exactness.
    return array.view(f"u{array.dtype.itemsize}") if array.dtype.itemsize in (1, 2, 4, 8) else array


def _ranges(starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All ``(row, value)`` with ``starts[row] <= value < stops[row]``, as two flat arrays (no Python loop)."""
    lengths = np.maximum(stops - starts, 0)
    rows = np.repeat(np.arange(len(starts)), lengths)
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return rows, starts[rows] + offsets


class _Frames:
    """Each env's ring of frames, ``(num_envs, frame_slots, *frame_shape)``, uncompressed."""

    def __init__(self, num_envs: int, frame_slots: int, frame_shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.frames = np.zeros((num_envs, frame_slots, *frame_shape), dtype)
        self.nbytes = self.frames.nbytes

    def write(self, envs: np.ndarray, positions: np.ndarray, frames: np.ndarray) -> None:
        """Store `frames` ``(n, *frame_shape)`` at ring `positions` of `envs` (both ``(n,)``)."""
        self.frames[envs, positions] = frames

    def read(self, flat: np.ndarray, out: np.ndarray) -> None:
        """Gather the frames at flat positions ``env * frame_slots + position`` into `out` ``(n, *frame_shape)``."""
        # (The positions are in range: mode="wrap" only spares np.take a buffered bounds check.)
        np.take(self.frames.reshape(-1, *out.shape[1:]), flat, axis=0, out=out, mode="wrap")

    def state(self) -> dict[str, np.ndarray]:
        """The arrays that `restore` takes back."""
        return {"frames": self.frames}

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        self.frames[...] = _saved(arrays, "frames", self.frames.dtype, self.frames.shape)


class _CompressedFrames:
    """Each env's ring of frames, each a ``bytes``: held raw until `train_at` are written, then zstd-compressed."""

    def __init__(self, num_envs: int, frame_slots: int, frame_shape: tuple[int, ...], dtype: np.dtype) -> None:
        try:  # an optional dependency: only this store needs it
            import zstandard
        except ImportError as error:
            raise ImportError(f"FrameReplay's zstd compression needs zstandard: {install_command('zstd')}") from error

        self.zstandard = zstandard
        self.blobs = np.full((num_envs, frame_slots), None, object)  # 8 bytes a slot, resident at once
        self.train_at = min(DICTIONARY_FRAMES, self.blobs.size)
        self.written = 0  # frames written so far
        self.held_bytes = 0  # sys.getsizeof of the blobs held
        self.dictionary = b""  # the trained dictionary (empty where training failed: plain zstd)
        self.compressor: Any = None  # None while the frames are held raw

    def write(self, envs: np.ndarray, positions: np.ndarray, frames: np.ndarray) -> None:
        """Store `frames` ``(n, *frame_shape)`` at ring `positions` of `envs` (both ``(n,)``), compressed one by one."""
        frames = np.ascontiguousarray(frames)
        encode = bytes if self.compressor is None else self._compress
        for env, position, frame in zip(envs.tolist(), positions.tolist(), frames, strict=True):
            old = self.blobs[env, position]
            blob = self.blobs[env, position] = encode(frame)
            self.held_bytes += sys.getsizeof(blob) - (0 if old is None else sys.getsizeof(old))
        self.written += len(frames)
        if self.compressor is None and self.written >= self.train_at:
            self._train()

    def _train(self) -> None:
        """Train the dictionary on the frames held (raw) and compress every one of them with it."""
        held = [blob for blob in self.blobs.flat if blob is not None]
        try:
            self.dictionary = self.zstandard.train_dictionary(DICTIONARY_BYTES, held).as_bytes()
        except self.zstandard.ZstdError:  # frames too few or too small to learn from: plain zstd
            self.dictionary = b""
        self._start_codec()
        flat = self.blobs.reshape(-1)
        for position in np.flatnonzero(flat != None):  # noqa: E711 (elementwise: the slots that hold a frame)
            flat[position] = self._compress(flat[position])
        self.held_bytes = sum(sys.getsizeof(blob) for blob in flat if blob is not None)

    def _compress(self, frame: Any) -> bytes:
        """`frame` compressed, in a ``bytes`` of its own size (zstandard's worst-case-sized buffer stays resident)."""
        return bytes(memoryview(self.compressor.compress(frame)))

    def _start_codec(self) -> None:
        zstd = self.zstandard
        dictionary = zstd.ZstdCompressionDict(self.dictionary) if self.dictionary else None
        self.compressor = zstd.ZstdCompressor(level=ZSTD_LEVEL, dict_data=dictionary, write_checksum=False)
        self.decompressor = zstd.ZstdDecompressor(dict_data=dictionary)

    def read(self, flat: np.ndarray, out: np.ndarray) -> None:
        """`_Frames.read`, decompressing each distinct frame once (a batch's obs and next_obs share most frames)."""
        decode = self.decompressor.decompress if self.compressor is not None else bytes
        unique, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
        # Each distinct frame into `out` where it first appears, then copied on (no array between: it costs as much).
        view, size = out.reshape(-1).view(np.uint8).data, math.prod(out.shape[1:]) * out.itemsize
        for k, blob in zip(first.tolist(), self.blobs.reshape(-1)[unique].tolist(), strict=True):
            view[k * size : (k + 1) * size] = decode(blob)
        sources = first[inverse]
        again = np.flatnonzero(sources != np.arange(len(flat)))
        out[again] = out[sources[again]]

    @property
    def nbytes(self) -> int:
        """The pointers' array and every blob held as Python counts it (its bytes and its object header)."""
        return self.blobs.nbytes + self.held_bytes + len(self.dictionary)

    def state(self) -> dict[str, np.ndarray]:
        """The arrays that `restore` takes back: every blob, concatenated, with its length (-1: no frame)."""
        flat = self.blobs.reshape(-1)
        lengths = np.array([-1 if blob is None else len(blob) for blob in flat], np.int64).reshape(self.blobs.shape)
        return {
            "lengths": lengths,
            "blobs": np.frombuffer(b"".join(blob for blob in flat if blob is not None), np.uint8),
            "dictionary": np.frombuffer(self.dictionary, np.uint8),
            "written": np.array(self.written, np.int64),
            "compressed": np.array(self.compressor is not None),
        }

    def restore(self, arrays: dict[str, np.ndarray]) -> None:
        lengths = _saved(arrays, "lengths", np.int64, self.blobs.shape)
        data = _saved(arrays, "blobs", np.uint8).tobytes()
        if lengths.min() < -1 or lengths.clip(0).sum() != len(data):
            raise ValueError("the frames' lengths do not add up to the bytes stored")
        ends = np.cumsum(lengths.clip(0).reshape(-1)).tolist()
        flat = self.blobs.reshape(-1)
        for position, (length, end) in enumerate(zip(lengths.reshape(-1).tolist(), ends, strict=True)):
            flat[position] = None if length < 0 else data[end - length : end]
        self.held_bytes = sum(sys.getsizeof(blob) for blob in flat if blob is not None)
        self.dictionary = _saved(arrays, "dictionary", np.uint8).tobytes()
        self.written = int(_saved(arrays, "written", np.int64, ()))
        if _saved(arrays, "compressed", np.bool_, ()):
            self._start_codec()


def _saved(arrays: Any, name: str, dtype: Any, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The saved array `name` of `arrays` (an open ``.npz``), checked to be of `dtype` and `shape` (None: 1-D)."""
    if name not in arrays:
        raise ValueError(f"it has no array {name!r}")
    array = arrays[name]
    if array.dtype != np.dtype(dtype) or (array.ndim != 1 if shape is None else array.shape != shape):
        raise ValueError(f"its array {name!r} is {array.dtype} {array.shape}, not {np.dtype(dtype)} {shape or '1-D'}")
    return array


class FrameReplay:
    """A replay memory for `num_envs` envs' stacked-frame observations that stores each frame once.

    Args:
        capacity: how many transitions it holds (each env holds ``capacity // num_envs``; at least 1).
        num_envs: how many envs `add` takes a step of at a time.
        observation_shape: one observation's shape, ``(stack, h, w)`` (``(h, w, stack)`` with
            `channels_last`); the stack axis may hold several channels per frame (see `stack`).
        stack: frames per observation; the stack axis holds ``stack`` frames of equal channel counts, oldest
            first: frame ``k`` of a ``(stack * 3, h, w)`` RGB observation is channels ``3k .. 3k + 2``.
            Default: the stack axis's length (one channel per frame, as a `Game`'s observations).
        channels_last: the stack axis is the last axis (a `Game` with ``channels_last=True``), not the first.
        dtype: the observations' dtype (default ``uint8``; ``float32`` works too); `add` refuses any other.
        n_step: transitions sample ``n_step``-step returns (see `ReplayBatch`); a transition is sampled only
            once its ``n_step`` steps are all in the buffer or its episode ended within them.
        gamma: the discount of the ``n_step`` returns and of ``ReplayBatch.discounts``.
        prioritized: proportional prioritized replay (Schaul et al. 2016): a transition is sampled with
            probability ``p**alpha / sum(p**alpha)``; new transitions get the largest priority given so far
            (1 at first); `update_priorities` sets them.
        alpha: how much the priorities count (0: uniform).
        beta: the importance-sampling exponent of ``ReplayBatch.weights``, ``(p_min / p) ** (beta * alpha)``
            over the buffer's sampleable transitions; `sample` can override it (to anneal it to 1).
        priority_epsilon: added to every priority `update_priorities` sets, so that none becomes unsampleable.
        seed: seeds the sampling generator (None: fresh entropy); the same seed and adds give the same batches.
        compression: None (frames stored as they are) or ``"zstd"``: each frame compressed on its own when added
            with a dictionary (see the Replay guide; needs ``zstandard``: ``pip install -e ".[zstd]"``).

    `len(buffer)` is the number of transitions that can be sampled, `buffer.nbytes` the bytes it holds. Not
    thread-safe: do not `add` and `sample` from two threads at once.
    """

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        observation_shape: tuple[int, ...],
        *,
        stack: int | None = None,
        channels_last: bool = False,
        dtype: Any = np.uint8,
        n_step: int = 1,
        gamma: float = 0.99,
        prioritized: bool = False,
        alpha: float = 0.6,
        beta: float = 0.4,
        priority_epsilon: float = 1e-6,
        seed: int | None = None,
        compression: str | None = None,
    ) -> None:
        # Validate everything before allocating anything.
        self.num_envs = check_int("num_envs", num_envs, 1)
        self.capacity = check_int("capacity", capacity, 1)
        if self.capacity < self.num_envs:
            raise ValueError(f"capacity must be at least num_envs ({self.num_envs}): one slot per env, got {capacity}")
        if not isinstance(observation_shape, (tuple, list)) or not observation_shape:
            raise TypeError(f"observation_shape must be a tuple of positive integers, got {observation_shape!r}")
        # Each side checked on its own: the message names the entry.
        self.observation_shape = tuple(
            check_int(f"observation_shape[{k}]", side, 1) for k, side in enumerate(observation_shape)
        )
        self.channels_last = check_bool("channels_last", channels_last)
        depth = self.observation_shape[-1 if channels_last else 0]  # the stack axis's length
        self.stack = depth if stack is None else check_int("stack", stack, 1)
        if depth % self.stack:
            raise ValueError(
                f"stack must divide the stack axis of observation_shape {self.observation_shape} (length {depth}), "
                f"got {stack}"
            )
        try:
            self.dtype = np.dtype(dtype)
        except TypeError as error:
            raise TypeError(f"dtype must be a numpy dtype such as np.uint8 or np.float32, got {dtype!r}") from error
        if self.dtype.kind not in "biuf":
            raise TypeError(f"dtype must be a boolean, integer or float dtype, got {self.dtype}")
        self.n_step = check_int("n_step", n_step, 1)
        self.gamma = check_number("gamma", gamma, 0.0, 1.0)
        self.prioritized = check_bool("prioritized", prioritized)
        self.alpha = check_number("alpha", alpha, 0.0, math.inf)
        self.beta = check_number("beta", beta, 0.0, 1.0)
        self.priority_epsilon = check_number("priority_epsilon", priority_epsilon, 0.0, math.inf)
        if seed is not None:
            check_int("seed", seed, 0)
        self.compression = check_choice("compression", compression, COMPRESSIONS)
        # What `save` writes for `load` to rebuild the same memory: every argument as validated, in the signature's
        # order, but the seed (the generator's state is saved instead).
        names = [name for name in inspect.signature(FrameReplay).parameters if name != "seed"]
        self._arguments = {name: getattr(self, name) for name in names} | {"dtype": self.dtype.str}

        # One frame: the stack axis's `channels` channels of one time step, laid out as in the observation.
        channels = depth // self.stack
        rest = self.observation_shape[:-1] if channels_last else self.observation_shape[1:]
        self.frame_shape = (*rest, channels) if channels_last else (channels, *rest)
        self.slots = self.capacity // self.num_envs  # transition slots per env
        self.frame_slots = self.slots + max(2 * self.stack, math.ceil(FRAME_MARGIN * self.slots))
        # Offsets and depths (at most `stack`) fit the smallest unsigned type.
        small = np.min_scalar_type(self.stack)
        shape = (self.num_envs, self.slots)

        # The frames (a store: `write` and `read` them), and per transition slot where its observations' frames are:
        # `newest`, `gap` and the two depths (the Design page says how an observation is found from them).
        store = _Frames if compression is None else _CompressedFrames
        self._frames = store(self.num_envs, self.frame_slots, self.frame_shape, self.dtype)
        self._newest = np.zeros(shape, np.int64)
        self._gap, self._obs_depth, self._next_depth = (np.zeros(shape, small) for _ in range(3))
        self._actions = np.zeros(shape, np.int32)
        self._rewards = np.zeros(shape, np.float32)
        self._terminated, self._truncated = np.zeros(shape, np.bool_), np.zeros(shape, np.bool_)
        # Each env's previous next_obs, to check that the next obs continues it.
        self._last_next = np.zeros((self.num_envs, *self.observation_shape), self.dtype)

        # Per env, counted from its first add, never wrapping: transitions added, frames written, the oldest
        # transition still held, the first transition not yet sampleable (n-step) and the last episode end.
        self._added, self._written, self._oldest, self._ready = (np.zeros(self.num_envs, np.int64) for _ in range(4))
        self._last_end = np.full(self.num_envs, -1, np.int64)

        # Prioritized replay: a sum tree and a max tree of reciprocals (Design page), leaf ``e * slots + t % slots``.
        self._leaves = 1 << max(self.num_envs * self.slots - 1, 0).bit_length()
        if self.prioritized:
            self._sum_tree, self._inverse_tree = np.zeros(2 * self._leaves), np.zeros(2 * self._leaves)
        self._max_priority = 1.0
        self._rng = np.random.default_rng(seed)

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
        valid: np.ndarray | None = None,
    ) -> None:
        """Store one step of every env (or of the envs where `valid` is True).

        Args:
            obs: ``(num_envs, *observation_shape)`` of the buffer's dtype: the observations acted in.
            actions: integers ``(num_envs,)`` (stored as int32).
            rewards: finite numbers ``(num_envs,)`` (stored as float32).
            next_obs: ``(num_envs, *observation_shape)``: the true next observations; on a step that ended an
                episode, its final observation (not the next episode's first one).
            terminations, truncations: bool ``(num_envs,)``: the step ended the episode by termination (a
                done: no bootstrap) or by truncation (bootstraps from `next_obs`).
            valid: bool ``(num_envs,)`` or None (all True): the envs whose step is a transition. With a
                next-step-autoreset pool, the step after an episode end only resets the env: pass
                ``valid=~(previous_terminations | previous_truncations)``. (Skipping any other step joins the
                transitions around it into one episode for n-step returns.)

        Everything is checked before anything is stored: a bad argument raises ValueError/TypeError and
        leaves the buffer as it was. The arrays are copied; the caller may reuse them.
        """
        count, shape = self.num_envs, (self.num_envs, *self.observation_shape)
        what = f"{self.dtype} observations (stored exactly, never converted)"
        obs = check_array("obs", obs, shape, self.dtype.kind, what)
        next_obs = check_array("next_obs", next_obs, shape, self.dtype.kind, what)
        for name, array in (("obs", obs), ("next_obs", next_obs)):
            if array.dtype != self.dtype:
                raise TypeError(f"{name} must be {what}, got dtype {array.dtype}")
        actions = check_array("actions", actions, (count,), "iu", "integer actions, one per env")
        if actions.size and (actions.min() < np.iinfo(np.int32).min or actions.max() > np.iinfo(np.int32).max):
            raise ValueError(f"actions must fit in int32, got values in [{actions.min()}, {actions.max()}]")
        rewards = check_array("rewards", rewards, (count,), "biuf", "numbers, one per env")
        if not np.isfinite(rewards).all():
            raise ValueError(f"rewards must be finite, got {rewards}")
        terminations = check_array("terminations", terminations, (count,), "b", "bools, one per env")
        truncations = check_array("truncations", truncations, (count,), "b", "bools, one per env")
        if valid is None:
            envs = np.arange(count)
        else:
            envs = np.flatnonzero(check_array("valid", valid, (count,), "b", "bools, one per env"))
            obs, next_obs = obs[envs], next_obs[envs]
        if not envs.size:
            return

        # Which envs continue their previous next_obs, and which next_obs are their obs shifted by one frame.
        obs_frames, next_frames = self._as_frames(obs), self._as_frames(next_obs)
        flat = (len(envs), -1)
        same = (_bits(obs) == _bits(self._last_next[envs])).reshape(flat).all(1)
        continues = (self._added[envs] > 0) & same
        shifted = (_bits(next_frames[:, :-1]) == _bits(obs_frames[:, 1:])).reshape(flat).all(1)

        # obs: where it continues, its frames are the previous next_obs's; elsewhere a new segment.
        last = (self._added[envs] - 1) % self.slots
        obs_newest = np.where(continues, self._newest[envs, last], 0)
        obs_depth = np.where(continues, self._next_depth[envs, last], 0)
        for k in np.flatnonzero(~continues):
            obs_newest[k], obs_depth[k] = self._write_segment(envs[k], obs_frames[k])
        # next_obs: one new frame where it is obs shifted, elsewhere a segment of its own.
        next_newest = obs_newest + 1
        next_depth = np.minimum(obs_depth + 1, self.stack - 1)
        moving = envs[shifted]
        self._frames.write(moving, self._written[moving] % self.frame_slots, next_frames[shifted, -1])
        self._written[moving] += 1
        for k in np.flatnonzero(~shifted):
            next_newest[k], next_depth[k] = self._write_segment(envs[k], next_frames[k])

        # The transition's slot.
        slot = self._added[envs] % self.slots
        self._newest[envs, slot] = next_newest
        self._gap[envs, slot] = next_newest - obs_newest
        self._obs_depth[envs, slot] = obs_depth
        self._next_depth[envs, slot] = next_depth
        self._actions[envs, slot] = actions[envs]
        self._rewards[envs, slot] = rewards[envs]
        self._terminated[envs, slot] = terminations[envs]
        self._truncated[envs, slot] = truncations[envs]
        self._last_next[envs] = next_obs
        self._added[envs] += 1
        ended = envs[terminations[envs] | truncations[envs]]
        self._last_end[ended] = self._added[ended] - 1
        self._update_ranges()

    def _write_segment(self, env: int, frames: np.ndarray) -> tuple[int, int]:
        """Store one observation's `frames` ``(stack, *frame_shape)`` as a new segment of `env`, its equal leading
        slots as one frame (as in a `Game`'s first observation); return its newest frame's position and its depth."""
        equal = (_bits(frames[1:]) == _bits(frames[:-1])).reshape(self.stack - 1, math.prod(self.frame_shape)).all(1)
        first = int(np.argmin(equal)) if not equal.all() else self.stack - 1  # the last of the equal leading slots
        kept = self.stack - first
        positions = (self._written[env] + np.arange(kept)) % self.frame_slots
        self._frames.write(np.full(kept, env), positions, frames[first:])
        self._written[env] += kept
        return int(self._written[env] - 1), kept - 1

    def _update_ranges(self) -> None:
        """Move each env's oldest held and first unready transitions on, and the priorities with them."""
        oldest, ready = self._oldest.copy(), self._ready.copy()
        # Evict the transitions whose slot was reused, then those whose oldest frame was overwritten.
        self._oldest = np.maximum(self._oldest, self._added - self.slots)
        envs = np.arange(self.num_envs)
        while True:
            slot = self._oldest % self.slots
            lowest = self._newest[envs, slot] - self._gap[envs, slot] - self._obs_depth[envs, slot]
            gone = (self._oldest < self._added) & (lowest < self._written - self.frame_slots)
            if not gone.any():
                break
            self._oldest[gone] += 1
        # n-step: a transition is ready once its n steps are all added, or its episode ended within them.
        self._ready = np.maximum(np.maximum(self._added - self.n_step + 1, self._last_end + 1), self._oldest)
        if self.prioritized:
            # In one tree update: evicted transitions get 0, newly ready ones the largest priority so far (a new
            # transition may reuse an evicted one's slot: numpy does not say which of two writes to one index wins).
            evicted_rows, evicted = _ranges(oldest, self._oldest)
            new_rows, new = _ranges(np.maximum(ready, self._oldest), self._ready)
            emptied, filled = evicted_rows * self.slots + evicted % self.slots, new_rows * self.slots + new % self.slots
            emptied = emptied[~np.isin(emptied, filled)]
            values = np.repeat([0.0, self._max_priority**self.alpha], [len(emptied), len(filled)])
            self._set_leaves(np.concatenate([emptied, filled]), values)

    def _as_frames(self, observations: np.ndarray) -> np.ndarray:
        """A view of observations ``(n, *observation_shape)`` as their frames ``(n, stack, *frame_shape)``."""
        n = len(observations)
        if not self.channels_last:
            return observations.reshape(n, self.stack, *self.frame_shape)
        split = observations.reshape(n, *self.frame_shape[:-1], self.stack, self.frame_shape[-1])
        return np.moveaxis(split, -2, 1)

    def _as_observations(self, frames: np.ndarray) -> np.ndarray:
        """Observations ``(n, *observation_shape)`` from their gathered frames ``(n, stack, *frame_shape)``."""
        if self.channels_last:
            frames = np.moveaxis(frames, 1, -2)
        return frames.reshape(len(frames), *self.observation_shape)

    def __len__(self) -> int:
        """How many transitions can be sampled now."""
        return int((self._ready - self._oldest).sum())

    def indices(self) -> np.ndarray:
        """The ids (``int64``) of every transition that can be sampled now, env by env, oldest first."""
        envs, transitions = _ranges(self._oldest, self._ready)
        return transitions * self.num_envs + envs

    @property
    def added(self) -> int:
        """How many transitions were ever added, over all envs (evicted ones included)."""
        return int(self._added.sum())

    @property
    def nbytes(self) -> int:
        """The bytes the buffer holds: its arrays (resident as they fill) and its frames (compressed: with pointers)."""
        return sum(array.nbytes for array in self._arrays().values()) + self._frames.nbytes

    def _arrays(self) -> dict[str, np.ndarray]:
        """The buffer's own arrays (the frames' store aside), by attribute name."""
        return {name: value for name, value in vars(self).items() if isinstance(value, np.ndarray)}

    def sample(self, batch_size: int, beta: float | None = None) -> ReplayBatch:
        """`batch_size` transitions drawn with replacement: uniformly, or by priority with `prioritized`.

        `beta` overrides the constructor's importance-sampling exponent for this batch (prioritized only).
        Raises TypeError for a `batch_size` that is not an integer, and ValueError when it is not in
        ``[1, len(self)]`` (an empty buffer cannot be sampled) or `beta` is not in ``[0, 1]``.
        """
        batch_size = check_int("batch_size", batch_size, 1)
        if batch_size > len(self):
            raise ValueError(
                f"batch_size must be at most the {len(self)} transitions that can be sampled now, got {batch_size}"
                + (" (add transitions before sampling)" if not len(self) else "")
            )
        beta = self.beta if beta is None else check_number("beta", beta, 0.0, 1.0)
        if self.prioritized:
            # Stratified, as in Schaul et al.: one draw in each of batch_size equal parts of the total priority.
            total = self._sum_tree[1]
            targets = (np.arange(batch_size) + self._rng.random(batch_size)) * (total / batch_size)
            leaves = self._find(targets)
            envs, ring = np.divmod(leaves, self.slots)
            oldest = self._oldest[envs]
            transitions = oldest + (ring - oldest) % self.slots
        else:
            sizes = self._ready - self._oldest
            ends = np.cumsum(sizes)
            draws = self._rng.integers(0, ends[-1], batch_size)
            envs = np.searchsorted(ends, draws, side="right")
            transitions = self._oldest[envs] + draws - (ends[envs] - sizes[envs])
        return self._gather(envs, transitions, beta)

    def get(self, indices: np.ndarray) -> ReplayBatch:
        """The transitions of ids `indices` (``ReplayBatch.indices`` of an earlier batch), if still sampleable.

        Raises ValueError naming the first id that cannot be sampled now (evicted, or not yet ready).
        """
        indices, envs, transitions, held = self._decode(indices)
        if not held.all():
            first = int(np.argmin(held))
            raise ValueError(f"indices: transition id {indices[first]} (entry {first}) cannot be sampled now")
        return self._gather(envs, transitions, self.beta)

    def holds(self, indices: np.ndarray) -> np.ndarray:
        """``bool`` per id of `indices`: the transition can be sampled now (not evicted, ready)."""
        return self._decode(indices)[3]

    def _decode(self, indices: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Transition ids as ``(ids, envs, transitions, held)``: `held` marks those that can be sampled now."""
        indices = np.asarray(indices)
        if indices.ndim != 1 or indices.dtype.kind not in "iu":
            raise TypeError(
                f"indices must be a 1-D integer array of transition ids, got {indices.dtype} {indices.shape}"
            )
        transitions, envs = np.divmod(indices.astype(np.int64), self.num_envs)  # envs in range even for ids < 0
        return indices, envs, transitions, (transitions >= self._oldest[envs]) & (transitions < self._ready[envs])

    def _gather(self, envs: np.ndarray, transitions: np.ndarray, beta: float) -> ReplayBatch:
        """The batch of transitions `transitions` of envs `envs` (sampleable ones)."""
        # n-step: the k steps from each transition on, k < n where its episode ends first.
        steps = np.arange(self.n_step)
        later = transitions[:, None] + steps  # (B, n)
        later_slots = later % self.slots
        rows = envs[:, None]
        ends = (self._terminated[rows, later_slots] | self._truncated[rows, later_slots]) & (later < self._added[rows])
        last = np.where(ends.any(1), ends.argmax(1), self.n_step - 1)  # k - 1
        summed = steps <= last[:, None]
        rewards = (self._rewards[rows, later_slots] * self.gamma**steps * summed).sum(1, dtype=np.float64)
        first, final = transitions % self.slots, (transitions + last) % self.slots

        # The frame positions of obs (from the first transition) and next_obs (from the k-th).
        back = np.arange(self.stack - 1, -1, -1)
        obs_newest = self._newest[envs, first] - self._gap[envs, first]
        obs_positions = obs_newest[:, None] - np.minimum(back, self._obs_depth[envs, first][:, None])
        next_positions = self._newest[envs, final][:, None] - np.minimum(back, self._next_depth[envs, final][:, None])
        # One gather into one new array for both: glibc would fault two ~1 MB arrays in anew each batch (~2x the time).
        positions = np.stack([obs_positions, next_positions]) % self.frame_slots + envs[:, None] * self.frame_slots
        frames = np.empty((2, len(envs), self.stack, *self.frame_shape), self.dtype)
        self._frames.read(positions.ravel(), frames.reshape(-1, *self.frame_shape))
        obs, next_obs = self._as_observations(frames[0]), self._as_observations(frames[1])

        if self.prioritized:
            # (N P(i))^-beta / max_j (N P(j))^-beta = (p_i / p_min)^-beta over the sampleable transitions, where
            # p = priority**alpha (a leaf) and the reciprocals' tree holds 1 / p_min.
            leaves = self._sum_tree[self._leaves + envs * self.slots + first]
            weights = (leaves * self._inverse_tree[1]) ** -beta
        else:
            weights = np.ones(len(envs))
        return ReplayBatch(
            obs=obs,
            actions=self._actions[envs, first].astype(np.int64),
            rewards=rewards.astype(np.float32),
            next_obs=next_obs,
            dones=self._terminated[envs, final],
            discounts=(self.gamma ** (last + 1)).astype(np.float32),
            weights=weights.astype(np.float32),
            indices=transitions * self.num_envs + envs,
        )

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set the priorities of transitions `indices` (``ReplayBatch.indices``), e.g. to ``abs(td_errors)``.

        `priorities` are finite and >= 0, one per index; a transition's sampling weight becomes
        ``(priority + priority_epsilon) ** alpha``. Ids evicted since they were sampled are skipped; an id given
        twice (a batch draws with replacement) gets its last priority. Raises ValueError/TypeError on bad input
        (ids that were never sampleable among them), leaving the priorities unchanged.
        """
        if not self.prioritized:
            raise ValueError("update_priorities needs a FrameReplay built with prioritized=True")
        indices, envs, transitions, held = self._decode(indices)
        never = (transitions < 0) | (transitions >= self._ready[envs])  # ids no batch can have held
        if never.any():
            first = int(np.argmax(never))
            raise ValueError(
                f"indices: transition id {indices[first]} (entry {first}) was never sampleable here: pass the "
                "ReplayBatch.indices of a batch of this buffer"
            )
        priorities = check_array("priorities", priorities, held.shape, "iuf", "numbers, one per index")
        if not (np.isfinite(priorities) & (priorities >= 0)).all():
            raise ValueError(f"priorities must be finite and >= 0 (pass abs(td_errors)), got {priorities}")
        priorities = priorities[held].astype(np.float64) + self.priority_epsilon
        if priorities.size:
            self._max_priority = max(self._max_priority, float(priorities.max()))
            leaves = envs[held] * self.slots + transitions[held] % self.slots
            # Each leaf once, with its last priority (numpy does not say which of two writes to one index wins).
            leaves, last = np.unique(leaves[::-1], return_index=True)
            self._set_leaves(leaves, priorities[::-1][last] ** self.alpha)

    def _set_leaves(self, leaves: np.ndarray, values: np.ndarray) -> None:
        """Set tree leaves (each once) and recompute their ancestors, level by level (vectorised over the leaves)."""
        if not len(leaves):
            return
        nodes = leaves + self._leaves
        self._sum_tree[nodes] = values
        self._inverse_tree[nodes] = np.divide(1.0, values, out=np.zeros(nodes.shape), where=values > 0)
        while nodes[0] > 1:  # every node of one level has the same depth
            nodes = np.unique(nodes // 2)
            self._sum_tree[nodes] = self._sum_tree[2 * nodes] + self._sum_tree[2 * nodes + 1]
            self._inverse_tree[nodes] = np.maximum(self._inverse_tree[2 * nodes], self._inverse_tree[2 * nodes + 1])

    def _find(self, targets: np.ndarray) -> np.ndarray:
        """The leaves where the prefix sums of the sum tree reach `targets` (descending it for all at once)."""
        nodes = np.ones(len(targets), np.int64)
        while nodes[0] < self._leaves:
            left = 2 * nodes
            left_sum, right_sum = self._sum_tree[left], self._sum_tree[left + 1]
            # Never step into an empty subtree, even when rounding puts a target past its node's sum.
            right = (targets >= left_sum) & (right_sum > 0)
            targets = np.where(right, targets - left_sum, targets)
            nodes = left + right
        return nodes - self._leaves

    def save(self, path: str | Path) -> None:
        """Write the whole memory into the file `path` (an ``.npz``): its frames, transitions, priorities and
        sampling generator, so that `load` gives a memory that samples exactly what this one would.

        Atomic: written to a temporary file beside `path`, synced to disk, then renamed over `path`, so a crash
        mid-write leaves the previous file whole. Arrays and a JSON header only (no pickle).
        """
        path = Path(path)
        header = {
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "arguments": self._arguments,
            "max_priority": self._max_priority,
            "generator": self._rng.bit_generator.state,
        }
        arrays: dict[str, Any] = {
            "header": np.frombuffer(json.dumps(header).encode(), np.uint8),
            **self._arrays(),
            **{f"frames.{name}": array for name, array in self._frames.state().items()},
        }
        temporary = path.with_name(f".{path.name}.tmp")
        with open(temporary, "wb") as file:
            np.savez(file, **arrays)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: str | Path) -> FrameReplay:
        """The memory that `save` wrote into `path`, exactly (its next batches are the saved memory's).

        Raises ValueError naming `path` when it is not such a file, or is truncated or corrupt (every array's
        CRC is checked); FileNotFoundError when there is none.
        """
        try:
            with np.load(path, allow_pickle=False) as arrays:
                header = json.loads(_saved(arrays, "header", np.uint8).tobytes())
                if not isinstance(header, dict) or header.get("format") != FILE_FORMAT:
                    raise ValueError(f"its header names no {FILE_FORMAT} file")
                if header["version"] != FILE_VERSION:
                    raise ValueError(f"it is version {header['version']}; this atari_game reads {FILE_VERSION}")
                buffer = cls(**header["arguments"])
                for name, array in buffer._arrays().items():
                    array[...] = _saved(arrays, name, array.dtype, array.shape)
                buffer._frames.restore({name[7:]: arrays[name] for name in arrays.files if name.startswith("frames.")})
                buffer._max_priority = float(header["max_priority"])
                buffer._rng.bit_generator.state = header["generator"]
        except FileNotFoundError:
            raise
        except (OSError, ValueError, TypeError, KeyError, EOFError, zipfile.BadZipFile) as error:
            message = f"{path}: not a whole FrameReplay file ({FILE_FORMAT} version {FILE_VERSION}): {error}"
            raise ValueError(message) from error
        return buffer

    def __repr__(self) -> str:
        return (
            f"FrameReplay({len(self)}/{self.capacity} transitions, {self.num_envs} envs, "
            f"observations {self.observation_shape} {self.dtype}, n_step={self.n_step}, prioritized={self.prioritized})"
        )
