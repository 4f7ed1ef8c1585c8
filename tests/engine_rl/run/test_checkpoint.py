"""training_state, atomic saving, safe loading with clear errors, finding the newest checkpoint."""

import json
import os
import pickle
import random
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, EarlyStopping
from tensordict import TensorDict

from engine_rl import create_trainer, training_state
from engine_rl.collectors import make_vec_env
from engine_rl.replay import PrioritizedSampler, ReplayBuffer
from engine_rl.run.checkpoint import (
    INFERENCE_FORMAT,
    AtomicDiskSaver,
    CheckpointError,
    EngineMetrics,
    InferenceState,
    RNGState,
    check_weights_only,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_inference,
    remove_partial_files,
    restore,
)
from handlers import EpisodeStats, ValidationRollout


def save_load(obj, path):
    torch.save(obj, path)
    return torch.load(path, weights_only=True)


def test_rng_state_round_trip_through_weights_only_file(tmp_path):
    rng = RNGState()
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    state = save_load(rng.state_dict(), tmp_path / "rng.pt")
    draws = (torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)], random.gauss(0, 1))
    torch.manual_seed(9), np.random.seed(9), random.seed(9)
    rng.load_state_dict(state)
    assert (torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)], random.gauss(0, 1)) == draws


class Source:
    """A resumable collector: batch ``i`` is drawn from a generator seeded with ``i``."""

    def __init__(self, n):
        self.n, self.i = n, 0

    def __iter__(self):
        while self.i < self.n:
            self.i += 1
            gen = torch.Generator().manual_seed(self.i)
            yield TensorDict({"x": torch.randn(4, 2, generator=gen)}, [4])

    def state_dict(self):
        return {"i": self.i}

    def load_state_dict(self, state):
        self.i = state["i"]


def small_trainer(n=6):
    net = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    source = Source(n)
    trainer = create_trainer(source, lambda td: {"loss": net(td["x"]).pow(2).mean()}, opt, epoch_length=n)
    return trainer, net, opt


def test_training_state_names_objects_finds_stateful_handlers_and_evaluator_bests(tmp_path):
    trainer, net, opt = small_trainer()
    EpisodeStats()  # not attached: not found
    stats = EpisodeStats()
    trainer.add_event_handler(Events.ITERATION_COMPLETED(every=2), stats)  # filtered: unwrapped
    policy = lambda td: td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))  # noqa: E731
    rollout = ValidationRollout(make_vec_env("CartPole-v1", 1), policy, num_episodes=1, seed=0)
    rollout.attach(trainer)
    stopper = EarlyStopping(2, lambda e: e.state.metrics["return_mean"], trainer)
    best = Checkpoint({"net": net}, AtomicDiskSaver(tmp_path), score_name="return_mean")
    rollout.evaluator.add_event_handler(Events.COMPLETED, stopper)
    rollout.evaluator.add_event_handler(Events.COMPLETED, best)
    to_save = training_state(trainer, {"net": net, "optimizer": opt})
    assert list(to_save) == [
        "trainer", "net", "optimizer", "rng", "trainer_metrics",
        "trainer.EpisodeStats", "trainer.ValidationRollout", "evaluator.EarlyStopping", "evaluator.Checkpoint",
    ]
    assert to_save["trainer.EpisodeStats"] is stats and to_save["evaluator.Checkpoint"] is best
    assert "trainer_metrics" not in training_state(trainer, metrics=False)
    assert list(training_state(trainer, handlers=False, rng=False)) == ["trainer", "trainer_metrics"]
    with pytest.raises(TypeError, match=r"training_state: object 'lr' \(float\) has no state_dict/load_state_dict"):
        training_state(trainer, {"lr": 0.1})


class Counter:
    """A user's handler with state: calls counted, kept across a resume."""

    def __init__(self):
        self.n = 0

    def __call__(self, engine):
        self.n += 1

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, state):
        self.n = state["n"]


