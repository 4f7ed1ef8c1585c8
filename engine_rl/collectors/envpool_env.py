"""EnvPool as a gymnasium vector env: what ``env_backend='envpool'`` steps.

EnvPool (Weng et al., 2022) steps its env copies in C++ threads and returns numpy batches.
:func:`make_envpool_env` makes an :class:`EnvPoolVectorEnv`, a ``gymnasium.vector.VectorEnv`` with
same-step autoreset, as the gymnasium path's vector envs: a copy whose episode ends is stepped once
more at once, alone (EnvPool's reset step, whose action it ignores), and returns the new episode's
first observation, with the true final one in ``info["final_obs"]`` and its info in
``info["final_info"]``. So :class:`~engine_rl.collectors.GymCollector`, :func:`~engine_rl.collectors.run_episodes`
and everything after them take it unchanged and build its batches as the gymnasium path's: the same
keys, dtypes and shapes, every vector step a transition of every copy, EnvPool's ``terminated`` and
``truncated`` (its time limit), episode returns summed from the unclipped rewards. An Atari game
steps frame for frame as the gymnasium path does (a test compares the two pixel for pixel).

Ids (:func:`envpool_task`): the gymnasium path's Atari ids map to EnvPool's game id with the same
sticky actions; every other id is EnvPool's own (``envpool.list_all_envs()``: ``Hopper-v5`` and
``Hopper-v4``, ``HalfCheetah-v5``, ``CartPole-v1``, ...), made with EnvPool's defaults.

================================  ====================  ======================================
``env_id``                        EnvPool task          options
================================  ====================  ======================================
``BreakoutNoFrameskip-v4``        ``Breakout-v5``       ``repeat_action_probability=0``
``ALE/Breakout-v5``               ``Breakout-v5``       ``repeat_action_probability=0.25``
``Breakout-v5`` (EnvPool's)       ``Breakout-v5``       EnvPool's (no sticky actions)
any other EnvPool id              itself                EnvPool's
================================  ====================  ======================================

An Atari game takes the Atari recipes' wrappers only
(:data:`~engine_rl.collectors.atari.ATARI_WRAPPERS`), done by EnvPool's own options
(:data:`ATARI_OPTIONS`) and FIRE steps taken here:

==========================================================  ===========================================
gymnasium path                                              EnvPool
==========================================================  ===========================================
``AtariPreprocessing(noop_max=30)``: no-op starts           ``noop_max=30``
``frame_skip=4``, the max of the last two frames            ``frame_skip=4`` (the same max pooling)
``screen_size=84, grayscale_obs=True`` (cv2 INTER_AREA)     ``img_height=img_width=84``, ``gray_scale``,
                                                            ``use_inter_area_resize``
``FireOnLifeStart``: a FIRE step after each reset           :class:`EnvPoolVectorEnv` steps the reset
                                                            copies once more, alone, with FIRE
                                                            (``use_fire_reset=False``: EnvPool's own
                                                            FIRE lasts one frame, not one step)
``FireOnLifeStart``: FIRE after each lost life, its reward  :class:`EnvPoolVectorEnv` steps the copies
added to the step's                                         that lost a life once more, alone, with FIRE
                                                            (EnvPool's stack keeps both steps' frames,
                                                            the gymnasium path's FIRE's only)
``FrameStackObservation(stack_size=4)``                     ``stack_num=4``
a lost life does not end the episode                        ``episodic_life=False`` (training and
                                                            evaluation alike)
the game's rewards (the recipes clip them for the loss)     ``reward_clip=False``
ALE ends an episode at 108,000 frames (truncated)           ``max_episode_steps=27_000`` (truncated)
==========================================================  ===========================================

Seeds. EnvPool seeds its copies when the pool is made, with int32 seeds; ``reset(seed=s)`` makes the
pool anew with copy ``i`` seeded ``(s + i) % 2**31``, so a seed gives the same episodes every time
(the collector's and the evaluator's seeding), and ``reset()`` without one continues. The same seed
does not give the gymnasium path's episodes (another emulator setup and random streams).

State. The copies' state lives in EnvPool's C++ objects: :func:`~engine_rl.collectors.env_state.get_env_state`
refuses it (:attr:`EnvPoolVectorEnv.state_unsupported`), so a resumed run continues with fresh
episodes and says so (:func:`engine_rl.run.stages.resume_from_checkpoint`).

Examples:
    >>> env = make_envpool_env("CartPole-v1", 2)
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape, env.single_action_space, env.metadata["autoreset_mode"].name
    ((2, 4), Discrete(2), 'SAME_STEP')
    >>> envpool_task("PongNoFrameskip-v4")
    ('Pong-v5', {'repeat_action_probability': 0.0})
    >>> envpool_task("Pong-v4")
    Traceback (most recent call last):
    ...
    ValueError: envpool_task: env_backend 'envpool' needs an env_id EnvPool has: an Atari game as PongNoFrameskip-v4, ALE/Pong-v5 or Pong-v5; MuJoCo as Hopper-v5 or Hopper-v4; any other id of envpool.list_all_envs() (CartPole-v1, ...); got 'Pong-v4' (close matches: Pong-v5, Pooyan-v5, Boxing-v5)
"""

