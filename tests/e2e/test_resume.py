"""Exact resume: 2N batches straight == N batches, checkpoint, a new process, load, N more (bitwise, CPU).

Seeds: 1 to 13, one per case, in the arguments below, the suite's seed offset added (support.seeds).
"""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

from engine_rl.cli import main
from engine_rl.recipes import RECIPES
from engine_rl.run.checkpoint import list_checkpoints
from engine_rl.run.driver import RunError, load_run_config, train
from support.compare import differences, log
from support.scores import peaking_at, scored_by_frames
from support.seeds import seed, seed_arg

ARGS = {
    # prioritized replay, a buffer that wraps around, lr schedule, evaluations, best checkpoint
    "dqn-cartpole": ["--frames", "4096", "--seed", seed_arg(1), "--set", "learning_starts=512", "--set", "optim_steps_per_batch=16",
                     "--set", "hidden=(32,32)", "--set", "buffer_size=2048", "--set", "prioritized=true",
                     "--set", "eval_every=4", "--set", "eval_episodes=3", "--set", "num_envs=4", "--checkpoint-every", "4"],
    # observation and reward normalization, minibatches, schedules
    "ppo-cartpole": ["--frames", "1024", "--seed", seed_arg(2), "--set", "eval_every=2", "--set", "eval_episodes=2",
                     "--set", "num_epochs=4", "--set", "batch_size=64", "--set", "normalize_observations=true",
                     "--set", "normalize_rewards=true", "--checkpoint-every", "1"],
    # MuJoCo physics (mj_getState) mid-episode, observation and reward normalization, one env
    "ppo-mujoco": ["--frames", "4096", "--seed", seed_arg(3), "--set", "eval_every=1", "--set", "eval_episodes=1",
                   "--set", "num_epochs=2", "--checkpoint-every", "1"],
    # the Atari emulator (ALE cloneState) and frame stacks mid-episode, uint8 frames, clipped rewards
    "ppo-atari": ["--frames", "1024", "--seed", seed_arg(4), "--set", "num_envs=2", "--set", "batch_size=128",
                  "--set", "eval_every=2", "--set", "eval_episodes=1", "--checkpoint-every", "1"],
    # Dict observations (a uint8 camera, a Discrete door, a Box clock) staged and replayed per key,
    # episodes truncated mid-batch, the env's generator mid-episode
    "dqn-cartpole Dict": ["--frames", "1024", "--seed", seed_arg(5), "--set", "env_id=support.user_envs:engine_rl_tests/DoorRoom-v0",
                          "--set", "learning_starts=256", "--set", "optim_steps_per_batch=2", "--set", "hidden=(16,)",
                          "--set", "buffer_size=512", "--set", "num_envs=2", "--set", "eval_every=2",
                          "--set", "eval_episodes=2", "--checkpoint-every", "2"],
    # the env of a user's make_env, imported back from config.json by the new process
    "ppo-cartpole make_env": ["--frames", "1024", "--seed", seed_arg(6), "--set", "make_env=support.user_envs:make_corridor",
                              "--set", "env_kwargs={'max_episode_steps': 8}",
                              "--set", "eval_every=2", "--set", "eval_episodes=2", "--checkpoint-every", "1"],
    # SAC's actor and critic encoders (one per Dict key) and their targets; warm-up, then updates
    "sac-pendulum Dict": ["--frames", "600", "--seed", seed_arg(7), "--set", "env_id=support.user_envs:engine_rl_tests/DictReach-v0",
                          "--set", "learning_starts=200", "--set", "hidden=(16,)", "--set", "frames_per_batch=100",
                          "--set", "eval_every_frames=200", "--set", "eval_episodes=2", "--checkpoint-every", "1"],
    # the batched torch envs (their state and counter generator) filling a replay
    "dqn-cartpole torch": ["--frames", "2048", "--seed", seed_arg(8), "--set", "env_backend=torch", "--set", "learning_starts=512",
                           "--set", "optim_steps_per_batch=8", "--set", "hidden=(32,)", "--set", "eval_every=2",
                           "--set", "eval_episodes=2", "--checkpoint-every", "2"],
    "sac-pendulum torch": ["--frames", "600", "--seed", seed_arg(9), "--set", "env_backend=torch", "--set", "num_envs=4",
                           "--set", "learning_starts=200", "--set", "hidden=(16,)", "--set", "frames_per_batch=100",
                           "--set", "eval_every_frames=200", "--set", "eval_episodes=2", "--checkpoint-every", "1"],
    # one frame per batch, a train line every 40 frames and at each episode's end (MuJoCo, 50-step episodes)
    "sac-mujoco log_every": ["--frames", "600", "--seed", seed_arg(10), "--set", "env_kwargs={'max_episode_steps': 50}",
                             "--set", "learning_starts=200", "--set", "hidden=(16,)", "--set", "log_every_frames=40",
                             "--set", "eval_every_frames=200", "--set", "eval_episodes=1", "--checkpoint-every", "100"],
    # n-step rows (3 frames) into a prioritized replay, paused with every env copy's windows open
    "dqn-cartpole n_step": ["--frames", "2048", "--seed", seed_arg(11), "--set", "n_step=3", "--set", "prioritized=true",
                            "--set", "learning_starts=512", "--set", "optim_steps_per_batch=8", "--set", "hidden=(32,)",
                            "--set", "buffer_size=1024", "--set", "num_envs=4", "--set", "eval_every=2",
                            "--set", "eval_episodes=2", "--checkpoint-every", "2"],
    # QR-DQN's quantiles under a dueling head, prioritized replay reading its td_error
    "qrdqn-cartpole": ["--frames", "2048", "--seed", seed_arg(12), "--set", "learning_starts=512",
                       "--set", "optim_steps_per_batch=16", "--set", "hidden=(32,32)", "--set", "prioritized=true",
                       "--set", "dueling=true", "--set", "eval_every=2", "--set", "eval_episodes=2",
                       "--set", "num_envs=4", "--checkpoint-every", "2"],
    # a recurrent policy: the collector's carried LSTM states and episode starts, sequences of whole env rows
    "ppo-lstm": ["--frames", "1024", "--seed", seed_arg(13), "--set", "eval_every=2", "--set", "eval_episodes=2",
                 "--set", "num_epochs=2", "--checkpoint-every", "1"],
}
HALF = {"ppo-lstm": 512, "dqn-cartpole n_step": 1024, "dqn-cartpole": 2048, "qrdqn-cartpole": 1024, "ppo-cartpole": 512, "ppo-mujoco": 2048,
        "ppo-atari": 512, "dqn-cartpole Dict": 512,
        "sac-mujoco log_every": 300,
        "ppo-cartpole make_env": 512, "sac-pendulum Dict": 300, "dqn-cartpole torch": 1024, "sac-pendulum torch": 300}
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the subprocess imports support.user_envs






