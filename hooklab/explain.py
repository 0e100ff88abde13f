"""Why did my hook not fire, or fire twice? Run the step and watch the hooked module, without changing it.

:func:`explain_hook` runs ``run()`` once and reports whether the module called ``name`` ran (as a module call, and
how often its ``forward`` code ran), how many times each of its hooks fired and with which module, and what ran
instead when it did not: a copy (outside the model, or inside it like PEFT's ``modules_to_save``), a replica, a fused,
compiled or TorchScript version, a graph module that inlined it, a fast path, a parent that computes with its
parameters directly, a parent that calls its submodules past it, a tied module that holds its weights, or nothing (this
input's path does not reach it). :attr:`HookExplanation.cause` names the cause in a word or two, and
:attr:`HookExplanation.reasons` says it in sentences, the most specific first. Causes found past the counts (a
TorchScript module around it, a branch for the other mode, a hook left on a replaced module, a forward that raised
under ``always_call`` hooks, ``torch.utils.checkpoint``, fast-path advice) live in :mod:`hooklab._explain_causes`.

It watches without registering anything: a profile function (``sys.setprofile``, also in threads started during the
step) sees each module call (``Module._call_impl``), which Python functions and fast-path ops ran, and which code read
the module's parameters. Nothing is added to the model or to PyTorch's global hook dicts, so nothing changes what the
step computes or what ``torch.compile`` compiles (a global module hook would make it recompile, with the hooks added
since then traced in; a local hook would turn ``nn.TransformerEncoderLayer``'s fast path off). When another profiler
is active, it falls back to a global module pre-hook and says so (``profiled`` is False), and refuses when the process
has compiled code, which that hook would change. The profile function is removed before :func:`explain_hook` returns.
When the step raises, the explanation of what it saw up to the error is attached to the step's own exception (a note
under its traceback, and its ``hooklab_explanation`` attribute) and the exception propagates unchanged.

>>> import copy, torch
>>> from torch import nn
>>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
>>> def print_shape(module, args, output):
...     print(tuple(output.shape))
>>> handle = model[0].register_forward_hook(print_shape)
>>> copied = copy.deepcopy(model)          # e.g. an EMA copy or a copy for prediction
>>> report = explain_hook(model, "0", run=lambda: copied(torch.ones(1, 2)))
(1, 2)
>>> report.calls, report.cause, report.fired["print_shape (forward)"]
(0, 'copy', {'a copy (carries the same hooks)': 1})
>>> print(report.reasons[0])
'0' itself never ran: a copy of it ran instead (Linear, 1 call(s); it carries your hooks, so they fired with the copy as `module`): hook the model that runs, or register before copying only if you want the copy's calls
>>> handle.remove()
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn
from torch.nn.modules import module as module_globals

from . import _explain_causes as causes, _torch_internals as internals
from ._text import format_table
from ._watch import (
    _FAST_PATH_OWNERS,
    _FOLDED,
    _HOOK_KINDS,
    COMPILED,
    COPY,
    COPY_INSIDE,
    DYNAMO_GRAPH,
    FUSED,
    GRAPH,
    LOOKALIKE,
    OTHER_GRAPH,
    REPLICA,
    SCRIPTED,
    SELF,
    _Watch,
)
from .lookup import get_module
from .systems import HookRecord, _is_script_module, compiled, module_records, not_a_module_hint

__all__ = ["CAUSES", "HookExplanation", "explain_hook"]


# what HookExplanation.cause can be, and what each means
CAUSES = {
    "ran": "the module was called (its hooks' counts say how often they fired)",
    "forward called directly": "its forward code ran without a module call (module.forward(x)), so no hook ran",
    "compiled": "compiled code ran instead (torch.compile): hooks run only if they were compiled in",
    "scripted": "a TorchScript version ran instead (torch.jit.script / trace)",
    "copy": "a copy of it ran instead (outside the model, or inside it: PEFT's modules_to_save)",
    "replica": "replicas of it ran (DataParallel)",
    "fused": "a fused module ran instead (Conv+BN+ReLU fusion, fuse_conv_bn_eval)",
    "graph": "a graph module ran instead (torch.fx, torch.export, PT2E)",
    "another model": "a module like it outside the model ran (a copy made before the hooks, another model)",
    "container": "a ModuleList / ModuleDict: never called itself",
    "bypassed": "its parent called its submodules directly, not the module itself",
    "fast path": "its parent took a fused fast path that computes it in one op",
    "parameters used directly": "its parent's code computed with its parameters without calling it",
    "tied": "its parameters are tied to a module that ran, which computes with them",
    "not reached": "nothing of it ran: this input's path does not go through it",
    "model not called": "the step did not call this model at all",
    "not observed": "another profiler was active: whether other code computed with its parameters was not seen",
    "profiler stopped": "the step stopped explain_hook's profile function (sys.setprofile inside it): what ran after "
                        "that was not seen",
}
_INSTEAD_CAUSE = {COMPILED: "compiled", SCRIPTED: "scripted", FUSED: "fused", COPY_INSIDE: "copy", COPY: "copy",
                  REPLICA: "replica", GRAPH: "graph", LOOKALIKE: "another model", OTHER_GRAPH: "graph",
                  DYNAMO_GRAPH: "compiled"}


@dataclass
class HookExplanation:
    """What :func:`explain_hook` saw; ``print(report)`` (or :meth:`table`) shows it, :attr:`reasons` says why and
    :attr:`cause` names the cause (a key of :data:`CAUSES`); :attr:`error` is the step's exception, when it raised."""

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
    profile_stopped: bool = False  # the step replaced or cleared the profile function: what followed was not seen
    parameter_reads: dict[str, int] = field(default_factory=dict)
    cause: str = "ran"
    error: str | None = None
    raised_inside: bool = False  # the step's exception came out of a call of this module (forward or hooks)
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
        if self.error is not None:
            counts.append(("the step raised", self.error))
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
        if self.parameter_reads:
            lines += ["", format_table(("its parameters read by", "reads"),
                                       [(k, str(v)) for k, v in self.parameter_reads.items()])]
        lines += ["", f"why ({self.cause}):"] + [f"  - {r}" for r in self.reasons]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _has_compiled() -> bool:
    """Whether this process has compiled anything with torch.compile (without importing torch._dynamo)."""
    if "torch._dynamo" not in sys.modules:
        return False
    try:
        from torch._dynamo.utils import counters
        return bool(counters["stats"].get("unique_graphs", 0))
    except Exception:  # noqa: BLE001 - a torch without these counters: assume it may have
        return True