from __future__ import annotations

import difflib
import re
import warnings
from collections.abc import Mapping
from functools import cache
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from engine_rl.collectors.atari import ATARI_WRAPPERS

__all__ = [
    "ATARI_OPTIONS", "ENVPOOL_EXTRA", "EnvPoolVectorEnv", "envpool_options", "envpool_spaces", "envpool_task",
    "fire_action", "make_envpool_env",
]

#: The extra that installs EnvPool, as errors name it.
ENVPOOL_EXTRA = "the EnvPool extra: pip install engine_rl[envpool] (envpool)"

#: EnvPool's Atari options equal to :data:`~engine_rl.collectors.atari.ATARI_WRAPPERS` (module docstring).
ATARI_OPTIONS: dict[str, Any] = {
    "noop_max": 30, "frame_skip": 4, "img_height": 84, "img_width": 84, "gray_scale": True,
    "use_inter_area_resize": True, "use_fire_reset": False, "stack_num": 4, "episodic_life": False,
    "reward_clip": False, "max_episode_steps": 27_000,
}

#: EnvPool options this module sets itself, never taken from ``env_kwargs``.
_OWN_OPTIONS = frozenset({"task", "num_envs", "batch_size", "seed", "env_seed", "gym_reset_return_info",
                          "max_num_players", "base_path"})
_SEED_RANGE = 2**31  # EnvPool's seeds are int32
_GYM_ATARI = re.compile(r"(?:(?P<game>\w+)NoFrameskip-v4|ALE/(?P<v5>\w+)-v5)")


def _envpool(owner: str = "env_backend") -> Any:
    try:
        import envpool
    except ImportError:
        raise ValueError(f"{owner}: env_backend 'envpool' needs {ENVPOOL_EXTRA}") from None
    return envpool


def _is_atari_task(task_id: str) -> bool:
    return _envpool().registration.registry.specs[task_id][0] == "envpool.atari"


def envpool_task(env_id: str, *, owner: str = "envpool_task") -> tuple[str, dict[str, Any]]:
    """``(EnvPool task id, options)`` of ``env_id`` (the table of the module docstring); a
    ``ValueError`` naming ``owner`` and the ids accepted if EnvPool has no such env."""
    known = _envpool(owner).list_all_envs()
    match = _GYM_ATARI.fullmatch(env_id) if isinstance(env_id, str) else None
    if match is not None and f"{match['game'] or match['v5']}-v5" in known:
        sticky = 0.0 if match["game"] else 0.25
        return f"{match['game'] or match['v5']}-v5", {"repeat_action_probability": sticky}
    if env_id in known:
        return env_id, {}
    game = re.sub(r"(NoFrameskip)?-v\d+$", "", str(env_id)).removeprefix("ALE/")
    game = game if f"{game}-v5" in known and _is_atari_task(f"{game}-v5") else "Breakout"
    close = difflib.get_close_matches(str(env_id), known, n=3)
    hint = f" (close matches: {', '.join(close)})" if close else ""
    raise ValueError(
        f"{owner}: env_backend 'envpool' needs an env_id EnvPool has: an Atari game as {game}NoFrameskip-v4, "
        f"ALE/{game}-v5 or {game}-v5; MuJoCo as Hopper-v5 or Hopper-v4; any other id of envpool.list_all_envs() "
        f"(CartPole-v1, ...); got {env_id!r}{hint}"
    )


