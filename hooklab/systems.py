"""Every hook system on a module tree in one table: PyTorch's own hooks, and what libraries put in their place.

:func:`~hooklab.hook_inventory` lists what PyTorch's hook dicts hold. Libraries that own a model often hook it in
other ways that those dicts never show: accelerate and diffusers replace ``forward`` on the instance, PEFT wraps a
layer in another module, ``torch.compile`` puts a wrapper around the model, a parametrization recomputes a weight on
every access, quantization hangs observers on modules and FSDP2 / tensor parallelism turn parameters into
``DTensor``s. :func:`all_hooks` reports all of them, module by module, each with who put it there (``owner``) and how
to take it off again (``remove``)::

    >>> import torch
    >>> from torch import nn
    >>> from torch.nn.utils import parametrizations, prune
    >>> model = nn.Sequential(nn.Linear(2, 2))
    >>> _ = prune.l1_unstructured(model[0], "bias", amount=0.5)
    >>> _ = parametrizations.weight_norm(model[0])
    >>> for r in all_hooks(model):
    ...     print(r.where, "|", r.kind, "|", r.what, "|", r.owner)
    0 | forward_pre | L1Unstructured (mask on 'bias'; its gradient is in bias_orig.grad) | torch.nn.utils.prune
    0 | load_state_dict_pre | weight_norm._weight_norm_compat_hook | torch.nn.utils.parametrize
    0 | parametrization | weight: _WeightNorm (hook .original) | torch.nn.utils.parametrize

A hook defined in a notebook or a script is ``"your code"``; :func:`show_all_hooks` prints the table with the
``remove`` column.

A library that is not installed (or not imported by anyone) is skipped: nothing here imports accelerate,
diffusers, PEFT, torchao or the distributed packages; their marks are recognised on the modules themselves.
"""
from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from . import _torch_internals as internals
from ._text import format_table
from .inventory import hook_name

__all__ = ["HookRecord", "all_hooks", "hook_owner", "show_all_hooks"]


@dataclass(frozen=True)
class HookRecord:
    """One hook, wrapper or replacement on a module: where, what kind, what it is, who put it there, how to remove it."""

    where: str
    kind: str
    what: str
    owner: str
    remove: str


# the first matching prefix of a hook's module names its owner
_OWNERS = (
    ("torch.ao.quantization", "torch.ao.quantization"), ("torch.ao", "torch.ao.quantization"),
    ("torchao", "torchao"), ("torch.nn.utils.prune", "torch.nn.utils.prune"),
    ("torch.nn.utils.weight_norm", "torch.nn.utils.weight_norm"),
    ("torch.nn.utils.spectral_norm", "torch.nn.utils.spectral_norm"),
    ("torch.nn.utils.parametrize", "torch.nn.utils.parametrize"),
    ("torch.nn.utils.parametrizations", "torch.nn.utils.parametrize"),
    ("torch.distributed.fsdp._fully_shard", "FSDP2"), ("torch.distributed.fsdp", "FSDP1"), ("torch.distributed.tensor", "tensor parallel (DTensor)"),
    ("torch.distributed", "torch.distributed"), ("torch.export", "torch.export"), ("torch._export", "torch.export"),
    ("torch", "torch"), ("hooklab", "hooklab"),
    ("accelerate", "accelerate"), ("diffusers", "diffusers"), ("peft", "peft"), ("captum", "captum"),
    ("timm", "timm"), ("transformers", "transformers"), ("pytorch_lightning", "Lightning"),
    ("lightning", "Lightning"), ("__main__", "your code"),
)
_REMOVE = {
    "hooklab": "ends with the tool's with block (HookScope.remove())",
    "torch.ao.quantization": "convert() replaces the module and drops its observers; prepare() gave no handle",
    "torchao": "none: part of the quantized model",
    "torch.nn.utils.weight_norm": "torch.nn.utils.remove_weight_norm(module)",
    "torch.nn.utils.spectral_norm": "torch.nn.utils.remove_spectral_norm(module)",
    "torch.nn.utils.parametrize": "goes with torch.nn.utils.parametrize.remove_parametrizations(module, name)",
    "FSDP2": "none: fully_shard cannot be undone (build the model again)",
    "FSDP1": "none: part of the FullyShardedDataParallel wrapper (build the model again without it)",
    "tensor parallel (DTensor)": "none: parallelize_module keeps no handles (build the model again)",
    "captum": "captum removes it when attribute() returns",
    "timm": "none: part of the timm model (build it without features_only)",
    "torch.jit (compiled in by scripting)": "none: compiled into the TorchScript module (script the model again "
                                            "without it)",
    "torch.export": "none: part of the module torch.export made (ep.module()); export the model again",
}
# transformers' hooks, by the hook function's name: what each one is for, and how it goes
_TRANSFORMERS = {
    "output_capturing_hook": "none needed: transformers' own output capturing (it records only when "
                             "output_hidden_states / output_attentions ask)",
    "make_inputs_require_grads": "model.disable_input_require_grads() on the transformers model (it removes what "
                                 "enable_input_require_grads and gradient_checkpointing_enable registered)",
}


