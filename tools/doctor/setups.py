"""The setups of the doctor's population: one hooked module, composed from four factors, run on a CPU in milliseconds.

A setup is a key ``"<on>/<between>/<ctx>/<does>/<out>"``:

- ``on``, what the hook is on (:data:`ON`): a module's forward / forward pre / full backward / backward pre hook, a
  tensor hook or a post-accumulate-grad hook on its parameter, a tensor hook on its output (an activation) or a Node
  hook on its output's ``grad_fn`` (both registered by a forward hook that does only that), a global module forward
  hook or forward pre-hook;
- ``between``, what happens between registering and the step (:data:`BETWEEN`): nothing, the module or its parameter
  replaced, a dtype conversion, the model copied, traced, exported, compiled (hook before / after the first call), a
  LoRA adapter (PEFT), a tied weight, ``weight_norm`` / ``spectral_norm`` parametrizations, the step running
  ``torch.func.functional_call`` with fresh parameters, ``nn.DataParallel`` (on a CPU it calls the module itself),
  ``fuse_modules`` (a fused copy, or in place), the block's Linear replaced by a merged one (a reparameterization),
  accelerate's ``cpu_offload``, torchao's ``quantize_``, diffusers' ``fuse_qkv_projections`` (on a small SD3
  transformer whose first block's ``to_q`` is hooked; and with the fused weight changed since), the block's weight
  parametrized before registering, the hook on its parametrization (and the step under ``parametrize.cached()``);
- ``ctx``, how the model runs (:data:`CTX`): plainly, without gradients, chunked, with the module at two places of a
  ``ModuleList``, in threads, under a non-reentrant checkpoint (early stop on / off), with an in-place op after the
  module, or never reaching the module, under ``torch.autocast``, under ``torch.func.vmap``, in two micro-batches
  with a backward each, with two backward passes over one forward (``retain_graph``), with ``torch.autograd.grad``
  instead of backward, with ``backward(inputs=...)`` asking for the head's gradients only, by transformers'
  ``generate`` with its KV cache (a small GPT-2 whose first block is hooked), by a PyTorch Lightning Trainer's loops,
  or plainly while another model of the same class, hooked the same way, is kept in the process, or by
  transformers' assisted generation (``generate(..., assistant_model=...)``, the same small GPT-2 and a second one
  drafting);
- ``does``, what the hook does (:data:`DOES`): returns None or a value, raises, removes itself, registers another
  hook, keeps state (a callable object), or comes from a factory that also made a hook on another object;
- ``out``, what the hooked module returns (:data:`OUT`): a tensor, a dict, a tuple, a nested dict, a ``ModelOutput``.

The truth is recorded by the hooks themselves (:data:`LOG`: each firing appends its tag, the object it fired on and
whether it ran in the main thread) and by the step's exception; nothing of ``hooklab`` is used. :func:`label` turns a
setup and its truth into one cause class of :data:`CLASSES`: the class is the way the setup was built; the
observation says only whether the hook fired, how often and where, and whether the step raised.

The levels of :data:`ROUND_2` were added in a second round, after the doctor had been tuned on the first: a setup
with one of them belongs to that round (:func:`round_of`), and the first round's keys and records are unchanged;
likewise the levels of :data:`ROUND_3`, added after the doctor had been tuned on the first two, and those of
:data:`ROUND_4` (issue 78: a recompile for a new input shape after the hook was added, ``prepare_qat``'s swap, two
DataLoader worker processes, which send the firings logged there back with their batches, a library reading only
``repr(model)``, another entry point of the model), added after the doctor had been tuned on the first three, and
those of :data:`ROUND_5` (transformers' assisted generation, diffusers' ``fuse_qkv_projections``), added after it
had been tuned on the first four, and those of :data:`ROUND_6` (the hook on a weight's parametrization, run plainly
or under ``parametrize.cached()``; a fused projection whose fused weight changed since fusing), added after it had
been tuned on the first five, and those of :data:`ROUND_7` (the deprecated ``torch.nn.utils.weight_norm``; a
parameter hook whose module has a forward hook of its own), added after it had been tuned on the first six.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import logging
import pickle
import threading
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.utils.parametrize
import torch.nn.utils.prune
import torch.utils.checkpoint
from torch import nn

ON = ("forward", "forward_pre", "backward", "backward_pre", "param", "post_accumulate", "activation", "node", "global",
      "global_pre")
GLOBAL_ON = ("global", "global_pre")
MODULE_ON = ("forward", "forward_pre", "backward", "backward_pre")
PARAM_ON = ("param", "post_accumulate")
BACKWARD_ON = ("backward", "backward_pre", "param", "post_accumulate", "activation", "node")
BETWEEN = ("none", "module_replaced", "assign", "to_empty", "parametrize", "prune", "swap_dtype", "dtype", "deepcopy",
           "pickle", "fx", "export", "compile_eager_before", "compile_eager_after", "compile_aot_before",
           "compile_aot_after", "peft", "tied", "weight_norm", "spectral_norm", "functional_call", "data_parallel",
           "fuse_copy", "fuse_inplace", "reparam", "offload", "quantize", "compile_eager_recompile",
           "compile_aot_recompile", "prepare_qat", "fuse_qkv", "parametrized", "parametrized_cached",
           "fuse_qkv_trained", "weight_norm_legacy")
PARAM_REPLACING = ("assign", "to_empty", "parametrize", "prune", "swap_dtype", "weight_norm", "spectral_norm",
                   "reparam", "offload", "quantize", "weight_norm_legacy")
# what keeps the hooked Parameter object in use, so that its hooks fire when the step runs backward (observed: each
# fires run plainly): spectral_norm's and register_parametrization's parametrizations keep it as `original`, pruning
# as `weight_orig`, and to_empty from the CPU sets its `.data`; a silent hook there has another cause (no gradients)
KEEPS_PARAMETER = ("spectral_norm", "parametrize", "prune", "to_empty")
COPYING = ("deepcopy", "pickle", "export", "fuse_copy")
COMPILING = ("compile_eager_before", "compile_eager_after", "compile_aot_before", "compile_aot_after")
RECOMPILING = ("compile_eager_recompile", "compile_aot_recompile")  # hook after the first call, a new shape in the step
CTX = ("plain", "no_grad", "inference", "chunked", "shared", "pool_before", "thread_during", "ckpt_early",
       "ckpt_full", "inplace", "never_called", "autocast", "vmap", "grad_accum", "retain_graph", "autograd_grad",
       "backward_inputs", "generate", "trainer", "other_model", "workers", "repr_read", "other_entry", "assisted")
NO_GRAD_CTX = ("no_grad", "inference", "generate", "assisted")  # generate runs the model under no_grad
DOES = ("none", "value", "raises", "removes", "registers", "state", "factory", "module_hook_too")
OUT = ("tensor", "dict", "tuple", "nested", "model_output")
# the levels added in the second round (issue 63): setups with one of them are the second round's, drawn apart
ROUND_2 = {"on": ("global_pre",), "between": ("weight_norm", "spectral_norm", "functional_call", "data_parallel"),
           "ctx": ("autocast", "vmap", "grad_accum", "retain_graph", "autograd_grad", "backward_inputs")}
# the levels added in the third round: fusion (a fused copy, or fused in place), a block's Linear replaced by a merged
# one (a RepVGG-style reparameterization), accelerate's CPU offload, torchao's quantize_; transformers' generate with
# its KV cache (a small GPT-2: the hooked module is its first block), a PyTorch Lightning Trainer's loops (sanity
# check, training, validation), and another hooked model in the process that does not run
ROUND_3 = {"between": ("fuse_copy", "fuse_inplace", "reparam", "offload", "quantize"),
           "ctx": ("generate", "trainer", "other_model")}
# the levels added in the fourth round (issue 78): torch.compile with the hook registered after the first call and
# the step calling with a new input shape (a recompile, eager / aot_eager); torch.ao.quantization.prepare_qat swapping
# the hooked Linear for its QAT module; the model run in two DataLoader worker processes (fork); a library that only
# calls repr(model) (as PEFT's get_model_status does) before a step that does not reach the module; and the model
# used through another entry point (a method other than forward: timm's forward_head / forward_features)
ROUND_4 = {"between": ("compile_eager_recompile", "compile_aot_recompile", "prepare_qat"),
           "ctx": ("workers", "repr_read", "other_entry")}
# the levels added in the fifth round (issue 78, an independent review): transformers' assisted generation
# (generate(..., assistant_model=...): a second small GPT-2 drafts tokens, the hooked one verifies several in one
# call), and diffusers' fuse_qkv_projections on a small SD3 transformer (to_q, to_k, to_v fused into one to_qkv
# Linear that runs instead; the hooked module is the first block's to_q)
ROUND_5 = {"between": ("fuse_qkv",), "ctx": ("assisted",)}
# the levels added in the sixth round (issue 78): the hook on a weight's parametrization (the module that computes
# the weight from its `original`), the step run plainly or under torch.nn.utils.parametrize.cached() (the weight
# computed once per context); and diffusers' fused projections whose fused weight changed since fusing (as a
# training step changes it: its rows no longer equal the separate projections' weights)
ROUND_6 = {"between": ("parametrized", "parametrized_cached", "fuse_qkv_trained")}
# the levels added in the seventh round (issue 78, a review): the deprecated torch.nn.utils.weight_norm (it deletes
# the Parameter `weight`, keeps weight_g and weight_v, and computes `weight` in a forward pre-hook of its own), and a
# parameter hook whose module has a forward hook of the user's too (the doctor is asked about that module)
ROUND_7 = {"between": ("weight_norm_legacy",), "does": ("module_hook_too",)}
WEIGHT_NORM_CTX = ("no_grad", "chunked", "shared", "grad_accum", "retain_graph", "other_model")  # besides plain
MODULE_HOOK_CTX = ("no_grad", "chunked", "shared", "pool_before", "grad_accum", "retain_graph", "other_model")
PARAMETRIZED = ("parametrized", "parametrized_cached")
PARAMETRIZED_CTX = ("chunked", "shared", "no_grad", "grad_accum", "retain_graph")  # besides plain
FUSED = ("fuse_qkv", "fuse_qkv_trained")
FUSED_CTX = ("plain", "no_grad", "chunked")  # the contexts a fused SD3 transformer is run under
NOT_REACHING = ("never_called", "repr_read", "other_entry")  # contexts whose step never calls the hooked module

# the cause classes: what a doctor's answer is graded against (its codes must hold the class)
CLASSES = {
    "fired": "the hook fired on the object it was registered on, once per call or backward pass",
    "several_calls": "the module ran several times in the step (chunks, one module at several places, a full "
                     "checkpoint recompute): the hook fired once per call",
    "no_grad": "the forward ran without gradients (no_grad / inference_mode): no backward hook can fire",
    "frozen": "the parameter does not require grad (an adapter froze it): its hooks never fire",
    "module_replaced": "the hooked module was replaced in the model after registering: its hooks stay on the old one",
    "parameter_replaced": "the hooked parameter was replaced (assign, to_empty, parametrize, swap on conversion): the "
                          "hook stays on an object the step does not use",
    "copy_ran": "a copy of the model ran (deepcopy, pickle, export + unflatten)",
    "graph": "an FX GraphModule that inlined the module ran",
    "compiled": "compiled code ran (torch.compile): hooks present at compile time are traced in, later ones never run",
    "dict_output": "the module returns a dict / ModelOutput: PyTorch attaches no full backward hook to it",
    "hook_raised": "the hook itself raised",
    "step_raised": "the step raised outside the hook (an in-place op on a full backward hook's output)",
    "checkpoint_early_stop": "a non-reentrant checkpoint's recompute stopped early: the forward hooks of the "
                             "checkpointed module fire once in two calls",
    "not_reached": "the module was never called in this step",
    "removed_itself": "the hook removed itself at its first firing",
    "threads": "the hook fired in other threads (a pool, a thread started in the step)",
    "tied": "the parameter is tied (shared by two modules): its hook fires once with the summed gradient",
    "global_hook": "a global module hook fired on the module",
    "several_passes": "backward ran several times over one forward (retain_graph=True): a backward hook fired once "
                      "per pass",
    "not_accumulated": "the gradients were taken with torch.autograd.grad: nothing is accumulated into .grad, so a "
                       "post-accumulate-grad hook never fires",
    "outside_backward_inputs": "backward(inputs=...) asked for other tensors' gradients only: the backward pass did "
                               "not go through the module or its parameter",
    "vmap": "the module ran inside torch.func.vmap: backward hooks and hooks on its output's gradient are not "
            "attached there",
    "processes": "the model ran in other processes (DataLoader workers): the hook fired there, on the workers' "
                 "copies, and nothing of it is seen in the step's process",
    "recompiled": "a hook registered after the first compiled call fired: the step's new input shape made "
                  "torch.compile recompile, and the recompile traced the hooks present then",
    "qat_swapped": "prepare_qat swapped the hooked module for its QAT module and registered its forward hooks and "
                   "pre-hooks on it again: they fire on the new module (the old handle removes the old one only)",
    "assisted": "assisted generation called the model once per verification round (the assistant drafts several "
                "tokens, the model checks them in one call), not once per new token",
    "fused": "fuse_qkv_projections fused the hooked projection (to_q) with its siblings into one Linear (to_qkv) "
             "that runs instead: hooks on the separate projection and its weight never fire",
    "parametrize_cached": "the hooked module is a weight's parametrization run under parametrize.cached(): the weight "
                          "is computed once per context and reused, so its hooks fire once for several calls",
}


# (tag, id of the object it fired on or None, in the main thread, in this process); a DataLoader worker's firings
# come back with its batch and are added with False as the last
LOG: list[tuple[str, int | None, bool, bool]] = []


class HookRaised(ValueError):
    """What a hook with ``does="raises"`` raises (so the truth knows the hook, not the step, raised)."""


class Block(nn.Module):
    """The hooked module: a Linear and a scale, returning its output as ``out`` says."""

    def __init__(self, out: str = "tensor", act: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.ReLU() if act else None  # what a fusion fuses the Linear with
        self.out = out

    def forward(self, x: torch.Tensor) -> Any:
        h = self.fc(x)
        if self.act is not None:
            h = self.act(h)
        h = h * 1.5
        if self.out == "dict":
            return {"h": h}
        if self.out == "tuple":
            return h, h * 2
        if self.out == "nested":
            return {"a": [h]}
        if self.out == "model_output":
            from transformers.modeling_outputs import BaseModelOutput
            return BaseModelOutput(last_hidden_state=h)
        return h


def take(o: Any) -> torch.Tensor:
    """The tensor of a Block's output, whatever its shape."""
    if isinstance(o, (torch.Tensor, torch.fx.Proxy)):
        return o
    if isinstance(o, tuple) and not isinstance(o, dict):
        return o[0]
    if "h" in o:
        return o["h"]
    if "a" in o:
        return o["a"][0]
    return o["last_hidden_state"]


