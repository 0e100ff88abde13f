"""Why did my hook not fire, or fire twice? Run the step and watch the hooked module, without changing it.

:func:`explain_hook` runs ``run()`` once and reports whether the module called ``name`` ran (as a module call, and
how often its ``forward`` code ran), how many times each of its hooks fired and with which module, and what ran
instead when it did not: a copy, a replica, a fused or compiled version, a graph module that inlined it, a fast path,
or the parent using its parameters directly.

It watches without registering anything on the model: PyTorch's global module hooks see every module call, and a
profile function (``sys.setprofile``, also in threads started during the step) sees which Python functions and
fast-path ops ran. Neither changes what the step computes, and both are removed before :func:`explain_hook`
returns, also when ``run`` raises. A local hook would have changed the answer (``nn.TransformerEncoderLayer`` takes
its fast path only when no submodule has a forward hook), and so would a ``TorchFunctionMode`` (it makes
``torch.compile`` recompile, with the hooks added since then traced in).

>>> import copy, torch
>>> from torch import nn
>>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
>>> def print_shape(module, args, output):
...     print(tuple(output.shape))
>>> handle = model[0].register_forward_hook(print_shape)
>>> copied = copy.deepcopy(model)          # e.g. an EMA copy or a copy for prediction
>>> report = explain_hook(model, "0", run=lambda: copied(torch.ones(1, 2)))
(1, 2)
>>> report.calls, report.fired["print_shape (forward)"]
(0, {'a copy (carries the same hooks)': 1})
>>> print(report.reasons[0])
'0' itself never ran: a copy of it ran instead (Linear, 1 call(s); it carries your hooks, so they fired with the copy as `module`): hook the model that runs, or register before copying only if you want the copy's calls
>>> handle.remove()
"""
from __future__ import annotations

import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as module_globals

from . import _torch_internals as internals
from ._text import format_table
from .inventory import hook_name
from .lookup import get_module
from .systems import HookRecord, _unwrap, compiled, module_records

__all__ = ["HookExplanation", "explain_hook"]

# relations of a module that ran to the hooked one
SELF = "the module"
REPLICA = "a replica (shares its hook dicts)"
COPY = "a copy (carries the same hooks)"
LOOKALIKE = "a module like it, outside the model"
COMPILED = "a torch.compile wrapper around it"
FUSED = "a fused module made from it"
GRAPH = "an FX GraphModule that inlined it"
IN_MODEL = "another module of the model"
OTHER_GRAPH = "an FX GraphModule (torch.fx, torch.export)"

_HOOK_KINDS = ("forward_pre", "forward", "backward_pre", "backward")
# modules that Conv+BN(+ReLU) fusion folds into the fused module (they have no copy inside it)
_FOLDED = (nn.modules.batchnorm._BatchNorm, nn.ReLU)


def _fast_paths() -> dict[Any, str]:
    """Built-in ops that compute a whole module without calling its submodules (nor their hooks)."""
    paths = {}
    for op, what in (("_transformer_encoder_layer_fwd", "nn.TransformerEncoderLayer's fast path"),
                     ("_native_multi_head_attention", "nn.MultiheadAttention's fast path")):
        fn = getattr(torch, op, None)
        if fn is not None:
            paths[fn] = f"{what} (torch.{op})"
    return paths


