"""What :func:`~hooklab.explain.explain_hook` says, cause by cause: what ran instead of a module never called
(:func:`not_called`), and what it finds past the counts (a TorchScript module around it, a branch for the other mode,
a replaced module, copies of the hooks, a raising forward or step, ``torch.utils.checkpoint``, a fast path). How many
times it ran, and under what (tracing, ``torch.func`` transforms, the step's backward passes, two paths to one
module), is :mod:`hooklab._explain_passes`. Each function returns sentences (or nothing, when what it looks for is not
there); none guesses a cause it did not see, and where it cannot tell, it says what it saw and what to check.

>>> INSTEAD_CAUSE[COPY], INSTEAD_CAUSE[COMPILED]
('copy', 'compiled')
"""
from __future__ import annotations

import ast
import gc
import inspect
import textwrap
from typing import Any

import torch
from torch import nn

from . import _torch_internals as internals
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
    _Watch,
)
from .systems import _is_script_module, compiled

PRECOMPILED = "a precompiled artifact (torch.compiler.precompile)"
# processes the step started (HookExplanation.step_calls): a multiprocessing Process (DataLoader workers), a subprocess
PROCESS_STARTED, SUBPROCESS_STARTED = "a process started (multiprocessing)", "a subprocess started"
# transformers' assisted generation (generate(..., assistant_model=...)) in the step (HookExplanation.step_calls)
ASSISTED = "assisted generation (transformers)"
# what a call of the module was made under (HookExplanation.traced): tracing, or a torch.func transform
FX_TRACE = "torch.fx's symbolic tracing (its inputs were Proxies)"
FAKE_TRACE = "tracing with FakeTensors (torch.export, or torch.compile capturing it)"
JIT_TRACE = "torch.jit.trace (with check_trace=True, the default, it runs the model twice more to check)"
TRACING = (FX_TRACE, FAKE_TRACE, JIT_TRACE)
VMAP, FUNC_GRAD, FUNC_JVP = "torch.func.vmap", "torch.func.grad / vjp / jacrev", "torch.func.jvp / jacfwd"
# modules whose code runs a module's forward directly while tracing it
TRACERS = ("torch.fx", "torch.jit", "torch._dynamo", "torch.export", "torch._export", "torch._functorch")
INSTEAD_CAUSE = {COMPILED: "compiled", SCRIPTED: "scripted", FUSED: "fused", COPY_INSIDE: "copy", COPY: "copy",
                 REPLICA: "replica", GRAPH: "graph", LOOKALIKE: "another model", OTHER_GRAPH: "graph",
                 DYNAMO_GRAPH: "compiled", PRECOMPILED: "compiled"}


# what ran instead of the module, in the order they are looked for, and the sentence for each
INSTEAD = {
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
    PRECOMPILED: "{name} was not called in Python: a precompiled artifact ran instead ({typename}, {n} call(s); "
                 "torch.compiler.precompile.load): it runs the code captured from the model and calls no hook of it "
                 "(what the hooks returned at capture is baked in). Hooks fire where the model runs eagerly",
    SCRIPTED: "{name} itself never ran: a TorchScript module ran instead ({typename}, {n} call(s); torch.jit.script "
              "or trace of a copy). It runs compiled code: hooks compiled in when it was scripted run inside it "
              "(uncounted), hooks registered on the original since then never do. Hook the module that runs "
              "before scripting, or run the nn.Module",
    FUSED: "{name} itself never ran: a fused module ran instead ({typename}, {n} call(s)); it {folded}. Register "
           "hooks on the fused model, after fusing (torch.ao.quantization.fuse_modules returns a fused copy of the "
           "model unless inplace=True)",
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
               "for prediction) or another model: check which model the step calls, and hook the one that runs",
    OTHER_GRAPH: "{name} itself never ran: a graph module ran instead ({typename}, {n} call(s); made by torch.fx, "
                 "torch.export or a quantizer such as PT2E from a copy of the model). Its graph calls only the "
                 "modules it kept as call_module nodes, and hooks of the original modules are not in it: hook the "
                 "graph module's own modules, or trace after registering",
}


