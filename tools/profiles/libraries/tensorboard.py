"""tensorboard (through ``torch.utils.tensorboard.SummaryWriter``): ``add_graph`` traces the model with
``torch.jit.trace`` in ``eval()`` mode, which runs the model, and the user's forward hooks, three times; it registers
no hook, and refuses a model with a full backward hook."""
from __future__ import annotations

import tempfile
import warnings

import torch
from torch import nn

from ..spec import Library
from ._small import build, inputs  # noqa: F401 - the probe reads them from this module

TORCH = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/utils/tensorboard/"
LIBRARY = Library(
    slug="tensorboard", name="tensorboard", category="trackers and trainers",
    entry="torch.utils.tensorboard.SummaryWriter(log_dir).add_graph(model, inputs)",
    names=("SummaryWriter", "add_graph", "add_histogram", "add_scalar", "torch.jit.trace", "_set_model_to_eval",
           "use_strict_trace", "EventAccumulator"),
    sources=(TORCH + "_pytorch_graph.py#L313-L369",
             "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/jit/_trace.py#L1323-L1327"),
    words={
        "en": {"summary": "Registers no hook. `add_graph` sets the model to `eval()` for the call "
                          "(`_set_model_to_eval`) and calls `torch.jit.trace(model, inputs)`, which runs the model "
                          "three times (the trace, then its sanity check): your forward pre-hooks and forward hooks "
                          "fire each time, see `module.training == False`, and their side effects happen; no "
                          "backward runs. A full backward hook makes the trace refuse the module (`ValueError`), a "
                          "full backward pre-hook fails the trace's check (`TracingCheckError`). Tensor operations "
                          "your forward hooks perform are recorded in the graph as the model's. `torch.jit.trace` "
                          "itself warns that it is deprecated (`FutureWarning`). Logging gradients is done with your "
                          "own tensor hook that calls `add_histogram`.",
               "remove": "Nothing to remove. Call `add_graph` before registering backward hooks (or on a copy "
                         "without them); to keep the trace from running your hooks' side effects, register them "
                         "after `add_graph`.",
               "api": "No hook API of its own: `add_scalar`, `add_histogram`, `add_graph` are plain calls; for "
                      "gradients, call `add_histogram` in `param.register_hook(...)` or after `backward()`."},
        "zh": {"summary": "不注册任何钩子。`add_graph` 在调用期间把模型切到 `eval()`（`_set_model_to_eval`），"
                          "再调用 `torch.jit.trace(model, inputs)`；追踪加上随后的一致性检查，模型一共前向了三次："
                          "你的前向前置钩子和前向钩子每次都会触发，看到的是 `module.training == False`，副作用也都会发生；"
                          "不做反向。模块上有完整反向钩子时追踪直接拒绝（`ValueError`），有完整反向前置钩子时一致性检查"
                          "失败（`TracingCheckError`）。前向钩子里做的张量运算会被当作模型自己的运算记进图里。"
                          "`torch.jit.trace` 本身还会发出已弃用的 `FutureWarning`。记录梯度的常见做法是"
                          "自己注册张量钩子，在里面调用 `add_histogram`。",
               "remove": "没有要移除的。先调用 `add_graph` 再注册反向钩子（或拿一个不带这些钩子的副本去追踪）；"
                         "不想让追踪触发钩子的副作用，就在 `add_graph` 之后再注册钩子。",
               "api": "没有自己的钩子 API：`add_scalar`、`add_histogram`、`add_graph` 都是普通调用；"
                      "要记录梯度，就在 `param.register_hook(...)` 里或 `backward()` 之后调用 `add_histogram`。"},
    },
    surprises=(
        {"fact": "facts.add_graph_by_hooks",
         "en": "`add_graph` fails on a model with a full backward hook (`ValueError` from `torch.jit.trace`) or a "
               "full backward pre-hook (`TracingCheckError`), although drawing a graph needs no backward.",
         "zh": "模型上有完整反向钩子时 `add_graph` 会失败（`torch.jit.trace` 抛 `ValueError`），有完整反向前置钩子时"
               "抛 `TracingCheckError`，尽管画图根本用不到反向。"},
        {"fact": "facts.add_graph_hook_calls",
         "en": "`add_graph` runs your forward hooks three times, in `eval()` mode, although it only draws a graph.",
         "zh": "`add_graph` 只是画一张图，却会把你的前向钩子运行三次，而且处于 `eval()` 模式。"},
        {"fact": "facts.graph_records_hook_ops",
         "en": "A tensor operation done in a forward hook (here a `mul` that changes the output) appears in the "
               "graph that `add_graph` logs, as part of the model.",
         "zh": "前向钩子里做的张量运算（这里是一个改写输出的 `mul`）会出现在 `add_graph` 记录的图里，"
               "看起来就像模型本身的一部分。"},
    ),
)
TARGET = "0"


