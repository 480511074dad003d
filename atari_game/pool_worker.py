"""The worker side of a `GamePool`: the games of one worker (`GameBlock`, which a `RayGamePool` actor hosts too) and
the process that plays them (`pool_worker`), woken by a byte on its pipe, answering into a socket all workers share."""

from __future__ import annotations

import contextlib
import os
import struct
import time
from multiprocessing import connection
from typing import Any

import numpy as np

from atari_game.game import Game
from atari_game.pool_errors import CommandFailed
from atari_game.segment import Layout, Segment, SegmentFile, arrays
from atari_game.worker import prepare_worker_process

# The byte that wakes a worker: step all its envs (the actions in the segment), or read a pickled command.
STEP_ALL, MESSAGE = b"s", b"m"
# A byte below this is also STEP_ALL, in a whole-pool `step`: a tag the last worker echoes to wake the parent.
POOL_STEP_TAGS = 8
POOL_STEP_BYTES = tuple(bytes((tag,)) for tag in range(POOL_STEP_TAGS))
# `CommandWatch`: a watch as long as the last command took, at least WATCH_SECONDS; one that finds nothing skips the
# next 1, 3, 7, ... watches, at most 2 ** WATCH_BACKOFF - 1 (the Design page says why).
WATCH_SECONDS = 0.001
WATCH_BACKOFF = 6


class GameBlock:
    """The games one worker hosts, played on command into `arrays` of the pool's layout, a row per hosted env (row
    ``k`` is env ``env_ids[k]``): a `GamePool` worker's rows of the shared segment, or a `RayGamePool` actor's own.
    `options` holds each env's `Game` options but the seed."""

    def __init__(
        self,
        env_ids: list[int],
        seeds: list[int | None],
        next_step_autoreset: bool,
        options: list[dict[str, Any]],
        arrays: dict[str, np.ndarray],
    ) -> None:
        self.env_ids, self.next_step_autoreset, self.arrays = env_ids, next_step_autoreset, arrays
        self.row = {i: k for k, i in enumerate(env_ids)}
        games = zip(env_ids, seeds, options, strict=True)
        self.games = {i: Game(seed=seed, **env_options) for i, seed, env_options in games}
        self.owed: set[int] = set()  # next-step autoreset: the envs whose next step is a reset step

    def run(self, command: str, data: Any) -> tuple[str, list[int], Any]:
        """Carry out one command and answer it: ``("step", ids)`` plays the envs `ids` (None: all) with the actions in
        the arrays; ``("reset", (seeds, owed))`` resets the envs `seeds` maps to their seeds (None: not re-seeded) and
        owes those in `owed` a next-step reset step. The answer: ``("ok", ids, ended)``, the envs played (none for a
        reset) and whether an episode ended (its statistics in the arrays), or ``("error", [], CommandFailed)``, the
        exception the command raised as a report (its envs: a step's, a reset's all)."""
        ids = self.env_ids
        try:
            if command == "step":
                ids = self.env_ids if data is None else data
                return "ok", ids, self.step(ids)
            if command == "reset":
                self.reset(*data)
                return "ok", [], False  # nothing for recv(): reset() reads the arrays itself
            raise ValueError(f"unknown command {command!r}; valid commands: 'step', 'reset'")
        except Exception as error:
            return "error", [], CommandFailed.of(error, ids)

    def step(self, ids: list[int]) -> bool:
        """Play envs `ids`; True if an episode ended (the env's ``ended`` row and statistics say which)."""
        a, ended_any = self.arrays, False
        for i in ids:
            k, game = self.row[i], self.games[i]
            if i in self.owed:
                # Next-step autoreset's reset step: the action is ignored; the next episode starts now.
                self.owed.discard(i)
                game.start_next_episode(a["obs"][k])
                a["rewards"][k], a["terminations"][k], a["truncations"][k], a["ended"][k] = 0.0, False, False, False
                a["lives"][k] = game.lives
                continue
            if self.play(game, a, k):
                ended_any = True
                if self.next_step_autoreset:
                    self.owed.add(i)
        return ended_any

    def play(self, game: Game, a: dict[str, np.ndarray], k: int) -> bool:
        """Play `game` with the action in row `k` of the arrays `a` and write its results there; True if it ended."""
        # The parent checked the actions; the Game writes the observation straight into the env's row.
        a["rewards"][k], done, info = game.play(
            a["actions"][k], out=a["obs"][k], start_next=not self.next_step_autoreset
        )
        a["lives"][k], a["ended"][k] = game.lives, done
        if info is None:  # the episode goes on (a done play always reports its episode)
            a["terminations"][k] = a["truncations"][k] = False
            return False
        a["terminations"][k], a["truncations"][k] = not info["truncated"], info["truncated"]
        a["episode_return"][k], a["episode_length"][k] = info["reward"], info["length"]
        a["game_ended"][k] = "game_reward" in info
        if "game_reward" in info:
            a["game_return"][k], a["game_length"][k] = info["game_reward"], info["game_length"]
        if not self.next_step_autoreset:
            a["final_obs"][k] = game.final_observation
        return True

    def reset(self, seeds: dict[int, int | None], owed: list[int]) -> None:
        a = self.arrays
        for i, seed in seeds.items():
            k = self.row[i]
            a["obs"][k], a["lives"][k] = self.games[i].reset(seed=seed), self.games[i].lives
            a["rewards"][k], a["terminations"][k], a["truncations"][k] = 0.0, False, False
            a["ended"][k] = a["game_ended"][k] = False
            self.owed.discard(i)
            if i in owed and self.next_step_autoreset:
                self.owed.add(i)  # its reset step returns this first observation again


