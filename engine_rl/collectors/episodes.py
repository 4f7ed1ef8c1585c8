"""Evaluation rollouts: run whole episodes with a policy on a vector env (same steps as the
collector) or on a batched torch env (:class:`~engine_rl.envs.TorchEnv`, stepped on its device).

An evaluation is never silent about what makes its result meaningless or its wait long: a NaN
or Inf reward or observation of a counted episode stops it with a
:class:`~engine_rl.finite.NonFiniteError` naming the env copy, the key, the episode and the step
(evaluation data is never skipped: a score without that episode would not be the policy's), and
an episode that passes :data:`~engine_rl.collectors.step_cap.LONG_EPISODE_STEPS` steps gets one
:class:`~engine_rl.collectors.step_cap.LongEvaluationWarning`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from gymnasium.vector import VectorEnv
from tensordict import TensorDict

from engine_rl.checks import positive_int
from engine_rl.collectors.info import INFO_KEY
from engine_rl.collectors.observations import field_key
from engine_rl.collectors.policy import Policy
from engine_rl.collectors.step_cap import LONG_EPISODE_STEPS, warn_long_evaluation
from engine_rl.collectors.stepper import GymStepper
from engine_rl.envs.base import TorchEnv
from engine_rl.finite import NonFiniteError
from engine_rl.keys import NestedKey, format_key, refuse_recurrent

__all__ = ["run_episodes"]


def run_episodes(
    env: VectorEnv | TorchEnv,
    policy: Policy,
    num_episodes: int = 10,
    *,
    seed: int | None = None,
    device: torch.device | str | None = None,
    info_keys: Sequence[str] = (),
) -> dict[str, torch.Tensor]:
    """Reset ``env`` and run ``num_episodes`` complete episodes; return their returns and lengths.

    Episodes are assigned to env copies up front (copy ``i`` runs ``num_episodes // num_envs``
    episodes, plus one for the first ``num_episodes % num_envs`` copies) and each copy's first
    episodes are the ones counted, so short episodes do not crowd out long ones. Steps come
    from :class:`~engine_rl.collectors.gym.GymStepper`, the collector's own step code, under
    ``torch.no_grad()``. The env is left mid-episode: give evaluation its own env.

    Args:
        env: a gymnasium vector env (its episodes must end, e.g. through a time limit), or a
            :class:`~engine_rl.envs.TorchEnv` (the policy then runs on its device).
        policy: writes ``"action"`` into a TensorDict holding ``"observation"`` (see
            :data:`~engine_rl.collectors.gym.Policy`); pass the greedy one to evaluate.
        num_episodes: number of episodes (a positive int).
        seed: seed for ``env.reset`` (copy ``i`` gets ``seed + i``); ``None``: unseeded.
        device: the policy's device; ``None``: from its parameters (a gymnasium env only).
        info_keys: scalar entries of the env's ``info`` to read at each counted episode's last
            step (e.g. ``"is_success"``; a copy that does not report one gives NaN); a gymnasium
            env only (a torch env has no ``info``).

    Returns:
        ``{"return": float32 [num_episodes], "length": int64 [num_episodes]}``, grouped by copy,
        plus ``"info_<key>"`` (float64 ``[num_episodes]``) for each of ``info_keys``.

    Raises:
        NonFiniteError: a copy returned a NaN or Inf reward, or a floating-point observation
            holding one, in an episode that counts (checked at every step, one ``isfinite`` per
            key over all copies); the message names the key, the copy, its episode and the step.

    Warns:
        LongEvaluationWarning: once, when an episode passes
            :data:`~engine_rl.collectors.step_cap.LONG_EPISODE_STEPS` steps (a gymnasium env).

    Examples:
        >>> from engine_rl.collectors import make_vec_env
        >>> def left(td):
        ...     return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        >>> res = run_episodes(make_vec_env("CartPole-v1", 2), left, num_episodes=3, seed=0)
        >>> res["return"].shape, res["length"].dtype, bool((res["return"] == res["length"]).all())
        (torch.Size([3]), torch.int64, True)
    """
    num_episodes = positive_int(num_episodes, name="num_episodes", owner="run_episodes")
    if isinstance(env, TorchEnv):
        if info_keys:
            raise ValueError(f"run_episodes: info_keys {tuple(info_keys)} need a gymnasium env; a TorchEnv reports no info")
        refuse_recurrent(policy, owner="run_episodes on a TorchEnv", use="evaluate on a gymnasium vector env")
        return _run_torch_episodes(env, policy, num_episodes, seed)
    return _run_gym_episodes(env, policy, num_episodes, seed, device=device, info_keys=info_keys)


def _run_gym_episodes(
    env: VectorEnv, policy: Policy, num_episodes: int, seed: int | None, *,
    device: torch.device | str | None, info_keys: Sequence[str],
) -> dict[str, torch.Tensor]:
    """:func:`run_episodes` on a gymnasium vector env, stepped by the collector's :class:`GymStepper`."""
    stepper = GymStepper(env, policy, device=device, owner="run_episodes", info_keys=info_keys)
    n = stepper.num_envs
    quota = np.full(n, num_episodes // n, dtype=np.int64)
    quota[: num_episodes % n] += 1
    offset = np.cumsum(quota) - quota
    count = np.zeros(n, dtype=np.int64)
    returns = np.zeros(num_episodes, dtype=np.float32)
    lengths = np.zeros(num_episodes, dtype=np.int64)
    ep_return = stepper.buffers[("next", "episode_return")].numpy()
    ep_length = stepper.buffers[("next", "episode_length")].numpy()
    infos = {key: (stepper.arrays[(*INFO_KEY, key)], np.full(num_episodes, np.nan)) for key in stepper.info_keys}
    # what the policy saw and what the env paid, floating point only (integers hold no NaN)
    checked = [(key, stepper.arrays[key]) for key in (
        *(field_key(("observation",), f) for f in stepper.spec.observation_fields if f.dtype.is_floating_point),
        ("next", "reward"),
    )]
    remaining, steps, next_look = num_episodes, 0, LONG_EPISODE_STEPS
    with torch.no_grad():
        stepper.reset(seed=seed)
        while remaining:
            stepper.step(0)
            for key, array in checked:
                if not np.isfinite(array[0]).all():
                    _check_counted(key, array[0], count < quota, count, ep_length[0])
            steps += 1
            if steps >= next_look:  # no episode can be long before this many steps
                longest = int(ep_length[0].max())
                if longest >= LONG_EPISODE_STEPS:
                    warn_long_evaluation(env, steps=longest, done=num_episodes - remaining, total=num_episodes)
                    next_look = math.inf  # once per evaluation
                else:
                    next_look = steps + LONG_EPISODE_STEPS - longest
            if stepper.done.any():
                idx = np.flatnonzero(stepper.done & (count < quota))
                pos = offset[idx] + count[idx]
                returns[pos] = ep_return[0, idx]
                lengths[pos] = ep_length[0, idx]
                for staged, values in infos.values():
                    values[pos] = staged[0, idx]
                count[idx] += 1
                remaining -= len(idx)
    out = {"return": torch.from_numpy(returns), "length": torch.from_numpy(lengths)}
    out.update((f"info_{key}", torch.from_numpy(values)) for key, (_, values) in infos.items())
    return out


def _check_counted(key: NestedKey, values: np.ndarray, counting: np.ndarray, count: np.ndarray,
                   length: np.ndarray) -> None:
    """Raise :class:`NonFiniteError` for the first copy with a NaN/Inf in ``values`` whose
    episode counts (a copy past its quota plays on only because the vector env steps all copies)."""
    bad = np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(axis=1) & counting)
    if len(bad):
        i = int(bad[0])
        raise _non_finite(key, i, len(values), step=int(length[i]), episode=int(count[i]) + 1)


