"""The checks and small helpers several tools share, in one place: tools import them from here, never from
each other.

One function per argument rule, each with one wording, so every tool says the same thing about the same mistake:

* :func:`module` -- an ``nn.Module``;
* :func:`flag` -- ``True`` or ``False``;
* :func:`int_at_least` -- an ``int`` (not a ``bool``) no smaller than a bound;
* :func:`number` -- an ``int`` or ``float`` (not a ``bool``), optionally ``> 0`` / ``>= 0`` / finite;
* :func:`choice` -- one of the values of a ``Literal`` type;
* :func:`refuse_compiled` and :func:`no_call_causes` -- a ``torch.compile``'d model (hooks added after compiling do
  not run in the compiled code): refused when made, or named first among the causes when a module never ran.

A wrong type raises ``TypeError``, a value out of range ``ValueError``; both messages say what was expected and what
was given.

>>> import torch
>>> number(0.5, "eps", nonnegative=True, finite=True), int_at_least(3, "depth", 1), choice("full", Mode, "mode")
(0.5, 3, 'full')
>>> number(float("inf"), "max_norm", positive=True, finite=True)
Traceback (most recent call last):
ValueError: max_norm must be a finite number > 0, got inf
>>> check_norm_type(2)
2.0
>>> select_output((torch.ones(2), "extra"), 0, "lstm").shape
torch.Size([2])
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, TypeVar, get_args

import torch
from torch import nn

from ._torch_internals import is_compiled_module, loss_scale, unwrap_compiled

__all__ = ["NO_CALL_CAUSES", "check_norm_type", "choice", "copy_output", "flag", "in_process_group", "int_at_least",
           "is_dtensor", "loss_scale_reader", "module", "needs_tensor", "no_call_causes", "number", "refuse_compiled",
           "select_output"]

Mode = Literal["full", "outputs"]  # an example for the module doctest
T = TypeVar("T")
M = TypeVar("M", bound=nn.Module)


def module(obj: M, tool: str) -> M:
    """``obj`` when it is an ``nn.Module``; else a ``TypeError`` saying that ``tool`` takes one."""
    if not isinstance(obj, nn.Module):
        raise TypeError(f"{tool} takes an nn.Module (a model or one of its submodules), got {type(obj).__name__}")
    return obj


def flag(value: object, name: str) -> bool:
    """``value`` when it is ``True`` or ``False`` (not ``1``, not ``"yes"``)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def int_at_least(value: object, name: str, low: int) -> int:
    """``value`` when it is an ``int`` (not a ``bool``) ``>= low``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= {low}, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def number(value: object, name: str, *, positive: bool = False, nonnegative: bool = False, finite: bool = False,
           note: str = "") -> float:
    """``value`` as a float when it is an ``int`` or ``float`` (not a ``bool``) with the properties asked for.

    ``note`` is added to the message in brackets (what the number means).
    """
    what = ("a finite number" if finite else "a number") + (" > 0" if positive else " >= 0" if nonnegative else "")
    said = f"{name} must be {what}" + (f" ({note})" if note else "") + f", got {value!r}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(said)
    if math.isnan(value) or (finite and math.isinf(value)) or (positive and not value > 0) or (
            nonnegative and not value >= 0):
        raise ValueError(said)
    return float(value)


def choice(value: T, options: Any, name: str) -> T:
    """``value`` when it is one of the values of the ``Literal`` type ``options``."""
    allowed = get_args(options)
    if not any(value == a and type(value) is type(a) for a in allowed):
        shown = ", ".join(map(repr, allowed[:-1])) + f" or {allowed[-1]!r}" if len(allowed) > 1 else repr(allowed[0])
        raise ValueError(f"{name} must be {shown}, got {value!r}")
    return value


def refuse_compiled(model: nn.Module, tool: str) -> None:
    """Raise a clear error for a ``torch.compile`` wrapper: hooks added to it later never fire."""
    if not is_compiled_module(model):
        return
    if unwrap_compiled(model) is not model:
        way = "Pass the eager model (model._orig_mod) and call that one inside the block; its results are the same."
    else:  # compiled in place with module.compile(): there is no eager twin to call
        way = ("It was compiled in place (module.compile()), so there is no eager twin to call: use the tool on a "
               "model that is not compiled, or call the tool before compiling.")
    raise TypeError(f"{tool} got a torch.compile'd model ({type(model).__name__}). Hooks registered after compiling "
                    f"do not run inside the compiled code, so nothing would be recorded. {way}")


NO_CALL_CAUSES = (
    "the model was not called inside the block; or the model (or a model containing this module) was "
    "torch.compile'd (hooks added after compiling do not run in the compiled code: call the eager model, "
    "model._orig_mod); or the module is a container that is never called itself (nn.ModuleList, "
    "nn.ModuleDict: name one of its children); or its weights are used functionally (e.g. "
    "MultiheadAttention.out_proj); or the module was replaced in the model after the tool was made "
    "(model.fc = nn.Linear(...)): the hooks stay on the old module, so make the tool after replacing it")


def no_call_causes(compiled: str | None = None) -> str:
    """Why a module may never have run inside a tool's block; a ``torch.compile``'d model (``compiled``: what to
    call it, e.g. ``"the model"``) is named first, as the likely cause.

    >>> no_call_causes("the model").split(":")[0]
    "the model has been torch.compile'd, and hooks added after compiling do not run in the compiled code"
    """
    if compiled is None:
        return f"Possible causes: {NO_CALL_CAUSES}"
    return (f"{compiled} has been torch.compile'd, and hooks added after compiling do not run in the compiled code: "
            f"call the eager model inside the block. Other possible causes: {NO_CALL_CAUSES}")


def select_output(output: Any, selector: Any, name: str) -> Any:
    """The part of a module's output chosen by ``output=`` (an index, a key, or a function)."""
    if selector is None:
        return output
    try:
        return selector(output) if callable(selector) else output[selector]
    except (IndexError, KeyError, TypeError) as exc:
        raise TypeError(f"output={selector!r} does not select anything from what {name!r} returned "
                        f"({type(output).__name__}): {exc}") from None


