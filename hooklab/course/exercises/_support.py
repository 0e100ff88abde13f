"""What every checker is built from: verdicts with reason ids, rules, and a guarded call of the learner's code.

A checker is a function of the learner's answer that returns when the answer is right and raises
:class:`Wrong` (or :class:`NotSolved`) when it is not. Every verdict carries a *reason id*, a short
kebab-case name of the misconception it caught ("in-place", "hook-left", ...), which the tests assert::

    expect(isinstance(result, int), "not-an-int",
           f"应返回整数，收到的是 {type(result).__name__}。", f"return an int, not a {type(result).__name__}.")

The rules below (``expect``, ``fail``, ``expect_count``, ...) say the zh and the en text once; the calls
(``run``, ``guarded``) turn the learner's exceptions, a forgotten ``return`` and a leaked hook into verdicts.
"""
from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import torch
from torch.nn.modules import module as module_globals

from ..._torch_internals import GLOBAL_HOOK_FLAGS, global_hook_dicts, global_optimizer_hook_dicts
from ...inventory import hook_inventory
from ..attempt import first_sentence

__all__ = ["GLOBAL_HOOK_LEFT", "NotSolved", "Wrong", "call_answer", "collector_sees_only_new_objects",
           "drop_global_hooks_added_since", "expect", "expect_count", "expect_fresh", "expect_no_slip", "fail", "global_full_backward_flag",
           "global_hook_ids", "guarded", "no_hooks_left", "require_callable", "run", "set_global_full_backward_flag",
           "short_error", "started"]


class Wrong(Exception):
    """Raised by a checker: the answer is wrong, why (``zh``, ``en``) and the id of that reason."""

    def __init__(self, zh: str, en: str, *, reason: str = "") -> None:
        super().__init__(en)
        self.zh, self.en, self.reason = zh, en, reason


class NotSolved(Wrong):
    """Raised by a checker when the answer is still the blank starting point."""

    def __init__(self, zh: str, en: str, *, reason: str = "blank") -> None:
        super().__init__(zh, en, reason=reason)


def fail(reason: str, zh: str, en: str) -> NoReturn:
    """Judge the answer wrong, for ``reason``."""
    raise Wrong(zh, en, reason=reason)


def expect(condition: object, reason: str, zh: str, en: str) -> None:
    """A rule: the answer is wrong, for ``reason``, unless ``condition`` holds."""
    if not condition:
        raise Wrong(zh, en, reason=reason)


def expect_count(value: Any, what: tuple[str, str] = ("整数个数", "the count as an int")) -> None:
    """A count must be a Python ``int`` (a one-element tensor or a bool is wrong, each with its own reason)."""
    if isinstance(value, torch.Tensor):
        fail("tensor-not-int", "应返回 Python 整数，而不是张量：用 `int(...)` 或 `.item()` 取出个数。",
             "return a Python int, not a tensor: take the count out with `int(...)` or `.item()`.")
    if isinstance(value, float) and 0 < value < 1:
        fail("fraction-not-count", f"应返回{what[0]}，你返回的 {value:.4g} 在 0 和 1 之间，像是比例（均值）：数出个数，不要除以总数。",
             f"return {what[1]}; {value:.4g}, between 0 and 1, looks like a fraction (a mean): count, do not divide "
             "by the total.")
    expect(isinstance(value, int) and not isinstance(value, bool), "not-an-int",
           f"应返回{what[0]}，收到的是 {type(value).__name__}。", f"return {what[1]}, not a {type(value).__name__}.")