def _same_wrappers(wrappers: tuple[str, ...], expected: tuple[str, ...]) -> bool:
    return [w.replace(" ", "") for w in wrappers] == [w.replace(" ", "") for w in expected]


def envpool_options(
    env_id: str, *, wrappers: tuple[str, ...] = (), env_kwargs: Mapping[str, Any] | None = None,
    owner: str = "envpool_options",
) -> tuple[str, dict[str, Any]]:
    """``(task id, options)`` that make ``env_id`` in EnvPool as the gymnasium path makes it with
    ``wrappers`` and ``env_kwargs``; a one-line ``ValueError`` naming ``owner`` and what is accepted
    for an id EnvPool lacks, wrappers it cannot apply, or ``env_kwargs`` that are not its options.

    An Atari game takes ``wrappers`` equal to :data:`~engine_rl.collectors.atari.ATARI_WRAPPERS`
    (then :data:`ATARI_OPTIONS`); any other env no wrappers. ``env_kwargs`` are EnvPool options of
    the task (``repeat_action_probability``, ``num_threads``, ``max_episode_steps``, MuJoCo's
    ``reset_noise_scale``, ...), but neither those this module sets nor the Atari preprocessing; an
    Atari id's ``frameskip=1`` (gymnasium's "the wrappers skip frames", which the Atari recipes add) is dropped.
    """
    task, options = envpool_task(env_id, owner=owner)
    kwargs = dict(env_kwargs or {})
    atari = _is_atari_task(task)
    if atari:
        if not _same_wrappers(tuple(wrappers), ATARI_WRAPPERS):
            raise ValueError(
                f"{owner}: env_backend 'envpool' preprocesses the Atari game {env_id!r} with its own options, as "
                f"wrappers={ATARI_WRAPPERS} say (the Atari recipes' default), so it takes those wrappers only, "
                f"got {tuple(wrappers)}"
            )
        if kwargs.get("frameskip") == 1:
            del kwargs["frameskip"]
        fire_action(task, owner=owner)
        options.update(ATARI_OPTIONS)
    elif wrappers:
        raise ValueError(
            f"{owner}: env_backend 'envpool' applies no gymnasium wrappers to {env_id!r} (only an Atari game's "
            f"preprocessing, ATARI_WRAPPERS, which EnvPool does itself), got wrappers={tuple(wrappers)}; "
            "use env_backend 'gymnasium'"
        )
    preprocessing = set(ATARI_OPTIONS) - {"max_episode_steps"} if atari else set()  # the time limit may change
    keys = set(_envpool().make_spec(task)._config_keys) - _OWN_OPTIONS - preprocessing
    unknown = sorted(set(kwargs) - keys)
    if unknown:
        raise ValueError(
            f"{owner}: env_kwargs {unknown} are not EnvPool options of {task!r} that may be set (accepted: "
            f"{', '.join(sorted(keys))})"
        )
    return task, {**options, **kwargs}


def _spaces(source: Any) -> tuple[gym.Space, gym.Space]:
    """The spaces of an EnvPool spec or pool, which build float32 Boxes from float64 bounds, a
    gymnasium warning that is EnvPool's, not the user's: built once here, without it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*precision lowered by casting", category=UserWarning)
        if hasattr(source, "gymnasium_observation_space"):  # a spec
            return source.gymnasium_observation_space, source.gymnasium_action_space
        return source.observation_space, source.action_space  # a pool: cached by it


def envpool_spaces(
    env_id: str, *, wrappers: tuple[str, ...] = (), env_kwargs: Mapping[str, Any] | None = None,
    owner: str = "envpool_spaces",
) -> tuple[gym.Space, gym.Space]:
    """``(observation_space, action_space)`` of one copy, read from EnvPool's spec (no env made)."""
    task, options = envpool_options(env_id, wrappers=wrappers, env_kwargs=env_kwargs, owner=owner)
    return _spaces(_envpool().make_spec(task, **options))


