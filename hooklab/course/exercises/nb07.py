"""Exercises of notebook 07 (activation checkpointing): count real forward calls, compress around a checkpoint,
choose which blocks to checkpoint, write a selective-checkpointing policy. Memory is counted op by op (``MemoryMeter``):
the same on every machine."""
from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.utils.checkpoint  # `import torch` alone does not import it before torch 2.8
from torch import nn

from ...checkpoint import checkpoint_modules
from ...inventory import hook_inventory
from ...meter import MemoryMeter, OpCounter
from ...scope import HookScope
from . import exercise
from ._support import NotSolved, expect, fail, guarded, no_saved_tensor_hooks_left, run


@contextmanager
def _forward_calls(model: nn.Module) -> Iterator[dict[str, int]]:
    """``{name: calls}`` of every ``nn.Linear`` in ``model``, counted while the block runs."""
    counts = {name: 0 for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    with HookScope() as scope:
        for name, m in model.named_modules():
            if name in counts:
                scope.add(m.register_forward_hook(lambda m, a, out, name=name: counts.__setitem__(name, counts[name] + 1)))
        yield counts


_Models = dict[str, Callable[[], tuple[nn.Module, torch.Tensor]]]


def _case(models: _Models, seed: int, kind: str) -> tuple[nn.Module, torch.Tensor]:
    """The model and input that ``models[kind]`` builds after seeding the RNG with ``seed``."""
    torch.manual_seed(seed)
    return models[kind]()


# ---- 07.1 count each layer's real forward calls, not the recomputation ----------------------------

def _shared(k: int) -> tuple[nn.Module, torch.Tensor]:
    """One Linear applied ``k`` times (weight sharing: `named_modules()` names it once), then a head."""
    shared = nn.Linear(6, 6)
    return nn.Sequential(*[shared, nn.Tanh()] * k, nn.Linear(6, 3)), torch.randn(4, 6, requires_grad=True)


_CALLS_MODELS: _Models = {
    "flat": lambda: (nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh()), torch.randn(5, 4)),
    # the last module saves its output, the last Linear is nested in a child
    "nested": lambda: (nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.Tanh()),
                                     nn.Linear(8, 2), nn.Sigmoid()), torch.randn(3, 4)),
    # a Linear used k times; the head (last) is not recomputed (early stop)
    "shared3": lambda: _shared(3),
    "shared2": lambda: _shared(2),
}
_CALLS_CASES = [(1, "flat"), (2, "shared3"), (3, "nested"), (4, "shared2")]


def _forward_hooks(model: nn.Module) -> int:
    """How many forward hooks could see the model's layers now (on its modules, and global ones)."""
    return sum(entry.kind == "forward" for entry in hook_inventory(model))


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


@exercise("07.1", answer="count_forward_calls")
def count_forward_calls(answer: Any) -> None:
    for case in _CALLS_CASES:
        model, x = _case(_CALLS_MODELS, *case)
        with _forward_calls(model) as truth:
            model(x)  # a plain forward pass, no checkpoint
        model, x = _case(_CALLS_MODELS, *case)
        with _forward_calls(model) as total:  # with the recomputation
            ours = _forward_hooks(model)
            at_first_call: list[int] = []  # the forward hooks in place when the model first ran
            first = model.register_forward_pre_hook(
                lambda m, args: None if at_first_call else at_first_call.append(_forward_hooks(m)))
            try:
                result = run(answer, model, x, leak_free=(model,))
            finally:
                first.remove()
        no_saved_tensor_hooks_left()
        expect(all(p.grad is not None for p in model.parameters()), "no-backward",
               "函数返回后参数还没有梯度：要跑完整的一步训练，包括 `loss.backward()`。",
               "the parameters have no gradient after your function returned: run a whole training step, "
               "`loss.backward()` included.")
        expect(total != truth, "no-recomputation",
               "反向时没有发生重算：前向要用 `torch.utils.checkpoint.checkpoint(model, x, use_reentrant=False)` 来跑。",
               "nothing was recomputed during backward: run the forward pass as "
               "`torch.utils.checkpoint.checkpoint(model, x, use_reentrant=False)`.")
        expect(isinstance(result, dict), "not-a-dict", f"应返回一个字典 {{层名: 次数}}，收到的是 {type(result).__name__}。",
               f"return a dict {{layer name: count}}, not a {type(result).__name__}.")
        expect(set(result) == set(truth), "layer-names",
               f"字典的键应是模型中每个 `nn.Linear` 的名字（`named_modules()` 给出的）：{sorted(truth)}；"
               f"你的是 {sorted(map(str, result))}。",
               f"the keys must be the names of every `nn.Linear` in the model (as `named_modules()` gives them): "
               f"{sorted(truth)}; yours are {sorted(map(str, result))}.")
        for name, count in [(name, result[name]) for name in truth]:
            if isinstance(count, int) and not isinstance(count, bool) and count == truth[name]:
                continue
            zh = f"层 `{name}` 在前向中运行了 {truth[name]} 次（连同重算共 {total[name]} 次），你的函数给出 {count!r}。"
            en = (f"layer `{name}` runs {_times(truth[name])} in forward ({_times(total[name])} counting the "
                  f"recomputation); your function gave {count!r}.")
            expect(count != total[name], "counted-recomputation", zh + "你把反向时的重算也算进去了。",
                   en + " You also counted the recomputation during backward.")
            expect(at_first_call != [ours] or any(result[n] != total[n] - truth[n] for n in truth),
                   "registered-after-forward",
                   zh + "你的次数恰好只是反向时重算的次数：模型第一次运行（前向）时，你的钩子还没有注册，它们只看到了 "
                   "`loss.backward()` 里的重算。先注册钩子，再调用 `checkpoint(...)`。",
                   en + " Your counts are exactly the recomputation's: your hooks were not yet registered when the "
                   "model first ran (the forward pass), so they saw only the recomputation inside `loss.backward()`. "
                   "Register them before calling `checkpoint(...)`.")
            fail("call-count", zh, en)


