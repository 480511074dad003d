"""GamePoolVecEnv: a `GamePool` as a Stable-Baselines3 `VecEnv`, so SB3's algorithms train on it directly;
FrameReplayBuffer: `FrameReplay` as SB3's replay buffer, so SB3's DQN stores each frame once.

Each only translates between the two APIs (the Stable-Baselines3 guide shows both in use). Needs the ``sb3`` extra.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from atari_game.extras import install_command
from atari_game.pool import GamePool
from atari_game.replay import FrameReplay
from atari_game.validation import check_int

try:
    from stable_baselines3.common.buffers import BaseBuffer, ReplayBuffer
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.type_aliases import ReplayBufferSamples
    from stable_baselines3.common.vec_env import VecEnv, VecNormalize
except ImportError as error:  # SB3 missing, or torch (which SB3 imports) missing
    raise ImportError(
        f"atari_game.sb3 needs Stable-Baselines3 and torch ({error}): {install_command('sb3')}"
    ) from error


class GamePoolVecEnv(VecEnv):
    """`num_envs` Atari games in a `GamePool`, with Stable-Baselines3's `VecEnv` API.

    Args:
        num_envs: how many games. Env ``i`` is seeded with ``seed + i``.
        game, seed, **options: as for `GamePool` (``n_workers``, ``start_method``, ``restart_workers``, ...)
            and `Game` (``life_loss``, ``noop_max``, ``fire_reset``, ``clip_rewards``, ...), validated by them.
            `game` may be a list naming each env's game, for a mixed pool (see `GamePool`).
            ``autoreset_mode`` and ``copy`` are refused: SB3 needs same-step autoreset and fresh arrays
            (its rollout buffer stores the previous observation after the next step).

    The adapter owns its pool (``.pool``), which `close` stops (use it as a context manager; the pool's own
    finalizer still cleans up if you forget).

    Spaces: the pool's (`atari_game.spaces`), by default ``Box(0, 255, (4, 84, 84), uint8)``, channel-first, an image
    for SB3's ``CnnPolicy`` as it is, and ``Discrete(n_actions)`` (other options: the Stable-Baselines3 guide).

    ``step(actions) -> (obs, rewards, dones, infos)`` with integer ``actions`` of shape ``(num_envs,)``:

    * ``obs``: ``uint8 (num_envs, 4, 84, 84)``, a fresh array; for a done env, the next episode's first observation.
    * ``rewards``: ``float32 (num_envs,)``, the sign of the raw reward with ``clip_rewards=True``.
    * ``dones``: ``bool (num_envs,)``, terminated or truncated (a life lost as ``life_loss`` says, game over,
      truncation).
    * ``infos[i]``: ``"lives"`` (int), ``"game_name"`` (the env's ROM id, as in ``pool.games``) and
      ``"TimeLimit.truncated"`` (truncated and not terminated) on every step; on a done step
      ``"terminal_observation"``, the ended episode's last observation. When a worker died and ``restart_workers``
      replaced it, its envs are done and truncated with ``"worker_restarted": True`` and no final observation.
    * ``infos[i]["episode"] = {"r": float, "l": int, "t": float}``, SB3 `Monitor`'s layout, on the step that
      ends a whole game: its unclipped return, its length in agent steps and the seconds since this VecEnv was
      built. With ``life_loss="terminal"`` a game is done at every lost life but reported once, at game over, as in
      SB3's own Atari stack; with the default ``"reset"`` every done step reports one.

    Because the envs report what `Monitor` reports, ``env_is_wrapped(Monitor)`` is True: SB3's ``evaluate_policy``
    then counts whole games and unclipped returns. `get_attr` reads the pool's attributes, which every env shares
    (``action_meanings``, ``options``, ...); `set_attr`, `env_method` and `render` raise ``NotImplementedError``.
    """

    def __init__(
        self, num_envs: int | None = None, game: str | Sequence[str] = "Breakout", seed: int | None = 0, **options: Any
    ) -> None:
        fixed = [name for name in ("autoreset_mode", "copy") if name in options]
        if fixed:
            raise TypeError(
                f"GamePoolVecEnv sets {', '.join(fixed)} itself (same-step autoreset and copied observations, "
                "which SB3 needs): leave it out"
            )
        self.pool = GamePool(num_envs, game, seed, autoreset_mode=AutoresetMode.SAME_STEP, copy=True, **options)
        # Whole games, as SB3's Monitor counts them: each episode with life_loss "reset", else the pool's "game".
        self._game_key = "episode" if self.pool.options.life_loss == "reset" else "game"
        self._start_time = time.time()  # Monitor's "t" counts from here
        self._actions: np.ndarray | None = None
        super().__init__(self.pool.num_envs, self.pool.single_observation_space, self.pool.single_action_space)

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """SB3's: the seeds of the next reset (env ``i`` gets ``seed + i``), checked here, not at that reset."""
        if seed is not None:
            check_int("seed", seed, low=0)
        return super().seed(seed)

    def reset(self) -> np.ndarray:
        """Restart every game and return the first observations, ``uint8 (num_envs, 4, 84, 84)``; the seeds set by
        `seed` apply to this reset only, as in SB3. ``reset_infos[i]`` is ``{"lives": int, "game_name": str}``."""
        if any(self._options):
            raise ValueError(f"reset options are not supported (set_options gave {self._options!r})")
        obs, info = self.pool.reset(seed=list(self._seeds))
        self.reset_infos = [
            {"lives": int(lives), "game_name": name} for lives, name in zip(info["lives"], self.pool.games, strict=True)
        ]
        # SB3's rule: seeds and options apply to one reset.
        self._reset_seeds()
        self._reset_options()
        self._actions = None
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        """Keep the actions for `step_wait` (the pool steps every env in parallel there)."""
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """Step every env with the actions of `step_async`; see the class docstring for what is returned."""
        if self._actions is None:
            raise RuntimeError("step_wait() without step_async(actions) since the last reset() or step")
        actions, self._actions = self._actions, None
        obs, rewards, terminations, truncations, info = self.pool.step(actions)

        # One dict per env, as SB3 wants, from the pool's arrays and their masks (a key is absent where no env has it).
        nobody = np.zeros(self.num_envs, bool)
        final, games = info.get("_final_obs", nobody), info.get(f"_{self._game_key}", nobody)
        restarted = info.get("_worker_restarted", nobody)
        infos: list[dict[str, Any]] = []
        for i in range(self.num_envs):
            env_info: dict[str, Any] = {
                "lives": int(info["lives"][i]),
                "game_name": self.pool.games[i],
                "TimeLimit.truncated": bool(truncations[i] and not terminations[i]),
            }
            if final[i]:
                env_info["terminal_observation"] = info["final_obs"][i]
            if games[i]:
                stats = info[self._game_key]
                elapsed = round(time.time() - self._start_time, 6)
                env_info["episode"] = {"r": float(stats["r"][i]), "l": int(stats["l"][i]), "t": elapsed}
            if restarted[i]:
                env_info["worker_restarted"] = True
            infos.append(env_info)
        return obs, rewards.astype(np.float32), terminations | truncations, infos

    def close(self) -> None:
        """Stop the pool's workers and free its shared memory; safe to call twice."""
        self.pool.close()

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        """The pool's attribute `attr_name` (all envs share it), once per env of `indices` (default: all)."""
        value = getattr(self.pool, attr_name)  # AttributeError if the pool has none, as SB3 expects
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        """Not supported: the games live in worker processes, configured once by the constructor's options."""
        raise NotImplementedError(
            f"GamePoolVecEnv.set_attr({attr_name!r}): the games run in worker processes and are configured "
            "only by the constructor's options; build a new GamePoolVecEnv instead"
        )

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list[Any]:
        """Not supported: the games live in worker processes and take only step and reset commands."""
        raise NotImplementedError(
            f"GamePoolVecEnv.env_method({method_name!r}): the games run in worker processes and take only "
            "step and reset; shared settings are readable with get_attr (e.g. get_attr('action_meanings'))"
        )

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        """True for SB3's `Monitor` only: the envs report its ``info["episode"]`` themselves (see the class)."""
        return [wrapper_class is Monitor for _ in self._get_indices(indices)]

    def render(self, mode: str | None = None) -> np.ndarray | None:
        """Not supported: a pool does not render."""
        raise NotImplementedError(
            "GamePoolVecEnv does not render: to watch or record a game, use "
            "gymnasium.make('atari_game/<Game>-v0', render_mode='rgb_array') in a DummyVecEnv"
        )

    def __enter__(self) -> GamePoolVecEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GamePoolVecEnv({self.pool!r})"


class FrameReplayBuffer(ReplayBuffer):
    """`FrameReplay` behind SB3's `ReplayBuffer` API: ``DQN(..., replay_buffer_class=FrameReplayBuffer)``.

    Each frame is stored once (the Stable-Baselines3 guide gives the memory saved; 0.2-0.4 GB for 1M transitions with
    ``replay_buffer_kwargs={"compression": "zstd"}``), and every sample is the one SB3's own buffer would give: the
    same draws from numpy's global generator (so SB3's seeding reproduces runs), the same transitions, bit-identical
    observations and the same tensors. SB3 builds it with SB3's own arguments; beyond those:

    Args:
        n_steps, gamma: n-step returns, as SB3's ``NStepReplayBuffer`` takes them; samples then carry
            ``discounts``, which SB3's DQN uses in its target. A transition whose n steps are not all stored yet is
            not drawn (SB3's buffer would cut it short at the newest step instead).
        **options: more `FrameReplay` options (``stack``, ``channels_last``, ``compression``).

    ``optimize_memory_usage`` changes nothing; ``handle_timeout_termination`` (default True) makes
    ``infos[i]["TimeLimit.truncated"]`` a truncation that bootstraps, as in SB3. Observations must be a ``Box`` and
    actions ``Discrete``. The `FrameReplay` is ``.replay``. Not supported: SB3's ``reset`` semantics beyond emptying
    the buffer. Where episodes are so short that frames run out before slots, a draw that lands on an evicted
    transition is replaced by a uniform draw among the stored ones.
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: Any = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        n_steps: int = 1,
        gamma: float = 0.99,
        **options: Any,
    ) -> None:
        if not isinstance(observation_space, spaces.Box):
            raise TypeError(f"observation_space must be a gymnasium Box, got {observation_space!r}")
        if not isinstance(action_space, spaces.Discrete):
            raise TypeError(f"action_space must be Discrete (FrameReplay stores integer actions), got {action_space!r}")
        # BaseBuffer's constructor, not ReplayBuffer's: that one would allocate SB3's own observation arrays.
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.buffer_size = max(buffer_size // n_envs, 1)  # per env, as in SB3
        self.optimize_memory_usage = optimize_memory_usage
        self.handle_timeout_termination = handle_timeout_termination
        self._options = {"n_step": n_steps, "gamma": gamma, "dtype": observation_space.dtype, **options}
        self.reset()

    def reset(self) -> None:
        """Empty the buffer."""
        super().reset()
        self.replay = FrameReplay(self.buffer_size * self.n_envs, self.n_envs, self.obs_shape, **self._options)
        self._added = 0  # steps added (every env adds one transition per step)

    def add(
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """Store one step of every env, as SB3 calls it (`next_obs` holds the terminal observation on done steps)."""
        done = np.asarray(done).astype(bool)
        timeouts = np.zeros(self.n_envs, bool)
        if self.handle_timeout_termination:
            timeouts = np.array([info.get("TimeLimit.truncated", False) for info in infos], bool)
        action = np.asarray(action).reshape(self.n_envs)
        self.replay.add(obs, action, reward, next_obs, done & ~timeouts, done & timeouts)
        self._added += 1
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full, self.pos = True, 0

    def _get_samples(self, batch_inds: np.ndarray, env: VecNormalize | None = None) -> ReplayBufferSamples:
        """The transitions in SB3's slots `batch_inds` of envs drawn as SB3 draws them, as SB3's tensors."""
        env_indices = np.random.randint(0, high=self.n_envs, size=(len(batch_inds),))
        # SB3's slot p of an env holds the latest of its transitions t with t % buffer_size == p.
        transitions = self._added - 1 - (self._added - 1 - batch_inds) % self.buffer_size
        ids = transitions * self.n_envs + env_indices
        missing = ~self.replay.holds(ids)
        if missing.any():  # evicted early (frames ran out) or its n steps not all stored yet: draw another
            stored = self.replay.indices()
            ids[missing] = stored[np.random.randint(0, len(stored), size=int(missing.sum()))]
        batch = self.replay.get(ids)
        column = (-1, 1)
        # (SB3 types a normalised observation as an array or a dict of them: arrays here, the spaces being Boxes.)
        samples: list[Any] = [
            self._normalize_obs(batch.obs, env),
            batch.actions.reshape(column),
            self._normalize_obs(batch.next_obs, env),
            batch.dones.astype(np.float32).reshape(column),
            self._normalize_reward(batch.rewards.reshape(column), env),
        ]
        if self.replay.n_step > 1:
            samples.append(batch.discounts.reshape(column))
        # The arrays are fresh: tensors may share their memory.
        return ReplayBufferSamples(*(self.to_torch(array, copy=False) for array in samples))
