"""The hook doctor (``all_hooks`` / ``show_all_hooks`` / ``explain_hook``) on the libraries' wrappers: each setup
of notebook 15's review (s01-s21, s14b, and the three cases people bring most), checked against what the library
itself says it put there and against what plain PyTorch hooks see in the same step.

Each test builds its setup small, runs the step once plainly (the truth: which hook fired, on which module, how
often) and then under ``explain_hook``, and checks the verdict: the right systems and owners listed, a remove hint
that works, the right cause, and the doctor changing nothing it watches.
"""
from __future__ import annotations

import copy
import logging
import warnings

import pytest
import torch
from torch import nn

import hooklab
from hooklab import all_hooks, explain_hook, no_hooks_left_behind
from optional import needs

pytestmark = pytest.mark.timeout(300)


class TwoLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 6), nn.Linear(6, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def two_layers():
    torch.manual_seed(0)
    return TwoLayers()


def tiny_llama():
    transformers = needs("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.LlamaForCausalLM(config).eval()


def rows(model):
    return [(r.where, r.kind, r.owner) for r in all_hooks(model)]


def counting(log):
    def hook(module, args, output):
        log.append(module)
    return hook


# ------------------------------------------------------------------------------------------------ accelerate
def test_s01_dispatched_checkpoint_on_cpu_and_disk(tmp_path):
    accelerate = needs("accelerate")
    torch.manual_seed(0)
    source = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    torch.save(source.state_dict(), tmp_path / "model.pt")
    with accelerate.init_empty_weights():
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    seen = []
    model[2].register_forward_pre_hook(lambda m, a: seen.append(m.weight.device.type))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = accelerate.load_checkpoint_and_dispatch(model, str(tmp_path / "model.pt"),
                                                        device_map={"0": "cpu", "1": "cpu", "2": "disk"},
                                                        offload_folder=str(tmp_path / "offload"))
    found = rows(model)
    assert ("Sequential", "device map", "accelerate") in found
    assert ("2", "forward replaced", "accelerate") in found and ("2.weight", "on meta device",
                                                                  "accelerate or diffusers (offloading)") in found
    x = torch.ones(1, 4)
    assert torch.allclose(model(x), source(x))
    report = explain_hook(model, "2", run=lambda: model(x))
    assert seen == ["meta", "meta"] and report.calls == 1  # plain PyTorch: the pre-hook saw the weight on meta
    assert any("accelerate replaced its forward" in r for r in report.reasons)


def test_s02_cpu_offload_with_hook_names_the_returned_hook():
    accelerate = needs("accelerate")
    model = two_layers()
    model, hook = accelerate.cpu_offload_with_hook(model, execution_device="cpu")
    (record,) = [r for r in all_hooks(model) if r.kind == "forward replaced"]
    assert "CpuOffload" in record.what and "hook.remove()" in record.remove
    hook.remove()
    assert [r for r in all_hooks(model) if r.kind == "forward replaced"] == []


def test_s20_a_forward_patched_over_accelerates_is_listed_as_well():
    accelerate = needs("accelerate")
    model = two_layers()
    accelerate.cpu_offload(model, execution_device="cpu")
    accelerates = model.fc1.forward
    model.fc1.forward = lambda x: accelerates(x) * 2  # the user's wrapper over accelerate's replacement
    found = [(r.kind, r.owner, r.remove) for r in all_hooks(model) if r.where == "fc1"]
    assert [(k, o) for k, o, _ in found] == [("forward replaced", "test_doctor_setups"),
                                              ("forward replaced", "accelerate")]
    assert "del module.forward would drop accelerate's too" in found[0][2]
    needs("accelerate.hooks").remove_hook_from_module(model, recurse=True)


def test_r1_a_step_that_raises_is_explained_and_its_traceback_kept():
    """The case users bring most: after offloading, a hook builds a tensor on module.weight.device (meta)."""
    accelerate = needs("accelerate")
    model = two_layers()
    accelerate.cpu_offload(model, execution_device="cpu")

    def scale_on_weight_device(module, args, output):
        return output * torch.ones(output.shape[-1], device=module.weight.device)
    model.fc1.register_forward_hook(scale_on_weight_device)
    x = torch.ones(1, 4)
    with pytest.raises(Exception) as plain:
        model(x)  # plain PyTorch: the same error without the doctor
    with no_hooks_left_behind(model), pytest.raises(type(plain.value)) as explained:
        explain_hook(model, "fc1", run=lambda: model(x))
    error = explained.value
    report = error.hooklab_explanation
    assert str(error) == str(plain.value)  # the user's exception, unchanged
    frames = [f.name for f in __import__("traceback").extract_tb(error.__traceback__)]
    assert "scale_on_weight_device" in frames  # the user's traceback is kept
    assert report.calls == 1 and report.error.startswith(type(plain.value).__name__)
    assert report.reasons[0].startswith("the step raised")
    assert any("accelerate replaced its forward" in r for r in report.reasons)
    notes = getattr(error, "__notes__", [])
    assert notes and "explain_hook saw, up to this error" in notes[-1] and "fc1" in notes[-1]
    needs("accelerate.hooks").remove_hook_from_module(model, recurse=True)


# ------------------------------------------------------------------------------------------------ diffusers
def tiny_unet():
    diffusers = needs("diffusers")
    torch.manual_seed(0)
    return diffusers.UNet2DModel(sample_size=8, in_channels=1, out_channels=1, layers_per_block=1,
                                 block_out_channels=(8, 16), norm_num_groups=4,
                                 down_block_types=("DownBlock2D", "DownBlock2D"),
                                 up_block_types=("UpBlock2D", "UpBlock2D")).eval()


def test_s03_group_offloading_registries_are_listed():
    needs("diffusers")
    from diffusers.hooks import apply_group_offloading
    unet = tiny_unet()
    apply_group_offloading(unet, onload_device=torch.device("cpu"), offload_device=torch.device("cpu"),
                           offload_type="leaf_level")
    registries = [n for n, m in unet.named_modules() if "_diffusers_hook" in m.__dict__]
    listed = [r.where for r in all_hooks(unet) if r.kind == "forward replaced" and r.owner == "diffusers"]
    assert listed and sorted(listed) == sorted(n or "UNet2DModel" for n in registries)


def test_s04_a_pipeline_is_no_module_and_the_message_names_its_models():
    diffusers = needs("diffusers")
    pipe = diffusers.DDPMPipeline(unet=tiny_unet(), scheduler=diffusers.DDPMScheduler(num_train_timesteps=2))
    pipe.unet.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.float32)
    for tool in (hooklab.all_hooks, hooklab.show_all_hooks):
        with pytest.raises(TypeError, match=r"a pipeline is not a module: pass one of its models, e\.g\. pipe\.unet"):
            tool(pipe)
    with pytest.raises(TypeError, match="pipe.unet"):
        explain_hook(pipe, "conv_in", run=lambda: None)
    log = []
    pipe.unet.conv_in.register_forward_hook(counting(log))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = explain_hook(pipe.unet, "conv_in", run=lambda: pipe(batch_size=1, num_inference_steps=2,
                                                                     output_type="np"))
    assert len(log) == 2 and report.calls == 2 and any("called 2 times" in r for r in report.reasons)


# ------------------------------------------------------------------------------------------------ PEFT
def test_s05_s06_s07_adapters_of_lora_ia3_and_loha_are_named():
    peft = needs("peft")
    model = peft.get_peft_model(two_layers(), peft.LoraConfig(r=2, target_modules=["fc1"]))
    model.add_adapter("second", peft.LoraConfig(r=2, target_modules=["fc1"]))
    model.set_adapter("second")
    (lora,) = [r.what for r in all_hooks(model) if r.kind == "adapter layer"]
    assert "adapters ['default', 'second'], active ['second']" in lora
    for config, cls in ((peft.IA3Config(target_modules=["fc1"], feedforward_modules=["fc1"]), "IA3"),
                        (peft.LoHaConfig(r=2, target_modules=["fc1"]), "LoHa")):
        wrapped = peft.get_peft_model(two_layers(), config)
        layer = wrapped.base_model.model.fc1
        truth = sorted({k for n in layer.adapter_layer_names for k in getattr(layer, n).keys()})
        (what,) = [r.what for r in all_hooks(wrapped) if r.kind == "adapter layer"]
        assert truth == ["default"] and f"adapters {truth}" in what, (cls, what)


def test_s08_prompt_tuning_prefix_and_the_virtual_tokens():
    peft = needs("peft")
    model = peft.get_peft_model(tiny_llama(), peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=3))
    names = dict(model.named_modules())
    assert "base_model.model.embed_tokens" in names and "base_model.model.model.embed_tokens" not in names
    (wrapper,) = [r.what for r in all_hooks(model) if r.kind == "wrapper" and r.owner == "peft"]
    assert "prefix 'base_model.'" in wrapper
    (prompt,) = [r.what for r in all_hooks(model) if r.kind == "prompt learning"]
    assert "3 virtual token(s)" in prompt
    lengths = {}

    def length(name):
        def hook(module, args, out):
            lengths.setdefault(name, (out[0] if isinstance(out, tuple) else out).shape[1])
        return hook
    for name in ("base_model.model.embed_tokens", "base_model.model.layers.0"):
        names[name].register_forward_hook(length(name))
    with torch.no_grad():
        model(input_ids=torch.tensor([[5, 6, 7, 8]]))
    assert lengths == {"base_model.model.embed_tokens": 4, "base_model.model.layers.0": 7}  # the row's claim


