"""GamePool: the same games as local `Game`s, Gymnasium's autoreset semantics, async, faults and leaks."""

import gc
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from multiprocessing import connection

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from support import OPTIONS, all_gone, children, held_here, held_segments, open_descriptors, worker_pids

from atari_game import Game, resolve_game
from atari_game import local_transport as pool_module
from atari_game.game import CONTINUOUS_ACTION_HIGH, CONTINUOUS_ACTION_LOW
from atari_game.pool import GamePool, PoolError
from atari_game.pool_errors import CommandFailed
from atari_game.pool_worker import POOL_STEP_BYTES, POOL_STEP_TAGS, WATCH_SECONDS, CommandWatch, GameBlock
from atari_game.segment import layout


def shm_segments():
    return {name for name in os.listdir("/dev/shm") if name.startswith(f"atari_game_{os.getpid()}_")}


# --- the same games as local Game objects -----------------------------------------------------------


def test_spaces_shapes_and_dtypes(pool_factory):
    pool = pool_factory(3, n_workers=2, **OPTIONS)
    obs, info = pool.reset()
    assert obs.shape == (3, 4, 84, 84) and obs.dtype == np.uint8
    assert pool.num_envs == 3 and pool.observation_space.shape == (3, 4, 84, 84)
    assert pool.single_observation_space.shape == (4, 84, 84) and pool.single_action_space.n == 4
    assert pool.action_space.shape == (3,) and pool.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert list(info["lives"]) == [5, 5, 5] and info["_lives"].all()
    obs, rewards, terminations, truncations, info = pool.step(pool.action_space.sample())
    assert rewards.dtype == np.float64 and terminations.dtype == truncations.dtype == np.bool_


def play_one(seed, actions, same_step, **options):
    """What the pool must return for one env, from a local Game and Gymnasium's autoreset rules by hand.

    Returns the first observation and, per action, (obs, reward, terminated, truncated, episode) where
    episode is None or (the Game's episode info, its final observation).
    """
    game = Game(seed=seed, **options)
    first, owed, steps = game.reset(), None, []
    for action in actions:
        if owed is not None:  # next-step autoreset's reset step
            steps.append((owed, 0.0, False, False, None))
            owed = None
            continue
        obs, reward, done, info = game.step(action)
        episode = (info, game.final_observation) if done else None
        if done and not same_step:
            owed, obs = obs, game.final_observation
        steps.append((obs, reward, done and not info["truncated"], done and info["truncated"], episode))
    return first, steps


# One game; a mixed pool of games with the same minimal action set; one of games with different ones.
GAME_LISTS = {
    "one-game": ("Breakout", {}),
    "mixed-minimal-actions": (["Breakout", "Kaboom", "Breakout", "Kaboom", "Breakout"], {}),
    "mixed-full-actions": (["Breakout", "Seaquest", "Breakout", "Pong", "Breakout"], {"full_action_space": True}),
}


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("games", GAME_LISTS)
def test_pool_plays_exactly_the_local_games(pool_factory, mode, games):
    num_envs, seed, (game, extra) = 5, 7, GAME_LISTS[games]
    options = {**OPTIONS, "life_loss": "terminal", **extra}
    env_games = [game] * num_envs if isinstance(game, str) else game
    pool = pool_factory(num_envs, seed=seed, n_workers=2, autoreset_mode=mode, **{**options, "game": game})
    actions = np.random.default_rng(0).integers(pool.single_action_space.n, size=(400, num_envs))
    local = [
        play_one(seed + i, actions[:, i], mode == AutoresetMode.SAME_STEP, **{**options, "game": env_games[i]})
        for i in range(num_envs)
    ]
    obs, info = pool.reset()
    assert np.array_equal(obs, np.stack([first for first, _ in local]))
    # Each env's game, by its ROM id, in pool.games and in every info.
    assert pool.games == tuple(resolve_game(name) for name in env_games)
    assert info["game_name"].tolist() == list(pool.games) and info["_game_name"].all()
    episodes_seen = games_seen = 0
    for t, row in enumerate(actions):
        obs, rewards, terms, truncs, info = pool.step(row)
        expected = [steps[t] for _, steps in local]
        assert np.array_equal(obs, np.stack([step[0] for step in expected]))
        assert list(rewards) == [step[1] for step in expected]
        assert list(terms) == [step[2] for step in expected] and list(truncs) == [step[3] for step in expected]
        assert info["game_name"].tolist() == list(pool.games)
        ended = [i for i, step in enumerate(expected) if step[4] is not None]
        assert list(np.flatnonzero(info.get("_episode", np.zeros(num_envs, bool)))) == ended
        for i in ended:
            episode, final_obs = expected[i][4]
            assert info["episode"]["r"][i] == episode["reward"] and info["episode"]["l"][i] == episode["length"]
            if "game_reward" in episode:
                assert info["_game"][i] and info["game"]["r"][i] == episode["game_reward"]
                assert info["game"]["l"][i] == episode["game_length"]
                games_seen += 1
            if mode == AutoresetMode.SAME_STEP:
                assert info["_final_obs"][i] and np.array_equal(info["final_obs"][i], final_obs)
                assert info["_final_info"][i] and info["final_info"]["episode"]["r"][i] == episode["reward"]
            episodes_seen += 1
    assert episodes_seen >= 10 and games_seen >= 1


def test_episode_statistics_are_zero_for_the_envs_whose_episode_goes_on(pool_factory):
    # As Gymnasium's vector statistics (RecordEpisodeStatistics) hold them, beside the mask: not a length of 1.
    pool = pool_factory(4, seed=1, n_workers=2, game="Breakout")
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


def test_a_game_is_reported_only_for_the_envs_whose_game_ended_in_that_step(pool_factory):
    # An env whose last episode ended its game keeps that game's end in the shared segment until its next episode
    # ends: meanwhile, beside another env's episode end, it must not be reported again.
    pool = pool_factory(4, seed=2, n_workers=2, game="Breakout", life_loss="terminal")
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


@pytest.mark.slow
def test_same_seed_same_observations_whatever_the_worker_count(pool_factory):
    actions = np.random.default_rng(1).integers(4, size=(150, 6))
    runs = []
    for n_workers in (1, 2, 3):
        pool = pool_factory(6, seed=3, n_workers=n_workers, **OPTIONS)
        runs.append([pool.reset()[0]] + [pool.step(row)[0] for row in actions])
    for other in runs[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(runs[0], other, strict=True))


