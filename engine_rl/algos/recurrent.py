"""Recurrent actor-critics for PPO: an LSTM or GRU core between the features and the heads.

::

    observation -> normalizer -> encoder -> core (LSTM/GRU) -> actor MLP -> action distribution
                                         \\-> critic core    -> critic MLP -> value

The critic reads its own core (``critic_core="own"``: sb3-contrib's ``enable_critic_lstm=True``,
its default), the actor's (``"shared"``: CleanRL's ``ppo_atari_lstm``) or the features directly
(``"none"``: sb3-contrib's ``enable_critic_lstm=False``, rl-zoo's Atari setting).

Where the state lives. One env copy's state is one flat float32 vector,
:attr:`RecurrentActorCritic.recurrent_state_shape` = ``(S,)``: the actor core's ``h`` (and ``c``
for an LSTM), then the critic core's. Acting, the policy reads ``"recurrent_state"`` and
``"is_init"`` and writes ``("next", "recurrent_state")`` (:mod:`engine_rl.collectors.memory`: the
collector carries it and stores, for every frame, the state the policy acted from). Training, a
minibatch is whole ``[rows, T]`` sequences; :meth:`~RecurrentActorCritic.evaluate` runs each row
from its stored state at ``t = 0``, setting it back to zeros where ``"is_init"`` marks an episode
start, so the gradient flows through the whole sequence (backpropagation through time over ``T``).
:meth:`~RecurrentActorCritic.batch_values` does the same for the values of GAE, and takes the
value of each ``("next", "observation")`` from the state after its step (the true final
observation of a truncated episode included).
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import torch
from tensordict import TensorDictBase
from torch import nn

from engine_rl.algos.encoders import make_encoder
from engine_rl.algos.networks import mlp
from engine_rl.algos.normalization import Normalizer
from engine_rl.algos.policies import ActorCritic
from engine_rl.algos.policy_factory import action_family, action_outputs, distribution_policy, feature_dim, ppo_init
from engine_rl.checks import fail, positive_int
from engine_rl.keys import IS_INIT, NEXT_RECURRENT_STATE, RECURRENT_STATE, require_keys

__all__ = ["CORES", "CRITIC_CORES", "RecurrentActorCritic", "make_recurrent_actor_critic"]

#: Accepted recurrent cores.
CORES: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": nn.GRU}
#: What the critic reads: its own core, the actor's, or the features (no core).
CRITIC_CORES = ("own", "shared", "none")


def _state_size(core: nn.RNNBase | None) -> int:
    """Floats of one copy's state in ``core``: ``h`` and ``c`` for an LSTM, ``h`` for a GRU."""
    if core is None:
        return 0
    return (2 if isinstance(core, nn.LSTM) else 1) * core.hidden_size


