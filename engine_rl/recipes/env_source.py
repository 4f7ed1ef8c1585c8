"""Where a recipe's envs come from: its ``make_env`` callable if set, else its registered ``env_id``;
with ``env_backend='torch'``, the batched torch version of ``env_id`` (:mod:`engine_rl.envs`); with
``env_backend='envpool'``, ``env_id`` in EnvPool (:mod:`engine_rl.collectors.envpool_env`).

Every recipe config has the env fields of :class:`~engine_rl.recipes.config_base.RecipeConfig` (``env_id``,
``make_env``, ``env_kwargs``, ``env_backend``, ``vectorization``, ``wrappers``); the builders read
the spaces with :func:`recipe_spaces`, make their training and evaluation envs with
:func:`recipe_env`, collect from them with :func:`recipe_collector` and name the env in messages
with :func:`env_label`.

Examples:
    >>> from functools import partial
    >>> import gymnasium as gym
    >>> from engine_rl.recipes.ppo_cartpole import PPOConfig
    >>> env_label(PPOConfig())
    'CartPole-v1'
    >>> cfg = PPOConfig(make_env=partial(gym.make, "Acrobot-v1"))
    >>> env_label(cfg)
    "make_env functools.partial(gymnasium.envs.registration:make, 'Acrobot-v1')"
    >>> recipe_vec_env(cfg, 2).single_action_space
    Discrete(3)
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import torch
from gymnasium.vector import VectorEnv

from engine_rl.collectors import GymCollector, TorchEnvCollector
from engine_rl.collectors.base import BatchCollector
from engine_rl.collectors.env_factory import EnvFactory, callable_name, resolve_callable
from engine_rl.collectors.envpool_env import envpool_spaces, make_envpool_env
from engine_rl.collectors.gym_envs import env_spaces, env_spec, make_one_env, make_vec_env
from engine_rl.envs import TorchEnv, make_torch_env
from engine_rl.video import check_renders

__all__ = [
    "EVAL_STEP_CAP", "check_recipe_renders", "env_label", "env_source", "recipe_collector", "recipe_env", "recipe_render_env", "recipe_spaces",
    "recipe_vec_env",
]


def env_source(cfg: Any) -> str | EnvFactory:
    """``cfg.make_env`` (imported if it is a ``"module:function"`` name) if set, else ``cfg.env_id``."""
    if cfg.make_env is None:
        return cfg.env_id
    return resolve_callable(cfg.make_env, owner=type(cfg).__name__)


def env_label(cfg: Any) -> str:
    """The env as messages name it: ``make_env`` by its recorded name if set, else ``env_id``."""
    return cfg.env_id if cfg.make_env is None else f"make_env {callable_name(cfg.make_env)}"


#: Steps after which an evaluation episode ends (truncated, with a warning:
#: :class:`~engine_rl.collectors.step_cap.EvaluationStepCap`) when the env sets no time limit of its
#: own (CliffWalking-v1, Blackjack-v1, a ``make_env`` without ``TimeLimit``), so that a greedy
#: policy that never reaches the end cannot stall the run. Above the limits Gymnasium registers and
#: ALE's own end of an Atari episode (108,000 frames: 27,000 steps with frame skip 4).
EVAL_STEP_CAP = 100_000


def recipe_vec_env(cfg: Any, num_envs: int, *, evaluation: bool = False) -> VectorEnv:
    """``num_envs`` copies of the config's env, vectorized and wrapped as the config says; for
    ``evaluation``, episodes of an env with no time limit end after :data:`EVAL_STEP_CAP` steps.
    With ``env_backend='envpool'``, EnvPool's copies as a vector env (every EnvPool env has a time limit)."""
    if cfg.env_backend == "envpool":
        return make_envpool_env(cfg.env_id, num_envs, wrappers=tuple(cfg.wrappers), env_kwargs=cfg.env_kwargs,
                                owner=type(cfg).__name__)
    return make_vec_env(env_source(cfg), num_envs, mode=cfg.vectorization, wrappers=_wrappers(cfg, evaluation),
                        **(cfg.env_kwargs or {}))


def recipe_render_env(cfg: Any) -> Callable[[], gym.Env]:
    """A callable making one copy of the config's env as evaluation makes it (its ``env_id`` or
    ``make_env``, ``env_kwargs``, ``wrappers``, :data:`EVAL_STEP_CAP`), but made with
    ``render_mode="rgb_array"`` and not vectorized: the env :mod:`engine_rl.video` records. With
    ``env_backend='torch'`` or ``'envpool'``, the gymnasium env of the same id.

    Examples:
        >>> from engine_rl.recipes.ppo_cartpole import PPOConfig
        >>> env = recipe_render_env(PPOConfig())()
        >>> env.render_mode, env.spec.id
        ('rgb_array', 'CartPole-v1')
    """
    kwargs = {**(cfg.env_kwargs or {}), "render_mode": "rgb_array"}
    return partial(make_one_env, env_source(cfg), wrappers=_wrappers(cfg, True), owner=type(cfg).__name__, **kwargs)