@dataclass
class HookExplanation:
    """What :func:`explain_hook` saw; ``print(report)`` (or :meth:`table`) shows it, :attr:`reasons` says why."""

    name: str
    module_type: str
    calls: int = 0
    forward_runs: int = 0
    hooks: list[HookRecord] = field(default_factory=list)
    fired: dict[str, dict[str, int]] = field(default_factory=dict)
    ran_instead: dict[str, int] = field(default_factory=dict)
    fast_paths: dict[str, int] = field(default_factory=dict)
    parent: str | None = None
    parent_calls: int = 0
    calls_without_grad: int = 0
    profiled: bool = True
    reasons: list[str] = field(default_factory=list)

    def table(self) -> str:
        """The explanation as text: how often the module was called and its forward code ran (and its parent
        called), a table of its hooks and how often each fired, what ran instead, fast paths, and why (also what
        ``print(explanation)`` shows)."""
        counts = [("called as a module (module(...))", str(self.calls)),
                  ("its forward code ran", str(self.forward_runs) if self.profiled
                   else "not counted (another profiler is active)")]
        if self.parent is not None:
            counts.append((f"its parent {self.parent!r} was called" if self.parent else "the model was called",
                           str(self.parent_calls)))
        width = max(len(k) for k, _ in counts)
        lines = [f"explain_hook({self.name!r}): {self.module_type}"] + [f"  {k.ljust(width)}  {v}" for k, v in counts]
        rows = [(label, ", ".join(f"{n} x {rel}" for rel, n in on.items()) or "0")
                for label, on in self.fired.items()]
        lines += ["", format_table(("hook on it", "fired"), rows, empty="no PyTorch hooks on it")]
        others = [r for r in self.hooks if r.kind not in _HOOK_KINDS]
        if others:
            lines += ["", format_table(("also on it", "kind", "what", "owner"),
                                       [(r.where, r.kind, r.what, r.owner) for r in others])]
        if self.ran_instead:
            lines += ["", format_table(("ran instead", "calls"), [(k, str(v)) for k, v in self.ran_instead.items()])]
        if self.fast_paths:
            lines += ["", format_table(("fast path", "runs"), [(k, str(v)) for k, v in self.fast_paths.items()])]
        lines += ["", "why:"] + [f"  - {r}" for r in self.reasons]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


class _Watch:
    """The probes of one explain_hook call: global module hooks and a profile function."""

    def __init__(self, model: nn.Module, name: str, target: nn.Module) -> None:
        self.model, self.name, self.target = model, name, target
        self.tree = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
        self.parent = model.get_submodule(name.rpartition(".")[0]) if name else None
        self.parent_forward = _code(type(self.parent).forward) if self.parent is not None else None
        self.calls = self.parent_calls = self.without_grad = self.forward_runs = 0
        self.ran_instead: Counter = Counter()
        self.fast: Counter = Counter()
        self.fast_ops = _fast_paths()
        self.forward_code = _code(type(target).forward)
        self.hook_objects: dict[int, str] = {}     # id(hook object) -> label (callable objects: exact match)
        self.hook_codes: dict[Any, list[str]] = {}  # code object -> labels (functions)
        self.hook_labels: dict[int, str] = {}      # id(module hook function) -> label
        self.fired: dict[str, Counter] = {}
        self.labels: list[str] = []
        self._target_hooks = set()
        for _attr, kind, hooks in internals.module_hook_dicts(target):
            if kind not in _HOOK_KINDS:
                continue
            for fn in hooks.values():
                self.hook_labels[id(fn)] = self._watch(fn, f"{hook_name(fn)} ({kind})", kind)
                self._target_hooks.add(id(fn))
        for pname, p in target.named_parameters(recurse=False):
            for kind, hooks in internals.tensor_hook_dicts(p):
                for fn in hooks.values():
                    self._watch(fn, f"{hook_name(fn)} ({pname}: {kind} hook)", kind)

    def _watch(self, fn: Any, label: str, kind: str) -> str:
        base, n = label, 1
        while label in self.fired:
            n += 1
            label = f"{base} #{n}"
        self.labels.append(label)
        self.fired[label] = Counter()
        inner = _unwrap(fn)
        code = _code(inner)
        if code is not None:
            self.hook_codes.setdefault(code, []).append(label)
        else:
            call = _code(getattr(type(inner), "__call__", None))  # noqa: B004 (its code object, not a callable test)
            if call is not None:
                self.hook_objects[id(inner)] = label
                self.hook_codes.setdefault(call, [])
        return label

    # ---- what a module that ran is to the hooked one
    def relation(self, m: Any) -> str:
        target = self.target
        if m is target:
            return SELF
        if getattr(m, "_forward_hooks", None) is getattr(target, "_forward_hooks", False):
            return REPLICA
        if id(m) in self.tree:
            return IN_MODEL
        if not isinstance(m, nn.Module):
            return IN_MODEL
        if compiled(m):
            inner = internals.unwrap_compiled(m)
            if inner is target or any(sub is target for sub in inner.modules()):
                return COMPILED
        if type(m).__module__.startswith("torch.ao.nn.intrinsic") and (
                any(self._carries_target_hooks(c) or self._looks_alike(c) for c in m.children())
                or isinstance(target, _FOLDED)):
            return FUSED
        if self._carries_target_hooks(m):
            return COPY
        if isinstance(m, torch.fx.GraphModule) and any(sub is child for sub in m.modules()
                                                        for child in target.children()):
            return GRAPH
        if self._looks_alike(m):
            return LOOKALIKE
        if isinstance(m, torch.fx.GraphModule):
            return OTHER_GRAPH
        return "other"

    def _carries_target_hooks(self, m: nn.Module) -> bool:
        if not self._target_hooks:
            return False
        for _attr, kind, hooks in internals.module_hook_dicts(m):
            if kind in _HOOK_KINDS and any(id(fn) in self._target_hooks for fn in hooks.values()):
                return True
        return False

    def _looks_alike(self, m: nn.Module) -> bool:
        if type(m) is not type(self.target):
            return False
        mine = [tuple(p.shape) for p in self.target.parameters()]
        return bool(mine) and mine == [tuple(p.shape) for p in m.parameters()]

    # ---- the probes
    def pre_hook(self, m: nn.Module, args: Any) -> None:
        if m is self.target:
            self.calls += 1
            if not torch.is_grad_enabled():
                self.without_grad += 1
        elif m is self.parent:
            self.parent_calls += 1
        elif id(m) not in self.tree:
            relation = self.relation(m)
            if relation not in ("other", IN_MODEL):
                self.ran_instead[f"{relation}: {type(m).__name__}"] += 1

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code is self.forward_code:
                me = frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None
                if me is self.target:
                    self.forward_runs += 1
            if code in self.hook_codes:
                self._hook_fired(frame, code)
        elif event == "c_call" and arg in self.fast_ops:
            self.fast[self.fast_ops[arg]] += 1

    def _hook_fired(self, frame: Any, code: Any) -> None:
        local = frame.f_locals
        positional = [local.get(n) for n in code.co_varnames[:code.co_argcount]]
        if code.co_flags & 0x04:  # *args
            positional += list(local.get(code.co_varnames[code.co_argcount + code.co_kwonlyargcount], ()))
        labels = list(self.hook_codes[code])
        if positional and id(positional[0]) in self.hook_objects:  # a callable object: exactly this one
            labels = [self.hook_objects[id(positional[0])]]
        if not labels:
            return
        module = next((a for a in positional if isinstance(a, nn.Module)), None)
        relation = self.relation(module) if module is not None else SELF
        if relation in (IN_MODEL, "other"):
            return  # the same function registered on another module
        if module is not None and len(labels) > 0 and not (positional and id(positional[0]) in self.hook_objects):
            # functions that share this code (lambdas made in a loop): only those in the calling module's dicts
            present = {self.hook_labels[id(fn)] for _a, kind, hooks in internals.module_hook_dicts(module)
                       if kind in _HOOK_KINDS for fn in hooks.values()
                       if id(fn) in self.hook_labels and _code(fn) is code}
            labels = [label for label in labels if label in present]
        for label in labels:
            self.fired[label][relation] += 1


