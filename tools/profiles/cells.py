"""The cells of the library matrix: a library's operation (:mod:`.operations`) × a hook family × when the hook was
registered (before the operation or after it), each observed by running it; the truth is what the hooks themselves
recorded.

    python -m tools.profiles.cells                    # observe every case of CASES and print the cells
    python -m tools.profiles.cells --write            # ... and write docs/library_matrix.json (and
                                                      #     hooklab/course/assets/profiles/library_rows.json)
    python -m tools.profiles.cells --check [--only K]   # whether the committed cells are what runs now

A **case** (:data:`CASES`) says how one operation runs on its library profile's small model (``build``, ``inputs``,
``loss`` and ``TARGET`` of ``tools/profiles/libraries/<slug>.py``): what comes before it (``setup``: ``merge_and_unload``
needs a model ``get_peft_model`` made) and the call itself (``operate``, which returns the model a user goes on with).
For each family of :data:`FAMILIES`, the hook is registered on the profile's target module (or its first parameter,
or around the run), once on the model before the operation and once on what the operation returned (the target
looked up again by its path, or a path ending with it). Then the model runs: a forward, a backward of the profile's
loss, ``state_dict()`` and ``load_state_dict()`` of it; then the hook's handle is removed, the gradients are set to
None (``model.zero_grad(set_to_none=True)``) and the same runs again.
A hook registered before may also fire during the operation itself (``save_pretrained`` reads the state dict).

Each cell records, in words that do not depend on the machine: how often the hook fired in each phase, what it was
given (the target after the operation, the module it was registered on before it, or another object), whether it
still fired after ``handle.remove()``, and the first error a phase raised. The optimizer families are not cells here:
a hook on an optimizer fires when that optimizer steps, whatever a library did to the model.

**Held out**: :func:`is_held_out` draws each cell the operations table makes (not only the cells that have a case
yet) into the held-out part with a chance of 20 %, seeded by :data:`HELD_OUT_SEED` (fixed before any cell was
observed or described) and the cell's key, so a cell stays where it was drawn as the table grows; those cells are to
be checked by a test written without this module.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.ao import quantization
from torch.nn.utils import parametrize

from . import operations, rows

ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "docs" / "library_matrix.json"
HELD_OUT_SEED = 7901  # fixed before any cell was observed
HELD_OUT_SHARE = 0.2
WHEN = ("before", "after")
PHASES = ("operation", "forward", "backward", "state_dict", "load_state_dict")  # "operation": during the call itself


# ---- the families: how each registers a recording hook -----------------------------------------------------------

@dataclass
class Place:
    """Where a family's hook goes: the model a user holds, its target module and the target's first parameter."""

    model: nn.Module
    target: nn.Module
    parameter: torch.Tensor | None


Log = list  # of (phase, what the hook was given)
_phase = ["setup"]


def _note(log: Log, given: Any) -> None:
    log.append((_phase[0], given))


def _scope(enter: Callable[[], Any]) -> Any:
    """A handle for a hook that is a context entered now: ``remove()`` exits it."""
    stack = contextlib.ExitStack()
    stack.enter_context(enter())

    class Handle:
        def remove(self) -> None:
            stack.close()
    return Handle()


# A module's forward (pre-)hooks are functions defined with ``def`` and named ``hook``, as a user writes them:
# TorchScript compiles them from their source when it scripts the module, and names them in its errors (a lambda
# fails to parse there, with a SyntaxError no user's hook meets).
def _forward_pre_hook(log: Log) -> Callable[[nn.Module, Any], None]:
    def hook(module, args):  # no annotations, as a user writes it (TorchScript reads them)
        _note(log, module)
    return hook


def _forward_pre_hook_with_kwargs(log: Log) -> Callable[[nn.Module, Any, Any], None]:
    def hook(module, args, kwargs):
        _note(log, module)
    return hook


def _forward_hook(log: Log) -> Callable[[nn.Module, Any, Any], None]:
    def hook(module, args, output):
        _note(log, module)
    return hook


FAMILIES: dict[str, Callable[[Place, Log], Any]] = {
    "forward-pre-hook": lambda p, log: p.target.register_forward_pre_hook(_forward_pre_hook(log)),
    "forward-pre-hook-with-kwargs": lambda p, log: p.target.register_forward_pre_hook(
        _forward_pre_hook_with_kwargs(log), with_kwargs=True),
    "forward-hook": lambda p, log: p.target.register_forward_hook(_forward_hook(log)),
    "forward-hook-always-call": lambda p, log: p.target.register_forward_hook(_forward_hook(log), always_call=True),
    "backward-pre-hook": lambda p, log: p.target.register_full_backward_pre_hook(lambda m, go: _note(log, m)),
    "full-backward-hook": lambda p, log: p.target.register_full_backward_hook(lambda m, gi, go: _note(log, m)),
    "param-hook": lambda p, log: p.parameter.register_hook(lambda g, t=p.parameter: _note(log, t)),
    "post-accumulate-grad-hook": lambda p, log: p.parameter.register_post_accumulate_grad_hook(
        lambda t: _note(log, t)),
    "state-dict-pre-hook": lambda p, log: p.target.register_state_dict_pre_hook(lambda m, *a: _note(log, m)),
    "state-dict-post-hook": lambda p, log: p.target.register_state_dict_post_hook(lambda m, *a: _note(log, m)),
    "load-state-dict-pre-hook": lambda p, log: p.target.register_load_state_dict_pre_hook(
        lambda m, *a: _note(log, m)),
    "load-state-dict-post-hook": lambda p, log: p.target.register_load_state_dict_post_hook(
        lambda m, incompatible: _note(log, m)),
    "global-forward-hook": lambda p, log: nn.modules.module.register_module_forward_hook(
        lambda m, a, o: _note(log, m)),
    "global-full-backward-hook": lambda p, log: nn.modules.module.register_module_full_backward_hook(
        lambda m, gi, go: _note(log, m)),
    "saved-tensors-pack": lambda p, log: _scope(lambda: torch.autograd.graph.saved_tensors_hooks(
        lambda t: (_note(log, t), t)[1], lambda t: t)),
}
GLOBAL = ("global-forward-hook", "global-full-backward-hook", "saved-tensors-pack")  # they see every module / tensor


# ---- the cases: how each operation runs ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """How ``operation`` (a name of :mod:`.operations`' table, ``<slug>:<name>``) runs on its profile's model."""

    operation: str
    operate: Callable[[nn.Module], nn.Module]
    setup: Callable[[nn.Module], nn.Module] = lambda model: model
    profile: str | None = None  # the profile whose model it runs on, when not the operation's own library's
    teardown: Callable[[], None] | None = None  # what the operation left in the process, taken away after each cell

    @property
    def slug(self) -> str:
        return self.operation.split(":")[0]


_GROUP: list[str] = []  # the folder of the process group's FileStore, while one is up


def _one_process_group() -> None:
    """A gloo process group of this one process (world size 1), as FSDP2 and tensor parallelism need one; taken
    down after each cell (:func:`_no_process_group`), so that no other case runs in a distributed process."""
    import torch.distributed as dist
    if not dist.is_initialized():
        folder = tempfile.mkdtemp(prefix="hooklab-cells-")
        _GROUP.append(folder)
        dist.init_process_group("gloo", store=dist.FileStore(folder + "/store", 1), rank=0, world_size=1)


def _no_process_group() -> None:
    import shutil

    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()
    while _GROUP:
        shutil.rmtree(_GROUP.pop(), ignore_errors=True)


def _in_one_process_group(slug: str) -> Callable[[nn.Module], nn.Module]:
    """The profile's own entry point (FSDP2's ``fully_shard`` of the first Linear then the model, tensor
    parallelism's ``parallelize_module`` on a one-rank CPU mesh) in a group this module makes first, so that the
    profile's (kept until its measuring process exits) is not made and the group goes after each cell."""
    apply = _profile_apply(slug)

    def run(model: nn.Module) -> nn.Module:
        _one_process_group()
        return apply(model)
    return run


_NOTRACE: list[type] = []  # the classes the operation added to timm's registry of modules FX does not trace into


def _not_traced(model: nn.Module) -> nn.Module:
    """timm's ``register_notrace_module`` on the class of the model's first block (FX feature extraction then keeps
    it a leaf); a registry of the process, which :func:`_notrace_undone` puts back after each cell."""
    from timm.layers import _fx
    block = type(model.layer1[0])
    if block not in _fx.get_notrace_modules():
        _NOTRACE.append(block)
    _fx.register_notrace_module(block)
    return model


def _notrace_undone() -> None:
    from timm.layers import _fx
    while _NOTRACE:
        _fx._leaf_modules.discard(_NOTRACE.pop())


def _torchao_loaded(model: nn.Module) -> nn.Module:
    """The model saved and loaded again quantized by torchao (int8 weights of its Linear layers), the one quantizer of
    diffusers that runs on a CPU and can be undone (``dequantize``)."""
    from diffusers import TorchAoConfig
    from torchao.quantization import Int8WeightOnlyConfig
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        return type(model).from_pretrained(folder, quantization_config=TorchAoConfig(Int8WeightOnlyConfig()),
                                           torch_dtype=torch.float32)


def _saved_and_loaded(model: nn.Module) -> nn.Module:
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        return type(model).from_pretrained(folder)


def _dispatched(model: nn.Module) -> nn.Module:
    from accelerate import dispatch_model
    return dispatch_model(model, device_map={"": "cpu"})


def _same(call: Callable[[nn.Module], Any]) -> Callable[[nn.Module], nn.Module]:
    """An operation that changes the model in place and returns something else (or nothing): the model goes on."""
    return lambda model: (call(model), model)[1]


def _profile_apply(slug: str, step: str = "apply") -> Callable[[nn.Module], nn.Module]:
    """The library profile's own entry point (``tools/profiles/libraries/<slug>.py``'s ``apply``), or its way to
    take it off (``step="remove"``)."""
    def run(model: nn.Module) -> nn.Module:
        from tools.profiles.libraries import modules
        return getattr(modules()[slug], step)(model)
    return run


_peft = _profile_apply("peft")


def _quantization_prepared(model: nn.Module) -> nn.Module:
    from tools.profiles.libraries import torch_ao_quantization
    model = torch_ao_quantization.apply(model.eval())
    model(*torch_ao_quantization.inputs())  # calibration
    return model


class _Doubled(nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight * 2


def _parametrized(model: nn.Module) -> nn.Module:
    parametrize.register_parametrization(model[0], "weight", _Doubled())
    return model


def _grad_cam(model: nn.Module) -> nn.Module:
    from captum.attr import LayerGradCam

    from tools.profiles.libraries import captum
    LayerGradCam(model, model[0]).attribute(*captum.inputs(), target=0)
    return model


def _entered(model: nn.Module) -> nn.Module:
    """Inside ``with peft_model.disable_adapter():`` (entered and left open: the run happens inside it)."""
    context = model.disable_adapter()
    context.__enter__()
    model._hooklab_open_context = context  # kept alive while the model is
    return model


def _in_folder(call: Callable[[nn.Module, str], Any]) -> Callable[[nn.Module], nn.Module]:
    """``call(model, folder)`` with a temporary folder that is removed afterwards; the model goes on."""
    def run(model: nn.Module) -> nn.Module:
        with tempfile.TemporaryDirectory() as folder:
            call(model, folder)
        return model
    return run


_saved = _in_folder(lambda model, folder: model.save_pretrained(folder))


def _generated(model: nn.Module) -> nn.Module:
    from tools.profiles.libraries import transformers as profile
    model.generate(*profile.inputs(), max_new_tokens=2, do_sample=False)
    return model


def _peft_state_dict(model: nn.Module) -> nn.Module:
    from peft import get_peft_model_state_dict
    get_peft_model_state_dict(model)
    return model


def _second_adapter(model: nn.Module) -> nn.Module:
    from peft import LoraConfig
    model.add_adapter("second", LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    return model


def _loha(model: nn.Module) -> nn.Module:
    """A PEFT model of another method than LoRA (LoHa), which ``convert_to_lora`` and ``save_as_lora`` take."""
    from peft import LoHaConfig, get_peft_model
    return get_peft_model(model, LoHaConfig(r=2, target_modules=["q_proj", "v_proj"], init_weights=False))


def _converted_to_lora(model: nn.Module) -> Any:
    from peft import convert_to_lora
    return convert_to_lora(model, 2)


def _saved_as_lora(model: nn.Module, folder: str) -> None:
    from peft import save_as_lora
    save_as_lora(folder, model, 2)


def _eva_state_read(model: nn.Module) -> nn.Module:
    """``get_eva_state_dict`` on four batches of the profile's input: EVA's SVD of each target layer's inputs, which
    it collects with forward hooks of its own; the model goes on unchanged."""
    from peft import EvaConfig, LoraConfig, get_eva_state_dict

    from tools.profiles.libraries import peft as profile
    ids = profile.inputs()[0]
    config = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights="eva", eva_config=EvaConfig(rho=1.0))
    get_eva_state_dict(model, [{"input_ids": ids, "attention_mask": torch.ones_like(ids)}] * 4, config,
                       show_progress_bar=False)
    return model


def _dynamic_quantized(model: nn.Module) -> nn.Module:
    return quantization.quantize_dynamic(model.eval(), {nn.Linear}, dtype=torch.qint8)


def _prepared_by_accelerate(model: nn.Module) -> nn.Module:
    from accelerate import Accelerator
    return Accelerator(cpu=True).prepare_model(model)


def _made_private(model: nn.Module) -> nn.Module:
    from opacus import PrivacyEngine

    from tools.profiles.libraries import opacus as profile
    (x,) = profile.inputs()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, torch.zeros(len(x), dtype=torch.long)),
                                         batch_size=len(x))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    private, _, _ = PrivacyEngine().make_private(module=model, optimizer=optimizer, data_loader=loader,
                                                 noise_multiplier=1.0, max_grad_norm=1.0)
    return private


