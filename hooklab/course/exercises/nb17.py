"""Exercises of notebook 17 (the hook behaviour matrix).

17.1 asks for the cells in which a hook stays silent (observed, no call, no error) among matrix records, checked on
the records it is told of and on a second set it cannot know (a list written into the code fails there); 17.2 for a
new context of the matrix, the hook removed between forward and backward, checked by running it through the probes
of four families against an independent run: each family's number of calls, and what its changed return value does
(which the context's ``h.fact`` records make visible); 17.3 is a prediction of four cells' call counts, checked
against the probes, and refused when the learner ran the probes of the cells notebook 17 does not show (the
harness notes those calls).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from . import exercise
from ._harness import consulted, record_read_by_the_caller
from ._support import NotSolved, expect, fail, guarded, started

# ---- 17.1 the silent cells --------------------------------------------------------------------------------------


def _record(family: str, context: str, *, status: str = "observed", calls: int = 0,
            error: str | None = None) -> dict[str, Any]:
    if status == "n/a":
        return {"family": family, "context": context, "status": "n/a", "reason": "the hook runs in the forward pass, "
                "which torch.autograd.grad does not change", "reason_zh": "钩子在前向中运行"}
    return {"family": family, "context": context, "status": status, "fires": calls > 0, "calls": calls,
            "by_phase": {"backward": calls} if calls else {}, "receives": [], "return_value": "",
            "error": error, "warnings": [], "notes": []}


def _records() -> dict[str, dict[str, Any]]:
    """Matrix records as the JSON holds them: silent cells, cells that fire, raise, or are n/a (a raising cell that
    fired before the error, too)."""
    rows = [("full-backward-hook", "autograd-grad", "observed", 0, None),
            ("param-hook", "deepcopy", "observed", 0, None),
            ("forward-hook", "compile-hook-after", "observed", 0, None),
            ("forward-hook", "eager", "observed", 1, None),
            ("forward-hook", "checkpoint", "observed", 2, None),
            ("tensor-hook", "no-grad", "observed", 0, "RuntimeError: cannot register a hook on a tensor that "
                                                      "doesn't require gradient"),
            ("parametrization", "pickle", "observed", 1, "RuntimeError: Serialization of parametrized modules is "
                                                        "only supported through state_dict()."),
            ("forward-hook", "autograd-grad", "n/a", 0, None),
            ("state-dict-pre-hook", "vmap", "n/a", 0, None),
            ("ddp-comm-hook", "unused-branch", "observed", 0, None)]
    return {f"{f}@{c}": _record(f, c, status=s, calls=n, error=e) for f, c, s, n, e in rows}


# a second set the answer cannot know in advance: the same kinds of cell, with the roles moved (a cell silent in the
# first set fires here, one that fired is silent, a silent one is n/a) and keys the first set does not have
_ROWS_2 = [("forward-hook", "eager", "observed", 0, None),
           ("param-hook", "deepcopy", "observed", 1, None),
           ("full-backward-hook", "autograd-grad", "n/a", 0, None),
           ("tensor-hook", "vmap", "observed", 0, None),
           ("forward-pre-hook", "jit-trace", "observed", 0, None),
           ("node-hook", "compile", "observed", 0, "RuntimeError: a hook on a Node the compiled graph does not have"),
           ("state-dict-pre-hook", "pickle", "observed", 2, None),
           ("backward-pre-hook", "no-grad", "n/a", 0, None)]


def _records_2() -> dict[str, dict[str, Any]]:
    return {f"{f}@{c}": _record(f, c, status=s, calls=n, error=e) for f, c, s, n, e in _ROWS_2}


def _silent(cells: dict[str, dict[str, Any]]) -> list[str]:
    return sorted(k for k, r in cells.items() if r["status"] == "observed" and r["calls"] == 0 and not r["error"])


def _keys_of(answer: Any, cells: dict[str, dict[str, Any]]) -> list[str]:
    """The answer's keys for ``cells`` (a copy: the answer may change what it gets)."""
    with guarded("raised", "你的函数", "your function"):
        result = answer({k: dict(v) for k, v in cells.items()})
    if result is None:
        fail("returned-none", "`silent_cells` 什么也没返回：返回这些格子的键（一个列表）。",
             "`silent_cells` returned nothing: return the keys of those cells (a list).")
    expect(isinstance(result, Iterable) and not isinstance(result, (str, bytes, dict)), "not-a-collection",
           f"应返回键的列表，收到的是 {type(result).__name__}。", f"return a list of keys, not a {type(result).__name__}.")
    got = list(result)
    expect(all(isinstance(k, str) for k in got), "not-keys",
           "列表里应是格子的键（如 \"param-hook@deepcopy\"），不是记录。",
           "the list should hold the cells' keys (such as \"param-hook@deepcopy\"), not their records.")
    return got


