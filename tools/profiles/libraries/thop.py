"""thop (ultralytics-thop): ``thop.profile`` puts a counting forward hook (and a pre/post pair that tracks depth) on
every module with a rule, runs one ``no_grad`` forward in ``eval`` mode inside a ``TorchFunctionMode`` that counts
functional matrix products, then removes the hooks and the ``total_ops`` counters in ``finally``."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

_SRC = "https://github.com/ultralytics/thop/blob/v2.2.3/thop/profile.py"
LIBRARY = Library(
    slug="thop", name="ultralytics-thop", import_name="thop", category="measurement",
    entry="thop.profile(model, inputs=(x,), verbose=False)",
    names=("profile", "profile_origin", "custom_ops", "register_hooks", "functional_hooks", "_FunctionCounter",
           "_register_counter", "total_ops", "total_params", "clever_format", "zero_ops"),
    sources=(_SRC + "#L196-L211", _SRC + "#L238-L254", _SRC + "#L321-L377", _SRC + "#L380-L539"),
    words={
        "en": {"summary": "During one call, every module whose type has a non-zero counting rule "
                          "(`Linear`, convolutions, norms...) gets a forward hook that adds to `module.total_ops`, "
                          "plus a forward pre-hook and a forward hook that mark it as counted; the model runs once in "
                          "`eval()` under `no_grad` and inside a "
                          "`TorchFunctionMode` that counts `matmul`, `bmm`, `einsum`, `F.linear` and attention "
                          "calls made outside such modules. `profile` keeps `total_ops` as a plain attribute, the "
                          "older `profile_origin` as a buffer, so for the length of that call it is in "
                          "`state_dict()`. Both remove hooks and counters and restore each module's mode.",
               "remove": "Nothing stays: no hook, no `total_ops`, and each module's own `training` flag is put "
                         "back. A `total_ops` the user already had is shadowed during the call and restored.",
               "api": "`custom_ops={ModuleType: fn(module, inputs, output)}` adds or overrides a counting rule; "
                      "thop registers at call time, so its hooks run after the user's hooks registered earlier "
                      "on the same module. The user's hooks run inside the counted forward: a product they "
                      "compute is added to the total unless it runs between thop's pre-hook and its counting "
                      "hook on a module with a rule."},
        "zh": {"summary": "在一次调用期间，凡是类型有非零计数规则的模块（`Linear`、卷积、归一化等）都会挂上"
                          "一个前向钩子，把计算量累加到 `module.total_ops`，另有一对前向前置钩子/前向钩子标记"
                          "“正在计数的模块”；模型在 `eval()` 和 `no_grad` 下跑一遍前向，外面套着一个 `TorchFunctionMode`，专门统计这些模块之外的 "
                          "`matmul`、`bmm`、`einsum`、`F.linear` 和注意力调用。`profile` 把 `total_ops` 存成普通"
                          "属性，老的 `profile_origin` 则存成缓冲区，所以在那次调用期间它会出现在 `state_dict()` "
                          "里。两者都会移除钩子和计数器，并恢复每个模块各自的模式。",
               "remove": "调用结束后什么也不留：没有钩子，没有 `total_ops`，每个模块自己的 `training` 标志也被放回。"
                         "用户原有的 `total_ops` 在调用期间被暂时遮住，结束后还原。",
               "api": "`custom_ops={模块类型: fn(module, inputs, output)}` 可以新增或覆盖计数规则；thop 在调用时"
                      "才注册钩子，所以在同一模块上排在用户先前注册的钩子之后。用户的钩子在被计数的前向里运行：它们"
                      "做的矩阵乘法会被算进总数，除非恰好落在某个有规则模块的 thop 前置钩子和计数钩子之间。"},
    },
    surprises=(
        {"fact": "facts.user_matmul_counted",
         "en": "A `torch.matmul` inside the user's own forward hook is added to the model's MACs when the hook "
               "sits on the root or on a module without a counting rule (a `Dropout`), and also when it is a "
               "forward pre-hook on a `Linear`; on the `Linear`'s forward hook it is not.",
         "zh": "用户前向钩子里的一次 `torch.matmul`，若钩子挂在根模块或没有计数规则的模块（如 `Dropout`）上，"
               "会被算进模型的 MACs；挂在 `Linear` 的前向前置钩子上也会被算进去，而挂在它的前向钩子上则不会。"},
        {"fact": "facts.profile_origin_buffers_in_state_dict_during",
         "en": "`profile_origin` registers `total_ops` as a buffer on every counted module, so a `state_dict()` "
               "taken by a hook during the call has those extra keys (`profile` does not).",
         "zh": "`profile_origin` 把 `total_ops` 注册成每个被计数模块的缓冲区，所以钩子在调用期间取到的 "
               "`state_dict()` 会多出这些键（`profile` 不会）。"},
    ),
)
TARGET = "0"
PROBES = {"deepcopy", "compile", "checkpoint", "accumulate"}
SKIPPED = {p: "thop removes its hooks and counters before `profile` returns: nothing of it runs in a copy, a "
              "compiled or checkpointed forward, or a second backward" for p in PROBES}


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.Linear(8, 3))


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 4, generator=torch.Generator().manual_seed(0)),)


def apply(model: nn.Module) -> nn.Module:
    import thop
    thop.profile(model, inputs(), verbose=False)
    return model


def _extra_keys(model: nn.Module) -> list[str]:
    return sorted(k for k in model.state_dict() if k.endswith("total_ops") or k.endswith("total_params"))


def facts() -> dict:
    import thop
    from thop.profile import profile_origin

    from hooklab.systems import hook_owner
    model = build().train()
    model[1].eval()
    seen: list[dict] = []

    def _user_forward(module, args, output):
        seen.append({"keys": len(_extra_keys(model)), "grad": torch.is_grad_enabled(), "training": module.training,
                     "order": ["yours" if fn is _user_forward else hook_owner(fn)
                               for fn in module._forward_hooks.values()]})
    handle = model[0].register_forward_hook(_user_forward)
    base = thop.profile(model, inputs(), verbose=False)[0]
    profile_origin(model, inputs(), verbose=False)
    handle.remove()
    out = {"user_forward_hook_grad_enabled": seen[0]["grad"], "user_forward_hook_sees_training": seen[0]["training"],
           "forward_hook_order": seen[0]["order"], "profile_buffers_in_state_dict_during": seen[0]["keys"],
           "profile_origin_buffers_in_state_dict_during": seen[1]["keys"],
           "state_dict_extra_keys_after": len(_extra_keys(model)),
           "total_ops_attribute_left": any("total_ops" in vars(m) for m in model.modules()),
           "modes_restored_per_module": [m.training for m in model] == [True, False, True]}

    def _matmul(module, args, output=None):
        torch.matmul(args[0].T, args[0])
    counted = {}
    for label, where, kind in (("root forward", model, "forward"), ("Dropout forward", model[1], "forward"),
                               ("Linear forward", model[0], "forward"), ("Linear forward_pre", model[0], "pre")):
        h = where.register_forward_pre_hook(_matmul) if kind == "pre" else where.register_forward_hook(_matmul)
        counted[label] = thop.profile(model, inputs(), verbose=False)[0] > base
        h.remove()
    out["user_matmul_counted"] = counted
    return out