@cache
def _action_names(game: str) -> tuple[str, ...]:
    """The game's minimal action set (read with ale_py: EnvPool does not name its actions)."""
    try:
        from ale_py import ALEInterface, LoggerMode, roms
    except ImportError as err:
        raise ValueError(f"env_backend 'envpool' reads an Atari game's actions with ale_py: {ENVPOOL_EXTRA} "
                         f"({err})") from None
    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.loadROM(roms.get_rom_path(game))
    return tuple(action.name for action in ale.getMinimalActionSet())


def fire_action(task_id: str, *, owner: str = "fire_action") -> int:
    """The index of FIRE among the actions of the EnvPool Atari game ``task_id``; a ``ValueError``
    naming ``owner`` for a game without FIRE, which the Atari preprocessing (``FireOnLifeStart``) refuses."""
    names = _action_names(_envpool().registration.registry.specs[task_id][2]["task"])
    if "FIRE" not in names:
        raise ValueError(f"{owner}: the Atari preprocessing presses FIRE at each life's start and needs a game with "
                         f"a FIRE action; {task_id} has {list(names)}")
    return names.index("FIRE")


class EnvPoolVectorEnv(VectorEnv):
    """``num_envs`` copies of one EnvPool task as a ``gymnasium.vector.VectorEnv`` (same-step autoreset).

    The pool is made at each seeded :meth:`reset` (module docstring: seeds); with ``fire`` (an
    Atari game's FIRE action), a copy that lost a life gets FIRE, as ``FireOnLifeStart`` does. A
    copy whose episode ends takes EnvPool's reset step in the same :meth:`step` (module docstring).

    Args:
        task_id: an EnvPool id (``envpool.list_all_envs()``).
        num_envs: copies.
        options: EnvPool options of the task (:func:`envpool_options`).
        fire: the action that a copy that lost a life (and did not end its episode) takes at once,
            alone, in one more EnvPool step whose reward, observation and flags it returns
            (:func:`fire_action`); None: none.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
    #: Why :func:`~engine_rl.collectors.env_state.get_env_state` cannot record this env.
    state_unsupported = "EnvPool steps its envs in C++ threads, whose state cannot be saved"

    def __init__(self, task_id: str, num_envs: int, *, options: Mapping[str, Any] | None = None,
                 fire: int | None = None) -> None:
        self.task_id, self.num_envs, self.options = task_id, int(num_envs), dict(options or {})
        self.single_observation_space, self.single_action_space = _spaces(_envpool().make_spec(task_id, **self.options))
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.fire = fire
        self._pool: Any = None
        self._ids = np.arange(self.num_envs)
        self._lives = np.zeros(self.num_envs, dtype=np.int64)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every copy; with ``seed`` (or at the first reset), a new pool with copy ``i`` seeded
        ``(seed + i) % 2**31`` (no seed: a random one)."""
        if seed is not None or self._pool is None:
            if self._pool is not None:
                self._pool.close()
            first = int(np.random.default_rng().integers(_SEED_RANGE)) if seed is None else seed
            env_seed = [(first + i) % _SEED_RANGE for i in range(self.num_envs)]
            self._pool = _envpool().make_gymnasium(self.task_id, num_envs=self.num_envs, env_seed=env_seed,
                                                   **self.options)
            _spaces(self._pool)
        obs, info = self._pool.reset(options=options)
        if self.fire is not None:  # FireOnLifeStart.reset: one FIRE step, its reward dropped
            obs, _, _, _, info = self._pool.step(np.full(self.num_envs, self.fire))
            self._lives[:] = info["lives"]
        return obs, info

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if self._pool is None:
            raise RuntimeError("EnvPoolVectorEnv: call reset() before step()")
        obs, reward, terminated, truncated, info = self._pool.step(np.asarray(actions))
        if not np.array_equal(info["env_id"], self._ids):  # never seen in sync mode; cheap to check
            raise RuntimeError(f"EnvPoolVectorEnv: EnvPool returned copies {info['env_id']}, not in order")
        if self.fire is not None:
            lost = np.flatnonzero((info["lives"] < self._lives) & ~terminated & ~truncated)
            if lost.size:  # FireOnLifeStart: those copies press FIRE now, alone
                ids = lost.astype(np.int32)
                f_obs, f_reward, f_term, f_trunc, f_info = self._pool.step(np.full(lost.size, self.fire), env_id=ids)
                order = f_info["env_id"]
                obs[order], terminated[order], truncated[order] = f_obs, f_term, f_trunc
                reward[order] += f_reward
                _set_info(info, f_info, order, sum_reward=True)  # the copies' info after FIRE
            self._lives[:] = info["lives"]
        done = terminated | truncated
        if done.any():
            obs, info = self._autoreset(np.flatnonzero(done), obs, info)
        return obs, reward, terminated, truncated, info

    def _autoreset(self, ended: np.ndarray, obs: Any, info: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Step the ``ended`` copies once more, alone (EnvPool resets them, ignoring the action):
        their new first observation and info replace the final ones, which go to ``info["final_obs"]``
        and ``info["final_info"]`` as gymnasium's same-step autoreset puts them."""
        n = self.num_envs
        final_obs = np.full(n, None, dtype=object)
        for i in ended:
            final_obs[i] = _copy_rows(obs, i)
        mask = np.zeros(n, dtype=bool)
        mask[ended] = True
        final_info = {key: value.copy() for key, value in info.items() if isinstance(value, np.ndarray)}
        final_info.update({f"_{key}": mask for key in list(final_info)})
        space, ids = self.single_action_space, ended.astype(np.int32)
        steps = [np.zeros((ended.size, *space.shape), dtype=space.dtype)]  # the reset step
        if self.fire is not None:  # then FireOnLifeStart.reset's FIRE step, its reward dropped
            steps.append(np.full(ended.size, self.fire))
        for actions in steps:
            r_obs, _, _, _, r_info = self._pool.step(actions, env_id=ids)
            order = r_info["env_id"]
            _set_rows(obs, order, r_obs)
            _set_info(info, r_info, order)
        if self.fire is not None:
            self._lives[order] = r_info["lives"]
        info.update({"final_obs": final_obs, "_final_obs": mask, "final_info": final_info, "_final_info": mask})
        return obs, info

    def close(self, **kwargs: Any) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def _copy_rows(obs: Any, index: Any) -> Any:
    """A copy of ``obs[index]``; of each entry for a Dict observation (dm_control's)."""
    if isinstance(obs, Mapping):
        return {key: _copy_rows(value, index) for key, value in obs.items()}
    return obs[index].copy()


def _set_info(info: dict[str, Any], part: Mapping[str, Any], order: np.ndarray, *, sum_reward: bool = False) -> None:
    """Write the info of the copies ``order`` stepped alone (``part``) into the batch's ``info``;
    with ``sum_reward``, their ``"reward"`` entries are added to those of the step before."""
    for key, value in part.items():
        if key != "env_id" and isinstance(value, np.ndarray) and isinstance(info.get(key), np.ndarray):
            info[key][order] = value + info[key][order] if sum_reward and key == "reward" else value


def _set_rows(obs: Any, index: Any, rows: Any) -> None:
    """``obs[index] = rows``; entry by entry for a Dict observation."""
    if isinstance(obs, Mapping):
        for key, value in obs.items():
            _set_rows(value, index, rows[key])
    else:
        obs[index] = rows


def make_envpool_env(
    env_id: str, num_envs: int, *, wrappers: tuple[str, ...] = (), env_kwargs: Mapping[str, Any] | None = None,
    owner: str = "make_envpool_env",
) -> EnvPoolVectorEnv:
    """``num_envs`` copies of ``env_id`` in EnvPool, made as the gymnasium path makes it with
    ``wrappers`` and ``env_kwargs`` (:func:`envpool_options`; errors name ``owner``)."""
    task, options = envpool_options(env_id, wrappers=wrappers, env_kwargs=env_kwargs, owner=owner)
    fire = fire_action(task, owner=owner) if _is_atari_task(task) else None
    return EnvPoolVectorEnv(task, num_envs, options=options, fire=fire)