def check_recipe_renders(cfg: Any, *, owner: str) -> None:
    """A ``ValueError``, one line naming ``owner``, the env and what is needed, unless videos of the
    config's env can be recorded (:func:`engine_rl.video.check_renders` on :func:`recipe_render_env`)."""
    label = f"env_id {cfg.env_id!r}" if cfg.make_env is None else env_label(cfg)
    if getattr(cfg, "env_backend", None) == "envpool":
        try:
            env_spec(cfg.env_id)
        except ValueError as err:  # an id of EnvPool's own (Breakout-v5): nothing to record it with
            raise ValueError(
                f"{owner}: videos are recorded with the gymnasium env of env_id, and {cfg.env_id!r} is not one ({err}); "
                "use the gymnasium id of the same env (BreakoutNoFrameskip-v4 or ALE/Breakout-v5 for "
                "EnvPool's Breakout-v5), which env_backend 'envpool' takes too"
            ) from None
    check_renders(recipe_render_env(cfg), label=label, owner=owner)


def _wrappers(cfg: Any, evaluation: bool) -> tuple[str, ...]:
    """The config's wrappers; for ``evaluation``, with :data:`EVAL_STEP_CAP` if its episodes have no time limit."""
    wrappers = tuple(cfg.wrappers)
    if evaluation and not _has_time_limit(cfg):
        wrappers = (*wrappers, f"EvaluationStepCap(max_episode_steps={EVAL_STEP_CAP})")
    return wrappers


def recipe_spaces(cfg: Any) -> tuple[gym.Space, gym.Space]:
    """``(observation_space, action_space)`` of one copy of the config's env (made with its
    ``env_kwargs``, wrapped by its ``wrappers``); the torch envs have their gymnasium twin's spaces,
    EnvPool's envs the spaces of its spec (no env made)."""
    if cfg.env_backend == "envpool":
        return envpool_spaces(cfg.env_id, wrappers=tuple(cfg.wrappers), env_kwargs=cfg.env_kwargs,
                              owner=type(cfg).__name__)
    return env_spaces(env_source(cfg), wrappers=cfg.wrappers, env_kwargs=cfg.env_kwargs, owner=type(cfg).__name__)


def _has_time_limit(cfg: Any) -> bool:
    """Whether episodes of the config's env end by a time limit of their own (or cannot be wrapped:
    a vector entry point batches its copies itself)."""
    if any(name.strip().startswith(("TimeLimit", "EvaluationStepCap")) for name in cfg.wrappers):
        return True
    if "max_episode_steps" in (cfg.env_kwargs or {}):  # gymnasium.make's own argument
        return True
    if cfg.make_env is not None:
        return False
    spec = env_spec(cfg.env_id, owner=type(cfg).__name__)
    return spec.max_episode_steps is not None or cfg.vectorization == "vector_entry_point"


def recipe_env(cfg: Any, num_envs: int, device: torch.device, *, evaluation: bool = False) -> VectorEnv | TorchEnv:
    """``num_envs`` copies of the config's env: the torch version on ``device`` with
    ``env_backend='torch'`` (stepped there, no numpy round trip; its episodes have their time
    limit), else :func:`recipe_vec_env` (``evaluation``: with :data:`EVAL_STEP_CAP`; EnvPool's envs
    with ``env_backend='envpool'``)."""
    if cfg.env_backend == "torch":
        return make_torch_env(cfg.env_id, num_envs, device=device)
    return recipe_vec_env(cfg, num_envs, evaluation=evaluation)


def recipe_collector(
    cfg: Any, env: VectorEnv | TorchEnv, policy: Any, *, device: torch.device, storing_device: torch.device
) -> BatchCollector:
    """The collector of ``env`` (from :func:`recipe_env`): ``cfg.frames_per_batch`` frames per
    batch, seeded by ``cfg.seed``; a gymnasium env's batches on ``storing_device``, with the
    config's ``info_keys``; a torch env's on its own device."""
    if isinstance(env, TorchEnv):
        return TorchEnvCollector(env, policy, frames_per_batch=cfg.frames_per_batch, seed=cfg.seed)
    return GymCollector(env, policy, frames_per_batch=cfg.frames_per_batch, seed=cfg.seed, info_keys=cfg.info_keys,
                        device=device, storing_device=storing_device)
