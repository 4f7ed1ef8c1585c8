"""The actor-critic policy for an env's spaces: :func:`make_actor_critic`.

The action space picks the distribution (:mod:`engine_rl.algos.policies` for ``Discrete`` and
``Box``, :mod:`engine_rl.algos.multi_discrete` for ``MultiDiscrete``); the observation space picks
the encoder under both MLPs (:func:`engine_rl.algos.encoders.make_encoder`). This module imports
both policy modules, and neither imports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import gymnasium as gym
from torch import nn

from engine_rl.algos.encoders import DictEncoder, make_encoder
from engine_rl.algos.multi_discrete import MultiCategoricalActorCritic, MultiDiscreteLogits
from engine_rl.algos.networks import mlp
from engine_rl.algos.normalization import Normalizer
from engine_rl.algos.policies import (
    ActorCritic,
    CategoricalActorCritic,
    GaussianActor,
    GaussianActorCritic,
    orthogonal_init_,
)
from engine_rl.spaces import is_multi_discrete

__all__ = [
    "action_family", "action_outputs", "distribution_policy", "feature_dim", "make_actor_critic", "ppo_init",
]

KINDS = ("auto", "categorical", "gaussian")
"""Accepted values of :func:`make_actor_critic`'s ``kind``."""


def make_actor_critic(
    observation_space: gym.Space,
    action_space: gym.Space,
    *,
    hidden: Sequence[int] = (64, 64),
    activation: type[nn.Module] = nn.Tanh,
    normalize_observations: bool = False,
    obs_clip: float | None = 10.0,
    log_std_init: float = 0.0,
    ortho_init: bool = True,
    seed: int | None = None,
    kind: str = "auto",
    encoders: Mapping[str | tuple[str, ...], nn.Module] | None = None,
    owner: str = "make_actor_critic",
) -> ActorCritic:
    """Build separate actor and critic MLPs for the env's spaces and pick the distribution.

    ``Discrete`` actions give a :class:`~engine_rl.algos.policies.CategoricalActorCritic`, a 1-D
    ``MultiDiscrete`` a :class:`~engine_rl.algos.multi_discrete.MultiCategoricalActorCritic`, a 1-D
    ``Box`` a :class:`~engine_rl.algos.policies.GaussianActorCritic`. Pass the env's *single* spaces
    (``env.single_action_space``). Other observations go through a shared encoder under both MLPs,
    chosen by the space (:func:`~engine_rl.algos.encoders.make_encoder`): images (a uint8 Box of 2
    or 3 dimensions) through the :class:`~engine_rl.algos.encoders.NatureCNN` (512 features),
    Discrete one-hot, other Boxes flattened, a Dict one encoder per key, concatenated.

    Args:
        observation_space: a 1-D ``Box``, an image, any other Box, Discrete, MultiBinary,
            MultiDiscrete, or a Dict of these.
        action_space: ``Discrete``, 1-D ``MultiDiscrete`` or 1-D ``Box``.
        hidden: hidden widths of both MLPs (Stable-Baselines3's default: 64, 64).
        activation: activation module class (tanh, as in SB3's PPO).
        normalize_observations: put a :class:`~engine_rl.algos.normalization.Normalizer` in front.
        obs_clip: its clamp bound.
        log_std_init: initial log std of a Gaussian policy.
        ortho_init: orthogonal init (gains sqrt 2, 0.01 for the policy head, 1 for the value head).
        seed: see :class:`~engine_rl.algos.policies.ActorCritic`.
        kind: ``"auto"`` (from the action space), ``"categorical"`` or ``"gaussian"``; a kind
            that does not fit the action space is an error.
        encoders: for a Dict observation, your own encoder modules for some keys (see
            :class:`~engine_rl.algos.encoders.DictEncoder`); they are not re-initialised.
        owner: the component named in error messages (e.g. a recipe).

    Examples:
        >>> policy = make_actor_critic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
        >>> type(policy).__name__
        'CategoricalActorCritic'
        >>> make_actor_critic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), kind="gaussian")
        Traceback (most recent call last):
        ...
        ValueError: make_actor_critic: a Gaussian policy needs a Box action space, got Discrete(2)
    """
    encoder = make_encoder(observation_space, encoders=encoders, owner=owner)
    obs_dim = feature_dim(observation_space, encoder, normalize_observations, owner=owner)
    family = action_family(action_space, kind, owner=owner)
    actor_net = mlp(obs_dim, action_outputs(action_space, family), hidden, activation=activation)
    critic = mlp(obs_dim, 1, hidden, activation=activation)
    if ortho_init:
        ppo_init(actor_net, critic, encoder)
    normalizer = Normalizer((obs_dim,), clip=obs_clip) if normalize_observations else None
    return distribution_policy(family, actor_net, action_space, critic, obs_normalizer=normalizer, encoder=encoder,
                               log_std_init=log_std_init, seed=seed)


