"""Exploration: how the policy that collects departs from the policy being learned.

Each is a wrapper around a policy, with its own CPU generator and frame count saved in its
``state_dict`` (:class:`SeededPolicyWrapper`), so a resumed run explores as the first would have:

- :class:`EpsilonGreedy`: a uniform random discrete action with probability ``eps``, annealed
  along a :class:`LinearSchedule` (DQN);
- :class:`RandomWarmup`: uniform random actions within a Box's bounds for the first frames (SAC
  and TD3 fill their replay this way before learning starts);
- :class:`GaussianNoise`: ``N(0, std)`` added to a deterministic actor's action in the unit box (TD3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from engine_rl.algos.td3 import TanhActor
from engine_rl.checks import nonnegative_int, nonnegative_number, positive_int
from engine_rl.keys import present_keys

__all__ = ["EpsilonGreedy", "GaussianNoise", "LinearSchedule", "RandomWarmup", "SeededPolicyWrapper"]


class LinearSchedule:
    """A value going linearly from ``start`` to ``end`` over ``steps`` steps, then staying at ``end``.

    Args:
        start: value at step 0.
        end: value from step ``steps`` on.
        steps: length of the ramp (a non-negative int; 0 means ``end`` throughout).

    Examples:
        >>> schedule = LinearSchedule(1.0, 0.1, steps=10)
        >>> schedule.value(0), schedule.value(5), schedule.value(10), schedule.value(1_000)
        (1.0, 0.55, 0.1, 0.1)
    """

    def __init__(self, start: float, end: float, steps: int) -> None:
        steps = nonnegative_int(steps, name="steps", owner="LinearSchedule")
        self.start, self.end, self.steps = float(start), float(end), steps

    def value(self, t: float) -> float:
        """The value at step ``t`` (negative ``t`` counts as 0)."""
        if t >= self.steps:
            return self.end
        return self.start + (self.end - self.start) * max(t, 0) / self.steps

    def __repr__(self) -> str:
        return f"LinearSchedule(start={self.start}, end={self.end}, steps={self.steps})"


class SeededPolicyWrapper(nn.Module):
    """Base of policy wrappers that count the frames they act on and draw from their own CPU
    generator: both are saved in the module's ``state_dict`` (extra state: an int and a uint8
    tensor, loadable with ``weights_only=True``).

    Args:
        seed: seed of the generator (``None``: drawn from torch's global generator, so
            ``torch.manual_seed`` makes runs repeatable).
    """

    def __init__(self, *, seed: int | None = None) -> None:
        super().__init__()
        self.frames = 0
        if seed is None:
            seed = int(torch.randint(2**62, ()).item())
        self._generator = torch.Generator().manual_seed(seed)

    def get_extra_state(self) -> dict[str, Any]:
        """Frames seen and generator state (an int and a uint8 tensor)."""
        return {"frames": self.frames, "rng_state": self._generator.get_state()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_extra_state`."""
        self.frames = int(state["frames"])
        self._generator.set_state(state["rng_state"])


