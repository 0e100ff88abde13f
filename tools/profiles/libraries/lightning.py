"""pytorch-lightning: the trainer puts no hooks on the model; its own hooks (``on_before_backward``, ...) run around
PyTorch's. ``ModelSummary`` (and the ``ModelSummary`` callback ``fit`` starts with) puts a forward hook on every layer
for one forward of ``example_input_array``."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library

SRC = "https://github.com/Lightning-AI/pytorch-lightning/blob/2.6.6/src/lightning/pytorch/"
LIBRARY = Library(
    slug="lightning", name="pytorch-lightning", import_name="pytorch_lightning", category="trackers and trainers",
    entry="pytorch_lightning.utilities.model_summary.ModelSummary(model, max_depth=-1); Trainer(...).fit(model)",
    names=("Trainer", "LightningModule", "Callback", "ModelSummary", "LayerSummary", "on_train_batch_start",
           "on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad",
           "on_train_batch_end", "accumulate_grad_batches", "example_input_array", "enable_model_summary"),
    sources=(SRC + "utilities/model_summary/model_summary.py#L85-L125",
             SRC + "utilities/model_summary/model_summary.py#L325-L372",
             SRC + "loops/optimization/automatic.py", SRC + "core/hooks.py"),
    words={
        "en": {"summary": "`Trainer.fit` registers no hook on the model: Lightning's own hooks are method calls "
                          "around your `training_step`, `backward` and `optimizer.step`, so PyTorch's module and "
                          "tensor hooks run inside them (`on_before_backward` before any backward hook, "
                          "`on_after_backward` after every gradient hook). `ModelSummary` is the exception: it puts "
                          "a forward hook (`with_kwargs=True`) on each summarised layer (the children for the "
                          "default `max_depth=1`, every submodule for `max_depth=-1`) and, when the module has an "
                          "`example_input_array`, runs one forward in `eval()` under `no_grad` to read the shapes; "
                          "`fit` does this once at the start, so your forward hooks fire once before training.",
               "remove": "Nothing to remove after `fit`; the summary's hooks take themselves off after the first "
                         "forward (or when the summary is built). `enable_model_summary=False` or "
                         "`example_input_array = None` avoids the extra forward.",
               "api": "Per batch: `on_train_batch_start` (callbacks, then the module), `training_step` (your "
                      "forward hooks), at the first batch of an accumulation window `on_before_zero_grad` and "
                      "`zero_grad` (after the forward, before the backward), `on_before_backward`, `backward` "
                      "(backward, tensor and post-accumulate-grad hooks), `on_after_backward`, at the last batch of "
                      "the window `on_before_optimizer_step` and `optimizer.step`, then `on_train_batch_end`. A "
                      "Callback's hook runs before the LightningModule's hook of the same name. During the summary's "
                      "forward, PyTorch's `FlopCounterMode` also adds its `ModuleTracker` global forward hooks."},
        "zh": {"summary": "`Trainer.fit` 不在模型上注册任何钩子：Lightning 自己的钩子只是围绕 `training_step`、"
                          "`backward` 和 `optimizer.step` 的方法调用，PyTorch 的模块钩子和张量钩子都在它们中间运行"
                          "（`on_before_backward` 早于所有反向钩子，`on_after_backward` 晚于所有梯度钩子）。"
                          "例外是 `ModelSummary`：它给要汇总的每一层挂一个前向钩子（`with_kwargs=True`；默认 "
                          "`max_depth=1` 时是直接子模块，`max_depth=-1` 时是所有子孙模块），模块有 "
                          "`example_input_array` 时还会在 `eval()`、`no_grad` 下跑一次前向来记录形状；"
                          "`fit` 开始时就做这一次，所以训练前你的前向钩子会先多触发一次。",
               "remove": "`fit` 之后没有要移除的东西；摘要的钩子在第一次前向后（或摘要建好时）自行移除。"
                         "设 `enable_model_summary=False` 或 `example_input_array = None` 就没有这次额外前向。",
               "api": "每个 batch：`on_train_batch_start`（先 Callback、后模块）、`training_step`（你的前向钩子），"
                      "累积窗口的第一个 batch 上是 `on_before_zero_grad` 和 `zero_grad`（在前向之后、反向之前），"
                      "然后 `on_before_backward`、`backward`（反向钩子、张量钩子、梯度累加后钩子）、"
                      "`on_after_backward`，窗口的最后一个 batch 上再有 `on_before_optimizer_step` 和 "
                      "`optimizer.step`，最后是 `on_train_batch_end`。同名钩子里 Callback 先于 LightningModule。"
                      "摘要那次前向期间，PyTorch 的 `FlopCounterMode` 还会挂上 `ModuleTracker` 的全局前向钩子。"},
    },
    surprises=(
        {"fact": "facts.summary_forwards_before_training",
         "en": "With the default `enable_model_summary=True` and an `example_input_array`, your forward hooks fire "
               "once before the first `training_step`, in `eval()` mode without gradients: the summary's forward.",
         "zh": "默认 `enable_model_summary=True` 且设了 `example_input_array` 时，你的前向钩子在第一个 "
               "`training_step` 之前就会触发一次（`eval()` 模式、无梯度）：那是模型摘要的前向。"},
        {"fact": "facts.one_step",
         "en": "`zero_grad` (with `on_before_zero_grad`) runs after the forward and before the backward, not after "
               "`optimizer.step`: the gradients are still there in `on_train_batch_end`.",
         "zh": "`zero_grad`（以及 `on_before_zero_grad`）发生在前向之后、反向之前，而不是 `optimizer.step` 之后："
               "到 `on_train_batch_end` 时梯度还在。"},
        {"fact": "facts.accumulate_2",
         "en": "With `accumulate_grad_batches=2`, `on_after_backward` and every gradient hook run on both batches, "
               "`on_before_zero_grad` only on the first and `on_before_optimizer_step` only on the second.",
         "zh": "`accumulate_grad_batches=2` 时，`on_after_backward` 和所有梯度钩子两个 batch 都运行，"
               "`on_before_zero_grad` 只在第一个、`on_before_optimizer_step` 只在第二个 batch 运行。"},
    ),
)
TARGET = "net.0"
HOOKS = ("on_train_batch_start", "on_before_backward", "on_after_backward", "on_before_optimizer_step",
         "on_before_zero_grad", "on_train_batch_end")


def _module_class(log: list[str] | None):
    import pytorch_lightning as pl

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
            self.example_input_array = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            if log is not None:
                log.append("training_step")
            return self(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    for name in HOOKS:  # the module's own Lightning hooks, each writing its name
        setattr(Tiny, name, lambda self, *a, _n=name, **k: log.append(f"module.{_n}") if log is not None else None)
    return Tiny


def build() -> nn.Module:
    return _module_class(None)()


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(3, 4, generator=torch.Generator().manual_seed(1)),)


def apply(model: nn.Module) -> nn.Module:
    from pytorch_lightning.utilities.model_summary import ModelSummary
    ModelSummary(model, max_depth=-1)
    return model


def _fit(log: list[str], *, accumulate: int, steps: int, summary: bool) -> None:
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, TensorDataset

    class Logging(pl.Callback):
        pass
    for name in HOOKS:
        setattr(Logging, name, lambda self, *a, _n=name, **k: log.append(f"callback.{_n}"))
    model = _module_class(log)()
    layer, weight = model.net[0], model.net[0].weight
    layer.register_forward_pre_hook(lambda *a: log.append("module forward_pre hook"))
    layer.register_forward_hook(lambda *a: log.append("module forward hook"))
    layer.register_full_backward_pre_hook(lambda *a: log.append("module backward_pre hook"))
    layer.register_full_backward_hook(lambda *a: log.append("module backward hook"))
    weight.register_hook(lambda g: log.append("tensor hook (weight)"))
    weight.register_post_accumulate_grad_hook(lambda p: log.append("post_accumulate_grad hook (weight)"))
    data = DataLoader(TensorDataset(torch.randn(8, 4, generator=torch.Generator().manual_seed(2))), batch_size=2)
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=summary, accumulate_grad_batches=accumulate,
                         callbacks=[Logging()], num_sanity_val_steps=0)
    trainer.fit(model, data)


def _batches(log: list[str]) -> list[list[str]]:
    """The log cut at each ``callback.on_train_batch_start``: what happened before training, then one list a batch."""
    out: list[list[str]] = [[]]
    for label in log:
        if label == "callback.on_train_batch_start":
            out.append([])
        out[-1].append(label)
    return out


def facts() -> dict:
    one: list[str] = []
    _fit(one, accumulate=1, steps=1, summary=False)
    acc: list[str] = []
    _fit(acc, accumulate=2, steps=1, summary=False)
    with_summary: list[str] = []
    _fit(with_summary, accumulate=1, steps=1, summary=True)
    batches = _batches(acc)[1:]
    return {
        "one_step": _batches(one)[1],
        "accumulate_2": {f"batch {i}": b for i, b in enumerate(batches)},
        "summary_forwards_before_training": _batches(with_summary)[0].count("module forward hook"),
        "no_summary_forwards_before_training": _batches(one)[0].count("module forward hook"),
    }
