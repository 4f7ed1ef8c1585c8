"""engine_rl: event-driven reinforcement-learning training on pytorch-ignite.

The trainer is an Ignite ``Engine`` (:func:`create_trainer`) iterating a collector; everything
else is a handler attached to :class:`RLEvents` or Ignite's own events. See
:mod:`engine_rl.engine` for the glossary and :mod:`engine_rl.events` for the event order.
"""

from engine_rl.engine import RLTrainer, create_trainer
from engine_rl.events import RLEvents
from engine_rl.keys import MASK_KEY, require_keys

__all__ = ["MASK_KEY", "RLEvents", "RLTrainer", "create_evaluator", "create_trainer", "require_keys", "training_state"]

_LAZY = {"create_evaluator": "engine_rl.evaluation", "training_state": "engine_rl.run.checkpoint"}


def __getattr__(name: str):  # imported on first use: they pull in gymnasium and ignite's handlers
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'engine_rl' has no attribute {name!r}")


__version__ = "0.1.0"