def test_s09_modules_to_save_copy_carries_the_hook_and_runs_instead():
    peft = needs("peft")
    base, log = two_layers(), []
    base.fc2.register_forward_hook(counting(log))
    model = peft.get_peft_model(base, peft.LoraConfig(r=2, target_modules=["fc1"], modules_to_save=["fc2"]))
    x = torch.ones(1, 4)
    model(x)
    copy_ = model.base_model.model.fc2.modules_to_save["default"]
    assert len(log) == 1 and log[0] is copy_  # plain PyTorch: the hook fired on the copy
    log.clear()
    report = explain_hook(model, "base_model.model.fc2.original_module", run=lambda: model(x))
    assert len(log) == 1 and report.cause == "copy"
    assert report.fired == {"counting.hook (forward)": {"a copy inside the model (carries the same hooks)": 1}}
    assert "'base_model.model.fc2.modules_to_save.default'" in report.reasons[0]
    assert "modules_to_save" in report.reasons[0] and "MultiheadAttention" not in str(report)
    wrapper = [r.what for r in all_hooks(model) if r.where == "base_model.model.fc2" and r.kind == "wrapper"]
    assert wrapper and "ModulesToSaveWrapper" in wrapper[0]


def test_s21_input_require_grads_hooks_get_a_remove_that_works():
    peft = needs("peft")
    model = tiny_llama()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.gradient_checkpointing_enable()
    peft_model = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["q_proj"]))
    embed = model.model.embed_tokens
    found = [r for r in all_hooks(peft_model) if r.what.endswith("make_inputs_require_grads")]
    assert len(found) == len(embed._forward_hooks) == 2  # registered twice, as plain PyTorch shows
    assert not any("none needed" in r.remove for r in found)
    kept = [r for r in found if "disable_input_require_grads()" in r.remove]
    lost = [r for r in found if "handle is lost" in r.remove]
    assert len(kept) == 1 and len(lost) == 1
    model.disable_input_require_grads()
    key = int(__import__("re").search(r"_forward_hooks\.pop\((\d+)\)", lost[0].remove)[1])
    embed._forward_hooks.pop(key)
    assert [r for r in all_hooks(peft_model) if r.what.endswith("make_inputs_require_grads")] == []


