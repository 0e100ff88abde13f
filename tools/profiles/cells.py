"""The cells of the library matrix: a library's operation (:mod:`.operations`) × a hook family × when the hook was
registered (before the operation or after it), each observed by running it; the truth is what the hooks themselves
recorded.

    python -m tools.profiles.cells                    # observe every case of CASES and print the cells
    python -m tools.profiles.cells --write            # ... and write docs/library_matrix.json
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

from . import operations

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


FAMILIES: dict[str, Callable[[Place, Log], Any]] = {
    "forward-pre-hook": lambda p, log: p.target.register_forward_pre_hook(lambda m, a: _note(log, m)),
    "forward-pre-hook-with-kwargs": lambda p, log: p.target.register_forward_pre_hook(
        lambda module, args, kwargs: _note(log, module), with_kwargs=True),
    "forward-hook": lambda p, log: p.target.register_forward_hook(lambda m, a, o: _note(log, m)),
    "forward-hook-always-call": lambda p, log: p.target.register_forward_hook(
        lambda m, a, o: _note(log, m), always_call=True),
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

    @property
    def slug(self) -> str:
        return self.operation.split(":")[0]


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


def _saved(model: nn.Module) -> nn.Module:
    """``save_pretrained`` into a folder that is removed afterwards; the model goes on."""
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
    return model


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
)


_NO_XFORMERS = "xformers' kernels need a CUDA GPU (and xformers is not installed beside the pinned torch)"
_NPU = "needs an Ascend NPU (torch_npu)"
_XLA = "needs a TPU or another XLA device (torch_xla)"
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


def _given(obj: Any, before: Place | None, after: Place | None) -> str:
    if after is not None and (obj is after.target or obj is after.parameter):
        return "the target after the operation"
    if before is not None and (obj is before.target or obj is before.parameter):
        return "what it was registered on, before the operation"
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
    if place is None:
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


def cells(only: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every cell of every case (or of the operations ``only`` names), by key ``<slug>:<operation>|<family>|<when>``."""
    out = {}
    for case in CASES:
        if only and case.operation not in only:
            continue
        for family in FAMILIES:
            for when in WHEN:
                out[f"{case.operation}|{family}|{when}"] = observe(case, family, when)
    return out


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


def _standing(observed: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per library: its operations in the table, those observed, those that cannot run here (and why), the rest."""
    table = json.loads(operations.TABLE.read_text(encoding="utf-8"))
    seen = {key.split("|")[0] for key in observed}
    out = {}
    for slug, entry in table["libraries"].items():
        names = [f"{slug}:{o['name']}" for o in entry["operations"]]
        cannot = {name: CANNOT_RUN_HERE[name] for name in names if name in CANNOT_RUN_HERE}
        out[slug] = {"operations": len(names), "observed": sum(name in seen for name in names),
                     "cannot run here": cannot,
                     "not yet": sum(name not in seen and name not in cannot for name in names)}
    return out


def document(observed: dict[str, dict[str, Any]]) -> dict[str, Any]:
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
            "operations": _standing(observed),
            "cells": {key: observed[key] for key in sorted(observed)}}


def _lines(observed: dict[str, dict[str, Any]]) -> Iterator[str]:
    for key, cell in observed.items():
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
    parser.add_argument("--only", action="append", help="an operation (<slug>:<name>) to observe; repeatable")
    args = parser.parse_args(argv)
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(1)
    observed = cells(args.only)
    for line in _lines(observed):
        print(line)
    if args.write:
        MATRIX.write_text(json.dumps(document(observed), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if args.check:
        committed = json.loads(MATRIX.read_text(encoding="utf-8"))["cells"]
        differ = [key for key in observed if committed.get(key) != observed[key]]
        for key in differ:
            print(f"differs: {key}\n  committed: {committed.get(key)}\n  now:       {observed[key]}", file=sys.stderr)
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