@exercise("17.1", answer="silent_cells")
def silent_cells(answer: Any) -> None:
    if not started(answer):
        raise NotSolved("你的函数还没有返回任何键。", "your function does not return any key yet.")
    first = _keys_of(answer, _records())
    _judge_silent(first, _records())
    second = _keys_of(answer, _records_2())
    if second != _silent(_records_2()) and sorted(second) == _silent(_records()):
        fail("hard-coded", "换一组记录，你的函数返回的还是第一组里沉默的格子：键要从给你的 `cells` 里算出来，不能写死。",
             "given another set of records, your function returned the silent cells of the first set again: compute "
             "the keys from the `cells` you get; do not write them into the code.")
    _judge_silent(second, _records_2())


def _judge_silent(got: list[str], cells: dict[str, dict[str, Any]]) -> None:
    """The answer's keys ``got`` for ``cells``, judged: what it kept that it should not, what it missed, the order."""
    want, chosen = set(_silent(cells)), set(got)
    na = sorted(k for k in chosen if cells.get(k, {}).get("status") == "n/a")
    if na:
        fail("includes-na", f"{na[0]} 是不适用（n/a）的格子：它没有运行，谈不上沉默。先看 `status`。",
             f"{na[0]} is an n/a cell: it was not run, so it cannot be silent. Look at `status` first.")
    raised = sorted(k for k in chosen if cells.get(k, {}).get("error"))
    if raised:
        fail("includes-errors", f"{raised[0]} 报了错（`error`）：报错不是沉默，用户会看到它。",
             f"{raised[0]} raised (`error`): an error is not silence, the user sees it.")
    fired = sorted(k for k in chosen if cells.get(k, {}).get("calls", 0) > 0)
    if fired:
        fail("includes-fired", f"{fired[0]} 的钩子触发了（`calls` > 0）。", f"{fired[0]}'s hook fired (`calls` > 0).")
    unknown = sorted(chosen - set(cells))
    if unknown:
        fail("unknown-key", f"{unknown[0]} 不是给你的记录里的键。", f"{unknown[0]} is not a key of the records you got.")
    missed = sorted(want - chosen)
    if missed:
        fail("missed-silent", f"漏掉了 {missed[0]}：它运行过、`calls` 是 0、也没有 `error`。",
             f"{missed[0]} is missing: it was observed, its `calls` is 0 and it has no `error`.")
    expect(len(got) == len(chosen), "duplicates", "同一个键出现了不止一次。", "a key appears more than once.")
    expect(got == sorted(got), "not-sorted", "键要按字母顺序排好（`sorted`）。", "sort the keys (`sorted`).")


# ---- 17.2 a new context: the hook removed between forward and backward -------------------------------------------

_FAMILIES_17_2 = ("full-backward-hook", "param-hook", "forward-hook", "backward-pre-hook")


def _twice(values: Any) -> Any:
    return tuple(None if v is None else v * 2 for v in values)


# what each family's hook returns in the matrix's second run (hook_matrix.families.MODIFIERS): the value changed
_CHANGE_17_2: dict[str, Callable[..., Any]] = {
    "full-backward-hook": lambda module, grad_input, grad_output: _twice(grad_input),
    "param-hook": lambda grad: grad * 2,
    "forward-hook": lambda module, args, output: output * 2,
    "backward-pre-hook": lambda module, grad_output: _twice(grad_output)}


def _run_17_2(family: str, change: bool) -> tuple[int, list[torch.Tensor]]:
    """One run of the new context in plain PyTorch: the hook registered, the forward, the handle removed, the
    backward; ``(calls of the hook, what the run produced)``."""
    torch.manual_seed(0)
    lin, head = nn.Linear(3, 3), nn.Linear(3, 1)
    x = torch.randn(2, 3, requires_grad=True)
    calls = [0]

    def hook(*args: Any) -> Any:
        calls[0] += 1
        return _CHANGE_17_2[family](*args) if change else None

    register = {"full-backward-hook": lin.register_full_backward_hook,
                "param-hook": lin.weight.register_hook,
                "forward-hook": lin.register_forward_hook,
                "backward-pre-hook": lin.register_full_backward_pre_hook}[family]
    handle = register(hook)
    out = head(lin(torch.tanh(x)))
    handle.remove()
    out.sum().backward()
    grads = [p.grad for p in (*lin.parameters(), *head.parameters())]
    return calls[0], [out.detach(), x.grad, *grads]