def test_s17_output_capturing_hooks_belong_to_transformers():
    model = tiny_llama()
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), output_hidden_states=True, output_attentions=True)
    found = [r for r in all_hooks(model) if r.owner == "transformers"]
    assert found and all("output capturing" in r.remove for r in found)


# ------------------------------------------------------------------------------------------------ captum, ao, torchao
def test_s10_captum_hooks_seen_while_attributing():
    captum_attr = needs("captum.attr")
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 2))
    model[0].register_forward_hook(lambda m, a, o: None)
    snapshot = []
    handle = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda m, a: snapshot.append(rows(model)) if m is model and not snapshot else None)
    try:
        captum_attr.LayerGradCam(model, model[0]).attribute(torch.randn(1, 1, 6, 6), target=0)
    finally:
        handle.remove()
    owners = {owner for where, kind, owner in snapshot[0] if where == "0"}
    assert owners == {"captum", "test_doctor_setups"}
    assert rows(model) == [("0", "forward", "test_doctor_setups")]


def test_s12_fx_quantization_observers_and_r3_an_observer_that_never_ran():
    needs("torch.ao.quantization.quantize_fx")
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_fx

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = prepare_fx(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)).eval(),
                              get_default_qconfig_mapping("fbgemm"), (torch.ones(1, 4),))
    x = torch.ones(1, 4)
    for calibrated in (False, True):
        if calibrated:
            prepared(x)
        observers = {r.where: r.what for r in all_hooks(prepared) if r.kind == "observer"}
        truth = {n: bool(torch.isfinite(m.min_val).all()) for n, m in prepared.named_modules()
                 if "activation_post" in n}
        assert observers and {n: "saw data" in w for n, w in observers.items()} == truth
        assert set(truth.values()) == {calibrated}
    assert [r.what.split(":")[0] for r in all_hooks(prepared) if r.kind == "fused"] == ["LinearReLU"]
    # eager prepare: an observer whose branch calibration never took is explained by that first
    import torch.ao.quantization as tq

    class Eager(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
            self.a, self.branch = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x, branch=False):
            y = self.a(self.quant(x))
            return self.dequant(self.branch(y) if branch else y)
    model = Eager().eval()
    model.qconfig = tq.default_qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager = tq.prepare(model)
    report = explain_hook(eager, "branch.activation_post_process", run=lambda: eager(x))
    assert report.calls == 0 and report.cause == "not reached"
    assert report.reasons[0].startswith("'branch.activation_post_process' is a quantization observer") and \
        "'branch' was not called" in report.reasons[0]


