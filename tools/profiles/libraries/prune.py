"""torch (``torch.nn.utils.prune``): moves the parameter to ``<name>_orig``, adds a ``<name>_mask`` buffer and a forward
pre-hook (the pruning method object itself) that recomputes ``<name> = mask * orig`` before every forward."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/nn/utils/prune.py"
LIBRARY = Library(
    title='torch.nn.utils.prune', slug="prune", name="torch", category="quantization and compression",
    entry="torch.nn.utils.prune.l1_unstructured(model[0], 'weight', amount=0.5)",
    names=("torch.nn.utils.prune", "BasePruningMethod", "PruningContainer", "L1Unstructured", "l1_unstructured",
           "random_unstructured", "global_unstructured", "prune.remove", "is_pruned", "weight_orig", "weight_mask",
           "apply_mask"),
    sources=(f"{SRC}#L20-L31", f"{SRC}#L76-L206", f"{SRC}#L240-L266", f"{SRC}#L1197-L1224"),
    words={
        "en": {"summary": "PyTorch's own pruning registers the pruning method object (`L1Unstructured`, ...) as a "
                          "forward pre-hook, after the pre-hooks already there. The parameter is renamed "
                          "`weight_orig`, a `weight_mask` buffer is added, and `weight` becomes a plain tensor "
                          "attribute that the hook recomputes as `mask * weight_orig` before every forward. Gradients "
                          "land in `weight_orig.grad` (zero where masked); the state dict holds `weight_orig` and "
                          "`weight_mask` instead of `weight`.",
               "remove": "`torch.nn.utils.prune.remove(module, 'weight')`: the pruned values become the parameter "
                         "`weight` again and the hook, `weight_orig` and `weight_mask` go (the pruning itself "
                         "stays).",
               "api": "No callbacks: subclass `BasePruningMethod` (`compute_mask`); pruning the same tensor again "
                      "replaces its hook with a `PruningContainer` that applies the methods in order, still one "
                      "pre-hook per tensor."},
        "zh": {"summary": "PyTorch 自带的剪枝把剪枝方法对象本身（`L1Unstructured` 等）注册为前向前置钩子，排在已有的前置钩子"
                          "之后。参数改名为 `weight_orig`，另加一个 `weight_mask` 缓冲区，而 `weight` 变成普通的张量属性，"
                          "由钩子在每次前向之前按 `mask * weight_orig` 重新计算。梯度落在 `weight_orig.grad` 上（被遮住的"
                          "位置为零）；state dict 里是 `weight_orig` 和 `weight_mask`，不再有 `weight`。",
               "remove": "`torch.nn.utils.prune.remove(module, 'weight')`：剪枝后的数值重新成为参数 `weight`，钩子、"
                         "`weight_orig` 和 `weight_mask` 一并去掉（剪掉的值不会恢复）。",
               "api": "没有回调：继承 `BasePruningMethod` 并实现 `compute_mask`；对同一张量再次剪枝时，它的钩子被换成"
                      "一个 `PruningContainer`，按顺序应用各方法，每个张量仍只有一个前置钩子。"}},
    surprises=(
        {"fact": "probe.survives.deepcopy",
         "en": "`copy.deepcopy` of a pruned model raises: `weight` is a computed (non-leaf) tensor, which deepcopy "
               "refuses, so EMA copies and some checkpoint tools break until `prune.remove`.",
         "zh": "剪枝后的模型做 `copy.deepcopy` 会报错：`weight` 是计算出来的非叶子张量，deepcopy 拒绝复制，所以在 "
               "`prune.remove` 之前 EMA 副本和一些保存工具都会出错。"},
        {"fact": "facts.tensor_hooks",
         "en": "A gradient hook you put on `module.weight` after pruning never fires (the hook rebuilds `weight` "
               "each forward); one put on it before pruning now sits on `weight_orig` and sees the masked gradient.",
         "zh": "剪枝之后挂在 `module.weight` 上的梯度钩子永远不会触发（钩子每次前向都重建 `weight`）；剪枝之前挂上的"
               "现在在 `weight_orig` 上，看到的是遮罩后的梯度。"}),
)
TARGET = "0"


def apply(model: nn.Module) -> nn.Module:
    from torch.nn.utils import prune
    prune.l1_unstructured(model[0], "weight", amount=0.5)
    return model


def remove(model: nn.Module) -> nn.Module:
    from torch.nn.utils import prune
    prune.remove(model[0], "weight")
    return model


def facts() -> dict:
    """The layer's state-dict keys, where the gradient lands, and which gradient hooks fire."""
    torch.manual_seed(0)
    model, seen = build(), {}
    model[0].weight.register_hook(lambda g: seen.__setitem__("before", g.clone()))
    apply(model)
    model[0].weight.register_hook(lambda g: seen.__setitem__("after", g.clone()))
    model(*inputs()).sum().backward()
    layer = model[0]
    masked = layer.weight_mask == 0
    return {"layer_state_dict_keys": sorted(layer.state_dict()),
            "weight_is_a_parameter": isinstance(layer.weight, nn.Parameter),
            "weight_orig_grad_zero_where_masked": bool((layer.weight_orig.grad[masked] == 0).all()),
            "tensor_hooks": {"registered on weight before pruning fires": "before" in seen,
                             "it sees the masked gradient": "before" in seen and bool((seen["before"][masked] == 0)
                                                                                        .all()),
                             "registered on weight after pruning fires": "after" in seen}}
