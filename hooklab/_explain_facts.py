"""The machine-readable side of :func:`~hooklab.explain.explain_hook`: one code per fact it saw
(:data:`CODES`), each read from what ran, with its sentence.

:func:`facts` reads what :class:`~hooklab._watch._Watch` saw (which hook fired, on which object, in which thread,
what the module returned, which hooks were removed or registered during the step, which hook an exception came
from, which parameters got a gradient) and returns the codes and the sentences that the cause and the counts do not
already say. Codes are composed: a hook that fired in a pool's threads, several times, gets ``threads`` and
``several_calls``. ``fired`` is given only when every hook it watched fired on the module itself; a code for why a
hook did not fire only when that is what it saw.

>>> sorted(CODES)[:3]
['assisted', 'checkpoint_early_stop', 'compiled']
"""
from __future__ import annotations

import gc
import os
import re
from typing import Any

import torch
from torch import nn
from torch.nn.utils.parametrize import ParametrizationList

from . import _torch_internals as internals
from ._explain_causes import ASSISTED, VMAP
from ._watch import _HOOK_KINDS, COMPILED, COPY, COPY_INSIDE, DYNAMO_GRAPH, LOOKALIKE, SELF, UNFLATTENED, _runs, _Watch

CODES = {
    "fired": "every hook it watched fired on the module (or its parameter) itself",
    "several_calls": "the module ran several times in the step: its hooks fired once per call",
    "threads": "the module ran (or its hooks fired) in other threads than the step's",
    "no_grad": "the module ran without gradients: no backward hook, tensor hook or Node hook on its output fires",
    "frozen": "a hooked parameter does not require grad: its hooks never fire",
    "module_replaced": "the hooks are on a module the model no longer holds (replaced after registering)",
    "parameter_replaced": "a hooked parameter is not the tensor the step computed with (replaced or swapped)",
    "copy_ran": "a copy of the module ran (deepcopy, pickle, torch.export's unflatten, EMA...)",
    "graph": "an FX graph module that inlined the module ran",
    "compiled": "compiled code ran (torch.compile): hooks traced in at compile time, later ones never run",
    "dict_output": "its forward returned a dict / ModelOutput: no full backward hook is attached to it",
    "hook_raised": "one of its hooks raised (not its forward)",
    "step_raised": "the step raised outside its hooks",
    "checkpoint_early_stop": "a non-reentrant checkpoint's recompute stopped before the module returned",
    "not_reached": "the module was not called: this input's path does not go through it",
    "removed_itself": "a hook removed itself during the step",
    "tied": "a hooked parameter is shared by several modules (tied weights): its hook sees the summed gradient",
    "global_hook": "a global module hook fired on the module",
    "several_passes": "the step ran several backward passes over one call (retain_graph=True): a backward hook fired "
                      "once per pass",
    "not_accumulated": "the step took gradients with torch.autograd.grad: nothing was accumulated into .grad, so "
                       "post-accumulate-grad hooks did not fire",
    "outside_backward_inputs": "every backward pass asked for other tensors' gradients only (backward(inputs=...), "
                               "torch.autograd.grad): none went through the module or its parameters",
    "vmap": "the module ran inside torch.func.vmap, where backward hooks and hooks on its output are not attached",
    "processes": "the step ran the model in other processes (DataLoader workers, multiprocessing): its hooks fired "
                 "there, on those processes' copies, where this process cannot count them",
    "recompiled": "torch.compile recompiled in the step (a new input shape): hooks present then were traced in and "
                  "ran inside the compiled code, hooks added after the first compile included",
    "qat_swapped": "the module is a QAT module that prepare_qat swapped in: its forward hooks and pre-hooks are "
                   "copies registered again by the swap, which the handles of the old module's hooks do not remove",
    "assisted": "assisted generation (generate with assistant_model) called the model once per verification round: "
                "the assistant drafts several tokens and the model checks them in one call, so its hooks fire fewer "
                "times than there are new tokens",
    "fused": "the module was fused into another module that runs instead (diffusers' fuse_qkv_projections: to_q, "
             "to_k, to_v into to_qkv; a Conv+BN fusion): hooks on the module fused away never fire",
    "parametrize_cached": "the module is a parametrization that ran under torch.nn.utils.parametrize.cached(): the "
                          "parametrized tensor is computed on its first access and reused until the context ends, so "
                          "its hooks fire once per context, not once per call of the model",
    "unexplained": "it saw nothing that explains the hooks that did not fire",
}
# the doctor's causes (HookExplanation.cause) that are codes too
CAUSE_CODES = {"copy": "copy_ran", "another model": "copy_ran", "graph": "graph", "compiled": "compiled",
               "not reached": "not_reached", "bypassed": "not_reached", "step raised": "step_raised",
               "other processes": "processes", "fused": "fused"}
