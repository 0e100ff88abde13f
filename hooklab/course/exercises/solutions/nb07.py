"""Hints and reference solutions of notebook 07 (activation checkpointing)."""
import torch
import torch.utils.checkpoint  # `import torch` alone does not import it before torch 2.8 (the sections use it)
from torch import nn

import hooklab

HINTS = {
    "07.1": ("用一个标志记录当前阶段：前向结束、调用 `loss.backward()` 之前把它设为“反向”，钩子只在前向阶段计数；"
             "注册钩子时用默认参数 `name=name` 绑定层名，并用 `hooklab.HookScope` 移除钩子。",
             "keep a flag for the phase: set it to 'backward' after forward, before `loss.backward()`, and count "
             "only during forward; bind the layer name with a default argument `name=name`, and remove the "
             "hooks with `hooklab.HookScope`."),
    "07.2": ("检查点区域里面不要再进入别的钩子；把 `hooklab.CompressSaved(\"bf16\")` 放在检查点**外面**，"
             "包住 `out.square().sum()`（或者包住整段，但用 `keep=[x]` 让输入 `x` 保持原样）。",
             "enter no other hooks inside the checkpointed region; put `hooklab.CompressSaved(\"bf16\")` "
             "**outside** the checkpoint, around `out.square().sum()` (or around everything, with `keep=[x]` "
             "so that the input `x` stays as it is)."),
    "07.3": ("对每一块单独做检查点（`hooklab.checkpoint_modules(model, [name])`），用 `hooklab.MemoryMeter` "
             "量前向后保留的字节数，然后选保留得最少的 `k` 块；块的大小不看参数，看它保存的激活值。",
             "checkpoint each block on its own (`hooklab.checkpoint_modules(model, [name])`), measure the bytes "
             "kept after forward with `hooklab.MemoryMeter`, and pick the `k` blocks that leave the least; "
             "what matters is the activations a block saves, not its parameters."),
    "07.4": ("`op` 是一个具体的重载，例如 `torch.ops.aten.addmm.default`；`op == torch.ops.aten.addmm`（重载包）永远是 "
             "False。比较 `op.overloadpacket`，或者列出 `.default` 重载。`nn.Linear` 有偏置时用 `addmm`，没有偏置时用 `mm`，"
             "三维张量的 `@` 用 `bmm`；`aten.linear`、`aten.matmul` 会先分解，策略函数根本见不到它们。",
             "`op` is a concrete overload such as `torch.ops.aten.addmm.default`; `op == torch.ops.aten.addmm` (the "
             "packet) is always False. Compare `op.overloadpacket`, or list the `.default` overloads. `nn.Linear` "
             "uses `addmm` with a bias and `mm` without, `@` on 3-D tensors uses `bmm`; `aten.linear` and "
             "`aten.matmul` are decomposed first, so the policy never sees them."),
}

# [07.1]
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

# [07.2]
def compressed_checkpoint_loss(block, x):
    out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
    with hooklab.CompressSaved("bf16"):
        return out.square().sum()

# [07.3]
def choose_blocks(model, x, k):
    kept = {}
    for name, _ in model.named_children():
        with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
            with hooklab.checkpoint_modules(model, [name]):
                loss = model(x).square().sum()
            kept[name] = meter.mark()
        del loss
    return sorted(kept, key=kept.get)[:k]

# [07.4]
def keep_matmuls(ctx, op, *args, **kwargs):
    matmuls = {torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm}
    if op.overloadpacket in matmuls:
        return torch.utils.checkpoint.CheckpointPolicy.MUST_SAVE
    return torch.utils.checkpoint.CheckpointPolicy.PREFER_RECOMPUTE
