"""Without an extra (ale-py, mujoco, optuna): listing recipes, ``--help`` and training every recipe whose
extra is installed work; training (or evaluating) a recipe whose env needs the missing extra is one
line naming it, before anything is written to ``--out``; so is ``engine-rl tune`` without optuna.

Each case runs ``python -m engine_rl`` in a new process where ``ale_py`` or ``mujoco`` cannot be
imported: a ``sitecustomize`` on ``PYTHONPATH`` puts first on ``sys.meta_path`` a finder raising
``ModuleNotFoundError`` for them, as Python does for a package that is not installed. The first
test checks that gymnasium then behaves as without the package (no Atari id registered; its MuJoCo
envs registered, and making one raises ``DependencyNotInstalled``).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine_rl.cli import main
from engine_rl.recipes import RECIPES
from engine_rl.run.checkpoint import InferenceState

ROOT = Path(__file__).resolve().parents[2]

BLOCKER = '''import sys

BLOCKED = {blocked!r}


class NotInstalled:
    """Imports of BLOCKED fail as those of a package that is not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, NotInstalled())
'''


def _run(tmp_path: Path, blocked: tuple[str, ...], args: list[str]) -> subprocess.CompletedProcess:
    """``python ARGS`` in ``tmp_path`` with ``blocked`` not importable."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(blocked)))
    path = os.pathsep.join(filter(None, [str(site), str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": path})


GYMNASIUM_VIEW = """
import gymnasium as gym
try:
    import ale_py
    print("ale_py imported")
except ModuleNotFoundError as err:
    print("no module", err.name)
print("Atari ids:", sum(spec.entry_point == "ale_py.env:AtariEnv" for spec in gym.registry.values()) > 0)
print("Hopper-v5 registered:", "Hopper-v5" in gym.registry)
try:
    gym.make("Hopper-v5").close()
    print("Hopper-v5 made")
except gym.error.DependencyNotInstalled as err:
    print("DependencyNotInstalled:", err)
"""


@pytest.mark.parametrize("blocked, expected", [
    (("ale_py",), ["no module ale_py", "Atari ids: False", "Hopper-v5 registered: True", "Hopper-v5 made"]),
    (("mujoco",), ["ale_py imported", "Atari ids: True", "Hopper-v5 registered: True",
                   'DependencyNotInstalled: MuJoCo is not installed, run `pip install "gymnasium[mujoco]"`']),
])
def test_gymnasium_behaves_as_without_the_blocked_package(blocked, expected, tmp_path):
    for package in ("ale_py", "mujoco"):
        pytest.importorskip(package, reason=f"{package} is not installed: nothing to block")
    res = _run(tmp_path, blocked, ["-c", GYMNASIUM_VIEW])
    assert (res.returncode, res.stdout.splitlines()) == (0, expected), res.stderr


ATARI = "needs the Atari extra: pip install engine_rl[atari] (ale-py)"
MUJOCO = "needs the MuJoCo extra: pip install engine_rl[mujoco]"
TUNE = "tune needs the [tune] extra: pip install 'engine_rl[tune]' (optuna, optuna-integration, matplotlib)"
SHORT_DQN = ["train", "dqn-cartpole", "--frames", "512", "--set", "learning_starts=256", "--set", "eval_episodes=2",
             "--no-progress"]

# id: (packages not importable, engine-rl arguments ({out}: a run folder, {ckpt}: an Atari run's inference
# checkpoint), exit status, stderr)
CASES = {
    "no ale_py: recipes": (("ale_py",), ["recipes"], 0, ""),
    "no ale_py: --help": (("ale_py",), ["--help"], 0, ""),
    "no ale_py: train --help": (("ale_py",), ["train", "--help"], 0, ""),
    "no ale_py: train dqn-cartpole": (("ale_py",), [*SHORT_DQN, "--out", "{out}"], 0, ""),
    "no ale_py: train ppo-atari": (("ale_py",), ["train", "ppo-atari", "--out", "{out}"], 2,
                                   f"engine-rl: error: PPOAtariConfig: env_id 'BreakoutNoFrameskip-v4' {ATARI}\n"),
    "no ale_py: train dqn-atari ALE/Pong-v5": (("ale_py",), ["train", "dqn-atari", "--set", "env_id=ALE/Pong-v5",
                                                             "--out", "{out}"], 2,
                                               f"engine-rl: error: DQNAtariConfig: env_id 'ALE/Pong-v5' {ATARI}\n"),
    "no ale_py: train qrdqn-atari": (("ale_py",), ["train", "qrdqn-atari", "--out", "{out}"], 2,
                                     f"engine-rl: error: QRDQNAtariConfig: env_id 'BreakoutNoFrameskip-v4' {ATARI}\n"),
    "no ale_py: train dqn-cartpole on an Atari id": (
        ("ale_py",), ["train", "dqn-cartpole", "--set", "env_id=Pong-v4", "--out", "{out}"], 2,
        f"engine-rl: error: DQNConfig: env_id 'Pong-v4' {ATARI}\n"),
    "no ale_py: eval an Atari checkpoint": (
        ("ale_py",), ["eval", "{ckpt}"], 2,
        "engine-rl: error: checkpoint {ckpt}: its recipe and config cannot be rebuilt here: PPOAtariConfig: env_id "
        f"'BreakoutNoFrameskip-v4' {ATARI}\n"),
    "no mujoco: recipes": (("mujoco",), ["recipes"], 0, ""),
    "no mujoco: --help": (("mujoco",), ["--help"], 0, ""),
    "no mujoco: train --help": (("mujoco",), ["train", "--help"], 0, ""),
    "no mujoco: train dqn-cartpole": (("mujoco",), [*SHORT_DQN, "--out", "{out}"], 0, ""),
    "no mujoco: train ppo-mujoco": (("mujoco",), ["train", "ppo-mujoco", "--out", "{out}"], 2,
                                    f"engine-rl: error: PPOMujocoConfig: env_id 'Hopper-v5' {MUJOCO}\n"),
    "no mujoco: train sac-mujoco": (("mujoco",), ["train", "sac-mujoco", "--out", "{out}"], 2,
                                    f"engine-rl: error: SACMujocoConfig: env_id 'HalfCheetah-v5' {MUJOCO}\n"),
    "no mujoco: train td3-mujoco": (("mujoco",), ["train", "td3-mujoco", "--out", "{out}"], 2,
                                    f"engine-rl: error: TD3MujocoConfig: env_id 'HalfCheetah-v5' {MUJOCO}\n"),
    "no mujoco: train sac-pendulum on Ant-v5": (("mujoco",), ["train", "sac-pendulum", "--set", "env_id=Ant-v5",
                                                              "--out", "{out}"], 2,
                                                f"engine-rl: error: SACConfig: env_id 'Ant-v5' {MUJOCO}\n"),
    "neither: recipes": (("ale_py", "mujoco"), ["recipes"], 0, ""),
    "no optuna: recipes": (("optuna", "optuna_integration"), ["recipes"], 0, ""),
    "no optuna: train dqn-cartpole": (("optuna", "optuna_integration"), [*SHORT_DQN, "--out", "{out}"], 0, ""),
    "no optuna: tune dqn-cartpole": (("optuna", "optuna_integration"),
                                     ["tune", "dqn-cartpole", "--trials", "2", "--out", "{out}"], 2,
                                     f"engine-rl: error: {TUNE}; No module named 'optuna_integration'\n"),
}


@pytest.fixture(scope="module")
def recipes_listing() -> str:
    """``engine-rl recipes`` with every extra this process has."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(["recipes"]) == 0
    return out.getvalue()


@pytest.mark.parametrize("case", CASES)
def test_without_an_extra(case, tmp_path, recipes_listing):
    blocked, args, status, stderr = CASES[case]
    out, ckpt = tmp_path / "run", tmp_path / "atari.pt"
    torch.save(InferenceState(torch.nn.Linear(1, 1), recipe="ppo-atari", config={}).state_dict(), ckpt)
    args = [arg.format(out=out, ckpt=ckpt) for arg in args]
    res = _run(tmp_path, blocked, ["-m", "engine_rl", *args])
    assert (res.returncode, res.stderr) == (status, stderr.format(ckpt=ckpt)), res.stdout[-2000:]
    if status:
        assert res.stdout == "" and not out.exists()  # refused before --out is written to
    elif args == ["recipes"]:  # every recipe and field, as with every extra installed
        assert res.stdout == recipes_listing
        assert [line for line in res.stdout.splitlines() if not line.startswith("  ")] == [
            f"{name}: {RECIPES[name].summary}" for name in sorted(RECIPES)]
    elif "--help" in args:
        assert res.stdout.startswith(f"usage: engine-rl {'train ' if 'train' in args else ''}")
    else:
        summary = json.loads(res.stdout)
        assert (summary["recipe"], summary["frames"], summary["stopped_early"]) == ("dqn-cartpole", 512, False)
        assert (out / "summary.json").is_file() and (out / "inference.pt").is_file()