def _unwrap(fn: Any) -> Any:
    """The function behind a hook: through functools.partial, bound methods, torch's _WrappedHook, wrappers."""
    for _ in range(8):
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif inspect.ismethod(fn):
            fn = fn.__func__
        elif type(fn).__name__ == "_WrappedHook" and hasattr(fn, "hook"):  # load_state_dict hooks
            fn = fn.hook
        elif hasattr(fn, "__wrapped__") and not inspect.isfunction(fn):
            fn = fn.__wrapped__
        else:
            return fn
    return fn


def hook_owner(fn: Any) -> str:
    """Who registered a hook, from the module its function was defined in: a library's name, ``"your code"``
    for a notebook or script (``__main__``), else the top-level package.

    >>> from torch.nn.utils import prune
    >>> hook_owner(print)
    'builtins'
    >>> layer = prune.l1_unstructured(torch.nn.Linear(2, 2), "weight", amount=0.5)
    >>> [hook_owner(h) for h in layer._forward_pre_hooks.values()]
    ['torch.nn.utils.prune']
    """
    if _library_object(fn):  # a library's callable object that wraps torch's function (nnsight's Controller)
        return _owner_of(type(fn).__module__ or "")
    inner = _unwrap(fn)
    if type(inner).__name__ == "ScriptFunction":
        return "torch.jit (compiled in by scripting)"
    plain = inspect.isfunction(inner) or inspect.isbuiltin(inner) or inspect.isclass(inner)
    module = getattr(inner, "__module__", None) if plain else None
    return _owner_of(module or getattr(type(inner), "__module__", None) or "")


def _owner_of(module: str) -> str:
    for prefix, owner in _OWNERS:
        if module == prefix or module.startswith(prefix + "."):
            return owner
    return module.split(".")[0] or "unknown"


def _library_object(fn: Any) -> bool:
    """A callable object (not a function, method or partial) of a class from outside PyTorch and the standard
    library, which wraps another callable (``__wrapped__``): its class says who put it there, not what it wraps."""
    if inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isbuiltin(fn) or isinstance(fn, functools.partial):
        return False
    top = (type(fn).__module__ or "").split(".")[0]
    return hasattr(fn, "__wrapped__") and top not in ("torch", "functools", "builtins", "hooklab", "__main__")


def _remove_hint(owner: str, kind: str, fn: Any) -> str:
    if owner == "torch.nn.utils.prune":
        return f"torch.nn.utils.prune.remove(module, {getattr(_unwrap(fn), '_tensor_name', 'weight')!r})"
    if owner == "transformers":
        short = getattr(_unwrap(fn), "__name__", "")
        return _TRANSFORMERS.get(short, "transformers' own API (it kept the handle)")
    if owner == "peft" and getattr(_unwrap(fn), "__name__", "") == "make_inputs_require_grad":
        return ("no handle kept: PEFT registered it without keeping one (harmless: it only makes the embeddings' "
                "output require gradients)")
    if owner in _REMOVE:
        return _REMOVE[owner]
    if owner in ("accelerate", "diffusers", "peft", "Lightning", "torch", "torch.distributed"):
        return f"{owner}'s own API (it kept the handle)"
    register = {"forward_pre": "register_forward_pre_hook", "forward": "register_forward_hook",
                "backward_pre": "register_full_backward_pre_hook", "backward": "register_full_backward_hook",
                "tensor": "register_hook", "post_accumulate_grad": "register_post_accumulate_grad_hook"}
    return f"handle.remove() (the handle {register.get(kind, 'the register_* call')} returned)"


