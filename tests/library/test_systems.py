"""hooklab.all_hooks: every hook system on a model, checked against each library at the version uv.lock pins and
against what the library itself says it put there (its own attributes, hook dicts and APIs)."""
from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn

import hooklab
from hooklab import all_hooks, hook_inventory, show_all_hooks
from hooklab.systems import hook_owner
from optional import needs
from patience import hang_guard


def rows(model, where=None):
    return [(r.where, r.kind, r.owner) for r in all_hooks(model) if where is None or r.where == where]


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def user_hook(module, args, output):
    return None


def test_plain_pytorch_hooks_are_the_inventory_with_owner_and_removal():
    model = mlp()
    h1 = model[0].register_forward_hook(user_hook)
    h2 = model[2].bias.register_hook(lambda grad: None)
    try:
        records = all_hooks(model)
        assert [(r.where, r.kind, r.what) for r in records] == [
            (e.where, e.kind, e.hook) for e in hook_inventory(model, include_global=False)]
        assert {r.owner for r in records} == {"test_systems"}  # the module that defined the hooks
        assert "handle.remove()" in records[0].remove and "register_forward_hook" in records[0].remove
    finally:
        h1.remove()
        h2.remove()
    assert all_hooks(model) == []


def test_owner_is_where_the_hook_was_defined():
    from torch.nn.utils import prune
    layer = prune.l1_unstructured(nn.Linear(2, 2), "weight", amount=0.5)
    (hook,) = layer._forward_pre_hooks.values()
    assert hook_owner(hook) == "torch.nn.utils.prune"
    assert hook_owner(user_hook) == "test_systems"
    main = type(user_hook)(user_hook.__code__, {"__name__": "__main__"})
    assert hook_owner(main) == "your code"
    (record,) = all_hooks(layer)
    assert record.remove == "torch.nn.utils.prune.remove(module, 'weight')"
    assert "weight_orig.grad" in record.what
    prune.remove(layer, "weight")
    assert all_hooks(layer) == []


def test_parametrizations_are_listed_and_their_removal_works():
    layer = nn.Linear(3, 3)
    torch.nn.utils.parametrizations.weight_norm(layer)
    found = [r for r in all_hooks(layer) if r.kind == "parametrization"]
    assert [r.what for r in found] == ["weight: _WeightNorm (hook .original)"]
    exec(found[0].remove, {"torch": torch, "module": layer})
    assert not torch.nn.utils.parametrize.is_parametrized(layer)
    assert [r for r in all_hooks(layer) if r.kind == "parametrization"] == []


def test_a_forward_replaced_on_the_instance_is_listed_and_del_undoes_it():
    layer = nn.Linear(2, 2)
    layer.forward = lambda x: x * 0
    (record,) = all_hooks(layer)
    assert record.kind == "forward replaced" and record.owner == "test_systems"
    del layer.forward
    assert all_hooks(layer) == []
    layer.forward = layer.forward  # the class's own bound method set on the instance: nothing replaced
    assert all_hooks(layer) == []


def test_compiled_wrapper_and_in_place_compile_are_listed():
    layer = nn.Linear(2, 2)
    compiled = torch.compile(layer, backend="eager")
    assert rows(compiled, "OptimizedModule") == [("OptimizedModule", "compiled", "torch.compile")]
    assert all_hooks(layer) == []
    other = nn.Linear(2, 2)
    other.compile(backend="eager")
    assert [r.kind for r in all_hooks(other)] == ["compiled"]


def test_accelerate_hooks_listed_and_removed():
    accelerate_hooks = needs("accelerate.hooks")
    from accelerate import cpu_offload
    model = mlp()
    handle = model[0].register_forward_hook(user_hook)
    cpu_offload(model, execution_device="cpu")
    try:
        with_hf = [n for n, m in model.named_modules() if "_hf_hook" in m.__dict__]
        replaced = [r.where for r in all_hooks(model) if r.kind == "forward replaced"]
        assert replaced == ["Sequential", *with_hf[1:]] and len(with_hf) == 3
        assert {r.owner for r in all_hooks(model) if r.kind == "forward replaced"} == {"accelerate"}
        meta = [r.where for r in all_hooks(model) if r.kind == "on meta device"]
        assert meta == [n for n, p in model.named_parameters() if p.is_meta] == ["0.weight", "0.bias", "2.weight",
                                                                                   "2.bias"]
        assert ("0", "forward", "test_systems") in rows(model)  # the user's hook is still listed beside them
    finally:
        accelerate_hooks.remove_hook_from_module(model, recurse=True)
    assert rows(model) == [("0", "forward", "test_systems")]
    handle.remove()


