"""Every place hooklab depends on a private part of PyTorch, in one module.

PyTorch keeps no promise about names that start with an underscore, so hooklab touches them
only through the functions below. ``tests/library/test_torch_internals.py`` asserts that each one
still exists on the installed torch (run it first after an upgrade: a rename fails there,
by name, instead of as a silently empty inventory somewhere else).

When a private name is gone, each function either falls back to a documented public
equivalent (``fallback``) or raises :class:`MissingTorchInternal`, which names the torch
version and the hooklab feature that needs it (``required``). :data:`INTERNALS` lists them all.

>>> INTERNALS["Storage._cdata"].kind, INTERNALS["torch._C._current_graph_task_id"].kind
('required', 'fallback')
"""
from __future__ import annotations

import functools
import importlib
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.utils.checkpoint  # `import torch` alone does not import it before torch 2.8
from torch.nn.modules import module as _module_globals

from .errors import MissingTorchInternal

__all__ = [
    "ATEN_OP_TYPES",
    "INTERNALS",
    "checkpoint_recomputed",
    "checkpoint_region",
    "MissingTorchInternal",
    "TorchDispatchMode",
    "StorageWeakRef",
    "active_ddp",
    "current_graph_task_id",
    "handle_alive",
    "parametrize_cache_enabled",
    "loss_scale",
    "module_call_codes",
    "need",
    "global_optimizer_hook_dicts",
    "optimizer_hook_dicts",
    "queue_backward_callback",
    "global_hook_dicts",
    "is_compiled_module",
    "is_parameter_like",
    "module_hook_dicts",
    "saved_tensor_attrs",
    "storage_key",
    "top_saved_tensors_hooks",
    "pop_saved_tensors_hooks",
    "print_options",
    "tensor_hook_dicts",
    "tree_flatten",
    "unwrap_compiled",
    "was_compiled",
    "version",
]


@dataclass(frozen=True)
class Internal:
    """One private dependency: what it is used for and what happens without it."""

    feature: str
    kind: Literal["required", "fallback"]
    without: str  # what hooklab does when it is missing