class EpsilonGreedy(SeededPolicyWrapper):
    """Replace a greedy policy's action by a uniform random one with probability ``eps``.

    ``eps`` follows :class:`LinearSchedule` ``(eps_start, eps_end, annealing_frames)`` over the
    frames this wrapper has acted on (each call counts ``td.batch_size.numel()``; the ``eps`` of a
    call is the one before its frames are counted). Draws come from the wrapper's own CPU
    generator, so the frame count and the generator state, which :meth:`state_dict` saves (as
    extra state: an int and a uint8 tensor), fully determine future exploration.

    Args:
        policy: writes an integer ``"action"`` (shape ``td.batch_size``) into the TensorDict.
        num_actions: random actions are drawn from ``0 .. num_actions - 1``.
        eps_start: exploration probability at frame 0.
        eps_end: exploration probability after ``annealing_frames`` frames.
        annealing_frames: length of the linear decay in frames.
        seed: generator seed; ``None``: drawn from torch's global generator.

    Examples:
        >>> from tensordict import TensorDict
        >>> def greedy(td):
        ...     return td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        >>> explore = EpsilonGreedy(greedy, num_actions=4, eps_start=1.0, eps_end=0.0,
        ...                         annealing_frames=100, seed=0)
        >>> td = explore(TensorDict({"observation": torch.zeros(50, 3)}, batch_size=[50]))
        >>> bool((td["action"] != 0).any()), explore.frames, explore.eps
        (True, 50, 0.5)
    """

    def __init__(
        self,
        policy: nn.Module | Any,
        *,
        num_actions: int,
        eps_start: float = 1.0,
        eps_end: float = 0.05,
        annealing_frames: int = 10_000,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        if not callable(policy):
            raise TypeError(f"EpsilonGreedy: policy must be callable, got {type(policy).__name__}")
        num_actions = positive_int(num_actions, name="num_actions", owner="EpsilonGreedy")
        for name, eps in (("eps_start", eps_start), ("eps_end", eps_end)):
            if not 0.0 <= eps <= 1.0:
                raise ValueError(f"EpsilonGreedy: {name} must be in [0, 1], got {eps!r}")
        self.policy = policy
        self.num_actions = num_actions
        self.schedule = LinearSchedule(eps_start, eps_end, annealing_frames)

    @property
    def eps(self) -> float:
        """The exploration probability at the current frame count."""
        return self.schedule.value(self.frames)

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        """Act greedily with the wrapped policy, then explore; returns the TensorDict."""
        out = self.policy(td)
        if out is None:
            out = td
        if "action" not in out.keys():
            raise KeyError(
                "EpsilonGreedy: the wrapped policy must write 'action'; "
                f"the TensorDict has {present_keys(out)}"
            )
        eps = self.eps
        self.frames += out.batch_size.numel()
        if eps > 0.0:
            action = out.get("action")
            explore = torch.rand(out.batch_size, generator=self._generator) < eps
            random_action = torch.randint(
                self.num_actions, action.shape, generator=self._generator, dtype=action.dtype
            )
            explore = explore.reshape(explore.shape + (1,) * (action.ndim - explore.ndim))
            if action.device.type != "cpu":
                explore, random_action = explore.to(action.device), random_action.to(action.device)
            out.set("action", torch.where(explore, random_action, action))
        return out

    def extra_repr(self) -> str:
        return f"num_actions={self.num_actions}, schedule={self.schedule!r}, frames={self.frames}"


class RandomWarmup(SeededPolicyWrapper):
    """Act uniformly at random within the bounds for the first ``frames`` frames, then delegate.

    Stable-Baselines3 fills its buffer with uniform random actions before ``learning_starts``;
    this wrapper does the same without touching the collector. During the warm-up it writes only
    ``"action"`` (the wrapped policy is not called); afterwards the wrapped policy acts. Every
    call counts ``td.batch_size.numel()`` frames; a call starting inside the warm-up is random
    for all its rows. Draws come from the wrapper's own CPU generator; the frame count and the
    generator state are saved by :meth:`state_dict` (as extra state: an int and a uint8 tensor).

    Args:
        policy: the policy used after the warm-up (it writes ``"action"``).
        low: lower action bounds ``[action_dim]``.
        high: upper action bounds ``[action_dim]``.
        frames: warm-up length in frames (0: never random).
        seed: generator seed; ``None``: drawn from torch's global generator.

    Examples:
        >>> from tensordict import TensorDict
        >>> def zero(td):
        ...     return td.set("action", torch.zeros(*td.batch_size, 1))
        >>> warm = RandomWarmup(zero, low=[-2.0], high=[2.0], frames=4, seed=0)
        >>> first = warm(TensorDict({"observation": torch.zeros(4, 3)}, [4]))["action"]
        >>> bool((first != 0).all() and (first.abs() <= 2).all()), warm.frames, warm.warming_up
        (True, 4, False)
        >>> warm(TensorDict({"observation": torch.zeros(4, 3)}, [4]))["action"].abs().sum().item(), warm.frames
        (0.0, 8)
    """

    def __init__(
        self,
        policy: Any,
        *,
        low: torch.Tensor | Sequence[float],
        high: torch.Tensor | Sequence[float],
        frames: int,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        if not callable(policy):
            raise TypeError(f"RandomWarmup: policy must be callable, got {type(policy).__name__}")
        frames = nonnegative_int(frames, name="frames", owner="RandomWarmup")
        low_t = torch.as_tensor(low, dtype=torch.float32).reshape(-1)
        high_t = torch.as_tensor(high, dtype=torch.float32).reshape(-1)
        if low_t.shape != high_t.shape or not bool((high_t >= low_t).all()):
            raise ValueError(
                f"RandomWarmup: low and high must have the same shape with high >= low, got "
                f"low={low_t.tolist()}, high={high_t.tolist()}"
            )
        self.policy = policy
        self.warmup_frames = frames
        self.register_buffer("low", low_t, persistent=False)
        self.register_buffer("span", high_t - low_t, persistent=False)

    @property
    def warming_up(self) -> bool:
        """Whether the next call acts at random."""
        return self.frames < self.warmup_frames

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        warming_up = self.frames < self.warmup_frames
        self.frames += td.batch_size.numel()
        if not warming_up:
            out = self.policy(td)
            return td if out is None else out
        u = torch.rand((*td.batch_size, self.low.numel()), generator=self._generator)
        td.set("action", torch.addcmul(self.low, self.span, u.to(self.low.device)))
        return td

    def extra_repr(self) -> str:
        return f"warmup_frames={self.warmup_frames}, frames={self.frames}"


class GaussianNoise(SeededPolicyWrapper):
    """Exploration for a :class:`~engine_rl.algos.td3.TanhActor`: add ``N(0, std)`` in the unit box, then clip.

    ``action = scale(clip(unit_action + std * eps, -1, 1))`` with ``eps`` from the wrapper's own
    generator (saved in its ``state_dict`` with the frame count), as Stable-Baselines3 adds its
    action noise to the actor's ``[-1, 1]`` output.

    Args:
        actor: the :class:`~engine_rl.algos.td3.TanhActor` to perturb.
        std: noise standard deviation in unit-box units (rl-zoo's TD3 Pendulum: 0.1).
        seed: generator seed (``None``: drawn from torch's global generator).

    Examples:
        >>> import gymnasium as gym
        >>> from tensordict import TensorDict
        >>> actor = TanhActor.build(3, gym.spaces.Box(-2.0, 2.0, (1,)), hidden=(8,))
        >>> noisy = GaussianNoise(actor, std=0.5, seed=0)
        >>> obs = TensorDict({"observation": torch.zeros(6, 3)}, [6])
        >>> a, b = noisy(obs.clone())["action"], actor(obs.clone())["action"]
        >>> bool((a != b).any()), bool(a.abs().max() <= 2.0), noisy.frames
        (True, True, 6)
    """

    def __init__(self, actor: TanhActor, *, std: float, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        if not isinstance(actor, TanhActor):
            raise TypeError(f"GaussianNoise: actor must be a TanhActor, got {type(actor).__name__}")
        std = nonnegative_number(std, name="std", owner="GaussianNoise")
        self.actor = actor
        self.std = std

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        self.frames += td.batch_size.numel()
        unit = self.actor.unit_action(td["observation"])
        eps = torch.randn(unit.shape, generator=self._generator).to(unit.device)
        td.set("action", self.actor.scale((unit + self.std * eps).clamp(-1.0, 1.0)))
        return td

    def extra_repr(self) -> str:
        return f"std={self.std}"
