"""torch (tensor parallelism: ``parallelize_module``): each planned module gets a forward pre-hook that turns its
inputs into ``DTensor``s and a forward hook that lays out (and by default unwraps) its output, appended after the
hooks already there; its parameters are replaced by new ``DTensor`` parameters. Measured on a one-rank CPU mesh."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._gloo import one_process_group
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/distributed/tensor"
LIBRARY = Library(
    title='tensor parallel (parallelize_module)', slug="tensor_parallel", name="torch", category="distributed and memory",
    entry="parallelize_module(model, init_device_mesh('cpu', (1,)), "
          "{'0': ColwiseParallel(), '2': RowwiseParallel()})",
    names=("parallelize_module", "ColwiseParallel", "RowwiseParallel", "SequenceParallel", "PrepareModuleInput",
           "PrepareModuleOutput", "distribute_module", "DeviceMesh", "init_device_mesh", "DTensor",
           "use_local_output", "input_layouts", "output_layouts"),
    sources=(f"{SRC}/parallel/api.py#L84-L136", f"{SRC}/parallel/style.py#L121-L175",
             f"{SRC}/_api.py#L1307-L1385"),
    words={
        "en": {"summary": "PyTorch's own tensor parallelism: `parallelize_module` calls `distribute_module` on each "
                          "planned module, which replaces its parameters with new `DTensor` parameters and appends "
                          "two plain lambdas: a forward pre-hook (`input_fn`: inputs become `DTensor`s with the "
                          "desired layout) and a forward hook (`output_fn`: redistributes the output and, with "
                          "`use_local_output=True`, turns it back into a plain tensor). What your hook sees depends "
                          "on when you registered it: before `parallelize_module` a pre-hook gets plain tensors and "
                          "a forward hook the raw `DTensor` output; after it, the other way round.",
               "remove": "None: `parallelize_module` keeps no handles and does not undo; build the model again. "
                         "Register parameter hooks after it (the old parameters are gone).",
               "api": "No hook API of its own; the hooks come from `ParallelStyle` objects (`ColwiseParallel`, "
                      "`RowwiseParallel`, `SequenceParallel`, `PrepareModuleInput`, `PrepareModuleOutput`), each "
                      "appending its `input_fn` / `output_fn` hook in plan order."},
        "zh": {"summary": "PyTorch 自带的张量并行：`parallelize_module` 对计划中的每个模块调用 `distribute_module`，"
                          "把参数换成新的 `DTensor` 参数，并追加两个普通的 lambda：前向前置钩子（`input_fn`：把输入变成"
                          "指定布局的 `DTensor`）和前向钩子（`output_fn`：重新分布输出，`use_local_output=True` 时再变回"
                          "普通张量）。你的钩子看到什么取决于注册的先后：在 `parallelize_module` 之前注册的前置钩子拿到"
                          "普通张量、前向钩子拿到原始的 `DTensor` 输出；之后注册的正好相反。",
               "remove": "无法撤销：`parallelize_module` 不保留句柄，也没有反向操作；只能重建模型。参数钩子要在它之后"
                         "注册（原来的参数对象已被替换）。",
               "api": "没有自己的钩子 API；钩子来自各个 `ParallelStyle`（`ColwiseParallel`、`RowwiseParallel`、"
                      "`SequenceParallel`、`PrepareModuleInput`、`PrepareModuleOutput`），按计划顺序各自追加 "
                      "`input_fn` / `output_fn` 钩子。"}},
    surprises=(
        {"fact": "facts.types_seen",
         "en": "The same forward hook sees a `DTensor` output if registered before `parallelize_module` and a plain "
               "tensor if registered after: the library's hooks are appended between them.",
         "zh": "同一个前向钩子，在 `parallelize_module` 之前注册就看到 `DTensor` 输出，之后注册则看到普通张量：库的钩子"
               "正好追加在两者之间。"},
        {"fact": "facts.param_hook_fires",
         "en": "A gradient hook registered on a parameter before `parallelize_module` never fires: the parameter was "
               "replaced by a new `DTensor` parameter.",
         "zh": "在 `parallelize_module` 之前注册在参数上的梯度钩子永远不会触发：那个参数已被新的 `DTensor` 参数取代。"}),
)
TARGET = "0"
PROBES = {"accumulate"}
SKIPPED = {"accumulate": "the probe's torch.allclose has no DTensor sharding rule; measured as a fact on full_tensor()"}


def apply(model: nn.Module) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    one_process_group()
    mesh = init_device_mesh("cpu", (1,))
    return parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})


def facts() -> dict:
    """The types the user's hooks on layer 0 see (registered before / after), which parameter hooks fire, what the
    state dict holds, and whether two backward passes accumulate."""
    torch.manual_seed(0)
    model, seen, fired = build(), {}, []

    def watch(when: str) -> None:
        model[0].register_forward_pre_hook(lambda m, a: seen.__setitem__(f"forward_pre ({when})", type(a[0]).__name__))
        model[0].register_forward_hook(lambda m, a, o: seen.__setitem__(f"forward ({when})", type(o).__name__))
        model[0].weight.register_hook(lambda g: fired.append(when))

    watch("before")
    apply(model)
    watch("after")
    model(*inputs()).sum().backward()
    once = model[0].weight.grad.full_tensor().clone()
    model(*inputs()).sum().backward()
    state = model.state_dict()
    return {"types_seen": dict(sorted(seen.items())),
            "param_hook_fires": {when: when in fired for when in ("before", "after")},
            "state_dict_value_types": sorted({type(v).__name__ for v in state.values()}),
            "two_backwards_accumulate": torch.allclose(2 * once, model[0].weight.grad.full_tensor())}
