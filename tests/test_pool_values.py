"""GamePool's values, step by step, against local `Game`s stepped the same way (values, not shapes): lives in both
autoreset modes, async batches in same-step mode, async schedules of any env ids drawn by Hypothesis, async with a
worker killed and restarted, channels-last observations, a seed per env. Only the public API: ``GamePool(...)``,
reset, step, send and recv."""

import dataclasses
import os
import signal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import all_gone, children

from atari_game import Game
from atari_game.pool import GamePool

OPTIONS = {"game": "Breakout", "fire_reset": True, "noop_max": 30}


@dataclasses.dataclass
class Step:
    """What a pool must return for one env on one step (`final_obs` only at a same-step episode end), and the lives
    its ended episode had (what a same-step done step must not report)."""

    obs: np.ndarray
    reward: float
    terminated: bool
    truncated: bool
    lives: int
    final_obs: np.ndarray | None = None
    ended_lives: int | None = None


class LocalEnv:
    """One env of a pool played by a local `Game`, with Gymnasium's autoreset rules written out by hand."""

    def __init__(self, seed: int, same_step: bool, **options) -> None:
        self.game, self.same_step, self.owed = Game(seed=seed, **options), same_step, False

    def reset(self, seed: int | None = None) -> Step:
        self.owed = False
        return Step(self.game.reset(seed), 0.0, False, False, self.game.lives)

    def step(self, action: int) -> Step:
        if self.owed:  # next-step autoreset: the step after an episode end ignores its action and starts the next one
            self.owed = False
            return Step(self.game.start_next_episode(), 0.0, False, False, self.game.lives)
        obs, reward, done, info = self.game.step(action, start_next=False)
        if not done:
            return Step(obs, reward, False, False, self.game.lives)
        ended = Step(
            obs, reward, not info["truncated"], info["truncated"], self.game.lives, ended_lives=self.game.lives
        )
        if not self.same_step:  # this step returns the ended episode's last observation and lives
            self.owed = True
            return ended
        # Same-step: the next episode's first observation and lives now, the ended one's last observation beside.
        return dataclasses.replace(ended, obs=self.game.start_next_episode(), lives=self.game.lives, final_obs=obs)

    def reset_by_a_new_worker(self) -> Step:
        """Reset, as a pool reports an env whose worker died and whose new worker reset its game: the first
        observation as a truncation (in next-step mode the env's next step is the reset step, returning it again)."""
        first = self.reset()
        self.owed = not self.same_step
        return dataclasses.replace(first, truncated=True)


def check_reset(results: tuple, expected: list[Step]) -> None:
    """The pool's reset results are the local envs' `expected` first steps."""
    obs, info = results
    assert all(np.array_equal(obs[i], step.obs) for i, step in enumerate(expected))
    assert info["lives"].tolist() == [step.lives for step in expected]


def check(results: tuple, expected: list[Step], env_ids: list[int]) -> None:
    """The pool's results for envs `env_ids` (a whole step, or a recv batch) are the local envs' `expected` steps."""
    obs, rewards, terminations, truncations, info = results
    final_mask = info.get("_final_obs", np.zeros(len(env_ids), bool))
    for k, (i, step) in enumerate(zip(env_ids, expected, strict=True)):
        assert np.array_equal(obs[k], step.obs), f"env {i}: observation"
        got = (rewards[k], terminations[k], truncations[k], info["lives"][k], final_mask[k])
        assert got == (step.reward, step.terminated, step.truncated, step.lives, step.final_obs is not None), f"env {i}"
        if step.final_obs is not None:
            assert np.array_equal(info["final_obs"][k], step.final_obs), f"env {i}: final observation"


@pytest.mark.parametrize("life_loss", ["reset", "terminal"])
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_lives_and_every_value_of_a_step_are_the_local_games_in_both_autoreset_modes(closing, mode, life_loss):
    num_envs, seed, options = 3, 4, {**OPTIONS, "life_loss": life_loss}
    pool = closing(GamePool)(num_envs, seed=seed, n_workers=2, autoreset_mode=mode, **options)
    local = [LocalEnv(seed + i, mode == "SameStep", **options) for i in range(num_envs)]
    check_reset(pool.reset(), [env.reset() for env in local])
    ends = []
    for row in np.random.default_rng(0).integers(4, size=(180, num_envs)):
        expected = [env.step(action) for env, action in zip(local, row, strict=True)]
        check(pool.step(row), expected, list(range(num_envs)))
        ends += [step for step in expected if step.ended_lives is not None]
    assert len(ends) >= 3
    if mode == "SameStep" and life_loss == "reset":  # each life lost restarted the game: the lives are back
        assert all(step.lives > step.ended_lives for step in ends)


