"""FrameReplay's compressed frames (their bytes, the dictionary's states) and its files: save, load, bad files."""

import dataclasses
import io
import json
import os
import re
import sys
import zipfile

import numpy as np
import pytest
from test_replay import PlainReplay, check_exact, play, slide

from atari_game import FrameReplay, GamePool, replay
from atari_game.replay import ReplayBatch

CODECS = pytest.mark.parametrize("compression", replay.COMPRESSIONS)


def breakout(buffer: FrameReplay, plain: PlainReplay, steps: int) -> None:
    """`steps` pool steps of real Breakout play (life-loss episodes) into both buffers."""
    with GamePool(buffer.num_envs, "Breakout", seed=3, n_workers=1, life_loss="terminal") as pool:
        play(pool, buffer, plain, steps)


def test_real_frames_are_held_raw_until_the_dictionary_is_trained_then_compressed_and_counted_in_nbytes(monkeypatch):
    monkeypatch.setattr(replay, "DICTIONARY_FRAMES", 64)
    buffer, plain = FrameReplay(200, 2, (4, 84, 84), compression="zstd", seed=0), PlainReplay(2)
    index = buffer.nbytes - buffer.num_envs * buffer.frame_slots * 8  # the arrays, without the frames' pointers
    assert index == FrameReplay(200, 2, (4, 84, 84)).nbytes - 2 * buffer.frame_slots * 84 * 84
    breakout(buffer, plain, 20)  # about one frame per env and step: fewer than 64
    frames = buffer._frames
    held = [blob for blob in frames.blobs.flat if blob is not None]
    assert 40 <= len(held) < 64 and all(len(blob) == 84 * 84 for blob in held) and frames.dictionary == b""
    check_exact(buffer, plain)
    breakout(buffer, plain, 150)  # past 64 frames: trained, and every frame held compressed since
    held = [blob for blob in frames.blobs.flat if blob is not None]
    assert len(frames.dictionary) > 0 and max(len(blob) for blob in held) < 84 * 84 / 10
    # nbytes: the arrays, the pointers, and each frame's bytes with its object header, as Python counts them.
    expected = index + frames.blobs.nbytes + sum(sys.getsizeof(blob) for blob in held) + len(frames.dictionary)
    assert buffer.nbytes == expected
    check_exact(buffer, plain)


def test_zstd_without_zstandard_names_the_extra_to_install(monkeypatch):
    # A None entry in sys.modules makes `import zstandard` fail, as on a machine without the zstd extra.
    monkeypatch.setitem(sys.modules, "zstandard", None)
    with pytest.raises(ImportError, match=re.escape('zstandard: pip install "atari_game[zstd]"')):
        FrameReplay(8, 1, (2, 2), compression="zstd")
    assert len(FrameReplay(8, 1, (2, 2))) == 0  # uncompressed frames need nothing more


def test_frames_too_small_to_train_a_dictionary_are_compressed_with_plain_zstd(monkeypatch):
    monkeypatch.setattr(replay, "DICTIONARY_FRAMES", 4)
    buffer = FrameReplay(8, 1, (2, 2), compression="zstd")
    obs = np.zeros((1, 2, 2), np.uint8)
    nothing = np.zeros(1, bool)
    for step in range(4):
        buffer.add(obs + step, [0], [0.0], obs + step + 1, nothing, nothing)
    assert buffer._frames.dictionary == b"" and buffer._frames.compressor is not None
    assert [buffer.get(np.array([t])).next_obs.tolist() for t in range(4)] == [[[[t + 1] * 2] * 2] for t in range(4)]


def test_the_zstd_dictionary_is_trained_when_the_memory_has_written_its_4096th_frame():
    # 4,096 frames, as documented, counted from the first one written: not one early, nor one late. The first add
    # writes 4 + 1 frames (a fresh stack and next_obs's new frame), each sliding add after it 1.
    buffer = FrameReplay(4096, 1, (4, 2, 2), compression="zstd")
    slide(buffer, np.random.default_rng(0), 4096 - 4)
    assert buffer._frames.compressor is not None  # 4,096 frames written: trained
    buffer = FrameReplay(4096, 1, (4, 2, 2), compression="zstd")
    slide(buffer, np.random.default_rng(0), 4096 - 5)
    assert buffer._frames.compressor is None  # 4,095: held as they are


# --- save and load ------------------------------------------------------------------------------------------


def assert_same(a: ReplayBatch, b: ReplayBatch) -> None:
    """Every field of two batches is equal (the observations bit for bit)."""
    for field in dataclasses.fields(ReplayBatch):
        assert getattr(a, field.name).tobytes() == getattr(b, field.name).tobytes(), field.name


def continue_both(saved: FrameReplay, loaded: FrameReplay, seed: int) -> None:
    """The same adds and draws to both: their batches, priorities and held transitions stay equal."""
    rng = np.random.default_rng(seed)
    shape = (saved.num_envs, *saved.observation_shape)
    for _ in range(30):
        for buffer in (saved, loaded):
            batch = buffer.sample(5, beta=0.7)
            if buffer.prioritized:
                buffer.update_priorities(batch.indices, np.arange(5.0))
        assert_same(saved.sample(5), loaded.sample(5))
        obs = rng.integers(0, 3, shape, dtype=np.uint8)
        step = (obs, np.zeros(saved.num_envs, int), np.ones(saved.num_envs), obs + 1, *(rng.random((2, 2)) < 0.1))
        saved.add(*step)
        loaded.add(*step)
    assert np.array_equal(saved.indices(), loaded.indices()) and saved.added == loaded.added


