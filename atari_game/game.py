"""One Atari 2600 game with all the standard preprocessing done inside `Game.step`.

This is the labml PPO tutorial's `Game`, rebuilt on `ale_py.ALEInterface`; the One game guide lists what `step` does.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import operator
import re
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import ale_py
import cv2
import numpy as np
from ale_py import roms

from atari_game.protocols import get_protocol, protocol_conflict
from atari_game.validation import check_bool, check_choice, check_int, check_number

# ALE prints a banner for every emulator it builds unless told, before the first one, to log errors only.
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)

# ROMs without a single-player mode (loading one exits the process); ale-py registers no environment for them.
_MULTIPLAYER_ONLY = frozenset({"combat", "joust", "maze_craze", "warlords"})

#: The values of `GameOptions.life_loss`: what losing a life does to the episode.
LIFE_LOSS_MODES = ("reset", "terminal", "ignore")
#: The values of `GameOptions.obs_type`: what an observation is made of.
OBS_TYPES = ("grayscale", "rgb", "ram")

# The console's RAM, in bytes: what an observation of obs_type "ram" holds per frame.
RAM_SIZE = 128
# The ALEInterface method that reads a frame of each obs_type (screen or RAM) into a buffer.
_GRABS = {"grayscale": "getScreenGrayscale", "rgb": "getScreenRGB", "ram": "getRAM"}

# The bounds of a continuous action (radius, angle in radians, fire pressure), float32 as in ale-py.
CONTINUOUS_ACTION_LOW = np.array([0.0, -np.pi, 0.0], dtype=np.float32)
CONTINUOUS_ACTION_HIGH = np.array([1.0, np.pi, 1.0], dtype=np.float32)
CONTINUOUS_ACTION_LOW.flags.writeable = CONTINUOUS_ACTION_HIGH.flags.writeable = False

#: Games whose every restart (ALE's reset_game, in the default mode and difficulty, without sticky actions) reaches
#: one emulator state, whatever came before: a Game saves it at its first restart and restores it at the next (see the
#: Design page). Found by benchmarks/restart_states.py; run it again with each ale-py release.
FIXED_RESTART_GAMES = frozenset(
    {
        "air_raid", "asterix", "atlantis", "basic_math", "battle_zone", "blackjack", "bowling", "breakout",
        "carnival", "casino", "centipede", "darkchambers", "defender", "donkey_kong", "double_dunk", "et",
        "flag_capture", "frogger", "gopher", "jamesbond", "journey_escape", "keystone_kapers", "king_kong", "klax",
        "lost_luggage", "mr_do", "ms_pacman", "name_this_game", "othello", "pacman", "pong", "road_runner",
        "robotank", "skiing", "space_invaders", "turmoil", "video_checkers", "video_chess", "video_pinball",
        "wizard_of_wor", "word_zapper",
    }
)  # fmt: skip
#: The ale-py releases `FIXED_RESTART_GAMES` was checked on; under others a Game emulates every restart (Design page).
FIXED_RESTART_CHECKED_ON = ("0.12.1",)


@functools.cache  # once a process
def _warn_unchecked_release() -> None:
    warnings.warn(
        f"ale-py {ale_py.__version__} is not a release that atari_game's restored restarts (FIXED_RESTART_GAMES) "
        f"were checked on ({', '.join(FIXED_RESTART_CHECKED_ON)}), so every restart is emulated by ALE's reset_game: "
        "the same play, ~4 ms a restart instead of ~20 µs. To check this release, run "
        "`python benchmarks/restart_states.py` in atari_game's repository, then add the release to "
        "FIXED_RESTART_CHECKED_ON in atari_game/game.py (and keep in FIXED_RESTART_GAMES only the games it prints).",
        RuntimeWarning,
        stacklevel=3,  # where the Game is made
    )


@functools.cache
def _roms_by_key() -> dict[str, str]:
    # Each single-player ROM id by its spelling without underscores, built once: reports resolve names in loops.
    return {rom.replace("_", ""): rom for rom in roms.get_all_rom_ids() if rom not in _MULTIPLAYER_ONLY}


def rom_path(rom: str) -> Path:
    """The file of a bundled ROM, by ROM id (``"breakout"``)."""
    path = roms.get_rom_path(rom)
    if path is None:  # a ROM id from `resolve_game` that ale-py cannot find: its install is broken
        raise FileNotFoundError(f"ale-py has no ROM {rom!r}: reinstall ale-py")
    return path


def display_name(rom: str) -> str:
    """A ROM id's name as Gymnasium's id "ALE/<name>-v5" spells it: ``"ms_pacman"`` -> ``"MsPacman"``."""
    return rom.title().replace("_", "")


def list_games() -> list[str]:
    """The names of all games bundled with ale-py, sorted: ``["Adventure", ..., "Breakout", ...]``."""
    return sorted(display_name(rom) for rom in _roms_by_key().values())


# Papers' names whose letters are not the ROM id's: "Montezuma's Revenge", "Pitfall II".
_PAPER_NAMES = {"montezumasrevenge": "montezumarevenge", "pitfallii": "pitfall2"}


def resolve_game(name: str) -> str:
    """The ale-py ROM id of a game, from any usual spelling of its name.

    ``"Breakout"``, ``"breakout"``, ``"BreakoutNoFrameskip-v4"`` and ``"ALE/Breakout-v5"`` all give ``"breakout"``;
    ``"MsPacman"``, ``"ms_pacman"`` and a paper's ``"Ms. Pac-Man"`` give ``"ms_pacman"`` (``"Q*bert"``,
    ``"Montezuma's Revenge"``, ``"Up'n Down"``, ``"H.E.R.O."`` too). An unknown name raises `ValueError` naming the
    closest.
    """
    if not isinstance(name, str):
        raise TypeError(f"game must be a string such as 'Breakout', got {type(name).__name__} {name!r}")
    # Strip the Gymnasium id around the name, then compare letters and digits only: papers' tables write
    # "Battle Zone", "Q*bert" and "H.E.R.O."; two of their names are not the ROM's in any spelling.
    bare = re.sub(r"^ALE/|(NoFrameskip|Deterministic)?-v\d+$", "", name.strip())
    key = re.sub(r"[^0-9a-z]", "", bare.lower())
    key = _PAPER_NAMES.get(key, key)
    by_key = _roms_by_key()
    if key in by_key:
        return by_key[key]
    closest = [display_name(by_key[k]) for k in difflib.get_close_matches(key, by_key, n=3, cutoff=0.5)]
    hint = f"closest: {', '.join(closest)}" if closest else "no close match"
    raise ValueError(f"game: unknown game {name!r} ({hint}); atari_game.list_games() lists all {len(by_key)}")


class _RomFacts(NamedTuple):
    minimal_actions: tuple[str, ...]
    legal_actions: tuple[str, ...]
    modes: tuple[int, ...]
    difficulties: tuple[int, ...]
    screen: tuple[int, int]  # (height, width): 210-250 rows, by ROM


@functools.cache
def _rom_facts(rom: str) -> _RomFacts:
    # Loading a ROM takes ~0.1 s: validating options reads what they need from here, once per game.
    ale = ale_py.ALEInterface()
    ale.loadROM(rom_path(rom))
    return _RomFacts(
        minimal_actions=tuple(action.name for action in ale.getMinimalActionSet()),
        legal_actions=tuple(action.name for action in ale.getLegalActionSet()),
        modes=tuple(int(mode) for mode in ale.getAvailableModes()),
        difficulties=tuple(int(difficulty) for difficulty in ale.getAvailableDifficulties()),
        screen=tuple(ale.getScreenDims()),
    )


def action_meanings(game: str, full_action_space: bool = False) -> tuple[str, ...]:
    """The names of a game's actions in index order, e.g. ``("NOOP", "FIRE", "RIGHT", "LEFT")``."""
    facts = _rom_facts(resolve_game(game))
    return facts.legal_actions if full_action_space else facts.minimal_actions