COPIED = ("{name} itself never ran: a copy of it made after your hooks were registered ran instead ({typename}, {n} "
          "call(s)). deepcopy and torch.save / torch.load copy the module's hook dicts, and a hook that is an object "
          "(a class with __call__, a bound method) is copied with them: copies of your hooks run on the copy (with it "
          "as `module`), and explain_hook counts the hooks you registered, so the table shows 0 for them. Hook the "
          "model that runs, or register on it after copying")
EXPORTED = ("{name} was not called in Python: a graph module that torch.export made with dynamo (strict=True) ran "
            "instead ({typename}, {n} call(s)). Dynamo traced the hooks present at export into the graph, so what "
            "they compute is in it, but their Python side effects (printing, appending to a list) never happen, and "
            "the graph module calls no hook; hooks registered later are not in it. Hook the graph module's own "
            "modules, or run the eager model")
PARAMETER_HOOKS_LOST = ("hooks on its parameters do not survive copying (deepcopy builds new Parameters from the data, "
                        "and torch.save / torch.load keep no tensor hooks), so a copy runs without them whenever it "
                        "was made: register them on the parameters of the module that runs")


def _storages(params: Any) -> set[Any]:
    keys: set[Any] = set()
    for p in params:
        keys.add(id(p))
        if p.device.type != "meta" and p.numel():
            keys.add(("storage", p.untyped_storage().data_ptr()))
    return keys