def test_a_users_stateful_handler_is_saved_and_a_removed_one_is_neither_saved_nor_called():
    from engine_rl import RLEvents

    trainer, _, _ = small_trainer()
    kept, removed, by_name = Counter(), Counter(), Counter()
    trainer.add_event_handler(Events.ITERATION_COMPLETED, kept)  # plain add_event_handler, as the README says
    trainer.add_event_handler(RLEvents.BATCH_COLLECTED(every=2), removed).remove()
    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, by_name)
    trainer.remove_event_handler(by_name, RLEvents.OPTIM_STEP_DONE)
    to_save = training_state(trainer)
    assert [k for k in to_save if k.startswith("trainer.")] == ["trainer.Counter"]
    assert to_save["trainer.Counter"] is kept
    trainer.run(max_epochs=1)
    assert (kept.n, removed.n, by_name.n) == (6, 0, 0)


def test_a_plain_ignite_engine_keeps_no_record_of_its_handlers_and_training_state_says_so():
    trainer, _, _ = small_trainer()
    plain = Engine(lambda e, batch: None)
    plain.add_event_handler(Events.COMPLETED, EarlyStopping(2, lambda e: 0.0, trainer))
    with pytest.raises(TypeError, match=r"training_state: evaluators\[0\] is a plain ignite Engine, whose "
                                        r"handlers Ignite's public API cannot list; build it with create_trainer"):
        training_state(trainer, evaluators=[plain])
    with pytest.raises(TypeError, match=r"training_state: the trainer is a plain ignite Engine.*handlers=False"):
        training_state(plain)
    assert list(training_state(plain, handlers=False)) == ["trainer", "rng", "trainer_metrics"]


def test_full_state_saves_with_weights_only_and_resumes_the_same_numbers(tmp_path):
    def build():
        torch.manual_seed(0)
        trainer, net, opt = small_trainer(8)
        buffer = ReplayBuffer(16, sampler=PrioritizedSampler(alpha=0.6, beta=0.4), seed=0)

        @trainer.on(Events.ITERATION_COMPLETED)
        def _(engine):
            buffer.extend(engine.state.batch)
            sample = buffer.sample(4)
            buffer.update_priority(sample["index"], torch.rand(4))  # torch's global generator
            engine.state.metrics["noise"] = float(np.random.rand())  # numpy's global generator

        to_save = training_state(trainer, {"net": net, "optimizer": opt, "replay": buffer, "source": trainer.collector})
        trainer.add_event_handler(Events.ITERATION_COMPLETED(once=4), Checkpoint(to_save, AtomicDiskSaver(tmp_path)))
        return trainer, to_save

    trainer, straight = build()
    trainer.run(max_epochs=1)
    end = {k: v.state_dict() for k, v in straight.items() if k != "rng"}

    trainer2, resumed = build()
    restore(resumed, tmp_path / "checkpoint_4.pt")
    assert trainer2.state.iteration == 4 and trainer2.state.metrics["noise"] == pytest.approx(
        load_checkpoint(tmp_path / "checkpoint_4.pt")["trainer_metrics"]["noise"])
    trainer2.run()
    again = {k: v.state_dict() for k, v in resumed.items() if k != "rng"}
    flat_a, flat_b = TensorDict(end["net"]), TensorDict(again["net"])
    assert (flat_a == flat_b).all()
    assert torch.equal(end["replay"]["sampler"]["priorities"], again["replay"]["sampler"]["priorities"])
    assert end["trainer_metrics"] == again["trainer_metrics"] and end["trainer"] == again["trainer"]
    assert torch.equal(end["optimizer"]["state"][0]["exp_avg"], again["optimizer"]["state"][0]["exp_avg"])


