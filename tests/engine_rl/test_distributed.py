"""Distributed helpers (engine_rl.distributed) and handlers (handlers.distributed) in a real
2-process gloo group.

The group is started once for the whole file: this file, run as a script, spawns two processes
(``run_parallel(..., nproc_per_node=2, backend="gloo")``) that run every check in
``CHECKS`` and save what they saw to ``rank<r>.pt``; the tests read those files. One-process
behaviour (every helper is a no-op there) is tested directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from engine_rl import create_trainer
from engine_rl.algos.normalization import Normalizer
from engine_rl.distributed import GradientAllReduce, gather_rows, module_tensors, reduce_moments
from engine_rl.recipes.ppo_cartpole import PPOConfig
from engine_rl.run.launch import SEED_STRIDE, rank_config, rank_seed, run_parallel
from engine_rl.run.rank_checkpoints import common_checkpoint_step, rank_checkpoint_dir, resume_path, saved_world_size

ROOT = Path(__file__).resolve().parents[2]


# -- what each rank runs ---------------------------------------------------------------------
def _grads(rank: int, folder: Path) -> dict:
    """Same weights, rank-dependent data; `only0` gets a gradient on rank 0 only, `unused` on none."""
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    only0 = torch.nn.Parameter(torch.ones(2))
    unused = torch.nn.Parameter(torch.ones(2))
    x = torch.full((4, 3), float(rank + 1))
    loss = net(x).pow(2).mean() + (only0.sum() * 3 if rank == 0 else 0)
    loss.backward()
    local = net.weight.grad.clone()
    sync = GradientAllReduce([net, only0, unused])
    sync()
    return {"local_weight_grad": local, "weight_grad": net.weight.grad, "bias_grad": net.bias.grad,
            "only0_grad": only0.grad, "unused_grad_is_none": unused.grad is None}


def _moments(rank: int, folder: Path) -> dict:
    values = torch.tensor([1.0, 2.0]) if rank == 0 else torch.tensor([3.0, 6.0, 10.0])
    empty_or_one = torch.tensor([]) if rank == 0 else torch.tensor([4.0])
    return {"moments": list(reduce_moments(values)), "one": list(reduce_moments(empty_or_one)),
            "none": [reduce_moments(torch.tensor([]))[0]]}


def _gather(rank: int, folder: Path) -> dict:
    equal = torch.full((2, 3), float(rank))
    unequal = torch.arange(rank + 1) + 10 * rank
    return {"equal": gather_rows(equal), "unequal": gather_rows(unequal)}


def _broadcast(rank: int, folder: Path) -> dict:
    from engine_rl.distributed import broadcast_tensors

    torch.manual_seed(rank)  # different weights and buffers on each rank
    norm = Normalizer((2,))
    norm.update(torch.randn(5, 2))
    net = torch.nn.Sequential(norm, torch.nn.Linear(2, 2))
    broadcast_tensors(module_tensors(net))
    return {f"tensor{i}": t.detach().clone() for i, t in enumerate(module_tensors(net))}


def _checkpoints(rank: int, folder: Path) -> dict:
    ckpt = folder / "checkpoints"
    mine = rank_checkpoint_dir(ckpt, rank)
    mine.mkdir(parents=True, exist_ok=True)
    torch.distributed.barrier()
    none_yet = common_checkpoint_step(ckpt)
    steps = (100, 200, 300) if rank == 0 else (100, 200)  # rank 1 was killed before writing 300
    for step in steps:
        (mine / f"checkpoint_{step}.pt").write_bytes(b"")
    torch.distributed.barrier()
    return {"none_yet": none_yet is None, "common": common_checkpoint_step(ckpt),
            "resume": str(resume_path(ckpt, True).relative_to(folder)),
            "resume_named": str(resume_path(ckpt, ckpt / "checkpoint_100.pt").relative_to(folder)),
            "world": saved_world_size(ckpt)}


def _frames_and_epochs(rank: int, folder: Path) -> dict:
    from engine_rl.events import RLEvents
    from handlers.distributed import EpochStopSync, FrameSync

    w = torch.nn.Parameter(torch.zeros(()))
    frames_per_batch = 4 if rank == 0 else 6
    data = [TensorDict({"x": torch.zeros(frames_per_batch)}, [frames_per_batch])] * 3
    trainer = create_trainer(data, lambda td: {"loss": w * 0}, torch.optim.SGD([w], lr=0.1), num_epochs=4)
    seen = []
    trainer.add_event_handler(RLEvents.BATCH_COLLECTED, lambda e: seen.append(e.state.frames))

    epochs_this_batch = []
    trainer.add_event_handler(RLEvents.BATCH_COLLECTED, lambda e: epochs_this_batch.clear())

    def stop_on_rank1(engine):  # like KLEarlyStop on one rank only: after 2 of 4 epochs
        epochs_this_batch.append(1)
        if rank == 1 and len(epochs_this_batch) == 2:
            engine.state.end_optim_epochs = True

    trainer.add_event_handler(RLEvents.EPOCH_DONE, stop_on_rank1)
    FrameSync().attach(trainer)  # attached last, runs first
    EpochStopSync().attach(trainer)
    trainer.run(max_epochs=1)
    return {"frames": trainer.state.frames, "seen": seen, "optim_epochs": trainer.state.optim_epochs}


def _episode_stats(rank: int, folder: Path) -> dict:
    from handlers.distributed import AllReducedEpisodeStats

    if rank == 0:  # two episodes end: returns 10 and 20
        done, ret = [False, True, True], [1.0, 10.0, 20.0]
    else:  # one ends: return 60
        done, ret = [False, False, True], [5.0, 6.0, 60.0]
    batch = TensorDict({("next", "done"): torch.tensor(done), ("next", "episode_return"): torch.tensor(ret),
                        ("next", "episode_length"): torch.tensor([int(r) for r in ret])}, [3])
    nothing = batch.clone()
    nothing["next", "done"] = torch.zeros(3, dtype=torch.bool)
    w = torch.nn.Parameter(torch.zeros(()))
    trainer = create_trainer([batch, nothing], lambda td: {"loss": w * 0}, torch.optim.SGD([w], lr=0.1))
    AllReducedEpisodeStats().attach(trainer)
    trainer.run(max_epochs=1)
    m = trainer.state.metrics
    return {k: m[k] for k in ("train_return_mean", "train_return_std", "train_length_mean", "episodes")}


def _eval_and_normalizer(rank: int, folder: Path) -> dict:
    from ignite.engine import Engine, Events

    from engine_rl.evaluation import EVAL_METRICS
    from handlers.distributed import EvalSync, GatheredUpdates

    returns = torch.tensor([10.0, 30.0]) if rank == 0 else torch.tensor([50.0, 70.0, 90.0])
    nan = float("nan")
    success = torch.tensor([1.0, nan] if rank == 0 else [0.0, 1.0, 1.0], dtype=torch.float64)

    def evaluate(engine, _):
        engine.state.metrics.update(dict.fromkeys(EVAL_METRICS, -1.0))  # this rank's scores, replaced
        return {"return": returns, "length": returns.long(), "info_success": success}

    evaluator = Engine(evaluate)
    at_completed = {}
    evaluator.add_event_handler(Events.COMPLETED, lambda e: at_completed.update(e.state.metrics))
    EvalSync().attach(evaluator)
    evaluator.run([None], max_epochs=1)

    norm = Normalizer((2,), epsilon=0.0)
    GatheredUpdates(norm).update(torch.full((3, 2), float(rank)))
    return {"eval": at_completed, "norm_mean": norm.mean, "norm_var": norm.var, "norm_count": norm.count}


def _data_parallel_regression(rank: int, folder: Path) -> dict:
    """make_data_parallel on a least-squares trainer: each rank sees half the data; the result
    must equal one process stepping on the mean gradient of all the data."""
    from handlers.distributed import make_data_parallel

    torch.manual_seed(rank)  # different initial weights: rank 0's are broadcast
    net = torch.nn.Linear(3, 1)
    gen = torch.Generator().manual_seed(123)
    xs = torch.randn(2, 5, 8, 3, generator=gen)  # [rank, batch, rows, features]
    ys = xs.sum(-1, keepdim=True) * 0.5 + 1.0
    data = [TensorDict({"x": xs[rank, i], "y": ys[rank, i]}, [8]) for i in range(5)]
    trainer = create_trainer(data, lambda td: {"loss": (net(td["x"]) - td["y"]).pow(2).mean()},
                             torch.optim.SGD(net.parameters(), lr=0.05), optim_steps_per_batch=2)
    make_data_parallel(trainer, modules=[net])
    trainer.run(max_epochs=1)

    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 1)  # what rank 0 starts from
    opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for i in range(5):
        for _ in range(2):
            opt.zero_grad()
            (ref(xs[:, i].reshape(-1, 3)) - ys[:, i].reshape(-1, 1)).pow(2).mean().backward()
            opt.step()
    return {"weight": net.weight.detach(), "bias": net.bias.detach(), "ref_weight": ref.weight.detach(),
            "ref_bias": ref.bias.detach(), "frames": trainer.state.frames}


def _raised(run) -> list[str]:
    """``[type name, message]`` of what ``run()`` raised (``[]``: nothing)."""
    try:
        run()
    except Exception as err:
        return [type(err).__name__, str(err)]
    return []


def _nonfinite_decisions(rank: int, folder: Path) -> dict:
    """NaNGuard and EvalSync decide with the other rank: a non-finite loss output on rank 1 alone
    (a diagnostic entry: the averaged gradients stay finite) is skipped by both ranks, or stops both
    with rank 1's error; a NaN gradient (averaged: on both) is reported once, by rank 0, before the
    clipper; NaN data or a NaN evaluation on rank 1 stops both with rank 1's error."""
    from ignite.engine import Engine

    from engine_rl.events import RLEvents
    from engine_rl.finite import NonFiniteError
    from handlers import GradClipper, NaNGuard
    from handlers.distributed import EvalSync, add_handler_first, make_data_parallel

    def trainer_with(nonfinite: str, *, bad_steps=(), nan_grad_step=None, nan_batch=None, clip=False):
        torch.manual_seed(0)
        net = torch.nn.Linear(2, 1)
        batches = [TensorDict({"observation": torch.full((4, 2), float(rank + i))}, [4]) for i in range(3)]
        if nan_batch is not None and rank == 1:
            batches[nan_batch]["observation"][0, 0] = float("nan")
        steps = []

        def loss(td):
            steps.append(None)
            bad = rank == 1 and len(steps) in bad_steps
            return {"loss": net(td["observation"]).pow(2).mean(), "diag": torch.tensor(float("nan") if bad else 0.0)}

        trainer = create_trainer(batches, loss, torch.optim.SGD(net.parameters(), lr=0.1), optim_steps_per_batch=2)
        guard = NaNGuard(parameters=None if clip else net, nonfinite=nonfinite).attach(trainer)
        if clip:
            GradClipper(net, max_norm=1.0, error_if_nonfinite=True).attach(trainer)
        make_data_parallel(trainer, modules=[net])

        def poison(engine):  # rank 1's own gradient, before the average spreads it
            if rank == 1 and engine.state.optim_steps == nan_grad_step:
                net.weight.grad[0, 0] = float("nan")

        add_handler_first(trainer, RLEvents.BACKWARD_COMPLETED, poison)
        return trainer, net, guard

    skipping, net, guard = trainer_with("skip", bad_steps=(2, 5))
    skipping.run(max_epochs=1)
    out = {"skipped": skipping.state.metrics["nonfinite_skipped"], "weight": net.weight.detach().clone(),
           "optim_steps": skipping.state.optim_steps}
    stopping = trainer_with("stop", bad_steps=(4,))[0]
    out["stop_loss"] = _raised(lambda: stopping.run(max_epochs=1)) + [stopping.state.optim_steps]
    clipped = trainer_with("stop", nan_grad_step=2, clip=True)[0]
    out["stop_gradient"] = _raised(lambda: clipped.run(max_epochs=1))
    bad_data = trainer_with("stop", nan_batch=1)[0]
    out["stop_data"] = _raised(lambda: bad_data.run(max_epochs=1))

    def evaluate(engine, _):
        if rank == 1 and engine.state.epoch == 1 and engine.nan:
            raise NonFiniteError("run_episodes: non-finite value (NaN or Inf) in key 'next.reward' of ...")
        return {"return": torch.ones(2), "length": torch.ones(2, dtype=torch.int64)}

    evaluator = Engine(evaluate)
    EvalSync().attach(evaluator)
    evaluator.nan = True
    out["eval"] = _raised(lambda: evaluator.run([None], max_epochs=1))
    evaluator.nan = False
    out["eval_after"] = _raised(lambda: evaluator.run([None], max_epochs=1))  # the ranks are still in step
    return out