def test_reset_with_seed_reseeds(pool_factory):
    pool = pool_factory(2, seed=0, **OPTIONS)
    pool.reset()
    actions = np.random.default_rng(2).integers(4, size=(60, 2))
    first = [pool.reset(seed=10)[0]] + [pool.step(row)[0] for row in actions]
    [pool.step(row) for row in actions[:7]]
    again = [pool.reset(seed=10)[0]] + [pool.step(row)[0] for row in actions]
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    local = Game(seed=11, **OPTIONS)  # env 1 of reset(seed=10)
    assert np.array_equal(first[0][1], local.reset())


def test_copy_false_returns_the_shared_array(pool_factory):
    pool = pool_factory(2, copy=False, **OPTIONS)
    obs, _ = pool.reset()
    again = pool.step([0, 1])[0]
    assert again is obs  # one array, overwritten every step
    copying = pool_factory(2, **OPTIONS)
    obs, _ = copying.reset()
    assert copying.step([0, 1])[0] is not obs and not np.shares_memory(copying.step([0, 1])[0], obs)


# --- async ------------------------------------------------------------------------------------------


def test_async_send_recv_returns_batches_with_env_ids(pool_factory):
    num_envs, seed = 6, 5
    pool = pool_factory(num_envs, seed=seed, n_workers=3, batch_size=2, **OPTIONS)
    pool.reset()
    rng = np.random.default_rng(3)
    sent = {i: [0] for i in range(num_envs)}
    received = {i: [] for i in range(num_envs)}
    pool.send(np.zeros(num_envs, int))
    for _ in range(200):
        obs, rewards, terms, truncs, info = pool.recv()
        ids = info["env_id"]
        assert len(ids) == 2 and info["lives"].shape == (2,)
        for k, i in enumerate(ids):
            received[i].append((obs[k], rewards[k], terms[k], truncs[k]))
        actions = rng.integers(4, size=2)
        pool.send(actions, ids)
        for i, action in zip(ids, actions, strict=True):
            sent[i].append(int(action))
    # Each env, however its steps interleaved with the others', played exactly its own game.
    for i in range(num_envs):
        _, steps = play_one(seed + i, sent[i][: len(received[i])], same_step=False, **OPTIONS)
        assert len(steps) >= 20
        for (obs, reward, term, trunc), expected in zip(received[i], steps, strict=True):
            assert np.array_equal(obs, expected[0]) and (reward, term, trunc) == expected[1:4]


def test_async_misuse_is_refused(pool_factory):
    pool = pool_factory(4, batch_size=2, **OPTIONS)
    pool.reset()
    with pytest.raises(PoolError, match="recv\\(\\) needs batch_size=2"):
        pool.recv()
    pool.send([0, 0], [0, 1])
    with pytest.raises(ValueError, match=r"envs \[1\] were sent and not yet returned"):
        pool.send([0], [1])
    with pytest.raises(PoolError, match="recv\\(\\) them first"):
        pool.step([0, 0, 0, 0])
    with pytest.raises(ValueError, match="env_ids must be in \\[0, 4\\)"):
        pool.send([0], [9])
    for env_ids in ([2, 2], [[2, 3]], [2.0, 3.0], ["2", "3"]):
        with pytest.raises(ValueError, match="env_ids must be distinct integers"):
            pool.send([0, 0], env_ids)
    for env_ids in ([-1, 2], [2, 4], np.array([3, 2**63], np.uint64)):
        with pytest.raises(ValueError, match="env_ids must be in \\[0, 4\\)"):
            pool.send([0, 0], env_ids)
    pool.recv()
    pool.send([1, 3], np.array([3, 2], np.uint8))  # the refused calls sent nothing: envs 2 and 3 are free
    assert sorted(pool.recv()[4]["env_id"].tolist()) == [2, 3]
    pool.step([0, 0, 0, 0])


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        {"game": "Breakout", "obs_type": "rgb", "scale_obs": True, "fire_reset": True},
        {"game": "Pong", "obs_type": "ram", "continuous": True, "max_episode_frames": 400},
    ],
    ids=["rgb-scaled", "ram-continuous"],
)
def test_pool_plays_the_local_games_with_new_observation_types_and_continuous_actions(pool_factory, options):
    num_envs, seed, steps = 3, 4, 150
    rng = np.random.default_rng(0)
    if options.get("continuous"):
        actions = rng.uniform(CONTINUOUS_ACTION_LOW, CONTINUOUS_ACTION_HIGH, size=(steps, num_envs, 3)).astype(
            np.float32
        )
    else:
        actions = rng.integers(4, size=(steps, num_envs))
    local = [play_one(seed + i, actions[:, i], True, **options) for i in range(num_envs)]
    pool = pool_factory(num_envs, seed=seed, n_workers=2, autoreset_mode=AutoresetMode.SAME_STEP, **options)
    assert pool._shared["actions"].shape == pool.action_space.shape  # (n, 3) float32 when continuous
    obs, _ = pool.reset()
    assert pool.observation_space.contains(obs) and np.array_equal(obs, np.stack([first for first, _ in local]))
    ended = 0
    for t, row in enumerate(actions):
        assert pool.action_space.contains(row)
        obs, rewards, terms, truncs, info = pool.step(row)
        expected = [steps[t] for _, steps in local]
        assert obs.dtype == pool.single_observation_space.dtype and pool.observation_space.contains(obs)
        assert np.array_equal(obs, np.stack([step[0] for step in expected]))
        assert list(rewards) == [step[1] for step in expected]
        assert list(terms | truncs) == [step[2] or step[3] for step in expected]
        for i in np.flatnonzero(info.get("_final_obs", [])):
            assert np.array_equal(info["final_obs"][i], expected[i][4][1])
            ended += 1
    assert ended >= 2


def test_commands_queued_for_one_worker_are_answered_in_order(pool_factory):
    pool = pool_factory(4, n_workers=2, batch_size=1, **OPTIONS)
    pool.reset()
    for _ in range(3):  # envs 1 and 0 of worker 0, the second sent before the first is answered, then worker 1's
        pool.send([1], [1])
        pool.send([2], [0])
        pool.send([3, 0], [2, 3])
        returned = [int(pool.recv()[4]["env_id"][0]) for _ in range(4)]
        assert [i for i in returned if i < 2] == [1, 0] and [i for i in returned if i >= 2] == [2, 3]


