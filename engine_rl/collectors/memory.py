"""A recurrent policy's memory as the collector keeps it: :class:`PolicyMemory`.

A policy is recurrent when it has a ``recurrent_state_shape`` attribute (the shape of one env
copy's state, e.g. :class:`~engine_rl.algos.recurrent.RecurrentActorCritic`). The stepper then
keeps one state per env copy and, at every step, gives the policy two more entries besides
``"observation"``:

=========================  =========================================================================
key                        what
=========================  =========================================================================
``"recurrent_state"``      float32 ``[num_envs, *recurrent_state_shape]``: the state the policy acts
                           from (zeros where an episode starts)
``"is_init"``              bool ``[num_envs]``: this observation is the first of its episode
=========================  =========================================================================

The policy writes the state after the step under ``("next", "recurrent_state")``; the stepper
carries it to the next step (and across batches), stores both entries above for every frame of
a batch, and not the next state (a loss rebuilds it from the stored one). Where an episode
starts (after a reset, after a done) the carried state is set back to zeros.

Examples:
    >>> import torch
    >>> memory = PolicyMemory((3,), num_envs=2, device=torch.device("cpu"))
    >>> memory.reset()
    >>> memory.state.tolist(), memory.is_init.tolist()
    ([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [True, True])
    >>> memory.advance(torch.ones(2, 3), episode_starts=np.array([False, True]))  # copy 1's episode ended
    >>> state, is_init = memory.inputs()  # what the policy acts from at the next step
    >>> state.tolist(), is_init.tolist()
    ([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]], [False, True])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from engine_rl.keys import NEXT_RECURRENT_STATE

__all__ = ["PolicyMemory"]


class PolicyMemory:
    """The live recurrent state of every env copy and whether each copy's next observation starts an episode.

    Args:
        shape: one copy's state shape (the policy's ``recurrent_state_shape``).
        num_envs: env copies.
        device: where the policy's inputs live.
    """

    def __init__(self, shape: tuple[int, ...], *, num_envs: int, device: torch.device) -> None:
        self.shape = shape
        #: The state each copy acts from at the next step (after the reset where ``is_init``).
        self.state = torch.zeros((num_envs, *shape), device=device)
        #: Numpy bool ``[num_envs]``: the next observation is the first of an episode.
        self.is_init = np.ones(num_envs, dtype=bool)

    def reset(self) -> None:
        """Every copy starts an episode: zero states."""
        self.state.zero_()
        self.is_init[:] = True

    def inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(recurrent_state, is_init)`` for the policy's step: states zeroed where an episode starts."""
        is_init = torch.from_numpy(self.is_init.copy()).to(self.state.device)
        starts = is_init.reshape(-1, *([1] * len(self.shape)))
        return self.state.masked_fill(starts, 0.0), is_init

    def advance(self, next_state: torch.Tensor, *, episode_starts: np.ndarray) -> None:
        """Carry the policy's ``next_state``; ``episode_starts`` marks copies whose next observation
        is the first of an episode (their state is zeroed when they act next)."""
        if tuple(next_state.shape) != tuple(self.state.shape):
            raise ValueError(
                f"the policy's {NEXT_RECURRENT_STATE!r} must have shape {tuple(self.state.shape)} "
                f"([num_envs, *recurrent_state_shape]), got {tuple(next_state.shape)}"
            )
        self.state = next_state.detach().to(self.state.device, torch.float32)
        self.is_init[:] = episode_starts

    def state_dict(self) -> dict[str, Any]:
        """The carried states (CPU) and the episode-start flags, as tensors."""
        return {"state": self.state.cpu().clone(), "is_init": torch.from_numpy(self.is_init.copy())}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        state = state_dict["state"]
        if tuple(state.shape) != tuple(self.state.shape):
            raise ValueError(
                f"the saved recurrent state has shape {tuple(state.shape)}, this policy and env need "
                f"{tuple(self.state.shape)} ([num_envs, *recurrent_state_shape])"
            )
        self.state = state.to(self.state.device, torch.float32).clone()
        self.is_init[:] = state_dict["is_init"].numpy()
