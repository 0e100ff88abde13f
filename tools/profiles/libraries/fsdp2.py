"""torch (FSDP2: ``fully_shard``): swaps each sharded module's class, turns its parameters into new ``DTensor``
parameters and puts FSDP's forward pre-hook (prepended) and forward hook on it; gradients are reduce-scattered and
assigned to ``.grad`` by FSDP, not by autograd. Measured in a one-process gloo group."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._gloo import one_process_group
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/distributed/fsdp/_fully_shard"
LIBRARY = Library(
    title='FSDP2 (fully_shard)', slug="fsdp2", name="torch", category="distributed and memory",
    entry="torch.distributed.fsdp.fully_shard(model[0]); fully_shard(model)",
    names=("fully_shard", "FSDPModule", "FSDPState", "_pre_forward", "_post_forward", "set_all_reduce_hook",
           "register_fsdp_forward_method", "DTensor", "RegisterPostBackwardFunction", "reshard_after_forward",
           "set_requires_gradient_sync"),
    sources=(f"{SRC}/_fsdp_state.py#L112-L133", f"{SRC}/_fsdp_state.py#L581-L611",
             f"{SRC}/_fsdp_param.py#L375-L384", f"{SRC}/_fsdp_collectives.py#L737-L744",
             f"{SRC}/_fsdp_collectives.py#L812-L827", f"{SRC}/_fully_shard.py#L304-L314",
             f"{SRC}/_fully_shard.py#L791-L820", f"{SRC}/_fully_shard.py#L1179-L1214"),
    words={
        "en": {"summary": "PyTorch's own FSDP2 `fully_shard(module)` changes the module's class to `FSDP<Name>`, "
                          "replaces its parameters with new `DTensor` parameters and registers FSDP's forward "
                          "pre-hook with `prepend=True` (it all-gathers, and runs before every pre-hook of yours, "
                          "even older ones) and its forward hook at the end (it reshards and puts a tensor hook on "
                          "the outputs for backward). Gradients come from the unsharded copies and are assigned to "
                          "the sharded `.grad` after the reduce-scatter: autograd never accumulates into your "
                          "parameter.",
               "remove": "None: `fully_shard` cannot be undone and `copy.deepcopy` raises; build the model again. "
                         "Register parameter hooks after `fully_shard` (the old parameters are gone).",
               "api": "`module.set_all_reduce_hook(hook)`: `hook(tensor)` runs once per parameter group after its "
                      "reduce-scatter (after the all-reduce with HSDP), on the flat reduced gradient, before FSDP "
                      "calls the post-accumulate-grad hooks of that group's parameters. "
                      "`register_fsdp_forward_method(module, 'generate')` wraps another method with FSDP's pre- and "
                      "post-forward logic; your module hooks do not run for it."},
        "zh": {"summary": "PyTorch 自带的 FSDP2：`fully_shard(module)` 把模块的类换成 `FSDP<Name>`，把参数换成新的 "
                          "`DTensor` 参数，并用 `prepend=True` 注册 FSDP 的前向前置钩子（负责 all-gather，排在你所有"
                          "前向前置钩子之前，连更早注册的也不例外），前向钩子则排在最后（重新分片，并在输出上挂张量钩子"
                          "供反向使用）。梯度在未分片的副本上算出，reduce-scatter 后直接赋给分片参数的 `.grad`："
                          "autograd 从不往你的参数上累加。",
               "remove": "无法撤销：`fully_shard` 不可逆，`copy.deepcopy` 会报错；只能重建模型。参数上的钩子要在 "
                         "`fully_shard` 之后注册（原来的参数对象已经不用了）。",
               "api": "`module.set_all_reduce_hook(hook)`：每个参数组在 reduce-scatter 之后（HSDP 时在 all-reduce "
                      "之后）调用一次 `hook(tensor)`，拿到的是拍平后的归约梯度，早于 FSDP 调用该组参数的累加后钩子。"
                      "`register_fsdp_forward_method(module, 'generate')` 给另一个方法包上 FSDP 的前向前后处理；"
                      "这个方法不会触发你的模块钩子。"}},
    surprises=(
        {"fact": "facts.param_hooks_fire",
         "en": "A parameter's `register_hook` never fires under FSDP2, registered before or after `fully_shard`; "
               "a post-accumulate-grad hook fires only if registered after it (FSDP calls it itself).",
         "zh": "在 FSDP2 下，参数上的 `register_hook` 无论在 `fully_shard` 之前还是之后注册都不会触发；累加后钩子"
               "只有在它之后注册才会触发（由 FSDP 自己调用）。"},
        {"fact": "probe.order.forward",
         "en": "FSDP's forward pre-hook is prepended: a pre-hook you registered before `fully_shard` now runs after "
               "it and sees the all-gathered parameters.",
         "zh": "FSDP 的前向前置钩子是插到最前面的：你在 `fully_shard` 之前注册的前置钩子现在排在它后面，看到的是已经 "
               "all-gather 的参数。"},
        {"fact": "facts.deepcopy",
         "en": "`copy.deepcopy` of a `fully_shard` model raises (FSDP forbids it), so EMA or SWA copies must be made "
               "before sharding or from a state dict.",
         "zh": "对 `fully_shard` 之后的模型做 `copy.deepcopy` 会报错（FSDP 明确禁止），EMA、SWA 之类的副本只能在分片"
               "之前做，或者从 state dict 重建。"}),
)
TARGET = "0"
PROBES = {"deepcopy", "accumulate"}
SKIPPED = {"deepcopy": "measured as a fact: fully_shard forbids deepcopy",
           "accumulate": "the probe's torch.allclose has no DTensor sharding rule; measured as a fact on full_tensor()"}


def apply(model: nn.Module) -> nn.Module:
    from torch.distributed.fsdp import fully_shard
    one_process_group()
    fully_shard(model[0])
    return fully_shard(model)


class _Generating(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def forward(self, x):
        return self.layer(x)

    def generate(self, x):
        return self.layer(x) * 2


def _method(register: bool) -> dict:
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method
    model, log = _Generating(), []
    model.register_forward_pre_hook(lambda m, a: log.append("yours: forward_pre"))
    fully_shard(model)
    if register:
        register_fsdp_forward_method(model, "generate")
    try:
        model.generate(*inputs())
        ran = "runs"
    except Exception as exc:  # noqa: BLE001 - a method FSDP does not know about fails: that is the fact
        ran = f"raises {type(exc).__name__}"
    return {"result": ran, "your_hooks_fired": log}


def facts() -> dict:
    """Which parameter hooks fire (registered before / after ``fully_shard``), the backward order of the all-reduce
    hooks against the user's hooks, the class swap, deepcopy, and ``register_fsdp_forward_method``."""
    import copy
    torch.manual_seed(0)
    model, log = build(), []
    weight = model[0].weight
    weight.register_hook(lambda g: log.append("yours (before): tensor hook 0.weight"))
    weight.register_post_accumulate_grad_hook(lambda p: log.append("yours (before): post_accumulate_grad 0.weight"))
    model[0].register_full_backward_hook(lambda m, gi, go: log.append("yours: backward 0"))
    apply(model)
    model[0].weight.register_hook(lambda g: log.append("yours (after): tensor hook 0.weight"))
    model[0].weight.register_post_accumulate_grad_hook(
        lambda p: log.append(f"yours (after): post_accumulate_grad 0.weight ({type(p.grad).__name__} .grad)"))
    model.set_all_reduce_hook(lambda t: log.append("FSDP: all_reduce_hook (root group: 2.*)"))
    model[0].set_all_reduce_hook(lambda t: log.append(f"FSDP: all_reduce_hook (group 0.*, flat {t.dim()}-d)"))
    model(*inputs()).sum().backward()
    order = list(log)
    fired = {f"{kind} ({when})": any(f"({when}): {kind}" in x for x in log)
             for when in ("before", "after") for kind in ("tensor hook", "post_accumulate_grad")}
    model.zero_grad(set_to_none=True)
    grads = []
    for _ in range(2):
        model(*inputs()).sum().backward()
        grads.append(model[0].weight.grad.full_tensor().clone())
    try:
        copy.deepcopy(model)
        copied = "copies"
    except Exception as exc:  # noqa: BLE001 - the refusal is the fact
        copied = f"raises {type(exc).__name__}"
    return {"backward_order": order, "param_hooks_fire": fired, "class_after": type(model[0]).__name__,
            "same_parameter_object": model[0].weight is weight, "deepcopy": copied,
            "two_backwards_accumulate": torch.allclose(2 * grads[0], grads[1]),
            "other_method": {"unregistered": _method(False), "register_fsdp_forward_method": _method(True)}}