def train_cli(recipe, out, *extra, capsys=None):
    assert main(["train", recipe, "--out", str(out), "--no-progress", *extra]) == 0
    if capsys is not None:
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return None


@pytest.mark.parametrize("case", sorted(ARGS))
def test_resume_in_a_new_process_is_bitwise_identical_to_a_straight_run(case, tmp_path, capsys):
    recipe = case.split()[0]
    pytest.importorskip({"ppo-mujoco": "mujoco", "sac-mujoco": "mujoco", "ppo-atari": "ale_py"}.get(recipe, "gymnasium"))
    args, half = ARGS[case], HALF[case]
    straight = train_cli(recipe, tmp_path / "straight", *args, capsys=capsys)

    paused = train_cli(recipe, tmp_path / "split", *args, "--until-frames", str(half), capsys=capsys)
    assert paused["paused"] and paused["frames"] == half
    assert paused["checkpoint"].endswith(f"checkpoint_{half}.pt")
    if case == "dqn-cartpole n_step":  # paused mid-window: frames of open windows wait in the checkpoint
        assert torch.load(paused["checkpoint"], weights_only=True)["trainer.NStepTransitions"]["open"].any()
    if case == "ppo-lstm":  # paused mid-episode: the LSTM states the envs act from next are in the checkpoint
        memory = torch.load(paused["checkpoint"], weights_only=True)["collector"]["stepper"]["memory"]
        assert memory["state"].shape == (8, 256) and memory["state"].abs().sum(1).gt(0).all()
    # config.json is data: the code it names (make_env, a module-prefixed env_id) runs when named again
    named_again = [part for flag, value in zip(args, args[1:])
                   if flag == "--set" and value.startswith(("make_env=", "env_id=support.")) for part in (flag, value)]
    res = subprocess.run(  # a new process loads the checkpoint and trains the second half
        [sys.executable, "-m", "engine_rl", "train", recipe, "--out", str(tmp_path / "split"), "--resume",
         "--no-progress", *named_again, *args[args.index("--checkpoint-every"):]],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")]))},
    )
    assert res.returncode == 0, res.stderr
    resumed = json.loads(res.stdout.strip().splitlines()[-1])
    assert resumed["resumed_from_frames"] == half and not resumed["paused"]

    final = f"checkpoint_{straight['frames']}.pt"
    a = torch.load(tmp_path / "straight" / "checkpoints" / final, weights_only=True)
    b = torch.load(tmp_path / "split" / "checkpoints" / final, weights_only=True)
    # parameters, target nets, optimizer, replay rows and priorities, collector and env state, RNGs,
    # counters, handler states, evaluator bests and trainer metrics: all identical
    assert {"trainer", "collector", "rng", "trainer_metrics", "evaluator.Checkpoint"} <= set(a)
    assert any(key.endswith("optimizer") for key in a)  # SAC: actor_optimizer, critic_optimizer, alpha_optimizer
    assert differences(a, b) == []
    assert a["trainer"]["frames"] == straight["frames"] and a["trainer"]["optim_steps"] == straight["optim_steps"]
    assert log(tmp_path / "straight" / "metrics.jsonl") == log(tmp_path / "split" / "metrics.jsonl")
    assert {k: v for k, v in straight.items() if k.startswith("eval_")} == {
        k: v for k, v in resumed.items() if k.startswith("eval_")}
    if case == "sac-mujoco log_every":  # every 40 frames and every episode end (each 50 frames), once each
        train_frames = [r["frames"] for r in log(tmp_path / "split" / "metrics.jsonl") if r["kind"] == "train"]
        assert train_frames == sorted(set(range(40, 601, 40)) | set(range(50, 601, 50)))
    if case == "dqn-cartpole Dict":
        assert a["replay"]["storage"]["data"]["observation"]["camera"].dtype == torch.uint8
    if case == "dqn-cartpole n_step":  # n-step rows stored: bootstraps discounted by gamma^3, terminals by 0
        discount = a["replay"]["storage"]["data"]["next"]["discount"]
        assert sorted(discount.unique().tolist()) == pytest.approx([0.0, 0.99**3])
    if case == "dqn-cartpole":
        assert a["replay"]["storage"]["size"] == 2048 and a["replay"]["sampler"]["priorities"].dtype == torch.float64


