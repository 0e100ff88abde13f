"""Hints and reference solutions of notebook 04 (module backward hooks)."""
import hooklab

HINTS = {
    "04.1": ("返回一个与 `grad_input` 等长的新元组：`tuple(None if g is None else g.clamp(-0.1, 0.1) for g in grad_input)`。"
             "不要原地修改（`clamp_`），也不要只返回一个张量；`grad_input` 里非张量参数对应的位置是 `None`。",
             "return a new tuple as long as `grad_input`: `tuple(None if g is None else g.clamp(-0.1, 0.1) for g in "
             "grad_input)`. Do not clamp in place (`clamp_`) and do not return a bare tensor; a non-tensor argument's "
             "entry in `grad_input` is `None`."),
    "04.2": ("反向前置钩子的返回值替换 `grad_output`：fc2 之后算的一切（包括它自己的参数梯度）都用新值。"
             "反向钩子的返回值替换 `grad_input`：只影响继续往前（往 fc1 和 x）传的梯度，fc2 自己的参数梯度已经算完了。",
             "a pre-hook's return value replaces `grad_output`: everything fc2 computes afterwards (its own parameter "
             "gradients included) uses the new value. A backward hook's return value replaces `grad_input`: it only "
             "affects what travels further back (to fc1 and x); fc2's own parameter gradients are already done."),
    "04.3": ("用 `model.named_modules()` 找出所有 `torchvision.models.resnet.BasicBlock`，给每个挂一个完整反向钩子，"
             "在钩子里把 `(name, grad_output[0].norm().item())` 追加到列表；块名要在循环里绑定好（`name=name` 或一个返回钩子的函数），"
             "否则每个钩子看到的都是最后一个名字。然后在 `HookScope` 里运行 `model(x).sum().backward()`。",
             "find every `torchvision.models.resnet.BasicBlock` with `model.named_modules()`, give each a full backward "
             "hook that appends `(name, grad_output[0].norm().item())` to a list; bind the name inside the loop "
             "(`name=name` or a function that returns the hook), or every hook sees the last name. Then run "
             "`model(x).sum().backward()` inside a `HookScope`."),
}

# [04.1]
def clip_grad_input(module, grad_input, grad_output):
    return tuple(None if g is None else g.clamp(-0.1, 0.1) for g in grad_input)

# [04.2]
my_factors = {
    "pre-hook on fc2":      {"fc2.weight.grad": 0.5, "fc1.weight.grad": 0.5, "x.grad": 0.5},
    "backward hook on fc2": {"fc2.weight.grad": 1.0, "fc1.weight.grad": 0.5, "x.grad": 0.5},
}

# [04.3]
def block_grad_norms(model, x):
    from torchvision.models.resnet import BasicBlock
    norms = []

    def record(name):
        def hook(module, grad_input, grad_output):
            norms.append((name, grad_output[0].norm().item()))
        return hook

    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            if isinstance(module, BasicBlock):
                scope.add(module.register_full_backward_hook(record(name)))
        model(x).sum().backward()
    return norms
