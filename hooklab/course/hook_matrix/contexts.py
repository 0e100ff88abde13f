"""The columns of the matrix: every way of running code that changes what a hook does, one small function each.

A context is given a :class:`~.observe.Harness` ``h``: it builds the rig (``h.rig()``), installs the family's hook
where and when its way of running would (``h.install(rig)``), labels the phases (``h.phase("backward")``), runs,
and keeps what the run produced (``h.fact(...)``) so that the modify run can be compared with the recording one;
``h.exercise(rig, model)`` runs the state families' calls (``state_dict()``, ``opt.step()``) on the object a user
holds afterwards. Adding a column is writing one such function and one :class:`Context` line. The functions of the
columns that training and deployment code meets (forward-mode AD, loading state dicts, the meta device, threads,
gradient accumulation, ``GradScaler``, ``DataParallel``, ``jit.freeze``, quantization) are in :mod:`.practice`.

The compiler contexts use the ``aot_eager`` backend: Dynamo and AOTAutograd run as usual (one
``CompiledFunctionBackward`` Node per graph, hooks traced or not) and no kernels are generated; which hooks run, how
often and with what is decided there, not by inductor's code generation. One step differs: inductor partitions the
joint graph with its own partitioner (``aot_eager_decomp_partition`` reproduces it without code generation), which may
recompute cheap intermediates instead of saving them, so saved-tensor hooks can see fewer tensors; on the probe's
model the two give the same cells (checked on a sample of the compile and compiled-autograd cells).
"""
from __future__ import annotations

import copy
import io
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import practice
from .families import Rig, Subject
from .steps import forward_backward as _forward_backward, scripted_install

BACKEND = "aot_eager"
PRECOMPILE_BACKEND = "eager"  # precompile takes 'inductor' or 'eager' only


