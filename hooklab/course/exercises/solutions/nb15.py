"""Hints and reference solutions of notebook 15 (hooks in libraries)."""

HINTS = {
    "15.1": ("用一个全局模块钩子：`torch.nn.modules.module.register_module_forward_pre_hook(fn)` 对每次模块调用在调用开始时运行，"
             "而且不会像局部钩子那样关掉 `nn.TransformerEncoderLayer` 的快速路径。先建一个 `{id(module): name}` 的字典，"
             "只记下在字典里的模块（副本不在），在 `finally` 里 `remove()`。",
             "use a global module hook: `torch.nn.modules.module.register_module_forward_pre_hook(fn)` runs at the start "
             "of every module call, and unlike a local hook it does not turn `nn.TransformerEncoderLayer`'s fast path "
             "off. Build a dict `{id(module): name}` first, record only modules in it (copies are not), and `remove()` "
             "in a `finally`."),
    "15.2": ("先把每个观察器的次数设为 0：名字的最后一段以 `activation_post_process` 开头的模块（eager 模式下是 "
             "`a.activation_post_process`，图模块里是 `activation_post_process_0`……）。再给每个观察器注册一个前向钩子"
             "把次数加 1（图模块的代码像调用模块一样调用观察器，钩子照样触发）；调用 `calibrate()`，在 `finally` 里移除句柄。",
             "start every observer at 0: the modules whose name's last part starts with `activation_post_process` "
             "(`a.activation_post_process` in eager mode, `activation_post_process_0`, ... in a graph module). "
             "Register a forward hook on each that adds 1 (a graph module's code calls its observers as modules, so "
             "the hooks fire); call `calibrate()` and remove the handles in a `finally`."),
    "15.3": ("`layer = model.get_submodule(name)`；适配器的名字是 `layer.active_adapters[0]`（不一定叫 `default`）。"
             "在 `layer.lora_B[adapter]` 上挂一个前向钩子记下它的输出，运行 `model(x)`，移除钩子，再乘 `layer.scaling[adapter]`。",
             "`layer = model.get_submodule(name)`; the adapter's name is `layer.active_adapters[0]` (not always "
             "`default`). Hook `layer.lora_B[adapter]` to record its output, run `model(x)`, remove the hook, then "
             "multiply by `layer.scaling[adapter]`."),
}

# [15.1]
import torch


def modules_that_ran(model, run):
    names = {id(module): name for name, module in model.named_modules()}
    calls = []

    def record(module, args):
        if id(module) in names:          # a copy's modules are other objects
            calls.append(names[id(module)])

    handle = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        run()
    finally:
        handle.remove()
    return calls

# [15.2]
def observer_calls(prepared, calibrate):
    counts = {name: 0 for name, _ in prepared.named_modules()
              if name.rsplit(".", 1)[-1].startswith("activation_post_process")}
    handles = []
    for name in counts:
        def count(module, args, output, name=name):
            counts[name] += 1
        handles.append(prepared.get_submodule(name).register_forward_hook(count))
    try:
        calibrate()
    finally:
        for handle in handles:
            handle.remove()
    return counts

# [15.3]
def adapter_output(model, name, x):
    layer = model.get_submodule(name)
    adapter = layer.active_adapters[0]
    seen = {}
    handle = layer.lora_B[adapter].register_forward_hook(lambda module, args, output: seen.__setitem__("B", output))
    try:
        model(x)
    finally:
        handle.remove()
    return layer.scaling[adapter] * seen["B"].detach()
