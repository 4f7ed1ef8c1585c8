"""A stored config is data: ``engine-rl eval CHECKPOINT`` and ``engine-rl train --resume`` never
import or call code that a checkpoint's config or a run folder's ``config.json`` names (``make_env``,
an ``env_id`` with a module prefix) unless the user names it again (``--set``) or passes
``--trust-config``; a config file or checkpoint that cannot be used is one line naming the file.

Each crafted case would create MARKER if its code ran (a shell command, or importing a planted
module); it is run through ``engine_rl.cli.main`` and through ``python -m engine_rl``.
"""

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch

from engine_rl.cli import main
from engine_rl.commands.eval import evaluate_checkpoint
from engine_rl.run.checkpoint import InferenceState
from engine_rl.run.driver import load_run_config, make_config, train
from engine_rl.run.folder import RunError, config_record

TESTS = Path(__file__).resolve().parents[1]  # support.user_envs, for the processes started here
RECIPE = "dqn-cartpole"
CORRIDOR = "support.user_envs:make_corridor"  # harmless user code
CORRIDOR_ID = "support.user_envs:engine_rl_tests/Corridor-v0"


def _planted_module(folder: Path, marker: Path) -> str:
    """A module in ``folder`` that creates ``marker`` when imported; its (new) name."""
    name = f"planted_{uuid.uuid4().hex[:8]}"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).touch()\n")
    return name


# name -> (the crafted fields, given the marker file and the planted module's name;
#          what the error names; the field to name again)
CODE = {
    "subprocess:getoutput": (lambda m, mod: {"make_env": "subprocess:getoutput", "env_kwargs": {"cmd": f"touch {m}"}},
                             "make_env 'subprocess:getoutput' called with env_kwargs {{'cmd': 'touch {m}'}}",
                             "make_env=subprocess:getoutput"),
    "os:system": (lambda m, mod: {"make_env": "os:system", "env_kwargs": {"command": f"touch {m}"}},
                  "make_env 'os:system' called with env_kwargs {{'command': 'touch {m}'}}", "make_env=os:system"),
    "subprocess:run shell": (lambda m, mod: {"make_env": "subprocess:run",
                                             "env_kwargs": {"args": f"touch {m}", "shell": True}},
                             "make_env 'subprocess:run' called with env_kwargs {{'args': 'touch {m}', 'shell': True}}",
                             "make_env=subprocess:run"),
    "env_id module": (lambda m, mod: {"env_id": f"{mod}:Env-v0"},
                      "env_id '{mod}:Env-v0', which imports module '{mod}'", "env_id={mod}:Env-v0"),
}


@pytest.fixture
def plant(tmp_path, monkeypatch):
    """``(marker, module name)``: the planted module is importable here and in child processes."""
    marker = tmp_path / "MARKER"
    module = _planted_module(tmp_path / "plant", marker)
    monkeypatch.syspath_prepend(str(tmp_path / "plant"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path / "plant"), str(TESTS),
                                                                    os.environ.get("PYTHONPATH")])))
    yield marker, module
    sys.modules.pop(module, None)


def _stored(fields: dict) -> dict:
    """A whole config record of RECIPE (as config.json and inference checkpoints hold it) with ``fields``."""
    return {**config_record(RECIPE, make_config(RECIPE)), **fields}


def _craft(kind: str, where: Path, fields: dict) -> Path:
    """A crafted inference checkpoint (``eval``) or run folder (``resume``) holding ``fields``; its path."""
    record = _stored(fields)
    where.mkdir(exist_ok=True)
    if kind == "eval":
        path = where / "inference.pt"
        state = InferenceState(torch.nn.Linear(1, 1), recipe=record.pop("recipe"), config=record).state_dict()
        torch.save(state, path)
        return path
    (where / "config.json").write_text(json.dumps(record, indent=2))
    return where


def _argv(kind: str, path: Path) -> list[str]:
    if kind == "eval":
        return ["eval", str(path)]
    return ["train", RECIPE, "--resume", "--no-progress", "--out", str(path)]


def _run(argv: list[str], how: str, capsys) -> tuple[int, str]:
    """Exit status and stderr of ``engine-rl ARGV`` in this process (``main``) or a new one."""
    if how == "main":
        status = main(argv)
        return status, capsys.readouterr().err
    res = subprocess.run([sys.executable, "-m", "engine_rl", *argv], capture_output=True, text=True, timeout=300)
    return res.returncode, res.stderr


