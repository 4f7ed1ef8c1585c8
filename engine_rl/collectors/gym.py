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

import itertools
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.collectors.env_state import UnsupportedEnvState, get_env_state, set_env_state
from engine_rl.collectors.envs import VecEnvSpec, vec_env_spec
from engine_rl.keys import NestedKey, format_key, present_keys

__all__ = ["EnvError", "GymCollector", "GymStepper", "Policy", "policy_device"]

#: A policy reads ``"observation"`` from a TensorDict of batch ``[num_envs]`` and writes
#: ``"action"`` (and optionally more entries) into it, returning it (or ``None``).
Policy = Callable[[TensorDictBase], TensorDictBase | None]

_NEXT = "next"
#: Staging entries filled from the env (numpy on the hot path), with their dtypes.
_ENV_KEYS: dict[NestedKey, torch.dtype] = {
    "observation": torch.float32,
    (_NEXT, "observation"): torch.float32,
    (_NEXT, "reward"): torch.float32,
    (_NEXT, "terminated"): torch.bool,
    (_NEXT, "truncated"): torch.bool,
    (_NEXT, "done"): torch.bool,
    (_NEXT, "episode_return"): torch.float32,
    (_NEXT, "episode_length"): torch.int64,
}
_NUMPY_DTYPES = {
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.float32, torch.float64,
}


def _nest(flat: Mapping[NestedKey, Any]) -> dict[str, Any]:
    """``{("next", "reward"): x, "action": y}`` -> ``{"next": {"reward": x}, "action": y}``."""
    root: dict[str, Any] = {}
    for key, value in flat.items():
        parts = (key,) if isinstance(key, str) else key
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return root