def expect_fresh(results: list[Any], truths: list[Any]) -> None:
    """Across the cases a checker ran so far: the last result is the sum of every case's truth (a number, or a
    ``Counter``/dict of counts), the sign of state kept outside the function (a list or counter never reset).

    >>> expect_fresh([4], [4]); expect_fresh([4, 9], [4, 5])
    Traceback (most recent call last):
    ...
    hooklab.course.exercises._support.Wrong: your result for this case, 9, is the total of this case's (5) and every earlier case's: a list or counter that lives outside the function is never reset. Make it inside the function, fresh for each call.
    """
    if len(results) < 2 or len(results) != len(truths):
        return
    if all(isinstance(t, dict) for t in truths):
        total: Any = {}
        for t in truths:
            for k, v in t.items():
                total[k] = total.get(k, 0) + v
        same = isinstance(results[-1], dict) and {k: v for k, v in results[-1].items() if v} == total
    else:
        total = sum(truths)
        same = not isinstance(results[-1], (bool, dict)) and results[-1] == total
    if same and results[-1] != truths[-1]:
        fail("kept-across-calls",
             f"这一次的结果 {results[-1]} 是这一次（{truths[-1]}）与之前每一次的总和：函数外面的列表或计数器从未清空。"
             "请在函数里面新建它，每次调用都从头开始。",
             f"your result for this case, {results[-1]}, is the total of this case's ({truths[-1]}) and every earlier "
             "case's: a list or counter that lives outside the function is never reset. Make it inside the function, "
             "fresh for each call.")


def expect_no_slip(yours: float, truth: float, what: tuple[str, str], *, rel: float = 1e-3) -> None:
    """``yours`` is not ``truth`` but a usual slip of it: its square (a sum of squares kept without the square root),
    its square root, or its negation. Each is its own verdict; anything else returns for the checker's own rule.

    >>> expect_no_slip(2.0, 2.0, ("范数", "the norm")); expect_no_slip(0.04, 0.2, ("范数", "the norm"))
    Traceback (most recent call last):
    ...
    hooklab.course.exercises._support.Wrong: the norm should be 0.2; yours, 0.04, is its square: a sum of squares kept without its square root (`.sqrt()`, or `torch.linalg.vector_norm`).
    """
    def near(a: float, b: float) -> bool:
        return abs(a - b) <= rel * max(abs(b), 1e-12)

    yours, truth = float(yours), float(truth)
    if near(yours, truth) or abs(truth) < 1e-6 or abs(abs(truth) - 1) < 1e-3:
        return
    zh, en = what
    if near(yours, truth * truth):
        fail("squared", f"{zh}应是 {truth:.4g}；你的 {yours:.4g} 是它的平方：求了平方和却没开方（`.sqrt()`，或 `torch.linalg.vector_norm`）。",
             f"{en} should be {truth:.4g}; yours, {yours:.4g}, is its square: a sum of squares kept without its "
             "square root (`.sqrt()`, or `torch.linalg.vector_norm`).")
    if truth > 0 and near(yours, truth ** 0.5):
        fail("square-root", f"{zh}应是 {truth:.4g}；你的 {yours:.4g} 是它的平方根：多开了一次方。",
             f"{en} should be {truth:.4g}; yours, {yours:.4g}, is its square root: one square root too many.")
    if near(yours, -truth):
        fail("sign", f"{zh}应是 {truth:.4g}；你的 {yours:.4g} 符号相反。",
             f"{en} should be {truth:.4g}; yours, {yours:.4g}, has the opposite sign.")


def is_handle(obj: Any) -> bool:
    """A hook's handle: an object whose ``remove()`` takes it away (a ``RemovableHandle``, a ``HookScope``). A list of
    handles is none: ``list.remove`` takes an item, and calling it as a handle's raised ``TypeError``.

    >>> import torch
    >>> is_handle(torch.zeros(1, requires_grad=True).register_hook(lambda g: None)), is_handle([])
    (True, False)
    """
    return callable(getattr(obj, "remove", None)) and not isinstance(obj, (list, tuple, set, dict))


def short_error(exc: BaseException) -> str:
    """An exception's first sentence, without the value reprs some torch messages append, at most 160 characters."""
    text = first_sentence(exc).split(", but got")[0]
    return text if len(text) <= 160 else text[:157] + "..."