def test_resume_from_the_older_of_two_checkpoints_is_bitwise_identical_too(tmp_path, capsys):
    """``--resume OLDER.pt``: the newer checkpoint is dropped and the run replays from the older one."""
    recipe, args = "ppo-cartpole", ARGS["ppo-cartpole"]
    straight = train_cli(recipe, tmp_path / "straight", *args, capsys=capsys)
    train_cli(recipe, tmp_path / "split", *args, "--until-frames", "512")
    older, newer = list_checkpoints(tmp_path / "split" / "checkpoints")
    assert (older.name, newer.name) == ("checkpoint_256.pt", "checkpoint_512.pt")
    resumed = train_cli(recipe, tmp_path / "split", "--resume", str(older), *args[args.index("--checkpoint-every"):],
                        capsys=capsys)
    assert resumed["resumed_from_frames"] == 256 and resumed["frames"] == straight["frames"]
    final = f"checkpoint_{straight['frames']}.pt"
    a = torch.load(tmp_path / "straight" / "checkpoints" / final, weights_only=True)
    b = torch.load(tmp_path / "split" / "checkpoints" / final, weights_only=True)
    assert differences(a, b) == []
    assert log(tmp_path / "straight" / "metrics.jsonl") == log(tmp_path / "split" / "metrics.jsonl")


