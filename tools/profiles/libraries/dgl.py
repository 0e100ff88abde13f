"""dgl: its ``dgl.nn.pytorch`` layers are ordinary ``nn.Module``s that take the graph as the first argument; DGL
registers no hook. Read from the source: there is no wheel on PyPI for this platform and torch 2.15."""
from __future__ import annotations

from ..spec import Library

SRC = "https://github.com/dmlc/dgl/blob/v2.4.0/python/dgl/"
LIBRARY = Library(
    slug="dgl", name="dgl", status="source", category="model libraries",
    entry="dgl.nn.pytorch.GATConv(in_feats, out_feats, num_heads)(graph, feat, get_attention=True)",
    names=("GraphConv", "GATConv", "local_scope", "update_all", "apply_edges", "edge_weight", "get_attention",
           "ndata", "edata", "GNNExplainer", "eweight", "dgl.function"),
    sources=(SRC + "nn/pytorch/conv/gatconv.py#L239-L369", SRC + "nn/pytorch/conv/graphconv.py#L356-L457",
             SRC + "heterograph.py#L6017-L6030", SRC + "nn/pytorch/explain/gnnexplainer.py#L16-L45"),
    why_source={"en": "PyPI has dgl 2.2.1 wheels for Windows only; the Linux builds (tied to a torch version) are "
                      "served from DGL's own site, which is not reachable here and has none for torch 2.15. Read at "
                      "tag v2.4.0 (commit c6c874bf).",
                "zh": "PyPI 上的 dgl 2.2.1 只有 Windows 轮子；Linux 版本（与 torch 版本绑定）放在 DGL 自己的站点上，"
                      "这里访问不到，而且也没有对应 torch 2.15 的版本。按 v2.4.0 标签（提交 c6c874bf）阅读源码。"},
    installs=(),
    order={"en": "DGL adds nothing to run before or after your hooks. A layer's forward works inside "
                 "`with graph.local_scope():`, and message passing (`graph.update_all(message_fn, reduce_fn)`) runs "
                 "inside the layer's `forward`, so a forward hook on the layer fires once after the whole "
                 "aggregation, with `args == (graph, feat)` and without the per-edge messages.",
           "zh": "DGL 没有任何在你的钩子之前或之后运行的东西。层的前向在 `with graph.local_scope():` 里进行，"
                 "消息传递（`graph.update_all(message_fn, reduce_fn)`）发生在层的 `forward` 内部，所以层上的前向钩子"
                 "在整轮聚合结束后只触发一次，`args == (graph, feat)`，看不到逐条边上的消息。"},
    words={
        "en": {"summary": "DGL registers no hook: `GraphConv`, `GATConv` and the other layers are plain modules, "
                          "so your module hooks work on them, with the `DGLGraph` as the first positional input. "
                          "What happens inside (edge messages, attention) lives in `graph.ndata` / `graph.edata` "
                          "under `graph.local_scope()`, which drops them when the forward returns: a forward hook "
                          "cannot read them afterwards. DGL offers arguments instead: `GATConv(...)(g, feat, "
                          "get_attention=True)` returns the attention, `edge_weight=` feeds a weight (or a mask, as "
                          "`GNNExplainer` does through `eweight`) into the messages, and your own message and "
                          "reduce functions in `update_all` see every edge.",
               "remove": "Nothing to remove.",
               "api": "No hook API; the extension points are `update_all` / `apply_edges` with built-in "
                      "(`dgl.function`) or your own message and reduce functions, and layer arguments such as "
                      "`edge_weight` and `get_attention`."},
        "zh": {"summary": "DGL 不注册钩子：`GraphConv`、`GATConv` 等层都是普通模块，你的模块钩子照常可用，"
                          "只是第一个位置参数是 `DGLGraph`。层内部的东西（边上的消息、注意力）放在 "
                          "`graph.local_scope()` 下的 `graph.ndata` / `graph.edata` 里，前向返回时就被丢掉，"
                          "前向钩子事后读不到。DGL 提供的是参数：`GATConv(...)(g, feat, get_attention=True)` "
                          "会返回注意力，`edge_weight=` 把权重（或掩码，`GNNExplainer` 就是通过 `eweight` 这样做的）"
                          "乘进消息里，而你自己写给 `update_all` 的消息函数和聚合函数能看到每一条边。",
               "remove": "没有要移除的。",
               "api": "没有钩子 API；扩展点是 `update_all` / `apply_edges` 配合内置（`dgl.function`）或自定义的"
                      "消息函数、聚合函数，以及 `edge_weight`、`get_attention` 这样的层参数。"},
    },
)
