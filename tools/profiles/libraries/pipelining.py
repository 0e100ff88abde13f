"""torch (pipelining: ``torch.distributed.pipelining.pipeline``): traces the model with ``torch.export`` and runs
new stage modules (``GraphModule``s of ``InterpreterModule``s) that share its parameters; the model's module hooks run
while it is traced and never again. Measured with one and two stages in a one-process gloo group."""
from __future__ import annotations

import torch
from torch import nn

from ..spec import Library
from ._gloo import one_process_group

SRC = "https://github.com/pytorch/pytorch/blob/v2.15.0/torch/distributed/pipelining/_IR.py"
LIBRARY = Library(
    title='torch.distributed.pipelining', slug="pipelining", name="torch", category="distributed and memory",
    entry="torch.distributed.pipelining.pipeline(model, mb_args=(x,)).get_stage_module(0)",
    names=("pipeline", "Pipe", "SplitPoint", "pipe_split", "annotate_split_points", "get_stage_module", "build_stage",
           "PipelineStage", "ScheduleGPipe", "ScheduleLoopedBFS", "InterpreterModule", "split_gm"),
    sources=(f"{SRC}#L615-L628", f"{SRC}#L674-L682", f"{SRC}#L1050-L1067", f"{SRC}#L1223-L1244",
             f"{SRC}#L1247-L1296"),
    words={
        "en": {"summary": "PyTorch's own pipeline parallelism traces the model with `torch.export` (running it once, "
                          "so your forward hooks fire then) and splits the graph into stage modules: `GraphModule`s "
                          "whose children are new `InterpreterModule`s. The stages share the model's parameters but "
                          "not its modules: module hooks on the original model never run in a pipeline step, "
                          "parameter hooks do (once per microbatch), and what a forward hook did to a value while "
                          "tracing is baked into the stage's graph.",
               "remove": "Nothing to remove on the stages. Run the original model to get your module hooks back, "
                         "and `del layer.forward` on a module named in `split_spec` (its `forward` was replaced on "
                         "the instance). Hooks for the pipeline go on `pipe.get_stage_module(i)`'s submodules.",
               "api": "No hook API. `split_spec={'layer': SplitPoint.BEGINNING}` or `pipe_split()` in `forward` "
                      "mark the cuts; a schedule (`ScheduleGPipe`, `ScheduleLoopedBFS`, ...) runs each stage once "
                      "per microbatch, so hooks on stage submodules fire `n_microbatches` times per step."},
        "zh": {"summary": "PyTorch 自带的流水线并行先用 `torch.export` 追踪模型（会真的跑一遍，你的前向钩子此时触发），"
                          "再把图切成若干阶段模块：子模块是新建 `InterpreterModule` 的 `GraphModule`。各阶段共享原模型的"
                          "参数，但不共享模块：原模型上的模块钩子在流水线的训练步里永远不会运行，参数钩子会（每个微批次"
                          "一次），而追踪时前向钩子对数值做的改动被固化进了阶段的计算图。",
               "remove": "阶段模块上没什么可去掉的。要让模块钩子重新生效就运行原模型；`split_spec` 里点名的模块，其实例上"
                         "的 `forward` 被替换了，用 `del layer.forward` 还原。给流水线挂钩子要挂在 "
                         "`pipe.get_stage_module(i)` 的子模块上。",
               "api": "没有钩子 API。用 `split_spec={'layer': SplitPoint.BEGINNING}` 或在 `forward` 里调用 "
                      "`pipe_split()` 标出切分点；调度器（`ScheduleGPipe`、`ScheduleLoopedBFS` 等）每个微批次运行"
                      "每个阶段一次，所以阶段子模块上的钩子每步触发 `n_microbatches` 次。"}},
    surprises=(
        {"fact": "facts.schedule_step",
         "en": "In a pipeline step the original model's module hooks fire zero times, while a gradient hook on one "
               "of its parameters fires once per microbatch.",
         "zh": "流水线的一个训练步里，原模型上的模块钩子一次也不触发，而它某个参数上的梯度钩子每个微批次触发一次。"},
        {"fact": "facts.forward_hook_baked_in",
         "en": "A forward hook that changed an output while `pipeline()` traced is part of the stage's graph: "
               "removing the hook afterwards changes nothing in the pipeline.",
         "zh": "`pipeline()` 追踪时改过输出的前向钩子已成为阶段计算图的一部分：事后删掉这个钩子，流水线的结果不变。"},
        {"fact": "facts.split_spec_replaces_forward_on_the_model",
         "en": "`split_spec` replaces `forward` on your own model's module and leaves it there after `pipeline()` "
               "returns.",
         "zh": "`split_spec` 会替换你自己模型里那个模块实例上的 `forward`，`pipeline()` 返回后也不还原。"}),
)
TARGET = "0"


