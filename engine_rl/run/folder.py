"""The run folder (``--out``): its checks, its lock, whole-file writes, and what a resume keeps.

:func:`open_run_folder` checks ``--out`` (not empty, not a file, creatable, writable), takes the
folder's :class:`~engine_rl.run.lock.RunLock` on rank 0 and checks a resumed run's config
against its ``config.json``. After a resume, :func:`drop_newer_checkpoints`,
:func:`track_files_on_disk` and :func:`drop_untracked_best` make the checkpoint rotation start
from the files on disk. Every problem is a :class:`RunError` naming the path and what is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

import ignite.distributed as idist
from ignite.handlers import Checkpoint

from engine_rl.collectors.env_factory import callable_name
from engine_rl.run.checkpoint import file_kind, list_checkpoints
from engine_rl.run.lock import RunLock, RunLockError

__all__ = [
    "RunError", "check_out", "check_resume_source", "check_same_config", "config_record", "drop_newer_checkpoints",
    "drop_untracked_best", "existing_or_none", "make_out", "nothing_to_resume", "open_run_folder", "read_config_json",
    "results_of", "track_files_on_disk", "truncate_metrics", "without_removed_fields", "write_text",
]


_CHECKPOINT = re.compile(r"^checkpoint_\d+\.pt$")


class RunError(ValueError):
    """The run cannot start as asked (a bad ``--out``, nothing to resume, a changed config, a
    folder in use by another run), or one of its files cannot be written; the message names the
    path or option and what is wrong."""


def config_record(name: str, config: Any) -> dict[str, Any]:
    """``{"recipe": name, field: value, ...}`` as JSON holds it (``config.json``, the inference
    checkpoints): tuples as lists, a callable (``make_env``) by its ``"module:function"`` name."""
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    return json.loads(json.dumps({"recipe": name, **fields}, default=_by_name))


def _by_name(value: Any) -> str:
    if callable(value):
        return callable_name(value)
    raise TypeError(f"a config value of type {type(value).__name__} has no JSON form: {value!r}")


def nothing_to_resume(out: Path) -> RunError:
    return RunError(f"--resume: {out} holds no run to resume (no config.json)")


#: Config fields a resumed run may change: where it trains, not what (``--resume --device cpu``
#: continues a GPU run on a CPU machine; ``--resume --ray-address`` joins another Ray cluster).
MOVABLE = ("device", "replay_device", "ray_address")

#: Config fields removed from the recipes, each with the value every run trained with before it
#: went (its default then). A stored config holding that value resumes: the run trained as the
#: recipes train now. Any other value is refused, naming the field (:func:`read_config_json`).
REMOVED_FIELDS = {"precision": "float32"}  # SAC/TD3's bfloat16 option (issue 38)


def read_config_json(out: Path) -> dict[str, Any]:
    """The JSON object in ``out/config.json``, as stored (data: nothing it names is imported) but
    for :data:`REMOVED_FIELDS` holding their old default, which are left out; a :class:`RunError`
    naming the file and what is wrong: missing, not a regular file, unreadable, not UTF-8, not
    valid JSON (where), not an object, a removed field set to anything but its old default."""
    path = out / "config.json"
    if not path.exists():
        raise nothing_to_resume(out)
    if not path.is_file():
        raise RunError(f"--resume: {path} is not a regular file ({file_kind(path)}); "
                       "a run's config.json is a JSON file")
    damaged = "it was cut off or edited: restore it, or start a new run in another --out"
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise RunError(f"--resume: {path} cannot be read ({err.strerror or err})") from err
    except UnicodeDecodeError as err:
        raise RunError(f"--resume: {path} is not UTF-8 text (byte {err.object[err.start]:#04x} at offset "
                       f"{err.start}); {damaged}") from None
    try:
        saved = json.loads(text)
    except json.JSONDecodeError as err:
        raise RunError(f"--resume: {path} is not valid JSON ({err.msg}: line {err.lineno} column {err.colno}); "
                       f"{damaged}") from None
    if not isinstance(saved, dict):
        raise RunError(f"--resume: {path} holds {_json_kind(saved)}, not a JSON object; {damaged}")
    return without_removed_fields(saved, source=f"--resume: {path}")


def without_removed_fields(saved: dict[str, Any], *, source: str) -> dict[str, Any]:
    """``saved`` without the :data:`REMOVED_FIELDS` that hold their old default; a :class:`RunError`
    (``source`` first) for one set to another value: that run trained in a way no recipe offers now.

    Examples:
        >>> without_removed_fields({"lr": 0.001, "precision": "float32"}, source="demo")
        {'lr': 0.001}
        >>> without_removed_fields({"precision": "bfloat16"}, source="demo")
        Traceback (most recent call last):
        ...
        engine_rl.run.folder.RunError: demo: precision='bfloat16' cannot resume: the precision field was removed from the recipes (only its old default, 'float32', resumes); start a new run in another --out
    """
    for key, default in REMOVED_FIELDS.items():
        if key in saved and saved[key] != default:
            raise RunError(f"{source}: {key}={saved[key]!r} cannot resume: the {key} field was removed from the "
                           f"recipes (only its old default, {default!r}, resumes); start a new run in another --out")
    return {k: v for k, v in saved.items() if k not in REMOVED_FIELDS}


def _json_kind(value: Any) -> str:
    names = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def check_same_config(out: Path, name: str, config: Any) -> None:
    path = out / "config.json"
    saved, now = read_config_json(out), config_record(name, config)
    # a field added to the recipe since the run was saved is no difference while it keeps its
    # default (the run trained with what the default does)
    defaults = json.loads(json.dumps({f.name: f.default for f in dataclasses.fields(config)
                                      if f.default is not dataclasses.MISSING}))
    diff = [k for k in sorted(set(saved) | set(now))
            if saved.get(k) != now.get(k) and not (k not in saved and k in defaults and now.get(k) == defaults[k])
            and k not in MOVABLE]
    if diff:
        changes = ", ".join(f"{k} ({saved.get(k)!r} -> {now.get(k)!r})" for k in diff)
        raise RunError(
            f"--resume: the config differs from {path}: {changes}; resume with the saved config "
            "(drop --frames/--seed/--set) or start a new run in another --out"
        )


def write_text(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all (``.NAME.partial``, then a rename); a failure is a
    :class:`RunError` naming the file and the OS's reason."""
    tmp = path.with_name(f".{path.name}.partial")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise RunError(f"{path}: cannot be written ({err.strerror or err})") from err