def _truth_17_2() -> dict[str, tuple[int, str]]:
    """For each family, how often its hook runs when its handle is removed after forward, before backward, and
    what its changed return value does ("used", "ignored", or not tried): plain PyTorch, without the probes."""
    truth = {}
    for family in _FAMILIES_17_2:
        calls, plain = _run_17_2(family, change=False)
        if not calls:
            truth[family] = (0, "not tried (never called)")
            continue
        _, changed = _run_17_2(family, change=True)
        same = all(torch.allclose(a, b) for a, b in zip(plain, changed))
        truth[family] = (calls, "ignored" if same else "used")
    return truth


def _hooks_left_in_backward(answer: Any) -> int:
    """The answer's context run on a family of two hooks on the weight (two handles in ``rig.handles``): how often
    they ran in the backward, where a context that removes every handle after the forward leaves none to run."""
    import dataclasses

    from ..hook_matrix import record
    from ..hook_matrix.families import BY_ID
    from ..hook_matrix.observe import Harness

    ran = [0]

    def install(rig: Any, module: Any) -> None:
        for _ in range(2):
            rig.handles.append(module.lin.weight.register_hook(lambda grad: ran.__setitem__(0, ran[0] + 1)))

    h = Harness(dataclasses.replace(BY_ID["param-hook"], install=install))
    try:
        with guarded("raised", "有两个钩子时你的上下文", "with two hooks your context"):
            answer(h)
    finally:
        for rig in h.rigs:
            rig.close()
        record.set_phase("run")
    return ran[0]


def _run_context(answer: Any) -> dict[str, Any]:
    from .. import hook_matrix

    context = hook_matrix.new_context("remove-before-backward", answer, title="the hook removed before backward")
    return {family: hook_matrix.observe(family, context) for family in _FAMILIES_17_2}


@exercise("17.2", answer="remove_before_backward")
def remove_before_backward(answer: Any) -> None:
    if not started(answer):
        raise NotSolved("你的上下文函数还是空的。", "your context function is still empty.")
    seen = _run_context(answer)
    errors = {f: o.error for f, o in seen.items() if o.error}
    if errors:
        family, error = next(iter(errors.items()))
        fail("raised", f"在 {family} 这一族上，你的上下文报错：{error}",
             f"with the {family} family your context raised: {error}")
    calls = {f: o.calls for f, o in seen.items()}
    truth_both = _truth_17_2()
    truth = {f: n for f, (n, _) in truth_both.items()}
    if calls == truth:
        returned = {f: o.return_value for f, o in seen.items()}
        want = {f: r for f, (_, r) in truth_both.items()}
        wrong = [f for f in _FAMILIES_17_2 if returned[f] != want[f]]
        if wrong:
            f = wrong[0]
            fail("no-facts", f"调用次数都对，但 {f} 的返回值被判为“{returned[f]}”，独立运行的结果是“{want[f]}”："
                 "矩阵比较两次运行（钩子返回 None / 钩子改变返回值）记下的事实，反向之后要用 "
                 "`h.fact(out, rig.x.grad, *h.grads(rig))` 记下这次运行的结果。",
                 f"the call counts are right, but {f}'s return value was judged {returned[f]!r} where an independent "
                 f"run says {want[f]!r}: the matrix compares the facts of two runs (hooks that return None, hooks "
                 "that change their value); record what the run produced after the backward with "
                 "`h.fact(out, rig.x.grad, *h.grads(rig))`.")
        expect(not _hooks_left_in_backward(answer), "handle-left",
               "四族的结果都对，但它们每族只注册一个钩子。一族注册两个钩子时，有一个留到了反向里还在运行："
               "你只移除了 `rig.handles` 里的一部分句柄。把其中每一个都移除（`for handle in rig.handles: handle.remove()`）。",
               "the four families come out right, but each registers one hook only: with a family that registers two, "
               "one of them was still there and ran in the backward, because you removed only some of the handles in "
               "`rig.handles`. Remove every one of them (`for handle in rig.handles: handle.remove()`).")
        return
    expect(any(calls.values()), "nothing-ran",
           "四族钩子一次也没有运行：先 `h.install(rig)`，再前向，前向之后才移除句柄。",
           "none of the four families' hooks ran: call `h.install(rig)` before the forward, and remove the handles "
           "only after it.")
    expect(calls["param-hook"] == 0, "not-removed",
           "参数上的钩子在反向中运行了：前向之后、反向之前要移除句柄（`rig.handles` 里是它们）。",
           "the hook on the parameter ran in backward: remove the handles (they are in `rig.handles`) after the "
           "forward, before the backward.")
    expect(calls["full-backward-hook"] > 0, "no-backward",
           "完整反向钩子没有运行：前向之后要调用 `out.sum().backward()`（移除句柄之后）。",
           "the full backward hook did not run: call `out.sum().backward()` after the forward (after removing the "
           "handles).")
    fail("counts", f"各族的调用次数 {calls} 与独立运行的结果 {truth} 不一致：一次前向、移除句柄、一次反向。",
         f"the families' call counts {calls} differ from an independent run's {truth}: one forward, the handles "
         "removed, one backward.")


