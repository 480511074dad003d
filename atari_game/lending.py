"""Lending envs between a `GamePool`'s workers, so that a game restart, or a slow core, does not leave the other
workers idle.

A synchronous step ends when the slowest worker ends. A game restart costs as much CPU as 15-22 plays (ALE's
``reset_game`` emulates ~70 frames, then come the NOOPs), or 1-6 plays in a game whose restarts all reach one state
(`atari_game.game.FIXED_RESTART_GAMES`: the state is restored, and the NOOPs remain), all of it on one worker while
the others wait. And a core can be slower than the others for seconds at a time: other work shares it, or (on shared
cloud machines) the host runs it at half speed. In next-step autoreset mode a worker knows a step ahead which of its
games restart: those whose episode ended start the next one at their next step. So at the end of a whole-pool step a
worker with more work coming than the next worker (the workers form a ring) offers it some of its other envs for the
coming step, their whole `GameState` written into its slots of the shared segment. If that step is a whole-pool step
too, the borrower plays them after its own envs, into their rows, and writes their states back; the lender skips
them, and takes them back at the start of its next command. Any other next command (a reset, an async step) cancels
the offer: the lender's Games never moved. A worker's slots come in two banks, used by turns from step to step, so
that it can offer envs for the next step while a loan for this one is out.

Every output stays exactly what the lender would have computed, as `GameState` carries everything a play reads
and writes (the pool tests compare pools with local Games, bit for bit). ALE does not export the last action that
sticky actions repeat, so pools lend only with ``sticky_actions=0``; and a few games' saved state misses a detail
of the emulator (`UNMOVABLE_GAMES`), so their envs are never lent.

How many envs: so that lender and borrower end together, the difference of their work coming over (P + B), each worker's
work being its plays at its own P (the seconds a play takes it, averaged over its last ~10 steps: `GameBlock.play_cost`)
and its episode starts at what each will take it (`StartCosts`, from the starts it has timed: a game restart by the NOOP
and random-start frames `Game.next_start` reads a step ahead; a new episode of a game that goes on, in "terminal" mode,
costs a play or less, not a restart's 1-20), P the lender's and B the seconds a borrowed play takes the borrower, moving
its state there and back included (its P until it has borrowed). Wall times, not CPU times: other work on a core slows a
play's wall time, not its CPU time (a core the host slows down, both). About 1-3 envs per restart on Breakout (5-8 when
ALE emulated its restarts); at most `SLOTS`. A worker offers not knowing the next worker's starts yet; when two workers
lend to each other (two workers make a ring of two), the last of them to finish the step before (it sees both offers and
both workers' timings) keeps only the offer of the one with more work coming, cut to the envs that even out their work.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, NamedTuple

import ale_py
import numpy as np

from atari_game.game import Game, GameOptions, GameState

# The most envs a worker lends in one step, and the room a slot has for ALE's serialized state (14.4-15.0 KB for
# every ROM of ale-py 0.12.1; a bigger one is not lent).
SLOTS = 12
ALE_STATE_BYTES = 20_480
# A worker's bank of slots serves the whole-pool steps of its parity; its row of "loans" (two cache lines) holds the
# pool step its offer is for (0: no offer), how many envs it offers, the pool step its borrower played them in, how
# many env steps it has lent so far, how many of its envs start an episode in the step the bank serves next and the
# seconds (in ns, as all times here) those starts will take it (`StartCosts.predict`), the mean seconds of the starts
# it has timed, and the seconds (0: not yet timed) that a play of its own envs takes it then (`GameBlock.play_cost`)
# and a borrowed play (moving the state there and back included).
BANKS, ROW = 2, 16  # (16 int64: a row is two whole cache lines)
FOR_STEP, COUNT, DONE, TOTAL, STARTS, START_NS, MEAN_START_NS, PLAY_NS, BORROWED_PLAY_NS = range(9)
# The weight of a step's time per play in a worker's moving average of it (`GameBlock.play_cost`, and the borrowed
# plays' `Loans.borrowed_play`): about the last 10 steps.
PLAY_COST_WEIGHT = 0.1
# Games whose moved state does not play on exactly as the game left in place would (ale-py 0.12.1), so their envs
# are never lent. ALE's saved state leaves out the TIA's partial-frame flag, which changes the cycles of the next
# frame (Q*bert and Tetris: ALE's fix #732, after 0.12.1), rounds the DPC cartridge's fractional clocks (Pitfall II)
# and saves Miniature Golf's level, par and hits as booleans. `benchmarks/moved_games.py` (2,000 plays of every game,
# moved to a spare emulator and back every other play) did not catch those four, but finds Tic-Tac-Toe 3D's first
# play after a move 19 pixels off and Yars' Revenge's play 1,665 259 pixels off: a sample, to run again on upgrades.
UNMOVABLE_GAMES = frozenset({"miniature_golf", "pitfall2", "qbert", "tetris", "tic_tac_toe_3d", "yars_revenge"})
# Moves leave ALE's environment generator behind (half a move's cost; the lender's own generator goes on when the game
# comes back) where nothing reads it. ALE's act draws from it every frame (for sticky actions, which lending pools do
# not have), so a generator left behind lags the game; by the source of ale-py 0.11 and 0.12 only Adventure's
# settings read it (to select a mode at a restart). With any other release, moves carry it.
RNG_GAMES = frozenset({"adventure"})
RNG_FREE_MOVES = ale_py.__version__.startswith(("0.11.", "0.12."))


# A slot's numbers: the Game's counters (`GameState` but its arrays), then the ALE state's length.
COUNTERS = ("lives", "episode_reward", "episode_length", "game_reward", "game_length", "next_episode_due")


def moves_rng(game: str) -> bool:
    """Whether a move of an env of game `game` (a ROM id) carries ALE's environment generator."""
    return game in RNG_GAMES or not RNG_FREE_MOVES