@pytest.mark.parametrize("how", ["main", "process"])
@pytest.mark.parametrize("kind", ["eval", "resume"])
@pytest.mark.parametrize("case", sorted(CODE))
def test_code_named_by_a_stored_config_never_runs(case, kind, how, tmp_path, plant, capsys):
    marker, module = plant
    fields, names, again = (part(marker, module) if callable(part) else part.format(m=marker, mod=module)
                            for part in CODE[case])
    path = _craft(kind, tmp_path / "crafted", fields)
    status, err = _run(_argv(kind, path), how, capsys)
    if kind == "eval":
        source, hint = f"checkpoint {path}: its config", "pass --trust-config if you trust this file"
    else:
        source = f"--resume: {path / 'config.json'}"
        hint = f"pass --set {again} again, or --trust-config if you trust this file"
    assert not marker.exists(), "the stored config's code ran"
    assert module not in sys.modules
    assert (status, err) == (2, f"engine-rl: error: {source} names code to run ({names}); "
                                f"a stored config never runs code by itself: {hint}\n")


def test_both_fields_are_named_and_naming_one_again_leaves_the_other_refused(tmp_path, plant, capsys):
    marker, module = plant
    run = _craft("resume", tmp_path / "crafted", {"make_env": "os:system", "env_kwargs": {"command": f"touch {marker}"},
                                                  "env_id": f"{module}:Env-v0"})
    argv = _argv("resume", run)
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"engine-rl: error: --resume: {run}/config.json names code to run (make_env 'os:system' called with env_kwargs "
        f"{{'command': 'touch {marker}'}}; env_id '{module}:Env-v0', which imports module '{module}'); a stored config "
        f"never runs code by itself: pass --set make_env=os:system --set env_id={module}:Env-v0 again, "
        "or --trust-config if you trust this file\n")
    assert main([*argv, "--set", "make_env=os:system"]) == 2
    assert f"names code to run (env_id '{module}:Env-v0', which imports module '{module}')" in capsys.readouterr().err
    assert not marker.exists() and module not in sys.modules