def _what(fn: Any, owner: str) -> str:
    if type(fn).__name__ == "ScriptFunction":
        return f"{str(getattr(fn, 'qualified_name', 'hook')).rsplit('.', 1)[-1]} (TorchScript)"
    name = hook_name(fn)
    if owner == "torch.nn.utils.prune":
        tensor = getattr(_unwrap(fn), "_tensor_name", "weight")
        return f"{name} (mask on {tensor!r}; its gradient is in {tensor}_orig.grad)"
    return name


# ---------------------------------------------------------------------------------------------- probes
def _torch_hooks(where: str, module: nn.Module, kept: dict[int, str] | None = None) -> Iterator[HookRecord]:
    """``kept``: hook ids -> the name of the transformers model whose ``_require_grads_hooks`` holds that handle."""
    full = internals.module_full_backward(module)
    for attr, kind, hooks in internals.module_hook_dicts(module):
        shown = "backward (old-style)" if kind == "backward" and full is False else kind
        for key, fn in hooks.items():
            owner = hook_owner(fn)
            remove = _remove_hint(owner, kind, fn)
            if owner == "transformers" and getattr(_unwrap(fn), "__name__", "") == "make_inputs_require_grads" \
                    and kept is not None:
                holder = kept.get(key)
                if holder is not None:
                    remove = (f"{holder or 'model'}.disable_input_require_grads() (transformers; it kept this "
                              "handle)")
                else:
                    remove = ("its handle is lost: enable_input_require_grads ran again (gradient_checkpointing_"
                              "enable, then get_peft_model or Trainer) and kept only the newer one; "
                              f"module.{attr}.pop({key}) removes this one")
            yield HookRecord(where, shown, _what(fn, owner), owner, remove)


def _require_grads_handles(model: nn.Module) -> dict[int, str]:
    """The hook ids that transformers' ``enable_input_require_grads`` kept handles of, by the owning model's name."""
    kept = {}
    for name, module in model.named_modules():
        for handle in module.__dict__.get("_require_grads_hooks", None) or []:
            if hasattr(handle, "id"):
                kept[handle.id] = name
    return kept


def _tensor_hooks(where: str, module: nn.Module, seen: set[int]) -> Iterator[HookRecord]:
    for pname, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
        if id(tensor) in seen:  # a tied tensor is listed once, under its first name
            continue
        seen.add(id(tensor))
        place = f"{where}.{pname}" if where else pname
        for kind, hooks in internals.tensor_hook_dicts(tensor):
            for fn in hooks.values():
                owner = hook_owner(fn)
                yield HookRecord(place, kind, hook_name(fn), owner, _remove_hint(owner, kind, fn))
        yield from _tensor_kind(place, tensor)


_PLAIN = (torch.Tensor, nn.Parameter, getattr(nn, "Buffer", nn.Parameter))  # nn.Buffer: torch >= 2.5
_LAZY: type = getattr(torch.nn.parameter, "UninitializedTensorMixin", type(None))  # a lazy module's parameters


def _tensor_kind(place: str, tensor: torch.Tensor) -> Iterator[HookRecord]:
    """Parameters that are not plain tensors: DTensor shards, quantized subclasses, values kept elsewhere."""
    cls = type(tensor)
    if cls.__name__ == "DTensor":
        placements = ", ".join(str(p) for p in getattr(tensor, "placements", ()))
        yield HookRecord(place, "DTensor", f"sharded / replicated over a device mesh ({placements})",
                         "torch.distributed.tensor", "none: the model was sharded (FSDP2 or tensor parallelism)")
    elif cls not in _PLAIN and not issubclass(cls, _LAZY):
        owner = hook_owner(cls)
        yield HookRecord(place, "tensor subclass", f"{cls.__name__}: ops on it run the subclass's code; module "
                         "hooks still run", owner, "none: the library's quantization replaced the tensor")
    elif tensor.is_meta:
        yield HookRecord(place, "on meta device", "no values here: an offloading hook loads them for forward",
                         "accelerate or diffusers (offloading)", "remove the offloading hooks (values come back)")


