"""ppo-cartpole with env_backend=torch: the batched torch CartPole (engine_rl.envs), evaluated on
a torch env too. Seeds set below, the suite's seed offset added (support.seeds)."""

import json
import subprocess
import sys

import torch

from engine_rl.cli import main
from support.compare import differences, log
from support.seeds import seed_arg

TORCH = ["--set", "env_backend=torch", "--set", "num_envs=64", "--set", "steps_per_env=16", "--set", "batch_size=256",
         "--set", "num_epochs=10", "--no-progress"]


def summary_of(capsys):
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_ppo_solves_torch_cartpole_in_100k_frames(tmp_path, capsys):
    # 500 at 100,352 frames (1,024 per batch from 64 copies) on seeds 0-4 (--seed-offset 0-4), about 15 s here
    assert main(["train", "ppo-cartpole", *TORCH, "--frames", "100000", "--seed", seed_arg(0), "--out", str(tmp_path)]) == 0
    summary = summary_of(capsys)
    assert summary["frames"] == 100352 and summary["eval_return_mean"] == 500.0


def test_resume_in_a_new_process_is_bitwise_identical(tmp_path, capsys):
    args = [*TORCH, "--frames", "8192", "--seed", seed_arg(3), "--set", "eval_every=2", "--checkpoint-every", "2"]
    assert main(["train", "ppo-cartpole", *args, "--out", str(tmp_path / "straight")]) == 0
    assert main(["train", "ppo-cartpole", *args, "--out", str(tmp_path / "split"), "--until-frames", "4096"]) == 0
    capsys.readouterr()
    res = subprocess.run([sys.executable, "-m", "engine_rl", "train", "ppo-cartpole", "--out", str(tmp_path / "split"),
                          "--resume", "--no-progress", "--checkpoint-every", "2"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    final = "checkpoints/checkpoint_8192.pt"
    a = torch.load(tmp_path / "straight" / final, weights_only=True)
    b = torch.load(tmp_path / "split" / final, weights_only=True)
    assert differences(a, b) == []
    assert log(tmp_path / "straight" / "metrics.jsonl") == log(tmp_path / "split" / "metrics.jsonl")


def test_torch_backend_errors_name_the_field(capsys, tmp_path):
    assert main(["train", "ppo-cartpole", "--set", "env_backend=torch", "--set", "env_id=Acrobot-v1",
                 "--out", str(tmp_path)]) == 2
    assert ("PPOConfig: env_backend 'torch' needs an env_id with a torch version (CartPole-v1, Pendulum-v1), "
            "got 'Acrobot-v1'") in capsys.readouterr().err
    assert main(["train", "ppo-cartpole", "--set", "env_backend=torch", "--set", "info_keys=x",
                 "--out", str(tmp_path)]) == 2
    assert "info_keys ('x',) are gymnasium options; env_backend 'torch' takes none" in capsys.readouterr().err
    assert main(["train", "ppo-cartpole", "--set", "env_backend=jax", "--out", str(tmp_path)]) == 2
    assert "PPOConfig: env_backend must be one of ('gymnasium', 'torch', 'envpool'), got 'jax'" in capsys.readouterr().err
