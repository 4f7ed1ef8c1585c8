"""Gymnasium vector envs -> TensorDict batches.

:class:`GymStepper` is the one place where a policy meets an env: it runs one vector step
(policy call, ``env.step``, autoreset and episode bookkeeping) and writes it into a row of
preallocated, time-major staging tensors. :class:`GymCollector` stacks those rows into
``[num_envs, T]`` batches; :func:`engine_rl.collectors.run_episodes` reads the same steps to
evaluate. Nothing builds a TensorDict per step: the policy gets one reused step TensorDict
whose ``"observation"`` is updated in place, and a batch is wrapped once.

Autoreset. With next-step autoreset (gymnasium's default; the only mode of numpy-vectorized
envs such as CartPole's) the step after a done is a reset step whose action is ignored: it is
not a transition. The stepper marks it invalid and the collector skips it, so every frame of a
batch is a real transition and ``("next", "observation")`` after a truncation is the true final
observation. Each env row of a batch holds that env's next ``T`` valid frames, contiguous in
time; frames an env collected beyond its ``T`` (while waiting for envs that had resets) are
kept for the next batch. Batches therefore carry no mask: every one of the
``frames_per_batch`` frames is valid.
"""


from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium.vector import VectorEnv
from tensordict import TensorDict, TensorDictBase
from torch import nn  # noqa: F401  (the docstring example uses it)

from engine_rl.checks import fail, is_int
from engine_rl.collectors.env_state import unsupported_reason
from engine_rl.collectors.errors import EnvError
from engine_rl.collectors.policy import Policy, policy_device
from engine_rl.collectors.stepper import GymStepper
from engine_rl.collectors.base import BatchCollector
from engine_rl.keys import NestedKey

__all__ = ["EnvError", "GymCollector", "GymStepper", "Policy", "policy_device"]