def loan_layout(
    n_lenders: int, slots: int, options: GameOptions, screen_shape: tuple[int, ...]
) -> dict[str, tuple[tuple[int, ...], type]]:
    """The shared arrays of lending for `n_lenders` workers (0: no lending) with two banks of `slots` slots each,
    whose screens have room for `screen_shape` (the pool's tallest); and ``pool_step``, the parent's count of
    whole-pool steps."""
    return {
        "pool_step": ((8,), np.int64),
        "loans": ((n_lenders, BANKS, ROW), np.int64),
        "lent_ids": ((n_lenders, BANKS, slots), np.int64),
        "lent_numbers": ((n_lenders, BANKS, slots, len(COUNTERS) + 1), np.float64),
        "lent_stacks": ((n_lenders, BANKS, slots, *options.stack_shape), np.uint8),
        "lent_screens": ((n_lenders, BANKS, slots, *screen_shape), np.uint8),
        "lent_ale": ((n_lenders, BANKS, slots, ALE_STATE_BYTES), np.uint8),
    }


def live_offer(shared: dict[str, np.ndarray], lender: int) -> np.ndarray:
    """Worker `lender`'s row of "loans" for the whole-pool step in progress (or the last one)."""
    step = shared["pool_step"][0]
    return shared["loans"][lender, step % BANKS]


def lost_loans(shared: dict[str, np.ndarray], borrower: int) -> list[tuple[int, list[int]]]:
    """The envs lent to worker `borrower` for the whole-pool step in progress that it has not played (it died):
    ``(lender, env ids)`` pairs, for the parent to restart."""
    lender = (borrower - 1) % len(shared["loans"])
    row, step = live_offer(shared, lender), shared["pool_step"][0]
    if row[FOR_STEP] != step or row[DONE] == step:
        return []
    return [(lender, shared["lent_ids"][lender, step % BANKS, : row[COUNT]].tolist())]


def moving_average(average: float, sample: float) -> float:
    """`average` moved towards `sample` by `PLAY_COST_WEIGHT` (the first sample, where `average` is still 0)."""
    return average + (sample - average) * (PLAY_COST_WEIGHT if average else 1.0)


# The restarts `StartCosts` times before it fits their cost to their frames.
FITTED_RESTARTS = 8


