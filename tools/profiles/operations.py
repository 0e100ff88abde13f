"""The operations of the library matrix: what each profiled library lets a user do to a model (load it, wrap it,
convert it, place it, trace it, save it, cache in it, switch a feature of it, run it), chosen from the library's
public API by a written rule, not picked by hand.

    python -m tools.profiles.operations            # each library's operations by kind, and what the rule left out
    python -m tools.profiles.operations --write    # docs/library_operations.json, from the installed versions
    python -m tools.profiles.operations --check    # whether the committed table is what the rule gives now

**Where the rule reads** (:data:`SURFACES`, the one hand-written part): for each library, the places a user holds
its API, each with its role:

- ``namespace``: a module whose public functions a user calls (its ``__all__``, else its names without a leading
  underscore), such as ``peft`` or ``torch.nn.utils.prune``;
- ``model``: a class whose instances are the model (``self`` is the model), such as ``transformers.PreTrainedModel``;
- ``holder``: a class whose instances hold a model and run it (a trainer, an accelerator, a privacy engine).

Of a class, the rule reads the public methods written in the library (not those inherited from ``torch``).

**The rule** (:func:`choose`): a function or method is an operation when

1. its name is of one of the :data:`KINDS`, the first whose pattern matches (``train`` and ``eval`` of a model are
   the mode switches of ``nn.Module``, of a holder its training and evaluation loops), and is not a question or a
   callback (:data:`NOT_OPERATIONS`: ``is_pruned``, ``on_before_optimizer_step``); and
2. it takes a model: a method of a ``model`` or ``holder`` surface, a function of the ``loading`` kind (it returns
   one), or a function with a parameter of :data:`MODEL_PARAMETERS`.

Everything else on the surfaces is left out and counted by reason (``no kind``, ``takes no model``). The table is
what the cells of the library matrix are made from: each operation × each hook family of the behaviour matrix,
registered before and after it.

>>> kind_of("merge_and_unload", "model"), kind_of("train", "model"), kind_of("train", "holder")
('converting', 'switching', 'running')
>>> kind_of("get_input_embeddings", "model") is None, kind_of("is_pruned", "namespace") is None
(True, True)
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import inspect
import json
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "library_operations.json"

# (kind, pattern of the name): the first that matches names the kind
KINDS: tuple[tuple[str, str], ...] = (
    ("saving and loading state", r"save.*|load_state.*|.*state_dict|load_checkpoint"),
    ("loading", r"from_.*|load_.*|create_model|get_model|build_model"),
    ("wrapping and preparing", r"prepare.*|get_.+_model|create_.*|initialize|make_.*|wrap.*|fully_shard|apply_.*"),
    ("placing", r".*offload.*|dispatch.*|.*device_map.*|shard.*|init_empty_weights|init_on_device|to_empty"
                r"|distribute.*|parallelize.*"),
    ("caching and skipping", r".*cache.*|.*skip.*"),
    ("tracing, exporting, compiling", r".*trace.*|export.*|.*compile.*|script.*"),
    ("switching", r"(enable|disable)_.*|.*_(enable|disable)|requires_grad_"),
    ("converting", r"quantize.*|dequantize|fuse.*|merge.*|unload|unmerge.*|.*parametriz.*|swap.*|convert.*"
                   r"|replace.*|resize_.*|tie_weights|.*prune.*|.*structured|remove|(add|delete|set)_adapter.*|update_.*"),
    ("running", r"generate|forward|__call__|.*_step|evaluate|evaluation_loop|predict|validate|test|attribute"
                r"|summary|profile|fit|train|run|backward"),
)
# names that ask (is_pruned, has_..., type_before_...) or that the library calls back (on_before_optimizer_step):
# not what a user does to a model, whatever else the name says
NOT_OPERATIONS = r"(is|has|type)_.*|on_.*"
MODE_SWITCHES = ("train", "eval")  # nn.Module's: of a model they switch a mode, of a holder they run a loop
# parameter names under which a function is handed the model (or the module it works on)
MODEL_PARAMETERS = frozenset({"model", "models", "module", "modules", "network", "net", "pipe", "pipeline",
                              "forward_func", "mod", "root_module"})
ROLES = ("namespace", "model", "holder")


@dataclass(frozen=True)
class Surface:
    """Where a library's API is read: a dotted path (a module, or a class in one) and its role (:data:`ROLES`)."""

    path: str
    role: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"{self.path}: the role is one of {ROLES}, not {self.role!r}")


