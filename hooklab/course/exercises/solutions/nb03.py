"""Hints and reference solutions of notebook 03 (module forward hooks)."""
import hooklab

HINTS = {
    "03.1": ("在函数里定义一个前向前置钩子 `def clamp(module, args): return args[0].clamp(low, high)`（返回新张量，"
             "不要用原地的 `clamp_`），用 `module.register_forward_pre_hook(clamp)` 注册，并把它返回的句柄 `return` 出去；"
             "不要放进 `with HookScope()`，否则函数返回时钩子已被移除。",
             "inside the function define a pre-hook `def clamp(module, args): return args[0].clamp(low, high)` "
             "(a new tensor, not the in-place `clamp_`), register it with `module.register_forward_pre_hook(clamp)` "
             "and `return` the handle that call gives you; no `with HookScope()` here, or the hook is gone by the "
             "time the function returns."),
    "03.2": ("`c` 按位置传入时在 `args[2]`（`len(args) > 2`），否则在 `kwargs['c']`。两种情况都返回 `(新的 args, 新的 kwargs)`，"
             "用 `(*args[:2], args[2] * 2)` 或 `{**kwargs, 'c': kwargs['c'] * 2}` 构造新值，不要原地修改（`*=`）。",
             "passed positionally, `c` is `args[2]` (`len(args) > 2`); otherwise it is `kwargs['c']`. In both cases "
             "return `(new_args, new_kwargs)`, built as `(*args[:2], args[2] * 2)` or `{**kwargs, 'c': kwargs['c'] * 2}`; "
             "do not change tensors in place (`*=`)."),
    "03.3": ("在 `with hooklab.HookScope() as scope:` 里用 `torch.nn.modules.module.register_module_forward_hook` 注册"
             "一个全局钩子，每次调用把 `type(module).__name__` 计数一次，然后运行 `model(x)`。同一个模块被调用两次就要数两次，"
             "所以不能只数 `model.modules()`。",
             "inside `with hooklab.HookScope() as scope:` register one global hook with "
             "`torch.nn.modules.module.register_module_forward_hook` that counts `type(module).__name__` on every call, "
             "then run `model(x)`. A module called twice counts twice, so counting `model.modules()` is not enough."),
}

# [03.1]
def clamp_inputs(module, low, high):
    def clamp(module, args):
        return args[0].clamp(low, high)  # one tensor: PyTorch wraps it into (tensor,)
    return module.register_forward_pre_hook(clamp)

# [03.2]
def double_c(module, args, kwargs):
    if len(args) > 2:  # c was passed positionally
        return (*args[:2], args[2] * 2), kwargs
    return args, {**kwargs, "c": kwargs["c"] * 2}

# [03.3]
def count_calls(model, x):
    import torch.nn.modules.module as module_globals
    counts = {}

    def count(module, args, output):
        name = type(module).__name__
        counts[name] = counts.get(name, 0) + 1

    with hooklab.HookScope() as scope:
        scope.add(module_globals.register_module_forward_hook(count))
        model(x)
    return counts
