"""Exercises of notebook 15 (hooks in libraries): which modules really ran, how often each quantization observer ran,
and what a PEFT LoRA adapter adds to its layer.

15.1 ``modules_that_ran(model, run)``: the names of ``model``'s modules called during ``run()``, in the order the
calls begin, without changing what ``run()`` does (a local hook would turn ``nn.TransformerEncoderLayer``'s fast
path off) and without counting copies.
15.2 ``observer_calls(prepared, calibrate)``: ``{observer name: calls during calibrate()}``, 0 included, for a model
prepared by torch.ao's eager ``prepare`` or a graph module prepared by its FX graph mode ``prepare_fx`` (whose
observers, as in PT2E's graph modules, are submodules ``activation_post_process_N`` that the graph's code calls, so
module hooks on them fire). FX rather than PT2E: ``torch.export`` leaves autograd's threads in a state that breaks
fork-based DDP workers started later in the same process (the checkers of 10.1 and 14.3).
15.3 ``adapter_output(model, name, x)``: ``scaling * lora_B(lora_A(dropout(h)))`` of the LoRA layer ``name`` in the
forward ``model(x)``, ``h`` being that layer's input, whatever the adapter is called. Needs PEFT
(``pip install "hooklab[course]"``).
"""
from __future__ import annotations

import copy
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as module_globals

from . import exercise
from ._support import NotSolved, Wrong, expect, fail, run, started

# ---- 15.1 the modules that really ran -----------------------------------------------------------

class _Twice(nn.Module):
    """Uses its Linear twice: a name that must appear twice."""

    def __init__(self) -> None:
        super().__init__()
        self.lin, self.act = nn.Linear(4, 4), nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.lin(self.lin(x)))


def _encoder() -> nn.Module:
    torch.manual_seed(15)
    return nn.Sequential(nn.Linear(8, 8), nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True),
                         nn.ReLU()).eval()


def _called(model: nn.Module, step: Callable[[], Any]) -> list[str]:
    """The truth: a global forward pre-hook sees every module call, changes nothing (no local hook) and is removed."""
    calls: list[str] = []
    _called_during(model, calls, step)
    return calls


def _ran_cases() -> list[tuple[str, str, nn.Module, Callable[[], Any]]]:
    torch.manual_seed(1)
    tokens = torch.randn(2, 3, 8)
    encoder = _encoder()

    def fast_path() -> None:
        with torch.no_grad():  # eval + no grad + batch_first: the layer runs as one fused op
            encoder(tokens)

    copied = _encoder()
    twice = _Twice()
    torch.manual_seed(2)
    small = torch.randn(3, 4)
    trained = _encoder().train()
    return [
        ("`nn.TransformerEncoderLayer` 在 eval 模式、`no_grad` 下（走快速路径）", "an `nn.TransformerEncoderLayer` in eval "
         "mode under `no_grad` (the fast path)", encoder, fast_path),
        ("运行的是模型的 `copy.deepcopy`", "the step runs a `copy.deepcopy` of the model", copied,
         lambda: copy.deepcopy(copied)(tokens)),
        ("一个把同一个 `Linear` 用了两次的模型", "a model that uses one `Linear` twice", twice, lambda: twice(small)),
        ("同一个编码器层在训练模式（不走快速路径）", "the same encoder layer in training mode (no fast path)", trained,
         lambda: trained(tokens)),
    ]


