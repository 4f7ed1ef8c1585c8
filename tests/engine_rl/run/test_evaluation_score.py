"""engine_rl.run.stages.evaluation_score: a NaN evaluation does not keep the best checkpoint for good."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from ignite.engine import Engine
from ignite.handlers import EarlyStopping

from engine_rl.run.checkpoint_writes import AtomicDiskSaver, SafeCheckpoint
from engine_rl.run.stages import evaluation_score


def _evaluations(returns):
    evaluator = Engine(lambda engine, batch: None)
    for step, value in enumerate(returns, start=1):
        evaluator.state.metrics = {"return_mean": value}
        evaluator.state.iteration = step
        yield evaluator


def test_a_finite_evaluation_after_a_nan_one_becomes_the_best_checkpoint(tmp_path) -> None:
    best = SafeCheckpoint({"policy": torch.nn.Linear(1, 1)}, AtomicDiskSaver(tmp_path), filename_prefix="best",
                          n_saved=1, score_function=evaluation_score, score_name="eval_return",
                          global_step_transform=lambda engine, _: engine.state.iteration)
    names = []
    for evaluator in _evaluations([float("nan"), 5.0, 3.0, 7.0]):
        best(evaluator)
        names.append(sorted(p.name for p in tmp_path.glob("*.pt")))
    # the NaN evaluation is kept only until a finite one comes (with the raw score, it stayed the best for good)
    assert names == [["best_policy_1_eval_return=-inf.pt"], ["best_policy_2_eval_return=5.0000.pt"],
                     ["best_policy_2_eval_return=5.0000.pt"], ["best_policy_4_eval_return=7.0000.pt"]]


def test_early_stopping_counts_a_nan_evaluation_as_no_improvement() -> None:
    trainer = Engine(lambda engine, batch: None)
    trainer.state = SimpleNamespace(frames=0)
    stop = EarlyStopping(2, evaluation_score, trainer)
    for evaluator in _evaluations([4.0, float("nan")]):
        stop(evaluator)
    assert stop.counter == 1 and stop.best_score == 4.0