class Net(nn.Module):
    """The model: its blocks (one, or one at two places), an optional tied Linear, a head."""

    def __init__(self, out: str = "tensor", shared: bool = False, checkpoint: bool = False, inplace: bool = False,
                 skip: bool = False, act: bool = False) -> None:
        super().__init__()
        block = Block(out, act)
        self.layers = nn.ModuleList([block, block] if shared else [block])
        self.head = nn.Linear(4, 2)
        self.extra: nn.Module | None = None
        self.checkpoint, self.inplace, self.skip = checkpoint, inplace, skip

    def forward_head(self, h: torch.Tensor) -> torch.Tensor:
        """Another entry point (as timm's ``forward_head``): the head only, on features computed elsewhere."""
        return self.head(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        if not self.skip:
            for layer in self.layers:
                if self.checkpoint:
                    o = torch.utils.checkpoint.checkpoint(layer, h, use_reentrant=False)
                else:
                    o = layer(h)
                h = take(o)
                if self.inplace:
                    h.add_(1.0)
        if self.extra is not None:
            h = h + self.extra(x)
        return self.head(h)


class Scale(nn.Module):
    """A parametrization that changes nothing (weight * 1)."""

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w * 1.0


class HookObject:
    """A hook that is an object (picklable; keeps state: how often it ran)."""

    def __init__(self, tag: str, on: str, does: str, holder: dict) -> None:
        self.tag, self.on, self.does, self.holder, self.n = tag, on, does, holder, 0

    def __call__(self, *args: Any) -> Any:
        self.n += 1
        return _fire(self.tag, self.on, self.does, self.holder, args)


def _fire(tag: str, on: str, does: str, holder: dict, args: tuple) -> Any:
    obj = args[0] if on in MODULE_ON or on in GLOBAL_ON else None
    LOG.append((tag, id(obj) if obj is not None else None, threading.current_thread() is threading.main_thread(),
                True))
    if tag != "primary":
        return None
    if does == "raises":
        raise HookRaised("the hook raised")
    if does == "removes" and "handle" in holder:
        holder.pop("handle").remove()
    if does == "registers":  # another hook, on the head, each time it fires
        holder.setdefault("others", []).append(holder["head"].register_forward_hook(make_hook("other", "forward",
                                                                                                "none", {})))
    if does == "value":
        if on == "forward":
            return args[2]
        if on == "forward_pre":
            return args[1]
        if on == "backward":
            return args[1]
        if on == "backward_pre":
            return args[1]
        if on in ("param", "activation"):
            return args[0]
        if on == "node":
            return args[0]
        if on == "global":
            return args[2]
        if on == "global_pre":
            return args[1]
    return None


def make_hook(tag: str, on: str, does: str, holder: dict) -> Callable:
    """A hook made by a factory (one code object for every hook it makes), or an object when ``does`` keeps state."""
    if does == "state":
        return HookObject(tag, on, does, holder)

    def hook(*args: Any) -> Any:
        return _fire(tag, on, does, holder, args)
    return hook


@dataclass
class Built:
    """A setup ready to run: the model the hooks were registered on, the name asked about, the step."""

    model: nn.Module
    name: str
    run: Callable[[], Any]
    targets: set[int]                 # ids of the objects the primary hook was registered on (module or tensor)
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    keep: list[Any] = field(default_factory=list)


class NotApplicable(Exception):
    """The factors do not make a setup (said by construction or found when building it)."""


class Unobservable(Exception):
    """The setup cannot be observed in this process (its record stands): autograd refuses a backward in a process
    forked from this one, because this process started autograd's threads earlier (torch.compile's aot_eager with a
    hook that raised does). DataLoader workers forked from it raise "Unable to handle autograd's threading in
    combination with fork-based multiprocessing"; a fresh process observes them as recorded."""


def _backward_or_exit() -> None:
    try:
        torch.ones(1, requires_grad=True).sum().backward()
    except BaseException:  # noqa: BLE001 - the answer is the exit code
        import os
        os._exit(1)


def autograd_refuses_fork() -> bool:
    """Whether a process forked from this one cannot run a backward (see :class:`Unobservable`)."""
    import multiprocessing
    child = multiprocessing.get_context("fork").Process(target=_backward_or_exit)
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
        child.join()
    return child.exitcode != 0


def parse(key: str) -> dict[str, str]:
    on, between, ctx, does, out = key.split("/")
    return {"on": on, "between": between, "ctx": ctx, "does": does, "out": out}


def invalid(f: dict[str, str]) -> str | None:
    """Why these factors make no setup (by construction), or None."""
    on, between, ctx, does, out = f["on"], f["between"], f["ctx"], f["does"], f["out"]
    if does == "value" and on == "post_accumulate":
        return "a post-accumulate-grad hook must return None"
    if does == "registers" and on in GLOBAL_ON:
        return "a global hook that registers a hook on every module call grows without bound"
    if between in PARAM_REPLACING and on not in PARAM_ON and on != "forward":
        return "replacing a parameter changes nothing for this hook (one forward hook stands for them)"
    if out != "tensor" and between not in ("none",):
        return "other outputs are composed with no change in between"
    if out != "tensor" and on in ("activation", "node") and out == "model_output":
        return "covered by the dict output"
    if ctx == "inplace" and out != "tensor":
        return "in-place after a tensor output only"
    if between == "functional_call" and ctx == "autograd_grad":
        return ("torch.autograd.grad of the model's own parameters, which functional_call does not use: nothing is "
                "differentiated")
    if between == "pickle" and does not in ("state",):
        return "pickling a model needs hooks that pickle (objects); closures made by a factory do not"
    if ctx == "generate" and (between != "none" or out != "tensor"):
        return "generate runs a transformers model (a small GPT-2), composed with nothing in between"
    if ctx == "trainer" and between == "functional_call":
        return "a Trainer trains a module; functional_call's step is a function"
    if between == "prepare_qat" and on in GLOBAL_ON:
        return "a global hook on the QAT-swapped Linear's kind fires on every Linear of the model (the head too)"
    if ctx in ("workers", "repr_read", "other_entry") and between not in ("none", "prepare_qat"):
        return "the fourth round's contexts are composed with nothing in between (and prepare_qat)"
    if ctx == "assisted" and (between != "none" or out != "tensor"):
        return "assisted generation runs two transformers models (small GPT-2s), composed with nothing in between"
    if between in FUSED and on in GLOBAL_ON:
        return "a global hook on the hooked projection's kind (Linear) fires on every Linear of the transformer"
    if between in FUSED and ctx not in FUSED_CTX:
        return "the fused SD3 transformer is run plainly, without gradients, or in two chunks"
    if does == "module_hook_too" and on not in PARAM_ON:
        return "a forward hook on the hooked parameter's own module too: composed with a hook on a parameter"
    if does == "module_hook_too" and (between in FUSED or ctx in ("generate", "assisted")):
        return "the parameter's own module hooked too: composed with the small Net's setups"
    return None


def build(key: str, x: torch.Tensor | None = None) -> Built:
    """The setup ``key``, built fresh (seeded): raises :class:`NotApplicable` when its factors make none."""
    f = parse(key)
    why = invalid(f)
    if why:
        raise NotApplicable(why)
    cleanup: list[Callable[[], None]] = []
    try:
        return _build(f, cleanup, x)
    except BaseException:  # what it registered (a global hook, a pool, compiled code) goes with it
        for fn in reversed(cleanup):
            with contextlib.suppress(Exception):
                fn()
        raise


def _build(f: dict[str, str], cleanup: list[Callable[[], None]], x: torch.Tensor | None) -> Built:
    on, between, ctx, does, out = f["on"], f["between"], f["ctx"], f["does"], f["out"]
    if ctx in ("generate", "assisted"):
        return _build_generate(on, does, cleanup, assisted=ctx == "assisted")
    if between in FUSED:
        return _build_fused(on, ctx, does, cleanup, trained=between == "fuse_qkv_trained")
    if ctx == "workers" and autograd_refuses_fork():
        raise Unobservable("autograd refuses a backward in processes forked from this one")
    torch.manual_seed(0)
    model = Net(out, shared=ctx == "shared", checkpoint=ctx.startswith("ckpt"), inplace=ctx == "inplace",
                skip=ctx in ("never_called", "repr_read"), act=between.startswith("fuse"))
    keep: list[Any] = []
    x = torch.randn(4, 4) if x is None else x
    runner: Any = model
    if between == "tied":
        extra = nn.Linear(4, 4, bias=False)
        extra.weight = model.layers[0].fc.weight
        model.extra = extra
    if between in ("compile_eager_after", "compile_aot_after"):
        runner = torch.compile(model, backend="eager" if "eager" in between else "aot_eager")
        cleanup.append(_dynamo_reset)
        runner(x)  # the first call compiles, before the hooks
    if between in RECOMPILING:  # compiled for the first input's shape before the hooks; the step's is another
        runner = torch.compile(model, backend="eager" if "eager" in between else "aot_eager", dynamic=False)
        cleanup.append(_dynamo_reset)
        runner(torch.randn(2, 4))
    block = model.layers[0]
    name = "layers.0.fc" if on in PARAM_ON else "layers.0"
    if between == "prepare_qat":  # the hooked module is the Linear that prepare_qat swaps
        block, name = model.layers[0].fc, "layers.0.fc"
    weight = block.weight if between == "prepare_qat" else block.fc.weight
    if between in PARAMETRIZED:  # the hooked module is the weight's parametrization; a parameter hook on `original`
        torch.nn.utils.parametrize.register_parametrization(block.fc, "weight", Scale())
        weight = block.fc.parametrizations.weight.original
        block = block.fc.parametrizations.weight[0]
        name = "layers.0.fc.parametrizations.weight" + ("" if on in PARAM_ON else ".0")
    holder: dict[str, Any] = {"head": model.head}
    targets: set[int] = set()
    primary = make_hook("primary", on, does, holder)
    if does == "state" or between == "pickle":
        primary = HookObject("primary", on, does, holder)
    handle = _register(on, block, weight, primary, holder, cleanup)
    if handle is not None:
        holder["handle"] = handle
    targets.add(id(weight) if on in PARAM_ON else id(block))
    keep.append(block)
    keep.append(weight)
    if does == "factory":
        _hook_from_the_factory(on, model.head)
    if does == "module_hook_too":  # the user's forward hook on the module the doctor is asked about, the weight's own
        own = model.get_submodule(name).register_forward_hook(make_hook("other", "forward", "none", {}))
        cleanup.append(own.remove)
    cleanup.append(lambda: [h.remove() for h in holder.get("others", [])])
    dtype = torch.float32
    if between == "module_replaced":
        torch.manual_seed(1)
        new = Block(out)
        for i in range(len(model.layers)):
            model.layers[i] = new
    elif between == "assign":
        model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()}, assign=True)
    elif between == "to_empty":
        model.to_empty(device="cpu")
        torch.manual_seed(2)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn_like(p) * 0.3)
    elif between == "parametrize":
        torch.nn.utils.parametrize.register_parametrization(block.fc, "weight", Scale())
    elif between == "prune":
        torch.nn.utils.prune.l1_unstructured(block.fc, "weight", amount=0.25)
    elif between == "swap_dtype":
        before = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(True)
        try:
            model.double()
        finally:
            torch.__future__.set_swap_module_params_on_conversion(before)
        dtype = torch.float64
    elif between == "dtype":
        model.double()
        dtype = torch.float64
    elif between == "deepcopy":
        runner = copy.deepcopy(model)
    elif between == "pickle":
        runner = pickle.loads(pickle.dumps(model))
    elif between == "fx":
        runner = torch.fx.symbolic_trace(model)
    elif between == "export":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ep = torch.export.export(model, (x,))
                runner = torch.export.unflatten(ep)
        except Exception as exc:  # noqa: BLE001 - the factors make no setup: recorded as n/a with the reason
            raise NotApplicable(f"torch.export refused it: {type(exc).__name__}") from exc
    elif between in ("compile_eager_before", "compile_aot_before"):
        runner = torch.compile(model, backend="eager" if "eager" in between else "aot_eager")
        cleanup.append(_dynamo_reset)
    elif between == "peft":
        try:
            import peft
        except ImportError as exc:
            raise NotApplicable("peft is not installed") from exc
        config = peft.LoraConfig(target_modules=["fc"], r=2, lora_alpha=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runner = peft.get_peft_model(model, config)
    elif between == "weight_norm":
        torch.nn.utils.parametrizations.weight_norm(block.fc, "weight")
    elif between == "weight_norm_legacy":  # deprecated: `weight` deleted, recomputed by a forward pre-hook
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.nn.utils.weight_norm(block.fc, "weight")
    elif between == "spectral_norm":
        torch.nn.utils.parametrizations.spectral_norm(block.fc, "weight")
    elif between == "functional_call":  # the step runs the model with fresh copies of its parameters
        fresh = {k: v.detach().clone().requires_grad_(v.requires_grad) for k, v in model.named_parameters()}
        keep.append(fresh)

        def runner(inp: torch.Tensor) -> Any:
            return torch.func.functional_call(model, fresh, (inp,))
    elif between == "data_parallel":  # on a CPU DataParallel calls the module itself (no replicas)
        runner = nn.DataParallel(model)
    elif between in ("fuse_copy", "fuse_inplace"):  # fuse_modules returns a fused copy unless inplace=True
        from torch.ao.quantization import fuse_modules
        fused = fuse_modules(model, [["layers.0.fc", "layers.0.act"]], inplace=between == "fuse_inplace")
        runner = fused if between == "fuse_copy" else model
    elif between == "reparam":  # a reparameterization: the block's Linear replaced by a merged one computing the same
        merged = nn.Linear(4, 4)
        with torch.no_grad():
            merged.weight.copy_(block.fc.weight)
            merged.bias.copy_(block.fc.bias)
        block.fc = merged
    elif between == "offload":  # accelerate loads each weight for each forward (a new Parameter each time)
        import accelerate
        accelerate.cpu_offload(model, execution_device=torch.device("cpu"))
        cleanup.append(lambda: accelerate.hooks.remove_hook_from_submodules(model))
    elif between == "quantize":  # torchao swaps the weight for an int8 tensor subclass that needs no gradient
        from torchao.quantization import Int8WeightOnlyConfig, quantize_
        quantize_(model, Int8WeightOnlyConfig(), filter_fn=lambda _m, fqn: fqn == "layers.0.fc")
    elif between == "prepare_qat":  # swaps each Linear for a QAT Linear, registering its forward (pre-)hooks again
        from torch.ao.quantization import get_default_qat_qconfig, prepare_qat
        model.train()
        model.qconfig = get_default_qat_qconfig("fbgemm")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prepare_qat(model, inplace=True)
    if ctx == "other_model" and on not in GLOBAL_ON:  # another model in the process, hooked the same way, not run
        torch.manual_seed(3)
        other_model = Net(out)
        _register(on, other_model.layers[0], other_model.layers[0].fc.weight, make_hook("other", on, "none", {}),
                  {}, cleanup)
        keep.append(other_model)
    x = x.to(dtype)
    if between in RECOMPILING:
        x = torch.randn(6, 4)  # a new shape: the compiled code's guards fail and it recompiles, hooks and all
    if ctx == "repr_read":
        step = _step("plain", runner, x, cleanup, model)

        def with_status() -> Any:
            get_model_status(model)
            return step()
        return Built(model, name, with_status, targets, cleanup, keep)
    if ctx == "other_entry":
        return Built(model, name, lambda: model.forward_head(x).sum().backward(), targets, cleanup, keep)
    step = _step(ctx, runner, x, cleanup, model)
    if between == "parametrized_cached":
        return Built(model, name, _under_cached(step), targets, cleanup, keep)
    return Built(model, name, step, targets, cleanup, keep)


def _under_cached(step: Callable[[], Any]) -> Callable[[], Any]:
    """The step run inside ``torch.nn.utils.parametrize.cached()``: each parametrized weight computed once."""
    def cached_step() -> Any:
        with torch.nn.utils.parametrize.cached():
            return step()
    return cached_step


def _hook_from_the_factory(on: str, head: nn.Linear) -> None:
    """The same factory's hook on another object: a tensor hook on the head's weight for a module hook, a forward
    hook on the head for a hook on a parameter."""
    other = make_hook("other", "param" if on not in PARAM_ON else "forward", "none", {})
    if on in PARAM_ON:
        head.register_forward_hook(other)
    else:
        head.weight.register_hook(other)


def get_model_status(model: nn.Module) -> dict[str, Any]:
    """What a library's status report does with the model (PEFT's ``get_model_status`` prints its ``repr``): reads
    its attributes, computes nothing."""
    return {"summary": repr(model), "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad)}


class _Chunks(torch.utils.data.Dataset):
    """A dataset whose items run the step on a chunk (forward and backward) in the DataLoader's worker process and
    return what the hooks logged there."""

    def __init__(self, runner: Any, x: torch.Tensor) -> None:
        self.runner, self.chunks = runner, x.chunk(2)

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, i: int) -> list:
        start = len(LOG)
        self.runner(self.chunks[i]).sum().backward()
        return [(tag, obj, main) for tag, obj, main, _here in LOG[start:]]


def _in_workers(runner: Any, x: torch.Tensor) -> None:
    """The step in two DataLoader worker processes (fork), each on one chunk; the firings they logged come back with
    the batches. A worker that hangs is stopped by the loader's timeout, and the loader ends its workers on an
    error."""
    loader = torch.utils.data.DataLoader(_Chunks(runner, x), batch_size=None, num_workers=2, timeout=60,
                                         multiprocessing_context="fork",
                                         worker_init_fn=lambda _i: torch.set_num_threads(1))
    batches = iter(loader)
    try:
        for entries in batches:
            LOG.extend((tag, obj, main, False) for tag, obj, main in entries)
    finally:  # its workers end here, also when one raised (not later, in a process forked from this one)
        batches._shutdown_workers()  # type: ignore[attr-defined]


def _dynamo_reset() -> None:
    import torch._dynamo
    torch._dynamo.reset()


def _build_generate(on: str, does: str, cleanup: list[Callable[[], None]], *, assisted: bool = False) -> Built:
    """transformers' generate with its KV cache on a small GPT-2 (one block, hooked as a Block is): three new
    tokens, one forward of the model each, under no_grad. ``assisted``: eight new tokens by assisted generation,
    another small GPT-2 (seeded apart) drafting them, the hooked model verifying several in each call."""
    from transformers import GPT2Config, GPT2LMHeadModel
    _quieted(cleanup, "transformers")
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=16, bos_token_id=0,
                        eos_token_id=0)
    model = GPT2LMHeadModel(config)
    block, weight = model.transformer.h[0], model.transformer.h[0].mlp.c_fc.weight
    _hook_a_library_model(on, does, block, weight, model.lm_head, cleanup)
    ids = torch.tensor([[1, 2, 3]])
    if assisted:
        torch.manual_seed(1)
        assistant = GPT2LMHeadModel(config)

        def step() -> Any:
            return model.generate(ids, assistant_model=assistant, max_new_tokens=8, min_new_tokens=8,
                                  do_sample=False, pad_token_id=0)
        name = "transformer.h.0.mlp.c_fc" if on in PARAM_ON else "transformer.h.0"
        targets = {id(weight) if on in PARAM_ON else id(block)}
        return Built(model, name, step, targets, cleanup, [block, weight, assistant])

    def step() -> Any:
        return model.generate(ids, max_new_tokens=3, min_new_tokens=3, do_sample=False, pad_token_id=0)
    name = "transformer.h.0.mlp.c_fc" if on in PARAM_ON else "transformer.h.0"
    targets = {id(weight) if on in PARAM_ON else id(block)}
    return Built(model, name, step, targets, cleanup, [block, weight])