def test_diffusers_registry_listed_and_removed():
    diffusers_hooks = needs("diffusers.hooks")
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    diffusers_hooks.apply_layerwise_casting(model[0], storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.float32)

    class Doubling(diffusers_hooks.ModelHook):
        def post_forward(self, module, output):
            return output * 2

    registry = diffusers_hooks.HookRegistry.check_if_exists_or_initialize(model[1])
    registry.register_hook(Doubling(), "doubling")
    found = {r.where: r for r in all_hooks(model) if r.kind == "forward replaced"}
    assert sorted(found) == ["0", "1"] and {r.owner for r in found.values()} == {"diffusers"}
    assert "layerwise_casting (LayerwiseCastingHook)" in found["0"].what
    assert "cannot be undone" in found["0"].remove  # diffusers raises NotImplementedError on removal
    assert found["1"].what == "HookRegistry: doubling (Doubling)"
    assert found["1"].remove == "module._diffusers_hook.remove_hook('doubling', recurse=True)"
    x = torch.ones(1, 2)
    doubled = model[1](x)
    exec(found["1"].remove, {"module": model[1]})
    assert torch.allclose(model[1](x) * 2, doubled)
    assert [r.where for r in all_hooks(model) if r.kind == "forward replaced"] == ["0"]


def test_peft_wrapper_and_adapter_layer():
    peft = needs("peft")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(4, 6), nn.Linear(6, 2)

        def forward(self, x):
            return self.fc2(self.fc1(x))

    model = peft.get_peft_model(Net(), peft.LoraConfig(r=2, target_modules=["fc1"]))
    layers = [n for n, m in model.named_modules() if isinstance(m, peft.tuners.tuners_utils.BaseTunerLayer)]
    found = [(r.where, r.kind) for r in all_hooks(model) if r.owner == "peft"]
    assert found == [("PeftModel", "wrapper"), *[(n, "adapter layer") for n in layers]]
    assert layers == ["base_model.model.fc1"]
    plain = model.merge_and_unload()
    assert [r for r in all_hooks(plain) if r.owner == "peft"] == []


def test_peft_not_imported_is_skipped(monkeypatch):
    # the probe reads sys.modules only: a library nobody imported is never imported by all_hooks
    for name in [n for n in sys.modules if n == "peft" or n.startswith("peft.")]:
        monkeypatch.setitem(sys.modules, name, None)
    assert all_hooks(mlp()) == []


