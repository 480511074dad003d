"""The worker side of a `GamePool`: the games of one worker (`GameBlock`) and the process that plays them
(`pool_worker`), woken by a byte on its pipe and answering into a socket that all workers share.

A `RayGamePool` actor hosts the same `GameBlock` over arrays of its own.
"""

from __future__ import annotations

import contextlib
import os
import struct
import time
import traceback
from multiprocessing import connection
from typing import Any

import numpy as np

from atari_game.game import Game
from atari_game.segment import Layout, SegmentFile, arrays, attach
from atari_game.worker import prepare_worker_process

# The byte that wakes a worker: step all its envs with the actions in the segment, or read a pickled
# command from the pipe.
STEP_ALL, MESSAGE = b"s", b"m"
# A byte below this is also STEP_ALL, as part of a whole-pool `step`: the last worker to finish echoes it (a tag
# that tells this step's wake-up from a late one of a step before) to wake the parent.
POOL_STEP_TAGS = 8
POOL_STEP_BYTES = tuple(bytes((tag,)) for tag in range(POOL_STEP_TAGS))
# How long a worker that has answered watches the segment for its next command, yielding its core meanwhile,
# before it sleeps on its pipe: a command that comes within it wakes nobody, and waking a sleeping process costs
# more than the watch (0.1-1 ms on a VM: see the docs' Design page). The watch lasts as long as the worker's last
# command took to play, at least WATCH_SECONDS: in a whole-pool step the next command comes once the slowest
# worker and the parent are done, which the slack of a block as long grows with. A watch that finds nothing makes
# the worker sleep at once for the next 1, 3, 7, ... commands (at most 2 ** WATCH_BACKOFF - 1), so that a parent
# busy between steps (a learner, a slow policy) does not pay a core's watch for every step.
WATCH_SECONDS = 0.001
WATCH_BACKOFF = 6


class GameBlock:
    """The games one worker hosts, played on command into arrays of the pool's layout.

    ``options`` holds each env's `Game` options but the seed (a mixed pool's envs differ in ``game``), in
    the order of ``env_ids``. ``arrays`` holds one row per hosted env (row ``k`` is env ``env_ids[k]``): a
    `GamePool` worker passes its rows of the shared segment, a `RayGamePool` actor arrays of its own that it
    returns through Ray.

    In next-step autoreset mode an env whose episode ended starts the next one (restarting its game) at its
    next step, where that episode's first observation is due.
    """

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
        # Next-step autoreset: the envs whose next step is a reset step (their episode ended on their last step).
        self.owed: set[int] = set()

    def run(self, command: str, data: Any) -> tuple[str, list[int], Any]:
        """Carry out one command and answer it.

        ``("step", ids)`` plays the envs `ids` (None: all of them) with the actions in the arrays;
        ``("reset", (seeds, owed))`` resets the envs `seeds` maps to their seeds (None: not re-seeded), and owes
        the envs in `owed` a next-step reset step. The answer is ``("ok", ids, ended)``: the envs played (none for
        a reset) and whether an episode ended (its statistics are in the arrays); or ``("error", ids, traceback)``.
        """
        ids = self.env_ids
        try:
            if command == "step":
                ids = self.env_ids if data is None else data
                return "ok", ids, self.step(ids)
            if command == "reset":
                self.reset(*data)
                return "ok", [], False  # nothing for recv(): reset() reads the arrays itself
            raise ValueError(f"unknown command {command!r}; valid commands: 'step', 'reset'")
        except Exception:
            return "error", ids, traceback.format_exc()

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
        """Play `game` with the action in row `k` of the arrays `a` and write its results there; True if its
        episode ended."""
        # The parent checked the actions; the Game writes the observation straight into the env's row (in
        # next-step mode the ended episode's last one: the next episode starts at the env's next step).
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


# --- the worker process ---------------------------------------------------------------------------------


class CommandWatch:
    """A worker's wait for its next command, awake for up to `WATCH_SECONDS` before it sleeps on its pipe.

    `sent` is the worker's count of commands sent, which the parent raises after writing each command's byte;
    the worker has read `handled` bytes. The count is only a hint: the worker reads the byte either way, and
    a stale count costs a sleep, never a command.
    """

    def __init__(self) -> None:
        self.misses = 0  # watches in a row that found no command
        self.skip = 0  # commands still to wait for asleep, after a watch that found none

    def wait(self, sent: np.ndarray, handled: int, played: float) -> None:
        """Return once command `handled + 1` was sent, or when watching for it is not worth it (any longer);
        `played`: the seconds the last command took."""
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
    """Host the `GameBlock` of envs `env_ids` over their rows of the shared segment (`segment_file`, mapped here) and
    run its commands.

    Each command starts with a byte on `remote`: `STEP_ALL` (step every env with the actions in the
    segment), a tag below `POOL_STEP_TAGS` (the same, as part of a whole-pool step) or `MESSAGE`, followed by
    a pickled ``(command, data)`` as `GameBlock.run` takes it, or ``("close", None)``. Every command is
    answered, once its results are in the segment, with the first env's id as a native int32 on the shared
    `answers` socket; a failed one with ``-1 - id``, then its traceback on `remote`. In a whole-pool step the
    parent puts one ticket (a byte) fewer than there are workers into the pipe whose read end all workers share,
    `tickets`; each worker takes one before it answers (`_take_ticket`), and the one that finds none left, the
    last, sends the tag on `wake` after its answer. Between commands the worker first watches its count of
    commands sent (`CommandWatch`), then sleeps on `remote`. The worker stops on "close" or when the parent's end
    of `remote` closes.
    """
    prepare_worker_process()
    segment = attach(segment_file)
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
            # A ticket taken before answering: once the parent has every answer, every worker has taken its ticket.
            last = pool_step and not _take_ticket(tickets_fd)
            os.write(answers_fd, failed if status == "error" else done)
            if last:  # the parent sleeps once a step, not once a worker
                os.write(wake_fd, byte)
            if status == "error":  # after the answer: a traceback longer than the pipe holds waits for the parent
                remote.send(payload)
    except (EOFError, OSError):  # the parent is gone (or was killed with unread data in the pipe)
        return
    finally:
        del block, shared, sent  # the numpy views must go before the segment can be closed
        with contextlib.suppress(BufferError):  # a view still held somewhere: the mapping goes with the process
            segment.close()


def _take_ticket(tickets_fd: int) -> bool:
    """Take a ticket of a whole-pool step, a byte, from the pipe `tickets_fd` (its read end does not wait); False
    if none is left: this worker is the last of the step to finish.

    A read of one byte from a pipe takes it whole and from one reader alone, so each ticket goes to one worker.
    """
    try:
        return bool(os.read(tickets_fd, 1))  # (b"": the parent is gone, and this worker's answers go nowhere)
    except BlockingIOError:
        return False


# --- the parent -----------------------------------------------------------------------------------------
