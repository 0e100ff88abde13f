"""What to do instead of each surprising profile fact, made runnable: the hand-written part of the profile programs
(:mod:`tools.profiles.programs`). Each entry is ``"<slug>:<fact>": {"en", "zh", "code"}``: the one-line advice in
both languages and a few lines run after the profile module's definitions they use (``build``, ``inputs``,
``apply``, ...), printing counts and booleans only."""
from __future__ import annotations

FIXES: dict[str, dict[str, str]] = {
    "prune:probe.survives.deepcopy": {
        "en": "make `weight` a plain parameter again with `prune.remove` (the pruning stays), then deep-copy",
        "zh": "先用 `prune.remove` 把 `weight` 变回普通参数（剪枝结果保留），再深拷贝",
        "code": """\
import copy

from torch.nn.utils import prune

torch.manual_seed(0)
model = apply(build())
prune.remove(model[0], "weight")
twin = copy.deepcopy(model)
print("copied; zeros kept in the copy:", int((twin[0].weight == 0).sum()), "of", twin[0].weight.numel())
print("forward pre-hooks left:", len(twin[0]._forward_pre_hooks))
"""},
    "prune:facts.tensor_hooks": {
        "en": "put the gradient hook on `weight_orig`, the parameter that pruning keeps and that receives the gradient",
        "zh": "把梯度钩子挂在 `weight_orig` 上：剪枝之后真正保留、接收梯度的参数是它",
        "code": """\
torch.manual_seed(0)
model = apply(build())
fired = []
model[0].weight_orig.register_hook(lambda g: fired.append(int((g == 0).sum())))
model(*inputs()).sum().backward()
print("hook on weight_orig fired:", len(fired), "time(s); zero entries in the gradient it saw:", fired[0])
"""},
    "ddp:probe.survives.loads_fresh_state_dict": {
        "en": "load (and save) through the wrapped model: `ddp.module.load_state_dict(...)`",
        "zh": "通过被包装的模型加载（和保存）：`ddp.module.load_state_dict(...)`",
        "code": """\
torch.manual_seed(0)
ddp = apply(build())
result = ddp.module.load_state_dict(build().state_dict())
print(len(result.missing_keys), "missing,", len(result.unexpected_keys), "unexpected")
print("keys of ddp.module.state_dict() start with 'module.':",
      any(k.startswith("module.") for k in ddp.module.state_dict()))
"""},
    "torchao:probe.survives.loads_fresh_state_dict": {
        "en": "load the full-precision state dict into a full-precision model, then quantize that model",
        "zh": "先把全精度状态字典加载进全精度模型，再量化这个模型",
        "code": """\
torch.manual_seed(0)
saved = build().state_dict()
model = build()
result = model.load_state_dict(saved)
model = apply(model)
print(len(result.missing_keys), "missing,", len(result.unexpected_keys), "unexpected; then quantized:",
      type(model[0].weight).__name__)
print("output shape:", tuple(model(*inputs()).shape))
"""},
    "parametrize:facts.pickle": {
        "en": "save the state dict (`torch.save(model.state_dict())`), not the module, and load it into a model "
              "parametrized the same way",
        "zh": "保存状态字典（`torch.save(model.state_dict())`）而不是模块本身，再加载进以同样方式参数化的模型",
        "code": """\
import io

torch.manual_seed(0)
model = apply(build())
buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
again = apply(build())
result = again.load_state_dict(torch.load(buffer))
print(len(result.missing_keys), "missing,", len(result.unexpected_keys), "unexpected")
print("same output:", torch.allclose(model(*inputs()), again(*inputs())))
"""},
    "accelerate:probe.forward_replaced": {
        "en": "look for the replaced `forward` (and `_hf_hook`), or take accelerate off with "
              "`remove_hook_from_module(model, recurse=True)`",
        "zh": "查看实例上被替换的 `forward`（以及 `_hf_hook`），或用 `remove_hook_from_module(model, recurse=True)` "
              "把 accelerate 拿掉",
        "code": """\
from accelerate.hooks import remove_hook_from_module

torch.manual_seed(0)
model = apply(build())
print("modules with _hf_hook:", sum(hasattr(m, "_hf_hook") for m in model.modules()))
remove_hook_from_module(model, recurse=True)
own = sum(getattr(m.forward, "__func__", None) is type(m).forward for m in model.modules())
print("after remove_hook_from_module: the class's own forward runs on", own, "of",
      len(list(model.modules())), "modules; _hf_hook on", sum(hasattr(m, "_hf_hook") for m in model.modules()))
"""},
    "accelerate:facts.your_hooks_see_weight_on": {
        "en": "read accelerate's copy of the weight, `module._hf_hook.weights_map['weight']`, from your hook",
        "zh": "在你的钩子里读 accelerate 保存的那份权重：`module._hf_hook.weights_map['weight']`",
        "code": """\
torch.manual_seed(0)
model = apply(build())
seen = {}


def look(module, args):
    seen["module.weight"] = module.weight.device.type
    seen["weights_map"] = module._hf_hook.weights_map["weight"].device.type


model[0].register_forward_pre_hook(look)
model(*inputs())
print(seen)
"""},
    "diffusers:probe.survives.deepcopy": {
        "en": "deep-copy the model before applying group offloading, then offload each copy",
        "zh": "在应用分组卸载之前深拷贝模型，再分别对每份拷贝做卸载",
        "code": """\
import copy

torch.manual_seed(0)
model = build()
twin = copy.deepcopy(model)
apply(model)
apply(twin)
print("both offloaded:", hasattr(model.conv_in, "_diffusers_hook") and hasattr(twin.conv_in, "_diffusers_hook"))
with torch.no_grad():
    print("same output:", torch.allclose(model(*inputs()).sample, twin(*inputs()).sample))
"""},
    "fsdp2:facts.deepcopy": {
        "en": "make the copy (for EMA or SWA) before `fully_shard`, or rebuild it from a state dict",
        "zh": "在 `fully_shard` 之前做拷贝（给 EMA 或 SWA 用），或者从状态字典重建",
        "code": """\
import copy

torch.manual_seed(0)
model = build()
ema = copy.deepcopy(model)
model = apply(model)
print("the copy made before sharding holds a", type(ema[0].weight).__name__)
print("the sharded model holds a", type(model[0].weight).__name__)
"""},
    "swa_utils:facts.copied_hooks": {
        "en": "remove the hook from the averaged copy too: register it through `swa_model.module` and keep that handle",
        "zh": "平均模型里的那份钩子也要删：通过 `swa_model.module` 注册，并保留这个句柄",
        "code": """\
torch.manual_seed(0)
model = build()
swa = apply(model)
calls = []
handle = swa.module[0].register_forward_hook(lambda m, a, o: calls.append(1))
swa.eval()
swa(*inputs())
handle.remove()
swa(*inputs())
print("fired", len(calls), "time(s): once before handle.remove(), none after")
"""},
    "torchinfo:facts.submodule_eval_kept": {
        "en": "note each module's mode before `summary` and put it back after",
        "zh": "调用 `summary` 之前记下每个模块的模式，调用之后逐个恢复",
        "code": """\
torch.manual_seed(0)
model = build()
model.train()
model[1].eval()
modes = {name: m.training for name, m in model.named_modules()}
apply(model)
print("Dropout in training mode after summary:", model[1].training)
for name, m in model.named_modules():
    m.training = modes[name]
print("after putting the modes back:", model[1].training)
"""},
    "torchinfo:facts.model_alive_after_summary": {
        "en": "clear torchinfo's module-level cache, `torchinfo.torchinfo._cached_forward_pass`, after `summary`",
        "zh": "`summary` 之后清空 torchinfo 的模块级缓存 `torchinfo.torchinfo._cached_forward_pass`",
        "code": """\
import gc
import weakref

import torchinfo

torch.manual_seed(0)
model = build()
apply(model)
ref = weakref.ref(model)
del model
gc.collect()
print("alive before clearing the cache:", ref() is not None)
torchinfo.torchinfo._cached_forward_pass.clear()
gc.collect()
print("alive after clearing it:", ref() is not None)
"""},
    "torch_ao_quantization:facts.prepare_returns_a_copy": {
        "en": "prepare in place (`prepare(model, inplace=True)`) so that your hooks stay on the model that calibrates",
        "zh": "原地准备（`prepare(model, inplace=True)`），让你的钩子留在做校准的那个模型上",
        "code": """\
from torch.ao.quantization import get_default_qconfig, prepare

torch.manual_seed(0)
model = build()
model.qconfig = get_default_qconfig(torch.backends.quantized.engine)
prepared = prepare(model, inplace=True)
calls = []
model[1].register_forward_hook(lambda m, a, o: calls.append(1))
prepared(*inputs())
print("the same model:", prepared is model, "; a hook added afterwards fired:", len(calls), "time(s)")
"""},
    "peft:facts.hook_on_replaced_linear": {
        "en": "hook the `lora.Linear` that now stands in the model (its output includes the adapter), or merge first "
              "with `merge_and_unload()`",
        "zh": "把钩子挂在模型里现在的 `lora.Linear` 上（它的输出包含适配器），或先用 `merge_and_unload()` 合并",
        "code": """\
torch.manual_seed(0)
model = build()
plain = model.model.layers[0].self_attn.q_proj
peft_model = apply(model)
lora = peft_model.base_model.model.model.layers[0].self_attn.q_proj
seen = {}
plain.register_forward_hook(lambda m, a, o: seen.__setitem__("base_layer", o.detach()))
lora.register_forward_hook(lambda m, a, o: seen.__setitem__("lora.Linear", o.detach()))
peft_model(*inputs())
print("the hook on lora.Linear sees the adapter's part:",
      not torch.allclose(seen["base_layer"], seen["lora.Linear"]))
"""},
    "peft:facts.modules_to_save_hook_after_handle_remove": {
        "en": "remove the hook from the copy that runs: its `_forward_hooks`, found through the wrapper's "
              "`modules_to_save`",
        "zh": "从真正运行的拷贝上删钩子：经由包装器的 `modules_to_save` 找到拷贝，清掉它的 `_forward_hooks`",
        "code": """\
torch.manual_seed(0)
model = build()
calls = []
handle = model.lm_head.register_forward_hook(lambda m, a, o: calls.append(1))
peft_model = apply(model, modules_to_save=["lm_head"])
handle.remove()
wrapper = peft_model.base_model.model.lm_head
for copy in wrapper.modules_to_save.values():
    copy._forward_hooks.pop(handle.id, None)
peft_model(*inputs())
print("fired after removing it from the copy:", len(calls))
"""},
    "transformers:facts.embedding_hooks_left_after_enable_twice_then_disable": {
        "en": "call `enable_input_require_grads()` once (check `_require_grads_hook` first), so that "
              "`disable_input_require_grads()` removes it",
        "zh": "只调用一次 `enable_input_require_grads()`（先看有没有 `_require_grads_hook`），"
              "这样 `disable_input_require_grads()` 才能把它删掉",
        "code": """\
torch.manual_seed(0)
model = build()
for _ in range(2):
    if not hasattr(model, "_require_grads_hook"):
        model.enable_input_require_grads()
embed = model.get_input_embeddings()
print("hooks on the embeddings:", len(embed._forward_hooks))
model.disable_input_require_grads()
print("after disable_input_require_grads:", len(embed._forward_hooks))
"""},
}
