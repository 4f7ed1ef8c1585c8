import threading
import time

import pytest
import torch
from tensordict import TensorDict

from engine_rl import MASK_KEY, RLEvents, create_trainer
from engine_rl.replay import PrioritizedSampler, ReplayBuffer
from handlers import PriorityUpdater, ReplayExtender, ReplaySampler

NUM_ENVS, T = 2, 4


def _batches(n=3, *, mask=None):
    """[NUM_ENVS, T] batches; observation value = global frame number (to trace rows)."""
    out = []
    for i in range(n):
        frame = torch.arange(NUM_ENVS * T, dtype=torch.float32).reshape(NUM_ENVS, T) + i * NUM_ENVS * T
        td = TensorDict(
            {
                "observation": frame.unsqueeze(-1).expand(NUM_ENVS, T, 3).clone(),
                "action": torch.ones(NUM_ENVS, T, dtype=torch.int64),
                "log_prob": torch.zeros(NUM_ENVS, T),
                ("next", "observation"): (frame + 1).unsqueeze(-1).expand(NUM_ENVS, T, 3).clone(),
                ("next", "reward"): frame.clone(),
                ("next", "done"): torch.zeros(NUM_ENVS, T, dtype=torch.bool),
            },
            batch_size=[NUM_ENVS, T],
        )
        if mask is not None:
            td.set(MASK_KEY, mask.clone())
        out.append(td)
    return out


class TDLoss(torch.nn.Module):
    """Regress observation[:, 0] -> reward; writes td_error like a DQN loss."""

    def __init__(self, td_shape=()):
        super().__init__()
        self.net = torch.nn.Linear(3, 1)
        self.td_shape = td_shape

    def forward(self, td):
        err = self.net(td["observation"]).squeeze(-1) - td["next", "reward"]
        td.set("td_error", err.detach().reshape(err.shape + self.td_shape))
        return {"loss": (td["weight"] * err.pow(2)).mean()}


def _trainer(data, loss=None, **kw):
    loss = loss or TDLoss()
    return create_trainer(data, loss, torch.optim.SGD(loss.parameters(), lr=1e-3), **kw)


def test_extender_stores_every_frame_and_reports_replay_size():
    buffer = ReplayBuffer(100, seed=0)
    trainer = _trainer(_batches(3), learning_starts=10**6)  # no optim step: only collection
    sizes = []
    ReplayExtender(buffer).attach(trainer)
    trainer.add_event_handler(RLEvents.BATCH_COLLECTED, lambda e: sizes.append(e.state.metrics["replay_size"]))
    trainer.run(max_epochs=1)
    assert sizes == [8, 16, 24]
    assert len(buffer) == 24 == trainer.state.frames
    s = buffer.sample(64)
    assert torch.equal(s["observation"][:, 0], s["index"].float())  # frame n stored at position n
    assert set(s.keys(include_nested=True, leaves_only=True)) >= {("next", "reward"), "log_prob", "action"}


def test_extender_honours_the_collector_mask():
    mask = torch.tensor([[True, False, True, True], [False, False, True, True]])
    buffer = ReplayBuffer(100, seed=0)
    trainer = _trainer(_batches(2, mask=mask), learning_starts=10**6)
    ReplayExtender(buffer).attach(trainer)
    trainer.run(max_epochs=1)
    assert len(buffer) == 10 == trainer.state.frames
    stored = set(buffer.sample(200)["observation"][:, 0].long().tolist())
    expected = {i * 8 + j for i in range(2) for j in mask.reshape(-1).nonzero().squeeze(1).tolist()}
    assert stored == expected


def test_extender_keys_selects_what_is_stored_and_keeps_the_mask():
    mask = torch.tensor([[True, True, True, True], [False, False, False, False]])
    buffer = ReplayBuffer(100, seed=0)
    ext = ReplayExtender(buffer, keys=["observation", ("next", "reward")])
    assert ext.extend(_batches(1, mask=mask)[0]) == 4
    s = buffer.sample(8)
    assert set(s.keys(include_nested=True, leaves_only=True)) == {"observation", ("next", "reward"), "index", "weight"}


