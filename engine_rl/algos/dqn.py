"""DQN: a greedy Q-value policy and the (double) DQN loss.

The loss reads a replay sample and writes ``td_error`` into it, so a prioritized buffer's
:class:`handlers.PriorityUpdater` picks it up with no coupling to the loss. The target network
is a plain module updated by :class:`handlers.TargetNetUpdater`.

Target values ahead of time. While the target network does not change (hard copies between
collected batches), its values ``Q_target(s', .)`` for a whole batch's optim steps can come from
a few large forward passes instead of one small one per step: :meth:`DQNLoss.add_target_values` writes them into a
block of samples (``ReplaySampler(..., prefetch=K, transform=loss.add_target_values)``), stamped
with the target network's version; the loss uses them only while that version is current and
runs the target network itself otherwise.
"""

from __future__ import annotations

import copy

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from engine_rl.algos.dqn_fused import dqn_gradients, q_mlp_plan
from engine_rl.algos.mlp_fused import mlp_forward, write_gradients
from engine_rl.keys import require_keys

__all__ = ["QValuePolicy", "DQNLoss", "TARGET_CHUNK_ROWS", "TARGET_VALUE_KEY", "TARGET_VERSION_KEY"]

TARGET_VALUE_KEY = ("next", "target_action_value")
"""Key of ``Q_target(s', a)`` for every action ``a``, ``[*batch, num_actions]``, written ahead of time."""
TARGET_VERSION_KEY = ("next", "target_version")
"""Key of the target network's version (int64, one per row) when :data:`TARGET_VALUE_KEY` was written."""
TARGET_CHUNK_ROWS = 1024
"""Rows per target-network pass in :meth:`DQNLoss.add_target_values` (larger blocks are sliced)."""


class QValuePolicy(nn.Module):
    """Greedy policy over a Q network: writes ``action = argmax_a Q(observation, a)``.

    Args:
        qnet: maps observations ``[..., obs_dim]`` to Q values ``[..., num_actions]``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from engine_rl.algos.networks import mlp
        >>> policy = QValuePolicy(mlp(4, 2, (8,)))
        >>> td = policy(TensorDict({"observation": torch.zeros(3, 4)}, [3]))
        >>> td["action"].shape, td["action"].dtype
        (torch.Size([3]), torch.int64)
    """

    in_keys = ["observation"]
    out_keys = ["action"]

    def __init__(self, qnet: nn.Module) -> None:
        super().__init__()
        self.qnet = qnet

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        td.set("action", self.qnet(td["observation"]).argmax(dim=-1))
        return td


