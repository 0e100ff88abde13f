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
    "accelerate:facts.dispatch_model_on_one_device": {
        "en": "pass `force_hooks=True` to `dispatch_model` when you need its device hooks with every module on one "
              "device",
        "zh": "所有模块都在同一设备上、又需要 accelerate 的设备钩子时，给 `dispatch_model` 传 `force_hooks=True`",
        "code": """\
from accelerate import dispatch_model

torch.manual_seed(0)
reference = build()
plain, forced = build(), build()
plain.load_state_dict(reference.state_dict())
forced.load_state_dict(reference.state_dict())
plain = dispatch_model(plain, device_map={"": "cpu"})
forced = dispatch_model(forced, device_map={"": "cpu"}, force_hooks=True)
for label, model in (("default", plain), ("force_hooks=True", forced)):
    print(label, "-> _hf_hook on", sum(hasattr(m, "_hf_hook") for m in model.modules()), "module(s)")
print("same output:", torch.allclose(plain(*inputs()), forced(*inputs())))
"""},
    "bitsandbytes:facts.quantized_by_to": {
        "en": "call `.to(device)` right after swapping in the layers, before you register hooks or read weights",
        "zh": "换上量化层之后立刻调用 `.to(device)`，然后再注册钩子、读取权重",
        "code": """\
import bitsandbytes as bnb

torch.manual_seed(0)
model = _swap(build(), lambda i, o, b: bnb.nn.Linear8bitLt(i, o, b, has_fp16_weights=False))
print("weight dtype before .to():", str(model[0].weight.dtype))
model.to("cpu")
seen = []
model[0].register_forward_pre_hook(lambda m, args: seen.append(str(m.weight.dtype)))
model(*inputs())
print("weight dtype a hook registered after .to() sees:", seen[0])
"""},
    "bitsandbytes:facts.weight_seen_by_a_hook": {
        "en": "dequantize in the hook: `bnb.functional.dequantize_4bit(m.weight, m.weight.quant_state)` gives the "
              "`[out, in]` matrix",
        "zh": "在钩子里先反量化：`bnb.functional.dequantize_4bit(m.weight, m.weight.quant_state)` 得到 "
              "`[out, in]` 形状的矩阵",
        "code": """\
import bitsandbytes as bnb

torch.manual_seed(0)
reference = nn.Linear(8, 4)
layer = bnb.nn.Linear4bit(8, 4, compute_dtype=torch.float32)
layer.load_state_dict(reference.state_dict())
layer = layer.to("cpu").train()
seen = {}


def look(m, args):
    seen["packed"] = (str(m.weight.dtype), tuple(m.weight.shape))
    full = bnb.functional.dequantize_4bit(m.weight.data, m.weight.quant_state)
    seen["dequantized"] = (str(full.dtype), tuple(full.shape))
    seen["close to the float weight"] = torch.allclose(full, reference.weight, atol=0.1)


layer.register_forward_pre_hook(look)
layer(torch.randn(2, 8))
print(seen)
"""},
    "bitsandbytes:facts.float_state_dict_into_quantized": {
        "en": "load the float state dict into the float layers, then swap in the quantized layers and call `.to()`",
        "zh": "先把浮点状态字典加载进浮点层，再换上量化层并调用 `.to()` 完成量化",
        "code": """\
import bitsandbytes as bnb

torch.manual_seed(1)
floating = build()
model = build()
result = model.load_state_dict(floating.state_dict())
model = apply(model)
x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
print(len(result.missing_keys), "missing,", len(result.unexpected_keys), "unexpected; weight dtype:",
      str(model[0].weight.dtype))
print("output matches the float model:", torch.allclose(model(x), floating(x), atol=0.1))
"""},
    "captum:facts.lig_user_forward_calls": {
        "en": "skip captum's extra passes in your hook: act only when `torch.is_grad_enabled()` (or remove the hook "
              "before `attribute`)",
        "zh": "在钩子里跳过 captum 额外的前向：只在 `torch.is_grad_enabled()` 为真时才处理（或在 `attribute` 之前删掉钩子）",
        "code": """\
from captum.attr import LayerIntegratedGradients

torch.manual_seed(0)
model = build()
every, guarded = [], []
model[0].register_forward_hook(lambda m, a, o: every.append(1))
model[0].register_forward_hook(lambda m, a, o: guarded.append(1) if torch.is_grad_enabled() else None)
LayerIntegratedGradients(model, model[0]).attribute(*inputs(), target=0, n_steps=4)
print("plain hook ran", len(every), "times; the guarded one acted", len(guarded), "time(s)")
"""},
    "captum:facts.lig_next_layer_gets_what_user_saw": {
        "en": "log what the model ran on from the next layer's forward pre-hook: captum replaces the layer's output "
              "after your forward hook",
        "zh": "要记录模型实际算的是什么，就在下一层的前向前置钩子里记录：captum 是在你的前向钩子之后替换该层输出的",
        "code": """\
from captum.attr import LayerIntegratedGradients

torch.manual_seed(0)
model = build()
log = {}
model[0].register_forward_hook(lambda m, a, o: log.__setitem__("forward hook on 0", o.detach()))
model[1].register_forward_pre_hook(lambda m, a: log.__setitem__("pre-hook on 1", a[0].detach()))
model[1].register_forward_hook(lambda m, a, o: log.__setitem__("ReLU output", o.detach()))
LayerIntegratedGradients(model, model[0]).attribute(*inputs(), target=0, n_steps=4)
for name in ("forward hook on 0", "pre-hook on 1"):
    print(name, "logged what the ReLU ran on:", torch.equal(torch.relu(log[name]), log["ReLU output"]))
"""},
    "checkpoint_wrapper:facts.your_hook_calls_per_step": {
        "en": "register the hooks on the `CheckpointWrapper` itself: the recomputation calls only the inner module",
        "zh": "把钩子注册在 `CheckpointWrapper` 本身上：重计算只调用里面的模块，不经过包装器",
        "code": """\
from collections import Counter

from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl

for impl in (CheckpointImpl.NO_REENTRANT, CheckpointImpl.REENTRANT):
    torch.manual_seed(0)
    model = apply(build(), checkpoint_impl=impl)
    calls = Counter()
    model[2]._checkpoint_wrapped_module.register_forward_pre_hook(lambda *a: calls.update(["inner forward_pre"]))
    model[2].register_forward_pre_hook(lambda *a: calls.update(["wrapper forward_pre"]))
    model[2].register_forward_hook(lambda *a: calls.update(["wrapper forward"]))
    model(inputs()[0].requires_grad_()).sum().backward()
    print(impl.name, dict(sorted(calls.items())))
"""},
    "checkpoint_wrapper:facts.names": {
        "en": "strip the wrapper's prefix from the names before matching them: `name.replace(_CHECKPOINT_PREFIX, "
              "\"\")`",
        "zh": "按名字匹配之前先去掉包装器加的前缀：`name.replace(_CHECKPOINT_PREFIX, \"\")`",
        "code": """\
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import _CHECKPOINT_PREFIX

torch.manual_seed(0)
model = apply(build())
frozen = {"0.weight", "0.bias"}
raw = [n for n, _ in model.named_parameters() if n in frozen]
clean = [n.replace(_CHECKPOINT_PREFIX, "") for n, _ in model.named_parameters()]
print("rule matches with the raw names:", len(raw), "; with the prefix stripped:", sum(n in frozen for n in clean))
print("stripped names equal the state_dict keys:", clean == list(model.state_dict()))
"""},
    "ddp:facts.inner_module_backward_comm_hook_calls": {
        "en": "always call the wrapper, `ddp(x)`; to skip the sync on purpose, run forward and backward under "
              "`with ddp.no_sync():`",
        "zh": "始终调用包装器 `ddp(x)`；确实要跳过同步时，把前向和反向放在 `with ddp.no_sync():` 里",
        "code": """\
torch.manual_seed(0)
log = []
ddp = apply(build())
ddp.register_comm_hook(None, _doubling(log))
ddp.module(*inputs()).sum().backward()
print("comm hook calls after ddp.module(x) (no sync, no word):", len(log))
with ddp.no_sync():
    ddp(*inputs()).sum().backward()
print("after ddp(x) under no_sync (skipped on purpose):", len(log))
ddp(*inputs()).sum().backward()
print("after ddp(x):", len(log))
"""},
    "ddp:facts.post_accumulate_grad_hook_sees_synced_gradient": {
        "en": "act on the synced gradient after `backward()` returns, or in a callback chained on the comm hook's "
              "future (`future.then(...)`)",
        "zh": "在 `backward()` 返回之后再处理同步后的梯度，或者在通信钩子的 future 上用 `future.then(...)` 串一个回调",
        "code": """\
torch.manual_seed(0)
model = build()
early, synced = {}, {}
model[0].weight.register_post_accumulate_grad_hook(lambda p: early.__setitem__("0.weight", p.grad.clone()))
ddp = apply(model)
doubling = _doubling([])  # stands in for the all-reduce: the synced gradient is twice the local one


def comm_hook(state, bucket):
    names = {id(p): n for n, p in model.named_parameters()}
    sizes = [p.numel() for p in bucket.parameters()]

    def after(future):
        for p, piece in zip(bucket.parameters(), future.value().split(sizes)):
            synced[names[id(p)]] = piece.clone().view_as(p)
        return future.value()
    return doubling(state, bucket).then(after)


ddp.register_comm_hook(None, comm_hook)
ddp(*inputs()).sum().backward()
print("post-accumulate-grad hook saw the final .grad:", torch.equal(early["0.weight"], model[0].weight.grad))
print("future.then callback saw the final .grad:", torch.equal(synced["0.weight"], model[0].weight.grad))
"""},
    "deepspeed:facts.functional_linear": {
        "en": "set `\"memory_efficient_linear\": false` in `zero_optimization`: deepspeed then leaves `F.linear` as it is",
        "zh": "在 `zero_optimization` 里设 `\"memory_efficient_linear\": false`，deepspeed 就不再替换 `F.linear`",
        "code": """\
import contextlib
import io

import deepspeed

_distributed()
torch.manual_seed(0)
config = {**CONFIG, "zero_optimization": {**CONFIG["zero_optimization"], "memory_efficient_linear": False}}
before = torch.nn.functional.linear
model = build()
with contextlib.redirect_stdout(io.StringIO()):  # deepspeed reports the operators it builds
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.0),
                                      config=config)
print("F.linear after initialize:", torch.nn.functional.linear.__qualname__,
      "; the same function as before:", torch.nn.functional.linear is before)
engine.backward(engine(*inputs()).pow(2).mean())
print("still ZeRO-3: outside the forward the weight has", model[0].weight.numel(), "elements")
"""},
    "deepspeed:facts.grad_after_backward": {
        "en": "read the full gradient with `deepspeed.utils.safe_get_full_grad(param)` after `engine.backward`, "
              "before `engine.step()`",
        "zh": "在 `engine.backward` 之后、`engine.step()` 之前，用 `deepspeed.utils.safe_get_full_grad(param)` "
              "读完整梯度",
        "code": """\
import contextlib
import io

import deepspeed
from deepspeed.utils import safe_get_full_grad

_distributed()
torch.manual_seed(0)
model = build()
seen = {}
model[0].weight.register_hook(lambda g: seen.__setitem__("tensor hook", g.clone()))
with contextlib.redirect_stdout(io.StringIO()):  # deepspeed reports the operators it builds
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                                      config=CONFIG)
engine.backward(engine(*inputs()).pow(2).mean())
full = safe_get_full_grad(model[0].weight)
print("param.grad is None:", model[0].weight.grad is None)
print("safe_get_full_grad:", tuple(full.shape), "; equal to what the tensor hook saw:",
      torch.allclose(full, seen["tensor hook"]))
"""},
    "deepspeed:facts.weight_numel": {
        "en": "read a full parameter between steps inside `with deepspeed.zero.GatheredParameters(params):`",
        "zh": "两步之间要读完整参数，就放在 `with deepspeed.zero.GatheredParameters(params):` 里读",
        "code": """\
import contextlib
import io

import deepspeed

torch.manual_seed(0)
with contextlib.redirect_stdout(io.StringIO()):  # deepspeed reports the operators it builds
    engine = apply(build())
layer = engine.module[0]
engine.backward(engine(*inputs()).pow(2).mean())
engine.step()
print("between steps:", layer.weight.numel(), "elements")
with deepspeed.zero.GatheredParameters([layer.weight]):
    print("inside GatheredParameters:", layer.weight.numel(), "elements, shape", tuple(layer.weight.shape))
print("after it:", layer.weight.numel(), "elements")
"""},
    "diffusers:facts.layerwise_casting_weight_dtype_seen_by_user_hooks": {
        "en": "read the weight in a diffusers `ModelHook` registered before `apply_layerwise_casting`: its "
              "`pre_forward` runs after the cast",
        "zh": "在 `apply_layerwise_casting` 之前注册一个 diffusers 的 `ModelHook` 来读权重：它的 `pre_forward` "
              "在类型转换之后运行",
        "code": """\
from diffusers.hooks import HookRegistry, ModelHook, apply_layerwise_casting

torch.manual_seed(0)
model = build()
seen = {}


class Look(ModelHook):
    def pre_forward(self, module, *args, **kwargs):
        seen["ModelHook pre_forward"] = str(module.weight.dtype)
        return args, kwargs


HookRegistry.check_if_exists_or_initialize(model.conv_in).register_hook(Look(), "look")
apply_layerwise_casting(model, storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.float32)
model.conv_in.register_forward_pre_hook(lambda m, args: seen.__setitem__("forward pre-hook", str(m.weight.dtype)))
model(*inputs())
print(seen)
"""},
    "diffusers:facts.registry_order": {
        "en": "register the `ModelHook` that must run its `pre_forward` first last: the newest hook wraps the others",
        "zh": "需要最先运行 `pre_forward` 的 `ModelHook` 要最后注册：最新注册的钩子包在其他钩子外面",
        "code": """\
from diffusers.hooks import HookRegistry, ModelHook

log = []


class Logged(ModelHook):
    def __init__(self, name):
        super().__init__()
        self.name = name

    def pre_forward(self, module, *args, **kwargs):
        log.append(f"{self.name}: pre_forward")
        return args, kwargs


layer = nn.Linear(2, 2)
registry = HookRegistry.check_if_exists_or_initialize(layer)
registry.register_hook(Logged("meant to run second"), "second")
registry.register_hook(Logged("meant to run first"), "first")  # registered last: runs first
layer(torch.ones(1, 2))
print(log)
"""},
    "fastai:facts.grad_hooks_beside_full_backward_hook": {
        "en": "collect the gradients with your own `register_full_backward_hook` instead of `hook_outputs(..., "
              "grad=True)`: full backward hooks share a module",
        "zh": "不用 `hook_outputs(..., grad=True)`，改用自己的 `register_full_backward_hook` 收集梯度："
              "多个完整反向钩子可以挂在同一个模块上",
        "code": """\
from fastai.callback.hook import hook_outputs

torch.manual_seed(0)
model = build()
fired, grads = [], []
model[0].register_full_backward_hook(lambda m, gi, go: fired.append("the other full backward hook"))
try:
    hook_outputs([model[0]], grad=True)
except RuntimeError as exc:
    print("hook_outputs(grad=True):", type(exc).__name__)
model[0].register_full_backward_hook(lambda m, gi, go: grads.append(go[0].detach()))
model(*inputs()).sum().backward()
print("both fired:", fired == ["the other full backward hook"] and len(grads) == 1,
      "; gradient of the output:", tuple(grads[0].shape))
"""},
    "fastai:facts.activation_stats_hooks": {
        "en": "pass `every=1` (any `every`) to `ActivationStats`: it then hooks the training batches only, not "
              "validation",
        "zh": "给 `ActivationStats` 传 `every=1`（任意 `every` 均可）：这样它只在训练批次上挂钩子，验证批次不挂",
        "code": """\
import fastai.callback.progress  # noqa: F401 - adds Learner.no_bar
from fastai.callback.core import Callback
from fastai.callback.hook import ActivationStats
from fastai.data.core import DataLoaders
from fastai.learner import Learner
from fastai.optimizer import SGD
from torch.utils.data import DataLoader, TensorDataset

g = torch.Generator().manual_seed(1)
data = TensorDataset(torch.randn(4, 4, generator=g), torch.randn(4, 2, generator=g))
for every in (None, 1):
    seen = {"train": [], "valid": []}

    class Count(Callback):
        def after_pred(self):
            seen["train" if self.training else "valid"].append(len(self.learn.model[0]._forward_hooks))

    torch.manual_seed(0)
    dls = DataLoaders(DataLoader(data, batch_size=2), DataLoader(data, batch_size=4))
    learn = Learner(dls, build(), loss_func=nn.MSELoss(), opt_func=SGD, cbs=[Count(), ActivationStats(every=every)])
    with learn.no_bar(), learn.no_logging():
        learn.fit(1, 0.1)
    print(f"every={every}: forward hooks on the layer per batch", seen)
"""},
    "flop_counter:facts.flops_of_a_matmul_in_your_hook": {
        "en": "do the hook's extra work in a forward pre-hook, where it is counted for the hooked module (a forward "
              "hook's goes to the parent)",
        "zh": "把钩子里额外的计算放进前向前置钩子，它会记在被挂钩的模块上（前向钩子里的计算会记到父模块上）",
        "code": """\
from torch.utils.flop_counter import FlopCounterMode

torch.manual_seed(0)
square = torch.randn(16, 16)
for kind in ("forward", "forward_pre"):
    model = build()
    with FlopCounterMode(display=False) as counter:
        model(*inputs())
    before = _per_module(counter)
    getattr(model[0], f"register_{kind}_hook")(lambda *args: [square @ square] and None)
    with FlopCounterMode(display=False) as counter:
        model(*inputs())
    grew = sorted(k for k, v in _per_module(counter).items() if v != before.get(k))
    print(f"matmul in a {kind} hook counted for:", grew)
"""},
    "flop_counter:facts.backward_after_the_block": {
        "en": "run the backward inside the `with FlopCounterMode()` block, together with the forward",
        "zh": "把反向也放进 `with FlopCounterMode()` 块里，和前向一起运行",
        "code": """\
from torch.utils.flop_counter import FlopCounterMode

torch.manual_seed(0)
model = build()
with FlopCounterMode(display=False) as outside:
    out = model(*inputs())
out.sum().backward()
with FlopCounterMode(display=False) as inside:
    model(*inputs()).sum().backward()
print("FLOPs counted with the backward after the block:", _per_module(outside)["Global"],
      "; with the backward inside:", _per_module(inside)["Global"])
"""},
    "fsdp1:facts.param_hooks_fire": {
        "en": "hook the inner layer (`register_full_backward_hook`), or read `param.grad` after the backward with "
              "`use_orig_params=True`",
        "zh": "把钩子挂在里面的层上（`register_full_backward_hook`），或者用 `use_orig_params=True`，"
              "在反向结束后读 `param.grad`",
        "code": """\
torch.manual_seed(0)
model = build()
log = []
model[0].weight.register_hook(lambda g: log.append("tensor hook on weight"))
model[0].register_full_backward_hook(lambda m, gi, go: log.append("full backward hook on the layer"))
fsdp = apply(model, use_orig_params=True)
fsdp(*inputs()).sum().backward()
print(log)
grad = model[0].weight.grad
print("weight.grad after the backward:", None if grad is None else tuple(grad.shape))
"""},
    "fsdp1:facts.device_id_none_on_cpu": {
        "en": "pass `device_id=torch.device(\"cpu\")` on a machine without an accelerator, and check "
              "`sharding_strategy` (world size 1: `NO_SHARD`)",
        "zh": "在没有加速器的机器上传 `device_id=torch.device(\"cpu\")`，并检查 `sharding_strategy`"
              "（world size 为 1 时是 `NO_SHARD`）",
        "code": """\
torch.manual_seed(0)
try:
    apply(build(), device_id=None)
except RuntimeError as exc:
    print("device_id=None:", type(exc).__name__)
fsdp = apply(build(), device_id="cpu")  # torch.device("cpu")
print("device_id=cpu: output", tuple(fsdp(*inputs()).shape), "; sharding_strategy:", fsdp.sharding_strategy.name)
"""},
    "fsdp2:facts.param_hooks_fire": {
        "en": "register a post-accumulate-grad hook after `fully_shard` (FSDP calls it), not a `register_hook` "
              "on the parameter",
        "zh": "在 `fully_shard` 之后注册累加后钩子（由 FSDP 调用），不要在参数上用 `register_hook`",
        "code": """\
torch.manual_seed(0)
model = apply(build())
fired = {"register_hook": 0, "post_accumulate_grad": []}


def tensor_hook(grad):
    fired["register_hook"] += 1


model[0].weight.register_hook(tensor_hook)
model[0].weight.register_post_accumulate_grad_hook(
    lambda p: fired["post_accumulate_grad"].append(type(p.grad).__name__))
model(*inputs()).sum().backward()
print("register_hook fired:", fired["register_hook"], "time(s)")
print("post-accumulate-grad hook fired:", len(fired["post_accumulate_grad"]), "time(s), .grad is a",
      fired["post_accumulate_grad"][0])
"""},
    "fsdp2:probe.order.forward": {
        "en": "to run before FSDP's all-gather (and see the shard), register your pre-hook after `fully_shard` "
              "with `prepend=True`",
        "zh": "想在 FSDP 的 all-gather 之前运行（看到的是分片），就在 `fully_shard` 之后用 `prepend=True` "
              "注册前置钩子",
        "code": """\
torch.manual_seed(0)
model = apply(build())
seen = []
model[0].register_forward_pre_hook(lambda m, a: seen.append(("prepend=True", type(m.weight.data).__name__)),
                                   prepend=True)
model[0].register_forward_pre_hook(lambda m, a: seen.append(("default", type(m.weight.data).__name__)))
model(*inputs())
for how, kind in seen:
    print(f"pre-hook registered with {how}: the weight it sees is a {kind}")
"""},
    "fvcore:facts.hooks_left_after_trace_error": {
        "en": "run the analysis on `copy.deepcopy(model)`, so that a trace that raises leaves its scope hooks on "
              "the copy only",
        "zh": "在 `copy.deepcopy(model)` 上做分析：即使跟踪出错，作用域钩子也只会留在副本上",
        "code": """\
import copy

torch.manual_seed(0)
model = build()


def _raises(module, args, output):
    raise RuntimeError("a forward that cannot be traced")


model[2].register_forward_hook(_raises)
twin = copy.deepcopy(model)
try:
    _analysis(twin).total()
except RuntimeError:
    print("the trace raised")


def scope_hooks(root):
    return sum(type(h).__name__ in ("ScopePushHook", "ScopePopHook")
               for m in root.modules() for h in [*m._forward_pre_hooks.values(), *m._forward_hooks.values()])


print("fvcore scope hooks left on the copy:", scope_hooks(twin))
print("fvcore scope hooks left on the model:", scope_hooks(model))
"""},
    "fvcore:facts.user_hook_matmul_counted_for": {
        "en": "return early from your hook under the tracer (`if torch.jit.is_tracing(): return`), so that its "
              "work is not counted",
        "zh": "在跟踪器下让你的钩子直接返回（`if torch.jit.is_tracing(): return`），它的运算就不会被计数",
        "code": """\
torch.manual_seed(0)
base = _analysis(build()).by_module()
runs = {"under the tracer": 0, "outside it": 0}


def extra(module, args, output):
    if torch.jit.is_tracing():
        runs["under the tracer"] += 1
        return None
    runs["outside it"] += 1
    return output @ torch.eye(output.shape[-1])


model = build()
model[0].register_forward_hook(extra)
got = _analysis(model).by_module()
model(*inputs())
print("modules whose count changed:", sorted(k for k in got if got[k] != base[k]))
print("the hook ran:", runs)
"""},
    "ignite:facts.accumulate_2": {
        "en": "run a handler that needs applied gradients on the stepping iterations only: "
              "`Events.ITERATION_COMPLETED(every=2)`",
        "zh": "需要“梯度已应用”的处理函数只在更新参数的那些迭代上运行：`Events.ITERATION_COMPLETED(every=2)`",
        "code": """\
from ignite.engine import Events, create_supervised_trainer

torch.manual_seed(0)
model = build()
trainer = create_supervised_trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.MSELoss(),
                                    gradient_accumulation_steps=2)
last = [model[0].weight.detach().clone()]
seen = {"every iteration": [], "every=2": []}


def check(engine, label):
    changed = not torch.equal(model[0].weight, last[0])
    seen[label].append((engine.state.iteration, changed))


trainer.add_event_handler(Events.ITERATION_COMPLETED, check, "every iteration")
trainer.add_event_handler(Events.ITERATION_COMPLETED(every=2), check, "every=2")
trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda e: last.__setitem__(0, model[0].weight.detach().clone()))
trainer.run(_data(4), max_epochs=1)
for label, runs in seen.items():
    print(f"{label}: (iteration, weights updated since the last one)", runs)
"""},
    "lightning:facts.summary_forwards_before_training": {
        "en": "pass `enable_model_summary=False` to the `Trainer` (or leave out `example_input_array`) when your "
              "hooks must see training batches only",
        "zh": "你的钩子只该看到训练 batch 时，给 `Trainer` 传 `enable_model_summary=False`（或不设 "
              "`example_input_array`）",
        "code": """\
import contextlib
import io

torch.manual_seed(0)
for summary in (True, False):
    log = []
    with contextlib.redirect_stdout(io.StringIO()):  # the summary table
        _fit(log, accumulate=1, steps=1, summary=summary)
    print(f"enable_model_summary={summary}: your forward hook fired", _batches(log)[0].count("module forward hook"),
          "time(s) before the first training_step")
"""},
    "lightning:facts.one_step": {
        "en": "read gradients in `on_before_optimizer_step`: in `on_train_batch_start` `.grad` still holds the "
              "previous step's",
        "zh": "在 `on_before_optimizer_step` 里读梯度：到 `on_train_batch_start` 时 `.grad` 里还是上一步的梯度",
        "code": """\
import pytorch_lightning as pl
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
grads = {"on_train_batch_start": [], "on_before_optimizer_step": []}


class Grads(pl.Callback):
    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        grad = module.net[0].weight.grad
        grads["on_train_batch_start"].append(None if grad is None else grad.clone())

    def on_before_optimizer_step(self, trainer, module, optimizer):
        grads["on_before_optimizer_step"].append(module.net[0].weight.grad.clone())


data = DataLoader(TensorDataset(torch.randn(8, 4, generator=torch.Generator().manual_seed(2))), batch_size=2)
pl.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
           enable_model_summary=False, callbacks=[Grads()]).fit(_module_class(None)(), data)
start, before_step = grads["on_train_batch_start"], grads["on_before_optimizer_step"]
print("on_before_optimizer_step ran", len(before_step), "times, with a gradient each time")
print("on_train_batch_start of step 2 sees step 1's gradient:", torch.equal(start[1], before_step[0]))
"""},
    "lightning:facts.accumulate_2": {
        "en": "put per-step gradient logic in `on_before_optimizer_step`: it runs once per optimizer step, on the "
              "accumulated gradient",
        "zh": "按“每个优化步一次”处理梯度的逻辑放进 `on_before_optimizer_step`：它每个优化步只运行一次，看到的是累加"
              "好的梯度",
        "code": """\
import pytorch_lightning as pl
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
grads = {"on_after_backward": [], "on_before_optimizer_step": []}


class Grads(pl.Callback):
    def on_after_backward(self, trainer, module):
        grads["on_after_backward"].append(module.net[0].weight.grad.clone())

    def on_before_optimizer_step(self, trainer, module, optimizer):
        grads["on_before_optimizer_step"].append(module.net[0].weight.grad.clone())


data = DataLoader(TensorDataset(torch.randn(8, 4, generator=torch.Generator().manual_seed(2))), batch_size=2)
pl.Trainer(max_steps=1, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
           enable_model_summary=False, accumulate_grad_batches=2, callbacks=[Grads()]).fit(_module_class(None)(), data)
after, before_step = grads["on_after_backward"], grads["on_before_optimizer_step"]
print("on_after_backward ran", len(after), "times; on_before_optimizer_step ran", len(before_step), "time(s)")
print("on_before_optimizer_step sees the gradient accumulated over both batches:",
      torch.equal(before_step[0], after[1]) and not torch.equal(before_step[0], after[0]))
"""},
    "mem_tracker:facts.second_block_without_reset": {
        "en": "call `tracker.reset_mod_stats()` before entering the same tracker again",
        "zh": "再次进入同一个 tracker 之前，先调用 `tracker.reset_mod_stats()`",
        "code": """\
from torch.distributed._tools.mem_tracker import MemTracker

torch.manual_seed(0)
model = build()
tracker = MemTracker()
tracker.track_external(model)
for step in range(2):
    tracker.reset_mod_stats()
    with tracker:
        model(*inputs()).sum().backward()
    print("step", step + 1, "tracked; modules with statistics:", len(tracker.memory_tracking))
try:
    with tracker:
        model(*inputs()).sum().backward()
except Exception as exc:
    print("a third block without reset_mod_stats() raises", type(exc).__name__)
"""},
    "mmengine:facts.accumulate_2": {
        "en": "clear the gradients before training: `model.zero_grad(set_to_none=True)` before `runner.train()` "
              "(or in a hook's `before_train`)",
        "zh": "训练开始前先清梯度：在 `runner.train()` 之前调用 `model.zero_grad(set_to_none=True)`"
              "（或放在钩子的 `before_train` 里）",
        "code": """\
import copy

from mmengine.hooks import Hook
from mmengine.optim import OptimWrapper


class ZeroGradFirst(Hook):
    def before_train(self, runner):
        runner.model.zero_grad(set_to_none=True)


torch.manual_seed(0)
clean = build()
stale = copy.deepcopy(clean)
stale.net(*inputs()).sum().backward()  # gradients left from earlier work
fixed = copy.deepcopy(stale)
for model, hooks, name in ((clean, [], "clean"), (stale, [], "stale"), (fixed, [ZeroGradFirst()], "fixed")):
    _train(model, 2, OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1), accumulative_counts=2), hooks, name)
print("left gradients: same weights as a clean run:", torch.allclose(stale.net[0].weight, clean.net[0].weight))
print("zeroed in before_train: same weights as a clean run:",
      torch.allclose(fixed.net[0].weight, clean.net[0].weight))
"""},
    "module_tracker:facts.parents_seen_by_your_hooks": {
        "en": "read `tracker.parents` in your forward pre-hook (and full backward hook), where the module is in it, "
              "and keep it for the forward hook",
        "zh": "在前向前置钩子（以及完整反向钩子）里读 `tracker.parents`，此时模块还在其中；需要的话存下来给前向钩子用",
        "code": """\
from torch.utils.module_tracker import ModuleTracker

torch.manual_seed(0)
model, tracker, kept = build(), ModuleTracker(), {}
model[2].register_forward_pre_hook(lambda m, a: kept.__setitem__("pre-hook", sorted(tracker.parents)))
model[2].register_forward_hook(lambda m, a, o: kept.__setitem__("forward hook, from the pre-hook", kept["pre-hook"]))
model[2].register_full_backward_hook(lambda m, gi, go: kept.__setitem__("backward hook", sorted(tracker.parents)))
with tracker:
    model(*inputs()).sum().backward()
for where, parents in kept.items():
    print(f"{where}: Sequential.2 in parents: {'Sequential.2' in parents}")
"""},
    "nnsight:facts.forward_on_instance_after_trace": {
        "en": "wrap a `copy.deepcopy(model)` in `NNsight`, so that the model you keep has no `Controller` on it",
        "zh": "用 `NNsight` 包装 `copy.deepcopy(model)`，这样你保留的模型上不会留下 `Controller`",
        "code": """\
import copy

from nnsight import NNsight

torch.manual_seed(0)
model = build()
twin = copy.deepcopy(model)
envoy = NNsight(twin)
with envoy.trace(*inputs()):
    out = envoy[0].output.save()
print("traced; output shape:", tuple(out.shape))
print("modules with their own forward, in the copy:", sum("forward" in vars(m) for m in twin.modules()))
print("modules with their own forward, in the model:", sum("forward" in vars(m) for m in model.modules()))
"""},
    "nnsight:facts.output_includes_user_forward_hook_edit": {
        "en": "read what your forward hook returned from the next module's input (`envoy[1].input`), not from "
              "`envoy[0].output`",
        "zh": "从下一个模块的输入（`envoy[1].input`）读你前向钩子返回的值，而不是从 `envoy[0].output` 读",
        "code": """\
from nnsight import NNsight

torch.manual_seed(0)
model = build()
model[0].register_forward_hook(lambda m, a, o: o + 5)
plain = model[0](*inputs()).detach() - 5
envoy = NNsight(model)
with envoy.trace(*inputs()):
    output = envoy[0].output.save()
    next_input = envoy[1].input.save()
print("envoy[0].output includes the hook's +5:", torch.allclose(output, plain + 5))
print("envoy[1].input includes the hook's +5:", torch.allclose(next_input, plain + 5))
"""},
    "opacus:facts.extra_forward_then_step_grad_sample": {
        "en": "run validation passes under `torch.no_grad()` (or after `gsm.eval()`), so that opacus stores no "
              "inputs for them",
        "zh": "验证用的前向放在 `torch.no_grad()` 下（或先 `gsm.eval()`），opacus 就不会为它们保存输入",
        "code": """\
import contextlib

from opacus import GradSampleModule

torch.manual_seed(0)
(x,) = inputs()
for guarded in (False, True):
    model = build()
    gsm = GradSampleModule(model)
    with torch.no_grad() if guarded else contextlib.nullcontext():
        gsm(x)  # the validation pass
    gsm(x).sum().backward()
    sample = model[0].weight.grad_sample
    print(f"validation {'under' if guarded else 'without'} no_grad: grad_sample after the next step:",
          None if sample is None else tuple(sample.shape))
"""},
    "opacus:facts.eval_mode_backward": {
        "en": "turn opacus's hooks off with `gsm.disable_hooks()` for a backward in `eval()` (and back on with "
              "`enable_hooks()`), or backward in `train()`",
        "zh": "要在 `eval()` 下做反向，先用 `gsm.disable_hooks()` 关掉 opacus 的钩子（之后用 `enable_hooks()` "
              "打开），或者在 `train()` 模式下反向",
        "code": """\
from opacus import GradSampleModule

torch.manual_seed(0)
(x,) = inputs()
model = build()
gsm = GradSampleModule(model).eval()
gsm.disable_hooks()
gsm(x).sum().backward()
gsm.enable_hooks()
print("backward in eval mode ran; weight.grad shape:", tuple(model[0].weight.grad.shape))
print("grad_sample stored:", getattr(model[0].weight, "grad_sample", None) is not None)
"""},
    "opacus:facts.checkpoint_grad_sample": {
        "en": "use reentrant checkpointing (`use_reentrant=True`, input requiring grad): its first forward runs "
              "without gradients, so inputs are stored once",
        "zh": "改用可重入的检查点（`use_reentrant=True`，输入需要梯度）：它第一次前向不开梯度，所以输入只保存一次",
        "code": """\
from opacus import GradSampleModule
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
(x,) = inputs()
reference, model = build(), build()
model.load_state_dict(reference.state_dict())
GradSampleModule(reference)(x).sum().backward()
gsm = GradSampleModule(model)
checkpoint(gsm, x.clone().requires_grad_(True), use_reentrant=True).sum().backward()
print({name: tuple(p.grad_sample.shape) for name, p in model.named_parameters() if name.endswith("weight")})
print("same per-sample gradients as without checkpointing:",
      all(torch.allclose(a.grad_sample, b.grad_sample) for a, b in zip(reference.parameters(), model.parameters())))
"""},
    "optimum_quanto:facts.hooks_on_old_module_fire": {
        "en": "register your hooks again after `quantize`, on the new module: `model.get_submodule(name)`",
        "zh": "`quantize` 之后在新模块上重新注册钩子：`model.get_submodule(name)`",
        "code": """\
from optimum.quanto import freeze, qint8, quantize

torch.manual_seed(0)
model = build()
calls = {"old nn.Linear": 0, "new module": 0}
model[0].register_forward_hook(lambda *_: calls.__setitem__("old nn.Linear", calls["old nn.Linear"] + 1))
quantize(model, weights=qint8)
freeze(model)
new = model.get_submodule("0")
new.register_forward_hook(lambda *_: calls.__setitem__("new module", calls["new module"] + 1))
model(*inputs())
print(type(new).__name__, calls)
"""},
    "optimum_quanto:facts.weight_tensor_hook_fires": {
        "en": "register the gradient hook after `freeze`, on the new quantized parameter `module.weight`",
        "zh": "在 `freeze` 之后，在新的量化参数 `module.weight` 上注册梯度钩子",
        "code": """\
from optimum.quanto import freeze, qint8, quantize

torch.manual_seed(0)
model = build()
fired = {"before quantize": 0, "after freeze": 0}
model[0].weight.register_hook(lambda g: fired.__setitem__("before quantize", fired["before quantize"] + 1))
quantize(model, weights=qint8)
freeze(model)
model[0].weight.register_hook(lambda g: fired.__setitem__("after freeze", fired["after freeze"] + 1))
model(*inputs()).pow(2).mean().backward()
print("weight is now a", type(model[0].weight).__name__, "; gradient hooks fired:", fired)
"""},
    "optimum_quanto:facts.with_activations": {
        "en": "register your pre-hook with `prepend=True` to see the float input before quanto's `quantize_input`",
        "zh": "用 `prepend=True` 注册前置钩子，就能在 quanto 的 `quantize_input` 之前看到浮点输入",
        "code": """\
from optimum.quanto import freeze, qint8, quantize

torch.manual_seed(0)
model = build()
quantize(model, weights=qint8, activations=qint8)
freeze(model)
seen = {}
model[0].register_forward_pre_hook(lambda m, a: seen.setdefault("prepend=True", type(a[0]).__name__) and None,
                                   prepend=True)
model[0].register_forward_pre_hook(lambda m, a: seen.setdefault("default", type(a[0]).__name__) and None)
model(*inputs())
for how, kind in seen.items():
    print(f"pre-hook registered with {how} sees a {kind}")
"""},
    "parametrize:facts.parametrization_calls": {
        "en": "read the weight outside forward (logging, regularising) inside `parametrize.cached()`: one "
              "computation for all reads",
        "zh": "在前向之外读取权重（记录日志、加正则）时放进 `parametrize.cached()`：多次读取只算一次",
        "code": """\
from torch.nn.utils import parametrize

torch.manual_seed(0)
model = build()
parametrize.register_parametrization(model[0], "weight", _Counting())
_Counting.calls = 0
penalty = model[0].weight.norm() + model[0].weight.abs().sum()
print("two reads:", _Counting.calls, "calls of the parametrization")
_Counting.calls = 0
with parametrize.cached():
    penalty = model[0].weight.norm() + model[0].weight.abs().sum()
print("two reads inside cached():", _Counting.calls, "call(s)")
"""},
    "parametrize:probe.removed": {
        "en": "after `remove_parametrizations`, delete weight norm's `_weight_norm_compat_hook` from "
              "`module._load_state_dict_pre_hooks`",
        "zh": "`remove_parametrizations` 之后，把 weight norm 的 `_weight_norm_compat_hook` 从 "
              "`module._load_state_dict_pre_hooks` 里删掉",
        "code": """\
import hooklab

torch.manual_seed(0)
model = remove(apply(build()))
print("hooks left after remove_parametrizations:", len(hooklab.all_hooks(model)))
hooks = model[0]._load_state_dict_pre_hooks
for key, hook in list(hooks.items()):
    if getattr(hook, "__name__", "") == "_weight_norm_compat_hook":
        del hooks[key]
print("after deleting the compat hook:", len(hooklab.all_hooks(model)))
print("loads a plain state dict:", model.load_state_dict(build().state_dict()))
"""},
    "peft:probe.order.backward": {
        "en": "hook the `lora.Linear` that now stands in the model, or call `enable_input_require_grads()` so that a "
              "gradient reaches `base_layer`",
        "zh": "把反向钩子挂在模型里现在的 `lora.Linear` 上；或者调用 `enable_input_require_grads()`，让梯度流到 "
              "`base_layer`",
        "code": """\
torch.manual_seed(0)
model = build()
fired = {"original Linear": 0, "lora.Linear": 0}


def count(name):
    return lambda m, grad_input, grad_output: fired.__setitem__(name, fired[name] + 1)


model.get_submodule(TARGET).register_full_backward_hook(count("original Linear"))
model.enable_input_require_grads()
peft_model = apply(model)
peft_model.base_model.model.get_submodule(TARGET).register_full_backward_hook(count("lora.Linear"))
loss(peft_model(*inputs())).backward()
print("backward hooks that fired:", fired)
"""},
    "pipelining:facts.schedule_step": {
        "en": "register your hooks on the stage's own submodules (`stage.submod`): they fire once per microbatch",
        "zh": "把钩子注册在阶段自己的子模块（`stage.submod`）上：它们每个微批次触发一次",
        "code": """\
from torch.distributed.pipelining import ScheduleGPipe, pipeline

one_process_group()
torch.manual_seed(0)
x = inputs()[0]
pipe = pipeline(build(), mb_args=(x[:2],))
stage = pipe.build_stage(0, torch.device("cpu"))
calls = []
stage.submod.get_submodule(TARGET).register_forward_hook(lambda m, a, o: calls.append(1))
ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda out, target: out.pow(2).mean()).step(
    x, target=torch.zeros(4, 2))
print("forward hook on the stage's submodule fired:", len(calls), "time(s) for 2 microbatches")
"""},
    "pipelining:facts.forward_hook_baked_in": {
        "en": "remove an output-changing hook before `pipeline()` traces, and hook the stage module instead",
        "zh": "在 `pipeline()` 追踪之前删掉会改输出的钩子，改为挂在阶段模块上",
        "code": """\
from torch.distributed.pipelining import pipeline

one_process_group()
torch.manual_seed(0)
x = inputs()[0]
model = build()  # traced with no hook on it
with torch.no_grad():
    stage_module = pipeline(model, mb_args=(x,)).get_stage_module(0)
    print("stage matches the model without the hook:", torch.equal(stage_module(x), model(x)))
    stage_module.get_submodule(TARGET).register_forward_hook(lambda m, a, o: o * 0)
    print("a hook on the stage module changes the pipeline:", not torch.equal(stage_module(x), model(x)))
"""},
    "pipelining:facts.split_spec_replaces_forward_on_the_model": {
        "en": "after `pipeline()`, `del module.forward` on each module named in `split_spec` to get the class's "
              "`forward` back",
        "zh": "`pipeline()` 之后，对 `split_spec` 里点名的每个模块执行 `del module.forward`，恢复类自己的 `forward`",
        "code": """\
from torch.distributed.pipelining import SplitPoint, pipeline

one_process_group()
torch.manual_seed(0)
x = inputs()[0]
model = build()
pipe = pipeline(model, mb_args=(x[:2],), split_spec={"2": SplitPoint.BEGINNING})
print("forward replaced on model[2]:", "forward" in model[2].__dict__)
del model[2].forward
print("after del model[2].forward:", "forward" in model[2].__dict__, "; output shape:", tuple(model(x).shape))
"""},
    "ptflops:facts.aten_hooks_left_per_child_after_two_calls": {
        "en": "count a deep copy (`copy.deepcopy(model)`): the hooks ptflops leaves behind stay on the copy",
        "zh": "在深拷贝（`copy.deepcopy(model)`）上计数：ptflops 留下的钩子只留在拷贝上",
        "code": """\
import copy

torch.manual_seed(0)
model = build()
macs = [_count(copy.deepcopy(model), "aten") for _ in range(2)]
print("same MACs both times:", macs[0] == macs[1])
print("hooks left per child of the model:",
      {name: len(m._forward_pre_hooks) + len(m._forward_hooks) for name, m in model.named_children()})
"""},
    "ptflops:facts.training_after": {
        "en": "call `model.train()` after counting (or count a deep copy)",
        "zh": "计数之后调用 `model.train()`（或者在深拷贝上计数）",
        "code": """\
torch.manual_seed(0)
model = build().train()
_count(model, "pytorch")
print("training after counting:", model.training)
model.train()
print("after model.train():", model.training, "; every module:", all(m.training for m in model.modules()))
"""},
    "ptflops:facts.user_matmul_counted": {
        "en": "remove your own hooks while counting (`handle.remove()`), and register them again afterwards",
        "zh": "计数期间先删掉自己的钩子（`handle.remove()`），计数完再重新注册",
        "code": """\
torch.manual_seed(0)
plain = {backend: _count(build(), backend) for backend in ("pytorch", "aten")}


def gram(module, args, output):
    torch.matmul(output.T, output)


model = build()
handle = model.register_forward_hook(gram)
hooked = {backend: _count(model, backend) for backend in ("pytorch", "aten")}
handle.remove()
counted = {backend: _count(model, backend) for backend in ("pytorch", "aten")}
handle = model.register_forward_hook(gram)
print("with the hook, more MACs than the plain model:", {b: hooked[b] > plain[b] for b in plain})
print("hook removed while counting, same MACs as the plain model:", {b: counted[b] == plain[b] for b in plain})
print("forward hooks on the model again:", len(model._forward_hooks))
"""},
    "pyvene:facts.user_hooks_left_after_call": {
        "en": "use a global `register_module_forward_hook` that checks the module, which pyvene does not touch; "
              "remove it after",
        "zh": "改用全局的 `register_module_forward_hook`，在钩子里判断是哪个模块；pyvene 不会碰它，用完记得删掉",
        "code": """\
import contextlib
import io

from torch.nn.modules.module import register_module_forward_hook

with contextlib.redirect_stdout(io.StringIO()):  # pyvene prints a note about an optional backend on import
    import pyvene  # noqa: F401

torch.manual_seed(0)
model = build()
block = model.get_submodule(TARGET)
fired = []
handle = register_module_forward_hook(lambda m, a, o: fired.append(1) if m is block else None)
try:
    _intervene(_wrapped(model))
finally:
    handle.remove()
print("the global hook fired on", TARGET, len(fired), "time(s) during the call (the base run and the source run)")
"""},
    "pyvene:facts.prune_mask_after_call": {
        "en": "make the pruning permanent with `prune.remove(layer, 'weight')` before wrapping: no hook is left to lose",
        "zh": "包装之前用 `prune.remove(layer, 'weight')` 把剪枝固化进权重：这样就没有可被删掉的钩子了",
        "code": """\
import contextlib
import io

import torch.nn.functional as F
from torch.nn.utils import prune

with contextlib.redirect_stdout(io.StringIO()):  # pyvene prints a note about an optional backend on import
    import pyvene  # noqa: F401

torch.manual_seed(0)
model = build()
prune.l1_unstructured(model.score, "weight", amount=0.5)
prune.remove(model.score, "weight")
zeros = int((model.score.weight == 0).sum())
_intervene(_wrapped(model))
x = torch.randn(3, model.score.in_features, generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    print("zeros in weight before / after the call:", zeros, "/", int((model.score.weight == 0).sum()))
    print("the forward uses the pruned weight:",
          torch.allclose(model.score(x), F.linear(x, model.score.weight, model.score.bias)))
"""},
    "pyvene:facts.parameters_requiring_grad_after_wrapping": {
        "en": "call `wrapper.enable_model_gradients()` (and `model.train()` if you train) after wrapping",
        "zh": "包装之后调用 `wrapper.enable_model_gradients()`（要训练的话再加 `model.train()`）",
        "code": """\
import contextlib
import io

with contextlib.redirect_stdout(io.StringIO()):  # pyvene prints a note about an optional backend on import
    import pyvene  # noqa: F401

torch.manual_seed(0)
model = build()
wrapper = _wrapped(model)
print("parameters requiring grad after wrapping:", sum(p.requires_grad for p in model.parameters()))
wrapper.enable_model_gradients()
model.train()
model(*inputs())[0].float().pow(2).mean().backward()
print("after enable_model_gradients():", sum(p.requires_grad for p in model.parameters()), "of",
      len(list(model.parameters())), "; training:", model.training)
print("parameters the backward reached:", sum(p.grad is not None for p in model.parameters()), "; not reached:",
      [name for name, p in model.named_parameters() if p.grad is None], "(the position embedding, unused here)")
"""},
    "sae_lens:facts.user_hook_fires": {
        "en": "add hooks by name at each run (`run_with_hooks`); while an SAE is attached, hook its own hook point "
              "`<name>.hook_sae_output`",
        "zh": "每次运行时按名字添加钩子（`run_with_hooks`）；挂着 SAE 时，改挂在它自己的钩子点 "
              "`<名字>.hook_sae_output` 上",
        "code": """\
torch.manual_seed(0)
model, (tokens,) = build(), inputs()
sae = _sae()
runs = {}
for label, step, name in (("before add_sae", lambda: None, TARGET),
                          ("with SAE", lambda: model.add_sae(sae), TARGET + ".hook_sae_output"),
                          ("after reset_saes", model.reset_saes, TARGET)):
    step()
    fired = []
    model.run_with_hooks(tokens, fwd_hooks=[(name, lambda act, hook: fired.append(hook.name))])
    runs[label] = fired
print(runs)
"""},
    "sae_lens:facts.sae_parameters_in_model": {
        "en": "keep the SAE object: give `sae.parameters()` to the optimizer, and save and move `sae` on its own",
        "zh": "留住 SAE 对象：把 `sae.parameters()` 交给优化器，并单独保存、单独 `.to(...)` 这个 `sae`",
        "code": """\
torch.manual_seed(0)
model = build()
sae = _sae()
model.add_sae(sae)
optimizer = torch.optim.SGD([*model.parameters(), *sae.parameters()], lr=0.1)
in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
print("SAE parameters in the optimizer:", sum(id(p) in in_optimizer for p in sae.parameters()), "of",
      len(list(sae.parameters())))
checkpoint = {"model": model.state_dict(), "sae": sae.state_dict()}
again = _sae()
again.load_state_dict(checkpoint["sae"])
print("SAE weights restored from the checkpoint:",
      all(torch.equal(a, b) for a, b in zip(sae.state_dict().values(), again.state_dict().values())))
"""},
    "swa_utils:facts.stateful_hook": {
        "en": "register a stateful hook after building `AveragedModel`, on `swa_model.module`: the object you hold is "
              "then the one that records",
        "zh": "带状态的钩子要在构建 `AveragedModel` 之后、挂到 `swa_model.module` 上：这样你手里的对象就是记录的那个",
        "code": """\
torch.manual_seed(0)
model = build()
swa = apply(model)
recorder = _Recorder()
swa.module[0].register_forward_hook(recorder)
swa(*inputs())
print("calls on yours:", recorder.calls)
print("the averaged model holds your object:", any(h is recorder for h in swa.module[0]._forward_hooks.values()))
"""},
    "tensor_parallel:facts.types_seen": {
        "en": "make the hook work either way: turn a `DTensor` into a plain tensor with `full_tensor()` before "
              "using it",
        "zh": "让钩子两种情况都能用：先用 `full_tensor()` 把 `DTensor` 变成普通张量再用",
        "code": """\
from torch.distributed.tensor import DTensor

torch.manual_seed(0)
model, seen = build(), {}


def plain(tensor):
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def watch(when):
    def hook(module, args, output):
        seen[when] = f"{type(output).__name__} -> {type(plain(output)).__name__} {tuple(plain(output).shape)}"
    model[0].register_forward_hook(hook)


watch("before")
apply(model)
watch("after")
model(*inputs())
print(seen)
"""},
    "tensor_parallel:facts.param_hook_fires": {
        "en": "register parameter hooks after `parallelize_module`, on the new `DTensor` parameters",
        "zh": "参数钩子要在 `parallelize_module` 之后注册，挂在新的 `DTensor` 参数上",
        "code": """\
torch.manual_seed(0)
model, fired = build(), []
old = model[0].weight
old.register_hook(lambda g: fired.append("old parameter"))
apply(model)
model[0].weight.register_hook(lambda g: fired.append("new parameter"))
model(*inputs()).sum().backward()
print("the same parameter object:", old is model[0].weight, "; now a", type(model[0].weight.data).__name__)
print("gradient hooks that fired:", fired)
"""},
    "tensorboard:facts.add_graph_by_hooks": {
        "en": "call `add_graph` before registering backward hooks (or on a copy without them)",
        "zh": "先调用 `add_graph`，再注册反向钩子（或拿一个不带这些钩子的副本去画图）",
        "code": """\
torch.manual_seed(0)
model = build()
print("add_graph first:", _add_graph(model))
fired = []
model[0].register_full_backward_pre_hook(lambda m, grad_output: fired.append("backward_pre"))
model[0].register_full_backward_hook(lambda m, grad_input, grad_output: fired.append("backward"))
model(*inputs()).pow(2).mean().backward()
print("backward hooks registered afterwards fired:", fired)
"""},
    "tensorboard:facts.add_graph_hook_calls": {
        "en": "register your forward hooks after `add_graph`, so that drawing the graph does not run them",
        "zh": "在 `add_graph` 之后再注册前向钩子，画图时就不会运行它们",
        "code": """\
torch.manual_seed(0)
model = build()
print("add_graph:", _add_graph(model))
calls = []
model[0].register_forward_hook(lambda m, a, o: calls.append(f"forward (training={m.training})"))
model(*inputs())
print("forward hook calls, one forward after add_graph:", calls)
"""},
    "tensorboard:facts.graph_records_hook_ops": {
        "en": "take an output-changing hook off while `add_graph` traces (`handle.remove()`), then register it again",
        "zh": "`add_graph` 追踪期间先拿掉会改输出的钩子（`handle.remove()`），追踪完再重新注册",
        "code": """\
torch.manual_seed(0)
plain = _graph_ops(build())


def double(module, args, output):
    return output * 2


model = build()
handle = model[0].register_forward_hook(double)
print("ops the hook adds to the graph:", sorted(set(_graph_ops(model)) - set(plain)))
handle.remove()
print("traced without it, same ops as the plain model:", _graph_ops(model) == plain)
handle = model[0].register_forward_hook(double)
print("forward hooks on model[0] again:", len(model[0]._forward_hooks))
"""},
    "thop:facts.user_matmul_counted": {
        "en": "remove your own hooks while counting (`handle.remove()`), and register them again afterwards",
        "zh": "计数期间先删掉自己的钩子（`handle.remove()`），计数完再重新注册",
        "code": """\
import thop

torch.manual_seed(0)
plain = thop.profile(build(), inputs(), verbose=False)[0]


def gram(module, args, output):
    torch.matmul(args[0].T, args[0])


model = build()
handle = model.register_forward_hook(gram)
print("with the hook on the root, more MACs than the plain model:",
      thop.profile(model, inputs(), verbose=False)[0] > plain)
handle.remove()
print("hook removed while counting, same MACs:", thop.profile(model, inputs(), verbose=False)[0] == plain)
handle = model.register_forward_hook(gram)
print("forward hooks on the model again:", len(model._forward_hooks))
"""},
    "thop:facts.profile_origin_buffers_in_state_dict_during": {
        "en": "use `thop.profile`, which keeps its counters as plain attributes, not `profile_origin`",
        "zh": "改用 `thop.profile`（它把计数器存成普通属性），不用 `profile_origin`",
        "code": """\
import thop
from thop.profile import profile_origin

torch.manual_seed(0)
model = build()
seen = []
model[0].register_forward_hook(lambda m, a, o: seen.append(len(_extra_keys(model))))
profile_origin(model, inputs(), verbose=False)
thop.profile(model, inputs(), verbose=False)
print("extra state_dict keys a hook sees: profile_origin", seen[0], "; thop.profile", seen[1])
"""},
    "timm:facts.layers_after_last_feature_run": {
        "en": "use the default `features_only=True` extractor (`FeatureListNet`): it keeps only the modules up to "
              "the last feature",
        "zh": "改用默认的 `features_only=True` 提取器（`FeatureListNet`）：它只保留到最后一个特征为止的模块",
        "code": """\
import timm

torch.manual_seed(0)
hooked = timm.create_model("test_resnet", pretrained=False, features_only=True, feature_cls="hook",
                           out_indices=(1, 2))
torch.manual_seed(0)
net = timm.create_model("test_resnet", pretrained=False, features_only=True, out_indices=(1, 2))
print(type(net).__name__, "children:", [name for name, _ in net.named_children()])
with torch.no_grad():
    features = net(*inputs())
    print(len(features), "features, the same as the hook-based extractor's:",
          all(torch.equal(a, b) for a, b in zip(hooked(*inputs()), features)))
"""},
    "timm:facts.set_grad_checkpointing_recompute_fires": {
        "en": "read stage outputs with `model.forward_intermediates(x, indices=...)` instead of hooks on the stages: "
              "it returns them with checkpointing on",
        "zh": "改用 `model.forward_intermediates(x, indices=...)` 读取各 stage 的输出，而不是在 stage 上挂钩子："
              "开着检查点它也照样返回",
        "code": """\
torch.manual_seed(0)
model, (x,) = build(), inputs()
with torch.no_grad():
    expected = model.forward_intermediates(x, indices=[1, 2], intermediates_only=True)
model.set_grad_checkpointing(True)
counts = {}
_count(model.layer2[0], counts, "block layer2.0 (checkpointed: runs again in backward)")
stages = model.forward_intermediates(x, indices=[1, 2], intermediates_only=True)
loss(stages).backward()
print(len(stages), "stage outputs, equal to those without checkpointing:",
      all(torch.allclose(a, b) for a, b in zip(expected, stages)))
print(counts)
"""},
    "timm:facts.features_returned_with_body_checkpointed": {
        "en": "use the default `features_only=True` extractor (`FeatureListNet`) and call its own "
              "`set_grad_checkpointing()`",
        "zh": "改用默认的 `features_only=True` 提取器（`FeatureListNet`），并调用它自己的 `set_grad_checkpointing()`",
        "code": """\
import timm

torch.manual_seed(0)
net = timm.create_model("test_resnet", pretrained=False, features_only=True, out_indices=(1, 2))
net.set_grad_checkpointing(True)
counts = {}
_count(net.layer1[0], counts, "block layer1.0 (checkpointed: runs again in backward)")
features = net(*inputs())
loss(features).backward()
print(type(net).__name__, "returned", len(features), "features;", counts)
"""},
    "torch_ao_quantization:facts.after_convert": {
        "en": "register `with_kwargs=True` pre-hooks on the converted model, after `convert`, and call "
              "`.dequantize()` on the `quint8` outputs your hooks see",
        "zh": "`with_kwargs=True` 的前置钩子在 `convert` 之后再注册到转换好的模型上；钩子看到的 `quint8` 输出先 "
              "`.dequantize()` 再用",
        "code": """\
from torch.ao.quantization import convert

torch.manual_seed(0)
prepared = apply(build())
prepared(*inputs())
converted = convert(prepared)
seen = []
converted[1].register_forward_pre_hook(lambda m, args, kwargs: None, with_kwargs=True)
converted[1].register_forward_hook(lambda m, a, o: seen.append((o.dtype, o.dequantize().dtype)))
print("output shape:", tuple(converted(*inputs()).shape))
print("the hook saw", seen[0][0], "and read it as", seen[0][1])
"""},
    "torch_ao_quantization:probe.survives.checkpoint": {
        "en": "calibrate with plain forward passes under `torch.no_grad()`, without checkpointing: each batch is "
              "observed once",
        "zh": "校准时用 `torch.no_grad()` 下的普通前向，不开激活检查点：每个批次只被观察一次",
        "code": """\
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
model = apply(build())
calls = {"plain": 0, "checkpoint": 0}
where = ["plain"]


def count(observer, args):
    calls[where[0]] += 1


model[1].activation_post_process.register_forward_pre_hook(count)
with torch.no_grad():
    model(*inputs())
where[0] = "checkpoint"
x = inputs()[0].requires_grad_()
checkpoint(model, x, use_reentrant=False).sum().backward()
print("observer of layer 1 ran", calls["plain"], "time(s) for a plain no_grad batch,", calls["checkpoint"],
      "for a checkpointed step")
"""},
    "torch_geometric:facts.fires_under_torch_compile": {
        "en": "keep the layer's `propagate` out of the compiled graph with `torch.compiler.disable` so its "
              "hooks run, or hook an uncompiled copy",
        "zh": "用 `torch.compiler.disable` 把该层的 `propagate` 留在编译图之外，它的钩子就会运行；或者在未编译的模型上挂钩子",
        "code": """\
torch.manual_seed(0)
model = build()
fired = []
model.conv1.register_message_forward_hook(lambda m, a, out: fired.append("message"))
torch._dynamo.reset()
torch.compile(model, backend="eager")(*inputs())
print("message hook under torch.compile fired:", len(fired), "time(s)")
model.conv1.propagate = torch.compiler.disable(model.conv1.propagate)
torch._dynamo.reset()
torch.compile(model, backend="eager")(*inputs())
torch._dynamo.reset()
print("with propagate kept out of the graph:", len(fired), "time(s)")
"""},
    "torch_geometric:facts.hook_order_sparse_adjacency": {
        "en": "hook `message_and_aggregate` too when a sparse adjacency can come in, or pass `edge_index` "
              "(`to_edge_index`) to get per-edge messages",
        "zh": "输入可能是稀疏邻接矩阵时，同时给 `message_and_aggregate` 挂钩子；要逐边的消息，就改传 `edge_index`"
              "（用 `to_edge_index` 转换）",
        "code": """\
from torch_geometric.utils import to_edge_index, to_torch_csr_tensor

torch.manual_seed(0)
conv = build().conv1
x, edge_index = inputs()
adj = to_torch_csr_tensor(edge_index.flip(0), size=(5, 5))
log = []
conv.register_message_forward_hook(lambda *_: log.append("message"))
conv.register_message_and_aggregate_forward_hook(lambda *_: log.append("message_and_aggregate"))
from_adj = conv(x, adj)
print("sparse adjacency:", log)
log.clear()
back, _ = to_edge_index(adj)
print("same output from edge_index:", torch.allclose(conv(x, back.flip(0)), from_adj))
print("edge_index:", log)
"""},
    "torch_geometric:facts.message_hook_under_edge_mask": {
        "en": "read the masked messages from the layer's `explain_message` (wrap it on the instance), or the "
              "masked sums from an `aggregate` forward hook",
        "zh": "要看乘过掩码的消息，就在实例上包装该层的 `explain_message` 读它的返回值；或用 `aggregate` "
              "前向钩子读乘过掩码后的聚合结果",
        "code": """\
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

torch.manual_seed(0)
conv = build().conv1
x, edge_index = inputs()
seen = {}
conv.register_message_forward_hook(lambda m, a, out: seen.__setitem__("message hook", out.detach().clone()))
original = conv.explain_message


def explain_message(inputs, dim_size):  # same name and signature: PyG reads them
    out = original(inputs, dim_size)
    seen["explain_message"] = out.detach().clone()
    return out


conv.explain_message = explain_message
set_masks(conv, torch.zeros(edge_index.size(1)), edge_index, apply_sigmoid=False)
conv(x, edge_index)
clear_masks(conv)
print("edge messages zeroed by the mask - in the message hook:", int((seen["message hook"].abs().sum(-1) == 0).sum()),
      "; in explain_message's output:", int((seen["explain_message"].abs().sum(-1) == 0).sum()))
"""},
    "torch_profiler:facts.module_events": {
        "en": "profile with `with_stack=True` to get the `nn.Module:` events of an eager model",
        "zh": "要在 eager 模型上拿到 `nn.Module:` 事件，分析时打开 `with_stack=True`",
        "code": """\
from torch.profiler import ProfilerActivity, profile

torch.manual_seed(0)
model = build()
for options in ({"with_modules": True}, {"with_stack": True}):
    with profile(activities=[ProfilerActivity.CPU], **options) as prof:
        model(*inputs()).pow(2).mean().backward()
    events = sorted({e.name for e in prof.events() if e.name.startswith("nn.Module:")})
    print(options, "->", len(events), "module event(s):", events)
"""},
    "torch_profiler:facts.your_sys_setprofile_function": {
        "en": "save `sys.getprofile()` before a `with_stack=True` block and set it again with `sys.setprofile` "
              "after it",
        "zh": "进入 `with_stack=True` 的块之前先保存 `sys.getprofile()`，块结束后再用 `sys.setprofile` 设回去",
        "code": """\
import sys

from torch.profiler import ProfilerActivity, profile


def yours(frame, event, arg):  # your own profile function (a tracer, a profiler)
    pass


torch.manual_seed(0)
model = build()
sys.setprofile(yours)
saved = sys.getprofile()
with profile(activities=[ProfilerActivity.CPU], with_stack=True):
    model(*inputs()).sum().backward()
print("yours still set after the block:", sys.getprofile() is yours)
sys.setprofile(saved)
print("after sys.setprofile(saved):", sys.getprofile() is yours)
sys.setprofile(None)
"""},
    "torchao:facts.hooks_on_old_weight_fire": {
        "en": "to train with hooked weights, use QAT: `quantize_(model, QATConfig(..., step=\"prepare\"))` keeps "
              "the same weight parameter, then convert",
        "zh": "要在带钩子的权重上训练，就用 QAT：`quantize_(model, QATConfig(..., step=\"prepare\"))` 保留原来的"
              "权重参数，训练完再转换",
        "code": """\
from torchao.quantization import Int8WeightOnlyConfig, quantize_
from torchao.quantization.qat import IntxFakeQuantizeConfig, QATConfig

torch.manual_seed(0)
model = build()
old = model[0].weight
fired = []
old.register_hook(lambda grad: fired.append("tensor hook"))
quantize_(model, QATConfig(weight_config=IntxFakeQuantizeConfig(torch.int8, "per_channel"), step="prepare"))
print("after the QAT prepare step the weight is the old parameter:", model[0].weight is old)
model(*inputs()).pow(2).mean().backward()
print("the hook on it fired:", len(fired), "time(s)")
quantize_(model, QATConfig(Int8WeightOnlyConfig(), step="convert"))
print("after convert:", type(model[0].weight.data).__name__)
"""},
    "torchao:facts.hook_on_new_weight": {
        "en": "hook the weight during QAT (`QATConfig(..., step=\"prepare\")`: a trainable fake-quantized weight), "
              "before `step=\"convert\"` freezes it",
        "zh": "在 QAT 阶段给权重挂钩子（`QATConfig(..., step=\"prepare\")`：权重仍可训练，只做伪量化），"
              "`step=\"convert\"` 之后它就被冻结了",
        "code": """\
from torchao.quantization import Int8WeightOnlyConfig, quantize_
from torchao.quantization.qat import IntxFakeQuantizeConfig, QATConfig

torch.manual_seed(0)
model = build()
quantize_(model, QATConfig(weight_config=IntxFakeQuantizeConfig(torch.int8, "per_channel"), step="prepare"))
print("weight requires_grad during QAT:", model[0].weight.requires_grad)
fired = []
handle = model[0].weight.register_hook(lambda grad: fired.append(tuple(grad.shape)))
model(*inputs()).pow(2).mean().backward()
print("the hook fired with a gradient of shape:", fired)
handle.remove()
quantize_(model, QATConfig(Int8WeightOnlyConfig(), step="convert"))
print("after convert:", type(model[0].weight.data).__name__, "requires_grad:", model[0].weight.requires_grad)
"""},
    "torchinfo:facts.user_forward_hook_grad_enabled": {
        "en": "make the hook skip its training-only work when `torch.is_grad_enabled()` is false (as inside "
              "`summary`), or register it after `summary`",
        "zh": "让钩子在 `torch.is_grad_enabled()` 为假时（`summary` 里就是这样）跳过只属于训练的工作，"
              "或者在 `summary` 之后再注册它",
        "code": """\
torch.manual_seed(0)
model = build().train()
steps = []


def count_steps(module, args, output):
    if not torch.is_grad_enabled():  # summary, evaluation: not a training step
        return
    steps.append(1)
    output.register_hook(lambda grad: None)


model[0].register_forward_hook(count_steps)
apply(model)
print("training steps counted during summary:", len(steps))
model(*inputs()).sum().backward()
print("after one training step:", len(steps))
"""},
    "torchvision:facts.hook_on_container": {
        "en": "make the container class a leaf (`tracer_kwargs={'leaf_modules': [...]}`): the extractor then "
              "calls the original module and its hooks fire",
        "zh": "把容器类设成叶子（`tracer_kwargs={'leaf_modules': [...]}`）：提取器会直接调用原模块，它的钩子就会触发",
        "code": """\
from torch import nn
from torchvision.models.feature_extraction import create_feature_extractor

torch.manual_seed(0)
model = build()
calls = []
model.layer1.register_forward_hook(lambda *_: calls.append(1))
extractor = create_feature_extractor(model, return_nodes=RETURN_NODES,
                                     tracer_kwargs={"leaf_modules": [nn.Sequential]})
print("fired while tracing:", len(calls), "; the extractor's layer1 is the original:", extractor.layer1 is model.layer1)
features = extractor(*inputs())
print("fired when the extractor ran:", len(calls), "; features:", sorted(features))
"""},
    "torchvision:facts.hook_on_leaf": {
        "en": "extract from a deep copy (`create_feature_extractor(copy.deepcopy(model), ...)`) so that the "
              "extractor and the model share no module",
        "zh": "对深拷贝做提取（`create_feature_extractor(copy.deepcopy(model), ...)`），让提取器和原模型不共享任何模块",
        "code": """\
import copy

torch.manual_seed(0)
model = build()
extractor = apply(copy.deepcopy(model))
calls = []
model.layer1[0].conv1.register_forward_hook(lambda *_: calls.append(1))
print("shared conv1:", extractor.get_submodule("layer1.0.conv1") is model.layer1[0].conv1)
extractor(*inputs())
print("a hook added to the model fired in the extractor:", len(calls), "time(s)")
"""},
    "transformer_lens:facts.run_with_hooks_bwd_fires": {
        "en": "run forward and backward inside `with model.hooks(bwd_hooks=[...]):`: the backward hooks fire there "
              "and are removed when the block ends",
        "zh": "把前向和反向都放进 `with model.hooks(bwd_hooks=[...]):` 里：反向钩子在块内触发，块结束时被移除",
        "code": """\
torch.manual_seed(0)
model = build()
(tokens,) = inputs()
fired = []
with model.hooks(bwd_hooks=[(TARGET, lambda grad, hook: fired.append("bwd"))]):
    model(tokens).sum().backward()
print("inside model.hooks(...): the backward hook fired", len(fired), "time(s)")
model(tokens).sum().backward()
print("after the block:", len(fired), "time(s) in all; backward hooks left:",
      len(model.get_submodule(TARGET).bwd_hooks))
"""},
    "transformer_lens:facts.hook_point_remove_hooks_leaves_bwd": {
        "en": "pass `dir=\"both\"`: `hook_point.remove_hooks(dir=\"both\")`, or call `model.reset_hooks()`",
        "zh": "传入 `dir=\"both\"`：`hook_point.remove_hooks(dir=\"both\")`，或者调用 `model.reset_hooks()`",
        "code": """\
torch.manual_seed(0)
model = apply(build())
point = model.get_submodule(TARGET)
point.remove_hooks()
print("after remove_hooks():", len(point.fwd_hooks), "forward,", len(point.bwd_hooks), "backward")
point.remove_hooks(dir="both")
print("after remove_hooks(dir='both'):", len(point.fwd_hooks), "forward,", len(point.bwd_hooks), "backward")
"""},
    "transformers:facts.recompute_fires": {
        "en": "hook the decoder layer itself (its `__call__` stays outside the checkpoint), or call "
              "`gradient_checkpointing_disable()` while hooks collect activations",
        "zh": "把钩子挂在解码层本身上（它的 `__call__` 不在检查点之内），或者在用钩子收集激活时先调用 "
              "`gradient_checkpointing_disable()`",
        "code": """\
torch.manual_seed(0)
model = apply(build())
layer = model.model.layers[0]


def one_step():
    counts = {}
    handles = [_counter(layer, counts, "decoder layer"), _counter(layer.self_attn, counts, "its self_attn")]
    loss(model(*inputs())).backward()
    for handle in handles:
        handle.remove()
    return counts


print("with gradient checkpointing:", one_step())
model.gradient_checkpointing_disable()
print("after gradient_checkpointing_disable():", one_step())
"""},
    "transformers:facts.recompute_fires_without_early_stop": {
        "en": "let the inner hooks act only between the decoder layer's own pre-hook and hook: those run once, "
              "outside the recomputation",
        "zh": "让内层钩子只在解码层自己的前置钩子和前向钩子之间起作用：这两个钩子只运行一次，不在重算之内",
        "code": """\
from torch.utils.checkpoint import set_checkpoint_early_stop

torch.manual_seed(0)
model = apply(build())
layer = model.model.layers[0]
state = {"in forward": False}
layer.register_forward_pre_hook(lambda *_: state.__setitem__("in forward", True))
layer.register_forward_hook(lambda *_: state.__setitem__("in forward", False))
counts = {"every call": 0, "in the forward only": 0}


def on_mlp(module, args, output):
    counts["every call"] += 1
    if state["in forward"]:  # False while backward recomputes the layer
        counts["in the forward only"] += 1


layer.mlp.register_forward_hook(on_mlp)
with set_checkpoint_early_stop(False):
    loss(model(*inputs())).backward()
print("the hook on mlp over one step:", counts)
"""},
    "transformers:facts.hidden_states_show_user_edit": {
        "en": "register the editing hook with `prepend=True` so it runs before transformers' capturing hook, "
              "whenever you add it",
        "zh": "用 `prepend=True` 注册修改输出的钩子，无论何时添加，它都排在 transformers 的捕获钩子之前",
        "code": """\
torch.manual_seed(0)
model = build().eval()
model(*inputs(), output_hidden_states=True)  # the first capturing call adds transformers' hooks
layer = model.model.layers[0]
layer.register_forward_hook(lambda mod, args, out: out + 100.0, prepend=True)
out = model(*inputs(), output_hidden_states=True)
print("hooks on the layer, in order:", [fn.__name__ for fn in layer._forward_hooks.values()])
print("the edit shows in hidden_states[1]:", bool(out.hidden_states[1].abs().min() > 50))
"""},
    "ultralytics:facts.predict_runs_a_copy": {
        "en": "after the first `predict`, register on the model it runs: `yolo.predictor.model.backend.model`",
        "zh": "第一次 `predict` 之后，把钩子注册到它真正运行的模型上：`yolo.predictor.model.backend.model`",
        "code": """\
torch.manual_seed(0)
yolo = _yolo()
yolo.predict(_image(), imgsz=64, device="cpu", verbose=False)
ran = yolo.predictor.model.backend.model
calls = []
ran.model[0].register_forward_hook(lambda *_: calls.append(1))
yolo.predict(_image(), imgsz=64, device="cpu", verbose=False)
yolo.predict(_image(), imgsz=64, device="cpu", verbose=False)
print("predict runs yolo.model:", ran is yolo.model, "; a hook on the model it runs fired", len(calls),
      "time(s) in 2 predicts")
"""},
    "ultralytics:facts.fusion_drops_inner_hooks": {
        "en": "to hook `BatchNorm2d`, call the unfused model yourself (`yolo.model.eval()(batch)`): no copy, no fusion",
        "zh": "要在 `BatchNorm2d` 上挂钩子，就自己调用未融合的模型（`yolo.model.eval()(batch)`）：不拷贝，也不融合",
        "code": """\
torch.manual_seed(0)
yolo = _yolo()
calls = []
yolo.model.model[0].bn.register_forward_hook(lambda *_: calls.append(1))
yolo.predict(_image(), imgsz=64, device="cpu", verbose=False)
print("BatchNorm2d hook through predict:", len(calls), "time(s)")
yolo.model.eval()
with torch.no_grad():
    yolo.model(*inputs())
print("calling yolo.model directly:", len(calls), "time(s)")
"""},
    "wandb:facts.hooks_after_finish": {
        "en": "call `wandb.unwatch(model)` before `wandb.finish()`: the model then trains on without wandb's hooks",
        "zh": "在 `wandb.finish()` 之前调用 `wandb.unwatch(model)`：之后模型照常训练，不再带 wandb 的钩子",
        "code": """\
import wandb

import hooklab

_run()
torch.manual_seed(0)
model = build()
wandb.watch(model, log="all", log_freq=1)
model(*inputs()).sum().backward()
print("hooks while watched:", len(hooklab.all_hooks(model)))
wandb.unwatch(model)
wandb.finish()
print("hooks left after unwatch and finish:", len(hooklab.all_hooks(model)))
model(*inputs()).sum().backward()
print("the next forward and backward run")
"""},
    "wandb:facts.rewatch_after_unwatch": {
        "en": "watch the same model again with `log_graph=False` (its graph is already logged), or watch a new "
              "instance",
        "zh": "再次监视同一个模型时用 `log_graph=False`（它的图已经记录过了），或者监视一个新的模型实例",
        "code": """\
import wandb

import hooklab

_run()
torch.manual_seed(0)
model = build()
wandb.watch(model, log_graph=True)
wandb.unwatch(model)
wandb.watch(model, log="all", log_freq=1, log_graph=False)
print("watched again without log_graph; hooks on it:", len(hooklab.all_hooks(model)))
wandb.unwatch(model)
fresh = build()
fresh.load_state_dict(model.state_dict())
wandb.watch(fresh, log_graph=True)
print("a new instance with the same weights takes log_graph=True; hooks on it:", len(hooklab.all_hooks(fresh)))
wandb.unwatch()
wandb.finish()
"""},
    "wandb:probe.survives.deepcopy": {
        "en": "copy the model before `wandb.watch` (or after `wandb.unwatch`), then watch each model that should "
              "be logged",
        "zh": "在 `wandb.watch` 之前（或 `wandb.unwatch` 之后）拷贝模型，再分别监视每个需要记录的模型",
        "code": """\
import copy

import wandb

import hooklab

_run()
torch.manual_seed(0)
model = build()
twin = copy.deepcopy(model)
wandb.watch(model, log="all", log_freq=1)
wandb.watch(twin, log="all", log_freq=1)
print("hooks on the model:", len(hooklab.all_hooks(model)), "; on the copy:", len(hooklab.all_hooks(twin)))
twin(*inputs()).sum().backward()
print("the copy trains")
wandb.unwatch()
wandb.finish()
"""},
}

# Facts with nothing to do instead (the library works this way, or the fact only informs): why, in each language.
NO_FIX: dict[str, dict[str, str]] = {
    "captum:facts.gbp_relu_captum_hook_kinds": {
        "en": "only the kind of hook differs from captum's warning: your own backward hooks on the ReLU still fire, "
              "and captum removes its hooks when `attribute` returns.",
        "zh": "与 captum 的警告不同的只是钩子的种类：你自己挂在 ReLU 上的反向钩子照样触发，"
              "`attribute` 返回时 captum 也会删掉它的钩子。",
    },
    "mem_tracker:facts.during_the_block": {
        "en": "replacing `UntypedStorage.resize_` while the block runs is how `MemTracker` sees storages resized; "
              "leaving the block puts it back.",
        "zh": "块运行期间替换 `UntypedStorage.resize_` 正是 `MemTracker` 观察存储大小变化的方式；离开块就会还原。"},
}
