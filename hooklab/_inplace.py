"""A static guess at where a model modifies a module's output in place (which forbids full backward hooks).

``nn.ReLU(inplace=True)`` overwrites the previous layer's output, and a forward with ``out += identity`` updates a
local in place; PyTorch then refuses the full backward hooks of the module whose output was changed. The
:class:`~hooklab.Tracer` asks this module which backward hooks it can use.
"""
from __future__ import annotations

import inspect
import re

from torch import nn

__all__ = ["in_place_on_outputs"]

# an augmented assignment to a local or an item (``out += identity``), not to an attribute
_AUGMENTED = re.compile(r"^\s*(?!self\.)[A-Za-z_]\w*(?:\[[^\]]*\])?\s*[-+*/]=", re.M)
_SOURCE_CHECKED: dict[type, bool] = {}


def _forward_writes_in_place(cls: type[nn.Module]) -> bool:
    """True when a module class's forward has an in-place update like ``out += identity`` (cached)."""
    if cls not in _SOURCE_CHECKED:
        found = False
        if not cls.__module__.startswith("torch.nn."):  # PyTorch's own layers update only their buffers
            try:
                found = bool(_AUGMENTED.search(inspect.getsource(cls.forward)))
            except (OSError, TypeError):
                found = False
        _SOURCE_CHECKED[cls] = found
    return _SOURCE_CHECKED[cls]


def in_place_on_outputs(model: nn.Module) -> list[str]:
    """Where ``model`` may modify a module's output in place (which forbids full backward hooks).

    Finds modules with ``inplace=True`` (``nn.ReLU(inplace=True)`` overwrites the previous
    layer's output) and forwards that update a local in place (``out += identity``). A
    static guess: it can miss in-place tensor methods (``x.add_(y)``) on outputs.

    >>> class Residual(nn.Module):
    ...     def forward(self, x):
    ...         out = x * 2
    ...         out += x
    ...         return out
    >>> in_place_on_outputs(nn.Sequential(nn.Linear(2, 2), nn.ReLU(inplace=True), Residual()))
    ['1', '2']
    """
    found = []
    for name, m in model.named_modules():
        if getattr(m, "inplace", False) is True or _forward_writes_in_place(type(m)):
            found.append(name or type(m).__name__)
    return found
