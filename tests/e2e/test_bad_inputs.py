"""Inputs that ended unclearly or silently (issue 37, E and a case of C): each is now one
``engine-rl: error: ...`` line naming the field or file (exit 2), or a line on stderr before
long silent work, and nothing is allocated first.

One row per case: the command line, the exit status and the exact stderr. Each runs in-process
through ``engine_rl.cli.main`` on a machine said to have 4 GiB of memory (``engine_rl.device.total_memory``
patched, so the messages read the same on any machine), on the CPU, under an address-space limit
of what the process maps plus 3 GiB: a check that does not fire fails its row in the allocator,
never by taking the machine's memory. No visdom server is started (the ``--replay`` cases are
refused before one would be).
"""

import contextlib
import re
import resource
from pathlib import Path

import pytest

from engine_rl import device as memory
from engine_rl.cli import main
from engine_rl.dashboard import VisdomServer
from support.seeds import seed_arg

GiB = 2**30
CPU = ["--device", "cpu", "--no-progress", "--out", "{tmp}/run"]
MACHINE = "but this machine has 4.0 GiB of memory"
CONFIG_JSON = '{\n  "recipe": "dqn-cartpole",\n  "seed": 0\n}\n'

# (id, argv, exit status, stderr); {tmp} is the test's folder, which also holds the files below
ROWS = [
    ("buffer_size=1e12", ["train", "dqn-cartpole", "--set", "buffer_size=1e12", *CPU], 2,
     f"engine-rl: error: DQNConfig: buffer_size=1000000000000 needs about 53.7 TiB of replay (59 bytes a row) "
     f"{MACHINE}; lower buffer_size\n"),
    ("frames_per_batch=2**40", ["train", "dqn-cartpole", "--set", f"frames_per_batch={2**40}", "--set", "num_envs=1",
                                *CPU], 2,
     f"engine-rl: error: DQNConfig: frames_per_batch=1099511627776 needs about 59.0 TiB to collect a batch (59 bytes a "
     f"frame) {MACHINE}; lower frames_per_batch\n"),
    ("ppo batch of 2**40 frames", ["train", "ppo-cartpole", "--set", f"steps_per_env={2**37}", *CPU], 2,
     f"engine-rl: error: PPOConfig: num_envs * steps_per_env=1099511627776 needs about 59.0 TiB to collect a batch "
     f"(59 bytes a frame) {MACHINE}; lower num_envs or steps_per_env\n"),
    ("dqn hidden=(10**7,)", ["train", "dqn-cartpole", "--set", "hidden=(10000000,)", *CPU], 2,
     "engine-rl: error: DQNConfig: hidden=(10000000,) needs about 6.1 GiB for the networks' updates (1 network of "
     "70,000,002 parameters with gradients, Adam's moments and a target copy; activations of 64-row batches) "
     f"{MACHINE}; lower hidden or batch_size\n"),
    ("qrdqn num_quantiles=10**6", ["train", "qrdqn-cartpole", "--set", "num_quantiles=1000000", *CPU], 2,
     "engine-rl: error: QRDQNConfig: hidden=(256, 256), num_quantiles=1000000 needs about 9.6 GiB for the networks' "
     "updates (1 network of 514,067,072 parameters with gradients, Adam's moments and a target copy; activations of "
     f"64-row batches) {MACHINE}; lower hidden, batch_size or num_quantiles\n"),
    ("qrdqn num_quantiles=0", ["train", "qrdqn-cartpole", "--set", "num_quantiles=0", *CPU], 2,
     "engine-rl: error: QRDQNConfig: num_quantiles must be a positive int, got 0\n"),
    ("ppo hidden=(10**7,)", ["train", "ppo-cartpole", "--set", "hidden=(10000000,)", *CPU], 2,
     "engine-rl: error: PPOConfig: hidden=(10000000,) needs about 40.2 GiB for the networks' updates (2 networks of "
     "70,000,002 parameters with gradients, Adam's moments; activations of 256-row batches) "
     f"{MACHINE}; lower hidden or batch_size\n"),
    ("sac hidden=(10**7,)", ["train", "sac-pendulum", "--set", "hidden=(10000000,)", *CPU], 2,
     "engine-rl: error: SACConfig: hidden=(10000000,) needs about 60.0 GiB for the networks' updates (3 networks of "
     "50,000,001 parameters with gradients, Adam's moments and a target copy; activations of 256-row batches) "
     f"{MACHINE}; lower hidden or batch_size\n"),
    ("FrameStackObservation(stack_size=10**7)",
     ["train", "dqn-cartpole", "--set", "wrappers=FrameStackObservation(stack_size=10000000)", *CPU], 2,
     "engine-rl: error: DQNConfig: frames_per_batch=256 needs about 76.3 GiB to collect a batch (305.2 MiB a frame: "
     "observations of shape (10000000, 4) float32 after wrappers FrameStackObservation(stack_size=10000000)) "
     f"{MACHINE}; lower frames_per_batch or the observations the wrappers make\n"),
    ("FrameStackObservation(stack_size=10**9)",  # the wrapper's own space takes 14.9 GiB: numpy's MemoryError
     ["train", "dqn-cartpole", "--set", "wrappers=FrameStackObservation(stack_size=1000000000)", *CPU], 2,
     "engine-rl: error: DQNConfig: wrappers entry 'FrameStackObservation(stack_size=1000000000)' runs out of memory "
     "(MemoryError: Unable to allocate 14.9 GiB for an array with shape (1000000000, 4) and data type float32); "
     "lower its sizes\n"),
    ("TimeLimit with a repeated keyword",
     ["train", "ppo-cartpole", "--set", "wrappers=TimeLimit(max_episode_steps=10, max_episode_steps=300)", *CPU], 2,
     "engine-rl: error: PPOConfig: wrappers entry 'TimeLimit(max_episode_steps=10, max_episode_steps=300)': keyword "
     "argument 'max_episode_steps' repeated; give each keyword once\n"),
    ("--seed 2**64", ["train", "dqn-cartpole", "--seed", str(2**64), *CPU], 2,
     "engine-rl: error: DQNConfig: seed must be an int in [0, 2**63) (torch takes seeds below 2**64; env copies and "
     "ranks add to a seed), got 18446744073709551616\n"),
    ("--seed 2**63", ["train", "td3-pendulum", "--seed", str(2**63), *CPU], 2,
     "engine-rl: error: TD3Config: seed must be an int in [0, 2**63) (torch takes seeds below 2**64; env copies and "
     "ranks add to a seed), got 9223372036854775808\n"),
    ("n_step=0", ["train", "dqn-cartpole", "--set", "n_step=0", *CPU], 2,
     "engine-rl: error: DQNConfig: n_step must be a positive int, got 0\n"),
    ("td3 n_step=-1", ["train", "td3-pendulum", "--set", "n_step=-1", *CPU], 2,
     "engine-rl: error: TD3Config: n_step must be a positive int, got -1\n"),
    ("n_step=3 with async_collection", ["train", "dqn-cartpole", "--set", "n_step=3", "--set", "async_collection=true",
                                       *CPU], 2,
     "engine-rl: error: DQNConfig: async_collection writes one-step transitions into the replay from its worker "
     "process, so n_step 3 does not apply; drop async_collection or set n_step=1\n"),
    ("eval --seed 2**64", ["eval", "{tmp}/run/inference.pt", "--seed", str(2**64)], 2,
     "engine-rl: error: --seed must be below 2**63 (torch takes seeds below 2**64; env copies add to a seed), "
     "got 18446744073709551616\n"),
    ("num_envs=100000", ["train", "ppo-cartpole", "--set", "num_envs=100000", "--set", "steps_per_env=1",
                         "--set", "batch_size=100000", "--set", "num_epochs=1", "--set", "eval_episodes=1",
                         "--frames", "100000", "--seed", seed_arg(0), *CPU], 0,
     "engine-rl: PPOConfig: making 100,000 copies of CartPole-v1 (num_envs) for batches of 100,000 frames "
     "(about 5.6 MiB each); the progress bar moves once a batch\n"),
    ("dangling symlink --out", ["train", "dqn-cartpole", *CPU[:-1], "{tmp}/dangling"], 2,
     "engine-rl: error: --out {tmp}/dangling: is a symbolic link to {tmp}/nowhere, which does not exist; create that "
     "folder, or name another --out\n"),
    ("replay binary garbage", ["dashboard", "--replay", "{tmp}/garbage.bin"], 2,
     "engine-rl: error: --replay: {tmp}/garbage.bin is not a run's metrics.jsonl: it is not text (byte 0x89 at "
     "offset 0)\n"),
    ("replay config.json", ["dashboard", "--replay", "{tmp}/config.json"], 2,
     "engine-rl: error: --replay: {tmp}/config.json is not a run's metrics.jsonl: none of its lines is a JSON object "
     "with 'frames'\n"),
    ("replay an empty file", ["dashboard", "--replay", "{tmp}/empty/metrics.jsonl"], 2,
     "engine-rl: error: --replay: {tmp}/empty/metrics.jsonl is empty: its run logged nothing yet, so there is nothing "
     "to plot\n"),
    ("replay a folder without metrics.jsonl", ["dashboard", "--replay", "{tmp}/bare"], 2,
     "engine-rl: error: --replay: {tmp}/bare holds no metrics.jsonl (a run folder has one from its first logged "
     "batch); name a run folder or its metrics.jsonl\n"),
]


