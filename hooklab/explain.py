"""Why did my hook not fire, or fire twice? Run the step and watch the hooked module, without changing it.

:func:`explain_hook` runs ``run()`` once and reports whether the module called ``name`` ran (as a module call, and
how often its ``forward`` code ran), how many times each of its hooks fired and with which module, and what ran
instead when it did not: a copy (outside the model, or inside it like PEFT's ``modules_to_save``), a replica, a fused,
compiled or TorchScript version, a graph module that inlined it, a fast path, a parent that computes with its
parameters directly, a parent that calls its submodules past it, a tied module that holds its weights, or nothing (this
input's path does not reach it). Hooks on its own parameters are counted too. :attr:`HookExplanation.cause` names
the cause in a word or two, and :attr:`HookExplanation.reasons` says it in sentences, the most specific first; the
sentences, cause by cause, live in :mod:`hooklab._explain_causes`.

It watches without registering anything: a profile function (``sys.setprofile``, also in threads started during the
step) sees each module call (``Module._call_impl``), which Python functions and fast-path ops ran, and which code read
the module's parameters; it also counts the step's backward passes (``backward()``, ``torch.autograd.grad``), the
module's calls made while tracing (``torch.fx``, ``torch.export``, ``torch.jit.trace``) or under a ``torch.func``
transform, and who ran its forward without a module call. Nothing is added to the model or to PyTorch's global hook
dicts, so nothing changes what the step computes or what ``torch.compile`` compiles (a global module hook would make
it recompile, with the hooks added since then traced in; a local hook would turn ``nn.TransformerEncoderLayer``'s fast
path off). When another profiler is active, it falls back to a global module pre-hook and says so (``profiled`` is
False), and refuses when the process has compiled code, which that hook would change. The profile function is
removed before :func:`explain_hook` returns. When the step raises, the explanation of what it saw up to the error is
attached to the step's own exception (a note under its traceback, and its ``hooklab_explanation`` attribute) and the
exception propagates unchanged.

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

import multiprocessing.process
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as module_globals

from . import (
    _explain_causes as causes,
    _explain_facts as facts,
    _explain_passes as passes,
    _torch_internals as internals,
)
from ._explain_causes import FAKE_TRACE, FUNC_GRAD, FUNC_JVP, FX_TRACE, JIT_TRACE, PRECOMPILED, TRACERS, VMAP
from ._text import format_table
from ._watch import (  # noqa: F401 - the relations, importable from here
    _HOOK_KINDS,
    COMPILED,
    COPY,
    DYNAMO_GRAPH,
    FUSED,
    GRAPH,
    OTHER_GRAPH,
    REPLICA,
    SCRIPTED,
    SELF,
    _code,
    _Watch,
)
from .lookup import get_module
from .systems import HookRecord, _is_script_module, module_records, not_a_module_hint

__all__ = ["CAUSES", "CODES", "HookExplanation", "explain_hook"]
CODES = facts.CODES  # what HookExplanation.codes can hold, and what each means


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
    "step raised": "the step raised before the module (or any module above it) was called",
    "not observed": "another profiler was active: whether other code computed with its parameters was not seen",
    "profiler stopped": "the step stopped explain_hook's profile function (sys.setprofile inside it): what ran after "
                        "that was not seen",
    "not seen": "the step ran the model in a thread pool whose threads were started before it, where explain_hook "
                "cannot watch",
    "other processes": "the step started other processes (DataLoader workers, multiprocessing, a subprocess) and did "
                       "not call the module in this one: it ran there, where explain_hook cannot watch",
}


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
    calls_in_eval: int = 0  # calls made while the module was in eval mode (module.training False)
    profiled: bool = True
    profile_stopped: bool = False  # the step replaced or cleared the profile function: what followed was not seen
    parameter_reads: dict[str, int] = field(default_factory=dict)
    cause: str = "ran"
    error: str | None = None
    raised_inside: bool = False  # the step's exception came out of a call of this module (forward or hooks)
    raised_in: str = ""  # where the step's exception was raised: "module.function" of its innermost frame
    traced: dict[str, int] = field(default_factory=dict)  # its calls made while tracing or under torch.func
    params_swapped: int = 0  # its calls made with other tensors in place of its parameters (functional_call)
    forward_callers: dict[str, int] = field(default_factory=dict)  # who ran its forward without a module call
    backward_passes: dict[str, int] = field(default_factory=dict)  # the step's backward() / autograd.grad calls
    step_calls: dict[str, int] = field(default_factory=dict)  # GradScaler.scale, torch.export.export in the step
    paths: list[str] = field(default_factory=list)  # every name the model reaches it by
    recompiled: int = 0  # code torch.compile compiled again in the step for the model (a new shape: a recompile)
    reasons: list[str] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)  # one key of CODES per fact it saw (machine-readable)

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
        counts += [(f"of them during {kind}", str(n)) for kind, n in self.traced.items()]
        if self.backward_passes:
            counts.append(("backward passes in the step", ", ".join(f"{k} {n}" for k, n in
                                                                     self.backward_passes.items())))
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


_TRANSFORMS = {"_flat_vmap": VMAP, "vmap_impl": VMAP, "grad_and_value_impl": FUNC_GRAD, "grad_impl": FUNC_GRAD,
               "_vjp_with_argnums": FUNC_GRAD, "jacrev": FUNC_GRAD, "_jvp_with_argnums": FUNC_JVP, "jacfwd": FUNC_JVP}


def _under(args: Any, frame: Any) -> str | None:
    """What a call of the module with these arguments was made under: tracing, a torch.func transform, or None."""
    for a in args:
        if isinstance(a, torch.fx.Proxy):
            return FX_TRACE
        if isinstance(a, torch.Tensor) and any(c.__name__ == "FakeTensor" for c in type(a).__mro__):
            return FAKE_TRACE
    if torch.jit.is_tracing():
        return JIT_TRACE
    for _depth in range(40):  # the innermost torch.func transform around the call, or torch.jit.trace's checks
        frame = frame.f_back
        if frame is None:
            break
        module = frame.f_globals.get("__name__", "")
        if module.startswith("torch._functorch") and frame.f_code.co_name in _TRANSFORMS:
            return _TRANSFORMS[frame.f_code.co_name]
        if module == "torch.jit._trace":
            return JIT_TRACE
    return None


class _Step:
    """What explain_hook watches beside :class:`~hooklab._watch._Watch`, in the same profile function: the step's
    backward passes, the calls of the module made while tracing or under a torch.func transform or with its
    parameters swapped out, who ran its forward without a module call, precompiled code that ran, and the calls that
    change what hooks see (a GradScaler scaling the loss, torch.export)."""

    def __init__(self, w: _Watch, target: nn.Module) -> None:
        self.w, self.target = w, target
        self.autograd = {_code(torch.autograd.backward): "backward()",
                         _code(torch.autograd.grad): "torch.autograd.grad"}
        self.noted = {_code(torch.amp.GradScaler.scale): "GradScaler.scale",  # what changes what hooks see
                      _code(torch.export.export): "torch.export.export",
                      _code(multiprocessing.process.BaseProcess.start): causes.PROCESS_STARTED,  # DataLoader workers
                      _code(subprocess.Popen.__init__): causes.SUBPROCESS_STARTED}
        generation = sys.modules.get("transformers.generation.utils")  # only when the step's code imported it
        assisted = getattr(getattr(generation, "GenerationMixin", None), "_assisted_decoding", None)
        if assisted is not None:
            self.noted[_code(assisted)] = causes.ASSISTED
        self.calls: Counter = Counter()
        self.depth = 0
        self.passes: Counter = Counter()
        self.traced: Counter = Counter()
        self.callers: Counter = Counter()
        self.swapped = 0
        own = getattr(target, "_parameters", None)
        self.params = dict(own) if isinstance(own, dict) else {}
        runnable = getattr(sys.modules.get("torch.compiler.precompile"), "PrecompiledRunnable", None)
        kinds = [runnable, *runnable.__subclasses__()] if isinstance(runnable, type) else []
        self.precompiled = {_code(k.__dict__["__call__"]) for k in kinds if "__call__" in k.__dict__}

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if code in self.autograd:  # only the outermost: a reentrant checkpoint calls backward inside backward
            if event == "call":
                if not self.depth:
                    kind = self.autograd[code]
                    asked = frame.f_locals.get("inputs")
                    inputs = kind == "backward()" and asked is not None
                    self.passes["backward(inputs=...)" if inputs else kind] += 1
                    if isinstance(asked, torch.Tensor):
                        asked = (asked,)
                    ids = {id(t) for t in asked} if isinstance(asked, (tuple, list)) else None
                    self.w.asked.append(("backward(inputs=...)" if inputs else kind, ids))
                self.depth += 1
            elif event == "return":
                self.depth = max(0, self.depth - 1)
        elif event != "call":
            return
        elif code in self.noted:
            self.calls[self.noted[code]] += 1
        elif code is self.w.call_code:
            if frame.f_locals.get("self") is self.target:
                under = _under(frame.f_locals.get("args", ()), frame)
                if under is not None:
                    self.traced[under] += 1
                own = self.target._parameters
                self.swapped += any(own.get(n) is not p for n, p in self.params.items())
        elif code is self.w.forward_code and code.co_argcount and frame.f_locals.get(code.co_varnames[0]) is \
                self.target and frame.f_back is not None and frame.f_back.f_code is not self.w.call_code:
            self.callers[frame.f_back.f_globals.get("__name__", "?")] += 1
        elif code in self.precompiled and not (frame.f_back and frame.f_back.f_globals.get("__name__", "")
                                                .startswith("torch._precompile")):  # not precompile's own calls
            self.w.ran_instead[f"{PRECOMPILED}: {type(frame.f_locals.get('self')).__name__}"] += 1


def _compiled_entries(model: nn.Module) -> int:
    """How many compiled versions torch.compile's cache holds for the model's code (its modules' forward and the
    module call): 0 when nothing was compiled (torch._dynamo not imported)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list
        codes = {_code(type(m).forward) for m in model.modules()} | {_code(nn.Module._call_impl),
                                                                        _code(nn.Module._wrapped_call_impl)}
        return sum(len(_debug_get_cache_entry_list(c)) for c in codes if c is not None)
    except Exception:  # noqa: BLE001 - a torch without this cache view: no recompile is claimed
        return 0


