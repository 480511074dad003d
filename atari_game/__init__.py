"""atari_game: Atari 2600 games as fast, correct, ready-to-train reinforcement-learning environments."""

import importlib.metadata

from atari_game.env import AtariGameEnv, make_game_pool, register_games
from atari_game.evaluation import Evaluation, evaluate
from atari_game.game import (
    LIFE_LOSS_MODES,
    OBS_TYPES,
    Game,
    GameOptions,
    action_meanings,
    game_difficulties,
    game_modes,
    list_games,
    resolve_game,
)
from atari_game.pool import GamePool
from atari_game.pool_errors import CommandFailed, PoolError, WorkerDied
from atari_game.protocols import PROTOCOLS, Protocol
from atari_game.ray_pool import RayGamePool
from atari_game.replay import FrameReplay
from atari_game.worker import DEFAULT_START_METHOD, Worker, WorkerError, worker_process

__all__ = [
    "DEFAULT_START_METHOD",
    "LIFE_LOSS_MODES",
    "OBS_TYPES",
    "PROTOCOLS",
    "AtariGameEnv",
    "CommandFailed",
    "Evaluation",
    "FrameReplay",
    "Game",
    "GameOptions",
    "GamePool",
    "PoolError",
    "Protocol",
    "RayGamePool",
    "Worker",
    "WorkerDied",
    "WorkerError",
    "action_meanings",
    "evaluate",
    "game_difficulties",
    "game_modes",
    "list_games",
    "make_game_pool",
    "register_games",
    "resolve_game",
    "worker_process",
]

#: The installed release (pyproject.toml's version), as bug reports and `atari-game --version` give it; "not
#: installed" for a checkout used through PYTHONPATH (as on a Ray node, where `ray_pool.versions` says the same).
try:
    __version__ = importlib.metadata.version("atari_game")
except importlib.metadata.PackageNotFoundError:
    __version__ = "not installed"

# gymnasium.make("atari_game/Breakout-v0") and friends work as soon as atari_game is imported.
register_games()