@exercise("15.1", answer="modules_that_ran")
def modules_that_ran(answer: Any) -> None:
    for what_zh, what_en, model, step in _ran_cases():
        truth = _called(model, step)
        actual: list[str] = []  # what really ran while the answer ran the step (seen by the checker's own probe)
        grad_mode: list[bool] = []  # whether gradients were on when the answer called the step

        def observed_step(step: Callable[[], Any] = step) -> Any:
            grad_mode.append(torch.is_grad_enabled())
            return step()
        result = _called_during(model, actual, lambda: run(
            answer, model, observed_step, leak_free=(model,), returns=("模块名的列表", "the list of module names")))
        expect(all(grad_mode), "no-grad",
               "你在 `torch.no_grad()`（或 `inference_mode`）里调用了 `run()`：这改变了它做的事，不建计算图，"
               "`run()` 里的反向会失败。直接调用 `run()`；只观察的模块钩子不需要关掉梯度。",
               "you called `run()` under `torch.no_grad()` (or `inference_mode`): that changes what it does: no graph "
               "is built, and a backward inside it fails. Call `run()` as it is; module hooks that only observe need "
               "no gradient switched off.")
        expect(isinstance(result, (list, tuple)), "not-a-list", f"应返回模块名的列表，收到的是 {type(result).__name__}。",
               f"return a list of module names, not a {type(result).__name__}.")
        result = list(result)
        names = {n for n, _ in model.named_modules()}
        expect(all(isinstance(n, str) and n in names for n in result), "not-names",
               "列表里应是 `model.named_modules()` 给出的名字（字符串，模型本身是 `''`），"
               f"收到的有 {[n for n in result if not (isinstance(n, str) and n in names)][:3]!r}。",
               "the list should hold names as `model.named_modules()` gives them (strings, the model itself is `''`); "
               f"got {[n for n in result if not (isinstance(n, str) and n in names)][:3]!r}.")
        if actual not in (truth, truth + truth):
            extra = [n for n in actual if n not in truth]
            fast_zh, fast_en = ("你注册在子模块上的（局部）前向钩子让 `nn.TransformerEncoderLayer` 放弃了快速路径：诊断改变了被诊断的东西。"
                                "用全局模块钩子（`torch.nn.modules.module.register_module_forward_pre_hook`），它不会关掉快速路径。",
                                "Your (local) forward hooks on the submodules turned `nn.TransformerEncoderLayer`'s fast path "
                                "off: the diagnosis changed what it diagnosed. Use a global module hook "
                                "(`torch.nn.modules.module.register_module_forward_pre_hook`), which does not.") \
                if any(n.startswith("1.") for n in extra) else ("不要改变 `run()` 做的事。", "Do not change what `run()` does.")
            fail("changed-the-step", f"{what_zh}：有你的函数时，{extra[:2]!r} 也运行了，而原本的这一步里它们并不运行。{fast_zh}",
                 f"{what_en}: with your function, {extra[:2]!r} ran too, which do not run in the step as it is. {fast_en}")
        if result == truth:
            continue
        expect(truth or not result, "counted-copies",
               f"{what_zh}：模型自己的模块一个也没有被调用，你却返回了 {result[:3]!r}：你数的是副本的调用。副本带着复制来的钩子，"
               "钩子收到的 `module` 是副本；只数 `model.named_modules()` 里的那些对象。",
               f"{what_en}: none of the model's own modules was called, yet you returned {result[:3]!r}: you counted "
               "the copy's calls. The copy carries copied hooks, and the `module` they get is the copy; count only "
               "the objects of `model.named_modules()`.")
        expect(result != truth + truth, "ran-twice", "每个名字都多了一倍：你的函数调用了两次 `run()`。",
               "every name appears twice as often: your function called `run()` twice.")
        deduplicated = len(set(truth)) < len(truth) and len(set(result)) == len(result) and set(result) == set(truth)
        expect(not deduplicated, "once-each",
               f"{what_zh}：一个模块被调用几次，它的名字就要出现几次；应是 {truth!r}，你返回 {result!r}。",
               f"{what_en}: a name appears as often as its module was called; expected {truth!r}, you returned "
               f"{result!r}.")
        expect(Counter(result) != Counter(truth), "call-order",
               f"{what_zh}：名字对了，顺序不对：应按调用**开始**的顺序（外层模块在它调用的子模块之前），是 {truth!r}，你返回 "
               f"{result!r}。前向钩子在调用结束时才运行，用前向前置钩子。",
               f"{what_en}: the right names in the wrong order: the order in which the calls *begin* (a module before "
               f"the submodules it calls) is {truth!r}; you returned {result!r}. A forward hook runs when a call "
               "ends: use a forward pre-hook.")
        fail("calls", f"{what_zh}：应返回 {truth!r}，你返回 {result!r}。", f"{what_en}: expected {truth!r}, you returned "
             f"{result!r}.")


def _called_during(model: nn.Module, calls: list[str], call: Callable[[], Any]) -> Any:
    """``call()`` with the checker's probe on: the names of the model's modules called meanwhile go to ``calls``."""
    names = {id(m): n for n, m in model.named_modules()}
    handle = module_globals.register_module_forward_pre_hook(
        lambda m, args: calls.append(names[id(m)]) if id(m) in names else None)
    try:
        return call()
    finally:
        handle.remove()


# ---- 15.2 how often each observer ran during calibration ----------------------------------------

class _Branches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        import torch.ao.quantization as tq
        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, branch: str = "a") -> torch.Tensor:
        x = self.quant(x)
        x = self.a(self.a(x)) if branch == "a" else self.b(x)  # a: twice per call; c: never
        return self.dequant(x)


