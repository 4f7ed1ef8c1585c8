"""engine_rl: event-driven reinforcement-learning training on pytorch-ignite.

The trainer is an Ignite ``Engine`` (:func:`create_trainer`) iterating a collector; everything
else is a handler attached to :class:`RLEvents` or Ignite's own events. See
:mod:`engine_rl.engine` for the glossary and :mod:`engine_rl.events` for the event order.
"""

from engine_rl.engine import MASK_KEY, RLTrainer, create_trainer
from engine_rl.events import RLEvents
from engine_rl.keys import require_keys

__all__ = ["MASK_KEY", "RLEvents", "RLTrainer", "create_trainer", "require_keys"]
__version__ = "0.1.0"
