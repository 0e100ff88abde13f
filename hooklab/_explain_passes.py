"""What :func:`~hooklab.explain.explain_hook` says about how often a module ran and under what, past the counts:
calls made by tracing code or under a ``torch.func`` transform, the step's backward passes (and a ``GradScaler``'s
scaled loss), hooks that stayed silent in backward, one module reached by two paths. The causes of a module that never
ran are :mod:`hooklab._explain_causes`. Each function returns sentences (or nothing, when what it looks for is not
there); none guesses a cause it did not see.

>>> passes({"backward()": 2})
'2 backward passes (backward() 2)'
"""
from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from torch import nn

from . import _torch_internals as internals
from ._explain_causes import ASSISTED, FUNC_GRAD, TRACING, VMAP, checkpoint_no_grad
from ._watch import _HOOK_KINDS, _Watch
from .inventory import hook_name
from .systems import _unwrap


def tracer_forward(name: str, r: Any) -> str:
    """The sentence for a forward run without a module call by tracing code (FX's symbolic_trace of the module)."""
    return (f"{name}.forward ran {r.forward_runs - r.calls} time(s) without a module call, from "
            f"{', '.join(r.forward_callers)}: tracing runs the forward of the module it traces directly (torch.fx's "
            "symbolic_trace, with Proxies), so no hook of it runs while tracing, and the graph it makes calls none")


def tracing(r: Any) -> int:
    """How many of the module's calls were made while tracing (not under a torch.func transform)."""
    return sum(n for kind, n in r.traced.items() if kind in TRACING)


def traced(name: str, r: Any, made: str | None) -> str:
    """The sentence for calls made while tracing or under a torch.func transform; ``made``: what tracing made and
    ran, when it did."""
    out = []
    for kind, n in r.traced.items():
        head = f"{n} of its {r.calls} call(s)"
        if kind in TRACING:
            out.append(f"{head} were made during {kind}: its hooks fired then, on what tracing passes in, and what "
                       "they returned is recorded into the graph; the graph made from it runs without calling any "
                       "of its hooks, and no backward goes through a traced call" + (f" ({made})" if made else ""))
        elif kind == VMAP:
            out.append(f"{head} ran inside {VMAP}: its forward hooks fire once per vmap call, on batched tensors, "
                       "and its backward hooks are not attached to batched tensors, so they never fire (silently)")
        elif kind == FUNC_GRAD:
            out.append(f"{head} ran inside {FUNC_GRAD}: module backward hooks raise there (their autograd.Function "
                       "has no setup_context, which the transforms need), and the gradients are taken of the tensors "
                       "passed in (torch.func.functional_call), not of its parameters")
        else:
            out.append(f"{head} ran inside {kind} (forward-mode AD): no backward runs through them")
    return "; ".join(out)


def passes(found: dict[str, int]) -> str:
    """The step's backward passes in words."""
    total = sum(found.values())
    what = ", ".join(f"{kind} {n}" for kind, n in found.items())
    return f"{total} backward pass{'es' if total != 1 else ''} ({what})"


def scaled(r: Any) -> str:
    """The sentence for a step whose loss a GradScaler scaled."""
    return (f"the loss was scaled by a GradScaler in this step (scaler.scale(loss), {r.step_calls['GradScaler.scale']} "
            "time(s)): the gradients its backward hooks and the hooks on its parameters saw are multiplied by the "
            "loss scale (65536 at first); scaler.unscale_(optimizer), or scaler.step, divides .grad afterwards, not "
            "what the hooks saw")


def more_passes(r: Any, fired: dict[str, int]) -> str:
    """The sentence for backward hooks in a step with several backward passes (``fired``: label -> firings)."""
    counts = ", ".join(f"{label} {n}" for label, n in fired.items())
    return (f"the step ran {passes(r.backward_passes)}, and a backward hook fires once in each pass that goes "
            f"through it ({counts}): retain_graph=True and a second backward, or a gradient taken with "
            "create_graph=True and then differentiated (that second pass reaches the module only where the first "
            "gradient depends on its output)")


