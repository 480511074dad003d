"""One Atari 2600 game with all the standard preprocessing done inside `Game.step`.

This is the `Game` of the labml PPO tutorial, rebuilt on `ale_py.ALEInterface`:

* the action is repeated for `frame_skip` emulator frames and the rewards are summed;
* the last two frames are max-pooled (Atari sprites flicker between frames), read as ALE's own
  grayscale screen and resized to 84x84 with area interpolation;
* the last `stack` processed frames are stacked channel-first, oldest first, as `uint8`;
* a lost life ends the episode (`done=True`) and the game restarts from scratch;
* the step that ends an episode returns the episode's total reward and length.

It depends only on the standard library, numpy, cv2 and ale_py, so the whole file can be pasted
into a notebook cell.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import operator
import re
from typing import Any

import ale_py
import cv2
import numpy as np
from ale_py import roms

# ALE prints a banner for every emulator it builds unless told, before the first one, to log errors only.
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)

# These ROMs ship with ale-py but have no single-player mode; loading one exits the process, and
# ale-py registers no environment for them either.
_MULTIPLAYER_ONLY = frozenset({"combat", "joust", "maze_craze", "warlords"})

LIFE_LOSS_MODES = ("reset", "terminal", "ignore")


def _rom_ids() -> list[str]:
    return [rom for rom in roms.get_all_rom_ids() if rom not in _MULTIPLAYER_ONLY]


def _display_name(rom: str) -> str:
    # The same PascalCase name as the Gymnasium id "ALE/<name>-v5": "ms_pacman" -> "MsPacman".
    return rom.title().replace("_", "")


def list_games() -> list[str]:
    """The names of all games bundled with ale-py, sorted: ``["Adventure", ..., "Breakout", ...]``."""
    return sorted(_display_name(rom) for rom in _rom_ids())


def resolve_game(name: str) -> str:
    """The ale-py ROM id of a game, from any usual spelling of its name.

    ``"Breakout"``, ``"breakout"``, ``"BreakoutNoFrameskip-v4"`` and ``"ALE/Breakout-v5"`` all give
    ``"breakout"``; ``"MsPacman"`` and ``"ms_pacman"`` give ``"ms_pacman"``. An unknown name raises
    `ValueError` naming the closest games.
    """
    if not isinstance(name, str):
        raise TypeError(f"game must be a string such as 'Breakout', got {type(name).__name__} {name!r}")
    # Strip the Gymnasium id around the name, then compare without case or underscores.
    bare = re.sub(r"^ALE/|(NoFrameskip|Deterministic)?-v\d+$", "", name.strip())
    key = bare.replace("_", "").lower()
    by_key = {rom.replace("_", ""): rom for rom in _rom_ids()}
    if key in by_key:
        return by_key[key]
    closest = [_display_name(by_key[k]) for k in difflib.get_close_matches(key, by_key, n=3, cutoff=0.5)]
    hint = f"closest: {', '.join(closest)}" if closest else "no close match"
    raise ValueError(f"game: unknown game {name!r} ({hint}); atari_game.list_games() lists all {len(by_key)}")


@functools.cache
def action_meanings(game: str, full_action_space: bool = False) -> tuple[str, ...]:
    """The names of a game's actions in index order, e.g. ``("NOOP", "FIRE", "RIGHT", "LEFT")``."""
    ale = ale_py.ALEInterface()
    ale.loadROM(roms.get_rom_path(resolve_game(game)))
    actions = ale.getLegalActionSet() if full_action_space else ale.getMinimalActionSet()
    return tuple(action.name for action in actions)


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= {low}, got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")