def _is_script_module(module: Any) -> bool:
    jit = getattr(torch, "jit", None)
    script_module = getattr(jit, "ScriptModule", None)
    return isinstance(script_module, type) and isinstance(module, script_module)


def _replaced_forward(where: str, module: nn.Module) -> Iterator[HookRecord]:
    forward = module.__dict__.get("forward")
    if forward is None or compiled(module) or _is_script_module(module):
        return  # torch.compile's wrapper and a TorchScript module set their own forward (their rows say so)
    if inspect.ismethod(forward) and forward.__self__ is module and forward.__func__ is type(module).forward:
        return  # the class's own forward put back on the instance (what accelerate leaves after removal)
    hf_hook = module.__dict__.get("_hf_hook")
    registry = module.__dict__.get("_diffusers_hook")
    owner = hook_owner(forward)
    if hf_hook is not None:
        if owner != "accelerate":  # someone replaced accelerate's replacement
            yield HookRecord(where, "forward replaced", f"{hook_name(forward)} (set on the instance, over "
                             "accelerate's forward)", owner, "set module.forward back to the forward you replaced "
                             "(accelerate's); del module.forward would drop accelerate's too")
        what = _accelerate_hook(hf_hook)
        remove = "accelerate.hooks.remove_hook_from_module(module, recurse=True)"
        if "CpuOffload" in what:
            remove = ("hook.remove() on the hook that cpu_offload_with_hook returned (or " + remove + ")")
        yield HookRecord(where, "forward replaced", what, "accelerate", remove)
    elif registry is not None:
        hooks = getattr(registry, "hooks", {}) or {}
        what = ", ".join(f"{n} ({type(h).__name__})" for n, h in hooks.items()) or "an empty registry"
        first = next(iter(hooks), "name")
        remove = f"module._diffusers_hook.remove_hook({first!r}, recurse=True)"
        if any(type(h).__name__ == "LayerwiseCastingHook" for h in hooks.values()):
            remove = "none: layerwise casting cannot be undone (diffusers raises; load the model again)"
        yield HookRecord(where, "forward replaced", f"HookRegistry: {what}", "diffusers", remove)
    elif owner in ("torch", "torch.export"):
        yield HookRecord(where, "forward replaced", f"{hook_name(forward)} (set on the instance by torch)", owner,
                         "none: part of the module torch built (keep it; deleting it breaks that module)")
    else:
        yield HookRecord(where, "forward replaced", f"{hook_name(forward)} (set on the instance)", owner,
                         "del module.forward (the class's forward comes back)")


def _accelerate_hook(hook: Any) -> str:
    inner = getattr(hook, "hooks", None)
    if isinstance(inner, (list, tuple)):  # SequentialHook
        return f"{type(hook).__name__}({', '.join(_accelerate_hook(h) for h in inner)})"
    fields = [f"{k}={getattr(hook, k)}" for k in ("execution_device", "offload") if hasattr(hook, k)]
    return f"{type(hook).__name__}({', '.join(fields)})" if fields else type(hook).__name__


def compiled(module: Any) -> bool:
    """Whether ``module`` is a torch.compile wrapper or compiled in place, without importing torch._dynamo (a
    few seconds) when nothing in this process has compiled anything."""
    return "torch._dynamo" in sys.modules and internals.is_compiled_module(module)


def _subclass_of(obj: Any, module_name: str, class_name: str) -> bool:
    """isinstance(obj, module_name.class_name) when that library is already imported (never imports it)."""
    lib = sys.modules.get(module_name)
    cls = getattr(lib, class_name, None) if lib is not None else None
    return isinstance(cls, type) and isinstance(obj, cls)


def _base_names(obj: Any) -> set[str]:
    return {c.__name__ for c in type(obj).__mro__}