# ---- 07.2 checkpoint and bf16 compression together ------------------------------------------------

_COMPRESS_MODELS: _Models = {
    "tanh": lambda: (nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 48), nn.Tanh()),
                     torch.randn(32, 16, requires_grad=True)),
    # an input that does not require grad, like a batch of data; 5 KiB: above CompressSaved's default min_bytes
    "data": lambda: (nn.Sequential(nn.Linear(32, 40), nn.Tanh(), nn.Linear(40, 40), nn.Tanh()), torch.randn(40, 32)),
    "relu": lambda: (nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 64), nn.Sigmoid()),
                     torch.randn(24, 8, requires_grad=True)),
}


def _check_kept(held: int, out_numel: int, x_numel: int) -> None:
    """After forward only the block's output in bf16 (saved by ``square()``) and the float32 loss are kept."""
    expected = out_numel * 2 + 4
    if held == expected:
        return
    zh = f"前向结束时应只保留 {expected} 字节（块的输出的 bf16 副本，加上 4 字节的 loss），测得 {held} 字节。"
    en = (f"after forward only {expected} bytes should be kept (a bf16 copy of the block's output, plus the 4-byte "
          f"loss); measured {held}.")
    expect(held != out_numel * 4 + 4, "output-in-float32",
           zh + "块的输出仍以 float32 保存：`square()` 保存的张量没有被压缩，把 `CompressSaved` 放在检查点之后的计算外面。",
           en + " The block's output is still kept in float32: nothing compressed what `square()` saves; enter "
           "`CompressSaved` around the code after the checkpoint.")
    expect(held != expected + x_numel * 2, "input-compressed",
           zh + "还多保存了一份 bf16 的输入 `x`：包住 `checkpoint` 调用的 `CompressSaved` 压缩了检查点为重算留下的输入。"
           "`x` 本来就活着，重算还会用上舍入后的副本；用 `keep=[x]`，或只包住检查点之后的计算。",
           en + " A bf16 copy of the input `x` is kept as well: a `CompressSaved` around the `checkpoint` call "
           "compresses the input the checkpoint keeps for recomputation. `x` is alive anyway, and the recomputation "
           "would use the rounded copy; pass `keep=[x]`, or compress only the code after the checkpoint.")
    fail("kept-bytes", zh, en)


