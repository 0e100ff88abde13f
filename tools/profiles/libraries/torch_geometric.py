"""torch_geometric: ``MessagePassing`` layers have a hook API of their own (``propagate``, ``message``,
``aggregate``, ``message_and_aggregate``, ``edge_update``), run inside the module's ``forward``, kept outside
PyTorch's hook dicts and skipped under ``torch.compile``; the explainers put edge masks on the layers for one call."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

V = "https://github.com/pyg-team/pytorch_geometric/blob/2.8.1/torch_geometric/"
STAGES = ("propagate", "message", "aggregate", "message_and_aggregate")
LIBRARY = Library(
    slug="torch_geometric", name="torch-geometric", import_name="torch_geometric", category="model libraries",
    entry="torch_geometric.explain.Explainer(gcn, algorithm=GNNExplainer(epochs=2), ...)(x, edge_index)",
    names=("MessagePassing", "register_propagate_forward_pre_hook", "register_propagate_forward_hook",
           "register_message_forward_pre_hook", "register_message_forward_hook",
           "register_aggregate_forward_pre_hook", "register_aggregate_forward_hook",
           "register_message_and_aggregate_forward_pre_hook", "register_message_and_aggregate_forward_hook",
           "register_edge_update_forward_pre_hook", "register_edge_update_forward_hook", "explain_message",
           "set_masks", "clear_masks", "Explainer", "GNNExplainer", "torch_geometric.compile", "is_compiling"),
    sources=(V + "nn/conv/message_passing.py#L158-L168", V + "nn/conv/message_passing.py#L459-L563",
             V + "nn/conv/message_passing.py#L776-L921", V + "nn/conv/propagate.jinja#L28-L40",
             V + "nn/conv/message_passing.py#L926-L960", V + "explain/algorithm/utils.py#L11-L76",
             V + "_compile.py#L20-L42"),
    words={
        "en": {"summary": "PyG puts nothing in PyTorch's hook dicts. Every `MessagePassing` layer keeps ten hook "
                          "dicts of its own (`_propagate_forward_pre_hooks`, `_message_forward_hooks`, ...), run "
                          "by `propagate()` inside the module's `forward`, so `_forward_hooks` and hook listings "
                          "do not show them. The explainers (`Explainer` with `GNNExplainer`, ...) call "
                          "`set_masks`: each layer's `explain` turns on, `propagate` switches to the plain Python "
                          "version and `explain_message` multiplies the messages by the edge mask after the "
                          "message hooks ran; `clear_masks` turns it off when the call returns.",
               "remove": "Each `register_*_hook` returns a `RemovableHandle`: `handle.remove()`. The explainers "
                         "clear their masks themselves (`clear_masks(model)`).",
               "api": "Order in one call of a layer: the user's module forward pre-hooks, then "
                      "`propagate_forward_pre`, `message_forward_pre`, `message`, `message_forward`, "
                      "`aggregate_forward_pre`, `aggregate`, `aggregate_forward`, `propagate_forward`, then the "
                      "module's forward hooks. With a sparse adjacency the fused path runs the "
                      "`message_and_aggregate` hooks instead of the message and aggregate ones. Under "
                      "`torch.compile` the generated `propagate` skips all of them (`is_compiling()`); "
                      "`torch_geometric.compile` is only a deprecated alias of `torch.compile`."},
        "zh": {"summary": "PyG 不往 PyTorch 的钩子字典里放任何东西。每个 `MessagePassing` 层自带十个钩子字典"
                          "（`_propagate_forward_pre_hooks`、`_message_forward_hooks` 等），由模块 `forward` 里的 "
                          "`propagate()` 调用，所以 `_forward_hooks` 和各种钩子清单里都看不到它们。解释器（`Explainer` "
                          "配 `GNNExplainer` 等）会调用 `set_masks`：每层的 `explain` 打开，`propagate` 换成纯 Python "
                          "版本，`explain_message` 在消息钩子运行之后才把消息乘上边掩码；调用返回时 `clear_masks` "
                          "再把它关掉。",
               "remove": "每个 `register_*_hook` 都返回 `RemovableHandle`，调用 `handle.remove()` 即可。解释器自己会"
                         "清掉掩码（`clear_masks(model)`）。",
               "api": "一层的一次调用里，顺序是：用户的模块前向前置钩子，然后 `propagate_forward_pre`、"
                      "`message_forward_pre`、`message`、`message_forward`、`aggregate_forward_pre`、`aggregate`、"
                      "`aggregate_forward`、`propagate_forward`，最后是模块的前向钩子。输入是稀疏邻接矩阵时走融合路径，"
                      "运行的是 `message_and_aggregate` 钩子而不是 message 和 aggregate 的钩子。在 `torch.compile` "
                      "下，生成的 `propagate` 会跳过所有这些钩子（`is_compiling()`）；`torch_geometric.compile` "
                      "只是 `torch.compile` 的一个已弃用别名。"},
    },
    surprises=(
        {"fact": "facts.fires_under_torch_compile",
         "en": "Under `torch.compile` the `MessagePassing` hooks silently stop firing, while the module's PyTorch "
               "hooks on the same layer still run.",
         "zh": "在 `torch.compile` 下，`MessagePassing` 的钩子悄无声息地不再触发，而同一层上 PyTorch 的模块钩子照常运行。"},
        {"fact": "facts.hook_order_sparse_adjacency",
         "en": "Which hooks run depends on the input: with a sparse adjacency matrix the `message` and `aggregate` "
               "hooks never fire, only `message_and_aggregate`'s.",
         "zh": "哪些钩子运行取决于输入：传入稀疏邻接矩阵时，`message` 和 `aggregate` 的钩子都不触发，"
               "只有 `message_and_aggregate` 的会触发。"},
        {"fact": "facts.message_hook_under_edge_mask",
         "en": "While an explainer's edge mask is on, a `message` forward hook sees the messages before the mask "
               "is applied: `explain_message` runs after it.",
         "zh": "解释器的边掩码生效时，`message` 前向钩子看到的是乘掩码之前的消息：`explain_message` 在它之后才运行。"},
    ),
)
TARGET = "conv1"


class GCN(nn.Module):
    def __init__(self) -> None:
        from torch_geometric.nn import GCNConv
        super().__init__()
        self.conv1, self.conv2 = GCNConv(4, 8), GCNConv(8, 2)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def build() -> nn.Module:
    return GCN()


def inputs() -> tuple[torch.Tensor, ...]:
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    return x, torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])


def apply(model: nn.Module) -> nn.Module:
    from torch_geometric.explain import Explainer, GNNExplainer
    explainer = Explainer(model, algorithm=GNNExplainer(epochs=2), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config={"mode": "regression", "task_level": "node", "return_type": "raw"})
    explainer(*inputs())
    return model


def _hooked(log: list[str]) -> nn.Module:
    torch.manual_seed(0)
    conv = build().conv1
    conv.register_forward_pre_hook(lambda *_: log.append("module forward_pre"))
    conv.register_forward_hook(lambda *_: log.append("module forward"))
    for stage in STAGES:
        getattr(conv, f"register_{stage}_forward_pre_hook")(lambda *_, s=stage: log.append(f"{s}_forward_pre"))
        getattr(conv, f"register_{stage}_forward_hook")(lambda *_, s=stage: log.append(f"{s}_forward"))
    return conv


def facts() -> dict:
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
    from torch_geometric.utils import to_torch_csr_tensor

    import hooklab
    x, edge_index = inputs()
    log: list[str] = []
    conv = _hooked(log)
    conv(x, edge_index)
    dense = list(log)
    log.clear()
    conv(x, to_torch_csr_tensor(edge_index.flip(0), size=(5, 5)))
    sparse = list(log)
    log.clear()
    listed = len(hooklab.all_hooks(conv))
    torch._dynamo.reset()
    torch.compile(conv, backend="eager")(x, edge_index)
    torch._dynamo.reset()
    compiled = {"module hooks": sum(e.startswith("module") for e in log),
                "MessagePassing hooks": sum(not e.startswith("module") for e in log)}

    seen: dict[str, torch.Tensor] = {}
    conv = build().conv1
    conv.register_message_forward_hook(lambda m, a, out: seen.__setitem__("message", out.detach().clone()))
    conv.register_aggregate_forward_hook(lambda m, a, out: seen.__setitem__("aggregate", out.detach().clone()))
    conv(x, edge_index)
    plain = dict(seen)
    set_masks(conv, torch.zeros(edge_index.size(1)), edge_index, apply_sigmoid=False)
    conv(x, edge_index)
    clear_masks(conv)
    masked = {"message hook sees the mask": not torch.equal(plain["message"], seen["message"]),
              "aggregate hook sees the mask": not torch.equal(plain["aggregate"], seen["aggregate"])}
    return {"hook_order": dense, "hook_order_sparse_adjacency": sparse,
            "hooks_listed_by_pytorch_dicts": {"registered": 2 + 2 * len(STAGES), "listed": listed},
            "fires_under_torch_compile": compiled, "message_hook_under_edge_mask": masked}
