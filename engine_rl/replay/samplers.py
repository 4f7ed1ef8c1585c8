"""Which stored rows a replay buffer samples: :class:`UniformSampler` and :class:`PrioritizedSampler`.

A sampler sees positions, never data: the buffer calls ``bind(capacity)`` once, ``extend(index)``
after writing rows, ``sample(size, batch_size, generator=...)`` for ``(index, weight)``, and
``update_priority(index, priority)`` with new ``|td_error|`` values.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from engine_rl.checks import fail, finite_number, is_int
from engine_rl.replay.sumtree import MinTree, SumTree

__all__ = ["PrioritizedSampler", "Sampler", "UniformSampler"]


class Sampler(Protocol):
    """What :class:`~engine_rl.replay.ReplayBuffer` needs from a sampler."""

    def bind(self, capacity: int) -> None: ...

    def extend(self, index: torch.Tensor) -> None: ...

    def sample(
        self, size: int, batch_size: int, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class UniformSampler:
    """Positions drawn uniformly with replacement; every weight is 1.

    Examples:
        >>> sampler = UniformSampler()
        >>> sampler.bind(10)
        >>> index, weight = sampler.sample(10, 4, generator=torch.Generator().manual_seed(0))
        >>> index.shape, weight.tolist()
        (torch.Size([4]), [1.0, 1.0, 1.0, 1.0])
    """

    def bind(self, capacity: int) -> None:
        """Nothing to allocate."""

    def extend(self, index: torch.Tensor) -> None:
        """Nothing to track."""

    def sample(self, size: int, batch_size: int, *, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``batch_size`` int64 positions in ``[0, size)`` and float32 weights of 1 (CPU)."""
        index = torch.randint(size, (batch_size,), generator=generator)
        return index, torch.ones(batch_size, dtype=torch.float32)

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """No-op: uniform sampling has no priorities."""

    def state_dict(self) -> dict[str, Any]:
        """Stateless: ``{}``."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing to restore."""