@exercise("07.2", answer="compressed_checkpoint_loss")
def compressed_checkpoint_loss(answer: Any) -> None:
    for seed, kind in [(1, "tanh"), (2, "data"), (3, "relu")]:
        block, x = _case(_COMPRESS_MODELS, seed, kind)
        out = block(x)
        reference_loss = out.square().sum()
        reference = torch.cat([g.flatten() for g in torch.autograd.grad(reference_loss, list(block.parameters()))])
        with _forward_calls(block) as calls, MemoryMeter(ignore=[*block.parameters(), x]) as meter:
            loss = run(answer, block, x, leak_free=(block,))
            held = meter.mark()
            if isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad:
                with guarded("backward-raised", "调用 `loss.backward()` 时", "`loss.backward()`"):
                    loss.backward()
        no_saved_tensor_hooks_left()
        expect(isinstance(loss, torch.Tensor) and loss.numel() == 1, "not-a-scalar-loss",
               "应返回标量损失 `out.square().sum()`（一个张量）。", "return the scalar loss `out.square().sum()` (a tensor).")
        expect(loss.requires_grad, "reentrant-no-graph",
               "返回的 loss 不需要梯度，无法反向：输入不需要梯度时，`use_reentrant=True`（或不写这个参数）的检查点"
               "输出没有计算图（勘误 1）；写 `use_reentrant=False`。",
               "the loss you returned does not require grad, so there is no backward: when the input does not "
               "require grad, a checkpoint with `use_reentrant=True` (or without the argument) gives an output "
               "without a graph (correction 1); write `use_reentrant=False`.")
        expect(torch.allclose(loss.detach(), reference_loss.detach(), rtol=1e-5, atol=0), "loss-value",
               f"损失应是 `block(x).square().sum()` = {reference_loss.item():.4f}，你的函数返回 {loss.item():.4f}。",
               f"the loss must be `block(x).square().sum()` = {reference_loss.item():.4f}; your function "
               f"returned {loss.item():.4f}.")
        expect(calls["0"] >= 2, "checkpoint-bypassed",
               "块只运行了一次，反向时没有重算：检查点被绕过了。检查点区域里面进入的钩子会盖过检查点自己的钩子"
               "（后果 2）；或者根本没有用 `checkpoint(..., use_reentrant=False)`。",
               "the block ran only once, nothing was recomputed in backward: the checkpoint was bypassed. Hooks "
               "entered inside the checkpointed region override the checkpoint's own (consequence 2); or there is "
               "no `checkpoint(..., use_reentrant=False)` at all.")
        _check_kept(held, out.numel(), x.numel())
        grads = [p.grad for p in block.parameters()]
        expect(all(g is not None for g in grads), "no-parameter-grad",
               "反向之后块的参数没有得到梯度（`use_reentrant=True` 且输入不需要梯度时就会这样）。",
               "the block's parameters got no gradient in backward (as with `use_reentrant=True` and an input that "
               "does not require grad).")
        error = ((torch.cat([g.flatten() for g in grads if g is not None]) - reference).norm() / reference.norm()).item()
        expect(error <= 2e-2, "gradient-error", f"梯度的相对误差是 {error:.1e}；bf16 应在 1e-2 以内。",
               f"the relative gradient error is {error:.1e}; bf16 should stay within 1e-2.")


# ---- 07.3 which blocks to checkpoint ---------------------------------------------------------------

_BLOCK_CASES = [  # seed, blocks (an MLP of that hidden width, or 0: three elementwise ops saving their outputs), k
    (0, [64, 0, 16, 128, 0], 2),
    (1, [0, 32, 8, 0, 96], 3),
    (2, [24, 80, 0, 40, 8], 1),
]


def _blocks_case(seed: int, spec: list[int]) -> tuple[nn.Sequential, torch.Tensor]:
    torch.manual_seed(seed)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(16, hidden), nn.Tanh(), nn.Linear(hidden, 16)) if hidden
                            else nn.Sequential(nn.Tanh(), nn.Sigmoid(), nn.Tanh()) for hidden in spec])
    return model, torch.randn(8, 16)


def kept_after_forward(model: nn.Sequential, x: torch.Tensor, names: list[str]) -> int:
    """Bytes kept for backward after ``model(x).square().sum()`` with the named blocks checkpointed."""
    with MemoryMeter(ignore=[*model.parameters(), *model.buffers(), x]) as meter:
        with checkpoint_modules(model, names):
            loss = model(x).square().sum()
        held = meter.mark()
    del loss
    return held


