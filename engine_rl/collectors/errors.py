"""Env failures during collection or evaluation: :class:`EnvError`, naming the env copy and the step."""

from __future__ import annotations

from typing import Any

__all__ = ["EnvError", "failed_env_index"]


class EnvError(RuntimeError):
    """An env raised while a collector or an evaluation stepped or reset it.

    The message names the component, the env copy (when it can be known: ``SyncVectorEnv`` and
    ``AsyncVectorEnv`` step copies one by one; a numpy-batched env steps them all at once) and the
    vector step; the env's own exception is the ``__cause__``.

    Attributes:
        env_index: the failing env copy, or ``None`` if unknown.
        step: the vector step (1-based, counted by the stepper since it was built or restored).
    """

    def __init__(self, message: str, *, env_index: int | None, step: int) -> None:
        super().__init__(message)
        self.env_index = env_index
        self.step = step


def failed_env_index(env: Any, err: BaseException) -> int | None:
    """Which env copy raised: the loop index of ``SyncVectorEnv.step``/``reset`` in the traceback,
    or the worker whose pipe ``AsyncVectorEnv`` closed after the error."""
    from gymnasium.vector import SyncVectorEnv

    index = None
    tb = err.__traceback__
    while tb is not None:
        local = tb.tb_frame.f_locals
        if isinstance(local.get("self"), SyncVectorEnv) and isinstance(local.get("i"), int):
            index = local["i"]
        tb = tb.tb_next
    if index is None:
        pipes = getattr(getattr(env, "unwrapped", env), "parent_pipes", None)
        if isinstance(pipes, list):
            closed = [i for i, pipe in enumerate(pipes) if pipe is None]
            index = closed[0] if len(closed) == 1 else None
    return index
