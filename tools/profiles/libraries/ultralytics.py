"""ultralytics: ``YOLO.predict`` deep-copies the model (the user's hooks go along), fuses Conv + BatchNorm in the copy
(``forward`` replaced on each ``Conv`` instance, its ``BatchNorm2d`` deleted) and runs the copy;
its own callbacks (``add_callback``) fire around the model's forward."""
from __future__ import annotations

import os
import tempfile

import torch
from torch import nn

from ..spec import Library

V = "https://github.com/ultralytics/ultralytics/blob/v8.4.190/ultralytics/"
EVENTS = ("on_predict_start", "on_predict_batch_start", "on_predict_postprocess_end", "on_predict_batch_end",
          "on_predict_end")
LIBRARY = Library(
    slug="ultralytics", name="ultralytics", category="model libraries", requirement="ultralytics==8.4.190",
    entry="YOLO('yolov8n.yaml').predict(image, imgsz=64, device='cpu')",
    names=("YOLO", "Model", "add_callback", "clear_callback", "reset_callbacks", "run_callbacks",
           "get_default_callbacks", "add_integration_callbacks", "BasePredictor", "setup_model", "stream_inference",
           "AutoBackend", "PyTorchBackend", "fuse", "forward_fuse", "fuse_conv_and_bn", "_predict_once", "embed",
           "on_predict_start", "on_predict_batch_start", "on_predict_postprocess_end", "on_predict_batch_end",
           "on_predict_end"),
    sources=(V + "engine/predictor.py#L321-L455", V + "engine/predictor.py#L458-L480",
             V + "engine/predictor.py#L599-L606", V + "nn/backends/pytorch.py#L48-L78", V + "nn/tasks.py#L182-L208",
             V + "nn/tasks.py#L244-L281", V + "utils/torch_utils.py#L381-L402", V + "engine/model.py#L1073-L1093",
             V + "utils/callbacks/base.py#L175-L209"),
    words={
        "en": {"summary": "`predict` builds a predictor whose `setup_model` runs `deepcopy(model)` and wraps the copy "
                          "in an `AutoBackend`, which calls `fuse()`: on every `Conv` block the `Conv2d` gets new "
                          "fused `weight` / `bias` parameters, the `BatchNorm2d` is deleted and `forward` is set to "
                          "`forward_fuse` on the instance; all parameters get `requires_grad=False`. The user's "
                          "model is left as it was and never runs: the hooks it had at the first `predict` run as "
                          "copies on the copy (those on the `BatchNorm2d` are gone), and hooks added to it later "
                          "are not seen until the predictor is rebuilt.",
               "remove": "Nothing is put on the user's model. To hook what `predict` runs, register on "
                         "`yolo.predictor.model` after the first call, or hook the model before it and remember "
                         "that `module` is then a copy. `clear_callback(event)` / `reset_callbacks()` remove "
                         "callbacks.",
               "api": "`yolo.add_callback(event, fn)` appends `fn(predictor)` to a list per event; the predictor "
                      "shares that dict and, when it is created, appends its integration callbacks. In one `predict`: "
                      "`on_predict_start`, then per batch `on_predict_batch_start`, the model's forward (module "
                      "hooks), `on_predict_postprocess_end`, `on_predict_batch_end`, and `on_predict_end` at the "
                      "end. `BaseModel._predict_once` calls each layer as a module, and with `embed=[i]` it "
                      "returns after layer `i`, so later layers' hooks do not run."},
        "zh": {"summary": "`predict` 会创建一个 predictor，它的 `setup_model` 先执行 `deepcopy(model)`，再把拷贝包进 "
                          "`AutoBackend`，后者调用 `fuse()`：每个 `Conv` 块里的 `Conv2d` 换上融合后的新 `weight` / "
                          "`bias` 参数，`BatchNorm2d` 被删掉，实例上的 `forward` 被设成 `forward_fuse`；所有参数都变成 "
                          "`requires_grad=False`。用户手里的模型保持原样、从不运行：第一次 `predict` 时它身上的钩子作为"
                          "拷贝在拷贝模型上运行（挂在 `BatchNorm2d` 上的那些没了），之后再加到它上面的"
                          "钩子，在 predictor 重建之前都看不到。",
               "remove": "它不往用户的模型上放任何东西。要钩住 `predict` 实际运行的模型，就在第一次调用之后注册到 "
                         "`yolo.predictor.model` 上；或者在调用之前钩住原模型，但要记得那时参数 `module` 是拷贝。"
                         "`clear_callback(event)` / `reset_callbacks()` 用来删除回调。",
               "api": "`yolo.add_callback(event, fn)` 把 `fn(predictor)` 追加到该事件的列表里；predictor 共用这个字典，"
                      "并在创建时往里追加自己的集成回调。一次 `predict` 里依次是：`on_predict_start`，每个批次的 "
                      "`on_predict_batch_start`、模型前向（模块钩子）、`on_predict_postprocess_end`、"
                      "`on_predict_batch_end`，最后 `on_predict_end`。`BaseModel._predict_once` 以模块身份逐层调用，"
                      "传 `embed=[i]` 时在第 `i` 层之后就返回，后面各层的钩子不会运行。"},
    },
    surprises=(
        {"fact": "facts.predict_runs_a_copy",
         "en": "`predict` never runs your model: it runs a deep copy, so a hook registered before the first "
               "`predict` fires with the copy as `module`, and one registered after it never fires.",
         "zh": "`predict` 从不运行你手里的模型，而是运行它的深拷贝：第一次 `predict` 之前注册的钩子触发时，"
               "参数 `module` 是拷贝；之后注册的钩子永远不触发。"},
        {"fact": "facts.fusion_drops_inner_hooks",
         "en": "Conv + BatchNorm fusion in the copy deletes every `BatchNorm2d`, so hooks on them never fire; "
               "a hook on the `Conv2d` still fires, but that convolution now computes conv and BatchNorm in one.",
         "zh": "拷贝里的 Conv + BatchNorm 融合删掉了所有 `BatchNorm2d`，挂在上面的钩子永远不触发；"
               "`Conv2d` 上的钩子还会触发，但这个卷积此时已经把卷积和 BatchNorm 合在一起算了。"},
    ),
)
TARGET = "model.0"
PROBES = frozenset({"accumulate"})
SKIPPED = {"accumulate": "the model predict runs has every parameter frozen (requires_grad=False): no gradients"}