def explain_hook(model: nn.Module, name: str, *, run: Callable[[], Any]) -> HookExplanation:
    """Run ``run()`` once and explain what happened to the module ``name`` of ``model`` and to its hooks.

    ``name`` is a name from ``model.named_modules()`` (an unknown one raises an error listing close matches);
    ``run`` is the step to watch, a function of no arguments (``run=lambda: model(x).sum().backward()``). Returns a
    :class:`HookExplanation`: how often the module was called and how often its ``forward`` code ran, how often
    each of its PyTorch hooks fired and with which module (itself, a replica, a copy), its other hooks (a replaced
    ``forward``, an adapter, an observer...: :func:`~hooklab.all_hooks`), what ran instead of it, the fast paths
    taken, who read its parameters, ``cause`` (a key of :data:`CAUSES`) and ``reasons``: why, in sentences.

    When ``run`` raises, the explanation of what happened up to the error is attached to that exception (a note
    shown under its traceback, and its ``hooklab_explanation`` attribute), which then propagates unchanged.
    A TorchScript model is refused (its modules are compiled; explain the model before scripting).
    """
    if not isinstance(model, nn.Module):
        raise TypeError("explain_hook needs the model (an nn.Module) whose module you hooked, got "
                        f"{type(model).__name__}" + not_a_module_hint(model, "explain_hook"))
    if not callable(run):
        raise TypeError("run is the step to watch, a function with no arguments, e.g. run=lambda: model(x); "
                        f"got {type(run).__name__}")
    if _is_script_module(model):
        raise TypeError("explain_hook cannot watch a TorchScript module (torch.jit.script / trace): its forward runs "
                        "compiled TorchScript, where module calls and hooks are invisible to Python. Explain the "
                        "nn.Module you scripted (model, name, run=lambda: scripted(x) shows what ran instead), or "
                        "run the unscripted model")
    target = get_module(model, name)
    watch = _Watch(model, name, target)
    report = HookExplanation(name, type(target).__name__, hooks=module_records(target, name or type(target).__name__),
                             parent=name.rpartition(".")[0] if name else None)
    previous, previous_threads = sys.getprofile(), threading.getprofile()
    report.profiled = previous is None and watch.call_code is not None
    if not report.profiled and _has_compiled():
        raise RuntimeError("explain_hook watches a step with a profile function, and another profiler is active "
                           "(sys.setprofile) or this torch lacks Module._call_impl; its fallback, a global module "
                           "hook, would make torch.compile recompile with the hooks added since, and change what it "
                           "watches. Stop the other profiler and call it again")

    def profile(frame: Any, event: str, arg: Any) -> None:
        watch.profile(frame, event, arg)

    handles = []
    error: Exception | None = None
    try:
        if report.profiled:
            threading.setprofile(profile)
            sys.setprofile(profile)
        else:
            handles.append(module_globals.register_module_forward_pre_hook(watch.pre_hook))
        try:
            run()
        except Exception as exc:  # explained below, then raised again with its own traceback
            error = exc
    finally:
        if report.profiled:
            # the step itself may have called sys.setprofile (None, or a profiler of its own): calls after that
            # went unseen, and "not called" would be a false cause
            report.profile_stopped = sys.getprofile() is not profile
            sys.setprofile(None)
            threading.setprofile(previous_threads)
        for handle in handles:
            handle.remove()
    report.calls, report.forward_runs = watch.calls[id(target)], watch.forward_runs
    report.parent_calls = watch.calls[id(watch.parent)] if watch.parent is not None else 0
    report.calls_without_grad = watch.without_grad
    report.fired = {label: dict(on) for label, on in watch.fired.items()}
    report.ran_instead, report.fast_paths = dict(watch.ran_instead), dict(watch.fast)
    report.parameter_reads = dict(watch.reads)
    if error is not None:
        report.error = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        report.raised_inside = causes.raised_inside(error, target, watch)
    report.cause, report.reasons = _reasons(report, target, watch)
    if error is not None:
        note = "hooklab.explain_hook saw, up to this error:\n" + str(report)
        if hasattr(error, "add_note"):
            error.add_note(note)
        else:  # Python 3.10: kept where 3.11 would print it from
            error.__notes__ = [*getattr(error, "__notes__", []), note]  # type: ignore[attr-defined]
        try:
            error.hooklab_explanation = report  # type: ignore[attr-defined]
        except AttributeError:
            pass
        raise error
    return report