def test_extender_missing_key_names_key_handler_and_present_keys():
    ext = ReplayExtender(ReplayBuffer(10), keys=["observation", "state_value"])
    match = r"ReplayExtender needs key\(s\) \['state_value'\] but the TensorDict has \[.*'log_prob'"
    with pytest.raises(KeyError, match=match):
        ext.extend(_batches(1)[0])


def test_sampler_feeds_the_loss_with_buffer_rows():
    buffer = ReplayBuffer(1000, seed=0)
    trainer = _trainer(_batches(3), optim_steps_per_batch=2)
    ReplayExtender(buffer).attach(trainer)
    ReplaySampler(buffer, batch_size=5).attach(trainer)
    seen = []

    def check(engine):
        s = engine.state.sample
        seen.append((s.batch_size, int(s["index"].max()), len(buffer)))
        assert torch.equal(s["observation"][:, 0], s["index"].float())

    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, check)
    trainer.run(max_epochs=1)
    assert [b for b, _, _ in seen] == [torch.Size([5])] * 6
    assert all(mx < size for _, mx, size in seen)
    assert trainer.state.optim_steps == 6


def test_sampler_on_empty_buffer_points_at_learning_starts():
    trainer = _trainer(_batches(1))
    ReplaySampler(ReplayBuffer(10), batch_size=4).attach(trainer)  # no extender: stays empty
    match = r"ReplaySampler: the replay buffer is empty.*learning_starts=N.*batch_size \(4\)"
    with pytest.raises(ValueError, match=match):
        trainer.run(max_epochs=1)


def _filled_buffer(seed=0):
    buffer = ReplayBuffer(1000, seed=seed)
    for batch in _batches(3):
        buffer.extend(batch)
    return buffer


def test_prefetch_hands_out_the_rows_of_separate_draws_one_block_at_a_time():
    single, ahead = ReplaySampler(_filled_buffer(), batch_size=5), ReplaySampler(_filled_buffer(), batch_size=5, prefetch=4)
    for _ in range(10):
        a, b = single.sample(), ahead.sample()
        assert b.batch_size == torch.Size([5])
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["observation"], b["observation"])
    assert (single.blocks_drawn, ahead.blocks_drawn) == (10, 3)


def test_prefetch_transform_sees_each_whole_block_and_may_replace_it():
    seen = []

    def add_row_number(block):
        seen.append(block.batch_size[0])
        return block.set("row", torch.arange(block.batch_size[0]))

    sampler = ReplaySampler(_filled_buffer(), batch_size=3, prefetch=2, transform=add_row_number)
    rows = [sampler.sample()["row"].tolist() for _ in range(3)]
    assert seen == [6, 6]
    assert rows == [[0, 1, 2], [3, 4, 5], [0, 1, 2]]
    replaced = ReplaySampler(_filled_buffer(), batch_size=2, transform=lambda b: b.select("index"))
    assert list(replaced.sample().keys()) == ["index"]


def test_prefetched_rows_are_dropped_when_a_new_batch_arrives():
    buffer = ReplayBuffer(1000, seed=0)
    trainer = _trainer(_batches(3), optim_steps_per_batch=2)
    ReplayExtender(buffer).attach(trainer)
    sampler = ReplaySampler(buffer, batch_size=5, prefetch=3)
    sampler.attach(trainer)
    newest = []
    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, lambda e: newest.append(int(e.state.sample["index"].max())))
    trainer.run(max_epochs=1)
    # 2 steps per batch from a 3-step block: each batch draws its own block, from the rows it can see
    assert sampler.blocks_drawn == 3
    assert max(newest[:2]) < 8 <= max(newest[2:4]) and max(newest[4:]) >= 16  # new rows are drawn