def test_all_hooks_imports_no_library():
    code = ("import sys, torch; from torch import nn; import hooklab; "
            "hooklab.all_hooks(torch.compile(nn.Sequential(nn.Linear(2, 2)), backend='eager')); "
            "print(sorted(m for m in ('accelerate', 'diffusers', 'peft', 'torchao', 'captum', 'timm', "
            "'pytorch_lightning') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=hang_guard(120))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


class QuantNet(nn.Module):
    def __init__(self):
        super().__init__()
        import torch.ao.quantization as tq
        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        self.conv, self.bn, self.relu = nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU()
        self.branch = nn.Conv2d(2, 2, 1)

    def forward(self, x, branch=False):
        y = self.relu(self.bn(self.conv(self.quant(x))))
        return self.dequant(self.branch(y) if branch else y)


def quantize(calibrate_branch: bool):
    import torch.ao.quantization as tq
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notes
        torch.manual_seed(0)
        model = tq.fuse_modules(QuantNet().eval(), [["conv", "bn", "relu"]])
        model.qconfig = tq.default_qconfig
        prepared = tq.prepare(model)
        prepared(torch.randn(2, 1, 6, 6), branch=calibrate_branch)
    return prepared


def test_quantization_observers_and_their_calibration():
    prepared = quantize(calibrate_branch=False)
    observers = {r.where: r.what for r in all_hooks(prepared) if r.kind == "observer"}
    truth = {n: bool(torch.isfinite(m.min_val).all()) for n, m in prepared.named_modules()
             if n.endswith("activation_post_process")}
    assert sorted(observers) == sorted(truth)
    assert {n: "saw data" in what for n, what in observers.items()} == truth
    assert truth["branch.activation_post_process"] is False and "never ran" in observers[
        "branch.activation_post_process"]
    observer_hooks = [r.where for r in all_hooks(prepared) if r.what == "_observer_forward_hook"]
    assert observer_hooks == ["quant", "conv", "branch"]
    assert {r.owner for r in all_hooks(prepared) if r.what == "_observer_forward_hook"} == {"torch.ao.quantization"}
    assert [r.where for r in all_hooks(prepared) if r.kind == "fused"] == ["conv"]
    calibrated = quantize(calibrate_branch=True)
    assert all("saw data" in r.what for r in all_hooks(calibrated) if r.kind == "observer")


def test_torchao_tensor_subclass_is_listed():
    quant_api = needs("torchao.quantization")
    model = nn.Sequential(nn.Linear(16, 16))
    quant_api.quantize_(model, quant_api.Int8WeightOnlyConfig())
    subclass = [(r.where, r.owner) for r in all_hooks(model) if r.kind == "tensor subclass"]
    assert subclass == [("0.weight", "torchao")] and type(model[0].weight).__name__ in all_hooks(model)[0].what


@pytest.fixture
def one_process_group():
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_fsdp2_tensor_parallel_and_ddp(one_process_group):
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    except ImportError as exc:  # hooklab's torch floor (./course rerun --library-only) predates the public FSDP2
        pytest.skip(f"FSDP2 / tensor parallelism as torch.distributed.fsdp / tensor exports them: {exc}")

    sharded = mlp()
    fully_shard(sharded[0])
    fully_shard(sharded)
    found = rows(sharded)
    assert ("0", "FSDP2", "FSDP2") in found and ("FSDPSequential", "FSDP2", "FSDP2") in found
    assert ("0", "forward_pre", "FSDP2") in found and ("0", "forward", "FSDP2") in found
    assert [w for w, k, _ in found if k == "DTensor"] == [n for n, _ in sharded.named_parameters()]

    parallel = mlp()
    parallelize_module(parallel, init_device_mesh("cpu", (1,)), {"0": ColwiseParallel(), "2": RowwiseParallel()})
    tp = [(w, k) for w, k, owner in rows(parallel) if owner == "tensor parallel (DTensor)"]
    assert tp == [("0", "forward_pre"), ("0", "forward"), ("2", "forward_pre"), ("2", "forward")]

    ddp = nn.parallel.DistributedDataParallel(mlp())
    assert rows(ddp, "DistributedDataParallel") == [("DistributedDataParallel", "wrapper", "torch.distributed")]


def test_show_all_hooks_prints_a_table(capsys):
    layer = nn.Linear(2, 2)
    assert show_all_hooks(layer) == []
    assert capsys.readouterr().out.strip() == "no hooks, wrappers or replaced forwards"
    with hooklab.HookScope() as scope:
        scope.add(layer.register_forward_pre_hook(lambda m, a: None))
        records = show_all_hooks(layer, name="lin")
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["where", "kind", "what", "owner", "remove"]
    assert out[1].startswith("lin ") and records[0].where == "lin"


@pytest.mark.parametrize("bad, message", [(torch.ones(2), "for a tensor or an optimizer use hooklab.hook_inventory"),
                                          ("model", "all_hooks takes an nn.Module")])
def test_bad_input_says_what_to_pass(bad, message):
    with pytest.raises(TypeError, match=message):
        all_hooks(bad)
    with pytest.raises(TypeError, match="name is a prefix"):
        all_hooks(nn.Linear(2, 2), name=3)
