"""Hints and reference solutions of notebook 13 (debugging with hooks)."""

HINTS = {
    "13.1": ("一个前向前置钩子给每个模块的调用计数，一个前向钩子检查输出（元组要逐个元素检查）："
             "`torch.isfinite(t).all()` 为 False 的第一次调用就是答案。名字用 `named_modules()` 建一个 "
             "`{模块: 名字}` 字典；钩子按调用顺序运行。最后别忘了 `remove()` 所有句柄。",
             "a forward pre-hook counts each module's calls, a forward hook checks the output (each element of "
             "a tuple): the first call whose `torch.isfinite(t).all()` is False is the answer. Build a "
             "`{module: name}` dict from `named_modules()`; hooks run in call order. `remove()` every handle "
             "at the end."),
    "13.2": ("钩子的第一个参数就是模块本身：用它，而不要在闭包里引用 `model`（或一个持有 `model` 的对象的绑定方法）。"
             "计数放在一个普通字典里，键用模块名。",
             "the hook's first argument is the module itself: use it instead of referring to `model` from the "
             "closure (or to a bound method of an object that holds `model`). Keep the counts in a plain dict "
             "keyed by module name."),
    "13.3": ("从 `out.grad_fn` 出发，沿 `node.next_functions` 走遍计算图，在每个节点上 `node.register_hook(fn)`："
             "后置钩子 `fn(grad_inputs, grad_outputs)` 在节点算完之后运行，`grad_inputs` 是它算出的梯度。"
             "第一个算出非有限梯度的节点就是答案；反向结束后移除句柄。",
             "start from `out.grad_fn`, walk the graph through `node.next_functions`, and `node.register_hook(fn)` "
             "on every Node: the post-hook `fn(grad_inputs, grad_outputs)` runs after the Node has computed, and "
             "`grad_inputs` are the gradients it computed. The first Node that computed a non-finite one is the "
             "answer; remove the handles after backward."),
}

# [13.1]
import torch

def first_nonfinite(model, x):
    names = {m: n for n, m in model.named_modules() if n}
    calls, found = {}, []

    def count(module, args):
        if module in names:
            calls[names[module]] = calls.get(names[module], 0) + 1

    def look(module, args, output):
        outputs = output if isinstance(output, tuple) else (output,)
        if module in names and not found and not all(torch.isfinite(t).all() for t in outputs):
            found.append((names[module], calls[names[module]]))

    handles = [h for m in model.modules() for h in (m.register_forward_pre_hook(count), m.register_forward_hook(look))]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else None

# [13.2]
def count_calls(model):
    counts = {}
    names = {id(m): n for n, m in model.named_modules() if n}

    def hook(module, args, output):  # `module` is passed in: the closure never refers to the model
        counts[names[id(module)]] = counts.get(names[id(module)], 0) + 1

    for name, m in model.named_modules():
        if name:
            m.register_forward_hook(hook)
    return counts

# [13.3]
import torch

def first_nan_node(model, x):
    out = model(x)
    found, handles, todo, seen = [], [], [out.grad_fn], set()

    def check(node):
        def hook(grad_inputs, grad_outputs):
            if not found and any(g is not None and not torch.isfinite(g).all() for g in grad_inputs):
                found.append(node.name())
        return hook

    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        handles.append(node.register_hook(check(node)))
        todo.extend(n for n, _ in node.next_functions)
    try:
        out.sum().backward()
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else None