def test_prefetch_refuses_prioritized_replay_and_bad_arguments():
    prioritized = ReplayBuffer(10, sampler=PrioritizedSampler())
    with pytest.raises(ValueError, match=r"ReplaySampler: prefetch=4 needs a uniform sampler.*use prefetch=1"):
        ReplaySampler(prioritized, batch_size=2, prefetch=4)
    ReplaySampler(prioritized, batch_size=2, prefetch=1)  # fine: one draw per step
    with pytest.raises(ValueError, match="ReplaySampler: argument prefetch must be a positive int, got 0"):
        ReplaySampler(ReplayBuffer(10), batch_size=2, prefetch=0)
    with pytest.raises(TypeError, match="ReplaySampler: argument transform must be callable or None, got int"):
        ReplaySampler(ReplayBuffer(10), batch_size=2, transform=3)


def _row_tagger(seen=None, delay=0.0):
    def tag(chunk):
        if seen is not None:
            seen.append((threading.current_thread().name, chunk.batch_size[0]))
        time.sleep(delay)
        return chunk.set("doubled", chunk["observation"] * 2)
    return tag


@pytest.mark.parametrize("background", [False, True])
def test_transform_rows_cut_the_block_into_chunks_with_the_same_samples(background):
    seen = []
    plain = ReplaySampler(_filled_buffer(), batch_size=4, prefetch=6, transform=_row_tagger())
    chunked = ReplaySampler(_filled_buffer(), batch_size=4, prefetch=6, transform=_row_tagger(seen),
                            transform_rows=8, background=background)
    for _ in range(12):  # two blocks
        a, b = plain.sample(), chunked.sample()
        assert b.batch_size == torch.Size([4])
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["doubled"], b["doubled"])
    # on the worker the first sample's rows come alone, so a block's first step waits for them only
    assert [rows for _, rows in seen] == ([4, 8, 8, 4] if background else [8, 8, 8]) * 2
    threads = {name for name, _ in seen}
    if background:
        assert len(threads) == 1 and threads.pop().startswith("ReplaySampler")
    else:
        assert threads == {threading.current_thread().name}
    chunked.close()
    assert chunked._worker is None


def test_background_transform_errors_surface_in_the_sample_that_needs_the_chunk():
    calls = []

    def fails_on_second_chunk(chunk):
        calls.append(chunk.batch_size[0])
        if len(calls) == 2:
            raise RuntimeError("target network exploded")
        return chunk

    sampler = ReplaySampler(_filled_buffer(), batch_size=2, prefetch=5, transform=fails_on_second_chunk,
                            transform_rows=4, background=True)
    assert sampler.sample().batch_size == torch.Size([2])  # the first chunk: one sample's rows
    with pytest.raises(RuntimeError, match="target network exploded"):
        sampler.sample()  # the second chunk's first sample
    sampler.close()
    assert calls[:2] == [2, 4]


def test_background_chunks_still_running_are_awaited_when_a_new_batch_arrives():
    running = threading.Event()
    finished = []

    def slow(chunk):
        running.set()
        time.sleep(0.5)  # long enough that the learner reaches the next batch meanwhile, even on a busy box
        finished.append(chunk.batch_size[0])
        return chunk

    buffer = ReplayBuffer(1000, seed=0)
    trainer = _trainer(_batches(2), optim_steps_per_batch=1)
    ReplayExtender(buffer).attach(trainer)
    sampler = ReplaySampler(buffer, batch_size=2, prefetch=4, transform=slow, transform_rows=2, background=True)
    sampler.attach(trainer)
    at_second_batch = []

    def check(engine):  # runs after the sampler has handed out the step's sample
        if engine.state.iteration == 2:
            at_second_batch.append(len(finished))

    trainer.add_event_handler(RLEvents.SAMPLE_REQUESTED, check)
    trainer.run(max_epochs=1)
    assert running.is_set() and sampler.blocks_drawn == 2
    # the first batch trained on its first chunk while the worker started on the second; the new
    # batch waited for that one (not awaited: 2), cancelled the other two (not cancelled: 5) and
    # then needed the first chunk of its own block
    assert at_second_batch == [3]
    sampler.close()
    assert len(finished) in (3, 4)  # the second block's second chunk may have started before close