def _integrated_gradients(model: nn.Module) -> nn.Module:
    from captum.attr import IntegratedGradients

    from tools.profiles.libraries import captum
    IntegratedGradients(model).attribute(*captum.inputs(), target=0, n_steps=4)
    return model


def _timm_model(model: nn.Module) -> nn.Module:
    import timm
    return timm.create_model("test_resnet", pretrained=False)


def _lora_config() -> Any:
    from peft import LoraConfig
    return LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)


def _transformers_adapter(model: nn.Module) -> nn.Module:
    """transformers' own PEFT integration: ``model.add_adapter(config)`` (the model stays a transformers model)."""
    model.add_adapter(_lora_config(), adapter_name="first")
    return model


def _offloaded_with_hook(model: nn.Module) -> nn.Module:
    from accelerate import cpu_offload_with_hook
    model, hook = cpu_offload_with_hook(model, execution_device=torch.device("cpu"))
    model._hooklab_offload_hook = hook  # kept alive while the model is, as a pipeline keeps it
    return model


def _checkpoint_loaded(model: nn.Module, folder: str) -> None:
    """``load_checkpoint_in_model`` from a file of the model's own state dict."""
    from accelerate.utils import load_checkpoint_in_model
    load_checkpoint_in_model(model, _state_file(model, folder))


def _prepared_for_qat(model: nn.Module) -> nn.Module:
    model.train()
    model.qconfig = quantization.get_default_qat_qconfig("fbgemm")
    return quantization.prepare_qat(model)


def _fused(model: nn.Module) -> nn.Module:
    """``fuse_modules`` of the profile's Linear and the ReLU after it (``inplace=False``, its default: a copy)."""
    return quantization.fuse_modules(model.eval(), [["1", "2"]])


def _torchvision_model(model: nn.Module) -> nn.Module:
    from torchvision.models import get_model
    return get_model("resnet18", weights=None, num_classes=10)


def _geometric_summary(model: nn.Module) -> nn.Module:
    from torch_geometric.nn import summary

    from tools.profiles.libraries import torch_geometric
    summary(model, *torch_geometric.inputs())
    return model


