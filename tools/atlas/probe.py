"""What the atlas measures on one model, and the truth the hook doctor is tested against, without hooklab's doctor.

Every function here runs a step of the model and watches it with plain PyTorch: a global module pre-hook says which
modules were called, a counting wrapper on each class's ``forward`` says whose forward code ran (entered without
``__call__`` too), a ``TorchDispatchMode`` says whose parameters the ops read, and a forward hook with
``with_kwargs=True`` on a block says what a hook there receives. :func:`never_fired` classifies each module that a
step never called, by evidence only:

- ``container``: a ModuleList / ModuleDict / ParameterList (or any class without a ``forward``), never called itself;
- ``forward called directly``: its class's ``forward`` ran for it, but ``module(...)`` was never called;
- ``bypassed``: never called itself, but some of its submodules were (its parent calls ``self.model.decoder(...)``
  instead of ``self.model(...)``);
- ``fast path``: a fused fast-path op (``torch._native_multi_head_attention``, ...) read its parameters;
- ``parameters used directly``: other code computed with its parameters (``F.linear(x, self.out_proj.weight)``,
  experts fused into one module, a tied weight read through it...), without calling it;
- ``tied``: its parameters are all held by a module that ran (a tied embedding or head): that one computes with them;
- ``training only``: not reached by this step, but called by the same step in training mode;
- ``not reached``: nothing of it ran (an unused head, another input's path: a vision tower under a text-only input).

``tools/atlas/generate.py`` records these for every architecture of the zoos; ``tests/library/test_atlas.py`` checks that
``hooklab.explain_hook`` gives the same cause for every never-firing module of a sample (all of them weekly).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

CONTAINER, DIRECT, BYPASSED, FAST_PATH, TIED, PARAMETERS, TRAINING, NOT_REACHED = (
    "container", "forward called directly", "bypassed", "fast path", "tied", "parameters used directly",
    "training only", "not reached")
CAUSES = (CONTAINER, DIRECT, BYPASSED, FAST_PATH, TIED, PARAMETERS, TRAINING, NOT_REACHED)
_FAST_OPS = ("_native_multi_head_attention", "_transformer_encoder_layer_fwd")


# ------------------------------------------------------------------------------------------------ descriptions
def kind_of(value: Any, depth: int = 0) -> str:
    """A short, shape-free description of a value a hook receives: ``Tensor``, ``tuple[Tensor, None]``, a class
    name for a dataclass / ModelOutput / cache object."""
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return "Tensor"
    if isinstance(value, (bool, int, float, str)):
        return type(value).__name__
    if isinstance(value, (tuple, list)) and depth < 2:
        inner = [kind_of(v, depth + 1) for v in value[:6]]
        return f"{type(value).__name__}[{', '.join(inner)}{', ...' if len(value) > 6 else ''}]"
    if isinstance(value, dict) and not dataclasses.is_dataclass(value) and type(value) is dict:
        return "dict"
    return type(value).__name__


def main_tensor(value: Any) -> torch.Tensor | None:
    """The hidden states in a block's output: the tensor itself, a tuple's first tensor, a ModelOutput's first
    field, a dataclass's first tensor field."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    if hasattr(value, "to_tuple"):
        return main_tensor(value.to_tuple())
    if dataclasses.is_dataclass(value):
        return main_tensor([getattr(value, f.name) for f in dataclasses.fields(value)])
    return None


def output_kind(value: Any) -> str:
    """``tensor`` / ``tuple`` / ``dataclass`` / ``dict`` / ``list`` / ``None`` / ``other``, for the atlas's tables."""
    if isinstance(value, torch.Tensor):
        return "tensor"
    if value is None:
        return "None"
    if hasattr(value, "to_tuple") or dataclasses.is_dataclass(value):
        return "dataclass"
    if isinstance(value, tuple):
        return "tuple"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "dict"
    return "other"


# ------------------------------------------------------------------------------------------------ watchers
@contextlib.contextmanager
def called_modules() -> Iterator[Counter]:
    """Counts ``module(...)`` calls per module id during the block (a global forward pre-hook)."""
    calls: Counter = Counter()

    def pre(module: nn.Module, args: Any) -> None:
        calls[id(module)] += 1
    handle = torch.nn.modules.module.register_module_forward_pre_hook(pre)
    try:
        yield calls
    finally:
        handle.remove()