def _hook_a_library_model(on: str, does: str, block: nn.Module, weight: torch.Tensor, head: nn.Module,
                          cleanup: list[Callable[[], None]]) -> None:
    """The primary hook on ``block`` (or ``weight``) of a library's model built apart (generate's GPT-2, the fused
    SD3 transformer), and the factory's other hook on its ``head``; the hooks it registers removed by ``cleanup``."""
    holder: dict[str, Any] = {"head": head}
    handle = _register(on, block, weight, make_hook("primary", on, does, holder), holder, cleanup)
    if handle is not None:
        holder["handle"] = handle
    if does == "factory":
        _hook_from_the_factory(on, head)
    cleanup.append(lambda: [h.remove() for h in holder.get("others", [])])


def _build_fused(on: str, ctx: str, does: str, cleanup: list[Callable[[], None]], *, trained: bool = False) -> Built:
    """diffusers' fuse_qkv_projections on a small SD3 transformer built from a config (one block), after the hook
    was registered on its first block's ``to_q`` (or its weight): the fused ``to_qkv`` Linear runs instead.
    ``trained``: the fused weight changed since fusing (a small seeded change, as a training step makes), so that
    its rows no longer equal the separate projections' weights."""
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from diffusers import SD3Transformer2DModel
    _quieted(cleanup, "diffusers")
    torch.manual_seed(0)
    model = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=1, attention_head_dim=4,
                                  num_attention_heads=2, joint_attention_dim=8, caption_projection_dim=8,
                                  pooled_projection_dim=8, out_channels=4, pos_embed_max_size=8)
    block = model.transformer_blocks[0].attn.to_q
    weight = block.weight
    _hook_a_library_model(on, does, block, weight, model.proj_out, cleanup)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fuse_qkv_projections()
    if trained:
        fused = model.transformer_blocks[0].attn.to_qkv.weight
        with torch.no_grad():
            fused.add_(0.01 * torch.randn(fused.shape, generator=torch.Generator().manual_seed(5)))
    x, text, pooled = torch.randn(2, 4, 8, 8), torch.randn(2, 3, 8), torch.randn(2, 8)

    def call(i: slice) -> torch.Tensor:
        return model(hidden_states=x[i], encoder_hidden_states=text[i], pooled_projections=pooled[i],
                     timestep=torch.ones(len(x[i]))).sample

    if ctx == "no_grad":
        def step() -> Any:
            with torch.no_grad():
                return call(slice(None))
    elif ctx == "chunked":
        def step() -> Any:
            (call(slice(0, 1)).sum() + call(slice(1, 2)).sum()).backward()
    else:
        def step() -> Any:
            call(slice(None)).sum().backward()
    name = "transformer_blocks.0.attn.to_q"
    return Built(model, name, step, {id(weight) if on in PARAM_ON else id(block)}, cleanup, [block, weight])


