"""Checkpoints: the complete resumable state of a run, written atomically, read back safely.

- :func:`training_state` (defined in :mod:`engine_rl.run.state`) builds the ``to_save``
  mapping for Ignite's ``Checkpoint``: the trainer (counters), the objects you name (models,
  target nets, optimizers, LR schedulers, replay buffer, collector with its env state,
  normalizers), the stateful handlers attached to the trainer and to its evaluators (found
  automatically: ``EarlyStopping`` and best-``Checkpoint`` bests, ``ValidationRollout``,
  ``MetricsLogger``...), the trainer's ``state.metrics`` and the global RNG states (torch,
  numpy, python; CUDA when in use).
- :class:`AtomicDiskSaver` is Ignite's ``DiskSaver`` that writes ``.NAME.partial``, fsyncs and
  renames, so a kill during a write leaves the previous checkpoint in place; it refuses, before
  writing, any object that ``torch.load(..., weights_only=True)`` would refuse to read; rotation
  deletes an old file only once the new one is in place, and a file already gone is no error; a
  full disk or a permission error is a :class:`CheckpointError` naming the file and the reason.
- :class:`SafeCheckpoint` is Ignite's ``Checkpoint`` that writes nothing from a network or
  optimizer holding NaN/Inf (:func:`check_finite`) and keeps rotating the files on disk after a
  failed write; its errors name the previous checkpoint, which is intact.
- :func:`load_checkpoint` reads with ``weights_only=True`` and turns a missing, empty,
  truncated, corrupt (CRC-32) or unsafe file into a :class:`CheckpointError` naming the file and
  the problem; :func:`restore` loads it into objects, naming the entry that does not fit.
- :func:`latest_checkpoint` finds the newest ``checkpoint_<frames>.pt`` of a folder.
- :class:`InferenceState` is what an inference checkpoint holds: the evaluation policy's weights
  (normalizers inside it included), an optional separate normalizer, the recipe and its config.

Saving does not copy large tensors: ``state_dict()`` s return views (the replay buffer's rows
are views of its storage) and ``torch.save`` streams them to the file.

Examples:
    >>> import tempfile, torch
    >>> from ignite.engine import Events
    >>> from ignite.handlers import Checkpoint
    >>> from engine_rl.engine import RecordingEngine
    >>> trainer = RecordingEngine(lambda engine, batch: None)  # an Engine that lists its handlers
    >>> net = torch.nn.Linear(2, 1)
    >>> to_save = training_state(trainer, {"net": net, "optimizer": torch.optim.SGD(net.parameters(), lr=0.1)})
    >>> sorted(to_save)
    ['net', 'optimizer', 'rng', 'trainer', 'trainer_metrics']
    >>> folder = tempfile.mkdtemp()
    >>> _ = trainer.add_event_handler(Events.ITERATION_COMPLETED(every=2), Checkpoint(to_save, AtomicDiskSaver(folder)))
    >>> _ = trainer.run(range(5), max_epochs=1)
    >>> latest_checkpoint(folder).name
    'checkpoint_4.pt'
    >>> restore(to_save, latest_checkpoint(folder))
    >>> trainer.state.iteration
    4
"""

from __future__ import annotations

import re
import stat
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from ignite.handlers import Checkpoint

from engine_rl.engine import attached_objects
from engine_rl.run.checkpoint_writes import (
    INFERENCE_FORMAT,
    AtomicDiskSaver,
    CheckpointError,
    InferenceState,
    SafeCheckpoint,
    check_finite,
    check_weights_only,
)
from engine_rl.run.state import EngineMetrics, RNGState, training_state

__all__ = [
    "AtomicDiskSaver",
    "CheckpointError",
    "EngineMetrics",
    "INFERENCE_FORMAT",
    "InferenceState",
    "RNGState",
    "SafeCheckpoint",
    "attached_objects",
    "check_finite",
    "check_weights_only",
    "file_kind",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "load_inference",
    "remove_partial_files",
    "restore",
    "training_state",
]


def remove_partial_files(folder: str | Path) -> list[Path]:
    """Delete the ``.*.partial`` files an interrupted :class:`AtomicDiskSaver` left; return them."""
    folder = Path(folder)
    removed = sorted(folder.glob(".*.partial")) if folder.is_dir() else []
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


# -- reading -------------------------------------------------------------------------------------


