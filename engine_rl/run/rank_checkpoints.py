"""Checkpoints of a multi-process run: one folder per rank, resumed at a step every rank holds.

Rank 0 writes into the run's checkpoint folder (readable as a single-process run's), rank ``r``
into ``rank<r>`` below it. Re-exported by :mod:`engine_rl.distributed`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import torch

__all__ = ["common_checkpoint_step", "rank_checkpoint_dir", "rank_disk_saver", "resume_path", "saved_world_size"]


_RANK_DIR = re.compile(r"^rank(\d+)$")
_STEP = re.compile(r"^checkpoint_(\d+)\.pt$")


def rank_checkpoint_dir(ckpt_dir: str | Path, rank: int) -> Path:
    """Where rank ``rank`` writes its checkpoints: ``ckpt_dir`` for rank 0 (the run's own
    checkpoints, readable as single-process ones), ``ckpt_dir/rank<r>`` for the others.

    Examples:
        >>> rank_checkpoint_dir("run/checkpoints", 0).as_posix(), rank_checkpoint_dir("run/checkpoints", 2).as_posix()
        ('run/checkpoints', 'run/checkpoints/rank2')
    """
    ckpt_dir = Path(ckpt_dir)
    return ckpt_dir if rank == 0 else ckpt_dir / f"rank{rank}"


def saved_world_size(ckpt_dir: str | Path) -> int:
    """Number of processes of the run whose checkpoints are in ``ckpt_dir``: 1 plus the highest
    ``r`` of its ``rank<r>`` sub-folders (a multi-process run creates them when it starts)."""
    ckpt_dir = Path(ckpt_dir)
    ranks = [0]
    if ckpt_dir.is_dir():
        ranks += [int(m[1]) for sub in ckpt_dir.iterdir() if (m := _RANK_DIR.match(sub.name)) and sub.is_dir()]
    return max(ranks) + 1


def _steps(folder: Path) -> list[int]:
    return sorted(int(m[1]) for p in folder.glob("checkpoint_*.pt") if (m := _STEP.match(p.name)) and p.is_file())


def common_checkpoint_step(ckpt_dir: str | Path) -> int | None:
    """The highest step ``F`` such that every rank holds ``checkpoint_F.pt`` in its
    :func:`rank_checkpoint_dir` (``None`` if there is none); the same on every rank.

    Ranks write their checkpoints independently, so a kill can leave rank 0 one checkpoint
    ahead of another rank: the resume then uses the previous one. Runs keep ``n_saved >= 2`` and
    each rank's :class:`~engine_rl.run.checkpoint.AtomicDiskSaver` deletes its oldest file only after
    the new one is complete, so every rank holds ``n_saved`` complete checkpoints at every moment
    and the previous step is still there. Partial files (``.NAME.partial``) do not count. Each
    rank lists only its own folder, so this works without a shared file system.
    """
    mine = _steps(rank_checkpoint_dir(ckpt_dir, idist.get_rank()))
    if idist.get_world_size() == 1:
        return mine[-1] if mine else None
    width = int(idist.all_reduce(torch.tensor([len(mine)], dtype=torch.int64), op="MAX").item())
    if width == 0:
        return None
    padded = torch.full((1, width), -1, dtype=torch.int64)
    padded[0, : len(mine)] = torch.tensor(mine, dtype=torch.int64)
    rows = idist.all_gather(padded).tolist()
    common = set.intersection(*({s for s in row if s >= 0} for row in rows))
    return max(common) if common else None


def rank_disk_saver(ckpt_dir: str | Path) -> Any:
    """An :class:`~engine_rl.run.checkpoint.AtomicDiskSaver` writing this rank's checkpoints into
    its :func:`rank_checkpoint_dir` (created now); it writes and deletes nothing on the other ranks
    (each rank has its own saver), and deletes an old file only after the new one is in place."""
    from engine_rl.run.checkpoint import AtomicDiskSaver

    rank = idist.get_rank()
    folder = rank_checkpoint_dir(ckpt_dir, rank)
    folder.mkdir(parents=True, exist_ok=True)
    saver = AtomicDiskSaver(folder)
    saver.save_on_rank = rank
    return saver


def resume_path(ckpt_dir: str | Path, resume: bool | str | Path) -> Path | None:
    """This rank's checkpoint file to resume from, or ``None`` if the run has none yet.

    Args:
        ckpt_dir: the run's checkpoint folder (rank 0's).
        resume: ``True`` for the newest checkpoint every rank holds
            (:func:`common_checkpoint_step`), or rank 0's file (``ckpt_dir/checkpoint_F.pt``),
            which names the step for all ranks.

    Raises:
        ValueError: the run in ``ckpt_dir`` had another number of processes than this one.
    """
    world, rank = idist.get_world_size(), idist.get_rank()
    saved = saved_world_size(ckpt_dir)
    if world > 1:  # without a shared file system each machine sees the folders of its own ranks only
        saved = int(idist.all_reduce(torch.tensor([saved]), op="MAX").item())
    if saved != world:
        raise ValueError(
            f"--resume: {ckpt_dir} holds a run of {saved} process(es) and this run has {world}; "
            f"resume it with --nproc {saved} (each process keeps its own envs and replay shard)"
        )
    if isinstance(resume, (str, Path)) and not isinstance(resume, bool):
        path = Path(resume)
        return rank_checkpoint_dir(path.parent, rank) / path.name
    step = common_checkpoint_step(ckpt_dir)
    return None if step is None else rank_checkpoint_dir(ckpt_dir, rank) / f"checkpoint_{step}.pt"
