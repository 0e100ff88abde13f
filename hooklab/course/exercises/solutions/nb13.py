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
    "13.3": ("两件事分开做。模块：给每个模块注册前向钩子，从它的输出的 `grad_fn` 出发沿 `next_functions` 走，把还没有主人的"
             "节点记到这个模块名下（已有主人的节点跳过但继续往下走），走到它的输入的节点（前向前置钩子里记下）就停（内层模块先结束、先认领；模型自己最后，名字是 `\"\"`）。节点：在认领到的每个节点上 "
             "`node.register_hook(fn)`，后置钩子 `fn(grad_inputs, grad_outputs)` 里的 `grad_inputs` 是它算出的梯度，第一个"
             "不有限的就是答案。反向结束后移除所有句柄。",
             "two jobs. The module: a forward hook on every module walks from its output's `grad_fn` through "
             "`next_functions` and books each Node that has no owner yet to this module (walking on through the Nodes "
             "that have one), stopping at the Nodes of its "
             "inputs (noted by a forward pre-hook); inner modules finish, and claim, first; the model itself last, "
             "named `\"\"`. The Node: `node.register_hook(fn)` on every Node "
             "booked; in the post-hook `fn(grad_inputs, grad_outputs)`, `grad_inputs` are the gradients it computed, "
             "and the first non-finite one is the answer. Remove every handle after backward."),
    "13.4": ("在前向钩子里拿到输出字典，对其中每个需要梯度的张量 `t` 注册 `t.register_hook(...)`，钩子把收到的梯度存进 "
             "`store[key]` 并返回 None（注意循环变量的延迟绑定：用默认参数 `key=key`）。返回前向钩子的句柄。",
             "in a forward hook, take the output dict and `register_hook` on each tensor in it that requires grad; the "
             "hook stores the gradient it receives in `store[key]` and returns None (mind late binding of the loop "
             "variable: a default argument `key=key`). Return the forward hook's handle."),
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

def first_nan_node(model, x):
    owner, inputs_of, handles, found = {}, {}, [], []

    def note_inputs(module, args):   # where this module's own Nodes end: at the Nodes of its inputs
        inputs_of[module] = {a.grad_fn for a in args if isinstance(a, torch.Tensor)}

    def claim(name):
        def hook(module, args, output):   # inner modules finish first: they claim their Nodes first
            todo, seen = [output.grad_fn], set()
            while todo:
                node = todo.pop()
                if node is None or node in seen or node in inputs_of[module]:
                    continue
                seen.add(node)
                owner.setdefault(node, name)   # a Node an inner module claimed stays its own
                todo.extend(n for n, _ in node.next_functions)
        return hook

    def check(node):
        def hook(grad_inputs, grad_outputs):
            if not found and any(g is not None and not torch.isfinite(g).all() for g in grad_inputs):
                found.append((node.name(), owner[node]))
        return hook

    try:
        for name, m in model.named_modules():
            handles += [m.register_forward_pre_hook(note_inputs), m.register_forward_hook(claim(name))]
        out = model(x)
        handles += [node.register_hook(check(node)) for node in owner]
        out.sum().backward()
    finally:
        for h in handles:
            h.remove()
    return found[0] if found else None

# [13.4]
def watch_output_grads(module, store):
    def forward_hook(module, args, output):
        for key, tensor in output.items():
            if tensor.requires_grad:
                tensor.register_hook(lambda grad, key=key: store.__setitem__(key, grad))  # returns None
    return module.register_forward_hook(forward_hook)