INTERNALS: dict[str, Internal] = {
    "Storage._cdata": Internal(
        "storage identity (SavedTensorLedger, MemoryMeter, offloading)", "required", "raises MissingTorchInternal"),
    "Tensor._version": Internal(
        "in-place detection (capture, Tracer.retain_grad)", "fallback",
        "in-place overwrites of captured outputs are no longer detected"),
    "Tensor._base / Tensor._is_view": Internal(
        "telling parameters from activations without a model", "fallback",
        "views of parameters count as activations"),
    "torch.multiprocessing.reductions.StorageWeakRef": Internal(
        "counting a storage once while it lives (ledger, meter, offloading)", "required",
        "raises MissingTorchInternal"),
    "torch.utils._python_dispatch.TorchDispatchMode": Internal(
        "MemoryMeter (sees every op)", "required", "MemoryMeter raises MissingTorchInternal"),
    "torch._ops.OpOverload / OpOverloadPacket": Internal(
        "checking the ops listed in a selective-checkpointing policy", "fallback",
        "any object is accepted as an op (a wrong one then simply never matches)"),
    "torch.utils._pytree.tree_flatten": Internal(
        "finding tensors in nested inputs and outputs", "fallback",
        "the public torch.utils.pytree, or a small walk of tuples / lists / dicts"),
    "Node._saved_* attributes": Internal(
        "SavedTensorLedger.label_ops (naming the op that saved a tensor)", "required",
        "label_ops names nothing and says so"),
    "torch.nn.modules.module._global_* hook dicts": Internal(
        "listing global module hooks (hook_inventory)", "fallback",
        "global hooks are not listed (a missing dict reads as empty)"),
    "Module._forward_hooks etc., Module._is_full_backward_hook": Internal(
        "listing module hooks (hook_inventory)", "required", "hook_inventory raises MissingTorchInternal"),
    "Tensor._backward_hooks, Tensor._post_accumulate_grad_hooks": Internal(
        "listing tensor hooks (hook_inventory)", "fallback", "tensor hooks are not listed"),
    "torch._C._autograd._top_saved_tensors_default_hooks": Internal(
        "noticing saved-tensor contexts exited out of order (SavedTensorLedger) or left active (hook_inventory)",
        "fallback", "no such warning, and an active context is not listed"),
    "torch._C._autograd._pop_saved_tensors_default_hooks": Internal(
        "the exercise checkers: ending a saved-tensor hook context that a learner's answer left active",
        "fallback", "the leaked context stays active (the answer is still judged wrong)"),
    "Optimizer._optimizer_*_hooks, torch.optim.optimizer._global_optimizer_*_hooks": Internal(
        "hook_inventory of an optimizer", "fallback", "a missing hook dict is left out of the inventory"),
    "torch._C._current_graph_task_id": Internal(
        "the phase of a Tracer event; telling backward passes apart in clip_grad_norm_global_hooks, GradientMonitor "
        "and the clip hooks in a process group", "fallback",
        "the Tracer infers the phase from the kind of event; GradientMonitor, the global-norm clipping and the "
        "accumulated-stage clip hooks in a process group raise MissingTorchInternal"),
    "torch.autograd.Variable._execution_engine.queue_callback": Internal(
        "acting at the end of a backward, after DDP's averaging (GradientMonitor; clip hooks: a backward in which a "
        "parameter got no gradient, or inside a process group)",
        "required", "raises MissingTorchInternal"),
    "RemovableHandle.hooks_dict_ref": Internal(
        "HookScope.prune: dropping the handles of tensor and Node hooks whose graph is gone (Tracer with "
        "backward='outputs', find_nonfinite)", "fallback",
        "the handles are kept until the block ends (they hold no tensor, only a weak reference)"),
    "DistributedDataParallel._active_ddp_module": Internal(
        "GradientMonitor in a process group: telling a backward under DDP's no_sync() (not averaged) from one that is",
        "required", "GradientMonitor raises MissingTorchInternal when its block is entered in a process group"),
    "GradScaler._get_scale_async": Internal(
        "reading a GradScaler's scale inside hooks without waiting for the GPU (clip hooks, GradientMonitor)",
        "fallback", "get_scale(), which waits for the device once per hook call"),
    "torch._tensor_str.get_printoptions": Internal(
        "putting back the print options an exercise answer changed (course.check)", "fallback",
        "print options an answer changes are not put back"),
    "torch._dynamo.eval_frame.OptimizedModule": Internal(
        "recognising a torch.compile'd model", "fallback",
        "a compiled wrapper is recognised by its _orig_mod attribute"),
    "torch.utils.checkpoint._CheckpointFrame (in the checkpoint's saved-tensor pack hooks)": Internal(
        "telling a non-reentrant checkpoint's recomputation in backward from a new call (intervene replays the "
        "edit of the call being recomputed)", "fallback",
        "a recomputation is not recognised: intervene refuses a module call inside a backward pass"),
    "Module._call_impl / Module._wrapped_call_impl": Internal(
        "explain_hook: counting module calls with its profile function, without registering anything (a global "
        "module hook would make torch.compile recompile)", "fallback",
        "explain_hook counts module calls with a global forward pre-hook, and refuses a step that may run "
        "compiled code"),
    "torch.nn.utils.parametrize._cache_enabled": Internal(
        "explain_hook: saying that a parametrization ran once for several calls of the model because "
        "parametrize.cached() was active", "fallback", "the calls are counted without that reason"),
    "Module._is_torch_compile (set by torch.compile on the eager model)": Internal(
        "warning that hooks on a compiled model's eager copy recorded nothing", "fallback",
        "no such warning; the tools' no-call messages still list compiling as a cause"),
}


def need(name: str) -> MissingTorchInternal:
    """The error to raise when the internal ``name`` (a key of :data:`INTERNALS`) is missing."""
    return MissingTorchInternal(name, INTERNALS[name].feature)


# ---------------------------------------------------------------------------------- tensors
def storage_key(t: torch.Tensor) -> int:
    """An integer that identifies ``t``'s storage while it lives (the C++ storage pointer).

    ``data_ptr()`` is no substitute: every 0-byte storage has data pointer 0.
    """
    try:
        return t.untyped_storage()._cdata
    except AttributeError:
        raise need("Storage._cdata") from None


def version(t: Any) -> int | None:
    """``t``'s version counter (bumped by every in-place op), or None when there is none to read."""
    if not isinstance(t, torch.Tensor) or t.is_inference():
        return None  # inference tensors keep no version counter
    return getattr(t, "_version", None)


