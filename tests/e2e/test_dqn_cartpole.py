"""End to end: the dqn-cartpole recipe through the CLI, its files, and that it solves CartPole."""

import json
import subprocess
import sys

import pytest
import torch
from ignite.handlers import Checkpoint

from engine_rl.cli import main
from engine_rl.commands.eval import evaluate_checkpoint
from engine_rl.recipes import get_recipe
from engine_rl.run.driver import make_config, train
from support.seeds import seed, seed_arg


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_cli_short_run_writes_metrics_checkpoints_summary(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", "dqn-cartpole", "--frames", "3072", "--seed", seed_arg(3), "--out", str(out), "--no-progress",
               "--set", "learning_starts=512", "--set", "eval_every=4", "--set", "eval_episodes=3"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["frames"] == 3072 and summary["seed"] == seed(3)
    assert summary["optim_steps"] == 128 * 11  # batches 2..12 of 256 frames learn (learning_starts=512)
    lines = _lines(out / "metrics.jsonl")
    assert all("frames" in r and "optim_steps" in r for r in lines)
    train_lines = [r for r in lines if r["kind"] == "train"]
    eval_lines = [r for r in lines if r["kind"] == "eval"]
    assert [r["frames"] for r in train_lines] == [256 * i for i in range(1, 13)]
    assert [r["frames"] for r in eval_lines] == [1024, 2048, 3072]
    assert all({"eval_return_mean", "eval_return_std", "eval_length_mean"} <= set(r) for r in eval_lines)
    assert {"loss", "grad_norm", "replay_size", "fps"} <= set(train_lines[-1])
    assert eval_lines[-1]["eval_return_mean"] == summary["eval_return_mean"]

    ckpts = sorted((out / "checkpoints").glob("*.pt"))
    assert [p.name for p in ckpts][-1] == "checkpoint_3072.pt"
    state = torch.load(ckpts[-1], weights_only=True)
    assert {"trainer", "qnet", "target_qnet", "optimizer", "replay", "collector", "exploration"} <= set(state)
    assert state["trainer"]["frames"] == 3072 and state["trainer"]["optim_steps"] == 1408

    # the checkpoint restores a freshly built recipe
    from engine_rl.recipes import get_recipe

    cfg = make_config("dqn-cartpole", {"seed": seed(3)})
    setup = get_recipe("dqn-cartpole").build(cfg)
    Checkpoint.load_objects(setup.to_save, state)
    assert setup.trainer.state.frames == 3072
    assert len(setup.to_save["replay"]) == 3072
    for a, b in zip(setup.to_save["qnet"].parameters(), torch.load(out / "policy.pt", weights_only=True).values()):
        assert torch.equal(a, b)
    setup.close()
    assert json.loads((out / "config.json").read_text())["total_frames"] == 3072


def test_cli_errors_name_the_problem(capsys):
    assert main(["train", "dqn-pong"]) == 2
    assert "unknown recipe 'dqn-pong'; known recipes: dqn-atari, dqn-cartpole" in capsys.readouterr().err
    assert main(["train", "dqn-cartpole", "--set", "lrr=3"]) == 2
    assert "unknown key 'lrr'; valid keys:" in capsys.readouterr().err
    assert main(["train", "dqn-cartpole", "--frames", "0"]) == 2
    assert "total_frames must be a positive int, got 0" in capsys.readouterr().err


def test_continuous_env_is_rejected_by_dqn(tmp_path):
    config = make_config("dqn-cartpole", {"env_id": "Pendulum-v1", "vectorization": "sync"})  # fields only: no env
    with pytest.raises(ValueError, match="^DQNConfig: dqn needs a discrete action space; Pendulum-v1 has Box actions"):
        train("dqn-cartpole", config, tmp_path / "run")  # the recipe's build checks the env


@pytest.mark.parametrize("recipe, env_id", [("dqn-cartpole", "Acrobot-v1"), ("dqn-cartpole", "MountainCar-v0"),
                                            ("ppo-cartpole", "Acrobot-v1"), ("sac-pendulum", "MountainCarContinuous-v0")])
def test_any_env_with_fitting_spaces_trains_with_the_default_vectorization(recipe, env_id, tmp_path, capsys):
    # 'auto': the vector entry point where the env registers one (CartPole), else sync (these)
    frames, starts = {"dqn-cartpole": (1024, 256), "ppo-cartpole": (512, None), "sac-pendulum": (200, 100)}[recipe]
    extra = [] if starts is None else ["--set", f"learning_starts={starts}"]
    assert main(["train", recipe, "--set", f"env_id={env_id}", "--frames", str(frames), "--out", str(tmp_path),
                 "--no-progress", "--set", "eval_episodes=1", *extra]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["frames"] == frames and summary["optim_steps"] > 0
    assert json.loads((tmp_path / "config.json").read_text())["vectorization"] == "auto"


def test_wrappers_from_the_config_let_dqn_train_and_evaluate_a_tuple_observation_env(tmp_path, capsys):
    args = ["--set", "env_id=Blackjack-v1", "--set", "wrappers=FlattenObservation", "--frames", "1024",
            "--set", "learning_starts=256", "--set", "eval_episodes=4", "--out", str(tmp_path), "--no-progress"]
    assert main(["train", "dqn-cartpole", *args]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["frames"] == 1024 and -1.0 <= summary["eval_return_mean"] <= 1.0  # Blackjack pays -1, 0 or 1
    assert json.loads((tmp_path / "config.json").read_text())["wrappers"] == ["FlattenObservation"]
    assert main(["eval", str(tmp_path), "--episodes", "4"]) == 0  # the wrappers travel with the checkpoint
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["episodes"] == 4
    # without the wrapper: one line naming the space and the way out
    assert main(["train", "dqn-cartpole", "--set", "env_id=Blackjack-v1", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0] == (
        "engine-rl: error: DQNConfig: dqn (Blackjack-v1): the observation space is Tuple(Discrete(32), Discrete(11), "
        "Discrete(2)), which cannot be stored; each leaf must be a Box, Discrete, MultiBinary, 1-D MultiDiscrete, or a "
        "Dict of these; flatten it (wrappers=FlattenObservation: Discrete, Tuple and Dict spaces to a 1-D Box)")
    assert main(["train", "dqn-cartpole", "--set", "wrappers=FlatObs", "--out", str(tmp_path / "y")]) == 2
    assert "wrappers entry 'FlatObs' is not a single-env wrapper of gymnasium.wrappers" in capsys.readouterr().err


def test_python_dash_m_and_recipes_listing():
    res = subprocess.run([sys.executable, "-m", "engine_rl", "recipes"], capture_output=True, text=True, check=True)
    assert "dqn-cartpole:" in res.stdout and "lr = 0.0023  # Adam learning rate at the start of the run." in res.stdout


@pytest.mark.slow
@pytest.mark.ci
def test_dqn_cartpole_learns_within_50k_frames(tmp_path):
    """CI bar: seed 0, 50k frames, default config: mean greedy return over 10 episodes >= 150
    (random play: ~22; ~1 min here). The run's best checkpoint must clear the same bar on
    episodes the run never evaluated (eval seed 20000).

    Not 475: DQN's end-of-run return on CartPole swings between seeds (3 of 20 end below 475
    here), and a seed's run differs between CPUs (matmul kernels round differently); the README's
    table (learning_results.py) gives every seed measured. Margin checked over seeds 0-4
    (--seed-offset 0-4): lowest 484 (final) and 483 (best).
    """
    summary = train("dqn-cartpole", make_config("dqn-cartpole", {"seed": seed(0)}), tmp_path, progress=False)
    assert summary["frames"] == 50_176  # 196 batches of 256
    assert summary["eval_return_mean"] >= 150, summary
    best = evaluate_checkpoint(summary["best_checkpoint"], seed=seed(20_000))
    assert best["episodes"] == 10 and best["seed"] == seed(20_000)
    assert best["return_mean"] >= 150, best


def test_bare_visdom_flag_starts_a_local_server_for_the_run(tmp_path, capsys):
    pytest.importorskip("visdom", reason="the visdom extra is not installed")
    from engine_rl.commands.train import _listening
    from engine_rl.dashboard import missing_assets

    if _listening("127.0.0.1", 8097):
        pytest.skip("something already listens on 127.0.0.1:8097")
    if missing_assets():
        pytest.skip("visdom's page assets are not installed (engine-rl dashboard --install-assets)")
    out = tmp_path / "vis"
    rc = main(["train", "dqn-cartpole", "--frames", "1024", "--out", str(out), "--no-progress", "--visdom",
               "--set", "learning_starts=512", "--set", "eval_episodes=2"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "engine-rl: dashboard at http://127.0.0.1:8097/env/vis (stops with this run" in err
    assert "DashboardWarning" not in err and not _listening("127.0.0.1", 8097)