def game_modes(game: str) -> tuple[int, ...]:
    """The game's modes (ALE's ``getAvailableModes``), valid for `mode`: Breakout's ``(0, 4, 8, ..., 44)``."""
    return _rom_facts(resolve_game(game)).modes


def game_difficulties(game: str) -> tuple[int, ...]:
    """The game's difficulties (ALE's ``getAvailableDifficulties``), valid for `difficulty`: Breakout's ``(0, 1)``."""
    return _rom_facts(resolve_game(game)).difficulties


def check_continuous_actions(actions: Any, shape: tuple[int, ...], name: str = "action") -> np.ndarray:
    """Continuous `actions` as a float32 array of `shape` (``(3,)``, or ``(n, 3)`` for a pool), each row a
    ``(radius, angle, fire)`` within `CONTINUOUS_ACTION_LOW` and `CONTINUOUS_ACTION_HIGH`.

    Anything else raises `TypeError` (not real numbers) or `ValueError` (shape, NaN or infinity, out of
    bounds) naming `name`, the valid range and the offending entry.
    """
    valid = f"{name} must be (radius in [0, 1], angle in [-pi, pi], fire in [0, 1]) as floats of shape {shape}"
    try:
        array = np.asarray(actions)
    except ValueError:  # ragged nesting
        raise TypeError(f"{valid}, got {actions!r}") from None
    if array.dtype.kind not in "fiu":
        raise TypeError(f"{valid}, got dtype {array.dtype}: {actions!r}")
    if array.shape != shape:
        raise ValueError(f"{valid}, got shape {array.shape}")
    # ale-py computes the joystick from float32 values: so do we, with the same values.
    floats = array.astype(np.float32)
    bad = ~np.isfinite(floats) | (floats < CONTINUOUS_ACTION_LOW) | (floats > CONTINUOUS_ACTION_HIGH)
    if bad.any():
        entry = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{valid}, got {array[entry].item()} at index {entry}")
    return floats


