"""The library matrix's cells observed again, independently of the generator (tools/profiles/cells.py is not used):
for each cell ``<slug>:<operation>|<family>|<when>``, a hook of ``family`` is registered on the profile's small model
before or after the library operation, the model runs (forward, backward, state_dict, load_state_dict), and what the
hook did is written down as docs/library_matrix.json writes it. Written from the matrix's specification only, for
tests/tools/test_library_matrix_held_out.py.

Libraries leave global state behind, so the observations are made in a fresh interpreter:

    .venv/bin/python tests/tools/library_matrix_truth.py OUT.json KEY [KEY ...]

writes ``{key: observation}`` to OUT.json (a library may print on stdout, so the result goes to a file). Importing
this module imports torch and the profile modules only, never a profiled library.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SEED, SHARE = 7901, 0.2  # the held-out cells: the generator never reads them back to choose what it writes
PHASES = ("operation", "forward", "backward", "state_dict", "load_state_dict")
GLOBAL = ("global-forward-hook", "global-full-backward-hook", "saved-tensors-pack")  # no target, nothing "given"
ON_PARAMETER = ("param-hook", "post-accumulate-grad-hook")
FAMILIES = ("forward-pre-hook", "forward-pre-hook-with-kwargs", "forward-hook", "forward-hook-always-call",
            "backward-pre-hook", "full-backward-hook", *ON_PARAMETER, "state-dict-pre-hook", "state-dict-post-hook",
            "load-state-dict-pre-hook", "load-state-dict-post-hook", *GLOBAL)
AFTER = "the target after the operation"
BEFORE = "what it was registered on, before the operation"


def held_out(key: str) -> bool:
    """Whether a cell is held out: a fifth of the keys, by a seeded hash of the key alone."""
    digest = hashlib.sha256(f"{SEED}:{key}".encode()).digest()[:8]
    return int.from_bytes(digest, "big") < SHARE * 2 ** 64


def parse(key: str) -> tuple[str, str, str, str]:
    """(slug, operation, family, when) of ``<slug>:<operation>|<family>|<when>``."""
    left, family, when = key.split("|")
    slug, operation = left.split(":", 1)
    if family not in FAMILIES or when not in ("before", "after"):
        raise ValueError(f"not a cell of the library matrix: {key!r}")
    return slug, operation, family, when


HOOK_NAME = re.compile(r"[\w.]*<(?:lambda|locals)>[\w.<>]*\(\)")  # a hook function this file defines, called


def error_text(error: BaseException) -> str:
    """``Type: first line of the message`` (at most 160 characters of it), a hook of this file named ``the hook()``
    (every hook here is a lambda or a function defined in another, so its qualified name holds ``<locals>``)."""
    lines = str(error).splitlines()
    first = HOOK_NAME.sub("the hook()", lines[0] if lines else "")
    return f"{type(error).__name__}: {first[:160]}"


# ------------------------------------------------------------------------------------------------ the operations
def _profile(slug: str) -> Any:
    from tools.profiles.libraries import modules

    return modules()[slug]


def _peft(model: Any, keep: list) -> Any:
    return _profile("peft").apply(model)


def _peft_merged(model: Any, keep: list) -> Any:
    model = _profile("peft").apply(model)
    model.merge_adapter()
    return model


def _same(model: Any, keep: list) -> Any:
    return model


def _then(call: Callable[[Any], Any]) -> Callable[[Any, list], Any]:
    """An operation that calls ``call(model)`` for what it does and goes on with the same model."""
    def operation(model: Any, keep: list) -> Any:
        call(model)
        return model
    return operation


def _returns(call: Callable[[Any], Any]) -> Callable[[Any, list], Any]:
    """An operation whose result is the model used afterwards."""
    return lambda model, keep: call(model)


def _disable_adapter(model: Any, keep: list) -> Any:
    context = model.disable_adapter()
    context.__enter__()  # left entered on purpose, and kept alive for the whole cell
    keep.append(context)
    return model


def _from_pretrained(model: Any, keep: list) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        return type(model).from_pretrained(folder)


def _save_pretrained(model: Any, keep: list) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
    return model


def _second_adapter(model: Any, keep: list) -> Any:
    import peft

    model.add_adapter("second", peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    return model


def _peft_and_second_adapter(model: Any, keep: list) -> Any:
    return _second_adapter(_peft(model, keep), keep)


def _peft_state_dict(model: Any, keep: list) -> Any:
    import peft

    peft.get_peft_model_state_dict(model)
    return model


def _generate(model: Any, keep: list) -> Any:
    model.generate(*_profile("transformers").inputs(), max_new_tokens=2, do_sample=False)
    return model


def _quantize_dynamic(model: Any, keep: list) -> Any:
    import torch

    return torch.ao.quantization.quantize_dynamic(model.eval(), {torch.nn.Linear}, dtype=torch.qint8)


def _prepare_model(model: Any, keep: list) -> Any:
    import accelerate

    return accelerate.Accelerator(cpu=True).prepare_model(model)


def _privately(method: str, **options: Any) -> Callable[[Any, list], Any]:
    """``opacus.PrivacyEngine().<method>(...)`` over a loader of the profile's input with zero long labels and SGD
    (lr 0.1); the user goes on with the module it returns."""
    def operation(model: Any, keep: list) -> Any:
        import opacus
        import torch

        (x,) = _profile("opacus").inputs()
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(x, torch.zeros(len(x), dtype=torch.long)), batch_size=len(x))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        made = getattr(opacus.PrivacyEngine(), method)(module=model, optimizer=optimizer, data_loader=loader,
                                                       **options)
        return made[0]
    return operation


_make_private = _privately("make_private", noise_multiplier=1.0, max_grad_norm=1.0)


def _integrated_gradients(model: Any, keep: list) -> Any:
    import captum.attr

    captum.attr.IntegratedGradients(model).attribute(*_profile("captum").inputs(), target=0, n_steps=4)
    return model


def _create_model(model: Any, keep: list) -> Any:
    import timm

    return timm.create_model("test_resnet", pretrained=False)  # a new model: the one given is dropped


def _prune_l1(model: Any, keep: list) -> Any:
    from torch.nn.utils import prune

    prune.l1_unstructured(model[0], "weight", amount=0.5)
    return model


def _prune_remove(model: Any, keep: list) -> Any:
    from torch.nn.utils import prune

    prune.remove(model[0], "weight")
    return model


def _parametrize(model: Any, keep: list) -> Any:
    import torch
    from torch.nn.utils import parametrize

    class Double(torch.nn.Module):
        def forward(self, weight):
            return weight * 2

    parametrize.register_parametrization(model[0], "weight", Double())
    return model


def _unparametrize(model: Any, keep: list) -> Any:
    from torch.nn.utils import parametrize

    parametrize.remove_parametrizations(model[0], "weight")
    return model


def _eval(model: Any, keep: list) -> Any:
    return model.eval()


def _ao_prepared_and_calibrated(model: Any, keep: list) -> Any:
    profile = _profile("torch_ao_quantization")
    model = profile.apply(model.eval())
    model(*profile.inputs())
    return model


def _ao_convert(model: Any, keep: list) -> Any:
    import torch

    return torch.ao.quantization.convert(model)


def _applied(slug: str) -> Callable[[Any, list], Any]:
    return lambda model, keep: _profile(slug).apply(model)


def _swa_update(model: Any, keep: list) -> Any:
    model.update_parameters(model.module)
    return model


def _grad_cam(model: Any, keep: list) -> Any:
    import captum.attr

    captum.attr.LayerGradCam(model, model[0]).attribute(*_profile("captum").inputs(), target=0)
    return model


def _group_offload(model: Any, keep: list) -> Any:
    import torch

    model.enable_group_offload(onload_device=torch.device("cpu"), offload_device=torch.device("cpu"),
                               offload_type="leaf_level")
    return model


def _cpu_offload(model: Any, keep: list) -> Any:
    import accelerate
    import torch

    return accelerate.cpu_offload(model, execution_device=torch.device("cpu"))


def _dispatch(model: Any, keep: list) -> Any:
    import accelerate

    return accelerate.dispatch_model(model, device_map={"": "cpu"})


def _add_adapter(model: Any, keep: list) -> Any:
    import peft

    model.add_adapter(peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
                      adapter_name="first")
    return model


def _adapter_disabled(model: Any, keep: list) -> Any:
    model = _add_adapter(model, keep)
    model.disable_adapters()
    return model


def _layerwise_casting(model: Any, keep: list) -> Any:
    import torch

    model.enable_layerwise_casting(storage_dtype=torch.bfloat16, compute_dtype=torch.float32)
    return model


def _cpu_offload_with_hook(model: Any, keep: list) -> Any:
    import accelerate
    import torch

    model, hook = accelerate.cpu_offload_with_hook(model, execution_device=torch.device("cpu"))
    keep.append(hook)  # the returned hook stays alive for the whole cell
    return model


def _load_checkpoint(model: Any, keep: list) -> Any:
    import accelerate.utils
    import torch

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.pt"
        torch.save(model.state_dict(), path)
        accelerate.utils.load_checkpoint_in_model(model, str(path))
    return model


def _prepare_qat(model: Any, keep: list) -> Any:
    import torch

    model.train()
    model.qconfig = torch.ao.quantization.get_default_qat_qconfig("fbgemm")
    return torch.ao.quantization.prepare_qat(model)


def _fuse_modules(model: Any, keep: list) -> Any:
    import torch

    model.eval()
    return torch.ao.quantization.fuse_modules(model, [["1", "2"]])


def _get_model(model: Any, keep: list) -> Any:
    import torchvision

    return torchvision.models.get_model("resnet18", weights=None, num_classes=10)  # a new model: the given is dropped


def _pyg_summary(model: Any, keep: list) -> Any:
    import torch_geometric.nn

    torch_geometric.nn.summary(model, *_profile("torch_geometric").inputs())
    return model


def _offload_wrapper(model: Any, keep: list) -> Any:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import offload_wrapper

    model[0] = offload_wrapper(model[0])
    return model


def _peft_generate(model: Any, keep: list) -> Any:
    model.generate(input_ids=_profile("peft").inputs()[0], max_new_tokens=2, do_sample=False)
    return model


def _peft_layers_disabled(model: Any, keep: list) -> Any:
    model = _peft(model, keep)
    model.disable_adapter_layers()
    return model


def _pruned(method: str, **options: Any) -> Callable[[Any, list], Any]:
    """``torch.nn.utils.prune.<method>(model[0], "weight", **options)`` after ``torch.manual_seed(0)``."""
    def operation(model: Any, keep: list) -> Any:
        import torch
        from torch.nn.utils import prune

        torch.manual_seed(0)
        getattr(prune, method)(model[0], "weight", **options)
        return model
    return operation


def _lightning_loader() -> Any:
    """A DataLoader over ``TensorDataset(x)``, ``x`` the lightning profile's one input, in one batch."""
    import torch

    (x,) = _profile("lightning").inputs()
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=len(x))


