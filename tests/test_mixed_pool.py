"""Pools of different games: restarts, async results and messages name the right games.

Stepping bit-for-bit against local games and refusing bad game lists are in test_pool.py, parametrized over
one game and mixed ones.
"""

import os
import signal

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from support import worker_pids
from test_pool import play_one

# Games that share the minimal action set (NOOP, FIRE, RIGHT, LEFT), one list per env.
GAMES = ["Breakout", "Kaboom", "Kaboom", "Breakout"]
OPTIONS = {"fire_reset": True, "noop_max": 30}


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_a_restarted_worker_plays_its_envs_games_again(pool_factory, mode):
    pool = pool_factory(4, GAMES, seed=0, n_workers=2, restart_workers=True, autoreset_mode=mode, **OPTIONS)
    pool.reset()
    for _ in range(5):
        pool.step([1, 1, 1, 1])
    os.kill(worker_pids(pool)[1], signal.SIGKILL)  # envs 2 and 3: Kaboom and Breakout
    obs, _, _, truncs, info = pool.step([0, 0, 0, 0])
    assert list(info["worker_restarted"]) == [False, False, True, True] and list(truncs) == [False, False, True, True]
    # The replacement's games: the same games, seeds seed + i + restarts * num_envs, played from their reset.
    actions = np.random.default_rng(0).integers(4, size=60)
    local = {i: play_one(i + 4, actions, mode == AutoresetMode.SAME_STEP, game=GAMES[i], **OPTIONS) for i in (2, 3)}
    assert all(np.array_equal(obs[i], local[i][0]) for i in (2, 3))
    assert info["game_name"].tolist() == ["breakout", "kaboom", "kaboom", "breakout"]
    if mode == AutoresetMode.NEXT_STEP:  # the reset step the truncation owed
        pool.step([0, 0, 0, 0])
    for t, action in enumerate(actions):
        obs = pool.step([action] * 4)[0]
        assert all(np.array_equal(obs[i], local[i][1][t][0]) for i in (2, 3))


def test_recv_names_the_games_of_the_envs_it_returns(pool_factory):
    pool = pool_factory(4, GAMES, n_workers=2, batch_size=2, **OPTIONS)
    pool.reset()
    pool.send([0, 0], env_ids=[3, 1])
    *_, info = pool.recv()
    returned = dict(zip(info["env_id"].tolist(), info["game_name"].tolist(), strict=True))
    assert returned == {1: "kaboom", 3: "breakout"}
    assert info["_game_name"].all() and info["_game_name"].shape == (2,)


def test_repr_and_messages_stay_short_for_many_games(pool_factory):
    games = ["Pong", "SpaceInvaders", "DemonAttack", "AirRaid", "Carnival", "Galaxian"] * 2
    pool = pool_factory(12, games, n_workers=1)
    assert repr(pool) == (
        "GamePool(12 envs of 6 games: pong, space_invaders, demon_attack, air_raid and 2 more games, 1 worker)"
    )
    _, info = pool.reset()
    with pytest.raises(ValueError, match=r"actions must be in \[0, 6\) for pong, .*, air_raid and 2 more games \("):
        pool.step([9] * 12)
    with pytest.raises(ValueError, match="read-only"):  # the info arrays every step shares cannot be spoilt
        info["game_name"][0] = "breakout"
