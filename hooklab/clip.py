"""Gradient clipping through parameter hooks, returning a :class:`~hooklab.HookScope` to remove them.

    scope = clip_grad_value_hooks(model, 0.1)        # every backward now clips
    ...
    scope.remove()                                   # or: with clip_grad_value_hooks(...):

Two moments to clip at (``stage``):

* ``"incoming"`` (default) -- ``Tensor.register_hook``: once per backward, the hook sees
  the gradient this backward computed (a weight used twice in the forward: the sum of
  both uses) *before* it is added into ``.grad``. With gradient accumulation (several
  backwards before ``optimizer.step()``) each backward is clipped on its own, so ``.grad``
  can reach ``k * value`` after ``k`` backwards.
* ``"accumulated"`` -- ``Tensor.register_post_accumulate_grad_hook``: the hook clips
  ``.grad`` in place after it was updated. For one backward both stages give exactly what
  ``torch.nn.utils.clip_grad_value_`` gives; with accumulation they do not (that one clips
  the final sum once).

The hooks return a new tensor (``grad.clamp(...)``), never ``grad.clamp_(...)``: autograd may
hand the *same* tensor to several branches (``a + b`` gives both the same gradient), so an
in-place change would also clip a gradient the hook does not own.

Norm clipping here is *per parameter*: a hook sees one tensor at a time and cannot know the
global norm over all parameters that ``torch.nn.utils.clip_grad_norm_`` uses.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from .scope import HookScope

__all__ = ["clip_grad_norm_hooks", "clip_grad_value_hooks"]

_STAGES = ("incoming", "accumulated")


def _params(params: nn.Module | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(params, nn.Module):
        found = list(params.parameters())
    elif isinstance(params, torch.Tensor):
        found = [params]
    else:
        try:
            found = list(params)
        except TypeError:
            raise TypeError(f"expected a model, a tensor or an iterable of parameters, "
                            f"got {type(params).__name__}") from None
        bad = [type(p).__name__ for p in found if not isinstance(p, torch.Tensor)]
        if bad:
            raise TypeError(f"expected parameters (tensors), got a {bad[0]}")
    found = [p for p in found if p.requires_grad]
    if not found:
        raise ValueError("no parameter that requires a gradient: nothing to clip")
    if any(not p.is_leaf for p in found):
        raise ValueError("clip hooks go on leaf tensors (parameters); got a non-leaf tensor "
                         "(the result of an operation): pass model.parameters() instead")
    return found


def _positive(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive finite number, got {value!r}")
    return float(value)


def _check_stage(stage: str) -> None:
    if stage not in _STAGES:
        raise ValueError(f"stage must be one of {_STAGES}, got {stage!r}")


def clip_grad_value_hooks(params: nn.Module | Iterable[torch.Tensor], value: float, *,
                          stage: str = "incoming") -> HookScope:
    """Clamp every gradient of ``params`` to ``[-value, value]`` from now on, through hooks.

    Returns a :class:`~hooklab.HookScope` owning the hooks: call ``.remove()`` or use it
    as a context manager.

    >>> with clip_grad_value_hooks(model, 0.01):
    ...     model(x).sum().backward()
    >>> bool(model.fc.bias.grad.abs().max() <= 0.01)
    True
    """
    value = _positive(value, "value")
    _check_stage(stage)
    found = _params(params)
    scope = HookScope("clip_grad_value")
    if stage == "incoming":
        def clip_value(grad: torch.Tensor) -> torch.Tensor:
            return grad.clamp(-value, value)  # a new tensor: never clamp_ here
        for p in found:
            scope.add(p.register_hook(clip_value))
    else:
        def clip_value_accumulated(param: torch.Tensor) -> None:
            param.grad.clamp_(-value, value)  # .grad belongs to the parameter: in place is fine
        for p in found:
            scope.add(p.register_post_accumulate_grad_hook(clip_value_accumulated))
    return scope


def clip_grad_norm_hooks(params: nn.Module | Iterable[torch.Tensor], max_norm: float,
                         norm_type: float = 2.0, *, stage: str = "incoming") -> HookScope:
    """Rescale each parameter's gradient so that *its own* norm is at most ``max_norm``.

    Unlike ``torch.nn.utils.clip_grad_norm_`` (one scale factor from the norm of all
    gradients together), each tensor is scaled on its own; the two agree when there is a
    single parameter. Returns a :class:`~hooklab.HookScope` owning the hooks.

    >>> scope = clip_grad_norm_hooks(model, 1.0)
    >>> model(x).sum().backward()
    >>> bool(model.fc.weight.grad.norm() <= 1.0 + 1e-6)
    True
    >>> scope.remove()
    62
    """
    max_norm = _positive(max_norm, "max_norm")
    norm_type = float(norm_type)
    if not norm_type > 0:
        raise ValueError(f"norm_type must be > 0 (or inf), got {norm_type!r}")
    _check_stage(stage)
    found = _params(params)

    def scale(grad: torch.Tensor) -> torch.Tensor:
        norm = torch.linalg.vector_norm(grad, norm_type)
        # same formula as clip_grad_norm_: no branch, so no device sync
        return grad * torch.clamp(max_norm / (norm + 1e-6), max=1.0)

    scope = HookScope("clip_grad_norm")
    if stage == "incoming":
        def clip_norm(grad: torch.Tensor) -> torch.Tensor:
            return scale(grad)
        for p in found:
            scope.add(p.register_hook(clip_norm))
    else:
        def clip_norm_accumulated(param: torch.Tensor) -> None:
            param.grad.copy_(scale(param.grad))
        for p in found:
            scope.add(p.register_post_accumulate_grad_hook(clip_norm_accumulated))
    return scope