def _lightning_trainer() -> Any:
    """A one-step CPU trainer that logs, checkpoints, shows and summarises nothing."""
    import pytorch_lightning as pl

    return pl.Trainer(max_steps=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)


def _lightning_fit(model: Any, keep: list) -> Any:
    _lightning_trainer().fit(model, _lightning_loader())
    return model


def _lightning_run(method: str) -> Callable[[Any, list], Any]:
    """``getattr(a_trainer, method)(model, the_loader)``; the same model goes on."""
    return _then(lambda model: getattr(_lightning_trainer(), method)(model, _lightning_loader()))


_WITH_STEPS: dict[type, type] = {}  # the model's class -> its subclass with the steps, made once


def _step_loss(self: Any, batch: Any, batch_idx: int) -> Any:
    return self(batch[0]).pow(2).mean()


def _with_steps(model: Any, keep: list) -> Any:
    """The model's class replaced by a subclass adding ``validation_step`` and ``test_step`` (the loss
    ``self(batch[0]).pow(2).mean()``) and ``predict_step`` (``self(batch[0])``)."""
    base = type(model)
    if base not in _WITH_STEPS:
        _WITH_STEPS[base] = type(f"{base.__name__}WithSteps", (base,), {
            "validation_step": _step_loss, "test_step": _step_loss,
            "predict_step": lambda self, batch, batch_idx: self(batch[0])})
    model.__class__ = _WITH_STEPS[base]
    return model


def _lightning_step(method: str) -> Callable[[Any, list], Any]:
    """``getattr(model, method)((x,), 0)``, ``x`` the lightning profile's one input; the same model goes on."""
    return _then(lambda model: getattr(model, method)(_profile("lightning").inputs(), 0))


def _lightning_scheduler_step(model: Any) -> None:
    import torch

    model.lr_scheduler_step(torch.optim.lr_scheduler.StepLR(_sgd(model), step_size=1), None)


def _lightning_save_checkpoint(model: Any, keep: list) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        model.trainer.save_checkpoint(str(Path(folder) / "model.ckpt"))
    return model


def _lightning_load_from_checkpoint(model: Any, keep: list) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "model.ckpt")
        model.trainer.save_checkpoint(path)
        return type(model).load_from_checkpoint(path)  # a new model


def _lightning_forward(model: Any, keep: list) -> Any:
    model.forward(*_profile("lightning").inputs())  # the method itself, not model(...)
    return model


def _swa_forward(model: Any, keep: list) -> Any:
    model(*_profile("swa_utils").inputs())
    return model


def _swap_conv2d_1x1(model: Any, keep: list) -> Any:
    import torchao.quantization

    torchao.quantization.swap_conv2d_1x1_to_linear(model)
    return model


def _infer_device_map(model: Any, keep: list) -> Any:
    import accelerate

    accelerate.infer_auto_device_map(model)
    return model


def _disk_offload(model: Any, keep: list) -> Any:
    import accelerate
    import torch

    folder = tempfile.TemporaryDirectory()
    keep.append(folder)  # the offloaded weights live there for the whole cell; removed when keep is cleared
    return accelerate.disk_offload(model, offload_dir=folder.name, execution_device=torch.device("cpu"))


def _load_checkpoint_and_dispatch(model: Any, keep: list) -> Any:
    import accelerate
    import torch

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.pt"
        torch.save(model.state_dict(), path)
        return accelerate.load_checkpoint_and_dispatch(model, str(path), device_map={"": "cpu"})


def _accelerator(method: str, *, folder: bool = False, goes_on: bool = False) -> Callable[[Any, list], Any]:
    """``accelerate.Accelerator(cpu=True).<method>(model[, a temporary directory])``: the user goes on with its
    result if ``goes_on``, else with the same model."""
    def operation(model: Any, keep: list) -> Any:
        import accelerate

        call = getattr(accelerate.Accelerator(cpu=True), method)
        if folder:
            with tempfile.TemporaryDirectory() as directory:
                result = call(model, directory)
        else:
            result = call(model)
        return result if goes_on else model
    return operation


def _timm_load_checkpoint(model: Any, keep: list) -> Any:
    import timm.models
    import torch

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.pt"
        torch.save(model.state_dict(), path)
        timm.models.load_checkpoint(model, str(path))
    return model


def _timm_save_for_hf(model: Any, keep: list) -> Any:
    import timm.models

    with tempfile.TemporaryDirectory() as folder:
        timm.models.save_for_hf(model, folder)
    return model


def _timm_feature_extractor(model: Any, keep: list) -> Any:
    import timm.models

    return timm.models.create_feature_extractor(model, return_nodes={"layer1": "feat1", "layer2": "feat2"})


def _two_adapters(model: Any, keep: list) -> Any:
    import peft

    model = _add_adapter(model, keep)
    model.add_adapter(peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
                      adapter_name="second")
    return model


