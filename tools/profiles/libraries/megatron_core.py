"""megatron-core: its ``DistributedDataParallel`` hooks each parameter's ``AccumulateGrad`` node (moves the gradient
into ``param.main_grad`` and starts the bucket's reduction) and, with ``overlap_param_gather``, puts a forward
pre-hook on every module. Read from the source: it needs CUDA and NCCL process groups."""
from __future__ import annotations

from ..spec import Library

SRC = "https://github.com/NVIDIA/Megatron-LM/blob/core_v0.19.0/megatron/core/distributed/"
DDP = SRC + "distributed_data_parallel.py"
LIBRARY = Library(
    slug="megatron_core", name="megatron-core", import_name="megatron.core", status="source",
    category="distributed and memory",
    entry="megatron.core.distributed.DistributedDataParallel(config, ddp_config, module)",
    names=("DistributedDataParallel", "DistributedDataParallelConfig", "_make_backward_post_hook",
           "_make_forward_pre_hook", "enable_forward_pre_hook", "disable_forward_pre_hook", "register_grad_ready",
           "main_grad", "grad_added_to_main_grad", "grad_accs", "overlap_grad_reduce", "overlap_param_gather",
           "no_sync", "finish_grad_sync", "zero_grad_buffer", "start_param_sync"),
    sources=(DDP + "#L355-L398", DDP + "#L400-L466", DDP + "#L468-L502", DDP + "#L504-L512",
             SRC + "param_and_grad_buffer.py#L857-L879"),
    why_source={"en": "megatron-core's DistributedDataParallel needs CUDA and initialized model-parallel process "
                      "groups (NCCL); read at tag core_v0.19.0 (commit 5be96267).",
                "zh": "megatron-core 的 DistributedDataParallel 需要 CUDA 和初始化好的模型并行进程组（NCCL）；"
                      "按 core_v0.19.0 标签（提交 5be96267）阅读源码。"},
    installs=(
        {"where": "each parameter that requires grad", "kind": "grad_accumulator node hook",
         "what": "`param.expand_as(param).grad_fn.next_functions[0][0].register_hook(_make_backward_post_hook(param))`"
                 ": after autograd accumulates `param.grad`, adds it to `param.main_grad`, sets `param.grad = None` "
                 "and, with `overlap_grad_reduce`, calls the bucket group's `register_grad_ready(param)`, which "
                 "starts the bucket's all-reduce / reduce-scatter on the last microbatch once every parameter of "
                 "the bucket is ready"},
        {"where": "every module (only with overlap_param_gather)", "kind": "forward_pre",
         "what": "`_make_forward_pre_hook()`: waits for the all-gather of the bucket holding this module's own "
                 "parameters (`finish_param_sync`) before its forward"},
    ),
    order={"en": "Backward: your tensor hooks (`param.register_hook`) run before the gradient is accumulated, your "
                 "post-accumulate-grad hooks inside the `AccumulateGrad` node, and Megatron's node hook after it: so "
                 "both of yours still see `param.grad`, but after the backward `param.grad` is `None` and the "
                 "gradient is in `param.main_grad` (the reduced one after `finish_grad_sync()`). Forward: "
                 "Megatron's pre-hook is registered when the wrapper is built (or at `enable_forward_pre_hook()`), "
                 "so your forward pre-hooks registered earlier run before the wait for the parameters' all-gather, "
                 "those registered later after it.",
           "zh": "反向：你的张量钩子（`param.register_hook`）在梯度累加之前运行，梯度累加后钩子在 `AccumulateGrad` "
                 "节点内部运行，Megatron 的节点钩子在它之后：所以你的这两种钩子都还能看到 `param.grad`，但反向结束后 "
                 "`param.grad` 是 `None`，梯度在 `param.main_grad` 里（`finish_grad_sync()` 之后是规约过的）。"
                 "前向：Megatron 的前置钩子在包装器构造时（或 `enable_forward_pre_hook()` 时）注册，所以比它早注册的"
                 "前向前置钩子在等待参数 all-gather 之前运行，晚注册的在之后运行。"},
    words={
        "en": {"summary": "Gradient synchronisation is driven by a hook on each parameter's `AccumulateGrad` node "
                          "(kept in `self.grad_accs`), not by a module hook: it moves `param.grad` into the "
                          "contiguous `param.main_grad` buffer and marks the parameter ready for its bucket's "
                          "reduction. With the distributed optimizer's `overlap_param_gather`, every module also "
                          "gets a forward pre-hook that waits for its parameters' all-gather. Read gradients in "
                          "a tensor or post-accumulate-grad hook, or from `param.main_grad`, never from "
                          "`param.grad` after the backward.",
               "remove": "The node hooks have no handle kept (only the nodes in `grad_accs`): they go with the "
                         "wrapper. The forward pre-hooks come off with `disable_forward_pre_hook()` (which also "
                         "syncs the parameters) and back with `enable_forward_pre_hook()`; `no_sync()` delays the "
                         "reduction for gradient accumulation.",
               "api": "No callback API: `model.zero_grad_buffer()` before a step's microbatches, `no_sync()` for "
                      "all but the last, `finish_grad_sync()` after the backward, `start_param_sync()` after the "
                      "optimizer step."},
        "zh": {"summary": "梯度同步由每个参数的 `AccumulateGrad` 节点上的钩子驱动（节点保存在 `self.grad_accs`），"
                          "而不是模块钩子：它把 `param.grad` 挪进连续的 `param.main_grad` 缓冲区，并把该参数标记为"
                          "所在 bucket 可以规约。用分布式优化器并开启 `overlap_param_gather` 时，每个模块还会多一个"
                          "前向前置钩子，等待自己参数的 all-gather 完成。梯度要在张量钩子或梯度累加后钩子里读，或者读 "
                          "`param.main_grad`，反向结束后不要读 `param.grad`。",
               "remove": "节点钩子没有保存句柄（只保存了 `grad_accs` 里的节点），随包装器一起消失。前向前置钩子用 "
                         "`disable_forward_pre_hook()` 移除（同时同步一次参数），用 `enable_forward_pre_hook()` "
                         "装回；梯度累积时用 `no_sync()` 推迟规约。",
               "api": "没有回调 API：一步的 microbatch 之前调用 `model.zero_grad_buffer()`，除最后一个外都放在 "
                      "`no_sync()` 里，反向后调用 `finish_grad_sync()`，优化器更新后调用 `start_param_sync()`。"},
    },
    surprises=(
        {"fact": "source: " + DDP + "#L468-L502",
         "en": "After the backward every `param.grad` is `None`: Megatron's hook on the `AccumulateGrad` node moved "
               "it into `param.main_grad`.",
         "zh": "反向结束后每个 `param.grad` 都是 `None`：Megatron 挂在 `AccumulateGrad` 节点上的钩子已经把它挪进了 "
               "`param.main_grad`。"},
    ),
)