def _code(fn: Any) -> Any:
    fn = _unwrap(fn) if fn is not None else None
    return getattr(fn, "__code__", None)


def explain_hook(model: nn.Module, name: str, *, run: Callable[[], Any]) -> HookExplanation:
    """Run ``run()`` once and explain what happened to the module ``name`` of ``model`` and to its hooks.

    ``name`` is a name from ``model.named_modules()`` (an unknown one raises an error listing close matches);
    ``run`` is the step to watch, a function of no arguments (``run=lambda: model(x).sum().backward()``). Returns a
    :class:`HookExplanation`: how often the module was called and how often its ``forward`` code ran, how often
    each of its PyTorch hooks fired and with which module (itself, a replica, a copy), its other hooks (a replaced
    ``forward``, an adapter, an observer...: :func:`~hooklab.all_hooks`), what ran instead of it, the fast paths
    taken, and ``reasons``: why, in sentences. Exceptions from ``run`` propagate after the probes are removed.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"explain_hook needs the model (an nn.Module) whose module you hooked, got {type(model).__name__}")
    if not callable(run):
        raise TypeError("run is the step to watch, a function with no arguments, e.g. run=lambda: model(x); "
                        f"got {type(run).__name__}")
    target = get_module(model, name)
    watch = _Watch(model, name, target)
    report = HookExplanation(name, type(target).__name__, hooks=module_records(target, name or type(target).__name__),
                             parent=name.rpartition(".")[0] if name else None)
    previous, previous_threads = sys.getprofile(), threading.getprofile()
    report.profiled = previous is None

    def profile(frame: Any, event: str, arg: Any) -> None:
        watch.profile(frame, event, arg)

    handles = []
    try:
        with warnings.catch_warnings():
            # the probes are global module hooks; torch.compile's warning about them is about ours, not the user's
            warnings.filterwarnings("ignore", message=r".*global hooks on modules", category=UserWarning)
            handles.append(module_globals.register_module_forward_pre_hook(watch.pre_hook))
            if report.profiled:
                threading.setprofile(profile)
                sys.setprofile(profile)
            run()
    finally:
        if report.profiled:
            sys.setprofile(None)
            threading.setprofile(previous_threads)
        for handle in handles:
            handle.remove()
    report.calls, report.forward_runs = watch.calls, watch.forward_runs
    report.parent_calls, report.calls_without_grad = watch.parent_calls, watch.without_grad
    report.fired = {label: dict(on) for label, on in watch.fired.items()}
    report.ran_instead, report.fast_paths = dict(watch.ran_instead), dict(watch.fast)
    report.reasons = _reasons(report, target)
    return report


# what ran instead of the module, in the order they are looked for, and the sentence for each
_INSTEAD = {
    COMPILED: "{name} was not called in Python: a torch.compile wrapper around it ran {n} time(s) and the compiled "
              "code ran instead; hooks registered after the first compiled call are not in it. Register them "
              "before compiling, or call the eager model (model._orig_mod)",
    FUSED: "{name} itself never ran: a fused module ran instead ({typename}, {n} call(s)); it {folded}. Register "
           "hooks on the fused model, after fusing",
    COPY: "{name} itself never ran: a copy of it ran instead ({typename}, {n} call(s); it carries your hooks, so "
          "they fired with the copy as `module`): hook the model that runs, or register before copying only if "
          "you want the copy's calls",
    REPLICA: "{name} itself was not called: {n} replica(s) of it ran (DataParallel). They share its hook dicts, so "
             "its hooks fire once per replica with the replica as `module`; state a hook stores on `module` is "
             "lost with the replica",
    GRAPH: "{name} itself never ran: an FX GraphModule ran and inlined its forward (only leaf modules stay module "
           "calls, so their hooks still fire); hook its submodules or the GraphModule's own modules",
    LOOKALIKE: "{name} itself never ran, but a module like it outside the model did ({typename}, {n} call(s)): a "
               "copy made before your hooks were registered (deepcopy, an EMA / AveragedModel, a framework's copy "
               "for prediction) or another model; hook the one that runs",
    OTHER_GRAPH: "{name} itself never ran: a graph module ran instead ({typename}, {n} call(s); made by torch.fx, "
                 "torch.export or a quantizer such as PT2E from a copy of the model). Its graph calls only the "
                 "modules it kept as call_module nodes, and hooks of the original modules are not in it: hook the "
                 "graph module's own modules, or trace after registering",
}


def _reasons(r: HookExplanation, target: nn.Module) -> list[str]:
    reasons = []
    name = repr(r.name)
    instead: dict[str, tuple[str, int]] = {}
    for key, n in r.ran_instead.items():  # per relation: the type names and the calls, added up
        relation, typename = key.split(": ", 1)
        names, total = instead.get(relation, ("", 0))
        instead[relation] = (f"{names} + {typename}" if names else typename, total + n)
    kinds = {k.kind for k in r.hooks}
    fired_total = {label: sum(on.values()) for label, on in r.fired.items()}
    if r.calls == 0 and (r.forward_runs == 0 or not r.profiled):
        found = next((relation for relation in _INSTEAD if relation in instead), None)
        if found is not None:
            typename, n = instead[found]
            folded = ("folded it into its weights (a fused module has no copy of a BatchNorm or ReLU it absorbed, so "
                      "its hooks are gone)" if isinstance(target, _FOLDED) else
                      "holds a copy of it, which keeps the hooks it had when the model was copied")
            reasons.append(_INSTEAD[found].format(name=name, typename=typename, n=n, folded=folded))
            if found == OTHER_GRAPH and isinstance(target, nn.modules.batchnorm._BatchNorm):
                reasons.append(f"{name} is a BatchNorm: a fusing pass (torch.fx.experimental.optimization.fuse, "
                               "a quantizer's) may fold it into the convolution before it, leaving no module of it "
                               "to hook; if the graph module holds no BatchNorm, hook the convolution's output "
                               "instead, or observe it before fusing")
        elif r.fast_paths:
            path = ", ".join(r.fast_paths)
            reasons.append(f"{name} was not called: its parent took a fast path ({path}) that computes it in one op "
                           "without calling it, so no hook of it runs (global module hooks do not stop the fast "
                           "path; a forward hook on any submodule of the layer, training mode or gradients do)")
        elif r.parent is not None and r.parent_calls:
            reasons.append(f"{name} was not called although its parent {r.parent!r} ran {r.parent_calls} time(s): "
                           "the parent uses its parameters directly (e.g. MultiheadAttention computes out_proj with "
                           "F.multi_head_attention_forward), or this input's path does not go through it")
        elif isinstance(target, (nn.ModuleList, nn.ModuleDict)):
            reasons.append(f"{name} is a container ({type(target).__name__}): it is never called itself; hook its "
                           "children")
        else:
            reasons.append(f"{name} did not run in this step: the step did not call the model (or called another "
                           "one), or the module was replaced in the model after your hooks were registered "
                           "(model.x = nn.Linear(...) leaves the hooks on the old module)")
    elif REPLICA in instead:
        typename, n = instead[REPLICA]
        reasons.append(f"{n} replica(s) of {name} ran too (DataParallel): they share its hook dicts, so its hooks "
                       "fire once per replica, with the replica as `module`")
    if r.profiled and r.forward_runs > r.calls:
        reasons.append(f"{name}.forward ran {r.forward_runs - r.calls} time(s) without a module call: calling "
                       "module.forward(x) directly skips __call__ and every module hook; call module(x)")
    if r.calls > 1:
        reasons.append(f"{name} was called {r.calls} times in this step (used twice, in a loop, or once per "
                       "generated token): each hook fires once per call")
    for label, on in r.fired.items():
        if len(on) > 1:
            places = ", ".join(f"{n} x on {rel}" for rel, n in on.items())
            why = (": fuse_modules gives the fused module the first module's forward pre-hooks and the last one's "
                   "forward hooks, while the copy inside keeps its own" if FUSED in on and COPY in on else "")
            reasons.append(f"{label} fired {sum(on.values())} times ({places}){why}")
        if on.get(SELF, 0) > r.calls and r.calls and not label.endswith(" hook)"):
            reasons.append(f"{label} fired {on[SELF]} times on {name} for {r.calls} call(s): it is registered more "
                           "than once (re-running a cell stacks hooks; use hooklab.named_scope)")
    backward = [label for label in r.fired if "backward" in label]
    if r.calls and backward and not any(fired_total[label] for label in backward):
        why = (f"{r.calls_without_grad} of its {r.calls} call(s) ran without gradients (torch.no_grad / "
               "inference_mode)" if r.calls_without_grad else "no backward through its output ran in the step, its "
               "output was not part of the loss, or no input or parameter of it needs a gradient")
        reasons.append(f"its backward hooks never fired: {why}")
    if "forward replaced" in kinds:
        owner = next(k.owner for k in r.hooks if k.kind == "forward replaced")
        reasons.append(f"{owner} replaced its forward on the instance: PyTorch's hooks run outside that replacement "
                       "(forward pre-hooks before it, forward hooks after it), and see what it leaves behind")
    if "adapter layer" in kinds:
        base = getattr(target, "base_layer", None)
        held = sum(len(d) for _a, kind, d in internals.module_hook_dicts(base) if kind in _HOOK_KINDS) \
            if isinstance(base, nn.Module) else 0
        reasons.append(f"{name} is a PEFT adapter layer: hooks on it see the base output plus the adapter's; hooks "
                       "on its base_layer see the base output only" + (
                           f" (base_layer, the module you had before get_peft_model, carries {held} hook(s): "
                           "registered before wrapping, they stayed there)" if held else ""))
    if not reasons:
        counts = ", ".join(f"{label} {fired_total[label]}" for label in r.fired) or "no hooks on it"
        reasons.append(f"{name} ran {r.calls} time(s) as a module and its hooks fired as expected ({counts})")
    return reasons
