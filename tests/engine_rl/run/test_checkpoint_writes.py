"""Writing checkpoints safely: rotation that never leaves fewer than n_saved complete files, a full
disk or a permission error as one clear error with the previous checkpoint intact, and no
checkpoint written from NaN/Inf networks or optimizers."""

import errno
import os
from pathlib import Path

import pytest
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint

from engine_rl.run.checkpoint import (
    AtomicDiskSaver,
    CheckpointError,
    InferenceState,
    SafeCheckpoint,
    check_finite,
    list_checkpoints,
    load_checkpoint,
)


def names(folder):
    return sorted(p.name for p in Path(folder).iterdir())


def complete(folder):
    """The checkpoint files of ``folder`` that load (partial files are not checkpoint files)."""
    return [p.name for p in list_checkpoints(folder) if load_checkpoint(p) is not None]


def trained_net():
    net = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Linear(4, 1))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    net(torch.ones(3, 2)).sum().backward()
    opt.step()  # the optimizer has state (exp_avg, exp_avg_sq)
    return net, opt


def two_objects():
    """Two entries, so that Ignite names the files ``checkpoint_<iteration>.pt``."""
    net = torch.nn.Linear(2, 1)
    return {"net": net, "optimizer": torch.optim.SGD(net.parameters(), lr=0.1)}


def run_with_checkpoints(folder, checkpoint_cls=Checkpoint, n_saved=2, iterations=6):
    trainer = Engine(lambda engine, batch: None)
    checkpoint = checkpoint_cls(two_objects(), AtomicDiskSaver(folder), n_saved=n_saved)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, checkpoint)
    trainer.run(range(iterations), max_epochs=1)
    return trainer, checkpoint


# -- rotation ------------------------------------------------------------------------------------
@pytest.mark.parametrize("checkpoint_cls", [Checkpoint, SafeCheckpoint])
def test_rotation_keeps_n_saved_complete_checkpoints_at_every_moment(checkpoint_cls, tmp_path, monkeypatch):
    """A spy looks at the folder when each write starts and when each file is deleted: the files
    being rotated out go only once the new one is complete, so n_saved complete files always exist."""
    seen = []
    real_save, real_unlink = torch.save, Path.unlink

    def save(obj, f, *args, **kwargs):
        seen.append(("write", complete(tmp_path)))
        return real_save(obj, f, *args, **kwargs)

    def unlink(self, missing_ok=False):
        if self.name.startswith("checkpoint_"):
            seen.append(("delete " + self.name, complete(tmp_path)))
        return real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(Path, "unlink", unlink)
    run_with_checkpoints(tmp_path, checkpoint_cls, n_saved=2)
    assert seen[:3] == [("write", []), ("write", ["checkpoint_1.pt"]), ("write", ["checkpoint_1.pt", "checkpoint_2.pt"])]
    assert seen[3] == ("delete checkpoint_1.pt", ["checkpoint_1.pt", "checkpoint_2.pt", "checkpoint_3.pt"])
    assert all(len(files) == 2 for what, files in seen[2:] if what == "write")  # two complete while writing
    assert all(len(files) == 3 for what, files in seen if what.startswith("delete"))  # deleted once a new one is in
    assert names(tmp_path) == ["checkpoint_5.pt", "checkpoint_6.pt"]


def test_saver_removes_a_file_after_the_next_write_and_a_missing_file_is_no_error(tmp_path):
    saver = AtomicDiskSaver(tmp_path)
    saver({"x": torch.zeros(1)}, "a.pt")
    saver.remove("a.pt")
    saver.remove("gone.pt")  # rotation of a file deleted by an earlier process: nothing to do
    assert names(tmp_path) == ["a.pt"]
    saver({"x": torch.ones(1)}, "b.pt")
    assert names(tmp_path) == ["b.pt"] and saver.to_remove == []
    saver.remove("b.pt")  # Ignite removes a file before writing it again under its own name
    saver({"x": torch.full((1,), 2.0)}, "b.pt")
    assert names(tmp_path) == ["b.pt"] and load_checkpoint(tmp_path / "b.pt")["x"].item() == 2.0


def test_an_old_file_that_cannot_be_deleted_stays_and_is_tried_again_after_the_next_write(tmp_path, monkeypatch):
    saver = AtomicDiskSaver(tmp_path)
    saver({"x": torch.zeros(1)}, "a.pt")
    saver.remove("a.pt")
    real_unlink = Path.unlink

    def unlink(self, missing_ok=False):
        if self.name == "a.pt":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    saver({"x": torch.zeros(1)}, "b.pt")  # written; the old file stays, no error
    assert names(tmp_path) == ["a.pt", "b.pt"] and saver.to_remove == ["a.pt"]
    monkeypatch.undo()
    saver({"x": torch.zeros(1)}, "c.pt")
    assert names(tmp_path) == ["b.pt", "c.pt"]