def is_parameter_like(t: torch.Tensor) -> bool:
    """True for a leaf that requires grad, or a view of one (``F.linear`` saves ``weight.t()``)."""
    is_view, base = getattr(t, "_is_view", None), getattr(t, "_base", None)
    if is_view is not None and is_view() and base is not None:
        t = base
    return t.is_leaf and t.requires_grad


def _import(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


StorageWeakRef: Any = _import("torch.multiprocessing.reductions", "StorageWeakRef")
if StorageWeakRef is None:  # pragma: no cover - only on a torch without it
    class StorageWeakRef:  # type: ignore[no-redef]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise need("torch.multiprocessing.reductions.StorageWeakRef")

TorchDispatchMode: Any = _import("torch.utils._python_dispatch", "TorchDispatchMode")
if TorchDispatchMode is None:  # pragma: no cover - only on a torch without it
    class TorchDispatchMode:  # type: ignore[no-redef]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise need("torch.utils._python_dispatch.TorchDispatchMode")


# the types of torch.ops.aten.mm.default (an overload) and torch.ops.aten.mm (its packet)
ATEN_OP_TYPES: tuple[type, ...] = tuple(t for t in (_import("torch._ops", "OpOverload"),
                                                    _import("torch._ops", "OpOverloadPacket")) if t is not None)


def _walk(tree: Any) -> Iterator[Any]:
    if isinstance(tree, (tuple, list)):
        for v in tree:
            yield from _walk(v)
    elif isinstance(tree, dict):
        for v in tree.values():
            yield from _walk(v)
    else:
        yield tree


_tree_flatten = (_import("torch.utils._pytree", "tree_flatten")
                 or _import("torch.utils.pytree", "tree_flatten"))


def tree_flatten(tree: Any) -> list[Any]:
    """The leaves of a nested structure of tuples, lists, dicts (and what torch's pytree knows).

    A tuple or list that torch's pytree leaves whole (a namedtuple such as ``PackedSequence`` on older torch)
    is walked too.
    """
    if _tree_flatten is None:
        return list(_walk(tree))
    return [leaf for node in _tree_flatten(tree)[0]
            for leaf in (_walk(node) if isinstance(node, (tuple, list, dict)) else (node,))]


# ---------------------------------------------------------------------------------- autograd
def saved_tensor_attrs(node: Any) -> list[str]:
    """The names of a Node's ``_saved_*`` attributes (each read runs the unpack hook)."""
    return [a for a in dir(node) if a.startswith("_saved_")]


_graph_task_id: Callable[[], int] | None = getattr(torch._C, "_current_graph_task_id", None)


def current_graph_task_id() -> int | None:
    """The autograd engine's id of the running backward pass (-1 outside one); None if unknown."""
    return _graph_task_id() if _graph_task_id is not None else None


def queue_backward_callback(fn: Any) -> None:
    """Ask the autograd engine to call ``fn()`` when the running backward pass ends (as DDP does)."""
    engine = getattr(getattr(torch.autograd, "Variable", None), "_execution_engine", None)
    if engine is None or not hasattr(engine, "queue_callback"):
        raise need("torch.autograd.Variable._execution_engine.queue_callback")
    engine.queue_callback(fn)


def active_ddp(module: Any) -> Any:
    """The ``DistributedDataParallel`` whose forward is running ``module`` (or ``module`` itself when it is
    one), None outside a DDP forward. Read in a forward pre-hook: DDP sets it around its wrapped module's call."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(module, DistributedDataParallel):
        return module
    if not hasattr(DistributedDataParallel, "_active_ddp_module"):
        raise need("DistributedDataParallel._active_ddp_module")
    return DistributedDataParallel._active_ddp_module


def top_saved_tensors_hooks() -> tuple[Any, Any] | None:
    """The (pack, unpack) pair on top of the saved-tensor hook stack; None when empty or unknown."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    return top(False) if top is not None else None


_CheckpointFrame: Any = getattr(torch.utils.checkpoint, "_CheckpointFrame", None)


def checkpoint_region() -> tuple[Any, bool] | None:
    """The non-reentrant activation-checkpoint region running now, and whether it is being recomputed.

    ``(frame, False)`` inside ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``'s first run,
    ``(frame, True)`` while backward recomputes it (the same ``frame`` object both times: a weak-referenceable
    key for what happened in that region); ``None`` outside any, or when a saved-tensor hooks context entered
    inside the region is on top of the stack. Read from the checkpoint's own pack hook (its closure holds the
    frame, or a weak reference to it while recomputing).
    """
    top = top_saved_tensors_hooks()
    if top is None or _CheckpointFrame is None or not getattr(top[0], "_checkpoint_internal", False):
        return None
    fn = top[0]
    for _ in range(4):  # the recomputation's pack hook is wrapped by torch._dynamo.disable
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(value, _CheckpointFrame):
                return value, False
            if isinstance(value, weakref.ReferenceType) and isinstance(value(), _CheckpointFrame):
                return value(), True
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            break
    return None


def checkpoint_recomputed(frame: Any) -> bool:
    """Whether backward has recomputed the region of a frame :func:`checkpoint_region` gave (False if unknown)."""
    done = getattr(frame, "is_recomputed", None)
    return done is not None and any(done.values())


def parametrize_cache_enabled() -> bool:
    """Whether ``torch.nn.utils.parametrize.cached()`` is active now (a parametrized tensor is computed once, on its
    first access, and reused until the context ends); False where the counter is gone."""
    import torch.nn.utils.parametrize as parametrize
    return bool(getattr(parametrize, "_cache_enabled", 0))


def handle_alive(handle: Any) -> bool:
    """False once the hook dict a ``RemovableHandle`` points to is gone (its tensor was freed)."""
    ref = getattr(handle, "hooks_dict_ref", None)
    return ref is None or ref() is not None


def loss_scale(scaler: Any) -> float | torch.Tensor:
    """A ``GradScaler``'s current scale without a host-device sync: its scale tensor when it has one.

    ``get_scale()`` returns a Python float, which on a GPU means waiting for the device (once per
    hook call, in a hook that runs for every parameter); the tensor can be used in the hook's
    arithmetic directly.
    """
    get_async = getattr(scaler, "_get_scale_async", None)
    if get_async is not None and getattr(scaler, "_enabled", False):
        scale = get_async()
        if isinstance(scale, torch.Tensor):
            return scale
    return scaler.get_scale()  # disabled (1.0), not used yet (the initial scale), or an older torch


def pop_saved_tensors_hooks() -> bool:
    """Pop the top of the saved-tensor hook stack (what leaving a ``saved_tensors_hooks`` block does);
    False when torch gives no way to (nothing is popped then)."""
    pop = getattr(torch._C._autograd, "_pop_saved_tensors_default_hooks", None)
    if pop is None:
        return False
    pop()
    return True


def print_options() -> dict[str, Any] | None:
    """torch's current print options, to give back to ``torch.set_printoptions`` (no public getter
    exists); None when this torch has none to read."""
    get = getattr(getattr(torch, "_tensor_str", None), "get_printoptions", None)
    return dict(get()) if get is not None else None


# ---------------------------------------------------------------------------------- hook dicts
_GLOBAL = {
    "_global_forward_pre_hooks": "forward_pre",
    "_global_forward_hooks": "forward",
    "_global_backward_pre_hooks": "backward_pre",
    "_global_backward_hooks": "backward",
    "_global_module_registration_hooks": "module_registration",
    "_global_parameter_registration_hooks": "parameter_registration",
    "_global_buffer_registration_hooks": "buffer_registration",
}
# bookkeeping dicts keyed by the same handle ids (flags of the hooks above)
GLOBAL_HOOK_FLAGS = ("_global_forward_hooks_always_called", "_global_forward_hooks_with_kwargs")

_MODULE = {
    "_forward_pre_hooks": "forward_pre",
    "_forward_hooks": "forward",
    "_backward_pre_hooks": "backward_pre",
    "_backward_hooks": "backward",
    "_state_dict_pre_hooks": "state_dict_pre",
    "_state_dict_hooks": "state_dict",
    "_load_state_dict_pre_hooks": "load_state_dict_pre",
    "_load_state_dict_post_hooks": "load_state_dict_post",
}


def global_hook_dicts() -> list[tuple[str, str, dict]]:
    """``(attribute, kind, dict)`` for each of PyTorch's global module-hook dicts (missing ones skipped)."""
    return [(attr, kind, d) for attr, kind in _GLOBAL.items()
            if isinstance(d := getattr(_module_globals, attr, None), dict)]


def global_full_backward() -> bool | None:
    """Whether the global backward hooks are full ones (None: none registered / unknown)."""
    return getattr(_module_globals, "_global_is_full_backward_hook", None)


def module_hook_dicts(m: torch.nn.Module) -> list[tuple[str, str, dict]]:
    """``(attribute, kind, dict)`` for each hook dict of one module (its own hooks, not its children's)."""
    out = []
    for attr, kind in _MODULE.items():
        d = m.__dict__.get(attr, getattr(m, attr, None))
        if d is None and attr in ("_forward_pre_hooks", "_forward_hooks", "_backward_hooks"):
            raise need("Module._forward_hooks etc., Module._is_full_backward_hook")
        out.append((attr, kind, d or {}))
    return out


_OPTIMIZER = {
    "_optimizer_step_pre_hooks": "step_pre",
    "_optimizer_step_post_hooks": "step_post",
    "_optimizer_state_dict_pre_hooks": "state_dict_pre",
    "_optimizer_state_dict_post_hooks": "state_dict",
    "_optimizer_load_state_dict_pre_hooks": "load_state_dict_pre",
    "_optimizer_load_state_dict_post_hooks": "load_state_dict_post",
}
_GLOBAL_OPTIMIZER = {"_global_optimizer_pre_hooks": "optimizer_step_pre",
                     "_global_optimizer_post_hooks": "optimizer_step_post"}


def optimizer_hook_dicts(opt: torch.optim.Optimizer) -> list[tuple[str, str, dict]]:
    """``(attribute, kind, dict)`` for each hook dict of one optimizer (missing ones skipped)."""
    return [(attr, kind, d) for attr, kind in _OPTIMIZER.items() if isinstance(d := getattr(opt, attr, None), dict)]


def global_optimizer_hook_dicts() -> list[tuple[str, str, dict]]:
    """``(attribute, kind, dict)`` for the global optimizer step hooks of ``torch.optim.optimizer``."""
    import torch.optim.optimizer as optimizer_globals
    return [(attr, kind, d) for attr, kind in _GLOBAL_OPTIMIZER.items()
            if isinstance(d := getattr(optimizer_globals, attr, None), dict)]


def module_full_backward(m: torch.nn.Module) -> bool | None:
    """True / False: the module's backward hooks are full / old-style ones; None: none registered."""
    return getattr(m, "_is_full_backward_hook", None)


def tensor_hook_dicts(t: torch.Tensor) -> list[tuple[str, dict]]:
    """``(kind, dict)`` of a tensor's gradient hooks and post-accumulate-grad hooks."""
    return [("tensor", getattr(t, "_backward_hooks", None) or {}),
            ("post_accumulate_grad", getattr(t, "_post_accumulate_grad_hooks", None) or {})]


# ---------------------------------------------------------------------------------- torch.compile
@functools.cache  # imported on first use: torch._dynamo is heavy, and most code never compiles
def _optimized_module_type() -> type | None:
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except Exception:  # pragma: no cover - no dynamo on this build
        return None
    return OptimizedModule


def is_compiled_module(m: Any) -> bool:
    """True for the wrapper that ``torch.compile(model)`` returns (or a module compiled in place)."""
    opt = _optimized_module_type()
    if opt is not None and isinstance(m, opt):
        return True
    if isinstance(m, torch.nn.Module) and isinstance(getattr(m, "_orig_mod", None), torch.nn.Module):
        return True
    return getattr(m, "_compiled_call_impl", None) is not None  # nn.Module.compile()


def was_compiled(m: Any) -> bool:
    """True when ``torch.compile(m)`` was called: its wrapper marks the eager model (a hint, not a promise)."""
    return bool(getattr(m, "_is_torch_compile", False)) or is_compiled_module(m)


def module_call_codes() -> tuple[Any, Any]:
    """The code objects of ``Module._call_impl`` (every ``module(...)`` call runs it, hooks or not) and of
    ``Module._wrapped_call_impl`` (the ``__call__`` that picks ``_compiled_call_impl`` for a module compiled in
    place); ``None`` for one that is gone."""
    call = getattr(getattr(torch.nn.Module, "_call_impl", None), "__code__", None)
    wrapped = getattr(getattr(torch.nn.Module, "_wrapped_call_impl", None), "__code__", None)
    return call, wrapped


def unwrap_compiled(m: torch.nn.Module) -> torch.nn.Module:
    """The eager model inside a ``torch.compile`` wrapper (``m`` itself otherwise)."""
    inner = getattr(m, "_orig_mod", None)
    return inner if isinstance(inner, torch.nn.Module) else m