def _offload_wrapped(model: nn.Module) -> nn.Module:
    """torch's ``offload_wrapper`` around the profile's first Linear (saved activations go to the CPU)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import offload_wrapper
    model[0] = offload_wrapper(model[0])
    return model


def _peft_generated(model: nn.Module) -> nn.Module:
    from tools.profiles.libraries import peft as profile
    model.generate(input_ids=profile.inputs()[0], max_new_tokens=2, do_sample=False)
    return model


def _pruned(method: str, **options: Any) -> Callable[[nn.Module], nn.Module]:
    def run(model: nn.Module) -> nn.Module:
        from torch.nn.utils import prune
        torch.manual_seed(0)  # the random methods draw from torch's generator
        getattr(prune, method)(model[0], "weight", amount=0.5, **options)
        return model
    return run


def _trainer() -> Any:
    import pytorch_lightning as pl
    return pl.Trainer(max_steps=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)


def _fitted(model: nn.Module) -> nn.Module:
    """One training step of a Lightning ``Trainer`` (``max_steps=1``, no logger, checkpoint or summary)."""
    _trainer().fit(model, _small_loader("lightning"))
    return model


def _lightning_checkpoint(model: nn.Module, folder: str) -> str:
    path = str(Path(folder) / "model.ckpt")
    model.trainer.save_checkpoint(path)
    return path


def _loaded_from_checkpoint(model: nn.Module) -> nn.Module:
    with tempfile.TemporaryDirectory() as folder:
        return type(model).load_from_checkpoint(_lightning_checkpoint(model, folder))


def _lightning_training_step(model: nn.Module) -> nn.Module:
    from tools.profiles.libraries import lightning
    model.training_step(lightning.inputs(), 0)
    return model


def _made_private_with_epsilon(model: nn.Module) -> nn.Module:
    from opacus import PrivacyEngine

    from tools.profiles.libraries import opacus as profile
    (x,) = profile.inputs()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, torch.zeros(len(x), dtype=torch.long)),
                                         batch_size=len(x))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    private, _, _ = PrivacyEngine().make_private_with_epsilon(
        module=model, optimizer=optimizer, data_loader=loader, target_epsilon=5.0, target_delta=1e-5, epochs=1,
        max_grad_norm=1.0)
    return private


def _state_file(model: nn.Module, folder: str) -> str:
    path = str(Path(folder) / "model.pt")
    torch.save(model.state_dict(), path)
    return path


def _disk_offloaded(model: nn.Module) -> nn.Module:
    """``disk_offload`` into a temporary folder that lives as long as the model."""
    from accelerate import disk_offload
    folder = tempfile.TemporaryDirectory()
    model = disk_offload(model, offload_dir=folder.name, execution_device=torch.device("cpu"))
    model._hooklab_offload_folder = folder  # removed when the model is
    return model


def _loaded_and_dispatched(model: nn.Module) -> nn.Module:
    from accelerate import load_checkpoint_and_dispatch
    with tempfile.TemporaryDirectory() as folder:
        return load_checkpoint_and_dispatch(model, _state_file(model, folder), device_map={"": "cpu"})


def _accelerator(call: Callable[[Any, nn.Module], Any]) -> Callable[[nn.Module], nn.Module]:
    """``call(Accelerator(cpu=True), model)``; the model goes on (``prepare`` returns it: see its own case)."""
    def run(model: nn.Module) -> nn.Module:
        from accelerate import Accelerator
        call(Accelerator(cpu=True), model)
        return model
    return run


def _prepared_whole(model: nn.Module) -> nn.Module:
    from accelerate import Accelerator
    return Accelerator(cpu=True).prepare(model)


def _timm_checkpoint_loaded(model: nn.Module, folder: str) -> None:
    from timm.models import load_checkpoint
    load_checkpoint(model, _state_file(model, folder))


def _timm_saved_for_hf(model: nn.Module, folder: str) -> None:
    from timm.models import save_for_hf
    save_for_hf(model, folder)


def _saved_by_accelerator(model: nn.Module, folder: str) -> None:
    from accelerate import Accelerator
    Accelerator(cpu=True).save_model(model, folder)


def _timm_feature_extractor(model: nn.Module) -> nn.Module:
    from timm.models import create_feature_extractor
    return create_feature_extractor(model, return_nodes={"layer1": "feat1", "layer2": "feat2"})


def _two_transformers_adapters(model: nn.Module) -> nn.Module:
    _transformers_adapter(model)
    model.add_adapter(_lora_config(), adapter_name="second")
    return model


def _adapter_loaded(model: nn.Module) -> nn.Module:
    """``load_adapter`` of an adapter saved from another model of the same config (built with seed 1)."""
    from tools.profiles.libraries import transformers as profile
    torch.manual_seed(1)
    other = _transformers_adapter(profile.build())
    with tempfile.TemporaryDirectory() as folder:
        other.save_pretrained(folder)
        model.load_adapter(folder, adapter_name="loaded")
    return model


def _peft_loaded(model: nn.Module) -> nn.Module:
    """``PeftModel.from_pretrained(model, folder)``: an adapter saved from another PEFT model of the same base config
    (built with seed 1) put on the user's model."""
    from peft import PeftModel

    from tools.profiles.libraries import peft as profile
    torch.manual_seed(1)
    other = profile.apply(profile.build())
    with tempfile.TemporaryDirectory() as folder:
        other.save_pretrained(folder)
        return PeftModel.from_pretrained(model, folder)


def _peft_adapter_loaded(model: nn.Module) -> nn.Module:
    from tools.profiles.libraries import peft as profile
    torch.manual_seed(1)
    other = profile.apply(profile.build())
    with tempfile.TemporaryDirectory() as folder:
        other.save_pretrained(folder)
        model.load_adapter(folder, adapter_name="loaded")
    return model


def _peft_state_set(model: nn.Module) -> nn.Module:
    from peft import get_peft_model_state_dict, set_peft_model_state_dict
    set_peft_model_state_dict(model, get_peft_model_state_dict(model))
    return model


def _ao_quantized(model: nn.Module) -> nn.Module:
    """Eager post-training ``quantize`` (a copy, calibrated by a run of the profile's inputs)."""
    from tools.profiles.libraries import torch_ao_quantization as profile
    model.eval().qconfig = quantization.get_default_qconfig("fbgemm")
    return quantization.quantize(model, lambda m, batch: m(batch), [profile.inputs()[0]])


def _ao_quantized_qat(model: nn.Module) -> nn.Module:
    from tools.profiles.libraries import torch_ao_quantization as profile
    model.train().qconfig = quantization.get_default_qat_qconfig("fbgemm")
    return quantization.quantize_qat(model, lambda m, batch: m(batch), [profile.inputs()[0]])


def _run_on_inputs(slug: str, call_forward: bool = False) -> Callable[[nn.Module], nn.Module]:
    """A run of the model (or of its ``forward`` method, called directly) on the profile's inputs."""
    def run(model: nn.Module) -> nn.Module:
        from tools.profiles.libraries import modules
        (model.forward if call_forward else model)(*modules()[slug].inputs())
        return model
    return run


def _swapped_1x1(model: nn.Module) -> nn.Module:
    from torchao.quantization import swap_conv2d_1x1_to_linear
    swap_conv2d_1x1_to_linear(model)
    return model


def _device_map_inferred(model: nn.Module) -> nn.Module:
    from accelerate import infer_auto_device_map
    infer_auto_device_map(model)
    return model


def _with_trainer(call: Callable[[Any], Any]) -> Callable[[nn.Module], nn.Module]:
    """``call(trainer)`` on a transformers ``Trainer`` made for the model (one step at most, on the CPU, nothing
    saved or reported, an output folder removed afterwards; the profile's input as the one example, its labels the
    same tokens); the model goes on (the trainer's ``model`` is the same object)."""
    def run(model: nn.Module) -> nn.Module:
        from transformers import Trainer, TrainingArguments

        from tools.profiles.libraries import transformers as profile
        ids = profile.inputs()[0][0]
        data = [{"input_ids": ids, "labels": ids}]
        with tempfile.TemporaryDirectory() as folder:
            args = TrainingArguments(output_dir=folder, max_steps=1, per_device_train_batch_size=1, report_to=[],
                                     use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True)
            call(Trainer(model=model, args=args, train_dataset=data, eval_dataset=data))
        return model
    return run


TEXT = "w1 w2 w3 w4 w5"  # the profile's input ids, 1-5, as words of the tokenizer below


def _with_text_pipeline(call: Callable[[Any], Any]) -> Callable[[nn.Module], nn.Module]:
    """``call(pipeline)`` on a transformers ``text-generation`` pipeline of the model, with a tokenizer made here
    (nothing downloaded: a word-level vocabulary ``w0`` ... ``w31``, the profile's 32 ids) and greedy generation of
    two new tokens (``generation_config``); the model goes on (the pipeline's ``model`` is the same object)."""
    def run(model: nn.Module) -> nn.Module:
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast, pipeline

        words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(32)}, unk_token="w0"))
        words.pre_tokenizer = pre_tokenizers.Whitespace()
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0", pad_token="w0", eos_token="w31")
        model.generation_config.max_new_tokens, model.generation_config.do_sample = 2, False
        call(pipeline("text-generation", model=model, tokenizer=tokenizer, device="cpu"))
        return model
    return run


def _one_batch() -> dict[str, torch.Tensor]:
    from tools.profiles.libraries import transformers as profile
    ids = profile.inputs()[0]
    return {"input_ids": ids, "labels": ids}


def _with_pipeline(call: Callable[[Any], Any]) -> Callable[[nn.Module], nn.Module]:
    """``call(pipeline)`` on a diffusers ``DDPMPipeline`` made of the model (its ``unet``) and a 10-step scheduler; the
    user goes on with the UNet of the pipeline ``call`` returns (or of the same one, when it returns None)."""
    def run(model: nn.Module) -> nn.Module:
        from diffusers import DDPMPipeline, DDPMScheduler
        pipeline = DDPMPipeline(unet=model, scheduler=DDPMScheduler(num_train_timesteps=10))
        result = call(pipeline)
        return (result if result is not None else pipeline).unet
    return run


def _pipeline_reloaded(pipeline: Any) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        pipeline.save_pretrained(folder)
        return type(pipeline).from_pretrained(folder)


def _pipeline_saved(method: str) -> Callable[[Any], None]:
    """The pipeline's ``save_pretrained`` or ``save_config`` into a temporary folder, removed afterwards."""
    def run(pipeline: Any) -> None:
        with tempfile.TemporaryDirectory() as folder:
            getattr(pipeline, method)(folder)
    return run


def _pipeline_config_read(pipeline: Any) -> None:
    with tempfile.TemporaryDirectory() as folder:
        pipeline.save_config(folder)
        type(pipeline).load_config(folder)


