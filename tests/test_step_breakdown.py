"""tests/benchmarks/step_breakdown.py: the phases add up to the wall time and the patch is undone."""

from __future__ import annotations

import math

import pytest
import torch
from benchmarks.step_breakdown import breakdown


@pytest.mark.parametrize("fused", [False, True])
def test_breakdown_of_a_short_dqn_run_adds_up(fused) -> None:
    backward = torch.Tensor.backward
    out = breakdown(
        "dqn-cartpole", ["learning_starts=300", "optim_steps_per_batch=4", "eval_every=1000", "num_envs=4",
                         f"fused_loss={str(fused).lower()}"],
        frames=1024, seed=0,
    )
    assert torch.Tensor.backward is backward  # the timing wrapper is removed after the run
    assert out["frames"] == 1024 and out["optim_steps"] == 3 * 4  # batches 2-4 (frames >= 300) train
    per_step = out["per_step_us"]
    for phase in ("loss_forward", "optimizer_step", "event:SAMPLE_REQUESTED",
                  "event:BACKWARD_COMPLETED", "collection_and_rest"):
        assert per_step[phase] > 0, phase
    # the fused loss computes its gradients in its call (the timed wrapper forwards wrote_gradients)
    assert ("backward" in per_step) is not fused
    assert math.isclose(sum(per_step.values()), out["wall_per_step_us"], rel_tol=0.01)
    assert math.isclose(sum(out["share"].values()), 1.0, abs_tol=0.01)
