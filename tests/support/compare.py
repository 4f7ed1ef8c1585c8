"""Comparing two runs: checkpoint trees bitwise, and metrics logs, with timing figures left out."""

import json

import torch

#: Wall-clock figures, which differ between otherwise identical runs.
TIMING = {"fps", "optim_steps_per_s", "time"}


def differences(a, b, path=""):
    """Paths where two checkpoint trees differ (tensors bitwise, dtype included; timing metrics skipped)."""
    if isinstance(a, torch.Tensor):
        same = isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        return [] if same else [path]
    if isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            return [f"{path}: keys differ"]
        return [d for k in a if k not in TIMING for d in differences(a[k], b[k], f"{path}[{k!r}]")]
    if isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            return [f"{path}: lengths differ"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b or (a != a and b != b) else [f"{path}: {a!r} != {b!r}"]


def log(path):
    """The lines of a ``metrics.jsonl`` without their timing figures."""
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in path.read_text().splitlines()]