def _raised_in(error: BaseException) -> str:
    """Where the exception was raised (``module.function`` of its innermost Python frame) and, when that is not in
    PyTorch, the PyTorch function it went through first (torch.jit.script, symbolic_trace)."""
    frames, tb = [], error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    if not frames:
        return "?"
    names = [f"{f.f_globals.get('__name__', '?')}.{f.f_code.co_name}" for f in frames]
    entry = next((n for n in names if n.startswith("torch.")), names[-1])
    return names[-1] if entry == names[-1] or names[-1].startswith("torch.") else f"{names[-1]}, inside {entry}"


def _hooked(m: nn.Module) -> bool:
    """Whether the module or one of its own parameters carries a PyTorch hook."""
    return any(d for _a, kind, d in internals.module_hook_dicts(m) if kind in _HOOK_KINDS) or any(
        d for p in m.parameters(recurse=False) for _k, d in internals.tensor_hook_dicts(p))


def _resolve(model: nn.Module, name: str | nn.Module | None) -> str:
    """The name to watch: ``name`` itself, the name of a module passed instead (found by identity in
    ``model.named_modules()``), or ``""`` (the model itself) when only the model was given and it is what carries
    the hooks; refuses, saying what to pass, when that is ambiguous."""
    if isinstance(name, str):
        return name
    if isinstance(name, nn.Module):
        found = [n for n, m in model.named_modules(remove_duplicate=False) if m is name]
        if not found:
            raise ValueError(f"explain_hook: the {type(name).__name__} passed as the module is not inside the model "
                             f"({type(model).__name__}): pass the model that holds it (explain_hook(model, module, run=...)), "
                             "or the module alone (explain_hook(module, run=...))")
        return found[0]
    if name is not None:
        raise TypeError(f"explain_hook: the module to explain is a name from model.named_modules() or the module "
                        f"itself, got {type(name).__name__}")
    hooked = [n for n, m in model.named_modules() if n and _hooked(m)]
    if _hooked(model) or not hooked:
        return ""
    shown = ", ".join(repr(n) for n in hooked[:5]) + (", ..." if len(hooked) > 5 else "")
    raise ValueError(f"explain_hook({type(model).__name__}, run=...): this module carries no hook itself, and "
                     f"modules inside it do ({shown}); which one do you mean? Pass it, by name or as the module: "
                     f"explain_hook(model, {hooked[0]!r}, run=...) or explain_hook(model, model.get_submodule("
                     f"{hooked[0]!r}), run=...)")