CHECKS = [_grads, _moments, _gather, _broadcast, _checkpoints, _frames_and_epochs, _episode_stats,
          _eval_and_normalizer, _data_parallel_regression, _nonfinite_decisions]


def _worker(local_rank: int, folder: str) -> None:
    import ignite.distributed as idist

    torch.set_num_threads(1)
    rank, results = idist.get_rank(), {"world_size": idist.get_world_size()}
    for check in CHECKS:
        results[check.__name__.lstrip("_")] = check(rank, Path(folder))
    torch.save(results, Path(folder) / f"rank{rank}.pt")


# -- the tests -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("two_ranks")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, __file__, str(folder)], capture_output=True, text=True, timeout=180,
                         env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    return [torch.load(folder / f"rank{r}.pt", weights_only=True) for r in (0, 1)]


def test_two_gloo_processes_ran_every_check(ranks):
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert all(check.__name__.lstrip("_") in r for r in ranks for check in CHECKS)


def test_gradients_are_averaged_and_missing_ones_handled(ranks):
    g0, g1 = ranks[0]["grads"]["local_weight_grad"], ranks[1]["grads"]["local_weight_grad"]
    assert not torch.equal(g0, g1)
    for r in ranks:
        assert torch.allclose(r["grads"]["weight_grad"], (g0 + g1) / 2)
        assert torch.equal(r["grads"]["only0_grad"], torch.full((2,), 1.5))  # 3 on rank 0, 0 on rank 1
        assert r["grads"]["unused_grad_is_none"]
    assert torch.equal(ranks[0]["grads"]["weight_grad"], ranks[1]["grads"]["weight_grad"])  # bit for bit
    assert torch.equal(ranks[0]["grads"]["bias_grad"], ranks[1]["grads"]["bias_grad"])