_BACKWARD = ("backward", "backward_pre")
_TORCH = os.path.dirname(torch.__file__)


# sentences one answer must not hold together: (a phrase, a phrase that says the opposite of it)
CONTRADICTIONS = (
    ("its forward hooks fire on each call", "its forward hooks do not run then"),
    ("fired as expected", "never fired"),
    ("hooks registered later do not run at all", "a recompile traces the hooks present"),
)
# what the first phrase of each pair becomes when the answer also holds the second (said of what it saw)
_SETTLED = {
    "its forward hooks fire on each call": "its forward hooks fire on the calls that return (an early-stopped "
                                           "recompute does not, see below)",
    "hooks registered later do not run at all (torch.compile does not recompile for them)":
        "hooks registered later run only in code compiled after them (a recompile in this step traced them in, "
        "see below)",
}


def contradictions(reasons: list[str]) -> list[tuple[str, str]]:
    """The pairs of :data:`CONTRADICTIONS` that both appear in ``reasons`` (one answer's sentences).

    >>> contradictions(["its forward hooks fire on each call, ...", "... so its forward hooks do not run then"])
    [('its forward hooks fire on each call', 'its forward hooks do not run then')]
    """
    return [(a, b) for a, b in CONTRADICTIONS if any(a in r for r in reasons) and any(b in r for r in reasons)]


def settle(reasons: list[str]) -> list[str]:
    """``reasons`` with the general sentence of each contradicting pair narrowed to what was seen (the specific
    sentence, read from what ran, stands)."""
    found = contradictions(reasons)
    out = list(reasons)
    for general, _specific in found:
        for old, new in _SETTLED.items():
            if general in old or old.startswith(general):
                out = [r.replace(old, new) for r in out]
    return out


def hook_that_raised(error: BaseException, w: _Watch) -> str | None:
    """The label of the watched hook the exception came out of, or a description of the function PyTorch called as
    a hook that raised it (a hook it did not watch), or None when no hook raised it. A frame runs a hook's code
    when its code object is the hook's, or a copy of it made at the same place of the same file (torch.compile's
    Dynamo runs a function it could not trace, after a graph break, as a rewritten copy of its code)."""
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    at = {(c.co_filename, c.co_firstlineno, c.co_name): labels for c, labels in w.hook_codes.items()}
    for frame in reversed(frames):
        code = frame.f_code
        for label in w.hook_codes.get(code, at.get((code.co_filename, code.co_firstlineno, code.co_name), [])):
            if _runs(w.fns.get(label), frame.f_locals):
                return label
        if id(frame.f_locals.get("self")) in w.hook_objects and frame.f_code.co_name == "__call__":
            return w.hook_objects[id(frame.f_locals["self"])]
    # raised in another process (a DataLoader worker): its traceback comes back as text in the message
    text = str(error)
    if "Original Traceback" in text:
        where = {(c.co_filename, c.co_name): (c, labels) for c, labels in w.hook_codes.items()}
        listed = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', text)
        for filename, line, fn in reversed(listed):
            code, labels = where.get((filename, fn), (None, []))
            if code is not None and labels and int(line) >= code.co_firstlineno:
                return f"{labels[0]} (in another process)" if len(labels) == 1 else \
                    f"{' or '.join(labels)} (in another process)"
        # a function PyTorch called there as a hook (one registered in the step, on an output tensor)
        inside = [i for i, (filename, _line, _fn) in enumerate(listed) if filename.startswith(_TORCH)]
        if inside and inside[-1] + 1 < len(listed):
            _f, _l, caller = listed[inside[-1]]
            _f, _l, fn = listed[inside[-1] + 1]
            if caller in ("_call_impl", "inner", "hook", "_fn", "_engine_run_backward") and \
                    fn not in ("forward", "<lambda>", "<module>", "__getitem__"):
                return f"{fn} (a hook PyTorch called, in another process)"
        return None
    # a function of the user's that PyTorch itself called (autograd's engine, a module call's hook loop)
    for i in range(len(frames) - 1, -1, -1):
        frame = frames[i]
        if frame.f_code.co_filename.startswith(_TORCH):
            continue
        before = frames[i - 1] if i else None
        called_by_torch = before is None or before.f_code.co_filename.startswith(_TORCH)
        if called_by_torch and frame.f_code.co_name not in ("forward", "<lambda>", "<module>") and i:
            hooky = before is not None and before.f_code.co_name in ("_call_impl", "inner", "hook", "_fn")
            if hooky or before is None:
                return f"{frame.f_code.co_name} (a hook PyTorch called)"
        return None
    return None


def _shared(target: nn.Module, model: nn.Module, watched: frozenset[int] = frozenset()) -> dict[str, list[str]]:
    """Its hooked parameters (hooked now, or ``watched``: hooked when the step began, a hook that removed itself)
    that the model holds under several names (tied weights): name -> the names."""
    names: dict[int, list[str]] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(n)
    out = {}
    for pname, p in target.named_parameters(recurse=False):
        hooked = id(p) in watched or any(d for _k, d in internals.tensor_hook_dicts(p))
        if hooked and len(set(names.get(id(p), []))) > 1:
            out[pname] = sorted(set(names[id(p)]))
    return out