def test_eval_command_reports_the_last_evaluation_of_the_run(tmp_path, capsys):
    summary = train_cli("dqn-cartpole", tmp_path, *ARGS["dqn-cartpole"], capsys=capsys)
    assert main(["eval", str(tmp_path / "inference.pt")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["return_mean"] == summary["eval_return_mean"]  # same policy, same eval seed and episodes
    assert (result["episodes"], result["seed"], result["recipe"]) == (3, 10_000, "dqn-cartpole")
    assert result["return_std"] == summary["eval_return_std"]

    # the best checkpoint holds the best-scoring policy: evaluating it gives its recorded score
    best = summary["best_checkpoint"]
    assert main(["eval", best]) == 0
    score = float(best.rsplit("=", 1)[1].removesuffix(".pt"))
    assert json.loads(capsys.readouterr().out)["return_mean"] == pytest.approx(score, abs=1e-4)
    evals = [r["eval_return_mean"] for r in log(tmp_path / "metrics.jsonl") if r["kind"] == "eval"]
    assert score == pytest.approx(max(evals), abs=1e-4)

    assert main(["eval", str(tmp_path), "--episodes", "4", "--seed", seed_arg(7)]) == 0  # a run folder: its inference.pt
    other = json.loads(capsys.readouterr().out)
    assert (other["episodes"], other["seed"]) == (4, seed(7))

    assert main(["eval", summary["checkpoint"]]) == 1
    assert "is a full training checkpoint" in capsys.readouterr().err


def test_resume_refuses_a_changed_config_and_a_fresh_run_refuses_a_used_folder(tmp_path, capsys):
    out = tmp_path / "run"
    train_cli("dqn-cartpole", out, "--frames", "512", "--set", "learning_starts=256", "--set", "optim_steps_per_batch=2",
              "--set", "eval_episodes=1", "--set", "hidden=(8,)")
    capsys.readouterr()
    assert main(["train", "dqn-cartpole", "--out", str(out), "--resume", "--frames", "1024"]) == 2
    err = capsys.readouterr().err
    assert "--resume: the config differs from" in err and "total_frames (512 -> 1024)" in err
    assert main(["train", "dqn-cartpole", "--out", str(out), "--frames", "512", "--set", "learning_starts=256"]) == 2
    assert "already holds checkpoints of a run (checkpoint_512.pt); continue it with --resume" in capsys.readouterr().err
    assert main(["train", "dqn-cartpole", "--out", str(tmp_path / "none"), "--resume"]) == 2
    assert "holds no run to resume (no config.json)" in capsys.readouterr().err
    # resuming a finished run does no more work and reports the same
    assert main(["train", "dqn-cartpole", "--out", str(out), "--resume", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["frames"] == 512


def test_patience_stops_the_run_early_and_a_resumed_run_stays_stopped(tmp_path, capsys, monkeypatch):
    # the evaluations' score is set (support.scores), not learned: better at each evaluation up to
    # 1,536 frames, worse at 1,792 and 2,048, the second without improvement with --patience 2
    monkeypatch.setitem(RECIPES, "dqn-cartpole", scored_by_frames("dqn-cartpole", peaking_at(1536, per=256)))
    args = ["--frames", "4096", "--seed", seed_arg(1), "--set", "learning_starts=512", "--set", "optim_steps_per_batch=16",
            "--set", "hidden=(32,32)", "--set", "eval_every=1", "--set", "eval_episodes=2", "--set", "num_envs=4",
            "--patience", "2"]
    summary = train_cli("dqn-cartpole", tmp_path, *args, capsys=capsys)
    evals = [(r["frames"], r["eval_return_mean"]) for r in log(tmp_path / "metrics.jsonl") if r["kind"] == "eval"]
    assert evals == [(256 * i, float(min(i, 12 - i))) for i in range(1, 9)]  # 256 frames a batch, each evaluated
    assert summary["stopped_early"] and summary["frames"] == 2048
    assert summary["best_checkpoint"].endswith("best_policy_1536_eval_return=6.0000.pt")
    again = train_cli("dqn-cartpole", tmp_path, "--resume", "--patience", "2", capsys=capsys)
    assert again["stopped_early"] and again["frames"] == 2048


def test_a_run_saved_before_a_config_field_existed_resumes_while_the_field_keeps_its_default(tmp_path, capsys):
    # runs saved before `wrappers` and `env_backend` existed: their config.json lacks them
    args = ARGS["ppo-cartpole"]
    out = tmp_path / "run"
    train_cli("ppo-cartpole", out, *args, "--until-frames", "512", capsys=capsys)
    saved = json.loads((out / "config.json").read_text())
    del saved["wrappers"], saved["env_backend"]
    (out / "config.json").write_text(json.dumps(saved))
    resumed = train_cli("ppo-cartpole", out, "--resume", "--checkpoint-every", "1", capsys=capsys)
    assert resumed["frames"] == 1024 and resumed["resumed_from_frames"] == 512
    # a field missing from the saved config but set away from its default is a difference
    config = dataclasses.replace(load_run_config(out), info_keys=("x",))
    del saved["info_keys"]
    (out / "config.json").write_text(json.dumps(saved))
    with pytest.raises(RunError, match=r"--resume: the config differs from .*: info_keys \(None -> \['x'\]\)"):
        train("ppo-cartpole", config, out, resume=True, progress=False)
