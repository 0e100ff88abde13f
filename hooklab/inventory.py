"""List the hooks currently registered on a module tree, a tensor, and globally.

Use it to see what a cell left behind:

>>> model = nn.Sequential(nn.Linear(2, 2))
>>> def print_shape(module, args, output):
...     print(output.shape)
>>> h1 = model[0].register_forward_hook(print_shape)
>>> h2 = model[0].bias.register_hook(lambda grad: None)
>>> _ = show_hooks(model, include_global=False)
where   kind     hook
0       forward  print_shape
0.bias  tensor   <lambda>
>>> h1.remove(); h2.remove(); hook_inventory(model, include_global=False)
[]

Node hooks (``grad_fn.register_hook``) live inside the autograd graph and cannot be
listed from outside; register them through a :class:`~hooklab.HookScope` to track them.
"""
from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from . import _torch_internals as internals
from ._text import format_table
from .errors import HooksLeftBehind

__all__ = ["HookEntry", "HooksLeftBehind", "hook_inventory", "hook_name", "no_hooks_left_behind", "show_hooks"]

@dataclass(frozen=True)
class HookEntry:
    """One registered hook: where it sits, what kind it is, and the hook's name."""

    where: str
    kind: str
    hook: str


def hook_name(fn: Any) -> str:
    """A stable, address-free name for a hook callable."""
    if type(fn).__name__ == "_WrappedHook" and hasattr(fn, "hook"):  # a copied _WrappedHook loses its __qualname__
        return hook_name(fn.hook)
    if isinstance(fn, functools.partial):
        return f"partial({hook_name(fn.func)})"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:
        return type(fn).__name__
    return name.replace(".<locals>", "")


def _backward_kind(full: bool | None) -> str:
    return "backward (old-style)" if full is False else "backward"


def _dict_entries(where: str, dicts: list[tuple[str, str, dict]], full: bool | None) -> Iterator[HookEntry]:
    for _attr, kind, hooks in dicts:
        if kind == "backward":
            kind = _backward_kind(full)
        for fn in hooks.values():
            yield HookEntry(where, kind, hook_name(fn))


def _tensor_entries(where: str, tensor: torch.Tensor) -> Iterator[HookEntry]:
    (_, grad_hooks), (_, post_hooks) = internals.tensor_hook_dicts(tensor)
    for fn in grad_hooks.values():
        yield HookEntry(where, "tensor", hook_name(fn))
    if tensor.retains_grad:
        yield HookEntry(where, "retain_grad", "(built in)")
    for fn in post_hooks.values():
        yield HookEntry(where, "post_accumulate_grad", hook_name(fn))


def _module_entries(model: nn.Module, root: str) -> Iterator[HookEntry]:
    seen: dict[int, str] = {}  # a tied tensor is listed once, under its first name
    for name, mod in model.named_modules():
        where = ".".join(p for p in (root, name) if p) or type(mod).__name__
        yield from _dict_entries(where, internals.module_hook_dicts(mod), internals.module_full_backward(mod))
        for pname, tensor in [*mod.named_parameters(recurse=False), *mod.named_buffers(recurse=False)]:
            if id(tensor) in seen:
                continue
            seen[id(tensor)] = where
            yield from _tensor_entries(f"{where}.{pname}" if where else pname, tensor)


