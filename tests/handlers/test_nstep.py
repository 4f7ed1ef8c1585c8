import io

import pytest
import torch
from tensordict import TensorDict

from engine_rl import RLEvents, create_trainer, training_state
from engine_rl.algos import DQNLoss
from engine_rl.replay import NStepBuilder, PrioritizedSampler, ReplayBuffer
from handlers import EpisodeStats, NStepTransitions, PriorityUpdater, ReplaySampler

NUM_ENVS, T = 2, 5


def _batches(count=4, *, seed=0):
    """[NUM_ENVS, T] CartPole-like batches with random episode ends; observation[..., 0] = frame number."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        frame = torch.arange(NUM_ENVS * T, dtype=torch.float32).reshape(NUM_ENVS, T) + i * NUM_ENVS * T
        draw = torch.rand(NUM_ENVS, T, generator=g)
        terminated, truncated = draw < 0.15, (draw >= 0.15) & (draw < 0.25)
        out.append(TensorDict(
            {
                "observation": frame.unsqueeze(-1).expand(NUM_ENVS, T, 4).clone(),
                "action": torch.randint(0, 2, (NUM_ENVS, T), generator=g),
                "next": {
                    "observation": (frame + 0.5).unsqueeze(-1).expand(NUM_ENVS, T, 4).clone(),
                    "reward": torch.rand(NUM_ENVS, T, generator=g),
                    "terminated": terminated, "truncated": truncated, "done": terminated | truncated,
                    "episode_return": torch.ones(NUM_ENVS, T), "episode_length": torch.ones(NUM_ENVS, T, dtype=torch.int64),
                },
            },
            batch_size=[NUM_ENVS, T],
        ))
    return out


def _trainer(batches, **kw):
    net = torch.nn.Linear(4, 2)
    loss = DQNLoss(net, gamma=0.9)
    return create_trainer(batches, loss, torch.optim.SGD(net.parameters(), lr=0.01), **kw), net


def test_the_buffer_gets_the_builders_rows_and_state_batch_stays_as_collected():
    batches = _batches()
    trainer, _ = _trainer(batches)
    buffer = ReplayBuffer(1000, seed=0)
    nstep = NStepTransitions(buffer, n=3, gamma=0.9, num_envs=NUM_ENVS).attach(trainer)
    stats = EpisodeStats().attach(trainer)  # attached after, as engine-rl train does
    seen = []
    trainer.add_event_handler(RLEvents.BATCH_COLLECTED, lambda e: seen.append(e.state.batch))
    ReplaySampler(buffer, batch_size=4).attach(trainer)
    trainer.run(max_epochs=1)

    reference = NStepBuilder(3, gamma=0.9, num_envs=NUM_ENVS)
    expected = torch.cat([reference.push(b) for b in batches])
    assert len(buffer) == expected.batch_size[0] == trainer.state.metrics["replay_size"]
    stored = buffer.storage.state_dict()["data"]
    assert torch.equal(stored["observation"][:len(buffer)], expected["observation"])
    assert torch.equal(stored["next"]["reward"][:len(buffer)], expected["next", "reward"])
    assert torch.equal(stored["next"]["discount"][:len(buffer)], expected["next", "discount"])
    assert nstep.builder.pending == reference.pending
    # the other handlers see the env's frames: every episode end counted once
    assert all(s is b for s, b in zip(seen, batches))
    assert stats.episodes == sum(int(b["next", "done"].sum()) for b in batches)


def test_training_state_saves_the_open_windows_and_a_new_handler_continues_them():
    batches = _batches(6, seed=2)
    trainer, _ = _trainer(batches[:3])
    buffer = ReplayBuffer(1000, seed=0)
    NStepTransitions(buffer, n=4, gamma=0.9, num_envs=NUM_ENVS).attach(trainer)
    ReplaySampler(buffer, batch_size=4).attach(trainer)
    trainer.run(max_epochs=1)
    state = training_state(trainer, {"replay": buffer})
    assert "trainer.NStepTransitions" in state
    saved = io.BytesIO()
    torch.save({k: v.state_dict() for k, v in state.items() if k in ("replay", "trainer.NStepTransitions")}, saved)
    saved.seek(0)
    loaded = torch.load(saved, weights_only=True)

    fresh_buffer = ReplayBuffer(1000, seed=0)
    fresh_buffer.load_state_dict(loaded["replay"])
    fresh = NStepTransitions(fresh_buffer, n=4, gamma=0.9, num_envs=NUM_ENVS)
    fresh.load_state_dict(loaded["trainer.NStepTransitions"])
    straight = NStepBuilder(4, gamma=0.9, num_envs=NUM_ENVS)
    for b in batches[:3]:
        straight.push(b)
    assert fresh.builder.pending == straight.pending and sum(straight.pending) > 0
    for b in batches[3:]:
        fresh.extend(b)
    expected = torch.cat([straight.push(b) for b in batches[3:]])
    new_rows = fresh_buffer.storage.state_dict()["data"]["observation"][len(buffer):len(fresh_buffer)]
    assert torch.equal(new_rows, expected["observation"])


def test_prioritized_replay_gives_n_step_rows_priorities_and_takes_their_td_errors():
    batches = _batches()
    trainer, _ = _trainer(batches, optim_steps_per_batch=2)
    buffer = ReplayBuffer(1000, sampler=PrioritizedSampler(alpha=1.0, eps=1e-6), seed=0)
    NStepTransitions(buffer, n=3, gamma=0.9, num_envs=NUM_ENVS).attach(trainer)
    ReplaySampler(buffer, batch_size=4).attach(trainer)
    PriorityUpdater(buffer).attach(trainer)
    sampled = []
    trainer.add_event_handler(RLEvents.OPTIM_STEP_DONE, lambda e: sampled.append(e.state.sample.clone()))
    trainer.run(max_epochs=1)
    leaves = buffer.sampler.tree.leaves[:len(buffer)]
    assert bool((leaves > 0).all())
    last = sampled[-1]
    assert "discount" in last["next"].keys()
    index = last["index"].numpy()
    # the last step's rows carry its |td_error| as priority (alpha 1), unless a later row repeated
    torch.testing.assert_close(torch.as_tensor(leaves[index]).float(), (last["td_error"].abs() + 1e-6).float())


def test_keys_add_the_discount_and_a_second_attach_on_the_buffer_is_refused():
    trainer, _ = _trainer(_batches(1))
    buffer = ReplayBuffer(100, seed=0)
    nstep = NStepTransitions(buffer, n=2, gamma=0.9, num_envs=NUM_ENVS,
                             keys=["observation", "action", ("next", "observation"), ("next", "reward"),
                                   ("next", "terminated")])
    nstep.extend(_batches(1)[0])
    assert sorted(buffer.sample(1).keys(include_nested=True, leaves_only=True), key=str) == sorted(
        ["observation", "action", ("next", "observation"), ("next", "reward"), ("next", "terminated"),
         ("next", "discount"), "index", "weight"], key=str)
    nstep.attach(trainer)
    with pytest.raises(ValueError, match="NStepTransitions.attach: this NStepTransitions is already attached"):
        nstep.attach(trainer)
    with pytest.raises(ValueError, match=r"NStepBuilder: n must be a positive int, got 0"):
        NStepTransitions(buffer, n=0, gamma=0.9, num_envs=NUM_ENVS)
    with pytest.raises(TypeError, match="ReplayExtender: argument buffer must be a replay buffer"):
        NStepTransitions(object(), n=2, gamma=0.9, num_envs=NUM_ENVS)


def test_a_replay_extender_and_n_step_transitions_on_one_buffer_refuse_each_other():
    from handlers import ReplayExtender

    trainer, _ = _trainer(_batches(1))
    buffer = ReplayBuffer(100, seed=0)
    handle = ReplayExtender(buffer).attach(trainer)
    with pytest.raises(ValueError, match="NStepTransitions.attach: this engine already has a ReplayExtender on this "
                                         "ReplayBuffer"):
        NStepTransitions(buffer, n=2, gamma=0.9, num_envs=NUM_ENVS).attach(trainer)
    handle.remove()
    NStepTransitions(buffer, n=2, gamma=0.9, num_envs=NUM_ENVS).attach(trainer)
    with pytest.raises(ValueError, match=r"ReplayExtender.attach: this engine already has a NStepTransitions on this "
                                         r"ReplayBuffer \(every batch would be stored twice\)"):
        ReplayExtender(buffer).attach(trainer)
    other = ReplayBuffer(100)
    ReplayExtender(other).attach(trainer)  # another buffer
    trainer.run(max_epochs=1)
    assert len(other) == NUM_ENVS * T and 0 < len(buffer) <= NUM_ENVS * T
