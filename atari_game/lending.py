"""Lending envs between a `GamePool`'s workers, so that a game restart does not leave the other workers idle.

A synchronous step ends when the slowest worker ends. A game restart costs as much CPU as 15-22 plays (ALE's
``reset_game`` emulates ~75 frames, then come the NOOPs), all of it on one worker while the others wait. In
next-step autoreset mode a worker knows a step ahead which of its games restart: those whose episode ended start
the next one at their next step. So at the end of a step a worker with restarts coming offers some of its other
envs to the next worker (the workers form a ring) for the coming step, their whole `GameState` written into its
slots of the shared segment. If that step is a whole-pool step, the borrower plays them after its own envs, into
their rows, and writes their states back; the lender skips them, and takes them back at the start of its next
command. Any other next command (a reset, an async step) cancels the offer: the lender's Games never moved. A
worker's slots come in two banks, used by turns from step to step, so that it can offer envs for the next step
while a loan for this one is out.

Every output stays exactly what the lender would have computed, as `GameState` carries everything a play reads
and writes (the pool tests compare pools with local Games, bit for bit). ALE does not export the last action that
sticky actions repeat, so pools lend only with ``sticky_actions=0``.

How many envs: so that lender and borrower end together, R / (2P + o) per restart coming, from the CPU times the
worker measures: R a restart, P a play, o what a borrowed play costs over a play (moving its state there and back);
~6 on Breakout. At most `SLOTS`. When two workers both restart games in a step, each would lend to the other: the
last of them to finish the step before (it sees both offers) nets them into one, from the worker with more restarts.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

import numpy as np

from atari_game.game import Game, GameOptions, GameState

# The most envs a worker lends in one step, and the room a slot has for ALE's serialized state (14.4-15.0 KB for
# every ROM of ale-py 0.12.1; a bigger one is not lent).
SLOTS = 12
ALE_STATE_BYTES = 20_480
# A worker's bank of slots serves the whole-pool steps of its parity; its row of "loans" (a cache line) holds the
# pool step its offer is for (0: no offer), how many envs it offers, the pool step its borrower played them in, how
# many env steps it has lent so far, and how many of its games restart in the step the bank serves next.
BANKS = 2
FOR_STEP, COUNT, DONE, TOTAL, RESTARTS = range(5)
# A slot's numbers: the Game's counters (`GameState` but its arrays), then the ALE state's length.
COUNTERS = ("lives", "episode_reward", "episode_length", "game_reward", "game_length", "next_episode_due")


def loan_layout(
    n_lenders: int, slots: int, options: GameOptions, screen_shape: tuple[int, ...]
) -> dict[str, tuple[tuple[int, ...], type]]:
    """The shared arrays of lending for `n_lenders` workers (0: no lending) with two banks of `slots` slots each,
    whose screens have room for `screen_shape` (the pool's tallest); and ``pool_step``, the parent's count of
    whole-pool steps."""
    return {
        "pool_step": ((8,), np.int64),
        "loans": ((n_lenders, BANKS, 8), np.int64),
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
    """

    def __init__(
        self,
        block: Any,
        shared: dict[str, np.ndarray],
        index: int,
        lender_games: dict[int, str],
        options: dict[str, Any],
    ) -> None:
        self.block, self.shared, self.pool_step = block, shared, shared["pool_step"]
        self.n_workers = len(shared["loans"])
        lender = (index - 1) % self.n_workers
        self.mine = [_Slots(shared, index, bank) for bank in range(BANKS)]
        self.theirs = [_Slots(shared, lender, bank) for bank in range(BANKS)]
        self.lender_games, self.options = lender_games, options
        # A borrowed env is played on a spare Game of its game, made when first needed (a ROM load, ~0.1 s): the one
        # of the env lent first (the lender's last) now.
        self.spares: dict[str, Game] = {}
        self._spare(lender_games[max(lender_games)])
        self.borrow_seconds, self.borrowed = 0.0, 0  # CPU time of borrowed plays (state moves included), and how many

    def run(self, command: str, data: Any, whole_pool_step: bool) -> tuple[str, list[int], Any]:
        """`GameBlock.run`, with the loans around it: settle the last offer, play the command, play what the worker
        before lent for this step (a whole-pool step), and offer envs for the next step if restarts are coming."""
        try:
            self.settle(whole_pool_step)
        except Exception:
            return "error", self.block.env_ids, traceback.format_exc()
        answer = self.block.run(command, data)
        try:
            if whole_pool_step:
                self.borrow()
            if command == "step" and answer[0] == "ok":
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
        """After a step: if restarts are coming at the envs' next step, offer the next worker envs for it (as many as
        `envs_for` says), in the bank of the next step (a loan out for this step holds the other)."""
        block, step = self.block, self.pool_step[0] + 1
        bank = self.mine[step % BANKS]
        bank.loans[RESTARTS] = restarts = sum(block.games[i].next_episode_due for i in block.owed)
        wanted = min(len(bank.ids), self.envs_for(restarts))
        # The envs at the end of the block, but those starting an episode (a restart stays with its own Game) and
        # those out on loan (their Games are behind).
        lent = [i for i in reversed(block.env_ids) if i not in block.owed and i not in block.lent][:wanted]
        count = 0
        for i in lent:
            state = block.games[i].get_state()
            if len(state.ale) > ALE_STATE_BYTES:  # no room for it: lend those before it
                break
            bank.write(count, state)
            bank.ids[count] = i
            count += 1
        if count:
            bank.loans[COUNT], bank.loans[DONE] = count, 0
            bank.loans[FOR_STEP] = step  # last: the offer is whole once this is written

    def envs_for(self, restarts: int) -> int:
        """How many envs to lend for `restarts` coming restarts (negative: to borrow), R / (2P + o) each (see the
        module docstring); 0 until the worker has timed a restart and a play."""
        block = self.block
        if not block.starts or not block.plays:
            return 0
        play = block.play_seconds / block.plays
        overhead = max(self.borrow_seconds / self.borrowed - play, 0.0) if self.borrowed else 0.0
        return round(restarts * (block.start_seconds / block.starts) / (2 * play + overhead))

    def balance(self) -> None:
        """Run by the last worker to finish a whole-pool step, once every offer for the next step is made: two
        workers that both restart games in it lend only the difference of their restarts' work (or nothing)."""
        step = self.pool_step[0] + 1
        if self.n_workers != 2:
            return
        mine, theirs = self.mine[step % BANKS], self.theirs[step % BANKS]
        # A worker's restarts: those it counted, and those of its envs that ended while on loan in this step (their
        # lender starts them, and learns of them only when it takes them back).
        restarts = [
            bank.loans[RESTARTS] + self._ended_on_loan(lender)
            for bank, lender in ((mine, self.mine), (theirs, self.theirs))
        ]
        net = self.envs_for(int(restarts[0] - restarts[1]))
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
        started = time.process_time()
        ids = bank.ids[: bank.loans[COUNT]].tolist()
        for j, i in enumerate(ids):
            game = self._spare(self.lender_games[i])
            game.set_state(bank.read(j, game))
            self.block.play(game, self.shared, i)
            bank.write(j, game.get_state())
        bank.loans[DONE] = step
        self.borrow_seconds += time.process_time() - started
        self.borrowed += len(ids)