def _small_loader(slug: str) -> Any:
    from tools.profiles.libraries import modules
    (x,) = modules()[slug].inputs()
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=len(x))


def _accelerator_backward(accelerator: Any, model: nn.Module) -> None:
    from tools.profiles.libraries import accelerate as profile
    accelerator.backward(model(*profile.inputs()).float().pow(2).mean())


def _accelerator_profiled(accelerator: Any, model: nn.Module) -> None:
    from tools.profiles.libraries import accelerate as profile
    with accelerator.profile():
        model(*profile.inputs())


def _accelerator_state(load: bool) -> Callable[[Any, nn.Module], None]:
    """``save_state`` of a prepared model into a temporary folder (and ``load_state`` from it when ``load``)."""
    def run(accelerator: Any, model: nn.Module) -> None:
        accelerator.prepare(model)
        with tempfile.TemporaryDirectory() as folder:
            accelerator.save_state(folder)
            if load:
                accelerator.load_state(folder)
    return run


def _accelerator_saved(accelerator: Any, model: nn.Module) -> None:
    with tempfile.TemporaryDirectory() as folder:
        accelerator.save(model.state_dict(), str(Path(folder) / "model.pt"))


def _accelerator_scheduler(accelerator: Any, model: nn.Module) -> None:
    optimizer = accelerator.prepare_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.prepare_scheduler(torch.optim.lr_scheduler.StepLR(optimizer, step_size=1))


def _private_checkpoint(load: bool) -> Callable[[nn.Module], nn.Module]:
    """Opacus' ``PrivacyEngine().save_checkpoint`` of the model into a temporary file (and ``load_checkpoint`` of it
    back into the model when ``load``)."""
    def run(model: nn.Module) -> nn.Module:
        from opacus import PrivacyEngine
        engine = PrivacyEngine()
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "private.pt"
            engine.save_checkpoint(path=path, module=model)
            if load:
                engine.load_checkpoint(path=path, module=model)
        return model
    return run


def _peft_forward(base: bool) -> Callable[[nn.Module], nn.Module]:
    """A call of ``forward`` of the PEFT model (or of its ``LoraModel`` when ``base``) on the profile's input."""
    def run(model: nn.Module) -> nn.Module:
        from tools.profiles.libraries import peft as profile
        (model.base_model if base else model).forward(input_ids=profile.inputs()[0])
        return model
    return run


def _peft_weights_loaded(model: nn.Module) -> nn.Module:
    """``load_peft_weights`` of an adapter saved from another PEFT model (built with seed 1): the weights are read,
    the model is not changed."""
    from peft import load_peft_weights

    from tools.profiles.libraries import peft as profile
    torch.manual_seed(1)
    other = profile.apply(profile.build())
    with tempfile.TemporaryDirectory() as folder:
        other.save_pretrained(folder)
        load_peft_weights(folder)
    return model


def _base_state_set(model: nn.Module) -> nn.Module:
    from peft import get_base_model_state_dict, set_base_model_state_dict
    set_base_model_state_dict(model, get_base_model_state_dict(model))
    return model


def _private_validated(model: nn.Module) -> nn.Module:
    from opacus import PrivacyEngine
    PrivacyEngine().validate(module=model, optimizer=None, data_loader=None)
    return model


def _kbit_prepared(model: nn.Module) -> nn.Module:
    from peft import prepare_model_for_kbit_training
    return prepare_model_for_kbit_training(model)


def _base_state_read(model: nn.Module) -> nn.Module:
    from peft import get_base_model_state_dict
    get_base_model_state_dict(model)
    return model


def _generation_inputs(model: nn.Module) -> nn.Module:
    from tools.profiles.libraries import transformers as profile
    model.prepare_inputs_for_generation(profile.inputs()[0])
    return model


def _timm_state_remapped(model: nn.Module) -> nn.Module:
    from timm.models import remap_state_dict
    remap_state_dict(model.state_dict(), model)
    return model


def _lightning_predict_step(model: nn.Module) -> nn.Module:
    from tools.profiles.libraries import lightning
    model.predict_step(*lightning.inputs())
    return model


@functools.cache
def _lightning_class_with_steps(base: type) -> type:
    """The profile's LightningModule with the validation, test and predict steps a user writes (each on the batch's
    one tensor)."""
    def step(self: Any, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).pow(2).mean()

    def predict_step(self: Any, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])
    return type(f"{base.__name__}WithSteps", (base,), {"validation_step": step, "test_step": step,
                                                       "predict_step": predict_step, "__module__": base.__module__})


def _with_steps(model: nn.Module) -> nn.Module:
    model.__class__ = _lightning_class_with_steps(type(model))
    return model


def _trainer_runs(method: str) -> Callable[[nn.Module], nn.Module]:
    """``Trainer(...).<method>(model, loader)``: ``validate``, ``test`` or ``predict`` over the profile's batch."""
    def run(model: nn.Module) -> nn.Module:
        getattr(_trainer(), method)(model, _small_loader("lightning"))
        return model
    return run


def _lightning_module_call(call: Callable[[Any, torch.Tensor], Any]) -> Callable[[nn.Module], nn.Module]:
    """``call(model, x)`` with ``x`` the lightning profile's input; the model goes on."""
    def run(model: nn.Module) -> nn.Module:
        from tools.profiles.libraries import lightning
        call(model, lightning.inputs()[0])
        return model
    return run


# TorchScript's quantization: each takes the model scripted (torch.jit.script) and returns a ScriptModule
_JIT_QUANTIZATION = ("prepare_jit", "prepare_dynamic_jit", "convert_jit", "convert_dynamic_jit", "quantize_jit",
                     "quantize_dynamic_jit", "fuse_conv_bn_jit")


def _scripted_and(name: str) -> Callable[[nn.Module], nn.Module]:
    """``torch.ao.quantization.<name>`` of the model scripted (in eval mode): static ones with fbgemm's default qconfig
    and the profile's inputs to calibrate, dynamic ones with the default dynamic qconfig; convert_* after prepare_*
    and one calibration run."""
    def run(model: nn.Module) -> nn.Module:
        from tools.profiles.libraries import torch_ao_quantization as profile
        scripted = torch.jit.script(model.eval())
        static, dynamic = {"": quantization.get_default_qconfig("fbgemm")}, {"": quantization.default_dynamic_qconfig}
        if name in ("prepare_jit", "prepare_dynamic_jit"):
            return getattr(quantization, name)(scripted, dynamic if "dynamic" in name else static)
        if name in ("convert_jit", "convert_dynamic_jit"):
            dynamic_one = "dynamic" in name
            prepared = (quantization.prepare_dynamic_jit(scripted, dynamic) if dynamic_one
                        else quantization.prepare_jit(scripted, static))
            prepared(*profile.inputs())
            return getattr(quantization, name)(prepared)
        if name == "quantize_jit":
            return quantization.quantize_jit(scripted, static, lambda m, batch: m(batch), [profile.inputs()[0]])
        if name == "quantize_dynamic_jit":
            return quantization.quantize_dynamic_jit(scripted, dynamic)
        return quantization.fuse_conv_bn_jit(scripted)
    return run


def _swapped_for_dynamic(model: nn.Module) -> nn.Module:
    """``swap_module`` of the target Linear (``model[1]``, its qconfig the default dynamic one) with the default
    dynamic mapping: the model goes on with the swapped module in its place."""
    target = model.eval()[1]
    target.qconfig = quantization.default_dynamic_qconfig
    model[1] = quantization.swap_module(target, quantization.get_default_dynamic_quant_module_mappings(), {})
    return model


def _trainer_training_step(trainer: Any) -> None:
    """One ``Trainer.training_step`` (forward, loss, backward) on the profile's batch, as ``train``'s loop calls it:
    the loop first sets how many micro-batches the step accumulates, which a direct call without it lacks
    (AttributeError: 'Trainer' object has no attribute 'current_gradient_accumulation_steps')."""
    trainer.current_gradient_accumulation_steps = 1
    trainer.training_step(trainer.model, _one_batch())


def _geometric_compiled(model: nn.Module) -> nn.Module:
    """``torch_geometric.compile`` (PyG's settings, then ``torch.compile``) with the ``eager`` backend: what happens to
    hooks is Dynamo's doing, and inductor's code generation would take minutes a cell on a CPU."""
    import torch_geometric
    return torch_geometric.compile(model, backend="eager")