def _files(tmp: Path) -> None:
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    (tmp / "garbage.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x00")
    (tmp / "config.json").write_text(CONFIG_JSON)
    (tmp / "empty").mkdir()
    (tmp / "empty" / "metrics.jsonl").write_bytes(b"")
    (tmp / "bare").mkdir()


@contextlib.contextmanager
def address_space_guard():
    """Mappings past what the process has now plus 3 GiB fail (numpy's MemoryError, torch's
    allocator error) while the row runs; the limit is restored after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    mapped = int(re.search(r"VmSize:\s+(\d+) kB", Path("/proc/self/status").read_text())[1]) * 1024
    cap = mapped + 3 * GiB if hard == resource.RLIM_INFINITY else min(mapped + 3 * GiB, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.fixture
def small_machine(monkeypatch):
    monkeypatch.setattr(memory, "total_memory", lambda: 4 * GiB)


@pytest.fixture
def no_server(monkeypatch):
    def start(self):
        raise RuntimeError("test: no visdom server is started here")

    monkeypatch.setattr(VisdomServer, "start", start)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="the address-space guard reads /proc (Linux)")
@pytest.mark.parametrize("argv, status, stderr", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_bad_input_is_one_line_before_anything_is_allocated(argv, status, stderr, tmp_path, monkeypatch, small_machine,
                                                            no_server, capsys):
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    capsys.readouterr()
    with address_space_guard():
        code = main(argv)
    assert (code, capsys.readouterr().err) == (status, stderr.replace("{tmp}", str(tmp_path)))