def test_transform_rows_and_background_are_checked():
    with pytest.raises(ValueError, match=r"ReplaySampler: argument transform_rows must be a positive multiple of "
                                         r"batch_size \(4\) or None, got 6"):
        ReplaySampler(ReplayBuffer(10), batch_size=4, transform=_row_tagger(), transform_rows=6)
    with pytest.raises(ValueError, match="ReplaySampler: background=True runs the transform on a worker thread; "
                                         "give a transform"):
        ReplaySampler(ReplayBuffer(10), batch_size=4, background=True)


@pytest.mark.parametrize("td_shape", [(), (1,)])
def test_priority_updater_writes_abs_td_error_into_the_tree(td_shape):
    alpha, eps = 0.7, 1e-3
    buffer = ReplayBuffer(64, sampler=PrioritizedSampler(alpha=alpha, eps=eps), seed=0)
    trainer = _trainer(_batches(3), loss=TDLoss(td_shape), optim_steps_per_batch=2)
    ReplayExtender(buffer).attach(trainer)
    ReplaySampler(buffer, batch_size=6).attach(trainer)
    PriorityUpdater(buffer).attach(trainer)
    checked = []

    def check(engine):  # attached after the updater: runs after it at each optim step
        s = engine.state.sample
        last = dict(zip(s["index"].tolist(), s["td_error"].reshape(-1).tolist()))  # last duplicate wins
        leaves = torch.as_tensor(buffer.sampler.tree.leaves)
        for i, err in last.items():
            assert leaves[i].item() == pytest.approx((abs(err) + eps) ** alpha, rel=1e-6)
        checked.append(len(last))

    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, check)
    trainer.run(max_epochs=1)
    assert len(checked) == 6
    leaves = torch.as_tensor(buffer.sampler.tree.leaves)[: len(buffer)]
    assert (leaves != 1.0).any()  # some priorities moved away from the initial max priority


def test_priority_updater_every_and_custom_nested_key():
    buffer = ReplayBuffer(64, sampler=PrioritizedSampler(), seed=0)
    calls = []
    buffer.update_priority = lambda index, priority: calls.append((index.clone(), priority.clone()))

    def loss(td):
        td.set(("aux", "err"), -torch.ones(td.batch_size))
        return {"loss": td["weight"].sum() * 0 + p.sum()}

    p = torch.nn.Parameter(torch.zeros(1))
    trainer = create_trainer(_batches(2), loss, torch.optim.SGD([p], lr=0.1), optim_steps_per_batch=3)
    ReplayExtender(buffer).attach(trainer)
    ReplaySampler(buffer, batch_size=4).attach(trainer)
    PriorityUpdater(buffer, key=("aux", "err")).attach(trainer, every=2)
    trainer.run(max_epochs=1)
    assert len(calls) == 3  # optim steps 2, 4, 6
    assert all(torch.equal(pr, torch.ones(4)) for _, pr in calls)


def test_priority_updater_without_td_error_names_key_handler_and_present_keys():
    buffer = ReplayBuffer(64, sampler=PrioritizedSampler(), seed=0)
    p = torch.nn.Parameter(torch.zeros(1))
    trainer = create_trainer(_batches(1), lambda td: {"loss": p.sum()}, torch.optim.SGD([p], lr=0.1))
    ReplayExtender(buffer).attach(trainer)
    ReplaySampler(buffer, batch_size=4).attach(trainer)
    PriorityUpdater(buffer).attach(trainer)
    with pytest.raises(
        KeyError,
        match=r"PriorityUpdater needs key\(s\) \['td_error'\] but the TensorDict has "
        r"\['action', 'index', .*'weight'\]; "
        r"the loss must write 'td_error'",
    ):
        trainer.run(max_epochs=1)


def test_handlers_are_callable_on_the_engine():
    buffer = ReplayBuffer(100, seed=0)
    trainer = _trainer(_batches(2))
    trainer.add_event_handler(RLEvents.BATCH_COLLECTED, ReplayExtender(buffer))
    trainer.add_event_handler(RLEvents.SAMPLE_REQUESTED, ReplaySampler(buffer, batch_size=3))
    sizes = []
    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, lambda e: sizes.append(e.state.sample.batch_size[0]))
    trainer.run(max_epochs=1)
    assert len(buffer) == 16 and sizes == [3, 3]


