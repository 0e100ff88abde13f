"""torchvision: ``create_feature_extractor`` traces the model with ``torch.fx`` (once in train mode, once in eval
mode) and returns a ``GraphModule`` in which container modules are inlined: the user's hooks on them fire while it
traces and never again; leaf modules are the original objects and keep their hooks."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

V = "https://github.com/pytorch/vision/blob/v0.29.2/torchvision/models/"
LIBRARY = Library(
    slug="torchvision", name="torchvision", category="model libraries",
    entry="torchvision.models.feature_extraction.create_feature_extractor(resnet, {'layer1': 'feat1', "
          "'layer2': 'feat2'})",
    names=("create_feature_extractor", "get_graph_node_names", "NodePathTracer", "LeafModuleAwareTracer",
           "DualGraphModule", "return_nodes", "train_return_nodes", "eval_return_nodes", "leaf_modules",
           "IntermediateLayerGetter", "return_layers"),
    sources=(V + "feature_extraction.py#L20-L37", V + "feature_extraction.py#L269-L331",
             V + "feature_extraction.py#L515-L605",
             V + "_utils.py#L13-L74"),
    words={
        "en": {"summary": "`create_feature_extractor` puts no hook anywhere: it traces the model with a "
                          "`NodePathTracer` twice (train and eval mode) and builds a `DualGraphModule` that copies "
                          "only the modules its graphs call. Containers such as `layer1` are inlined into the graph: "
                          "a user's hook on them runs during tracing (with `Proxy` arguments, once per mode) and "
                          "never in the extractor's forward, and a hook put on the extractor's `layer1` never runs "
                          "either. Leaf modules (`Conv2d`, `BatchNorm2d`, `ReLU`) are called as modules and are the "
                          "original objects, so their hooks fire in both models.",
               "remove": "Nothing to remove. To hook a container's output, hook the original model, or make its "
                         "class a leaf (`tracer_kwargs={'leaf_modules': [BasicBlock]}`, a list of classes) so the "
                         "graph calls it as a module.",
               "api": "No hook or callback API. `IntermediateLayerGetter` (used by the detection and segmentation "
                      "backbones) is not traced: it keeps the model's own top-level children up to the last "
                      "returned one, so hooks on those modules keep firing and hooks on the dropped ones (`avgpool`, "
                      "`fc`) never run."},
        "zh": {"summary": "`create_feature_extractor` 不注册任何钩子：它用 `NodePathTracer` 把模型追踪两遍（训练"
                          "模式和评估模式各一遍），再构建一个 `DualGraphModule`，只拷贝图里调用到的模块。像 `layer1` "
                          "这样的容器模块被内联进图里：用户挂在它上面的钩子只在追踪时运行（参数是 `Proxy`，每种模式"
                          "各一次），在提取器的前向里再也不运行；挂在提取器自己的 `layer1` 上的钩子同样永远不运行。"
                          "叶子模块（`Conv2d`、`BatchNorm2d`、`ReLU`）以模块身份被调用，而且就是原来的对象，"
                          "所以它们的钩子在两个模型里都会触发。",
               "remove": "没有需要删除的东西。要拿到容器的输出，就在原模型上挂钩子，或者把它的类设为叶子"
                         "（`tracer_kwargs={'leaf_modules': [BasicBlock]}`，列表里放的是类），让图以模块身份调用它。",
               "api": "没有钩子或回调接口。`IntermediateLayerGetter`（检测和分割的 backbone 用它）不做追踪：它直接"
                      "保留模型自己的顶层子模块，直到最后一个要返回的为止；这些模块上的钩子照样触发，被丢掉的模块"
                      "（`avgpool`、`fc`）上的钩子不会再运行。"},
    },
    surprises=(
        {"fact": "facts.hook_on_container",
         "en": "A forward hook on `layer1` fires twice inside `create_feature_extractor` (tracing in train and "
               "eval mode, with `Proxy` arguments) and never when the extractor runs.",
         "zh": "挂在 `layer1` 上的前向钩子在 `create_feature_extractor` 内部触发两次（训练和评估模式各追踪一次，"
               "参数是 `Proxy`），而提取器真正运行时一次也不触发。"},
        {"fact": "facts.hook_on_leaf",
         "en": "Leaf modules are shared: the extractor's `layer1.0.conv1` is the original `Conv2d`, so a hook added "
               "to the original model after extraction fires in the extractor too.",
         "zh": "叶子模块是共享的：提取器里的 `layer1.0.conv1` 就是原来那个 `Conv2d`，所以提取之后再挂到原模型上的"
               "钩子，在提取器里也会触发。"},
    ),
)
TARGET = "layer1"
RETURN_NODES = {"layer1": "feat1", "layer2": "feat2"}


def build() -> nn.Module:
    from torchvision.models import resnet18
    return resnet18(num_classes=10)


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)),)


def loss(output) -> torch.Tensor:
    """The extractor's features (a dict), or the plain model's logits."""
    if isinstance(output, torch.Tensor):
        return output.float().pow(2).mean()
    return sum(feature.float().pow(2).mean() for feature in output.values())


def apply(model: nn.Module) -> nn.Module:
    from torchvision.models.feature_extraction import create_feature_extractor
    return create_feature_extractor(model, return_nodes=RETURN_NODES)


def _counter(module: nn.Module, counts: dict[str, int], name: str):
    counts[name] = 0
    return module.register_forward_hook(lambda *_: counts.__setitem__(name, counts[name] + 1))


def facts() -> dict:
    from torchvision.models._utils import IntermediateLayerGetter

    model = build()
    counts: dict[str, int] = {}
    _counter(model.layer1, counts, "container")
    _counter(model.layer1[0].conv1, counts, "leaf")
    extractor = apply(model)
    traced = dict(counts)
    _counter(extractor.layer1, counts, "extractor's container")
    late = {}
    _counter(model.layer1[0].conv2, late, "leaf hooked after extraction")
    for key in counts:
        counts[key] = 0
    extractor(*inputs())
    container = {"fires while tracing": traced["container"], "fires in the extractor": counts["container"],
                 "the extractor's layer1 is the original": extractor.layer1 is model.layer1,
                 "a hook on the extractor's layer1 fires": counts["extractor's container"]}
    leaf = {"fires while tracing": traced["leaf"], "fires in the extractor": counts["leaf"],
            "the extractor's conv1 is the original": extractor.get_submodule("layer1.0.conv1") is model.layer1[0].conv1,
            "a hook added to the original after extraction fires": late["leaf hooked after extraction"]}

    model = build()
    getter_counts: dict[str, int] = {}
    _counter(model.layer1, getter_counts, "layer1")
    _counter(model.fc, getter_counts, "fc")
    getter = IntermediateLayerGetter(model, {"layer1": "feat1", "layer2": "feat2"})
    getter(*inputs())
    getter_fact = {"keeps the original modules": getter.layer1 is model.layer1,
                   "hook on layer1 fires": getter_counts["layer1"], "hook on fc fires": getter_counts["fc"]}
    return {"hook_on_container": container, "hook_on_leaf": leaf, "intermediate_layer_getter": getter_fact}
