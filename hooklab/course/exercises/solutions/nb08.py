"""Hints and reference solutions of notebook 08 (pitfalls)."""
from torch import nn

import hooklab

HINTS = {
    "08.1": ("在 `for name, module in model.named_modules():` 里注册钩子时，lambda 在**调用**时才读 `name`，"
             "那时循环早已结束。用默认参数 `lambda m, a, out, name=name: ...`，或写一个返回钩子的工厂函数。",
             "a lambda registered in `for name, module in model.named_modules():` reads `name` when it is "
             "*called*, long after the loop ended. Bind it now with a default argument "
             "`lambda m, a, out, name=name: ...`, or use a function that returns the hook."),
    "08.2": ("每次运行都先移除上一次注册的钩子：`scope = hooklab.named_scope(\"call-counter\")` 会先清掉同名作用域里的钩子，"
             "再 `scope.add(model.register_forward_hook(...))`。不要清空 `model._forward_hooks`：那会删掉别人的钩子。",
             "remove what the previous run registered before registering again: "
             "`scope = hooklab.named_scope(\"call-counter\")` first empties the scope of that name, then "
             "`scope.add(model.register_forward_hook(...))`. Do not clear `model._forward_hooks`: that "
             "deletes other people's hooks too."),
    "08.3": ("`output.detach()` 切断与计算图的联系，但和原输出共享内存；模型随后的原地操作会改写它。"
             "存 `output.detach().clone()`。",
             "`output.detach()` cuts the link to the graph but shares memory with the output, so a later "
             "in-place op of the model rewrites it. Store `output.detach().clone()`."),
    "08.4": ("钩子收到的梯度张量可能同时被图中其他分支使用；不要 `grad.mul_(...)`，而是返回一个新张量：`return grad * 0.5`。",
             "the gradient a hook receives may be the very tensor other branches of the graph use too; "
             "do not `grad.mul_(...)`, return a new tensor instead: `return grad * 0.5`."),
}

# [08.1]
def linear_output_shapes(model, x):
    shapes = {}
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                scope.add(module.register_forward_hook(
                    lambda m, args, out, name=name: shapes.__setitem__(name, tuple(out.shape))))
        model(x)
    return shapes

# [08.2]
def install_call_counter(model, counts):
    scope = hooklab.named_scope("call-counter")
    def count(module, args, output):
        counts["calls"] = counts.get("calls", 0) + 1
    scope.add(model.register_forward_hook(count))

# [08.3]
def keep_relu_outputs(model, x):
    kept = []
    with hooklab.HookScope() as scope:
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                scope.add(module.register_forward_hook(
                    lambda m, args, out: kept.append(out.detach().clone())))
        model(x)
    return kept

# [08.4]
def halve(grad):
    return grad * 0.5