def _wrappers(where: str, module: nn.Module) -> Iterator[HookRecord]:
    if compiled(module):
        if internals.unwrap_compiled(module) is not module:
            yield HookRecord(where, "compiled", "torch.compile wrapper of _orig_mod: module hooks added after the "
                             "first call do not run in the compiled code", "torch.compile",
                             "call model._orig_mod (the eager model) instead")
        else:
            yield HookRecord(where, "compiled", "compiled in place (module.compile()): hooks added after the first "
                             "call do not run in the compiled code", "torch.compile",
                             "none: register hooks before the first call, or build the model again")
    if isinstance(module, nn.parallel.DistributedDataParallel):
        yield HookRecord(where, "wrapper", "DistributedDataParallel: averages gradients with its reducer's autograd "
                         "hooks (C++, in no hook dict); parameters' own hooks see this process's gradient",
                         "torch.distributed", "call model.module for the plain model (the hooks stay)")
    elif isinstance(module, nn.DataParallel):
        yield HookRecord(where, "wrapper", "DataParallel: with GPUs, each forward runs replicas that share the "
                         "modules' hook dicts (hooks get the replica as `module`)", "torch",
                         "call model.module for the plain model")
    if _subclass_of(module, "torch.distributed.fsdp", "FullyShardedDataParallel"):
        yield HookRecord(where, "wrapper", "FullyShardedDataParallel (FSDP1): parameters are flattened into "
                         "_flat_param; FSDP's gradient hooks (on outputs and on the flat parameter's AccumulateGrad, "
                         "in no hook dict) reduce the gradients; a hook on an original parameter does not fire",
                         "FSDP1", "none: build the model again without the wrapper (model.module is the wrapped "
                         "model, its parameters views of the flat one)")
    if _subclass_of(module, "torch.distributed.fsdp", "FSDPModule"):
        yield HookRecord(where, "FSDP2", "fully_shard: parameters are DTensor shards, gathered by FSDP's forward "
                         "pre-hook and freed by its forward hook", "FSDP2",
                         "none: fully_shard cannot be undone (build the model again)")
    if _is_script_module(module):
        yield HookRecord(where, "TorchScript", "torch.jit.script / trace module: its forward runs compiled "
                         "TorchScript; hooks it compiled in (registered before scripting) run inside it, Python "
                         "hooks registered now fire only when Python calls this very module", "torch.jit",
                         "none: hook the original nn.Module (before scripting), or script it again")
    if _subclass_of(module, "peft", "PeftModel"):
        yield from _peft_model(where, module)
    if _subclass_of(module, "peft.utils.other", "ModulesToSaveWrapper"):
        wrapper: Any = module
        active = list(getattr(wrapper, "active_adapters", []) or [])
        copies = sorted(getattr(getattr(wrapper, "modules_to_save", None), "keys", lambda: [])())
        yield HookRecord(where, "wrapper", f"ModulesToSaveWrapper (modules_to_save): runs its copy "
                         f"modules_to_save[{active[0] if active else '?'}!r] (copies {copies}: deep copies that "
                         "get_peft_model made, with the hooks original_module had then); original_module runs only "
                         "with the adapters disabled: hook the copy", "peft",
                         "merge_and_unload() / unload() on the PeftModel (the trained copy takes its place)")
    if _subclass_of(module, "torch.fx", "GraphModule"):
        yield HookRecord(where, "FX graph", "GraphModule: only the submodules its graph calls (call_module nodes) "
                         "run their hooks; inlined modules never run", "torch.fx",
                         "use the original model for hooks on inlined modules")


def _peft_model(where: str, module: Any) -> Iterator[HookRecord]:
    base = module.get_base_model() if hasattr(module, "get_base_model") else None
    prefix = next((name for name, sub in module.named_modules() if sub is base), None) if base is not None else None
    shown = f"every submodule name gains the prefix {prefix + '.'!r}" if prefix else "names gain a prefix"
    yield HookRecord(where, "wrapper", f"PeftModel: {shown}", "peft",
                     "model.unload() or model.merge_and_unload() gives the plain model back")
    config = getattr(module, "active_peft_config", None)
    if getattr(config, "is_prompt_learning", False):
        tokens = getattr(config, "num_virtual_tokens", "?")
        kind = getattr(getattr(config, "peft_type", None), "value", None) or type(config).__name__
        yield HookRecord(where, "prompt learning", f"{kind}: {tokens} virtual token(s) from prompt_encoder are put "
                         "before the input embeddings: a hook on the input embeddings sees your tokens only; the "
                         f"layers see {tokens} more", "peft",
                         "none: part of the PeftModel (call get_base_model() for the model without them)")