def _prepared(seed: int) -> nn.Module:
    import torch.ao.quantization as tq
    torch.manual_seed(seed)
    model: Any = _Branches().eval()
    model.qconfig = tq.default_qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation warning
        return tq.prepare(model)


def _is_observer(name: str) -> bool:
    """Eager mode names an observer ``<module>.activation_post_process``, a graph module (FX graph mode, PT2E)
    ``activation_post_process_<N>``."""
    return name.rsplit(".", 1)[-1].startswith("activation_post_process")


def _fx_prepared(seed: int) -> nn.Module:
    """A small MLP traced and prepared by torch.ao's FX graph mode (``prepare_fx``, x86 qconfig): its observers are
    ``call_module`` nodes, submodules of the graph module named ``activation_post_process_<N>``."""
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_fx
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation warning, the observers' reduce_range note
        return prepare_fx(model, get_default_qconfig_mapping("x86"), (torch.randn(5, 4),))


def _observer_cases() -> list[tuple[str, str, nn.Module, Callable[[], Any], dict[str, int]]]:
    """(what, prepared model, its calibration, the calls per observer): the truth is counted on a twin built
    the same way, with a global hook (not the answer's way of counting). The graph module comes last."""
    cases: list[tuple[str, str, nn.Module, Callable[[], Any], dict[str, int]]] = []
    for seed, branches in ((1, "aaa"), (2, "abb"), (3, ""), (4, None)):  # None: FX graph mode, no branches
        graph = branches is None
        torch.manual_seed(seed)
        batches = ([(torch.randn(5, 4), "") for _ in range(3)] if graph
                   else [(torch.randn(5, 4), branch) for branch in branches or ""])

        def build(seed: int = seed, graph: bool = graph) -> nn.Module:
            return _fx_prepared(seed) if graph else _prepared(seed)

        def calibration(model: nn.Module, batches: list = batches, graph: bool = graph) -> Callable[[], None]:
            def calibrate() -> None:
                for x, branch in batches:
                    if graph:
                        model(x)
                    else:
                        model(x, branch)
            return calibrate

        twin = build()
        names = {id(m): n for n, m in twin.named_modules() if _is_observer(n)}
        truth = dict.fromkeys(names.values(), 0)
        handle = module_globals.register_module_forward_hook(
            lambda m, args, out: truth.__setitem__(names[id(m)], truth[names[id(m)]] + 1) if id(m) in names else None)
        try:
            calibration(twin)()
        finally:
            handle.remove()
        prepared = build()
        what = ((f"FX 图模式准备好的图模块（`prepare_fx`），校准 {len(batches)} 批", f"a graph module prepared by FX "
                 f"graph mode (`prepare_fx`), calibrated on {len(batches)} batches") if graph else
                (f"校准依次走分支 {list(branches or '')}", f"calibration takes the branches {list(branches or '')}"))
        cases.append((*what, prepared, calibration(prepared), truth))
    return cases