class StartCosts:
    """The seconds a worker's episode starts take it, from those it has timed, to predict the starts coming: a game
    restart (ALE's ``reset_game`` or the state it reaches restored, then `frames` frames of NOOP start and random
    start, which `Game.next_start` reads a step ahead) as a + b * frames, fitted by least squares once
    `FITTED_RESTARTS` are timed (their mean until then: a slope from a few noisy wall times could be anything); and
    a new episode in a game that goes on ("terminal" mode, after a lost life: the FIRE frames and the first
    observation), their mean. On Breakout a restart took 4.0 ms after 1 NOOP and 5.5 ms after 30 when ALE emulated
    it, 0.14 ms and 1.7 ms restored, and a new episode 0.27 ms, as long as a play (AMD EPYC, 2026-11-25)."""

    def __init__(self) -> None:
        # Over the restarts timed: their count and the sums of frames, seconds, frames², frames x seconds; over the
        # other starts: their count and seconds.
        self.restarts, self.others = np.zeros(5), np.zeros(2)

    def add(self, restart: bool, frames: int, seconds: float) -> None:
        """Count a start that took `seconds`: `restart` and `frames` as `Game.next_start` told it before."""
        if restart:
            self.restarts += (1, frames, seconds, frames * frames, frames * seconds)
        else:
            self.others += (1, seconds)

    def predict(self, restart: bool, frames: int) -> float:
        """The seconds a start (`Game.next_start`'s answer) will take; 0 if none of its kind was timed yet."""
        if not restart:
            count, seconds = self.others
            return seconds / count if count else 0.0
        count, x, y, xx, xy = self.restarts
        if not count:
            return 0.0
        spread = count * xx - x * x
        slope = max((count * xy - x * y) / spread, 0.0) if count >= FITTED_RESTARTS and spread > 0 else 0.0
        return max((y - slope * x) / count + slope * frames, 0.0)

    def mean(self) -> float:
        """The mean seconds of the starts timed, of both kinds (0: none yet)."""
        count = self.restarts[0] + self.others[0]
        return (self.restarts[2] + self.others[1]) / count if count else 0.0


class _Side(NamedTuple):
    """One worker's side of a loan: its envs, how many of them start an episode and the seconds those starts take,
    and the seconds a play of its own and a borrowed play take it (0: not yet timed)."""

    envs: int
    starts: int
    start_work: float
    play: float
    borrowed_play: float

    def work(self) -> float:
        """The seconds its step will take."""
        return (self.envs - self.starts) * self.play + self.start_work


def _loan(lender: _Side, borrower: _Side) -> int:
    """How many envs `lender` lends `borrower` so that both end together (see the module docstring)."""
    # Each env lent takes a play off the lender and adds a borrowed play to the borrower.
    moved = lender.play + (borrower.borrowed_play or borrower.play)
    return round((lender.work() - borrower.work()) / moved)


class _Slots:
    """One bank of a worker's slots: the states of the envs it lends, with its row of "loans"."""

    def __init__(self, shared: dict[str, np.ndarray], worker: int, bank: int) -> None:
        self.loans, self.ids = shared["loans"][worker, bank], shared["lent_ids"][worker, bank]
        self.numbers, self.stacks = shared["lent_numbers"][worker, bank], shared["lent_stacks"][worker, bank]
        self.screens, self.ale = shared["lent_screens"][worker, bank], shared["lent_ale"][worker, bank]

    def write(self, j: int, state: GameState) -> None:
        size = len(state.ale)
        self.ale[j, :size] = np.frombuffer(state.ale, np.uint8)
        self.stacks[j], self.screens[j, : len(state.screen)] = state.stack, state.screen
        self.numbers[j] = (*state[3:], size)

    def read(self, j: int, game: Game) -> GameState:
        """Slot `j`'s state, for `game` (its screen's shape)."""
        size = int(self.numbers[j, -1])
        lives, episode_reward, episode_length, game_reward, game_length, due = self.numbers[j, :-1].tolist()
        return GameState(
            self.ale[j, :size].tobytes(),
            self.stacks[j],
            self.screens[j, : game.options.screen_shape[0]],
            int(lives),
            episode_reward,
            int(episode_length),
            game_reward,
            int(game_length),
            bool(due),
        )


