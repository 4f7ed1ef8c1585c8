"""Writing checkpoints safely: :class:`AtomicDiskSaver` (partial file, fsync, rename; rotation
that deletes an old file only once the new one is in place) and :class:`SafeCheckpoint`
(Ignite's ``Checkpoint`` that writes nothing from NaN/Inf weights, :func:`check_finite`).
:mod:`engine_rl.run.checkpoint` re-exports everything here; see its docstring for the whole story.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import torch
from ignite.engine import Engine
from ignite.handlers import Checkpoint, DiskSaver

__all__ = [
    "INFERENCE_FORMAT", "AtomicDiskSaver", "CheckpointError", "InferenceState", "SafeCheckpoint", "check_finite",
    "check_weights_only",
]

#: ``format`` entry of an inference checkpoint.
INFERENCE_FORMAT = "engine_rl.inference/1"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read; the message names the file and the problem."""


# -- writing -------------------------------------------------------------------------------------
_PLAIN = (int, float, bool, str, bytes, type(None), torch.dtype, torch.device, torch.Size, complex)
_TENSORS = (torch.Tensor, torch.nn.Parameter)


def check_weights_only(obj: Any, *, where: str = "checkpoint") -> None:
    """Raise :class:`CheckpointError` if ``obj`` holds anything ``torch.load(weights_only=True)``
    refuses: only tensors, numbers, strings, ``None`` and plain dicts/lists/tuples pass.

    Examples:
        >>> check_weights_only({"w": torch.zeros(2), "steps": [1, 2.0, "x", None]})
        >>> import numpy as np
        >>> check_weights_only({"opt": {"lr": np.float64(0.1)}})
        Traceback (most recent call last):
        ...
        engine_rl.run.checkpoint_writes.CheckpointError: checkpoint: ['opt']['lr'] is a numpy.float64, which torch.load(weights_only=True) refuses; state_dicts must hold only tensors, numbers, strings and plain dicts/lists/tuples
    """
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        path, value = stack.pop()
        kind = type(value)
        if kind in _PLAIN or kind in _TENSORS:
            continue
        if kind in (dict, OrderedDict):
            stack.extend((f"{path}[{k!r}]", v) for k, v in value.items())
            bad = [k for k in value if type(k) not in (str, int, float, bool, tuple)]
            if not bad:
                continue
            value, path = bad[0], f"{path} key {bad[0]!r}"
        elif kind in (list, tuple):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
            continue
        name = f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")
        raise CheckpointError(
            f"{where}: {path or 'the object'} is a {name}, which torch.load(weights_only=True) refuses; "
            "state_dicts must hold only tensors, numbers, strings and plain dicts/lists/tuples"
        )