def _forward_owner(cls: type) -> type | None:
    for base in cls.__mro__:
        if "forward" in base.__dict__:
            return base
    return None


@contextlib.contextmanager
def forward_entries(model: nn.Module) -> Iterator[Counter]:
    """Counts, per module id, how often the ``forward`` code of its class ran (with or without ``__call__``), by
    wrapping each class's ``forward`` for the block (no hook is registered)."""
    entries: Counter = Counter()
    patched: dict[type, Any] = {}
    for module in model.modules():
        owner = _forward_owner(type(module))
        if owner is None or owner in patched or owner is nn.Module:
            continue
        original = owner.__dict__["forward"]
        if not inspect.isfunction(original):
            continue

        patched[owner] = original
        owner.forward = _counting(original, entries)  # type: ignore[attr-defined]
    try:
        yield entries
    finally:
        for owner, original in patched.items():
            owner.forward = original  # type: ignore[attr-defined]


def _counting(original: Any, entries: Counter) -> Any:
    @functools.wraps(original)  # inspect.signature(module.forward) still shows the real parameters
    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        entries[id(self)] += 1
        return original(self, *args, **kwargs)
    return counting


def _storage(t: torch.Tensor) -> int | None:
    try:
        if t.device.type == "meta" or t.numel() == 0:
            return None
        return t.untyped_storage().data_ptr() or None
    except Exception:  # noqa: BLE001 - tensor subclasses without a storage
        return None