# --- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("actions", "error", "message"),
    [
        ([0, 1], ValueError, r"actions must have shape \(3,\), one per env, got shape \(2,\)"),
        ([[0, 1, 2]], ValueError, r"shape \(1, 3\)"),
        ([0, 1, 4], ValueError, r"actions must be in \[0, 4\) for breakout \(NOOP, FIRE, RIGHT, LEFT\); entry 2 is 4"),
        ([-1, 0, 0], ValueError, "entry 0 is -1"),
        ([0.0, 1.0, 2.0], TypeError, "actions must be integers in \\[0, 4\\), got dtype float64"),
        ([np.nan, 0, 0], TypeError, "got dtype float64"),
        ([None, 0, 0], TypeError, "got dtype object"),
        (None, ValueError, r"got shape \(\)"),
    ],
)
def test_bad_actions_are_refused_before_anything_is_sent(pool_factory, actions, error, message):
    pool = pool_factory(3, **OPTIONS)
    pool.reset()
    with pytest.raises(error, match=message):
        pool.step(actions)
    assert pool.step(np.array([0, 1, 2], dtype=np.int32))[0].shape == (3, 4, 84, 84)


@pytest.mark.parametrize(
    ("actions", "error", "message"),
    [
        ([0, 1, 2], ValueError, r"actions must be \(radius in \[0, 1\], .* of shape \(3, 3\), got shape \(3,\)"),
        (np.zeros((2, 3)), ValueError, r"got shape \(2, 3\)"),
        ([[1, 0, 0], [1, 0, np.inf], [1, 0, 0]], ValueError, r"got inf at index \(1, 2\)"),
        ([[1, 0, 0], [1, -3.2, 0], [1, 0, 0]], ValueError, r"got -3.2 at index \(1, 1\)"),
        (np.ones((3, 3), bool), TypeError, "got dtype bool"),
    ],
)
def test_bad_continuous_actions_are_refused_before_anything_is_sent(pool_factory, actions, error, message):
    pool = pool_factory(3, **OPTIONS, continuous=True)
    pool.reset()
    with pytest.raises(error, match=message):
        pool.step(actions)
    assert pool.step(np.zeros((3, 3)))[0].shape == (3, 4, 84, 84)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_envs": 0}, r"num_envs must be an integer in \[1, 65536\], got 0"),
        (
            {"num_envs": "Pong", "game": 16},
            r"GamePool\(num_envs, game\): the count comes first, as in GamePool\(16, 'Pong'\)",
        ),
        ({"num_envs": 2, "n_workers": 3}, r"n_workers must be an integer in \[1, 2\], got 3"),
        (
            {"num_envs": 2, "workers": 2},
            r"GamePool: unknown argument 'workers': use n_workers= \(the worker processes\)",
        ),
        ({"num_envs": 2, "batch_size": 0}, r"batch_size must be an integer in \[1, 2\]"),
        ({"num_envs": 2, "autoreset_mode": "Disabled"}, r"autoreset_mode must be one of \('NextStep', 'SameStep'\)"),
        ({"num_envs": 2, "frame_skip": 0}, "frame_skip must be an integer >= 1"),
        ({"num_envs": 2, "game": "Pongg"}, "unknown game 'Pongg'"),
        ({"num_envs": 2, "obs_type": "rgba"}, "obs_type must be one of"),
        ({"num_envs": 2, "mode": 2}, "mode: 2 is not a mode of Breakout"),
        ({"num_envs": 2, "random_starts": -2}, "random_starts must be an integer >= 0"),
        ({"num_envs": 2, "start_method": "forks"}, r"start_method must be one of \[.*'forkserver'.*\].*got 'forks'"),
        # Mixed pools: the game list, the action sets, each game's options.
        (
            {"num_envs": 3, "game": ["Pong", "Breakout"]},
            "game: a list of games names one game per env, got 2 for num_envs=3",
        ),
        ({"num_envs": 2, "game": ["Pong", 7]}, "game\\[1\\] must be a game name such as 'Breakout', got int 7"),
        ({"num_envs": 2, "game": {"Pong"}}, "game must be a game name or a list of one per env, got set"),
        ({"num_envs": 2, "game": ["Pong", "Pongg"]}, "unknown game 'Pongg'"),
        (
            {"num_envs": 3, "game": ["Pong", "Breakout", "Pong"]},
            r"game: these games' minimal action sets differ, and a pool has one action space: 6 actions \(NOOP, FIRE, "
            r"RIGHT, LEFT, RIGHTFIRE, LEFTFIRE\) in pong; 4 actions \(NOOP, FIRE, RIGHT, LEFT\) in breakout\. "
            r"To mix them, pass full_action_space=True",
        ),
        (
            {"num_envs": 2, "game": ["Pong", "Skiing"], "full_action_space": True},
            r"full action sets differ.*9 actions \(.*\) in skiing\. To mix them, choose games with the same full",
        ),
        ({"num_envs": 2, "game": ["Pong", "Freeway"], "fire_reset": True}, "fire_reset: Freeway has no FIRE action"),
        ({"num_envs": 2, "game": ["Breakout", "Kaboom"], "mode": 4}, "mode: 4 is not a mode of Kaboom"),
    ],
)
def test_bad_pool_options_fail_before_any_process_or_memory_exists(kwargs, message):
    before_children, before_memory = children(), held_segments()
    with pytest.raises((ValueError, TypeError), match=message):
        GamePool(**kwargs)
    assert children() == before_children and not held_segments() - before_memory


# --- faults -----------------------------------------------------------------------------------------