def test_r2_a_batchnorm_folded_by_fuse_conv_bn_eval_is_named_as_fused():
    from torch.nn.utils.fusion import fuse_conv_bn_eval
    torch.manual_seed(0)
    model, log = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU()).eval(), []
    model[1].register_forward_hook(counting(log))
    fused = nn.Sequential(fuse_conv_bn_eval(model[0], model[1]), model[2])  # what an inference optimizer does
    x = torch.randn(1, 1, 5, 5)
    assert torch.allclose(fused(x), model(x), atol=1e-5)
    log.clear()
    report = explain_hook(model, "1", run=lambda: fused(x))
    assert log == [] and report.calls == 0 and report.cause == "fused"
    assert "fuse_conv_bn_eval" in report.reasons[0] and "3 output channels" in report.reasons[0]


def test_s11_torchao_dynamic_quantization_is_listed():
    quant_api = needs("torchao.quantization")
    model = nn.Sequential(nn.Linear(16, 16))
    quant_api.quantize_(model, quant_api.Int8DynamicActivationInt8WeightConfig())
    assert [(r.where, r.owner) for r in all_hooks(model) if r.kind == "tensor subclass"] == [("0.weight", "torchao")]


# ------------------------------------------------------------------------------------------------ Lightning
def test_s13_lightning_trainer_adds_no_hooks_and_calls_are_counted(tmp_path):
    pl = needs("pytorch_lightning")
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = two_layers()

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)
    module, log = Module(), []
    module.net.fc1.register_forward_hook(counting(log))
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 4)), batch_size=1)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=[pl.callbacks.GradientAccumulationScheduler({0: 2})])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = explain_hook(module, "net.fc1", run=lambda: trainer.fit(module, data))
    assert len(log) == 4 and report.calls == 4 and any("called 4 times" in r for r in report.reasons)
    assert rows(module) == [("net.fc1", "forward", "test_doctor_setups")]


# ------------------------------------------------------------------------------------------------ compile, script, export
def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


@pytest.mark.pin  # what torch.compile does with hooks added after compiling changes between releases
def test_s14_compiled_wrapper_with_the_wrappers_names():
    from torch._dynamo.utils import counters
    torch._dynamo.reset()  # code compiled for a model of the same structure would be reused, without its hooks
    model, log = mlp(), []
    compiled = torch.compile(model, backend="eager")
    x = torch.ones(1, 3)
    compiled(x)
    model[0].register_forward_hook(counting(log))
    compiled(x)
    assert log == []  # plain PyTorch: a hook added after the first compiled call does not run
    graphs = counters["stats"]["unique_graphs"]
    for target, name in ((compiled, "_orig_mod.0"), (model, "0")):
        report = explain_hook(target, name, run=lambda: compiled(x))
        assert report.cause == "compiled" and "compiled code ran instead" in report.reasons[0], name
        assert "did not run in this step" not in str(report)
    assert log == [] and counters["stats"]["unique_graphs"] == graphs  # the doctor made nothing recompile