def apply(model: nn.Module) -> nn.Module:
    """``add_graph`` into a temporary directory. The probe's own hooks include a full backward hook, which
    ``torch.jit.trace`` refuses with a ``ValueError`` (``facts.add_graph_by_hooks``): that refusal is caught here,
    so the probe's entry shows nothing ran; ``facts`` measures the trace on models it can run on."""
    from torch.utils.tensorboard import SummaryWriter
    with tempfile.TemporaryDirectory() as log_dir:
        writer = SummaryWriter(log_dir)
        try:
            writer.add_graph(model, inputs())
        except Exception:  # noqa: BLE001, S110 - ValueError: the probe's full backward hook (see facts)
            pass
        writer.close()
    return model


def _add_graph(model: nn.Module) -> str:
    from torch.utils.tensorboard import SummaryWriter
    with tempfile.TemporaryDirectory() as log_dir:
        writer = SummaryWriter(log_dir)
        try:
            writer.add_graph(model, inputs())
        except Exception as exc:  # noqa: BLE001 - a refusal is the finding
            return f"raises {type(exc).__name__}"
        finally:
            writer.close()
    return "runs"


def _graph_ops(model: nn.Module) -> list[str]:
    from torch.utils.tensorboard._pytorch_graph import graph
    graph_def, _ = graph(model, inputs())
    return sorted({node.op for node in graph_def.node if node.op.startswith("aten::")})


def facts() -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter
    torch.manual_seed(0)
    model = build()
    calls: list[str] = []
    model[0].register_forward_pre_hook(lambda m, a: calls.append(f"forward_pre (training={m.training})"))
    model[0].register_forward_hook(lambda m, a, o: calls.append(f"forward (training={m.training})"))
    model[0].weight.register_hook(lambda g: calls.append("tensor"))
    with tempfile.TemporaryDirectory() as log_dir, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        writer = SummaryWriter(log_dir)
        writer.add_graph(model, inputs())
        graph_calls, training_after = list(calls), model.training
        # the common pattern: a tensor hook that logs each gradient as a histogram
        step = {"n": 0}
        model[2].weight.register_hook(lambda g: writer.add_histogram("grad/2.weight", g, step["n"]))
        for step["n"] in range(2):
            model(*inputs()).pow(2).mean().backward()
        writer.close()
        events = EventAccumulator(log_dir, size_guidance={"histograms": 0})
        events.Reload()
        histograms = len(events.Histograms("grad/2.weight"))
    by_hooks = {}
    for kind in ("forward_pre", "forward", "backward_pre", "backward", "tensor"):
        probe = build()
        register = {"forward_pre": lambda m: m.register_forward_pre_hook(lambda *a: None),
                    "forward": lambda m: m.register_forward_hook(lambda *a: None),
                    "backward_pre": lambda m: m.register_full_backward_pre_hook(lambda *a: None),
                    "backward": lambda m: m.register_full_backward_hook(lambda *a: None),
                    "tensor": lambda m: m.weight.register_hook(lambda g: None)}[kind]
        register(probe[0])
        by_hooks[kind] = _add_graph(probe)
    plain = _graph_ops(build())
    hooked = build()
    hooked[0].register_forward_hook(lambda m, a, o: o * 2)
    return {
        "add_graph_by_hooks": by_hooks,
        "add_graph_hook_calls": graph_calls,
        "training_restored": training_after,
        "add_graph_warnings": sorted({w.category.__name__ for w in caught}),
        "histograms_from_grad_hook": histograms,
        "graph_ops_plain": plain,
        "graph_records_hook_ops": sorted(set(_graph_ops(hooked)) - set(plain)),
    }