def _s(role: str, *paths: str) -> tuple[Surface, ...]:
    return tuple(Surface(p, role) for p in paths)


# the profiled libraries that run in the project's environment (tools/profiles/libraries/: measured, in the lock),
# each with where a user holds its API; a library of torch's own is read where torch keeps it
SURFACES: dict[str, tuple[Surface, ...]] = {
    "accelerate": _s("namespace", "accelerate") + _s("holder", "accelerate.Accelerator"),
    "captum": _s("namespace", "captum.attr") + _s("holder", "captum.attr.LayerGradCam", "captum.attr.IntegratedGradients"),
    "diffusers": _s("model", "diffusers.ModelMixin") + _s("holder", "diffusers.DiffusionPipeline"),
    "lightning": _s("model", "pytorch_lightning.LightningModule") + _s("holder", "pytorch_lightning.Trainer"),
    "opacus": _s("namespace", "opacus") + _s("holder", "opacus.PrivacyEngine"),
    "peft": _s("namespace", "peft") + _s("model", "peft.PeftModel", "peft.tuners.lora.LoraModel"),
    "thop": _s("namespace", "thop"),
    "timm": _s("namespace", "timm", "timm.models"),
    "torch_geometric": _s("namespace", "torch_geometric", "torch_geometric.nn"),
    "torchao": _s("namespace", "torchao.quantization"),
    "torchinfo": _s("namespace", "torchinfo"),
    "torchvision": _s("namespace", "torchvision.models", "torchvision.models.feature_extraction"),
    "transformers": _s("model", "transformers.PreTrainedModel", "transformers.GenerationMixin")
    + _s("holder", "transformers.Trainer", "transformers.Pipeline"),
    "prune": _s("namespace", "torch.nn.utils.prune"),
    "parametrize": _s("namespace", "torch.nn.utils.parametrize"),
    "fsdp2": _s("namespace", "torch.distributed.fsdp"),
    "tensor_parallel": _s("namespace", "torch.distributed.tensor.parallel"),
    "torch_ao_quantization": _s("namespace", "torch.ao.quantization"),
    "swa_utils": _s("model", "torch.optim.swa_utils.AveragedModel"),
    "checkpoint_wrapper": _s("namespace", "torch.distributed.algorithms._checkpoint.checkpoint_wrapper"),
}


def kind_of(name: str, role: str) -> str | None:
    """The kind of an operation named ``name`` on a surface of ``role`` (the first of :data:`KINDS` whose pattern
    matches the whole name), or None."""
    if re.fullmatch(NOT_OPERATIONS, name):
        return None
    if name in MODE_SWITCHES:
        return "switching" if role == "model" else "running"
    return next((kind for kind, pattern in KINDS if re.fullmatch(pattern, name)), None)


def _takes_a_model(function: Any) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return bool(MODEL_PARAMETERS & set(parameters))


def _resolve(path: str) -> Any:
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(f"nothing importable in {path!r}")


def _members(surface: Surface, found: Any) -> list[tuple[str, Callable[..., Any]]]:
    """(name, function) of the surface's public functions (a module) or public methods written in its library (a
    class: not those of ``torch`` nor of ``object``)."""
    if inspect.ismodule(found) != (surface.role == "namespace"):
        raise TypeError(f"{surface.path} is a {type(found).__name__}: a namespace surface is a module, a model or "
                        "holder surface a class")
    if surface.role == "namespace":
        names = getattr(found, "__all__", None) or [n for n in dir(found) if not n.startswith("_")]
        out = []
        for name in sorted(set(names)):
            value = getattr(found, name, None)
            if inspect.isfunction(value) or inspect.isbuiltin(value):
                out.append((name, value))
        return out
    home = surface.path.split(".")[0]
    out = []
    for name, value in inspect.getmembers(found):
        if name.startswith("_") and name != "__call__":
            continue
        function = getattr(value, "__func__", value)
        module = getattr(function, "__module__", None) or ""
        if callable(function) and module.split(".")[0] == home and not module.startswith("torch.nn.modules"):
            out.append((name, function))
    return out


