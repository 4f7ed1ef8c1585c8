"""SAC's and TD3's networks on encoded observations (images, Dicts): shapes and which loss trains which encoder."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from engine_rl.algos.actors import TanhGaussianActor
from engine_rl.algos.encoders import make_encoder
from engine_rl.algos.sac import QEnsemble, SACLoss
from engine_rl.algos.td3 import TanhActor, TD3Loss

ACTIONS = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
DICT = gym.spaces.Dict({"camera": gym.spaces.Box(0, 255, (4, 40, 40), np.uint8),
                        "goal": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
                        "mode": gym.spaces.Discrete(3)})


def observations(n, generator):
    return TensorDict({
        "camera": torch.randint(0, 256, (n, 4, 40, 40), dtype=torch.uint8, generator=generator),
        "goal": torch.rand(n, 3, generator=generator) * 2 - 1,
        "mode": torch.randint(0, 3, (n,), generator=generator),
    }, [n])


def sample(n=6):
    g = torch.Generator().manual_seed(0)
    return TensorDict({
        "observation": observations(n, g), "action": torch.rand(n, 2, generator=g) * 4 - 2,
        ("next", "observation"): observations(n, g), ("next", "reward"): torch.randn(n, generator=g),
        ("next", "terminated"): torch.zeros(n, dtype=torch.bool)}, [n])


def grads(module):
    return [p.grad is not None and bool(p.grad.abs().sum() > 0) for p in module.parameters()]


def test_q_ensemble_reads_what_its_encoder_reads_and_detach_params_holds_the_encoder_too():
    torch.manual_seed(0)
    encoder = make_encoder(DICT)
    critic = QEnsemble(encoder.features, 2, (16,), encoder=encoder)
    obs = observations(5, torch.Generator().manual_seed(1))
    action = torch.zeros(5, 2, requires_grad=True)
    assert critic(obs, action).shape == (2, 5)
    critic(obs, action, detach_params=True).sum().backward()
    assert action.grad is not None and action.grad.abs().sum() > 0
    assert all(p.grad is None for p in critic.parameters())


@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_each_loss_trains_only_its_own_encoder(algo):
    torch.manual_seed(0)
    actor_encoder, critic_encoder = make_encoder(DICT), make_encoder(DICT)
    width = actor_encoder.features
    critic = QEnsemble(width, 2, (16,), encoder=critic_encoder)
    if algo == "sac":
        actor = TanhGaussianActor.build(width, ACTIONS, hidden=(16,), encoder=actor_encoder)
        loss_fn = SACLoss(actor, critic)
    else:
        actor = TanhActor.build(width, ACTIONS, hidden=(16,), encoder=actor_encoder)
        loss_fn = TD3Loss(actor, critic, policy_delay=1)
    batch = sample()
    out = loss_fn(batch)
    assert batch["td_error"].shape == (6,)

    out["loss_qvalue"].backward(retain_graph=True)
    assert all(grads(critic_encoder)) and not any(grads(actor_encoder))
    critic.zero_grad(set_to_none=True)
    out["loss_actor"].backward()
    assert all(grads(actor_encoder)) and not any(grads(critic_encoder))
    # the target critics hold their own copy of the encoder
    assert loss_fn.target_critic.encoder is not critic_encoder
    camera = critic_encoder.paths.index(("camera",))
    assert torch.equal(loss_fn.target_critic.encoder.encoders[camera].convs[0].weight,
                       critic_encoder.encoders[camera].convs[0].weight)


def test_an_actor_acts_on_a_dict_observation():
    torch.manual_seed(0)
    encoder = make_encoder(DICT)
    actor = TanhGaussianActor.build(encoder.features, ACTIONS, hidden=(16,), encoder=encoder)
    td = actor(TensorDict({"observation": observations(3, torch.Generator().manual_seed(2))}, [3]))
    assert td["action"].shape == (3, 2) and bool(td["action"].abs().max() <= 2.0)
    td = actor.deterministic()(TensorDict({"observation": observations(3, torch.Generator().manual_seed(2))}, [3]))
    assert td["action"].shape == (3, 2)
