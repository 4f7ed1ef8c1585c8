"""Evaluation rollouts: run whole episodes with a policy on a vector env (same steps as the
collector) or on a batched torch env (:class:`~engine_rl.envs.TorchEnv`, stepped on its device)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from gymnasium.vector import VectorEnv
from tensordict import TensorDict

from engine_rl.collectors.info import INFO_KEY
from engine_rl.collectors.policy import Policy
from engine_rl.collectors.stepper import GymStepper
from engine_rl.envs.base import TorchEnv

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

    Examples:
        >>> from engine_rl.collectors import make_vec_env
        >>> def left(td):
        ...     return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        >>> res = run_episodes(make_vec_env("CartPole-v1", 2), left, num_episodes=3, seed=0)
        >>> res["return"].shape, res["length"].dtype, bool((res["return"] == res["length"]).all())
        (torch.Size([3]), torch.int64, True)
    """
    if isinstance(num_episodes, bool) or not isinstance(num_episodes, int) or num_episodes < 1:
        raise ValueError(f"run_episodes: num_episodes must be a positive int, got {num_episodes!r}")
    if isinstance(env, TorchEnv):
        if info_keys:
            raise ValueError(f"run_episodes: info_keys {tuple(info_keys)} need a gymnasium env; a TorchEnv reports no info")
        return _run_torch_episodes(env, policy, num_episodes, seed)
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
    remaining = num_episodes
    with torch.no_grad():
        stepper.reset(seed=seed)
        while remaining:
            stepper.step(0)
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
            _, reward, terminated, truncated = env.step((td if out is None else out)["action"])
            ep_return += reward
            ep_length += 1
            done = terminated | truncated
            counted = done & (count < quota)
            if counted.any():  # one host sync per step: evaluation, not the training hot path
                idx = counted.nonzero().squeeze(1)
                pos = offset[idx] + count[idx]
                returns[pos] = ep_return[idx]
                lengths[pos] = ep_length[idx]
                count[idx] += 1
                remaining -= len(idx)
            ep_return.masked_fill_(done, 0.0)
            ep_length.masked_fill_(done, 0)
    return {"return": returns.cpu(), "length": lengths.cpu()}