class CommandWatch:
    """A worker's wait for its next command, awake for a while (see `WATCH_SECONDS`) before it sleeps on its pipe;
    the count it watches is only a hint: a stale one costs a sleep, never a command."""

    def __init__(self) -> None:
        self.misses = 0  # watches in a row that found no command
        self.skip = 0  # commands still to wait for asleep, after a watch that found none

    def wait(self, sent: np.ndarray, handled: int, played: float) -> None:
        """Return once command `handled + 1` was sent (`sent[0]`, raised by the parent after each command's byte), or
        when watching for it is not worth it (any longer); `played`: the seconds the last command took."""
        if self.skip:
            self.skip -= 1
            return
        deadline = time.perf_counter() + max(WATCH_SECONDS, played)
        while sent[0] <= handled:
            if time.perf_counter() > deadline:
                self.misses = min(self.misses + 1, WATCH_BACKOFF)
                self.skip = 2**self.misses - 1
                return
            os.sched_yield()  # the core goes to anything else that can run on it (the parent, above all)
        self.misses = 0


def pool_worker(
    remote: connection.Connection,
    answers: connection.Connection,
    wake: connection.Connection,
    tickets: connection.Connection,
    segment_file: SegmentFile,
    layout: Layout,
    env_ids: list[int],
    seeds: list[int | None],
    next_step_autoreset: bool,
    options: list[dict[str, Any]],
) -> None:
    """Host the `GameBlock` of envs `env_ids` over their rows of the shared segment and run its commands until
    ``("close", None)`` or the parent's end of `remote` closes: each starts with a byte on `remote` (`STEP_ALL`, a tag
    below `POOL_STEP_TAGS`, or `MESSAGE` and a pickled ``(command, data)``) and is answered, its results in the
    segment, with the first env's id as an int32 on `answers` (failed: ``-1 - id``, then its `CommandFailed` on
    `remote`)."""
    prepare_worker_process()
    segment = Segment(segment_file)
    shared = arrays(segment, layout)
    rows = slice(env_ids[0], env_ids[-1] + 1)  # a worker's envs are one contiguous block
    block = GameBlock(env_ids, seeds, next_step_autoreset, options, {name: shared[name][rows] for name in shared})
    command_fd, answers_fd, wake_fd, tickets_fd = remote.fileno(), answers.fileno(), wake.fileno(), tickets.fileno()
    sent, handled, watch, played = shared["commands"][env_ids[0]], 0, CommandWatch(), 0.0
    # A send of four bytes on a Unix stream socket is queued whole, so answers of several workers never interleave.
    done, failed = struct.pack("=i", env_ids[0]), struct.pack("=i", -1 - env_ids[0])
    try:
        while True:
            watch.wait(sent, handled, played)
            byte = os.read(command_fd, 1)
            handled += 1
            if not byte:  # the parent is gone
                return
            pool_step = byte[0] < POOL_STEP_TAGS
            command, data = ("step", None) if byte == STEP_ALL or pool_step else remote.recv()
            if command == "close":
                return
            started = time.perf_counter()
            status, _, payload = block.run(command, data)
            played = time.perf_counter() - started
            # A ticket taken before answering (Design page): the one that finds none left is the step's last to finish.
            try:
                last = pool_step and not os.read(tickets_fd, 1)  # (b"": the parent is gone, its answers go nowhere)
            except BlockingIOError:
                last = True
            os.write(answers_fd, failed if status == "error" else done)
            if last:  # the parent sleeps once a step, not once a worker
                os.write(wake_fd, byte)
            if status == "error":  # after the answer: a report longer than the pipe holds waits for the parent
                remote.send(payload)
    except (EOFError, OSError):  # the parent is gone (or was killed with unread data in the pipe)
        return
    finally:
        del block, shared, sent  # the numpy views must go before the segment can be closed
        with contextlib.suppress(BufferError):  # a view still held somewhere: the mapping goes with the process
            segment.close()
