"""The processes of a data-parallel run: spawning them (or joining ``torchrun``'s) and giving
each rank its own seeds. What they do together (gradients, weights, statistics) is in
:mod:`engine_rl.distributed`; their checkpoints in :mod:`engine_rl.run.rank_checkpoints`.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Callable
from typing import Any

import ignite.distributed as idist
import torch

from engine_rl.checks import nonnegative_int, positive_int

__all__ = ["SEED_STRIDE", "default_backend", "free_port", "launched_externally", "rank_config", "rank_seed",
           "run_parallel"]

#: Seeds of rank ``r`` are ``seed + r * SEED_STRIDE``: a vector env seeds its copy ``i`` with
#: ``seed + i``, so a stride of 1 would give rank 1's first env the seed of rank 0's second one.
SEED_STRIDE = 1_000_003

_SEED_FIELDS = ("seed", "eval_seed")


def rank_seed(seed: int, rank: int) -> int:
    """The seed rank ``rank`` uses for a base ``seed`` (rank 0 keeps it).

    Examples:
        >>> rank_seed(0, 0), rank_seed(0, 1), rank_seed(7, 2)
        (0, 1000003, 2000013)
    """
    return seed + nonnegative_int(rank, name="argument rank", owner="rank_seed") * SEED_STRIDE


def rank_config(config: Any, rank: int) -> Any:
    """A copy of a recipe's dataclass ``config`` with the seeds of rank ``rank``.

    The int fields ``seed`` (envs, exploration, sampling, initial weights before rank 0's are
    broadcast) and ``eval_seed`` (evaluation episodes) are shifted by :func:`rank_seed`; the
    other fields, and ``config`` itself, are unchanged.

    Examples:
        >>> from engine_rl.recipes.dqn_cartpole import DQNConfig
        >>> cfg = rank_config(DQNConfig(seed=3), 1)
        >>> cfg.seed, cfg.eval_seed, cfg.lr == DQNConfig().lr
        (1000006, 1010003, True)
        >>> rank_config(DQNConfig(seed=3), 0) == DQNConfig(seed=3)
        True
    """
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"rank_config: argument config must be a dataclass instance, got {type(config).__name__}")
    changes = {
        name: rank_seed(getattr(config, name), rank)
        for name in _SEED_FIELDS
        if isinstance(getattr(config, name, None), int) and not isinstance(getattr(config, name), bool)
    }
    return dataclasses.replace(config, **changes) if rank else config


# -- launching ---------------------------------------------------------------------------------
def default_backend() -> str:
    """``"nccl"`` when CUDA is available, ``"gloo"`` otherwise."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for the rendezvous of processes spawned here)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launched_externally() -> bool:
    """Whether this process was started by a launcher such as ``torchrun`` (``RANK`` and
    ``WORLD_SIZE`` set in the environment) and no process group exists yet."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and idist.get_world_size() == 1


def run_parallel(
    fn: Callable[..., Any],
    *args: Any,
    nproc_per_node: int | None = None,
    backend: str | None = None,
    nnodes: int | None = None,
    node_rank: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    **kwargs: Any,
) -> None:
    """Run ``fn(local_rank, *args, **kwargs)`` in every process of a process group.

    - Launched by ``torchrun`` (see :func:`launched_externally`): joins its group
      (``idist.Parallel(backend)``) and runs ``fn`` here; ``nproc_per_node`` must be ``None``.
    - Otherwise spawns ``nproc_per_node`` processes (``idist.Parallel(backend, nproc_per_node,
      ...)``), on a free local port unless ``master_port`` is given (several machines:
      ``nnodes``, ``node_rank``, ``master_addr`` and ``master_port``, one call per machine).

    ``fn`` must be importable by the spawned processes (a module-level function) and its
    arguments picklable. A process that fails stops the others; the error is raised here
    (``torch.multiprocessing.ProcessExitedException`` carries the exit code).

    Args:
        backend: ``"gloo"`` (CPU) or ``"nccl"`` (GPU); default :func:`default_backend`.
    """
    backend = backend or default_backend()
    if launched_externally():
        if nproc_per_node not in (None, 1):
            raise ValueError(
                "run_parallel: this process was started by torchrun (RANK and WORLD_SIZE are set); "
                f"let torchrun spawn the processes and drop nproc_per_node={nproc_per_node}"
            )
        with idist.Parallel(backend=backend) as parallel:
            parallel.run(fn, *args, **kwargs)
        return
    nproc_per_node = positive_int(nproc_per_node, name="argument nproc_per_node", owner="run_parallel")
    if master_port is None and (nnodes or 1) == 1:
        master_port = free_port()
    with idist.Parallel(
        backend=backend, nproc_per_node=nproc_per_node, nnodes=nnodes, node_rank=node_rank,
        master_addr=master_addr, master_port=master_port,
    ) as parallel:
        parallel.run(fn, *args, **kwargs)