def feature_dim(observation_space: gym.Space, encoder: nn.Module | None, normalize_observations: bool, *,
                owner: str) -> int:
    """Width of what the networks read: the encoder's features, or a 1-D Box observation's size; a
    ``ValueError`` naming ``owner`` for ``normalize_observations`` on an encoded observation."""
    if encoder is not None and normalize_observations:
        raise ValueError(f"{owner}: normalize_observations is for 1-D Box observations, got {observation_space} "
                         "(pixels are scaled to [0, 1]; set normalize_observations=false)")
    return encoder.features if encoder is not None else int(observation_space.shape[0])


def distribution_policy(
    family: str, actor_net: nn.Module, action_space: gym.Space, critic: nn.Module | None, *,
    obs_normalizer: nn.Module | None = None, encoder: nn.Module | None = None, log_std_init: float = 0.0,
    seed: int | None = None,
) -> ActorCritic:
    """The :class:`~engine_rl.algos.policies.ActorCritic` of ``family`` (:func:`action_family`) over
    ``actor_net`` (outputs: :func:`action_outputs`) and ``critic`` (``None``: actor-only)."""
    if family == "categorical":
        policy_cls, actor = CategoricalActorCritic, actor_net
    elif family == "multi_categorical":
        policy_cls, actor = MultiCategoricalActorCritic, MultiDiscreteLogits(actor_net, action_space.nvec)
    else:
        policy_cls = GaussianActorCritic
        actor = GaussianActor(actor_net, action_dim=int(action_space.shape[0]), log_std_init=log_std_init)
    return policy_cls(actor, critic, obs_normalizer=obs_normalizer, encoder=encoder, seed=seed)


def action_family(action_space: gym.Space, kind: str = "auto", *, owner: str = "make_actor_critic") -> str:
    """The distribution for ``action_space``: ``"categorical"`` (Discrete), ``"multi_categorical"``
    (1-D MultiDiscrete) or ``"gaussian"`` (1-D Box); ``kind`` (one of :data:`KINDS`) may insist on
    one, and a ``ValueError`` naming ``owner`` says when the space does not fit it.

    Examples:
        >>> action_family(gym.spaces.MultiDiscrete([2, 3])), action_family(gym.spaces.Box(-1, 1, (2,)))
        ('multi_categorical', 'gaussian')
        >>> action_family(gym.spaces.Box(-1, 1, (2, 2)), owner="demo")
        Traceback (most recent call last):
        ...
        ValueError: demo: the action space must be Discrete or 1-D MultiDiscrete (categorical policy) or a 1-D Box (Gaussian policy), got Box(-1.0, 1.0, (2, 2), float32)
    """
    if kind not in KINDS:
        raise ValueError(f"{owner}: kind must be 'auto', 'categorical' or 'gaussian', got {kind!r}")
    discrete = isinstance(action_space, gym.spaces.Discrete)
    multi = is_multi_discrete(action_space)
    box = isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1
    if kind == "gaussian" and not box:
        raise ValueError(f"{owner}: a Gaussian policy needs a Box action space, got {action_space}")
    if kind == "categorical" and not (discrete or multi):
        raise ValueError(f"{owner}: a categorical policy needs a Discrete action space, got {action_space}")
    if not (discrete or multi or box):
        raise ValueError(
            f"{owner}: the action space must be Discrete or 1-D MultiDiscrete (categorical policy) or a 1-D Box "
            f"(Gaussian policy), got {action_space}"
        )
    return "categorical" if discrete else "multi_categorical" if multi else "gaussian"


def action_outputs(action_space: gym.Space, family: str) -> int:
    """Width of the actor's output: logits per option (all dimensions'), or the mean per dimension."""
    if family == "categorical":
        return int(action_space.n)
    if family == "multi_categorical":
        return int(action_space.nvec.sum())
    return int(action_space.shape[0])


def ppo_init(actor_net: nn.Module, critic: nn.Module, encoder: nn.Module | None) -> None:
    """Orthogonal init, PPO's gains: 0.01 for the policy head, 1 for the value head, sqrt 2 elsewhere;
    a Dict encoder's user-given modules are left as they are."""
    orthogonal_init_(actor_net, last_gain=0.01)
    orthogonal_init_(critic, last_gain=1.0)
    if isinstance(encoder, DictEncoder):
        for module in encoder.built():  # not the user's own encoders
            orthogonal_init_(module)
    elif encoder is not None:
        orthogonal_init_(encoder)
