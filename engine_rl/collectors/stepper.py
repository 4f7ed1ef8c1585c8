"""The one place where a policy meets a gymnasium vector env: :class:`GymStepper`.

It runs one vector step (policy call, ``env.step``, autoreset and episode bookkeeping) and
writes it into a row of preallocated, time-major staging tensors. :class:`~engine_rl.collectors.GymCollector`
stacks those rows into batches and :func:`~engine_rl.collectors.run_episodes` reads the same
steps to evaluate, so there is one rollout loop. See :mod:`engine_rl.collectors.gym` for the
autoreset rules.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from tensordict import TensorDict, TensorDictBase

from engine_rl.collectors.env_state import UnsupportedEnvState, get_env_state, seed_spaces, set_env_state
from engine_rl.collectors.errors import EnvError, failed_env_index
from engine_rl.collectors.gym_envs import VecEnvSpec, vec_env_spec
from engine_rl.collectors.info import INFO_KEY, InfoKeysSeen, check_info_keys, info_scalars
from engine_rl.collectors.memory import PolicyMemory
from engine_rl.collectors.observations import field_key, nest_paths, pick, stack_final
from engine_rl.collectors.policy import Policy, policy_device
from engine_rl.keys import (
    IS_INIT, NEXT_RECURRENT_STATE, RECURRENT_STATE, NestedKey, flatten_keys, format_key, nest_keys, present_keys,
    recurrent_state_shape,
)

__all__ = ["GymStepper"]

_NEXT = "next"
#: Staging entries filled from the env (numpy on the hot path), with their dtypes; besides these,
#: the observations: one entry per field of the spec (``"observation"``, or one per Dict key under it).
_ENV_KEYS: dict[NestedKey, torch.dtype] = {
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


class GymStepper:
    """Steps a gymnasium vector env with a TensorDict policy into time-major staging rows.

    Each :meth:`step` writes one row ``[num_envs, ...]`` of every entry in :attr:`buffers`
    (``"observation"`` or, for a Dict observation, one entry per key under it; the policy's
    outputs; ``("next", ...)``) and a row of :attr:`valid`
    (False for next-step-autoreset reset steps, which are not transitions). Staging lives on
    the CPU as torch tensors; :attr:`arrays` holds numpy views of the same memory, which the hot
    path writes through (a numpy row write costs a fraction of a torch one). Call under
    ``torch.no_grad()``.

    Args:
        env: a gymnasium vector env (see :func:`~engine_rl.collectors.gym_envs.vec_env_spec`).
        policy: see :data:`Policy`.
        rows: staging capacity (rows); :meth:`grow` enlarges it.
        device: the policy's device; ``None``: from its parameters (CPU if it has none).
        info_keys: scalar entries of the env's ``info`` to record, each under
            ``("next", "info", key)`` (float32, NaN where a copy did not report it; see
            :func:`~engine_rl.collectors.info.info_scalars`). A key that no step has reported by
            the end of the first episode gets an ``InfoKeyWarning`` naming it and the keys the
            info has (:class:`~engine_rl.collectors.info.InfoKeysSeen`).
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
        info_keys: Sequence[str] = (),
        owner: str = "GymStepper",
    ) -> None:
        if not callable(policy):
            raise TypeError(f"{owner}: policy must be callable, got {type(policy).__name__}")
        self.owner = owner
        self.info_keys = check_info_keys(info_keys, owner=owner)
        self._info_arrays: list[tuple[str, np.ndarray]] = []
        self._info_seen = InfoKeysSeen(self.info_keys, owner=owner)  # warns of a key never reported
        self.spec: VecEnvSpec = vec_env_spec(env, owner=owner)
        self.env = env
        self.policy = policy
        self.device = policy_device(policy, device)
        n = self.spec.num_envs
        self.next_step_autoreset = self.spec.autoreset_mode is AutoresetMode.NEXT_STEP
        # per observation field: (path, key, next key, the policy's input tensor, its numpy view on CPU)
        self._obs_slots: list[tuple[tuple[str, ...], NestedKey, NestedKey, torch.Tensor, np.ndarray | None]] = []
        self._step_td = TensorDict(batch_size=[n])
        for field in self.spec.observation_fields:
            policy_obs = torch.zeros((n, *field.shape), dtype=field.dtype, device=self.device)
            key = field_key(("observation",), field)
            self._step_td.set(key, policy_obs)
            self._obs_slots.append((field.path, key, field_key((_NEXT, "observation"), field), policy_obs,
                                    policy_obs.numpy() if self.device.type == "cpu" else None))
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
        shape = recurrent_state_shape(policy)
        #: A recurrent policy's carried state (:mod:`engine_rl.collectors.memory`); ``None`` for a feed-forward one.
        self.memory = None if shape is None else PolicyMemory(shape, num_envs=n, device=self.device)
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
        episode counters; with a seed, also seed the action and observation spaces of every layer
        (:func:`~engine_rl.collectors.env_state.seed_spaces`)."""
        try:
            obs, _ = self.env.reset(seed=seed)
        except Exception as err:
            raise self._env_error(err, f"env.reset(seed={seed})") from err
        if seed is not None:
            seed_spaces(self.env, seed)
        self._obs = obs
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        self._prev_done[:] = False
        self.done[:] = False
        if self.memory is not None:
            self.memory.reset()

    def step(self, row: int) -> None:
        """Run the policy and one vector env step, writing the results into staging ``row``."""
        obs = self._obs
        if obs is None:
            raise RuntimeError(f"{self.owner}: call reset() before step()")
        arrays, td = self.arrays, self._step_td
        for path, key, _, policy_obs, policy_obs_np in self._obs_slots:
            value = pick(obs, path)
            arrays[key][row] = value
            if td.get(key) is not policy_obs:  # the policy replaced it: put it back
                td.set(key, policy_obs)
            if policy_obs_np is not None:
                policy_obs_np[...] = value
            else:
                policy_obs.copy_(torch.from_numpy(arrays[key][row]))
        memory = self.memory
        if memory is not None:
            state, is_init = memory.inputs()
            td.set(RECURRENT_STATE, state)
            td.set(IS_INIT, is_init)
            arrays[RECURRENT_STATE][row] = state.cpu().numpy()
            arrays[IS_INIT][row] = memory.is_init
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

        for path, _, next_key, _, _ in self._obs_slots:
            arrays[next_key][row] = pick(next_obs, path)
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
        if memory is not None:  # the next observation starts an episode after a reset step (next-step) or a done
            memory.advance(out.get(NEXT_RECURRENT_STATE), episode_starts=~valid if self.next_step_autoreset else done)
        self._ep_return += reward
        arrays[(_NEXT, "episode_return")][row] = self._ep_return
        arrays[(_NEXT, "episode_length")][row] = self._ep_length
        self.done[...] = done
        for key, array in self._info_arrays:
            array[row] = info_scalars(info, key, num_envs=self.num_envs, done=done,
                                      same_step=not self.next_step_autoreset, owner=self.owner)
        if not self._info_seen.checked:
            self._info_seen.step(info, done)
        if done.any():
            if not self.next_step_autoreset:  # same-step: next_obs holds the reset observation
                idx = np.flatnonzero(done)
                final = info["final_obs"][idx]
                for path, _, next_key, _, _ in self._obs_slots:
                    arrays[next_key][row, idx] = stack_final(final, path)
            self._ep_return[done] = 0.0
            self._ep_length[done] = 0
        self._obs = next_obs

    def _env_error(self, err: Exception, call: str) -> EnvError:
        index = failed_env_index(self.env, err)
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
            "obs": None if self._obs is None else nest_paths(
                {path: torch.from_numpy(np.array(pick(self._obs, path))) for path, *_ in self._obs_slots}),
            "episode_return": torch.from_numpy(self._ep_return.copy()),
            "episode_length": torch.from_numpy(self._ep_length.copy()),
            "prev_done": torch.from_numpy(self._prev_done.copy()),
            "done": torch.from_numpy(self.done.copy()),
            "steps": self.steps,
            "valid": torch.from_numpy(self.valid[:rows].copy()),
            "rows": nest_keys({key: buf[:rows].clone() for key, buf in self.buffers.items()}),
            "memory": None if self.memory is None else self.memory.state_dict(),
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
        memory = state_dict.get("memory")
        if (memory is None) != (self.memory is None):
            raise ValueError(
                f"{self.owner}.load_state_dict: the state is from a {'feed-forward' if memory is None else 'recurrent'} "
                f"policy, this one is {'feed-forward' if self.memory is None else 'recurrent'}"
            )
        set_env_state(self.env, state_dict["env"])
        obs = state_dict["obs"]
        self._obs = None if obs is None else nest_paths(
            {path: pick(obs, path).numpy().copy() for path, *_ in self._obs_slots})
        self._ep_return[:] = state_dict["episode_return"].numpy()
        self._ep_length[:] = state_dict["episode_length"].numpy()
        self._prev_done[:] = state_dict["prev_done"].numpy()
        self.done[:] = state_dict["done"].numpy()
        self.steps = int(state_dict["steps"])
        if self.memory is not None:
            self.memory.load_state_dict(memory)
        valid = state_dict["valid"].numpy()
        rows = valid.shape[0]
        self.grow(rows)
        self.valid[:rows] = valid
        self._pending_rows = {}
        for path, value in flatten_keys(state_dict["rows"]).items():
            key = path[0] if len(path) == 1 else path
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
        n = self.num_envs
        for field, (_, key, next_key, _, _) in zip(self.spec.observation_fields, self._obs_slots, strict=True):
            for k in (key, next_key):  # (uint8 pixels stay uint8)
                self.buffers[k] = torch.zeros((rows, n, *field.shape), dtype=field.dtype)
        for key, dtype in _ENV_KEYS.items():
            self.buffers[key] = torch.zeros((rows, n), dtype=dtype)
        for key in self.info_keys:
            self.buffers[(*INFO_KEY, key)] = torch.full((rows, n), float("nan"))
        if self.memory is not None:
            self.buffers[RECURRENT_STATE] = torch.zeros((rows, n, *self.memory.shape))
            self.buffers[IS_INIT] = torch.zeros((rows, n), dtype=torch.bool)
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
        if self.memory is not None and NEXT_RECURRENT_STATE not in out.keys(include_nested=True):
            raise KeyError(
                f"{self.owner}: a recurrent policy (it has recurrent_state_shape) must write its state after the step "
                f"under {NEXT_RECURRENT_STATE!r}; it wrote {present_keys(out)}"
            )
        keys: list[NestedKey] = ["action"]
        for key in out.keys(include_nested=True, leaves_only=True):
            top = key if isinstance(key, str) else key[0]
            if key in ("action", NEXT_RECURRENT_STATE) or key in self.buffers or top == "observation":
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
        self._info_arrays = [(key, self.arrays[(*INFO_KEY, key)]) for key in self.info_keys]
        if self._policy_keys is not None:
            fast = self._numpy_writable
            self._policy_np = [(k, self.arrays[k]) for k in self._policy_keys if k in fast]
            self._policy_torch = [(k, self.buffers[k]) for k in self._policy_keys if k not in fast]
            self._action_np = self.arrays["action"]