def _yolo():
    config = os.path.join(tempfile.gettempdir(), "hooklab-ultralytics-config")  # its settings file, not in $HOME
    os.environ.setdefault("YOLO_CONFIG_DIR", config)
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_VERBOSE", "False")  # keeps its log lines out of the JSON on stdout
    from ultralytics import YOLO
    return YOLO("yolov8n.yaml", verbose=False)


def build() -> nn.Module:
    return _yolo().model  # the DetectionModel that YOLO("yolov8n.yaml") builds


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(0)),)


def _image():
    import numpy as np
    return np.zeros((64, 64, 3), dtype=np.uint8)


def apply(model: nn.Module) -> nn.Module:
    """``YOLO.predict`` on a YOLO holding ``model``; returns the model that predict ran (inside its ``AutoBackend``,
    whose backend is not a registered submodule, so it is taken out to be inspected)."""
    yolo = _yolo()
    yolo.model = model
    yolo.predict(_image(), imgsz=64, device="cpu", verbose=False)
    return yolo.predictor.model.backend.model


def facts() -> dict:
    yolo = _yolo()
    layer = yolo.model.model[0]
    log: list[str] = []
    passed: list[nn.Module] = []
    for event in EVENTS:
        yolo.add_callback(event, lambda predictor, e=event: log.append(e))
    layer.register_forward_hook(lambda m, a, out: (log.append("module forward hook"), passed.append(m)) and None)
    counts = {"Conv block": 0, "its Conv2d": 0, "its BatchNorm2d": 0}
    for name, module in (("Conv block", layer), ("its Conv2d", layer.conv), ("its BatchNorm2d", layer.bn)):
        module.register_forward_pre_hook(lambda *_, n=name: counts.__setitem__(n, counts[n] + 1))
    yolo.predict(_image(), imgsz=64, device="cpu", verbose=False)
    order, fused = list(log), dict(counts)
    late: list[str] = []
    yolo.model.model[0].register_forward_hook(lambda *_: late.append("late"))
    yolo.predict(_image(), imgsz=64, device="cpu", verbose=False)
    ran = yolo.predictor.model.backend.model
    copy_ = {"the model predict runs is yours": ran is yolo.model,
             "module passed to your hook is yours": bool(passed) and passed[0] is layer,
             "hook registered after the first predict fires": len(late)}

    tail: list[int] = []
    yolo.model.model[5].register_forward_pre_hook(lambda *_: tail.append(5))
    yolo.model.predict(inputs()[0], embed=[2])
    return {"callback_order": order, "predict_runs_a_copy": copy_, "fusion_drops_inner_hooks": fused,
            "fused_forward_set_on_instance": "forward" in ran.model[0].__dict__,
            "embed_stops_before_later_layers": not tail}
