"""mmengine: the ``Runner`` calls its ``Hook`` objects (``before_train_iter``, ``after_train_iter``, ...) around
``model.train_step``; it puts no hook on the model. ``OptimWrapper.update_params`` does the backward, and on an
update step ``step`` then ``zero_grad``."""
from __future__ import annotations

import tempfile

import torch
from torch import nn

from ..spec import Library

SRC = "https://github.com/open-mmlab/mmengine/blob/v0.10.7/mmengine/"
LIBRARY = Library(
    slug="mmengine", name="mmengine", requirement="mmengine==0.10.7", category="trackers and trainers",
    entry="mmengine.runner.Runner(model=..., train_cfg=dict(by_epoch=False, max_iters=1), ...).train()",
    names=("Runner", "Hook", "custom_hooks", "default_hooks", "before_run", "before_train", "before_train_epoch",
           "before_train_iter", "after_train_iter", "after_train_epoch", "after_train", "after_run", "priority",
           "OptimWrapper", "update_params", "optim_context", "accumulative_counts", "should_update", "scale_loss",
           "BaseModel", "train_step"),
    sources=(SRC + "optim/optimizer/optimizer_wrapper.py#L175-L254", SRC + "runner/loops.py#L271-L321",
             SRC + "model/base_model/base_model.py#L84-L118", SRC + "hooks/hook.py"),
    words={
        "en": {"summary": "Registers no hook on the model. The `Runner` calls each `Hook` object's methods around "
                          "`model.train_step`, which runs the forward (your forward hooks) inside "
                          "`optim_wrapper.optim_context`, then `OptimWrapper.update_params`: `scale_loss` (divides "
                          "by `accumulative_counts`), `backward` (your backward and tensor hooks), and when "
                          "`should_update()` is true `step` then `zero_grad`. So `after_train_iter` always runs "
                          "after every gradient hook of the iteration and, on an update, after the step.",
               "remove": "Nothing to remove on the model; a runner hook is one of `default_hooks` (set a key to "
                         "`None` to drop it) or `custom_hooks`.",
               "api": "`Hook` methods, called in order of `priority` (then of registration): `before_run`, "
                      "`before_train`, `before_train_epoch`, `before_train_iter`, (train_step), `after_train_iter`, "
                      "`after_train_epoch`, `after_train`, `after_run` (and the `val`/`test` ones). `OptimWrapper` "
                      "has `update_params(loss)` = `backward` + `step` + `zero_grad`, each overridable."},
        "zh": {"summary": "不在模型上注册钩子。`Runner` 在 `model.train_step` 前后调用各个 `Hook` 对象的方法；"
                          "`train_step` 在 `optim_wrapper.optim_context` 里做前向（你的前向钩子在这里运行），然后调用 "
                          "`OptimWrapper.update_params`：先 `scale_loss`（除以 `accumulative_counts`），再 "
                          "`backward`（你的反向钩子和张量钩子），`should_update()` 为真时依次 `step`、`zero_grad`。"
                          "所以 `after_train_iter` 总在本次迭代的所有梯度钩子之后运行，更新的那一步还在 step 之后。",
               "remove": "模型上没有要移除的；Runner 的钩子来自 `default_hooks`（把某个键设为 `None` 即可去掉）"
                         "或 `custom_hooks`。",
               "api": "`Hook` 的方法按 `priority`（同级按注册顺序）调用：`before_run`、`before_train`、"
                      "`before_train_epoch`、`before_train_iter`、（train_step）、`after_train_iter`、"
                      "`after_train_epoch`、`after_train`、`after_run`（以及 `val`/`test` 的对应方法）。"
                      "`OptimWrapper.update_params(loss)` 就是 `backward` + `step` + `zero_grad`，每一步都可覆盖。"},
    },
    surprises=(
        {"fact": "facts.accumulate_2",
         "en": "With `accumulative_counts=2`, `zero_grad` comes right after `step` at the end of the second "
               "iteration, not before the first forward: gradients left on the parameters before `train()` "
               "are added into the first update.",
         "zh": "`accumulative_counts=2` 时，`zero_grad` 紧跟在第二次迭代末尾的 `step` 之后，而不是在第一次前向之前："
               "`train()` 之前参数上残留的梯度会被加进第一次更新。"},
    ),
)
TARGET = "net.0"


def _model_class():
    from mmengine.model import BaseModel

    class Net(BaseModel):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))

        def forward(self, inputs, data_samples=None, mode="tensor"):
            out = self.net(inputs)
            return {"loss": out.pow(2).mean()} if mode == "loss" else out
    return Net


def build() -> nn.Module:
    return _model_class()()


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),)


def _train(model: nn.Module, iters: int, optim_wrapper, hooks: list, name: str) -> None:
    from mmengine.runner import Runner
    from torch.utils.data import DataLoader
    g = torch.Generator().manual_seed(1)
    data = [{"inputs": torch.randn(4, generator=g)} for _ in range(2 * iters)]
    with tempfile.TemporaryDirectory() as work_dir:
        Runner(model=model, work_dir=work_dir, experiment_name=name, train_dataloader=DataLoader(data, batch_size=2),
               optim_wrapper=optim_wrapper, train_cfg=dict(by_epoch=False, max_iters=iters),
               default_hooks=dict(checkpoint=None, logger=None), custom_hooks=hooks).train()


def apply(model: nn.Module) -> nn.Module:
    """One training iteration of a ``Runner`` (learning rate 0: the probe's model stays as built)."""
    _train(model, 1, dict(optimizer=dict(type="SGD", lr=0.0)), [], "hooklab-probe")
    return model


def facts() -> dict:
    from mmengine.hooks import Hook
    from mmengine.optim import OptimWrapper
    log: list[str] = []

    class Logging(Hook):
        pass
    for stage in ("before_run", "before_train", "before_train_epoch", "before_train_iter", "after_train_iter",
                  "after_train_epoch", "after_train", "after_run"):
        setattr(Logging, stage, lambda self, *a, _s=stage, **k: log.append(f"Hook.{_s}"))

    class Logged(torch.optim.SGD):
        def zero_grad(self, set_to_none: bool = True) -> None:
            log.append("optimizer.zero_grad")
            super().zero_grad(set_to_none)

        def step(self, closure=None):
            log.append("optimizer.step")
            return super().step(closure)

    model = build()
    layer = model.net[0]
    layer.register_forward_pre_hook(lambda *a: log.append("module forward_pre hook"))
    layer.register_forward_hook(lambda *a: log.append("module forward hook"))
    layer.register_full_backward_hook(lambda *a: log.append("module backward hook"))
    layer.weight.register_hook(lambda g: log.append("tensor hook (weight)"))
    layer.weight.register_post_accumulate_grad_hook(lambda p: log.append("post_accumulate_grad hook (weight)"))
    _train(model, 2, OptimWrapper(Logged(model.parameters(), lr=0.1), accumulative_counts=2), [Logging()],
           "hooklab-facts")
    starts = [i for i, label in enumerate(log) if label == "Hook.before_train_iter"]
    ends = [i for i, label in enumerate(log) if label == "Hook.after_train_iter"]
    return {"around_training": log[:starts[0]] + ["..."] + log[ends[-1] + 1:],
            "accumulate_2": {f"iteration {k + 1}": log[s:e + 1] for k, (s, e) in enumerate(zip(starts, ends))},
            "model_hooks_added": sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
            - 2}