def build() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(4, 4, generator=torch.Generator().manual_seed(0)),)


def apply(model: nn.Module) -> nn.Module:
    from torch.distributed.pipelining import pipeline
    one_process_group()
    return pipeline(model, mb_args=inputs()).get_stage_module(0)


def _hooked(model: nn.Module, log: list[str], label: str) -> None:
    module = model.get_submodule("0")
    module.register_forward_pre_hook(lambda m, a: log.append(f"{label}: forward_pre"))
    module.register_forward_hook(lambda m, a, o: log.append(f"{label}: forward"))
    module.register_full_backward_hook(lambda m, gi, go: log.append(f"{label}: backward"))


def facts() -> dict:
    """Hooks fired while ``pipeline()`` traces; hook calls in one ``ScheduleGPipe`` step of two microbatches; a
    forward hook's edit baked into the stage; ``split_spec`` on the model; two stages run on one rank."""
    from collections import Counter

    from torch.distributed.pipelining import ScheduleGPipe, ScheduleLoopedBFS, SplitPoint, pipeline
    one_process_group()
    x, loss = inputs()[0], (lambda out, target: out.pow(2).mean())
    torch.manual_seed(0)
    model, log = build(), []
    _hooked(model, log, "original module")
    model[0].weight.register_hook(lambda g: log.append("original parameter: tensor hook"))
    pipe = pipeline(model, mb_args=(x[:2],))
    tracing = list(log)
    log.clear()
    stage = pipe.build_stage(0, torch.device("cpu"))
    _hooked(stage.submod, log, "stage module")
    ScheduleGPipe(stage, n_microbatches=2, loss_fn=loss).step(x, target=torch.zeros(4, 2))
    step = dict(sorted(Counter(log).items()))
    model = build()
    handle = model[0].register_forward_hook(lambda m, a, o: o * 0)
    with torch.no_grad():
        hooked_out = model(x)
        stage_module = pipeline(model, mb_args=(x,)).get_stage_module(0)
        handle.remove()
        baked = {"stage_matches_model_with_hook": torch.equal(stage_module(x), hooked_out),
                 "stage_matches_model_without_it": torch.equal(stage_module(x), model(x))}
    model, log = build(), []
    pipe = pipeline(model, mb_args=(x[:2],), split_spec={"2": SplitPoint.BEGINNING})
    replaced = "forward" in model[2].__dict__
    stages = [pipe.build_stage(i, torch.device("cpu")) for i in range(pipe.num_stages)]
    for i, each in enumerate(stages):
        first = next(iter(each.submod.named_children()))[1]
        first.register_forward_pre_hook(lambda m, a, i=i: log.append(f"stage {i}: forward_pre"))
    ScheduleLoopedBFS(stages, n_microbatches=2, loss_fn=loss).step(x, target=torch.zeros(4, 2))
    return {"hooks_fired_while_tracing": tracing, "schedule_step": step, "forward_hook_baked_in": baked,
            "stage_submodule_class": type(stage.submod.get_submodule("0")).__name__,
            "split_spec_replaces_forward_on_the_model": replaced,
            "two_stages_on_one_rank": {"stages": pipe.num_stages, "hook_calls": dict(sorted(Counter(log).items()))}}
