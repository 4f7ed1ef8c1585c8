"""Every bad input to ``engine-rl`` ends in one ``engine-rl: error: ...`` line naming the field and
the value, with exit status 2 (1 for a failed run); ``--debug`` shows the traceback instead."""

import socket
import subprocess
import sys
import warnings

import pytest
import torch

import engine_rl.commands.train as train_command
from engine_rl.cli import main
from engine_rl.run.checkpoint import CheckpointError, InferenceState
from engine_rl.run.driver import RunError

T = ["train", "dqn-cartpole"]

# (argv, exit status, text the one line must hold)
BAD = [
    ([*T, "--set", "lr=-1"], 2, "DQNConfig: lr must be a positive finite number, got -1.0"),
    ([*T, "--set", "lr=nan"], 2, "DQNConfig: lr must be a positive finite number, got nan"),
    ([*T, "--set", "lr=inf"], 2, "DQNConfig: lr must be a positive finite number, got inf"),
    ([*T, "--set", "gamma=2"], 2, "DQNConfig: gamma must be a number in [0, 1], got 2.0"),
    ([*T, "--set", "hidden=(0,)"], 2, "DQNConfig: hidden must be a tuple of positive ints (layer widths), got (0,)"),
    ([*T, "--set", "learning_starts=-5"], 2, "DQNConfig: learning_starts must be a non-negative int, got -5"),
    ([*T, "--set", "vectorization=bogus"], 2,
     "DQNConfig: vectorization must be one of ('auto', 'vector_entry_point', 'sync', 'async'), got 'bogus'"),
    ([*T, "--set", "env_id=Foo-v0"], 2, "DQNConfig: env_id 'Foo-v0' is not a registered gymnasium env"),
    ([*T, "--set", "env_id=CartPole-v9"], 2, "DQNConfig: env_id 'CartPole-v9' is not a registered gymnasium env; "
                                             "close matches: CartPole-v1"),
    ([*T, "--set", "env_id=Pendulum-v1"], 2, "DQNConfig: dqn needs a discrete action space; Pendulum-v1 has Box actions"),
    ([*T, "--set", "env_id=Acrobot-v1", "--set", "vectorization=vector_entry_point"], 2,
     "DQNConfig: vectorization 'vector_entry_point' needs an env that registers a vector entry point; "
     "Acrobot-v1 has none"),
    (["train", "sac-pendulum", "--set", "env_id=CartPole-v1"], 2,
     "SACConfig: sac needs a continuous (Box) action space; CartPole-v1 has Discrete actions"),
    (["train", "td3-pendulum", "--set", "env_id=CartPole-v1"], 2,
     "TD3Config: td3 needs a continuous (Box) action space; CartPole-v1 has Discrete actions"),
    (["train", "ppo-cartpole", "--set", "env_id=Blackjack-v1"], 2,
     "PPOConfig: ppo (Blackjack-v1): the observation space is Tuple(Discrete(32), Discrete(11), Discrete(2)), "
     "which cannot be stored; each leaf must be a Box, Discrete, MultiBinary, 1-D MultiDiscrete, or a Dict of these; "
     "flatten it (wrappers=FlattenObservation: Discrete, Tuple and Dict spaces to a 1-D Box)"),
    ([*T, "--set", "buffer_size=100", "--set", "batch_size=256"], 2,
     "DQNConfig: buffer_size (100) must be >= batch_size (256)"),
    (["train", "sac-pendulum", "--set", "buffer_size=100", "--set", "batch_size=256"], 2,
     "SACConfig: buffer_size (100) must be >= batch_size (256)"),
    ([*T, "--set", "eps_start=0.1", "--set", "eps_end=0.5"], 2, "DQNConfig: eps_start (0.1) must be >= eps_end (0.5)"),
    ([*T, "--set", "target_tau=0"], 2, "DQNConfig: target_tau must be a number in (0, 1] or None, got 0.0"),
    ([*T, "--set", "info_keys=a,a"], 2, "DQNConfig: info_keys must be a tuple of distinct non-empty strings"),
    ([*T, "--set", "double=maybe"], 2, "DQNConfig: override double='maybe' is not a valid bool"),
    ([*T, "--set", "num_envs=eight"], 2, "DQNConfig: override num_envs='eight' is not a valid int"),
    ([*T, "--set", "frames_per_batch=250"], 2, "DQNConfig: frames_per_batch (250) must be a multiple of num_envs (32)"),
    ([*T, "--set", "learning_starts=999999"], 2, "DQNConfig: learning_starts (999999) exceeds total_frames (50000)"),
    ([*T, "--set", "lrr=3"], 2, "DQNConfig: unknown key 'lrr'; valid keys:"),
    ([*T, "--set", "lr"], 2, "DQNConfig: override 'lr' must look like key=value"),
    (["train", "ppo-cartpole", "--set", "activation=gelu"], 2,
     "PPOConfig: activation must be one of ('relu', 'tanh'), got 'gelu'"),
    (["train", "ppo-cartpole", "--set", "batch_size=512"], 2, "PPOConfig: batch_size (512) exceeds the frames per batch"),
    (["train", "ppo-cartpole", "--set", "gae_lambda=-0.5"], 2, "PPOConfig: gae_lambda must be a number in [0, 1], got -0.5"),
    (["train", "sac-pendulum", "--set", "alpha_init=nan"], 2, "SACConfig: alpha_init must be a positive finite number, got nan"),
    (["train", "td3-pendulum", "--set", "policy_delay=0"], 2, "TD3Config: policy_delay must be a positive int, got 0"),
    (["train", "td3-pendulum", "--set", "tau=0"], 2, "TD3Config: tau must be a number in (0, 1], got 0.0"),
    (["train", "dqn-pong"], 2, "unknown recipe 'dqn-pong'; known recipes: dqn-atari, dqn-cartpole"),
    ([*T, "--frames", "0"], 2, "DQNConfig: total_frames must be a positive int, got 0"),
    ([*T, "--frames", "abc"], 2, "train: argument --frames: invalid int value: 'abc'"),
    ([*T, "--seed", "-1"], 2, "DQNConfig: seed must be a non-negative int, got -1"),
    ([*T, "--seed", str(2**64)], 2, "DQNConfig: seed must be an int in [0, 2**63) (torch takes seeds below 2**64; "
                                    "env copies and ranks add to a seed), got 18446744073709551616"),
    ([*T, "--threads", "0"], 2, "--threads must be >= 1, got 0"),
    ([*T, "--checkpoint-every", "0"], 2, "--checkpoint-every must be >= 1, got 0"),
    ([*T, "--until-frames", "-1"], 2, "--until-frames must be >= 1, got -1"),
    ([*T, "--patience", "0"], 2, "--patience must be >= 1, got 0"),
    ([*T, "--nproc", "0"], 2, "--nproc must be >= 1, got 0"),
    ([*T, "--nproc", "2", "--master-port", "99999"], 2, "--master-port must be a port number in [1, 65535], got 99999"),
    ([*T, "--nnodes", "2"], 2, "--nnodes 2 needs --node-rank, --master-addr and --master-port"),
    ([*T, "--nnodes", "2", "--node-rank", "2"], 2, "--node-rank must be in [0, 1] (--nnodes 2), got 2"),
    ([*T, "--backend", "fast"], 2, "argument --backend: invalid choice: 'fast'"),
    ([*T, "--resume", "--out", "{tmp}/none"], 2, "--resume: {tmp}/none holds no run to resume (no config.json)"),
    (["train"], 2, "train: the following arguments are required: recipe"),
    ([], 2, "the following arguments are required: command"),
    (["trian"], 2, "argument command: invalid choice: 'trian'"),
    (["eval", "{tmp}/gone.pt"], 2, "checkpoint {tmp}/gone.pt: its recipe and config cannot be rebuilt here: "
                                  "DQNConfig: env_id 'Gone-v0' is not a registered gymnasium env"),
    (["eval", "{tmp}/nothere.pt"], 1, "checkpoint {tmp}/nothere.pt: no such file"),
    (["eval", "{tmp}/gone.pt", "--episodes", "0"], 2, "--episodes must be >= 1, got 0"),
    (["eval", "{tmp}/gone.pt", "--seed", str(2**63)], 2, "--seed must be below 2**63 (torch takes seeds below 2**64; "
                                                         "env copies add to a seed), got 9223372036854775808"),
    (["dashboard", "--host", "0.0.0.0"], 2,
     "VisdomServer: argument host must be a loopback address (127.0.0.1, ::1 or localhost), got '0.0.0.0'"),
    (["dashboard", "--host", "example.com"], 2, "argument host must be a loopback address"),
    (["dashboard", "--port", "70000"], 2, "VisdomServer: argument port must be an int in [0, 65535], got 70000"),
    (["dashboard", "--replay", "{tmp}/nope"], 2, "--replay: no run folder or metrics file at {tmp}/nope"),
    (["dashboard", "--screenshot", "x.png"], 2, "--screenshot needs --replay RUN_DIR"),
]


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("engine-rl: error"), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def gone_checkpoint(tmp_path):
    """An inference checkpoint whose env is not registered here."""
    state = InferenceState(torch.nn.Linear(1, 1), recipe="dqn-cartpole", config={"env_id": "Gone-v0"}).state_dict()
    torch.save(state, tmp_path / "gone.pt")