def _trainer_fit(runner: nn.Module, x: torch.Tensor) -> None:
    """A PyTorch Lightning Trainer's fit: a sanity-check batch, one training batch, one validation batch."""
    import pytorch_lightning as pl

    class Task(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = runner

        def training_step(self, batch: Any, _i: int) -> torch.Tensor:
            return self.net(batch[0]).sum()

        def validation_step(self, batch: Any, _i: int) -> None:
            self.net(batch[0]).sum()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.0)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=len(x))
    put_back: list[Callable[[], None]] = []
    _quieted(put_back, "pytorch_lightning", "lightning.pytorch", "lightning_fabric")
    try:
        trainer = pl.Trainer(max_epochs=1, max_steps=1, limit_train_batches=1, limit_val_batches=1,
                             num_sanity_val_steps=1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1)
        trainer.fit(Task(), data, data)
    finally:
        for fn in put_back:
            fn()


def _quieted(cleanup: list[Callable[[], None]], *names: str) -> None:
    """The library loggers ``names`` at level ERROR (no notes of theirs in what the doctor is asked about), their
    levels put back by ``cleanup``: a level left at ERROR hid a library's warnings from whatever ran next."""
    for name in names:
        logger = logging.getLogger(name)
        cleanup.append(functools.partial(logger.setLevel, logger.level))
        logger.setLevel(logging.ERROR)


