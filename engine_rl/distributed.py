"""Data-parallel training on ``ignite.distributed`` (torch.distributed: gloo on CPU, nccl on GPU).

``engine-rl train RECIPE --nproc N`` runs N processes on this machine; ``torchrun`` (or
:func:`engine_rl.run.launch.run_parallel` with ``nnodes``/``node_rank``/``master_addr``) spreads
them over machines. In every process (a *rank*):

- the recipe is built with the rank's own seeds (:func:`engine_rl.run.launch.rank_config`): its envs, exploration,
  replay sampling and evaluation episodes differ from the other ranks';
- rank 0's weights are copied to every rank at the start (:func:`broadcast_tensors`); then, after
  each ``backward()``, the gradients are averaged over the ranks (:class:`GradientAllReduce`)
  before clipping and ``optimizer.step()``, so every rank takes the same step and the parameters
  stay identical (bit for bit: the all-reduce hands every rank the same sum);
- counters and statistics are combined: collected frames are summed (``state.frames`` counts
  the frames of all ranks), training-episode statistics are reduced from their moments
  (:func:`reduce_moments`, i.e. weighted by episodes), evaluation scores are computed over the
  episodes of all ranks (:func:`gather_rows`);
- each rank keeps its own collector, replay shard, samplers and RNG state, and checkpoints them
  in its own file (:mod:`engine_rl.run.rank_checkpoints`); a resume picks the newest checkpoint
  that every rank holds.

The handlers that wire this into a trainer are in :mod:`handlers.distributed`.

Why an explicit gradient all-reduce and not ``DistributedDataParallel`` (``idist.auto_model``):
DDP averages gradients from hooks armed by *its own* ``forward``; the losses here call
sub-modules (``PPOLoss`` calls ``policy.actor`` and ``policy.value``, ``SACLoss`` the actor and
each critic, ``DQNLoss`` the Q network twice, once without gradients), so wrapping the model would
sync nothing, or require every loss to route through the wrapper and DDP's
``find_unused_parameters`` machinery. One all-reduce of all the optimizers' gradients, flattened
into one buffer, on ``RLEvents.BACKWARD_COMPLETED`` is the same maths (the mean of the ranks'
gradients), one collective per optim step, and works for any loss and any number of optimizers.
A model the user wraps with ``idist.auto_model`` still works: its gradients are averaged twice,
which changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ignite.distributed as idist
import torch
from torch import nn

__all__ = ["GradientAllReduce", "broadcast_tensors", "gather_rows", "module_tensors", "reduce_moments", "reporting_rank"]


# -- tensors across ranks ----------------------------------------------------------------------
def module_tensors(*modules: nn.Module) -> list[torch.Tensor]:
    """The distinct parameters and buffers (non-persistent ones too) of ``modules``, in order."""
    seen: set[int] = set()
    out: list[torch.Tensor] = []
    for module in modules:
        if not isinstance(module, nn.Module):
            raise TypeError(f"module_tensors: expected nn.Module arguments, got {type(module).__name__}")
        for tensor in (*module.parameters(), *module.buffers()):
            if id(tensor) not in seen:
                seen.add(id(tensor))
                out.append(tensor)
    return out


@torch.no_grad()
def broadcast_tensors(tensors: Iterable[torch.Tensor], *, src: int = 0) -> None:
    """Overwrite ``tensors`` in place with rank ``src``'s values (no-op in one process).

    Every rank must pass tensors of the same shapes and dtypes in the same order (e.g.
    :func:`module_tensors` of the same modules).
    """
    if idist.get_world_size() == 1:
        return
    for tensor in tensors:
        tensor.copy_(idist.broadcast(tensor.detach().clone(), src=src))


def reduce_moments(values: torch.Tensor) -> tuple[int, float, float]:
    """(count, mean, population std) of the values of all ranks, from one all-reduce.

    Each rank may hold a different number of values (none too): the result weighs every value
    equally (a rank with more episodes counts more). Computed in float64 from the sums of
    ``x`` and ``x**2``; mean and std are ``nan`` when no rank has a value. In one process this
    is simply the local count, mean and std.

    Examples:
        >>> reduce_moments(torch.tensor([1.0, 2.0, 3.0, 6.0]))
        (4, 3.0, 1.8708286933869707)
    """
    x = values.detach().reshape(-1).to(torch.float64)
    sums = torch.stack([torch.tensor(float(x.numel()), dtype=torch.float64), x.sum(), (x * x).sum()])
    if idist.get_world_size() > 1:
        sums = idist.all_reduce(sums)
    n, s, ss = sums.tolist()
    if n == 0:
        return 0, float("nan"), float("nan")
    mean = s / n
    return int(n), mean, max(ss / n - mean * mean, 0.0) ** 0.5


def reporting_rank(code: int) -> int | None:
    """Which rank reports a problem some ranks found: one all-reduce of every rank's ``code``.

    ``code`` says what this rank found: 0 nothing, higher numbers for what should be reported
    first. Returns ``None`` when every rank's code is 0, else the lowest rank among those with
    the highest code; every rank gets the same answer, so all of them take the same decision
    (skip, or stop with one rank saying why). In one process: this rank (0) if ``code``, else
    ``None``.

    Examples:
        >>> reporting_rank(0) is None, reporting_rank(2)
        (True, 0)
    """
    world = idist.get_world_size()
    if world == 1:
        return 0 if code else None
    codes = torch.zeros(world, dtype=torch.int64)
    codes[idist.get_rank()] = int(code)
    codes = idist.all_reduce(codes)
    top = int(codes.max())
    return None if top == 0 else int((codes == top).nonzero()[0, 0])


def gather_rows(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` of every rank concatenated along dim 0 in rank order (sizes may differ).

    The other dims must match. One process: ``tensor`` itself.
    """
    world = idist.get_world_size()
    if world == 1:
        return tensor
    if tensor.ndim == 0:
        tensor = tensor.reshape(1)
    sizes = idist.all_gather(torch.tensor([tensor.shape[0]], dtype=torch.int64)).tolist()
    if len(set(sizes)) == 1:
        return idist.all_gather(tensor.contiguous())
    rest = tuple(tensor.shape[1:])
    shapes = [[n, *rest] for n in sizes]
    parts = idist.all_gather_tensors_with_shapes(tensor.contiguous(), shapes)
    return torch.cat(parts, dim=0)