CASES: tuple[Case, ...] = (
    Case("peft:get_peft_model", _peft),
    Case("peft:LoraModel.merge_and_unload", lambda m: m.merge_and_unload(), setup=_peft),
    Case("peft:LoraModel.unload", lambda m: m.unload(), setup=_peft),
    Case("peft:LoraModel.merge_adapter", _same(lambda m: m.merge_adapter()), setup=_peft),
    Case("peft:LoraModel.unmerge_adapter", _same(lambda m: m.unmerge_adapter()),
         setup=lambda m: _same(lambda p: p.merge_adapter())(_peft(m))),
    Case("peft:LoraModel.disable_adapter_layers", _same(lambda m: m.disable_adapter_layers()), setup=_peft),
    Case("peft:PeftModel.disable_adapter", _entered, setup=_peft),
    Case("transformers:PreTrainedModel.gradient_checkpointing_enable",
         _same(lambda m: m.gradient_checkpointing_enable())),
    Case("transformers:PreTrainedModel.gradient_checkpointing_disable",
         _same(lambda m: m.gradient_checkpointing_disable()),
         setup=_same(lambda m: m.gradient_checkpointing_enable())),
    Case("transformers:PreTrainedModel.enable_input_require_grads", _same(lambda m: m.enable_input_require_grads())),
    Case("transformers:PreTrainedModel.eval", lambda m: m.eval()),
    Case("transformers:PreTrainedModel.tie_weights", _same(lambda m: m.tie_weights())),
    Case("transformers:PreTrainedModel.resize_token_embeddings", _same(lambda m: m.resize_token_embeddings(40))),
    Case("transformers:PreTrainedModel.from_pretrained", _saved_and_loaded),
    Case("transformers:PreTrainedModel.save_pretrained", _saved),
    Case("transformers:PreTrainedModel.disable_input_require_grads",
         _same(lambda m: m.disable_input_require_grads()), setup=_same(lambda m: m.enable_input_require_grads())),
    Case("transformers:GenerationMixin.generate", _generated),
    Case("peft:PeftModel.save_pretrained", _saved, setup=_peft),
    Case("peft:get_peft_model_state_dict", _peft_state_dict, setup=_peft),
    Case("peft:PeftModel.add_adapter", _second_adapter, setup=_peft),
    Case("peft:PeftModel.set_adapter", _same(lambda m: m.set_adapter("second")),
         setup=lambda m: _second_adapter(_peft(m))),
    Case("diffusers:ModelMixin.enable_gradient_checkpointing", _same(lambda m: m.enable_gradient_checkpointing())),
    Case("diffusers:ModelMixin.from_pretrained", _saved_and_loaded),
    Case("torch_ao_quantization:quantize_dynamic", _dynamic_quantized),
    Case("accelerate:Accelerator.prepare_model", _prepared_by_accelerate),
    Case("opacus:PrivacyEngine.make_private", _made_private),
    Case("captum:IntegratedGradients.attribute", _integrated_gradients),
    Case("timm:create_model", _timm_model),
    Case("prune:l1_unstructured", _profile_apply("prune")),
    Case("prune:remove", _profile_apply("prune", "remove"), setup=_profile_apply("prune")),
    Case("parametrize:register_parametrization", _parametrized),
    Case("parametrize:remove_parametrizations", _same(lambda m: parametrize.remove_parametrizations(m[0], "weight")),
         setup=_parametrized),
    Case("torch_ao_quantization:prepare", _profile_apply("torch_ao_quantization"), setup=lambda m: m.eval()),
    Case("torch_ao_quantization:convert", lambda m: quantization.convert(m), setup=_quantization_prepared),
    Case("torchao:quantize_", _profile_apply("torchao")),
    Case("checkpoint_wrapper:apply_activation_checkpointing", _profile_apply("checkpoint_wrapper")),
    Case("swa_utils:AveragedModel.update_parameters", _same(lambda m: m.update_parameters(m.module)),
         setup=_profile_apply("swa_utils")),
    Case("captum:LayerGradCam.attribute", _grad_cam),
    Case("thop:profile", _profile_apply("thop")),
    Case("torchinfo:summary", _profile_apply("torchinfo")),
    Case("torchvision:create_feature_extractor", _profile_apply("torchvision")),
    Case("diffusers:ModelMixin.enable_group_offload", _same(lambda m: m.enable_group_offload(
        onload_device=torch.device("cpu"), offload_device=torch.device("cpu"), offload_type="leaf_level"))),
    Case("accelerate:cpu_offload", _profile_apply("accelerate")),
    Case("accelerate:dispatch_model", _dispatched),
    Case("transformers:PreTrainedModel.add_adapter", _transformers_adapter),
    Case("transformers:PreTrainedModel.disable_adapters", _same(lambda m: m.disable_adapters()),
         setup=_transformers_adapter),
    Case("transformers:PreTrainedModel.enable_adapters", _same(lambda m: m.enable_adapters()),
         setup=lambda m: _same(lambda t: t.disable_adapters())(_transformers_adapter(m))),
    Case("transformers:PreTrainedModel.delete_adapter", _same(lambda m: m.delete_adapter("first")),
         setup=_transformers_adapter),
    Case("transformers:PreTrainedModel.train", lambda m: m.train(), setup=lambda m: m.eval()),
    Case("diffusers:ModelMixin.save_pretrained", _saved),
    Case("diffusers:ModelMixin.enable_layerwise_casting", _same(lambda m: m.enable_layerwise_casting(
        storage_dtype=torch.bfloat16, compute_dtype=torch.float32))),
    Case("diffusers:ModelMixin.disable_gradient_checkpointing", _same(lambda m: m.disable_gradient_checkpointing()),
         setup=_same(lambda m: m.enable_gradient_checkpointing())),
    Case("accelerate:cpu_offload_with_hook", _offloaded_with_hook),
    Case("accelerate:load_checkpoint_in_model", _in_folder(_checkpoint_loaded)),
    Case("torch_ao_quantization:prepare_qat", _prepared_for_qat),
    Case("torch_ao_quantization:fuse_modules", _fused),
    Case("torchvision:get_model", _torchvision_model),
    Case("torch_geometric:summary", _geometric_summary),
    Case("checkpoint_wrapper:offload_wrapper", _offload_wrapped),
    Case("peft:PeftModel.generate", _peft_generated, setup=_peft),
    Case("peft:LoraModel.enable_adapter_layers", _same(lambda m: m.enable_adapter_layers()),
         setup=lambda m: _same(lambda p: p.disable_adapter_layers())(_peft(m))),
    Case("prune:ln_structured", _pruned("ln_structured", n=2, dim=0)),
    Case("prune:random_structured", _pruned("random_structured", dim=0)),
    Case("prune:random_unstructured", _pruned("random_unstructured")),
    Case("lightning:Trainer.fit", _fitted),
    Case("lightning:Trainer.save_checkpoint", _in_folder(_lightning_checkpoint), setup=_fitted),
    Case("lightning:LightningModule.load_from_checkpoint", _loaded_from_checkpoint, setup=_fitted),
    Case("lightning:LightningModule.training_step", _lightning_training_step),
    Case("lightning:LightningModule.forward", _run_on_inputs("lightning", call_forward=True)),
    Case("swa_utils:AveragedModel.forward", _run_on_inputs("swa_utils"), setup=_profile_apply("swa_utils")),
    Case("torchao:swap_conv2d_1x1_to_linear", _swapped_1x1),
    Case("opacus:PrivacyEngine.make_private_with_epsilon", _made_private_with_epsilon),
    Case("accelerate:infer_auto_device_map", _device_map_inferred),
    Case("accelerate:disk_offload", _disk_offloaded),
    Case("accelerate:load_checkpoint_and_dispatch", _loaded_and_dispatched),
    Case("accelerate:Accelerator.prepare", _prepared_whole),
    Case("accelerate:Accelerator.get_state_dict", _accelerator(lambda a, m: a.get_state_dict(m))),
    Case("accelerate:Accelerator.save_model", _in_folder(_saved_by_accelerator)),
    Case("accelerate:Accelerator.verify_device_map", _accelerator(lambda a, m: a.verify_device_map(m))),
    Case("timm:load_checkpoint", _in_folder(_timm_checkpoint_loaded)),
    Case("timm:save_for_hf", _in_folder(_timm_saved_for_hf)),
    Case("timm:create_feature_extractor", _timm_feature_extractor),
    Case("transformers:PreTrainedModel.set_adapter", _same(lambda m: m.set_adapter("second")),
         setup=_two_transformers_adapters),
    Case("transformers:PreTrainedModel.get_adapter_state_dict", _same(lambda m: m.get_adapter_state_dict()),
         setup=_transformers_adapter),
    Case("transformers:PreTrainedModel.load_adapter", _adapter_loaded),
    Case("transformers:PreTrainedModel.get_compiled_call", _same(lambda m: m.get_compiled_call(None))),
    Case("peft:PeftModel.delete_adapter", _same(lambda m: m.delete_adapter("second")),
         setup=lambda m: _second_adapter(_peft(m))),
    Case("peft:LoraModel.set_adapter", _same(lambda m: m.base_model.set_adapter("second")),
         setup=lambda m: _second_adapter(_peft(m))),
    Case("peft:LoraModel.delete_adapter", _same(lambda m: m.base_model.delete_adapter("second")),
         setup=lambda m: _second_adapter(_peft(m))),
    Case("peft:PeftModel.get_base_model", lambda m: m.get_base_model(), setup=_peft),
    Case("peft:PeftModel.from_pretrained", _peft_loaded),
    Case("peft:PeftModel.load_adapter", _peft_adapter_loaded, setup=_peft),
    Case("peft:set_peft_model_state_dict", _peft_state_set, setup=_peft),
    Case("torch_ao_quantization:quantize", _ao_quantized),
    Case("torch_ao_quantization:quantize_qat", _ao_quantized_qat),
    Case("torch_ao_quantization:fuse_modules_qat", lambda m: quantization.fuse_modules_qat(m.train(), [["1", "2"]])),
    Case("torch_ao_quantization:disable_observer", _same(lambda m: m.apply(quantization.disable_observer)),
         setup=_prepared_for_qat),
    Case("torch_ao_quantization:enable_observer", _same(lambda m: m.apply(quantization.enable_observer)),
         setup=lambda m: _same(lambda q: q.apply(quantization.disable_observer))(_prepared_for_qat(m))),
    Case("torch_ao_quantization:disable_fake_quant", _same(lambda m: m.apply(quantization.disable_fake_quant)),
         setup=_prepared_for_qat),
    Case("torch_ao_quantization:enable_fake_quant", _same(lambda m: m.apply(quantization.enable_fake_quant)),
         setup=lambda m: _same(lambda q: q.apply(quantization.disable_fake_quant))(_prepared_for_qat(m))),
    Case("torch_ao_quantization:get_observer_state_dict",
         _same(lambda m: quantization.get_observer_state_dict(m)), setup=_quantization_prepared),
    Case("transformers:Pipeline.__call__", _with_text_pipeline(lambda pipe: pipe(TEXT))),
    Case("transformers:Pipeline.forward", _with_text_pipeline(lambda pipe: pipe.forward(pipe.preprocess(TEXT)))),
    Case("transformers:Pipeline.predict", _with_text_pipeline(lambda pipe: pipe.predict(TEXT))),
    Case("transformers:Pipeline.save_pretrained", _with_text_pipeline(_pipeline_saved("save_pretrained"))),
    Case("transformers:Trainer.train", _with_trainer(lambda trainer: trainer.train())),
    Case("transformers:Trainer.evaluate", _with_trainer(lambda trainer: trainer.evaluate())),
    Case("transformers:Trainer.predict", _with_trainer(lambda trainer: trainer.predict(trainer.eval_dataset))),
    Case("transformers:Trainer.prediction_step", _with_trainer(
        lambda trainer: trainer.prediction_step(trainer.model, _one_batch(), prediction_loss_only=False))),
    Case("transformers:Trainer.save_model", _with_trainer(lambda trainer: trainer.save_model())),
    Case("transformers:Trainer.save_state", _with_trainer(lambda trainer: trainer.save_state())),
    Case("transformers:Trainer.create_optimizer", _with_trainer(lambda trainer: trainer.create_optimizer())),
    Case("transformers:Trainer.create_optimizer_and_scheduler", _with_trainer(
        lambda trainer: trainer.create_optimizer_and_scheduler(num_training_steps=1))),
    Case("diffusers:DiffusionPipeline.enable_attention_slicing", _with_pipeline(
        lambda pipeline: pipeline.enable_attention_slicing())),
    Case("diffusers:DiffusionPipeline.disable_attention_slicing", _with_pipeline(
        lambda pipeline: pipeline.disable_attention_slicing())),
    Case("diffusers:DiffusionPipeline.enable_model_cpu_offload", _with_pipeline(
        lambda pipeline: pipeline.enable_model_cpu_offload(device="cpu"))),
    Case("diffusers:DiffusionPipeline.enable_sequential_cpu_offload", _with_pipeline(
        lambda pipeline: pipeline.enable_sequential_cpu_offload(device="cpu"))),
    Case("diffusers:DiffusionPipeline.enable_group_offload", _with_pipeline(
        lambda pipeline: pipeline.enable_group_offload(onload_device=torch.device("cpu"),
                                                       offload_device=torch.device("cpu"), offload_type="leaf_level"))),
    Case("diffusers:DiffusionPipeline.reset_device_map", _with_pipeline(lambda pipeline: pipeline.reset_device_map())),
    Case("diffusers:DiffusionPipeline.from_pipe", _with_pipeline(lambda pipeline: type(pipeline).from_pipe(pipeline))),
    Case("diffusers:DiffusionPipeline.from_pretrained", _with_pipeline(_pipeline_reloaded)),
    Case("diffusers:DiffusionPipeline.save_pretrained", _with_pipeline(_pipeline_saved("save_pretrained"))),
    Case("diffusers:DiffusionPipeline.save_config", _with_pipeline(_pipeline_saved("save_config"))),
    Case("diffusers:DiffusionPipeline.load_config", _with_pipeline(_pipeline_config_read)),
    Case("accelerate:Accelerator.backward", _accelerator(_accelerator_backward)),
    Case("accelerate:Accelerator.profile", _accelerator(_accelerator_profiled)),
    Case("accelerate:Accelerator.save_state", _accelerator(_accelerator_state(load=False))),
    Case("accelerate:Accelerator.load_state", _accelerator(_accelerator_state(load=True))),
    Case("accelerate:Accelerator.save", _accelerator(_accelerator_saved)),
    Case("accelerate:Accelerator.prepare_optimizer", _accelerator(
        lambda accelerator, model: accelerator.prepare_optimizer(torch.optim.SGD(model.parameters(), lr=0.1)))),
    Case("accelerate:Accelerator.prepare_scheduler", _accelerator(_accelerator_scheduler)),
    Case("accelerate:Accelerator.prepare_data_loader", _accelerator(
        lambda accelerator, model: accelerator.prepare_data_loader(_small_loader("accelerate")))),
    Case("accelerate:Accelerator.skip_first_batches", _accelerator(
        lambda accelerator, model: accelerator.skip_first_batches(_small_loader("accelerate"), num_batches=0))),
    Case("opacus:PrivacyEngine.validate", _private_validated),
    Case("opacus:PrivacyEngine.save_checkpoint", _private_checkpoint(load=False)),
    Case("opacus:PrivacyEngine.load_checkpoint", _private_checkpoint(load=True)),
    Case("peft:prepare_model_for_kbit_training", _kbit_prepared),
    Case("peft:PeftModel.forward", _peft_forward(base=False), setup=_peft),
    Case("peft:LoraModel.forward", _peft_forward(base=True), setup=_peft),
    Case("peft:PeftModel.prepare_model_for_gradient_checkpointing",
         _same(lambda m: m.prepare_model_for_gradient_checkpointing(m.get_base_model())), setup=_peft),
    Case("peft:get_base_model_state_dict", _base_state_read, setup=_peft),
    Case("peft:set_base_model_state_dict", _base_state_set, setup=_peft),
    Case("peft:PeftModel.create_or_update_model_card", _in_folder(
        lambda model, folder: model.create_or_update_model_card(folder)), setup=_peft),
    Case("peft:load_peft_weights", _peft_weights_loaded, setup=_peft),
    Case("peft:get_eva_state_dict", _eva_state_read),
    Case("peft:convert_to_lora", _same(_converted_to_lora), setup=_loha),
    Case("peft:save_as_lora", _in_folder(_saved_as_lora), setup=_loha),
    Case("transformers:PreTrainedModel.enable_peft_hotswap", _same(lambda m: m.enable_peft_hotswap(target_rank=4))),
    Case("transformers:PreTrainedModel.activation_checkpointing_enable",
         _same(lambda m: m.activation_checkpointing_enable())),
    Case("transformers:PreTrainedModel.activation_checkpointing_disable",
         _same(lambda m: m.activation_checkpointing_disable()),
         setup=_same(lambda m: m.activation_checkpointing_enable())),
    Case("transformers:GenerationMixin.prepare_inputs_for_generation", _generation_inputs),
    Case("transformers:Trainer.create_scheduler", _with_trainer(
        lambda trainer: trainer.create_scheduler(num_training_steps=1, optimizer=trainer.create_optimizer()))),
    Case("transformers:Trainer.save_metrics", _with_trainer(lambda trainer: trainer.save_metrics("train", {"loss": 1.0}))),
    Case("transformers:Trainer.create_model_card", _with_trainer(lambda trainer: trainer.create_model_card())),
    Case("transformers:Trainer.evaluation_loop", _with_trainer(
        lambda trainer: trainer.evaluation_loop(trainer.get_eval_dataloader(), "evaluation"))),
    Case("transformers:Trainer.create_accelerator_and_postprocess", _with_trainer(
        lambda trainer: trainer.create_accelerator_and_postprocess())),
    Case("lightning:LightningModule.predict_step", _lightning_predict_step),
    Case("lightning:LightningModule.prepare_data", _same(lambda m: m.prepare_data())),
    Case("timm:remap_state_dict", _timm_state_remapped),
    Case("lightning:Trainer.validate", _trainer_runs("validate"), setup=_with_steps),
    Case("lightning:Trainer.test", _trainer_runs("test"), setup=_with_steps),
    Case("lightning:Trainer.predict", _trainer_runs("predict"), setup=_with_steps),
    Case("lightning:LightningModule.validation_step", _lightning_module_call(
        lambda model, x: model.validation_step((x,), 0)), setup=_with_steps),
    Case("lightning:LightningModule.test_step", _lightning_module_call(lambda model, x: model.test_step((x,), 0)),
         setup=_with_steps),
    Case("lightning:LightningModule.backward", _lightning_module_call(
        lambda model, x: model.backward(model(x).pow(2).mean()))),
    Case("lightning:LightningModule.optimizer_step", _lightning_module_call(
        lambda model, x: model.optimizer_step(0, 0, torch.optim.SGD(model.parameters(), lr=0.1)))),
    Case("lightning:LightningModule.lr_scheduler_step", _lightning_module_call(
        lambda model, x: model.lr_scheduler_step(torch.optim.lr_scheduler.StepLR(
            torch.optim.SGD(model.parameters(), lr=0.1), step_size=1), None))),
    Case("lightning:LightningModule.save_hyperparameters", _same(lambda m: m.save_hyperparameters())),
    *(Case(f"torch_ao_quantization:{name}", _scripted_and(name)) for name in _JIT_QUANTIZATION),
    Case("torch_ao_quantization:swap_module", _swapped_for_dynamic),
    Case("torch_ao_quantization:load_observer_state_dict",
         _same(lambda m: quantization.load_observer_state_dict(m, quantization.get_observer_state_dict(m))),
         setup=_quantization_prepared),
    Case("transformers:PreTrainedModel.resize_position_embeddings",
         _same(lambda m: m.resize_position_embeddings(2 * m.config.max_position_embeddings))),
    Case("transformers:GenerationMixin.destroy_cached_continuous_batching_manager",
         _same(lambda m: m.destroy_cached_continuous_batching_manager())),
    Case("transformers:Trainer.training_step", _with_trainer(_trainer_training_step)),
    Case("diffusers:ModelMixin.compile_repeated_blocks", _same(lambda m: m.compile_repeated_blocks())),
    Case("diffusers:DiffusionPipeline.from_config", _with_pipeline(lambda pipeline: type(pipeline).from_config(
        pipeline.config))),
    Case("torch_geometric:compile", _geometric_compiled),
    Case("diffusers:ModelMixin.dequantize", _same(lambda m: m.dequantize()), setup=_torchao_loaded),
    Case("timm:register_notrace_module", _not_traced, teardown=_notrace_undone),
    Case("fsdp2:fully_shard", _in_one_process_group("fsdp2"), teardown=_no_process_group),
    Case("tensor_parallel:parallelize_module", _in_one_process_group("tensor_parallel"),
         teardown=_no_process_group),
)


