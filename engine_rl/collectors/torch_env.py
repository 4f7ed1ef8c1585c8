"""Batched torch envs -> TensorDict batches, on the env's device.

:class:`TorchEnvCollector` is :class:`~engine_rl.collectors.GymCollector`'s counterpart for a
:class:`~engine_rl.envs.TorchEnv`: the same batch keys, dtypes and ``[num_envs, T]`` layout,
but every tensor stays on the env's device. A batch's tensors are allocated once, when the
batch starts, and each vector step writes its column ``[:, t]`` of them: a fixed number of
tensor ops per step whatever ``num_envs`` is, no numpy, no Python loop over envs and no host
sync (on a GPU the whole rollout is queued kernels).

Episode totals (``("next", "episode_return")``/``"episode_length"``) are computed once per
batch from the rewards and done flags (cumulative sums restarted at each done), not per step.

Torch envs autoreset on the same step and return the true final observation (see
:mod:`engine_rl.envs.base`), so every step of every env is a transition: no reset steps to
skip, no mask, and ``("next", "observation")`` at a done is the episode's last observation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.checks import fail, is_int
from engine_rl.collectors.policy import Policy, policy_device
from engine_rl.collectors.base import BatchCollector
from engine_rl.envs.base import TorchEnv
from engine_rl.keys import NestedKey, format_key, present_keys, refuse_recurrent

__all__ = ["TorchEnvCollector"]

_NEXT = "next"


class TorchEnvCollector(BatchCollector):
    """Collect ``[num_envs, T]`` TensorDict batches from a batched torch env.

    Iterating yields batches forever (``T = frames_per_batch // num_envs``) with the keys of
    :class:`~engine_rl.collectors.GymCollector`: ``"observation"`` (float32), ``"action"`` (the
    action spec's dtype: int64 or float32), whatever else the policy writes, and ``("next",
    ...)``: ``"observation"``, ``"reward"`` (float32), ``"done"``, ``"terminated"``,
    ``"truncated"`` (bool), ``"episode_return"`` (float32) and ``"episode_length"`` (int64),
    running totals including this step (the finished episode's at ``done``). Every frame is a
    valid transition and each env row is contiguous in time. The policy runs under
    ``torch.no_grad()`` on the env's device and should write the same keys at every call; the
    action it writes is stored in the action spec's dtype and that stored action is what the
    env executes. All batch tensors are on ``env.device``.

    Args:
        env: a :class:`~engine_rl.envs.TorchEnv`.
        policy: a callable (usually an ``nn.Module`` on ``env.device``) that reads
            ``"observation"`` from a TensorDict of batch ``[num_envs]`` and writes ``"action"``.
        frames_per_batch: frames per batch, a positive multiple of ``env.num_envs``.
        seed: seed of the first reset (``None``: see :meth:`TorchEnv.reset`).

    Examples:
        >>> from engine_rl.envs import CartPole
        >>> class Left(nn.Module):
        ...     def forward(self, td):
        ...         return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        >>> with TorchEnvCollector(CartPole(4), Left(), frames_per_batch=40, seed=0) as c:
        ...     batch = next(iter(c))
        >>> batch.batch_size, batch["action"].dtype, batch["next", "reward"].shape, c.frames
        (torch.Size([4, 10]), torch.int64, torch.Size([4, 10]), 40)
        >>> bool(batch["next", "done"].any()), batch.device
        (True, device(type='cpu'))
    """

    def __init__(self, env: TorchEnv, policy: Policy, *, frames_per_batch: int, seed: int | None = None) -> None:
        if not isinstance(env, TorchEnv):
            raise TypeError(f"TorchEnvCollector: env must be an engine_rl.envs.TorchEnv, got {type(env).__name__}")
        if not callable(policy):
            raise TypeError(f"TorchEnvCollector: policy must be callable, got {type(policy).__name__}")
        refuse_recurrent(policy, owner="TorchEnvCollector", use="collect with GymCollector (env_backend 'gymnasium')")
        pdev = policy_device(policy)
        if isinstance(policy, nn.Module) and any(True for _ in policy.parameters()) and pdev != env.device:
            raise ValueError(
                f"TorchEnvCollector: the policy's parameters are on {pdev} but the env steps on {env.device}; "
                "move the policy to the env's device"
            )
        n = env.num_envs
        if not (is_int(frames_per_batch) and frames_per_batch > 0 and frames_per_batch % n == 0):
            fail(frames_per_batch, f"a positive multiple of num_envs={n}", name="frames_per_batch",
                 owner="TorchEnvCollector")
        self._env = env
        self._policy = policy
        self.frames_per_batch = int(frames_per_batch)
        self.frames = 0
        self.batches = 0
        self._seed = seed
        self._needs_reset = True
        device = env.device
        self._policy_obs = torch.zeros((n, *env.observation_spec.shape), device=device)
        self._step_td = TensorDict({"observation": self._policy_obs}, batch_size=[n], device=device)
        acc = torch.float32 if device.type == "mps" else torch.float64
        self._ep_return = torch.zeros(n, dtype=acc, device=device)
        self._ep_length = torch.zeros(n, dtype=torch.int64, device=device)
        #: ``(key, shape per env, dtype)`` of what the policy writes (set at its first call).
        self._policy_entries: list[tuple[NestedKey, tuple[int, ...], torch.dtype]] | None = None

    @property
    def env(self) -> TorchEnv:
        """The batched env."""
        return self._env

    @property
    def policy(self) -> Policy:
        """The policy that acts (the one :meth:`update_policy_weights_` writes into)."""
        return self._policy

    @property
    def device(self) -> torch.device:
        """The env's device: where the policy's inputs and the batches are."""
        return self._env.device

    @property
    def num_envs(self) -> int:
        """Number of env copies."""
        return self._env.num_envs

    def collect(self) -> TensorDictBase:
        """Collect and return one batch (what iterating yields)."""
        env, n, t = self._env, self.num_envs, self.steps_per_batch
        device, obs_shape = env.device, env.observation_spec.shape
        with torch.no_grad():
            if self._needs_reset:
                env.reset(seed=self._seed)
                self._ep_return.zero_()
                self._ep_length.zero_()
                self._needs_reset = False
            obs = torch.empty((n, t, *obs_shape), device=device)
            next_obs = torch.empty((n, t, *obs_shape), device=device)
            reward = torch.empty((n, t), device=device)
            flags = torch.empty((3, n, t), dtype=torch.bool, device=device)  # terminated, truncated, done
            # per-step views, made in one call per tensor: writing step i is then one copy_
            columns = [x.unbind(1) for x in (obs, next_obs, reward, flags[0], flags[1], flags[2])]
            obs_at, next_obs_at, reward_at, terminated_at, truncated_at, done_at = columns
            policy_at: list[tuple[torch.Tensor, ...]] = []
            for i in range(t):
                observation = env.observation
                obs_at[i].copy_(observation)
                out = self._act(observation)
                if i == 0:
                    policy_bufs = self._alloc_policy(out, t)
                    policy_at = [buf.unbind(1) for _, buf in policy_bufs]
                for (key, _), at in zip(policy_bufs, policy_at):
                    at[i].copy_(out.get(key))
                step_next, step_reward, terminated, truncated = env.step(policy_at[0][i])
                next_obs_at[i].copy_(step_next)
                reward_at[i].copy_(step_reward)
                terminated_at[i].copy_(terminated)
                truncated_at[i].copy_(truncated)
                torch.logical_or(terminated, truncated, out=done_at[i])
            ep_return, ep_length = self._episode_totals(reward, flags[2])
        batch = TensorDict(
            {
                "observation": obs,
                _NEXT: TensorDict(
                    {
                        "observation": next_obs,
                        "reward": reward,
                        "terminated": flags[0],
                        "truncated": flags[1],
                        "done": flags[2],
                        "episode_return": ep_return,
                        "episode_length": ep_length,
                    },
                    batch_size=[n, t],
                    device=device,
                ),
            },
            batch_size=[n, t],
            device=device,
        )
        for key, buf in policy_bufs:
            batch.set(key, buf)
        self.frames += self.frames_per_batch
        self.batches += 1
        return batch

    def _episode_totals(self, reward: torch.Tensor, done: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Running episode return and length at every step of a batch, ``[num_envs, T]`` each,
        from the totals carried in; updates the carried totals. A few ops per batch instead of
        a few per step: step ``t`` belongs to the episode that started after the last done
        before it, and its totals are sums since then (plus the carried ones if none)."""
        n, t = reward.shape
        steps = torch.arange(1, t + 1, device=reward.device)  # steps[t] = t + 1
        # start[:, t]: number of steps of this batch before the current episode began
        after_done = torch.zeros_like(done)
        after_done[:, 1:] = done[:, :-1]
        start = torch.where(after_done, steps - 1, 0).cummax(1).values
        fresh = start > 0  # the episode began inside this batch
        length = steps - start
        length += torch.where(fresh, 0, self._ep_length[:, None])
        csum = torch.zeros((n, t + 1), dtype=self._ep_return.dtype, device=reward.device)
        torch.cumsum(reward, 1, dtype=csum.dtype, out=csum[:, 1:])
        ret = csum[:, 1:] - csum.gather(1, start)
        ret += torch.where(fresh, 0.0, self._ep_return[:, None])
        ongoing = ~done[:, -1]
        self._ep_return.copy_(ret[:, -1] * ongoing)
        self._ep_length.copy_(length[:, -1] * ongoing)
        return ret.to(torch.float32), length

    def _act(self, observation: torch.Tensor) -> TensorDictBase:
        """Run the policy on ``observation``; return the TensorDict it wrote."""
        td = self._step_td
        if td.get("observation") is not self._policy_obs:  # the policy replaced it: put it back
            td.set("observation", self._policy_obs)
        self._policy_obs.copy_(observation)
        out = self._policy(td)
        return td if out is None else out

    def _alloc_policy(self, out: Any, t: int) -> list[tuple[NestedKey, torch.Tensor]]:
        """This batch's tensors for the policy's outputs (``"action"`` first); check them once."""
        if self._policy_entries is None:
            self._policy_entries = self._policy_spec(out)
        n, device = self.num_envs, self.device
        bufs = []
        for key, shape, dtype in self._policy_entries:
            if out.get(key) is None:
                raise KeyError(
                    f"TorchEnvCollector: the policy stopped writing {format_key(key)!r}; it holds {present_keys(out)}"
                )
            bufs.append((key, torch.empty((n, t, *shape), dtype=dtype, device=device)))
        return bufs

    def _policy_spec(self, out: Any) -> list[tuple[NestedKey, tuple[int, ...], torch.dtype]]:
        if not isinstance(out, TensorDictBase):
            raise TypeError(
                f"TorchEnvCollector: the policy must return a TensorDict (or None), got {type(out).__name__}"
            )
        if "action" not in out.keys():
            raise KeyError(
                f"TorchEnvCollector: the policy must write 'action' into the TensorDict; it holds {present_keys(out)}"
            )
        spec = self._env.action_spec
        expected = (self.num_envs, *spec.shape)
        action = out.get("action")
        if tuple(action.shape) != expected:
            raise ValueError(
                f"TorchEnvCollector: the policy's 'action' must have shape {expected} "
                f"([num_envs, *action_shape]), got {tuple(action.shape)}"
            )
        if spec.discrete and action.dtype.is_floating_point:
            raise ValueError(
                f"TorchEnvCollector: the env's actions are discrete (int64 indices), the policy wrote {action.dtype}"
            )
        entries = [("action", tuple(spec.shape), spec.dtype)]
        for key in out.keys(include_nested=True, leaves_only=True):
            if key in ("action", "observation") or (isinstance(key, tuple) and key[0] == _NEXT):
                continue
            value = out.get(key)
            if isinstance(value, torch.Tensor):
                entries.append((key, tuple(value.shape[1:]), value.dtype))
        return entries

    def set_seed(self, seed: int | None) -> None:
        """Reset every env with ``seed`` before the next batch (see :meth:`TorchEnv.reset`)."""
        self._seed = seed
        self._needs_reset = True

    def state_dict(self) -> dict[str, Any]:
        """Counters, seed, the env's state and the running episode totals (tensors on the CPU):
        a loaded collector continues the same episodes exactly."""
        return {
            "frames": self.frames,
            "batches": self.batches,
            "seed": self._seed,
            "needs_reset": self._needs_reset,
            "env": self._env.state_dict(),
            "episode_return": self._ep_return.to("cpu", copy=True),
            "episode_length": self._ep_length.to("cpu", copy=True),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (into a collector over an env of the same kind and size)."""
        keys = {"frames", "batches", "seed", "needs_reset", "env", "episode_return", "episode_length"}
        missing = keys - set(state_dict)
        if missing:
            raise KeyError(f"TorchEnvCollector.load_state_dict: missing key(s) {sorted(missing)}")
        for name, dest in (("episode_return", self._ep_return), ("episode_length", self._ep_length)):
            value = state_dict[name]
            if not isinstance(value, torch.Tensor) or value.shape != dest.shape:
                got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(
                    f"TorchEnvCollector.load_state_dict: {name!r} must be a tensor of shape "
                    f"{tuple(dest.shape)}, got {got}"
                )
        self._env.load_state_dict(state_dict["env"])
        self._ep_return.copy_(state_dict["episode_return"])
        self._ep_length.copy_(state_dict["episode_length"])
        self.frames = int(state_dict["frames"])
        self.batches = int(state_dict["batches"])
        seed = state_dict["seed"]
        self._seed = None if seed is None else int(seed)
        self._needs_reset = bool(state_dict["needs_reset"])