def truncate_metrics(path: Path, frames: int) -> int | None:
    """Keep the lines logged up to ``frames`` (what the checkpoint saw): the resumed run logs the rest.
    Returns the frames of the last whole line before the cut (None: no file or no line)."""
    if not path.is_file():
        return None
    keep, last = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break  # a line cut off by the kill
        last = int(record.get("frames", 0))
        if last <= frames:
            keep.append(line + "\n")
    write_text(path, "".join(keep))
    return last


def check_out(out_dir: str | Path) -> Path:
    """``out_dir`` as a path, if it can name a run folder: not empty, not a file, not under a file,
    not (under) a symbolic link to nothing (``mkdir`` would say "File exists")."""
    if not str(out_dir).strip():
        raise RunError(f"--out {str(out_dir)!r}: empty; name the folder for the run's files (e.g. runs/my-run)")
    out = Path(out_dir)
    for path in (out, *out.parents):
        if path.is_symlink() and not path.exists():
            where = "is" if path == out else f"is under {path}, which is"
            raise RunError(f"--out {out}: {where} a symbolic link to {os.readlink(path)}, which does not exist; "
                           "create that folder, or name another --out")
        if path.exists() and not path.is_dir():
            where = "is a file" if path == out else f"is under {path}, which is a file"
            raise RunError(f"--out {out}: {where}, not a folder; name a new or existing folder for the run's files")
    return out