def _hf_load_adapter(model: Any, keep: list) -> Any:
    import torch

    torch.manual_seed(1)
    other = _add_adapter(_profile("transformers").build(), keep)
    with tempfile.TemporaryDirectory() as folder:
        other.save_pretrained(folder)
        model.load_adapter(folder, adapter_name="loaded")
    return model


def _other_peft_saved(folder: str) -> None:
    """Another PEFT model (the peft profile's ``apply(build())`` after ``torch.manual_seed(1)``) saved in ``folder``."""
    import torch

    profile = _profile("peft")
    torch.manual_seed(1)
    profile.apply(profile.build()).save_pretrained(folder)


def _peft_from_pretrained(model: Any, keep: list) -> Any:
    import peft

    with tempfile.TemporaryDirectory() as folder:
        _other_peft_saved(folder)
        return peft.PeftModel.from_pretrained(model, folder)


def _peft_load_adapter(model: Any, keep: list) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        _other_peft_saved(folder)
        model.load_adapter(folder, adapter_name="loaded")
    return model


def _peft_set_state_dict(model: Any, keep: list) -> Any:
    import peft

    peft.set_peft_model_state_dict(model, peft.get_peft_model_state_dict(model))
    return model


def _ao_run(m: Any, batch: Any) -> None:
    m(batch)


def _ao_quantize(model: Any, keep: list) -> Any:
    import torch

    q = torch.ao.quantization
    model.eval()
    model.qconfig = q.get_default_qconfig("fbgemm")
    return q.quantize(model, _ao_run, list(_profile("torch_ao_quantization").inputs()))


def _ao_quantize_qat(model: Any, keep: list) -> Any:
    import torch

    q = torch.ao.quantization
    model.train()
    model.qconfig = q.get_default_qat_qconfig("fbgemm")
    return q.quantize_qat(model, _ao_run, list(_profile("torch_ao_quantization").inputs()))


def _fuse_modules_qat(model: Any, keep: list) -> Any:
    import torch

    model.train()
    return torch.ao.quantization.fuse_modules_qat(model, [["1", "2"]])


def _ao_applied(name: str) -> Callable[[Any, list], Any]:
    """``model.apply(torch.ao.quantization.<name>)``; the same model."""
    def operation(model: Any, keep: list) -> Any:
        import torch

        model.apply(getattr(torch.ao.quantization, name))
        return model
    return operation


def _qat_then(name: str) -> Callable[[Any, list], Any]:
    """Prepared for QAT, then ``model.apply(torch.ao.quantization.<name>)``."""
    return lambda model, keep: _ao_applied(name)(_prepare_qat(model, keep), keep)


def _ao_observer_state_dict(model: Any, keep: list) -> Any:
    import torch

    torch.ao.quantization.get_observer_state_dict(model)
    return model


def _trainer(call: Callable[[Any, Any], Any]) -> Callable[[Any, list], Any]:
    """``transformers.Trainer`` made for the model (max_steps 1, batch size 1, on the CPU, nothing saved, logged or
    reported; output in a temporary directory removed when the operation returns), train and eval dataset one row
    ``{"input_ids": ids, "labels": ids}`` of the profile's first input's first row; then ``call(trainer, batch)``
    with one batch ``{"input_ids": x, "labels": x}`` of the profile's first input. The same model goes on."""
    def operation(model: Any, keep: list) -> Any:
        import transformers

        profile = _profile("transformers")
        ids = profile.inputs()[0][0]
        data = [{"input_ids": ids, "labels": ids}]
        with tempfile.TemporaryDirectory() as folder:
            args = transformers.TrainingArguments(output_dir=folder, max_steps=1, per_device_train_batch_size=1,
                                                  report_to=[], use_cpu=True, save_strategy="no",
                                                  logging_strategy="no", disable_tqdm=True)
            trainer = transformers.Trainer(model=model, args=args, train_dataset=data, eval_dataset=data)
            x = profile.inputs()[0]
            call(trainer, {"input_ids": x, "labels": x})
        return model
    return operation


def _pipeline(step: Callable[[Any, str], Any]) -> Callable[[Any, list], Any]:
    """``diffusers.DDPMPipeline(unet=model, scheduler=DDPMScheduler(num_train_timesteps=10))``, then
    ``step(pipeline, folder)`` with a temporary directory removed after it; the user goes on with the ``unet`` of the
    pipeline the step returns if it returns one, else of the pipeline made."""
    def operation(model: Any, keep: list) -> Any:
        import diffusers

        pipeline = diffusers.DDPMPipeline(unet=model, scheduler=diffusers.DDPMScheduler(num_train_timesteps=10))
        with tempfile.TemporaryDirectory() as folder:
            made = step(pipeline, folder)
        return (made if isinstance(made, diffusers.DiffusionPipeline) else pipeline).unet
    return operation


def _pipeline_offload(pipeline: Any, folder: str) -> None:
    import torch

    pipeline.enable_group_offload(onload_device=torch.device("cpu"), offload_device=torch.device("cpu"),
                                  offload_type="leaf_level")


def _pipeline_reloaded(pipeline: Any, folder: str) -> Any:
    pipeline.save_pretrained(folder)
    return type(pipeline).from_pretrained(folder)


def _pipeline_config_loaded(pipeline: Any, folder: str) -> None:
    pipeline.save_config(folder)
    type(pipeline).load_config(folder)  # its result unused


def _with_accelerator(call: Callable[[Any, Any], Any]) -> Callable[[Any, list], Any]:
    """``call(accelerate.Accelerator(cpu=True), model)``; the same model goes on."""
    def operation(model: Any, keep: list) -> Any:
        import accelerate

        call(accelerate.Accelerator(cpu=True), model)
        return model
    return operation


def _accelerate_loader() -> Any:
    """A DataLoader over ``TensorDataset(x)``, ``x`` the accelerate profile's one input, in one batch."""
    import torch

    (x,) = _profile("accelerate").inputs()
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=len(x))


def _accelerate_backward(acc: Any, model: Any) -> None:
    acc.backward(_logits_loss(model(*_profile("accelerate").inputs())))


def _accelerate_profile(acc: Any, model: Any) -> None:
    with acc.profile():
        model(*_profile("accelerate").inputs())


def _accelerate_state(load: bool) -> Callable[[Any, Any], None]:
    """``acc.prepare(model)`` (result unused), ``acc.save_state(folder)``, then ``acc.load_state(folder)`` if
    ``load``, in a temporary directory."""
    def call(acc: Any, model: Any) -> None:
        acc.prepare(model)
        with tempfile.TemporaryDirectory() as folder:
            acc.save_state(folder)
            if load:
                acc.load_state(folder)
    return call


def _accelerate_save(acc: Any, model: Any) -> None:
    with tempfile.TemporaryDirectory() as folder:
        acc.save(model.state_dict(), str(Path(folder) / "model.pt"))


def _sgd(model: Any) -> Any:
    import torch

    return torch.optim.SGD(model.parameters(), lr=0.1)


def _accelerate_scheduler(acc: Any, model: Any) -> None:
    import torch

    optimizer = acc.prepare_optimizer(_sgd(model))
    acc.prepare_scheduler(torch.optim.lr_scheduler.StepLR(optimizer, step_size=1))


def _opacus_validate(model: Any, keep: list) -> Any:
    import opacus

    opacus.PrivacyEngine().validate(module=model, optimizer=None, data_loader=None)
    return model


def _opacus_checkpoint(load: bool) -> Callable[[Any, list], Any]:
    """``engine.save_checkpoint(path=<private.pt in a temporary directory>, module=model)``, then, if ``load``,
    ``engine.load_checkpoint`` of it with the same engine; the same model goes on."""
    def operation(model: Any, keep: list) -> Any:
        import opacus

        engine = opacus.PrivacyEngine()
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "private.pt"
            engine.save_checkpoint(path=path, module=model)
            if load:
                engine.load_checkpoint(path=path, module=model)
        return model
    return operation