def test_atomic_saver_refuses_unloadable_objects_before_writing_and_leaves_no_partial_file(tmp_path):
    saver = AtomicDiskSaver(tmp_path)
    with pytest.raises(CheckpointError, match=r"checkpoint .*bad.pt: \['handler'\]\['when'\] is a numpy.float64, which "
                                              r"torch.load\(weights_only=True\) refuses"):
        saver({"handler": {"when": np.float64(1.0)}}, "bad.pt")

    class Exploding:
        def __reduce__(self):
            raise RuntimeError("disk full")

    check_weights_only({"ok": [1, (2.0, "x"), None, torch.zeros(1)]})
    import engine_rl.run.checkpoint_writes as ck

    original = ck.check_weights_only
    ck.check_weights_only = lambda *a, **k: None  # let the write itself fail midway
    try:
        with pytest.raises(RuntimeError, match="disk full"):
            saver({"x": torch.zeros(10), "y": Exploding()}, "midway.pt")
    finally:
        ck.check_weights_only = original
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither the target nor a .partial file
    saver({"x": torch.arange(3)}, "good.pt")
    assert load_checkpoint(tmp_path / "good.pt")["x"].tolist() == [0, 1, 2]


def test_latest_checkpoint_orders_by_step_and_ignores_partial_files(tmp_path):
    assert latest_checkpoint(tmp_path / "missing") is None
    for name in ("checkpoint_512.pt", "checkpoint_1024.pt", "checkpoint_256.pt", "best_policy_2048_eval_return=9.0000.pt",
                 ".checkpoint_4096.pt.partial", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    assert latest_checkpoint(tmp_path).name == "checkpoint_1024.pt"  # numeric, not lexicographic
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint_256.pt", "checkpoint_512.pt", "checkpoint_1024.pt"]
    assert [p.name for p in remove_partial_files(tmp_path)] == [".checkpoint_4096.pt.partial"]
    assert not (tmp_path / ".checkpoint_4096.pt.partial").exists()


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "checkpoint_8.pt"
    torch.save({"net": torch.nn.Linear(50, 50).state_dict(), "step": 8}, path)
    return path


def corrupt(path, how):
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif how == "tail cut":
        path.write_bytes(bytes(data[:-10]))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(os.urandom(2000))
    elif how == "bit flip":
        with zipfile.ZipFile(path) as z:
            info = next(i for i in z.infolist() if i.filename.endswith("data/0"))
        data[info.header_offset + 30 + len(info.filename) + 200] ^= 0xFF  # inside a tensor's bytes
        path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize(
    "how, match",
    [
        ("truncated", r"truncated or not a checkpoint \(not a complete torch.save zip archive"),
        ("tail cut", r"truncated or not a checkpoint"),
        ("empty", r"empty file \(0 bytes\)"),
        ("garbage", r"truncated or not a checkpoint"),
        ("bit flip", r"corrupt: member '.*data/0' fails its CRC-32 check"),
    ],
)
def test_damaged_checkpoints_give_an_error_naming_the_file_and_the_problem(good, how, match):
    assert load_checkpoint(good)["step"] == 8
    path = corrupt(good, how)
    with pytest.raises(CheckpointError, match=rf"^checkpoint {path}: {match}"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match=rf"^checkpoint {path}: "):
        restore({"net": torch.nn.Linear(50, 50)}, path)


class Payload:
    pass


def test_unsafe_missing_and_non_dict_files(tmp_path):
    torch.save({"x": Payload()}, tmp_path / "unsafe.pt")
    with pytest.raises(CheckpointError, match=r"unsafe.pt: holds objects that torch.load\(weights_only=True\) refuses to unpickle"):
        load_checkpoint(tmp_path / "unsafe.pt")
    with pytest.raises(CheckpointError, match=r"nope.pt: no such file"):
        load_checkpoint(tmp_path / "nope.pt")
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match=r"list.pt: holds a list, expected a dict of state_dicts"):
        load_checkpoint(tmp_path / "list.pt")
    with open(tmp_path / "pickle.pt", "wb") as f:
        pickle.dump({"x": 1}, f)  # a plain pickle, not a torch zip archive
    with pytest.raises(CheckpointError, match="truncated or not a checkpoint"):
        load_checkpoint(tmp_path / "pickle.pt")


