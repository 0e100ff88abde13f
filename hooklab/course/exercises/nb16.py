"""Exercises of notebook 16 (hooks across a training run).

16.1 asks for the optimizer in backward under gradient accumulation (one step per logical batch), compared with the
usual accumulation loop on a copy; 16.2 for a gradient-norm logger that keeps a bounded history on the device and
counts the steps whose norm exceeds a limit, reading nothing on the host (the check's harness refuses a read by any
route: ``.item()``, ``.tolist()``, ``.numpy()``, ``float(t)``, ``print(t)``, and the natural ``if norm > limit:``);
16.3 is a prediction of how often a forward
hook fires when it is registered every epoch and an EMA copy is made every epoch, checked against a run.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ...inventory import hook_inventory
from . import exercise
from ._support import NotSolved, call_answer, expect, fail, guarded, started

# ---- 16.1 the optimizer in backward, one step per logical batch ------------------------------------------------


def _model(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3))


def _micro_batches(seed: int, steps: int, micro: int) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    g = torch.Generator().manual_seed(seed)
    return [[(torch.randn(4, 5, generator=g), torch.randn(4, 3, generator=g)) for _ in range(micro)]
            for _ in range(steps)]


def _backwards(model: nn.Module, batches: list) -> list[list[int]]:
    """The backwards of ``batches``; for each parameter, the backwards (numbered from 1) during which it changed."""
    stepped: list[list[int]] = [[] for _ in model.parameters()]
    count = 0
    for micro in batches:
        for x, y in micro:
            before = [p.detach().clone() for p in model.parameters()]
            ((model(x) - y).square().mean() / len(micro)).backward()
            count += 1
            for when, p, q in zip(stepped, model.parameters(), before):
                if not torch.equal(p, q):  # bitwise: changed, a step writes new values; no step leaves the copy as it was
                    when.append(count)
    return stepped


def _usual(seed: int, batches: list, lr: float, *, step_every_micro_batch: bool = False,
           keep_grad: bool = False) -> nn.Module:
    """The truth (and two typical mistakes, made on purpose): plain SGD with accumulation, no hooks."""
    model = _model(seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for micro in batches:
        for x, y in micro:
            ((model(x) - y).square().mean() / len(micro)).backward()
            if step_every_micro_batch:
                opt.step()
                opt.zero_grad(set_to_none=not keep_grad)
        if not step_every_micro_batch:
            opt.step()
            if not keep_grad:
                opt.zero_grad(set_to_none=True)
    return model


def _same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.allclose(p, q, rtol=1e-5, atol=1e-7) for p, q in zip(a.parameters(), b.parameters()))


_SCOPE = ("一个装着句柄的 `hooklab.HookScope`", "a `hooklab.HookScope` holding the handles")


def _steps_late_again(answer: Any, seed: int, micro: int, lr: float) -> bool:
    """Over three logical batches, does every parameter step one micro-batch late each time (after backwards
    micro + 1 and 2 * micro + 1)? Told apart from a fixed count that happens to be micro + 1."""
    model = _model(seed)
    scope = call_answer(answer, model, lr, micro, returns=_SCOPE)
    try:
        stepped = _backwards(model, _micro_batches(seed + 200, steps=3, micro=micro))
    finally:
        scope.remove()
    return all(when == [micro + 1, 2 * micro + 1] for when in stepped)


@exercise("16.1", answer="attach_optimizer_in_backward")
def optimizer_in_backward(answer: Any) -> None:
    for seed, micro, lr in [(20, 3, 0.1), (21, 2, 0.05)]:
        batches = _micro_batches(seed + 100, steps=2, micro=micro)
        model = _model(seed)
        scope = call_answer(answer, model, lr, micro, returns=_SCOPE)
        removable = callable(getattr(scope, "remove", None)) and not isinstance(scope, (list, tuple, set, dict))
        expect(removable, "not-a-scope",
               f"`attach_optimizer_in_backward` 应返回 {_SCOPE[0]}，收到的是 {type(scope).__name__}。",
               f"`attach_optimizer_in_backward` must return {_SCOPE[1]}, not a {type(scope).__name__}.")
        tensor_hooks = any(p._backward_hooks for p in model.parameters())  # register_hook's, not post-accumulate
        try:
            with guarded("raised-in-backward", "反向时你的钩子", "during backward your hook"):
                stepped = _backwards(model, batches)
        finally:
            with guarded("raised", "调用 `remove()` 时", "`remove()`"):
                scope.remove()
        expect(not hook_inventory(model, include_global=False), "hook-left",
               "`remove()` 之后模型上还留着钩子：把每个 `register_post_accumulate_grad_hook` 的句柄都交给返回的作用域。",
               "hooks are still on the model after `remove()`: hand every `register_post_accumulate_grad_hook` "
               "handle to the scope you return.")
        if _same(model, _usual(seed, batches, lr)):
            expect(all(p.grad is None for p in model.parameters()), "grad-not-freed",
                   "参数对了，但反向之后 `.grad` 还留着：更新之后要释放梯度（`p.grad = None`），这正是在反向中更新的意义。",
                   "the parameters are right, but `.grad` is still there after backward: free the gradient after the "
                   "step (`p.grad = None`); that is what stepping inside backward is for.")
            continue
        if _same(model, _usual(seed, batches, lr, step_every_micro_batch=True)):
            fail("steps-every-micro-batch",
                 f"每个微批次的反向都更新了一次（每个逻辑批次 {micro} 次）：只在一个逻辑批次的最后一个微批次之后更新，"
                 "比如在钩子里数这个参数的梯度到达了几次。",
                 f"every micro-batch's backward stepped ({micro} steps per logical batch): step only after the last "
                 "micro-batch of a logical batch, e.g. by counting in the hook how often this parameter's gradient "
                 "arrived.")
        if _same(model, _usual(seed, batches, lr, keep_grad=True)):
            fail("grad-kept", "更新之后没有释放 `.grad`：下一个逻辑批次的梯度加在了上一个的上面。更新后写 `p.grad = None`。",
                 "`.grad` was not freed after the step: the next logical batch's gradients were added onto the "
                 "previous one's. Write `p.grad = None` after the step.")
        right = [micro * (i + 1) for i in range(len(batches))]  # after the last micro-batch of each logical batch
        other = next((when for when in stepped if when != stepped[0]), None)
        if other is not None:
            fail("uneven-steps", f"各参数在不同的反向里更新（按反向的序号，第一个参数在 {stepped[0]}，另一个在 {other}）："
                 f"每个参数都应在 {right} 更新。所有参数共用一个计数器时，每次反向里每个参数的钩子都会让它加一；"
                 "给每个参数各记一个数。",
                 f"the parameters stepped at different backwards (numbered from 1: the first parameter at "
                 f"{stepped[0]}, another at {other}), where each should step at {right}. A counter shared by all "
                 "parameters goes up once per parameter in every backward: keep one count per parameter.")
        late = [n + 1 for n in right if n + 1 <= micro * len(batches)]
        expect(stepped[0] != late or not _steps_late_again(answer, seed, micro, lr), "one-late",
               f"每个参数都晚了一个微批次才更新（在第 {late} 次反向，而不是第 {right} 次），更新时梯度里还加进了下一个逻辑批次"
               "的第一个梯度：先把这一次反向计入，再和 `micro_batches` 比较。",
               f"every parameter stepped one micro-batch late (at backwards {late}, not {right}), with the next "
               "logical batch's first gradient already added in: count this backward first, then compare with "
               "`micro_batches`.")
        expect(not (tensor_hooks and stepped[0] == right), "tensor-hook",
               "更新的时机对了，用的梯度却不对：张量钩子（`register_hook`）在这一次的梯度加进 `.grad` **之前**运行，"
               "更新时 `.grad` 里少了最后一个微批次的梯度，它随后又被加到下一个逻辑批次里。"
               "用 `register_post_accumulate_grad_hook`，它在梯度累加进 `.grad` 之后运行。",
               "the steps come at the right backwards but use the wrong gradient: a tensor hook (`register_hook`) runs "
               "**before** this backward's gradient is added into `.grad`, so each step misses the last micro-batch's "
               "gradient, which then lands in the next logical batch. Use `register_post_accumulate_grad_hook`, which "
               "runs once the gradient has been accumulated into `.grad`.")
        fail("parameters", "训练之后的参数与常规的梯度累积循环（SGD，每个逻辑批次一步）不一致。",
             "after training, the parameters differ from those of the usual accumulation loop (SGD, one step per "
             "logical batch).")


# ---- 16.2 a logger that reads nothing on the host ---------------------------------------------------------------

_LOG_STEPS, _SLOTS = 12, 5


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad for p in model.parameters() if p.grad is not None]


def _total_norm(model: nn.Module) -> torch.Tensor:
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in _grads(model)]))


def _norms_of_the_run() -> list[float]:
    """The checker's training run without a logger: the total gradient norm at each step (the truth; a logger
    that only reads leaves the run as it is)."""
    model = _model(30)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    norms = []
    for (x, y), in _micro_batches(31, steps=_LOG_STEPS, micro=1):
        (model(x) - y).square().mean().backward()
        norms.append(_total_norm(model).item())
        opt.step()
        opt.zero_grad(set_to_none=True)
    return norms


@exercise("16.2", answer="log_norm", host_reads=False)  # the harness refuses every host read (._harness)
def sync_free_logger(answer: Any) -> None:
    if not started(answer):
        raise NotSolved("你的函数还没有把范数写进 `history`。", "your function does not write the norm into `history` yet.")
    ordered = sorted(_norms_of_the_run())
    limit = (ordered[-5] + ordered[-4]) / 2  # 4 of the 12 steps above it (counting those below gives 8), none near it
    model = _model(30)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    history, spikes = torch.full((_SLOTS,), math.nan), torch.zeros(())
    truth, sums = [], []
    for step, ((x, y),) in enumerate(_micro_batches(31, steps=_LOG_STEPS, micro=1)):
        (model(x) - y).square().mean().backward()
        truth.append(_total_norm(model).item())
        sums.append(sum(g.norm().item() for g in _grads(model)))
        grads = [g.clone() for g in _grads(model)]
        call_answer(answer, history, spikes, step, model, limit, allow_none=True)
        after = _grads(model)
        # bitwise: copy, clones taken before the answer ran
        expect(len(after) == len(grads) and all(torch.equal(g, a) for g, a in zip(grads, after)), "changes-gradient",
               "你的函数改变了梯度：记录日志时只读，不要修改 `.grad`。",
               "your function changed the gradients: a logger only reads, never edits `.grad`.")
        opt.step()
        opt.zero_grad(set_to_none=True)
    expect(not torch.isnan(history).any(), "not-written",
           "`history` 里还有没写过的位置（nan）：每一步都要写进 `history[step % len(history)]`（原地写，不要重新绑定这个名字）。",
           "`history` still has slots never written (nan): every step must write into "
           "`history[step % len(history)]` (in place; do not rebind the name).")
    want = torch.tensor([truth[step] for step in range(_LOG_STEPS - _SLOTS, _LOG_STEPS)])
    want = want.roll(_LOG_STEPS % _SLOTS)  # slot step % 5 holds step
    if torch.allclose(history, torch.tensor([sums[s] for s in range(_LOG_STEPS - _SLOTS, _LOG_STEPS)]).roll(
            _LOG_STEPS % _SLOTS), rtol=1e-5):
        fail("sum-of-norms", "记录的是各参数范数之和，不是全部梯度合在一起的 2-范数：先求每个参数的范数，再对这些范数求一次 2-范数"
             "（`torch.nn.utils.get_total_norm`）。",
             "you recorded the sum of the parameters' norms, not the 2-norm of all gradients together: take each "
             "parameter's norm, then the 2-norm of those (`torch.nn.utils.get_total_norm`).")
    expect(torch.allclose(history, want, rtol=1e-5), "norm",
           "`history` 里的值不对：第 `step` 步的全部梯度的 2-范数应写在 `history[step % len(history)]`。",
           "the values in `history` are wrong: step `step`'s 2-norm of all gradients belongs in "
           "`history[step % len(history)]`.")
    above = sum(norm > limit for norm in truth)
    counted = float(spikes)
    expect(counted != 0 or above == 0, "spikes-not-in-place",
           f"`spikes` 还是 0，而 {_LOG_STEPS} 步里有 {above} 步的范数大于 `limit`：要原地加（`spikes += ...` 或 `spikes.add_(...)`）；"
           "`spikes = spikes + ...` 只是让函数里的局部名字指向一个新张量，调用者的 `spikes` 没变。",
           f"`spikes` is still 0, while {above} of the {_LOG_STEPS} steps had a norm above `limit`: add in place "
           "(`spikes += ...` or `spikes.add_(...)`); `spikes = spikes + ...` only points the function's local name "
           "at a new tensor, and the caller's `spikes` stays as it was.")
    expect(counted == above, "spikes",
           f"`spikes` 是 {counted:g}，应是 {above}：范数大于 `limit` 的步数（每一步最多加 1）。",
           f"`spikes` is {counted:g}; it should be {above}, the number of steps whose norm is above `limit` (at most "
           "1 per step).")


# ---- 16.3 how many calls ------------------------------------------------------------------------------------------


def _calls_of_the_scenario() -> tuple[int, int]:
    """The scenario of 16.3, run: (calls of the hook from the model, calls from the EMA copies)."""
    from torch.optim.swa_utils import AveragedModel

    model = _model(40)
    x = torch.randn(2, 5)
    calls = {"model": 0, "ema": 0}

    def count(module: nn.Module, args: Any, output: Any) -> None:
        calls["model" if module is model[0] else "ema"] += 1

    handles = []
    try:
        for _epoch in range(2):
            handles.append(model[0].register_forward_hook(count))  # registered every epoch, never removed
            ema = AveragedModel(model)                             # a new EMA copy every epoch
            for _micro_batch in range(3):
                model(x)
            ema(x)
    finally:
        for h in handles:
            h.remove()
    return calls["model"], calls["ema"]


@exercise("16.3", answer="my_calls", data=True)
def predict_calls(answer: Any) -> None:
    if answer is None or (isinstance(answer, (list, tuple)) and len(answer) == 0):
        raise NotSolved("把两个预测（模型的调用次数、EMA 副本的调用次数）按顺序填进 `my_calls`。",
                        "put your two predictions (calls from the model, calls from the EMA copies) into `my_calls`.")
    expect(isinstance(answer, (list, tuple)) and len(answer) == 2
           and all(isinstance(n, int) and not isinstance(n, bool) for n in answer), "two-ints",
           "`my_calls` 应是两个整数组成的列表：先模型，后 EMA 副本。",
           "`my_calls` must be a list of two ints: the model first, then the EMA copies.")
    model_calls, ema_calls = _calls_of_the_scenario()
    expect(list(answer) != [model_calls + ema_calls, 0], "copies-as-model",
           f"你把所有 {answer[0]} 次都算给了模型，EMA 副本算 0 次：`AveragedModel` 深拷贝模型时连钩子一起复制，"
           "调用 `ema(x)` 时触发的是副本上的钩子，它收到的 `module` 是副本的层，不是 `model[0]`。把这两部分分开数。",
           f"you counted all {answer[0]} calls for the model and 0 for the EMA copies: `AveragedModel` deep-copies "
           "the model, hooks included, and `ema(x)` fires the copy's hooks, whose `module` is the copy's layer, not "
           "`model[0]`. Count the two apart.")
    expect(answer[0] == model_calls, "piled-up",
           f"模型的 {answer[0]} 次不对：每个 epoch 都注册一次、从不移除，第二个 epoch 里这一层上有几个钩子？",
           f"the model's {answer[0]} is off: registered every epoch and never removed, how many hooks does the layer "
           "carry in the second epoch?")
    expect(answer[1] == ema_calls, "copied",
           f"EMA 副本的 {answer[1]} 次不对：`AveragedModel` 用 `deepcopy` 复制模型，钩子也一起复制了；"
           "每个副本复制的是它被创建时层上已有的钩子。",
           f"the EMA copies' {answer[1]} is off: `AveragedModel` copies the model with `deepcopy`, hooks included; "
           "each copy carries the hooks the layer had when it was made.")
