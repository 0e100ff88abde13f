"""A torchinfo-like table of every submodule call's output shape, recorded through hooks for one forward."""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ._checks import int_at_least, module as check_module
from ._text import describe_shape, format_table
from .scope import HookScope

__all__ = ["ShapeRow", "ShapeTable", "layer_shapes"]


@dataclass(frozen=True)
class ShapeRow:
    """One module call seen by :func:`layer_shapes`."""

    name: str
    kind: str
    shape: str  # the output's shape, as describe_shape writes it ("?" while the call has not returned)
    params: int
    depth: int


@dataclass
class _Open:
    """A call seen by its pre-hook, waiting for its output."""

    name: str
    kind: str
    params: int
    depth: int
    shape: str = "?"

    def row(self) -> ShapeRow:
        return ShapeRow(self.name, self.kind, self.shape, self.params, self.depth)


class ShapeTable(list):
    """A list of :class:`ShapeRow` that prints as an aligned table."""

    def table(self) -> str:
        """The rows as an aligned table: layer (indented by depth), type, output shape and parameter count (also
        what ``print(table)`` shows)."""
        rows = [("  " * (r.depth - 1) + r.name, r.kind, r.shape, f"{r.params:,}") for r in self]
        return format_table(("layer", "type", "output shape", "params"), rows, right=[3], empty="no module ran")

    def __str__(self) -> str:
        return self.table()


def layer_shapes(model: nn.Module, *args: Any, depth: int = 1, **kwargs: Any) -> ShapeTable:
    """Run ``model(*args, **kwargs)`` once and return every submodule call's output shape.

    Rows come in the order the calls start (a parent before its children); ``depth`` is how
    many levels of ``named_modules()`` to show (1 = direct children, like ``conv1``,
    ``layer1``; 2 adds ``layer1.0`` ...). A module called twice gives two rows. The run is
    under ``torch.no_grad()`` in eval mode (so BatchNorm statistics are not updated); each
    module's train / eval flag is restored afterwards, and every hook is removed. For a fuller
    summary (parameter counts per layer, memory estimates) the ``torchinfo`` package does the
    same with hooks.

    >>> model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Sequential(nn.Flatten(), nn.Linear(8 * 6 * 6, 2)))
    >>> print(layer_shapes(model, torch.zeros(1, 3, 8, 8), depth=2))
    layer  type        output shape  params
    0      Conv2d      (1, 8, 6, 6)     224
    1      ReLU        (1, 8, 6, 6)       0
    2      Sequential  (1, 2)           578
      2.0  Flatten     (1, 288)           0
      2.1  Linear      (1, 2)           578
    """
    check_module(model, "layer_shapes")
    int_at_least(depth, "depth", 1)
    rows: list[_Open] = []
    open_rows: dict[int, list[_Open]] = {}  # id(module) -> its rows still waiting for an output
    modes = {m: m.training for m in model.modules()}

    def row_start(name: str, level: int) -> Callable[[nn.Module, Any], None]:
        def shape_pre_hook(module: nn.Module, inputs: Any) -> None:
            row = _Open(name, type(module).__name__, sum(p.numel() for p in module.parameters()), level)
            rows.append(row)
            open_rows.setdefault(id(module), []).append(row)
        return shape_pre_hook

    def shape_hook(module: nn.Module, inputs: Any, output: Any) -> None:
        open_rows[id(module)].pop().shape = describe_shape(output)

    with HookScope("layer_shapes") as scope:
        try:
            for name, module in model.named_modules():
                level = len(name.split(".")) if name else 0
                if 1 <= level <= depth:
                    scope.add(module.register_forward_pre_hook(row_start(name, level)))
                    scope.add(module.register_forward_hook(shape_hook))
            model.eval()
            with torch.no_grad():
                model(*args, **kwargs)
        finally:
            for module, training in modes.items():
                module.training = training
    if not rows:
        warnings.warn(f"layer_shapes: no module at depth <= {depth} was called (a container such as nn.ModuleList "
                      f"is never called itself); try depth={depth + 1}", UserWarning, stacklevel=2)
    return ShapeTable(row.row() for row in rows)
