"""fvcore: ``FlopCountAnalysis`` traces the model once with ``torch.jit._get_trace_graph`` the first time a result is
asked for; for that trace every module gets a forward pre-hook and a forward hook that push and pop the module's name
as the tracer's scope, removed afterwards (not in a ``finally``)."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

_SRC = "https://github.com/facebookresearch/fvcore/blob/fd5043ff8b2e6790f5bd7c9632695c68986cc658/fvcore/nn/"
LIBRARY = Library(
    slug="fvcore", name="fvcore", requirement="fvcore==0.1.5.post20221221", category="measurement",
    entry="FlopCountAnalysis(model, (x,)).total()",
    names=("FlopCountAnalysis", "JitModelAnalysis", "ActivationCountAnalysis", "_get_scoped_trace_graph",
           "ScopePushHook", "ScopePopHook", "by_module", "by_operator", "set_op_handle", "flop_count",
           "unsupported_ops", "uncalled_modules", "tracer_warnings"),
    sources=(_SRC + "jit_analysis.py#L114-L181", _SRC + "jit_analysis.py#L540-L551",
             _SRC + "flop_count.py#L47-L116"),
    words={
        "en": {"summary": "Nothing happens when `FlopCountAnalysis` is built; the first `total()` / `by_module()` "
                          "registers a `ScopePushHook` forward pre-hook and a `ScopePopHook` forward hook on every "
                          "module, runs one forward under the JIT tracer (in the model's current mode, with "
                          "gradients on) and removes the hooks; later queries reuse the result. The user's hooks "
                          "run in that traced forward like any Python code: their tensor operations become part "
                          "of the graph, counted when their result is used, in the scope the hook runs in.",
               "remove": "Nothing stays after a trace that succeeds. If the forward raises during the trace "
                         "(an untraceable op, a user's hook that raises), the scope hooks are not removed: build "
                         "the analysis on `copy.deepcopy(model)`, or delete the `ScopePushHook` / `ScopePopHook` "
                         "entries from each module's `_forward_pre_hooks` / `_forward_hooks`.",
               "api": "`set_op_handle(\"aten::op\", fn)` counts an operator; there is no hook API. fvcore "
                      "registers at analysis time, so a user's forward pre-hook registered earlier runs before "
                      "the scope is pushed (its operations are counted for the parent), and a user's forward "
                      "hook runs before the scope is popped (counted for the module)."},
        "zh": {"summary": "构造 `FlopCountAnalysis` 时什么也不做；第一次调用 `total()` / `by_module()` 时，它给"
                          "每个模块注册一个 `ScopePushHook` 前向前置钩子和一个 `ScopePopHook` 前向钩子，在 JIT "
                          "跟踪器下跑一遍前向（保持模型当前的模式，开着梯度），然后移除钩子；之后的查询复用这次的"
                          "结果。用户的钩子在这遍被跟踪的前向里像普通 Python 代码一样运行：其中的张量运算会进入计算"
                          "图，只要结果被用到就会被计数，并记在钩子运行时所处的作用域下。",
               "remove": "跟踪成功后什么也不留。若跟踪过程中前向抛出异常（无法跟踪的算子、用户钩子报错），作用域"
                         "钩子不会被移除：请在 `copy.deepcopy(model)` 上做分析，或从各模块的 "
                         "`_forward_pre_hooks` / `_forward_hooks` 中删掉 `ScopePushHook` / `ScopePopHook`。",
               "api": "`set_op_handle(\"aten::op\", fn)` 为算子指定计数函数；没有钩子 API。fvcore 在分析时才注册"
                      "钩子，所以用户先前注册的前向前置钩子在作用域压栈之前运行（其运算记在父模块名下），用户的前向"
                      "钩子则在作用域出栈之前运行（记在该模块名下）。"},
    },
    surprises=(
        {"fact": "facts.hooks_left_after_trace_error",
         "en": "If the traced forward raises, fvcore's scope hooks stay on every module: it removes them after "
               "the trace, not in a `finally`.",
         "zh": "被跟踪的前向一旦抛出异常，fvcore 的作用域钩子就会留在每个模块上：它在跟踪结束后移除钩子，"
               "而不是在 `finally` 里。"},
        {"fact": "facts.user_hook_matmul_counted_for",
         "en": "A matrix product computed in a user's forward hook (and used) is counted as the layer's FLOPs; "
               "the same product in a user's forward pre-hook is counted only for the parent.",
         "zh": "用户前向钩子里算出并被用到的矩阵乘法，会计入该层的 FLOPs；同样的乘法放在用户的前向前置钩子里，"
               "则只记在父模块名下。"},
    ),
)
TARGET = "0"
PROBES = {"deepcopy", "compile", "checkpoint", "accumulate"}
SKIPPED = {p: "fvcore removes its scope hooks once the trace is done: nothing of it runs in a copy, a compiled or "
              "checkpointed forward, or a second backward" for p in PROBES}


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),)


def _analysis(model: nn.Module):
    from fvcore.nn import FlopCountAnalysis
    return FlopCountAnalysis(model, inputs()).unsupported_ops_warnings(False).uncalled_modules_warnings(False)


def apply(model: nn.Module) -> nn.Module:
    _analysis(model).total()
    return model


def facts() -> dict:
    model = build()
    seen: list[dict] = []
    model[0].register_forward_hook(lambda m, a, o: seen.append(
        {"tracing": torch._C._get_tracing_state() is not None, "grad": torch.is_grad_enabled()}))
    analysis = _analysis(model)
    out = {"forwards_when_built": len(seen)}
    analysis.total()
    analysis.by_module()
    out.update(forwards_after_two_queries=len(seen), user_hook_runs_under_tracer=seen[0]["tracing"],
               user_hook_grad_enabled=seen[0]["grad"],
               hooks_left=sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules()) - 1)
    base = _analysis(build()).by_module()
    counted = {}
    for label, register in (("forward", lambda m, fn: m.register_forward_hook(lambda mod, a, o: fn(o))),
                            ("forward_pre", lambda m, fn: m.register_forward_pre_hook(lambda mod, a: (fn(a[0]),)))):
        model = build()
        register(model[0], lambda t: t @ torch.eye(t.shape[-1]))
        got = _analysis(model).by_module()
        counted[label] = sorted(k for k in got if got[k] != base[k])
    out["user_hook_matmul_counted_for"] = counted
    model = build()
    model.register_forward_hook(lambda m, a, o: (torch.matmul(o.T, o), None)[1])
    out["unused_matmul_counted"] = _analysis(model).total() != _analysis(build()).total()
    model = build()

    def _raises(module, args, output):
        raise RuntimeError("a forward that cannot be traced")
    handle = model[2].register_forward_hook(_raises)
    try:
        _analysis(model).total()
    except RuntimeError:
        pass
    handle.remove()
    out["hooks_left_after_trace_error"] = {name or "(root)": len(m._forward_pre_hooks) + len(m._forward_hooks)
                                           for name, m in model.named_modules()}
    return out