@exercise("07.3", answer="choose_blocks")
def choose_blocks(answer: Any) -> None:
    for seed, spec, k in _BLOCK_CASES:
        model, x = _blocks_case(seed, spec)
        names = [str(i) for i in range(len(spec))]
        kept = {choice: kept_after_forward(model, x, list(choice)) for choice in itertools.combinations(names, k)}
        best = min(kept, key=kept.__getitem__)
        modules_before = list(model.modules())
        result = run(answer, model, x, k, leak_free=(model,))
        no_saved_tensor_hooks_left()
        expect(list(model.modules()) == modules_before and not any("forward" in m.__dict__ for m in model.modules()),
               "model-changed", "函数返回后模型被改变了（模块被替换，或 `forward` 仍被替换着）：只在 "
               "`with hooklab.checkpoint_modules(model, names):` 里面做检查点。",
               "the model is changed after your function returned (a module replaced, or a `forward` still "
               "patched): checkpoint only inside `with hooklab.checkpoint_modules(model, names):`.")
        expect(hasattr(result, "__iter__") and not isinstance(result, str), "not-a-list",
               f"应返回 {k} 个块名组成的列表，例如 {names[:k]}。", f"return a list of {k} block names, e.g. {names[:k]}.")
        result = list(result)
        expect(not any(isinstance(n, int) for n in result), "indices-not-names",
               f"你返回的是块的序号 {result}，应返回块名（字符串，`named_children()` 给出的名字），例如 {names[:k]}："
               "`checkpoint_modules` 和 `model.get_submodule` 认的都是名字。",
               f"you returned the blocks' indices, {result}; return their names (strings, as `named_children()` "
               f"gives them), such as {names[:k]}: `checkpoint_modules` and `model.get_submodule` take names.")
        chosen = [str(n) for n in result]
        expect(len(set(chosen)) == k and set(chosen) <= set(names), "not-k-blocks",
               f"这个模型有块 {names}，要恰好选 {k} 个不同的块；你的函数返回 {chosen}。",
               f"this model has the blocks {names} and exactly {k} different ones must be chosen; your function "
               f"returned {chosen}.")
        mine = kept[tuple(sorted(chosen, key=int))]
        expect(mine == kept[best] or sorted(chosen, key=int) != names[:k], "first-k-blocks",
               f"你选了最前面的 {k} 块 {chosen}，对这个新模型做检查点后前向保留 {mine} 字节；最好的选择 {list(best)} "
               f"只保留 {kept[best]} 字节。靠前的块不一定保存最多的激活值：对拿到的模型逐个量一量。",
               f"you chose the first {k} blocks, {chosen}; on this fresh model checkpointing them keeps {mine} bytes "
               f"after forward, while the best choice, {list(best)}, keeps only {kept[best]}. The first blocks need "
               "not save the most activations: measure the model you are given.")
        expect(mine == kept[best], "not-the-best",
               f"对一个新模型（{len(names)} 块，k={k}），对 {chosen} 做检查点后前向保留 {mine} 字节；"
               f"最好的选择 {list(best)} 只保留 {kept[best]} 字节。",
               f"on a fresh model ({len(names)} blocks, k={k}) checkpointing {chosen} keeps {mine} bytes after "
               f"forward; the best choice, {list(best)}, keeps only {kept[best]}.")


# ---- 07.4 a selective-checkpointing policy: keep the matmuls, recompute the rest -------------------

_MATMULS = ("mm", "addmm", "bmm")


