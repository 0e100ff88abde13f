"""Exercises of notebook 07 (activation checkpointing): count real forward calls, compress around a
checkpoint, choose which blocks to checkpoint, write a selective-checkpointing policy.

Every checker builds tiny seeded models, computes the truth itself (a plain forward pass, its own
``MemoryMeter`` measurements), runs the learner's answer and says what differs. Nothing depends on
timing: the memory figures are counted op by op and are the same on every machine.
"""
from __future__ import annotations

import functools
import itertools
from typing import Any

import torch
import torch.utils.checkpoint  # `import torch` alone does not import it before torch 2.8
from torch import nn

from ...checkpoint import checkpoint_modules
from ...meter import MemoryMeter, OpCounter
from . import NotSolved, Wrong, call_answer, exercise, no_hooks_left, require_callable
from .nb06 import no_saved_tensor_hooks_left


def _run(what_zh: str, what_en: str, fn: Any) -> Any:
    try:
        return fn()
    except Wrong:
        raise
    except Exception as exc:
        raise Wrong(f"{what_zh}时出错：{type(exc).__name__}: {exc}",
                    f"{what_en} failed: {type(exc).__name__}: {exc}") from exc


# ---- 07.1 count each layer's real forward calls, not the recomputation ----------------------------

class _SharedLayer(nn.Module):
    """One Linear applied ``k`` times (weight sharing), then a head."""

    def __init__(self, width: int, k: int) -> None:
        super().__init__()
        self.shared, self.head, self.k = nn.Linear(width, width), nn.Linear(width, 3), k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.k):
            x = torch.tanh(self.shared(x))
        return self.head(x)


def _calls_case(seed: int, kind: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    if kind == "flat":
        model: nn.Module = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh())
        return model, torch.randn(5, 4)
    if kind == "nested":  # the last module saves its output, the last Linear is nested in a child
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.Tanh()),
                              nn.Linear(8, 2), nn.Sigmoid())
        return model, torch.randn(3, 4)
    k = int(kind[-1])  # "shared3": a Linear used 3 times; the head (last) is not recomputed (early stop)
    return _SharedLayer(6, k), torch.randn(4, 6, requires_grad=True)


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _count_calls(model: nn.Module, run: Any) -> dict[str, int]:
    counts = {name: 0 for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    handles = [m.register_forward_hook(lambda m, args, out, name=name: counts.__setitem__(name, counts[name] + 1))
               for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return counts


@exercise("07.1",
          hint=("用一个标志记录当前阶段：前向结束、调用 `loss.backward()` 之前把它设为“反向”，钩子只在前向阶段计数；"
                "注册钩子时用默认参数 `name=name` 绑定层名，并用 `hooklab.HookScope` 移除钩子。",
                "keep a flag for the phase: set it to 'backward' after forward, before `loss.backward()`, and count "
                "only during forward; bind the layer name with a default argument `name=name`, and remove the "
                "hooks with `hooklab.HookScope`."),
          solution='''
def count_forward_calls(model, x):
    counts = {}
    phase = ["forward"]
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                counts[name] = 0

                def hook(module, args, output, name=name):
                    if phase[0] == "forward":
                        counts[name] += 1

                scope.add(module.register_forward_hook(hook))
        loss = torch.utils.checkpoint.checkpoint(model, x, use_reentrant=False).square().sum()
        phase[0] = "backward"
        loss.backward()
    return counts
''')
def count_forward_calls(answer: Any) -> None:
    require_callable(answer, "count_forward_calls")
    for seed, kind in [(1, "flat"), (2, "shared3"), (3, "nested"), (4, "shared2")]:
        model, x = _calls_case(seed, kind)
        truth = _count_calls(model, lambda: model(x))  # a plain forward pass, no checkpoint
        model, x = _calls_case(seed, kind)
        results: list[Any] = []
        with no_hooks_left(model):
            total = _count_calls(model, lambda: results.append(call_answer(answer, model, x)))  # with the recomputation
        result = results[0]
        no_saved_tensor_hooks_left()
        if any(p.grad is None for p in model.parameters()):
            raise Wrong("函数返回后参数还没有梯度：要跑完整的一步训练，包括 `loss.backward()`。",
                        "the parameters have no gradient after your function returned: run a whole training "
                        "step, `loss.backward()` included.")
        if total == truth:
            raise Wrong("反向时没有发生重算：前向要用 `torch.utils.checkpoint.checkpoint(model, x, use_reentrant=False)` 来跑。",
                        "nothing was recomputed during backward: run the forward pass as "
                        "`torch.utils.checkpoint.checkpoint(model, x, use_reentrant=False)`.")
        if not isinstance(result, dict):
            raise Wrong(f"应返回一个字典 {{层名: 次数}}，收到的是 {type(result).__name__}。",
                        f"return a dict {{layer name: count}}, not a {type(result).__name__}.")
        if set(result) != set(truth):
            raise Wrong(f"字典的键应是模型中每个 `nn.Linear` 的名字（`named_modules()` 给出的）：{sorted(truth)}；"
                        f"你的是 {sorted(map(str, result))}。",
                        f"the keys must be the names of every `nn.Linear` in the model (as `named_modules()` gives "
                        f"them): {sorted(truth)}; yours are {sorted(map(str, result))}.")
        for name in truth:
            count = result[name]
            if not isinstance(count, int) or isinstance(count, bool) or count != truth[name]:
                extra_zh = extra_en = ""
                if count == total[name]:
                    extra_zh, extra_en = "你把反向时的重算也算进去了。", " You also counted the recomputation during backward."
                raise Wrong(f"层 `{name}` 在前向中运行了 {truth[name]} 次（连同重算共 {total[name]} 次），你的函数给出 "
                            f"{count!r}。{extra_zh}",
                            f"layer `{name}` runs {_times(truth[name])} in forward ({_times(total[name])} counting "
                            f"the recomputation); your function gave {count!r}.{extra_en}")


# ---- 07.2 checkpoint and bf16 compression together ------------------------------------------------

def _compress_case(seed: int, kind: str) -> tuple[nn.Sequential, torch.Tensor]:
    torch.manual_seed(seed)
    if kind == "tanh":
        block = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 48), nn.Tanh())
        return block, torch.randn(32, 16, requires_grad=True)
    if kind == "data":  # an input that does not require grad, like a batch of data
        block = nn.Sequential(nn.Linear(32, 40), nn.Tanh(), nn.Linear(40, 40), nn.Tanh())
        return block, torch.randn(40, 32)  # 5 KiB: above CompressSaved's default min_bytes
    block = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 64), nn.Sigmoid())
    return block, torch.randn(24, 8, requires_grad=True)