def explain_hook(model: nn.Module, name: str | nn.Module | None = None, *, run: Callable[[], Any]) -> HookExplanation:
    """Run ``run()`` once and explain what happened to the module ``name`` of ``model`` and to its hooks.

    ``name`` is a name from ``model.named_modules()`` (an unknown one raises an error listing close matches), or
    the module itself (``explain_hook(model, model.fc, run=...)``: its name is found by identity); with the module
    alone (``explain_hook(model.fc, run=...)``) it is both the model and the module explained, and when the module
    passed alone carries no hook but modules inside it do, it refuses and names them;
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
    name = _resolve(model, name)
    target = get_module(model, name)
    watch = _Watch(model, name, target)
    step = _Step(watch, target)
    report = HookExplanation(name, type(target).__name__, hooks=module_records(target, name or type(target).__name__),
                             parent=name.rpartition(".")[0] if name else None)
    previous, previous_threads = sys.getprofile(), threading.getprofile()
    report.profiled = previous is None and watch.call_code is not None
    if not report.profiled and _has_compiled():
        raise RuntimeError("explain_hook watches a step with a profile function, and another profiler is active "
                           "(sys.setprofile) or this torch lacks Module._call_impl; its fallback, a global module "
                           "hook, would make torch.compile recompile with the hooks added since, and change what it "
                           "watches. Stop the other profiler and call it again")

    # a thread started during the step keeps the profile function it was given after the step (Python 3.11 cannot
    # take it from another thread): once the step is over, the function holds nothing and drops itself at its next call
    live: list[Any] = [watch, step]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if not live:
            sys.setprofile(None)
            return
        live[0].profile(frame, event, arg)
        live[1].profile(frame, event, arg)

    entries_before = _compiled_entries(model)
    grads_before = {label: (p, p.grad, p.grad._version if p.grad is not None else None)
                    for label, p in watch.param_of.items()}
    handles = []
    error: Exception | None = None
    try:
        if report.profiled:
            watch.profile_fn = profile
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
            watch.release_pools()
            live.clear()
        for handle in handles:
            handle.remove()
    if entries_before:  # compiled before the step, and compiled again in it
        report.recompiled = max(0, _compiled_entries(model) - entries_before)
    report.calls, report.forward_runs = watch.calls[id(target)], watch.forward_runs
    report.parent_calls = watch.calls[id(watch.parent)] if watch.parent is not None else 0
    report.calls_without_grad = watch.without_grad
    report.calls_in_eval = watch.in_eval
    report.fired = {label: dict(on) for label, on in watch.fired.items()}
    report.ran_instead, report.fast_paths = dict(watch.ran_instead), dict(watch.fast)
    report.parameter_reads = dict(watch.reads)
    report.traced, report.params_swapped = dict(step.traced), step.swapped
    report.forward_callers, report.backward_passes = dict(step.callers), dict(step.passes)
    report.step_calls = dict(step.calls)
    report.paths = [n for n, m in model.named_modules(remove_duplicate=False) if m is target]
    if error is not None:
        report.error = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        report.raised_inside = causes.raised_inside(error, target, watch)
        report.raised_in = _raised_in(error)
    raised = facts.hook_that_raised(error, watch) if error is not None else None
    report.cause, report.reasons = _reasons(report, target, watch, raised)
    grads = {label: (p, p.grad is not g or (g is not None and g._version != v), p.requires_grad)
             for label, (p, g, v) in grads_before.items()}
    _compose(report, target, watch, error, grads)
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


_MADE = (SCRIPTED, OTHER_GRAPH, GRAPH, DYNAMO_GRAPH)  # what tracing makes and runs instead of the module


def _compose(r: HookExplanation, target: nn.Module, w: _Watch, error: Exception | None, grads: dict) -> None:
    """The codes of what it saw (:mod:`hooklab._explain_facts`) and their sentences, added to the reasons; a
    sentence that the codes contradict goes (no "fired as expected" of a hook it did not see fire)."""
    r.codes, said = facts.facts(r, target, w, error, grads)
    if "copy_ran" in r.codes and r.cause == "model not called":
        r.cause = "copy"
        r.reasons = [x for x in r.reasons if "did not run in this step" not in x]
    if w.pool_tasks and not (w.pools and w.pools_watched) and r.calls == 0 and r.cause == "model not called":  # it ran where the profile cannot see
        r.cause = "not seen"
        r.reasons = [x for x in r.reasons if "did not run in this step" not in x]
    if "fired" not in r.codes:
        r.reasons = [x for x in r.reasons if "fired as expected" not in x]
        if any(c in r.codes for c in ("dict_output", "no_grad", "frozen", "parameter_replaced", "not_accumulated",
                                      "outside_backward_inputs", "vmap")):
            r.reasons = [x for x in r.reasons if "its output was not part of the loss" not in x and
                         "explain_hook saw nothing that explains" not in x]
    if "hook_raised" in r.codes:
        r.reasons = [x for x in r.reasons if "not reached" not in x]
    r.reasons += [x for x in said if x not in r.reasons]
    if "fired" in r.codes and not any("fired as expected" in x for x in r.reasons):
        counts = ", ".join(f"{label} {on.get(SELF, 0)}" for label, on in r.fired.items())
        r.reasons.append(f"its hooks fired on {r.name!r} itself ({counts})")
    r.reasons = facts.settle(r.reasons)  # no two sentences of one answer say opposite things
    if r.name == "":  # the module passed alone: say which it is
        r.reasons = [x.replace("''", f"the {type(target).__name__} passed") for x in r.reasons]
    if not r.reasons:
        counts = ", ".join(f"{label} {sum(on.values())}" for label, on in r.fired.items()) or "no hooks on it"
        r.reasons.append(f"{r.name!r} ran {r.calls} time(s) as a module ({counts}); explain_hook saw nothing that "
                         "explains the hooks that did not fire: check that they are on this module "
                         "(hooklab.all_hooks) and what their code does")


def _reasons(r: HookExplanation, target: nn.Module, w: _Watch, raised: str | None = None) -> tuple[str, list[str]]:
    reasons: list[str] = []
    name = repr(r.name)
    cause = "ran"
    kinds = {k.kind for k in r.hooks}
    fired_total = {label: sum(on.values()) for label, on in r.fired.items()}
    made = next((k for rel in _MADE for k in r.ran_instead if k.startswith(rel + ":")), None)
    relation, _, typename = (made or "").partition(": ")
    ran = f"{typename} ran instead, {r.ran_instead[made]} time(s): {relation}" if made else None
    tracing = passes.tracing(r)
    by_tracer = r.profiled and r.forward_runs > r.calls and bool(r.forward_callers) and all(
        c.startswith(TRACERS) for c in r.forward_callers)
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
        reasons.append(causes.always_call(name, target, w, fired_total, raised))
    if r.calls == 0 and r.profiled and r.forward_runs and not by_tracer:
        cause = "forward called directly"
    elif r.calls == 0:
        cause, first = causes.not_called(r, target, w)
        reasons.extend(first)
    elif any(k.startswith(REPLICA) for k in r.ran_instead):
        n = sum(v for k, v in r.ran_instead.items() if k.startswith(REPLICA))
        reasons.append(f"{n} replica(s) of {name} ran too (DataParallel): they share its hook dicts, so its hooks "
                       "fire once per replica, with the replica as `module`")
    elif (scripted := causes.scripted_around(name, target, w)) is not None:
        reasons.append(scripted[1])
    elif not r.hooks and (swapped := causes.replaced(name, target, w)) is not None:
        reasons.append(swapped)
    elif made is not None and tracing == r.calls:
        cause = causes.INSTEAD_CAUSE[relation]
    elif any(k.startswith(PRECOMPILED) for k in r.ran_instead):
        cause = "compiled"
        n = sum(v for k, v in r.ran_instead.items() if k.startswith(PRECOMPILED))
        reasons.append(f"{name} ran {r.calls} time(s) as a module in this step (eagerly, or while its code was "
                       f"captured), and {n} call(s) went through a precompiled artifact instead (torch.compiler."
                       "precompile.load), which runs the captured code and calls no hook of it: what the hooks "
                       "returned at capture is baked in")
    if r.traced and r.calls:
        reasons.append(passes.traced(name, r, ran))
    if by_tracer:
        reasons.append(passes.tracer_forward(name, r))
    elif r.profiled and r.forward_runs > r.calls:
        reasons.append(f"{name}.forward ran {r.forward_runs - r.calls} time(s) without a module call: calling "
                       "module.forward(x) directly skips __call__ and every module hook; call module(x)")
    parameter = [label for label in r.fired if label.endswith(" hook)")]  # hooks on its parameters
    if r.calls > 1 and w.checkpoint_recomputed:
        reasons.append(f"{name} was called {r.calls} times in this step, {w.checkpoint_recomputed} of them "
                       "torch.utils.checkpoint's recomputation in backward: its forward hooks fire on each call, "
                       "its backward hooks once per backward through the recomputed output")
    elif r.calls - tracing > 1:
        on_parameters = ("; hooks on its parameters fire once per backward pass instead, with the gradient summed "
                         "over the calls that pass goes through" if parameter else "")
        reasons.append(f"{name} was called {r.calls - tracing} times in this step ({passes.what_calls(r, tracing)}): "
                       f"each hook fires once per call{on_parameters}")
    several = sum(r.backward_passes.values()) > max(1, r.calls - tracing)  # more passes than calls: a graph twice
    for label, on in r.fired.items():
        if len(on) > 1:
            places = ", ".join(f"{n} x on {rel}" for rel, n in on.items())
            why = (": fuse_modules gives the fused module the first module's forward pre-hooks and the last one's "
                   "forward hooks, while the copy inside keeps its own" if FUSED in on and COPY in on else "")
            reasons.append(f"{label} fired {sum(on.values())} times ({places}){why}")
        per_pass = "backward" in label and several  # several backward passes: a backward hook fires in each
        if r.calls and on.get(SELF, 0) > r.calls and not w.checkpoint_recomputed and label not in parameter and \
                not per_pass:
            reasons.append(f"{label} fired {on[SELF]} times on {name} for {r.calls} call(s): it is registered more "
                           "than once (re-running a cell stacks hooks; use hooklab.named_scope)")
    backward = [label for label in r.fired if "backward" in label or label in parameter]
    if several and any(fired_total[label] for label in backward):
        reasons.append(passes.more_passes(r, {label: fired_total[label] for label in backward}))
    if r.step_calls.get("GradScaler.scale") and any(fired_total[label] for label in backward):
        reasons.append(passes.scaled(r))
    silent = [label for label in backward if not fired_total[label]]
    if r.calls and silent:
        reasons.append(passes.backward_silent(r, w, silent))
    if (sharded := passes.dtensors(name, target, w.model)) is not None:
        reasons.append(sharded)
    if (twice := passes.duplicates(name, target, r.paths)) is not None:
        reasons.append(twice)
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
        if all(fired_total.values()):
            reasons.append(f"{name} ran {r.calls} time(s) as a module and its hooks fired as expected ({counts})")
        else:
            reasons.append(f"{name} ran {r.calls} time(s) as a module ({counts}), and explain_hook saw nothing that "
                           "explains the hooks that did not fire: check that they are on this module "
                           "(hooklab.all_hooks) and what their code does")
    return cause, reasons