def _non_finite(key: NestedKey, copy: int, num_envs: int, *, step: int, episode: int) -> NonFiniteError:
    return NonFiniteError(
        f"run_episodes: non-finite value (NaN or Inf) in key {format_key(key)!r} of evaluation env copy {copy} of "
        f"{num_envs} at step {step} of its episode {episode}"
    )


def _run_torch_episodes(env: TorchEnv, policy: Policy, num_episodes: int, seed: int | None) -> dict[str, torch.Tensor]:
    """:func:`run_episodes` on a torch env: the same quota per copy, counted with tensors on its device."""
    n, device = env.num_envs, env.device
    quota = torch.full((n,), num_episodes // n, dtype=torch.int64, device=device)
    quota[: num_episodes % n] += 1
    offset = quota.cumsum(0) - quota
    count = torch.zeros(n, dtype=torch.int64, device=device)
    returns = torch.zeros(num_episodes, dtype=torch.float32, device=device)
    lengths = torch.zeros(num_episodes, dtype=torch.int64, device=device)
    ep_return = torch.zeros(n, dtype=torch.float32, device=device)
    ep_length = torch.zeros(n, dtype=torch.int64, device=device)
    remaining = num_episodes
    with torch.no_grad():
        env.reset(seed=seed)
        while remaining:
            td = TensorDict({"observation": env.observation}, batch_size=[n], device=device)
            out = policy(td)
            obs = td["observation"]
            _, reward, terminated, truncated = env.step((td if out is None else out)["action"])
            ep_return += reward
            ep_length += 1
            done = terminated | truncated
            counting = count < quota
            counted = done & counting
            bad_obs = ~torch.isfinite(obs).reshape(n, -1).all(dim=1) & counting
            bad_reward = ~torch.isfinite(reward) & counting
            any_counted, any_bad_obs, any_bad_reward = torch.stack(
                [counted.any(), bad_obs.any(), bad_reward.any()]).tolist()  # one host sync per step
            for key, bad, flagged in (("observation", bad_obs, any_bad_obs), (("next", "reward"), bad_reward,
                                                                                  any_bad_reward)):
                if flagged:
                    i = int(bad.nonzero()[0, 0])
                    raise _non_finite(key, i, n, step=int(ep_length[i]), episode=int(count[i]) + 1)
            if any_counted:  # evaluation, not the training hot path
                idx = counted.nonzero().squeeze(1)
                pos = offset[idx] + count[idx]
                returns[pos] = ep_return[idx]
                lengths[pos] = ep_length[idx]
                count[idx] += 1
                remaining -= len(idx)
            ep_return.masked_fill_(done, 0.0)
            ep_length.masked_fill_(done, 0)
    return {"return": returns.cpu(), "length": lengths.cpu()}