@contextmanager
def guarded(reason: str, zh: str, en: str) -> Iterator[None]:
    """Around code that runs the learner's hooks: an exception becomes the verdict "``zh``/``en`` raised X: ..."."""
    try:
        yield
    except Wrong:
        raise
    except Exception as exc:  # the learner's code failed inside a call the checker made
        raise Wrong(f"{zh}抛出 {type(exc).__name__}: {short_error(exc)}",
                    f"{en} raised {type(exc).__name__}: {short_error(exc)}", reason=reason) from exc


def _blank(answer: Any) -> bool:
    """True for a function whose body does nothing (``pass``, ``...``, a docstring): the starting point."""
    import dis

    code = getattr(answer, "__code__", None)
    if code is None:
        return False
    for ins in dis.get_instructions(code):
        if ins.opname in ("RESUME", "NOP", "CACHE", "RETURN_VALUE", "EXTENDED_ARG"):
            continue
        if ins.opname in ("LOAD_CONST", "RETURN_CONST") and ins.argval is None:
            continue
        return False
    return True


def started(answer: Any) -> bool:
    """True when the answer is code the learner wrote (not the blank starting point): a function with a body,
    or any other callable. Data answers (lists, dicts) are judged by their checkers alone."""
    return callable(answer) and not _blank(answer)


def require_callable(answer: Any, name: str) -> None:
    """The usual first step of a checker: a blank answer is 'not solved', a non-function is wrong."""
    if answer is None or answer is ...:
        raise NotSolved(f"请先实现 `{name}`。", f"implement `{name}` first.")
    expect(callable(answer), "not-a-function", f"需要传入函数 `{name}`，收到的是 {type(answer).__name__}。",
           f"pass the function `{name}`, not a {type(answer).__name__}.")


def call_answer(answer: Callable, *args: Any, allow_none: bool = False,
                returns: tuple[str, str] | None = None, **kwargs: Any) -> Any:
    """Call the learner's function; its exceptions become a readable verdict.

    Returning ``None`` is "not solved yet" for the blank starting point (a body of ``pass``), and "wrong"
    for a function that ran and forgot its ``return`` (``returns``: what it should return, zh and en),
    unless ``allow_none`` (a hook that may observe).
    """
    try:
        result = answer(*args, **kwargs)
    except Exception as exc:  # the learner's code failed: say how, in both languages
        raise Wrong(f"你的函数抛出了 {type(exc).__name__}: {exc}",
                    f"your function raised {type(exc).__name__}: {exc}", reason="raised") from exc
    if result is None and not allow_none:
        if not started(answer):
            raise NotSolved("你的函数还没有返回任何值（返回了 None）。", "your function returns None so far.")
        if returns is not None:
            fail("returned-none", f"你的函数运行了，却返回了 None；请返回 {returns[0]}。",
                 f"your function ran but returned None: return {returns[1]}.")
        fail("returned-none", "你的函数运行了，却返回了 None，是不是忘了写 `return`？",
             "your function ran but returned None: did you forget the `return`?")
    return result


def _global_dicts() -> list[dict]:
    """Every dict in which torch keeps global module and optimizer hooks and their flags (a handle's id,
    unique across all of them, is the key in each)."""
    flags = [d for attr in GLOBAL_HOOK_FLAGS if isinstance(d := getattr(module_globals, attr, None), dict)]
    return [d for _, _, d in (*global_hook_dicts(), *global_optimizer_hook_dicts())] + flags


def global_hook_ids() -> set[int]:
    """The ids of the global module and optimizer hooks registered right now."""
    return {key for hooks in _global_dicts() for key in hooks}


def drop_global_hooks_added_since(before: set[int]) -> bool:
    """Remove the global hooks registered after ``before`` was taken (a learner forgot them); True if any."""
    found = False
    for hooks in _global_dicts():
        for key in [k for k in hooks if k not in before]:
            del hooks[key]
            found = True
    return found


