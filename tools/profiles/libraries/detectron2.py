"""detectron2: trainer hooks (``HookBase``: ``before_train``, ``before_step``, ``after_step``, ``after_train``) are
method calls around ``run_step``; the library registers no PyTorch hook on the model. Read from the source (not on
PyPI)."""
from __future__ import annotations

from ..spec import Library

SRC = "https://github.com/facebookresearch/detectron2/blob/v0.6/"
LIBRARY = Library(
    slug="detectron2", name="detectron2", status="source", category="model libraries",
    entry="detectron2.engine.DefaultTrainer(cfg).register_hooks([...]); trainer.train()",
    names=("HookBase", "TrainerBase", "SimpleTrainer", "AMPTrainer", "DefaultTrainer", "register_hooks",
           "build_hooks", "before_train", "before_step", "after_step", "after_train", "run_step", "PreciseBN",
           "EvalHook", "PeriodicCheckpointer", "EventStorage", "model.backbone"),
    sources=(SRC + "detectron2/engine/train_loop.py#L19-L78", SRC + "detectron2/engine/train_loop.py#L133-L159",
             SRC + "detectron2/engine/train_loop.py#L258-L294", SRC + "detectron2/engine/defaults.py#L430-L442",
             SRC + "detectron2/engine/hooks.py#L563-L632", SRC + "docs/tutorials/models.md#L146-L175"),
    why_source={"en": "detectron2 is not published on PyPI (it is built from its repository against a local torch); "
                      "read at tag v0.6 (commit d1e04565).",
                "zh": "detectron2 没有发布到 PyPI（要从仓库针对本地的 torch 编译）；按 v0.6 标签（提交 d1e04565）阅读源码。"},
    installs=(),
    order={"en": "`train()`: `before_train`, then per iteration `before_step`, `run_step` (`SimpleTrainer`: "
                 "`loss_dict = model(data)` with your forward hooks, `optimizer.zero_grad()`, `losses.backward()` "
                 "with your backward and tensor hooks, metrics, `optimizer.step()`), `after_step`; `after_train` "
                 "in a `finally`. Hooks run in the order registered (`DefaultTrainer.build_hooks`: IterationTimer, "
                 "LRScheduler, PreciseBN, checkpointer, EvalHook, writers). `PreciseBN.after_step`, when enabled, "
                 "runs extra forward passes over training batches, so your forward hooks fire there too.",
           "zh": "`train()`：先 `before_train`，每次迭代 `before_step`、`run_step`（`SimpleTrainer` 中依次是 "
                 "`loss_dict = model(data)`——你的前向钩子在这里——、`optimizer.zero_grad()`、`losses.backward()`"
                 "——你的反向钩子和张量钩子——、写指标、`optimizer.step()`）、`after_step`；`after_train` 放在 "
                 "`finally` 里。钩子按注册顺序运行（`DefaultTrainer.build_hooks`：IterationTimer、LRScheduler、"
                 "PreciseBN、checkpointer、EvalHook、writers）。启用时 `PreciseBN.after_step` 会在训练数据上额外"
                 "跑若干次前向，你的前向钩子在那里也会触发。"},
    words={
        "en": {"summary": "Registers no PyTorch hook on the model at v0.6: its \"hooks\" are trainer callbacks, "
                          "and the library code calls no `register_*_hook`. For intermediate tensors its "
                          "documentation suggests rewriting a sub-model, running the parts yourself "
                          "(`features = model.backbone(images.tensor)`, then `proposal_generator`, `roi_heads`), "
                          "or PyTorch forward hooks.",
               "remove": "Nothing to remove on the model; leave a trainer hook out of the list passed to "
                         "`register_hooks` (or return `None` for it in `build_hooks`).",
               "api": "`HookBase` with `before_train`, `before_step`, `after_step`, `after_train` (later versions "
                      "add `after_backward`), `self.trainer` a weak reference to the trainer; "
                      "`trainer.register_hooks(hooks)` appends them in order."},
        "zh": {"summary": "v0.6 不在模型上注册任何 PyTorch 钩子：它所谓的“hook”是训练器回调，库代码里没有调用任何 "
                          "`register_*_hook`。要拿中间张量，文档建议重写一个子模型、自己分段执行模型"
                          "（`features = model.backbone(images.tensor)`，再调用 `proposal_generator`、`roi_heads`），"
                          "或者用 PyTorch 的前向钩子。",
               "remove": "模型上没有要移除的；不想要某个训练器钩子，就别把它放进传给 `register_hooks` 的列表"
                         "（或在 `build_hooks` 里让它返回 `None`）。",
               "api": "`HookBase` 有 `before_train`、`before_step`、`after_step`、`after_train`（更新的版本加了 "
                      "`after_backward`），`self.trainer` 是指向训练器的弱引用；`trainer.register_hooks(hooks)` "
                      "按顺序追加。"},
    },
)