def choose(surface: Surface, found: Any) -> tuple[list[dict[str, str]], Counter[str]]:
    """The rule on one surface: its operations (``name``, ``kind``, ``surface``) and what it left out, by reason.

    >>> import types
    >>> space = types.ModuleType("lib")
    >>> def get_lora_model(model, rank): ...
    >>> def quantize_everything(config): ...
    >>> space.get_lora_model, space.quantize_everything = get_lora_model, quantize_everything
    >>> operations, left_out = choose(Surface("lib", "namespace"), space)
    >>> [(o["name"], o["kind"]) for o in operations], dict(left_out)
    ([('get_lora_model', 'wrapping and preparing')], {'takes no model': 1})
    """
    operations, left_out = [], Counter()
    prefix = "" if surface.role == "namespace" else surface.path.rsplit(".", 1)[-1] + "."
    for name, function in _members(surface, found):
        kind = kind_of(name, surface.role)
        if kind is None:
            left_out["no kind"] += 1
        elif surface.role != "namespace" or kind == "loading" or _takes_a_model(function):
            operations.append({"name": prefix + name, "kind": kind, "surface": surface.path})
        else:
            left_out["takes no model"] += 1
    return operations, left_out


def _version(slug: str) -> str:
    """The version the rule read: the library's distribution (its profile's name), or torch's for torch's own."""
    import torch

    from .libraries import modules

    if SURFACES[slug][0].path.startswith("torch."):
        return f"torch {torch.__version__.split('+')[0]}"
    distribution = modules()[slug].LIBRARY.name
    return f"{distribution} {importlib.metadata.version(distribution)}"


def table(slugs: list[str] | None = None) -> dict[str, Any]:
    """The rule on every surface of ``slugs`` (default: every library of :data:`SURFACES`), as the committed table."""
    libraries = {}
    for slug in slugs or sorted(SURFACES):
        operations: list[dict[str, str]] = []
        left_out: Counter[str] = Counter()
        for surface in SURFACES[slug]:
            chosen, left = choose(surface, _resolve(surface.path))
            operations += [o for o in chosen if o["name"] not in {p["name"] for p in operations}]
            left_out += left
        libraries[slug] = {"version": _version(slug), "surfaces": [[s.path, s.role] for s in SURFACES[slug]],
                           "operations": operations, "left_out": dict(sorted(left_out.items()))}
    return {"about": "The library matrix's operations: each library's public API on the surfaces named, chosen by "
                     "the rule of tools/profiles/operations.py (python -m tools.profiles.operations --write).",
            "kinds": [kind for kind, _ in KINDS], "libraries": libraries}


def summary(doc: dict[str, Any]) -> str:
    lines = []
    for slug, entry in doc["libraries"].items():
        kinds = Counter(o["kind"] for o in entry["operations"])
        lines.append(f"{slug} ({entry['version']}): {len(entry['operations'])} operations; "
                     + ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
                     + f"; left out: {entry['left_out']}")
    total = sum(len(e["operations"]) for e in doc["libraries"].values())
    lines.append(f"{total} operations in {len(doc['libraries'])} libraries")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.profiles.operations", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {TABLE.relative_to(ROOT)}")
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed table is not what the rule gives")
    parser.add_argument("--list", action="store_true", help="print every operation, not only the counts")
    args = parser.parse_args(argv)
    doc = table()
    if args.write:
        TABLE.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(summary(doc))
    if args.list:
        for slug, entry in doc["libraries"].items():
            for o in entry["operations"]:
                print(f"  {slug}: {o['kind']}: {o['name']}")
    if args.check:
        committed = json.loads(TABLE.read_text(encoding="utf-8"))
        if committed != doc:
            print(f"{TABLE.relative_to(ROOT)} is not what the rule gives on the installed versions: run "
                  "python -m tools.profiles.operations --write", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