def test_moments_weigh_every_value_whatever_its_rank(ranks):
    all_values = torch.tensor([1.0, 2.0, 3.0, 6.0, 10.0], dtype=torch.float64)
    for r in ranks:
        n, mean, std = r["moments"]["moments"]
        assert n == 5 and mean == pytest.approx(4.4) and std == pytest.approx(all_values.std(correction=0).item())
        assert r["moments"]["one"] == [1, 4.0, 0.0]  # rank 0 had no value
        assert r["moments"]["none"] == [0]


def test_gather_rows_in_rank_order_equal_and_unequal_sizes(ranks):
    for r in ranks:
        assert r["gather"]["equal"].tolist() == [[0.0] * 3] * 2 + [[1.0] * 3] * 2
        assert r["gather"]["unequal"].tolist() == [0, 10, 11]


def test_broadcast_copies_rank0_parameters_and_buffers(ranks):
    a, b = ranks[0]["broadcast"], ranks[1]["broadcast"]
    assert len(a) == 7  # normalizer mean, var, count, shift, scale; linear weight, bias
    assert all(torch.equal(a[k], b[k]) for k in a)
    torch.manual_seed(0)  # what rank 0 built
    norm = Normalizer((2,))
    norm.update(torch.randn(5, 2))
    expected = module_tensors(torch.nn.Sequential(norm, torch.nn.Linear(2, 2)))
    assert all(torch.equal(a[f"tensor{i}"], t.detach()) for i, t in enumerate(expected))


