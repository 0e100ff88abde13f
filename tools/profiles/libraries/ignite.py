"""pytorch-ignite: an ``Engine`` fires its own events around an update function; ``create_supervised_trainer`` puts
no hook on the model, so the user's module and tensor hooks run inside the update, between ``ITERATION_STARTED``
and ``ITERATION_COMPLETED``."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

SRC = "https://github.com/pytorch/ignite/blob/v0.5.5/ignite/engine/"
LIBRARY = Library(
    slug="ignite", name="pytorch-ignite", import_name="ignite", requirement="pytorch-ignite==0.5.5",
    category="trackers and trainers",
    entry="ignite.engine.create_supervised_trainer(model, optimizer, loss_fn).run(data, max_epochs=1)",
    names=("Engine", "Events", "create_supervised_trainer", "supervised_training_step", "add_event_handler",
           "on", "ITERATION_STARTED", "ITERATION_COMPLETED", "GET_BATCH_STARTED", "GET_BATCH_COMPLETED",
           "EPOCH_STARTED", "EPOCH_COMPLETED", "gradient_accumulation_steps", "CallableEventWithFilter"),
    sources=(SRC + "__init__.py#L58-L141", SRC + "events.py#L247-L400", SRC + "engine.py"),
    words={
        "en": {"summary": "Registers no hook on the model. An `Engine` calls its event handlers around the update "
                          "function; the update made by `create_supervised_trainer` does `zero_grad`, `train()`, "
                          "the forward, the loss, `backward` and `optimizer.step` in that order, so every module and "
                          "tensor hook of yours runs after `ITERATION_STARTED` and before `ITERATION_COMPLETED`. "
                          "With `gradient_accumulation_steps=2` the update zeroes on odd iterations and steps on "
                          "even ones; your hooks run on every iteration.",
               "remove": "Nothing to remove on the model; `engine.remove_event_handler(handler, event)` or the "
                         "handle returned by `add_event_handler` (`handle.remove()`) takes an event handler off.",
               "api": "`engine.add_event_handler(Events.X, fn)` or `@engine.on(Events.X)`, with filters such as "
                      "`Events.ITERATION_COMPLETED(every=2)`. One run: `STARTED`, `EPOCH_STARTED`, then per "
                      "iteration `GET_BATCH_STARTED`, `GET_BATCH_COMPLETED`, `ITERATION_STARTED`, the update, "
                      "`ITERATION_COMPLETED`; then `EPOCH_COMPLETED`, `COMPLETED`. Handlers of one event run in the "
                      "order added."},
        "zh": {"summary": "不在模型上注册钩子。`Engine` 在更新函数前后调用事件处理函数；"
                          "`create_supervised_trainer` 生成的更新函数依次做 `zero_grad`、`train()`、前向、算损失、"
                          "`backward`、`optimizer.step`，所以你的模块钩子和张量钩子都在 `ITERATION_STARTED` 之后、"
                          "`ITERATION_COMPLETED` 之前运行。`gradient_accumulation_steps=2` 时，奇数次迭代清零梯度、"
                          "偶数次迭代更新参数；你的钩子每次迭代都运行。",
               "remove": "模型上没有要移除的；事件处理函数用 `engine.remove_event_handler(handler, event)` 或 "
                         "`add_event_handler` 返回的句柄（`handle.remove()`）移除。",
               "api": "`engine.add_event_handler(Events.X, fn)` 或 `@engine.on(Events.X)`，可以加过滤条件，如 "
                      "`Events.ITERATION_COMPLETED(every=2)`。一次 run：`STARTED`、`EPOCH_STARTED`，每次迭代是 "
                      "`GET_BATCH_STARTED`、`GET_BATCH_COMPLETED`、`ITERATION_STARTED`、更新函数、"
                      "`ITERATION_COMPLETED`；最后 `EPOCH_COMPLETED`、`COMPLETED`。同一事件的处理函数按添加顺序运行。"},
    },
    surprises=(
        {"fact": "facts.accumulate_2",
         "en": "With `gradient_accumulation_steps=2`, `zero_grad` runs at the start of the first iteration and "
               "`optimizer.step` at the end of the second: an `ITERATION_COMPLETED` handler after the first "
               "iteration sees gradients that have not been applied yet.",
         "zh": "`gradient_accumulation_steps=2` 时，`zero_grad` 在第一次迭代开始时运行，`optimizer.step` 在第二次"
               "迭代末尾运行：第一次迭代后的 `ITERATION_COMPLETED` 处理函数看到的是尚未应用的梯度。"},
    ),
)
TARGET = "0"


def _data(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(3, 4, generator=g), torch.randn(3, 2, generator=g)) for _ in range(n)]


def apply(model: nn.Module) -> nn.Module:
    """One iteration of the standard trainer (the probe's entry shows the user's hooks running inside it)."""
    from ignite.engine import create_supervised_trainer
    trainer = create_supervised_trainer(model, torch.optim.SGD(model.parameters(), lr=0.0), nn.MSELoss())
    trainer.run(_data(1), max_epochs=1)
    return model


def _run(log: list[str], *, iterations: int, accumulate: int) -> None:
    from ignite.engine import Events, create_supervised_trainer

    class Logged(torch.optim.SGD):
        def zero_grad(self, set_to_none: bool = True) -> None:
            log.append("optimizer.zero_grad")
            super().zero_grad(set_to_none)

        def step(self, closure=None):
            log.append("optimizer.step")
            return super().step(closure)

    model = build()
    layer = model[0]
    layer.register_forward_pre_hook(lambda *a: log.append("module forward_pre hook"))
    layer.register_forward_hook(lambda *a: log.append("module forward hook"))
    layer.register_full_backward_hook(lambda *a: log.append("module backward hook"))
    layer.weight.register_hook(lambda g: log.append("tensor hook (weight)"))
    layer.weight.register_post_accumulate_grad_hook(lambda p: log.append("post_accumulate_grad hook (weight)"))
    trainer = create_supervised_trainer(model, Logged(model.parameters(), lr=0.1), nn.MSELoss(),
                                        gradient_accumulation_steps=accumulate)
    for event in Events:
        if event.name not in ("EXCEPTION_RAISED", "TERMINATE", "TERMINATE_SINGLE_EPOCH", "INTERRUPT"):
            trainer.add_event_handler(event, lambda engine, _n=event.name: log.append(f"Events.{_n}"))
    trainer.run(_data(iterations), max_epochs=1)


def facts() -> dict:
    one: list[str] = []
    _run(one, iterations=1, accumulate=1)
    two: list[str] = []
    _run(two, iterations=2, accumulate=2)
    cuts = [i for i, label in enumerate(two) if label == "Events.ITERATION_STARTED"]
    ends = [i for i, label in enumerate(two) if label == "Events.ITERATION_COMPLETED"]
    return {"one_run": one,
            "accumulate_2": {f"iteration {k + 1}": two[c:e + 1] for k, (c, e) in enumerate(zip(cuts, ends))}}
