"""ptflops: ``get_model_complexity_info`` counts MACs with forward hooks and ``__flops__`` attributes (backend
``pytorch``, which also swaps ``torch.matmul`` and ``F.relu`` for counting wrappers during the call) or with a
``TorchDispatchMode`` plus a forward pre/post hook pair on every direct child (backend ``aten``), which it never
removes; both leave the model in ``eval()``."""
from __future__ import annotations

import io

import torch
from torch import nn

from ..spec import Library

_SRC = "https://github.com/sovrasov/flops-counter.pytorch/blob/v0.7.5/ptflops/"
LIBRARY = Library(
    slug="ptflops", name="ptflops", requirement="ptflops==0.7.5", category="measurement",
    entry="get_model_complexity_info(model, (4,), backend='aten', as_strings=False, print_per_layer_stat=False)",
    names=("get_model_complexity_info", "FLOPS_BACKEND", "FlopCounterMode", "add_flops_counting_methods",
           "start_flops_count", "stop_flops_count", "compute_average_flops_cost", "__flops__", "__params__",
           "__flops_handle__", "__batch_counter__", "custom_modules_hooks", "ignore_modules",
           "patch_tensor_ops", "patch_functional"),
    sources=(_SRC + "flops_counter.py#L25-L129", _SRC + "pytorch_engine.py#L23-L91",
             _SRC + "pytorch_engine.py#L166-L251", _SRC + "pytorch_engine.py#L434-L474",
             _SRC + "aten_engine.py#L25-L46", _SRC + "aten_engine.py#L102-L146"),
    words={
        "en": {"summary": "Backend `pytorch` (the default in 0.7.5): binds `start_flops_count`, "
                          "`stop_flops_count`, `reset_flops_count` and `compute_average_flops_cost` onto the "
                          "model, puts a forward hook on the root (batch counter) and on every module of a known "
                          "type (with `__flops__`, `__params__`, `__flops_handle__`), replaces `torch.matmul`, "
                          "`torch.mm`, `torch.add`, `F.relu`... process-wide for the call, and removes hooks and "
                          "`__flops__` at the end; the four methods and `__batch_counter__` stay on the root. "
                          "Backend `aten`: runs the forward in a `TorchDispatchMode` and registers a forward "
                          "pre-hook and a forward hook on each direct child to track the module path; it keeps no "
                          "handle, so they stay for good. Neither runs under `no_grad`, and both call "
                          "`model.eval()` without switching back.",
               "remove": "Run it on `copy.deepcopy(model)`. Otherwise: call `model.train()` afterwards; for "
                         "`aten`, delete the entries of `child._forward_pre_hooks` / `child._forward_hooks` "
                         "whose function comes from `ptflops.aten_engine` (every call adds another pair); for "
                         "`pytorch`, `del model.__batch_counter__` and the four bound methods if they matter.",
               "api": "`custom_modules_hooks={ModuleType: hook(module, input, output)}` (a forward hook that adds "
                      "to `module.__flops__`) and `ignore_modules`. ptflops registers at call time, so its hooks "
                      "run after the user's hooks registered earlier; products a user's hook computes "
                      "(`torch.matmul`) are counted into the model's MACs by both backends."},
        "zh": {"summary": "`pytorch` 后端（0.7.5 的默认值）：把 `start_flops_count`、`stop_flops_count`、"
                          "`reset_flops_count`、`compute_average_flops_cost` 绑定到模型上，在根模块上挂一个"
                          "统计批大小的前向钩子，在每个已知类型的模块上挂前向钩子（并设置 `__flops__`、"
                          "`__params__`、`__flops_handle__`），调用期间在整个进程范围内把 `torch.matmul`、"
                          "`torch.mm`、`torch.add`、`F.relu` 等换成计数包装，结束时移除钩子和 `__flops__`；"
                          "那四个方法和 `__batch_counter__` 留在根模块上。`aten` 后端：在 `TorchDispatchMode` "
                          "里跑前向，并在每个直接子模块上注册一个前向前置钩子和一个前向钩子来记录模块路径；它不保存句柄，"
                          "这些钩子就永远留下了。两个后端都不在 `no_grad` 下运行，且都调用 `model.eval()` 而不切回去。",
               "remove": "最好在 `copy.deepcopy(model)` 上调用。否则：事后调用 `model.train()`；对 `aten`，删掉 "
                         "`child._forward_pre_hooks` / `child._forward_hooks` 中函数来自 `ptflops.aten_engine` "
                         "的条目（每调用一次就多一对）；对 `pytorch`，如有需要，删掉 `model.__batch_counter__` "
                         "和那四个绑定方法。",
               "api": "`custom_modules_hooks={模块类型: hook(module, input, output)}`（一个把计算量累加到 "
                      "`module.__flops__` 的前向钩子）以及 `ignore_modules`。ptflops 在调用时才注册钩子，所以排在"
                      "用户先前注册的钩子之后；用户钩子里做的乘法（`torch.matmul`）在两个后端下都会被算进模型的 MACs。"},
    },
    surprises=(
        {"fact": "facts.aten_hooks_left_per_child_after_two_calls",
         "en": "With `backend='aten'` every call leaves one more forward pre-hook and forward hook on each direct "
               "child: they run on every later forward, and deep copies carry them.",
         "zh": "使用 `backend='aten'` 时，每调用一次，每个直接子模块上就多留下一个前向前置钩子和一个前向钩子："
               "之后的每次前向都会运行它们，深拷贝也会带上它们。"},
        {"fact": "facts.training_after",
         "en": "Both backends switch the model to `eval()` and leave it there: training continues with dropout "
               "and batch-norm updates off.",
         "zh": "两个后端都会把模型切到 `eval()` 并且不切回来：接着训练时 dropout 和 BatchNorm 的统计更新都被关掉了。"},
        {"fact": "facts.user_matmul_counted",
         "en": "A `torch.matmul` in the user's forward hook is added to the model's MACs by both backends "
               "(`pytorch` swaps `torch.matmul` itself for the call).",
         "zh": "用户前向钩子里的一次 `torch.matmul` 在两个后端下都会被算进模型的 MACs（`pytorch` 后端在调用期间"
               "直接替换了 `torch.matmul`）。"},
    ),
)
TARGET = "0"


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),)