def _register(on: str, block: nn.Module, weight: torch.Tensor, hook: Callable, holder: dict, cleanup: list) -> Any:
    if on == "forward":
        return block.register_forward_hook(hook)
    if on == "forward_pre":
        return block.register_forward_pre_hook(hook)
    if on == "backward":
        return block.register_full_backward_hook(hook)
    if on == "backward_pre":
        return block.register_full_backward_pre_hook(hook)
    if on == "param":
        return weight.register_hook(hook)
    if on == "post_accumulate":
        return weight.register_post_accumulate_grad_hook(hook)
    if on in ("activation", "node"):
        def helper(module: nn.Module, args: Any, output: Any) -> None:  # registers the hook on each call's output
            t = take(output)
            if on == "activation" and t.requires_grad:
                holder["handle"] = t.register_hook(hook)
            elif on == "node" and t.grad_fn is not None:
                holder["handle"] = t.grad_fn.register_hook(hook)
        block.register_forward_hook(helper)
        return None
    kind = type(block)  # a global hook acts on the hooked module's kind (a replaced Block is one too)
    if on == "global":
        def global_hook(module: nn.Module, args: Any, output: Any) -> Any:
            if isinstance(module, kind):
                return hook(module, args, output)
            return None
        handle = torch.nn.modules.module.register_module_forward_hook(global_hook)
        cleanup.append(handle.remove)
        return handle
    if on == "global_pre":
        def global_pre_hook(module: nn.Module, args: Any) -> Any:
            if isinstance(module, kind):
                return hook(module, args)
            return None
        handle = torch.nn.modules.module.register_module_forward_pre_hook(global_pre_hook)
        cleanup.append(handle.remove)
        return handle
    raise ValueError(on)