class _TinyAttention(nn.Module):
    """One attention head: a bias-free projection (mm), two batched products (bmm), a Linear (addmm)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.d = d
        self.qkv, self.out = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, -1)
        weights = torch.softmax(q @ k.transpose(-2, -1) / self.d ** 0.5, -1)
        return self.out(torch.relu(weights @ v))


_POLICY_MODELS: _Models = {
    "mlp": lambda: (nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 8)),
                    torch.randn(12, 16, requires_grad=True)),  # Linear with bias on a 2-D input: addmm
    "nobias": lambda: (nn.Sequential(nn.Linear(12, 32, bias=False), nn.ReLU(), nn.Linear(32, 32, bias=False),
                                     nn.Sigmoid()), torch.randn(10, 12)),  # Linear without bias: mm
    "attention": lambda: (_TinyAttention(8), torch.randn(2, 5, 8, requires_grad=True)),
}


def _reference_policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    policy = torch.utils.checkpoint.CheckpointPolicy
    return policy.MUST_SAVE if op.overloadpacket.__name__ in _MATMULS else policy.PREFER_RECOMPUTE


def _sac_step(model: nn.Module, x: torch.Tensor, policy: Any) -> tuple[int, Any, list[torch.Tensor]]:
    """Bytes kept after forward, ops run in backward, gradients (``policy=None``: no checkpoint)."""
    model.zero_grad(set_to_none=True)
    with MemoryMeter(ignore=[*model.parameters(), x]) as meter:
        if policy is None:
            out = model(x)
        else:
            context_fn = functools.partial(torch.utils.checkpoint.create_selective_checkpoint_contexts, policy)
            out = torch.utils.checkpoint.checkpoint(model, x, use_reentrant=False, context_fn=context_fn)
        loss = out.square().sum()
        kept = meter.mark()
        with OpCounter() as ran:
            loss.backward()
    return kept, ran.counts, [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _recording(answer: Callable, decisions: list[tuple[Any, Any]]) -> Callable:
    """The learner's policy, its decisions recorded; what is not a ``CheckpointPolicy`` is given to torch as
    PREFER_RECOMPUTE (the check judges it afterwards)."""
    policy_type = torch.utils.checkpoint.CheckpointPolicy

    def recorded(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        with guarded("policy-raised", f"你的策略函数对 `{op}` ", f"your policy, for `{op}`,"):
            decision = answer(ctx, op, *args, **kwargs)
        decisions.append((op, decision))
        return decision if isinstance(decision, policy_type) else policy_type.PREFER_RECOMPUTE
    return recorded


@exercise("07.4", answer="keep_matmuls")
def keep_matmuls(answer: Any) -> None:
    for seed, kind in [(1, "mlp"), (2, "nobias"), (3, "attention")]:
        plain_kept, plain_ops, plain_grads = _sac_step(*_case(_POLICY_MODELS, seed, kind), None)
        ref_kept, _, _ = _sac_step(*_case(_POLICY_MODELS, seed, kind), _reference_policy)
        decisions: list[tuple[Any, Any]] = []
        kept, ops, grads = _sac_step(*_case(_POLICY_MODELS, seed, kind), _recording(answer, decisions))
        if all(decision is None for _, decision in decisions):
            raise NotSolved("你的策略函数还没有返回任何值（返回了 None）。", "your policy returns None so far.")
        for op, decision in decisions:
            expect(isinstance(decision, torch.utils.checkpoint.CheckpointPolicy), "not-a-policy",
                   f"对 `{op}` 你的策略返回了 {decision!r}；应返回 `CheckpointPolicy` 的成员，例如 "
                   "`CheckpointPolicy.MUST_SAVE` 或 `CheckpointPolicy.PREFER_RECOMPUTE`（torch 为了兼容仍接受 "
                   "True / False，但不要依赖它）。",
                   f"for `{op}` your policy returned {decision!r}; return a member of `CheckpointPolicy`, such as "
                   "`CheckpointPolicy.MUST_SAVE` or `CheckpointPolicy.PREFER_RECOMPUTE` (torch still accepts "
                   "True / False for backward compatibility; do not rely on it).")
        expect(len(grads) == len(plain_grads) and all(torch.allclose(a, b, rtol=1e-5, atol=1e-7)
                                                      for a, b in zip(plain_grads, grads)),
               "gradients-differ", "梯度与不做检查点时不同。", "the gradients differ from those without checkpointing.")
        recomputed = {name: ops[name] - plain_ops[name] for name in _MATMULS if ops[name] > plain_ops[name]}
        listed = ", ".join(f"`{name}` ×{n}" for name, n in sorted(recomputed.items()))
        expect(not recomputed, "matmul-recomputed",
               f"反向时重算了矩阵乘法（{listed}）：你的策略没有保存它们的输出（`mm`、`addmm`、`bmm` 三个都包括了吗？）。"
               "注意 `op` 是具体的重载，例如 `torch.ops.aten.addmm.default`，与重载包 `torch.ops.aten.addmm` 比较永远"
               "不相等；`aten.linear`、`aten.matmul` 也到不了策略函数（它们先被分解成 mm / addmm / bmm）。",
               f"backward ran matrix multiplications again ({listed}): your policy did not keep their outputs (are "
               "all three of `mm`, `addmm` and `bmm` in it?). Note that `op` is a concrete overload such as "
               "`torch.ops.aten.addmm.default`, which never equals the packet `torch.ops.aten.addmm`; `aten.linear` "
               "and `aten.matmul` never reach the policy either (they are decomposed into mm / addmm / bmm first).")
        more = kept > ref_kept
        expect(kept == ref_kept, "kept-bytes",
               f"前向后保留了 {kept} 字节，只保存矩阵乘法的输出时是 {ref_kept} 字节（不做检查点时 {plain_kept} 字节）。"
               + ("你还保存了便宜的逐元素运算的输出：它们应该重算（`PREFER_RECOMPUTE`）。" if more else ""),
               f"{kept} bytes are kept after forward; keeping only the matmul outputs keeps {ref_kept} (without "
               f"checkpointing: {plain_kept})."
               + (" You also keep the outputs of cheap pointwise ops: recompute those (`PREFER_RECOMPUTE`)." if more else ""))
