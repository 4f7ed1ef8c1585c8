"""The Stable-Baselines3 side of ``tests/benchmarks/vs_sb3.py``: train one algorithm, evaluate, print JSON.

Runs inside the SB3 virtual environment that ``vs_sb3.py`` creates (it imports neither
``engine_rl`` nor anything of this repository), one process per run:

    SB3_PYTHON tests/benchmarks/sb3_side.py --algo dqn --frames 50000 --seed 0

Hyperparameters are rl-baselines3-zoo's (``hyperparams/{dqn,ppo,sac}.yml`` of
DLR-RM/rl-baselines3-zoo; DQN values from the file at commit ce95481b, PPO and SAC from
00128b5d), the rest Stable-Baselines3's defaults; ``lin_X`` means linear from X to 0 over
the run (``learning_rate`` and ``clip_range`` of PPO):

- DQN CartPole-v1 (rl-zoo: n_timesteps 5e4, 1 env): lr 2.3e-3, batch_size 64, buffer_size 100000,
  learning_starts 1000, gamma 0.99, target_update_interval 10, train_freq 256,
  gradient_steps 128, exploration_fraction 0.16, exploration_final_eps 0.04, net_arch [256, 256].
- PPO CartPole-v1 (rl-zoo: n_timesteps 1e5): n_envs 8, n_steps 32, batch_size 256, gae_lambda 0.8,
  gamma 0.98, n_epochs 20, ent_coef 0.0, learning_rate lin_0.001, clip_range lin_0.2.
- SAC Pendulum-v1 (rl-zoo: n_timesteps 20000, 1 env): learning_rate 1e-3 (SB3 defaults: buffer
  1e6, learning_starts 100, batch 256, tau 0.005, gamma 0.99, train_freq 1, gradient_steps 1,
  ent_coef 'auto', net_arch [256, 256]).
- TD3 Pendulum-v1 (rl-zoo: n_timesteps 20000, 1 env): gamma 0.98, buffer_size 200000,
  learning_starts 10000, normal action noise of std 0.1, train_freq (1, "episode"),
  gradient_steps -1, learning_rate 1e-3, net_arch [400, 300] (SB3 defaults: batch 256, tau 0.005,
  policy_delay 2, target_policy_noise 0.2, target_noise_clip 0.5).

For ``tests/benchmarks/throughput_vs_sb3.py`` (CleanRL's values, as engine_rl's recipes carry them):

- ``ppo-hopper``: PPO Hopper-v5 (``ppo-mujoco``): 1 env in ``VecNormalize`` (observations and
  rewards, clipped at 10, gamma 0.99), n_steps 2048, batch_size 64, n_epochs 10, learning_rate
  lin_3e-4, clip_range 0.2, clip_range_vf 0.2, ent_coef 0.0, gae_lambda 0.95, gamma 0.99 (SB3's
  64x64 tanh actor and critic, orthogonal init).
- ``ppo-atari``: PPO BreakoutNoFrameskip-v4 (``ppo-atari``): ``make_atari_env`` with 8 envs
  (``AtariWrapper``: no-op starts, frame skip 4, 84x84 grayscale, FIRE reset, rewards clipped; a
  lost life does not end the episode, as in the recipe), 4 stacked frames, ``CnnPolicy`` (the
  Nature CNN), n_steps 128, batch_size 256, n_epochs 4, learning_rate lin_2.5e-4, clip_range 0.1,
  clip_range_vf 0.1, ent_coef 0.01, gae_lambda 0.95, gamma 0.99.

- ``sac-halfcheetah``: SAC HalfCheetah-v5 (``sac-mujoco``; rl-zoo: learning_starts 10000, SB3's
  defaults otherwise, learning_rate 3e-4), evaluated like engine_rl's recipes (a same-budget
  reference for ``learning_results.py``'s sac-mujoco row).
- ``td3-halfcheetah``: TD3 HalfCheetah-v5 (``td3-mujoco``; rl-zoo: learning_starts 10000, normal
  action noise of std 0.1, SB3's defaults otherwise), evaluated the same way.

``--eval-episodes 0`` skips the evaluation (the throughput runs time ``model.learn`` only).

Training uses ``torch.set_num_threads(threads)`` (default 1, as engine_rl's run) and
``device="cpu"``. Evaluation after training: 10 deterministic episodes
(``model.predict(obs, deterministic=True)``) on a gymnasium vector env of 10 copies reset with
``seed=eval_seed`` (copy ``i`` seeded ``eval_seed + i``), each copy's first episode counted —
the same env, vectorization mode and seeds as engine_rl's ``ValidationRollout`` in its recipes
(CartPole: numpy-vectorized entry point; Pendulum: ``sync``), so both sides start from the
same initial states. Prints one JSON line: ``learn_s`` (wall seconds of ``model.learn``),
``eval_s``, ``learn_cpu_s`` (process CPU seconds of ``model.learn``), the evaluation returns.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

ENV_IDS = {"dqn": "CartPole-v1", "ppo": "CartPole-v1", "sac": "Pendulum-v1", "td3": "Pendulum-v1",
           "ppo-hopper": "Hopper-v5", "ppo-atari": "BreakoutNoFrameskip-v4", "sac-halfcheetah": "HalfCheetah-v5",
           "td3-halfcheetah": "HalfCheetah-v5"}
DEFAULT_FRAMES = {"dqn": 50_000, "ppo": 100_000, "sac": 20_000, "td3": 20_000, "ppo-hopper": 20_480, "ppo-atari": 10_240,
                  "sac-halfcheetah": 100_000, "td3-halfcheetah": 100_000}
EVAL_VECTORIZATION = {"CartPole-v1": "vector_entry_point", "Pendulum-v1": "sync", "HalfCheetah-v5": "sync"}


def linear(start: float) -> Any:
    """rl-zoo's ``lin_X``: ``start`` times SB3's progress_remaining (1 -> 0 over the run)."""
    return lambda progress_remaining: progress_remaining * start


def make_model(algo: str, seed: int) -> Any:
    """The SB3 model for ``algo`` with rl-zoo's hyperparameters (see the module docstring)."""
    from stable_baselines3 import DQN, PPO, SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env

    env_id = ENV_IDS[algo]
    if algo == "dqn":
        return DQN(
            "MlpPolicy", make_vec_env(env_id, n_envs=1, seed=seed), learning_rate=2.3e-3, batch_size=64,
            buffer_size=100_000, learning_starts=1000, gamma=0.99, target_update_interval=10, train_freq=256,
            gradient_steps=128, exploration_fraction=0.16, exploration_final_eps=0.04,
            policy_kwargs={"net_arch": [256, 256]}, seed=seed, device="cpu", verbose=0,
        )
    if algo == "ppo":
        return PPO(
            "MlpPolicy", make_vec_env(env_id, n_envs=8, seed=seed), n_steps=32, batch_size=256, gae_lambda=0.8,
            gamma=0.98, n_epochs=20, ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2),
            seed=seed, device="cpu", verbose=0,
        )
    if algo == "sac":
        return SAC("MlpPolicy", make_vec_env(env_id, n_envs=1, seed=seed), learning_rate=1e-3, seed=seed,
                   device="cpu", verbose=0)
    if algo == "td3":
        import numpy as np
        from stable_baselines3.common.noise import NormalActionNoise

        return TD3(
            "MlpPolicy", make_vec_env(env_id, n_envs=1, seed=seed), gamma=0.98, buffer_size=200_000,
            learning_starts=10_000, action_noise=NormalActionNoise(np.zeros(1), 0.1 * np.ones(1)),
            train_freq=(1, "episode"), gradient_steps=-1, learning_rate=1e-3,
            policy_kwargs={"net_arch": [400, 300]}, seed=seed, device="cpu", verbose=0,
        )
    if algo == "sac-halfcheetah":
        return SAC("MlpPolicy", make_vec_env(env_id, n_envs=1, seed=seed), learning_starts=10_000, seed=seed,
                   device="cpu", verbose=0)
    if algo == "td3-halfcheetah":
        import numpy as np
        from stable_baselines3.common.noise import NormalActionNoise

        return TD3("MlpPolicy", make_vec_env(env_id, n_envs=1, seed=seed), learning_starts=10_000,
                   action_noise=NormalActionNoise(np.zeros(6), 0.1 * np.ones(6)), seed=seed, device="cpu", verbose=0)
    if algo == "ppo-hopper":
        from stable_baselines3.common.vec_env import VecNormalize

        return PPO(
            "MlpPolicy", VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed), gamma=0.99), n_steps=2048,
            batch_size=64, n_epochs=10, learning_rate=linear(3e-4), clip_range=0.2, clip_range_vf=0.2, ent_coef=0.0,
            gae_lambda=0.95, gamma=0.99, seed=seed, device="cpu", verbose=0,
        )
    if algo == "ppo-atari":
        import ale_py  # noqa: F401  (registers the Atari ids)
        from stable_baselines3.common.env_util import make_atari_env
        from stable_baselines3.common.vec_env import VecFrameStack

        env = make_atari_env(env_id, n_envs=8, seed=seed, wrapper_kwargs={"terminal_on_life_loss": False})
        return PPO(
            "CnnPolicy", VecFrameStack(env, n_stack=4), n_steps=128, batch_size=256, n_epochs=4,
            learning_rate=linear(2.5e-4), clip_range=0.1, clip_range_vf=0.1, ent_coef=0.01, gae_lambda=0.95,
            gamma=0.99, seed=seed, device="cpu", verbose=0,
        )
    raise ValueError(f"sb3_side: --algo must be one of {sorted(ENV_IDS)}, got {algo!r}")