def test_bad_arguments_name_the_handler_and_argument():
    with pytest.raises(ValueError, match="ReplaySampler: argument batch_size must be a positive int, got 0"):
        ReplaySampler(ReplayBuffer(10), batch_size=0)
    with pytest.raises(TypeError, match=r"ReplaySampler: argument buffer must be a replay buffer.* lacks \['sample'\]"):
        ReplaySampler([], batch_size=2)
    with pytest.raises(TypeError, match=r"PriorityUpdater: argument buffer .* lacks \['update_priority'\]"):
        PriorityUpdater(object())
    with pytest.raises(ValueError, match="ReplayExtender: argument keys must be a non-empty list of keys or None"):
        ReplayExtender(ReplayBuffer(10), keys="observation")
    with pytest.raises(ValueError, match="ReplayExtender: argument every must be a positive int, got 0"):
        ReplayExtender(ReplayBuffer(10)).attach(_trainer(_batches(1)), every=0)
    with pytest.raises(TypeError, match="ReplayExtender.attach: argument engine must be an ignite Engine"):
        ReplayExtender(ReplayBuffer(10)).attach("trainer")


def test_end_to_end_with_gym_collector():
    from engine_rl.collectors import GymCollector, make_vec_env

    class Random(torch.nn.Module):
        def forward(self, td):
            return td.set("action", torch.randint(2, td.batch_size))

    torch.manual_seed(0)
    collector = GymCollector(make_vec_env("CartPole-v1", 4), Random(), frames_per_batch=32, seed=0)

    class Loss(torch.nn.Module):
        in_keys = ["observation", "action", ("next", "reward"), ("next", "observation"), ("next", "terminated")]

        def __init__(self):
            super().__init__()
            self.q = torch.nn.Linear(4, 2)

        def forward(self, td):
            q = self.q(td["observation"]).gather(-1, td["action"].unsqueeze(-1)).squeeze(-1)
            err = q - td["next", "reward"]
            td["td_error"] = err.detach()
            return {"loss": (td["weight"] * err.pow(2)).mean()}

    loss = Loss()
    buffer = ReplayBuffer(1000, sampler=PrioritizedSampler(), seed=0)
    trainer = create_trainer(collector, loss, torch.optim.Adam(loss.parameters()), total_frames=160, learning_starts=64)
    ReplayExtender(buffer).attach(trainer)
    ReplaySampler(buffer, batch_size=16).attach(trainer)
    PriorityUpdater(buffer).attach(trainer)
    trainer.run()
    collector.shutdown()
    assert len(buffer) == 160 == trainer.state.metrics["replay_size"]
    assert trainer.state.optim_steps == 4  # batches 2..5 (learning starts at 64 frames)
    assert buffer.sampler.max_priority >= 1.0


@pytest.mark.parametrize("prefetch", [1, 3])
def test_keys_select_the_entries_of_every_sample(prefetch):
    buffer = _filled_buffer()
    full = ReplaySampler(buffer, batch_size=4, prefetch=prefetch).sample()
    assert len(set(full.keys())) > 2
    buffer = _filled_buffer()
    sampler = ReplaySampler(buffer, batch_size=4, prefetch=prefetch, keys=["index", "observation"])
    sample = sampler.sample()
    assert sorted(sample.keys()) == ["index", "observation"]
    assert torch.equal(sample["index"], full["index"]) and torch.equal(sample["observation"], full["observation"])


def test_keys_missing_from_the_buffer_and_bad_keys_are_errors():
    sampler = ReplaySampler(_filled_buffer(), batch_size=4, keys=["index", ("next", "nope")])
    with pytest.raises(KeyError, match=r"ReplaySampler \(argument keys\) needs key\(s\) \['next.nope'\]"):
        sampler.sample()
    with pytest.raises(ValueError, match="ReplaySampler: argument keys must be a non-empty list of keys or None"):
        ReplaySampler(_filled_buffer(), batch_size=4, keys="index")