def _os_error(err: BaseException) -> OSError | None:
    """The first ``OSError`` in ``err``'s chain: ``torch.save`` reports a failed write as
    ``RuntimeError: [enforce fail at inline_container.cc:...] unexpected pos``, with the
    ``OSError`` (``No space left on device``) as its context."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError):
            return current
        current = current.__cause__ or current.__context__
    return None


def _write_failure(err: BaseException) -> str | None:
    """Why a write failed, if ``err`` is a failed write (not a bug in an object being saved)."""
    os_error = _os_error(err)
    if os_error is not None:
        return os_error.strerror or str(os_error)
    if isinstance(err, RuntimeError) and ("inline_container" in str(err) or "PytorchStreamWriter" in str(err)):
        return str(err).strip().splitlines()[0]
    return None


class AtomicDiskSaver(DiskSaver):
    """Ignite's ``DiskSaver``, writing each checkpoint to ``.NAME.partial`` in the same folder,
    then ``fsync``, an atomic rename and an ``fsync`` of the folder; checked with
    :func:`check_weights_only` first.

    A process killed mid-write leaves the previous checkpoints untouched and at most a
    ``.*.partial`` file, which :func:`latest_checkpoint` ignores (and :func:`remove_partial_files`
    deletes). The folder is created if needed and may hold files already.

    Rotation never leaves fewer complete files than it keeps: :meth:`remove` (which Ignite's
    ``Checkpoint`` calls for the oldest file *before* writing the new one) only marks the file, and
    it is deleted once the next write is durably in place; a file that is already gone is no error.
    A failed write (a full disk, no permission) raises :class:`CheckpointError` naming the file and
    the OS's reason, removes its partial file, and keeps the marked files.

    Args:
        dirname: the folder.
        require_empty: refuse a folder that already holds ``.pt`` files.

    Examples:
        >>> import tempfile
        >>> saver = AtomicDiskSaver(tempfile.mkdtemp())
        >>> saver({"w": torch.zeros(1)}, "a.pt"); saver.remove("a.pt"); saver.remove("gone.pt")
        >>> sorted(p.name for p in Path(saver.dirname).iterdir())  # a.pt waits for the next write
        ['a.pt']
        >>> saver({"w": torch.ones(1)}, "b.pt")
        >>> sorted(p.name for p in Path(saver.dirname).iterdir())
        ['b.pt']
    """

    def __init__(self, dirname: str | Path, *, require_empty: bool = False) -> None:
        super().__init__(str(dirname), atomic=True, create_dir=True, require_empty=require_empty)
        #: files :meth:`remove` marked, deleted after the next completed write
        self.to_remove: list[str] = []

    def __call__(self, checkpoint: Mapping, filename: str, metadata: Mapping | None = None) -> None:
        if self.save_on_rank != idist.get_rank():
            return
        path = Path(self.dirname) / filename
        try:
            check_weights_only(checkpoint, where=f"checkpoint {path}")
            self._write(checkpoint, path)
        except BaseException:
            self.to_remove.clear()  # nothing new is in place: the old files stay
            raise
        left = []
        for name in self.to_remove:
            if name == filename:  # a file written again under its own name was just replaced
                continue
            try:
                (Path(self.dirname) / name).unlink(missing_ok=True)
            except OSError:  # an extra old file is harmless: tried again after the next write
                left.append(name)
        self.to_remove = left

    def _write(self, checkpoint: Mapping, path: Path) -> None:
        tmp = path.with_name(f".{path.name}.partial")
        try:
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException as err:
            tmp.unlink(missing_ok=True)
            reason = _write_failure(err) if isinstance(err, Exception) else None
            if reason is None:  # an interrupt, or a bug in an object being saved: as it is
                raise
            raise CheckpointError(f"checkpoint {path}: cannot be written ({reason}); the partial file was removed") from err
        try:  # make the rename itself durable
            fd = os.open(self.dirname, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:  # some file systems cannot fsync a folder; the file itself is synced
            pass

    def remove(self, filename: str) -> None:
        """Mark ``filename`` for deletion after the next completed write (see the class)."""
        if self.save_on_rank == idist.get_rank() and filename not in self.to_remove:
            self.to_remove.append(filename)


def _checked_tensors(obj: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The floating tensors :func:`check_finite` looks at in ``obj``, by name."""
    if isinstance(obj, InferenceState):
        obj = obj.policy
    if isinstance(obj, torch.nn.Module):
        items: Iterable[tuple[str, Any]] = obj.state_dict().items()
    elif isinstance(obj, torch.optim.Optimizer):
        items = (
            (f"state[{index}][{name!r}]", value)
            for index, state in obj.state_dict()["state"].items()
            for name, value in state.items()
        )
    else:
        return
    for name, value in items:
        if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()):
            yield name, value


def check_finite(objects: Mapping[str, Any], *, where: str = "checkpoint") -> None:
    """Raise :class:`CheckpointError` if a network or optimizer in ``objects`` holds a NaN or Inf.

    Looked at: every floating tensor of the ``state_dict`` of each ``nn.Module`` (parameters and
    buffers: target nets and normalizers inside a policy included), of an :class:`InferenceState`'s
    policy, and of each optimizer's per-parameter state (``exp_avg``, ...). Other entries (replay
    buffer, collector, RNG, counters, metrics) are not: they may hold non-finite data legitimately.

    Examples:
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 2))
        >>> check_finite({"qnet": net})
        >>> with torch.no_grad():
        ...     net[0].weight[0, 0] = float("nan")
        >>> check_finite({"qnet": net}, where="checkpoint at frames 512")
        Traceback (most recent call last):
        ...
        engine_rl.run.checkpoint_writes.CheckpointError: checkpoint at frames 512: not written: entry 'qnet' holds non-finite values in '0.weight' (1 NaN, 0 Inf of 4 values); the training state went non-finite before this checkpoint
    """
    for key, obj in objects.items():
        for name, value in _checked_tensors(obj):
            if not bool(torch.isfinite(value).all()):
                nan, inf = int(torch.isnan(value).sum()), int(torch.isinf(value).sum())
                raise CheckpointError(
                    f"{where}: not written: entry {key!r} holds non-finite values in {name!r} "
                    f"({nan} NaN, {inf} Inf of {value.numel()} values); the training state went non-finite "
                    "before this checkpoint"
                )


