"""n-step transitions: each env copy's frames, in order, folded into n-step replay rows.

An n-step transition starting at frame ``t`` of one env copy covers frames ``t .. t+k-1`` with
``k = n``, or fewer where the episode ends inside the window (Sutton & Barto, ch. 7; Hessel et
al., 2018, Rainbow):

- ``("next", "reward")`` is ``sum_{m<k} gamma^m r_{t+m}``;
- every other ``("next", ...)`` entry (``observation``, ``terminated``, ``truncated``, ``done``,
  the episode counters) is frame ``t+k-1``'s: the bootstrap observation is the window's last;
- ``("next", "discount")`` (new) is the discount the loss applies to the bootstrap value:
  ``gamma^k``, or 0 where a terminal (``terminated``) ended the window. A truncation ends the sum
  too but keeps ``gamma^k``: the loss bootstraps from the true final observation;
- the other entries (``observation``, ``action``, ...) are frame ``t``'s.

A window is emitted once it is complete: ``n`` frames, or an episode end inside it. The last
frames of each env copy whose windows are still open wait, with the frames after them, for the
next batch (at most ``n - 1`` frames per copy, kept in :meth:`NStepBuilder.state_dict`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase

from engine_rl.checks import fraction, positive_int
from engine_rl.keys import MASK_KEY, format_key, present_keys, require_keys

__all__ = ["DISCOUNT_KEY", "NStepBuilder"]

#: The entry of an n-step row holding the discount of its bootstrap value (``gamma^k``, 0 after a terminal).
DISCOUNT_KEY = ("next", "discount")

_NEEDS = [("next", "reward"), ("next", "terminated"), ("next", "truncated")]


class NStepBuilder:
    """Fold ``[num_envs, T]`` batches of frames into n-step transitions (see the module docstring).

    :meth:`push` takes the next batch (row ``e`` is env copy ``e``'s next ``T`` frames, in time
    order, as :class:`~engine_rl.collectors.GymCollector` yields them; a 1-D batch is one frame
    per copy) and returns the transitions completed by it, a flat TensorDict, env copy by env
    copy in time order. With ``n = 1`` each frame is its own transition (with its discount).

    Args:
        n: frames per transition (>= 1).
        gamma: discount factor in [0, 1].
        num_envs: env copies, the batch's first dim.

    Examples:
        >>> builder = NStepBuilder(3, gamma=0.5, num_envs=1)
        >>> def frames(rewards, terminated=None, start=0):
        ...     t = len(rewards)
        ...     term = torch.zeros(1, t, dtype=torch.bool) if terminated is None else torch.tensor([terminated])
        ...     return TensorDict({"observation": torch.arange(start, start + t).reshape(1, t).float(),
        ...                        "next": {"reward": torch.tensor([rewards]), "terminated": term,
        ...                                 "truncated": torch.zeros(1, t, dtype=torch.bool)}}, [1, t])
        >>> out = builder.push(frames([1.0, 1.0]))  # two frames: no window of 3 complete yet
        >>> out.batch_size, builder.pending
        (torch.Size([0]), [2])
        >>> out = builder.push(frames([1.0, 2.0], [False, True], start=2))  # the episode ends: 4 windows complete
        >>> out["observation"].tolist(), builder.pending
        ([0.0, 1.0, 2.0, 3.0], [0])
        >>> print(out["next", "reward"].tolist(), out["next", "discount"].tolist())
        [1.75, 2.0, 2.0, 2.0] [0.125, 0.0, 0.0, 0.0]
    """

    def __init__(self, n: int, *, gamma: float, num_envs: int) -> None:
        self.n = positive_int(n, name="n", owner="NStepBuilder")
        self.gamma = fraction(gamma, name="gamma", owner="NStepBuilder")
        self.num_envs = positive_int(num_envs, name="num_envs", owner="NStepBuilder")
        self._tail: TensorDictBase | None = None  # each copy's last n-1 frames, [num_envs, n-1]
        self._open: torch.Tensor | None = None  # which of them still wait for their window to complete

    @property
    def pending(self) -> list[int]:
        """Per env copy, the frames waiting for their window to complete."""
        if self._open is None:
            return [0] * self.num_envs
        return self._open.sum(1).tolist()

    def push(self, batch: TensorDictBase) -> TensorDict:
        """The n-step transitions completed by ``batch``, the next frames of every env copy."""
        batch = self._check(batch)
        n, num_envs = self.n, self.num_envs
        if self._tail is None:  # no frames yet: an empty tail of the batch's keys
            self._tail = batch[:, :1].expand(num_envs, n - 1).clone().zero_()
            self._open = torch.zeros(num_envs, n - 1, dtype=torch.bool, device=batch.device)
        tail = self._tail.to(batch.device)
        frames = torch.cat([tail, batch], dim=1)  # [num_envs, S]: the tail, then the batch
        steps = frames.batch_size[1]
        new = torch.ones(num_envs, steps - (n - 1), dtype=torch.bool, device=batch.device)
        candidate = torch.cat([self._open.to(batch.device), new], dim=1)  # frames not emitted yet

        reward = frames["next", "reward"].reshape(num_envs, steps)
        terminated = frames["next", "terminated"].reshape(num_envs, steps).bool()
        done = terminated | frames["next", "truncated"].reshape(num_envs, steps).bool()
        # window[e, t, m]: frame t+m of copy e (m < n), False/0 past the last frame
        done_at = F.pad(done, (0, n - 1)).unfold(1, n, 1)
        inside = F.pad(torch.ones_like(done), (0, n - 1)).unfold(1, n, 1)
        ended_before = (done_at.cumsum(2) - done_at.int()) > 0  # an episode end at an earlier offset
        in_window = inside & ~ended_before  # the frames each window sums
        complete = done_at.any(2) | inside.all(2)  # an episode end inside, or n frames
        emit = candidate & complete

        powers = self.gamma ** torch.arange(n + 1, dtype=torch.float64, device=batch.device)
        weights = powers[:n].to(reward.dtype)
        windowed_reward = F.pad(reward, (0, n - 1)).unfold(1, n, 1)
        reward_sum = (windowed_reward * in_window * weights).sum(2)
        length = in_window.sum(2)  # k

        env, start = emit.nonzero(as_tuple=True)
        last = start + length[env, start] - 1
        out = frames.exclude("next")[env, start]
        out.set("next", frames["next"][env, last])
        out.set(("next", "reward"), reward_sum[env, start].reshape(out["next", "reward"].shape))
        not_terminated = (~terminated[env, last]).to(reward.dtype)
        out.set(DISCOUNT_KEY, powers[length[env, start]].to(reward.dtype) * not_terminated)

        # what waits: the frames whose windows are open (no episode end up to the last frame), all
        # among the last n-1 frames, which the next windows read
        keep = steps - (n - 1)
        self._tail = frames[:, keep:].clone()
        self._open = (candidate & ~emit)[:, keep:].clone()
        return out

    def _check(self, batch: TensorDictBase) -> TensorDictBase:
        if not isinstance(batch, TensorDictBase):
            raise TypeError(f"NStepBuilder.push: batch must be a TensorDict, got {type(batch).__name__}")
        if batch.batch_dims == 1:
            batch = batch.unsqueeze(1)
        if batch.batch_dims != 2 or batch.batch_size[0] != self.num_envs:
            raise ValueError(
                f"NStepBuilder.push: batch must be [num_envs, T] (num_envs={self.num_envs}: one row per env copy, "
                f"its frames in time order) or [num_envs], got {tuple(batch.batch_size)}"
            )
        if MASK_KEY in batch.keys(include_nested=True):
            raise ValueError(
                f"NStepBuilder.push: batches with a {format_key(MASK_KEY)!r} mask are not supported: every frame "
                "of a row must be the next frame of its env copy (GymCollector's and TorchEnvCollector's are)"
            )
        require_keys(batch, _NEEDS, consumer="NStepBuilder")
        if self._tail is not None:
            have, want = present_keys(batch), present_keys(self._tail)
            if have != want:
                raise KeyError(f"NStepBuilder.push: the batch has keys {have}, the earlier batches had {want}")
        return batch

    def state_dict(self) -> dict[str, Any]:
        """``n``, ``gamma``, ``num_envs`` and each env copy's last ``n - 1`` frames (a nested dict
        of tensors, None before the first batch) with which of them wait (``open``)."""
        return {
            "n": self.n, "gamma": self.gamma, "num_envs": self.num_envs,
            "tail": None if self._tail is None else self._tail.to_dict(),
            "open": self._open,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved; a ``ValueError`` if it was saved with another
        ``n``, ``gamma`` or ``num_envs``."""
        saved = {k: state_dict[k] for k in ("n", "gamma", "num_envs")}
        mine = {"n": self.n, "gamma": self.gamma, "num_envs": self.num_envs}
        if saved != mine:
            raise ValueError(f"NStepBuilder.load_state_dict: the state was saved with {saved}, this builder has {mine}")
        tail = state_dict["tail"]
        self._tail = None if tail is None else TensorDict(tail, batch_size=[self.num_envs, self.n - 1])
        self._open = state_dict["open"]