def test_a_restored_best_naming_a_deleted_file_rotates_without_error(tmp_path):
    """The crash of issue 27: a best-checkpoint state saved in a full checkpoint names a file that the
    best's own rotation deleted later; resumed, the next better score replaces it as usual."""
    net = torch.nn.Linear(2, 1)
    evaluator = Engine(lambda engine, batch: None)
    best = Checkpoint({"net": net}, AtomicDiskSaver(tmp_path), n_saved=1, score_name="score",
                      score_function=lambda engine: engine.state.metrics["score"])
    best.load_state_dict({"_saved": [(1.0, "net_score=1.0000.pt")]})  # that file is gone
    evaluator.state.metrics["score"] = 2.0
    best(evaluator)
    assert names(tmp_path) == ["net_score=2.0000.pt"]
    evaluator.state.metrics["score"] = 0.5  # the restored score still counts: no worse file replaces it
    best(evaluator)
    assert names(tmp_path) == ["net_score=2.0000.pt"]


# -- a full disk, no permission ------------------------------------------------------------------
def failing_save(after_calls, error):
    """torch.save that works ``after_calls`` times, then writes a few bytes and raises ``error``."""
    real_save, calls = torch.save, {"n": 0}

    def save(obj, f, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > after_calls:
            f.write(b"PK\x03\x04 half a checkpoint")
            raise error()
        return real_save(obj, f, *args, **kwargs)

    return save


def torch_style_enospc():
    """What torch.save raises when the disk fills: its stream writer's RuntimeError, the OSError as context."""
    try:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    except OSError:
        try:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        except RuntimeError as err:
            return err


@pytest.mark.parametrize("error, reason", [
    (lambda: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), "No space left on device"),
    (torch_style_enospc, "No space left on device"),
    (lambda: PermissionError(errno.EACCES, os.strerror(errno.EACCES)), "Permission denied"),
], ids=["ENOSPC", "torch-RuntimeError", "EACCES"])
def test_a_failed_write_is_one_error_naming_the_file_and_the_reason_and_keeps_the_previous_checkpoints(
    error, reason, tmp_path, monkeypatch
):
    trainer = Engine(lambda engine, batch: None)
    checkpoint = SafeCheckpoint(two_objects(), AtomicDiskSaver(tmp_path), n_saved=2)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, checkpoint)
    monkeypatch.setattr(torch, "save", failing_save(2, error))
    with pytest.raises(CheckpointError) as info:
        trainer.run(range(6), max_epochs=1)
    message = str(info.value)
    assert message == (
        f"checkpoint {tmp_path / 'checkpoint_3.pt'}: cannot be written ({reason}); the partial file was removed; "
        f"the previous checkpoint, {tmp_path / 'checkpoint_2.pt'}, is intact"
    )
    assert "\n" not in message and "inline_container" not in message
    assert names(tmp_path) == ["checkpoint_1.pt", "checkpoint_2.pt"]  # no partial file; the oldest kept too
    assert [item.filename for item in checkpoint._saved] == ["checkpoint_1.pt", "checkpoint_2.pt"]

    monkeypatch.undo()  # space again: rotation goes on from the files on disk
    trainer.state.iteration = 3
    checkpoint(trainer)
    assert names(tmp_path) == ["checkpoint_2.pt", "checkpoint_3.pt"]
    assert load_checkpoint(tmp_path / "checkpoint_3.pt")["net"]["weight"].shape == (1, 2)