def not_called(r: Any, target: nn.Module, w: _Watch) -> tuple[str, list[str]]:
    """The cause and the first reasons for a module that was never called (``r``: the HookExplanation so far)."""
    name = repr(r.name)
    scripted = scripted_around(name, target, w)
    if scripted is not None:
        return "scripted", [scripted[1]]
    instead: dict[str, tuple[str, int]] = {}
    for key, n in r.ran_instead.items():  # per relation: the type names and the calls, added up
        relation, typename = key.split(": ", 1)
        names, total = instead.get(relation, ("", 0))
        instead[relation] = (f"{names} + {typename}" if names else typename, total + n)
    found = next((relation for relation in INSTEAD if relation in instead), None)
    compiled_above = [(n, m) for n, m in [(r.name, target), *w.ancestors]
                      if compiled(m) and (w.calls[id(m)] or w.compiled_calls[id(m)])]
    if found in (DYNAMO_GRAPH, OTHER_GRAPH, GRAPH) and compiled_above and DYNAMO_GRAPH in instead:
        found = None  # the graph module is torch.compile's output, called by the compiled model: said below
    copied = copies_with_hooks(target, w) if found == LOOKALIKE else []
    if copied:
        return "copy", [COPIED.format(name=name, typename=type(target).__name__, n=sum(w.calls[id(m)] for m in copied))]
    if found == DYNAMO_GRAPH and r.step_calls.get("torch.export.export"):
        return "graph", [EXPORTED.format(name=name, typename=instead[found][0], n=instead[found][1])]
    if found is not None:
        typename, n = instead[found]
        folded = ("folded it into its weights (a fused module has no copy of a BatchNorm or ReLU it absorbed, so "
                  "its hooks are gone)" if isinstance(target, _FOLDED) else
                  "holds a copy of it, which keeps the module hooks it had when the model was copied (copying a "
                  "Parameter keeps none of its tensor hooks)")
        copies = ", ".join(repr(w.tree[i]) for i in w.copies_inside if w.calls[i]) or typename
        why = ""
        if found == COPY_INSIDE and type(w.parent).__name__ == "ModulesToSaveWrapper":
            why = (f": PEFT's modules_to_save made it. Its ModulesToSaveWrapper {r.parent!r} runs the copy of the "
                   "active adapter and keeps original_module for when the adapters are disabled; hook the copy "
                   "(what trains) or the wrapper")
        elif found == COPY_INSIDE:
            why = ": hook the copy that runs"
        reasons = [INSTEAD[found].format(name=name, typename=typename, n=n, folded=folded, copies=copies, why=why)]
        if found == OTHER_GRAPH and isinstance(target, nn.modules.batchnorm._BatchNorm):
            reasons.append(f"{name} is a BatchNorm: a fusing pass (torch.fx.experimental.optimization.fuse, "
                           "a quantizer's) may fold it into the convolution before it, leaving no module of it "
                           "to hook; if the graph module holds no BatchNorm, hook the convolution's output "
                           "instead, or observe it before fusing")
        if found == LOOKALIKE and _parameter_hooks(target):
            reasons.append(PARAMETER_HOOKS_LOST)
        return INSTEAD_CAUSE[found], reasons
    if compiled_above:
        where, wrapper = compiled_above[-1]
        n = w.calls[id(wrapper)] + w.compiled_calls[id(wrapper)]
        text = INSTEAD[COMPILED].format(name=name, n=n)
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
    fused = fused_into(target, w)
    if fused is not None:
        return "fused", [fused]
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
    started = r.step_calls.get(PROCESS_STARTED, 0) + r.step_calls.get(SUBPROCESS_STARTED, 0)
    if started and not called:  # it ran in the processes the step started, or nowhere: not in this one
        return "other processes", [processes(name, r, started)]
    if r.error is not None:  # the step stopped before reaching it: what it would have done is not known
        return "step raised", [raised_before(name, r)]
    if r.fast_paths and any(isinstance(m, _FAST_PATH_OWNERS) for _n, m in called):
        cause, text = fast_path(name, r, w)
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
    elsewhere = [w.tree[id(m)] for m in w.model.modules() if w.calls[id(m)] and id(m) in w.tree]
    if not called and elsewhere:  # the model's modules ran, not through its forward: another entry point
        shown = ", ".join(repr(n) for n in elsewhere[:3]) + (", ..." if len(elsewhere) > 3 else "")
        return "not reached", [
            f"{name} was not reached: the model itself was not called, but its modules {shown} were, so the step "
            "used another entry point of the model (a method other than forward, such as timm's forward_features "
            f"/ forward_head or a generate loop's own calls), whose code does not call {name}: hook a module that "
            "entry point runs, or call the model itself" + _described(name, w)]
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
    branch = mode_branch(name, gap, where, ancestor)
    if branch is not None:
        return "not reached", [branch]
    text = (f"{name} was not reached: {where or 'the model'!r} ran {w.calls[id(ancestor)]} time(s) but never "
            f"called {gap_name!r}" + (f" (so nothing inside it ran, {name} included)" if gap_name != r.name else "")
            + ", and no code computed with its parameters: this input's path does not go through it (a head used only "
            "with labels or by generate(), a branch for another input, such as a vision tower under a text-only "
            "input, a module the configuration leaves unused)")
    if not target.training:
        text += "; the model is in eval mode, and modules used only in training (model.train()) are skipped too"
    reasons = [text + _described(name, w)]
    if type(w.parent).__name__ == "ModulesToSaveWrapper":
        reasons.insert(0, f"{name} is PEFT's original_module of the ModulesToSaveWrapper {r.parent!r}: the wrapper "
                       "runs its copy modules_to_save[<active adapter>] instead, and original_module only with the "
                       "adapters disabled; hooks registered after get_peft_model belong on the copy")
    return "not reached", reasons