class GradientAllReduce:
    """Average the gradients of ``parameters`` over all ranks, in place, with one all-reduce
    per dtype.

    Gradients are flattened into one buffer (with one flag per parameter saying whether this
    rank has a gradient for it), summed over the ranks and divided by the world size, then
    copied back. A parameter with no gradient on any rank keeps ``grad = None`` (the optimizer
    skips it, as in one process); one with a gradient on some ranks only gets the average,
    missing gradients counting as zeros (as DDP does). Every rank must call it the same number
    of times with the same parameters in the same order. In one process it does nothing.

    Args:
        parameters: tensors, or modules / optimizers whose parameters to average (duplicates
            are dropped), e.g. ``trainer.optimizers``.

    Examples:
        >>> net = torch.nn.Linear(2, 1)
        >>> sync = GradientAllReduce([net])
        >>> net(torch.ones(1, 2)).sum().backward()
        >>> sync()  # one process: gradients unchanged
        >>> net.weight.grad
        tensor([[1., 1.]])
        >>> sync.numel
        3
    """

    def __init__(self, parameters: Iterable[torch.Tensor | nn.Module | torch.optim.Optimizer]) -> None:
        params: list[torch.Tensor] = []
        seen: set[int] = set()
        for item in parameters:
            if isinstance(item, nn.Module):
                found = list(item.parameters())
            elif isinstance(item, torch.optim.Optimizer):
                found = [p for group in item.param_groups for p in group["params"]]
            elif isinstance(item, torch.Tensor):
                found = [item]
            else:
                raise TypeError(
                    "GradientAllReduce: argument parameters must hold tensors, modules or optimizers, "
                    f"got {type(item).__name__}"
                )
            for p in found:
                if id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
        if not params:
            raise ValueError("GradientAllReduce: argument parameters holds no parameter")
        buckets: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
        for p in params:
            buckets.setdefault((p.dtype, p.device), []).append(p)
        self._buckets = list(buckets.values())
        self.numel = sum(p.numel() for p in params)
        self.num_calls = 0

    @torch.no_grad()
    def __call__(self) -> None:
        world = idist.get_world_size()
        if world == 1:
            return
        self.num_calls += 1
        for params in self._buckets:
            grads = [p.grad for p in params]
            missing = any(g is None for g in grads)
            flags = torch.tensor([g is not None for g in grads], dtype=params[0].dtype, device=params[0].device)
            flat = torch.cat([
                *(p.new_zeros(p.numel()) if g is None else g.reshape(-1) for p, g in zip(params, grads)),
                flags,
            ])
            flat = idist.all_reduce(flat)
            flat.div_(world)
            views = flat[: flat.numel() - len(params)].split([p.numel() for p in params])
            if not missing:
                torch._foreach_copy_(grads, [v.view_as(g) for v, g in zip(views, grads)])
                continue
            anyone = flat[flat.numel() - len(params):].tolist()
            for p, g, v, had in zip(params, grads, views, anyone):
                if g is not None:
                    g.copy_(v.view_as(g))
                elif had > 0:
                    p.grad = v.view_as(p).clone()