@exercise("07.2",
          hint=("检查点区域里面不要再进入别的钩子；把 `hooklab.CompressSaved(\"bf16\")` 放在检查点**外面**，"
                "包住 `out.square().sum()`（或者包住整段，但用 `keep=[x]` 让输入 `x` 保持原样）。",
                "enter no other hooks inside the checkpointed region; put `hooklab.CompressSaved(\"bf16\")` "
                "**outside** the checkpoint, around `out.square().sum()` (or around everything, with `keep=[x]` "
                "so that the input `x` stays as it is)."),
          solution='''
def compressed_checkpoint_loss(block, x):
    out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
    with hooklab.CompressSaved("bf16"):
        return out.square().sum()
''')
def compressed_checkpoint_loss(answer: Any) -> None:
    require_callable(answer, "compressed_checkpoint_loss")
    for seed, kind in [(1, "tanh"), (2, "data"), (3, "relu")]:
        block, x = _compress_case(seed, kind)
        reference_loss = block(x).square().sum()
        reference_loss.backward()
        reference = torch.cat([p.grad.flatten() for p in block.parameters()])
        out_numel = block(x).numel()
        block.zero_grad(set_to_none=True)
        expected = out_numel * 2 + 4  # the block's output in bf16, saved by square(), and the float32 loss

        calls = [0]
        spy = block[0].register_forward_hook(lambda m, args, out: calls.__setitem__(0, calls[0] + 1))
        try:
            with no_hooks_left(block), MemoryMeter(ignore=[*block.parameters(), x]) as meter:
                loss = call_answer(answer, block, x)
                held = meter.mark()
                if isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad:
                    _run("`loss.backward()`", "`loss.backward()`", loss.backward)
        finally:
            spy.remove()
        no_saved_tensor_hooks_left()
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise Wrong("应返回标量损失 `out.square().sum()`（一个张量）。",
                        "return the scalar loss `out.square().sum()` (a tensor).")
        if not loss.requires_grad:
            raise Wrong("返回的 loss 不需要梯度，无法反向：输入不需要梯度时，`use_reentrant=True`（或不写这个参数）的检查点"
                        "输出没有计算图（勘误 1）；写 `use_reentrant=False`。",
                        "the loss you returned does not require grad, so there is no backward: when the input does "
                        "not require grad, a checkpoint with `use_reentrant=True` (or without the argument) gives an "
                        "output without a graph (correction 1); write `use_reentrant=False`.")
        if not torch.allclose(loss.detach(), reference_loss.detach(), rtol=1e-5, atol=0):
            raise Wrong(f"损失应是 `block(x).square().sum()` = {reference_loss.item():.4f}，你的函数返回 {loss.item():.4f}。",
                        f"the loss must be `block(x).square().sum()` = {reference_loss.item():.4f}; your function "
                        f"returned {loss.item():.4f}.")
        if calls[0] < 2:
            raise Wrong("块只运行了一次，反向时没有重算：检查点被绕过了。检查点区域里面进入的钩子会盖过检查点自己的钩子"
                        "（后果 2）；或者根本没有用 `checkpoint(..., use_reentrant=False)`。",
                        "the block ran only once, nothing was recomputed in backward: the checkpoint was bypassed. "
                        "Hooks entered inside the checkpointed region override the checkpoint's own (consequence 2); "
                        "or there is no `checkpoint(..., use_reentrant=False)` at all.")
        if held != expected:
            if held == out_numel * 4 + 4:
                zh = "块的输出仍以 float32 保存：`square()` 保存的张量没有被压缩，把 `CompressSaved` 放在检查点之后的计算外面。"
                en = ("The block's output is still kept in float32: nothing compressed what `square()` saves; "
                      "enter `CompressSaved` around the code after the checkpoint.")
            elif held == expected + x.numel() * 2:
                zh = ("还多保存了一份 bf16 的输入 `x`：包住 `checkpoint` 调用的 `CompressSaved` 压缩了检查点为重算留下的输入。"
                      "`x` 本来就活着，重算还会用上舍入后的副本；用 `keep=[x]`，或只包住检查点之后的计算。")
                en = ("A bf16 copy of the input `x` is kept as well: a `CompressSaved` around the `checkpoint` call "
                      "compresses the input the checkpoint keeps for recomputation. `x` is alive anyway, and the "
                      "recomputation would use the rounded copy; pass `keep=[x]`, or compress only the code after "
                      "the checkpoint.")
            else:
                zh = en = ""
            raise Wrong(f"前向结束时应只保留 {expected} 字节（块的输出的 bf16 副本，加上 4 字节的 loss），测得 {held} 字节。{zh}",
                        f"after forward only {expected} bytes should be kept (a bf16 copy of the block's output, "
                        f"plus the 4-byte loss); measured {held}. {en}".rstrip())
        grads = [p.grad for p in block.parameters()]
        if any(g is None for g in grads):
            raise Wrong("反向之后块的参数没有得到梯度（`use_reentrant=True` 且输入不需要梯度时就会这样）。",
                        "the block's parameters got no gradient in backward (as with `use_reentrant=True` and an "
                        "input that does not require grad).")
        error = ((torch.cat([g.flatten() for g in grads]) - reference).norm() / reference.norm()).item()
        if error > 2e-2:
            raise Wrong(f"梯度的相对误差是 {error:.1e}；bf16 应在 1e-2 以内。",
                        f"the relative gradient error is {error:.1e}; bf16 should stay within 1e-2.")