def test_resume_picks_the_newest_checkpoint_every_rank_holds(ranks):
    for rank, r in enumerate(ranks):
        c = r["checkpoints"]
        assert c["none_yet"] and c["common"] == 200 and c["world"] == 2
        sub = "checkpoints" if rank == 0 else "checkpoints/rank1"
        assert c["resume"] == f"{sub}/checkpoint_200.pt"
        assert c["resume_named"] == f"{sub}/checkpoint_100.pt"


def test_frames_are_summed_before_other_handlers_and_epoch_stops_are_shared(ranks):
    for r in ranks:
        f = r["frames_and_epochs"]
        assert f["frames"] == 3 * (4 + 6)
        assert f["seen"] == [10, 20, 30]  # the later BATCH_COLLECTED handler saw the summed frames
        assert f["optim_epochs"] == 3 * 2  # rank 1 stopped after 2 of 4 epochs: so did rank 0


def test_episode_stats_over_all_ranks(ranks):
    for r in ranks:
        s = r["episode_stats"]
        assert s["train_return_mean"] == pytest.approx(30.0)
        assert s["train_return_std"] == pytest.approx(torch.tensor([10.0, 20.0, 60.0]).std(correction=0).item())
        assert s["train_length_mean"] == pytest.approx(30.0)
        assert s["episodes"] == 3