_NO_XFORMERS = "xformers' kernels need a CUDA GPU (and xformers is not installed beside the pinned torch)"
_NPU = "needs an Ascend NPU (torch_npu)"
_XLA = "needs a TPU or another XLA device (torch_xla)"
_HUB = "reads weights, a configuration or code from the Hugging Face Hub or a URL: nothing can be downloaded here"
# operations of the table that cannot run on this machine (one CPU process, no GPU), with why
CANNOT_RUN_HERE: dict[str, str] = {
    "diffusers:ModelMixin.enable_xformers_memory_efficient_attention": _NO_XFORMERS,
    "diffusers:ModelMixin.disable_xformers_memory_efficient_attention": _NO_XFORMERS,
    "diffusers:DiffusionPipeline.enable_xformers_memory_efficient_attention": _NO_XFORMERS,
    "diffusers:DiffusionPipeline.disable_xformers_memory_efficient_attention": _NO_XFORMERS,
    "diffusers:ModelMixin.enable_npu_flash_attention": _NPU,
    "diffusers:ModelMixin.disable_npu_flash_attention": _NPU,
    "diffusers:ModelMixin.enable_xla_flash_attention": _XLA,
    "diffusers:ModelMixin.disable_xla_flash_attention": _XLA,
    "accelerate:prepare_pippy": "splits a model into pipeline stages on several GPUs",
    "timm:load_pretrained": _HUB,
    "timm:load_custom_pretrained": _HUB,
    "timm:load_model_config_from_hf": _HUB,
    "transformers:GenerationMixin.load_custom_generate": _HUB,
}