def evaluate(model: Any, env_id: str, *, episodes: int, seed: int) -> list[float]:
    """Returns of the first episode of each of ``episodes`` env copies reset with ``seed``."""
    import gymnasium as gym
    import numpy as np

    env = gym.make_vec(env_id, episodes, vectorization_mode=EVAL_VECTORIZATION[env_id])
    obs, _ = env.reset(seed=seed)
    returns = np.zeros(episodes)
    running = np.ones(episodes, dtype=bool)
    while running.any():
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, terminated, truncated, _ = env.step(action)
        returns += np.where(running, reward, 0.0)
        running &= ~(terminated | truncated)
    env.close()
    return returns.tolist()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", required=True, choices=sorted(ENV_IDS))
    p.add_argument("--frames", type=int, default=None, help="frame budget (default: rl-zoo's n_timesteps)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--eval-seed", type=int, default=10_000)
    args = p.parse_args(argv)

    import stable_baselines3
    import torch

    torch.set_num_threads(args.threads)
    frames = args.frames or DEFAULT_FRAMES[args.algo]
    model = make_model(args.algo, args.seed)
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=frames)
    learn_s, learn_cpu_s = time.perf_counter() - wall, time.process_time() - cpu
    start = time.perf_counter()
    returns = evaluate(model, ENV_IDS[args.algo], episodes=args.eval_episodes, seed=args.eval_seed) \
        if args.eval_episodes > 0 else [float("nan")]
    eval_s = time.perf_counter() - start
    mean = sum(returns) / len(returns)
    result = {
        "algo": args.algo, "env_id": ENV_IDS[args.algo], "frames": frames, "frames_done": int(model.num_timesteps),
        "seed": args.seed, "threads": torch.get_num_threads(), "learn_s": round(learn_s, 2),
        "learn_cpu_s": round(learn_cpu_s, 2), "eval_s": round(eval_s, 2), "eval_return_mean": round(mean, 2),
        "eval_return_std": round((sum((r - mean) ** 2 for r in returns) / len(returns)) ** 0.5, 2),
        "eval_returns": [round(r, 2) for r in returns], "sb3": stable_baselines3.__version__,
        "torch": torch.__version__,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