def backward_silent(r: Any, w: _Watch, silent: list[str]) -> str:
    """Why the backward hooks (and the hooks on its parameters) in ``silent`` never fired, although it was called."""
    grads = r.backward_passes
    if w.checkpoint_first:
        why = checkpoint_no_grad(r, w)
    elif tracing(r) == r.calls:
        why = "all its calls were made while tracing, and no backward goes through a traced call"
    elif r.calls_without_grad:
        why = f"{r.calls_without_grad} of its {r.calls} call(s) ran without gradients (torch.no_grad / inference_mode)"
    elif VMAP in r.traced:
        why = f"its calls ran inside {VMAP}, where backward hooks are not attached (above)"
    elif r.params_swapped:
        why = (f"in {r.params_swapped} of its call(s) its parameters were not the Parameters it held when the step "
               f"began: {swapped_by(w)}")
    elif not r.profiled:  # the fallback watches module calls only: the backward passes were not counted
        why = ("no backward through its output ran in the step, its output was not part of the loss, or nothing it "
               "computes with needs a gradient (another profiler was active, so the backward passes were not "
               "counted: check which ran)")
    elif not grads:
        why = ("no backward ran in this step (no .backward() or torch.autograd.grad call: a forward-only step, one "
               "that raised first, or an output that does not require grad)")
    elif "torch.autograd.grad" in grads:
        why = ("the gradients were taken with torch.autograd.grad, which computes only what it is asked for: a full "
               "backward hook runs when the gradient of the module's input is computed (ask for a tensor before it, "
               "or call backward()), a hook on a parameter only when that parameter is asked for, and a "
               "post-accumulate-grad hook never (autograd.grad accumulates nothing into .grad)")
    elif "backward(inputs=...)" in grads:
        why = ("backward(inputs=...) computes the gradients of the tensors it is given only: hooks on parameters not "
               "among them never fire, nor post-accumulate-grad hooks of parameters not among them")
    else:
        why = (f"the step ran {passes(grads)}, none through it: its output was not part of the loss (or was "
               "detached before it), or nothing it computes with needs a gradient; check that the loss uses its output")
    return f"{', '.join(silent)} never fired: {why}"