# --- async ------------------------------------------------------------------------------------------


def send(pool: GamePool, pending: dict[int, int], env_ids: list[int], rng: np.random.Generator) -> None:
    """Send random actions to envs `env_ids`, and note them in `pending` (env id: action) until they come back."""
    actions = rng.integers(4, size=len(env_ids))
    pool.send(actions, env_ids)
    pending.update(zip(env_ids, actions.tolist(), strict=True))


def receive(pool: GamePool, local: list[LocalEnv], pending: dict[int, int]) -> tuple[list[int], list[Step]]:
    """recv() a batch and check it against the local envs, each stepped with the action it was sent."""
    results = pool.recv()
    ids = results[4]["env_id"].tolist()
    expected = [local[i].step(pending.pop(i)) for i in ids]
    check(results, expected, ids)
    assert "worker_restarted" not in results[4]
    return ids, expected


def play_async(pool: GamePool, local: list[LocalEnv], pending: dict[int, int], rng, batches: int) -> list[Step]:
    """`batches` recv() batches checked, each env sent its next action as soon as it comes back; their steps."""
    steps = []
    for _ in range(batches):
        ids, expected = receive(pool, local, pending)
        send(pool, pending, ids, rng)
        steps += expected
    return steps


def test_async_batches_in_same_step_mode_carry_each_envs_values_and_final_observations(closing):
    num_envs, seed = 4, 9
    pool = closing(GamePool)(num_envs, seed=seed, n_workers=2, batch_size=2, autoreset_mode="SameStep", **OPTIONS)
    local = [LocalEnv(seed + i, True, **OPTIONS) for i in range(num_envs)]
    check_reset(pool.reset(), [env.reset() for env in local])
    rng, pending = np.random.default_rng(5), {}
    send(pool, pending, list(range(num_envs)), rng)
    # How many games end in so many batches depends on which envs the batches hold: play on until three have.
    steps: list[Step] = []
    while sum(step.final_obs is not None for step in steps) < 3:
        assert len(steps) < 4000, "no three games ended in 2,000 batches"
        steps += play_async(pool, local, pending, rng, 50)


# Episodes end within a schedule's few steps: truncated after 10 steps, if no life is lost before.
SCHEDULE_OPTIONS = {**OPTIONS, "max_episode_frames": 40}


@pytest.fixture(scope="module")
def pools():
    """``pools(batch_size, mode)``: a pool of 4 envs on 2 workers, started once (~0.5 s) and reused by every example
    that asks for it (each resets it); closed after the module."""
    made: dict[tuple[int, str], GamePool] = {}

    def pool(batch_size: int, mode: str) -> GamePool:
        if (batch_size, mode) not in made:
            made[batch_size, mode] = GamePool(
                4, n_workers=2, batch_size=batch_size, autoreset_mode=mode, **SCHEDULE_OPTIONS
            )
        return made[batch_size, mode]

    yield pool
    for pool_made in made.values():
        pool_made.close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
@settings(max_examples=10, deadline=None, derandomize=True, database=None)
@given(batch_size=st.integers(1, 4), seed=st.integers(0, 1 << 16), data=st.data())
def test_async_schedules_of_any_env_ids_return_each_envs_local_game(pools, mode, batch_size, seed, data):
    pool = pools(batch_size, mode)
    local = [LocalEnv(seed + i, mode == "SameStep", **SCHEDULE_OPTIONS) for i in range(4)]
    check_reset(pool.reset(seed=seed), [env.reset() for env in local])
    pending: dict[int, int] = {}
    for _ in range(data.draw(st.integers(5, 40), label="operations")):
        idle = [i for i in range(4) if i not in pending]
        # Send to any distinct idle envs in any order, or receive a batch once one can be (a recv waits for it).
        if idle and (len(pending) < batch_size or data.draw(st.booleans(), label="send")):
            env_ids = data.draw(st.lists(st.sampled_from(idle), min_size=1, unique=True), label="env_ids")
            actions = data.draw(st.lists(st.integers(0, 3), min_size=len(env_ids), max_size=len(env_ids)))
            pool.send(np.array(actions), env_ids)
            pending.update(zip(env_ids, actions, strict=True))
        else:
            receive(pool, local, pending)


def grandchildren() -> set[int]:
    """The pids of this process's children's children: a pool's workers, which its fork server starts."""
    return {grandchild for child in children() for grandchild in children(child)}


