import numpy as np
import pytest
import torch
from ignite.engine import Events
from ignite.handlers import Checkpoint, DiskSaver
from tensordict import TensorDict

from engine_rl import RLEvents, create_trainer
from engine_rl.algos.networks import mlp
from engine_rl.algos.normalization import Normalizer, ReturnScaler
from engine_rl.algos.policies import CategoricalActorCritic
from engine_rl.collectors import GymCollector, make_vec_env
from handlers.advantage import GAEAdvantage
from handlers.normalization import ObservationNormalizer, RewardNormalizer
from handlers.validation import ValidationRollout


def _policy(seed=0):
    torch.manual_seed(seed)
    return CategoricalActorCritic(mlp(4, 2, (16,)), mlp(4, 1, (16,)), obs_normalizer=Normalizer((4,), epsilon=0.0),
                                  seed=seed)


def _trainer(policy, frames=192, **kwargs):
    collector = GymCollector(make_vec_env("CartPole-v1", 4), policy, frames_per_batch=64, seed=0)
    loss = lambda td: {"loss": policy.value(td["observation"]).mean() * 0.0}  # noqa: E731
    trainer = create_trainer(collector, loss, torch.optim.SGD(policy.parameters(), lr=0.0), total_frames=frames,
                             **kwargs)
    return trainer, collector


def test_observation_statistics_come_from_training_batches_only():
    policy = _policy()
    trainer, collector = _trainer(policy)
    ObservationNormalizer(policy.obs_normalizer).attach(trainer)
    seen = []
    trainer.add_event_handler(RLEvents.BATCH_COLLECTED, lambda e: seen.append(e.state.batch["observation"].clone()))
    trainer.run()
    obs = torch.cat([o.reshape(-1, 4) for o in seen]).double().numpy()
    norm = policy.obs_normalizer
    np.testing.assert_allclose(norm.mean.numpy(), obs.mean(0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(norm.var.numpy(), obs.var(0), rtol=1e-9)
    assert norm.count.item() == 192

    # evaluation applies the same transform and never updates it
    before = {k: v.clone() for k, v in norm.state_dict().items()}
    greedy = policy.greedy()
    ValidationRollout(make_vec_env("CartPole-v1", 2), greedy, num_episodes=2, seed=0).evaluate()
    assert all(torch.equal(before[k], v) for k, v in norm.state_dict().items())
    x = torch.randn(5, 4)
    torch.testing.assert_close(greedy.normalize(x), policy.normalize(x))
    collector.shutdown()


def test_collection_and_training_apply_the_same_transform():
    policy = _policy()
    norm = policy.obs_normalizer
    norm.update(torch.randn(100, 4) * 3 + 1)
    norm.frozen = True  # statistics fixed: the only difference left would be the transform
    trainer, collector = _trainer(policy, frames=64)
    ObservationNormalizer(norm).attach(trainer)
    trainer.run()
    batch = trainer.state.batch
    log_prob, _, _ = policy.evaluate(batch["observation"], batch["action"])
    torch.testing.assert_close(log_prob.detach(), batch["log_prob"])
    collector.shutdown()


def test_statistics_are_saved_in_checkpoints_with_the_policy(tmp_path):
    policy = _policy()
    trainer, collector = _trainer(policy)
    ObservationNormalizer(policy.obs_normalizer).attach(trainer)
    ckpt = Checkpoint({"policy": policy}, DiskSaver(str(tmp_path), require_empty=False), n_saved=1)
    trainer.add_event_handler(Events.COMPLETED, ckpt)
    trainer.run()
    state = torch.load(tmp_path / ckpt.last_checkpoint, weights_only=True)
    fresh = _policy(seed=1)
    Checkpoint.load_objects({"policy": fresh}, state)
    x = torch.randn(6, 4)
    torch.testing.assert_close(fresh.normalize(x), policy.normalize(x))
    assert torch.equal(fresh.obs_normalizer.count, policy.obs_normalizer.count)
    collector.shutdown()


def test_reward_normalizer_scales_rewards_before_gae_and_keeps_episode_returns():
    policy = _policy()
    trainer, collector = _trainer(policy)
    raw = []
    trainer.add_event_handler(RLEvents.BATCH_COLLECTED, lambda e: raw.append(e.state.batch.clone()))
    handler = RewardNormalizer(gamma=0.9, epsilon=0.0)
    handler.attach(trainer)
    GAEAdvantage(policy.value, gamma=0.9, lmbda=1.0).attach(trainer)
    targets = []
    trainer.add_event_handler(RLEvents.BATCH_COLLECTED, lambda e: targets.append(e.state.batch.clone()))
    trainer.run()
    reference = ReturnScaler(gamma=0.9, epsilon=0.0)
    for before, after in zip(raw, targets):
        expected = reference(before["next", "reward"], before["next", "done"])
        torch.testing.assert_close(after["next", "reward"], expected)
        assert torch.equal(after["next", "episode_return"], before["next", "episode_return"])
    assert trainer.state.metrics["return_std"] == pytest.approx(float(reference.stats.var.sqrt()))
    # the scaled rewards are what GAE saw: value targets of a constant reward are not integers any more
    assert not torch.equal(targets[-1]["value_target"], targets[-1]["value_target"].round())
    state = handler.state_dict()
    assert set(state) == {"stats", "returns"} and state["returns"].shape == (4,)
    collector.shutdown()


def test_errors_name_the_handler():
    with pytest.raises(TypeError, match="ObservationNormalizer: argument normalizer must have an update"):
        ObservationNormalizer(torch.nn.Identity())
    handler = RewardNormalizer(gamma=0.9)
    flat = TensorDict({("next", "reward"): torch.zeros(4), ("next", "done"): torch.zeros(4, dtype=torch.bool)}, [4])
    with pytest.raises(ValueError, match=r"RewardNormalizer: the batch must have batch shape \[num_envs, T\]"):
        handler.normalize(flat)
    with pytest.raises(KeyError, match=r"RewardNormalizer needs key\(s\) \['next.done'\]"):
        handler.normalize(TensorDict({("next", "reward"): torch.zeros(1, 4)}, [1, 4]))