def sharded_by(model: nn.Module, target: nn.Module) -> str:
    """What shards or lays out the model's parameters, seen from its modules: "fsdp1" (a FullyShardedDataParallel
    wrapper), "fsdp2" (a module of fully_shard), "dtensor" (DTensor parameters of ``target`` and no FSDP: tensor
    parallelism, distribute_module), or ""."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    modules = list(model.modules())
    for kind, cls in (("fsdp1", getattr(fsdp, "FullyShardedDataParallel", None)),
                      ("fsdp2", getattr(fsdp, "FSDPModule", None))):
        if isinstance(cls, type) and any(isinstance(m, cls) for m in modules):
            return kind
    return "dtensor" if dtensor_parameters(target) else ""


def dtensor_parameters(target: nn.Module) -> list[str]:
    """The names of ``target``'s parameters (its submodules' too) that are DTensors."""
    cls = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
    if not isinstance(cls, type):  # torch.distributed.tensor never imported: no DTensor exists
        return []
    return [n for n, p in target.named_parameters() if isinstance(p, cls)]


def swapped_by(w: _Watch) -> str:
    """Why a module computed with other tensors than the Parameters it held when the step began, as far as the model
    shows it (a FSDP wrapper, DTensor parameters); otherwise what may have done it, to check."""
    kind = sharded_by(w.model, w.target)
    if kind == "fsdp1":
        return ("the model holds FSDP1 wrappers (FullyShardedDataParallel), which flatten a wrapped module's parameters "
                "into one FlatParameter and compute with views of it: the gradients flow into the FlatParameter "
                "(with use_orig_params=True too), so a hook on the original Parameter never fires. Hook the module "
                "(a full backward hook fires), or read the gradient of the FlatParameter after backward")
    if kind == "fsdp2":
        return ("the model is sharded by FSDP2 (fully_shard), which computes with unsharded copies of its sharded "
                "DTensor parameters, so a tensor hook on a sharded parameter never fires (FSDP2 itself calls the "
                "post-accumulate-grad hooks of the sharded parameters, after the reduce-scatter)")
    if kind == "dtensor":
        return ("its parameters are now DTensor Parameters that replaced the ones it held (tensor parallelism: "
                "parallelize_module / distribute_module register new Parameters), and a hook stays on the Parameter "
                "it was registered on: register hooks on the parameters after parallelizing")
    return ("load_state_dict(assign=True) and to_empty() (from the meta device) put new Parameters in their place, "
            "and torch.func.functional_call (which torch.func.grad calls), torch.nn.utils.stateless, FSDP1 and FSDP2 "
            "compute with other tensors. A hook stays on the Parameter it was registered on, so these never fire: "
            "check which of these the step does, and register the hooks on the parameters the module holds when it "
            "runs")


def dtensors(name: str, target: nn.Module, model: nn.Module) -> str | None:
    """The sentence for a module whose parameters are DTensors (what its hooks receive then), or None."""
    found = dtensor_parameters(target)
    if not found:
        return None
    shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
    who = {"fsdp2": "FSDP2 (fully_shard) shards them", "fsdp1": "FSDP1 wraps the model"}.get(
        sharded_by(model, target), "tensor parallelism (parallelize_module, distribute_module) lays them out over the "
                                   "ranks")
    return (f"the parameters of {name} are DTensors ({shown}; {who}): a hook on one receives a DTensor gradient, and "
            "module hooks may receive DTensor inputs and outputs. to_local() gives this rank's part; full_tensor() "
            "gathers the whole, a collective every rank must call")


def duplicates(name: str, target: nn.Module, paths: list[str]) -> str | None:
    """The sentence for hooks of one kind made by the same code on the module (registered twice?), with the paths
    by which the model reaches it when there are several."""
    groups: Counter = Counter()
    shown: dict[Any, str] = {}
    hooks = [(kind, fn) for _a, kind, d in internals.module_hook_dicts(target) if kind in _HOOK_KINDS
             for fn in d.values()]
    hooks += [(f"{pname}: {kind}", fn) for pname, p in target.named_parameters(recurse=False)
              for kind, d in internals.tensor_hook_dicts(p) for fn in d.values()]
    for kind, fn in hooks:
        inner = _unwrap(fn)
        key = (kind, getattr(inner, "__code__", None) or type(inner))
        groups[key] += 1
        shown[key] = f"{hook_name(fn)} ({kind})"
    twice = [f"{n} x {shown[key]}" for key, n in groups.items() if n > 1]
    if not twice:
        return None
    text = f"{name} carries {', '.join(twice)}: hooks of one kind made by the same code"
    if len(paths) > 1:
        return text + (f". The model reaches {name} by {len(paths)} paths ({', '.join(map(repr, paths))}): one module "
                       "with several parents. model.apply(fn) and loops over named_modules(remove_duplicate=False) "
                       "visit it once per path, so a hook registered from them lands on it once per path and fires "
                       "that many times per call: register from named_modules(), which gives each module once")
    return text + (". If you registered one, it was registered again (re-running a cell stacks hooks; "
                   "hooklab.named_scope replaces them instead)")


def what_calls(r: Any, tracing_calls: int = 0) -> str:
    """What its calls were, read from how they ran: with or without gradients, in training or eval mode, and how
    many backward passes the step ran. An evaluation loop (a Trainer's validation and sanity check) calls a module
    in eval mode without gradients; ``generate`` calls it once per new token without gradients; chunks,
    micro-batches and a module used at several places call it with gradients."""
    n = r.calls - tracing_calls
    off, evaluating = r.calls_without_grad, r.calls_in_eval
    passes = sum(r.backward_passes.values())
    if r.step_calls.get(ASSISTED):
        return (f"{'all ' if off == n else ''}{off} without gradients: assisted generation (generate with "
                "assistant_model) calls it once per verification round, not once per new token: the assistant "
                "model drafts several tokens and this model checks them all in one call (the first call the prompt "
                "too), so its hooks fire once per round and see several new positions each time; count new tokens "
                "from generate's output, not from hook firings")
    if off == n:
        return (f"all {n} without gradients{', in eval mode' if evaluating == n else ''}: an inference loop, such as "
                "generate's one call per new token (its KV cache feeds each call the new positions only), or the "
                "same module at several places")
    if off:
        return (f"{n - off} with gradients and {off} without{f', {evaluating} in eval mode' if evaluating else ''}"
                f": the calls without gradients are an evaluation loop's (a Trainer's validation or sanity-check "
                f"loop, torch.no_grad), and backward ran {passes} time(s), through the calls with gradients only")
    many = f", with {passes} backward passes" if passes > 1 else ""
    return ("every call with gradients" + many + ": the module is used at several places, or the step runs it in "
            "a loop (chunks, gradient accumulation's micro-batches)")
