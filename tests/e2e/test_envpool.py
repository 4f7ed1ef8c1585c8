"""``--set env_backend=envpool``: the Atari and MuJoCo recipes train and evaluate on EnvPool; a
resumed run says in one line and in summary.json that its envs started new episodes; what EnvPool
cannot make is one line naming what it accepts (exit 2, nothing written)."""

import json
import sys

import pytest

from engine_rl.cli import main
from engine_rl.collectors.atari import ATARI_WRAPPERS
from support.seeds import seed_arg

pytest.importorskip("envpool")

ENVPOOL = ["--set", "env_backend=envpool"]
CPU = ["--device", "cpu", "--no-progress"]
IDS_ACCEPTED = ("an Atari game as {game}NoFrameskip-v4, ALE/{game}-v5 or {game}-v5; MuJoCo as Hopper-v5 or "
                "Hopper-v4; any other id of envpool.list_all_envs() (CartPole-v1, ...)")

# (id, argv after `train`, stderr)
BAD = [
    ("an id EnvPool lacks", ["ppo-mujoco", "--set", "env_id=Hopper-v2"],
     "PPOMujocoConfig: env_backend 'envpool' needs an env_id EnvPool has: "
     f"{IDS_ACCEPTED.format(game='Breakout')}; got 'Hopper-v2' (close matches: Hopper-v5, Hopper-v4, Hopper-v3)"),
    ("an Atari id EnvPool lacks", ["ppo-atari", "--set", "env_id=Pong-v4"],
     "PPOAtariConfig: env_backend 'envpool' needs an env_id EnvPool has: "
     f"{IDS_ACCEPTED.format(game='Pong')}; got 'Pong-v4' (close matches: Pong-v5, Pooyan-v5, Boxing-v5)"),
    ("Atari wrappers other than the preprocessing", ["dqn-atari", "--set", "wrappers=FireOnLifeStart"],
     "DQNAtariConfig: env_backend 'envpool' preprocesses the Atari game 'BreakoutNoFrameskip-v4' with its own options, "
     f"as wrappers={ATARI_WRAPPERS} say (the Atari recipes' default), so it takes those wrappers only, got "
     "('FireOnLifeStart',)"),
    ("a wrapper on MuJoCo", ["ppo-mujoco", "--set", "wrappers=ClipAction"],
     "PPOMujocoConfig: env_backend 'envpool' applies no gymnasium wrappers to 'Hopper-v5' (only an Atari game's "
     "preprocessing, ATARI_WRAPPERS, which EnvPool does itself), got wrappers=('ClipAction',); use env_backend "
     "'gymnasium'"),
    ("make_env", ["ppo-cartpole", "--set", "make_env=gymnasium:make"],
     "PPOConfig: env_backend 'envpool' makes its envs from env_id in EnvPool, so it takes no make_env (got "
     "gymnasium:make); use env_backend 'gymnasium'"),
    ("a vectorization", ["ppo-cartpole", "--set", "vectorization=sync"],
     "PPOConfig: vectorization 'sync' is a gymnasium option; env_backend 'envpool' steps its copies in C++ threads "
     "and takes 'auto' only"),
    ("env_kwargs that are not EnvPool's", ["ppo-atari", "--set", "env_kwargs={'noop_max': 0}"],
     "PPOAtariConfig: env_kwargs ['noop_max'] are not EnvPool options of 'Breakout-v5' that may be set (accepted: "
     "difficulty, full_action_space, max_episode_steps, mode, num_threads, repeat_action_probability, "
     "thread_affinity_offset, zero_discount_on_life_loss)"),
    ("an Atari game without FIRE", ["ppo-atari", "--set", "env_id=ALE/Freeway-v5"],
     "PPOAtariConfig: the Atari preprocessing presses FIRE at each life's start and needs a game with a FIRE action; "
     "Freeway-v5 has ['NOOP', 'UP', 'DOWN']"),
    ("--video with an id of EnvPool's own", ["ppo-atari", "--set", "env_id=Breakout-v5", "--video", "1"],
     "--video 1: videos are recorded with the gymnasium env of env_id, and 'Breakout-v5' is not one (env_spec: env_id "
     "'Breakout-v5' is not a registered gymnasium env; close matches: Breakout-v4, Breakout-v0, ALE/Breakout-v5); use "
     "the gymnasium id of the same env (BreakoutNoFrameskip-v4 or ALE/Breakout-v5 for EnvPool's Breakout-v5), which "
     "env_backend 'envpool' takes too"),
]