# Options as Gymnasium's AtariPreprocessing, ale-py and EnvPool name them, and what to write here instead.
FOREIGN_OPTIONS = {
    "repeat_action_probability": "sticky_actions (the same probability, e.g. sticky_actions=0.25)",
    "frameskip": "frame_skip (emulator frames per agent step)",
    "screen_size": "size (an int, or (height, width): Gymnasium's screen_size tuple is (width, height))",
    **dict.fromkeys(("img_height", "img_width"), "size=(height, width)"),
    **dict.fromkeys(("grayscale_obs", "grayscale", "gray_scale"), 'obs_type="grayscale" (the default) or "rgb"'),
    **dict.fromkeys(
        ("terminal_on_life_loss", "episodic_life", "zero_discount_on_life_loss"),
        'life_loss="terminal" (a lost life ends the episode, the game goes on)',
    ),
    **dict.fromkeys(("stack_num", "num_stack", "stack_size", "frame_stack"), "stack (frames per observation)"),
    "max_episode_steps": "max_episode_frames=frame_skip * steps (it counts emulator frames, not agent steps)",
    "max_num_frames_per_episode": "max_episode_frames (emulator frames, as ale-py's)",
    **dict.fromkeys(("reward_clip", "reward_clipping"), "clip_rewards=True"),
    "use_fire_reset": "fire_reset=True",
}


