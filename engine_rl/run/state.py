"""What a resumable checkpoint holds besides your objects: RNG states, the trainer's metrics and
the stateful handlers attached to the trainer and its evaluators.

:func:`training_state` assembles the ``to_save`` mapping; :mod:`engine_rl.run.checkpoint` writes
and reads it (and re-exports everything here).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from ignite.engine import Engine

from engine_rl.engine import attached_objects

__all__ = ["EngineMetrics", "RNGState", "training_state"]


class RNGState:
    """The global random generators as a stateful object: torch (CPU, and CUDA when
    initialized), numpy's legacy global generator and python's ``random``.

    Examples:
        >>> rng = RNGState()
        >>> state = rng.state_dict()
        >>> a = (torch.rand(1), np.random.rand(), random.random())
        >>> rng.load_state_dict(state)
        >>> (torch.rand(1), np.random.rand(), random.random()) == a
        True
    """

    def state_dict(self) -> dict[str, Any]:
        np_state = np.random.get_state(legacy=False)
        version, py_state, gauss = random.getstate()
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
        return {
            "torch": torch.get_rng_state(),
            "cuda": list(cuda),
            "numpy": {
                "bit_generator": np_state["bit_generator"],
                "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
                "pos": int(np_state["state"]["pos"]),
                "has_gauss": int(np_state["has_gauss"]),
                "gauss": float(np_state["gauss"]),
            },
            "python": {"version": version, "state": torch.tensor(py_state, dtype=torch.int64), "gauss_next": gauss},
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        torch.set_rng_state(state_dict["torch"].cpu())
        cuda = state_dict.get("cuda") or []
        if cuda and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in cuda])
        n = state_dict["numpy"]
        np.random.set_state({
            "bit_generator": n["bit_generator"],
            "state": {"key": n["key"].numpy().astype(np.uint32), "pos": int(n["pos"])},
            "has_gauss": int(n["has_gauss"]),
            "gauss": float(n["gauss"]),
        })
        p = state_dict["python"]
        random.setstate((int(p["version"]), tuple(int(v) for v in p["state"].tolist()), p["gauss_next"]))


class EngineMetrics:
    """An engine's ``state.metrics`` as a stateful object (numbers, strings, tensors; other
    values are left out), so a resumed run starts with the metrics the checkpoint had."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in self.engine.state.metrics.items():
            if type(value) in (int, float, bool, str):
                out[str(name)] = value
            elif isinstance(value, torch.Tensor):
                out[str(name)] = value.detach().cpu().clone()
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.engine.state.metrics.update(state_dict)


def _has_state(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def training_state(
    trainer: Engine,
    objects: Mapping[str, Any] | None = None,
    /,
    *,
    evaluators: Iterable[Engine] = (),
    handlers: bool = True,
    rng: bool = True,
    metrics: bool = True,
) -> dict[str, Any]:
    """The ``to_save`` mapping of a complete, resumable checkpoint of ``trainer``'s run.

    Args:
        trainer: the trainer (saved as ``"trainer"``: iteration, epoch length, RL counters).
        objects: what else to save by name: models, target nets, optimizers, LR schedulers,
            replay buffer, collector, normalizers... (each needs ``state_dict`` and
            ``load_state_dict``). A recipe's ``Setup.to_save`` fits as is.
        evaluators: engines whose stateful handlers are saved too (``EarlyStopping``, a best-score
            ``Checkpoint``). Evaluators of the trainer's handlers (``ValidationRollout.evaluator``)
            are included without being named.
        handlers: add the stateful objects attached to the trainer and the evaluators, as
            ``"trainer.ClassName"`` / ``"evaluator.ClassName"`` (``_2``, ``_3`` for repeats),
            unless already in ``objects`` (see :func:`engine_rl.engine.attached_objects`). The
            engines must keep a record of their handlers, as ``create_trainer``'s and
            ``create_evaluator``'s do: a plain Ignite ``Engine`` is a ``TypeError`` (Ignite has
            no public way to list its handlers); name its stateful handlers in ``objects``.
        rng: add ``"rng"``: :class:`RNGState`.
        metrics: add ``"trainer_metrics"``: :class:`EngineMetrics` of the trainer.

    Returns:
        A dict for ``ignite.handlers.Checkpoint(to_save, ...)`` and :func:`restore`. Build it
        after attaching the handlers it should find, and give it to a new ``Checkpoint`` (which
        is attached after, so it does not save itself).

    Raises:
        TypeError: naming the entry that has no ``state_dict``/``load_state_dict``, or the
            engine that keeps no record of its handlers.
    """
    if not isinstance(trainer, Engine):
        raise TypeError(f"training_state: argument trainer must be an ignite Engine, got {type(trainer).__name__}")
    to_save: dict[str, Any] = {"trainer": trainer}
    for key, obj in (objects or {}).items():
        if key == "trainer" and obj is not trainer:
            raise ValueError("training_state: objects['trainer'] is not the trainer given as first argument")
        if not _has_state(obj):
            raise TypeError(
                f"training_state: object {key!r} ({type(obj).__name__}) has no state_dict/load_state_dict, "
                "so it cannot be checkpointed"
            )
        to_save[key] = obj
    if rng:
        to_save.setdefault("rng", RNGState())
    if metrics:
        to_save.setdefault("trainer_metrics", EngineMetrics(trainer))
    if handlers:
        _add_attached(to_save, trainer, evaluators)
    return to_save


def _recording(engine: Any, what: str) -> Engine:
    """``engine``, if it keeps a record of its handlers; a ``TypeError`` naming ``what`` otherwise."""
    if not (isinstance(engine, Engine) and callable(getattr(engine, "attached_handlers", None))):
        raise TypeError(
            f"training_state: {what} is a plain ignite {type(engine).__name__}, whose handlers Ignite's public API "
            "cannot list; build it with create_trainer/create_evaluator (or as an engine_rl.engine.RecordingEngine), "
            "or pass handlers=False and name its stateful handlers in objects"
        )
    return engine


def _add_attached(to_save: dict[str, Any], trainer: Engine, evaluators: Iterable[Engine]) -> None:
    """Add the stateful objects attached to ``trainer`` and the evaluators to ``to_save``."""
    engines: list[tuple[str, Engine]] = [("trainer", _recording(trainer, "the trainer"))]
    named = [(f"evaluators[{i}]", ev) for i, ev in enumerate(evaluators)]
    for obj in attached_objects(trainer):  # e.g. ValidationRollout.evaluator
        ev = getattr(obj, "evaluator", None)
        if isinstance(ev, Engine):
            named.append((f"the evaluator of the trainer's {type(obj).__name__}", ev))
    seen_engines = {id(trainer)}
    for what, ev in named:
        if id(ev) not in seen_engines:
            seen_engines.add(id(ev))
            engines.append(("evaluator" if len(engines) == 1 else f"evaluator{len(engines)}", _recording(ev, what)))
    saved = {id(obj) for obj in to_save.values()}
    for engine_name, engine in engines:
        for obj in attached_objects(engine):
            if id(obj) in saved or not _has_state(obj):
                continue
            saved.add(id(obj))
            base = f"{engine_name}.{type(obj).__name__}"
            key, n = base, 1
            while key in to_save:
                n += 1
                key = f"{base}_{n}"
            to_save[key] = obj
