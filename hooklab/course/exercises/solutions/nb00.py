"""Hints and reference solutions of notebook 00 (introduction)."""
import torch

import hooklab

HINTS = {
    "00.1": ("在 `model[1]` 上注册前向钩子，在钩子里计算 `(output == 0).sum().item()`；"
             "把句柄交给 `with hooklab.HookScope() as scope:`。",
             "register a forward hook on `model[1]` that computes `(output == 0).sum().item()`; "
             "hand its handle to `with hooklab.HookScope() as scope:`."),
    "00.2": ("`loss.grad_fn` 是图里最靠后的节点，反向从它开始；`w` 的梯度要等到最后才累加进 `w.grad`。",
             "`loss.grad_fn` is the last Node of the graph, where backward starts; `w`'s gradient "
             "is accumulated into `w.grad` only at the very end."),
    "00.3": ("在 `with torch.autograd.graph.saved_tensors_hooks(pack, unpack):` 里跑一次前向，"
             "让 `pack` 每被调用一次就计数一次，并原样返回张量。",
             "run one forward pass inside `with torch.autograd.graph.saved_tensors_hooks(pack, unpack):` "
             "where `pack` counts each call and returns the tensor unchanged."),
}

# [00.1]
def count_relu_zeros(model, x):
    counts = []
    with hooklab.HookScope() as scope:
        scope.add(model[1].register_forward_hook(
            # bitwise: exact arithmetic, ReLU writes an exact 0 wherever its input is <= 0
            lambda module, args, output: counts.append(int((output == 0).sum()))))
        model(x)
    return counts[0]

# [00.2]
my_order = ["node_pre", "node_post", "tensor", "post_accumulate_grad"]

# [00.3]
def count_saved(model, x):
    count = 0
    def pack(tensor):
        nonlocal count
        count += 1
        return tensor.detach()  # not the tensor itself: notebook 06 shows the reference cycle it can make
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(x)
    return count
