"""Find a submodule by its dotted name, with an error that lists the names that exist."""
from __future__ import annotations

import difflib

from torch import nn

__all__ = ["UnknownModuleError", "get_module"]


class UnknownModuleError(KeyError):
    """A module name that does not exist in the model (message lists the ones that do)."""

    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0])


def get_module(model: nn.Module, name: str) -> nn.Module:
    """Return ``model``'s submodule called ``name`` (as in ``named_modules()``; ``""`` is the model).

    >>> get_module(nn.Sequential(nn.Linear(2, 2)), "0")
    Linear(in_features=2, out_features=2, bias=True)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"expected an nn.Module, got {type(model).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"module names are strings like 'layer1.0.conv1', got {type(name).__name__}")
    modules = dict(model.named_modules())
    if name in modules:
        return modules[name]
    names = [n for n in modules if n]
    close = difflib.get_close_matches(name, names, n=3)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    shown = ", ".join(names[:40]) + (f", ... ({len(names)} in all)" if len(names) > 40 else "")
    raise UnknownModuleError(f"{type(model).__name__} has no submodule {name!r}.{hint} Names that exist: {shown}")
