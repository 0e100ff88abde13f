"""deepspeed: ZeRO stage 3 (``deepspeed.initialize`` with ``zero_optimization.stage=3``) registers forward pre-hooks
and forward hooks on every module (they gather and release the partitioned parameters and attach autograd functions
for the backward) and a post-accumulate-grad hook on every parameter; it also replaces ``torch.nn.functional.linear``.
Run on one CPU process over ``gloo``."""
from __future__ import annotations

import atexit
import os
import tempfile

import torch
from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/deepspeedai/DeepSpeed/blob/v0.19.8/deepspeed/"
CONFIG = {"train_batch_size": 3, "zero_allow_untested_optimizer": True,
          "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 0}}
LIBRARY = Library(
    slug="deepspeed", name="deepspeed", requirement="deepspeed==0.19.8", category="distributed and memory",
    entry="deepspeed.initialize(model=model, optimizer=torch.optim.SGD(...), config={'zero_optimization': "
          "{'stage': 3}, ...})",
    names=("deepspeed.initialize", "DeepSpeedEngine", "DeepSpeedZeRoOffload", "_register_deepspeed_module",
           "_pre_forward_module_hook", "_post_forward_module_hook", "_pre_backward_module_hook",
           "_post_backward_module_hook", "_start_of_forward_hook", "zero.Init", "zero3_linear_wrap",
           "stage3_param_persistence_threshold", "ds_status", "GatheredParameters", "engine.backward",
           "engine.destroy"),
    sources=(SRC + "runtime/zero/parameter_offload.py#L299-L315", SRC + "runtime/zero/parameter_offload.py#L337-L529",
             SRC + "runtime/zero/partition_parameters.py#L412-L419"),
    words={
        "en": {"summary": "ZeRO-3 adds to every module a forward pre-hook that gathers its parameters "
                          "(`_pre_forward_module_hook`) and one that wraps the inputs in an autograd function for "
                          "the backward release (`_post_backward_module_hook`), a forward hook that releases them "
                          "(`_post_forward_module_hook`) and one that wraps the outputs for the backward gather "
                          "(`_pre_backward_module_hook`); the root also gets `_start_of_forward_hook` and the "
                          "engine's own pre/post hooks, and each parameter a post-accumulate-grad hook that moves "
                          "its gradient into the partition. Your hooks registered before `initialize` run before "
                          "deepspeed's on the same module, those registered after run after them. Between steps a "
                          "parameter is an empty tensor (`numel() == 0`), and `torch.nn.functional.linear` stays "
                          "replaced by `zero3_linear_wrap` for the whole process.",
               "remove": "`engine.destroy()` removes the ZeRO module hooks (the engine's own pre/post hooks on the "
                         "root stay); `\"memory_efficient_linear\": false` in `zero_optimization` keeps "
                         "`F.linear` as it is; read a full parameter with "
                         "`deepspeed.zero.GatheredParameters(params)` rather than from a hook; a gradient is read in "
                         "a tensor hook (or `deepspeed.utils.safe_get_full_grad`), since `param.grad` is `None` "
                         "after the backward.",
               "api": "No per-step callback API; the order of one step is `engine(x)` (forward hooks), "
                      "`engine.backward(loss)` (backward hooks, then the partitioning of gradients), "
                      "`engine.step()`. `deepspeed.zero.Init()` partitions parameters as modules are built, "
                      "before any hook exists."},
        "zh": {"summary": "ZeRO-3 给每个模块加上：一个收集参数的前向前置钩子（`_pre_forward_module_hook`）和一个把输入"
                          "包进 autograd 函数、供反向时释放参数的前向前置钩子（`_post_backward_module_hook`），一个释放"
                          "参数的前向钩子（`_post_forward_module_hook`）和一个把输出包起来、供反向时收集参数的前向钩子"
                          "（`_pre_backward_module_hook`）；根模块还有 `_start_of_forward_hook` 和 engine 自己的前后钩子，"
                          "每个参数再加一个梯度累加后钩子，把梯度搬进分片。`initialize` 之前注册的钩子在同一模块上先于 "
                          "deepspeed 的运行，之后注册的在它们之后运行。两步之间参数是空张量（`numel() == 0`），"
                          "而且整个进程里 `torch.nn.functional.linear` 都被换成了 `zero3_linear_wrap`。",
               "remove": "`engine.destroy()` 移除 ZeRO 的模块钩子（根模块上 engine 自己的前后钩子还在）；在 "
                         "`zero_optimization` 里设 `\"memory_efficient_linear\": false` 可以不替换 `F.linear`；"
                         "要读完整参数用 `deepspeed.zero.GatheredParameters(params)`，"
                         "不要在钩子里直接读；梯度要在张量钩子里读（或用 `deepspeed.utils.safe_get_full_grad`），"
                         "因为反向结束后 `param.grad` 是 `None`。",
               "api": "没有逐步的回调 API；一步的顺序是 `engine(x)`（前向钩子）、`engine.backward(loss)`（反向钩子，"
                      "然后把梯度分片）、`engine.step()`。`deepspeed.zero.Init()` 在构建模块时就把参数分片，"
                      "那时还没有任何钩子。"},
    },
    surprises=(
        {"fact": "facts.functional_linear",
         "en": "After `deepspeed.initialize` with ZeRO-3, `torch.nn.functional.linear` is deepspeed's "
               "`zero3_linear_wrap` in the whole process, for every model, and stays so after `engine.destroy()`.",
         "zh": "用 ZeRO-3 调用 `deepspeed.initialize` 之后，整个进程里的 `torch.nn.functional.linear` 都变成了 "
               "deepspeed 的 `zero3_linear_wrap`，对所有模型都是如此，`engine.destroy()` 之后也不恢复。"},
        {"fact": "facts.grad_after_backward",
         "en": "Your tensor hook and post-accumulate-grad hook see the full gradient, but after the backward "
               "`param.grad` is `None`: deepspeed's own post-accumulate-grad hook moved it into the partition.",
         "zh": "你的张量钩子和梯度累加后钩子能看到完整梯度，但反向结束后 `param.grad` 是 `None`："
               "deepspeed 自己的梯度累加后钩子已经把它搬进了分片。"},
        {"fact": "facts.weight_numel",
         "en": "Between steps `module.weight.numel()` is 0; inside the forward and backward your hooks see the full "
               "weight, also a forward pre-hook registered before deepspeed's.",
         "zh": "两步之间 `module.weight.numel()` 是 0；在前向和反向里你的钩子看到的是完整权重，"
               "即使是比 deepspeed 更早注册的前向前置钩子也一样。"},
    ),
)
TARGET = "0"
PROBES = {"accumulate"}
SKIPPED = {"accumulate": "DeepSpeedEngine.zero_grad() takes no set_to_none, and after a backward param.grad is None "
                         "(the gradient is in the optimizer's partition: facts.grad_after_backward)"}


def _distributed() -> None:
    """One CPU process over gloo, set up from a file (no network), taken down at exit."""
    import torch.distributed as dist
    if not dist.is_initialized():
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
        store = tempfile.NamedTemporaryFile(prefix="ds-profile-", delete=False).name
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
        atexit.register(lambda: (dist.destroy_process_group(), os.path.exists(store) and os.remove(store)))


def apply(model: nn.Module) -> nn.Module:
    import deepspeed
    _distributed()
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.0),
                                      config=CONFIG)
    return engine


