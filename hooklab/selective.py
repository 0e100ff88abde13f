"""Selective activation checkpointing (SAC) on named submodules, and a counter of the ops that run.

Full checkpointing keeps nothing inside a region and recomputes all of it in backward. Selective
checkpointing asks a *policy*, op by op, which outputs to keep (``CheckpointPolicy.MUST_SAVE``) and
which to recompute (``PREFER_RECOMPUTE``): keep the expensive matrix multiplications, recompute the
cheap pointwise ops. :func:`selective_checkpoint_modules` applies it to named submodules inside a
``with`` block, exactly as :func:`hooklab.checkpoint_modules` applies full checkpointing;
:class:`OpCounter` counts the ATen ops that really run, which shows what backward recomputed::

    with selective_checkpoint_modules(model, ["layer1", "layer2"], policy=[torch.ops.aten.convolution]):
        loss = model(x).sum()
    with OpCounter() as ran:
        loss.backward()
    ran.counts["convolution"]     # 0: no convolution was run again
"""
from __future__ import annotations

import collections
import contextlib
import functools
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.utils.checkpoint  # `import torch` alone does not import it before torch 2.8
from torch import nn

from ._torch_internals import ATEN_OP_TYPES, TorchDispatchMode
from .offload import checkpoint_modules

__all__ = ["OpCounter", "selective_checkpoint_modules"]

Policy = Callable[..., "CheckpointPolicy | bool"]
_OPS = ATEN_OP_TYPES or (object,)


def _sac_api() -> tuple[Any, Any]:
    """``CheckpointPolicy`` and ``create_selective_checkpoint_contexts`` (public since torch 2.4)."""
    try:
        from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    except ImportError:
        raise RuntimeError(f"selective checkpointing needs torch >= 2.4 (torch.utils.checkpoint.CheckpointPolicy); "
                           f"this is torch {torch.__version__}. hooklab's other tools work on it.") from None
    return CheckpointPolicy, create_selective_checkpoint_contexts


def _policy_from_ops(ops: Iterable[Any]) -> Policy:
    ops = list(ops)
    for op in ops:
        if not isinstance(op, _OPS):
            raise TypeError(f"policy lists ATen ops such as torch.ops.aten.mm or torch.ops.aten.mm.default, "
                            f"got {op!r} ({type(op).__name__})")
    saved = frozenset(ops)
    CheckpointPolicy, _ = _sac_api()

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        # an op arrives as an overload (aten.mm.default): match it and its packet (aten.mm)
        if op in saved or getattr(op, "overloadpacket", None) in saved:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _checked_policy(fn: Policy) -> Policy:
    CheckpointPolicy, _ = _sac_api()

    @functools.wraps(fn)
    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy | bool:
        decision = fn(ctx, op, *args, **kwargs)
        if not isinstance(decision, (CheckpointPolicy, bool)):
            raise TypeError(f"the policy returned {decision!r} for {op}; it must return a "
                            "torch.utils.checkpoint.CheckpointPolicy (e.g. MUST_SAVE or PREFER_RECOMPUTE)")
        return decision

    return policy


def _as_policy(policy: Any) -> Policy:
    if isinstance(policy, _OPS):
        raise TypeError(f"policy got the single op {policy}; pass a list of ops ([{policy}]) or a policy "
                        "function (ctx, op, *args, **kwargs) -> CheckpointPolicy")
    if callable(policy):
        return _checked_policy(policy)
    if isinstance(policy, (str, bytes)) or not isinstance(policy, Iterable):
        raise TypeError("policy must be a function (ctx, op, *args, **kwargs) -> CheckpointPolicy or a list "
                        f"of ATen ops to save, got {type(policy).__name__}")
    return _policy_from_ops(policy)


@contextlib.contextmanager
def selective_checkpoint_modules(model: nn.Module, names: str | Iterable[str], *, policy: Any,
                                 **checkpoint_kwargs: Any) -> Iterator[list[nn.Module]]:
    """Inside the block, every call of the named submodules runs under selective activation checkpointing.

    ``policy`` decides op by op what the region keeps for backward: a function
    ``(ctx, op, *args, **kwargs) -> CheckpointPolicy`` as for
    ``torch.utils.checkpoint.create_selective_checkpoint_contexts``, or a list of ATen ops whose
    outputs are kept (``MUST_SAVE``; an op packet such as ``torch.ops.aten.mm`` matches all its
    overloads), everything else being recomputed (``PREFER_RECOMPUTE``). A policy that returns
    anything but a ``CheckpointPolicy`` (or a bool) raises a ``TypeError`` naming the op.

    Same lifecycle as :func:`hooklab.checkpoint_modules` (it is built on it): the named modules'
    ``forward`` is wrapped in ``checkpoint(..., use_reentrant=False, context_fn=...)`` (SAC needs
    the non-reentrant variant) and restored on exit, also after an exception; unknown names raise
    an error listing the names that exist; the block yields the modules. Other keyword arguments
    go to ``checkpoint`` (``respect_saved_tensors_hooks``, ``preserve_rng_state``, ...).

    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8)), nn.Tanh())
    >>> with selective_checkpoint_modules(model, ["0"], policy=[torch.ops.aten.addmm]):
    ...     loss = model(torch.randn(4, 8)).sum()
    >>> with OpCounter() as ran:
    ...     loss.backward()
    >>> ran.counts["gelu"], ran.counts["addmm"]      # GELU recomputed, the Linear outputs were kept
    (1, 0)
    """
    for key in ("context_fn", "use_reentrant"):
        if key in checkpoint_kwargs:
            raise TypeError(f"selective_checkpoint_modules sets {key} itself (selective checkpointing needs "
                            "use_reentrant=False and a context_fn made from the policy); use "
                            "hooklab.checkpoint_modules for full checkpointing with your own options")
    _, create_selective_checkpoint_contexts = _sac_api()
    policy_fn = _as_policy(policy)
    context_fn = functools.partial(create_selective_checkpoint_contexts, policy_fn)
    with checkpoint_modules(model, names, use_reentrant=False, context_fn=context_fn,
                            **checkpoint_kwargs) as modules:
        yield modules


class OpCounter(TorchDispatchMode):
    """Count the ATen ops that run inside the block, by name (``"addmm"``, ``"gelu"``, ...).

    A ``TorchDispatchMode`` sees every op that actually executes below Python, including the ones
    backward runs and those a checkpoint recomputes; an op that selective checkpointing answers
    from its cache does not execute, so it is not counted. The counts are exact and the same on
    every machine, unlike timings.

    >>> with OpCounter() as ran:
    ...     y = torch.tanh(torch.ones(2) * 3)
    >>> dict(ran.counts)
    {'ones': 1, 'mul': 1, 'tanh': 1}
    """

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))
