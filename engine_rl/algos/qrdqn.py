"""QR-DQN (Dabney et al., 2018): a Q network that outputs ``num_quantiles`` quantiles of the return per
action, trained with the quantile Huber loss; the greedy policy acts on the quantiles' mean.

The network's output is flat, ``[batch, num_actions * num_quantiles]``, read action-major as
``[batch, num_actions, num_quantiles]`` (an :func:`~engine_rl.algos.networks.mlp` of that width, or a
:func:`~engine_rl.algos.networks.dueling_mlp` with ``outputs_per_action=num_quantiles``). The quantile
``i`` of ``N`` stands at the midpoint ``tau_hat_i = (2 i + 1) / (2 N)`` of its fraction of the
distribution. Like :class:`~engine_rl.algos.dqn.DQNLoss`, the loss reads a replay sample and writes
``td_error`` into it (for prioritized replay), and its target network is a plain module updated by
:class:`handlers.TargetNetUpdater`.
"""

from __future__ import annotations

import copy

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.algos.dqn import TRANSITION_KEYS, read_transition
from engine_rl.checks import fraction, positive_int, positive_number
from engine_rl.keys import refuse_recurrent

__all__ = ["QRDQNLoss", "QuantileMean", "quantile_huber", "quantile_midpoints"]


def quantile_midpoints(num_quantiles: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    """``tau_hat_i = (2 i + 1) / (2 N)`` for ``i = 0 .. N - 1``: the fractions the quantiles estimate.

    Examples:
        >>> quantile_midpoints(4)
        tensor([0.1250, 0.3750, 0.6250, 0.8750])
    """
    return (torch.arange(num_quantiles, dtype=torch.float32, device=device) + 0.5) / num_quantiles


def quantile_huber(quantiles: torch.Tensor, targets: torch.Tensor, *, kappa: float = 1.0) -> torch.Tensor:
    """The quantile Huber loss of each item: ``sum_i mean_j rho^kappa_{tau_hat_i}(T_j - theta_i)``.

    ``rho^kappa_tau(u) = |tau - 1{u < 0}| * L_kappa(u) / kappa``, with the Huber loss
    ``L_kappa(u) = u^2 / 2`` for ``|u| <= kappa`` and ``kappa (|u| - kappa / 2)`` beyond: every
    estimated quantile ``theta_i`` is regressed on every target sample ``T_j`` (Dabney et al. 2018,
    eq. 10: the sum over ``i`` and the mean over ``j``, as SB3-contrib's QR-DQN sums too).

    Args:
        quantiles: ``theta``, ``[batch, N]`` (at the midpoints of :func:`quantile_midpoints`).
        targets: ``T``, ``[batch, M]`` (no gradient flows into them).
        kappa: the Huber threshold (the paper's 1).

    Returns:
        ``[batch]``, one loss per item.

    Examples:
        >>> quantile_huber(torch.tensor([[0.0, 0.0]]), torch.tensor([[1.0, -1.0]]))
        tensor([0.5000])
    """
    taus = quantile_midpoints(quantiles.shape[-1], device=quantiles.device)
    u = targets.detach().unsqueeze(-2) - quantiles.unsqueeze(-1)  # [batch, i, j]: T_j - theta_i
    huber = torch.where(u.abs() <= kappa, 0.5 * u.pow(2), kappa * (u.abs() - 0.5 * kappa))
    rho = (taus.unsqueeze(-1) - (u.detach() < 0).float()).abs() * huber / kappa
    return rho.mean(dim=-1).sum(dim=-1)


def _declared_width(net: nn.Module) -> tuple[int, nn.Module] | None:
    """The output width a network declares, and the layer that declares it: the ``out_features`` of
    the last module of (nested) ``nn.Sequential``\\ s (a ``Linear``, a ``DuelingHead``); None when unknown."""
    last = net
    while isinstance(last, nn.Sequential) and len(last):
        last = last[-1]
    width = getattr(last, "out_features", None)
    return None if width is None else (int(width), last)


class QuantileMean(nn.Module):
    """The Q values of a quantile network: ``Q(s, a) = mean_i theta_i(s, a)``, ``[..., num_actions]``.

    Put it under :class:`~engine_rl.algos.dqn.QValuePolicy` for QR-DQN's greedy policy (``argmax_a``
    of the mean quantiles); it shares the network's weights.

    Examples:
        >>> from engine_rl.algos.dqn import QValuePolicy
        >>> from engine_rl.algos.networks import mlp
        >>> q = QuantileMean(mlp(4, 2 * 5, (8,)), num_actions=2, num_quantiles=5)
        >>> q(torch.zeros(3, 4)).shape
        torch.Size([3, 2])
        >>> from tensordict import TensorDict
        >>> QValuePolicy(q)(TensorDict({"observation": torch.zeros(3, 4)}, [3]))["action"].shape
        torch.Size([3])
    """

    def __init__(self, qnet: nn.Module, *, num_actions: int, num_quantiles: int) -> None:
        super().__init__()
        self.qnet = qnet
        self.num_actions = num_actions
        self.num_quantiles = num_quantiles

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        out = self.qnet(observation)
        return out.reshape(*out.shape[:-1], self.num_actions, self.num_quantiles).mean(dim=-1)


class QRDQNLoss(nn.Module):
    """Quantile-regression DQN loss with a target network; writes ``td_error`` into the sample.

    For a sample ``(s, a, r, s')`` with the network's quantiles ``theta_i(s, a)`` (``i < N``):

    - the greedy next action ``a* = argmax_a mean_j theta_target_j(s', a)`` (the target network's
      mean quantiles, as the paper and SB3-contrib's QR-DQN; ``double=True``: the online network's);
    - the target quantiles ``T_j = r + gamma * (1 - terminated) * theta_target_j(s', a*)``;
    - ``loss = mean(w * quantile_huber(theta(s, a), T))`` (:func:`quantile_huber`, ``kappa`` 1).

    Only ``terminated`` stops bootstrapping (a time-limit truncation bootstraps from the stored
    final observation); ``w`` is the ``"weight"`` of prioritized replay (1 without it). ``td_error``
    is the Q-value error ``mean_i theta_i(s, a) - mean_j T_j``. An n-step sample carries the
    discount of its bootstrap value in ``("next", "discount")`` (``gamma^k``, 0 after a terminal),
    as :class:`~engine_rl.algos.dqn.DQNLoss` reads it: then ``T_j = r + discount * theta_target_j(s', a*)``
    with ``r`` the window's discounted reward sum.

    Args:
        qnet: the online network, observations ``[B, ...]`` to ``[B, num_actions * num_quantiles]``.
        target_qnet: the target network (default: a frozen deep copy of ``qnet``).
        num_actions: number of discrete actions.
        num_quantiles: quantiles per action ``N``.
        gamma: discount factor in [0, 1].
        double: pick ``a*`` with the online network (double DQN) instead of the target network.
        kappa: threshold of the quantile Huber loss (> 0).

    Raises:
        ValueError: in one line, when ``qnet`` declares (its last layer's ``out_features``) an output
            width other than ``num_actions * num_quantiles``; a network that declares none is
            checked on each forward.

    Examples:
        >>> from engine_rl.algos.networks import mlp
        >>> loss_fn = QRDQNLoss(mlp(4, 2 * 3, (8,)), num_actions=2, num_quantiles=3, gamma=0.9)
        >>> sample = TensorDict({
        ...     "observation": torch.zeros(5, 4), "action": torch.zeros(5, dtype=torch.long),
        ...     ("next", "observation"): torch.zeros(5, 4), ("next", "reward"): torch.ones(5),
        ...     ("next", "terminated"): torch.zeros(5, dtype=torch.bool)}, [5])
        >>> out = loss_fn(sample)
        >>> sorted(out.keys()), sample["td_error"].shape
        (['loss'], torch.Size([5]))
        >>> QRDQNLoss(mlp(4, 6, (8,)), num_actions=2, num_quantiles=4)
        Traceback (most recent call last):
        ...
        ValueError: QRDQNLoss: qnet must output num_actions x num_quantiles = 2 x 4 = 8 values per observation (read as [batch, 2, 4]), got 6 (its last layer: Linear(in_features=8, out_features=6, bias=True))
    """

    in_keys = list(TRANSITION_KEYS)

    def __init__(
        self,
        qnet: nn.Module,
        target_qnet: nn.Module | None = None,
        *,
        num_actions: int,
        num_quantiles: int,
        gamma: float = 0.99,
        double: bool = False,
        kappa: float = 1.0,
    ) -> None:
        super().__init__()
        refuse_recurrent(qnet, owner="QRDQNLoss", use="its Q network sees one observation (recurrent policies are PPO's: PPOLoss)")
        positive_int(num_actions, name="num_actions", owner="QRDQNLoss")
        positive_int(num_quantiles, name="num_quantiles", owner="QRDQNLoss")
        fraction(gamma, name="gamma", owner="QRDQNLoss")
        positive_number(kappa, name="kappa", owner="QRDQNLoss", finite=True)
        self.num_actions = num_actions
        self.num_quantiles = num_quantiles
        declared = _declared_width(qnet)
        if declared is not None:
            self._check_width(declared[0], f"its last layer: {declared[1]}")
        self.qnet = qnet
        if target_qnet is None:
            target_qnet = copy.deepcopy(qnet)
        self.target_qnet = target_qnet.requires_grad_(False)
        self.gamma = float(gamma)
        self.double = double
        self.kappa = float(kappa)

    def _check_width(self, width: int, what: str) -> None:
        expected = self.num_actions * self.num_quantiles
        if width != expected:
            raise ValueError(
                f"QRDQNLoss: qnet must output num_actions x num_quantiles = {self.num_actions} x {self.num_quantiles} "
                f"= {expected} values per observation (read as [batch, {self.num_actions}, {self.num_quantiles}]), "
                f"got {width} ({what})"
            )

    def quantiles(self, net: nn.Module, observation: torch.Tensor) -> torch.Tensor:
        """``net(observation)`` as quantiles ``[B, num_actions, num_quantiles]``."""
        out = net(observation)
        if out.shape[-1] != self.num_actions * self.num_quantiles:
            self._check_width(out.shape[-1], f"an output of shape {list(out.shape)}")
        return out.reshape(*out.shape[:-1], self.num_actions, self.num_quantiles)

    def forward(self, sample: TensorDictBase) -> TensorDictBase:
        obs, action, next_obs, reward, discount = read_transition(sample, gamma=self.gamma, consumer="QRDQNLoss")
        n = self.num_quantiles
        action = action.reshape(-1, 1, 1).expand(-1, 1, n)
        reward = reward.reshape(-1, 1)
        discount = discount.float().reshape(-1, 1)

        theta = self.quantiles(self.qnet, obs).gather(1, action).squeeze(1)  # theta_i(s, a): [B, N]
        with torch.no_grad():
            next_target = self.quantiles(self.target_qnet, next_obs)  # [B, A, N]
            chooser = self.quantiles(self.qnet, next_obs) if self.double else next_target
            next_action = chooser.mean(dim=-1).argmax(dim=-1).reshape(-1, 1, 1).expand(-1, 1, n)
            next_theta = next_target.gather(1, next_action).squeeze(1)  # theta_target_j(s', a*): [B, N]
            # target quantiles: T_j = r + gamma * (1 - terminated) * theta_target_j(s', a*)
            # (discount = gamma * (1 - terminated), or an n-step row's own)
            target = reward + discount * next_theta

        sample.set("td_error", (theta.mean(dim=-1) - target.mean(dim=-1)).detach())
        per_item = quantile_huber(theta, target, kappa=self.kappa)
        weight = sample.get("weight", None)
        if weight is not None:
            per_item = per_item * weight.reshape(per_item.shape)
        return TensorDict({"loss": per_item.mean()}, batch_size=[])
