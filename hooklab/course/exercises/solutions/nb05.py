"""Hints and reference solutions of notebook 05 (applications)."""
import torch

import hooklab

HINTS = {
    "05.1": ("对 `model.named_children()` 里的每个子模块注册 `register_forward_pre_hook`；前置钩子的签名是 "
             "`hook(module, args)`，输入形状是 `tuple(args[0].shape)`。名字用默认参数 `name=name` 在注册时绑定，"
             "句柄交给 `hooklab.HookScope`，然后跑一次 `model(x)`。",
             "register a `register_forward_pre_hook` on each child in `model.named_children()`; a pre-hook "
             "is called as `hook(module, args)` and the input shape is `tuple(args[0].shape)`. Bind the name "
             "when registering (default argument `name=name`), give the handles to a `hooklab.HookScope`, "
             "then run `model(x)` once."),
    "05.2": ("`register_post_accumulate_grad_hook` 在梯度累加进 `.grad` 之后触发，看到的正是优化器将看到的梯度；"
             "`hooklab.GradientMonitor` 替你注册这些钩子，`norms()` 把每层的权重和偏置合成一个范数。"
             "注意：钩子按反向的顺序（从输出到输入）触发，而答案要从输入到输出。",
             "`register_post_accumulate_grad_hook` fires after the gradient was accumulated into `.grad`: "
             "it sees what the optimizer will see. `hooklab.GradientMonitor` registers those hooks for you, "
             "and its `norms()` combines each layer's weight and bias into one norm. Mind the order: hooks "
             "fire in backward order (output to input); the answer goes from input to output."),
    "05.3": ("照第 6 节做：`with hooklab.capture(model, layer, grads=True) as store:` 里跑前向，"
             "对**每张图自己的目标类别**的得分求和再反向：`scores.gather(1, target[:, None]).sum().backward()`；"
             "然后 `weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)`，"
             "热图是 `relu((weights * store[layer]).sum(dim=1))`，不放大。",
             "as in section 6: run the forward inside `with hooklab.capture(model, layer, grads=True) as store:` "
             "and backpropagate the sum of *each image's own target* score: "
             "`scores.gather(1, target[:, None]).sum().backward()`; then "
             "`weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)` and the map is "
             "`relu((weights * store[layer]).sum(dim=1))`, not upsampled."),
}

# [05.1]
def input_shapes(model, x):
    rows = []
    with hooklab.HookScope() as scope:
        for name, child in model.named_children():
            def record(module, args, name=name):
                rows.append((name, tuple(args[0].shape)))
            scope.add(child.register_forward_pre_hook(record))
        model(x)
    return rows

# [05.2]
def grad_norms(model, x, y):
    with hooklab.GradientMonitor(model) as monitor:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    return [per_step[0] for per_step in monitor.norms().values()]

# [05.3]
def grad_cam(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        scores = model(x)
        scores.gather(1, target[:, None]).sum().backward()
    model.zero_grad(set_to_none=True)
    weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)
    return torch.relu((weights * store[layer]).sum(dim=1))