def _count(model: nn.Module, backend: str) -> int:
    from ptflops import get_model_complexity_info
    return get_model_complexity_info(model, (4,), as_strings=False, print_per_layer_stat=False, backend=backend,
                                     ost=io.StringIO())[0]


def apply(model: nn.Module) -> nn.Module:
    _count(model, "aten")
    return model


def _observe(module: nn.Module) -> list[dict]:
    """What a user's forward hook on ``module`` sees each time it runs."""
    seen: list[dict] = []

    def _user_forward(module, args, output):
        seen.append({"grad": torch.is_grad_enabled(), "matmul": type(torch.matmul).__name__,
                     "attrs": sorted(k for k in vars(module) if k.startswith("__"))})
    module.register_forward_hook(_user_forward)
    return seen


def facts() -> dict:
    from hooklab.systems import hook_owner
    out: dict = {"training_after": {}, "user_matmul_counted": {}}
    for backend in ("pytorch", "aten"):
        model = build().train()
        seen = _observe(model[0])
        base = _count(model, backend)
        out["training_after"][backend] = model.training
        out[f"{backend}_user_hook_grad_enabled"] = seen[0]["grad"]
        out[f"{backend}_torch_matmul_during"] = seen[0]["matmul"]
        out[f"{backend}_attributes_on_layer_during"] = seen[0]["attrs"]
        out[f"{backend}_attributes_on_root_after"] = sorted(
            k for k in vars(model) if k not in vars(nn.Sequential()) and not k.startswith("_user"))
        hooks = [f"{name} {kind}" for name, m in model.named_modules()
                 for kind, d in (("forward_pre", m._forward_pre_hooks), ("forward", m._forward_hooks))
                 for fn in d.values() if hook_owner(fn) == "ptflops"]
        out[f"{backend}_hooks_left"] = hooks
        model = build()
        model.register_forward_hook(lambda m, a, o: (torch.matmul(o.T, o), None)[1])
        out["user_matmul_counted"][backend] = _count(model, backend) > base
    model = build()
    _count(model, "aten")
    _count(model, "aten")
    out["aten_hooks_left_per_child_after_two_calls"] = {
        name: len(m._forward_pre_hooks) + len(m._forward_hooks) for name, m in model.named_children()}
    return out