@dataclasses.dataclass(frozen=True)
class GameOptions:
    """Everything that defines a `Game`, validated when built: the one place the defaults live.

    Build it with `GameOptions.from_kwargs`, which also names the valid options when one is misspelt. The defaults
    reproduce the labml PPO tutorial's environment exactly.

    Attributes:
        game: any game bundled with ale-py, in any spelling `resolve_game` takes, stored as its ROM id: ``"ms_pacman"``.
        seed: seeds the emulator and the NOOP-start draws exactly as ale-py's ``AtariEnv.reset(seed=...)`` does, so a
            `Game` and ``gym.make("ALE/<game>-v5")`` given the same seed match. ``None`` draws fresh entropy.
        frame_skip: emulator frames per agent step; the action is repeated and rewards are summed.
        stack: how many processed frames an observation holds.
        size: the processed frame's size, ``84`` for 84x84 or ``(height, width)``.
        channels_last: observations are ``(h, w, stack)`` instead of ``(stack, h, w)``.
        life_loss: what losing a life does: ``"reset"`` (the tutorial's) ends the episode and restarts the game,
            ``"terminal"`` (DeepMind's) ends it and the game goes on, ``"ignore"`` nothing (the Concepts page).
        noop_max: after a game restart, 1 to noop_max NOOP frames drawn at random, so episodes start apart (0: none).
        fire_reset: press FIRE for one agent step after a game restart (and a life lost in ``"terminal"`` mode), for
            games such as Breakout that wait for it.
        clip_rewards: `Game.step` returns the reward's sign (-1, 0 or 1); the episode statistics keep the unclipped sum.
        sticky_actions: ALE's ``repeat_action_probability``: each emulator frame repeats the previous action with
            this probability (Machado et al. 2018 recommend 0.25).
        max_episode_frames: emulator frames after which a game is truncated (108,000 frames = 30 minutes); the step
            that reaches it ends the episode. ``None``: no limit.
        full_action_space: use all 18 joystick actions instead of the game's minimal set.
        obs_type: ``"grayscale"``: ALE's grayscale screen. ``"rgb"``: its colour screen, max-pooled and resized per
            channel exactly as Gymnasium's ``AtariPreprocessing(grayscale_obs=False)``. ``"ram"``: the console's 128
            bytes of RAM after the step's last emulated frame, neither max-pooled nor resized.
        scale_obs: float32 observations in [0, 1], the uint8 values / 255 in float32 (as Gymnasium's ``scale_obs``).
        mode, difficulty: ALE's game mode and difficulty (Machado et al. 2018's "flavours"): one of `game_modes` /
            `game_difficulties` of the game, or ``None`` for the ROM's default.
        continuous: ALE's continuous actions, as ale-py's ``continuous=True``: an action is ``(radius, angle, fire)``
            (float32, bounds `CONTINUOUS_ACTION_LOW` / `CONTINUOUS_ACTION_HIGH`), played as one of all 18 actions with
            ``radius`` the paddle strength (the Concepts page says which).
        continuous_action_threshold: where a continuous action presses a direction or fire, in [0, 1]; only valid
            with ``continuous=True``.
        random_starts: after a game restart's NOOP start, 0 to random_starts (uniformly) uniformly random agent
            actions of `frame_skip` frames each (from the Game's seeded generator; with ``continuous``, uniform over
            the action bounds), not counted in the episode; a game that ends during them restarts.
        protocol: the name of a training protocol of `atari_game.protocols` (``"machado"``, ``"nature"``), or
            ``None``. `from_kwargs` fills in the options it fixes; one given with another value is refused with the
            paper's reason. Recorded here so that a pool, a run's config and a checkpoint say which it was.
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
    obs_type: str = "grayscale"
    scale_obs: bool = False
    mode: int | None = None
    difficulty: int | None = None
    continuous: bool = False
    continuous_action_threshold: float = 0.5
    random_starts: int = 0
    protocol: str | None = None

    @classmethod
    def from_kwargs(cls, **options: Any) -> GameOptions:
        """Validated options from keyword arguments; an unknown name raises `TypeError` listing the valid ones, and
        saying what to write instead for the names of `FOREIGN_OPTIONS` (``repeat_action_probability``, ...)."""
        valid = [field.name for field in dataclasses.fields(cls)]
        for name in options:
            if name not in valid:
                if name in FOREIGN_OPTIONS:
                    hint = f": use {FOREIGN_OPTIONS[name]}"
                elif close := difflib.get_close_matches(name, valid, n=1):
                    hint = f" (did you mean {close[0]!r}?)"
                else:
                    hint = ""
                raise TypeError(f"unknown game option {name!r}{hint}; valid options: {', '.join(valid)}")
        # A protocol's settings, where the caller did not give them (__post_init__ refuses one given otherwise).
        if options.get("protocol") is not None:
            options = {**get_protocol(options["protocol"]).train, **options}
        return cls(**options)

    def __post_init__(self) -> None:
        # The dataclass is frozen; normalised values are written once, here.
        normalise = functools.partial(object.__setattr__, self)
        normalise("game", resolve_game(self.game))
        if self.seed is not None:
            check_int("seed", self.seed, low=0)
        check_int("frame_skip", self.frame_skip, low=1)
        check_int("stack", self.stack, low=1)
        size = (self.size, self.size) if not isinstance(self.size, (tuple, list)) else tuple(self.size)
        if len(size) != 2:
            raise ValueError(f"size must be an integer or a (height, width) pair, got {self.size!r}")
        normalise("size", tuple(check_int("size", side, low=1) for side in size))
        for name in ("channels_last", "fire_reset", "clip_rewards", "full_action_space", "scale_obs", "continuous"):
            check_bool(name, getattr(self, name))
        check_choice("life_loss", self.life_loss, LIFE_LOSS_MODES)
        check_int("noop_max", self.noop_max, low=0)
        check_int("random_starts", self.random_starts, low=0)
        check_number("sticky_actions", self.sticky_actions, 0, 1, "a probability")
        if self.max_episode_frames is not None:
            check_int("max_episode_frames", self.max_episode_frames, low=1)
        check_choice("obs_type", self.obs_type, OBS_TYPES)
        check_number("continuous_action_threshold", self.continuous_action_threshold, 0, 1)
        if not self.continuous and self.continuous_action_threshold != 0.5:
            raise ValueError(
                f"continuous_action_threshold={self.continuous_action_threshold} needs continuous=True "
                "(discrete actions have no threshold)"
            )
        normalise("continuous_action_threshold", float(self.continuous_action_threshold))
        if self.protocol is not None and (problem := protocol_conflict(self.protocol, dataclasses.asdict(self))):
            raise ValueError(problem)
        # Mode and difficulty: the ROM says which exist (read once per game).
        facts = _rom_facts(self.game)
        for name, plural, valid in (("mode", "modes", facts.modes), ("difficulty", "difficulties", facts.difficulties)):
            value = getattr(self, name)
            choices = f"{display_name(self.game)}'s {plural} are {', '.join(map(str, valid))}, or None for the default"
            if value is None:
                continue
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name} must be an integer or None ({choices}), got {type(value).__name__} {value!r}")
            if value not in valid:
                raise ValueError(f"{name}: {value} is not a {name} of {display_name(self.game)} ({choices})")
            normalise(name, int(value))
        if self.fire_reset and "FIRE" not in facts.minimal_actions:
            raise ValueError(
                f"fire_reset: {display_name(self.game)} has no FIRE action "
                f"(its actions: {', '.join(facts.minimal_actions)}); use fire_reset=False"
            )

    @property
    def frame_size(self) -> tuple[int, int]:
        """`size` as it always is once built: ``(height, width)`` of a processed frame (an integer is a square)."""
        assert isinstance(self.size, tuple), "__post_init__ makes size a pair"
        return self.size

    @property
    def observation_shape(self) -> tuple[int, ...]:
        """The shape of an observation, oldest frame first along the stacked axis (`stack` frames of `size`):

        * ``"grayscale"``: ``(stack, h, w)``; with `channels_last` ``(h, w, stack)``.
        * ``"rgb"``: ``(stack * 3, h, w)``, frame ``i``'s red, green and blue at channels ``3i, 3i+1, 3i+2``;
          with `channels_last` ``(h, w, stack * 3)``: colour frames stacked as the channels of one image.
        * ``"ram"``: ``(stack, 128)``; with `channels_last` ``(128, stack)``.
        """
        if self.obs_type == "ram":
            return (RAM_SIZE, self.stack) if self.channels_last else (self.stack, RAM_SIZE)
        height, width = self.frame_size
        channels = self.stack * 3 if self.obs_type == "rgb" else self.stack
        return (height, width, channels) if self.channels_last else (channels, height, width)

    @property
    def screen_shape(self) -> tuple[int, ...]:
        """The shape of what a Game reads from the emulator each frame: the game's screen, ``(height, 160)``
        grayscale (210 rows in most games, up to 250) or ``(height, 160, 3)`` rgb, or the ``(128,)`` bytes of RAM."""
        height, width = _rom_facts(self.game).screen
        return {"grayscale": (height, width), "rgb": (height, width, 3), "ram": (RAM_SIZE,)}[self.obs_type]

    @property
    def stack_shape(self) -> tuple[int, ...]:
        """The frame stack's shape, oldest first: ``(stack, h, w)``, ``(stack, h, w, 3)`` rgb, ``(stack, 128)`` ram."""
        frame = {"grayscale": self.frame_size, "rgb": (*self.frame_size, 3), "ram": (RAM_SIZE,)}[self.obs_type]
        return (self.stack, *frame)

    @property
    def observation_dtype(self) -> np.dtype:
        """``float32`` with `scale_obs`, else ``uint8``."""
        return np.dtype(np.float32 if self.scale_obs else np.uint8)

    @property
    def observation_high(self) -> float:
        """The largest observation value: 1.0 with `scale_obs`, else 255 (the smallest is 0)."""
        return 1.0 if self.scale_obs else 255

    @property
    def action_meanings(self) -> tuple[str, ...]:
        """The ALE actions an action is (discrete) or maps onto (`continuous`: all 18, as in ale-py)."""
        return action_meanings(self.game, self.full_action_space or self.continuous)

    @property
    def n_actions(self) -> int | None:
        """How many discrete actions there are; None with `continuous` (see `check_continuous_actions`)."""
        return None if self.continuous else len(self.action_meanings)