def hook_inventory(obj: nn.Module | torch.Tensor | torch.optim.Optimizer | None = None, *,
                   include_global: bool = True, name: str = "") -> list[HookEntry]:
    """Every hook registered on ``obj`` (a module tree, a tensor or an optimizer) and, by default, the
    global ones: global module hooks and the innermost active ``saved_tensors_hooks`` context (its
    pack / unpack pair), and for an optimizer the global optimizer step hooks.

    Entries come in firing order within each place and kind. ``name`` prefixes the
    places (``""`` uses the submodule names as ``named_modules()`` gives them).

    >>> import torch
    >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
    >>> handle = opt.register_step_pre_hook(lambda opt, args, kwargs: None)
    >>> [(e.where, e.kind) for e in hook_inventory(opt)]
    [('optimizer', 'step_pre')]
    >>> handle.remove()
    """
    if not isinstance(name, str):
        raise TypeError(f"name is a prefix for the places listed (a string such as 'model'), got {name!r}")
    entries: list[HookEntry] = []
    if isinstance(obj, nn.Module):
        entries.extend(_module_entries(obj, name))
    elif isinstance(obj, torch.Tensor):
        entries.extend(_tensor_entries(name or "tensor", obj))
    elif isinstance(obj, torch.optim.Optimizer):
        entries.extend(_dict_entries(name or "optimizer", internals.optimizer_hook_dicts(obj), None))
        if include_global:
            entries.extend(_dict_entries("(global)", internals.global_optimizer_hook_dicts(), None))
        return entries
    elif obj is not None:
        raise TypeError(f"hook_inventory takes an nn.Module, a tensor, an optimizer or None, got {type(obj).__name__}")
    if include_global:
        entries.extend(_dict_entries("(global)", internals.global_hook_dicts(), internals.global_full_backward()))
        entries.extend(_saved_tensors_entries())
    return entries


def _saved_tensors_entries() -> Iterator[HookEntry]:
    """The innermost ``saved_tensors_hooks`` context active in this thread (PyTorch shows only that one)."""
    top = internals.top_saved_tensors_hooks()
    if top is not None:
        yield HookEntry("(this thread)", "saved_tensors", f"{hook_name(top[0])} / {hook_name(top[1])}")


def show_hooks(obj: nn.Module | torch.Tensor | torch.optim.Optimizer | None = None, *, include_global: bool = True,
               name: str = "") -> list[HookEntry]:
    """Print :func:`hook_inventory` as a table (or say there are none) and return it.

    >>> from torch import nn
    >>> layer = nn.Linear(2, 2)
    >>> handle = layer.register_forward_hook(print)
    >>> _ = show_hooks(layer, include_global=False)
    where   kind     hook
    Linear  forward  print
    >>> handle.remove()
    """
    entries = hook_inventory(obj, include_global=include_global, name=name)
    print(format_table(("where", "kind", "hook"), [(e.where, e.kind, e.hook) for e in entries],
                       empty="no hooks registered"))
    return entries


@contextmanager
def no_hooks_left_behind(*owners: nn.Module | torch.Tensor | torch.optim.Optimizer,
                         include_global: bool = True) -> Iterator[None]:
    """Fail when the block leaves a hook registered: the test helper for code that registers hooks.

    Compares :func:`hook_inventory` of every ``owner`` (module trees, tensors or optimizers) and, by
    default, the global module and optimizer hooks and the active saved-tensor hooks context before
    and after the block; hooks that were there before are allowed. On
    a leak it raises :class:`HooksLeftBehind` (an ``AssertionError``, so pytest shows it as a
    failure) listing each extra hook, also when the block itself raised (its error is chained).

    >>> import torch
    >>> from torch import nn
    >>> model = nn.Linear(2, 2)
    >>> with no_hooks_left_behind(model):
    ...     handle = model.register_forward_hook(lambda m, args, out: None)
    ...     handle.remove()
    >>> try:
    ...     with no_hooks_left_behind(model):
    ...         handle = model.register_forward_hook(print)
    ... except HooksLeftBehind as leak:
    ...     print(leak.entries[0].kind, leak.entries[0].hook)
    forward print
    >>> handle.remove()
    """
    for owner in owners:
        if not isinstance(owner, (nn.Module, torch.Tensor, torch.optim.Optimizer)):
            raise TypeError(f"no_hooks_left_behind watches modules, tensors and optimizers, got {type(owner).__name__}")

    def snapshot() -> Counter:
        seen: Counter = Counter()
        for owner in owners:
            seen.update(hook_inventory(owner, include_global=False))
        if include_global:
            seen.update(hook_inventory(None, include_global=True))
            seen.update(_dict_entries("(global)", internals.global_optimizer_hook_dicts(), None))
        return seen

    before = snapshot()
    try:
        yield
    finally:
        extra = list((snapshot() - before).elements())
        if extra:
            raise HooksLeftBehind(extra)