@pytest.mark.parametrize("argv, status, text", BAD, ids=[" ".join(a) or "(none)" for a, _, _ in BAD])
def test_bad_input_is_one_error_line(argv, status, text, tmp_path, gone_checkpoint, capsys):
    if "nccl" in argv and torch.cuda.is_available():
        pytest.skip("nccl is available here")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == status
    assert text.replace("{tmp}", str(tmp_path)) in _one_error_line(capsys)


def test_nccl_without_cuda_is_refused(capsys):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    assert main([*T, "--backend", "nccl", "--nproc", "2"]) == 2
    assert "--backend nccl needs CUDA GPUs and none is available here; use --backend gloo" in _one_error_line(capsys)


def test_a_dashboard_port_in_use_says_why(tmp_path, capsys):
    pytest.importorskip("visdom", reason="visdom is not installed (the [visdom] extra)")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["dashboard", "--port", str(port), "--env-path", str(tmp_path)]) == 2
    assert _one_error_line(capsys) == (
        f"engine-rl: error: VisdomServer: the server did not start on 127.0.0.1:{port}: cannot bind: "
        "Address already in use (another server on this port? port 0 picks a free one)"
    )


@pytest.mark.parametrize("err, status, line", [
    (RunError("--out runs/x: is a file, not a folder"), 2, "engine-rl: error: --out runs/x: is a file, not a folder"),
    (CheckpointError("checkpoint c.pt: cannot be written (No space left on device)"), 1,
     "engine-rl: error: checkpoint c.pt: cannot be written (No space left on device)"),
    (OSError(28, "No space left on device"), 1,
     "engine-rl: error: OSError: [Errno 28] No space left on device (--debug shows the traceback)"),
    (RuntimeError("first line\nsecond line"), 1, "engine-rl: error: RuntimeError: first line (--debug shows the traceback)"),
])
def test_errors_of_the_run_are_one_line(err, status, line, monkeypatch, tmp_path, capsys):
    def failing_train(*args, **kwargs):
        raise err

    monkeypatch.setattr(train_command, "train", failing_train)
    assert main([*T, "--out", str(tmp_path / "run"), "--no-progress"]) == status
    assert _one_error_line(capsys) == line