def _kbit_training(model: Any, keep: list) -> Any:
    import peft

    return peft.prepare_model_for_kbit_training(model)


def _peft_ids() -> Any:
    return _profile("peft").inputs()[0]


def _base_model_state_dict(model: Any, keep: list) -> Any:
    import peft

    peft.get_base_model_state_dict(model)
    return model


def _set_base_model_state_dict(model: Any, keep: list) -> Any:
    import peft

    peft.set_base_model_state_dict(model, peft.get_base_model_state_dict(model))
    return model


def _peft_model_card(model: Any, keep: list) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        model.create_or_update_model_card(folder)
    return model


def _load_peft_weights(model: Any, keep: list) -> Any:
    import peft

    with tempfile.TemporaryDirectory() as folder:
        _other_peft_saved(folder)
        peft.load_peft_weights(folder)  # its result unused
    return model


def _eva_state_dict(model: Any, keep: list) -> Any:
    """``peft.get_eva_state_dict`` of the plain model (EVA LoRA config, r 2 on q_proj and v_proj, rho 1.0) over a
    loader of four batches ``{"input_ids": ids, "attention_mask": ones}``; its result unused, the same model goes on."""
    import peft
    import torch

    config = peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights="eva",
                             eva_config=peft.EvaConfig(rho=1.0))
    ids = _peft_ids()
    loader = [{"input_ids": ids, "attention_mask": torch.ones_like(ids)} for _ in range(4)]
    peft.get_eva_state_dict(model, loader, config, show_progress_bar=False)
    return model


def _peft_loha(model: Any, keep: list) -> Any:
    """A LoHa PEFT model (r 2 on q_proj and v_proj, ``init_weights=False``), not the profile's LoRA."""
    import peft

    return peft.get_peft_model(model, peft.LoHaConfig(r=2, target_modules=["q_proj", "v_proj"], init_weights=False))


def _convert_to_lora(model: Any, keep: list) -> Any:
    import peft

    peft.convert_to_lora(model, 2)  # its config and state dict unused
    return model


def _save_as_lora(model: Any, keep: list) -> Any:
    import peft

    with tempfile.TemporaryDirectory() as folder:
        peft.save_as_lora(folder, model, 2)
    return model


def _timm_remap_state_dict(model: Any, keep: list) -> Any:
    import timm.models

    timm.models.remap_state_dict(model.state_dict(), model)  # its result unused
    return model


class Undo:
    """A change to the whole process an operation made, kept in ``keep``: :func:`release` calls ``undo()``."""

    def __init__(self, undo: Callable[[], None]) -> None:
        self.undo = undo


def _register_notrace_module(model: Any, keep: list) -> Any:
    """``timm.layers._fx.register_notrace_module(type(model.layer1[0]))``; the same model goes on. The class is taken
    out of the process-wide set ``_leaf_modules`` again at the cell's end if it was not in it before."""
    from timm.layers import _fx

    block = type(model.layer1[0])
    if block not in _fx._leaf_modules:
        keep.append(Undo(lambda: _fx._leaf_modules.discard(block)))  # kept first: undone even if the call raises
    _fx.register_notrace_module(block)
    return model


def _torch_ao() -> Any:
    import torch

    return torch.ao.quantization


def _ao_qconfig(dynamic: bool) -> dict:
    """``{"": default_dynamic_qconfig}`` if ``dynamic``, else ``{"": get_default_qconfig("fbgemm")}``."""
    q = _torch_ao()
    return {"": q.default_dynamic_qconfig if dynamic else q.get_default_qconfig("fbgemm")}


def _scripted(call: Callable[[Any], Any]) -> Callable[[Any, list], Any]:
    """``call(torch.jit.script(model.eval()))``: the user goes on with the ScriptModule it returns."""
    def operation(model: Any, keep: list) -> Any:
        import torch

        return call(torch.jit.script(model.eval()))
    return operation


def _jit_prepared(scripted: Any, dynamic: bool) -> Any:
    """``prepare_jit`` (or ``prepare_dynamic_jit`` if ``dynamic``) of the ScriptModule, called once on the inputs."""
    q = _torch_ao()
    prepared = (q.prepare_dynamic_jit if dynamic else q.prepare_jit)(scripted, _ao_qconfig(dynamic))
    prepared(*_profile("torch_ao_quantization").inputs())
    return prepared


def _ao_swap_module(model: Any, keep: list) -> Any:
    import torch

    q = torch.ao.quantization
    model.eval()
    model[1].qconfig = q.default_dynamic_qconfig
    model[1] = q.swap_module(model[1], q.get_default_dynamic_quant_module_mappings(), {})
    return model


def _ao_load_observer_state_dict(model: Any, keep: list) -> Any:
    import torch

    q = torch.ao.quantization
    q.load_observer_state_dict(model, q.get_observer_state_dict(model))
    return model


def _trainer_training_step(trainer: Any, batch: Any) -> None:
    """One ``training_step`` on the batch (the profile's whole first input as input_ids and labels)."""
    trainer.current_gradient_accumulation_steps = 1
    trainer.training_step(trainer.model, batch)


def _pipeline_from_config(model: Any, keep: list) -> Any:
    """``type(pipeline).from_config(pipeline.config)`` of the pipeline :func:`_pipeline` makes; the user goes on with
    the ``unet`` of its result (of the pipeline made when the result is None)."""
    import diffusers

    pipeline = diffusers.DDPMPipeline(unet=model, scheduler=diffusers.DDPMScheduler(num_train_timesteps=10))
    result = type(pipeline).from_config(pipeline.config)
    return (pipeline if result is None else result).unet


def _text_generation(call: Callable[[Any, str], Any]) -> Callable[[Any, list], Any]:
    """A text-generation pipeline of the model on the CPU (greedy, two new tokens, set on the model's generation
    config) with a word-level tokenizer made in memory (``w0`` .. ``w31``; unknown and padding ``w0``, end ``w31``),
    then ``call(pipe, "w1 w2 w3 w4 w5")``; the same model goes on (``pipe.model`` is it)."""
    def operation(model: Any, keep: list) -> Any:
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast, pipeline

        words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(32)}, unk_token="w0"))
        words.pre_tokenizer = pre_tokenizers.Whitespace()
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0", pad_token="w0", eos_token="w31")
        model.generation_config.max_new_tokens = 2
        model.generation_config.do_sample = False
        pipe = pipeline("text-generation", model=model, tokenizer=tokenizer, device="cpu")
        call(pipe, "w1 w2 w3 w4 w5")
        return model
    return operation