def fused_into(target: nn.Module, w: _Watch) -> str | None:
    """The sentence for a Linear that was not called because a sibling Linear that ran holds its weight among its
    rows (diffusers' fuse_qkv_projections: to_q, to_k, to_v concatenated into to_qkv), or None."""
    if not isinstance(target, nn.Linear) or w.parent is None:
        return None
    rows = target.out_features
    mine = target.weight.detach()
    for child_name, child in w.parent.named_children():
        if child is target or not isinstance(child, nn.Linear) or not w.calls[id(child)] or \
                child.in_features != target.in_features or child.out_features <= rows or mine.device.type == "meta":
            continue
        theirs = child.weight.detach()
        if theirs.dtype != mine.dtype or theirs.device != mine.device:
            continue
        at = next((i for i in range(0, child.out_features - rows + 1, rows)
                   if torch.equal(theirs[i:i + rows], mine)), None)
        if at is None:
            continue
        fused = w.tree.get(id(child), child_name)
        others = [n for n, m in w.parent.named_children() if m is not target and m is not child and
                  isinstance(m, nn.Linear) and not w.calls[id(m)] and m.in_features == target.in_features and
                  any(torch.equal(theirs[i:i + m.out_features], m.weight.detach())
                      for i in range(0, child.out_features - m.out_features + 1, m.out_features))]
        together = f" (with {', '.join(others)})" if others else ""
        return (f"{w.tree.get(id(target), '')!r} was not called: it was fused{together} into {fused!r}, one Linear "
                f"({child.in_features} -> {child.out_features}) whose rows {at}:{at + rows} are its weight, and "
                f"{fused!r} ran instead ({w.calls[id(child)]} call(s)). diffusers' fuse_qkv_projections() (and "
                "fuse_projections()) concatenates to_q, to_k and to_v into to_qkv and switches to a fused attention "
                "processor that calls only it, so hooks on the separate projection and on its weight never fire. "
                f"Hook {fused!r} (its output[..., {at}:{at + rows}] is this projection's output), call "
                "unfuse_qkv_projections() to run the separate projections again, or register the hooks after "
                "fusing, on the fused module")
    return _marked_fused(target, w)


def _marked_fused(target: nn.Linear, w: _Watch) -> str | None:
    """The sentence for a Linear of an attention the library marks as fused (diffusers sets ``fused_projections``)
    whose weight is no longer among a fused sibling's rows (the fused module changed since fusing, e.g. trained), or
    None. Asked only where no rows equal the weight: the library's mark, then the shapes, say what ran instead."""
    if w.parent is None or getattr(w.parent, "fused_projections", None) is not True:
        return None
    rows = target.out_features
    fused = next(((n, c) for n, c in w.parent.named_children()
                  if c is not target and isinstance(c, nn.Linear) and w.calls[id(c)]
                  and c.in_features == target.in_features and c.out_features > rows and c.out_features % rows == 0),
                 None)
    if fused is None:
        return None
    name, child = w.tree.get(id(fused[1]), fused[0]), fused[1]
    return (f"{w.tree.get(id(target), '')!r} was not called: its attention is marked fused (fused_projections=True, "
            f"diffusers' fuse_qkv_projections() / fuse_projections()) and {name!r} ran instead, one Linear "
            f"({child.in_features} -> {child.out_features}) that holds it and its siblings ({w.calls[id(child)]} "
            "call(s)). Its weight is no longer among the fused rows: the fused module was changed after fusing (for "
            "example trained), so the separate projection is stale too. Hook the fused module (its output's columns "
            "are the projections' outputs, in the order they were fused), or unfuse_qkv_projections() before "
            "changing the weights and register the hooks then")


def _described(name: str, w: _Watch) -> str:
    """What to add when its parameters were read only to describe the model (repr), or nothing."""
    if not w.described:
        return ""
    return (f". Its parameters were read {w.described} time(s) while describing the model (repr() / print(model), "
            "or a library's report built on it, such as PEFT's get_model_status): that reads attributes and "
            f"computes nothing, so it is not a call of {name}")


def processes(name: str, r: Any, started: int) -> str:
    """The sentence for a module not called in the step's process while the step started other processes."""
    return (f"{name} was not called in this process, and the step started {started} other process(es) (a "
            "DataLoader with num_workers > 0, multiprocessing, a subprocess): the model ran there, in the copies "
            "those processes hold (fork copies the model with its hooks), so its hooks fired there, and what they "
            "recorded (a list they append to, a counter, a print) stays in those processes; explain_hook watches "
            "this process only. Send what the hooks record back with the batch (or through a multiprocessing "
            "Queue), or run with num_workers=0 to watch it here")