def remove(model: nn.Module) -> nn.Module:
    model.destroy()
    return model


def facts() -> dict:
    import deepspeed
    _distributed()
    seen: dict[str, list] = {}
    model = build()
    layer = model[0]

    def note(label: str, value) -> None:
        seen.setdefault(label, []).append(value)

    def user_hooks(when: str) -> None:
        layer.register_forward_pre_hook(lambda m, a: note(f"{when}: forward_pre", m.weight.numel()))
        layer.register_forward_hook(lambda m, a, o: note(f"{when}: forward", m.weight.numel()))
        layer.register_full_backward_hook(lambda m, gi, go: note(f"{when}: backward", m.weight.numel()))
        layer.weight.register_hook(lambda g: note(f"{when}: tensor hook, grad numel", g.numel()))
        layer.weight.register_post_accumulate_grad_hook(
            lambda p: note(f"{when}: post_accumulate_grad, grad numel", None if p.grad is None else p.grad.numel()))
    user_hooks("registered before initialize")
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                      config=CONFIG)
    user_hooks("registered after initialize")
    between = [layer.weight.numel()]
    grads = []
    for _ in range(2):
        engine.backward(engine(*inputs()).pow(2).mean())
        grads.append(layer.weight.grad is None)
        engine.step()
        between.append(layer.weight.numel())
    linear = {"after initialize": torch.nn.functional.linear.__qualname__}
    engine.destroy()
    linear["after engine.destroy()"] = torch.nn.functional.linear.__qualname__
    with deepspeed.zero.Init(config_dict_or_path=CONFIG):
        built = build()
    return {"weight_numel": {"between steps": between, **seen},
            "grad_after_backward": "None" if all(grads) else "kept",
            "functional_linear": linear,
            "zero_init_weight_numel": built[0].weight.numel(),
            "zero_init_module_hooks": sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in built.modules())}