# ---- 07.3 which blocks to checkpoint ---------------------------------------------------------------

def _mlp(width: int, hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(width, hidden), nn.Tanh(), nn.Linear(hidden, width))


def _elementwise() -> nn.Module:  # no parameters; saves three outputs
    return nn.Sequential(nn.Tanh(), nn.Sigmoid(), nn.Tanh())


_BLOCK_CASES = [  # seed, blocks ("m", hidden) or ("e", 0), k
    (0, [("m", 64), ("e", 0), ("m", 16), ("m", 128), ("e", 0)], 2),
    (1, [("e", 0), ("m", 32), ("m", 8), ("e", 0), ("m", 96)], 3),
    (2, [("m", 24), ("m", 80), ("e", 0), ("m", 40), ("m", 8)], 1),
]


def _blocks_case(seed: int, spec: list[tuple[str, int]]) -> tuple[nn.Sequential, torch.Tensor]:
    torch.manual_seed(seed)
    model = nn.Sequential(*[_mlp(16, hidden) if kind == "m" else _elementwise() for kind, hidden in spec])
    return model, torch.randn(8, 16)


def kept_after_forward(model: nn.Sequential, x: torch.Tensor, names: list[str]) -> int:
    """Bytes kept for backward after ``model(x).square().sum()`` with the named blocks checkpointed."""
    with MemoryMeter(ignore=[*model.parameters(), *model.buffers(), x]) as meter:
        with checkpoint_modules(model, names):
            loss = model(x).square().sum()
        held = meter.mark()
    del loss
    return held


