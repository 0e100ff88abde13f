"""Where are a model's blocks? The repeated layers of any model, found by one rule that reads only its module tree.

Most models people hook are a stack of repeated blocks: a Hugging Face model's decoder layers, a timm ViT's
``blocks``, a ResNet's ``layer1`` ... ``layer4``, a diffusers UNet's ``down_blocks``. :func:`find_blocks` finds them in
any ``nn.Module`` with one rule (the same rule that hooklab's atlas of the transformers, diffusers, timm and
torchvision zoos records for every architecture, ``hooklab/course/assets/atlas/``):

* a **stack** is an ``nn.ModuleList`` or ``nn.Sequential`` with at least two children, each of which has submodules
  of its own (a block is made of layers: a list of ``Linear`` layers or of embeddings is no stack), or an
  ``nn.ModuleDict`` whose two or more children are such blocks of one class;
* a block is a module that is called: where a stack's child is an ``nn.ModuleList`` or ``nn.ModuleDict``, which
  ``forward`` only iterates (``for attn, ff in self.layers:``) and never calls, the stack's blocks are the modules
  that child holds, in order (through nested containers), and each must have submodules of its own: a hook on a
  never-called container never fires (:func:`hooklab.explain_hook` gives the cause ``container``);
* a stack inside a block of another stack is not listed (a mixture-of-experts list inside a decoder layer, the
  blocks inside a stage of a stage list), nor a container a stack's blocks were taken from (each ``layers.k`` of
  the layout above): hooks on the outer blocks see everything the inner ones do. A stack that is itself a called
  block of another stack (an ``nn.Sequential`` stage of an ``nn.Sequential`` stage list, as in torchvision's
  ConvNeXt ``features``) is listed too: its blocks are the finer level;
* the stacks come largest first (by parameters; ties by name): the first one is the model's main stack. A stack
  that is a block of another (a ConvNeXt stage) says which: ``within`` is that stack's path (None for the others),
  so one level is ``[s for s in stacks if s.within is None]``.

The rule reads the module tree; it cannot see whether ``forward`` calls the blocks. Given ``run`` (a function of
no arguments that runs the model once), :func:`find_blocks` runs it and leaves out every stack whose blocks that
step never calls: a list whose modules ``forward`` reads only for their weights (``F.linear(x, l.lin.weight)``),
or a tower this input does not reach; each stack it keeps has ``called=True``. Without ``run`` nothing is run and
``called`` is None: the names are those the rule expects to be called, unchecked.

A model with no module that encloses one layer gets an empty list and a warning that says what to hook instead:
the layout ``layers = ModuleList([ModuleList([norm, attn, norm, ff]), ...])`` iterated as
``for norm1, attn, norm2, ff in self.layers``, where the residual additions happen in the model's own
``forward``.

>>> import torch
>>> from torch import nn
>>> class Block(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.attn, self.mlp = nn.Linear(4, 4), nn.Linear(4, 4)
...     def forward(self, x):
...         return x + self.mlp(self.attn(x))
>>> model = nn.Sequential()
>>> model.add_module("embed", nn.Embedding(10, 4))
>>> model.add_module("layers", nn.ModuleList([Block() for _ in range(3)]))
>>> model.add_module("head", nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 10)))
>>> stacks = find_blocks(model)
>>> [(s.path, s.names, s.classes) for s in stacks]
[('layers', ['layers.0', 'layers.1', 'layers.2'], ['Block'])]
>>> handles = [model.get_submodule(name).register_forward_hook(lambda m, args, out: None) for name in stacks[0].names]
>>> for handle in handles:
...     handle.remove()

The common hand-written layout, a list of ``[attention, feed-forward]`` lists: the blocks are what is called.

>>> class Transformer(nn.Module):
...     def __init__(self, depth=2):
...         super().__init__()
...         self.layers = nn.ModuleList([nn.ModuleList([Block(), Block()]) for _ in range(depth)])
...     def forward(self, x):
...         for attn, ff in self.layers:
...             x = ff(attn(x))
...         return x
>>> [(s.path, s.names) for s in find_blocks(Transformer())]
[('layers', ['layers.0.0', 'layers.0.1', 'layers.1.0', 'layers.1.1'])]

With ``run``, a stack whose blocks the step never calls is left out, and the others are checked:

>>> class Functional(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.blocks = nn.ModuleList([Block() for _ in range(2)])
...         self.unused = nn.ModuleList([Block() for _ in range(3)])  # forward reads only their weights
...     def forward(self, x):
...         for block in self.blocks:
...             x = block(x)
...         for block in self.unused:
...             x = torch.nn.functional.linear(x, block.attn.weight)
...         return x
>>> functional = Functional()
>>> [s.path for s in find_blocks(functional)]  # the module tree alone: both lists look like stacks
['unused', 'blocks']
>>> [(s.path, s.called) for s in find_blocks(functional, run=lambda: functional(torch.randn(2, 4)))]
[('blocks', True)]
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ._checks import module as check_module

__all__ = ["BlockStack", "find_blocks"]


@dataclass(frozen=True)
class BlockStack:
    """One stack of repeated blocks: the container's ``path`` (a name from ``named_modules()``), the blocks' names in
    order (modules that are called: for a stack of ``ModuleList`` s, the modules they hold), their class names
    (sorted, each once), the parameters they hold together, ``within`` (the path of the stack this one is a block
    of, or None) and ``called`` (True: a run of the model called its blocks; None: not checked, no ``run`` given)."""

    path: str
    names: list[str]
    classes: list[str]
    parameters: int
    within: str | None = None
    called: bool | None = None

    def __len__(self) -> int:
        return len(self.names)


def _is_container(module: nn.Module) -> bool:
    """A ``ModuleList`` or ``ModuleDict``: it holds modules, but is never called itself (its ``forward`` raises)."""
    return isinstance(module, (nn.ModuleList, nn.ModuleDict))


def _is_block(module: nn.Module) -> bool:
    return next(module.children(), None) is not None


def _callables(path: str, module: nn.Module) -> list[tuple[str, nn.Module]]:
    """``module`` itself, or, for a container, the modules it holds (through nested containers), in order: the
    modules that are called in its place."""
    if not _is_container(module):
        return [(path, module)]
    return [found for name, child in module.named_children() for found in _callables(f"{path}.{name}", child)]


def _is_stack(module: nn.Module) -> bool:
    children = list(module.children())
    if len(children) < 2 or not all(_is_block(c) for c in children):
        return False
    if isinstance(module, (nn.ModuleList, nn.Sequential)):
        return True
    return isinstance(module, nn.ModuleDict) and len({type(c) for c in children}) == 1


def _no_torchscript(model: nn.Module) -> None:
    if isinstance(model, torch.jit.ScriptModule):
        raise TypeError("find_blocks: a TorchScript model (torch.jit.script / torch.jit.trace) keeps no Python "
                        "module tree to read its blocks from, and its modules run no Python hooks: pass the model "
                        "before scripting or tracing it")


def _called(model: nn.Module, names: set[str], run: Callable[[], Any]) -> set[str]:
    """The modules of ``names`` that one call of ``run`` calls (forward pre-hooks, removed even on a raise)."""
    seen: set[str] = set()
    handles = []
    try:
        for name in names:
            handles.append(model.get_submodule(name).register_forward_pre_hook(
                lambda m, args, name=name: seen.add(name)))
        run()
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _parameters(model: nn.Module, path: str, module: nn.Module) -> int:
    """How many parameters the stack at ``path`` holds; a lazy module not run yet has none to count, so it is
    refused, saying to run the model once first."""
    lazy = [name for name, p in module.named_parameters() if nn.parameter.is_lazy(p)]
    if lazy:
        where = f"{path}.{lazy[0]}" if path else lazy[0]
        raise ValueError(f"find_blocks: {type(model).__name__} has lazy modules that have not run yet ({where} is "
                         f"uninitialized{f', and {len(lazy) - 1} more' if len(lazy) > 1 else ''}): their parameters "
                         "get their sizes at the first forward. Run the model once first (model(x)), or pass "
                         "run=lambda: model(x), which runs it before the blocks are counted")
    return sum(p.numel() for p in module.parameters())


def _layer_lists(model: nn.Module) -> list[str]:
    """The lists whose two or more children are ``ModuleList`` s holding the parts of one layer each (the
    hand-written layout that no module encloses)."""
    return [path for path, module in model.named_modules() if isinstance(module, nn.ModuleList) and len(module) >= 2
            and all(isinstance(c, nn.ModuleList) and len(c) >= 2 for c in module.children())]


def find_blocks(model: nn.Module, *, run: Callable[[], Any] | None = None) -> list[BlockStack]:
    """Every stack of repeated blocks in ``model``, largest first (the rule is in this module's description); an
    empty list when the model has none (a plain MLP, a single layer).

    Each :class:`BlockStack` gives the container's name and its blocks' names, ready for ``get_submodule`` or any
    hooklab tool's ``names``. The rule reads the module tree only: each name is of a module that the model's
    structure says is called, which ``forward`` may not do (it may read a list's weights only). Pass ``run``, a
    function of no arguments that runs the model once (``run=lambda: model(x)``), to check: the stacks whose blocks
    that step never calls are left out, and the others have ``called=True``, so a hook on each name fires in that
    step. Without ``run``, ``called`` is None (not checked). Wrappers are looked through as ``named_modules()``
    lists them: the names of a ``torch.compile`` wrapper start with ``_orig_mod.``, those of a ``PeftModel`` with
    ``base_model.model.``. A stack that is itself a called block of another (an ``nn.Sequential`` of
    ``nn.Sequential`` s) is listed too, with ``within`` the outer stack's path: one level is ``[s for s in stacks if
    s.within is None]``. A TorchScript model is refused (it has no Python modules to hook), and so is a model whose
    lazy modules (``nn.LazyLinear`` ...) have not run yet (their parameters have no size): run it once first, or
    pass ``run``, which runs it before the blocks are counted. Where no module encloses one layer (``for attn, ff
    in self.layers`` over lists of parts, one of them a bare layer), the list is empty and a warning says what to
    hook instead.
    """
    check_module(model, "find_blocks")
    _no_torchscript(model)
    if run is not None and not callable(run):
        raise TypeError(f"find_blocks: run is a function of no arguments that runs the model once, e.g. "
                        f"run=lambda: model(x); got {type(run).__name__}")
    stacks = {}  # path -> (the stack, the (name, module) of its blocks: the modules called in place of each child)
    for path, module in model.named_modules():
        if _is_stack(module):
            blocks = [found for name, child in module.named_children()
                      for found in _callables(f"{path}.{name}" if path else name, child)]
            if all(_is_block(m) for _, m in blocks):  # a list of lists of layers is no stack either
                stacks[path] = (module, blocks)
    called = {name for _, blocks in stacks.values() for name, _ in blocks}
    # the containers a stack's blocks were taken from: never called, they are part of that stack
    held = {f"{path}.{name}" if path else name for path, (module, _) in stacks.items()
            for name, child in module.named_children() if _is_container(child)}

    def inside_a_block(path: str) -> bool:
        parts = path.split(".")
        return path in held or any(".".join(parts[:i]) in called | held for i in range(1, len(parts)))

    kept = {path: value for path, value in stacks.items() if not inside_a_block(path)}
    within = {path: next((other for other, (_, blocks) in kept.items() if any(n == path for n, _ in blocks)), None)
              for path in kept}
    ran = _called(model, {n for _, blocks in kept.values() for n, _ in blocks}, run) if run is not None else None
    found = []
    for path, (module, blocks) in kept.items():
        names = [name for name, _ in blocks]
        if ran is not None and not ran.intersection(names):
            continue  # the step never calls these blocks: a hook on them would not fire
        classes = sorted({type(m).__name__ for _, m in blocks})
        parameters = _parameters(model, path, module)
        found.append(BlockStack(path, names, classes, parameters, within[path], None if ran is None else True))
    found.sort(key=lambda s: (-s.parameters, s.path))
    if not found and not stacks:
        lists = _layer_lists(model)
        if lists:
            first = lists[0]
            parts = [n for n, _ in model.get_submodule(f"{first}.0").named_children()] if first else \
                [n for n, _ in model.get_submodule("0").named_children()]
            prefix = f"{first}." if first else ""
            warnings.warn(
                f"find_blocks: no module encloses one layer of {type(model).__name__}: {prefix}0, {prefix}1, ... "
                f"are ModuleLists of a layer's parts ({', '.join(parts)}), which forward iterates and never calls, "
                f"and the residual additions happen in the model's own forward. Hook each part instead: a forward "
                f"hook on {prefix}i.<k> for each part k (the attention's and the feed-forward's outputs); the residual "
                f"stream entering layer i is what a forward pre-hook on {prefix}i.{parts[0]} receives (args[0]), "
                f"so the stream after layer i is the input of {prefix}<i+1>.{parts[0]}", stacklevel=2)
    return found
