"""torch (FSDP1: ``FullyShardedDataParallel``): a wrapper module per wrapped layer that flattens the parameters into
one ``FlatParameter``; its own ``forward`` gathers them, tensor hooks on the outputs and a hook on the flat
parameter's ``AccumulateGrad`` node drive backward. Measured in a one-process gloo group on the CPU."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._gloo import one_process_group
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/distributed/fsdp"
LIBRARY = Library(
    title='FSDP1 (FullyShardedDataParallel)', slug="fsdp1", name="torch", category="distributed and memory",
    entry="FullyShardedDataParallel(model, device_id=torch.device('cpu'), "
          "auto_wrap_policy=ModuleWrapPolicy({nn.Linear}))",
    names=("FullyShardedDataParallel", "FlatParameter", "_fsdp_wrapped_module", "ModuleWrapPolicy", "use_orig_params",
           "register_comm_hook", "ShardingStrategy", "NO_SHARD", "_pre_backward_hook", "_post_backward_hook",
           "device_id"),
    sources=(f"{SRC}/_init_utils.py#L369-L392", f"{SRC}/_init_utils.py#L428-L438",
             f"{SRC}/fully_sharded_data_parallel.py#L835-L860", f"{SRC}/_runtime_utils.py#L1400-L1413",
             f"{SRC}/_runtime_utils.py#L1416-L1471", f"{SRC}/_state_dict_utils.py#L898-L914",
             f"{SRC}/fully_sharded_data_parallel.py#L1982-L2037"),
    words={
        "en": {"summary": "PyTorch's own FSDP1 wraps each policy-selected layer in a `FullyShardedDataParallel` "
                          "module (the layer moves to `._fsdp_wrapped_module`) and flattens its parameters into one "
                          "`FlatParameter`. Its hooks are not module hooks: the wrapper's `forward` gathers, a tensor "
                          "hook on each output gathers again for backward, and a hook on the flat parameter's "
                          "`AccumulateGrad` node reduces the gradient. The parameters you see are views of the flat "
                          "one, so autograd never reaches them: hooks on them stay silent.",
               "remove": "None: unwrap by building the model again (a full state dict with plain keys comes from "
                         "`model.state_dict()`; the wrappers' state-dict hooks strip `_fsdp_wrapped_module.`). "
                         "Hook the inner layer (`._fsdp_wrapped_module`) or the wrapper, never its parameters.",
               "api": "`fsdp.register_comm_hook(state, hook)` on the root only, once: for `NO_SHARD` "
                      "`hook(state, grad)` replaces the all-reduce of each flat gradient, and runs after the "
                      "layer's module backward hooks (it runs from the flat parameter's `AccumulateGrad` hook)."},
        "zh": {"summary": "PyTorch 自带的 FSDP1 把策略选中的每一层包进一个 `FullyShardedDataParallel` 模块（原层移到 "
                          "`._fsdp_wrapped_module`），并把它的参数拍平成一个 `FlatParameter`。它的钩子不是模块钩子："
                          "包装器自己的 `forward` 负责 all-gather，每个输出上的张量钩子在反向前再 gather 一次，"
                          "平参数的 `AccumulateGrad` 节点上的钩子负责归约梯度。你看到的参数只是平参数的视图，"
                          "autograd 根本不会走到它们：挂在上面的钩子一声不响。",
               "remove": "无法撤销：只能重建模型（`model.state_dict()` 给出不带前缀的完整 state dict，包装器的 "
                         "state dict 钩子会去掉 `_fsdp_wrapped_module.`）。钩子挂在内层模块（`._fsdp_wrapped_module`）"
                         "或包装器上，不要挂在它的参数上。",
               "api": "`fsdp.register_comm_hook(state, hook)` 只能在根实例上调用一次：`NO_SHARD` 时 "
                      "`hook(state, grad)` 取代每个平梯度的 all-reduce，在该层的模块反向钩子之后运行（它由平参数 "
                      "`AccumulateGrad` 上的钩子调用）。"}},
    surprises=(
        {"fact": "facts.param_hooks_fire",
         "en": "Tensor and post-accumulate-grad hooks on the model's parameters never fire under FSDP1, with "
               "`use_orig_params=True` too: gradients flow into the `FlatParameter`.",
         "zh": "在 FSDP1 下，模型参数上的张量钩子和累加后钩子永远不会触发，`use_orig_params=True` 也一样：梯度流向的"
               "是 `FlatParameter`。"},
        {"fact": "facts.device_id_none_on_cpu",
         "en": "On a machine without an accelerator, `device_id=None` raises; `device_id=torch.device('cpu')` runs "
               "(with gloo), and at world size 1 FSDP silently switches to `NO_SHARD`.",
         "zh": "在没有加速器的机器上，`device_id=None` 会报错；`device_id=torch.device('cpu')` 可以跑（用 gloo），"
               "而世界大小为 1 时 FSDP 会自动改用 `NO_SHARD`。"}),
)
TARGET = "0"
PROBES = {"deepcopy"}
SKIPPED = {"deepcopy": "FSDP1 keeps its process group on the module: deepcopy raises TypeError (cannot pickle it)"}


def apply(model: nn.Module, *, device_id: str | None = "cpu", **kwargs) -> nn.Module:
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    one_process_group()
    return FullyShardedDataParallel(model, device_id=None if device_id is None else torch.device(device_id),
                                    auto_wrap_policy=ModuleWrapPolicy({nn.Linear}), **kwargs)


def facts() -> dict:
    """``device_id=None`` on the CPU; which parameter hooks fire (both ``use_orig_params``); the comm hook's order
    against module backward hooks; the names a user sees."""
    try:
        apply(build(), device_id=None)
        none_on_cpu = "runs"
    except Exception as exc:  # noqa: BLE001 - the refusal is the fact
        none_on_cpu = f"raises {type(exc).__name__}"
    fired = {}
    for orig in (False, True):
        model, log = build(), []
        model[0].weight.register_hook(lambda g, log=log: log.append("tensor"))
        model[0].weight.register_post_accumulate_grad_hook(lambda p, log=log: log.append("post_accumulate_grad"))
        apply(model, use_orig_params=orig)(*inputs()).sum().backward()
        fired[f"use_orig_params={orig}"] = {kind: kind in log for kind in ("tensor", "post_accumulate_grad")}
    model, log = build(), []
    for i in (0, 2):
        model[i].register_full_backward_hook(lambda m, gi, go, i=i: log.append(f"yours: backward {i}"))
    fsdp = apply(model)
    fsdp.register_comm_hook(None, lambda state, grad: log.append(f"FSDP: comm hook ({grad.numel()} values)"))
    fsdp(*inputs()).sum().backward()
    return {"device_id_none_on_cpu": none_on_cpu, "param_hooks_fire": fired, "backward_order": log,
            "sharding_strategy_at_world_size_1": fsdp.sharding_strategy.name,
            "parameter_names": [n for n, _ in fsdp.named_parameters()], "state_dict_keys": sorted(fsdp.state_dict())}