class GymCollector(BatchCollector):
    """Collect ``[num_envs, T]`` TensorDict batches from a gymnasium vector env.

    Iterating yields batches forever (``T = frames_per_batch // num_envs``), each with
    ``"observation"`` (float32; uint8 for images; int64 for Discrete; for a Dict observation a
    nested TensorDict, one entry per key: :mod:`engine_rl.collectors.observations`), ``"action"``
    (int64 for Discrete, float32 for Box), whatever else the policy writes (``"log_prob"``,
    ``"state_value"``, ...) and ``("next", ...)``: ``"observation"``, ``"reward"`` (float32), ``"done"``, ``"terminated"``, ``"truncated"``
    (bool), ``"episode_return"`` (float32) and ``"episode_length"`` (int64), the running totals
    including this step (the finished episode's at ``done``). Reward and flags have shape
    ``[num_envs, T]``. Every frame is a valid transition (no mask; see the module docstring), and
    each env row is contiguous in time, so returns and advantages can be computed along dim 1.
    The policy runs under ``torch.no_grad()`` on every env copy at every vector step, including
    next-step-autoreset reset steps (whose actions the env ignores and which are not stored); it
    should write the same keys at every call. Batches are built on the CPU and moved to
    ``storing_device``; the policy's ``"observation"`` is on ``device``.

    Args:
        env: a gymnasium vector env, e.g. from :func:`~engine_rl.collectors.make_vec_env`.
        policy: a callable (usually an ``nn.Module``) that reads ``"observation"`` from a
            TensorDict of batch ``[num_envs]`` and writes ``"action"`` into it.
        frames_per_batch: frames per batch, a positive multiple of ``env.num_envs``.
        device: where the policy's inputs go; ``None``: the policy's parameters' device.
        storing_device: where batches are returned.
        seed: seed for the first reset (``None``: unseeded).
        info_keys: scalar entries of the env's ``info`` to record per frame under
            ``("next", "info", key)`` (NaN where not reported); :class:`handlers.EpisodeStats`
            averages them over the episodes that finish in a batch.

    Examples:
        >>> from engine_rl.collectors import make_vec_env
        >>> class Left(nn.Module):
        ...     def forward(self, td):
        ...         return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        >>> with GymCollector(make_vec_env("CartPole-v1", 4), Left(), frames_per_batch=40, seed=0) as c:
        ...     batch = next(iter(c))
        >>> batch.batch_size, batch["action"].dtype, batch["next", "reward"].shape, c.frames
        (torch.Size([4, 10]), torch.int64, torch.Size([4, 10]), 40)
    """

    def __init__(
        self,
        env: VectorEnv,
        policy: Policy,
        *,
        frames_per_batch: int = 256,
        device: torch.device | str | None = None,
        storing_device: torch.device | str = "cpu",
        seed: int | None = None,
        info_keys: Sequence[str] = (),
    ) -> None:
        self._stepper = GymStepper(env, policy, device=device, info_keys=info_keys, owner="GymCollector")
        n = self._stepper.num_envs
        if not (is_int(frames_per_batch) and frames_per_batch > 0 and frames_per_batch % n == 0):
            fail(frames_per_batch, f"a positive multiple of num_envs={n}", name="frames_per_batch",
                 owner="GymCollector")
        self.frames_per_batch = int(frames_per_batch)
        self.storing_device = torch.device(storing_device)
        self.frames = 0
        self.batches = 0
        self._seed = seed
        self._reset_seed: int | None = seed
        self._needs_reset = True
        self._warned = False
        self._row = 0  # staging rows in use (carried-over frames first)
        self._env_index = np.arange(n)[:, None]
        t = frames_per_batch // n
        self._stepper.grow(t + (max(4, t // 4) if self._stepper.next_step_autoreset else 0))

    @property
    def env(self) -> VectorEnv:
        """The vector env."""
        return self._stepper.env

    @property
    def policy(self) -> Policy:
        """The policy that acts (the one :meth:`update_policy_weights_` writes into)."""
        return self._stepper.policy

    @property
    def device(self) -> torch.device:
        """The device of the policy's inputs."""
        return self._stepper.device

    @property
    def num_envs(self) -> int:
        """Number of env copies."""
        return self._stepper.num_envs

    def collect(self) -> TensorDictBase:
        """Collect and return one batch (what iterating yields)."""
        stepper, t = self._stepper, self.steps_per_batch
        with torch.no_grad():
            if self._needs_reset:
                stepper.reset(seed=self._reset_seed)
                self._needs_reset = False
                self._row = 0
            while True:
                # a step adds at most one valid frame per env: step exactly the shortfall
                need = t - int(stepper.valid[: self._row].sum(0).min()) if self._row else t
                if need <= 0:
                    break
                if self._row + need > stepper.rows:
                    stepper.grow(max(self._row + need, 2 * stepper.rows))
                for _ in range(need):
                    stepper.step(self._row)
                    self._row += 1
            batch = self._take(t)
        self.frames += self.frames_per_batch
        self.batches += 1
        if self.storing_device.type != "cpu":
            batch = batch.to(self.storing_device)
        return batch

    def _take(self, t: int) -> TensorDictBase:
        """Gather each env's first ``t`` valid staged frames into a batch; keep the rest."""
        stepper, rows, n = self._stepper, self._row, self.num_envs
        valid = stepper.valid[:rows]
        entries: dict[NestedKey, torch.Tensor] = {}
        if rows == t and valid.all():  # no reset step in the window: a plain transpose
            for key, array in stepper.arrays.items():
                entries[key] = torch.from_numpy(array[:t].swapaxes(0, 1).copy())
            self._row = 0
        else:
            take = valid & (np.cumsum(valid, 0) <= t)
            steps = np.nonzero(take.T)[1].reshape(n, t)  # [num_envs, t] staging rows
            envs = self._env_index
            for key, array in stepper.arrays.items():
                entries[key] = torch.from_numpy(array[steps, envs])
            last = steps[:, -1]
            start = int(last.min()) + 1
            if start < rows:  # frames some envs collected past their t-th open the next batch
                consumed = np.arange(start, rows)[:, None] <= last
                stepper.move_rows(start, rows, consumed=consumed)
            self._row = rows - start
        batch = TensorDict(batch_size=[n, t])
        for key, value in entries.items():
            batch.set(key, value)
        return batch

    def set_seed(self, seed: int | None) -> None:
        """Reset every env with ``seed`` before the next batch (copy ``i`` gets ``seed + i``),
        dropping frames carried over from the previous batch."""
        self._seed = seed
        self._reset_seed = seed
        self._needs_reset = True

    def state_dict(self) -> dict[str, Any]:
        """Counters, seed, and where the envs stand, so a loaded collector continues exactly.

        ``"stepper"`` holds the env state (see :mod:`engine_rl.collectors.env_state`), the
        current observations, episode counters and the frames carried over to the next batch.
        For an env whose state cannot be captured (``AsyncVectorEnv``, EnvPool) it is ``None``,
        ``"env_unsupported"`` says why, and a warning says that a loaded collector will start new
        episodes. Only tensors, numbers, strings and plain containers, so
        ``torch.load(..., weights_only=True)`` reads it.
        """
        state: dict[str, Any] = {
            "frames": self.frames, "batches": self.batches, "seed": self._seed,
            "reset_seed": self._reset_seed, "needs_reset": self._needs_reset, "stepper": None,
        }
        if not self._needs_reset:
            stepper = self._stepper.state_dict(rows=self._row)
            if stepper["env"] is None:
                state["env_unsupported"] = unsupported_reason(self.env) or stepper["env_unsupported"]
                if not self._warned:
                    warnings.warn(
                        f"GymCollector.state_dict: {state['env_unsupported']}; a collector loaded from this state "
                        "starts new episodes (not an exact resume)",
                        stacklevel=2,
                    )
                    self._warned = True
            else:
                state["stepper"] = stepper
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` into a collector built the same way (env, policy, frames_per_batch).

        With a saved env state, the next batch continues the saved episodes exactly. Without one
        (a state from an ``AsyncVectorEnv``, or the older ``{"frames", "batches", "seed"}``
        form) the envs are reset before the next batch, reseeded from ``(seed, batches)`` so old
        episodes are not replayed.
        """
        missing = {"frames", "batches", "seed"} - set(state_dict)
        if missing:
            raise KeyError(f"GymCollector.load_state_dict: missing key(s) {sorted(missing)}")
        self.frames = int(state_dict["frames"])
        self.batches = int(state_dict["batches"])
        seed = state_dict["seed"]
        self._seed = None if seed is None else int(seed)
        stepper = state_dict.get("stepper")
        if stepper is not None:
            self._stepper.load_state_dict(stepper)
            self._row = int(stepper["valid"].shape[0])
            self._reset_seed = state_dict["reset_seed"]
            self._needs_reset = False
            return
        if "needs_reset" in state_dict and state_dict["needs_reset"]:
            self._reset_seed = state_dict["reset_seed"]  # saved before the first batch
        elif self._seed is not None and self.batches:
            seq = np.random.SeedSequence([self._seed, self.batches])
            self._reset_seed = int(seq.generate_state(1, dtype=np.uint32)[0])
        else:
            self._reset_seed = self._seed
        self._needs_reset = True