@CODECS
@pytest.mark.parametrize("prioritized", [False, True])
def test_a_loaded_memory_samples_exactly_what_the_saved_one_would(tmp_path, monkeypatch, compression, prioritized):
    monkeypatch.setattr(replay, "DICTIONARY_FRAMES", 64)
    options = {"n_step": 3, "prioritized": prioritized, "compression": compression, "seed": 7}
    buffer, plain = FrameReplay(120, 2, (4, 84, 84), **options), PlainReplay(2)
    breakout(buffer, plain, 100)
    if prioritized:
        buffer.update_priorities(buffer.indices(), np.arange(len(buffer)) % 5)
    path = tmp_path / "replay.npz"
    buffer.save(path)
    assert os.listdir(tmp_path) == ["replay.npz"]  # the temporary file was renamed over it
    # Format version 1: a file of another version would be refused by the releases that read version 1, and theirs
    # by this one.
    with np.load(path) as arrays:
        assert json.loads(arrays["header"].tobytes())["version"] == 1
    loaded = FrameReplay.load(path)
    assert repr(loaded) == repr(buffer) and loaded.nbytes == buffer.nbytes
    assert np.array_equal(loaded.indices(), buffer.indices())
    assert_same(loaded.get(buffer.indices()), buffer.get(buffer.indices()))
    continue_both(buffer, loaded, seed=1)


def test_a_memory_saved_before_its_dictionary_is_trained_trains_the_same_one_after_loading(tmp_path, monkeypatch):
    monkeypatch.setattr(replay, "DICTIONARY_FRAMES", 64)
    buffer, plain = FrameReplay(120, 2, (4, 84, 84), compression="zstd", seed=0), PlainReplay(2)
    breakout(buffer, plain, 10)
    buffer.save(tmp_path / "replay.npz")
    loaded = FrameReplay.load(tmp_path / "replay.npz")
    assert loaded._frames.compressor is None
    for memory in (buffer, loaded):
        breakout(memory, PlainReplay(2), 40)
    assert loaded._frames.dictionary == buffer._frames.dictionary != b""
    continue_both(buffer, loaded, seed=2)


def saved_file(tmp_path) -> bytes:
    """A memory of 40 transitions (20 slots per env) holding 2, saved: most of its frame slots empty (length -1)."""
    buffer = FrameReplay(40, 2, (2, 3, 3), compression="zstd", seed=0)
    obs = np.arange(36, dtype=np.uint8).reshape(2, 2, 3, 3)
    buffer.add(obs, [0, 1], [0.0, 1.0], obs + 1, np.zeros(2, bool), np.zeros(2, bool))
    buffer.save(tmp_path / "good.npz")
    return (tmp_path / "good.npz").read_bytes()


def flipped(data: bytes, member: str) -> bytes:
    """The .npz `data` with one bit flipped in the last byte of its array `member`'s data (the zip's CRC is not)."""
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo(member)
    at = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + info.compress_size - 1
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]


def rewritten(data: bytes, change) -> bytes:
    """The .npz `data` with its arrays passed through `change` (a dict of arrays in, one out)."""
    with np.load(io.BytesIO(data)) as arrays:
        changed = change({name: arrays[name] for name in arrays.files})
    out = io.BytesIO()
    np.savez(out, **changed)
    return out.getvalue()


def empty_slots_at_minus_two(arrays: dict) -> dict:
    """A saved memory's `arrays` with its empty frame slots (length -1) at length -2: the bytes still add up."""
    lengths = arrays["frames.lengths"].copy()
    lengths[lengths == -1] = -2
    return {**arrays, "frames.lengths": lengths}


# Each damage, and why the file is refused: the library's own words, or None where they are numpy's or zipfile's.
BAD_FILES = {
    "truncated": (lambda data: data[: len(data) // 2], None),
    "a frame's byte flipped": (lambda data: flipped(data, "frames.blobs.npy"), None),
    "empty": (lambda data: b"", None),
    "foreign text": (lambda data: b"frames,actions\n1,2\n", None),
    "foreign npz": (lambda data: rewritten(data, lambda arrays: {"weights": np.ones(3)}), "it has no array 'header'"),
    # A header of the right shape and version: only its format tells it apart, and it is refused for that, not
    # later for a key it lacks.
    "another format": (
        lambda data: rewritten(
            data, lambda arrays: {**arrays, "header": np.frombuffer(b'{"format": "other", "version": 1}', np.uint8)}
        ),
        "its header names no atari_game.FrameReplay file",
    ),
    "an array missing": (
        lambda data: rewritten(data, lambda arrays: {k: v for k, v in arrays.items() if k != "_gap"}),
        "it has no array '_gap'",
    ),
    "an array of its dtype in another shape": (  # not broadcast into the memory
        lambda data: rewritten(data, lambda arrays: {**arrays, "_rewards": arrays["_rewards"][:, :1]}),
        "its array '_rewards' is float32 (2, 1), not float32 (2, 20)",
    ),
    "frames that do not add up": (
        lambda data: rewritten(data, lambda arrays: {**arrays, "frames.blobs": arrays["frames.blobs"][:-1]}),
        "the frames' lengths do not add up to the bytes stored",
    ),
    "a frame's length below -1": (  # not loaded as an empty slot
        lambda data: rewritten(data, empty_slots_at_minus_two),
        "the frames' lengths do not add up to the bytes stored",
    ),
}


@pytest.mark.parametrize("damage", BAD_FILES)
def test_a_corrupt_truncated_or_foreign_file_is_refused_naming_it(tmp_path, damage):
    change, reason = BAD_FILES[damage]
    path = tmp_path / "replay.npz"
    path.write_bytes(change(saved_file(tmp_path)))
    message = f"{path}: not a whole FrameReplay file (atari_game.FrameReplay version 1): {reason or ''}"
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        FrameReplay.load(path)


def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        FrameReplay.load(tmp_path / "none.npz")