def _step(ctx: str, runner: Any, x: torch.Tensor, cleanup: list, model: nn.Module) -> Callable[[], Any]:
    if ctx in ("no_grad", "inference"):
        manager = torch.no_grad if ctx == "no_grad" else torch.inference_mode

        def step() -> Any:
            with manager():
                return runner(x)
        return step
    if ctx == "chunked":
        return lambda: sum(runner(c).sum() for c in x.chunk(2)).backward()
    if ctx == "pool_before":
        pool = ThreadPoolExecutor(2)
        list(pool.map(lambda _i: None, range(4)))  # its threads exist before the step
        cleanup.append(lambda: pool.shutdown(wait=True))
        ran = [threading.Event() for _ in range(2)]

        def in_turn(i: int, chunk: torch.Tensor) -> Any:  # each chunk in a pool thread, the second after the first:
            if i:  # run at once, which registers last (a node or activation hook's handle) was a race, and so was
                ran[i - 1].wait(60)  # what a hook that removes itself removed
            try:
                return runner(chunk)
            finally:
                ran[i].set()

        def step() -> None:  # both chunks finish before the step goes on or raises: what fired is all counted
            futures = [pool.submit(in_turn, i, chunk) for i, chunk in enumerate(x.chunk(2))]
            wait(futures, timeout=120)
            sum(f.result(timeout=0).sum() for f in futures).backward()
        return step
    if ctx == "thread_during":
        def step() -> None:
            out: list[Any] = []

            def work() -> None:
                try:
                    out.append(runner(x))
                except BaseException as exc:  # noqa: BLE001 - raised again in the step's thread
                    out.append(exc)
            t = threading.Thread(target=work)
            t.start()
            t.join()
            if isinstance(out[0], BaseException):
                raise out[0]
            out[0].sum().backward()
        return step
    if ctx == "autocast":
        def step() -> None:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = runner(x).float().sum()
            loss.backward()
        return step
    if ctx == "vmap":  # one sample at a time, batched by torch.func.vmap
        return lambda: torch.func.vmap(runner)(x).sum().backward()
    if ctx == "grad_accum":  # two micro-batches, a backward each
        def step() -> None:
            for c in x.chunk(2):
                runner(c).sum().backward()
        return step
    if ctx == "retain_graph":  # two backward passes over one forward
        def step() -> None:
            loss = runner(x).sum()
            loss.backward(retain_graph=True)
            loss.backward()
        return step
    if ctx == "autograd_grad":  # the gradients of the model's trainable parameters, not accumulated into .grad
        def step() -> Any:
            wrt = [p for p in model.parameters() if p.requires_grad]
            return torch.autograd.grad(runner(x).sum(), wrt, allow_unused=True)
        return step
    if ctx == "trainer":
        return lambda: _trainer_fit(runner, x)
    if ctx == "workers":
        return lambda: _in_workers(runner, x)
    if ctx == "backward_inputs":  # the head's gradients only
        return lambda: runner(x).sum().backward(inputs=list(model.head.parameters()))
    if ctx in ("ckpt_early", "ckpt_full"):
        def step() -> None:
            with torch.utils.checkpoint.set_checkpoint_early_stop(ctx == "ckpt_early"):
                runner(x).sum().backward()
        return step
    return lambda: runner(x).sum().backward()