def test_the_first_write_failing_says_nothing_was_changed(tmp_path, monkeypatch):
    monkeypatch.setattr(torch, "save", failing_save(0, lambda: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
    with pytest.raises(CheckpointError, match=rf"cannot be written \(No space left on device\); the partial file was "
                                              rf"removed; nothing was changed in {tmp_path}$"):
        run_with_checkpoints(tmp_path, SafeCheckpoint)
    assert names(tmp_path) == []


def test_a_bug_while_saving_is_not_reported_as_a_write_failure(tmp_path, monkeypatch):
    def save(obj, f, *args, **kwargs):
        raise TypeError("a bug")

    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(TypeError, match="a bug"):
        AtomicDiskSaver(tmp_path)({"x": torch.zeros(1)}, "c.pt")
    assert names(tmp_path) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_an_unwritable_folder_is_one_error_and_the_checkpoints_stay(tmp_path):
    saver = AtomicDiskSaver(tmp_path)
    saver({"x": torch.zeros(1)}, "checkpoint_1.pt")
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(CheckpointError, match=r"checkpoint_2.pt: cannot be written \(Permission denied\)"):
            saver({"x": torch.zeros(1)}, "checkpoint_2.pt")
    finally:
        tmp_path.chmod(0o700)
    assert names(tmp_path) == ["checkpoint_1.pt"]


# -- non-finite state ----------------------------------------------------------------------------
def test_check_finite_names_the_entry_and_the_tensor_of_networks_and_optimizers():
    net, opt = trained_net()
    check_finite({"qnet": net, "optimizer": opt, "policy": InferenceState(net)})
    replay = torch.full((4,), float("nan"))
    check_finite({"replay": {"rows": replay}, "scale": 1.0})  # not a network or optimizer: not looked at
    with torch.no_grad():
        net[1].bias.fill_(float("-inf"))
    with pytest.raises(CheckpointError, match=r"^at frames 9: not written: entry 'qnet' holds non-finite values in "
                                              r"'1.bias' \(0 NaN, 1 Inf of 1 values\)"):
        check_finite({"qnet": net}, where="at frames 9")
    with pytest.raises(CheckpointError, match=r"entry 'policy' holds non-finite values in '1.bias'"):
        check_finite({"policy": InferenceState(net)})
    net2, opt2 = trained_net()
    opt2.state[next(iter(net2.parameters()))]["exp_avg_sq"][0, 0] = float("nan")
    with pytest.raises(CheckpointError, match=r"entry 'optimizer' holds non-finite values in \"state\[0\]\['exp_avg_sq'\]\" "
                                              r"\(1 NaN, 0 Inf of 8 values\)"):
        check_finite({"net": net2, "optimizer": opt2})


def test_no_checkpoint_is_written_from_nan_weights_and_the_previous_ones_stay(tmp_path):
    net, opt = trained_net()
    trainer = Engine(lambda engine, batch: None)
    checkpoint = SafeCheckpoint({"qnet": net, "optimizer": opt}, AtomicDiskSaver(tmp_path), n_saved=2, step_name="frames",
                                global_step_transform=lambda engine, _: engine.state.iteration * 256)

    @trainer.on(Events.ITERATION_COMPLETED(once=3))
    def diverge(engine):
        with torch.no_grad():
            net[0].weight[1, 1] = float("nan")

    trainer.add_event_handler(Events.ITERATION_COMPLETED, checkpoint)
    with pytest.raises(CheckpointError) as info:
        trainer.run(range(6), max_epochs=1)
    assert str(info.value) == (
        "checkpoint at frames 768: not written: entry 'qnet' holds non-finite values in '0.weight' (1 NaN, 0 Inf of "
        "8 values); the training state went non-finite before this checkpoint; the previous checkpoint, "
        f"{tmp_path / 'checkpoint_512.pt'}, is intact"
    )
    assert names(tmp_path) == ["checkpoint_256.pt", "checkpoint_512.pt"]
    assert all(torch.isfinite(t).all() for t in load_checkpoint(tmp_path / "checkpoint_512.pt")["qnet"].values())


def test_a_best_checkpoint_with_nan_weights_is_refused_only_when_it_would_write(tmp_path):
    net = torch.nn.Linear(2, 1)
    evaluator = Engine(lambda engine, batch: None)
    best = SafeCheckpoint({"policy": InferenceState(net)}, AtomicDiskSaver(tmp_path), filename_prefix="best",
                          n_saved=1, score_name="eval_return", score_function=lambda e: e.state.metrics["r"],
                          global_step_transform=lambda *_: 100, step_name="frames")
    evaluator.state.metrics["r"] = 5.0
    best(evaluator)
    with torch.no_grad():
        net.weight.fill_(float("nan"))
    evaluator.state.metrics["r"] = 1.0  # not better: nothing to write, nothing to refuse
    best(evaluator)
    evaluator.state.metrics["r"] = 9.0
    with pytest.raises(CheckpointError, match=r"^best checkpoint at frames 100: not written: entry 'policy' holds "
                                              r"non-finite values in 'weight' .*; the previous checkpoint, .*"
                                              r"best_policy_100_eval_return=5.0000.pt, is intact$"):
        best(evaluator)
    assert names(tmp_path) == ["best_policy_100_eval_return=5.0000.pt"]