class _ReadStorages(TorchDispatchMode):
    """The storages that ops read (all of them, and those read by fast-path ops)."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[int] = set()
        self.fast: set[int] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        fast = any(name in str(func) for name in _FAST_OPS)
        for leaf in tree_leaves((args, kwargs or {})):
            if isinstance(leaf, torch.Tensor):
                key = _storage(leaf)
                if key is not None:
                    self.read.add(key)
                    if fast:
                        self.fast.add(key)
        return func(*args, **(kwargs or {}))


# ------------------------------------------------------------------------------------------------ the truth
def is_container(module: nn.Module) -> bool:
    owner = _forward_owner(type(module))
    return owner is nn.Module or isinstance(module, (nn.ModuleList, nn.ModuleDict, nn.ParameterList,
                                                     nn.ParameterDict))


@dataclasses.dataclass
class NeverFired:
    """A module that the step never called, and why (one of :data:`CAUSES`)."""

    name: str
    cls: str
    cause: str
    parent_called: bool


def never_fired(model: nn.Module, run: Callable[[], Any], *, train_run: Callable[[], Any] | None = None
                ) -> tuple[list[NeverFired], int]:
    """Every module of ``model`` that ``run()`` never called, with its cause (the module's description), and the
    number of modules that were called. ``train_run``: the same step in training mode (the caller switches modes);
    without it no module is put in ``training only``."""
    named = list(model.named_modules(remove_duplicate=False))
    with called_modules() as calls, forward_entries(model) as entries:
        run()
    missing = [(n, m) for n, m in named if not calls[id(m)]]
    if not missing:
        return [], len({id(m) for _, m in named})
    reads = _ReadStorages()
    with reads:
        run()
    trained: Counter = Counter()
    if train_run is not None:
        try:
            with called_modules() as trained:
                train_run()
        except Exception:  # noqa: BLE001 - a model that needs targets to train: no module is put in training only
            trained = Counter()
    ran_storages = {_storage(p) for _, m in named if calls[id(m)] for p in m.parameters(recurse=False)}
    out = []
    for name, module in missing:
        everything = {_storage(p) for p in module.parameters()} - {None}
        own = everything - ran_storages
        if is_container(module):
            cause = CONTAINER
        elif entries[id(module)]:
            cause = DIRECT
        elif any(calls[id(sub)] for sub in module.modules()):
            cause = BYPASSED
        elif everything and not own:
            cause = TIED
        elif own & reads.fast:
            cause = FAST_PATH
        elif own & reads.read:
            cause = PARAMETERS
        elif trained[id(module)]:
            cause = TRAINING
        else:
            cause = NOT_REACHED
        parent = name.rpartition(".")[0] if name else None
        parent_module = model.get_submodule(parent) if parent is not None else None
        out.append(NeverFired(name, type(module).__name__, cause,
                              parent_called=parent_module is not None and bool(calls[id(parent_module)])))
    return out, sum(1 for _, m in named if calls[id(m)])


# ------------------------------------------------------------------------------------------------ blocks
def _outputs(value: Any) -> list[tuple[str, torch.Tensor]]:
    """The tensors of a block's output, one level deep, with how to reach each (``output``, ``output[1]``)."""
    if isinstance(value, torch.Tensor):
        return [("output", value)]
    if isinstance(value, (tuple, list)):
        return [(f"output[{i}]", v) for i, v in enumerate(value) if isinstance(v, torch.Tensor)]
    if hasattr(value, "to_tuple") and hasattr(value, "keys"):
        return [(f"output.{k}", value[k]) for k in value.keys() if isinstance(value[k], torch.Tensor)]
    if dataclasses.is_dataclass(value):
        return [(f"output.{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value)
                if isinstance(getattr(value, f.name), torch.Tensor)]
    return []


def block_call(model: nn.Module, block: nn.Module, run: Callable[[], Any]) -> dict[str, Any] | None:
    """What a forward hook with ``with_kwargs=True`` on ``block`` receives at its first call: positional argument
    kinds, keyword argument kinds, which argument holds the hidden states and where they are in the output, and
    the output's kind. The hidden states: the argument named ``hidden_states`` (else the first positional one, else
    any other) whose shape one of the output's tensors has; a block with two streams (SD3's joint blocks return
    ``(encoder_hidden_states, hidden_states)``) lists both in ``streams``."""
    seen: list[tuple[tuple, dict, Any]] = []

    def hook(module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if not seen:
            seen.append((args, dict(kwargs), output))
    handle = block.register_forward_hook(hook, with_kwargs=True)
    try:
        run()
    finally:
        handle.remove()
    if not seen:
        return None
    args, kwargs, output = seen[0]
    outs = _outputs(output)
    candidates = [(f"args[{i}]", a) for i, a in enumerate(args)] + [(f"kwargs[{k!r}]", v) for k, v in kwargs.items()]
    floating = [(label, v) for label, v in candidates if isinstance(v, torch.Tensor) and v.is_floating_point()]
    floating.sort(key=lambda lv: (lv[0] != "kwargs['hidden_states']", not lv[0].startswith("args")))
    matching = [(label, [o for o, t in outs if tuple(t.shape) == tuple(value.shape)]) for label, value in floating]
    matching = [(label, found) for label, found in matching if found]
    # a block that changes the shape (a stage that downsamples): the first floating tensor
    where = matching[0][0] if matching else next((label for label, _ in floating), None)
    found = {"args": [kind_of(a) for a in args], "kwargs": {k: kind_of(v) for k, v in sorted(kwargs.items())},
             "hidden_states": where, "output": kind_of(output), "output_kind": output_kind(output)}
    # where the output holds each stream, where its shape says it alone (two outputs of one shape: Reformer's
    # (attn_output, hidden_states) pair is told only by the identity inside the block, tools/atlas/inside.py)
    if matching and all(len(found_outs) == 1 for _, found_outs in matching) and \
            len({o[0] for _, o in matching}) == len(matching):
        found["hidden_states_out"] = matching[0][1][0]
        if len(matching) > 1:
            found["streams"] = [{"input": label, "output": o[0]} for label, o in matching]
    return found


def experts_modules(model: nn.Module) -> list[dict[str, Any]]:
    """Modules that hold several experts' weights as one 3-D parameter (no module per expert to hook)."""
    found = []
    for name, module in model.named_modules():
        three_d = {p_name: list(p.shape) for p_name, p in module.named_parameters(recurse=False) if p.dim() == 3}
        if three_d and ("expert" in type(module).__name__.lower() or "expert" in name.rsplit(".", 1)[-1].lower()):
            found.append({"path": name, "class": type(module).__name__, "experts": next(iter(three_d.values()))[0],
                          "weights": sorted(three_d)})
    return found