# the verdict when an answer leaves a global hook registered (no_hooks_left at once, _Isolation for every check)
GLOBAL_HOOK_LEFT = ("函数返回后还留着一个全局钩子（它会影响之后的每个模块！），检查已把它删除；把句柄交给 `hooklab.HookScope` "
                    "或调用 `handle.remove()`。",
                    "a global hook was still registered after your function returned (it affects every module from "
                    "then on!); the check has removed it. Hand its handle to a `hooklab.HookScope` or call "
                    "`handle.remove()`.")


def global_full_backward_flag() -> Any:
    """torch's process-wide flag that says whether the global backward hooks are full ones (set when one is
    registered, never reset by removing it)."""
    return getattr(module_globals, "_global_is_full_backward_hook", None)


def set_global_full_backward_flag(value: Any) -> None:
    if hasattr(module_globals, "_global_is_full_backward_hook"):
        module_globals._global_is_full_backward_hook = value


@contextmanager
def no_hooks_left(*owners: Any) -> Iterator[None]:
    """Around a call of the learner's function: afterwards it is wrong to have left a hook on an
    ``owner`` (module or tensor) or a global module hook; leaked global hooks are removed at once."""
    on_owners = [len(hook_inventory(owner, include_global=False)) for owner in owners]
    globals_before = global_hook_ids()
    try:
        yield
    finally:
        leaked_global = drop_global_hooks_added_since(globals_before)
    expect(not leaked_global, "global-hook-left", *GLOBAL_HOOK_LEFT)
    expect(all(len(hook_inventory(owner, include_global=False)) <= n for owner, n in zip(owners, on_owners)),
           "hook-left", "函数返回后还留着钩子；把句柄交给 `hooklab.HookScope` 或调用 `handle.remove()`。",
           "a hook is still registered after your function returned; hand its handle to a "
           "`hooklab.HookScope` or call `handle.remove()`.")


def run(answer: Callable, *args: Any, leak_free: tuple[Any, ...] = (), allow_none: bool = False,
        returns: tuple[str, str] | None = None, **kwargs: Any) -> Any:
    """Call the learner's function as :func:`call_answer` does; afterwards no hook may be left on the
    ``leak_free`` owners (modules, tensors) nor a global one (:func:`no_hooks_left`)."""
    with no_hooks_left(*leak_free):
        return call_answer(answer, *args, allow_none=allow_none, returns=returns, **kwargs)


@contextmanager
def collector_sees_only_new_objects() -> Iterator[None]:
    """Inside the block ``gc.collect()`` looks only at the objects created inside it: everything the process held
    before is frozen (``gc.freeze``), so a collection costs what the check allocated, not what the process holds
    (~200k objects once torch is imported, several times that in a kernel or a test worker that did more).
    For checkers that collect garbage to see what a learner's objects leave behind; left as it is when something
    else froze objects already (unfreezing would undo that)."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


# what an exercise that registers a tensor hook returns (for call_answer's ``returns``)
TENSOR_HANDLE = ("`register_hook` 给你的句柄（handle）", "the handle that `register_hook` gave you")


def saved_tensor_hooks_active() -> bool:
    """True when a ``saved_tensors_hooks`` context is active (entered and not yet exited)."""
    return any(e.kind == "saved_tensors" for e in hook_inventory(None))


# the verdict when an answer leaves a saved_tensors_hooks context active (also raised early by 06 / 07 checkers)
SAVED_HOOKS_LEFT_ACTIVE = ("函数返回后还有一对保存张量的钩子（`saved_tensors_hooks`）处于生效状态，检查已把它关掉；"
                "用 `with saved_tensors_hooks(...):` 进入，让它在函数结束前退出。",
                "a pair of saved-tensor hooks (`saved_tensors_hooks`) was still active after your function "
                "returned (the check has now turned it off); enter it with `with saved_tensors_hooks(...):` so "
                "that it exits before your function ends.")


def no_saved_tensor_hooks_left() -> None:
    """A rule for right after the learner's function returned: no ``saved_tensors_hooks`` context it entered may
    still be active (checked at once, before the checker computes anything under the answer's hooks)."""
    expect(not saved_tensor_hooks_active(), "saved-hooks-left", *SAVED_HOOKS_LEFT_ACTIVE)
