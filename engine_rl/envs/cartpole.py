"""CartPole in torch, batched: the dynamics of gymnasium 1.4's ``CartPole-v1``.

Same constants, same Euler integration in the same order of operations, same termination
(``|x| > 2.4`` or ``|theta| > 12°``, tested on the new state), reward 1 on every step including
the terminating one, truncation after 500 steps, reset state uniform in ``[-0.05, 0.05)^4``.
With ``dtype=torch.float64`` a step is gymnasium's float64 arithmetic: on the development
machine states and observations are bit-identical over whole episodes (another libm may round
``sin``/``cos`` an ulp apart). ``dtype=torch.float32`` (the default; faster on large batches and
on GPUs) differs by float32 rounding, ~1e-7 relative per step.
Reset states come from per-env streams, not from numpy's generator, so they are not gymnasium's.
"""

from __future__ import annotations

import math

import torch

from engine_rl.envs.base import TensorSpec, TorchEnv, scalars

__all__ = ["CartPole"]


class CartPole(TorchEnv):
    """``num_envs`` cart-poles stepped together; actions ``0`` (push left) or ``1`` (push right).

    Observation: float32 ``[num_envs, 4]`` = (cart position, cart velocity, pole angle, pole
    angular velocity). Action: int64 ``[num_envs]``; other values than 0/1 raise an
    ``IndexError`` on the CPU (an indexing assert on CUDA). Autoreset semantics: see
    :mod:`engine_rl.envs.base`.

    Args:
        num_envs: number of copies.
        device: where the env runs.
        dtype: dtype of the physical state (``torch.float64``: gymnasium's precision).
        max_episode_steps: time limit (``CartPole-v1``: 500).

    Examples:
        >>> env = CartPole(4, max_episode_steps=3)
        >>> obs = env.reset(seed=0)
        >>> for _ in range(3):
        ...     next_obs, reward, terminated, truncated = env.step(torch.ones(4, dtype=torch.int64))
        >>> obs.shape, reward.tolist(), truncated.tolist()
        (torch.Size([4, 4]), [1.0, 1.0, 1.0, 1.0], [True, True, True, True])
        >>> bool((env.observation.abs() <= 0.05).all()), env.elapsed_steps.tolist()  # reset
        (True, [0, 0, 0, 0])
    """

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02  # seconds between state updates
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    reset_low, reset_high = -0.05, 0.05

    _high = torch.tensor([x_threshold * 2, math.inf, theta_threshold_radians * 2, math.inf], dtype=torch.float32)
    observation_spec = TensorSpec(shape=(4,), dtype=torch.float32, low=-_high, high=_high)
    action_spec = TensorSpec(shape=(), dtype=torch.int64, n=2)
    reset_draws = 4
    state_dim = 4

    def __init__(
        self,
        num_envs: int = 1,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
        max_episode_steps: int = 500,
    ) -> None:
        super().__init__(num_envs, device=device, dtype=dtype, max_episode_steps=max_episode_steps)
        self._force = torch.tensor([-self.force_mag, self.force_mag], dtype=dtype, device=self.device)
        # the constants as 0-dim CPU tensors of the state's dtype: same arithmetic as Python
        # scalars, without wrapping them into tensors at every op (half an op's cost on a CPU)
        self._k = scalars(
            dtype,
            gravity=self.gravity,
            masspole=self.masspole,
            total_mass=self.total_mass,
            length=self.length,
            polemass_length=self.polemass_length,
            four_thirds=4.0 / 3.0,
            tau=self.tau,
            theta_threshold=self.theta_threshold_radians,
            x_threshold=self.x_threshold,
        )

    def _initial_state(self, u: torch.Tensor) -> torch.Tensor:
        low, high = self.reset_low, self.reset_high
        return low + (high - low) * u  # numpy's uniform(low, high)

    def _dynamics(self, state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        k = self._k
        x, x_dot, theta, theta_dot = state.unbind(1)
        force = self._force.index_select(0, action)
        costheta = torch.cos(theta)
        sintheta = torch.sin(theta)
        # gymnasium's expressions, in its order of operations
        temp = (force + k.polemass_length * theta_dot.square() * sintheta) / k.total_mass
        thetaacc = (k.gravity * sintheta - costheta * temp) / (
            k.length * (k.four_thirds - k.masspole * costheta.square() / k.total_mass)
        )
        xacc = temp - k.polemass_length * thetaacc * costheta / k.total_mass
        # Euler: new = old + tau * derivative, written straight into the new state's columns
        new = torch.empty_like(state)
        new_x, new_x_dot, new_theta, new_theta_dot = new.unbind(1)
        torch.add(x, k.tau * x_dot, out=new_x)
        torch.add(x_dot, k.tau * xacc, out=new_x_dot)
        torch.add(theta, k.tau * theta_dot, out=new_theta)
        torch.add(theta_dot, k.tau * thetaacc, out=new_theta_dot)
        terminated = (new_x.abs() > k.x_threshold) | (new_theta.abs() > k.theta_threshold)
        reward = torch.ones(self.num_envs, dtype=torch.float32, device=self.device)
        return new, reward, terminated

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.to(torch.float32, copy=True)