def test_eval_scores_and_normalizer_statistics_over_all_ranks(ranks):
    returns = torch.tensor([10.0, 30.0, 50.0, 70.0, 90.0], dtype=torch.float64)
    for r in ranks:
        e = r["eval_and_normalizer"]["eval"]
        assert e["return_mean"] == pytest.approx(50.0) and e["length_mean"] == pytest.approx(50.0)
        assert e["return_std"] == pytest.approx(returns.std(correction=0).item())
        assert (e["return_min"], e["return_max"]) == (10.0, 90.0)
        assert e["info_success"] == pytest.approx(0.75)  # 3 of the 4 episodes that reported it, over both ranks
    n0, n1 = ranks[0]["eval_and_normalizer"], ranks[1]["eval_and_normalizer"]
    assert n0["norm_mean"].tolist() == [0.5, 0.5] and n0["norm_count"].item() == 6
    assert all(torch.equal(n0[k], n1[k]) for k in ("norm_mean", "norm_var", "norm_count"))


def test_data_parallel_trainer_equals_one_process_on_all_the_data(ranks):
    a, b = ranks[0]["data_parallel_regression"], ranks[1]["data_parallel_regression"]
    assert torch.equal(a["weight"], b["weight"]) and torch.equal(a["bias"], b["bias"])  # identical ranks
    assert torch.allclose(a["weight"], a["ref_weight"], atol=1e-6)
    assert torch.allclose(a["bias"], a["ref_bias"], atol=1e-6)
    assert a["frames"] == b["frames"] == 2 * 5 * 8


def test_a_step_one_rank_finds_non_finite_is_skipped_by_every_rank(ranks):
    a, b = ranks[0]["nonfinite_decisions"], ranks[1]["nonfinite_decisions"]
    assert a["skipped"] == b["skipped"] == 2 and a["optim_steps"] == b["optim_steps"] == 6
    assert torch.equal(a["weight"], b["weight"])  # one model: no rank stepped alone


