"""Vectorized segment trees over a fixed number of leaves: :class:`SumTree` and :class:`MinTree`.

Layout: a complete binary tree in one float64 array of ``2 * P`` slots, ``P`` the next power of
two >= ``capacity``; node ``i`` has children ``2i`` and ``2i + 1``, leaf ``j`` sits at ``P + j``
and slot 0 is unused. Batched updates and descents loop over the tree depth (17 levels for
100k leaves), never over items, so a 256-item update or query is a few dozen numpy calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from engine_rl.checks import positive_int

__all__ = ["MinTree", "SumTree"]

ArrayLike = torch.Tensor | np.ndarray | list | float | int

# update() recomputes whole tree levels of at most this many nodes (or 4x the batch) with slices
_FULL_LEVEL_NODES = 1024


def _as_numpy(x: ArrayLike, dtype: type) -> np.ndarray:
    """A 1-D numpy view/copy of ``x`` (tensors are detached and moved to the CPU)."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype).reshape(-1)


class _SegmentTree:
    """A binary tree whose inner nodes hold ``combine(left, right)`` of their children."""

    _name = "SegmentTree"
    _empty = 0.0
    _combine: Callable[[np.ndarray, np.ndarray], np.ndarray] = staticmethod(np.add)

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity = positive_int(capacity, name="capacity", owner=self._name)
        self._depth = max(capacity - 1, 0).bit_length()
        self._first_leaf = 1 << self._depth
        self._tree = np.full(2 * self._first_leaf, self._empty, dtype=np.float64)
        self._pairs = self._tree.reshape(-1, 2)  # _pairs[i] == (tree[2i], tree[2i + 1])

    @property
    def capacity(self) -> int:
        """Number of leaves."""
        return self._capacity

    def _check_index(self, index: ArrayLike, what: str) -> np.ndarray:
        idx = _as_numpy(index, np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self._capacity):
            raise IndexError(
                f"{self._name}.{what}: index must lie in [0, {self._capacity}), "
                f"got values in [{idx.min()}, {idx.max()}]"
            )
        return idx

    def update(self, index: ArrayLike, values: ArrayLike, *, check: bool = True) -> None:
        """Set leaves ``index`` to ``values`` and refresh their ancestors.

        Args:
            index: leaf positions (tensor, array or list of ints). With duplicates, the last
                value written for a position wins and the inner nodes stay consistent.
            values: one value per index, or a scalar for all of them (finite).
            check: validate ``index`` range and ``values``; callers that already did may skip it.
        """
        idx = self._check_index(index, "update") if check else _as_numpy(index, np.int64)
        vals = _as_numpy(values, np.float64)
        if vals.size == 1 and idx.size != 1:
            vals = np.broadcast_to(vals, idx.shape)
        if vals.shape != idx.shape:
            raise ValueError(
                f"{self._name}.update: values must have one entry per index ({idx.size}), got {vals.size}"
            )
        if check:
            self._check_values(vals)
        node = idx + self._first_leaf
        self._tree[node] = vals  # numpy assigns repeated positions in order: last write wins
        pairs, tree, combine = self._pairs, self._tree, self._combine
        # Low levels: recompute only the touched parents (gathers). Levels with few nodes: recompute
        # the whole level with strided slices, cheaper than a gather once the level is small.
        full_below = max(_FULL_LEVEL_NODES, 4 * idx.size)
        for level in range(self._depth - 1, -1, -1):
            lo = 1 << level
            if lo <= full_below:
                tree[lo : 2 * lo] = combine(tree[2 * lo : 4 * lo : 2], tree[2 * lo + 1 : 4 * lo : 2])
            else:  # parents recomputed from both children: repeated parents get identical values
                node = node >> 1
                tree[node] = combine(pairs[node, 0], pairs[node, 1])

    def fill(self, start: int, stop: int, value: float) -> None:
        """Set leaves ``start:stop`` to ``value`` (slices only: cheap for long runs).

        Args:
            start: first leaf, ``0 <= start <= stop``.
            stop: one past the last leaf, ``<= capacity``.
            value: the new value of those leaves.
        """
        if not 0 <= start <= stop <= self._capacity:
            raise IndexError(f"{self._name}.fill: need 0 <= start <= stop <= {self._capacity}, got {start}, {stop}")
        if start == stop:
            return
        self._check_values(np.array([value], dtype=np.float64))
        tree, combine = self._tree, self._combine
        lo, hi = start + self._first_leaf, stop - 1 + self._first_leaf  # inclusive node range per level
        tree[lo : hi + 1] = value
        for _ in range(self._depth):
            lo, hi = lo >> 1, hi >> 1
            tree[lo : hi + 1] = combine(tree[2 * lo : 2 * hi + 2 : 2], tree[2 * lo + 1 : 2 * hi + 2 : 2])

    def _check_values(self, vals: np.ndarray) -> None:
        if not np.isfinite(vals).all():
            raise ValueError(f"{self._name}.update: values must be finite, got {vals[~np.isfinite(vals)][:5]}")

    def __getitem__(self, index: ArrayLike) -> np.ndarray:
        """The leaf values at ``index`` (float64 array)."""
        return self._tree[self._check_index(index, "__getitem__") + self._first_leaf]

    @property
    def leaves(self) -> np.ndarray:
        """A read-only view of all ``capacity`` leaves."""
        view = self._tree[self._first_leaf : self._first_leaf + self._capacity]
        view.flags.writeable = False
        return view

    def _rebuild(self) -> None:
        """Recompute every inner node from the leaves, one level at a time."""
        tree = self._tree
        for level in range(self._depth - 1, -1, -1):
            lo, hi = 1 << level, 2 << level
            tree[lo:hi] = self._combine(tree[2 * lo : 2 * hi : 2], tree[2 * lo + 1 : 2 * hi : 2])

    def state_dict(self) -> dict[str, Any]:
        """``{"capacity": int, "leaves": float64 tensor [capacity]}`` (a copy)."""
        return {"capacity": self._capacity, "leaves": torch.from_numpy(self.leaves.copy())}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the leaves saved by :meth:`state_dict` and rebuild the inner nodes."""
        if state_dict["capacity"] != self._capacity:
            raise ValueError(
                f"{self._name}.load_state_dict: capacity {state_dict['capacity']} != this tree's {self._capacity}"
            )
        leaves = _as_numpy(state_dict["leaves"], np.float64)
        self._check_values(leaves)
        self._tree[:] = self._empty
        self._tree[self._first_leaf : self._first_leaf + self._capacity] = leaves
        self._rebuild()


class SumTree(_SegmentTree):
    """Sums of non-negative leaf values, with batched prefix-sum search (for prioritized replay).

    Args:
        capacity: number of leaves; all start at 0.

    Examples:
        >>> tree = SumTree(4)
        >>> tree.update([0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0])
        >>> tree.total
        10.0
        >>> tree.find_prefix_sum([0.0, 0.99, 1.0, 5.5, 9.99]).tolist()
        [0, 0, 1, 2, 3]
        >>> tree.update([1, 1], [5.0, 0.0])  # duplicates: the last value wins
        >>> tree.total, tree[[1]].tolist()
        (8.0, [0.0])
    """

    _name = "SumTree"

    def _check_values(self, vals: np.ndarray) -> None:
        if not (np.isfinite(vals).all() and (vals >= 0).all()):
            bad = vals[~(np.isfinite(vals) & (vals >= 0))][:5]
            raise ValueError(f"{self._name}.update: values must be finite and >= 0, got {bad}")

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._tree[1])

    def find_prefix_sum(self, values: ArrayLike) -> np.ndarray:
        """For each ``v``, the leaf ``i`` with ``sum(leaves[:i]) <= v < sum(leaves[:i + 1])``.

        Values are clipped to ``[0, total]``; the search never ends on a zero leaf, so a value
        at (or, by round-off, past) ``total`` gives the last non-zero leaf.

        Args:
            values: prefix sums to look up (tensor, array or list of floats).

        Returns:
            int64 numpy array of leaf positions, same length as ``values``.
        """
        if not self._tree[1] > 0:
            raise ValueError("SumTree.find_prefix_sum: the tree is empty (total is 0); update() leaves first")
        mass = np.maximum(_as_numpy(values, np.float64), 0.0)
        np.minimum(mass, self._tree[1], out=mass)
        node = self._descend(mass.copy(), guarded=False)
        stray = self._tree[node] <= 0  # only by round-off: redo those few with a guarded descent
        if stray.any():
            node[stray] = self._descend(mass[stray], guarded=True)
        return node - self._first_leaf

    def _descend(self, mass: np.ndarray, *, guarded: bool) -> np.ndarray:
        """Tree nodes of the leaves holding prefix sums ``mass`` (modified in place).

        Unguarded, a value on a boundary of (or past) the mass can end on a zero leaf; guarded,
        the walk never enters a zero subtree, at the cost of two more operations per level.
        """
        tree = self._tree
        node = np.ones(mass.shape, dtype=np.int64)
        for _ in range(self._depth):
            node <<= 1  # left child
            left_mass = tree[node]
            go_right = mass >= left_mass
            if guarded:
                go_right &= tree[node + 1] > 0
            mass -= left_mass * go_right
            node += go_right
        return node


class MinTree(_SegmentTree):
    """Minimum over leaf values; unset leaves hold ``+inf`` (used for importance-weight normalization).

    Args:
        capacity: number of leaves; all start at ``inf``.

    Examples:
        >>> tree = MinTree(5)
        >>> tree.min
        inf
        >>> tree.update([3, 0], [2.0, 0.5])
        >>> tree.min
        0.5
    """

    _name = "MinTree"
    _empty = np.inf
    _combine = staticmethod(np.minimum)

    def _check_values(self, vals: np.ndarray) -> None:
        if np.isnan(vals).any() or (vals == -np.inf).any():
            raise ValueError(f"{self._name}.update: values must not be NaN or -inf, got {vals[:5]}")

    @property
    def min(self) -> float:
        """Smallest leaf (``inf`` while no leaf is set)."""
        return float(self._tree[1])