@dataclass
class Truth:
    """What the primary hook did in the step, seen by the hook itself."""

    fired: int = 0          # firings of the primary hook (and of its copies)
    on_target: int = 0      # of them with the object it was registered on (module hooks; tensor hooks: unknown)
    in_threads: int = 0     # of them outside the main thread
    in_processes: int = 0   # of them in other processes (DataLoader workers)
    other_fired: int = 0    # firings of the other hooks the setup made (factory, registers)
    error: str | None = None
    hook_raised: bool = False
    warned_dict: bool = False  # PyTorch warned that a full backward hook cannot be attached to this output

    def as_dict(self) -> dict[str, Any]:
        """Its fields; ``in_processes`` only when not 0 (the first three rounds' records were written without it)."""
        out = dict(self.__dict__)
        if not out["in_processes"]:
            del out["in_processes"]
        return out


@contextlib.contextmanager
def recording() -> Iterator[list]:
    """The log of firings made inside the block."""
    start = len(LOG)
    out: list = []
    try:
        yield out
    finally:
        out.extend(LOG[start:])
        del LOG[start:]


def observe(key: str, run_step: Callable[[Built], Any] | None = None) -> tuple[Truth | None, Any, str | None]:
    """Build the setup and run its step (``run_step(built)``, default ``built.run()``): (truth, what run_step
    returned, None), or (None, None, reason) when the factors make no setup."""
    try:
        built = build(key)
    except Unobservable:
        raise
    except NotApplicable as exc:
        return None, None, str(exc)
    except Exception as exc:  # noqa: BLE001 - building it raised: the factors make no setup on this PyTorch
        return None, None, f"building it raised {type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''}"
    truth = Truth()
    result = None
    try:
        with recording() as log, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = (run_step or (lambda b: b.run()))(built)
            except HookRaised as exc:  # (one raised in a worker process carries its traceback: the first line)
                truth.error, truth.hook_raised = f"{type(exc).__name__}: {str(exc).splitlines()[0]}", True
                result = exc
            except Exception as exc:  # noqa: BLE001 - the step's own error is part of the truth
                truth.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
                result = exc
        truth.warned_dict = any("should be a Tensor or a tuple of Tensors" in str(w.message) for w in caught)
        for tag, obj, main, here in log:
            if tag == "primary":
                truth.fired += 1
                truth.on_target += obj is not None and obj in built.targets
                truth.in_threads += not main
                truth.in_processes += not here
            else:
                truth.other_fired += 1
    finally:
        for fn in reversed(built.cleanup):
            with contextlib.suppress(Exception):
                fn()
    return truth, result, None


def label(f: dict[str, str], t: Truth) -> str:
    """The cause class of a setup: from how it was built, with the observation saying whether the hook fired."""
    on, between, ctx, does = f["on"], f["between"], f["ctx"], f["does"]
    if t.error is not None:
        return "hook_raised" if t.hook_raised else "step_raised"
    if t.fired == 0:
        if between in FUSED:  # the fused to_qkv ran instead of to_q (whatever else kept the hook silent)
            return "fused"
        if ctx in NOT_REACHING:
            return "not_reached"
        if between == "module_replaced":
            return "module_replaced"
        if between in COPYING:
            return "copy_ran"
        if between == "fx":
            return "graph"
        if between in COMPILING or between in RECOMPILING:
            return "compiled"
        if between == "prepare_qat" and on in MODULE_ON:
            return "module_replaced"
        if between in PARAM_REPLACING and between not in KEEPS_PARAMETER and on in PARAM_ON:
            return "parameter_replaced"
        if between == "peft" and on in PARAM_ON:
            return "frozen"
        if ctx in NO_GRAD_CTX and on in BACKWARD_ON:
            return "no_grad"
        if f["out"] in ("dict", "nested", "model_output") and on in ("backward", "backward_pre"):
            return "dict_output"
        if between == "functional_call" and on in PARAM_ON:
            return "parameter_replaced"
        if ctx == "backward_inputs" and on in BACKWARD_ON:
            return "outside_backward_inputs"
        if ctx == "autograd_grad" and on == "post_accumulate":
            return "not_accumulated"
        if ctx == "vmap" and on in BACKWARD_ON:
            return "vmap"
        return "unexplained"
    if t.in_processes:
        return "processes"
    if between in RECOMPILING:
        return "recompiled"
    if between == "prepare_qat" and on in ("forward", "forward_pre") and not t.on_target:
        return "qat_swapped"
    if on in GLOBAL_ON:
        return "global_hook"
    if between in COPYING:
        return "copy_ran"
    if between in COMPILING:
        return "compiled"
    if does == "removes" and (ctx in ("chunked", "shared", "pool_before", "ckpt_full", "grad_accum", "generate", "assisted") or
                              ctx == "trainer" and on not in BACKWARD_ON or
                              ctx == "retain_graph" and on in BACKWARD_ON):
        return "removed_itself"
    if t.in_threads:
        return "threads"
    if ctx == "ckpt_early" and on in ("forward", "forward_pre") and t.fired == 1 and between != "quantize":
        # (quantize_: nothing in the checkpointed block needs a gradient but its bias, so it saves no tensor and
        # backward recomputes nothing: one call, one firing)
        return "checkpoint_early_stop"
    if ctx == "assisted":
        return "assisted"
    if between == "parametrized_cached" and ctx in ("chunked", "shared") and on not in PARAM_ON:
        return "parametrize_cached"  # two calls of the model, the weight computed once
    if ctx == "retain_graph" and on in BACKWARD_ON and t.fired > 1:
        return "several_passes"
    if t.fired > 1 or ctx in ("chunked", "shared", "grad_accum") and on not in PARAM_ON:
        return "several_calls"
    if between == "tied" and on in PARAM_ON:
        return "tied"
    return "fired"


def round_of(key: str) -> int:
    """1 for a setup of the first round, 2 for one with a level added in the second (:data:`ROUND_2`), 3 for one with
    a level added in the third (:data:`ROUND_3`), 4 for one with a level added in the fourth (:data:`ROUND_4`), 5 for
    one with a level added in the fifth (:data:`ROUND_5`), 6 for one with a level added in the sixth
    (:data:`ROUND_6`), 7 for one with a level added in the seventh (:data:`ROUND_7`)."""
    f = parse(key)
    if any(f[factor] in levels for factor, levels in ROUND_7.items()):
        return 7
    if any(f[factor] in levels for factor, levels in ROUND_6.items()):
        return 6
    if any(f[factor] in levels for factor, levels in ROUND_5.items()):
        return 5
    if any(f[factor] in levels for factor, levels in ROUND_4.items()):
        return 4
    if any(f[factor] in levels for factor, levels in ROUND_3.items()):
        return 3
    return 2 if any(f[factor] in levels for factor, levels in ROUND_2.items()) else 1