class SafeCheckpoint(Checkpoint):
    """Ignite's ``Checkpoint`` that keeps the previous checkpoint when it cannot write a good new one.

    - Before each write, the networks and optimizers of ``to_save`` must be finite
      (:func:`check_finite`); a NaN or Inf raises :class:`CheckpointError` naming the entry, the
      tensor and the step, and nothing is written or removed.
    - A write that fails with :class:`CheckpointError` (:class:`AtomicDiskSaver`: a full disk, no
      permission) leaves the list of saved files as it was, so rotation goes on with the files on disk.

    Either error ends with the previous checkpoint written, which is intact. With an
    :class:`AtomicDiskSaver`, rotation deletes the oldest file only after the new one is in place.

    Args:
        *args: as Ignite's ``Checkpoint`` (``to_save``, ``save_handler``, ``n_saved``, ...).
        step_name: what the global step counts, for messages (``"frames"`` in the recipes' runs).

    Examples:
        >>> import tempfile
        >>> from ignite.engine import Engine
        >>> net = torch.nn.Linear(1, 1)
        >>> trainer = Engine(lambda engine, batch: None)
        >>> saver = AtomicDiskSaver(tempfile.mkdtemp())
        >>> checkpoint = SafeCheckpoint({"net": net}, saver, n_saved=1)
        >>> trainer.state.iteration = 1
        >>> checkpoint(trainer)
        >>> with torch.no_grad():
        ...     _ = net.bias.fill_(float("inf"))
        >>> trainer.state.iteration = 2
        >>> checkpoint(trainer)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        engine_rl.run.checkpoint_writes.CheckpointError: checkpoint at step 2: not written: entry 'net' holds non-finite values in 'bias' (0 NaN, 1 Inf of 1 values); ...; the previous checkpoint, .../net_1.pt, is intact
    """

    def __init__(self, *args: Any, step_name: str = "step", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.step_name = step_name
        self._engine: Engine | None = None

    def __call__(self, engine: Engine, *args: Any, **kwargs: Any) -> None:
        saved, previous = list(self._saved), self.last_checkpoint
        self._engine = engine
        try:
            super().__call__(engine, *args, **kwargs)
        except CheckpointError as err:
            self._saved = saved  # nothing new is in place and nothing was deleted
            if previous is not None and Path(previous).is_file():
                kept = f"the previous checkpoint, {previous}, is intact"
            else:
                folder = getattr(self.save_handler, "dirname", None)
                kept = "nothing was changed" + (f" in {folder}" if folder is not None else "")
            raise CheckpointError(f"{err}; {kept}") from err
        finally:
            self._engine = None

    def _setup_checkpoint(self) -> dict[str, Any]:  # Ignite calls it only when it is about to write
        engine = self._engine
        if engine is not None:
            if self.global_step_transform is not None:
                step = self.global_step_transform(engine, engine.last_event_name)
            else:
                step = engine.state.iteration
            prefix = f"{self.filename_prefix} " if self.filename_prefix else ""
            check_finite(self.to_save or {}, where=f"{prefix}checkpoint at {self.step_name} {step}")
        else:
            check_finite(self.to_save or {})
        return super()._setup_checkpoint()


class InferenceState:
    """What an inference checkpoint holds, as a stateful object for ``Checkpoint``: the policy's
    weights (with any normalizer it contains), an optional separate normalizer, and the recipe
    name and config that rebuild the policy (plain values only).

    ``Checkpoint({"policy": InferenceState(...)}, ...)`` writes its ``state_dict`` as the file's
    whole content (Ignite unwraps a single entry); :func:`load_inference` reads it back.
    """

    def __init__(
        self,
        policy: torch.nn.Module,
        *,
        normalizer: Any = None,
        recipe: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.policy = policy
        self.normalizer = normalizer
        self.recipe = recipe
        self.config = dict(config or {})

    def state_dict(self) -> dict[str, Any]:
        return {
            "format": INFERENCE_FORMAT,
            "recipe": self.recipe,
            "config": self.config,
            "policy": self.policy.state_dict(),
            "normalizer": None if self.normalizer is None else self.normalizer.state_dict(),
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.policy.load_state_dict(state_dict["policy"])
        if self.normalizer is not None and state_dict.get("normalizer") is not None:
            self.normalizer.load_state_dict(state_dict["normalizer"])