@exercise("07.3",
          hint=("对每一块单独做检查点（`hooklab.checkpoint_modules(model, [name])`），用 `hooklab.MemoryMeter` "
                "量前向后保留的字节数，然后选保留得最少的 `k` 块；块的大小不看参数，看它保存的激活值。",
                "checkpoint each block on its own (`hooklab.checkpoint_modules(model, [name])`), measure the bytes "
                "kept after forward with `hooklab.MemoryMeter`, and pick the `k` blocks that leave the least; "
                "what matters is the activations a block saves, not its parameters."),
          solution='''
def choose_blocks(model, x, k):
    kept = {}
    for name, _ in model.named_children():
        with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
            with hooklab.checkpoint_modules(model, [name]):
                loss = model(x).square().sum()
            kept[name] = meter.mark()
        del loss
    return sorted(kept, key=kept.get)[:k]
''')
def choose_blocks(answer: Any) -> None:
    require_callable(answer, "choose_blocks")
    for seed, spec, k in _BLOCK_CASES:
        model, x = _blocks_case(seed, spec)
        names = [str(i) for i in range(len(spec))]
        kept = {choice: kept_after_forward(model, x, list(choice)) for choice in itertools.combinations(names, k)}
        best = min(kept.values())
        modules_before = list(model.modules())
        with no_hooks_left(model):
            result = call_answer(answer, model, x, k)
        no_saved_tensor_hooks_left()
        if list(model.modules()) != modules_before or any("forward" in m.__dict__ for m in model.modules()):
            raise Wrong("函数返回后模型被改变了（模块被替换，或 `forward` 仍被替换着）：只在 "
                        "`with hooklab.checkpoint_modules(model, names):` 里面做检查点。",
                        "the model is changed after your function returned (a module replaced, or a `forward` "
                        "still patched): checkpoint only inside `with hooklab.checkpoint_modules(model, names):`.")
        if isinstance(result, (str, int)) or not hasattr(result, "__iter__"):
            raise Wrong(f"应返回 {k} 个块名组成的列表，例如 {names[:k]}。",
                        f"return a list of {k} block names, e.g. {names[:k]}.")
        chosen = [str(n) for n in result]
        if len(set(chosen)) != k or not set(chosen) <= set(names):
            raise Wrong(f"这个模型有块 {names}，要恰好选 {k} 个不同的块；你的函数返回 {chosen}。",
                        f"this model has the blocks {names} and exactly {k} different ones must be chosen; your "
                        f"function returned {chosen}.")
        mine = kept[tuple(sorted(chosen, key=int))]
        if mine != best:
            right = [list(c) for c, v in kept.items() if v == best]
            raise Wrong(f"对一个新模型（{len(names)} 块，k={k}），对 {chosen} 做检查点后前向保留 {mine} 字节；"
                        f"最好的选择 {right[0]} 只保留 {best} 字节。",
                        f"on a fresh model ({len(names)} blocks, k={k}) checkpointing {chosen} keeps {mine} bytes "
                        f"after forward; the best choice, {right[0]}, keeps only {best}.")


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


def _policy_case(seed: int, kind: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    if kind == "mlp":  # Linear with bias on a 2-D input: addmm
        model: nn.Module = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 8))
        return model, torch.randn(12, 16, requires_grad=True)
    if kind == "nobias":  # Linear without bias: mm
        model = nn.Sequential(nn.Linear(12, 32, bias=False), nn.ReLU(), nn.Linear(32, 32, bias=False), nn.Sigmoid())
        return model, torch.randn(10, 12)
    return _TinyAttention(8), torch.randn(2, 5, 8, requires_grad=True)


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
    return kept, ran.counts, [p.grad.clone() for p in model.parameters()]