def _check_number(name: str, value: float, *, positive: bool = False) -> float:
    number = finite_number(value, name=name, owner="PrioritizedSampler")
    if number < 0 or (positive and number == 0):
        raise ValueError(f"PrioritizedSampler: {name} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return number


class PrioritizedSampler:
    """Proportional prioritized sampling (Schaul et al., 2016) over a :class:`SumTree`.

    Item ``i`` is stored with priority ``p_i = (|td_error_i| + eps) ** alpha`` and drawn with
    probability ``P(i) = p_i / sum_j p_j``; new items get the largest priority seen so far
    (initially 1). Draws are stratified: the total mass is cut into ``batch_size`` equal
    segments and one point is drawn uniformly in each, so indices come out in position order.
    Importance weights are ``w_i = (N * P(i)) ** -beta / max_j w_j`` with ``N`` the number of
    stored items and the max over all stored items (from a :class:`MinTree` of priorities),
    so ``0 < w <= 1``.

    Args:
        alpha: priority exponent; 0 gives uniform sampling.
        beta: importance-weight exponent at the first :meth:`sample` call.
        beta_end: exponent reached after ``beta_annealing_steps`` calls to :meth:`sample`.
        beta_annealing_steps: number of :meth:`sample` calls over which beta moves linearly from
            ``beta`` to ``beta_end``; 0 keeps ``beta`` constant.
        eps: added to ``|td_error|`` so no item gets probability 0.

    Examples:
        >>> sampler = PrioritizedSampler(alpha=1.0, beta=1.0)
        >>> sampler.bind(4)
        >>> sampler.extend(torch.arange(4))
        >>> sampler.update_priority(torch.tensor([0, 1, 2, 3]), torch.tensor([1.0, 1.0, 1.0, 5.0]))
        >>> index, weight = sampler.sample(4, 4, generator=torch.Generator().manual_seed(0))
        >>> index.tolist()  # item 3 holds 5/8 of the mass: one draw per quarter of it
        [1, 3, 3, 3]
        >>> [round(w, 3) for w in weight.tolist()]  # (p_i / p_min) ** -beta
        [1.0, 0.2, 0.2, 0.2]
    """

    def __init__(
        self,
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_end: float = 1.0,
        beta_annealing_steps: int = 0,
        eps: float = 1e-6,
    ) -> None:
        self.alpha = _check_number("alpha", alpha)
        self._beta_start = _check_number("beta", beta)
        self._beta_end = _check_number("beta_end", beta_end)
        if not (is_int(beta_annealing_steps) and beta_annealing_steps >= 0):
            fail(beta_annealing_steps, "an int >= 0", name="beta_annealing_steps", owner="PrioritizedSampler")
        self.beta_annealing_steps = int(beta_annealing_steps)
        self.eps = _check_number("eps", eps, positive=True)
        self._sum: SumTree | None = None
        self._min: MinTree | None = None
        self._max_priority = 1.0
        self._calls = 0
        self._size = 0

    @property
    def beta(self) -> float:
        """The exponent the next :meth:`sample` call uses."""
        if self.beta_annealing_steps == 0:
            return self._beta_start
        progress = min(self._calls / self.beta_annealing_steps, 1.0)
        return self._beta_start + (self._beta_end - self._beta_start) * progress

    @property
    def max_priority(self) -> float:
        """Priority (after ``(p + eps) ** alpha``) given to new items."""
        return self._max_priority

    @property
    def tree(self) -> SumTree:
        """The sum tree of priorities (after :meth:`bind`)."""
        return self._trees()[0]

    def _trees(self) -> tuple[SumTree, MinTree]:
        if self._sum is None or self._min is None:
            raise RuntimeError("PrioritizedSampler: not bound to a buffer; call bind(capacity) first")
        return self._sum, self._min

    def bind(self, capacity: int) -> None:
        """Allocate the trees for ``capacity`` positions (once: a sampler serves one buffer)."""
        if self._sum is not None:
            raise RuntimeError("PrioritizedSampler: already bound to a buffer; create one sampler per buffer")
        self._sum, self._min = SumTree(capacity), MinTree(capacity)

    def extend(self, index: torch.Tensor) -> None:
        """Give the freshly written positions ``index`` the current max priority."""
        if index.numel() == 0:
            return
        sum_tree, min_tree = self._trees()
        idx = index.detach().reshape(-1).cpu().numpy()
        breaks = np.flatnonzero(np.diff(idx) != 1) + 1
        if breaks.size <= 2:  # a buffer writes one run, two when it wraps around: fill by slices
            for run in np.split(idx, breaks):
                sum_tree.fill(int(run[0]), int(run[-1]) + 1, self._max_priority)
                min_tree.fill(int(run[0]), int(run[-1]) + 1, self._max_priority)
        else:
            sum_tree.update(idx, self._max_priority)
            min_tree.update(idx, self._max_priority)
        self._size = max(self._size, int(idx.max()) + 1)

    def sample(self, size: int, batch_size: int, *, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``batch_size`` positions drawn proportionally to priority, with importance weights.

        Args:
            size: number of stored items ``N`` (positions ``[0, size)`` hold data); the trees
                already account for it, so it is not used here.
            batch_size: number of draws.
            generator: source of the uniform draws.

        Returns:
            ``(index, weight)``: int64 and float32 CPU tensors of length ``batch_size``.
        """
        sum_tree, min_tree = self._trees()
        beta = self.beta
        self._calls += 1
        total = sum_tree.total
        uniform = torch.rand(batch_size, dtype=torch.float64, generator=generator).numpy()
        mass = (np.arange(batch_size, dtype=np.float64) + uniform) * (total / batch_size)
        index = sum_tree.find_prefix_sum(mass)
        priority = sum_tree.leaves[index]
        # (N P(i))^-beta / max_j (N P(j))^-beta == (p_i / p_min)^-beta
        weight = np.power(priority / min_tree.min, -beta)
        return torch.from_numpy(index), torch.from_numpy(weight.astype(np.float32))

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """Store ``(|priority| + eps) ** alpha`` at positions ``index`` (last duplicate wins).

        Args:
            index: int64 positions of stored items (e.g. a sample's ``"index"``), any device.
            priority: one ``|td_error|`` per index, any float dtype/device and shape with
                ``index.numel()`` elements; its absolute value is used.
        """
        sum_tree, min_tree = self._trees()
        idx = torch.as_tensor(index).detach().reshape(-1).cpu().numpy()
        new = torch.as_tensor(priority).detach().reshape(-1).to("cpu", torch.float64).numpy()
        if new.shape != idx.shape:
            raise ValueError(
                f"PrioritizedSampler.update_priority: priority needs one value per index ({idx.size}), got {new.size}"
            )
        if idx.size == 0:
            return
        if idx.min() < 0 or idx.max() >= self._size:
            raise IndexError(
                f"PrioritizedSampler.update_priority: index must point at stored items [0, {self._size}), "
                f"got values in [{idx.min()}, {idx.max()}]"
            )
        new = np.power(np.abs(new) + self.eps, self.alpha)
        if not np.isfinite(new).all():
            raise ValueError(
                "PrioritizedSampler.update_priority: priority must be finite (also after (|p| + eps) ** alpha), "
                f"got {new[~np.isfinite(new)][:5]}"
            )
        sum_tree.update(idx, new, check=False)  # index and values checked above
        min_tree.update(idx, new, check=False)
        self._max_priority = max(self._max_priority, float(new.max()))

    def state_dict(self) -> dict[str, Any]:
        """Priorities (float64 tensor), max priority, number of sample calls (beta progress), size."""
        return {
            "priorities": self.tree.state_dict()["leaves"],
            "max_priority": self._max_priority,
            "sample_calls": self._calls,
            "size": self._size,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (the sampler must be bound to the same capacity)."""
        sum_tree, min_tree = self._trees()
        priorities = torch.as_tensor(state_dict["priorities"], dtype=torch.float64)
        sum_tree.load_state_dict({"capacity": priorities.numel(), "leaves": priorities})
        size = int(state_dict["size"])
        unset = torch.arange(priorities.numel()) >= size
        min_leaves = priorities.masked_fill(unset, float("inf"))
        min_tree.load_state_dict({"capacity": priorities.numel(), "leaves": min_leaves})
        self._max_priority = float(state_dict["max_priority"])
        self._calls = int(state_dict["sample_calls"])
        self._size = size
