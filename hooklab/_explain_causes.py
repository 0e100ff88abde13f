"""Causes that :func:`~hooklab.explain.explain_hook` finds by looking past the call counts: a module inside a
TorchScript module, a branch taken only in the other mode (train / eval), a hook left on the module that was
replaced, a forward that raised under ``always_call`` hooks, a step under ``torch.utils.checkpoint``, and what turns a
fast path off. Each function returns sentences (or nothing, when what it looks for is not there); none guesses a
cause it did not see.
"""
from __future__ import annotations

import ast
import gc
import inspect
import textwrap
from typing import Any

from torch import nn

from . import _torch_internals as internals
from ._watch import _HOOK_KINDS, _Watch
from .systems import _is_script_module


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
    """For a module that ran with no hooks on it: hooked modules that the model no longer holds (the hook is on
    the old object after a swap or a fusion). Only what it saw, and what to check."""
    if _has_hooks(target):
        return None
    identity = isinstance(target, nn.Identity)
    old = [m for m in gc.get_objects() if issubclass(type(m), nn.Module) and id(m) not in w.tree and not w.calls[id(m)]
           and (type(m) is type(target) or identity) and _has_hooks(m)]
    if not old and not identity:
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
    return text + (f". Register on the module the model holds now (model.get_submodule({name})), or, for a fused "
                   "module, hook the fused module whose output replaces this one's")


def raised_inside(error: BaseException, target: nn.Module, w: _Watch) -> bool:
    """Whether ``error`` was raised inside a call of ``target`` (its forward or one of its hooks)."""
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code is w.call_code and frame.f_locals.get("self") is target:
            return True
        tb = tb.tb_next
    return False


def always_call(name: str, target: nn.Module, w: _Watch, fired: dict[str, int]) -> str:
    """The sentence for a step that raised inside the module: which forward hooks still ran (always_call)."""
    always = getattr(target, "_forward_hooks_always_called", {})
    hooks = getattr(target, "_forward_hooks", {})
    kept = [w.hook_labels[id(fn)] for key, fn in hooks.items() if key in always and id(fn) in w.hook_labels]
    skipped = [w.hook_labels[id(fn)] for key, fn in hooks.items() if key not in always and id(fn) in w.hook_labels]
    text = (f"the error was raised inside {name} (its forward or one of its hooks), so its call did not return: "
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