def test_warnings_and_interrupts_are_one_line(monkeypatch, tmp_path, capsys):
    def warning_train(*args, **kwargs):
        warnings.warn("GymCollector: info_keys 'nonexistent' never appeared\n in the env's info", UserWarning)
        raise KeyboardInterrupt

    monkeypatch.setattr(train_command, "train", warning_train)
    assert main([*T, "--out", str(tmp_path / "run"), "--no-progress"]) == 130
    assert capsys.readouterr().err.splitlines() == [
        "engine-rl: warning: UserWarning: GymCollector: info_keys 'nonexistent' never appeared in the env's info",
        "engine-rl: interrupted",
    ]


def test_debug_shows_the_traceback(monkeypatch, tmp_path, capsys):
    with pytest.raises(ValueError, match=r"DQNConfig: gamma must be a number in \[0, 1\], got 2.0"):
        main([*T, "--set", "gamma=2", "--debug"])
    with pytest.raises(ValueError, match="DQNConfig: lr must be a positive finite number"):
        main(["--debug", *T, "--set", "lr=-1"])
    monkeypatch.setattr(train_command, "train", lambda *a, **k: (_ for _ in ()).throw(CheckpointError("c.pt: bad")))
    with pytest.raises(CheckpointError, match="c.pt: bad"):
        main([*T, "--out", str(tmp_path / "run"), "--debug"])
    assert capsys.readouterr().err == ""


def test_the_installed_command_prints_one_line_or_with_debug_the_traceback():
    cmd = [sys.executable, "-m", "engine_rl", *T, "--set", "hidden=(0,)"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    assert res.stderr.splitlines() == [
        "engine-rl: error: DQNConfig: hidden must be a tuple of positive ints (layer widths), got (0,)"
    ]
    res = subprocess.run([*cmd, "--debug"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 1 and "Traceback (most recent call last)" in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("ValueError: DQNConfig: hidden must be")