def kill(pid: int) -> None:
    """SIGKILL process `pid` and wait until it is dead (a zombie, or gone)."""
    os.kill(pid, signal.SIGKILL)
    assert all_gone([pid], within=10), f"process {pid} still runs 10 s after SIGKILL"


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_async_with_a_worker_killed_the_others_play_on_and_its_envs_restart_with_new_seeds(closing, mode):
    num_envs, seed, same_step = 4, 3, mode == "SameStep"
    before = grandchildren()
    pool = closing(GamePool)(
        num_envs, seed=seed, n_workers=2, batch_size=2, restart_workers=True, autoreset_mode=mode, **OPTIONS
    )
    local = [LocalEnv(seed + i, same_step, **OPTIONS) for i in range(num_envs)]
    check_reset(pool.reset(), [env.reset() for env in local])
    workers = sorted(grandchildren() - before)
    assert len(workers) == 2
    rng, pending = np.random.default_rng(8), {}
    send(pool, pending, list(range(num_envs)), rng)
    play_async(pool, local, pending, rng, 40)
    for _ in range(2):  # every env back: nothing in flight when its worker dies
        receive(pool, local, pending)

    kill(workers[0])
    send(pool, pending, list(range(num_envs)), rng)
    batches = [pool.recv() for _ in range(2)]
    # The dead worker's envs, one contiguous block, are reported restarted; the others played their step.
    flags = [info.get("worker_restarted", np.zeros(len(info["env_id"]), bool)) for *_, info in batches]
    restarted = {i for (*_, info), flag in zip(batches, flags, strict=True) for i in info["env_id"][flag].tolist()}
    assert restarted in ({0, 1}, {2, 3})
    for results, flag in zip(batches, flags, strict=True):
        ids = results[4]["env_id"].tolist()
        expected = []
        for i in ids:
            action = pending.pop(i)
            if i in restarted:  # a new game, seeded as no env of this pool was before: seed + i + num_envs
                local[i] = LocalEnv(seed + i + num_envs, same_step, **OPTIONS)
                expected.append(local[i].reset_by_a_new_worker())
            else:
                expected.append(local[i].step(action))
        check(results, expected, ids)
        assert flag.tolist() == [i in restarted for i in ids]

    # And every env plays on exactly, the restarted ones their new games (in next-step mode a reset step first).
    send(pool, pending, list(range(num_envs)), rng)
    play_async(pool, local, pending, rng, 60)


# --- options and seeds ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_channels_last_observations_and_final_observations_are_the_local_games(closing, mode):
    num_envs, seed, options = 3, 2, {**OPTIONS, "channels_last": True}
    pool = closing(GamePool)(num_envs, seed=seed, n_workers=2, autoreset_mode=mode, **options)
    local = [LocalEnv(seed + i, mode == "SameStep", **options) for i in range(num_envs)]
    obs, info = pool.reset()
    assert obs.shape == (num_envs, 84, 84, 4)
    check_reset((obs, info), [env.reset() for env in local])
    ends = 0
    for row in np.random.default_rng(1).integers(4, size=(150, num_envs)):
        expected = [env.step(action) for env, action in zip(local, row, strict=True)]
        check(pool.step(row), expected, list(range(num_envs)))
        ends += sum(step.ended_lives is not None for step in expected)
    assert ends >= 2


def test_reset_with_a_seed_per_env_reseeds_each_env_as_a_local_game_reset_with_it(closing):
    num_envs = 4
    pool = closing(GamePool)(num_envs, seed=0, n_workers=2, **OPTIONS)
    local = [LocalEnv(i, False, **OPTIONS) for i in range(num_envs)]
    check_reset(pool.reset(), [env.reset() for env in local])
    rng = np.random.default_rng(2)
    for row in rng.integers(4, size=(40, num_envs)):
        check(pool.step(row), [env.step(action) for env, action in zip(local, row, strict=True)], list(range(num_envs)))
    seeds = [17, None, 3, 17]  # None: env 1's game restarts unseeded, drawing its NOOP start from its own generator
    check_reset(pool.reset(seed=seeds), [env.reset(seed) for env, seed in zip(local, seeds, strict=True)])
    observations = []
    for action in rng.integers(4, size=80):  # one action for every env: only the seeds tell them apart
        row = np.full(num_envs, action)
        results = pool.step(row)
        check(results, [env.step(action) for env, action in zip(local, row, strict=True)], list(range(num_envs)))
        observations.append(results[0])
    assert all(np.array_equal(obs[0], obs[3]) for obs in observations)  # one seed, one game
    assert not all(np.array_equal(obs[0], obs[2]) for obs in observations)  # another seed, another game
