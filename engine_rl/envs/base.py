"""The batched torch env interface: ``[num_envs]`` tensors in and out, on any device.

A :class:`TorchEnv` holds the state of ``num_envs`` env copies in one tensor and steps them all
with tensor ops: no numpy round trip, no Python loop over envs, no host sync on GPUs.

Autoreset (same step, final observation kept). :meth:`TorchEnv.step` returns the TRUE next
observation of every copy, including the final observation of an episode that just terminated
or was truncated; copies that are done are then reset inside the same call, and
:attr:`TorchEnv.observation` holds the observation to act on next (the reset observation where
done, the returned next observation elsewhere). So every step is a real transition
``(observation, action) -> next_observation`` and no transition spans a reset::

    obs = env.reset(seed=0)
    for _ in range(steps):
        action = policy(obs)
        next_obs, reward, terminated, truncated = env.step(action)  # next_obs: true successor
        obs = env.observation                                         # reset where done

Randomness (reset states) comes from per-env streams (:class:`~engine_rl.envs.rng.CounterRNG`):
env ``i``'s resets depend only on ``(seed, i)`` and its own episode count.
:meth:`TorchEnv.state_dict` holds the physical state, the elapsed steps and the streams, so a
loaded env continues exactly where the saved one was.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch

from engine_rl.checks import positive_int
from engine_rl.envs.rng import CounterRNG, check_seed

__all__ = ["TensorSpec", "TorchEnv", "float_dtype", "scalars"]

_STATE_DTYPES = (torch.float32, torch.float64)


def float_dtype(dtype: Any, *, owner: str) -> torch.dtype:
    """Return ``dtype`` if it is ``torch.float32`` or ``torch.float64``, else raise."""
    if dtype not in _STATE_DTYPES:
        raise ValueError(f"{owner}: dtype must be torch.float32 or torch.float64, got {dtype!r}")
    return dtype


def scalars(dtype: torch.dtype, **values: float) -> SimpleNamespace:
    """Constants as 0-dim CPU tensors of ``dtype``, for the physics of a :class:`TorchEnv`.

    An op between a tensor and a 0-dim CPU tensor treats the latter as a scalar on any device,
    with the same type promotion and arithmetic as a Python number, but a Python number is
    first wrapped into such a tensor at every op, which costs about half the op on a CPU.

    Examples:
        >>> k = scalars(torch.float32, tau=0.02)
        >>> k.tau, (k.tau * torch.ones(2, dtype=torch.float64)).dtype
        (tensor(0.0200), torch.float64)
    """
    return SimpleNamespace(**{name: torch.tensor(value, dtype=dtype) for name, value in values.items()})


@dataclass(frozen=True, kw_only=True, eq=False)
class TensorSpec:
    """Shape, dtype and range of one env copy's observation or action.

    Examples:
        >>> spec = TensorSpec(shape=(), dtype=torch.int64, n=3)
        >>> spec.discrete, spec.sample(4, generator=torch.Generator().manual_seed(0)).tolist()
        (True, [2, 0, 2, 0])
        >>> box = TensorSpec(shape=(1,), dtype=torch.float32, low=torch.tensor([-2.0]), high=torch.tensor([2.0]))
        >>> box.sample(2).shape, box.discrete
        (torch.Size([2, 1]), False)
    """

    shape: tuple[int, ...]
    """Shape of one copy's entry (``()`` for a discrete action)."""
    dtype: torch.dtype
    """dtype of the entry: ``torch.float32`` for boxes, ``torch.int64`` for discrete actions."""
    low: torch.Tensor | None = field(default=None)
    """Lower bound (``shape``, CPU, may hold ``-inf``) of a box; ``None`` when discrete."""
    high: torch.Tensor | None = field(default=None)
    """Upper bound of a box; ``None`` when discrete."""
    n: int | None = None
    """Number of values ``0..n-1`` of a discrete entry; ``None`` for a box."""

    @property
    def discrete(self) -> bool:
        """Whether the entry is a discrete index."""
        return self.n is not None

    def sample(
        self,
        num_envs: int,
        *,
        device: torch.device | str | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Uniform random values ``[num_envs, *shape]`` (a box must be bounded)."""
        size = (num_envs, *self.shape)
        if self.n is not None:
            return torch.randint(self.n, size, generator=generator, device=device, dtype=self.dtype)
        if self.low is None or self.high is None:
            raise ValueError("TensorSpec.sample: a box needs low and high")
        u = torch.rand(size, generator=generator, device=device, dtype=self.dtype)
        low, high = self.low.to(u.device, self.dtype), self.high.to(u.device, self.dtype)
        return low + (high - low) * u


class TorchEnv(ABC):
    """Base of batched torch envs: ``num_envs`` copies stepped together on ``device``.

    Subclasses define the specs, the number of uniform draws per reset (:attr:`reset_draws`)
    and three pure tensor functions: :meth:`_initial_state` (uniforms -> reset states),
    :meth:`_dynamics` (state, action -> next state, reward, terminated) and :meth:`_observe`.
    The state is ``[num_envs, state_dim]``, env-major like observations (on a CPU, turning
    field-major rows into observations is a transpose that costs more than CartPole's
    physics). See the module docstring for the autoreset semantics.

    Args:
        num_envs: number of env copies (a positive int).
        device: where state, observations, rewards and flags live.
        dtype: dtype of the physical state: ``torch.float32`` (fast) or ``torch.float64``
            (gymnasium's precision). Observations and rewards are float32 either way.
        max_episode_steps: episodes are truncated after this many steps.

    Attributes:
        sync_free_reset: how done copies are reset. ``False`` (the default on the CPU): draw and
            write only the done rows, after a ``done.any()`` check. ``True`` (elsewhere): draw
            for every copy and select with ``torch.where`` (only the done copies' streams
            advance), so a GPU step never waits for the host. Both give identical results.
    """

    observation_spec: TensorSpec
    action_spec: TensorSpec
    #: Uniform draws one env copy consumes per reset.
    reset_draws: int
    #: Columns of the state (one per physical quantity).
    state_dim: int

    def __init__(
        self,
        num_envs: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
        max_episode_steps: int,
    ) -> None:
        owner = type(self).__name__
        num_envs = positive_int(num_envs, name="num_envs", owner=owner)
        max_episode_steps = positive_int(max_episode_steps, name="max_episode_steps", owner=owner)
        self._num_envs = num_envs
        # normalized: "cuda" becomes "cuda:0", as the device of the tensors it makes
        self._device = torch.empty(0, device=device).device
        self._dtype = float_dtype(dtype, owner=owner)
        self.max_episode_steps = max_episode_steps
        self._rng = CounterRNG(num_envs, device=self._device)
        self._state = torch.zeros((num_envs, self.state_dim), dtype=dtype, device=self._device)
        self._elapsed = torch.zeros(num_envs, dtype=torch.int64, device=self._device)
        self._obs: torch.Tensor | None = None
        self._action_shape = (num_envs, *self.action_spec.shape)
        # On CPU a sync is free: reset only the done rows. Elsewhere reset with torch.where.
        self.sync_free_reset = self._device.type != "cpu"

    # -- properties --------------------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        """Number of env copies."""
        return self._num_envs

    @property
    def device(self) -> torch.device:
        """Where every tensor of the env lives."""
        return self._device

    @property
    def dtype(self) -> torch.dtype:
        """dtype of the physical state."""
        return self._dtype

    @property
    def observation(self) -> torch.Tensor:
        """The observation to act on, float32 ``[num_envs, *obs_shape]`` (treat as read-only)."""
        if self._obs is None:
            raise RuntimeError(f"{type(self).__name__}: call reset() before reading observation")
        return self._obs

    @property
    def state(self) -> torch.Tensor:
        """The physical state, ``[num_envs, state_dim]`` of :attr:`dtype` (treat as read-only)."""
        return self._state

    @property
    def elapsed_steps(self) -> torch.Tensor:
        """Steps taken in each copy's current episode, int64 ``[num_envs]``."""
        return self._elapsed

    # -- API ---------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every copy and return the observations, float32 ``[num_envs, *obs_shape]``.

        Args:
            seed: reseed the per-env streams (copy ``i``'s depends on ``(seed, i)``). ``None``
                continues the current streams, or seeds from torch's global generator if the
                env was never seeded.
        """
        if seed is not None:
            self._rng.seed(check_seed(seed, owner=type(self).__name__))
        elif not self._rng.seeded:
            self._rng.seed(int(torch.randint(2**62, ()).item()))
        u = self._rng.uniform(self.reset_draws, dtype=self._dtype)
        self._state = self._initial_state(u)
        self._elapsed.zero_()
        self._obs = self._observe(self._state)
        return self._obs

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step every copy with ``action`` (``[num_envs, *action_shape]`` on :attr:`device`).

        Returns:
            ``(next_observation, reward, terminated, truncated)``: float32
            ``[num_envs, *obs_shape]`` (the true successor, final observation where done),
            float32 ``[num_envs]``, bool ``[num_envs]``, bool ``[num_envs]``. Truncated means the
            episode reached ``max_episode_steps`` (it may be terminated too). Done copies are
            reset: :attr:`observation` holds their first observation.
        """
        if self._obs is None:
            raise RuntimeError(f"{type(self).__name__}: call reset() before step()")
        self._check_action(action)
        state, reward, terminated = self._dynamics(self._state, action)
        next_obs = self._observe(state)
        elapsed = self._elapsed
        elapsed += 1
        truncated = elapsed >= self.max_episode_steps
        done = terminated | truncated
        if self.sync_free_reset:
            u = self._rng.uniform(self.reset_draws, mask=done, dtype=self._dtype)
            state = torch.where(done[:, None], self._initial_state(u), state)
            elapsed.masked_fill_(done, 0)
        elif done.any():
            index = done.nonzero().squeeze(1)
            u = self._rng.uniform(self.reset_draws, index=index, dtype=self._dtype)
            state[index] = self._initial_state(u)
            elapsed[index] = 0
        self._state = state
        self._obs = self._observe(state)
        return next_obs, reward, terminated, truncated

    def close(self) -> None:
        """Nothing to release (the state is plain tensors); kept for the collector protocol."""

    def state_dict(self) -> dict[str, Any]:
        """State (CPU copies), elapsed steps, per-env streams and whether the env was reset."""
        return {
            "state": self._state.to("cpu", copy=True),
            "elapsed_steps": self._elapsed.to("cpu", copy=True),
            "rng": self._rng.state_dict(),
            "was_reset": self._obs is not None,
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; the env continues exactly where the saved one was."""
        owner = f"{type(self).__name__}.load_state_dict"
        missing = {"state", "elapsed_steps", "rng", "was_reset"} - set(state_dict)
        if missing:
            raise KeyError(f"{owner}: missing key(s) {sorted(missing)}")
        for name, dest in (("state", self._state), ("elapsed_steps", self._elapsed)):
            value = state_dict[name]
            if not isinstance(value, torch.Tensor) or value.shape != dest.shape or value.dtype != dest.dtype:
                got = (tuple(value.shape), value.dtype) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(
                    f"{owner}: {name!r} must be a tensor of shape {tuple(dest.shape)} and dtype {dest.dtype}, got {got}"
                )
        self._state = state_dict["state"].to(self._device, copy=True)
        self._elapsed.copy_(state_dict["elapsed_steps"])
        self._rng.load_state_dict(state_dict["rng"])
        self._obs = self._observe(self._state) if state_dict["was_reset"] else None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_envs={self._num_envs}, device={self._device}, dtype={self._dtype}, "
            f"max_episode_steps={self.max_episode_steps})"
        )

    # -- subclass hooks ----------------------------------------------------------------------
    def _check_action(self, action: torch.Tensor) -> None:
        """Check shape and device (metadata only: no sync)."""
        if not isinstance(action, torch.Tensor) or action.shape != self._action_shape:
            got = tuple(action.shape) if isinstance(action, torch.Tensor) else type(action).__name__
            raise ValueError(
                f"{type(self).__name__}.step: action must be a tensor of shape {self._action_shape} "
                f"([num_envs, *action_shape]), got {got}"
            )
        if action.device != self._device:
            raise ValueError(
                f"{type(self).__name__}.step: action is on {action.device} but the env steps on {self._device}"
            )

    @abstractmethod
    def _initial_state(self, u: torch.Tensor) -> torch.Tensor:
        """Reset states ``[k, state_dim]`` (a new tensor) from uniforms ``[k, reset_draws]`` in ``[0, 1)``."""

    @abstractmethod
    def _dynamics(self, state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step: ``(next state [num_envs, state_dim] (a new tensor), reward float32
        [num_envs], terminated bool [num_envs])``."""

    @abstractmethod
    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        """Observations float32 ``[num_envs, *obs_shape]`` of ``state`` (a new tensor)."""