def core_step(core: nn.RNNBase, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``core`` along ``x [B, L, F]`` (``L`` steps, or ``x [B, F]`` for one) from flat states ``[B, S]``:
    ``(outputs [B, L, H] (or [B, H]), state after the last step [B, S])``."""
    seq = x.unsqueeze(1) if x.ndim == 2 else x
    seq = seq.transpose(0, 1)  # time-major, as nn.LSTM / nn.GRU take it
    if isinstance(core, nn.LSTM):
        h, c = state.chunk(2, dim=-1)
        out, (h, c) = core(seq, (h.unsqueeze(0).contiguous(), c.unsqueeze(0).contiguous()))
        state = torch.cat([h[0], c[0]], dim=-1)
    else:
        out, h = core(seq, state.unsqueeze(0).contiguous())
        state = h[0]
    out = out.transpose(0, 1)
    return (out[:, 0] if x.ndim == 2 else out), state


def unroll(
    core: nn.RNNBase, x: torch.Tensor, state: torch.Tensor, is_init: torch.Tensor
) -> tuple[torch.Tensor, list[int], torch.Tensor]:
    """Run ``core`` along ``x [B, T, F]`` from ``state [B, S]``, a row's state set to zeros before each
    step where ``is_init [B, T]`` is True.

    The time axis is cut where any row starts an episode; each piece runs in one call of the core
    (the same maths as step by step, in as many calls as there are episode starts plus one).

    Returns:
        ``(outputs [B, T, H], ends, states)``: ``ends`` the last step of each piece, ``states [B, len(ends), S]``
        the state after each of them (where a next observation's value is read from).
    """
    cuts = (is_init[:, 1:].any(dim=0).nonzero().squeeze(1) + 1).tolist()  # one host sync per sequence batch
    starts, stops = [0, *cuts], [*cuts, x.shape[1]]
    outputs, states = [], []
    for start, stop in zip(starts, stops, strict=True):
        state = state.masked_fill(is_init[:, start, None], 0.0)
        out, state = core_step(core, x[:, start:stop], state)
        outputs.append(out)
        states.append(state)
    return torch.cat(outputs, dim=1), [stop - 1 for stop in stops], torch.stack(states, dim=1)


class RecurrentActorCritic(nn.Module):
    """An actor-critic whose actor (and critic) read a recurrent core's output instead of the features.

    Build one with :func:`make_recurrent_actor_critic`. The distribution is an actor-only
    :class:`~engine_rl.algos.policies.ActorCritic` (``heads``: categorical, multi-categorical or
    Gaussian) acting on the core's output, so sampling, its generator (saved in ``state_dict``)
    and the deterministic mode are the feed-forward policies' own.

    Args:
        heads: the actor-only distribution policy over the core's outputs (``critic=None``, no
            normalizer or encoder of its own).
        critic: maps the critic's input (its core's output, or the features for ``critic_core="none"``) to ``[..., 1]``.
        core: the actor's one-layer ``nn.LSTM`` or ``nn.GRU``.
        critic_core: ``"own"`` (a core of its own: ``own_core``), ``"shared"`` or ``"none"``.
        own_core: the critic's core for ``critic_core="own"``.
        obs_normalizer: applied to ``"observation"`` first (``None``: identity).
        encoder: a trunk under the cores (e.g. the Nature CNN for pixels; ``None``: none).

    Examples:
        >>> from tensordict import TensorDict
        >>> policy = make_recurrent_actor_critic(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3),
        ...                                      core="gru", core_size=4, hidden=(8,), seed=0)
        >>> policy.recurrent_state_shape  # the actor GRU's h, then the critic GRU's
        (8,)
        >>> td = TensorDict({"observation": torch.zeros(5, 2), "recurrent_state": torch.zeros(5, 8),
        ...                  "is_init": torch.ones(5, dtype=torch.bool)}, [5])
        >>> out = policy(td)
        >>> out["action"].shape, out["log_prob"].shape, out["next", "recurrent_state"].shape
        (torch.Size([5]), torch.Size([5]), torch.Size([5, 8]))
    """

    memory_keys = (RECURRENT_STATE, IS_INIT)
    """What :meth:`evaluate` reads besides observations and actions (a loss passes them by name)."""

    def __init__(
        self,
        heads: ActorCritic,
        critic: nn.Module,
        *,
        core: nn.RNNBase,
        critic_core: str = "own",
        own_core: nn.RNNBase | None = None,
        obs_normalizer: nn.Module | None = None,
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if heads.critic is not None or heads.obs_normalizer is not None or heads.encoder is not None:
            raise ValueError(
                "RecurrentActorCritic: heads must be an actor-only ActorCritic with no normalizer or encoder"
            )
        if critic_core not in CRITIC_CORES:
            fail(critic_core, "'own', 'shared' or 'none'", name="critic_core", owner="RecurrentActorCritic")
        if (critic_core == "own") != (own_core is not None):
            raise ValueError("RecurrentActorCritic: give own_core exactly when critic_core is 'own'")
        for module in (core, own_core):
            if module is not None and (not isinstance(module, nn.LSTM | nn.GRU) or module.num_layers != 1
                                       or module.batch_first or module.bidirectional):
                raise ValueError(
                    f"RecurrentActorCritic: cores must be one-layer, unidirectional nn.LSTM or nn.GRU with "
                    f"batch_first=False, got {module}"
                )
        self.heads = heads
        self.critic = critic
        self.core = core
        self.critic_core = critic_core
        self.own_core = own_core
        self.obs_normalizer = obs_normalizer
        self.encoder = encoder
        self._actor_size = _state_size(core)
        self.recurrent_state_shape = (self._actor_size + _state_size(own_core),)

    @property
    def deterministic(self) -> bool:
        """Whether it acts with the distribution's mode (see :meth:`greedy`)."""
        return self.heads.deterministic

    @property
    def in_keys(self) -> list[str]:
        return ["observation", RECURRENT_STATE, IS_INIT]

    @property
    def out_keys(self) -> list:
        return [*self.heads.out_keys, NEXT_RECURRENT_STATE]

    def features(self, observation: torch.Tensor) -> torch.Tensor:
        """The observation as the cores see it: normalized, then encoded."""
        obs = observation if self.obs_normalizer is None else self.obs_normalizer(observation)
        return obs if self.encoder is None else self.encoder(obs)

    def _value(self, x: torch.Tensor) -> torch.Tensor:
        value = self.critic(x)
        return value.squeeze(-1) if value.ndim == x.ndim else value

    # -- acting ---------------------------------------------------------------------------
    def forward(self, td: TensorDictBase) -> TensorDictBase:
        """One step for a ``[B]`` TensorDict: reads ``"observation"``, ``"recurrent_state"`` and
        (optionally) ``"is_init"`` (zeroing those states first); writes ``"action"``, ``"log_prob"``
        (unless deterministic) and ``("next", "recurrent_state")``. The critic does not run (its
        core does, to carry its state)."""
        x = self.features(td["observation"])
        state = td[RECURRENT_STATE]
        is_init = td.get(IS_INIT, None)
        if is_init is not None:
            state = state.masked_fill(is_init.reshape(-1, 1), 0.0)
        actor_state, critic_state = state[:, : self._actor_size], state[:, self._actor_size :]
        out, actor_state = core_step(self.core, x, actor_state)
        if self.own_core is not None:
            _, critic_state = core_step(self.own_core, x, critic_state)
        action, log_prob = self.heads.act(out)
        td.set("action", action)
        if log_prob is not None:
            td.set("log_prob", log_prob)
        td.set(NEXT_RECURRENT_STATE, torch.cat([actor_state, critic_state], dim=-1))
        return td

    # -- training -------------------------------------------------------------------------
    def _sequences(self, observation: torch.Tensor, recurrent_state: torch.Tensor, is_init: torch.Tensor):
        """Actor outputs and critic inputs ``[B, T, ...]`` of sequences, and the critic core's
        ``(ends, states)`` (:func:`unroll`; ``None`` for a critic with no core)."""
        b, t = is_init.shape
        x = self.features(observation.flatten(0, 1)).unflatten(0, (b, t))
        start = recurrent_state[:, 0]
        actor_out, ends, actor_states = unroll(self.core, x, start[:, : self._actor_size], is_init)
        if self.critic_core == "own":
            critic_in, ends, critic_states = unroll(self.own_core, x, start[:, self._actor_size :], is_init)
            return actor_out, critic_in, (ends, critic_states)
        if self.critic_core == "shared":
            return actor_out, actor_out, (ends, actor_states)
        return actor_out, x, None

    def evaluate(
        self, observation: torch.Tensor, action: torch.Tensor, *, recurrent_state: torch.Tensor, is_init: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log_prob, entropy, value)``, each ``[B, T]``, of ``action`` along whole sequences.

        Args:
            observation: ``[B, T, ...]``, each row consecutive steps of one env copy.
            action: ``[B, T, ...]``.
            recurrent_state: ``[B, T, S]`` as collected; only ``t = 0`` is read (the rest is rebuilt).
            is_init: ``[B, T]``: where the state is set back to zeros.
        """
        actor_out, critic_in, _ = self._sequences(observation, recurrent_state, is_init)
        log_prob, entropy, _ = self.heads.evaluate(actor_out, action)
        return log_prob, entropy, self._value(critic_in)

    @torch.no_grad()
    def batch_values(self, batch: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        """``(V(s), V(s'))`` of a collected ``[num_envs, T]`` batch, each ``[num_envs, T]``: the
        critic run along each row from its stored state.

        ``V(s')`` of a step is the next step's ``V(s)`` where no row starts an episode there (the same
        observation, from the same state); at the others (episode ends, the last step) the critic
        reads ``("next", "observation")`` from the state after the step."""
        require_keys(batch, ["observation", ("next", "observation"), RECURRENT_STATE, IS_INIT],
                     consumer="RecurrentActorCritic.batch_values")
        _, critic_in, core_states = self._sequences(batch["observation"], batch[RECURRENT_STATE], batch[IS_INIT])
        value = self._value(critic_in)
        next_obs = batch["next", "observation"]
        if core_states is None:  # a feed-forward critic: every V(s') from the features
            b, t = batch.batch_size
            return value, self._value(self.features(next_obs.flatten(0, 1))).reshape(b, t)
        ends, states = core_states
        next_x = self.features(next_obs[:, ends].flatten(0, 1))
        core = self.own_core if self.critic_core == "own" else self.core
        next_in, _ = core_step(core, next_x, states.flatten(0, 1))
        next_value = torch.cat([value[:, 1:], value[:, :1]], dim=1)  # V(s_t+1) for t < T - 1
        next_value[:, ends] = self._value(next_in).reshape(len(value), len(ends))
        return value, next_value

    def value(self, observation: torch.Tensor) -> torch.Tensor:
        raise TypeError(
            "RecurrentActorCritic: a value needs the recurrent state; use batch_values(batch) on a collected batch"
        )

    def greedy(self) -> RecurrentActorCritic:
        """The deterministic policy: shares every network and the normalizer, not the sampling generator."""
        return RecurrentActorCritic(
            self.heads.greedy(), self.critic, core=self.core, critic_core=self.critic_core, own_core=self.own_core,
            obs_normalizer=self.obs_normalizer, encoder=self.encoder,
        )

    def extra_repr(self) -> str:
        return f"critic_core={self.critic_core!r}, recurrent_state_shape={self.recurrent_state_shape}"


def make_recurrent_actor_critic(
    observation_space: gym.Space,
    action_space: gym.Space,
    *,
    core: str = "lstm",
    core_size: int = 64,
    critic_core: str = "own",
    hidden: Sequence[int] = (64,),
    activation: type[nn.Module] = nn.Tanh,
    normalize_observations: bool = False,
    obs_clip: float | None = 10.0,
    log_std_init: float = 0.0,
    ortho_init: bool = True,
    seed: int | None = None,
    owner: str = "make_recurrent_actor_critic",
) -> RecurrentActorCritic:
    """A :class:`RecurrentActorCritic` for the env's single spaces (as
    :func:`~engine_rl.algos.policy_factory.make_actor_critic` builds feed-forward ones).

    The features (the observation, or an encoder's output: the Nature CNN for images) go into a
    one-layer ``core`` of ``core_size`` units; the actor's MLP (``hidden``) maps its output to the
    distribution's parameters, and the critic's MLP its own core's output (see ``critic_core``)
    to a value. ``ortho_init`` initialises the MLPs and encoder as PPO does and the cores'
    weights orthogonally with zero biases (CleanRL's ``ppo_atari_lstm``); without it they keep
    torch's defaults (sb3-contrib with ``ortho_init=False``).

    Examples:
        >>> policy = make_recurrent_actor_critic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
        >>> policy.recurrent_state_shape  # LSTM h and c of the actor's core, then of the critic's
        (256,)
        >>> make_recurrent_actor_critic(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), core="rnn")
        Traceback (most recent call last):
        ...
        ValueError: make_recurrent_actor_critic: core must be 'lstm' or 'gru', got 'rnn'
    """
    if core not in CORES:
        fail(core, "'lstm' or 'gru'", name="core", owner=owner)
    if critic_core not in CRITIC_CORES:
        fail(critic_core, "'own', 'shared' or 'none'", name="critic_core", owner=owner)
    core_size = positive_int(core_size, name="core_size", owner=owner)
    encoder = make_encoder(observation_space, owner=owner)
    features = feature_dim(observation_space, encoder, normalize_observations, owner=owner)
    family = action_family(action_space, owner=owner)
    actor_core = CORES[core](features, core_size)
    own_core = CORES[core](features, core_size) if critic_core == "own" else None
    actor_net = mlp(core_size, action_outputs(action_space, family), hidden, activation=activation)
    critic = mlp(features if critic_core == "none" else core_size, 1, hidden, activation=activation)
    if ortho_init:
        ppo_init(actor_net, critic, encoder)
        for module in (actor_core, own_core):
            for name, param in [] if module is None else module.named_parameters():
                if name.startswith("weight"):
                    nn.init.orthogonal_(param, gain=1.0)
                else:
                    nn.init.zeros_(param)
    normalizer = Normalizer((features,), clip=obs_clip) if normalize_observations else None
    heads = distribution_policy(family, actor_net, action_space, None, log_std_init=log_std_init, seed=seed)
    return RecurrentActorCritic(heads, critic, core=actor_core, critic_core=critic_core, own_core=own_core,
                                obs_normalizer=normalizer, encoder=encoder)