def _old_holders(target: nn.Module, w: _Watch, like: set[Any] | None = None,
                 with_modules: bool = True) -> tuple[list[Any], list[Any]]:
    """Hooked modules of its type and its parameters' shapes that the model does not hold and that did not run, and
    hooked Parameters of its parameters' shapes that the model does not hold: (modules, parameters). Unreachable
    garbage is collected first, so only objects something still holds count. ``like``: the code of the hooks on its
    parameters now; a Parameter counts only if one of its hooks runs that code (one registered the same way): a
    hooked Parameter of another model that something else keeps is not this module's old one. Modules and Parameters
    of another model of the model's class (another instance the process holds, hooked the same way) are not old ones
    either. ``with_modules=False``: Parameters only (hooks are on its parameters now, so the module the model holds is the
    one they were registered through, and a hooked module of its type elsewhere is another model's)."""
    gc.collect()
    others = _other_models(w.model, w.tree)
    shapes = {tuple(p.shape) for p in target.parameters(recurse=False)}
    lists = getattr(target, "parametrizations", None)  # a parametrized module: its originals' shapes too
    if isinstance(lists, nn.ModuleDict):
        shapes |= {tuple(p.shape) for p in lists.parameters()}
    held = {id(p) for p in w.model.parameters()}
    own = [tuple(p.shape) for p in target.parameters(recurse=False)]  # an old copy of it has its parameters' shapes
    modules, params = [], []
    for o in gc.get_objects():
        if id(o) in others:
            continue
        if with_modules and issubclass(type(o), nn.Module) and type(o) is type(target) and id(o) not in w.tree and \
                not w.calls[id(o)] and [tuple(p.shape) for p in o.parameters(recurse=False)] == own and \
                any(d for _a, kind, d in internals.module_hook_dicts(o) if kind in _HOOK_KINDS):
            modules.append(o)
        elif issubclass(type(o), nn.Parameter) and id(o) not in held and tuple(o.shape) in shapes and any(
                d for _k, d in internals.tensor_hook_dicts(o)) and (like is None or like & {
                    _hook_code(fn) for _k, d in internals.tensor_hook_dicts(o) for fn in d.values()}):
            params.append(o)
    return modules, params


def _qat_swap(name: str, target: nn.Module, w: _Watch) -> tuple[str | None, str | None] | None:
    """For a QAT module (torch.ao.nn.qat, intrinsic.qat) that ``prepare_qat`` swapped in for a float module outside
    the model that carries hooks: (the sentence for the forward hooks it registered again on it, the sentence for the
    hooks it left on the old module), or None when the module is not such a swap."""
    if ".qat" not in type(target).__module__ or not type(target).__module__.startswith("torch.ao."):
        return None
    float_kind = getattr(type(target), "_FLOAT_MODULE", None)
    kinds = float_kind if isinstance(float_kind, tuple) else (float_kind,)
    if not all(isinstance(k, type) for k in kinds):
        return None
    gc.collect()
    elsewhere = {d for d, _label in w.removed_elsewhere}  # a handle of the old module removed its copy in the step
    olds = [o for o in gc.get_objects() if type(o) in kinds and id(o) not in w.tree and not w.calls[id(o)] and any(
        d or id(o.__dict__.get(attr)) in elsewhere for attr, kind, d in internals.module_hook_dicts(o)
        if kind in _HOOK_KINDS)]
    if not olds:
        return None
    mine = {id(fn) for _a, kind, d in internals.module_hook_dicts(target) if kind in ("forward", "forward_pre")
            for fn in d.values()} | {id(fn) for label, fn in w.fns.items() if w.kinds.get(label) in ("forward",
                                                                                                   "forward_pre")}
    copied = sorted({w.hook_labels.get(id(fn), getattr(fn, "__name__", type(fn).__name__)) for o in olds
                     for _a, kind, d in internals.module_hook_dicts(o) if kind in ("forward", "forward_pre")
                     for fn in d.values() if id(fn) in mine} | {label for _d, label in w.removed_elsewhere})
    left = sorted({kind for o in olds for _a, kind, d in internals.module_hook_dicts(o) if kind in _BACKWARD and d})
    what = f"{name} is a QAT {type(target).__name__} ({type(target).__module__.split('.modules')[0]}) that " \
           "prepare_qat swapped in for the " \
           f"{'/'.join(k.__name__ for k in kinds)} you hooked"
    said_copied = ((f"{what}: swap_module registered that module's forward hooks and pre-hooks on the new one again "
                   f"({', '.join(copied)}), so they fire here with the new module as `module`. They are new "
                   "registrations: the handles you kept remove the hooks of the old module only, and handle.remove() "
                   "leaves these in place; remove them from this module (hooklab.all_hooks(model) lists them; delete "
                   "their keys from its _forward_hooks / _forward_pre_hooks), or register after prepare_qat")
                   if copied else None)
    said_left = (f"{what}: swap_module copies forward hooks and pre-hooks only, so the {' and '.join(left)} hook(s) "
                 "stayed on the old module, which the model no longer holds and which never runs: register them on "
                 "the QAT module after prepare_qat") if left else None
    return said_copied, said_left


