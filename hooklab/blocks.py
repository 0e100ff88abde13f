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
* the stacks come largest first (by parameters; ties by name): the first one is the model's main stack.

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
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ._checks import module as check_module

__all__ = ["BlockStack", "find_blocks"]


@dataclass(frozen=True)
class BlockStack:
    """One stack of repeated blocks: the container's ``path`` (a name from ``named_modules()``), the blocks' names in
    order (modules that are called: for a stack of ``ModuleList`` s, the modules they hold), their class names
    (sorted, each once) and the parameters they hold together."""

    path: str
    names: list[str]
    classes: list[str]
    parameters: int

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


def find_blocks(model: nn.Module) -> list[BlockStack]:
    """Every stack of repeated blocks in ``model``, largest first (the rule is in this module's description); an
    empty list when the model has none (a plain MLP, a single layer).

    Each :class:`BlockStack` gives the container's name and its blocks' names, ready for ``get_submodule`` or any
    hooklab tool's ``names``: every name is of a module that is called, so a hook on it fires. Wrappers are looked
    through as ``named_modules()`` lists them: the names of a ``torch.compile`` wrapper start with ``_orig_mod.``,
    those of a ``PeftModel`` with ``base_model.model.``. A TorchScript model is refused (it has no Python modules
    to hook).
    """
    check_module(model, "find_blocks")
    _no_torchscript(model)
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

    found = []
    for path, (module, blocks) in stacks.items():
        if inside_a_block(path):
            continue
        names = [name for name, _ in blocks]
        classes = sorted({type(m).__name__ for _, m in blocks})
        parameters = sum(p.numel() for p in module.parameters())
        found.append(BlockStack(path, names, classes, parameters))
    found.sort(key=lambda s: (-s.parameters, s.path))
    return found