def keys() -> list[str]:
    """Every setup key of the population, before the invalid ones are dropped (in a fixed order): the first
    round's, then the second round's."""
    first = [k for k in _keys_first() if round_of(k) == 1]
    seen = set(first)
    out = list(first)

    def add(on: str, between: str, ctx: str, does: str, o: str = "tensor", round_: int = 2) -> None:
        key = f"{on}/{between}/{ctx}/{does}/{o}"
        if key not in seen and round_of(key) == round_:
            seen.add(key)
            out.append(key)
    new_ctx, new_between = ROUND_2["ctx"], ROUND_2["between"]
    for on in ON:
        for ctx in new_ctx:           # every new context, every action, nothing in between
            for does in DOES:
                add(on, "none", ctx, does)
        for between in new_between:   # every new change in between, every action, run plainly
            for does in DOES:
                add(on, between, "plain", does)
        for between in new_between:   # and under a few contexts, old and new
            for ctx in ("no_grad", "grad_accum", "autograd_grad"):
                for does in ("none", "factory"):
                    add(on, between, ctx, does)
    for ctx in CTX:                   # the global forward pre-hook under every old context, every action
        for does in DOES:
            add("global_pre", "none", ctx, does)
    for between in BETWEEN:           # and after every old change in between
        for does in ("none", "raises", "state"):
            add("global_pre", between, "plain", does)
    for o in OUT[1:]:                 # new contexts with other outputs
        for ctx in ("autocast", "retain_graph", "backward_inputs"):
            for on in ("forward", "backward", "activation", "global_pre"):
                for does in ("none", "raises"):
                    add(on, "none", ctx, does, o)
    for on in ON:                     # the third round: every new context, every action, nothing in between
        for ctx in ROUND_3["ctx"]:
            for does in DOES:
                add(on, "none", ctx, does, round_=3)
        for between in ROUND_3["between"]:   # every new change in between, every action, run plainly
            for does in DOES:
                add(on, between, "plain", does, round_=3)
        for between in ROUND_3["between"]:   # and under old and new contexts
            for ctx in ("no_grad", "chunked", "shared", "pool_before", "ckpt_early", "trainer", "other_model"):
                for does in ("none", "factory"):
                    add(on, between, ctx, does, round_=3)
        for between in ("deepcopy", "module_replaced", "assign", "compile_eager_before", "peft", "tied", "fx"):
            for ctx in ("trainer", "other_model"):   # old changes in between under the new contexts
                add(on, between, ctx, "none", round_=3)
    for o in OUT[1:]:                 # the new contexts with other outputs
        for ctx in ("trainer", "other_model"):
            for on in ("forward", "backward", "activation", "global"):
                for does in ("none", "raises"):
                    add(on, "none", ctx, does, o, round_=3)
    for on in ON:                     # the fourth round: every new context, every action, nothing in between
        for ctx in ROUND_4["ctx"]:
            for does in DOES:
                add(on, "none", ctx, does, round_=4)
        for between in RECOMPILING:   # a recompile: the actions that compile quickly, run plainly
            for does in ("none", "value", "raises", "state"):
                add(on, between, "plain", does, round_=4)
        for does in DOES:             # prepare_qat: every action, run plainly
            add(on, "prepare_qat", "plain", does, round_=4)
        for ctx in ("no_grad", "chunked", "workers", "other_model"):   # and under a few contexts, old and new
            for does in ("none", "factory"):
                add(on, "prepare_qat", ctx, does, round_=4)
    for o in OUT[1:]:                 # the new contexts with other outputs
        for ctx in ROUND_4["ctx"]:
            for on in ("forward", "backward", "activation", "global"):
                for does in ("none", "raises"):
                    add(on, "none", ctx, does, o, round_=4)
    for on in ON:                     # the fifth round: assisted generation and fused projections, every action
        for does in DOES:
            add(on, "none", "assisted", does, round_=5)
            add(on, "fuse_qkv", "plain", does, round_=5)
        for ctx in FUSED_CTX[1:]:     # the fused transformer without gradients and in chunks
            for does in ("none", "factory"):
                add(on, "fuse_qkv", ctx, does, round_=5)
    for on in ON:                     # the sixth round: every new change in between, every action, run plainly
        for between in ROUND_6["between"]:
            for does in DOES:
                add(on, between, "plain", does, round_=6)
        for between in PARAMETRIZED:  # a parametrization under contexts that call the model or run backward twice
            for ctx in PARAMETRIZED_CTX:
                for does in ("none", "factory"):
                    add(on, between, ctx, does, round_=6)
        for ctx in FUSED_CTX[1:]:     # the fused transformer trained since fusing, without gradients and in chunks
            for does in ("none", "factory"):
                add(on, "fuse_qkv_trained", ctx, does, round_=6)
    for on in (*PARAM_ON, "forward"):  # the seventh round: the deprecated weight_norm, every action, run plainly
        for does in DOES:
            add(on, "weight_norm_legacy", "plain", does, round_=7)
        for ctx in WEIGHT_NORM_CTX:   # and under contexts that call the model several times or run no backward
            for does in ("none", "factory", "module_hook_too"):
                add(on, "weight_norm_legacy", ctx, does, round_=7)
    for on in PARAM_ON:               # a parameter hook with its module's own forward hook: every change, plainly
        for between in BETWEEN:
            add(on, between, "plain", "module_hook_too", round_=7)
        for between in ("none", *PARAM_REPLACING, "module_replaced", "tied", "peft"):   # and under a few contexts
            for ctx in MODULE_HOOK_CTX:
                add(on, between, ctx, "module_hook_too", round_=7)
    return out


def _keys_first() -> list[str]:
    """The first round's keys (the levels of ROUND_2 make none: they are dropped by :func:`keys`)."""
    out: list[str] = []

    def add(on: str, between: str, ctx: str, does: str, o: str) -> None:
        key = f"{on}/{between}/{ctx}/{does}/{o}"
        if key not in seen:
            seen.add(key)
            out.append(key)
    seen: set[str] = set()
    for on in ON:
        for ctx in CTX:               # every context, every action, nothing in between
            for does in DOES:
                add(on, "none", ctx, does, "tensor")
        for between in BETWEEN:       # every change in between, every action, run plainly
            quick = between in COMPILING or between == "export"
            for does in (("none", "raises", "state") if quick else DOES):
                add(on, between, "plain", does, "tensor")
        for o in OUT[1:]:             # other outputs
            for ctx in ("plain", "no_grad", "chunked", "shared", "ckpt_early", "pool_before"):
                for does in ("none", "value", "raises", "state"):
                    add(on, "none", ctx, does, o)
        for between in ("deepcopy", "module_replaced", "assign", "swap_dtype", "tied", "dtype", "peft", "fx"):
            for ctx in ("no_grad", "chunked", "shared", "pool_before", "ckpt_early", "thread_during"):
                for does in ("none", "factory"):
                    add(on, between, ctx, does, "tensor")
    return out

