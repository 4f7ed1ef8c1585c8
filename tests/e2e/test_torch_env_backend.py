"""``--set env_backend=torch`` on DQN, SAC and TD3: the batched torch envs (``engine_rl.envs``) fill
the replay from the training device; evaluation runs on a torch env too; what does not apply is
one line. (PPO's: ``test_ppo_torch_envs.py``; bitwise resume: ``test_resume.py``.)"""

import json

import pytest
import torch

from engine_rl.cli import main
from support.seeds import seed_arg


def summary_of(capsys):
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.slow
def test_dqn_solves_torch_cartpole_with_the_recipe_defaults(tmp_path, capsys):
    # seed 0: 500 at 50,176 frames, about 80 s here (the gymnasium CartPole row of the README: 500 on 9 of 10 seeds)
    assert main(["train", "dqn-cartpole", "--set", "env_backend=torch", "--seed", seed_arg(0), "--no-progress",
                 "--out", str(tmp_path)]) == 0
    assert summary_of(capsys)["eval_return_mean"] == 500.0


@pytest.mark.parametrize("recipe", ["dqn-cartpole", "sac-pendulum", "td3-pendulum"])
def test_a_few_batches_train_from_torch_envs_into_the_replay(recipe, tmp_path, capsys):
    args = (["--set", "learning_starts=256", "--set", "optim_steps_per_batch=4"] if recipe == "dqn-cartpole" else
            ["--set", "learning_starts=200", "--set", "frames_per_batch=100", "--set", "hidden=(32,32)",
             "--set", "num_envs=4", "--set", "eval_every_frames=400"])
    frames = 1024 if recipe == "dqn-cartpole" else 400
    assert main(["train", recipe, "--set", "env_backend=torch", "--frames", str(frames), "--no-progress",
                 "--set", "eval_episodes=2", *args, "--out", str(tmp_path)]) == 0
    summary = summary_of(capsys)
    assert summary["frames"] == frames and summary["optim_steps"] > 0
    if recipe != "dqn-cartpole":
        assert summary["eval_length_mean"] == 200.0  # the torch Pendulum's time limit, as gymnasium's
    replay = torch.load(summary["checkpoint"], weights_only=True)["replay"]
    assert replay["storage"]["size"] == frames
    assert replay["storage"]["data"]["observation"].shape[1:] == ((4,) if recipe == "dqn-cartpole" else (3,))


@pytest.mark.parametrize("args, message", [
    (["dqn-cartpole", "--set", "async_collection=true"],
     "DQNConfig: async_collection steps gymnasium envs in a worker process, so env_backend 'torch' does not apply; "
     "drop async_collection"),
    (["sac-pendulum", "--set", "env_id=HalfCheetah-v5"],
     "SACConfig: env_backend 'torch' needs an env_id with a torch version (CartPole-v1, Pendulum-v1), got 'HalfCheetah-v5'"),
    (["td3-pendulum", "--set", "wrappers=FlattenObservation"],
     "TD3Config: wrappers ('FlattenObservation',) are gymnasium options; env_backend 'torch' takes none"),
    (["dqn-cartpole", "--set", "make_env=support.user_envs:make_corridor"],
     "DQNConfig: env_backend 'torch' makes its own envs (CartPole-v1, Pendulum-v1), so it takes no make_env "
     "(got support.user_envs:make_corridor)"),
    (["sac-pendulum", "--set", "env_id=CartPole-v1"],
     "SACConfig: sac needs a continuous (Box) action space; CartPole-v1 has Discrete actions"),
])
def test_what_the_torch_envs_do_not_take_is_one_line(args, message, tmp_path, capsys):
    assert main(["train", *args, "--set", "env_backend=torch", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