class Loans:
    """A pool worker's loans: envs of its `block` it lends to the next worker, and envs it borrows from the one
    before (worker `index` of `n_workers`, in the shared arrays `shared`).

    `lender_games` maps each env of the worker before to its game's ROM id, and `options` holds the options every
    env shares (but ``game`` and ``seed``): the borrower plays lent envs on Games of its own, one per game.
    `borrower_envs` is how many envs the next worker hosts.
    """

    def __init__(
        self,
        block: Any,
        shared: dict[str, np.ndarray],
        index: int,
        lender_games: dict[int, str],
        options: dict[str, Any],
        borrower_envs: int,
    ) -> None:
        self.block, self.shared, self.pool_step = block, shared, shared["pool_step"]
        self.n_workers = len(shared["loans"])
        lender = (index - 1) % self.n_workers
        self.mine = [_Slots(shared, index, bank) for bank in range(BANKS)]
        self.theirs = [_Slots(shared, lender, bank) for bank in range(BANKS)]
        # The next worker's rows of "loans" (its starts and timings), and how many envs it hosts.
        self.borrower, self.borrower_envs = shared["loans"][(index + 1) % self.n_workers], borrower_envs
        self.lender_games, self.options = lender_games, options
        # This worker's envs it never lends (`UNMOVABLE_GAMES`).
        self.unmovable = frozenset(i for i, game in block.games.items() if game.options.game in UNMOVABLE_GAMES)
        # A borrowed env is played on a spare Game of its game, made when first needed (a ROM load, ~0.1 s): the one
        # of the env lent first (the lender's last) now.
        self.spares: dict[str, Game] = {}
        self._spare(lender_games[max(lender_games)])
        # The seconds a borrowed play takes (its state moved there and back included), averaged as `play_cost` is.
        self.borrowed_play = 0.0

    def run(self, command: str, data: Any, whole_pool_step: bool) -> tuple[str, list[int], Any]:
        """`GameBlock.run`, with the loans around it: settle the last offer, play the command, and in a whole-pool
        step play what the worker before lent for it and offer envs for the next step if more work is coming here."""
        try:
            self.settle(whole_pool_step)
        except Exception:
            return "error", self.block.env_ids, traceback.format_exc()
        answer = self.block.run(command, data)
        try:
            if whole_pool_step:
                self.borrow()
                # Offers only after whole-pool steps: an async pool's partial steps never take one (a slower core
                # would copy states out after every step for nothing).
                if answer[0] == "ok":
                    self.offer()
        except Exception:
            return "error", answer[1], traceback.format_exc()
        return answer

    def settle(self, whole_pool_step: bool) -> None:
        """At the start of a command: if it is the whole-pool step an offer is for, lend its envs (the block skips
        them); close every other offer, taking back the games the borrower played."""
        lent: list[int] = []
        for bank in self.mine:
            offer = bank.loans[FOR_STEP]
            if not offer:
                continue
            ids = bank.ids[: bank.loans[COUNT]].tolist()
            if whole_pool_step and offer == self.pool_step[0]:
                lent = ids
                continue
            if bank.loans[DONE] == offer:  # played: the games went on in the borrower's hands
                for j, i in enumerate(ids):
                    state = bank.read(j, self.block.games[i])
                    self.block.games[i].set_state(state)
                    if state.next_episode_due:
                        self.block.owed.add(i)
                bank.loans[TOTAL] += len(ids)
            bank.loans[FOR_STEP] = 0
        self.block.lent = frozenset(lent)

    def offer(self) -> None:
        """After a step: if this worker has more work coming in the next step than the next worker (episode starts,
        above all game restarts, or a slower core), offer it envs for that step (as many as `envs_to_lend` says, not
        knowing the next worker's starts yet), in the bank of the next step (a loan out for this step holds the
        other)."""
        block, step = self.block, self.pool_step[0] + 1
        bank = self.mine[step % BANKS]
        # The episodes that start here in the next step, and what they will take (a kind not yet timed: a play).
        starts = [block.games[i].next_start() for i in block.owed if block.games[i].next_episode_due]
        start_work = sum(block.start_costs.predict(*start) or block.play_cost for start in starts)
        bank.loans[STARTS] = len(starts)
        bank.loans[START_NS], bank.loans[MEAN_START_NS], bank.loans[PLAY_NS], bank.loans[BORROWED_PLAY_NS] = (
            round(seconds * 1e9)
            for seconds in (start_work, block.start_costs.mean(), block.play_cost, self.borrowed_play)
        )
        wanted = min(len(bank.ids), max(self.envs_to_lend((len(starts), start_work)), 0))
        # The envs at the end of the block, but those starting an episode (a start stays with its own Game), those
        # out on loan (their Games are behind) and those of games that do not move exactly.
        unlendable = block.owed | block.lent | self.unmovable
        lent = [i for i in reversed(block.env_ids) if i not in unlendable][:wanted]
        count = 0
        for i in lent:
            state = block.games[i].get_state(with_rng=moves_rng(block.games[i].options.game))
            if len(state.ale) > ALE_STATE_BYTES:  # no room for it: lend those before it
                break
            bank.write(count, state)
            bank.ids[count] = i
            count += 1
        if count:
            bank.loans[COUNT], bank.loans[DONE] = count, 0
            bank.loans[FOR_STEP] = step  # last: the offer is whole once this is written

    def envs_to_lend(self, starts: tuple[int, float], borrower_starts: tuple[int, float] = (0, 0.0)) -> int:
        """How many envs to lend the next worker (negative: how many it should lend this one) for a step in which this
        worker has `starts` episodes to start (how many, and the seconds they will take) and the next worker
        `borrower_starts`, so that both end together: the difference of their work over (P + B), P what a play takes
        the lender, B what a borrowed play takes the borrower (see the module docstring); 0 until both workers have
        timed a play."""
        mine = _Side(len(self.block.env_ids), *starts, self.block.play_cost, self.borrowed_play)
        row = self.borrower[(self.pool_step[0] + 1) % BANKS]
        theirs = _Side(self.borrower_envs, *borrower_starts, *(row[[PLAY_NS, BORROWED_PLAY_NS]] * 1e-9))
        if not mine.play or not theirs.play:
            return 0
        return _loan(mine, theirs) if mine.work() >= theirs.work() else -_loan(theirs, mine)

    def balance(self) -> None:
        """Run by the last worker to finish a whole-pool step, once every offer for the next step is made (each made
        not knowing the other's starts): of two workers, only the one with more work coming lends, and only the
        envs that even out their work (at most those it offered)."""
        step = self.pool_step[0] + 1
        if self.n_workers != 2:
            return
        mine, theirs = self.mine[step % BANKS], self.theirs[step % BANKS]
        # A worker's starts: those it counted, and those of its envs that ended while on loan in this step (their
        # lender starts them, and learns of them only when it takes them back: each counted at its mean start).
        starts = []
        for bank, lender in ((mine, self.mine), (theirs, self.theirs)):
            ended, row = self._ended_on_loan(lender), bank.loans
            nanoseconds = row[START_NS] + ended * (row[MEAN_START_NS] or row[PLAY_NS])
            starts.append((int(row[STARTS]) + ended, nanoseconds * 1e-9))
        net = self.envs_to_lend(*starts)
        lender, count = (mine, net) if net > 0 else (theirs, -net)
        for bank in (mine, theirs):
            if bank.loans[FOR_STEP] != step:
                continue
            if bank is lender and count:
                bank.loans[COUNT] = min(count, bank.loans[COUNT])  # the first envs offered
            else:
                bank.loans[FOR_STEP] = 0

    def _spare(self, rom: str) -> Game:
        """The Game this worker plays borrowed envs of game `rom` on (a seed of its own: `Game.set_state` replaces
        the emulator's)."""
        if rom not in self.spares:
            self.spares[rom] = Game(game=rom, seed=0, **self.options)
            self.spares[rom].reset()
        return self.spares[rom]

    def _ended_on_loan(self, banks: list[_Slots]) -> int:
        """How many envs of the worker of `banks` out on loan in this whole-pool step ended their episode there."""
        step = self.pool_step[0]
        bank = banks[step % BANKS]
        if bank.loans[FOR_STEP] != step:
            return 0
        return int(bank.numbers[: bank.loans[COUNT], COUNTERS.index("next_episode_due")].sum())

    def borrow(self) -> None:
        """In a whole-pool step, after the worker's own envs: play the envs the worker before lent for it into their
        rows and write their states back."""
        step = self.pool_step[0]
        bank = self.theirs[step % BANKS]
        if bank.loans[FOR_STEP] != step:
            return
        ids = bank.ids[: bank.loans[COUNT]].tolist()
        games = [self._spare(self.lender_games[i]) for i in ids]  # (a first spare loads its ROM: not timed)
        started = time.perf_counter()
        for j, (i, game) in enumerate(zip(ids, games, strict=True)):
            game.set_state(bank.read(j, game))
            self.block.play(game, self.shared, i)
            bank.write(j, game.get_state(with_rng=moves_rng(self.lender_games[i])))
        bank.loans[DONE] = step
        self.borrowed_play = moving_average(self.borrowed_play, (time.perf_counter() - started) / len(ids))