def test_a_stop_on_one_rank_stops_every_rank_and_one_of_them_says_why(ranks):
    a, b = ranks[0]["nonfinite_decisions"], ranks[1]["nonfinite_decisions"]
    # rank 1's loss output: rank 1 reports, rank 0 stops with it (engine-rl train prints nothing for that)
    assert b["stop_loss"] == [
        "NonFiniteError", "NaNGuard: non-finite loss output (NaN or Inf) 'diag' at optim step 4 (batch 2, frames 16); "
        "the optimizer step was not taken", 4]
    assert a["stop_loss"] == [
        "NonFiniteElsewhere", "NaNGuard: rank 1 of 2 found a non-finite loss output or gradient at batch 2 (frames 16, "
        "optim step 4) and stops the run with its error; this rank stops with it", 4]
    # a NaN gradient is averaged into both ranks: rank 0 says it, before the clipper could raise it twice
    assert a["stop_gradient"] == [
        "NonFiniteError", "NaNGuard: non-finite gradient (NaN or Inf) of parameter 'weight' at optim step 2 "
        "(batch 1, frames 8); the optimizer step was not taken"]
    assert b["stop_gradient"] == [
        "NonFiniteElsewhere", "NaNGuard: rank 0 of 2 found a non-finite loss output or gradient at batch 1 (frames 8, "
        "optim step 2) and stops the run with its error; this rank stops with it"]
    assert b["stop_data"] == [
        "NonFiniteError", "NaNGuard: non-finite value (NaN or Inf) in batch key 'observation' at batch 2 "
        "(frames 16, optim step 2)"]
    assert a["stop_data"] == [
        "NonFiniteElsewhere", "NaNGuard: rank 1 of 2 found a non-finite value in its batch at batch 2 (frames 16, "
        "optim step 2) and stops the run with its error; this rank stops with it"]


def test_a_nan_in_one_ranks_evaluation_stops_every_rank(ranks):
    a, b = ranks[0]["nonfinite_decisions"], ranks[1]["nonfinite_decisions"]
    assert b["eval"] == ["NonFiniteError", "run_episodes: non-finite value (NaN or Inf) in key 'next.reward' of ..."]
    assert a["eval"] == ["NonFiniteElsewhere", "EvalSync: rank 1 of 2 found a non-finite value in its evaluation and "
                                               "stops the run with its error; this rank stops with it"]
    assert a["eval_after"] == b["eval_after"] == []


# -- one process: everything is a no-op or the local answer -----------------------------------
def test_one_process_helpers_are_local():
    assert reduce_moments(torch.tensor([2.0, 4.0])) == (2, 3.0, 1.0)
    x = torch.arange(3)
    assert gather_rows(x) is x
    assert rank_seed(5, 0) == 5 and rank_seed(5, 3) == 5 + 3 * SEED_STRIDE
    with pytest.raises(ValueError, match="rank_seed: argument rank must be a non-negative int, got -1"):
        rank_seed(0, -1)


def test_rank_config_shifts_only_the_seeds():
    cfg = PPOConfig(seed=2, eval_seed=7, lr=3e-4)
    shifted = rank_config(cfg, 2)
    assert (shifted.seed, shifted.eval_seed, shifted.lr) == (2 + 2 * SEED_STRIDE, 7 + 2 * SEED_STRIDE, 3e-4)
    assert cfg.seed == 2 and rank_config(cfg, 0) is cfg
    with pytest.raises(TypeError, match="rank_config: argument config must be a dataclass instance, got dict"):
        rank_config({"seed": 1}, 1)


def test_gradient_all_reduce_errors():
    with pytest.raises(TypeError, match="GradientAllReduce: argument parameters must hold tensors, modules or "
                                        "optimizers, got str"):
        GradientAllReduce(["w"])
    with pytest.raises(ValueError, match="GradientAllReduce: argument parameters holds no parameter"):
        GradientAllReduce([torch.nn.ReLU()])


def test_checkpoint_folders_and_world_size_check(tmp_path):
    ckpt = tmp_path / "checkpoints"
    assert saved_world_size(ckpt) == 1 and resume_path(ckpt, True) is None
    (ckpt / "checkpoint_8.pt").parent.mkdir(parents=True)
    (ckpt / "checkpoint_8.pt").write_bytes(b"")
    assert resume_path(ckpt, True) == ckpt / "checkpoint_8.pt"
    (ckpt / "rank1").mkdir()
    assert saved_world_size(ckpt) == 2
    with pytest.raises(ValueError, match=r"a run of 2 process\(es\) and this run has 1; resume it with --nproc 2"):
        resume_path(ckpt, True)