# ---- observing -------------------------------------------------------------------------------------------------------

def _find(model: nn.Module, path: str) -> nn.Module | None:
    """The module at ``path``, or at the one path that ends with it (a wrapper's prefix), else None."""
    modules = dict(model.named_modules())
    if path in modules:
        return modules[path]
    ending = [m for name, m in modules.items() if name.endswith("." + path)]
    return ending[0] if len(ending) == 1 else None


def _place(model: nn.Module, path: str) -> Place | None:
    target = _find(model, path)
    if target is None:
        return None
    return Place(model, target, next(target.parameters(), None))


_AFTER, _BEFORE = "the target after the operation", "what it was registered on, before the operation"


def _given(obj: Any, before: Place | None, after: Place | None) -> str:
    if after is not None and (obj is after.target or obj is after.parameter):
        return _AFTER
    if before is not None and (obj is before.target or obj is before.parameter):
        return _BEFORE
    return f"another {type(obj).__name__}"


_LOCAL_FUNCTION = re.compile(r"[\w.]*<(?:lambda|locals)>[\w.<>]*\(\)")


def _said(error: BaseException) -> str:
    """``"<Type>: <the first line of its message>"`` (at most 160 characters), where a hook of this module that was
    called wrongly is named ``the hook()`` rather than by the name Python gives a lambda."""
    first = str(error).splitlines()[0][:160] if str(error) else ""
    return f"{type(error).__name__}: {_LOCAL_FUNCTION.sub('the hook()', first)}"


def _first_tensor(output: Any) -> torch.Tensor:
    """The tensor a loss is made of where the profile gives no loss: the output, or the first tensor in it (a
    tuple's, a dict's or a library's output class's first value: ``UNet2DOutput.sample``)."""
    if isinstance(output, torch.Tensor):
        return output
    values = output.values() if hasattr(output, "values") else (
        output if isinstance(output, (tuple, list)) else vars(output).values())
    return next(_first_tensor(v) for v in values if isinstance(v, torch.Tensor) or hasattr(v, "values")
                or isinstance(v, (tuple, list)))


def _run(model: nn.Module, setup: Any, log: Log) -> str | None:
    """The phases, in order, on ``model``; the first error as ``"<phase>: <Exception>: <its first line>"``."""
    try:
        _phase[0] = "forward"
        output = model(*setup.inputs())
        _phase[0] = "backward"
        loss = setup.loss(output) if hasattr(setup, "loss") else _first_tensor(output).float().pow(2).mean()
        if loss.requires_grad:
            loss.backward()
        _phase[0] = "state_dict"
        state = model.state_dict()
        _phase[0] = "load_state_dict"
        model.load_state_dict(state)
    except Exception as error:  # noqa: BLE001 - what a phase raised is what the cell records
        return f"{_phase[0]}: {_said(error)}"
    finally:
        _phase[0] = "setup"
    return None


def _register(family: str, place: Place | None, log: Log) -> Any:
    """The family's handle, or why it could not be registered (a sentence)."""
    if place is None and family not in GLOBAL:  # a global hook sees every module: it needs no target
        return "no module at the target's path"
    if family in ("param-hook", "post-accumulate-grad-hook") and place.parameter is None:
        return "the target has no parameter"
    try:
        return FAMILIES[family](place, log)
    except Exception as error:  # noqa: BLE001 - a refusal is what the cell records
        return _said(error)


def observe(case: Case, family: str, when: str) -> dict[str, Any]:
    """One cell: ``family``'s hook registered ``when`` (before or after) ``case``'s operation, observed."""
    from tools.profiles.libraries import modules
    setup = modules()[case.profile or case.slug]
    torch.manual_seed(0)
    model = case.setup(setup.build())
    log: Log = []
    before = _place(model, setup.TARGET)
    handle = None
    try:
        if when == "before":
            handle = _register(family, before, log)
            if isinstance(handle, str):
                return {"registered": False, "why": handle}
        _phase[0] = "operation"
        try:
            model = case.operate(model)
        except Exception as error:  # noqa: BLE001 - an operation that refuses this model is what the cell records
            return {"registered": when == "before", "operation raised": _said(error)}
        finally:
            _phase[0] = "setup"
        after = _place(model, setup.TARGET)
        if when == "after":
            handle = _register(family, after, log)
            if isinstance(handle, str):
                return {"registered": False, "why": handle}
        error = _run(model, setup, log)
        fired = Counter(phase for phase, _ in log)
        given = sorted({_given(obj, before, after) for _, obj in log}) if family not in GLOBAL else []
        log.clear()
        handle.remove()
        handle = None
        model.zero_grad(set_to_none=True)  # as a training loop does between steps (opacus refuses a second otherwise)
        error_after = _run(model, setup, log)
        return {"registered": True, "fires": {p: fired[p] for p in PHASES if fired[p]}, "given": given,
                "after remove": len(log), "error": error or error_after}
    finally:
        if handle is not None and not isinstance(handle, str):
            handle.remove()
        if case.teardown is not None:
            case.teardown()