@exercise("15.2", answer="observer_calls")
def observer_calls(answer: Any) -> None:
    if not started(answer):  # before building the cases (FX traces a model)
        raise NotSolved("你的函数还没有返回任何值（返回了 None）。", "your function returns None so far.")
    for what_zh, what_en, prepared, calibrate, truth in _observer_cases():
        result = run(answer, prepared, calibrate, leak_free=(prepared,),
                     returns=("一个字典：观察器的名字 -> 调用次数", "a dict from observer name to number of calls"))
        expect(isinstance(result, Mapping), "not-a-dict", f"应返回一个字典，收到的是 {type(result).__name__}。",
               f"return a dict, not a {type(result).__name__}.")
        result = dict(result)
        if result == truth:
            continue
        expect(all(isinstance(k, str) for k in result), "not-names",
               "字典的键应是观察器的名字（`named_modules()` 里最后一段以 `activation_post_process` 开头的名字）。",
               "the keys should be the observers' names (the names in `named_modules()` whose last part starts "
               "with `activation_post_process`).")
        missing = sorted(set(truth) - set(result))
        expect(not missing or set(result) & set(truth) or not any(n[-1].isdigit() for n in missing),
               "graph-observers",
               f"{what_zh}：一个观察器也没有找到。图模块（FX 图模式，PT2E 也一样）的观察器是它的子模块 {missing[:2]} ……，"
               "名字不以 `activation_post_process` 结尾；图的代码像调用模块一样调用它们，所以它们的前向钩子照样触发。"
               "按名字的最后一段以 `activation_post_process` 开头来找。",
               f"{what_en}: no observer found. A graph module's observers (FX graph mode, and PT2E alike) are its "
               f"submodules {missing[:2]}, "
               "..., whose names do not end with `activation_post_process`; the graph's code calls them as modules, "
               "so their forward hooks fire all the same. Look for names whose last part starts with "
               "`activation_post_process`.")
        expect(not missing or any(truth[n] for n in missing), "missing-unused",
               f"{what_zh}：缺了 {missing}：它们一次也没有运行，正是要找的那些观察器，要以 0 列出。",
               f"{what_en}: {missing} are missing: they never ran, which makes them exactly the observers to find; "
               "list them with 0.")
        expect(set(result) == set(truth), "not-names", f"{what_zh}：键应是 {sorted(truth)}，收到 {sorted(result, key=str)}。",
               f"{what_en}: the keys should be {sorted(truth)}; got {sorted(result, key=str)}.")
        expect(all(isinstance(v, int) and not isinstance(v, bool) for v in result.values()), "not-counts",
               "值应是调用次数（整数）。观察器的 `min_val` / `max_val` 只说明它有没有见过数据，说不出次数：数一数它的前向钩子触发了几次。",
               "the values should be numbers of calls (ints). An observer's `min_val` / `max_val` tell only whether it "
               "saw data, not how often: count how often a forward hook on it fires.")
        expect(result != {k: 2 * v for k, v in truth.items()}, "ran-twice", "每个次数都多了一倍：你的函数调用了两次 `calibrate()`。",
               "every count is doubled: your function called `calibrate()` twice.")
        fail("counts", f"{what_zh}：应是 {truth}，你返回 {result}。", f"{what_en}: expected {truth}, you returned {result}.")


# ---- 15.3 a LoRA adapter's contribution ---------------------------------------------------------

class _Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def _lora_model(seed: int, adapter: str = "default", dropout: float = 0.0) -> nn.Module:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as exc:
        from .. import needs_course_extra
        raise needs_course_extra(exc, "exercise 15.3 (PEFT's LoRA layers)") from exc
    torch.manual_seed(seed)
    base = _Two()
    config = LoraConfig(r=2, lora_alpha=4 + seed, target_modules=["fc1", "fc2"], init_lora_weights=False,
                        lora_dropout=dropout)
    return get_peft_model(base, config, adapter_name=adapter)


def _parts(model: Any, x: torch.Tensor, adapter: str) -> dict[str, dict[str, torch.Tensor]]:
    """Computed from the weights with F.linear, no hooks: each layer's input, base output, adapter part, unscaled."""
    out = {}
    h = x
    for short in ("fc1", "fc2"):
        layer: Any = model.get_submodule(f"base_model.model.{short}")
        base = F.linear(h, layer.base_layer.weight, layer.base_layer.bias)
        unscaled = F.linear(F.linear(h, layer.lora_A[adapter].weight), layer.lora_B[adapter].weight)
        scaling = layer.scaling[adapter]
        from_x = scaling * F.linear(F.linear(x, layer.lora_A[adapter].weight), layer.lora_B[adapter].weight)
        out[short] = {"delta": scaling * unscaled, "base": base, "full": base + scaling * unscaled,
                      "unscaled": unscaled, "from_x": from_x}
        h = torch.tanh(base + scaling * unscaled)
    return out