@dataclasses.dataclass(frozen=True)
class GameOptions:
    """Everything that defines a `Game`, validated when built: the one place the defaults live.

    Build it with `GameOptions.from_kwargs`, which also names the valid options when one is misspelt.
    The defaults reproduce the labml PPO tutorial's environment exactly.

    Attributes:
        game: any game bundled with ale-py, in any usual spelling (see `resolve_game`); stored as the
            ROM id, e.g. ``"ms_pacman"``.
        seed: seeds the emulator and the NOOP-start draws exactly as ale-py's ``AtariEnv.reset(seed=...)``
            does, so a `Game` and ``gym.make("ALE/<game>-v5")`` given the same seed match. ``None`` draws
            fresh entropy.
        frame_skip: emulator frames per agent step; the action is repeated and rewards are summed.
        stack: how many processed frames an observation holds.
        size: the processed frame's size, ``84`` for 84x84 or ``(height, width)``.
        channels_last: observations are ``(h, w, stack)`` instead of ``(stack, h, w)``.
        life_loss: what losing a life does.
            ``"reset"`` (the tutorial): ``done=True`` and the game restarts from scratch, so an episode is
            one life. ``"terminal"`` (DeepMind): ``done=True`` but the game continues with the remaining
            lives; the game restarts only after game over. ``"ignore"``: nothing; an episode is a game.
            Game over and truncation always end the episode.
        noop_max: after a game restart, do a random number of 1..noop_max NOOP frames (0: none), so that
            episodes do not all start from the same state.
        fire_reset: press FIRE for one agent step after a game restart (and after a life loss in
            ``"terminal"`` mode), for games such as Breakout that wait for it.
        clip_rewards: `Game.step` returns the reward's sign (-1, 0 or 1); the episode statistics always
            hold the unclipped sum.
        sticky_actions: ALE's ``repeat_action_probability``: each emulator frame repeats the previous
            action with this probability (Machado et al. 2018 recommend 0.25).
        max_episode_frames: emulator frames after which a game is truncated (108,000 frames = 30 minutes);
            the step that reaches it ends the episode. ``None``: no limit.
        full_action_space: use all 18 joystick actions instead of the game's minimal set.
    """

    game: str = "Breakout"
    seed: int | None = 0
    frame_skip: int = 4
    stack: int = 4
    size: int | tuple[int, int] = 84
    channels_last: bool = False
    life_loss: str = "reset"
    noop_max: int = 0
    fire_reset: bool = False
    clip_rewards: bool = False
    sticky_actions: float = 0.0
    max_episode_frames: int | None = 108_000
    full_action_space: bool = False

    @classmethod
    def from_kwargs(cls, **options: Any) -> GameOptions:
        """Validated options from keyword arguments; an unknown name raises `TypeError` listing the valid ones."""
        valid = [field.name for field in dataclasses.fields(cls)]
        for name in options:
            if name not in valid:
                close = difflib.get_close_matches(name, valid, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise TypeError(f"unknown game option {name!r}{hint}; valid options: {', '.join(valid)}")
        return cls(**options)

    def __post_init__(self) -> None:
        # The dataclass is frozen; normalised values are written once, here.
        normalise = functools.partial(object.__setattr__, self)
        normalise("game", resolve_game(self.game))
        if self.seed is not None:
            _check_int("seed", self.seed, low=0)
        _check_int("frame_skip", self.frame_skip, low=1)
        _check_int("stack", self.stack, low=1)
        size = (self.size, self.size) if not isinstance(self.size, (tuple, list)) else tuple(self.size)
        if len(size) != 2:
            raise ValueError(f"size must be an integer or a (height, width) pair, got {self.size!r}")
        for side in size:
            _check_int("size", side, low=1)
        normalise("size", (int(size[0]), int(size[1])))
        for name in ("channels_last", "fire_reset", "clip_rewards", "full_action_space"):
            _check_bool(name, getattr(self, name))
        if self.life_loss not in LIFE_LOSS_MODES:
            raise ValueError(f"life_loss must be one of {LIFE_LOSS_MODES}, got {self.life_loss!r}")
        _check_int("noop_max", self.noop_max, low=0)
        if isinstance(self.sticky_actions, bool) or not isinstance(self.sticky_actions, (int, float)):
            raise TypeError(f"sticky_actions must be a probability in [0, 1], got {self.sticky_actions!r}")
        if not 0.0 <= self.sticky_actions <= 1.0:  # also refuses NaN
            raise ValueError(f"sticky_actions must be a probability in [0, 1], got {self.sticky_actions}")
        if self.max_episode_frames is not None:
            _check_int("max_episode_frames", self.max_episode_frames, low=1)
        if self.fire_reset and "FIRE" not in action_meanings(self.game):
            raise ValueError(
                f"fire_reset: {_display_name(self.game)} has no FIRE action "
                f"(its actions: {', '.join(action_meanings(self.game))}); use fire_reset=False"
            )

    @property
    def observation_shape(self) -> tuple[int, int, int]:
        """The shape of an observation: ``(stack, h, w)``, or ``(h, w, stack)`` with `channels_last`."""
        height, width = self.size
        return (height, width, self.stack) if self.channels_last else (self.stack, height, width)


class Game:
    """One Atari game; `step` does all the preprocessing (see the module docstring).

    ``Game(game="Breakout", seed=0, **options)`` takes the keyword options of `GameOptions`.

    * ``reset() -> obs`` restarts the game from scratch; call it before the first `step`.
    * ``step(action) -> (obs, reward, done, episode_info)``:
      ``obs`` is ``uint8`` of shape ``(stack, 84, 84)`` (oldest frame first), a fresh array the Game never
      touches again. ``reward`` is the float sum over the repeated frames (its sign with `clip_rewards`).
      ``done`` is True on the step that ends the episode: a life lost (unless ``life_loss="ignore"``),
      game over, or truncation at `max_episode_frames`. The Game then starts the next episode itself, so
      on a done step ``obs`` is already the next episode's first observation, all `stack` slots holding
      its first frame. ``episode_info`` is None except on a done step, where it is
      ``{"reward": unclipped episode return, "length": agent steps, "truncated": bool}``; when
      ``life_loss`` is not ``"reset"`` and the whole game ended, it also holds ``"game_reward"`` and
      ``"game_length"`` (the full game across lives: the number papers report).
    * ``play(action, out) -> (reward, done, episode_info)`` is `step` for pools: no action check (they
      check a whole batch at once), and the observation written into `out` instead of a fresh array.

    After a done step, ``final_observation`` holds the last observation of the episode that ended (what
    Gymnasium's vector envs report as the final observation): its newest frame is the screen the episode
    ended on, max-pooled with the frame before it when that was the step's second-to-last frame.

    Rewards earned during NOOP and FIRE starts are not counted: the agent did not choose those actions.
    """

    def __init__(self, game: str = "Breakout", seed: int | None = 0, **options: Any) -> None:
        # Validate everything before building the emulator, so a bad option costs nothing.
        self.options = opts = GameOptions.from_kwargs(game=game, seed=seed, **options)
        self.name = _display_name(opts.game)
        self.observation_shape = opts.observation_shape

        self.ale = ale_py.ALEInterface()
        self.ale.setFloat("repeat_action_probability", float(opts.sticky_actions))
        self.ale.setInt("max_num_frames_per_episode", opts.max_episode_frames or 0)
        self._seed(opts.seed)
        self._actions = self.ale.getLegalActionSet() if opts.full_action_space else self.ale.getMinimalActionSet()
        self.action_meanings = tuple(action.name for action in self._actions)
        self.n_actions = len(self._actions)

        # Buffers reused every step: the last two grayscale screens, their max, and the frame stack.
        height, width = self.ale.getScreenDims()
        self._screens = np.zeros((2, height, width), dtype=np.uint8)
        self._pooled = np.zeros((height, width), dtype=np.uint8)
        self._stack = np.zeros((opts.stack, *opts.size), dtype=np.uint8)
        self._dsize = (opts.size[1], opts.size[0])  # cv2 wants (width, height)
        # As in Gymnasium, the first reset() starts the first game (and makes the first seeded NOOP draw).
        self.lives = 0
        self._started = False
        self.final_observation: np.ndarray | None = None

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Restart the game from scratch (in every `life_loss` mode) and return the first observation.

        With a `seed`, first re-seed the game exactly as a new ``Game(seed=seed)`` would be.
        """
        if seed is not None:
            _check_int("seed", seed, low=0)
            self._seed(seed)
        self._restart_game()
        return self._observation()

    def _seed(self, seed: int | None) -> None:
        # Seed as ale-py's AtariEnv does: one SeedSequence gives the emulator's seed and the NOOP-start
        # generator; the ROM is (re)loaded after, as the emulator takes its seed when a ROM loads.
        numpy_seed, ale_seed = np.random.SeedSequence(seed).generate_state(n_words=2)
        self._rng = np.random.default_rng(int(numpy_seed))
        self.ale.setInt("random_seed", int(ale_seed.astype(np.int32)))
        self.ale.loadROM(roms.get_rom_path(self.options.game))

    def step(self, action: int) -> tuple[np.ndarray, float, bool, dict[str, Any] | None]:
        """Play one agent step; see the class docstring for what is returned."""
        reward, done, episode_info = self.play(self._check_action(action))
        return self._observation(), reward, done, episode_info

    def play(self, action: int, out: np.ndarray | None = None) -> tuple[float, bool, dict[str, Any] | None]:
        """`step` for a pool that checked a whole batch of actions at once: `action` must already be a valid
        action index (an int in ``[0, n_actions)``, not checked here), and the observation is written into
        `out` (``uint8``, `observation_shape`) if given instead of into a fresh array.

        Returns ``(reward, done, episode_info)`` as `step` does.
        """
        if not self._started:
            raise RuntimeError(f"{self!r}: call reset() before the first step()")
        ale_action = self._actions[action]
        frame_skip, stop_on_life_loss = self.options.frame_skip, self.options.life_loss != "ignore"

        # Repeat the action, summing rewards; stop at once when the episode ends mid-step.
        reward = 0.0
        for frame in range(frame_skip):
            reward += self.ale.act(ale_action)
            done = self.ale.game_over() or (stop_on_life_loss and self.ale.lives() < self.lives)
            # Read the screens the observation is made of: the last two frames, or the one the episode ended on.
            if done or frame >= frame_skip - 2:
                self.ale.getScreenGrayscale(self._screens[0 if done else frame_skip - 1 - frame])
            if done:
                break

        # Max-pool the last two frames (only the final one if the episode ended earlier), shift the stack one
        # frame older and resize into its newest slot.
        if frame == frame_skip - 1 and frame_skip > 1:
            pooled = np.maximum(self._screens[0], self._screens[1], out=self._pooled)
        else:
            pooled = self._screens[0]
        self._stack[:-1] = self._stack[1:]
        cv2.resize(pooled, self._dsize, dst=self._stack[-1], interpolation=cv2.INTER_AREA)

        # Keep the statistics unclipped: they are what is reported, whatever the agent is trained on.
        self._episode_reward += reward
        self._episode_length += 1
        self._game_reward += reward
        self._game_length += 1
        self.lives = self.ale.lives()
        episode_info = None
        if done:
            self.final_observation = self._observation()
            episode_info = self._end_episode()
        if self.options.clip_rewards:
            reward = float(np.sign(reward))
        if out is not None:
            self._observation(out)
        return reward, done, episode_info

    def _end_episode(self) -> dict[str, Any]:
        """Report the episode that just ended and start the next one, restarting the game if it is over."""
        game_over = self.ale.game_over()
        info = {
            "reward": self._episode_reward,
            "length": self._episode_length,
            "truncated": self.ale.game_truncated() and not self.ale.game_over(with_truncation=False),
        }
        if game_over and self.options.life_loss != "reset":
            info.update(game_reward=self._game_reward, game_length=self._game_length)
        if game_over or self.options.life_loss == "reset":
            self._restart_game()
        else:
            # "terminal" mode: the game goes on with the lives it has left.
            self._start_episode()
        return info

    def _restart_game(self) -> None:
        self._started = True
        self.ale.reset_game()
        # NOOP start, drawn from the seeded generator exactly as Gymnasium's AtariPreprocessing draws it.
        if self.options.noop_max > 0:
            for _ in range(self._rng.integers(1, self.options.noop_max + 1)):
                self.ale.act(ale_py.Action.NOOP)
                if self.ale.game_over():
                    self.ale.reset_game()
        self._game_reward, self._game_length = 0.0, 0
        self._start_episode()

    def _start_episode(self) -> None:
        if self.options.fire_reset:
            for _ in range(self.options.frame_skip):
                self.ale.act(ale_py.Action.FIRE)
            if self.ale.game_over():  # vanishingly rare, but a finished game cannot start an episode
                return self._restart_game()
        # Every stack slot starts as the current screen (nothing older belongs to this episode).
        self.lives = self.ale.lives()
        self.ale.getScreenGrayscale(self._screens[0])
        self._stack[:] = cv2.resize(self._screens[0], self._dsize, interpolation=cv2.INTER_AREA)
        self._episode_reward, self._episode_length = 0.0, 0

    def _observation(self, out: np.ndarray | None = None) -> np.ndarray:
        # A copy (a fresh array, or `out` overwritten), so the caller's array never changes under it when the
        # Game steps again.
        stack = self._stack.transpose(1, 2, 0) if self.options.channels_last else self._stack
        if out is None:
            return stack.copy()  # C order, also for the channels-last view
        out[...] = stack
        return out

    def _check_action(self, action: Any) -> int:
        # Validate before acting, so a bad action leaves the game exactly as it was; the messages are built
        # only for a bad action, as this runs every step.
        if isinstance(action, (bool, np.bool_)):
            raise TypeError(f"action must be {self._valid_actions()}, got the bool {action!r}")
        try:
            index = operator.index(action)
        except TypeError:
            shape = f" of shape {np.shape(action)}" if isinstance(action, np.ndarray) else ""
            got = f"{type(action).__name__}{shape} {action!r}"
            raise TypeError(f"action must be {self._valid_actions()}, got {got}") from None
        if not 0 <= index < self.n_actions:
            raise ValueError(f"action must be {self._valid_actions()}, got {index}")
        return index

    def _valid_actions(self) -> str:
        return f"an integer in [0, {self.n_actions}) for {self.name} ({', '.join(self.action_meanings)})"

    def __repr__(self) -> str:
        return f"Game({self.name!r}, seed={self.options.seed})"