def file_kind(path: str | Path) -> str:
    """What ``path`` is when it is not a regular file, for messages: ``"a folder"``, ``"a FIFO"``,
    ``"a character device"``...

    Examples:
        >>> file_kind("/dev/null")
        'a character device'
    """
    mode = Path(path).stat().st_mode
    kinds = [(stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file")]
    return next((name for test, name in kinds if test(mode)), "not a regular file")
def load_checkpoint(path: str | Path, *, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint with ``torch.load(..., weights_only=True)``, checking it first.

    Raises:
        CheckpointError: naming the file and the problem: missing, empty, truncated (or not a
            ``torch.save`` zip archive), corrupt (a member fails its CRC-32 check), holding
            objects ``weights_only`` refuses, or not a dict.

    Examples:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "ck.pt"
        >>> torch.save({"w": torch.ones(3)}, path)
        >>> load_checkpoint(path)["w"].tolist()
        [1.0, 1.0, 1.0]
        >>> _ = path.write_bytes(path.read_bytes()[:100])
        >>> load_checkpoint(path)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        engine_rl.run.checkpoint_writes.CheckpointError: checkpoint .../ck.pt: truncated or not a checkpoint (not a complete torch.save zip archive: File is not a zip file); ...
    """
    path = Path(path)
    if not path.is_file():  # a FIFO would block the read, a device never end it
        what = "no such file" if not path.exists() else f"is not a regular file ({file_kind(path)})"
        raise CheckpointError(f"checkpoint {path}: {what}")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"checkpoint {path}: empty file (0 bytes); it was cut off before anything was written")
    advice = "use an earlier checkpoint (the folder keeps the last few) or delete this one"
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        raise CheckpointError(
            f"checkpoint {path}: truncated or not a checkpoint (not a complete torch.save zip archive: {err}); "
            f"{size} bytes; {advice}"
        ) from err
    if bad is not None:
        raise CheckpointError(f"checkpoint {path}: corrupt: member {bad!r} fails its CRC-32 check; {advice}")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 -- every failure becomes one clear error
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if "weights only" in str(err).lower() or "weights_only" in str(err):
            detail = [line for line in str(err).splitlines() if "GLOBAL" in line or "Unsupported" in line]
            raise CheckpointError(
                f"checkpoint {path}: holds objects that torch.load(weights_only=True) refuses to unpickle "
                f"({(detail or [first])[0].strip()}); engine_rl checkpoints hold only tensors, numbers, strings and "
                "plain containers, so this file was not written by engine_rl or is corrupt"
            ) from err
        raise CheckpointError(f"checkpoint {path}: cannot be read ({type(err).__name__}: {first}); {advice}") from err
    if not isinstance(state, Mapping):
        raise CheckpointError(f"checkpoint {path}: holds a {type(state).__name__}, expected a dict of state_dicts")
    return dict(state)


def restore(to_load: Mapping[str, Any], checkpoint: str | Path | Mapping[str, Any], *, strict: bool = True) -> None:
    """Load a checkpoint (a path, read with :func:`load_checkpoint`, or a loaded dict) into objects.

    Each entry goes through Ignite's ``Checkpoint.load_objects``; a failure names the file, the
    entry and the object.

    Args:
        to_load: the mapping the checkpoint was saved from (e.g. :func:`training_state`'s).
        checkpoint: path or dict.
        strict: also fail if the checkpoint holds entries ``to_load`` has no object for (a
            different recipe or config).

    Raises:
        CheckpointError: see :func:`load_checkpoint`; or an entry missing, unexpected or not fitting.
    """
    where = f"checkpoint {checkpoint}" if isinstance(checkpoint, (str, Path)) else "checkpoint"
    state = load_checkpoint(checkpoint) if isinstance(checkpoint, (str, Path)) else checkpoint
    missing = [k for k in to_load if k not in state]
    extra = [k for k in state if k not in to_load]
    if missing or (strict and extra):
        raise CheckpointError(
            f"{where}: entries do not match this setup: missing {missing}, unexpected {extra if strict else []} "
            f"(it holds {sorted(state)}); was it written by a different recipe, config or set of handlers?"
        )
    for key, obj in to_load.items():
        try:
            Checkpoint.load_objects({key: obj}, {key: state[key]})
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(
                f"{where}: entry {key!r} does not load into {type(obj).__name__}: {type(err).__name__}: {err}"
            ) from err


_STEP = re.compile(r"^(?P<prefix>.+)_(?P<step>\d+)\.pt$")


def list_checkpoints(folder: str | Path, *, prefix: str = "checkpoint") -> list[Path]:
    """``{prefix}_<step>.pt`` files of ``folder``, oldest step first (partial files ignored)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _STEP.match(path.name)
        if match and match["prefix"] == prefix and path.is_file():
            found.append((int(match["step"]), path))
    return [path for _, path in sorted(found)]


def latest_checkpoint(folder: str | Path, *, prefix: str = "checkpoint") -> Path | None:
    """The ``{prefix}_<step>.pt`` file with the highest step in ``folder`` (``None`` if none).

    Only complete files have such a name: :class:`AtomicDiskSaver` writes ``.NAME.partial`` and
    renames it when it is complete, and deletes older files only after that, so the newest
    complete checkpoint wins. (A file damaged since is not skipped: :func:`load_checkpoint` names it.)
    """
    found = list_checkpoints(folder, prefix=prefix)
    return found[-1] if found else None


# -- inference -----------------------------------------------------------------------------------
def load_inference(path: str | Path) -> dict[str, Any]:
    """Read an inference checkpoint (``{"format", "recipe", "config", "policy", "normalizer"}``).

    Raises:
        CheckpointError: see :func:`load_checkpoint`; or the file is not an inference checkpoint.
    """
    state = load_checkpoint(path)
    if state.get("format") != INFERENCE_FORMAT:
        kind = "a full training checkpoint" if "trainer" in state else "not an inference checkpoint"
        raise CheckpointError(
            f"checkpoint {path}: is {kind} (entries {sorted(map(str, state))[:8]}); expected format "
            f"{INFERENCE_FORMAT!r}: use RUN/inference.pt or a file of RUN/best/"
        )
    for key, kind in (("recipe", str), ("config", dict)):
        if not isinstance(state.get(key), kind):
            raise CheckpointError(f"checkpoint {path}: its {key!r} entry is {type(state.get(key)).__name__}, "
                                  f"not a {kind.__name__}; the file was not written by engine_rl or was altered")
    return state
