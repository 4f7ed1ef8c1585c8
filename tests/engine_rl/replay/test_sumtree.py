import io

import numpy as np
import pytest
import torch

from engine_rl.replay import MinTree, SumTree


def _roundtrip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _check_inner_nodes(tree, combine):
    """Every inner node equals combine(children) (exactly: same float ops)."""
    t = tree._tree
    first = tree._first_leaf
    parents = np.arange(1, first)
    np.testing.assert_array_equal(t[parents], combine(t[2 * parents], t[2 * parents + 1]))


@pytest.mark.parametrize("capacity", [1, 5, 64, 1000])
def test_totals_match_brute_force_after_random_updates_with_duplicates(capacity):
    rng = np.random.default_rng(0)
    tree, min_tree = SumTree(capacity), MinTree(capacity)
    reference = np.zeros(capacity)
    written = np.zeros(capacity, dtype=bool)
    for _ in range(50):
        index = rng.integers(0, capacity, size=rng.integers(1, 40))  # duplicates on purpose
        values = rng.random(index.size) * 10
        tree.update(index, values)
        min_tree.update(torch.from_numpy(index), torch.from_numpy(values))
        for i, v in zip(index, values):  # sequential semantics: last write wins
            reference[i] = v
            written[i] = True
        np.testing.assert_allclose(tree.total, reference.sum(), rtol=1e-12)
        np.testing.assert_array_equal(tree.leaves, reference)
        _check_inner_nodes(tree, np.add)
        _check_inner_nodes(min_tree, np.minimum)
        assert min_tree.min == reference[written].min()


@pytest.mark.parametrize("capacity", [1, 7, 1000])
def test_fill_matches_brute_force(capacity):
    rng = np.random.default_rng(3)
    tree, min_tree = SumTree(capacity), MinTree(capacity)
    reference = np.zeros(capacity)
    for _ in range(30):
        start = int(rng.integers(0, capacity + 1))
        stop = int(rng.integers(start, capacity + 1))
        value = float(rng.random())
        tree.fill(start, stop, value)
        min_tree.fill(start, stop, value)
        reference[start:stop] = value
        index = rng.integers(0, capacity, 5)
        tree.update(index, reference[index] + 1)  # mixes with point updates
        min_tree.update(index, reference[index] + 1)
        reference[index] += 1
        np.testing.assert_array_equal(tree.leaves, reference)
        np.testing.assert_allclose(tree.total, reference.sum(), rtol=1e-12)
        _check_inner_nodes(tree, np.add)
        _check_inner_nodes(min_tree, np.minimum)
    with pytest.raises(IndexError, match=f"SumTree.fill: need 0 <= start <= stop <= {capacity}"):
        tree.fill(0, capacity + 1, 1.0)
    with pytest.raises(ValueError, match="SumTree.update: values must be finite and >= 0"):
        tree.fill(0, 1, -1.0)


def test_min_tree_matches_brute_force_and_starts_infinite():
    tree = MinTree(7)
    assert tree.min == float("inf")
    tree.update([2, 5], [3.0, 1.5])
    assert tree.min == 1.5
    tree.update([5, 5], [0.5, 4.0])  # last write wins
    assert tree.min == 3.0
    np.testing.assert_array_equal(tree[[2, 5, 0]], [3.0, 4.0, np.inf])


def test_duplicate_index_last_write_wins_and_parents_consistent():
    tree = SumTree(8)
    tree.update([3, 3, 3, 1], [5.0, 7.0, 2.0, 1.0])
    assert tree[[3]].tolist() == [2.0]
    assert tree.total == 3.0
    _check_inner_nodes(tree, np.add)


def test_scalar_value_broadcasts():
    tree = SumTree(5)
    tree.update(torch.arange(5), 2.0)
    assert tree.total == 10.0


def test_find_prefix_sum_matches_searchsorted():
    rng = np.random.default_rng(1)
    capacity = 1000
    leaves = rng.integers(0, 10, size=capacity).astype(np.float64)  # integers: sums are exact, zeros included
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), leaves)
    values = rng.random(20_000) * leaves.sum()
    expected = np.searchsorted(np.cumsum(leaves), values, side="right")
    np.testing.assert_array_equal(tree.find_prefix_sum(values), expected)
    np.testing.assert_array_equal(tree.find_prefix_sum(torch.from_numpy(values)), expected)
    assert (leaves[tree.find_prefix_sum(values)] > 0).all()


def test_find_prefix_sum_edges_never_land_on_zero_leaves():
    tree = SumTree(10)  # padded to 16 leaves
    tree.update([0, 3, 6], [0.0, 2.0, 1.0])
    out = tree.find_prefix_sum([-1.0, 0.0, 1.999, 2.0, 3.0, 3.0 + 1e-9, 1e9])
    assert out.tolist() == [3, 3, 3, 6, 6, 6, 6]


def test_capacity_one():
    tree = SumTree(1)
    tree.update([0], [0.5])
    assert tree.total == 0.5
    assert tree.find_prefix_sum([0.0, 0.25, 0.5]).tolist() == [0, 0, 0]


def test_state_dict_round_trip_weights_only():
    rng = np.random.default_rng(2)
    tree = SumTree(100)
    tree.update(rng.integers(0, 100, 60), rng.random(60))
    state = _roundtrip(tree.state_dict())
    assert state["leaves"].dtype == torch.float64
    restored = SumTree(100)
    restored.load_state_dict(state)
    assert restored.total == pytest.approx(tree.total, rel=1e-12)
    np.testing.assert_array_equal(restored.leaves, tree.leaves)
    values = rng.random(500) * tree.total
    np.testing.assert_array_equal(restored.find_prefix_sum(values), tree.find_prefix_sum(values))

    min_tree = MinTree(10)
    min_tree.update([4], [2.0])
    restored_min = MinTree(10)
    restored_min.load_state_dict(_roundtrip(min_tree.state_dict()))
    assert restored_min.min == 2.0 and restored_min[[0]].tolist() == [float("inf")]


def test_load_state_dict_checks_capacity():
    with pytest.raises(ValueError, match="SumTree.load_state_dict: capacity 3"):
        SumTree(4).load_state_dict(SumTree(3).state_dict())


@pytest.mark.parametrize("capacity", [0, -3, 2.5, True, None])
def test_bad_capacity(capacity):
    with pytest.raises(ValueError, match="SumTree: capacity must be a positive int"):
        SumTree(capacity)


def test_bad_updates_and_queries():
    tree = SumTree(4)
    with pytest.raises(ValueError, match="SumTree.find_prefix_sum: the tree is empty"):
        tree.find_prefix_sum([0.0])
    with pytest.raises(ValueError, match="SumTree.update: values must be finite and >= 0"):
        tree.update([0], [-1.0])
    with pytest.raises(ValueError, match="SumTree.update: values must be finite and >= 0"):
        tree.update([0], [float("nan")])
    with pytest.raises(IndexError, match=r"SumTree.update: index must lie in \[0, 4\)"):
        tree.update([4], [1.0])
    with pytest.raises(IndexError, match="SumTree.update: index"):
        tree.update([-1], [1.0])
    with pytest.raises(ValueError, match="one entry per index"):
        tree.update([0, 1], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="MinTree.update: values must not be NaN"):
        MinTree(2).update([0], [float("nan")])
    assert tree.total == 0.0  # failed updates changed nothing