def _text_pipeline_saved(pipe: Any, text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        pipe.save_pretrained(folder)


def _pyg_compile(model: Any, keep: list) -> Any:
    import torch_geometric

    return torch_geometric.compile(model, backend="eager")


def _process_group(keep: list) -> None:
    """A gloo process group of this one process (rank 0, world size 1) over a ``FileStore`` in a fresh temporary
    directory, unless one is initialized; the directory is kept for the cell, and :func:`release` ends both."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    folder = tempfile.TemporaryDirectory()
    keep.append(folder)
    dist.init_process_group("gloo", store=dist.FileStore(str(Path(folder.name) / "store"), 1), rank=0, world_size=1)


def _fully_shard(model: Any, keep: list) -> Any:
    """``fully_shard(model[0])``, then ``fully_shard(model)`` in a process group: the user goes on with what the second
    call returns."""
    from torch.distributed.fsdp import fully_shard

    _process_group(keep)
    fully_shard(model[0])
    return fully_shard(model)


def _parallelize_module(model: Any, keep: list) -> Any:
    """``parallelize_module`` of the model over a one-process CPU device mesh, ``"0"`` column-wise and ``"2"``
    row-wise, in a process group: the user goes on with what it returns."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    _process_group(keep)
    return parallelize_module(model, init_device_mesh("cpu", (1,)), {"0": ColwiseParallel(), "2": RowwiseParallel()})


def _torchao_reloaded(model: Any, keep: list) -> Any:
    """The model saved in a temporary directory (removed right after loading) and loaded again quantized by torchao
    (``TorchAoConfig(Int8WeightOnlyConfig())``, float32): the user goes on with the loaded model."""
    import diffusers
    import torch
    import torchao.quantization

    config = diffusers.TorchAoConfig(torchao.quantization.Int8WeightOnlyConfig())
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        return type(model).from_pretrained(folder, quantization_config=config, torch_dtype=torch.float32)


# (slug, operation) -> (the preparation before it, the operation): each takes (model, keep) and returns the model
OPERATIONS: dict[tuple[str, str], tuple[Callable[[Any, list], Any], Callable[[Any, list], Any]]] = {
    ("peft", "get_peft_model"): (_same, _peft),
    ("peft", "LoraModel.merge_and_unload"): (_peft, _returns(lambda m: m.merge_and_unload())),
    ("peft", "LoraModel.unload"): (_peft, _returns(lambda m: m.unload())),
    ("peft", "LoraModel.merge_adapter"): (_peft, _then(lambda m: m.merge_adapter())),
    ("peft", "LoraModel.unmerge_adapter"): (_peft_merged, _then(lambda m: m.unmerge_adapter())),
    ("peft", "LoraModel.disable_adapter_layers"): (_peft, _then(lambda m: m.disable_adapter_layers())),
    ("peft", "PeftModel.disable_adapter"): (_peft, _disable_adapter),
    ("transformers", "PreTrainedModel.gradient_checkpointing_enable"):
        (_same, _then(lambda m: m.gradient_checkpointing_enable())),
    ("transformers", "PreTrainedModel.gradient_checkpointing_disable"):
        (_then(lambda m: m.gradient_checkpointing_enable()), _then(lambda m: m.gradient_checkpointing_disable())),
    ("transformers", "PreTrainedModel.enable_input_require_grads"):
        (_same, _then(lambda m: m.enable_input_require_grads())),
    ("transformers", "PreTrainedModel.eval"): (_same, _eval),
    ("transformers", "PreTrainedModel.tie_weights"): (_same, _then(lambda m: m.tie_weights())),
    ("transformers", "PreTrainedModel.resize_token_embeddings"):
        (_same, _then(lambda m: m.resize_token_embeddings(40))),
    ("transformers", "PreTrainedModel.from_pretrained"): (_same, _from_pretrained),
    ("prune", "l1_unstructured"): (_same, _prune_l1),
    ("prune", "remove"): (_prune_l1, _prune_remove),
    ("parametrize", "register_parametrization"): (_same, _parametrize),
    ("parametrize", "remove_parametrizations"): (_parametrize, _unparametrize),
    ("torch_ao_quantization", "prepare"): (_eval, _applied("torch_ao_quantization")),
    ("torch_ao_quantization", "convert"): (_ao_prepared_and_calibrated, _ao_convert),
    ("torchao", "quantize_"): (_same, _applied("torchao")),
    ("checkpoint_wrapper", "apply_activation_checkpointing"): (_same, _applied("checkpoint_wrapper")),
    ("thop", "profile"): (_same, _applied("thop")),
    ("torchinfo", "summary"): (_same, _applied("torchinfo")),
    ("torchvision", "create_feature_extractor"): (_same, _applied("torchvision")),
    ("swa_utils", "AveragedModel.update_parameters"): (_applied("swa_utils"), _swa_update),
    ("captum", "LayerGradCam.attribute"): (_same, _grad_cam),
    ("diffusers", "ModelMixin.enable_group_offload"): (_same, _group_offload),
    ("accelerate", "cpu_offload"): (_same, _cpu_offload),
    ("accelerate", "dispatch_model"): (_same, _dispatch),
    ("transformers", "PreTrainedModel.save_pretrained"): (_same, _save_pretrained),
    ("transformers", "PreTrainedModel.disable_input_require_grads"):
        (_then(lambda m: m.enable_input_require_grads()), _then(lambda m: m.disable_input_require_grads())),
    ("transformers", "GenerationMixin.generate"): (_same, _generate),
    ("peft", "PeftModel.save_pretrained"): (_peft, _save_pretrained),
    ("peft", "get_peft_model_state_dict"): (_peft, _peft_state_dict),
    ("peft", "PeftModel.add_adapter"): (_peft, _second_adapter),
    ("peft", "PeftModel.set_adapter"): (_peft_and_second_adapter, _then(lambda m: m.set_adapter("second"))),
    ("diffusers", "ModelMixin.enable_gradient_checkpointing"):
        (_same, _then(lambda m: m.enable_gradient_checkpointing())),
    ("diffusers", "ModelMixin.from_pretrained"): (_same, _from_pretrained),
    ("torch_ao_quantization", "quantize_dynamic"): (_same, _quantize_dynamic),
    ("accelerate", "Accelerator.prepare_model"): (_same, _prepare_model),
    ("opacus", "PrivacyEngine.make_private"): (_same, _make_private),
    ("captum", "IntegratedGradients.attribute"): (_same, _integrated_gradients),
    ("timm", "create_model"): (_same, _create_model),
    ("transformers", "PreTrainedModel.add_adapter"): (_same, _add_adapter),
    ("transformers", "PreTrainedModel.disable_adapters"): (_add_adapter, _then(lambda m: m.disable_adapters())),
    ("transformers", "PreTrainedModel.enable_adapters"): (_adapter_disabled, _then(lambda m: m.enable_adapters())),
    ("transformers", "PreTrainedModel.delete_adapter"): (_add_adapter, _then(lambda m: m.delete_adapter("first"))),
    ("transformers", "PreTrainedModel.train"): (_eval, _returns(lambda m: m.train())),
    ("diffusers", "ModelMixin.save_pretrained"): (_same, _save_pretrained),
    ("diffusers", "ModelMixin.enable_layerwise_casting"): (_same, _layerwise_casting),
    ("diffusers", "ModelMixin.disable_gradient_checkpointing"):
        (_then(lambda m: m.enable_gradient_checkpointing()), _then(lambda m: m.disable_gradient_checkpointing())),
    ("accelerate", "cpu_offload_with_hook"): (_same, _cpu_offload_with_hook),
    ("accelerate", "load_checkpoint_in_model"): (_same, _load_checkpoint),
    ("torch_ao_quantization", "prepare_qat"): (_same, _prepare_qat),
    ("torch_ao_quantization", "fuse_modules"): (_same, _fuse_modules),
    ("torchvision", "get_model"): (_same, _get_model),
    ("torch_geometric", "summary"): (_same, _pyg_summary),
    ("checkpoint_wrapper", "offload_wrapper"): (_same, _offload_wrapper),
    ("peft", "PeftModel.generate"): (_peft, _peft_generate),
    ("peft", "LoraModel.enable_adapter_layers"): (_peft_layers_disabled, _then(lambda m: m.enable_adapter_layers())),
    ("prune", "ln_structured"): (_same, _pruned("ln_structured", amount=0.5, n=2, dim=0)),
    ("prune", "random_structured"): (_same, _pruned("random_structured", amount=0.5, dim=0)),
    ("prune", "random_unstructured"): (_same, _pruned("random_unstructured", amount=0.5)),
    ("lightning", "Trainer.fit"): (_same, _lightning_fit),
    ("lightning", "Trainer.save_checkpoint"): (_lightning_fit, _lightning_save_checkpoint),
    ("lightning", "LightningModule.load_from_checkpoint"): (_lightning_fit, _lightning_load_from_checkpoint),
    ("lightning", "LightningModule.training_step"): (_same, _lightning_step("training_step")),
    ("lightning", "LightningModule.forward"): (_same, _lightning_forward),
    ("swa_utils", "AveragedModel.forward"): (_applied("swa_utils"), _swa_forward),
    ("torchao", "swap_conv2d_1x1_to_linear"): (_same, _swap_conv2d_1x1),
    ("opacus", "PrivacyEngine.make_private_with_epsilon"):
        (_same, _privately("make_private_with_epsilon", target_epsilon=5.0, target_delta=1e-5, epochs=1,
                           max_grad_norm=1.0)),
    ("accelerate", "infer_auto_device_map"): (_same, _infer_device_map),
    ("accelerate", "disk_offload"): (_same, _disk_offload),
    ("accelerate", "load_checkpoint_and_dispatch"): (_same, _load_checkpoint_and_dispatch),
    ("accelerate", "Accelerator.prepare"): (_same, _accelerator("prepare", goes_on=True)),
    ("accelerate", "Accelerator.get_state_dict"): (_same, _accelerator("get_state_dict")),
    ("accelerate", "Accelerator.save_model"): (_same, _accelerator("save_model", folder=True)),
    ("accelerate", "Accelerator.verify_device_map"): (_same, _accelerator("verify_device_map")),
    ("timm", "load_checkpoint"): (_same, _timm_load_checkpoint),
    ("timm", "save_for_hf"): (_same, _timm_save_for_hf),
    ("timm", "create_feature_extractor"): (_same, _timm_feature_extractor),
    ("transformers", "PreTrainedModel.set_adapter"): (_two_adapters, _then(lambda m: m.set_adapter("second"))),
    ("transformers", "PreTrainedModel.get_adapter_state_dict"):
        (_add_adapter, _then(lambda m: m.get_adapter_state_dict())),
    ("transformers", "PreTrainedModel.load_adapter"): (_same, _hf_load_adapter),
    ("transformers", "PreTrainedModel.get_compiled_call"): (_same, _then(lambda m: m.get_compiled_call(None))),
    ("peft", "PeftModel.delete_adapter"): (_peft_and_second_adapter, _then(lambda m: m.delete_adapter("second"))),
    ("peft", "LoraModel.set_adapter"):
        (_peft_and_second_adapter, _then(lambda m: m.base_model.set_adapter("second"))),
    ("peft", "LoraModel.delete_adapter"):
        (_peft_and_second_adapter, _then(lambda m: m.base_model.delete_adapter("second"))),
    ("peft", "PeftModel.get_base_model"): (_peft, _returns(lambda m: m.get_base_model())),
    ("peft", "PeftModel.from_pretrained"): (_same, _peft_from_pretrained),
    ("peft", "PeftModel.load_adapter"): (_peft, _peft_load_adapter),
    ("peft", "set_peft_model_state_dict"): (_peft, _peft_set_state_dict),
    ("torch_ao_quantization", "quantize"): (_same, _ao_quantize),
    ("torch_ao_quantization", "quantize_qat"): (_same, _ao_quantize_qat),
    ("torch_ao_quantization", "fuse_modules_qat"): (_same, _fuse_modules_qat),
    ("torch_ao_quantization", "disable_observer"): (_prepare_qat, _ao_applied("disable_observer")),
    ("torch_ao_quantization", "enable_observer"): (_qat_then("disable_observer"), _ao_applied("enable_observer")),
    ("torch_ao_quantization", "disable_fake_quant"): (_prepare_qat, _ao_applied("disable_fake_quant")),
    ("torch_ao_quantization", "enable_fake_quant"):
        (_qat_then("disable_fake_quant"), _ao_applied("enable_fake_quant")),
    ("torch_ao_quantization", "get_observer_state_dict"): (_ao_prepared_and_calibrated, _ao_observer_state_dict),
    ("transformers", "Trainer.train"): (_same, _trainer(lambda t, batch: t.train())),
    ("transformers", "Trainer.evaluate"): (_same, _trainer(lambda t, batch: t.evaluate())),
    ("transformers", "Trainer.predict"): (_same, _trainer(lambda t, batch: t.predict(t.eval_dataset))),
    ("transformers", "Trainer.prediction_step"):
        (_same, _trainer(lambda t, batch: t.prediction_step(t.model, batch, prediction_loss_only=False))),
    ("transformers", "Trainer.save_model"): (_same, _trainer(lambda t, batch: t.save_model())),
    ("transformers", "Trainer.save_state"): (_same, _trainer(lambda t, batch: t.save_state())),
    ("transformers", "Trainer.create_optimizer"): (_same, _trainer(lambda t, batch: t.create_optimizer())),
    ("transformers", "Trainer.create_optimizer_and_scheduler"):
        (_same, _trainer(lambda t, batch: t.create_optimizer_and_scheduler(num_training_steps=1))),
    ("diffusers", "DiffusionPipeline.enable_attention_slicing"):
        (_same, _pipeline(lambda p, folder: p.enable_attention_slicing())),
    ("diffusers", "DiffusionPipeline.disable_attention_slicing"):
        (_same, _pipeline(lambda p, folder: p.disable_attention_slicing())),
    ("diffusers", "DiffusionPipeline.enable_model_cpu_offload"):
        (_same, _pipeline(lambda p, folder: p.enable_model_cpu_offload(device="cpu"))),
    ("diffusers", "DiffusionPipeline.enable_sequential_cpu_offload"):
        (_same, _pipeline(lambda p, folder: p.enable_sequential_cpu_offload(device="cpu"))),
    ("diffusers", "DiffusionPipeline.enable_group_offload"): (_same, _pipeline(_pipeline_offload)),
    ("diffusers", "DiffusionPipeline.reset_device_map"): (_same, _pipeline(lambda p, folder: p.reset_device_map())),
    ("diffusers", "DiffusionPipeline.from_pipe"): (_same, _pipeline(lambda p, folder: type(p).from_pipe(p))),
    ("diffusers", "DiffusionPipeline.from_pretrained"): (_same, _pipeline(_pipeline_reloaded)),
    ("diffusers", "DiffusionPipeline.save_pretrained"): (_same, _pipeline(lambda p, folder: p.save_pretrained(folder))),
    ("diffusers", "DiffusionPipeline.save_config"): (_same, _pipeline(lambda p, folder: p.save_config(folder))),
    ("diffusers", "DiffusionPipeline.load_config"): (_same, _pipeline(_pipeline_config_loaded)),
    ("accelerate", "Accelerator.backward"): (_same, _with_accelerator(_accelerate_backward)),
    ("accelerate", "Accelerator.profile"): (_same, _with_accelerator(_accelerate_profile)),
    ("accelerate", "Accelerator.save_state"): (_same, _with_accelerator(_accelerate_state(load=False))),
    ("accelerate", "Accelerator.load_state"): (_same, _with_accelerator(_accelerate_state(load=True))),
    ("accelerate", "Accelerator.save"): (_same, _with_accelerator(_accelerate_save)),
    ("accelerate", "Accelerator.prepare_optimizer"):
        (_same, _with_accelerator(lambda acc, m: acc.prepare_optimizer(_sgd(m)))),
    ("accelerate", "Accelerator.prepare_scheduler"): (_same, _with_accelerator(_accelerate_scheduler)),
    ("accelerate", "Accelerator.prepare_data_loader"):
        (_same, _with_accelerator(lambda acc, m: acc.prepare_data_loader(_accelerate_loader()))),
    ("accelerate", "Accelerator.skip_first_batches"):
        (_same, _with_accelerator(lambda acc, m: acc.skip_first_batches(_accelerate_loader(), num_batches=0))),
    ("opacus", "PrivacyEngine.validate"): (_same, _opacus_validate),
    ("opacus", "PrivacyEngine.save_checkpoint"): (_same, _opacus_checkpoint(load=False)),
    ("opacus", "PrivacyEngine.load_checkpoint"): (_same, _opacus_checkpoint(load=True)),
    ("peft", "prepare_model_for_kbit_training"): (_same, _kbit_training),
    ("peft", "PeftModel.forward"): (_peft, _then(lambda m: m.forward(input_ids=_peft_ids()))),
    ("peft", "LoraModel.forward"): (_peft, _then(lambda m: m.base_model.forward(input_ids=_peft_ids()))),
    ("peft", "PeftModel.prepare_model_for_gradient_checkpointing"):
        (_peft, _then(lambda m: m.prepare_model_for_gradient_checkpointing(m.get_base_model()))),
    ("peft", "get_base_model_state_dict"): (_peft, _base_model_state_dict),
    ("peft", "set_base_model_state_dict"): (_peft, _set_base_model_state_dict),
    ("peft", "PeftModel.create_or_update_model_card"): (_peft, _peft_model_card),
    ("peft", "load_peft_weights"): (_peft, _load_peft_weights),
    ("peft", "get_eva_state_dict"): (_same, _eva_state_dict),
    ("peft", "convert_to_lora"): (_peft_loha, _convert_to_lora),
    ("peft", "save_as_lora"): (_peft_loha, _save_as_lora),
    ("transformers", "PreTrainedModel.activation_checkpointing_enable"):
        (_same, _then(lambda m: m.activation_checkpointing_enable())),
    ("transformers", "PreTrainedModel.activation_checkpointing_disable"):
        (_then(lambda m: m.activation_checkpointing_enable()), _then(lambda m: m.activation_checkpointing_disable())),
    ("transformers", "GenerationMixin.prepare_inputs_for_generation"):
        (_same, _then(lambda m: m.prepare_inputs_for_generation(_profile("transformers").inputs()[0]))),
    ("transformers", "Trainer.create_scheduler"):
        (_same, _trainer(lambda t, batch: t.create_scheduler(num_training_steps=1, optimizer=t.create_optimizer()))),
    ("transformers", "Trainer.save_metrics"):
        (_same, _trainer(lambda t, batch: t.save_metrics("train", {"loss": 1.0}))),
    ("transformers", "Trainer.create_model_card"): (_same, _trainer(lambda t, batch: t.create_model_card())),
    ("transformers", "Trainer.evaluation_loop"):
        (_same, _trainer(lambda t, batch: t.evaluation_loop(t.get_eval_dataloader(), "evaluation"))),
    ("transformers", "Trainer.create_accelerator_and_postprocess"):
        (_same, _trainer(lambda t, batch: t.create_accelerator_and_postprocess())),
    ("lightning", "LightningModule.predict_step"):
        (_same, _then(lambda m: m.predict_step(*_profile("lightning").inputs()))),
    ("lightning", "LightningModule.prepare_data"): (_same, _then(lambda m: m.prepare_data())),
    ("lightning", "Trainer.validate"): (_with_steps, _lightning_run("validate")),
    ("lightning", "Trainer.test"): (_with_steps, _lightning_run("test")),
    ("lightning", "Trainer.predict"): (_with_steps, _lightning_run("predict")),
    ("lightning", "LightningModule.validation_step"): (_with_steps, _lightning_step("validation_step")),
    ("lightning", "LightningModule.test_step"): (_with_steps, _lightning_step("test_step")),
    ("lightning", "LightningModule.backward"):
        (_same, _then(lambda m: m.backward(m(*_profile("lightning").inputs()).pow(2).mean()))),
    ("lightning", "LightningModule.optimizer_step"): (_same, _then(lambda m: m.optimizer_step(0, 0, _sgd(m)))),
    ("lightning", "LightningModule.lr_scheduler_step"): (_same, _then(_lightning_scheduler_step)),
    ("lightning", "LightningModule.save_hyperparameters"): (_same, _then(lambda m: m.save_hyperparameters())),
    ("timm", "remap_state_dict"): (_same, _timm_remap_state_dict),
    ("timm", "register_notrace_module"): (_same, _register_notrace_module),
    ("torch_ao_quantization", "prepare_jit"):
        (_same, _scripted(lambda s: _torch_ao().prepare_jit(s, _ao_qconfig(dynamic=False)))),
    ("torch_ao_quantization", "prepare_dynamic_jit"):
        (_same, _scripted(lambda s: _torch_ao().prepare_dynamic_jit(s, _ao_qconfig(dynamic=True)))),
    ("torch_ao_quantization", "convert_jit"):
        (_same, _scripted(lambda s: _torch_ao().convert_jit(_jit_prepared(s, dynamic=False)))),
    ("torch_ao_quantization", "convert_dynamic_jit"):
        (_same, _scripted(lambda s: _torch_ao().convert_dynamic_jit(_jit_prepared(s, dynamic=True)))),
    ("torch_ao_quantization", "quantize_jit"):
        (_same, _scripted(lambda s: _torch_ao().quantize_jit(
            s, _ao_qconfig(dynamic=False), _ao_run, [_profile("torch_ao_quantization").inputs()[0]]))),
    ("torch_ao_quantization", "quantize_dynamic_jit"):
        (_same, _scripted(lambda s: _torch_ao().quantize_dynamic_jit(s, _ao_qconfig(dynamic=True)))),
    ("torch_ao_quantization", "fuse_conv_bn_jit"): (_same, _scripted(lambda s: _torch_ao().fuse_conv_bn_jit(s))),
    ("torch_ao_quantization", "swap_module"): (_same, _ao_swap_module),
    ("torch_ao_quantization", "load_observer_state_dict"):
        (_ao_prepared_and_calibrated, _ao_load_observer_state_dict),
    ("transformers", "PreTrainedModel.resize_position_embeddings"):
        (_same, _then(lambda m: m.resize_position_embeddings(2 * m.config.max_position_embeddings))),
    ("transformers", "GenerationMixin.destroy_cached_continuous_batching_manager"):
        (_same, _then(lambda m: m.destroy_cached_continuous_batching_manager())),
    ("transformers", "Trainer.training_step"): (_same, _trainer(_trainer_training_step)),
    ("diffusers", "ModelMixin.compile_repeated_blocks"): (_same, _then(lambda m: m.compile_repeated_blocks())),
    ("diffusers", "DiffusionPipeline.from_config"): (_same, _pipeline_from_config),
    ("torch_geometric", "compile"): (_same, _pyg_compile),
    ("transformers", "Pipeline.__call__"): (_same, _text_generation(lambda pipe, text: pipe(text))),
    ("transformers", "Pipeline.forward"):
        (_same, _text_generation(lambda pipe, text: pipe.forward(pipe.preprocess(text)))),
    ("transformers", "Pipeline.predict"): (_same, _text_generation(lambda pipe, text: pipe.predict(text))),
    ("transformers", "Pipeline.save_pretrained"): (_same, _text_generation(_text_pipeline_saved)),
    ("transformers", "PreTrainedModel.enable_peft_hotswap"):
        (_same, _then(lambda m: m.enable_peft_hotswap(target_rank=4))),
    ("fsdp2", "fully_shard"): (_same, _fully_shard),
    ("tensor_parallel", "parallelize_module"): (_same, _parallelize_module),
    ("diffusers", "ModelMixin.dequantize"): (_torchao_reloaded, _then(lambda m: m.dequantize())),
}


def _logits_loss(output: Any) -> Any:
    return output.float().pow(2).mean()


# (slug, operation) -> the backward phase's loss of the output, in place of the profile's (run_phases' loss_of)
LOSSES: dict[tuple[str, str], Callable[[Any], Any]] = {("torchvision", "get_model"): _logits_loss}


# ------------------------------------------------------------------------------------------------ one cell
class Record:
    """Every call of the hook: (the phase it came in, the object it was given)."""

    def __init__(self) -> None:
        self.phase = "operation"
        self.calls: list[tuple[str, Any]] = []

    def note(self, given: Any) -> None:
        self.calls.append((self.phase, given))


class Refused(Exception):
    """The hook could not be registered: its text is the cell's ``why``."""


def find_target(model: Any, path: str) -> Any:
    """The module at ``path``, else the only one whose path ends with ``.path``; None when there is none or several."""
    named = dict(model.named_modules())
    if path in named:
        return named[path]
    ending = [module for name, module in named.items() if name.endswith("." + path)]
    return ending[0] if len(ending) == 1 else None


def register(family: str, target: Any, record: Record) -> Callable[[], None]:
    """Registers the hook of ``family`` (on ``target``, or its first parameter, unless global); returns what removes
    it. Raises :class:`Refused` when it cannot be registered."""
    import torch

    if family == "global-forward-hook":
        return torch.nn.modules.module.register_module_forward_hook(
            lambda module, args, output: record.note(module)).remove
    if family == "global-full-backward-hook":
        return torch.nn.modules.module.register_module_full_backward_hook(
            lambda module, grad_input, grad_output: record.note(module)).remove
    if family == "saved-tensors-pack":
        def pack(tensor):
            record.note(tensor)
            return tensor

        context = torch.autograd.graph.saved_tensors_hooks(pack, lambda packed: packed)
        context.__enter__()
        return lambda: context.__exit__(None, None, None)
    if target is None:
        raise Refused("no module at the target's path")
    parameter = next(target.parameters(), None)
    if family in ON_PARAMETER and parameter is None:
        raise Refused("the target has no parameter")

    # the specification: a module's forward (pre-)hooks are functions defined with def and named ``hook``, without
    # annotations, as users write them (TorchScript compiles them from their source and names them in its errors)
    def forward_pre():
        def hook(module, args):
            record.note(module)
        return hook

    def forward_pre_with_kwargs():
        def hook(module, args, kwargs):
            record.note(module)
        return hook

    def forward():
        def hook(module, args, output):
            record.note(module)
        return hook

    def backward_pre(module, grad_output):
        record.note(module)

    def backward(module, grad_input, grad_output):
        record.note(module)

    def on_grad(grad):
        record.note(parameter)  # the parameter itself is what this hook is said to be given

    def after_accumulation(tensor):
        record.note(tensor)

    def module_and_rest(module, *rest):
        record.note(module)

    def load_post(module, incompatible_keys):
        record.note(module)

    register_it: dict[str, Callable[[], Any]] = {
        "forward-pre-hook": lambda: target.register_forward_pre_hook(forward_pre()),
        "forward-pre-hook-with-kwargs": lambda: target.register_forward_pre_hook(forward_pre_with_kwargs(),
                                                                                 with_kwargs=True),
        "forward-hook": lambda: target.register_forward_hook(forward()),
        "forward-hook-always-call": lambda: target.register_forward_hook(forward(), always_call=True),
        "backward-pre-hook": lambda: target.register_full_backward_pre_hook(backward_pre),
        "full-backward-hook": lambda: target.register_full_backward_hook(backward),
        "param-hook": lambda: parameter.register_hook(on_grad),
        "post-accumulate-grad-hook": lambda: parameter.register_post_accumulate_grad_hook(after_accumulation),
        "state-dict-pre-hook": lambda: target.register_state_dict_pre_hook(module_and_rest),
        "state-dict-post-hook": lambda: target.register_state_dict_post_hook(module_and_rest),
        "load-state-dict-pre-hook": lambda: target.register_load_state_dict_pre_hook(module_and_rest),
        "load-state-dict-post-hook": lambda: target.register_load_state_dict_post_hook(load_post),
    }
    try:
        handle = register_it[family]()
    except Exception as error:
        raise Refused(error_text(error)) from error
    return handle.remove


def first_tensor(value: Any) -> Any:
    """The output itself if a tensor; else the first tensor found, depth first, in its values (a tuple or list, a
    dict-like object's ``values()``, else the object's ``vars()``); None when there is none."""
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        values = list(value)
    elif callable(getattr(value, "values", None)):
        values = list(value.values())
    else:
        try:
            values = list(vars(value).values())
        except TypeError:
            return None
    for item in values:
        found = first_tensor(item)
        if found is not None:
            return found
    return None


def run_phases(model: Any, profile: Any, record: Record,
               loss_of: Callable[[Any], Any] | None = None) -> str | None:
    """Forward, backward, state_dict, load_state_dict, each of the hook's calls counted under its phase; the first
    error (``phase: Type: message``) stops them and is returned. ``loss_of`` replaces the profile's loss if given."""
    try:
        record.phase = "forward"
        output = model(*profile.inputs())
        record.phase = "backward"
        if loss_of is not None:
            loss = loss_of(output)
        elif hasattr(profile, "loss"):
            loss = profile.loss(output)
        else:
            loss = first_tensor(output).float().pow(2).mean()
        if loss.requires_grad:
            loss.backward()
        record.phase = "state_dict"
        state = model.state_dict()
        record.phase = "load_state_dict"
        model.load_state_dict(state)
    except Exception as error:
        return f"{record.phase}: {error_text(error)}"
    return None


def parameter_of(module: Any) -> Any:
    """A target's parameter: its first, recursively, whether or not it requires grad; None without a target."""
    return None if module is None else next(module.parameters(), None)


def release(keep: list) -> None:
    """The end of a cell, whatever happened: the torch.distributed process group destroyed if one is initialized (the
    next cell runs without one), then what ``keep`` holds let go, an :class:`Undo` in it undone (newest first) and a
    temporary directory in it removed."""
    import torch.distributed as dist

    try:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    finally:
        undos = [item for item in reversed(keep) if isinstance(item, Undo)]
        folders = [item for item in keep if isinstance(item, tempfile.TemporaryDirectory)]
        keep.clear()
        try:
            for item in undos:
                item.undo()
        finally:
            for folder in folders:
                folder.cleanup()


def observe(key: str) -> dict:
    """The cell ``key`` observed again, as docs/library_matrix.json writes it."""
    import torch

    slug, operation, family, when = parse(key)
    profile = _profile(slug)
    prepare, act = OPERATIONS[(slug, operation)]
    keep: list = []  # what must stay alive for the whole cell (a context left entered), what release undoes
    record = Record()
    remove: Callable[[], None] | None = None
    try:
        torch.manual_seed(0)
        model = prepare(profile.build(), keep)
        registered_on = find_target(model, profile.TARGET)
        then = [o for o in (registered_on, parameter_of(registered_on)) if o is not None]  # step 2's, kept now
        if when == "before":
            try:
                remove = register(family, registered_on, record)
            except Refused as refused:
                return {"registered": False, "why": str(refused)}
        record.phase = "operation"
        try:
            model = act(model, keep)
        except Exception as error:
            return {"registered": when == "before", "operation raised": error_text(error)}
        target = find_target(model, profile.TARGET)
        now = [o for o in (target, parameter_of(target)) if o is not None]
        if when == "after":
            try:
                remove = register(family, target, record)
            except Refused as refused:
                return {"registered": False, "why": str(refused)}
        error = run_phases(model, profile, record, LOSSES.get((slug, operation)))
        fires = {phase: n for phase in PHASES if (n := sum(p == phase for p, _ in record.calls))}
        given: list[str] = []
        if family not in GLOBAL:
            seen = set()
            for _, obj in record.calls:
                if any(obj is o for o in now):
                    seen.add(AFTER)
                elif any(obj is o for o in then):
                    seen.add(BEFORE)
                else:
                    seen.add(f"another {type(obj).__name__}")
            given = sorted(seen)
        removing, remove = remove, None
        if removing is not None:
            removing()
        record.calls.clear()
        model.zero_grad(set_to_none=True)  # as a training loop does between steps
        again = run_phases(model, profile, record, LOSSES.get((slug, operation)))
        return {"registered": True, "fires": fires, "given": given, "after remove": len(record.calls),
                "error": error if error is not None else again}
    finally:
        if remove is not None:
            with contextlib.suppress(Exception):
                remove()
        release(keep)


def main(argv: list[str]) -> int:
    import torch

    if len(argv) < 1:
        print(__doc__, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    out, keys = Path(argv[0]), argv[1:]
    found = {}
    for key in keys:
        try:
            found[key] = observe(key)
        except Exception as error:  # not a result of the cell: the procedure itself failed (build, preparation)
            found[key] = {"this observer failed": error_text(error)}
    out.write_text(json.dumps(found, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
