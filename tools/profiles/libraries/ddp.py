"""torch (DDP): ``DistributedDataParallel`` wraps the model and averages gradients with its C++ reducer, whose autograd
hooks sit on the parameters' ``AccumulateGrad`` nodes where no hook dict shows them; measured in a one-process gloo
group."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._gloo import one_process_group
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/nn/parallel/distributed.py"
LIBRARY = Library(
    title='DistributedDataParallel', slug="ddp", name="torch", category="distributed and memory",
    entry="torch.nn.parallel.DistributedDataParallel(model)",
    names=("DistributedDataParallel", "register_comm_hook", "no_sync", "Reducer", "GradBucket", "AccumulateGrad",
           "prepare_for_backward", "ddp_comm_hooks", "bucket_cap_mb", "gradient_as_bucket_view"),
    sources=(f"{SRC}#L1447-L1470", f"{SRC}#L1681-L1707", f"{SRC}#L1837-L1862", f"{SRC}#L1906-L1914",
             f"{SRC}#L2200-L2280"),
    words={
        "en": {"summary": "PyTorch's own `DistributedDataParallel` wraps the model (`model.module` is yours) and "
                          "builds a C++ `Reducer` that hooks every parameter's `AccumulateGrad` node: when a bucket's "
                          "gradients are all accumulated it all-reduces them. None of this is in a hook dict, so "
                          "`hooklab.all_hooks` shows only the wrapper. Your module hooks run as before; your tensor "
                          "and post-accumulate-grad hooks on parameters run first and see this process's gradient, "
                          "not the averaged one.",
               "remove": "No off switch: drop the wrapper and call `model.module` (the reducer's hooks go with the "
                         "`DistributedDataParallel` object). To skip the sync for a few steps use "
                         "`with ddp.no_sync():` around forward and backward.",
               "api": "`ddp.register_comm_hook(state, hook)` replaces the all-reduce: `hook(state, bucket)` gets "
                      "a `GradBucket` and returns a `Future` of the bucket's new buffer. It runs once per bucket "
                      "after all the bucket's parameters got their gradients, that is after your tensor hooks and "
                      "post-accumulate-grad hooks on those parameters; the result is written to `.grad` at the end "
                      "of backward."},
        "zh": {"summary": "PyTorch 自带的 `DistributedDataParallel` 把模型包一层（原模型在 `model.module`），并建一个 "
                          "C++ 的 `Reducer`，在每个参数的 `AccumulateGrad` 节点上挂钩子：一个梯度桶里的梯度都累加好后就做 "
                          "all-reduce。这些钩子不在任何钩子字典里，`hooklab.all_hooks` 只能看到外层包装。你的模块钩子照常"
                          "运行；参数上的张量钩子和累加后钩子先于同步运行，看到的是本进程自己的梯度，而不是平均后的。",
               "remove": "没有开关可关：不用包装、直接调用 `model.module`（reducer 的钩子随 `DistributedDataParallel` "
                         "对象一起消失）。只想跳过几步的同步，就把前向和反向放进 `with ddp.no_sync():`。",
               "api": "`ddp.register_comm_hook(state, hook)` 用自己的通信替换 all-reduce：`hook(state, bucket)` 拿到 "
                      "`GradBucket`，返回装着新缓冲区的 `Future`。每个梯度桶调用一次，时机是梯度桶内参数的梯度全部到齐之后，"
                      "即在这些参数上你的张量钩子和累加后钩子之后；结果在反向结束时才写回 `.grad`。"}},
    surprises=(
        {"fact": "facts.inner_module_backward_comm_hook_calls",
         "en": "Calling `ddp.module(x)` instead of `ddp(x)` skips the gradient sync without a word: the reducer only "
               "acts on a backward that follows DDP's own forward.",
         "zh": "调用 `ddp.module(x)` 而不是 `ddp(x)`，梯度同步就被悄悄跳过：reducer 只处理紧跟在 DDP 自己的前向之后的"
               "反向。"},
        {"fact": "facts.post_accumulate_grad_hook_sees_synced_gradient",
         "en": "A post-accumulate-grad hook (an optimizer-in-backward, a gradient logger) sees the local gradient: "
               "what the communication hook makes of it reaches `.grad` only after every hook has run.",
         "zh": "累加后钩子（反向里的优化器、梯度记录器）看到的是本地梯度：通信钩子的结果要等所有钩子都跑完才写进 "
               "`.grad`。"},
        {"fact": "probe.survives.loads_fresh_state_dict",
         "en": "Every state-dict key gains `module.`: a plain model's state dict does not load into the wrapper "
               "(with `strict=False` nothing at all is loaded), so save and load `ddp.module.state_dict()`.",
         "zh": "所有 state dict 的键都多了 `module.` 前缀：普通模型的 state dict 加载不进包装器（`strict=False` 时"
               "干脆什么也没加载），所以保存和加载都用 `ddp.module.state_dict()`。"}),
)
TARGET = "0"


def apply(model: nn.Module) -> nn.Module:
    one_process_group()
    return nn.parallel.DistributedDataParallel(model)


def _doubling(log: list[str]):
    def comm_hook(state, bucket):
        log.append(f"DDP: comm hook (bucket {bucket.index()}, {len(bucket.parameters())} parameters)")
        future = torch.futures.Future()
        future.set_result(bucket.buffer() * 2)  # visible in .grad: twice the local gradient
        return future
    return comm_hook


def facts() -> dict:
    """A backward with a doubling communication hook, the user's tensor and post-accumulate-grad hooks on two
    parameters; what the post-accumulate-grad hook saw against the final ``.grad``; the hook under ``no_sync`` and
    when the inner module is called directly; a second ``register_comm_hook``."""
    torch.manual_seed(0)
    model, log, seen = build(), [], {}

    def post_accumulate(name):
        def hook(param):
            log.append(f"yours: post_accumulate_grad {name}")
            seen.setdefault(name, param.grad.clone())
        return hook

    for name in ("0.weight", "2.weight"):
        model.get_parameter(name).register_hook(lambda g, n=name: log.append(f"yours: tensor hook {n}"))
        model.get_parameter(name).register_post_accumulate_grad_hook(post_accumulate(name))
    ddp = apply(model)
    ddp.register_comm_hook(None, _doubling(log))
    ddp(*inputs()).sum().backward()
    order = list(log)
    synced = torch.equal(seen["0.weight"], model[0].weight.grad)
    doubled = torch.equal(2 * seen["0.weight"], model[0].weight.grad)
    log.clear()
    with ddp.no_sync():
        ddp(*inputs()).sum().backward()
    under_no_sync = sum("comm hook" in x for x in log)
    log.clear()
    ddp.module(*inputs()).sum().backward()
    inner = sum("comm hook" in x for x in log)
    try:
        ddp.register_comm_hook(None, _doubling(log))
        twice = "accepted"
    except Exception as exc:  # noqa: BLE001 - the refusal is the fact
        twice = f"raises {type(exc).__name__}"
    return {"backward_order": order, "post_accumulate_grad_hook_sees_synced_gradient": synced,
            "final_grad_is_comm_hook_result": doubled,
            "no_sync_comm_hook_calls": under_no_sync, "inner_module_backward_comm_hook_calls": inner,
            "register_comm_hook_twice": twice,
            "reducer_hooks_in_hook_dicts": sum(len(p._backward_hooks or {}) + len(p._post_accumulate_grad_hooks or {})
                                               for p in apply(build()).parameters())}