def needs_tensor(output: Any, name: str, tool: str) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict):
        how = f"a key, e.g. output={next(iter(output), 'key')!r}"
    elif isinstance(output, (tuple, list)):
        how = "an index, e.g. output=0 (an LSTM's output sequence, MultiheadAttention's attn_output)"
    else:
        how = "a function that returns a tensor from it"
    raise TypeError(f"{tool} needs a tensor output, but {name!r} returned {type(output).__name__}; "
                    f"choose the tensor with output= ({how})")


def copy_output(t: Any, detach: bool, to_cpu: bool, clone: bool) -> Any:
    """``t`` with detach / to CPU / clone applied to every tensor in it (tuples, lists, named tuples, dicts)."""
    if isinstance(t, torch.Tensor):
        if detach:
            t = t.detach()
        if to_cpu:
            t = t.to("cpu")
        if clone:
            t = t.clone()
        return t
    if isinstance(t, (tuple, list)):
        items = [copy_output(v, detach, to_cpu, clone) for v in t]
        return type(t)(*items) if hasattr(t, "_fields") else type(t)(items)
    if isinstance(t, dict):
        return {k: copy_output(v, detach, to_cpu, clone) for k, v in t.items()}
    return t


def check_norm_type(norm_type: object) -> float:
    """The ``norm_type`` of a vector norm as a float: a number > 0 (``float('inf')``: the largest entry)."""
    if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float)):
        raise TypeError(f"norm_type must be a number such as 2.0 or float('inf'), got {norm_type!r}")
    if not norm_type > 0:
        raise ValueError(f"norm_type must be > 0 (2 = Euclidean, float('inf') = largest entry), got {norm_type!r}")
    return float(norm_type)


def loss_scale_reader(scaler: object | None) -> Callable[[], float | torch.Tensor]:
    """A function giving the current loss scale: hooks run on scaled gradients under ``GradScaler``.

    The scale comes as the scaler's own tensor where it has one, so a hook that divides by it does
    not wait for the GPU.
    """
    if scaler is None:
        return lambda: 1.0
    if not callable(getattr(scaler, "get_scale", None)):
        raise TypeError(f"scaler must be a torch.amp.GradScaler (the one whose scale() the loss goes through), "
                        f"got {type(scaler).__name__}")
    return lambda: loss_scale(scaler)


def is_dtensor(t: torch.Tensor) -> bool:
    """A DTensor (FSDP2's ``fully_shard`` makes every parameter one), without importing torch.distributed."""
    return hasattr(t, "placements") and hasattr(t, "device_mesh") and hasattr(t, "to_local")


def in_process_group() -> bool:
    """True in a ``torch.distributed`` process group of more than one process (DDP averages gradients
    inside backward there)."""
    import torch.distributed as dist
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