def _replaced_how(target: nn.Module) -> str:
    """What the module's parameters show of who replaced them: an offloading hook's meta tensors, a tensor
    subclass (a quantizer's), or nothing."""
    params = dict(target.named_parameters(recurse=False))
    meta = [n for n, p in params.items() if p.device.type == "meta"]
    if meta:
        return (f". Here {', '.join(meta)} are on the meta device: an offloading hook (accelerate's cpu_offload, "
                "dispatch_model with offloaded weights, a diffusers pipeline's enable_sequential_cpu_offload) puts a "
                "new tensor in for each forward, so no hook on a Parameter can stay; hook the module's output, or "
                "train without offloading")
    legacy = sorted(str(getattr(hook, "name", "weight")) for hook in target._forward_pre_hooks.values()
                    if type(hook).__name__ == "WeightNorm")
    if legacy:
        return (f". Here {', '.join(legacy)} is no Parameter: the deprecated torch.nn.utils.weight_norm deleted it "
                f"and computes it before each call in a forward pre-hook of its own (WeightNorm) from "
                f"{', '.join(f'{n}_g and {n}_v' for n in legacy)}; hook those, or use "
                "torch.nn.utils.parametrizations.weight_norm and hook parametrizations.<name>.original0 / original1")
    kinds = {n: type(p) for n, p in params.items() if type(p) not in (nn.Parameter, torch.Tensor)}
    sharded = sorted(n for n, kind in kinds.items() if kind.__name__ == "DTensor")
    if sharded:
        return (f". Here {', '.join(sharded)} is a DTensor: FSDP2 (fully_shard) or tensor parallelism replaced the "
                "Parameter; register hooks on the Parameters it holds after wrapping")
    sub = sorted(f"{n} ({kind.__name__})" for n, kind in kinds.items())
    if sub:
        return (f". Here {', '.join(sub)} is a tensor subclass: a quantizer (torchao's quantize_, bitsandbytes) "
                "replaced the Parameter with one that holds quantized values"
                + ("" if any(params[n.split(' ')[0]].requires_grad for n in sub) else " and needs no gradient")
                + ", so a hook on the old one never runs; hook the module's output")
    return ""


def _other_models(model: nn.Module, tree: Any) -> set[int]:
    """The ids of every module and Parameter held by another instance of the model's class that the process keeps
    (a second model built from the same code, a reference or teacher model): its hooks are its own, not ones the
    model lost. Call after ``gc.collect()``."""
    out: set[int] = set()
    for o in gc.get_objects():
        if type(o) is type(model) and o is not model and id(o) not in tree:
            out.update(id(m) for m in o.modules())
            out.update(id(p) for p in o.parameters())
    return out


def _hook_code(fn: Any) -> Any:
    """The code a hook runs: a function's, or its class's ``__call__``."""
    inner = getattr(fn, "__func__", fn)
    call = next((k.__dict__["__call__"] for k in type(inner).__mro__ if "__call__" in k.__dict__), None)
    return getattr(inner, "__code__", None) or getattr(call, "__code__", None)