@pytest.mark.timing
def test_a_killed_worker_is_reported_within_two_seconds_and_close_still_works():
    pool = GamePool(4, n_workers=2, **OPTIONS)
    pool.reset()
    pids, segment = worker_pids(pool), pool._transport.segment.name
    os.kill(pids[1], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(PoolError, match=rf"pool worker \(pid {pids[1]}, envs 2-3\) died \(exit code -9\)"):
        pool.step([0, 0, 0, 0])
    assert time.monotonic() - start < 2
    with pytest.raises(PoolError, match="cannot go on"):
        pool.step([0, 0, 0, 0])
    pool.close()
    pool.close()
    assert all_gone(pids) and not held_here(segment)


@pytest.mark.timing
def test_a_worker_killed_while_the_parent_waits_in_recv_is_reported_within_two_seconds(pool_factory):
    pool = pool_factory(4, n_workers=2, batch_size=4, **OPTIONS)
    pool.reset()
    dead = worker_pids(pool)[0]
    os.kill(dead, signal.SIGKILL)
    assert all_gone([dead])
    pool.send([0, 0, 0, 0])  # recv() now waits for an answer that never comes
    start = time.monotonic()
    with pytest.raises(PoolError, match=rf"pool worker \(pid {dead}, envs 0-1\) died \(exit code -9\)"):
        pool.recv()
    assert time.monotonic() - start < 2


def test_a_whole_pool_step_with_a_worker_already_gone_reports_it_dead(pool_factory):
    # The step's byte to a worker that is gone breaks on its closed pipe: that OSError must not escape step(), which
    # leaves the death to the machinery that finds out why and reports it.
    pool = pool_factory(4, n_workers=2, **OPTIONS)
    pool.reset()
    worker = pool._workers[0]
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.join()  # gone, and its end of the pipe with it
    with pytest.raises(PoolError, match=r"envs 0-1\) died"):
        pool.step([0] * 4)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_restart_workers_replaces_a_killed_worker_and_reports_its_envs_truncated(pool_factory, mode):
    pool = pool_factory(4, n_workers=2, restart_workers=True, autoreset_mode=mode, **OPTIONS)
    pool.reset()
    for _ in range(5):
        pool.step([1, 1, 1, 1])
    dead = worker_pids(pool)[0]
    os.kill(dead, signal.SIGKILL)
    obs, rewards, terms, truncs, info = pool.step([0, 0, 0, 0])
    assert list(truncs) == [True, True, False, False] and not terms.any()
    assert rewards[0] == rewards[1] == 0.0
    assert list(info["worker_restarted"]) == [True, True, False, False]
    fresh = Game(seed=0 + 0 + 4, **OPTIONS).reset()  # env 0's replacement game: seed + i + restarts * num_envs
    assert np.array_equal(obs[0], fresh)
    assert all_gone([dead]) and dead not in worker_pids(pool)
    obs, _, _, truncs, info = pool.step([0, 0, 0, 0])  # and it goes on
    assert not truncs.any() and "worker_restarted" not in info
    if mode == AutoresetMode.NEXT_STEP:  # the reset step the truncation owed
        assert np.array_equal(obs[0], fresh)


def test_a_worker_killed_before_reset_is_replaced_and_reset_with_the_seeds_asked_for(pool_factory):
    pool = pool_factory(4, n_workers=2, restart_workers=True, **OPTIONS)
    pool.reset()
    os.kill(worker_pids(pool)[1], signal.SIGKILL)
    obs, info = pool.reset(seed=20)
    assert all(np.array_equal(obs[i], Game(seed=20 + i, **OPTIONS).reset()) for i in range(4))
    obs, _, terms, truncs, info = pool.step([0, 0, 0, 0])  # a reset leaves nothing pending or owed
    assert not terms.any() and not truncs.any() and "worker_restarted" not in info


def test_an_exception_in_a_worker_carries_its_traceback_and_the_pool_goes_on(pool_factory):
    pool = pool_factory(4, n_workers=2, **OPTIONS)
    pool.reset()
    pool._send(pool._workers[0], "explode", None, [])  # no public call can make a worker fail
    with pytest.raises(PoolError, match=r"(?s)pool worker \(pid \d+, envs 0-1\) failed.*unknown command 'explode'"):
        pool._finish_in_flight()
    assert pool.step([0, 1, 2, 3])[0].shape == (4, 4, 84, 84)


def test_a_traceback_longer_than_the_pipe_holds_is_reported_and_the_pool_goes_on(pool_factory):
    pool = pool_factory(4, n_workers=2, **OPTIONS)
    pool.reset()
    # Sent before its answer, the traceback (2 MB, past any socket buffer) kept the worker and the parent waiting.
    pool._send(pool._workers[1], "x" * 2_000_000, None, [])
    with pytest.raises(PoolError, match=r"(?s)pool worker \(pid \d+, envs 2-3\) failed.*unknown command 'xxx"):
        pool._finish_in_flight()
    assert pool.step([0, 1, 2, 3])[0].shape == (4, 4, 84, 84)


@pytest.mark.parametrize("restart_workers", [False, True], ids=["no restarts", "restart_workers"])
def test_a_worker_killed_while_sending_a_traceback_is_reported_dead(pool_factory, restart_workers):
    pool = pool_factory(4, n_workers=2, restart_workers=restart_workers, **OPTIONS)
    pool.reset()
    pool._send(pool._workers[1], "x" * 2_000_000, None, [])
    deadline = time.monotonic() + 30
    while not pool._transport.answer_waiting():  # its answer is in: it is now blocked sending the traceback
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(worker_pids(pool)[1], signal.SIGKILL)
    # A kill lands when the worker next waits: had the parent begun reading at once, a worker that then found room
    # in the socket could send the whole traceback before dying (~3 % of tries), and its error be reported whole.
    connection.wait([pool._workers[1].process.sentinel])
    if not restart_workers:
        with pytest.raises(PoolError, match=r"envs 2-3\) died \(it died while sending the traceback of an error\)"):
            pool._finish_in_flight()
        return
    pool._finish_in_flight()  # replaced, with its envs restarted
    assert pool._books.restarts == 1 and len(set(worker_pids(pool))) == 2
    obs, _, _, _, info = pool.step([0, 1, 2, 3])
    assert obs.shape == (4, 4, 84, 84) and list(info["worker_restarted"]) == [False, False, True, True]


@pytest.mark.parametrize("failing", [0, 1], ids=["the first worker", "the second worker"])
def test_a_worker_failing_in_a_step_is_reported_with_its_traceback_and_the_pool_goes_on(
    pool_factory, unchecked, failing
):
    # A failed answer is -1 - the worker's first env: the first worker's, -1, is the one that a check of the
    # answers against -1 instead of 0 would take for an answer, its error unreported and its envs' results whatever
    # the segment held.
    pool = pool_factory(4, n_workers=2, **OPTIONS)
    pool.reset()
    unchecked(pool)  # an action the parent would refuse reaches a worker: its Game fails on it
    first, last, pid = 2 * failing, 2 * failing + 1, worker_pids(pool)[failing]
    expected = rf"(?s)pool worker \(pid {pid}, envs {first}-{last}\) failed on envs \[{first}, {last}\].*IndexError"
    with pytest.raises(CommandFailed, match=expected) as caught:
        pool.step([99 if env == last else 0 for env in range(4)])
    # The report, as fields: the worker named by the parent, the exception as the worker raised it.
    failed = caught.value
    assert isinstance(failed, PoolError) and failed.worker == f"pool worker (pid {pid}, envs {first}-{last})"
    assert (failed.env_ids, failed.error_type) == ((first, last), "IndexError")
    assert failed.traceback.startswith("Traceback (most recent call last):")
    assert failed.traceback.rstrip().endswith(f"IndexError: {failed.message}") and "in play" in failed.traceback
    del pool._check_actions
    assert pool.step([0, 1, 2, 3])[0].shape == (4, 4, 84, 84)


def test_a_failed_command_is_reported_for_its_own_worker_and_envs(pool_factory, unchecked):
    # With an env a worker, a failed answer read as -id rather than -1 - id would name the next worker (or none);
    # and with commands queued for a worker, its failure is the first one's, the one it answered, not the last's.
    pool = pool_factory(2, n_workers=2, batch_size=1, game="Breakout")
    pool.reset()
    unchecked(pool)  # a bad action reaches the worker
    with pytest.raises(PoolError, match=rf"\(pid {pool._workers[0].process.pid}, envs 0-0\) failed on envs \[0\]"):
        pool.step([99, 0])
    pool = pool_factory(2, n_workers=1, batch_size=1, game="Breakout")
    pool.reset()
    unchecked(pool)
    pool.send([99], env_ids=[0])  # fails
    pool.send([0], env_ids=[1])  # queued behind it, to the same worker
    with pytest.raises(PoolError, match=r"failed on envs \[0\]"):
        pool.recv()


def test_a_worker_slower_than_the_liveness_check_is_waited_for(pool_factory, monkeypatch):
    pool = pool_factory(4, n_workers=2, **OPTIONS)
    pool.reset()
    slow = worker_pids(pool)[1]
    # The parent's liveness checks (one each time nothing came in LIVENESS_CHECK_SECONDS), timed: the slow worker
    # goes on after the first found it alive.
    checks, wait = [], connection.wait

    def timed_wait(*args: object, **kwargs: object) -> list:
        start = time.perf_counter()
        try:
            return wait(*args, **kwargs)
        finally:
            checks.append(time.perf_counter() - start)
            if len(checks) == 1:
                os.kill(slow, signal.SIGCONT)

    monkeypatch.setattr(connection, "wait", timed_wait)
    os.kill(slow, signal.SIGSTOP)  # its answer comes after the parent's first read gave up
    games = [Game(seed=i, **OPTIONS) for i in range(4)]
    for game in games:
        game.reset()
    for action in (1, 0):  # the late answer is taken in, and nothing is left over for the next step
        obs, rewards, terms, truncs, _ = pool.step([action] * 4)
        expected = [game.step(action) for game in games]
        assert all(np.array_equal(obs[i], step[0]) for i, step in enumerate(expected))
        assert list(rewards) == [step[1] for step in expected] and not terms.any() and not truncs.any()
    # A check looks without waiting: one that waited, even a second, for a worker to die would hold up an answer
    # that came meanwhile.
    assert len(checks) >= 1 and max(checks) < 0.5


def test_a_step_interrupted_by_ctrl_c_is_finished_by_the_next(pool_factory):
    pool = pool_factory(4, n_workers=2, **OPTIONS)
    pool.reset()
    for pid in worker_pids(pool):  # no answer comes while the parent waits
        os.kill(pid, signal.SIGSTOP)

    def ctrl_c(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, ctrl_c)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            pool.step([1, 1, 1, 1])
    finally:
        signal.signal(signal.SIGALRM, previous)
        for pid in worker_pids(pool):
            os.kill(pid, signal.SIGCONT)
    games = [Game(seed=i, **OPTIONS) for i in range(4)]
    for game in games:
        game.reset()
        game.step(1)  # the interrupted step was played
    for action in (0, 2):
        obs, rewards, *_ = pool.step([action] * 4)
        expected = [game.step(action) for game in games]
        assert all(np.array_equal(obs[i], step[0]) for i, step in enumerate(expected))
        assert list(rewards) == [step[1] for step in expected]


@pytest.mark.timing
def test_a_whole_step_wakes_the_parent_once_whatever_the_worker_count(pool_factory):
    # Woken by each worker's answer, the parent would sleep and wake up to once a worker per step. (Beside busy
    # processes every answer is sometimes in before the parent reads: a step without a sleep.)
    pool = pool_factory(8, n_workers=4, **OPTIONS)
    pool.reset()
    pool.step([1] * 8)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    for _ in range(40):
        pool.step([0] * 8)
    sleeps = (resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before) / 40
    assert 0.5 <= sleeps < 1.5, sleeps


def voluntary_switches(pid):
    """How often process `pid` has slept so far (Linux's count of its voluntary context switches)."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("voluntary_ctxt_switches"))


def cpu_seconds_of_others(pids):
    """The CPU seconds all processes but `pids` have used so far on this machine (Linux's /proc counters)."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, stat.readline().split()[1:9])
    ours = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            ours += sum(map(int, stat.read().rsplit(")", 1)[1].split()[11:13]))  # its user and system time
    return (user + nice + system + irq + softirq + steal - ours) / os.sysconf("SC_CLK_TCK")


@pytest.mark.timing
def test_workers_take_commands_that_come_quickly_without_sleeping(pool_factory):
    # A worker that has answered watches for its next command before it sleeps: a quick caller wakes nobody. Beside
    # busy processes the caller is not always quick (its core taken, a worker sleeps ~1 a step, for a while), so the
    # best of up to 10 windows of 100 steps counts; without the watch every window shows about 1 sleep a step.
    pool = pool_factory(2, n_workers=2, game="Pong", life_loss="ignore")
    pool.reset()
    for _ in range(70):  # past any back-off that the slow start set (at most 63 commands)
        pool.step([0, 0])
    ours = [os.getpid(), *worker_pids(pool)]
    windows, others = [], cpu_seconds_of_others(ours)
    start = time.monotonic()
    while len(windows) < 10 and not (windows and windows[-1] < 0.5):
        before = {pid: voluntary_switches(pid) for pid in worker_pids(pool)}
        for _ in range(100):
            pool.step([0, 0])
        windows.append(max((voluntary_switches(pid) - count) / 100 for pid, count in before.items()))
    cores_taken = (cpu_seconds_of_others(ours) - others) / (time.monotonic() - start)
    if windows[-1] >= 0.5 and cores_taken > 0.5:
        pytest.skip(f"other processes took {cores_taken:.1f} cores throughout: the caller was never quick")
    assert windows[-1] < 0.5, windows


def test_a_worker_watches_less_and_less_while_commands_come_late():
    # A parent busy between steps (a learner) would otherwise pay a core's WATCH_SECONDS every step.
    watch, sent = CommandWatch(), np.zeros(1, np.int64)
    watched = []
    for command in range(1, 131):
        watching, start = watch.skip == 0, time.perf_counter()
        watch.wait(sent, 0, 0.0)  # command 1 never comes
        if watching:
            watched.append(command)
            assert time.perf_counter() - start >= WATCH_SECONDS
    assert watched == [1, 3, 7, 15, 31, 63, 127]  # then every 64th
    # Commands come in time again: the next watch finds one at once, and the back-off is over.
    sent[0] = 1
    for _ in range(64):
        watching = watch.skip == 0
        watch.wait(sent, 0, 0.0)
        if watching:
            break
    assert watching and watch.misses == 0 and watch.skip == 0


def test_a_worker_watches_as_long_as_its_last_command_took_to_play():
    # In a whole-pool step the next command comes once the slowest worker and the parent are done: with 16 envs a
    # worker, milliseconds after the first worker answers. A watch of WATCH_SECONDS alone would sleep through them.
    sent = np.zeros(1, np.int64)
    for played in (0.0, 0.004):
        start = time.perf_counter()
        CommandWatch().wait(sent, 0, played)  # the command never comes
        assert time.perf_counter() - start >= max(WATCH_SECONDS, played)
    sent[0] = 1  # it came: no wait
    start = time.perf_counter()
    CommandWatch().wait(sent, 0, 10.0)
    assert time.perf_counter() - start < 1


def test_late_and_false_wake_ups_leave_every_step_exact(pool_factory):
    pool = pool_factory(4, n_workers=2, **OPTIONS)
    pool.reset()
    games = [Game(seed=i, **OPTIONS) for i in range(4)]
    for game in games:
        game.reset()
    wake = pool._transport.wake[1]  # the end the workers write their wake-ups to
    for t, action in enumerate([1, 0, 2, 3, 0, 1] * 3):
        next_tag = (pool._transport.step_tag + 1) % POOL_STEP_TAGS
        if t % 3 == 1:  # a late wake-up of the step before: skipped
            os.write(wake.fileno(), POOL_STEP_BYTES[pool._transport.step_tag])
        if t % 3 == 2:  # a wake-up before the workers are done: the parent reads on until every answer is in
            os.write(wake.fileno(), POOL_STEP_BYTES[next_tag])
        obs, rewards, *_ = pool.step([action] * 4)
        expected = [game.step(action) for game in games]
        assert all(np.array_equal(obs[i], step[0]) for i, step in enumerate(expected))
        assert list(rewards) == [step[1] for step in expected]


# --- how a whole-pool step is sent, answered and read -------------------------------------------------------
# The tests below check the parent's reads and wake-ups on a pool's internals: a slip there plays the same values,
# only slower, late or out of step with the next command.


def test_each_workers_count_of_commands_is_raised_in_its_first_envs_row(pool_factory):
    # A worker watching for its next command reads its first env's row, column 0, for one more command each time: a
    # count raised elsewhere, by 2 or not at all, it would miss (and sleep until the command's byte woke it: the same
    # values, slower; the watch's timing test sees it too) or take one command for two. A whole-pool step and any
    # other command (here a send to the second worker only) raise it alike.
    pool = pool_factory(6, n_workers=2, batch_size=3, game="Breakout")  # envs 0-2 and 3-5
    commands = pool._shared["commands"]
    before = commands.copy()
    pool.reset()  # a command to each worker
    for _ in range(5):
        pool.step([0] * 6)
    pool.send([0, 0, 0], env_ids=[3, 4, 5])  # a command to the second worker only
    pool.recv()
    raised = commands - before
    assert raised[:, 0].tolist() == [6, 0, 0, 7, 0, 0] and not raised[:, 1:].any()


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


def test_a_whole_pool_step_whose_answers_all_came_is_not_read_again_the_general_way(pool_factory, monkeypatch):
    # Every worker answered (the worker whose first env is 0 answers 0, an answer like any other), so the step is
    # done: neither sent nor booked and read again the general way (`_step_each`, `_book_step_of_all`,
    # `_finish_in_flight`), which gives the same values at several times the parent's cost.
    monkeypatch.setattr(pool_module, "LIVENESS_CHECK_SECONDS", PATIENT)
    pool = pool_factory(4, n_workers=2, game="Breakout")
    pool.reset()
    general = []
    finish_in_flight = pool._finish_in_flight
    monkeypatch.setattr(pool, "_finish_in_flight", lambda: (general.append(1), finish_in_flight()))
    seconds = timed_steps(pool, 20)
    assert general == [] or max(seconds) >= PATIENT


def test_a_whole_pool_step_wakes_the_parent_once_and_leaves_no_wake_up_behind(pool_factory, monkeypatch):
    # With a ticket for every worker but one, the worker that finds none left is the last and wakes the parent, once
    # a step; with fewer tickets, two or more workers would wake it, and the next step would read a stale wake-up
    # before its own. Each step's tag is new: a late wake-up of the step before, which the parent skips by its tag,
    # is not taken for this step's (leaving this step's behind).
    monkeypatch.setattr(pool_module, "LIVENESS_CHECK_SECONDS", PATIENT)
    pool = pool_factory(6, n_workers=3, game="Breakout")
    pool.reset()
    for t in range(30):
        if t % 2:  # a late wake-up of the step before
            os.write(pool._transport.wake[1].fileno(), POOL_STEP_BYTES[pool._transport.step_tag])
        (seconds,) = timed_steps(pool, 1)
        time.sleep(0.01)  # (another wake-up, sent as the parent woke, is in by now)
        if seconds < PATIENT:  # woken, not given up on
            with pytest.raises(BlockingIOError):
                pool._transport.wake[0].recv(64, socket.MSG_DONTWAIT)


class WatchedAnswers:
    """Put in place of the parent's end of `pool`'s answer socket: it counts the parent's reads; `late` (bytes:
    answers) is sent on the socket just after the first read, as by a worker that answers while the parent reads."""

    def __init__(self, pool: GamePool, late: bytes = b"") -> None:
        self.end, self.child, self.late, self.reads = pool._transport.answers[0], pool._transport.answers[1], late, 0
        pool._transport.answers = (self, self.child)

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
def test_a_woken_parent_reads_every_answer_of_a_whole_pool_step_once(pool_factory, late):
    # A worker takes its ticket before it answers, so the last one can wake the parent while another is between its
    # ticket and its answer. The woken parent waits for that answer; reading only what was in, it would hand the
    # whole step to the general way (booked as a command each, read again). With every answer in, it reads once:
    # no second read (of nothing).
    pool = pool_factory(4, n_workers=2, game="Breakout")  # envs 0-1 and 2-3
    command = POOL_STEP_BYTES[1]
    os.write(pool._transport.answers[1].fileno(), answer(2) if late else answer(2) + answer(0))
    os.write(pool._transport.wake[1].fileno(), command)  # the last worker's wake-up
    watched = WatchedAnswers(pool, late=answer(0) if late else b"")
    answers = np.full(2, pool_module.NO_ANSWER, np.int32)
    pool._transport.read_pool_step(answers, command)
    assert answers.tolist() == [2, 0]
    assert watched.reads == (2 if late else 1)


def test_a_parent_not_woken_takes_the_answers_that_came_and_waits_no_more(pool_factory, monkeypatch):
    # A wait for the wake-up that gave up is not a wake-up: waiting again for the answers still missing would cost up
    # to LIVENESS_CHECK_SECONDS more (a dead worker's never come) before the general way checks that the workers are
    # alive. Not woken, the parent reads what came and leaves any later answer to the general way.
    monkeypatch.setattr(pool_module, "LIVENESS_CHECK_SECONDS", 0.05)  # the wait for the wake-up that never comes
    pool = pool_factory(4, n_workers=2, game="Breakout")
    os.write(pool._transport.answers[1].fileno(), answer(2))
    WatchedAnswers(pool, late=answer(0))
    answers = np.full(2, pool_module.NO_ANSWER, np.int32)
    pool._transport.read_pool_step(answers, POOL_STEP_BYTES[1])
    assert answers.tolist() == [2, pool_module.NO_ANSWER]
    assert pool._transport.answers[0].recv(8, socket.MSG_DONTWAIT) == answer(0)  # left in the socket


def test_a_reset_reads_every_workers_answer_at_once(pool_factory, monkeypatch):
    # The commands in flight are collected with one read that waits for all of their answers: one at a time, the
    # parent would sleep and wake once a worker instead of once.
    monkeypatch.setattr(pool_module, "LIVENESS_CHECK_SECONDS", PATIENT)
    pool = pool_factory(6, n_workers=3, game="Breakout")
    pool.reset()  # (the workers started: a slow start would pass for a read given up on)
    watched = WatchedAnswers(pool)
    start = time.perf_counter()
    pool.reset()
    assert watched.reads == 1 or time.perf_counter() - start >= PATIENT


def test_recv_returns_the_first_envs_done_without_waiting_for_a_stopped_worker(pool_factory, monkeypatch):
    # recv() waits for the first answer in flight, not for every one (nor two): waiting for all, it would return the
    # same batch, late, up to the liveness timeout later.
    monkeypatch.setattr(pool_module, "LIVENESS_CHECK_SECONDS", PATIENT)
    pool = pool_factory(4, n_workers=2, batch_size=2, game="Breakout")  # envs 0-1 and 2-3
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


def test_a_game_block_step_says_whether_an_episode_ended():
    # A RayGamePool actor sends its envs' episode statistics only after a step that ended an episode (the flag
    # GameBlock.step returns): set from the start, it would send them after every step; never set, never. A reset
    # is answered as one that ended none (else the same Ray reply, bigger).
    options = {"game": "Breakout", "max_episode_frames": 40}  # truncated at the 10th step of 4 frames
    shapes = layout(2, Game(**options).options, same_step=True)
    arrays = {name: np.zeros(shape, dtype) for name, (shape, dtype) in shapes.items()}
    block = GameBlock([0, 1], [0, 1], False, [options, options], arrays)
    assert block.run("reset", ({0: 0, 1: 1}, [])) == ("ok", [], False)
    ended = [block.step([0, 1]) for _ in range(12)]
    assert ended == [False] * 9 + [True] + [False] * 2
    assert arrays["ended"].tolist() == [False, False] and block.step([1]) is False


# --- no leaks ---------------------------------------------------------------------------------------


def test_close_leaves_no_process_and_no_shared_memory():
    pool = GamePool(4, **OPTIONS)
    pool.reset()
    pids, segment, tickets = worker_pids(pool), pool._transport.segment.name, pool._transport.tickets
    assert held_here(segment) and segment not in shm_segments()  # it has no name in /dev/shm
    with pool:
        pass
    assert all_gone(pids) and not held_here(segment) and all(end.closed for end in tickets)
    with pytest.raises(PoolError, match="closed"):
        pool.step([0, 0, 0, 0])


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_a_pool_opened_and_closed_without_a_step_writes_nothing_to_stderr(tmp_path, start_method):
    # Closed at once, its workers are still starting (unpickling their arguments, the descriptors among them): they
    # must find everything they were given, and say nothing. Before the fix, 3 runs in 3 printed a forkserver traceback.
    script = tmp_path / "open_close.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from atari_game import GamePool

            if __name__ == "__main__":
                for _ in range(3):
                    GamePool(4, "Breakout", start_method={start_method!r}).close()
                with GamePool(2, "Pong", start_method={start_method!r}) as pool:
                    pass
                print("closed")
            """
        )
    )
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.stdout == "closed\n" and result.stderr == "", result.stderr


def test_garbage_collection_leaves_no_process_and_no_shared_memory():
    pool = GamePool(2, **OPTIONS)
    pids, segment, tickets = worker_pids(pool), pool._transport.segment.name, pool._transport.tickets
    del pool
    gc.collect()
    assert all_gone(pids) and not held_here(segment) and all(end.closed for end in tickets)


def test_an_exception_in_the_caller_leaves_nothing_behind():
    segment = pids = tickets = None
    with pytest.raises(ZeroDivisionError), GamePool(2, **OPTIONS) as pool:
        pids, segment, tickets = worker_pids(pool), pool._transport.segment.name, pool._transport.tickets
        pool.reset()
        1 / 0  # noqa: B018
    assert all_gone(pids) and not held_here(segment) and all(end.closed for end in tickets)


def test_only_same_step_autoreset_takes_shared_memory_for_final_observations():
    # Next-step autoreset returns an episode's last observation as the step's obs, so it needs no room beside it.
    with (
        GamePool(4, n_workers=1, **OPTIONS) as next_step,
        GamePool(4, n_workers=1, autoreset_mode=AutoresetMode.SAME_STEP, **OPTIONS) as same_step,
    ):
        assert same_step._transport.segment.size - next_step._transport.segment.size == 4 * 4 * 84 * 84
        assert next_step._transport.segment.name.startswith(f"atari_game_{os.getpid()}_")


def test_close_works_while_the_caller_holds_a_zero_copy_array():
    pool = GamePool(2, copy=False, **OPTIONS)
    obs, _ = pool.reset()
    segment, copied = pool._transport.segment.name, obs.copy()
    pool.close()
    # The array keeps the memory mapped (reading it is safe, the observation as it was), and the mapping goes with it.
    assert np.array_equal(obs, copied) and copied.any() and held_here(segment)
    del obs
    assert not held_here(segment)


@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL", "SIGHUP to the group"])
def test_a_parent_stopped_by_ctrl_c_killed_or_hung_up_on_leaves_nothing_behind(tmp_path, how):
    script = textwrap.dedent(
        """
        import signal
        from atari_game.pool import GamePool
        if __name__ == "__main__":
            # The dispositions the test relies on, whatever this process inherited (SIGHUP is ignored under nohup,
            # SIGINT in a shell's background job): the fork server and the workers inherit them in turn.
            signal.signal(signal.SIGHUP, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            pool = GamePool(4, game="Pong")
            pool.reset()
            print(*[w.process.pid for w in pool._workers], flush=True)
            while True:
                pool.step([0, 0, 0, 0])
        """
    )
    path = tmp_path / "parent.py"
    path.write_text(script)
    # A session of its own, as a terminal gives: closing the terminal hangs up its whole process group. (TMPDIR: a
    # killed parent leaves its fork server's socket folder, pymp-*, behind; here in pytest's folder, not in /tmp.)
    parent = subprocess.Popen(
        [sys.executable, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    pids = parent.stdout.readline().split()
    time.sleep(0.5)
    if how == "SIGHUP to the group":  # the parent, its workers, the fork server and the resource tracker
        os.killpg(parent.pid, signal.SIGHUP)
    else:
        parent.send_signal(getattr(signal, how))
    parent.wait(timeout=30)
    # The workers go with the parent; the segment and the tickets' pipe, which have no name, go with the last of them
    # (test_pool_lifetime checks /dev/shm after kill -9 of the whole process group).
    assert all_gone([int(pid) for pid in pids], within=10)
    if how == "SIGINT":
        assert "KeyboardInterrupt" in parent.stderr.read()


@pytest.mark.slow
def test_ten_create_close_cycles_grow_nothing():
    def cycle():
        with GamePool(2, n_workers=2, game="Pong") as pool:
            pool.reset()
            pool.step([0, 0])
        return pool._transport.segment.name

    cycle()  # the first one starts the fork server and the resource tracker
    before = (len(children()), len(open_descriptors()))
    # A leak is one or more things a cycle: ten cycles show it as well as fifty. Only this test's own segments are
    # counted: other processes on the machine make and delete theirs.
    segments = [cycle() for _ in range(10)]
    assert (len(children()), len(open_descriptors())) == before
    assert len(set(segments)) == 10 and not set(segments) & held_segments()


@pytest.mark.parametrize("start_method", ["fork", "forkserver", "spawn"])
def test_every_start_method_works(pool_factory, start_method):
    pool = pool_factory(2, start_method=start_method, **OPTIONS)
    local = Game(seed=1, **OPTIONS)
    obs, _ = pool.reset()
    assert np.array_equal(obs[1], local.reset())
    assert np.array_equal(pool.step([1, 2])[0][1], local.step(2)[0])


def test_ctrl_c_at_any_moment_of_a_step_leaves_the_pool_in_step(ctrl_c_raises):
    # Ctrl-C lands when it lands: during the wait, as an answer is read, between sends. The next step must be
    # answered (no answer lost, none left over), not hang or take an earlier step's answer.
    rng = np.random.default_rng(0)
    with GamePool(4, "Pong", n_workers=2) as pool:
        pool.reset(seed=0)
        for _ in range(20):
            timer = threading.Timer(rng.uniform(0.0005, 0.005), os.kill, (os.getpid(), signal.SIGINT))
            with pytest.raises(KeyboardInterrupt):
                timer.start()  # in the block: on a loaded machine the signal can come before start() returns
                while True:
                    pool.step(np.zeros(4, int))
            timer.join()
            obs, *_ = pool.step(np.zeros(4, int))
            assert obs.shape == (4, 4, 84, 84)
        assert not pool._books.busy and not pool._transport.unread  # every answer taken in, none still due


def test_reset_refuses_a_negative_seed_before_any_env_is_reset():
    # SpaceInvaders' screen moves from the first frame: an env reset by a refused call would show on the next step.
    options = {"game": "SpaceInvaders", "noop_max": 30}
    with GamePool(4, n_workers=2, **options) as pool:
        pool.reset(seed=0)
        for _ in range(3):
            pool.step(np.zeros(4, int))
        with pytest.raises(ValueError, match="the seed of env 2 must be an integer >= 0, got -1"):
            pool.reset(seed=[5, 6, -1, 7])
        with pytest.raises(TypeError, match="the seed of env 0 must be an integer"):
            pool.reset(seed=["a", 1, 2, 3])
        # The wrong kind of seed is a TypeError, as for Game.reset; a list of the wrong length a ValueError.
        for seed in (1.5, "x", True):
            with pytest.raises(TypeError, match=rf"seed must be None, an int or a list of 4 seeds, got \w+ {seed!r}"):
                pool.reset(seed=seed)
        with pytest.raises(ValueError, match=r"^seed: a list of seeds gives one per env, 4, got 3$"):
            pool.reset(seed=[1, 2, 3])
        obs = pool.step(np.zeros(4, int))[0]
        for i in range(4):  # every env went on with its game: its 4th step, as a local Game's
            assert np.array_equal(obs[i], play_one(i, [0] * 4, same_step=False, **options)[1][3][0])
        assert pool.reset(seed=0)[0].shape == (4, 4, 84, 84)  # still usable


def test_step_or_send_before_reset_is_refused_and_the_pool_goes_on():
    with GamePool(2, "Pong", n_workers=1) as pool:
        for call in (lambda: pool.step(np.zeros(2, int)), lambda: pool.send(np.zeros(2, int))):
            with pytest.raises(PoolError, match=r"call reset\(\) before the first step\(\) or send\(\)"):
                call()
        pool.reset(seed=0)
        assert pool.step(np.zeros(2, int))[0].shape == (2, 4, 84, 84)