def _flatten(nested: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> dict[NestedKey, Any]:
    """Inverse of :func:`_nest` (one-part keys come back as strings)."""
    flat: dict[NestedKey, Any] = {}
    for name, value in nested.items():
        key = (*prefix, name)
        if isinstance(value, Mapping):
            flat.update(_flatten(value, key))
        else:
            flat[key[0] if len(key) == 1 else key] = value
    return flat


class EnvError(RuntimeError):
    """An env raised while a collector or an evaluation stepped or reset it.

    The message names the component, the env copy (when it can be known: ``SyncVectorEnv`` and
    ``AsyncVectorEnv`` step copies one by one; a numpy-batched env steps them all at once) and the
    vector step; the env's own exception is the ``__cause__``.

    Attributes:
        env_index: the failing env copy, or ``None`` if unknown.
        step: the vector step (1-based, counted by the stepper since it was built or restored).
    """

    def __init__(self, message: str, *, env_index: int | None, step: int) -> None:
        super().__init__(message)
        self.env_index = env_index
        self.step = step


def _failed_env_index(env: Any, err: BaseException) -> int | None:
    """Which env copy raised: the loop index of ``SyncVectorEnv.step``/``reset`` in the traceback,
    or the worker whose pipe ``AsyncVectorEnv`` closed after the error."""
    from gymnasium.vector import SyncVectorEnv

    index = None
    tb = err.__traceback__
    while tb is not None:
        local = tb.tb_frame.f_locals
        if isinstance(local.get("self"), SyncVectorEnv) and isinstance(local.get("i"), int):
            index = local["i"]
        tb = tb.tb_next
    if index is None:
        pipes = getattr(getattr(env, "unwrapped", env), "parent_pipes", None)
        if isinstance(pipes, list):
            closed = [i for i, pipe in enumerate(pipes) if pipe is None]
            index = closed[0] if len(closed) == 1 else None
    return index


def policy_device(policy: Policy, device: torch.device | str | None = None) -> torch.device:
    """The device a policy's inputs go to: ``device`` if given, else its first parameter's.

    Examples:
        >>> policy_device(nn.Linear(2, 1)), policy_device(lambda td: td, "cpu")
        (device(type='cpu'), device(type='cpu'))
    """
    if device is not None:
        return torch.device(device)
    if isinstance(policy, nn.Module):
        for tensor in itertools.chain(policy.parameters(), policy.buffers()):
            return tensor.device
    return torch.device("cpu")


class GymStepper:
    """Steps a gymnasium vector env with a TensorDict policy into time-major staging rows.

    Each :meth:`step` writes one row ``[num_envs, ...]`` of every entry in :attr:`buffers`
    (``"observation"``, the policy's outputs, ``("next", ...)``) and a row of :attr:`valid`
    (False for next-step-autoreset reset steps, which are not transitions). Staging lives on
    the CPU as torch tensors; :attr:`arrays` holds numpy views of the same memory, which the hot
    path writes through (a numpy row write costs a fraction of a torch one). Call under
    ``torch.no_grad()``.

    Args:
        env: a gymnasium vector env (see :func:`~engine_rl.collectors.envs.vec_env_spec`).
        policy: see :data:`Policy`.
        rows: staging capacity (rows); :meth:`grow` enlarges it.
        device: the policy's device; ``None``: from its parameters (CPU if it has none).
        owner: the component named in error messages.

    Examples:
        >>> from engine_rl.collectors import make_vec_env
        >>> def left(td):
        ...     return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        >>> stepper = GymStepper(make_vec_env("CartPole-v1", num_envs=2), left, rows=3)
        >>> stepper.reset(seed=0)
        >>> for row in range(3):
        ...     stepper.step(row)
        >>> stepper.buffers["action"].shape, stepper.buffers[("next", "episode_length")][:, 0]
        (torch.Size([3, 2]), tensor([1, 2, 3]))
    """

    def __init__(
        self,
        env: VectorEnv,
        policy: Policy,
        *,
        rows: int = 1,
        device: torch.device | str | None = None,
        owner: str = "GymStepper",
    ) -> None:
        if not callable(policy):
            raise TypeError(f"{owner}: policy must be callable, got {type(policy).__name__}")
        self.owner = owner
        self.spec: VecEnvSpec = vec_env_spec(env, owner=owner)
        self.env = env
        self.policy = policy
        self.device = policy_device(policy, device)
        n = self.spec.num_envs
        self.next_step_autoreset = self.spec.autoreset_mode is AutoresetMode.NEXT_STEP
        self._policy_obs = torch.zeros((n, *self.spec.observation_shape), device=self.device)
        self._policy_obs_np = self._policy_obs.numpy() if self.device.type == "cpu" else None
        self._step_td = TensorDict({"observation": self._policy_obs}, batch_size=[n])
        #: Staging tensors ``[rows, num_envs, ...]`` by batch key (CPU).
        self.buffers: dict[NestedKey, torch.Tensor] = {}
        #: Numpy views of :attr:`buffers` (same memory).
        self.arrays: dict[NestedKey, np.ndarray] = {}
        #: Row validity ``[rows, num_envs]`` (a numpy bool array).
        self.valid = np.zeros((0, n), dtype=bool)
        self._policy_keys: list[NestedKey] | None = None
        self._policy_np: list[tuple[NestedKey, np.ndarray]] = []
        self._policy_torch: list[tuple[NestedKey, torch.Tensor]] = []
        self._ep_return = np.zeros(n, dtype=np.float64)
        self._ep_length = np.zeros(n, dtype=np.int64)
        self._prev_done = np.zeros(n, dtype=bool)
        self._obs: np.ndarray | None = None
        #: Done flags of the last :meth:`step`, numpy bool ``[num_envs]``.
        self.done = np.zeros(n, dtype=bool)
        #: Vector steps taken (since construction or the state loaded by :meth:`load_state_dict`).
        self.steps = 0
        self._pending_rows: dict[NestedKey, torch.Tensor] = {}  # restored policy rows, see load_state_dict
        self._alloc_env(max(int(rows), 1))

    @property
    def num_envs(self) -> int:
        """Number of env copies."""
        return self.spec.num_envs

    @property
    def rows(self) -> int:
        """Staging capacity in rows (vector steps)."""
        return self.valid.shape[0]

    def reset(self, seed: int | None = None) -> None:
        """Reset every env copy (``env.reset(seed=seed)``, copy ``i`` gets ``seed + i``) and the
        episode counters; with a seed, also seed the env's action and observation spaces (batched
        and single; otherwise gymnasium seeds them from OS entropy, which makes saved states differ
        between identical runs)."""
        try:
            obs, _ = self.env.reset(seed=seed)
        except Exception as err:
            raise self._env_error(err, f"env.reset(seed={seed})") from err
        if seed is not None:
            env = self.env
            for space in (env.action_space, env.single_action_space, env.observation_space, env.single_observation_space):
                space.seed(seed)
        self._obs = obs
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        self._prev_done[:] = False
        self.done[:] = False

    def step(self, row: int) -> None:
        """Run the policy and one vector env step, writing the results into staging ``row``."""
        obs = self._obs
        if obs is None:
            raise RuntimeError(f"{self.owner}: call reset() before step()")
        arrays = self.arrays
        arrays["observation"][row] = obs
        td = self._step_td
        if td.get("observation") is not self._policy_obs:  # the policy replaced it: put it back
            td.set("observation", self._policy_obs)
        if self._policy_obs_np is not None:
            self._policy_obs_np[...] = obs
        else:
            self._policy_obs.copy_(torch.from_numpy(arrays["observation"][row]))
        out = self.policy(td)
        if out is None:
            out = td
        if self._policy_keys is None:
            self._alloc_policy(out)
        for key, array in self._policy_np:
            array[row] = out.get(key).numpy()
        for key, buf in self._policy_torch:
            buf[row].copy_(out.get(key))
        try:
            next_obs, reward, terminated, truncated, info = self.env.step(self._action_np[row])
        except Exception as err:
            raise self._env_error(err, "env.step") from err
        self.steps += 1

        arrays[(_NEXT, "observation")][row] = next_obs
        arrays[(_NEXT, "reward")][row] = reward
        arrays[(_NEXT, "terminated")][row] = terminated
        arrays[(_NEXT, "truncated")][row] = truncated
        done = np.logical_or(terminated, truncated, out=arrays[(_NEXT, "done")][row])
        valid = self.valid[row]
        if self.next_step_autoreset:  # a step right after a done is a reset step, not a transition
            np.logical_not(self._prev_done, out=valid)
            self._ep_length += valid
            self._prev_done[...] = done
        else:
            valid[...] = True
            self._ep_length += 1
        self._ep_return += reward
        arrays[(_NEXT, "episode_return")][row] = self._ep_return
        arrays[(_NEXT, "episode_length")][row] = self._ep_length
        self.done[...] = done
        if done.any():
            if not self.next_step_autoreset:  # same-step: next_obs holds the reset observation
                idx = np.flatnonzero(done)
                arrays[(_NEXT, "observation")][row, idx] = np.stack(info["final_obs"][idx])
            self._ep_return[done] = 0.0
            self._ep_length[done] = 0
        self._obs = next_obs

    def _env_error(self, err: Exception, call: str) -> EnvError:
        index = _failed_env_index(self.env, err)
        step = self.steps + 1
        if index is None:
            where = f"the vector env ({type(self.env).__name__}; env index unknown: it steps all copies at once)"
        else:
            where = f"env {index} of {self.num_envs} (step {int(self._ep_length[index]) + 1} of its episode)"
        return EnvError(
            f"{self.owner}: {call} raised {type(err).__name__}: {err} -- in {where}, at vector step {step}",
            env_index=index, step=step,
        )

    def state_dict(self, rows: int = 0) -> dict[str, Any]:
        """Where the stepper stands: env state, current observations, episode counters, vector
        steps, and the first ``rows`` staging rows (frames carried over between batches).

        ``"env"`` is ``None`` (with the reason in ``"env_unsupported"``) when the env's state
        cannot be captured (see :mod:`engine_rl.collectors.env_state`). Only tensors, numbers,
        strings and plain containers.
        """
        try:
            env_state, unsupported = get_env_state(self.env), None
        except UnsupportedEnvState as err:
            env_state, unsupported = None, str(err)
        return {
            "env": env_state,
            "env_unsupported": unsupported,
            "obs": None if self._obs is None else torch.from_numpy(np.array(self._obs)),
            "episode_return": torch.from_numpy(self._ep_return.copy()),
            "episode_length": torch.from_numpy(self._ep_length.copy()),
            "prev_done": torch.from_numpy(self._prev_done.copy()),
            "done": torch.from_numpy(self.done.copy()),
            "steps": self.steps,
            "valid": torch.from_numpy(self.valid[:rows].copy()),
            "rows": _nest({key: buf[:rows].clone() for key, buf in self.buffers.items()}),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (env included) into a stepper over an env built the same way.

        Staging rows of the policy's outputs are written once the policy has run (their buffers
        are allocated at the first :meth:`step`)."""
        if state_dict["env"] is None:
            raise UnsupportedEnvState(f"{self.owner}.load_state_dict: no env state saved ({state_dict['env_unsupported']})")
        n = self.num_envs
        if tuple(state_dict["episode_return"].shape) != (n,):
            raise ValueError(
                f"{self.owner}.load_state_dict: the state is for {state_dict['episode_return'].shape[0]} env copies, "
                f"this env has {n}"
            )
        set_env_state(self.env, state_dict["env"])
        obs = state_dict["obs"]
        self._obs = None if obs is None else obs.numpy().copy()
        self._ep_return[:] = state_dict["episode_return"].numpy()
        self._ep_length[:] = state_dict["episode_length"].numpy()
        self._prev_done[:] = state_dict["prev_done"].numpy()
        self.done[:] = state_dict["done"].numpy()
        self.steps = int(state_dict["steps"])
        valid = state_dict["valid"].numpy()
        rows = valid.shape[0]
        self.grow(rows)
        self.valid[:rows] = valid
        self._pending_rows = {}
        for key, value in _flatten(state_dict["rows"]).items():
            if key in self.buffers:
                self.buffers[key][:rows].copy_(value)
            elif self._policy_keys is None:
                self._pending_rows[key] = value
            else:
                raise KeyError(
                    f"{self.owner}.load_state_dict: staging key {format_key(key)!r} is not one the policy writes "
                    f"({sorted(map(format_key, self._policy_keys))})"
                )

    def grow(self, rows: int) -> None:
        """Enlarge the staging to ``rows`` rows, keeping the content of the existing ones."""
        old = self.rows
        if rows <= old:
            return
        for key, buf in self.buffers.items():
            new = buf.new_zeros((rows, *buf.shape[1:]))
            new[:old] = buf
            self.buffers[key] = new
        valid = np.zeros((rows, self.num_envs), dtype=bool)
        valid[:old] = self.valid
        self.valid = valid
        self._refresh_views()

    def move_rows(self, start: int, stop: int, *, consumed: np.ndarray | None = None) -> None:
        """Copy staging rows ``start:stop`` to ``0:stop - start`` (frames kept for later),
        marking invalid the frames where ``consumed`` (``[stop - start, num_envs]``) is True."""
        kept = stop - start
        for array in self.arrays.values():
            array[:kept] = array[start:stop]  # numpy copes with the overlap
        self.valid[:kept] = self.valid[start:stop]
        if consumed is not None:
            self.valid[:kept] &= ~consumed

    def _alloc_env(self, rows: int) -> None:
        n, obs_shape = self.num_envs, self.spec.observation_shape
        for key, dtype in _ENV_KEYS.items():
            is_obs = key in ("observation", (_NEXT, "observation"))
            self.buffers[key] = torch.zeros((rows, n, *obs_shape) if is_obs else (rows, n), dtype=dtype)
        self.valid = np.zeros((rows, n), dtype=bool)
        self._refresh_views()

    def _alloc_policy(self, out: Any) -> None:
        if not isinstance(out, TensorDictBase):
            raise TypeError(
                f"{self.owner}: the policy must return a TensorDict (or None), got {type(out).__name__}"
            )
        if "action" not in out.keys():
            raise KeyError(
                f"{self.owner}: the policy must write 'action' into the TensorDict; "
                f"it holds {present_keys(out)}"
            )
        n, spec = self.num_envs, self.spec
        expected = (n, *spec.action_shape)
        action = out.get("action")
        if tuple(action.shape) != expected:
            raise ValueError(
                f"{self.owner}: the policy's 'action' must have shape {expected} "
                f"([num_envs, *action_shape]), got {tuple(action.shape)}"
            )
        keys: list[NestedKey] = ["action"]
        for key in out.keys(include_nested=True, leaves_only=True):
            if key in ("action", "observation") or key in _ENV_KEYS:
                continue
            if isinstance(out.get(key), torch.Tensor):
                keys.append(key)
        rows, fast = self.rows, []
        for key in keys:
            value = out.get(key)
            dtype = spec.action_dtype if key == "action" else value.dtype
            if dtype not in _NUMPY_DTYPES:  # e.g. bfloat16: stage as float32
                dtype = torch.float32 if dtype.is_floating_point else torch.int64
            self.buffers[key] = torch.zeros((rows, *value.shape), dtype=dtype)
            if value.device.type == "cpu" and value.dtype in _NUMPY_DTYPES:
                fast.append(key)
        self._policy_keys = keys
        self._numpy_writable = set(fast)
        if self._pending_rows:  # policy rows restored by load_state_dict, now that buffers exist
            if set(self._pending_rows) != set(keys):
                raise KeyError(
                    f"{self.owner}: the policy writes {sorted(map(format_key, keys))}, but the restored staging "
                    f"rows hold {sorted(map(format_key, self._pending_rows))}"
                )
            for key, value in self._pending_rows.items():
                self.buffers[key][: value.shape[0]].copy_(value)
            self._pending_rows = {}
        self._refresh_views()

    def _refresh_views(self) -> None:
        self.arrays = {key: buf.numpy() for key, buf in self.buffers.items()}
        if self._policy_keys is not None:
            fast = self._numpy_writable
            self._policy_np = [(k, self.arrays[k]) for k in self._policy_keys if k in fast]
            self._policy_torch = [(k, self.buffers[k]) for k in self._policy_keys if k not in fast]
            self._action_np = self.arrays["action"]


class GymCollector:
    """Collect ``[num_envs, T]`` TensorDict batches from a gymnasium vector env.

    Iterating yields batches forever (``T = frames_per_batch // num_envs``), each with
    ``"observation"`` (float32), ``"action"`` (int64 for Discrete, float32 for Box), whatever
    else the policy writes (``"log_prob"``, ``"state_value"``, ...) and ``("next", ...)``:
    ``"observation"``, ``"reward"`` (float32), ``"done"``, ``"terminated"``, ``"truncated"``
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
    ) -> None:
        self._stepper = GymStepper(env, policy, device=device, owner="GymCollector")
        n = self._stepper.num_envs
        if (
            isinstance(frames_per_batch, bool)
            or not isinstance(frames_per_batch, int)
            or frames_per_batch <= 0
            or frames_per_batch % n
        ):
            raise ValueError(
                f"GymCollector: frames_per_batch must be a positive multiple of num_envs={n}, "
                f"got {frames_per_batch!r}"
            )
        self.frames_per_batch = frames_per_batch
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

    @property
    def steps_per_batch(self) -> int:
        """``T``: frames per env row of a batch."""
        return self.frames_per_batch // self.num_envs

    def __iter__(self) -> Iterator[TensorDictBase]:
        while True:
            yield self.collect()

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

    def update_policy_weights_(
        self, weights: TensorDictBase | Mapping[str, torch.Tensor] | nn.Module | None = None
    ) -> None:
        """Copy weights into :attr:`policy` in place (across devices).

        Args:
            weights: ``TensorDict.from_module(learner_policy)``, a ``state_dict`` or an
                ``nn.Module`` with the policy's structure. ``None`` does nothing: use it when the
                collector's policy is the learner's module itself (same device), which already
                holds the newest weights.
        """
        if weights is None:
            return
        policy = self.policy
        if not isinstance(policy, nn.Module):
            raise TypeError(
                f"GymCollector.update_policy_weights_: the policy must be an nn.Module to receive "
                f"weights, got {type(policy).__name__}"
            )
        if isinstance(weights, nn.Module):
            weights = TensorDict.from_module(weights)
        with torch.no_grad():
            if isinstance(weights, TensorDictBase):
                dest = TensorDict.from_module(policy)
                got = {format_key(k) for k in weights.keys(include_nested=True, leaves_only=True)}
                want = {format_key(k) for k in dest.keys(include_nested=True, leaves_only=True)}
                if got != want:
                    raise KeyError(
                        "GymCollector.update_policy_weights_: the weights do not match the policy: "
                        f"missing {sorted(want - got)}, unexpected {sorted(got - want)}"
                    )
                dest.update_(weights)
            elif isinstance(weights, Mapping):
                policy.load_state_dict(weights)
            else:
                raise TypeError(
                    "GymCollector.update_policy_weights_: weights must be a TensorDict, a "
                    f"state_dict, an nn.Module or None, got {type(weights).__name__}"
                )

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
        For an env whose state cannot be captured (``AsyncVectorEnv``) it is ``None`` and a
        warning says that a loaded collector will start new episodes. Only tensors, numbers,
        strings and plain containers, so ``torch.load(..., weights_only=True)`` reads it.
        """
        state: dict[str, Any] = {
            "frames": self.frames, "batches": self.batches, "seed": self._seed,
            "reset_seed": self._reset_seed, "needs_reset": self._needs_reset, "stepper": None,
        }
        if not self._needs_reset:
            stepper = self._stepper.state_dict(rows=self._row)
            if stepper["env"] is None:
                if not self._warned:
                    warnings.warn(
                        f"GymCollector.state_dict: {stepper['env_unsupported']}; a collector loaded from this state "
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

    def shutdown(self) -> None:
        """Close the env."""
        self.env.close()

    def __enter__(self) -> GymCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