@pytest.mark.pin
def test_s14b_hooks_compiled_in_and_in_place_compile_are_not_changed_by_the_doctor():
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    model, log = mlp(), []
    model[0].register_forward_hook(counting(log))  # before compiling: traced into the compiled code
    compiled = torch.compile(model, backend="eager")
    x = torch.ones(1, 3)
    compiled(x)
    assert len(log) == 1
    report = explain_hook(compiled, "_orig_mod.0", run=lambda: compiled(x))
    assert len(log) == 2 and report.cause == "compiled"  # it ran, compiled in: the doctor says so, not "0 fired"
    assert "Hooks present when this code was compiled run inside it" in report.reasons[0]
    assert "fired as expected" not in str(report)

    in_place, log = mlp(), []
    in_place.compile(backend="eager")
    in_place(x)
    in_place[0].register_forward_hook(counting(log))
    in_place(x)
    assert log == []  # plain PyTorch: not in the compiled code
    graphs = counters["stats"]["unique_graphs"]
    report = explain_hook(in_place, "0", run=lambda: in_place(x))
    assert log == [] and counters["stats"]["unique_graphs"] == graphs  # the doctor changed nothing
    assert report.cause == "compiled" and "compiled in place" in report.reasons[0]


def test_s15_torchscript_is_named_and_refused_with_what_to_do():
    from typing import Tuple  # noqa: UP035 - TorchScript reads the annotation

    def hook(module, args: Tuple[torch.Tensor], output: torch.Tensor):  # noqa: UP006
        return output
    model = mlp()
    model[0].register_forward_hook(hook)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(model)
    found = all_hooks(scripted)
    assert [r.kind for r in found] == ["TorchScript", "forward"]
    assert not any("del module.forward" in r.remove for r in found)
    assert found[1].owner == "torch.jit (compiled in by scripting)" and found[1].what == "hook (TorchScript)"
    with pytest.raises(TypeError, match="cannot watch a TorchScript module"):
        explain_hook(scripted, "0", run=lambda: scripted(torch.ones(1, 3)))
    report = explain_hook(model, "0", run=lambda: scripted(torch.ones(1, 3)))
    assert report.cause == "scripted" and "TorchScript module ran instead" in report.reasons[0]


def test_s16_exported_program_hint_and_its_module():
    model, log = mlp(), []
    x = torch.ones(1, 3)
    program = torch.export.export(model, (x,))
    with pytest.raises(TypeError, match=r"pass ep\.module\(\)"):
        all_hooks(program)
    with pytest.raises(TypeError, match=r"pass ep\.module\(\)"):
        explain_hook(program, "0", run=lambda: None)
    module = program.module()
    found = all_hooks(module)
    torch_made = [r for r in found if r.kind != "FX graph"]
    assert torch_made and all(r.owner in ("torch.export", "torch") for r in torch_made)
    assert not any("del module.forward" in r.remove or "it kept the handle" in r.remove for r in found)
    model[0].register_forward_hook(counting(log))
    report = explain_hook(model, "0", run=lambda: module(x))
    assert log == [] and report.cause == "graph"


def test_s18_peft_offload_and_compile_nested():
    peft, accelerate = needs("peft"), needs("accelerate")
    model = peft.get_peft_model(two_layers(), peft.LoraConfig(r=2, target_modules=["fc1"]))
    model.base_model.model.fc1.base_layer.register_forward_hook(lambda m, a, o: None)
    accelerate.cpu_offload(model, execution_device="cpu")
    compiled = torch.compile(model, backend="eager")
    owners = {r.owner for r in all_hooks(compiled)}
    assert {"torch.compile", "peft", "accelerate", "test_doctor_setups"} <= owners
    needs("accelerate.hooks").remove_hook_from_module(model, recurse=True)


def test_s09_doctor_does_not_keep_or_leave_anything():
    """Every explain_hook of this file registered nothing: the model's hook dicts are the same before and after."""
    model = two_layers()
    with no_hooks_left_behind(model):
        explain_hook(model, "fc1", run=lambda: copy.deepcopy(model)(torch.ones(1, 4)))
