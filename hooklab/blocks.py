"""Where are a model's blocks? The repeated layers of any model, found by one rule that reads only its module tree.

Most models people hook are a stack of repeated blocks: a Hugging Face model's decoder layers, a timm ViT's
``blocks``, a ResNet's ``layer1`` ... ``layer4``, a diffusers UNet's ``down_blocks``. :func:`find_blocks` finds them in
any ``nn.Module`` with one rule (the same rule that hooklab's atlas of the transformers, diffusers, timm and
torchvision zoos records for every architecture, ``hooklab/course/assets/atlas/``):

* a **stack** is an ``nn.ModuleList`` or ``nn.Sequential`` with at least two children, each of which has submodules
  of its own (a block is made of layers: a list of ``Linear`` layers or of embeddings is no stack), or an
  ``nn.ModuleDict`` whose two or more children are such blocks of one class;
* a stack inside a block of another stack is not listed (a mixture-of-experts list inside a decoder layer, the
  blocks inside a stage of a stage list): hooks on the outer blocks see everything the inner ones do;
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
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ._checks import module as check_module

__all__ = ["BlockStack", "find_blocks"]


@dataclass(frozen=True)
class BlockStack:
    """One stack of repeated blocks: the container's ``path`` (a name from ``named_modules()``), the blocks' names in
    order, their class names (sorted, each once) and the parameters they hold together."""

    path: str
    names: list[str]
    classes: list[str]
    parameters: int

    def __len__(self) -> int:
        return len(self.names)


def _is_block(module: nn.Module) -> bool:
    return next(module.children(), None) is not None


def _is_stack(module: nn.Module) -> bool:
    children = list(module.children())
    if len(children) < 2 or not all(_is_block(c) for c in children):
        return False
    if isinstance(module, (nn.ModuleList, nn.Sequential)):
        return True
    return isinstance(module, nn.ModuleDict) and len({type(c) for c in children}) == 1


def find_blocks(model: nn.Module) -> list[BlockStack]:
    """Every stack of repeated blocks in ``model``, largest first (the rule is in this module's description); an
    empty list when the model has none (a plain MLP, a single layer).

    Each :class:`BlockStack` gives the container's name and its blocks' names, ready for ``get_submodule`` or any
    hooklab tool's ``names``. Wrappers are looked through as ``named_modules()`` lists them: the names of a
    ``torch.compile`` wrapper start with ``_orig_mod.``, those of a ``PeftModel`` with ``base_model.model.``.
    """
    check_module(model, "find_blocks")
    stacks = []
    for path, module in model.named_modules():
        if _is_stack(module):
            stacks.append((path, module))
    blocks = {f"{path}.{name}" if path else name for path, module in stacks for name, _ in module.named_children()}

    def inside_a_block(path: str) -> bool:
        parts = path.split(".")
        return any(".".join(parts[:i]) in blocks for i in range(1, len(parts)))

    found = []
    for path, module in stacks:
        if inside_a_block(path):
            continue
        names = [f"{path}.{name}" if path else name for name, _ in module.named_children()]
        classes = sorted({type(child).__name__ for child in module.children()})
        parameters = sum(p.numel() for p in module.parameters())
        found.append(BlockStack(path, names, classes, parameters))
    found.sort(key=lambda s: (-s.parameters, s.path))
    return found