def test_another_value_named_on_resume_replaces_the_stored_code_which_never_runs(tmp_path, plant, capsys):
    """``--set make_env=MINE`` on a folder whose config.json names other code: the run is refused as a
    changed config (mine differs from the stored one), and the stored code is never touched."""
    marker, _ = plant
    run = _craft("resume", tmp_path / "crafted", {"make_env": "os:system"})
    assert main([*_argv("resume", run), "--set", f"make_env={CORRIDOR}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"engine-rl: error: --resume: the config differs from {run}/config.json: "
                          f"make_env ('os:system' -> '{CORRIDOR}')") and err.count("\n") == 1, err
    assert not marker.exists()


def test_the_python_api_refuses_stored_code_too(tmp_path, plant):
    marker, module = plant
    checkpoint = _craft("eval", tmp_path, {"make_env": "os:system", "env_kwargs": {"command": f"touch {marker}"}})
    run = _craft("resume", tmp_path / "run", {"env_id": f"{module}:Env-v0"})
    with pytest.raises(ValueError, match=r"its config names code to run \(make_env 'os:system'"):
        evaluate_checkpoint(checkpoint)
    with pytest.raises(ValueError, match=r"config.json names code to run \(env_id 'planted_"):
        load_run_config(run)
    assert not marker.exists() and module not in sys.modules


# -- the same code, named by the user: runs -----------------------------------------------------

QUICK = ["--frames", "512", "--set", "learning_starts=256", "--set", "eval_episodes=2", "--no-progress"]


@pytest.fixture(scope="module")
def paused_runs(tmp_path_factory):
    """Runs of the user's own env (a make_env, and an env_id registered by its module's import),
    paused at half their frames: ``{field: run folder}``."""
    root = tmp_path_factory.mktemp("runs")
    runs = {}
    for field, value in (("make_env", CORRIDOR), ("env_id", CORRIDOR_ID)):
        out = root / field
        code = main(["train", RECIPE, *QUICK, "--set", f"{field}={value}", "--until-frames", "256", "--out", str(out)])
        assert code == 0
        runs[field] = out
    return runs


@pytest.mark.parametrize("field", ["make_env", "env_id"])
@pytest.mark.parametrize("how", ["named again", "--trust-config"])
def test_a_resume_runs_the_code_the_user_names_again_or_trusts(field, how, paused_runs, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(paused_runs[field], out)
    value = CORRIDOR if field == "make_env" else CORRIDOR_ID
    extra = ["--set", f"{field}={value}"] if how == "named again" else ["--trust-config"]
    assert main(["train", RECIPE, "--resume", "--no-progress", "--out", str(out), *extra]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["frames"] == 512 and summary["resumed_from"].endswith("checkpoint_256.pt")


@pytest.mark.parametrize("field", ["make_env", "env_id"])
def test_eval_runs_the_code_of_a_trusted_checkpoint_only(field, paused_runs, capsys):
    checkpoint = paused_runs[field] / "inference.pt"
    if not checkpoint.is_file():  # a paused run writes its inference files at the end
        checkpoint = sorted((paused_runs[field] / "best").glob("*.pt"))[-1]
    assert main(["eval", str(checkpoint)]) == 2
    assert "names code to run" in capsys.readouterr().err
    assert main(["eval", str(checkpoint), "--trust-config", "--episodes", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 2
    assert evaluate_checkpoint(checkpoint, episodes=2, trust_config=True)["episodes"] == 2


def test_registered_ids_need_no_trust(tmp_path, capsys):
    """A stored config naming a registered gymnasium id (and no make_env) evaluates as before."""
    path = tmp_path / "inference.pt"
    torch.save(InferenceState(torch.nn.Linear(1, 1), recipe=RECIPE, config={"env_id": "Acrobot-v1"}).state_dict(), path)
    assert main(["eval", str(path)]) == 1  # rebuilt (Acrobot's policy), then the Linear(1, 1) weights do not fit it
    assert "the policy does not load into recipe 'dqn-cartpole'" in capsys.readouterr().err


def test_trust_config_goes_with_resume(capsys):
    assert main(["train", RECIPE, "--trust-config"]) == 2
    assert capsys.readouterr().err == (
        "engine-rl: error: --trust-config goes with --resume (it trusts the code a run folder's config.json names); "
        "without --resume the config comes from this command line\n")


# -- a config.json or checkpoint that cannot be used: one line naming the file ---------------------

DAMAGED = "it was cut off or edited: restore it, or start a new run in another --out"
BAD_CONFIG = {  # name -> (what config.json is, the message after "--resume: RUN/config.json ")
    "truncated": (b'{"recipe": "dqn-cartpole", "lr"', f"is not valid JSON (Expecting ':' delimiter: line 1 column 32); "
                                                      f"{DAMAGED}"),
    "empty": (b"", f"is not valid JSON (Expecting value: line 1 column 1); {DAMAGED}"),
    "a list": (b'[{"recipe": "dqn-cartpole"}]', f"holds a list, not a JSON object; {DAMAGED}"),
    "a number": (b"3", f"holds a number, not a JSON object; {DAMAGED}"),
    "not UTF-8": (b'{"recipe": "dqn-cartpole", "env_id": "\xff"}',
                  f"is not UTF-8 text (byte 0xff at offset 38); {DAMAGED}"),
    "a folder": (None, "is not a regular file (a folder); a run's config.json is a JSON file"),
    "no recipe": (b'{"seed": 1}', "names no recipe (its 'recipe' entry is None)"),
}


@pytest.mark.parametrize("how", ["main", "process"])
@pytest.mark.parametrize("case", sorted(BAD_CONFIG))
def test_a_config_json_that_cannot_be_used_is_one_line_naming_it(case, how, tmp_path, capsys):
    content, message = BAD_CONFIG[case]
    run = tmp_path / "run"
    run.mkdir()
    if content is None:
        (run / "config.json").mkdir()
    else:
        (run / "config.json").write_bytes(content)
    status, err = _run(_argv("resume", run), how, capsys)
    assert (status, err) == (2, f"engine-rl: error: --resume: {run}/config.json {message}\n")


def test_a_damaged_config_json_is_named_when_python_resumes_with_its_own_config(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"recipe": ')
    with pytest.raises(RunError, match=rf"^--resume: {run}/config.json is not valid JSON \(Expecting value: line 1 "
                                       r"column 12\); it was cut off"):
        train(RECIPE, make_config(RECIPE), run, resume=True, progress=False)


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo.pt"
    os.mkfifo(path)
    return path


BAD_CHECKPOINT = {  # name -> (the path, given tmp_path; the message after "checkpoint PATH: ")
    "/dev/zero": (lambda tmp: Path("/dev/zero"), "is not a regular file (a character device)"),
    "a FIFO": (lambda tmp: tmp / "fifo.pt", "is not a regular file (a FIFO)"),
    "a folder without inference.pt": (lambda tmp: tmp, "a folder without inference.pt; name an inference checkpoint "
                                                       "(RUN/inference.pt, RUN/best/*.pt) or a run folder holding "
                                                       "inference.pt"),
    "config a list": (lambda tmp: tmp / "list.pt", "its 'config' entry is list, not a dict; the file was not written "
                                                   "by engine_rl or was altered"),
}


@pytest.mark.parametrize("how", ["main", "process"])
@pytest.mark.parametrize("case", sorted(BAD_CHECKPOINT))
def test_eval_of_a_file_that_is_no_checkpoint_is_one_line_naming_it(case, how, tmp_path, fifo, capsys):
    state = InferenceState(torch.nn.Linear(1, 1), recipe=RECIPE, config={}).state_dict()
    torch.save({**state, "config": [1, 2]}, tmp_path / "list.pt")
    make_path, message = BAD_CHECKPOINT[case]
    path = make_path(tmp_path)
    status, err = _run(["eval", str(path)], how, capsys)
    assert (status, err) == (1, f"engine-rl: error: checkpoint {path}: {message}\n")