def test_restore_names_missing_unexpected_and_unfitting_entries(tmp_path):
    net = torch.nn.Linear(2, 1)
    path = tmp_path / "c.pt"
    torch.save({"net": net.state_dict(), "extra": {"a": 1}}, path)
    with pytest.raises(CheckpointError, match=r"entries do not match this setup: missing \['opt'\], unexpected \['extra'\]"):
        restore({"net": net, "opt": torch.optim.SGD(net.parameters(), lr=1)}, path)
    restore({"net": net}, path, strict=False)
    with pytest.raises(CheckpointError, match=rf"checkpoint {path}: entry 'net' does not load into Linear: RuntimeError"):
        restore({"net": torch.nn.Linear(3, 1)}, path, strict=False)


def test_engine_metrics_keep_plain_values():
    engine = Engine(lambda e, b: None)
    engine.state.metrics.update({"a": 1.5, "n": 3, "t": torch.tensor(2.0), "obj": object(), "s": "x"})
    state = EngineMetrics(engine).state_dict()
    assert set(state) == {"a", "n", "t", "s"}
    other = Engine(lambda e, b: None)
    EngineMetrics(other).load_state_dict(state)
    assert other.state.metrics["a"] == 1.5 and other.state.metrics["t"].item() == 2.0


def test_inference_checkpoint_round_trip_and_a_training_checkpoint_is_refused(tmp_path):
    policy = torch.nn.Linear(4, 2)
    norm = torch.nn.BatchNorm1d(4)
    norm.running_mean.fill_(3.0)
    state = InferenceState(policy, normalizer=norm, recipe="dqn-cartpole", config={"hidden": (8,), "lr": 0.1})
    AtomicDiskSaver(tmp_path)(state.state_dict(), "inference.pt")
    loaded = load_inference(tmp_path / "inference.pt")
    assert loaded["format"] == INFERENCE_FORMAT and loaded["config"] == {"hidden": (8,), "lr": 0.1}
    fresh, fresh_norm = torch.nn.Linear(4, 2), torch.nn.BatchNorm1d(4)
    InferenceState(fresh, normalizer=fresh_norm).load_state_dict(loaded)
    assert torch.equal(fresh.weight, policy.weight) and fresh_norm.running_mean[0].item() == 3.0
    torch.save({"trainer": {"iteration": 1}, "net": policy.state_dict()}, tmp_path / "checkpoint_1.pt")
    with pytest.raises(CheckpointError, match=r"checkpoint_1.pt: is a full training checkpoint .* use RUN/inference.pt"):
        load_inference(tmp_path / "checkpoint_1.pt")


SAVE_BIG_BUFFER = textwrap.dedent(
    """
    import json, resource, sys, torch
    from ignite.engine import Engine
    from ignite.handlers import Checkpoint
    from tensordict import TensorDict
    from engine_rl.run.checkpoint import AtomicDiskSaver, load_checkpoint
    from engine_rl.replay import ReplayBuffer

    def peak_mb():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    rows, width = 200_000, 64
    buffer = ReplayBuffer(rows, seed=0)
    for i in range(40):  # 10k-row chunks: the peak before saving is the buffer plus one chunk
        buffer.extend(TensorDict({"observation": torch.full((rows // 40, width), float(i))}, [rows // 40]))
    before = peak_mb()
    engine = Engine(lambda e, b: None)
    Checkpoint({"replay": buffer}, AtomicDiskSaver(sys.argv[1]))(engine)
    after = peak_mb()
    print(json.dumps({"buffer_mb": rows * width * 4 / 2**20, "growth_mb": after - before}))
    """
)


def test_saving_a_large_replay_buffer_does_not_double_memory(tmp_path):
    """Peak RSS of a process saving a 50 MB buffer grows by far less than the buffer (views, streamed);
    the same check on a process that copies the buffer sees it double."""
    res = subprocess.run([sys.executable, "-c", SAVE_BIG_BUFFER, str(tmp_path)], capture_output=True, text=True,
                         check=True, timeout=120)
    figures = json.loads(res.stdout.strip().splitlines()[-1])
    assert figures["buffer_mb"] > 45
    assert figures["growth_mb"] < 0.2 * figures["buffer_mb"], figures
    [path] = tmp_path.glob("replay_*.pt")  # Ignite names a single-object checkpoint after it
    assert load_checkpoint(path)["storage"]["size"] == 200_000
