"""composer (MosaicML): an ``Engine`` runs ``Algorithm``s and then ``Callback``s at each ``Event``; it registers no
PyTorch hook, but some algorithms rewrite the model at ``Event.INIT`` (module surgery). Read from the source: the
release pins an older torch."""
from __future__ import annotations

from ..spec import Library

SRC = "https://github.com/mosaicml/composer/blob/v0.32.1/composer/"
LIBRARY = Library(
    slug="composer", name="mosaicml", import_name="composer", status="source", category="trackers and trainers",
    entry="composer.Trainer(model=ComposerModel, algorithms=[...], callbacks=[...]).fit()",
    names=("Trainer", "Engine", "Event", "Algorithm", "Callback", "run_event", "set_filo_order",
           "module_surgery", "replace_module_classes", "update_params_in_optimizer", "SqueezeExcite",
           "SqueezeExciteConv2d", "BlurPool", "BlurConv2d", "ChannelsLast", "BEFORE_FORWARD", "AFTER_FORWARD",
           "BEFORE_LOSS", "AFTER_LOSS", "BEFORE_BACKWARD", "AFTER_BACKWARD", "BEFORE_TRAIN_BATCH",
           "AFTER_TRAIN_BATCH", "BATCH_END"),
    sources=(SRC + "core/engine.py#L227-L310", SRC + "core/passes.py#L107-L123",
             SRC + "trainer/trainer.py#L2672-L2694", SRC + "trainer/trainer.py#L2817-L2866",
             SRC + "trainer/trainer.py#L2921-L2998", SRC + "utils/module_surgery.py#L157-L215",
             SRC + "algorithms/squeeze_excite/squeeze_excite.py#L109-L123",
             SRC + "algorithms/blurpool/blurpool_layers.py#L305-L324",
             SRC + "algorithms/channels_last/channels_last.py#L21-L30"),
    why_source={"en": "mosaicml 0.32.1, the newest release, requires torch < 2.8: installing it replaces the "
                      "project's torch 2.15.0 with 2.7.0.",
                "zh": "最新版 mosaicml 0.32.1 要求 torch < 2.8：装上它会把项目的 torch 2.15.0 换成 2.7.0。"},
    installs=(
        {"where": "the model (Event.INIT)", "kind": "module surgery",
         "what": "BlurPool: `replace_module_classes` swaps each `Conv2d` for a new `BlurConv2d` whose inner conv "
                 "copies the weights: the old module, its hooks and its parameters' hooks leave the model"},
        {"where": "the model (Event.INIT)", "kind": "module surgery",
         "what": "SqueezeExcite: each large enough `Conv2d` is wrapped in `SqueezeExciteConv2d(conv=old)`: the old "
                 "conv and its hooks stay, one level down (`.conv`), followed by a new `.se` block"},
        {"where": "the model (Event.INIT)", "kind": "memory format",
         "what": "ChannelsLast: `model.to(memory_format=torch.channels_last)`; no module is replaced"},
    ),
    order={"en": "One batch: `BATCH_START`, `BEFORE_TRAIN_BATCH`, `zero_grad`, then per microbatch "
                 "`BEFORE_FORWARD`, the forward (your forward hooks), `AFTER_FORWARD`, `BEFORE_LOSS`, "
                 "`AFTER_LOSS`, `BEFORE_BACKWARD`, `backward` (your backward and tensor hooks), `AFTER_BACKWARD`; "
                 "then `AFTER_TRAIN_BATCH`, then `optimizer.step()` (inside it, as a closure, for algorithms such "
                 "as SAM), then `BATCH_END`. At each event the algorithms run first, in the order given for "
                 "`BEFORE_*` events and reversed for `AFTER_*` events, then the callbacks, then the loggers "
                 "(`Event.INIT`: loggers and callbacks before algorithms).",
           "zh": "一个 batch：`BATCH_START`、`BEFORE_TRAIN_BATCH`、`zero_grad`，然后每个 microbatch 依次是 "
                 "`BEFORE_FORWARD`、前向（你的前向钩子）、`AFTER_FORWARD`、`BEFORE_LOSS`、`AFTER_LOSS`、"
                 "`BEFORE_BACKWARD`、`backward`（你的反向钩子和张量钩子）、`AFTER_BACKWARD`；之后是 "
                 "`AFTER_TRAIN_BATCH`，再是 `optimizer.step()`（SAM 这类算法则把整个过程当闭包放进 step 里），"
                 "最后 `BATCH_END`。每个事件上先运行算法：`BEFORE_*` 事件按给定顺序，`AFTER_*` 事件倒序；"
                 "然后是回调，最后是 logger（`Event.INIT` 例外：先 logger 和回调，后算法）。"},
    words={
        "en": {"summary": "Registers no PyTorch hook: algorithms and callbacks are called by the `Engine` between "
                          "the trainer's steps, so your module and tensor hooks run inside the forward and backward "
                          "as usual. Algorithms that do module surgery at `Event.INIT` change which modules carry "
                          "your hooks: BlurPool replaces each `Conv2d` with a new module (hooks registered before "
                          "`Trainer(...)` are gone), SqueezeExcite wraps it (they stay, under a new path).",
               "remove": "Nothing to remove; register your hooks after the `Trainer` is built (after `Event.INIT`), "
                         "or leave out the surgery algorithms.",
               "api": "`Algorithm.match(event, state)` / `apply(event, state, logger)` and `Callback` methods named "
                      "after each `Event` (`before_forward`, `after_backward`, ...). `AFTER_TRAIN_BATCH` runs "
                      "before `optimizer.step()`, `BATCH_END` after it."},
        "zh": {"summary": "不注册 PyTorch 钩子：算法和回调由 `Engine` 在训练器的各步之间调用，你的模块钩子和张量钩子"
                          "照常在前向、反向里运行。在 `Event.INIT` 做模块手术的算法会改变钩子挂在哪个模块上："
                          "BlurPool 把每个 `Conv2d` 换成新模块（`Trainer(...)` 之前注册的钩子随之消失），"
                          "SqueezeExcite 则把它包起来（钩子还在，只是路径变了）。",
               "remove": "没有要移除的；在 `Trainer` 建好之后（`Event.INIT` 之后）再注册钩子，或者不用做模块手术的算法。",
               "api": "`Algorithm.match(event, state)` / `apply(event, state, logger)`，以及以各个 `Event` 命名的 "
                      "`Callback` 方法（`before_forward`、`after_backward` 等）。`AFTER_TRAIN_BATCH` 在 "
                      "`optimizer.step()` 之前运行，`BATCH_END` 在它之后。"},
    },
    surprises=(
        {"fact": "source: " + SRC + "trainer/trainer.py#L2672-L2694",
         "en": "`Event.AFTER_TRAIN_BATCH` runs before `optimizer.step()`: a callback there sees this batch's "
               "gradients with the old weights.",
         "zh": "`Event.AFTER_TRAIN_BATCH` 在 `optimizer.step()` 之前运行：在这里的回调看到的是本批的梯度和尚未更新的"
               "权重。"},
        {"fact": "source: " + SRC + "algorithms/blurpool/blurpool_layers.py#L305-L324",
         "en": "With `BlurPool`, the hooks you put on a `Conv2d` before building the `Trainer` are gone: the conv is "
               "replaced by a new module that copies its weights.",
         "zh": "用了 `BlurPool` 之后，`Trainer` 建好之前挂在 `Conv2d` 上的钩子就没了：这个卷积被换成了一个复制其权重的"
               "新模块。"},
    ),
)