def cells(only: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every cell of every case (or of the operations ``only`` names), by key ``<slug>:<operation>|<family>|<when>``."""
    return observed_and_unusual(only)[0]


def _unchanged(model: nn.Module) -> nn.Module:
    return model


def baseline(case: Case, family: str) -> dict[str, Any]:
    """The cell of ``family`` on the model as it stands before ``case``'s operation (its setup done, the operation
    not): what a user would see without the operation."""
    return observe(Case(case.operation, _unchanged, case.setup, case.profile), family, "after")


def unusual(cell: dict[str, Any], base: dict[str, Any]) -> list[str]:
    """How a cell differs from its baseline (:func:`baseline`), in words; empty when the operation changed nothing
    a user of this hook can see."""
    if "operation raised" in cell:
        return ["the operation raised"]
    if not cell["registered"]:
        return [] if not base.get("registered") else ["could not be registered"]
    if not base.get("registered"):
        return ["registered where it could not be without the operation"]
    out = []
    fires = {p: n for p, n in cell["fires"].items() if p != "operation"}
    if cell["fires"].get("operation"):
        out.append("fires during the operation")
    if fires != base["fires"]:
        out.append("fires otherwise" if fires else "never fires")
    if cell["given"] != base["given"]:
        if any(given.startswith("another ") for given in cell["given"]):
            out.append("given another object")
        if _BEFORE in cell["given"]:
            out.append("given the object it was registered on, no longer at its place")
    if cell["after remove"]:
        out.append("fires after handle.remove()")
    if cell["error"] != base["error"]:
        out.append("a run raises" if cell["error"] else "a run that raised no longer raises")
    return out


def observed_and_unusual(only: list[str] | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """The cells of every case (or of the operations ``only`` names), and, for each that differs from its baseline,
    how (:func:`unusual`)."""
    out, odd = {}, {}
    for case in CASES:
        if only and case.operation not in only:
            continue
        for family in FAMILIES:
            base = baseline(case, family)
            for when in WHEN:
                key = f"{case.operation}|{family}|{when}"
                out[key] = observe(case, family, when)
                if how := unusual(out[key], base):
                    odd[key] = how
    return out, odd


def every_key(table: dict[str, Any] | None = None) -> list[str]:
    """The key of every cell the operations table makes (each operation × each family × before and after)."""
    table = table or json.loads(operations.TABLE.read_text(encoding="utf-8"))
    return sorted(f"{slug}:{o['name']}|{family}|{when}" for slug, entry in table["libraries"].items()
                  for o in entry["operations"] for family in FAMILIES for when in WHEN)


def is_held_out(key: str) -> bool:
    """Whether the cell ``key`` is in the held-out part: a draw of its own, seeded by :data:`HELD_OUT_SEED` and the
    key, so that a cell stays where it was drawn when the operations table grows (about 20 % of any set of keys)."""
    digest = hashlib.sha256(f"{HELD_OUT_SEED}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < HELD_OUT_SHARE * 2**64


def held_out(keys: list[str]) -> set[str]:
    """The held-out part of ``keys`` (:func:`is_held_out`)."""
    return {key for key in keys if is_held_out(key)}


def fixes(odd: dict[str, list[str]], observed: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """A fix for each unusual cell that the matrix itself proves: a hook registered before the operation behaves
    otherwise than without it, and the same hook registered after the operation behaves as without it (its cell is
    observed and not unusual), so registering after the operation is the fix, and that cell shows it."""
    out = {}
    for key in odd:
        stem, when = key.rsplit("|", 1)
        after = f"{stem}|after"
        if when == "before" and after in observed and after not in odd:
            out[key] = {"fix": "register the hook after the operation", "shown by": after}
    return out


def _standing(observed: dict[str, dict[str, Any]], odd: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """Per library: its operations in the table, those observed, those that cannot run here (and why), the rest; its
    cells observed and how many of them are unusual."""
    table = json.loads(operations.TABLE.read_text(encoding="utf-8"))
    seen = {key.split("|")[0] for key in observed}
    fixed = fixes(odd, observed)
    out = {}
    for slug, entry in table["libraries"].items():
        names = [f"{slug}:{o['name']}" for o in entry["operations"]]
        cannot = {name: CANNOT_RUN_HERE[name] for name in names if name in CANNOT_RUN_HERE}
        ours = [key for key in observed if key.split(":")[0] == slug]
        out[slug] = {"operations": len(names), "observed": sum(name in seen for name in names),
                     "cannot run here": cannot,
                     "not yet": sum(name not in seen and name not in cannot for name in names),
                     "cells": len(ours), "unusual": sum(key in odd for key in ours),
                     "with a fix": sum(key in fixed for key in ours)}
    return out


def document(observed: dict[str, dict[str, Any]], odd: dict[str, list[str]]) -> dict[str, Any]:
    keys = every_key()
    unknown = set(observed) - set(keys)
    if unknown:
        raise ValueError(f"cells of operations the table does not have: {sorted(unknown)[:3]}")
    return {"about": "The library matrix: an operation of a library x a hook family x registered before or after "
                     "it, observed by running (python -m tools.profiles.cells --write). 'fires' counts the hook's "
                     "calls per phase; 'given' is what a module or tensor hook was given; 'after remove' counts its "
                     "calls after handle.remove().",
            "torch": torch.__version__.split("+")[0], "families": list(FAMILIES), "phases": list(PHASES),
            "cells in the table": len(keys), "held out": {"seed": HELD_OUT_SEED, "share": HELD_OUT_SHARE},
            "operations": _standing(observed, odd),
            "unusual": {"about": "the cells that differ from their baseline (the same hook on the model as it "
                                 "stands before the operation), each with how; a fix where the matrix proves "
                                 "one (registered after the operation, the hook behaves as without it)",
                        "count": len(odd), "with a fix": len(fixed := fixes(odd, observed)),
                        "cells": {key: odd[key] for key in sorted(odd)},
                        "fixes": {key: fixed[key] for key in sorted(fixed)}},
            "cells": {key: observed[key] for key in sorted(observed)}}


def merged(doc: dict[str, Any], observed: dict[str, dict[str, Any]], odd: dict[str, list[str]], only: list[str],
           ) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """The committed document's cells with those of the operations ``only`` names observed again: ``--write --only``
    writes the whole matrix, the other operations' cells as committed (it once wrote those operations alone).

    >>> doc = {"cells": {"a:x|f|before": {"n": 1}, "b:y|f|before": {"n": 2}},
    ...        "unusual": {"cells": {"a:x|f|before": ["u"]}}}
    >>> cells, odd = merged(doc, {"a:x|f|before": {"n": 3}}, {}, ["a:x"])
    >>> sorted(cells.items()), odd
    ([('a:x|f|before', {'n': 3}), ('b:y|f|before', {'n': 2})], {})
    """
    def kept(key: str) -> bool:
        return key.split("|")[0] not in only
    return ({**{k: v for k, v in doc["cells"].items() if kept(k)}, **observed},
            {**{k: v for k, v in doc["unusual"]["cells"].items() if kept(k)}, **odd})


def _lines(observed: dict[str, dict[str, Any]], odd: dict[str, list[str]]) -> Iterator[str]:
    for key, cell in observed.items():
        if key in odd:
            yield f"{key}: unusual ({', '.join(odd[key])})"
        if "operation raised" in cell:
            yield f"{key}: the operation raised {cell['operation raised']}"
            continue
        if not cell["registered"]:
            yield f"{key}: not registered ({cell['why']})"
            continue
        fires = ", ".join(f"{p} {n}" for p, n in cell["fires"].items()) or "never"
        yield (f"{key}: fires {fires}; given {'; '.join(cell['given']) or '-'}; after remove "
               f"{cell['after remove']}" + (f"; error {cell['error']}" if cell["error"] else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.profiles.cells", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {MATRIX.relative_to(ROOT)}")
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed cell is not what runs now")
    parser.add_argument("--only", action="append", help="an operation (<slug>:<name>) to observe; repeatable (with "
                        "--write, the other operations' cells are kept as committed)")
    args = parser.parse_args(argv)
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(1)
    observed, odd = observed_and_unusual(args.only)
    for line in _lines(observed, odd):
        print(line)
    if args.write:
        if args.only:
            observed, odd = merged(json.loads(MATRIX.read_text(encoding="utf-8")), observed, odd, args.only)
        doc = document(observed, odd)
        MATRIX.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        rows.ROWS.write_text(rows.text(doc), encoding="utf-8")  # what course.profile prints first
    if args.check:
        doc = json.loads(MATRIX.read_text(encoding="utf-8"))
        committed, committed_odd = doc["cells"], doc["unusual"]["cells"]
        differ = [key for key in observed if committed.get(key) != observed[key]
                  or committed_odd.get(key, []) != odd.get(key, [])]
        for key in differ:
            print(f"differs: {key}\n  committed: {committed.get(key)} {committed_odd.get(key, [])}\n"
                  f"  now:       {observed[key]} {odd.get(key, [])}", file=sys.stderr)
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