def _left_behind(target: nn.Module, w: _Watch) -> list[Any]:
    """Hooked Parameters of the module's shapes that the model does not hold and that no module holds (the old
    ones of a module whose parameters were replaced); another model's, or another instance's, are not counted. Asked
    of every module whose own hooks fired, so one quick pass without a collection comes first: only where it finds a
    hooked Parameter of those shapes outside the model are garbage collected and every holder looked for."""
    shapes = {tuple(p.shape) for p in target.parameters()}
    held = {id(p) for p in w.model.parameters()}
    objects = gc.get_objects()
    kinds, more = set(), [nn.Parameter]  # Parameter and its subclasses (its isinstance is slow over every object)
    while more:
        kind = more.pop()
        kinds.add(kind)
        more += [k for k in kind.__subclasses__() if k not in kinds]
    if not any(type(o) in kinds and id(o) not in held and tuple(o.shape) in shapes and
               any(d for _k, d in internals.tensor_hook_dicts(o)) for o in objects):
        return []
    del objects
    old = _old_holders(target, w, with_modules=False)[1]
    if not old:
        return []
    held = {id(p) for o in gc.get_objects() if isinstance(o, nn.Module) for p in o._parameters.values()
            if p is not None}
    return [p for p in old if id(p) not in held]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same values (of one shape, dtype and device)."""
    if type(a) is not type(b) or a.shape != b.shape or a.dtype != b.dtype or a.device != b.device or \
            a.device.type == "meta":
        return False
    try:
        with torch.no_grad():
            return bool(torch.equal(a.detach(), b.detach()))
    except Exception:  # noqa: BLE001 - tensors that cannot be compared here (DTensors of other layouts)
        return False


def facts(r: Any, target: nn.Module, w: _Watch, error: BaseException | None,
          grads: dict[str, tuple[Any, Any, bool]]) -> tuple[list[str], list[str]]:
    """(codes, sentences) for what it saw; ``grads``: label of a hook on a parameter -> (the Parameter, whether its
    .grad changed in the step, whether it requires grad)."""
    codes: list[str] = []
    said: list[str] = []
    name = repr(r.name)

    def add(code: str, sentence: str | None = None) -> None:
        if code not in codes:
            codes.append(code)
        if sentence:
            said.append(sentence)

    def unsaid(sentence: str, *already: str) -> str | None:  # None when the reasons already say it
        return None if any(a in x for a in already for x in r.reasons) else sentence

    if r.cause in CAUSE_CODES:
        add(CAUSE_CODES[r.cause])
    on_self = {label: on.get(SELF, 0) for label, on in r.fired.items()}
    total = {label: sum(on.values()) for label, on in r.fired.items()}
    module_labels = [label for label in r.fired if w.kinds.get(label) in _HOOK_KINDS]
    param_labels = [label for label in r.fired if label in grads]
    tracing = sum(n for kind, n in r.traced.items() if "trac" in kind)
    # ---- the step's exception: a hook, or the step
    if error is not None:
        raised = hook_that_raised(error, w)
        if raised is not None:
            add("hook_raised", f"the exception came out of a hook, {raised}, not out of the forward: that hook "
                               f"raised {r.error}. Fix the hook (or catch inside it); the module's forward was fine")
            codes[:] = [c for c in codes if c != "step_raised"]
        else:
            add("step_raised")
            if "BackwardHookFunction" in (r.error or ""):
                said.append(f"a full backward hook (or backward pre-hook) on {name} wraps its output in a view "
                            "(BackwardHookFunction), and the code after it modified that output in place: clone "
                            "it first (out = out.clone()) or make the op out of place")
    # ---- copies that torch.export made
    if any(k.startswith(UNFLATTENED) for k in r.ran_instead):
        codes[:] = [c for c in codes if c not in ("graph",)]
        add("copy_ran", "what ran is torch.export.unflatten's copy of the model (an UnflattenedModule of "
                        "InterpreterModules): export traced the hooks present at export into it and kept no "
                        "hook object, so hooks of the original model never fire there. Hook the unflattened "
                        "module's own submodules")
    assisted = r.step_calls.get(ASSISTED, 0)
    lookalike_only = all(k.startswith(LOOKALIKE) for k in r.ran_instead if k.startswith((COPY, COPY_INSIDE,
                                                                                         LOOKALIKE)))
    if assisted and lookalike_only and any(k.startswith(LOOKALIKE) for k in r.ran_instead):
        said.append("a module like it outside the model ran too: the assistant model's (assisted generation drafts "
                    "with its own model; your hooks are not on it)")
    elif any(k.startswith((COPY, COPY_INSIDE, LOOKALIKE)) for k in r.ran_instead) or any(
            on.get(COPY, 0) or on.get(COPY_INSIDE, 0) for on in r.fired.values()):
        add("copy_ran")
    # ---- compiled code that ran (a wrapper around it or around a module above it)
    if any(k.startswith((COMPILED, DYNAMO_GRAPH)) for k in r.ran_instead) or any(
            w.compiled_calls[id(m)] for _n, m in [(r.name, target), *w.ancestors]):
        add("compiled")
    if r.recompiled and "compiled" in codes:
        add("recompiled",
            f"torch.compile compiled the model again in this step ({r.recompiled} new version(s) beside the code it "
            "had: a new input shape, or another guard that failed): a recompile traces the hooks present at that "
            f"moment, so hooks registered after the first compiled call ran in this step inside the new code "
            f"(explain_hook cannot count them there; the calls of {name} counted here are the trace's). The code compiled "
            "before still runs without them for the inputs it was compiled for")
    # ---- threads
    if w.pool_tasks and w.pools and w.pools_watched:
        add("threads", f"the step gave {w.pool_tasks} task(s) to a thread pool whose threads were started before "
                       "the step: explain_hook set its profile function in those threads for the step (one task "
                       "per thread, before the step's), so their calls are counted")
    elif w.pool_tasks:
        add("threads", f"the step gave {w.pool_tasks} task(s) to a thread pool whose threads were started before "
                       "the step: explain_hook's profile function reaches the step's thread and threads started "
                       "during the step only, so calls made in that pool's threads are not counted here (the "
                       "hooks ran there all the same). Create the pool inside the step, or ask with a step that "
                       "calls the model in this thread, to see them counted")
    if w.thread_calls or any(w.fired_outside.values()):
        outside = sum(w.fired_outside.values())
        add("threads", f"{name} ran {w.thread_calls} time(s) in threads other than the step's, and its hooks fired "
                       f"{outside} time(s) there: a hook runs in the thread that calls the module (forward hooks) or "
                       "that runs backward (backward hooks); state it shares needs a lock")
    # ---- several calls
    calls = r.calls - tracing
    per_call = max([n for label, n in on_self.items() if label in module_labels and
                    w.kinds.get(label) in ("forward", "forward_pre")] or [0])
    if calls > 1 or per_call > 1:
        add("several_calls")
    # ---- assisted generation: one call per verification round, not per token
    if assisted and r.calls:
        add("assisted")
    # ---- a parametrization under parametrize.cached(): computed once per context, reused
    model_calls = w.calls[id(w.model)]
    if w.model_calls_cached and isinstance(w.parent, ParametrizationList):
        # the name asked about says which path of a module used at several places is meant; the tree, one of them
        path = r.name if ".parametrizations." in "." + r.name else w.tree.get(id(w.parent), "")
        owner, _, rest = ("." + path).rpartition(".parametrizations.")
        owner, tensor = owner[1:], rest.split(".")[0]
        param = f"{owner}.{tensor}" if owner else tensor  # the model's own parameter: no owner
        try:
            user = w.model.get_submodule(owner)
        except AttributeError:
            user = None
        user_calls = w.calls[id(user)] if user is not None else 0
        if max(model_calls, user_calls) > r.calls:
            uses = (f"{user_calls} call(s) of {owner!r}, which uses the tensor, in {model_calls} call(s) of the model"
                    if owner and user_calls != model_calls else f"{model_calls} call(s) of the model")
            add("parametrize_cached",
                f"{name} is a parametrization of {param!r}: it ran {r.calls} time(s) for {uses}; "
                f"{w.model_calls_cached} of the model's {model_calls} call(s) ran under "
                "torch.nn.utils.parametrize.cached(). There the "
                "parametrized tensor is computed on its first access and reused until the context ends, so its "
                "hooks fire once per context, not once per call. Outside cached() it runs at every access of the "
                "tensor; to see every use, hook the module that uses it (its forward pre-hook sees the same weight "
                "each time)")
    # ---- global hooks
    fired_globals = [label for label in w.global_labels if total.get(label)]
    if fired_globals:
        add("global_hook", f"global module hooks fired on it ({', '.join(f'{lb} {total[lb]}' for lb in fired_globals)}"
                           "): torch.nn.modules.module.register_module_forward_hook and its kin fire on every module "
                           "call of the process, this one included; remove them with the handle they returned")
    # ---- removed during the step
    removed = [label for label in w.removed() if total.get(label)]
    if removed:
        add("removed_itself", f"{', '.join(removed)} removed itself (or was removed) during the step after firing "
                              f"{', '.join(str(total[lb]) for lb in removed)} time(s): later calls ran without it")
    # ---- the checkpoint's recompute stopped early
    forward_labels = [label for label in module_labels if w.kinds.get(label) == "forward"]
    if w.checkpoint_recomputed and any(on_self[label] < r.calls for label in forward_labels):
        add("checkpoint_early_stop",
            f"{name} was called {r.calls} times, {w.checkpoint_recomputed} of them torch.utils.checkpoint's "
            "recompute, and its forward hooks fired fewer times "
            f"({', '.join(f'{lb} {on_self[lb]}' for lb in forward_labels)}): a non-reentrant checkpoint stops "
            "the recompute as soon as the tensors backward needs are rebuilt (early stop, the default), before "
            f"{name} returns, so its forward hooks do not run then; torch.utils.checkpoint."
            "set_checkpoint_early_stop(False) runs the recompute to the end")
    # ---- backward hooks that did not fire
    silent_module = [label for label in module_labels if w.kinds.get(label) in _BACKWARD and not total[label]]
    if silent_module and r.calls and w.outputs and not (w.outputs.get("tensor") or w.outputs.get("tuple")):
        add("dict_output", f"{', '.join(silent_module)} never fired: {name}'s forward returned "
                           f"{', '.join(w.outputs)} ({type(target).__name__}), and PyTorch attaches full backward "
                           "hooks only to a Tensor output or a tuple's tensors (it warns 'module output should be a "
                           "Tensor or a tuple of Tensors'). Hook the tensor inside it (a tensor hook on "
                           "output['...'] from a forward hook), or the submodule that returns a tensor")
    silent_params = [label for label in param_labels if not total[label]]
    frozen = [label for label in silent_params if not grads[label][2]]
    if frozen:
        add("frozen", f"{', '.join(frozen)} never fired: that parameter does not require grad (requires_grad=False: "
                      "frozen, e.g. by get_peft_model or a fine-tuning recipe), so backward computes no gradient "
                      "for it; hook a parameter that trains (a LoRA weight), or the module's output")
    swapped = [label for label in silent_params if grads[label][1] and label not in frozen]
    if swapped:
        add("parameter_replaced",
            f"{', '.join(swapped)} never fired although its Parameter received a gradient in this step: the hook is "
            "no longer attached to the tensor autograd used. torch.utils.swap_tensors swaps a Parameter's contents "
            "(model.to(dtype) with torch.__future__.set_swap_module_params_on_conversion(True), and Module._apply "
            "for tensor-subclass parameters) and keeps the Python object and its hook list, but not the hooks "
            "themselves: register the hooks again after the conversion")
    substituted = [label for label in silent_params if label not in frozen and label not in swapped]
    if substituted and r.params_swapped:
        add("parameter_replaced",
            f"{', '.join(substituted)} never fired: in {r.params_swapped} of its call(s) {name} computed with other "
            "tensors than the Parameters it holds (torch.func.functional_call or torch.nn.utils.stateless put them "
            "in for the call), and the hook is on the Parameter, which that call did not use; hook the tensors you "
            "pass in, or the module's output")
    accumulating = [label for label in silent_params if w.kinds.get(label) == "post_accumulate_grad" and
                    grads[label][2] and label not in swapped]
    kinds_of_pass = {kind for kind, _ids in w.asked}
    if accumulating and kinds_of_pass == {"torch.autograd.grad"}:
        add("not_accumulated",
            f"{', '.join(accumulating)} never fired: the step took its gradients with torch.autograd.grad "
            f"({r.backward_passes.get('torch.autograd.grad', 0)} call(s)), which returns them and accumulates "
            "nothing into .grad, so no post-accumulate-grad hook runs; a tensor hook (register_hook) on the parameter "
            "sees them, or call backward()")
    registered_nothing = bool(w.registrars) and not w.in_step and r.calls
    silent_backward = silent_module + silent_params + ([] if not registered_nothing else ["(hooks on its output)"])
    if (silent_backward or registered_nothing) and r.calls_without_grad and "frozen" not in codes:
        what = ("its forward hook registers hooks on its output only when there is a graph, and registered none"
                if registered_nothing else f"{', '.join(silent_module + silent_params)} never fired")
        add("no_grad", f"{what}: {r.calls_without_grad} of its {r.calls} call(s) ran without gradients "
                       "(torch.no_grad / inference_mode), so no backward runs through it")
    silent_in_step = [label for label in w.in_step if not total.get(label)]
    own = {id(p) for p in target.parameters()}
    silent_any = silent_module + silent_params + silent_in_step
    if (silent_any or registered_nothing) and r.calls and not r.calls_without_grad and w.asked and all(
            ids is not None and not ids & own for _kind, ids in w.asked):
        asked = sorted({kind for kind, _ids in w.asked})
        add("outside_backward_inputs", unsaid(
            f"{', '.join(silent_any) or 'the hooks on its output'} never fired: each backward pass of the step "
            f"({', '.join(asked)}) asked for the gradients of other tensors only, none of them {name}'s parameters, "
            "and autograd runs only the part of the graph those need; ask for its parameters too, or call "
            "backward() without inputs=", "backward(inputs=...) computes the gradients of the tensors it is given"))
    if VMAP in r.traced and (silent_any or registered_nothing):
        add("vmap", unsaid(f"{', '.join(silent_any) or 'the hooks on its output'} never fired: {r.traced[VMAP]} of its "
                           f"call(s) ran inside {VMAP}, where PyTorch attaches no backward hook to the module and its "
                           "output is a batched tensor inside the transform; hook the vmapped function's output "
                           "outside it", f"inside {VMAP}, where backward hooks are not attached"))
    backward_labels = [label for label in r.fired if w.kinds.get(label) in _BACKWARD or label in grads or
                       label in w.in_step]
    passes_n = sum(r.backward_passes.values())
    if passes_n > max(1, calls) and any(total.get(label, 0) > 1 for label in backward_labels):
        add("several_passes", unsaid(
            f"the step ran {passes_n} backward passes over {calls} call(s) of {name} (retain_graph=True and a second "
            "backward): a backward hook fires once in each pass that goes through it ("
            + ", ".join(f"{label} {total[label]}" for label in backward_labels) + ")",
            "a backward hook fires once in each pass that goes through it"))
    # ---- replaced modules and parameters
    fired_on_it = any(on_self.values())  # a hook that fired on it is not on a replaced object (a global one)
    if not fired_on_it and not r.fired or (param_labels and not any(
            total[label] for label in param_labels) and "parameter_replaced" not in codes):
        # hooks on its parameters now that did not fire: an old Parameter explains that only if it holds hooks
        # registered the same way (otherwise any hooked Parameter of its shape that something keeps would)
        like = {_hook_code(w.fns.get(label)) for label in param_labels} - {None} if param_labels else None
        explained = [c for c in codes if c in ("frozen", "no_grad", "copy_ran", "compiled", "graph", "not_reached",
                                               "not_accumulated", "outside_backward_inputs", "vmap")]
        old_modules, old_params = _old_holders(target, w, like, with_modules=not param_labels) if not explained else ([], [])
        # what ties an old Parameter to this module outweighs a hooked module of its type elsewhere (another
        # model's): its parameters show who replaced them (meta, a quantized subclass, a DTensor), or an old
        # Parameter holds what the module holds now (a copy of itself put in: assign=True, an offload hook's load)
        how = _replaced_how(target)
        copied = any(_same(o, p) for o in old_params for p in target.parameters())
        if old_params and (how or copied or not old_modules):
            holders = [] if copied or how else [o for o in gc.get_objects() if isinstance(o, nn.Module) and id(o) not in
                                         w.tree and any(p is q for p in old_params for q in o._parameters.values())]
            if holders:
                add("module_replaced", f"{len(holders)} module(s) that the model no longer holds "
                                       f"({', '.join(sorted({type(m).__name__ for m in holders}))}) hold hooked "
                                       f"Parameters of {name}'s shapes: {name} was replaced in the model after the "
                                       "hooks were registered on its parameters; register them on the module the "
                                       "model holds now")
            else:
                add("parameter_replaced",
                    f"{len(old_params)} hooked Parameter(s) of {name}'s shapes are no longer held by the model: "
                    f"{name}'s parameter was replaced after the hooks were registered (load_state_dict(assign=True), "
                    "to_empty, a parametrization such as weight_norm that keeps new tensors in .parametrizations), so "
                    "the hooks stay on a tensor the step does not use; register them on what the module holds now"
                    + how)
        elif old_modules:
            add("module_replaced")
        elif not r.fired and not explained and isinstance(
                lists := getattr(target, "parametrizations", None), nn.ModuleDict):
            # nothing hooked is left to find (the old Parameter is gone), but the module shows the replacement
            add("parameter_replaced",
                f"no hook is on {name} or its parameters now, and its {', '.join(sorted(lists.keys()))} is computed "
                "by a parametrization (weight_norm, spectral_norm, register_parametrization...): registering one "
                "moves or replaces the Parameter, so a hook registered on the Parameter before that stays on a "
                "tensor the module no longer uses. Register hooks after parametrizing (on "
                "parametrizations.<name>.original), or hook the module's output")
    # ---- a hooked Parameter it held before, left behind while hooks on the module itself fired
    left = _left_behind(target, w) if r.fired and not param_labels and not any(
        c in codes for c in ("parameter_replaced", "module_replaced", "copy_ran", "compiled", "graph")) else []
    if left:
        add("parameter_replaced",
            f"the hooks on {name} itself ran, but {len(left)} hooked Parameter(s) of {name}'s shapes are held by no "
            "module any more: a Parameter of it replaced after the hooks were registered on it "
            "(load_state_dict(assign=True), to_empty(), module.weight = nn.Parameter(...), weight_norm), so the "
            f"hooks stay on a tensor the step does not use and never fire; register them on {name}'s parameters now"
            + _replaced_how(target))
    # ---- a QAT module that prepare_qat swapped in
    swap = _qat_swap(name, target, w)
    lost = swap is not None and swap[1] is not None  # a hook it watched is on the old module: not all fired here
    if swap is not None:
        registered_again, left_behind = swap
        if registered_again:
            add("qat_swapped", registered_again)
        if left_behind:
            codes[:] = [c for c in codes if c != "fired"]
            add("module_replaced", left_behind)
    # ---- tied parameters
    tied = _shared(target, w.model, frozenset(id(p) for p in w.param_of.values()))
    if tied and any(total.get(label) for label in param_labels):
        add("tied", "its hooked parameter is shared: " + "; ".join(
            f"{p} is also {', '.join(n for n in names)}" for p, names in tied.items()) + ". A tensor hook on it fires "
            "once per backward pass with the gradient summed over every place that uses it, and a "
            "post-accumulate-grad hook sees that sum in .grad: hook a module's output to see one use")
    # ---- fired, when every hook it watched fired on it
    watched = [label for label in r.fired if label not in w.global_labels or total[label]]
    if watched and error is None and not registered_nothing and not silent_in_step and not lost and not left and all(
            on_self[label] for label in watched):
        add("fired")
    if not codes or codes == ["several_calls"] and any(not total[label] for label in r.fired):
        add("unexplained")
    return codes, said