class GameState(NamedTuple):
    """Everything `Game.play` reads and writes, from `Game.get_state`: a saved game, to continue later in this `Game`
    or in another of the same options (`Game.set_state`), whose next plays give exactly what this Game's would have.

    Not in it: the NOOP-start generator (a game restart draws from it: restart in the Game the state came from, or
    ``set_state`` it back there first), and ALE's last action under sticky actions, which ALE does not export (so a
    restored game is exact only with ``sticky_actions=0``). ALE's own saved state (ale-py 0.12.1) misses a detail of
    a few games, whose restored plays may differ by a few pixels: Q*bert and Tetris (the TIA's partial-frame flag, ALE
    #732), Pitfall II (the DPC chip's fractional clocks), Miniature Golf, Tic-Tac-Toe 3D and Yars' Revenge.

    Attributes:
        ale: the emulator's state, ALE's ``cloneState(include_rng=True)`` serialized (about 15 KB).
        stack: the processed frames, ``(stack, *frame)`` uint8, oldest first.
        screen: the last screen (or RAM) read, which the next episode starts from in "terminal" mode (ALE's has none).
        lives, episode_reward, episode_length, game_reward, game_length: the Game's counters.
        next_episode_due: the last play ended an episode with ``start_next=False``.
    """

    ale: bytes
    stack: np.ndarray
    screen: np.ndarray
    lives: int
    episode_reward: float
    episode_length: int
    game_reward: float
    game_length: int
    next_episode_due: bool