def _peft_layer(where: str, module: nn.Module) -> Iterator[HookRecord]:
    if not _subclass_of(module, "peft.tuners.tuners_utils", "BaseTunerLayer"):
        return
    layer: Any = module  # PEFT's BaseTunerLayer (untyped)
    base = layer.get_base_layer() if hasattr(layer, "get_base_layer") else None
    names = tuple(getattr(layer, "adapter_layer_names", ())) or ("lora_A", "ia3_l", "lora_embedding_A")
    adapters = sorted({key for d in names for key in getattr(getattr(module, d, None), "keys", lambda: [])()})
    state = f"active {list(getattr(module, 'active_adapters', []))}, merged {bool(getattr(module, 'merged', False))}"
    if getattr(module, "disable_adapters", False):
        state += ", disabled"
    yield HookRecord(where, "adapter layer",
                     f"{type(module).__name__} around base_layer {type(base).__name__}: adapters {adapters}, {state}; "
                     "a hook on base_layer misses the adapter's part", "peft",
                     "merge_and_unload() / unload() on the PeftModel (base_layer comes back, with its hooks)")


def _quantization(where: str, module: nn.Module) -> Iterator[HookRecord]:
    bases = _base_names(module)
    typename = type(module).__module__
    if bases & {"ObserverBase", "FakeQuantizeBase"}:
        owner = "torchao" if typename.startswith("torchao") else "torch.ao.quantization"
        low = getattr(module, "min_val", None)
        if isinstance(low, torch.Tensor) and low.numel():
            ran = bool(torch.isfinite(low).all())
            state = "saw data" if ran else "never ran (min_val is inf): convert() will use default qparams"
        else:
            state = "calibration state not readable"
        yield HookRecord(where, "observer", f"{type(module).__name__}: {state}", owner,
                         "convert() replaces the observers with quantize / dequantize")
    elif typename.startswith(("torch.ao.nn.quantized", "torch.ao.nn.intrinsic.quantized")) and \
            not type(module).__name__.endswith("PackedParams"):
        yield HookRecord(where, "quantized module", f"{type(module).__name__}: runs on quantized tensors (hooks "
                         "carried over by convert() see them)", "torch.ao.quantization", "none: the converted model")
    elif typename.startswith("torch.ao.nn.intrinsic"):
        yield HookRecord(where, "fused", f"{type(module).__name__}: its children are copies of the fused modules "
                         "(they keep their own hooks)", "torch.ao.quantization", "none: fuse a fresh copy of the model")


def _parametrizations(where: str, module: nn.Module) -> Iterator[HookRecord]:
    if not torch.nn.utils.parametrize.is_parametrized(module):
        return
    parametrizations: Any = module.parametrizations
    for tensor_name, plist in parametrizations.items():
        kinds = ", ".join(type(p).__name__ for p in plist)
        yield HookRecord(where, "parametrization", f"{tensor_name}: {kinds} (hook .original)",
                         "torch.nn.utils.parametrize",
                         f"torch.nn.utils.parametrize.remove_parametrizations(module, {tensor_name!r})")


def _device_map(where: str, module: nn.Module) -> Iterator[HookRecord]:
    device_map = module.__dict__.get("hf_device_map")
    if isinstance(device_map, dict):
        text = repr(device_map)
        live = any("_hf_hook" in m.__dict__ for m in module.modules())
        yield HookRecord(where, "device map", (text if len(text) <= 80 else text[:77] + "...") + (
                         "" if live else " (a record only: no accelerate hook is left)"), "accelerate",
                         "accelerate.hooks.remove_hook_from_module(model, recurse=True); it keeps this record: "
                         "del model.hf_device_map")


_PROBES: tuple[Callable[[str, nn.Module], Iterator[HookRecord]], ...] = (
    _wrappers, _device_map, _replaced_forward, _torch_hooks, _peft_layer, _quantization, _parametrizations)


