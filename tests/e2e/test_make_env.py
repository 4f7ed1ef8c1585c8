"""A recipe trains the env of a user's ``make_env`` callable: from Python (a lambda, a partial) and
from the command line (``--set make_env=module:function``); the run resumes and evaluates; what
cannot work is one line. Corridor (``support.user_envs``): reward 1 for reaching the end, 4 steps
right (PPO's 2,048 frames walked it straight on seeds 0-4); seed 0, the suite's seed offset added
(support.seeds)."""

import json
from functools import partial

import gymnasium as gym
import pytest
import torch

from engine_rl.cli import main
from engine_rl.run.driver import make_config, train
from support.compare import differences
from support.seeds import seed, seed_arg
from support.user_envs import DoorRoom, make_corridor

QUICK = {"total_frames": 2048, "eval_every": 4, "eval_episodes": 4, "seed": seed(0)}


def test_ppo_learns_a_lambdas_env_and_resumes_from_python_bitwise(tmp_path):
    def config():  # a new lambda each time, as a notebook re-run makes one
        return make_config("ppo-cartpole", make_env=lambda: make_corridor(max_episode_steps=10), **QUICK)

    straight = train("ppo-cartpole", config(), tmp_path / "straight", progress=False, checkpoint_every=2)
    assert straight["eval_return_mean"] == 1.0 and straight["eval_length_mean"] == 4.0  # straight to the end
    saved = json.loads((tmp_path / "straight" / "config.json").read_text())
    assert saved["make_env"].endswith(":test_ppo_learns_a_lambdas_env_and_resumes_from_python_bitwise.<locals>."
                                      "config.<locals>.<lambda>")
    assert torch.load(tmp_path / "straight" / "inference.pt", weights_only=True)["config"]["make_env"] == saved["make_env"]

    paused = train("ppo-cartpole", config(), tmp_path / "split", progress=False, checkpoint_every=2, until_frames=1024)
    assert paused["paused"]
    resumed = train("ppo-cartpole", config(), tmp_path / "split", progress=False, checkpoint_every=2, resume=True)
    assert resumed["resumed_from_frames"] == 1024
    a, b = (torch.load(tmp_path / run / "checkpoints" / "checkpoint_2048.pt", weights_only=True)
            for run in ("straight", "split"))
    assert differences(a, b) == []


def test_a_lambda_run_resumes_and_evaluates_from_python_only_and_the_cli_says_so(tmp_path, capsys):
    cfg = make_config("dqn-cartpole", make_env=lambda: make_corridor(), total_frames=512, learning_starts=256)
    train("dqn-cartpole", cfg, tmp_path, progress=False)
    for args in (["train", "dqn-cartpole", "--resume", "--out", str(tmp_path)], ["eval", str(tmp_path)]):
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert ("cannot be imported by its name; a run made by a lambda, a partial or a function of a notebook or "
                "script resumes from Python, with train(name, config, out, resume=True) and the same make_env") in err[0]


def test_sac_trains_a_partials_env_and_records_the_partial(tmp_path):
    make = partial(gym.make, "Pendulum-v1", max_episode_steps=50)
    summary = train("sac-pendulum", make_config("sac-pendulum", make_env=make, total_frames=300, learning_starts=100,
                                                hidden=(32, 32), eval_every_frames=300, eval_episodes=2),
                    tmp_path, progress=False)
    assert summary["frames"] == 300 and summary["eval_length_mean"] == 50.0  # the partial's time limit
    assert json.loads((tmp_path / "config.json").read_text())["make_env"] == (
        "functools.partial(gymnasium.envs.registration:make, 'Pendulum-v1', max_episode_steps=50)")


def test_the_cli_trains_resumes_and_evaluates_a_make_env_named_by_module(tmp_path, capsys):
    args = ["--set", "make_env=support.user_envs:make_corridor", "--set", "eval_every=4", "--set", "eval_episodes=4",
            "--frames", "2048", "--seed", seed_arg(0), "--no-progress", "--out", str(tmp_path)]
    assert main(["train", "ppo-cartpole", *args, "--until-frames", "1024"]) == 0
    # config.json names the make_env; a resume runs it once the user names it again (or trusts the folder)
    assert main(["train", "ppo-cartpole", "--resume", "--no-progress", "--out", str(tmp_path),
                 "--set", "make_env=support.user_envs:make_corridor"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["resumed_from_frames"] == 1024 and summary["eval_return_mean"] == 1.0
    assert json.loads((tmp_path / "config.json").read_text())["make_env"] == "support.user_envs:make_corridor"
    assert main(["eval", str(tmp_path), "--trust-config"]) == 0
    evaluated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert evaluated["return_mean"] == 1.0 and evaluated["length_mean"] == 4.0


def test_async_dqn_collects_from_a_module_function_in_its_worker(tmp_path):
    cfg = make_config("dqn-cartpole", make_env=make_corridor, async_collection=True, num_envs=4, total_frames=1024,
                      learning_starts=256, optim_steps_per_batch=2)
    assert train("dqn-cartpole", cfg, tmp_path, progress=False)["frames"] == 1024


@pytest.mark.parametrize("recipe, fields, message", [
    ("dqn-cartpole", {"make_env": lambda: make_corridor(), "async_collection": True},
     "DQNConfig: async_collection makes the envs in a worker process, which needs a make_env that pickles (a function "
     "or class at the top level of a module, or a partial of one); tests.e2e.test_make_env:<lambda> does not"),
    ("ppo-cartpole", {"make_env": make_corridor, "env_backend": "torch"},
     "PPOConfig: env_backend 'torch' makes its own envs (CartPole-v1, Pendulum-v1), so it takes no make_env "
     "(got support.user_envs:make_corridor); use env_backend 'gymnasium'"),
    ("sac-pendulum", {"make_env": make_corridor},
     "SACConfig: sac needs a continuous (Box) action space; make_env support.user_envs:make_corridor has Discrete "
     "actions (make_env must make an env with 1-D Box actions)"),
    ("dqn-cartpole", {"make_env": partial(DoorRoom, size=5)},
     "DQNConfig: dqn (make_env functools.partial(support.user_envs:DoorRoom, size=5)): no encoder for observation key 'camera'"),
    ("dqn-cartpole", {"make_env": make_corridor, "vectorization": "vector_entry_point"},
     "DQNConfig: vectorization 'vector_entry_point' needs an env that registers a vector entry point; "
     "make_env support.user_envs:make_corridor has none"),
    ("ppo-cartpole", {"make_env": lambda: "CartPole-v1"},
     "PPOConfig: make_env tests.e2e.test_make_env:<lambda> returned an object of type str, not a gymnasium.Env"),
])
def test_a_make_env_the_recipe_cannot_use_is_one_line(recipe, fields, message, tmp_path):
    with pytest.raises(ValueError) as err:
        train(recipe, make_config(recipe, total_frames=2048, **fields), tmp_path, progress=False)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)