def test_epoch_stops_are_synced_only_where_a_kl_stop_can_end_epochs():
    from handlers.distributed import make_data_parallel
    from handlers.kl_stop import KLEarlyStop

    def trainer(num_epochs, kl):
        w = torch.nn.Parameter(torch.zeros(()))
        t = create_trainer([TensorDict({}, [2])], lambda td: {"loss": w * 0}, torch.optim.SGD([w], lr=0.1),
                           num_epochs=num_epochs)
        if kl:
            KLEarlyStop(0.01).attach(t)
        return t

    assert "epoch_stop" in make_data_parallel(trainer(4, kl=True))
    assert "epoch_stop" not in make_data_parallel(trainer(4, kl=False))  # nothing can end them early
    assert "epoch_stop" not in make_data_parallel(trainer(1, kl=True))  # one epoch: nothing to skip
    assert "epoch_stop" in make_data_parallel(trainer(4, kl=False), sync_epoch_stops=True)


def test_the_syncs_run_before_the_handlers_attached_earlier(monkeypatch):
    """make_data_parallel comes after the recipe's handlers, yet its frame, gradient and score syncs
    run first on their events (the trainer and evaluator re-attach the others after them); on a plain
    Ignite engine, which keeps no record of its handlers, add_handler_first can only append."""
    from ignite.engine import Engine, Events

    from engine_rl import RLEvents
    from engine_rl.collectors import make_vec_env
    from engine_rl.evaluation import create_evaluator
    from handlers import GradClipper
    from handlers.distributed import EvalSync, FrameSync, GradientSync, add_handler_first, make_data_parallel

    calls = []
    for cls in (FrameSync, GradientSync, EvalSync):  # one process: the syncs are no-ops; record when they run
        monkeypatch.setattr(cls, "__call__", lambda self, engine, name=cls.__name__: calls.append(name))
    net = torch.nn.Linear(2, 1)
    trainer = create_trainer([TensorDict({"x": torch.ones(4, 2)}, [4])], lambda td: {"loss": net(td["x"]).mean()},
                             torch.optim.SGD(net.parameters(), lr=0.1))
    trainer.add_event_handler(RLEvents.BATCH_COLLECTED(every=1), lambda e: calls.append("batch handler"))
    clipper = GradClipper(net, max_norm=1.0).attach(trainer)
    trainer.add_event_handler(RLEvents.BACKWARD_COMPLETED, lambda e: calls.append("backward handler"))
    policy = lambda td: td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))  # noqa: E731
    evaluator = create_evaluator(make_vec_env("CartPole-v1", 1), policy, num_episodes=1, seed=0)
    evaluator.add_event_handler(Events.ITERATION_COMPLETED, lambda e: calls.append("evaluator handler"))
    attached = make_data_parallel(trainer, modules=[net], evaluators=[evaluator])
    assert trainer.attached_handlers(RLEvents.BACKWARD_COMPLETED)[0] is attached["gradients"]
    clipper.remove()  # a handle given before the re-attachment still works
    trainer.run(max_epochs=1)
    evaluator.run()
    assert calls == ["FrameSync", "batch handler", "GradientSync", "backward handler", "EvalSync", "evaluator handler"]

    calls.clear()
    plain = Engine(lambda e, batch: None)
    plain.add_event_handler(Events.ITERATION_COMPLETED, lambda e: calls.append("earlier"))
    add_handler_first(plain, Events.ITERATION_COMPLETED, lambda e: calls.append("later"))
    plain.run([None])
    assert calls == ["earlier", "later"]


def test_run_parallel_argument_errors():
    with pytest.raises(ValueError, match="run_parallel: argument nproc_per_node must be a positive int, got 0"):
        run_parallel(print, nproc_per_node=0, backend="gloo")


if __name__ == "__main__":  # the 2-process group of the `ranks` fixture
    run_parallel(_worker, sys.argv[1], nproc_per_node=2, backend="gloo")