def all_hooks(model: nn.Module, *, name: str = "") -> list[HookRecord]:
    """Every hook, wrapper and replacement on ``model``'s modules, in every hook system hooklab knows.

    Per module, in ``named_modules()`` order: wrappers (``torch.compile``, DDP, DataParallel, FSDP2, PEFT, FX),
    accelerate's device map, a ``forward`` replaced on the instance (accelerate, diffusers, anyone), PyTorch's
    module hooks in firing order, adapter layers (PEFT), quantization (observers, fused and quantized modules),
    parametrizations, then the tensors' hooks and unusual parameters (``DTensor``, tensor subclasses, values on the
    meta device). Global hooks are left out (:func:`~hooklab.hook_inventory` lists them). ``name`` prefixes the
    places, as in :func:`~hooklab.hook_inventory`.

    >>> from torch import nn
    >>> [(r.where, r.kind, r.owner) for r in all_hooks(nn.Linear(2, 2))]
    []
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"all_hooks takes an nn.Module (a model or one of its submodules), got {type(model).__name__}"
                        + not_a_module_hint(model, "all_hooks"))
    if not isinstance(name, str):
        raise TypeError(f"name is a prefix for the places listed (a string such as 'model'), got {name!r}")
    records: list[HookRecord] = []
    seen: set[int] = set()
    kept = _require_grads_handles(model)
    for sub_name, module in model.named_modules():
        where = ".".join(p for p in (name, sub_name) if p) or type(module).__name__
        records.extend(module_records(module, where, seen=seen, kept=kept))
    scripted = {r.where for r in records if r.kind == "TorchScript"}
    return [r for r in records if r.kind != "TorchScript" or not any(
        r.where.startswith(outer + ".") or (outer == type(model).__name__ and r.where != outer)
        for outer in scripted)]  # one TorchScript row: the outermost scripted module's


def not_a_module_hint(obj: Any, tool: str) -> str:
    """What to pass instead of ``obj``, which is not an ``nn.Module`` (the end of a ``TypeError``'s message)."""
    if isinstance(obj, (torch.Tensor, torch.optim.Optimizer)):
        return "; for a tensor or an optimizer use hooklab.hook_inventory"
    if _base_names(obj) & {"ExportedProgram"}:
        return (f"; an ExportedProgram (torch.export) is not a module: pass ep.module(), the module it runs "
                f"({tool}(ep.module()))")
    components = getattr(obj, "components", None)
    if isinstance(components, dict):
        modules = [k for k, v in components.items() if isinstance(v, nn.Module)]
        return (f"; a pipeline is not a module: pass one of its models, e.g. pipe.{modules[0]} (its models: "
                f"{', '.join(modules)}; all of them: pipe.components)" if modules else
                "; a pipeline is not a module: pass one of the models in pipe.components")
    inner = next((getattr(obj, a) for a in ("model", "module") if isinstance(getattr(obj, a, None), nn.Module)),
                 None)
    if inner is not None:
        return f"; it holds one in .{'model' if getattr(obj, 'model', None) is inner else 'module'}: pass that"
    return ""


def module_records(module: nn.Module, where: str, *, seen: set[int] | None = None,
                   kept: dict[int, str] | None = None) -> list[HookRecord]:
    """What :func:`all_hooks` lists for ``module`` itself (not its children), placed at ``where``; ``seen`` (ids of
    tensors already listed) lists a tied parameter once; ``kept``: what :func:`_require_grads_handles` found."""
    records: list[HookRecord] = []
    for probe in _PROBES:
        if probe is _torch_hooks:
            records.extend(_torch_hooks(where, module, kept))
        else:
            records.extend(probe(where, module))
    records.extend(_tensor_hooks(where, module, set() if seen is None else seen))
    return records


def show_all_hooks(model: nn.Module, *, name: str = "") -> list[HookRecord]:
    """Print :func:`all_hooks` as a table (or say there are none) and return it."""
    records = all_hooks(model, name=name)
    print(format_table(("where", "kind", "what", "owner", "remove"),
                       [(r.where, r.kind, r.what, r.owner, r.remove) for r in records],
                       empty="no hooks, wrappers or replaced forwards"))
    return records