def scripted_around(name: str, target: nn.Module, w: _Watch) -> tuple[str, str] | None:
    """``(where, sentence)`` when ``target`` is a TorchScript module or lives inside one."""
    inside = [(n, m) for n, m in w.ancestors if _is_script_module(m)]
    if inside:
        where, _m = inside[-1]  # the outermost scripted module
        return where, (
            f"{name} lives inside the TorchScript module {where!r} (torch.jit.script / trace inside an eager model): "
            f"{where!r} runs compiled TorchScript, which calls {name} where Python cannot see it, and hooks "
            f"registered on {name} after scripting never run (the compiled code calls no Python hook). Hook "
            f"{where!r}'s eager parent or the module before scripting, or script after hooking")
    if _is_script_module(target):
        return name, (
            f"{name} is a TorchScript module inside an eager model: it was called, but it carries no Python hooks "
            "(register_forward_hook is not supported on ScriptModules), and what runs inside it is compiled. Hook "
            "its eager parent (its output is this module's), or the module before scripting")
    return None


def _mode(test: ast.AST) -> bool | None:
    """The mode a test requires: True for ``self.training``, False for ``not self.training``, None otherwise."""
    if isinstance(test, ast.Attribute) and test.attr == "training":
        return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _mode(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return next((m for m in map(_mode, test.values) if m is not None), None)
    return None


def _uses(nodes: Any, me: str, attr: str) -> bool:
    for node in nodes if isinstance(nodes, list) else [nodes]:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and sub.attr == attr and isinstance(sub.value, ast.Name) and \
                    sub.value.id == me:
                return True
    return False


def mode_branch(name: str, gap: str, where: str, ancestor: nn.Module) -> str | None:
    """The sentence for a module called only under ``if self.training`` (or ``if not self.training``) in the
    forward of ``ancestor`` when ``ancestor`` is in the other mode; None when the source says nothing of it."""
    try:
        source = textwrap.dedent(inspect.getsource(type(ancestor).forward))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    fn = tree.body[0] if tree.body and isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    if fn is None or not fn.args.args:
        return None
    me = fn.args.args[0].arg
    for node in ast.walk(fn):
        if not isinstance(node, (ast.If, ast.IfExp)):
            continue
        required = _mode(node.test)
        if required is None:
            continue
        simple = not isinstance(node.test, ast.BoolOp)  # `a and self.training` false says nothing of the mode
        if _uses(node.body, me, gap):
            needs = required
        elif simple and _uses(node.orelse, me, gap):
            needs = not required
        else:
            continue
        if needs == ancestor.training:
            return None  # it is in the mode the branch asks for: something else kept it out
        line = ast.get_source_segment(source, node.test) or "self.training"
        mode, other = ("training", "eval") if needs else ("eval", "training")
        call = "model.train()" if needs else "model.eval()"
        return (f"{name} is called only in {mode} mode: {type(ancestor).__name__}.forward ({where or 'the model'!r}) "
                f"calls {gap!r} in a branch under `{line}`, and {where or 'the model'!r} is in {other} mode, so "
                f"this step took the other branch. Its hooks fire in {mode} mode ({call} before the step); in "
                f"{other} mode nothing of it runs")
    return None


def _has_hooks(m: nn.Module) -> bool:
    return any(d for _a, kind, d in internals.module_hook_dicts(m) if kind in _HOOK_KINDS)


def replaced(name: str, target: nn.Module, w: _Watch) -> str | None:
    """For a module that ran with no hooks on it: hooked modules that the model no longer holds, or hooked Parameters
    of its parameters' shapes that it no longer holds (the hook is on the old object after a swap, a fusion,
    ``load_state_dict(assign=True)`` or ``to_empty()``). Only what it saw, and what to check."""
    if _has_hooks(target):
        return None
    identity = isinstance(target, nn.Identity)
    shapes = {tuple(p.shape) for p in target.parameters(recurse=False)}
    held = {id(p) for p in w.model.parameters()}
    old, stale = [], []
    gc.collect()  # a hooked module that only a reference cycle keeps is garbage, not one the model lost
    objects = gc.get_objects()
    # a module another module outside the model holds belongs to another model (one the process keeps alive): a
    # module the model replaced is held by no module any more
    in_others = {id(c) for o in objects if issubclass(type(o), nn.Module) and id(o) not in w.tree
                 for c in o.__dict__.get("_modules", {}).values() if c is not None}
    for o in objects:
        if issubclass(type(o), nn.Module) and id(o) not in w.tree and not w.calls[id(o)] and (
                type(o) is type(target) or identity) and _has_hooks(o) and id(o) not in in_others:
            old.append(o)
        elif issubclass(type(o), nn.Parameter) and id(o) not in held and tuple(o.shape) in shapes and any(
                d for _k, d in internals.tensor_hook_dicts(o)):
            stale.append(o)
    if not old and not identity and not stale:
        return None
    text = f"{name} ran but has no hooks on it"
    if identity:
        text += (": it is an Identity, what fuse_modules (and pruning or a framework's swap) puts in place of a "
                 "module it folded away (a BatchNorm or ReLU fused into the convolution before it)")
    if old:
        kinds = sorted({type(m).__name__ for m in old})
        text += (f"; {len(old)} module(s) outside the model that did not run carry hooks ({', '.join(kinds)}): if "
                 "you registered your hook before the model's module was replaced (model.x = ..., fuse_modules, "
                 "fuse_conv_bn_eval, a framework's module swap), it is on that old object and never fires")
    if stale:
        text += (f"; {len(stale)} Parameter(s) outside the model, of its parameters' shapes, carry hooks: if you "
                 "registered a hook on its parameter before the module's parameters were replaced "
                 "(load_state_dict(assign=True), to_empty() from the meta device, module.weight = nn.Parameter(...)), "
                 "it is on that old Parameter and never fires")
    return text + (f". Register on the module the model holds now (model.get_submodule({name})) and its parameters, "
                   "or, for a fused module, hook the fused module whose output replaces this one's")


def raised_inside(error: BaseException, target: nn.Module, w: _Watch) -> bool:
    """Whether ``error`` was raised inside a call of ``target`` (its forward or one of its hooks)."""
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code is w.call_code and frame.f_locals.get("self") is target:
            return True
        tb = tb.tb_next
    return False


def always_call(name: str, target: nn.Module, w: _Watch, fired: dict[str, int], raised: str | None = None) -> str:
    """The sentence for a step that raised inside the module: which forward hooks still ran (always_call);
    ``raised``: the hook the exception came out of, when it was one."""
    always = getattr(target, "_forward_hooks_always_called", {})
    hooks = getattr(target, "_forward_hooks", {})
    kept = [w.hook_labels[id(fn)] for key, fn in hooks.items() if key in always and id(fn) in w.hook_labels]
    skipped = [w.hook_labels[id(fn)] for key, fn in hooks.items() if key not in always and id(fn) in w.hook_labels
               and w.hook_labels[id(fn)] != raised]
    where = f"in its hook {raised}" if raised else "its forward or one of its hooks"
    text = (f"the error was raised inside {name} ({where}), so its call did not return: "
            "forward hooks run after a raising forward only when registered with always_call=True")
    if kept:
        text += " (" + ", ".join(f"{label} fired {fired.get(label, 0)} time(s)" for label in kept) + ")"
    if skipped:
        text += "; the others did not run for that call (" + ", ".join(skipped) + ")"
    return text + ", and no backward hook of that call fires. Fix the error first; the counts are those up to it"


def checkpoint_no_grad(r: Any, w: _Watch) -> str:
    """Why the backward hooks did not fire for calls made in torch.utils.checkpoint's first pass."""
    text = (f"{w.checkpoint_first} of its {r.calls} call(s) were torch.utils.checkpoint's first pass "
            "(use_reentrant=True runs the function under no_grad and runs it again in backward, where the hooks "
            "fire)")
    if not w.checkpoint_recomputed and not w.checkpoint_inputs_need_grad:
        text += (", and backward never ran it again: no input of the checkpointed function requires grad, so its "
                 "output needs no gradient (PyTorch warns 'None of the inputs have requires_grad=True'), and its "
                 "parameters get none either. Make an input require grad (x.requires_grad_()), or use "
                 "use_reentrant=False, which also works when only the parameters do")
    elif not w.checkpoint_recomputed:
        text += ", and backward never ran it again in this step (no backward through the checkpoint's output)"
    return text


def fast_path(name: str, r: Any, w: _Watch) -> tuple[str, str]:
    """Cause and sentence for a module not called because its parent took a fast path, with advice that works."""
    path = ", ".join(r.fast_paths)
    attention = [(n, m) for n, m in w.ancestors if isinstance(m, nn.MultiheadAttention)]
    if attention:
        where, _m = attention[0]
        return "parameters used directly", (
            f"{name} was not called: {where!r} is an nn.MultiheadAttention, which never calls its out_proj as a "
            f"module: its fast path ({path}) and its slow path (F.multi_head_attention_forward) both compute with "
            f"its weight directly, so turning the fast path off would not help. Hook {where!r} (its output is "
            f"{name}'s output)")
    layer = next(((n, m) for n, m in w.ancestors if isinstance(m, nn.TransformerEncoderLayer)), None)
    off = ("a forward hook or forward pre-hook on any module of that layer (one on "
           f"{name} itself is enough), training mode, or gradients enabled while its parameters require grad turn "
           "it off") if layer is not None else "training mode or gradients enabled turn it off"
    return "fast path", (
        f"{name} was not called: its parent took a fast path ({path}) that computes it in one op without calling "
        f"it, so no hook of it runs (explain_hook registers nothing, so it does not change that; {off})")


def _parameter_hooks(target: nn.Module) -> bool:
    return any(d for p in target.parameters(recurse=False) for _kind, d in internals.tensor_hook_dicts(p))


def _hook_keys(m: nn.Module) -> set[int]:
    return {k for _a, kind, d in internals.module_hook_dicts(m) if kind in _HOOK_KINDS for k in d}


def copies_with_hooks(target: nn.Module, w: _Watch) -> list[nn.Module]:
    """Modules like ``target`` outside the model that ran and hold hooks under its hooks' handle ids: copies made
    after registering (deepcopy and pickling keep a hook dict's keys), whose hooks are copies of its hook objects."""
    keys = _hook_keys(target)
    if not keys:
        return []
    kind = type(target)
    return [m for m in gc.get_objects() if type(m) is kind and id(m) not in w.tree and w.calls[id(m)]
            and keys & _hook_keys(m)]


def raised_before(name: str, r: Any) -> str:
    """The sentence for a step that raised before the module (or any module above it) was called."""
    text = f"the step raised before {name} was called as a module (in {r.raised_in})"
    if r.forward_callers:
        text += f"; its forward ran {sum(r.forward_callers.values())} time(s) before that, from " + \
            ", ".join(r.forward_callers)
    if r.step_calls.get("torch.export.export") and "torch._dynamo" in r.raised_in:
        text += (": torch.export.export with strict=True traces the model with dynamo, which calls no module in "
                 "Python, and dynamo refused it (a module with backward hooks, or a forward that raised while traced)")
    if "torch.jit" in r.raised_in:
        text += (": torch.jit compiles the model before running it (torch.jit.script compiles the hooks of the "
                 "modules it scripts and refuses one it cannot compile, such as an unannotated function or a lambda; "
                 "torch.jit.trace refuses a module with backward hooks)")
    return text + ". None of its hooks had a call to fire on: fix the error first (the counts are those up to it)"
