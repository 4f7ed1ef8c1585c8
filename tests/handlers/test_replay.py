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


def test_sampler_on_empty_buffer_says_what_to_do():
    sampler = ReplaySampler(ReplayBuffer(10), batch_size=4)
    with pytest.raises(ValueError) as err:
        sampler.sample()
    assert str(err.value) == (
        "ReplaySampler: the replay buffer is empty, nothing to sample; collect frames first, "
        "e.g. create_trainer(..., learning_starts=N) with N >= batch_size (4) and a ReplayExtender attached"
    )


def test_sampler_draws_a_fresh_sample_at_every_step():
    sampler = ReplaySampler(_filled_buffer(), batch_size=5)
    reference = _filled_buffer()  # same seed: the same draws, one buffer.sample per step
    for _ in range(4):
        a, b = sampler.sample(), reference.sample(5)
        assert torch.equal(a["index"], b["index"]) and torch.equal(a["observation"], b["observation"])


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


def test_keys_select_the_entries_of_every_sample():
    full = ReplaySampler(_filled_buffer(), batch_size=4).sample()
    assert len(set(full.keys())) > 2
    sampler = ReplaySampler(_filled_buffer(), batch_size=4, keys=["index", "observation", ("next", "reward")])
    sample = sampler.sample()
    assert set(sample.keys(include_nested=True, leaves_only=True)) == {"index", "observation", ("next", "reward")}
    assert sample.batch_size == torch.Size([4])
    # the same rows as a sampler without keys draws from the same buffer and seed
    assert torch.equal(sample["index"], full["index"]) and torch.equal(sample["observation"], full["observation"])


def test_keys_reach_the_loss_through_the_trainer():
    buffer = ReplayBuffer(1000, seed=0)
    trainer = _trainer(_batches(2), optim_steps_per_batch=2)
    ReplayExtender(buffer).attach(trainer)
    ReplaySampler(buffer, batch_size=3, keys=["observation", ("next", "reward"), "weight", "index"]).attach(trainer)
    seen = []
    trainer.add_event_handler(RLEvents.SAMPLE_REQUESTED, lambda e: seen.append(set(e.state.sample.keys())))
    trainer.run(max_epochs=1)
    assert seen == [{"observation", "next", "weight", "index"}] * 4


def test_keys_missing_from_the_buffer_and_bad_keys_are_errors():
    sampler = ReplaySampler(_filled_buffer(), batch_size=4, keys=["index", ("next", "nope")])
    with pytest.raises(KeyError, match=r"ReplaySampler \(argument keys\) needs key\(s\) \['next.nope'\]"):
        sampler.sample()
    with pytest.raises(ValueError, match="ReplaySampler: argument keys must be a non-empty list of keys or None"):
        ReplaySampler(_filled_buffer(), batch_size=4, keys="index")