def make_out(out: Path) -> None:
    """Create the run folder (and its parents); a failure or a read-only folder is a :class:`RunError`."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RunError(f"--out {out}: cannot create the folder ({err.strerror or err})") from err
    if not os.access(out, os.W_OK | os.X_OK):
        raise RunError(f"--out {out}: the folder is not writable (permission denied); use another --out")


def drop_newer_checkpoints(folder: Path, frames: int) -> None:
    """Delete the checkpoints of ``folder`` past ``frames``: the run resumed from an older one, so
    they belong to a continuation it replaces (and a plain ``--resume`` must not pick them)."""
    for path in list_checkpoints(folder):
        if int(path.stem.rsplit("_", 1)[1]) > frames:
            path.unlink(missing_ok=True)


def track_files_on_disk(checkpoint: Checkpoint, folder: Path, n_saved: int) -> None:
    """After a resume: ``checkpoint`` rotates the newest ``n_saved`` checkpoints of ``folder``, and
    its saver deletes the older ones after its next write."""
    files = list_checkpoints(folder)
    keep = files[-n_saved:]
    checkpoint.load_state_dict({"_saved": [(int(p.stem.rsplit("_", 1)[1]), p.name) for p in keep]})
    for path in files[: len(files) - len(keep)]:
        checkpoint.save_handler.remove(path.name)


def drop_untracked_best(best: Checkpoint) -> None:
    """After a resume: best-policy files the restored state does not name were written after the
    checkpoint (by the run that was interrupted); its saver deletes them after its next write.
    A name of the restored state whose file is gone keeps its score: the next better evaluation
    replaces it, as it would have in the uninterrupted run."""
    folder = Path(best.save_handler.dirname)
    named = {filename for _, filename in best.state_dict()["_saved"]}
    for path in sorted(folder.glob(f"{best.filename_prefix}_*.pt")):
        if path.name not in named:
            best.save_handler.remove(path.name)


def check_resume_source(out: Path, resume: bool | str | Path) -> None:
    """What ``--resume`` continues from is this run's: ``--resume PATH`` names a checkpoint file in
    ``out/checkpoints`` (another run's checkpoint would continue that run's state under this run's
    config, and the resume would delete this run's newer checkpoints); a plain ``--resume`` of a
    folder with no checkpoint would start the run over, so it is refused while the folder holds
    results that would be replaced (a kill before anything was logged starts over).
    Nothing is deleted before these checks pass."""
    ckpt_dir = out / "checkpoints"
    if not isinstance(resume, bool):
        path = Path(resume)
        if path.resolve().parent != ckpt_dir.resolve():
            raise RunError(
                f"--resume {path}: not a checkpoint of the run in {out} (its checkpoints are in {ckpt_dir}); "
                "a run continues from its own checkpoints only (to continue the run that wrote it, use that run's "
                "folder as --out)"
            )
        if not path.is_file() or not _CHECKPOINT.match(path.name):
            held = ", ".join(p.name for p in list_checkpoints(ckpt_dir)) or "none"
            raise RunError(f"--resume {path}: no such checkpoint (checkpoint_<frames>.pt files in {ckpt_dir}: {held})")
        return
    if list_checkpoints(ckpt_dir):
        return
    replaced = results_of(out)
    if replaced:
        raise RunError(
            f"--resume: {out} holds no checkpoint to continue from ({ckpt_dir} is empty or gone), so the run would "
            f"start over and replace {', '.join(replaced)}; drop --resume to start over (replacing them), "
            "or move them away, or use another --out"
        )


def results_of(out: Path) -> list[str]:
    """The files of ``out`` that a run starting over would replace: a non-empty ``metrics.jsonl``,
    ``summary.json``, ``inference.pt``, ``policy.pt``, the best policies (``best/*.pt``) and the
    videos (``videos/*.mp4``)."""
    found = []
    metrics = out / "metrics.jsonl"
    if metrics.is_file() and metrics.stat().st_size > 0:
        found.append(str(metrics))
    found += [str(out / n) for n in ("summary.json", "inference.pt", "policy.pt") if (out / n).is_file()]
    found += [str(p) for p in sorted((out / "best").glob("*.pt"))]
    found += [str(p) for p in sorted((out / "videos").glob("*.mp4"))]
    return found


def existing_or_none(path: str | Path | None) -> str | None:
    """``path`` as a string for ``summary.json`` if the file is there; else ``None`` (JSON null)."""
    return None if path is None or not Path(path).is_file() else str(path)


def open_run_folder(
    out_dir: str | Path, name: str, config: Any, resume: bool | str | Path
) -> tuple[Path, RunLock | None]:
    """Check and create the run folder; on rank 0, also take its lock (returned) and check the
    config against the saved one to resume. Raises :class:`RunError`, with the lock released."""
    lead = idist.get_rank() == 0  # writes the run's files
    out = check_out(out_dir)
    if resume and lead and not (out / "config.json").is_file():  # before creating a folder for nothing
        raise nothing_to_resume(out)
    make_out(out)
    if not lead:  # (other ranks may run on machines without config.json)
        return out, None
    lock = RunLock(out)
    try:
        lock.acquire()
    except RunLockError as err:
        raise RunError(str(err)) from err
    try:
        if resume:
            check_same_config(out, name, config)
            check_resume_source(out, resume)
    except BaseException:
        lock.release()
        raise
    return out, lock