# ---- 17.3 predict four cells --------------------------------------------------------------------------------------

KEYS_17_3 = ("param-hook@used-twice", "full-backward-hook@used-twice", "forward-hook@apply", "forward-hook@checkpoint")
_WHY_17_3 = {
    "param-hook@used-twice": ("summed-once",
                              "权重用了两次，但叶子张量的钩子每次反向只在梯度求和之后运行一次。",
                              "the weight is used twice, but a leaf's hook runs once per backward, on the summed "
                              "gradient."),
    "full-backward-hook@used-twice": ("per-call",
                                      "完整反向钩子按模块的每一次调用运行。",
                                      "a full backward hook runs once per call of the module."),
    "forward-hook@apply": ("registered-twice",
                           "`model.apply` 经两条路径（两个父模块各一条）访问共享的模块，钩子注册了两次。",
                           "`model.apply` reaches the shared module along two paths (one through each parent): the "
                           "hook is registered twice."),
    "forward-hook@checkpoint": ("recomputed",
                                "检查点在反向时重算前向，直到反向需要的最后一个张量（由 subject 之后的 head 保存），subject 的前向钩子再运行一次。",
                                "the checkpoint recomputes the forward in backward, up to the last tensor backward needs "
                                "(saved by the head, after the subject): the subject's forward hook runs again."),
}


# the cells of 17.3 whose probes notebook 17 runs before the exercises (sections 3.6 and 4): a learner who ran the
# notebook has run them
SHOWN_17_3 = ("forward-hook@apply", "param-hook@used-twice", "full-backward-hook@used-twice")


@exercise("17.3", answer="my_calls", data=True)
def predict_calls(answer: Any) -> None:
    from .. import hook_matrix

    if answer is None or (isinstance(answer, (dict, list, tuple)) and len(answer) == 0):
        raise NotSolved("把四个预测（每格的调用次数）填进 `my_calls`。",
                        "put your four predictions (each cell's number of calls) into `my_calls`.")
    if isinstance(answer, (list, tuple)) and len(answer) == len(KEYS_17_3):
        answer = dict(zip(KEYS_17_3, answer))
    expect(isinstance(answer, dict) and set(answer) == set(KEYS_17_3)
           and all(isinstance(v, int) and not isinstance(v, bool) for v in answer.values()), "four-ints",
           "`my_calls` 应是以这四个键为键、整数为值的字典（或按这个顺序的四个整数）。",
           "`my_calls` must be a dict from these four keys to ints (or four ints in this order).")
    probed = [key for key in KEYS_17_3 if key not in SHOWN_17_3 and key in consulted("hook_matrix.observe")]
    if probed:
        fail("answer-machinery", f"这个内核里运行过 {probed[0]} 的探针（`hook_matrix.observe`）：这道练习要的是预测，"
             "探针给出的正是检查用来判断的答案。重启内核，不运行探针，凭第 3、4 节的规则预测。",
             f"the probe of {probed[0]} ran in this kernel (`hook_matrix.observe`): the exercise asks for a "
             "prediction, and the probe gives the very answer the check judges with. Restart the kernel and predict "
             "without running the probes, from the rules of sections 3 and 4.")
    read = record_read_by_the_caller()
    if read is not None:
        fail("answer-machinery", f"你的代码（{read}）在这次检查之前读了行为矩阵的记录（`docs/hook_matrix.json`）：记录里正是检查"
             "用来判断的答案，而这道练习要的是预测。不读记录，凭第 3、4 节的规则预测。",
             f"your code ({read}) read the hook matrix's record (`docs/hook_matrix.json`) before this check: the "
             "record holds the very answer the check judges with, and the exercise asks for a prediction. Predict "
             "from the rules of sections 3 and 4, without reading the record.")
    for key in KEYS_17_3:
        family, context = key.split("@")
        truth = hook_matrix.observe(family, context).calls
        reason, zh, en = _WHY_17_3[key]
        expect(answer[key] == truth, reason, f"{key}：你预测 {answer[key]} 次。{zh}",
               f"{key}: you predicted {answer[key]}. {en}")