@exercise("07.4",
          hint=("`op` 是一个具体的重载，例如 `torch.ops.aten.addmm.default`；`op == torch.ops.aten.addmm`（重载包）永远是 "
                "False。比较 `op.overloadpacket`，或者列出 `.default` 重载。`nn.Linear` 有偏置时用 `addmm`，没有偏置时用 `mm`，"
                "三维张量的 `@` 用 `bmm`；`aten.linear`、`aten.matmul` 会先分解，策略函数根本见不到它们。",
                "`op` is a concrete overload such as `torch.ops.aten.addmm.default`; `op == torch.ops.aten.addmm` (the "
                "packet) is always False. Compare `op.overloadpacket`, or list the `.default` overloads. `nn.Linear` "
                "uses `addmm` with a bias and `mm` without, `@` on 3-D tensors uses `bmm`; `aten.linear` and "
                "`aten.matmul` are decomposed first, so the policy never sees them."),
          solution='''
def keep_matmuls(ctx, op, *args, **kwargs):
    matmuls = {torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm}
    if op.overloadpacket in matmuls:
        return torch.utils.checkpoint.CheckpointPolicy.MUST_SAVE
    return torch.utils.checkpoint.CheckpointPolicy.PREFER_RECOMPUTE
''')
def keep_matmuls(answer: Any) -> None:
    require_callable(answer, "keep_matmuls")
    policy_type = torch.utils.checkpoint.CheckpointPolicy
    for seed, kind in [(1, "mlp"), (2, "nobias"), (3, "attention")]:
        decisions: list[tuple[Any, Any]] = []

        def recorded(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                decision = answer(ctx, op, *args, **kwargs)
            except Exception as exc:
                raise Wrong(f"你的策略函数对 `{op}` 抛出了 {type(exc).__name__}: {exc}",
                            f"your policy raised {type(exc).__name__} for `{op}`: {exc}") from exc
            decisions.append((op, decision))
            ok = isinstance(decision, policy_type)
            return decision if ok else policy_type.PREFER_RECOMPUTE

        model, x = _policy_case(seed, kind)
        plain_kept, plain_ops, plain_grads = _sac_step(model, x, None)
        model, x = _policy_case(seed, kind)
        ref_kept, _, _ = _sac_step(model, x, _reference_policy)
        model, x = _policy_case(seed, kind)
        kept, ops, grads = _run("用你的策略做选择性检查点", "selective checkpointing with your policy",
                                lambda: _sac_step(model, x, recorded))
        if all(decision is None for _, decision in decisions):
            raise NotSolved("你的策略函数还没有返回任何值（返回了 None）。", "your policy returns None so far.")
        for op, decision in decisions:
            if not isinstance(decision, policy_type):
                raise Wrong(f"对 `{op}` 你的策略返回了 {decision!r}；应返回 `CheckpointPolicy` 的成员，例如 "
                            "`CheckpointPolicy.MUST_SAVE` 或 `CheckpointPolicy.PREFER_RECOMPUTE`（torch 为了兼容仍接受 "
                            "True / False，但不要依赖它）。",
                            f"for `{op}` your policy returned {decision!r}; return a member of `CheckpointPolicy`, "
                            "such as `CheckpointPolicy.MUST_SAVE` or `CheckpointPolicy.PREFER_RECOMPUTE` (torch "
                            "still accepts True / False for backward compatibility; do not rely on it).")
        if not all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(plain_grads, grads)):
            raise Wrong("梯度与不做检查点时不同。", "the gradients differ from those without checkpointing.")
        recomputed = {name: ops[name] - plain_ops[name] for name in _MATMULS if ops[name] > plain_ops[name]}
        if recomputed:
            listed = ", ".join(f"`{name}` ×{n}" for name, n in sorted(recomputed.items()))
            raise Wrong(f"反向时重算了矩阵乘法（{listed}）：你的策略没有保存它们的输出（`mm`、`addmm`、`bmm` 三个都包括了吗？）。注意 `op` 是具体的重载，例如 "
                        "`torch.ops.aten.addmm.default`，与重载包 `torch.ops.aten.addmm` 比较永远不相等；"
                        "`aten.linear`、`aten.matmul` 也到不了策略函数（它们先被分解成 mm / addmm / bmm）。",
                        f"backward ran matrix multiplications again ({listed}): your policy did not keep their "
                        "outputs (are all three of `mm`, `addmm` and `bmm` in it?). Note that `op` is a concrete overload such as `torch.ops.aten.addmm.default`, "
                        "which never equals the packet `torch.ops.aten.addmm`; `aten.linear` and `aten.matmul` "
                        "never reach the policy either (they are decomposed into mm / addmm / bmm first).")
        if kept != ref_kept:
            more = kept > ref_kept
            raise Wrong(f"前向后保留了 {kept} 字节，只保存矩阵乘法的输出时是 {ref_kept} 字节（不做检查点时 {plain_kept} 字节）。"
                        + ("你还保存了便宜的逐元素运算的输出：它们应该重算（`PREFER_RECOMPUTE`）。" if more else ""),
                        f"{kept} bytes are kept after forward; keeping only the matmul outputs keeps {ref_kept} "
                        f"(without checkpointing: {plain_kept})."
                        + (" You also keep the outputs of cheap pointwise ops: recompute those "
                           "(`PREFER_RECOMPUTE`)." if more else ""))

