"""nnsight: ``NNsight(model)`` registers no hook at all; it puts a ``Controller`` object as ``forward`` on every
module instance, for good, which hands the module's input and output to the running trace and is inert outside one;
PyTorch's hooks run around it."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

_SRC = "https://github.com/ndif-team/nnsight/blob/v0.8.1/src/nnsight/intervention/"
LIBRARY = Library(
    slug="nnsight", name="nnsight", requirement="nnsight==0.8.1", category="interpretability and attribution",
    entry="with NNsight(model).trace(x): out = envoy[0].output.save()",
    names=("NNsight", "Envoy", "trace", "save", "Controller", "install_controller", "Interleaver", "State",
           "__nnsight__", "input", "output", "skip", "source", "BackwardTracer"),
    sources=(_SRC + "source.py#L40-L48", _SRC + "source.py#L577-L637", _SRC + "source.py#L688-L715",
             _SRC + "interleaver.py#L744-L769"),
    words={
        "en": {"summary": "Wrapping a model in `NNsight` (an `Envoy` tree, not an `nn.Module`) writes a "
                          "`Controller` into `module.__dict__[\"forward\"]` and its state into "
                          "`module.__dict__[\"__nnsight__\"]` on every module, and leaves them there. Inside "
                          "`trace`, the controller hands `.input` to the trace, runs the original forward (unless "
                          "`.skip`), and hands `.output`, taking back whatever the trace wrote; outside a trace it "
                          "just calls the original forward. The hook dicts stay empty, so tools that list hooks "
                          "see nothing, and `torch.compile` or `deepcopy` see a replaced `forward`.",
               "remove": "No API takes it off (installation is permanent by design and costs one Python call per "
                         "module outside a trace). To get a bare model, delete `forward` and `__nnsight__` from "
                         "each module's `__dict__`, or wrap a `copy.deepcopy(model)` instead of the model.",
               "api": "Interventions are written in the `trace` block (`envoy.output`, `envoy.input`, `.skip`, "
                      "`.source`, gradients via `with loss.backward():`). The controller is the forward, so it "
                      "runs inside the module's own hooks: a user's forward pre-hook runs before nnsight sees "
                      "`.input` (its edit is what nnsight gets), and a user's forward hook runs after nnsight "
                      "has handed back `.output` (it sees nnsight's edit; what it returns goes on to the next "
                      "module but is not what `.output` gave the trace)."},
        "zh": {"summary": "用 `NNsight` 包装模型（得到一棵 `Envoy` 树，而不是 `nn.Module`）时，它在每个模块的 "
                          "`module.__dict__[\"forward\"]` 里写入一个 `Controller`，在 `module.__dict__[\"__nnsight__\"]` "
                          "里存放状态，并且一直留着。在 `trace` 里，控制器先把 `.input` 交给追踪，再运行原来的 "
                          "forward（除非 `.skip`），然后交出 `.output`，并取回追踪代码写入的值；在追踪之外它只是调用"
                          "原来的 forward。钩子字典始终为空，所以列钩子的工具什么也看不到，而 `torch.compile` 和 "
                          "`deepcopy` 看到的是被替换过的 `forward`。",
               "remove": "没有 API 能把它卸下（按设计安装是永久的，追踪之外每个模块多一次 Python 调用）。要得到干净"
                         "的模型，就从每个模块的 `__dict__` 里删掉 `forward` 和 `__nnsight__`，或者一开始就包装 "
                         "`copy.deepcopy(model)`。",
               "api": "干预写在 `trace` 块里（`envoy.output`、`envoy.input`、`.skip`、`.source`，梯度用 "
                      "`with loss.backward():`）。控制器本身就是 forward，所以它在模块自己的钩子之内运行：用户的前向"
                      "前置钩子在 nnsight 拿到 `.input` 之前运行（nnsight 拿到的是它改过的值）；用户的前向钩子在 nnsight "
                      "交回 `.output` 之后运行（它看到 nnsight 的修改；它返回的值会传给下一个模块，但不是 `.output` "
                      "交给追踪的那个值）。"},
    },
    surprises=(
        {"fact": "facts.forward_on_instance_after_trace",
         "en": "Wrapping a model in `NNsight` changes the model itself for good: every module keeps an "
               "instance-level `forward` (a `Controller`) after the trace and after the `NNsight` object is gone.",
         "zh": "用 `NNsight` 包装会永久改变模型本身：追踪结束、`NNsight` 对象也没了之后，每个模块仍然带着一个实例"
               "级的 `forward`（一个 `Controller`）。"},
        {"fact": "facts.output_includes_user_forward_hook_edit",
         "en": "`envoy.output` inside a trace is the module's output before the user's forward hooks: a value "
               "a user's forward hook returns reaches the next layer but not the trace.",
         "zh": "追踪里的 `envoy.output` 是用户前向钩子运行之前的模块输出：用户前向钩子返回的新值会传给下一层，"
               "却不会出现在追踪里。"},
    ),
)
TARGET = "0"


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),)


def apply(model: nn.Module) -> nn.Module:
    from nnsight import NNsight
    envoy = NNsight(model)
    with envoy.trace(*inputs()):
        envoy[0].output.save()
    return model


def facts() -> dict:
    from nnsight import NNsight
    model, (x,) = build(), inputs()
    seen: dict[str, bool] = {}
    model[0].register_forward_pre_hook(lambda m, a: (torch.ones_like(a[0]),))

    def _user_forward(module, args, output):
        seen["user_forward_hook_sees_nnsight_edit"] = bool((output == 0).all())
        return output + 5
    model[0].register_forward_hook(_user_forward)
    envoy = NNsight(model)
    with envoy.trace(x):
        given_input = envoy[0].input.save()
        given_output = envoy[0].output.save()
        envoy[0].output = envoy[0].output * 0
        next_input = envoy[1].input.save()
    out = {"input_includes_user_pre_hook_edit": bool((given_input == 1).all()), **seen,
           "user_forward_hook_edit_reaches_next_layer": bool((next_input == 5).all()),
           "output_includes_user_forward_hook_edit": bool(torch.equal(given_output, next_input))}
    controllers = {name or "(root)": f"{type(m.__dict__.get('forward')).__module__}."
                                     f"{type(m.__dict__.get('forward')).__qualname__}"
                   for name, m in model.named_modules()}
    del envoy
    out["forward_on_instance_after_trace"] = controllers
    out["hook_dicts_nnsight_added"] = sum(len(d) for m in model.modules() for d in (
        m._forward_pre_hooks, m._forward_hooks, m._backward_hooks, m._backward_pre_hooks)) - 2
    fresh = build()
    plain = fresh(x).detach()
    NNsight(fresh)
    out["outside_trace_output_unchanged"] = bool(torch.equal(fresh(x).detach(), plain))
    return out