class DQNLoss(nn.Module):
    """(Double) DQN loss with a target network; writes ``td_error`` into the sample.

    With ``double=True`` the next action is chosen by the online network and valued by the
    target network (van Hasselt et al., 2016); otherwise the target network does both.
    Only ``terminated`` stops bootstrapping: a time-limit truncation still bootstraps from the
    true final observation that the collector stores in ``("next", "observation")``.
    Importance weights in ``weight`` (prioritized replay) scale each item's loss.

    Args:
        qnet: the online Q network.
        target_qnet: the target network (default: a frozen deep copy of ``qnet``).
        gamma: discount factor in [0, 1].
        double: double DQN targets.
        loss: ``"huber"`` (smooth L1) or ``"mse"``.
        write_gradients: compute the Q network's gradients during the call, with a backward
            written by hand (:mod:`engine_rl.algos.dqn_fused`), and add them into its
            parameters' ``.grad``, whenever the network qualifies (a plain ReLU/Tanh MLP, as
            :func:`~engine_rl.algos.networks.mlp` builds it) and grad mode is on. The returned
            loss then has no autograd graph and :attr:`wrote_gradients` is True, which tells
            :func:`~engine_rl.create_trainer`'s trainer to skip ``backward()``; values and
            gradients are bitwise autograd's. Otherwise, and with ``False``, autograd's path:
            call ``backward()`` on the loss yourself.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from engine_rl.algos.networks import mlp
        >>> loss_fn = DQNLoss(mlp(4, 2, (8,)), gamma=0.9)
        >>> sample = TensorDict({
        ...     "observation": torch.zeros(5, 4), "action": torch.zeros(5, dtype=torch.long),
        ...     ("next", "observation"): torch.zeros(5, 4), ("next", "reward"): torch.ones(5),
        ...     ("next", "terminated"): torch.zeros(5, dtype=torch.bool)}, [5])
        >>> out = loss_fn(sample)
        >>> sorted(out.keys()), sample["td_error"].shape
        (['loss'], torch.Size([5]))

        Target values computed ahead of time give the same loss:

        >>> block = loss_fn.add_target_values(sample.exclude("td_error"))
        >>> block["next", "target_action_value"].shape, bool(loss_fn(block)["loss"] == out["loss"])
        (torch.Size([5, 2]), True)

        With ``write_gradients=True`` the call itself leaves the gradients that ``backward()``
        would:

        >>> fused = DQNLoss(loss_fn.qnet, gamma=0.9, write_gradients=True)
        >>> loss_fn.qnet.zero_grad(set_to_none=True)
        >>> loss_fn(sample)["loss"].backward()
        >>> expected = [p.grad.clone() for p in loss_fn.qnet.parameters()]
        >>> loss_fn.qnet.zero_grad(set_to_none=True)
        >>> out = fused(sample)
        >>> fused.wrote_gradients, out["loss"].requires_grad
        (True, False)
        >>> all(torch.equal(p.grad, e) for p, e in zip(loss_fn.qnet.parameters(), expected))
        True
    """

    in_keys = ["observation", "action", ("next", "observation"), ("next", "reward"), ("next", "terminated")]

    def __init__(
        self,
        qnet: nn.Module,
        target_qnet: nn.Module | None = None,
        *,
        gamma: float = 0.99,
        double: bool = True,
        loss: str = "huber",
        write_gradients: bool = False,
    ) -> None:
        super().__init__()
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"DQNLoss: gamma must be in [0, 1], got {gamma}")
        if loss not in ("huber", "mse"):
            raise ValueError(f"DQNLoss: loss must be 'huber' or 'mse', got {loss!r}")
        if not isinstance(write_gradients, bool):
            raise TypeError(f"DQNLoss: argument write_gradients must be a bool, got {write_gradients!r}")
        self.qnet = qnet
        if target_qnet is None:
            target_qnet = copy.deepcopy(qnet)
        self.target_qnet = target_qnet.requires_grad_(False)
        self.gamma = gamma
        self.double = double
        self.loss_kind = loss
        self.write_gradients = write_gradients
        self.wrote_gradients = False
        """Whether the last call wrote the Q network's gradients itself (read by the trainer)."""
        self.precomputed_steps = 0
        """Optim steps whose target values came from :meth:`add_target_values` (a diagnostic)."""
        self._target_tensors: list[torch.Tensor] | None = None  # listed by add_target_values

    def target_version(self) -> int:
        """A number that changes whenever the target network's parameters or buffers change.

        The sum of their version counters, which every in-place write bumps (``copy_``,
        ``lerp_``, ``load_state_dict``, ...), so hard and soft updates both change it. The
        tensors are listed afresh by every :meth:`add_target_values` call (walking the module
        costs more than summing), so a tensor *replaced* (not written) between two calls goes
        unnoticed until the next one.
        """
        tensors = self._target_tensors
        if tensors is None:
            tensors = self._target_tensors = [*self.target_qnet.parameters(), *self.target_qnet.buffers()]
        return sum(t._version for t in tensors)

    @torch.no_grad()
    def add_target_values(self, sample: TensorDictBase) -> TensorDictBase:
        """Write the target network's values of ``("next", "observation")`` into ``sample``.

        Adds :data:`TARGET_VALUE_KEY` (``Q_target(s', .)``, all actions) and
        :data:`TARGET_VERSION_KEY` (:meth:`target_version` before the pass) in place and returns
        ``sample``. :meth:`forward` uses them for as long as the target network is unchanged.
        Safe on a worker thread while the caller updates the target network: the version is
        read before the pass, so values computed during (or before) any write are stamped with
        an older version than the write leaves, and the loss computes its own.
        """
        try:
            next_obs = sample["next", "observation"]
        except KeyError:
            require_keys(sample, [("next", "observation")], consumer="DQNLoss.add_target_values")
            raise
        self._target_tensors = None  # list them again: the module's tensors may have been replaced
        version = self.target_version()  # before the pass: see the docstring
        if next_obs.shape[0] > TARGET_CHUNK_ROWS:
            # in slices: one pass over 8192 rows runs ~2x slower here than eight over 1024, whose
            # activations stay in cache
            values = torch.cat([self.target_qnet(rows) for rows in next_obs.split(TARGET_CHUNK_ROWS)])
        else:
            values = self.target_qnet(next_obs)
        sample.set(TARGET_VALUE_KEY, values)
        stamp = torch.full(values.shape[:-1], version, dtype=torch.int64, device=values.device)
        sample.set(TARGET_VERSION_KEY, stamp)
        return sample

    def _target_values(self, sample: TensorDictBase, next_obs: torch.Tensor) -> torch.Tensor:
        values = sample.get(TARGET_VALUE_KEY, None)
        stamp = sample.get(TARGET_VERSION_KEY, None)
        if values is not None and stamp is not None:
            first = stamp[0] if stamp.ndim == 1 else stamp.reshape(-1)[0]
            if int(first) == self.target_version():
                self.precomputed_steps += 1
                return values
        return self.target_qnet(next_obs)

    def forward(self, sample: TensorDictBase) -> TensorDictBase:
        try:
            obs = sample["observation"]
            next_obs = sample["next", "observation"]
            action = sample["action"]
            reward = sample["next", "reward"]
            terminated = sample["next", "terminated"]
        except KeyError:
            require_keys(sample, self.in_keys, consumer="DQNLoss")  # raises, naming the missing keys
            raise
        # (each conversion only where needed: a no-op call still costs a dispatch, every step)
        if action.dtype != torch.int64:
            action = action.long()
        if reward.shape != action.shape:
            reward = reward.reshape(action.shape)
        if reward.dtype != torch.float32:
            reward = reward.float()
        if terminated.shape != action.shape:
            terminated = terminated.reshape(action.shape)
        if terminated.dtype != torch.bool:  # e.g. 0/1 floats from a custom env
            terminated = terminated != 0
        # gamma where the episode goes on, 0 where it terminated (gamma * (1 - terminated), in one op)
        discount = torch.where(terminated, 0.0, self.gamma)

        self.wrote_gradients = False
        plan = q_mlp_plan(self.qnet, obs, action) if self.write_gradients else None
        index = action.unsqueeze(-1)
        if plan is None:
            q_values = self.qnet(obs)
            online = self.qnet
        else:  # the same ops as the module's, without autograd: dqn_gradients is the backward
            with torch.no_grad():
                q_values, inputs = mlp_forward(obs, plan.params, plan.activations)

            def online(x: torch.Tensor) -> torch.Tensor:
                return mlp_forward(x, plan.params, plan.activations)[0]
        q_taken = q_values.gather(-1, index).squeeze(-1)
        with torch.no_grad():
            # s' goes through the online net without autograd: backward then covers only the
            # batch's own rows (a forward of s and s' together would back-propagate both)
            q_next_target = self._target_values(sample, next_obs)
            if self.double:
                next_action = online(next_obs).argmax(dim=-1, keepdim=True)
                next_value = q_next_target.gather(-1, next_action).squeeze(-1)
            else:
                next_value = q_next_target.max(dim=-1).values
            # TD target: r + gamma * Q_target(s', a*) unless the episode terminated
            td_target = reward + discount * next_value

        td_error = q_taken - td_target
        sample.set("td_error", td_error.detach())
        if self.loss_kind == "huber":
            # F.smooth_l1_loss(q_taken, td_target, reduction="none") minus its argument checks (the
            # shapes match): the same op, a third of the call's time on 64 items
            per_item = torch._C._nn.smooth_l1_loss(q_taken, td_target, 0, 1.0)
        else:
            per_item = td_error.pow(2)
        weight = sample.get("weight", None)
        loss = (per_item * weight.reshape(per_item.shape)).mean() if weight is not None else per_item.mean()
        if plan is not None:
            with torch.no_grad():
                grads = dqn_gradients(plan, inputs, q_values, index, q_taken, td_target, weight=weight,
                                      loss=self.loss_kind)
            write_gradients(plan.params, grads)
            self.wrote_gradients = True
        return TensorDict({"loss": loss}, batch_size=[])