class Game:
    """One Atari game; `step` does all the preprocessing (the One game guide lists it).

    ``Game(game="Breakout", seed=0, **options)`` takes the keyword options of `GameOptions`; ``Game(47)``, the
    tutorial's ``Game(seed)``, is ``Game("Breakout", seed=47)``. Call `reset` before the first `step`.

    ``step(action) -> (obs, reward, done, episode_info)``: ``obs`` is ``uint8`` of shape ``(stack, 84, 84)`` (oldest
    frame first; in general `GameOptions.observation_shape` and ``observation_dtype``), a fresh array the Game never
    touches again. ``action`` is an integer in ``[0, n_actions)``, or with ``continuous=True`` a
    ``(radius, angle, fire)`` triple (see `check_continuous_actions`). ``reward`` is the float sum over the repeated
    frames (its sign with `clip_rewards`; rewards of the NOOP, random and FIRE starts are not counted). ``done`` is True
    on the step that ends the episode: a life lost (unless ``life_loss="ignore"``), game over, or truncation at
    `max_episode_frames`. The Game then starts the next episode itself, so on a done step ``obs`` is already the next
    episode's first observation, all `stack` slots holding its first frame. ``episode_info`` is None except on a done
    step, where it is ``{"reward": unclipped episode return, "length": agent steps, "truncated": bool}``; when
    ``life_loss`` is not ``"reset"`` and the whole game ended, it also holds ``"game_reward"`` and ``"game_length"``
    (the full game across lives: the number papers report).

    After a done step, ``final_observation`` holds the last observation of the episode that ended: its newest frame is
    the screen the episode ended on, max-pooled with the frame before it when that was the step's second-to-last one.
    """

    def __init__(self, game: str | int = "Breakout", seed: int | None = 0, **options: Any) -> None:
        # The tutorial's Game(seed): a lone integer is the seed of the default game (a bool is no seed).
        if isinstance(game, (int, np.integer)) and not isinstance(game, bool) and seed == 0:
            seed, game = int(game), GameOptions.game
        # Validate everything before building the emulator, so a bad option costs nothing.
        self.options = opts = GameOptions.from_kwargs(game=game, seed=seed, **options)
        self.name = display_name(opts.game)
        self.observation_shape = opts.observation_shape

        self.ale = ale_py.ALEInterface()
        self.ale.setFloat("repeat_action_probability", float(opts.sticky_actions))
        self.ale.setInt("max_num_frames_per_episode", opts.max_episode_frames or 0)
        # A restart restores the state every restart reaches, once saved, where that was checked (Design page).
        self._restores_restarts = (
            opts.game in FIXED_RESTART_GAMES
            and opts.sticky_actions == 0
            and opts.mode is None
            and opts.difficulty is None
        )
        if self._restores_restarts and ale_py.__version__ not in FIXED_RESTART_CHECKED_ON:
            _warn_unchecked_release()
            self._restores_restarts = False
        # What the first restart after a ROM load saves (`_seed` clears it): ALE's state, and as that holds no screen,
        # the screen (or RAM) and colour screen ALE shows until a frame is emulated, and its episode frame count then.
        self._restart_state: ale_py.ALEState | None = None
        self._restart_screen = np.zeros(opts.screen_shape, dtype=np.uint8)
        self._restart_rgb = np.zeros((*_rom_facts(opts.game).screen, 3), dtype=np.uint8)
        self._restart_frame = 0
        self._seed(opts.seed)
        self.action_meanings, self.n_actions = opts.action_meanings, opts.n_actions
        self._actions = [ale_py.Action.__members__[name] for name in self.action_meanings]

        # Buffers reused every step: the last two screens (or RAM), their max, and the stack of processed frames.
        self._grab = getattr(self.ale, _GRABS[opts.obs_type])
        self._max_pool = opts.obs_type != "ram"  # RAM is state, not a picture: sprites do not flicker in it
        self._screens = np.zeros((2, *opts.screen_shape), dtype=np.uint8)
        self._pooled = np.zeros(opts.screen_shape, dtype=np.uint8)
        self._stack = np.zeros(opts.stack_shape, dtype=np.uint8)
        self._dsize = (opts.frame_size[1], opts.frame_size[0])  # cv2 wants (width, height)
        # The stack's axes in observation order: stack, then rgb colour, before the frame's (after: channels_last).
        colour = (3,) if opts.obs_type == "rgb" else ()
        spatial = tuple(range(1, self._stack.ndim - len(colour)))
        self._observation_axes = (*spatial, 0, *colour) if opts.channels_last else (0, *colour, *spatial)
        # As in Gymnasium, the first reset() starts the first game (and makes the first seeded NOOP draw).
        self.lives = 0
        self._started = False
        self._next_episode_due = False  # a play(start_next=False) ended an episode and left the next one unstarted
        self.final_observation: np.ndarray | None = None

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Restart the game from scratch (in every `life_loss` mode) and return the first observation; with a `seed`,
        first re-seed the game exactly as a new ``Game(seed=seed)`` would be."""
        if seed is not None:
            check_int("seed", seed, low=0)
            self._seed(seed)
        elif self._next_episode_due:
            # Unseeded, a restart depends on the game before it: start the deferred episode first, as if never deferred.
            self._start_next()
        self._next_episode_due = False  # (a reloaded ROM drops it)
        self._restart_game()
        return self._observation()

    def _seed(self, seed: int | None) -> None:
        # Seeded as ale-py's AtariEnv seeds: one SeedSequence for ALE and the NOOP draws; ALE takes it at a ROM load.
        numpy_seed, ale_seed = np.random.SeedSequence(seed).generate_state(n_words=2)
        self._rng = np.random.default_rng(int(numpy_seed))
        self.ale.setInt("random_seed", int(ale_seed.astype(np.int32)))
        self.ale.loadROM(rom_path(self.options.game))
        self._restart_state = None  # a new ROM load restarts by reset_game first
        # Loading a ROM resets its mode and difficulty: set them after every load, as ale-py's AtariEnv does.
        if self.options.mode is not None:
            self.ale.setMode(self.options.mode)
        if self.options.difficulty is not None:
            self.ale.setDifficulty(self.options.difficulty)

    def step(self, action: Any, start_next: bool = True) -> tuple[np.ndarray, float, bool, dict[str, Any] | None]:
        """Play one agent step; see the class docstring for what is returned. With ``start_next=False`` a done step
        returns the ended episode's last observation and leaves the next episode to `start_next_episode`.

        Raises TypeError for an action that is not an integer (a bool, a float; continuous: not 3 numbers),
        ValueError for one out of the action set's range, and RuntimeError before `reset` or while a next episode
        left by ``start_next=False`` is due."""
        checked = check_continuous_actions(action, (3,)) if self.options.continuous else self._check_action(action)
        reward, done, episode_info = self.play(checked, start_next=start_next)
        return self._observation(), reward, done, episode_info

    def play(
        self, action: Any, out: np.ndarray | None = None, start_next: bool = True
    ) -> tuple[float, bool, dict[str, Any] | None]:
        """`step` for a pool that checked a whole batch of actions at once, returning ``(reward, done, episode_info)``.

        `action` must already be valid, as `step` checks it (not checked here). The observation is written into `out`
        (`observation_shape`, of `observation_dtype`) if given. With ``start_next=False``, a step that ends the episode
        does not start the next one: `out` gets the episode's last observation (also `final_observation`), and
        `start_next_episode` must be called before the next `play`.
        """
        if not self._started or self._next_episode_due:
            what = "start_next_episode()" if self._started else "reset()"
            raise RuntimeError(f"{self!r}: call {what} before the next step()")
        ale_action, strength = self._ale_action(action)
        frame_skip, stop_on_life_loss = self.options.frame_skip, self.options.life_loss != "ignore"

        # Repeat the action, summing rewards; stop at once when the episode ends mid-step.
        reward = 0.0
        for frame in range(frame_skip):
            reward += self.ale.act(ale_action, strength)
            done = self.ale.game_over() or (stop_on_life_loss and self.ale.lives() < self.lives)
            # Read the screens the observation is made of: the last two frames, or the one the episode ended on.
            if done or frame >= frame_skip - 2:
                self._grab(self._screens[0 if done else frame_skip - 1 - frame])
            if done:
                break

        # Max-pool the last two frames (only the final one if the episode ended earlier; never RAM), shift the
        # stack one frame older and resize into its newest slot.
        if frame == frame_skip - 1 and frame_skip > 1 and self._max_pool:
            pooled = np.maximum(self._screens[0], self._screens[1], out=self._pooled)
        else:
            pooled = self._screens[0]
        self._stack[:-1] = self._stack[1:]
        self._resize(pooled, self._stack[-1])

        # Keep the statistics unclipped: they are what is reported, whatever the agent is trained on.
        self._episode_reward += reward
        self._episode_length += 1
        self._game_reward += reward
        self._game_length += 1
        self.lives = self.ale.lives()
        episode_info = None
        if done:
            self.final_observation = self._observation()
            episode_info = self._end_episode(start_next)
        if self.options.clip_rewards:
            reward = float(np.sign(reward))
        if out is not None:
            self._observation(out)
        return reward, done, episode_info

    @property
    def next_episode_due(self) -> bool:
        """A ``play(..., start_next=False)`` ended the episode, and `start_next_episode` has not started the next."""
        return self._next_episode_due

    def start_next_episode(self, out: np.ndarray | None = None) -> np.ndarray:
        """Start the episode that ``play(..., start_next=False)`` left unstarted, restarting the game if it is over
        (nothing to start: nothing is done), and return its first observation (written into `out` if given)."""
        if self._next_episode_due:
            self._start_next()
        return self._observation(out)

    def screen_rgb(self) -> np.ndarray:
        """The emulator's colour screen now, a fresh ``uint8 (height, 160, 3)`` array (210 rows in most games): ALE's
        ``getScreenRGB``, except right after a restored restart, where ALE still shows the screen before it."""
        return self._restart_rgb.copy() if self._shows_restart_screen() else self.ale.getScreenRGB()

    def get_state(self) -> GameState:
        """This game's state, to play on later, here or in another Game of the same options (see `GameState`)."""
        if not self._started:
            raise RuntimeError(f"{self!r}: call reset() before get_state()")
        # ALE's state as its pickled bytes (which ale-py's stub calls a tuple).
        ale_state: bytes = self.ale.cloneState(include_rng=True).__getstate__()  # type: ignore[assignment]
        counters = (self._episode_reward, self._episode_length, self._game_reward, self._game_length)
        return GameState(
            ale_state, self._stack.copy(), self._screens[0].copy(), self.lives, *counters, self._next_episode_due
        )

    def set_state(self, state: GameState) -> None:
        """Continue from `state`, a `get_state` of a Game of the same game and options.

        Raises TypeError for anything but a `GameState`, and ValueError for the state of another game or of other
        frame options (its frames another shape or dtype), leaving this Game as it was."""
        if not isinstance(state, GameState):
            raise TypeError(f"state must be a GameState from Game.get_state(), got {type(state).__name__}")
        # What the state's arrays are, before anything changes: a Game of other options cannot take them.
        for what, ours, theirs in (
            ("frame stack", self._stack, state.stack),
            ("last screen", self._screens[0], state.screen),
        ):
            if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
                raise ValueError(
                    f"state is of a Game with other options or another game: its {what} is {theirs.dtype} "
                    f"{theirs.shape}, this Game's {ours.dtype} {ours.shape}"
                )
        ale_state = ale_py.ALEState.__new__(ale_py.ALEState)  # ALE builds a state only from its pickled bytes
        ale_state.__setstate__(state.ale)  # type: ignore[arg-type]  # the bytes __getstate__ gave (the stub: tuple)
        # ALE refuses another ROM's state with an untranslated SystemError, after it has begun restoring: keep ours.
        before = self.ale.cloneState(include_rng=True)
        try:
            self.ale.restoreState(ale_state)
        except SystemError:
            self.ale.restoreState(before)
            raise ValueError(
                f"state is not a state of {display_name(self.options.game)}: it comes from another game"
            ) from None
        self._stack[...] = state.stack
        self._screens[0] = state.screen
        self.lives, self._next_episode_due, self._started = state.lives, state.next_episode_due, True
        self._episode_reward, self._episode_length = state.episode_reward, state.episode_length
        self._game_reward, self._game_length = state.game_reward, state.game_length

    def _end_episode(self, start_next: bool) -> dict[str, Any]:
        """Report the episode that just ended and (`start_next`) start the next one."""
        truncated = self.ale.game_truncated() and not self.ale.game_over(with_truncation=False)
        info = {"reward": self._episode_reward, "length": self._episode_length, "truncated": truncated}
        if self.ale.game_over() and self.options.life_loss != "reset":
            info.update(game_reward=self._game_reward, game_length=self._game_length)
        self._next_episode_due = True
        if start_next:
            self._start_next()
        return info

    def _start_next(self) -> None:
        """Start the episode after the one that ended (the emulator has not moved since: game over reads the same)."""
        self._next_episode_due = False
        # A restart when the game is over (or truncated), or when every episode is a game ("reset" mode).
        if self.ale.game_over() or self.options.life_loss == "reset":
            self._restart_game()
        else:
            # "terminal" mode: the game goes on with the lives it has left.
            self._start_episode()

    def _restart_game(self) -> None:
        self._started = True
        self._reset_ale()
        # NOOP start, drawn from the seeded generator exactly as Gymnasium's AtariPreprocessing draws it.
        if self.options.noop_max > 0:
            for _ in range(self._rng.integers(1, self.options.noop_max + 1)):
                self.ale.act(ale_py.Action.NOOP)
                if self.ale.game_over():
                    self._reset_ale()
        # Random start (the practical-RL course's StartWithRandomActions), from the same seeded generator.
        if self.options.random_starts > 0:
            for _ in range(self._rng.integers(0, self.options.random_starts + 1)):
                ale_action, strength = self._ale_action(self._random_action())
                for _ in range(self.options.frame_skip):  # frames after a game over do nothing in ALE
                    self.ale.act(ale_action, strength)
                if self.ale.game_over():
                    self._reset_ale()
        self._game_reward, self._game_length = 0.0, 0
        # The screen the episode starts from: ALE's, unless a restored restart has emulated no frame since.
        if self._shows_restart_screen():
            self._screens[0] = self._restart_screen
        else:
            self._grab(self._screens[0])
        self._start_episode()

    def _reset_ale(self) -> None:
        """ALE's reset_game; in a game of `FIXED_RESTART_GAMES`, after the first, the state it reaches restored."""
        if self._restart_state is not None:
            self.ale.restoreState(self._restart_state)
            return
        self.ale.reset_game()
        if self._restores_restarts:
            self._restart_state = self.ale.cloneState(include_rng=False)
            self._grab(self._restart_screen)
            self.ale.getScreenRGB(self._restart_rgb)
            self._restart_frame = self.ale.getEpisodeFrameNumber()

    def _shows_restart_screen(self) -> bool:
        """No frame emulated since a restored restart: ALE still shows the screen before it (its state holds none)."""
        return self._restart_state is not None and self.ale.getEpisodeFrameNumber() == self._restart_frame

    def _start_episode(self) -> None:
        """Start an episode from the current screen, in ``_screens[0]`` (a restart and a done step grab it there)."""
        if self.options.fire_reset:
            for _ in range(self.options.frame_skip):
                self.ale.act(ale_py.Action.FIRE)
            if self.ale.game_over():  # vanishingly rare, but a finished game cannot start an episode
                return self._restart_game()
            self._grab(self._screens[0])
        # Every stack slot starts as the current screen (nothing older belongs to this episode).
        self.lives = self.ale.lives()
        self._resize(self._screens[0], self._stack[-1])
        self._stack[:-1] = self._stack[-1]
        self._episode_reward, self._episode_length = 0.0, 0

    def _resize(self, screen: np.ndarray, out: np.ndarray) -> None:
        """Process one (pooled) screen into `out`, a stack slot: area-resized (each colour alike); RAM copied as is."""
        if self.options.obs_type == "ram":
            out[:] = screen
        else:
            cv2.resize(screen, self._dsize, dst=out, interpolation=cv2.INTER_AREA)

    def _observation(self, out: np.ndarray | None = None) -> np.ndarray:
        # A copy (a fresh array, or `out`, C-contiguous, overwritten): the caller's array never changes under it.
        if out is None:
            out = np.empty(self.observation_shape, self.options.observation_dtype)
        frames = self._stack.transpose(self._observation_axes)
        target = out.reshape(frames.shape)  # a view: (stack * 3, h, w) seen as (stack, 3, h, w), say
        if self.options.scale_obs:
            np.divide(frames, np.float32(255), out=target)  # in float32: exactly Gymnasium's uint8 / 255
        else:
            target[...] = frames
        return out

    def _ale_action(self, action: Any) -> tuple[ale_py.Action, float]:
        """The ALE action and paddle strength of an already checked agent action."""
        if not self.options.continuous:
            return self._actions[action], 1.0
        # ale-py's continuous mapping, computed as it computes it (float32).
        radius, angle, fire = action
        x, y = radius * np.cos(angle), radius * np.sin(angle)
        threshold = self.options.continuous_action_threshold
        vertical = "UP" if y > threshold else "DOWN" if y < -threshold else ""
        horizontal = "RIGHT" if x > threshold else "LEFT" if x < -threshold else ""
        name = vertical + horizontal + ("FIRE" if fire > threshold else "") or "NOOP"
        return ale_py.Action.__members__[name], float(radius)

    def _random_action(self) -> Any:
        """A uniformly random agent action from the seeded generator: an index, or (continuous) a point of the box."""
        if self.options.continuous:
            return self._rng.uniform(CONTINUOUS_ACTION_LOW, CONTINUOUS_ACTION_HIGH).astype(np.float32)
        return self._rng.integers(len(self.action_meanings))

    def _check_action(self, action: Any) -> int:
        # Validate before acting, so a bad action leaves the game as it was (messages built only for a bad one).
        if isinstance(action, (bool, np.bool_)):
            raise TypeError(f"action must be {self._valid_actions()}, got the bool {action!r}")
        try:
            index = operator.index(action)
        except TypeError:
            shape = f" of shape {np.shape(action)}" if isinstance(action, np.ndarray) else ""
            got = f"{type(action).__name__}{shape} {action!r}"
            raise TypeError(f"action must be {self._valid_actions()}, got {got}") from None
        if not 0 <= index < len(self.action_meanings):
            raise ValueError(f"action must be {self._valid_actions()}, got {index}")
        return index

    def _valid_actions(self) -> str:
        return f"an integer in [0, {self.n_actions}) for {self.name} ({', '.join(self.action_meanings)})"

    def __repr__(self) -> str:
        return f"Game({self.name!r}, seed={self.options.seed})"
