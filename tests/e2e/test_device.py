"""``--device``: auto/cpu train, evaluate and resume here; cuda without CUDA is one clear error; a resume
may move a run to another device. The tests marked ``gpu`` run where CUDA is (tests/benchmarks/device_check.sh).

Seed 0 throughout, the suite's seed offset added (support.seeds).
"""

import json

import pytest
import torch

from engine_rl.cli import main
from engine_rl.commands.eval import evaluate_checkpoint
from engine_rl.device import config_devices, resolve_device
from engine_rl.recipes.dqn_cartpole import DQNConfig
from engine_rl.recipes.ppo_cartpole import PPOConfig
from support.seeds import seed_arg

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")

SHORT = {
    "dqn-cartpole": ["--frames", "2048", "--set", "learning_starts=512", "--set", "eval_episodes=2", "--set", "eval_every=1"],
    "ppo-cartpole": ["--frames", "1024", "--set", "eval_episodes=2", "--set", "eval_every=2"],
    "sac-pendulum": ["--frames", "400", "--set", "learning_starts=200", "--set", "eval_episodes=1",
                     "--set", "eval_every_frames=200", "--set", "hidden=(32,32)", "--set", "frames_per_batch=100"],
    "td3-pendulum": ["--frames", "600", "--set", "learning_starts=200", "--set", "eval_episodes=1",
                     "--set", "eval_every_frames=200", "--set", "hidden=(32,32)"],
}


def train(recipe, out, capsys, *extra):
    code = main(["train", recipe, "--out", str(out), "--no-progress", "--seed", seed_arg(0), *SHORT[recipe], *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out.strip().splitlines()[-1])


def test_device_names_resolve_and_a_bad_one_is_named():
    assert resolve_device("cpu", owner="Demo") == torch.device("cpu")
    assert resolve_device("auto", owner="Demo") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert config_devices(DQNConfig(device="cpu")) == (torch.device("cpu"), torch.device("cpu"))
    with pytest.raises(ValueError, match=r"^Demo: device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'gpu'$"):
        resolve_device("gpu", owner="Demo")
    with pytest.raises(ValueError, match=r"^PPOConfig: device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'gpu'$"):
        PPOConfig(device="gpu")
    with pytest.raises(ValueError, match=r"^DQNConfig: replay_device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got 'cuda:x'$"):
        DQNConfig(replay_device="cuda:x")


@pytest.mark.parametrize("recipe", sorted(SHORT))
@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_each_recipe_trains_with_device_cpu_and_auto_and_records_it(recipe, device, tmp_path, capsys):
    summary = train(recipe, tmp_path, capsys, "--device", device)
    assert summary["frames"] == int(SHORT[recipe][1])
    assert json.loads((tmp_path / "config.json").read_text())["device"] == device


@no_cuda
def test_device_cuda_without_cuda_is_one_line_naming_the_field_and_the_fix(tmp_path, capsys):
    assert main(["train", "ppo-cartpole", "--out", str(tmp_path), "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"engine-rl: error: PPOConfig: device 'cuda' needs a CUDA GPU, but torch.cuda.is_available() is False here "
        f"(torch {torch.__version__}); use --device cpu or --device auto"
    ]
    assert main(["train", "dqn-cartpole", "--out", str(tmp_path / "r"), "--set", "replay_device=cuda:0"]) == 2
    assert "DQNConfig: replay_device 'cuda:0' needs a CUDA GPU" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # refused before anything was written to --out


def test_a_resume_may_change_the_device_but_nothing_else(tmp_path, capsys):
    straight = train("ppo-cartpole", tmp_path / "straight", capsys, "--device", "cpu")
    train("ppo-cartpole", tmp_path / "split", capsys, "--device", "cpu", "--until-frames", "512")
    resumed = train("ppo-cartpole", tmp_path / "split", capsys, "--device", "auto", "--resume")
    assert resumed["frames"] == 1024 and resumed["resumed_from_frames"] == 512
    if not torch.cuda.is_available():  # auto is the CPU here: the same numbers
        assert resumed["eval_return_mean"] == straight["eval_return_mean"]
    assert main(["train", "ppo-cartpole", "--out", str(tmp_path / "split"), "--no-progress", "--seed", seed_arg(0),
                 *SHORT["ppo-cartpole"], "--set", "lr=0.1", "--resume"]) == 2
    assert "--resume: the config differs" in capsys.readouterr().err


def test_eval_takes_a_device(tmp_path, capsys):
    summary = train("dqn-cartpole", tmp_path, capsys)
    result = evaluate_checkpoint(summary["inference"], device="cpu")
    assert result["return_mean"] == summary["eval_return_mean"]
    assert main(["eval", summary["inference"], "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["return_mean"] == summary["eval_return_mean"]


def test_async_collection_with_a_cuda_device_is_refused(tmp_path, capsys):
    from engine_rl.recipes import get_recipe

    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="async_collection steps a CPU copy of the policy"):
            get_recipe("dqn-cartpole").build(DQNConfig(async_collection=True, device="cuda"))
    else:  # the CUDA check comes first on a machine without CUDA
        with pytest.raises(ValueError, match="device 'cuda' needs a CUDA GPU"):
            get_recipe("dqn-cartpole").build(DQNConfig(async_collection=True, device="cuda"))


# --- on a GPU machine (tests/benchmarks/device_check.sh) ---


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("recipe", sorted(SHORT))
def test_each_recipe_trains_on_cuda_then_resumes_and_evaluates_on_the_cpu(recipe, tmp_path, capsys):
    train(recipe, tmp_path, capsys, "--device", "cuda", "--until-frames", str(int(SHORT[recipe][1]) // 2))
    resumed = train(recipe, tmp_path, capsys, "--device", "cpu", "--resume")
    assert resumed["frames"] == int(SHORT[recipe][1])
    result = evaluate_checkpoint(resumed["inference"], device="cpu")
    assert result["return_mean"] == pytest.approx(resumed["eval_return_mean"], rel=1e-4)
    assert main(["eval", resumed["inference"], "--device", "cuda"]) == 0


@cuda
@pytest.mark.gpu
def test_replay_on_the_cpu_samples_onto_the_gpu(tmp_path, capsys):
    summary = train("dqn-cartpole", tmp_path, capsys, "--device", "cuda", "--set", "replay_device=cpu")
    assert summary["optim_steps"] > 0


@cuda
@pytest.mark.gpu
def test_ppo_on_torch_cartpole_stays_on_the_gpu(tmp_path, capsys):
    summary = train("ppo-cartpole", tmp_path, capsys, "--device", "cuda", "--set", "env_backend=torch",
                    "--set", "num_envs=64", "--set", "steps_per_env=16")
    assert summary["frames"] == 1024


@cuda
@pytest.mark.gpu
def test_ppo_with_normalizers_resumes_on_the_gpu(tmp_path, capsys):
    extra = ("--device", "cuda", "--set", "normalize_rewards=true", "--set", "normalize_observations=true")
    train("ppo-cartpole", tmp_path, capsys, *extra, "--until-frames", "512")
    assert train("ppo-cartpole", tmp_path, capsys, *extra, "--resume")["frames"] == 1024