@exercise("15.3", answer="adapter_output")
def adapter_output(answer: Any) -> None:
    for seed, short, adapter, dropout in ((1, "fc1", "default", 0.0), (2, "fc2", "default", 0.0),
                                          (3, "fc2", "default", 0.0), (4, "fc1", "style", 0.0),  # named otherwise
                                          (5, "fc1", "default", 0.5)):  # in training mode: the dropout drops
        model: Any = _lora_model(seed, adapter, dropout)
        torch.manual_seed(10 + seed)
        x = torch.randn(3, 4)
        with torch.no_grad():
            parts = _parts(model, x, adapter)[short]
        name = f"base_model.model.{short}"
        layer = model.get_submodule(name)
        added: list[torch.Tensor] = []  # what the adapter added in the forward the answer ran (the checker's probe)
        probe = layer.register_forward_hook(lambda module, args, output: added.append(
            output.detach() - F.linear(args[0], layer.base_layer.weight, layer.base_layer.bias).detach()))
        try:
            result = run(answer, model, name, x, leak_free=(model,),
                         returns=("适配器那一部分的张量", "the tensor of the adapter's part"))
        except Wrong as why:
            hard_coded = why.reason == "raised" and isinstance(why.__cause__, KeyError) and adapter != "default"
            expect(not hard_coded, "adapter-name",
                   f"这个模型的适配器不叫 `default`，叫 `{adapter}`：你的函数抛出了 KeyError {why.__cause__}。"
                   "适配器的名字从 LoRA 层上读：`layer.active_adapters`（或 `layer.scaling` 的键）。",
                   f"this model's adapter is not called `default` but `{adapter}`: your function raised KeyError "
                   f"{why.__cause__}. Read the adapter's name from the LoRA layer: `layer.active_adapters` (or the "
                   "keys of `layer.scaling`).")
            raise
        finally:
            probe.remove()
        expect(isinstance(result, torch.Tensor), "not-a-tensor", f"应返回一个张量，收到的是 {type(result).__name__}。",
               f"return a tensor, not a {type(result).__name__}.")
        expect(tuple(result.shape) == tuple(parts["delta"].shape), "shape",
               f"`{name}` 的适配器输出形状是 {tuple(parts['delta'].shape)}，你返回 {tuple(result.shape)}。",
               f"the adapter part of `{name}` has the shape {tuple(parts['delta'].shape)}; you returned "
               f"{tuple(result.shape)}.")
        result = result.detach()

        def same(t: torch.Tensor) -> bool:
            return torch.allclose(result, t, atol=1e-5)
        if dropout:  # the truth is what the forward added: its dropout mask is drawn then
            without_dropout, parts["delta"] = parts["delta"], (added[-1] if added else
                                                 torch.full_like(parts["delta"], float("nan")))  # never ran
            expect(same(parts["delta"]) or not same(without_dropout), "no-dropout",
                   f"`{name}` 在训练模式下，适配器先对输入做 dropout 再进 `lora_A`；你返回的是没有 dropout 时的值，像是事后用"
                   "这一层的输入重新算了一遍。要的是这次前向里真正加上去的那部分：直接取 `lora_B` 在前向中的输出，乘上 `scaling`。",
                   f"`{name}` is in training mode, where the adapter applies dropout to the input before `lora_A`; "
                   "you returned the value without dropout, as a recomputation from the layer's input afterwards gives. "
                   "What is wanted is the part this forward really added: take `lora_B`'s output in the forward "
                   "itself and multiply it by `scaling`.")
        if same(parts["delta"]):
            continue
        expect(not same(parts["full"]), "full-output",
               f"你返回的是 `{name}` 的整个输出（基础输出 + 适配器）。只要适配器那一部分：挂在 `lora_B` 上，或者用 LoRA 层的输出减去 "
               "`base_layer` 的输出。", f"you returned the whole output of `{name}` (base output + adapter). Only the "
               "adapter's part is wanted: hook `lora_B`, or subtract `base_layer`'s output from the LoRA layer's.")
        expect(not same(parts["base"]), "base-output",
               "你返回的是 `base_layer` 的输出，也就是没有适配器时的输出；适配器加的是 `scaling * lora_B(lora_A(x))`。",
               "you returned `base_layer`'s output, the output without the adapter; the adapter adds "
               "`scaling * lora_B(lora_A(x))`.")
        expect(not same(parts["unscaled"]), "no-scaling",
               f"少乘了 `scaling`（这里是 {model.get_submodule(name).scaling[adapter]}）：`lora_B` 的输出还要乘 "
               "`layer.scaling[adapter]` 才是加到输出上的那部分。", "the `scaling` factor is missing (here "
               f"{model.get_submodule(name).scaling[adapter]}): `lora_B`'s output is multiplied by "
               "`layer.scaling[adapter]` before it is added to the output.")
        expect(not same(parts["from_x"]), "wrong-input",
               f"你用模型的输入 `x` 算了 `{name}` 的适配器，但这一层的输入是前一层的输出：从这次前向里取（钩子看到的 `args[0]`，"
               "或者直接取 `lora_B` 的输出）。", f"you computed the adapter of `{name}` from the model's input `x`, but "
               "this layer's input is the previous layer's output: take it from the forward pass (a hook's "
               "`args[0]`, or `lora_B`'s output directly).")
        diff = (result - parts["delta"]).abs().max().item()
        fail("values", f"`{name}` 的适配器输出与应有的值最多相差 {diff:.3g}。",
             f"the adapter part of `{name}` differs from the expected one by up to {diff:.3g}.")