@pytest.mark.parametrize("argv, expected", [row[1:] for row in BAD], ids=[row[0] for row in BAD])
def test_what_envpool_cannot_make_is_one_line_naming_what_it_accepts(argv, expected, tmp_path, capsys):
    pytest.importorskip("ale_py")
    out = tmp_path / "run"
    assert main(["train", *argv, *ENVPOOL, "--out", str(out), *CPU]) == 2
    assert capsys.readouterr().err == f"engine-rl: error: {expected}\n"
    assert not out.exists()


def summary_of(capsys):
    captured = capsys.readouterr()
    return json.loads(captured.out.strip().splitlines()[-1]), captured.err


def test_ppo_atari_trains_and_evaluates_on_envpool(tmp_path, capsys):
    pytest.importorskip("ale_py")
    assert main(["train", "ppo-atari", *ENVPOOL, "--frames", "1024", "--seed", seed_arg(0), "--set", "eval_episodes=2",
                 "--out", str(tmp_path), *CPU]) == 0
    summary, _ = summary_of(capsys)
    assert summary["frames"] == 1024 and summary["eval_length_mean"] > 0 and summary["fresh_env_episodes"] is None


def test_ppo_mujoco_trains_on_envpools_v4_id(tmp_path, capsys):
    assert main(["train", "ppo-mujoco", *ENVPOOL, "--set", "env_id=Hopper-v4", "--frames", "2048",
                 "--seed", seed_arg(0), "--set", "eval_episodes=2", "--out", str(tmp_path), *CPU]) == 0
    summary, _ = summary_of(capsys)
    assert summary["frames"] == 2048 and summary["eval_return_mean"] > 0


@pytest.mark.parametrize("recipe, extra", [("ppo-cartpole", []), ("dqn-cartpole", ["--set", "async_collection=true"])],
                         ids=["in-process", "async-worker"])
def test_a_resumed_run_says_its_envs_start_new_episodes(recipe, extra, tmp_path, capsys):
    args = [recipe, *ENVPOOL, *extra, "--frames", "1024", "--seed", seed_arg(0), "--set", "eval_episodes=2",
            "--out", str(tmp_path), *CPU]
    assert main(["train", *args, "--until-frames", "512"]) == 0
    paused, err = summary_of(capsys)
    assert paused["paused"] and paused["fresh_env_episodes"] is None and "engine-rl: resume:" not in err

    assert main(["train", *args, "--resume"]) == 0
    resumed, err = summary_of(capsys)
    why = ("the envs start new episodes, not those of the checkpoint (EnvPool steps its envs in C++ threads, whose "
           "state cannot be saved); training continues from the checkpoint, not bitwise")
    assert f"engine-rl: resume: {why}\n" in err
    assert resumed["frames"] == 1024 and resumed["resumed_from_frames"] == 512
    assert resumed["fresh_env_episodes"] == why
    assert json.loads((tmp_path / "summary.json").read_text())["fresh_env_episodes"] == why


def test_without_envpool_the_extra_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "envpool", None)  # import envpool raises ImportError
    assert main(["train", "ppo-cartpole", *ENVPOOL, "--out", str(tmp_path / "run"), *CPU]) == 2
    assert capsys.readouterr().err == ("engine-rl: error: PPOConfig: env_backend 'envpool' needs the EnvPool extra: "
                                       "pip install engine_rl[envpool] (envpool)\n")
