"""AtariGameEnv: one `Game` as a Gymnasium `Env`, and the ``atari_game/<Name>-v0`` registrations.

The `Game` does all the preprocessing; this file only translates its four-value ``step`` into Gymnasium's five values
and its automatic episode restarts into Gymnasium's ``reset()`` protocol (the Gymnasium guide shows the ids in use).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np

from atari_game.game import Game, list_games
from atari_game.pool import GamePool
from atari_game.spaces import action_space, observation_space
from atari_game.validation import check_count

# The Atari 2600 draws 60 frames per second (NTSC); an agent step lasts `frame_skip` of them.
ATARI_FPS = 60


def _refuse_seed(options: dict[str, Any]) -> None:
    # Gymnasium seeds through reset(seed=...), never through the constructor: say so instead of failing later.
    if "seed" in options:
        raise TypeError(
            f"seed={options['seed']!r} is not a constructor option of the atari_game Gymnasium envs: "
            "seed them with reset(seed=...)"
        )


class AtariGameEnv(gymnasium.Env[np.ndarray, np.int64 | np.ndarray]):
    """One Atari game with all of `Game`'s preprocessing, as a Gymnasium `Env` (the five-value API).

    Args:
        game: any bundled game, in any spelling `Game` accepts (``"Breakout"``, ``"ms_pacman"``, ...).
        render_mode: None, or ``"rgb_array"``: `render` returns the emulator's colour screen.
        **game_options: the options of `GameOptions` (``frame_skip``, ``life_loss``, ``noop_max``, ...), validated
            by it, except ``seed``: as in Gymnasium, seeding is ``reset(seed=...)``, and until then the game starts
            from fresh entropy (so that copies made by Gymnasium's vector envs are not all the same game).

    Spaces: `atari_game.spaces`'s, by default ``Box(0, 255, (4, 84, 84), uint8)`` and ``Discrete(n_actions)``.

    ``step(action) -> (obs, reward, terminated, truncated, info)``:

    * ``obs``: ``uint8`` observation, oldest frame first; on the step that ends an episode, that episode's final
      observation (`Game.final_observation`).
    * ``reward``: float, the sum over the repeated frames (its sign with ``clip_rewards``).
    * ``terminated``: a life lost (``life_loss="reset"`` or ``"terminal"``) or game over. ``truncated``: the game
      reached ``max_episode_frames`` emulator frames (counted per game, across lives). At most one is True.
    * ``info["lives"]``: the game's lives after the step (on a done step, those the episode ended with, as ale-py's
      env reports them). On a done step also ``info["episode"] = {"r": unclipped return, "l": agent steps}`` and,
      when a whole game ended and ``life_loss`` is not ``"reset"``, ``info["game"] = {"r", "l"}``.

    After a done step, call `reset` (Gymnasium's rule), which starts the next episode; `render` then shows the
    screen the episode ended on.
    """

    # What gymnasium.make reads from the class; each env replaces it with its own render_fps (hence no ClassVar).
    metadata = {"render_modes": ["rgb_array"], "render_fps": ATARI_FPS / 4}  # noqa: RUF012

    def __init__(self, game: str = "Breakout", render_mode: str | None = None, **game_options: Any) -> None:
        # Check every argument before the emulator is built.
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        _refuse_seed(game_options)
        if isinstance(game, (list, tuple)):  # make_vec passes its kwargs to every env of "sync" and "async"
            raise TypeError(
                f"game: an AtariGameEnv plays one game, got a list of {len(game)}; a list naming each env's game is "
                "for a GamePool: gymnasium.make_vec(id, num_envs=len(games), vectorization_mode='vector_entry_point', "
                "game=games)"
            )
        self.render_mode = render_mode
        self.game = Game(game, seed=None, **game_options)
        self.closed = False  # close() sets it: reset and step refuse to play on

        self.observation_space = observation_space(self.game.options)
        self.action_space = action_space(self.game.options)
        # Real-time playback (RecordVideo reads this) depends on this env's frame_skip, not the default's.
        self.metadata = {**self.metadata, "render_fps": ATARI_FPS / self.game.options.frame_skip}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode and return its first observation and ``{"lives": ...}``.

        * ``reset(seed=s)``: re-seed the game exactly as ``Game(seed=s)`` is seeded and restart it from scratch.
        * ``reset()`` after a done step: start the next episode exactly as a plain `Game` starts it on its done step
          (`Game.start_next_episode`): a new game, except with ``life_loss="terminal"`` after a lost life, where the
          same game goes on with the lives left.
        * ``reset()`` first, or in the middle of an episode: start a new game, as `Game.reset` does (the first game
          seeded with fresh entropy).

        ``options`` must be None or empty: there are no reset options.
        """
        self._check_open()
        if options:
            raise ValueError(f"reset options are not supported, got {options!r}: use None")
        # Seed Gymnasium's own generator too (env.np_random), as its API promises; the Game has its own.
        super().reset(seed=seed)
        if seed is not None:
            obs = self.game.reset(seed=seed)
        elif self.game.next_episode_due:
            obs = self.game.start_next_episode()
        else:
            obs = self.game.reset()
        return obs, {"lives": self.game.lives}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Play one agent step; see the class docstring for what is returned."""
        self._check_open()
        if self.game.next_episode_due:  # a step after a done without reset() plays on in the next episode
            self.game.start_next_episode()
        # A done step leaves the next episode to reset(): obs is the ended episode's final observation.
        obs, reward, done, episode_info = self.game.step(action, start_next=False)
        info: dict[str, Any] = {"lives": self.game.lives}
        if not done:
            return obs, reward, False, False, info
        assert episode_info is not None  # a done step always reports its episode
        info["episode"] = {"r": episode_info["reward"], "l": episode_info["length"]}
        if "game_reward" in episode_info:
            info["game"] = {"r": episode_info["game_reward"], "l": episode_info["game_length"]}
        truncated = episode_info["truncated"]
        return obs, reward, not truncated, truncated, info

    def render(self) -> np.ndarray | None:
        """The emulator's colour screen, ``uint8 (height, 160, 3)`` (210 rows in most games, 250 in a few such as
        KingKong), with ``render_mode="rgb_array"``; else None."""
        return self.game.screen_rgb() if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        """Done with the env: a later `reset` or `step` raises `RuntimeError`."""
        self.closed = True

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{self!r} is closed: make a new one (gymnasium.make) to play again")

    def __repr__(self) -> str:
        return f"AtariGameEnv({self.game.name!r})"


def make_game_pool(
    num_envs: int, game: str | Sequence[str] = "Breakout", render_mode: str | None = None, **options: Any
) -> GamePool:
    """The vector entry point: ``gymnasium.make_vec(id, num_envs=n, **options)`` calls
    ``make_game_pool(num_envs=n, game=<the id's game>, **options)``.

    `options` are `GamePool`'s (``n_workers``, ``autoreset_mode``, ...) and `Game`'s; a ``game=[...]`` list of `n`
    games makes a mixed pool. As for `AtariGameEnv`, ``seed`` is refused (``reset(seed=s)`` seeds env ``i`` with
    ``s + i``) and the games start with fresh entropy. A pool does not render: `render_mode` must be None.
    """
    if render_mode is not None:
        raise ValueError(
            f"render_mode={render_mode!r}: a GamePool does not render; "
            "use make_vec(..., vectorization_mode='sync') or 'async' for rendering"
        )
    _refuse_seed(options)
    # Checked under make_vec's name for it (GamePool calls it num_envs).
    num_envs = check_count("num_envs", num_envs, 1, 1 << 16)
    return GamePool(num_envs, game, seed=None, **options)


def register_games() -> None:
    """Register ``atari_game/<Name>-v0`` for every game of `list_games` (cheap: no ROM is loaded); ids already
    registered are left alone, so calling this again neither re-registers nor warns."""
    for name in list_games():
        env_id = f"atari_game/{name}-v0"
        if env_id not in gymnasium.registry:
            gymnasium.register(
                env_id,
                entry_point="atari_game.env:AtariGameEnv",
                vector_entry_point="atari_game.env:make_game_pool",
                kwargs={"game": name},
            )