# what ran instead of the module, in the order they are looked for, and the sentence for each
_INSTEAD = {
    COMPILED: "{name} was not called in Python: compiled code ran instead (a torch.compile wrapper around it ran {n} "
              "time(s)). Hooks present when this code was compiled run inside it, where Python cannot count them; "
              "hooks registered later do not run at all (torch.compile does not recompile for them), and neither "
              "do hooks the module had if this code was first compiled for another model of the same structure "
              "(it is reused without looking at hooks). To see them fire, call the eager model "
              "(model._orig_mod), or register first and compile again after torch._dynamo.reset(). explain_hook "
              "registered nothing, so it did not change what was compiled",
    DYNAMO_GRAPH: "{name} was not called in Python: a graph module that torch.compile made ran instead ({typename}, "
                  "{n} call(s); the compile backend returned it, so it runs as Python, but it is dynamo's capture of "
                  "the model, not torch.fx tracing of it). Hooks present when it was compiled were traced into "
                  "it; hooks registered later do not run. Call the eager model, or register first and compile "
                  "again after torch._dynamo.reset()",
    SCRIPTED: "{name} itself never ran: a TorchScript module ran instead ({typename}, {n} call(s); torch.jit.script "
              "or trace of a copy). It runs compiled code: hooks compiled in when it was scripted run inside it "
              "(uncounted), hooks registered on the original since then never do. Hook the module that runs "
              "before scripting, or run the nn.Module",
    FUSED: "{name} itself never ran: a fused module ran instead ({typename}, {n} call(s)); it {folded}. Register "
           "hooks on the fused model, after fusing",
    COPY_INSIDE: "{name} itself never ran: a copy of it inside the model ran instead ({copies}, {n} call(s); it "
                 "carries the hooks {name} had when it was copied, so they fired with the copy as `module`){why}",
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


def _storages(params: Any) -> set[Any]:
    keys: set[Any] = set()
    for p in params:
        keys.add(id(p))
        if p.device.type != "meta" and p.numel():
            keys.add(("storage", p.untyped_storage().data_ptr()))
    return keys


def _not_called(r: HookExplanation, target: nn.Module, w: _Watch) -> tuple[str, list[str]]:
    """The cause and the first reasons for a module that was never called (its forward code did not run either)."""
    name = repr(r.name)
    scripted = causes.scripted_around(name, target, w)
    if scripted is not None:
        return "scripted", [scripted[1]]
    instead: dict[str, tuple[str, int]] = {}
    for key, n in r.ran_instead.items():  # per relation: the type names and the calls, added up
        relation, typename = key.split(": ", 1)
        names, total = instead.get(relation, ("", 0))
        instead[relation] = (f"{names} + {typename}" if names else typename, total + n)
    found = next((relation for relation in _INSTEAD if relation in instead), None)
    compiled_above = [(n, m) for n, m in [(r.name, target), *w.ancestors]
                      if compiled(m) and (w.calls[id(m)] or w.compiled_calls[id(m)])]
    if found in (DYNAMO_GRAPH, OTHER_GRAPH, GRAPH) and compiled_above and DYNAMO_GRAPH in instead:
        found = None  # the graph module is torch.compile's output, called by the compiled model: said below
    if found is not None:
        typename, n = instead[found]
        folded = ("folded it into its weights (a fused module has no copy of a BatchNorm or ReLU it absorbed, so "
                  "its hooks are gone)" if isinstance(target, _FOLDED) else
                  "holds a copy of it, which keeps the hooks it had when the model was copied")
        copies = ", ".join(repr(w.tree[i]) for i in w.copies_inside if w.calls[i]) or typename
        why = ""
        if found == COPY_INSIDE and type(w.parent).__name__ == "ModulesToSaveWrapper":
            why = (f": PEFT's modules_to_save made it. Its ModulesToSaveWrapper {r.parent!r} runs the copy of the "
                   "active adapter and keeps original_module for when the adapters are disabled; hook the copy "
                   "(what trains) or the wrapper")
        elif found == COPY_INSIDE:
            why = ": hook the copy that runs"
        reasons = [_INSTEAD[found].format(name=name, typename=typename, n=n, folded=folded, copies=copies, why=why)]
        if found == OTHER_GRAPH and isinstance(target, nn.modules.batchnorm._BatchNorm):
            reasons.append(f"{name} is a BatchNorm: a fusing pass (torch.fx.experimental.optimization.fuse, "
                           "a quantizer's) may fold it into the convolution before it, leaving no module of it "
                           "to hook; if the graph module holds no BatchNorm, hook the convolution's output "
                           "instead, or observe it before fusing")
        return _INSTEAD_CAUSE[found], reasons
    if compiled_above:
        where, wrapper = compiled_above[-1]
        n = w.calls[id(wrapper)] + w.compiled_calls[id(wrapper)]
        text = _INSTEAD[COMPILED].format(name=name, n=n)
        if internals.unwrap_compiled(wrapper) is wrapper:
            text = text.replace("a torch.compile wrapper around it", f"{where or 'the model'!r}, compiled in place "
                                "(module.compile()),").replace("call the eager model (model._orig_mod), or ", "")
        return "compiled", [text]
    typename = type(target).__name__
    bases = {c.__name__ for c in type(target).__mro__}
    if bases & {"ObserverBase", "FakeQuantizeBase"} and w.parent is not None and not w.calls[id(w.parent)]:
        return "not reached", [
            f"{name} is a quantization observer: it runs from the forward hook of the module it observes "
            f"(_observer_forward_hook on {r.parent!r}), and {r.parent!r} was not called in this step. The "
            "calibration data never took that path, so it saw nothing (min_val is inf) and convert() will use "
            "default qparams (scale 1.0, zero point 0): calibrate with inputs that take this path"]
    if isinstance(target, nn.modules.batchnorm._BatchNorm):
        convs = [(t, c, n) for (t, c), n in w.outside_convs.items() if c == target.num_features]
        if convs:
            t, c, n = convs[0]
            return "fused", [
                f"{name} itself never ran, and a convolution outside the model did ({t}, {n} call(s), {c} output "
                f"channels, as many as this BatchNorm's features): a Conv+BN fusion "
                "(torch.nn.utils.fusion.fuse_conv_bn_eval, torch.ao.quantization.fuse_modules, torch.fx's fuse, a "
                "framework's inference optimizer) folded this BatchNorm into that convolution's weights, and "
                "nothing of it is left to hook: hook the convolution's output (it equals this BatchNorm's), or "
                "observe before fusing"]
    if isinstance(target, (nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict)) or \
            type(target).forward is nn.Module.forward:
        return "container", [f"{name} is a container ({typename}): it is never called itself; hook its children"]
    ran_inside = [w.tree[id(m)] for m in target.modules() if m is not target and w.calls[id(m)] and id(m) in w.tree]
    if ran_inside:
        shown = ", ".join(repr(n) for n in ran_inside[:3]) + (", ..." if len(ran_inside) > 3 else "")
        return "bypassed", [
            f"{name} was not called, but its submodules were ({shown}): the code around it calls them directly "
            f"(e.g. self.model.decoder(...) instead of self.model(...)), passing {name}'s own forward and hooks: "
            "hook the submodules that run"]
    called = [(n, m) for n, m in w.ancestors if w.calls[id(m)] or w.compiled_calls[id(m)]]
    if r.fast_paths and any(isinstance(m, _FAST_PATH_OWNERS) for _n, m in called):
        cause, text = causes.fast_path(name, r, w)
        return cause, [text]
    if r.parameter_reads:
        readers = ", ".join(r.parameter_reads)
        return "parameters used directly", [
            f"{name} was not called, but its parameters were read by {readers}: that code computes with them "
            "directly (F.linear(x, self.out_proj.weight), a fused kernel, one module holding every expert, or a "
            f"method of {name} other than forward), so the forward and hooks of {name} never run: hook the "
            "module whose code reads them"]
    mine = _storages(target.parameters())
    if mine:
        ran = [m for i, m in w.modules_by_id.items() if w.calls[i] and i not in w.subtree]
        held = set().union(*(_storages(m.parameters(recurse=False)) for m in ran)) if ran else set()
        holders = [w.tree[id(m)] for m in ran if _storages(m.parameters(recurse=False)) & mine]
        if mine <= held:
            return "tied", [
                f"{name} was not called, and its parameters are tied to {', '.join(map(repr, holders[:3]))}, which "
                f"ran: that module computes with the shared weights, so hook it instead of {name}"]
    if not called:
        return "model not called", [
            f"{name} did not run in this step: the step did not call the model (or called another one), or the "
            "module was replaced in the model after your hooks were registered (model.x = nn.Linear(...) leaves "
            "the hooks on the old module)"]
    where, ancestor = called[0]
    if not r.profiled:
        return "not observed", [
            f"{name} was not called although {where or 'the model'!r} ran: either its parent computes with its "
            "parameters directly, or this input's path does not go through it. Which one was not observed: another "
            "profiler was active (sys.setprofile), so explain_hook watched module calls only; stop it and ask again"]
    gap = r.name[len(where) + 1:].split(".")[0] if where else r.name.split(".")[0]
    gap_name = f"{where}.{gap}" if where else gap
    branch = causes.mode_branch(name, gap, where, ancestor)
    if branch is not None:
        return "not reached", [branch]
    text = (f"{name} was not reached: {where or 'the model'!r} ran {w.calls[id(ancestor)]} time(s) but never "
            f"called {gap_name!r}" + (f" (so nothing inside it ran, {name} included)" if gap_name != r.name else "")
            + ", and no code read its parameters: this input's path does not go through it (a head used only "
            "with labels or by generate(), a branch for another input, such as a vision tower under a text-only "
            "input, a module the configuration leaves unused)")
    if not target.training:
        text += "; the model is in eval mode, and modules used only in training (model.train()) are skipped too"
    reasons = [text]
    if type(w.parent).__name__ == "ModulesToSaveWrapper":
        reasons.insert(0, f"{name} is PEFT's original_module of the ModulesToSaveWrapper {r.parent!r}: the wrapper "
                       "runs its copy modules_to_save[<active adapter>] instead, and original_module only with the "
                       "adapters disabled; hooks registered after get_peft_model belong on the copy")
    return "not reached", reasons


def _reasons(r: HookExplanation, target: nn.Module, w: _Watch) -> tuple[str, list[str]]:
    reasons: list[str] = []
    name = repr(r.name)
    cause = "ran"
    kinds = {k.kind for k in r.hooks}
    fired_total = {label: sum(on.values()) for label, on in r.fired.items()}
    if r.error is not None:
        reasons.append(f"the step raised {r.error}: what follows is what ran before that")
    if r.profile_stopped:
        stopped = ("the step stopped explain_hook's profile function (it called sys.setprofile itself: None, or a "
                   "profiler of its own), so what ran after that was not seen")
        if r.calls == 0:  # whether it was called later cannot be told: no cause from what was not seen
            return "profiler stopped", [*reasons, f"{stopped}: whether {name} was called is not known. Take the "
                                        "sys.setprofile call out of the step (or run that profiler after it) and ask "
                                        "again"]
        reasons.append(f"{stopped}: the counts are those of the step up to that point")
    if r.raised_inside:
        reasons.append(causes.always_call(name, target, w, fired_total))
    if r.calls == 0 and r.profiled and r.forward_runs:
        cause = "forward called directly"
    elif r.calls == 0:
        cause, first = _not_called(r, target, w)
        reasons.extend(first)
    elif any(k.startswith(REPLICA) for k in r.ran_instead):
        n = sum(v for k, v in r.ran_instead.items() if k.startswith(REPLICA))
        reasons.append(f"{n} replica(s) of {name} ran too (DataParallel): they share its hook dicts, so its hooks "
                       "fire once per replica, with the replica as `module`")
    elif (scripted := causes.scripted_around(name, target, w)) is not None:
        reasons.append(scripted[1])
    elif not r.hooks and (swapped := causes.replaced(name, target, w)) is not None:
        reasons.append(swapped)
    if r.profiled and r.forward_runs > r.calls:
        reasons.append(f"{name}.forward ran {r.forward_runs - r.calls} time(s) without a module call: calling "
                       "module.forward(x) directly skips __call__ and every module hook; call module(x)")
    if r.calls > 1 and w.checkpoint_recomputed:
        reasons.append(f"{name} was called {r.calls} times in this step, {w.checkpoint_recomputed} of them "
                       "torch.utils.checkpoint's recomputation in backward: its forward hooks fire on each call, "
                       "its backward hooks once per backward through the recomputed output")
    elif r.calls > 1:
        reasons.append(f"{name} was called {r.calls} times in this step (used twice, in a loop, or once per "
                       "generated token): each hook fires once per call")
    for label, on in r.fired.items():
        if len(on) > 1:
            places = ", ".join(f"{n} x on {rel}" for rel, n in on.items())
            why = (": fuse_modules gives the fused module the first module's forward pre-hooks and the last one's "
                   "forward hooks, while the copy inside keeps its own" if FUSED in on and COPY in on else "")
            reasons.append(f"{label} fired {sum(on.values())} times ({places}){why}")
        if on.get(SELF, 0) > r.calls - w.checkpoint_recomputed and r.calls and w.checkpoint_recomputed == 0 and not label.endswith(" hook)"):
            reasons.append(f"{label} fired {on[SELF]} times on {name} for {r.calls} call(s): it is registered more "
                           "than once (re-running a cell stacks hooks; use hooklab.named_scope)")
    backward = [label for label in r.fired if "backward" in label]
    if r.calls and backward and not any(fired_total[label] for label in backward):
        why = (causes.checkpoint_no_grad(r, w) if w.checkpoint_first else
               f"{r.calls_without_grad} of its {r.calls} call(s) ran without gradients (torch.no_grad / "
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
    if cause == "ran" and not [x for x in reasons if not x.startswith("the step raised")]:
        counts = ", ".join(f"{label} {fired_total[label]}" for label in r.fired) or "no hooks on it"
        reasons.append(f"{name} ran {r.calls} time(s) as a module and its hooks fired as expected ({counts})")
    return cause, reasons
