"""Pendulum in torch, batched: the dynamics of gymnasium 1.4's ``Pendulum-v1``.

Same constants (``max_speed=8``, ``max_torque=2``, ``dt=0.05``, ``g=10``, ``m=l=1``), same
order of operations: the torque is clipped to ``[-2, 2]`` in float32 (the action space's
dtype), the cost ``angle_normalize(th)**2 + 0.1 * thdot**2 + 0.001 * u**2`` is computed on the
state before the step, then ``thdot`` is integrated and clipped to ``[-8, 8]`` and ``th``
integrated with the new ``thdot``. Never terminates; truncated after 200 steps. Reset state
``th ~ U[-pi, pi)``, ``thdot ~ U[-1, 1)`` from per-env streams (not numpy's generator). With
``dtype=torch.float64`` the mixed float32/float64 arithmetic follows numpy 2's promotion rules,
which torch shares (Python scalars are weak; float32 tensor + float64 tensor is float64), and
on the development machine states, observations and float32-rounded rewards are bit-identical
to gymnasium's; ``dtype=torch.float32`` differs by float32 rounding (~1e-6 relative).
"""

from __future__ import annotations

import math

import torch

from engine_rl.envs.base import TensorSpec, TorchEnv, scalars

__all__ = ["Pendulum", "angle_normalize"]


def angle_normalize(x: torch.Tensor) -> torch.Tensor:
    """Wrap angles to ``[-pi, pi)``.

    Examples:
        >>> angle_normalize(torch.tensor([0.0, 4.0, -4.0], dtype=torch.float64)).tolist()
        [0.0, -2.2831853071795862, 2.2831853071795862]
    """
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


class Pendulum(TorchEnv):
    """``num_envs`` inverted pendulums swung up by a torque in ``[-2, 2]``.

    Observation: float32 ``[num_envs, 3]`` = (cos th, sin th, thdot). Action: float
    ``[num_envs, 1]`` (cast to float32, clipped to ``[-2, 2]``). Reward ``-cost`` (float32).
    Autoreset semantics: see :mod:`engine_rl.envs.base`.

    Args:
        num_envs: number of copies.
        device: where the env runs.
        dtype: dtype of the physical state (``torch.float64``: gymnasium's precision).
        max_episode_steps: time limit (``Pendulum-v1``: 200).
        g: gravity (gymnasium's ``g`` argument).

    Examples:
        >>> env = Pendulum(2, max_episode_steps=5)
        >>> obs = env.reset(seed=0)
        >>> next_obs, reward, terminated, truncated = env.step(torch.zeros(2, 1))
        >>> obs.shape, bool(torch.allclose(obs[:, 0] ** 2 + obs[:, 1] ** 2, torch.ones(2)))
        (torch.Size([2, 3]), True)
        >>> bool((reward <= 0).all()), terminated.tolist(), truncated.tolist()
        (True, [False, False], [False, False])
    """

    max_speed = 8
    max_torque = 2.0
    dt = 0.05
    m = 1.0
    l = 1.0  # noqa: E741 (gymnasium's name)
    reset_high = (math.pi, 1.0)  # th, thdot: uniform in [-high, high)

    observation_spec = TensorSpec(
        shape=(3,),
        dtype=torch.float32,
        low=-torch.tensor([1.0, 1.0, max_speed]),
        high=torch.tensor([1.0, 1.0, max_speed]),
    )
    action_spec = TensorSpec(
        shape=(1,), dtype=torch.float32, low=torch.tensor([-max_torque]), high=torch.tensor([max_torque])
    )
    reset_draws = 2
    state_dim = 2

    def __init__(
        self,
        num_envs: int = 1,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
        max_episode_steps: int = 200,
        g: float = 10.0,
    ) -> None:
        self.g = float(g)
        super().__init__(num_envs, device=device, dtype=dtype, max_episode_steps=max_episode_steps)
        self._high = torch.tensor(self.reset_high, dtype=dtype, device=self.device)
        self._zeros = torch.zeros(num_envs, dtype=torch.bool, device=self.device)
        # 0-dim tensors of the state's dtype, weak in type promotion like Python numbers (see
        # engine_rl.envs.base.scalars): with a float32 operand (the torque) they act in float32
        self._k = scalars(
            dtype,
            speed_cost=0.1,
            torque_cost=0.001,
            gravity_gain=3 * self.g / (2 * self.l),
            torque_gain=3.0 / (self.m * self.l**2),
            dt=self.dt,
        )

    def _initial_state(self, u: torch.Tensor) -> torch.Tensor:
        high = self._high
        return -high + (high - -high) * u  # numpy's uniform(low, high): low + (high - low) * u

    def _dynamics(self, state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        k = self._k
        th, thdot = state.unbind(1)
        u = action.to(torch.float32).clamp(-self.max_torque, self.max_torque)[:, 0]
        costs = angle_normalize(th).square() + k.speed_cost * thdot.square() + k.torque_cost * u.square()
        # gymnasium: thdot + (3 * g / (2 * l) * sin(th) + 3.0 / (m * l**2) * u) * dt
        new = torch.empty_like(state)
        new_th, new_thdot = new.unbind(1)
        newthdot = thdot + (k.gravity_gain * torch.sin(th) + k.torque_gain * u) * k.dt
        torch.clamp(newthdot, -self.max_speed, self.max_speed, out=new_thdot)
        torch.add(th, new_thdot * k.dt, out=new_th)
        reward = (-costs).to(torch.float32)
        return new, reward, self._zeros.clone()

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        th, thdot = state.unbind(1)
        obs = torch.empty((self.num_envs, 3), dtype=torch.float32, device=self.device)
        cos, sin, speed = obs.unbind(1)
        torch.cos(th, out=cos)
        torch.sin(th, out=sin)
        speed.copy_(thdot)
        return obs