def eager(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    _forward_backward(h, rig.net, rig)
    h.exercise(rig, rig.net)


def autograd_grad(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    out = rig.net(rig.x)
    h.phase("backward")
    grads = torch.autograd.grad(out.sum(), list(rig.net.parameters()))
    h.fact(out, *grads, *h.grads(rig))


def backward_inputs(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    out = rig.net(rig.x)
    h.phase("backward")
    out.sum().backward(inputs=[rig.x])
    h.fact(out, rig.x.grad, *h.grads(rig))


def retain_graph(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    loss = rig.net(rig.x).sum()
    h.phase("backward")
    loss.backward(retain_graph=True)
    h.phase("second backward")
    loss.backward()
    h.fact(rig.x.grad, *h.grads(rig))


def double_backward(h: Any, variant: str = "plain") -> None:
    rig = h.rig(variant=variant)
    h.install(rig)
    h.phase("forward")
    loss = rig.net(rig.x).sum()
    h.phase("backward")
    grad_x, = torch.autograd.grad(loss, rig.x, create_graph=True)
    h.phase("second backward")
    grad_x.square().sum().backward()
    h.fact(grad_x, rig.x.grad, *h.grads(rig))


def no_grad(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    with torch.no_grad():
        h.fact(rig.net(rig.x))


def inference_mode(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    with torch.inference_mode():
        out = rig.net(rig.x)
    h.fact(out)


def _variant(name: str) -> Callable[[Any], None]:
    def run(h: Any) -> None:
        rig = h.rig(variant=name)
        h.install(rig)
        _forward_backward(h, rig.net, rig)
    run.__name__ = name
    return run


def _compile_stats(h: Any) -> None:
    """Note the graph breaks torch.compile reported (their reasons, each once)."""
    from torch._dynamo.utils import counters

    breaks = sorted({clean(reason) for reason in counters["graph_break"]})
    if breaks:
        h.note(f"graph breaks: {'; '.join(breaks)}")


def clean(text: str) -> str:
    from .record import clean_text
    return clean_text(text, limit=120)


def _fresh_compiler() -> None:
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()


def compile_(h: Any) -> None:
    _fresh_compiler()
    rig = h.rig()
    h.install(rig)
    model = torch.compile(rig.net, backend=BACKEND)
    _forward_backward(h, model, rig)
    _compile_stats(h)
    h.exercise(rig, model)


def compile_hook_after(h: Any) -> None:
    _fresh_compiler()
    rig = h.rig()
    model = torch.compile(rig.net, backend=BACKEND)
    h.phase("first call")
    model(rig.x).sum().backward()
    rig.net.zero_grad(set_to_none=True)
    rig.x.grad = None
    h.install(rig)
    _forward_backward(h, model, rig)
    _compile_stats(h)


def compile_no_loop(h: Any) -> None:
    """The ``compile`` run with the registration straight in the subject's forward, not in a loop
    (:class:`~.families.InlineSubject`): the graph break that reading ``h.grad_fn`` causes ends a compiled graph
    instead of sending the whole forward back to eager."""
    _fresh_compiler()
    rig = h.rig(inline=True)
    h.install(rig)
    _forward_backward(h, torch.compile(rig.net, backend=BACKEND), rig)
    _compile_stats(h)


def compile_outside(h: Any) -> None:
    """The ``compile`` run with the hook registered after the compiled call, in plain Python outside the compiled
    region, on the compiled model's output (its ``grad_fn``, for a Node hook): what the code a learner writes
    around a compiled model gets."""
    _fresh_compiler()
    rig = h.rig()
    h.install(rig)
    taps = list(rig.subject.taps)  # the family's registration, taken out of the subject's forward
    rig.subject.taps.clear()
    model = torch.compile(rig.net, backend=BACKEND)
    h.phase("forward")
    out = model(rig.x)
    for tap in taps:
        tap(rig.x, out)
    if out.grad_fn is not None:
        h.note(f"the output's grad_fn: {out.grad_fn.name()}")
    h.phase("backward")
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))
    _compile_stats(h)


def compiled_autograd(h: Any) -> None:
    _fresh_compiler()
    rig = h.rig()
    h.install(rig)

    def step(x: torch.Tensor) -> torch.Tensor:
        out = rig.net(x)
        out.sum().backward()
        return out

    h.phase("step")
    with torch._dynamo.config.patch(compiled_autograd=True):
        out = torch.compile(step, backend=BACKEND)(rig.x)
    h.fact(out, rig.x.grad, *h.grads(rig))
    _compile_stats(h)


def export(h: Any, strict: bool = False) -> None:
    rig = h.rig()
    h.install(rig)
    h.phase("export")
    program = torch.export.export(rig.net, (rig.x,), strict=strict)
    model = program.module()
    _forward_backward(h, model, rig)
    h.exercise(rig, model)


def precompile(h: Any) -> None:
    from torch.compiler import precompile as pc

    _fresh_compiler()
    rig = h.rig()
    h.install(rig)

    def call(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return model(x)

    with tempfile.TemporaryDirectory(prefix="hooklab-precompile-") as folder:
        code, cache = Path(folder) / "model.py", Path(folder) / "model.cache"
        h.phase("capture")
        with pc.capture(call, artifact_path=code, cache_path=cache, backend=PRECOMPILE_BACKEND) as captured:
            captured(rig.net, rig.x)
        h.phase("load")
        loaded = pc.load(code, cache)
        h.phase("forward")
        out: Any = loaded(rig.net, rig.x)
        h.fact(out)
        if out.requires_grad:
            h.phase("backward")
            out.sum().backward()
            h.fact(rig.x.grad, *h.grads(rig))
        else:
            h.note("the loaded runnable's output does not require grad: no backward")
    h.exercise(rig, rig.net)


def jit_script(h: Any) -> None:
    rig = h.rig()
    scripted_install(h, rig)
    h.phase("script")
    model = torch.jit.script(rig.net)
    _forward_backward(h, model, rig)
    h.exercise(rig, model)


def jit_trace(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    h.phase("trace")
    model = torch.jit.trace(rig.net, (rig.x,))
    rig.net.zero_grad(set_to_none=True)
    _forward_backward(h, model, rig)
    h.exercise(rig, model)


def fx_root(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    h.phase("trace")
    traced = torch.fx.symbolic_trace(rig.subject)
    rig.net.subject = traced
    _forward_backward(h, rig.net, rig)
    h.exercise(rig, rig.net)


def fx_child(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    h.phase("trace")
    traced = torch.fx.symbolic_trace(rig.net)
    _forward_backward(h, traced, rig)
    h.exercise(rig, traced)


def vmap(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    _forward_backward(h, torch.func.vmap(rig.net), rig)


def func_grad(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    params = dict(rig.net.named_parameters())

    def loss(p: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.func.functional_call(rig.net, p, (rig.x,)).sum()

    h.phase("transform")
    grads = torch.func.grad(loss)(params)
    h.fact(*[grads[name] for name in sorted(grads)], *h.grads(rig))


def _checkpoint(reentrant: bool) -> Callable[[Any], None]:
    def run(h: Any) -> None:
        from torch.utils.checkpoint import checkpoint

        rig = h.rig()
        h.install(rig)
        _forward_backward(h, lambda x: checkpoint(rig.net, x, use_reentrant=reentrant), rig)
    return run


def deepcopy(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    h.phase("copy")
    net, opt = copy.deepcopy((rig.net, rig.opt))
    _run_copy(h, rig, net, opt)


def pickle(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    h.phase("save and load")
    buffer = io.BytesIO()
    torch.save((rig.net, rig.opt), buffer)
    buffer.seek(0)
    net, opt = torch.load(buffer, weights_only=False)
    _run_copy(h, rig, net, opt)


def _run_copy(h: Any, rig: Rig, net: nn.Module, opt: torch.optim.Optimizer) -> None:
    subject = next(m for m in net.modules() if isinstance(m, Subject))
    copy_rig = Rig(net=net, subject=subject, x=rig.x, opt=opt)
    h.phase("forward")
    out = net(rig.x)
    h.phase("backward")
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(copy_rig))
    h.exercise(copy_rig, net, opt)


def apply(h: Any) -> None:
    rig = h.rig(shared=True)
    h.phase("apply")
    rig.net.apply(lambda m: h.install(rig, m) if isinstance(m, Subject) else None)
    _forward_backward(h, rig.net, rig)
    h.exercise(rig, rig.net)


def autocast(h: Any) -> None:
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = rig.net(rig.x)
    h.phase("backward")
    out.float().sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))


def _wrap_after_install(h: Any) -> None:
    """The eager run with the family's hook registered before the wrapper is applied (the probe registers it on the
    wrapped model): what a model built with its hooks, then handed to FSDP1 or ``parallelize_module``, gets."""
    from .wrappers import wrap

    wrapper, h.wrap = h.wrap, ""  # the rig built plain, hooked, then wrapped
    try:
        rig = h.rig()
    finally:
        h.wrap = wrapper
    h.install(rig)
    h.phase("wrap")
    wrap(rig, wrapper)
    _forward_backward(h, rig.net, rig)
    h.exercise(rig, rig.net)


def _orig_params(h: Any) -> None:
    """The ``fsdp1`` run with ``use_orig_params=True``."""
    h.wrap = "fsdp1-orig"
    eager(h)


def cleanup() -> None:
    """Undo what a context may leave behind in the process (the compilers' caches)."""
    if torch._dynamo.is_compiling():  # never: contexts run outside compiled code
        return
    torch._dynamo.reset()


_ALL = frozenset({"forward", "backward", "state", "step", "optimizer-state"})
_B = frozenset({"backward"})
_FB = frozenset({"forward", "backward"})
_FBS = frozenset({"forward", "backward", "state"})


@dataclass(frozen=True)
class Shape:
    """Another way of writing a context's probe, for the families whose answer depends on it (``applies``): the
    cell records the probe's run and, under ``shapes``, this one's, so neither is mistaken for the whole answer."""

    id: str
    en: str                                 # how this shape differs from the probe's, in English
    zh: str                                 # the same in Chinese
    run: Callable[[Any], None]              # the context function written this way
    applies: Callable[[Any], bool]          # given a Family: whether its answer may depend on the shape


@dataclass(frozen=True)
class Context:
    id: str
    group: str
    title: str        # in English, as "the matrix under <title>" reads
    zh: str           # the same in Chinese
    varies: frozenset[str]
    run: Callable[[Any], None]
    pattern: str      # a regular expression that a code cell running this context matches
    wrap: str = ""    # "ddp" / "fsdp2" / "fsdp1" / "tp": the distributed wrapper (run in worker processes)
    how: str = ""     # what one run is, in English
    runs: frozenset[str] = _ALL   # what one run goes through (no-grad: the forward only)
    shapes: tuple[Shape, ...] = ()  # other ways of writing the probe, recorded beside it
    step_fields: tuple[str, ...] = ()  # what the step changes in a record besides calls, arguments, return and error
    unwrapped: tuple[str, str] | tuple[()] = ()   # why a DDP / FSDP2 family is not run here ({own}, {family}), English, Chinese


def _in_forward_code(family: Any) -> bool:
    return family.where == "forward-code"


def _module_or_graph(family: Any) -> bool:
    return "backward" in family.acts and family.where in ("module", "forward-code", "scope")


COMPILE_SHAPES = (
    Shape("no-loop", "registered in forward outside a loop (the probe registers inside a for loop)",
          "在 forward 里注册，但不在循环里（探针是在 for 循环里注册的）", compile_no_loop, _in_forward_code),
    Shape("outside", "registered after the compiled call, outside the compiled region, on the compiled output",
          "在编译的调用之后、编译区域之外注册在编译得到的输出上", compile_outside, _in_forward_code),
)
DOUBLE_BACKWARD_SHAPES = (
    Shape("tanh-tail", "a tanh between the module and the head (the probe: the module's output goes straight into "
          "a Linear)", "模块和输出头之间有一个 tanh（探针里模块的输出直接进入一个 Linear）",
          lambda h: double_backward(h, "tanh-tail"), _module_or_graph),
)

def _any_family(family: Any) -> bool:
    return True


def _wrapper_family(family: Any) -> bool:
    return family.where == "wrapper"


FORWARD_AD_SHAPES = (
    Shape("dual", "with torch.autograd.forward_ad's dual numbers (make_dual, unpack_dual) instead of torch.func.jvp",
          "用 torch.autograd.forward_ad 的对偶数（make_dual、unpack_dual）代替 torch.func.jvp", practice.forward_ad_dual,
          _any_family),
)
LOAD_ASSIGN_SHAPES = (
    Shape("mmap", "the state dict saved, then torch.load(mmap=True) before load_state_dict(assign=True)",
          "状态字典先保存，再用 torch.load(mmap=True) 读回，然后 load_state_dict(assign=True)",
          practice.load_mmap_assign, _any_family),
)
CONTEXTVAR_SHAPES = (
    Shape("thread-pool", "the backward submitted to a ThreadPoolExecutor inside the block that sets them",
          "在设置它们的代码块里把反向提交给 ThreadPoolExecutor 运行", practice.contextvar_pool, _any_family),
)
ACCUMULATION_SHAPES = (
    Shape("sync-every", "every micro-batch reduced (no no_sync / set_requires_gradient_sync(False))",
          "每个微批次都做归约（不用 no_sync / set_requires_gradient_sync(False)）",
          practice.grad_accumulation_sync_every, _wrapper_family),
)
# the families whose hook sits on the subject's parameters (or sees every Node autograd makes, the flat parameter's
# views among them): where FSDP1 and tensor parallelism replace the parameters, when they are hooked matters
_ON_PARAMETERS = frozenset({"param-hook", "post-accumulate-grad-hook", "parametrization", "node-creation-hook"})


def _on_parameters(family: Any) -> bool:
    return family.id in _ON_PARAMETERS


def _on_the_weight(family: Any) -> bool:
    return family.id in _ON_PARAMETERS and family.where == "module"


FSDP1_SHAPES = (
    Shape("orig-params", "FullyShardedDataParallel(..., use_orig_params=True)",
          "FullyShardedDataParallel(..., use_orig_params=True)", _orig_params, _on_parameters),
    Shape("hooked-first", "the hook registered on the plain model, then FSDP1 wraps it",
          "先在普通模型上注册钩子，再用 FSDP1 包装", _wrap_after_install, _on_the_weight),
)
TP_SHAPES = (
    Shape("hooked-first", "the hook registered on the plain model, then parallelize_module",
          "先在普通模型上注册钩子，再调用 parallelize_module", _wrap_after_install, _on_the_weight),
)
_NOT_STACKED = ("{own}'s hook under FSDP1: the two wrappers are not stacked (FSDP1 has a register_comm_hook of its own)",
                "{own} 的钩子放进 FSDP1：两种包装器不叠加使用（FSDP1 有自己的 register_comm_hook）")
_TWO_D = ("{own} and tensor parallelism would split the same two ranks: composing them takes a 2-D device mesh (a "
          "data-parallel dimension and a tensor-parallel one, 4 ranks or more), the probe runs 2",
          "{own} 和张量并行会切分同样的两个 rank：两者组合需要二维设备网格（一个数据并行维度加一个张量并行维度，至少 4 个 "
          "rank），而探针只跑 2 个")
_LOADED_FIRST = ("the usual order loads the state dict (or materializes the model) before wrapping it in {own}, and "
                 "{own}'s hook is registered on the wrapper afterwards, on the loaded parameters: that run is "
                 "{family}@eager",
                 "通常先加载状态字典（或把模型实体化），再包装进 {own}，{own} 的钩子之后注册在包装器上，面对的是加载后的参数："
                 "这种运行就是 {family}@eager")

CONTEXTS: list[Context] = [
    Context("eager", "autograd", "eager", "普通的 eager 执行", _ALL, eager, r"\.backward\(\)",
            how="forward, loss.backward(), opt.step(), state_dict() and load_state_dict()"),
    Context("autograd-grad", "autograd", "torch.autograd.grad", "torch.autograd.grad", _B, autograd_grad,
            r"autograd\.grad\(", how="torch.autograd.grad(loss, parameters)"),
    Context("backward-inputs", "autograd", "backward(inputs=...)", "backward(inputs=...)", _B, backward_inputs,
            r"backward\(inputs=", how="loss.backward(inputs=[x]): the input's gradient only"),
    Context("retain-graph", "autograd", "retain_graph and a second backward", "retain_graph 后再反向一次", _B,
            retain_graph, r"retain_graph\s*=\s*True", how="loss.backward(retain_graph=True); loss.backward()"),
    Context("double-backward", "autograd", "create_graph (double backward)", "create_graph（二阶反向）", _B,
            double_backward, r"create_graph\s*=\s*True",
            how="g = autograd.grad(loss, x, create_graph=True); g.square().sum().backward()",
            shapes=DOUBLE_BACKWARD_SHAPES),
    Context("no-grad", "autograd", "torch.no_grad", "torch.no_grad", _FB, no_grad, r"no_grad\(\)",
            how="the forward under torch.no_grad(); no backward", runs=frozenset({"forward"})),
    Context("inference-mode", "autograd", "torch.inference_mode", "torch.inference_mode", _FB, inference_mode,
            r"inference_mode\(\)", how="the forward under torch.inference_mode(); no backward",
            runs=frozenset({"forward"})),
    Context("inplace", "autograd", "an in-place op on the output", "对输出的原地操作", _FB, _variant("inplace"),
            r"\.add_\(|inplace\s*=\s*True|\w_\(", how="h = subject(x); h.add_(1); head(h)"),
    Context("view", "autograd", "an in-place write through a view", "经由视图的原地写入", _FB, _variant("view"),
            r"narrow\(|\]\.\w+_\(|view\(", how="h = subject(x); h.narrow(1, 0, 2).mul_(2); head(h)"),
    Context("used-twice", "autograd", "the module used twice", "模块用两次", _FB, _variant("twice"),
            r"twice|两次", how="subject(subject(x)): the module and its weight used twice"),
    Context("unused-branch", "autograd", "a branch the loss does not use", "损失不用的分支", _FB, _variant("unused"),
            r"unused|不用", how="subject(x) computed, the loss from head(x) only"),
    Context("compile", "compiler", "torch.compile", "torch.compile", _FBS, compile_, r"torch\.compile\(",
            how=f"torch.compile(net, backend='{BACKEND}') with the hook registered before the first call",
            shapes=COMPILE_SHAPES),
    Context("compile-hook-after", "compiler", "torch.compile, hook added after the first call",
            "torch.compile，第一次调用之后加钩子", _FB, compile_hook_after, r"torch\.compile\(",
            how="a first compiled call (forward and backward), then the hook, then a second call"),
    Context("compiled-autograd", "compiler", "compiled autograd", "编译的自动求导", _FB, compiled_autograd,
            r"compiled_autograd", how="torch.compile of a step that calls backward, compiled_autograd=True"),
    Context("export", "compiler", "torch.export", "torch.export", _FBS, export, r"torch\.export\.export\(",
            how="torch.export.export(net, (x,)).module(), then forward and backward"),
    Context("precompile", "compiler", "precompile (torch.compiler.precompile)",
            "预编译（torch.compiler.precompile）", _FBS, precompile, r"precompile",
            how="precompile.capture of model(x), then precompile.load, then forward and backward"),
    Context("jit-script", "compiler", "TorchScript (jit.script)", "TorchScript（jit.script）", _FBS, jit_script,
            r"jit\.script\(", how="torch.jit.script(net), then forward and backward"),
    Context("jit-trace", "compiler", "TorchScript (jit.trace)", "TorchScript（jit.trace）", _FBS, jit_trace,
            r"jit\.trace\(", how="torch.jit.trace(net, (x,)), then forward and backward"),
    Context("fx-root", "compiler", "FX symbolic_trace of the hooked module", "FX symbolic_trace 追踪挂钩子的模块",
            _FBS, fx_root, r"symbolic_trace\(",
            how="the subject replaced by symbolic_trace(subject) (the hooked module is the root)"),
    Context("fx-child", "compiler", "FX symbolic_trace of its parent", "FX symbolic_trace 追踪它的父模块", _FBS,
            fx_child, r"symbolic_trace\(", how="symbolic_trace(net): the hooked module is a child, traced through"),
    Context("vmap", "transform", "torch.func.vmap", "torch.func.vmap", _FB, vmap, r"vmap\(",
            how="vmap(net)(x) over the batch, then backward"),
    Context("func-grad", "transform", "torch.func.grad + functional_call", "torch.func.grad + functional_call",
            _FB, func_grad, r"func\.grad\(|functional_call\(",
            how="torch.func.grad of functional_call(net, params, x).sum()"),
    Context("checkpoint-reentrant", "transform", "checkpoint(use_reentrant=True)", "checkpoint(use_reentrant=True)",
            _FB, _checkpoint(True), r"use_reentrant\s*=\s*True", how="checkpoint(net, x, use_reentrant=True)"),
    Context("checkpoint", "transform", "checkpoint(use_reentrant=False)", "checkpoint(use_reentrant=False)", _FB,
            _checkpoint(False), r"use_reentrant\s*=\s*False", how="checkpoint(net, x, use_reentrant=False)"),
    Context("deepcopy", "copy", "copy.deepcopy", "copy.deepcopy", _ALL, deepcopy, r"deepcopy\(",
            how="the hook registered, then (net, opt) deep-copied; the copy runs"),
    Context("pickle", "copy", "torch.save / torch.load (pickle)", "torch.save / torch.load（pickle）", _ALL, pickle,
            r"torch\.save\(|pickle", how="the hook registered, then (net, opt) saved and loaded; the loaded copy runs"),
    Context("apply", "copy", "model.apply (a module with two parents)", "model.apply（有两个父模块的模块）", _ALL, apply,
            r"\.apply\(", how="registered by net.apply(...) on a model whose subject has two parents"),
    Context("ddp", "distributed", "DistributedDataParallel", "DistributedDataParallel", _ALL, eager,
            r"DistributedDataParallel\(|DDP\(", wrap="ddp",
            how="2 gloo processes; DDP(net), then the eager run"),
    Context("fsdp2", "distributed", "FSDP2 (fully_shard)", "FSDP2（fully_shard）", _ALL, eager, r"fully_shard\(",
            wrap="fsdp2", how="2 gloo processes; fully_shard(subject), fully_shard(net), then the eager run"),
    Context("fsdp1", "distributed", "FSDP1 (FullyShardedDataParallel)", "FSDP1（FullyShardedDataParallel）", _ALL,
            eager, r"FullyShardedDataParallel\(|FSDP\(", wrap="fsdp1",
            how="2 gloo processes; FullyShardedDataParallel(net, auto_wrap_policy=ModuleWrapPolicy({Subject}), "
                "device_id=cpu), then the eager run", shapes=FSDP1_SHAPES, unwrapped=_NOT_STACKED),
    Context("tensor-parallel", "distributed", "tensor parallel (parallelize_module, DTensor)",
            "张量并行（parallelize_module，DTensor）", _ALL, eager, r"parallelize_module\(", wrap="tp",
            how="2 gloo processes, a 2-rank CPU mesh; parallelize_module(net, mesh, {'subject.lin': "
                "ColwiseParallel(use_local_output=False), 'head': RowwiseParallel()}), then the eager run",
            shapes=TP_SHAPES, unwrapped=_TWO_D),
    Context("autocast", "transform", "autocast (bfloat16)", "autocast（bfloat16）", _FB, autocast, r"autocast\(",
            how="the forward under torch.autocast('cpu', dtype=torch.bfloat16)"),
    Context("forward-ad", "transform", "forward-mode AD (torch.func.jvp)", "前向模式自动微分（torch.func.jvp）", _FB,
            practice.forward_ad, r"jvp\(|forward_ad|make_dual\(",
            how="torch.func.jvp(net, (x,), (ones,)): the output and its tangent, no backward",
            runs=frozenset({"forward"}), shapes=FORWARD_AD_SHAPES,
            unwrapped=("forward-mode AD runs no backward pass, and {own}'s hook runs in the backward",
                       "前向模式自动微分不运行反向，而 {own} 的钩子在反向中运行")),
    Context("export-strict", "compiler", "torch.export (strict=True)", "torch.export（strict=True）", _FBS,
            lambda h: export(h, strict=True), r"strict\s*=\s*True",
            how="torch.export.export(net, (x,), strict=True).module(), then forward and backward"),
    Context("jit-freeze", "compiler", "torch.jit.freeze", "torch.jit.freeze", _FBS, practice.jit_freeze,
            r"jit\.freeze\(", how="torch.jit.freeze(torch.jit.script(net.eval())), then forward and backward"),
    Context("functional-call", "transform", "torch.func.functional_call", "torch.func.functional_call", _FB,
            practice.functional_call, r"functional_call\(",
            how="functional_call(net, copies of the parameters, (x,)), then backward (no transform)"),
    Context("quantization", "transform", "eager-mode quantization (prepare, convert)",
            "eager 模式量化（prepare、convert）", frozenset({"forward", "state"}), practice.quantization,
            r"quantization\.(prepare|convert)\(|prepare\(|convert\(",
            how="QuantStub -> net -> DeQuantStub, x86 qconfig: prepare, a calibration forward, convert, a forward, "
                "state_dict() and load_state_dict()", runs=frozenset({"forward", "state"})),
    Context("load-assign", "loading", "load_state_dict(assign=True)", "load_state_dict(assign=True)", _ALL,
            practice.load_assign, r"assign\s*=\s*True",
            how="the hook registered, load_state_dict(state, assign=True), then the eager run with the optimizer built "
                "before the load", shapes=LOAD_ASSIGN_SHAPES, unwrapped=_LOADED_FIRST),
    Context("load-mmap", "loading", "torch.load(mmap=True) + load_state_dict", "torch.load(mmap=True) + load_state_dict",
            _ALL, practice.load_mmap, r"mmap\s*=\s*True",
            how="the state dict saved, torch.load(path, mmap=True), load_state_dict(state) (copied in), the eager run",
            unwrapped=_LOADED_FIRST),
    Context("meta-to-empty", "loading", "built on the meta device, then to_empty", "在 meta 设备上构建，再 to_empty",
            _ALL, practice.meta_to_empty, r"to_empty\(",
            how="built under torch.device('meta'), the hook registered, to_empty(device='cpu'), init, an optimizer "
                "built then, the eager run", unwrapped=_LOADED_FIRST),
    Context("thread", "threads", "the step on another thread", "训练步在另一个线程里", _ALL, practice.thread,
            r"threading\.Thread\(|Thread\(",
            how="the hook registered on the caller's thread; forward, backward, opt.step() and the state dicts in a "
                "threading.Thread", step_fields=("notes",)),
    Context("contextvar", "threads", "a ContextVar and a thread-local set around backward()",
            "在 backward() 外设置 ContextVar 和线程局部变量", _FB, practice.contextvar, r"ContextVar|threading\.local",
            how="forward; then a ContextVar and a threading.local set, backward(), both reset; the notes say what "
                "each hook call saw", shapes=CONTEXTVAR_SHAPES, step_fields=("notes",)),
    Context("split-batch", "training", "accumulation over two micro-batches (no_sync)", "梯度累积（no_sync）",
            frozenset({"forward", "backward", "step"}), practice.grad_accumulation, r"no_sync\(|accumulat",
            how="two micro-batches (forward and backward each), then opt.step(); under DDP / FSDP2 the first one in "
                "no_sync() / set_requires_gradient_sync(False)", shapes=ACCUMULATION_SHAPES),
    Context("grad-scaler", "training", "torch.amp.GradScaler (cpu)", "torch.amp.GradScaler（cpu）",
            frozenset({"forward", "backward", "step"}), practice.grad_scaler, r"GradScaler\(",
            how="scaler.scale(loss).backward(), scaler.step(opt), scaler.update(); a note compares the gradients "
                "the hook received with an unscaled backward's", step_fields=("notes",)),
    Context("data-parallel", "distributed", "nn.DataParallel (no GPU)", "nn.DataParallel（没有 GPU）", _ALL,
            practice.data_parallel, r"DataParallel\(",
            how="torch.nn.DataParallel(net) on a machine without a GPU, then the eager run",
            unwrapped=("DataParallel around a {own} model: the two wrappers are not stacked",
                       "DataParallel 包在 {own} 模型外面：两种包装器不叠加使用")),
]
BY_ID = {c.id: c for c in CONTEXTS}
# the contexts a DDP / FSDP2 family is run in (the others trace or transform the module inside the wrapper)
WRAPPER_CONTEXTS = ("eager", "autograd-grad", "backward-inputs", "retain-graph", "double-backward", "no-grad",
                    "inference-mode", "inplace", "view", "used-twice", "unused-branch", "compile",
                    "compile-hook-after", "compiled-autograd", "checkpoint-reentrant", "checkpoint", "deepcopy",
                    "pickle", "autocast", "thread", "contextvar", "split-batch", "grad-scaler")


def new_context(id: str, run: Callable[[Any], None], *, title: str, zh: str = "",
                varies: tuple[str, ...] = ("forward", "backward"), how: str = "") -> Context:
    """A context of one's own (a new column): ``run(h)`` builds the rig, installs the hook and runs, as the
    contexts above do; ``varies``: what it changes (forward, backward, state, step, optimizer-state), which decides
    the families it means nothing for.

    >>> ctx = new_context("twice-forward", lambda h: None, title="two forwards")
    >>> ctx.id, sorted(ctx.varies)
    ('twice-forward', ['backward', 'forward'])
    """
    unknown = set(varies) - set(_ALL)
    if unknown:
        raise ValueError(f"varies: unknown parts {sorted(unknown)}; use some of {sorted(_ALL)}")
    if not callable(run):
        raise TypeError(f"run must be a function run(h), got {type(run).__name__}")
    return Context(id, "new", title, zh or title, frozenset(varies), run, re.escape(id), how=how)
