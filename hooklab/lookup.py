"""Find a submodule by its dotted name, with an error that lists the names that exist."""
from __future__ import annotations

import difflib
from collections.abc import Iterable

from torch import nn

from ._checks import module as check_module
from ._torch_internals import is_compiled_module
from .errors import UnknownModuleError

__all__ = ["UnknownModuleError", "as_names", "get_module", "get_modules"]


# prefixes that wrappers add to every name: torch.compile's, then (Distributed)DataParallel's
_WRAPPER_PREFIXES = ("_orig_mod.", "module.")


def _unknown(model: nn.Module, name: str, modules: dict[str, nn.Module]) -> UnknownModuleError:
    names = [n for n in modules if n]
    close = difflib.get_close_matches(name, names, n=3)
    for prefix in _WRAPPER_PREFIXES:
        for guess in (prefix + name, name[len(prefix):] if name.startswith(prefix) else None):
            if guess and guess in modules and guess not in close:
                close.insert(0, guess)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    if any(f"{prefix}{name}" in modules for prefix in _WRAPPER_PREFIXES[1:]):
        hint += (f" {type(model).__name__} wraps the model, so its names start with 'module.'; or pass the "
                 "wrapped model (model.module) and use the names it has.")
    elif any(name.startswith(prefix) and name[len(prefix):] in modules for prefix in _WRAPPER_PREFIXES):
        hint += (" This model is not wrapped (by torch.compile, DataParallel or DistributedDataParallel), so its "
                 "names have no such prefix: names from a wrapper's state_dict lose it here.")
    if is_compiled_module(model):
        hint += (" This is a torch.compile wrapper: hooks added now do not run inside the compiled code; "
                 "pass the eager model (model._orig_mod) and call that one.")
    shown = ", ".join(names[:40]) + (f", ... ({len(names)} in all)" if len(names) > 40 else "")
    return UnknownModuleError(f"{type(model).__name__} has no submodule {name!r}.{hint} Names that exist: {shown}")


def as_names(names: str | Iterable[str]) -> list[str]:
    """What every tool's ``names`` argument accepts: one module name or several; a list without duplicates.

    >>> as_names("layer1"), as_names(["fc", "layer1", "fc"])
    (['layer1'], ['fc', 'layer1'])
    """
    if isinstance(names, str):
        names = [names]
    try:
        out = list(dict.fromkeys(names))
    except TypeError:
        raise TypeError(f"names must be a module name or an iterable of names, got {type(names).__name__}") from None
    bad = [n for n in out if not isinstance(n, str)]
    if bad:
        raise TypeError(f"module names are strings like 'layer1.0.conv1', got {bad[0]!r}")
    if not out:
        raise ValueError("no module names given; pass at least one name from model.named_modules()")
    return out


def _check(model: nn.Module, name: object) -> None:
    check_module(model, "get_module")
    if not isinstance(name, str):
        raise TypeError(f"module names are strings like 'layer1.0.conv1', got {type(name).__name__}")


def get_module(model: nn.Module, name: str) -> nn.Module:
    """Return ``model``'s submodule called ``name`` (as in ``named_modules()``; ``""`` is the model).

    >>> get_module(nn.Sequential(nn.Linear(2, 2)), "0")
    Linear(in_features=2, out_features=2, bias=True)
    """
    _check(model, name)
    try:
        return model.get_submodule(name)
    except AttributeError:
        raise _unknown(model, name, dict(model.named_modules())) from None


def get_modules(model: nn.Module, names: Iterable[str]) -> dict[str, nn.Module]:
    """``{name: submodule}`` for several names, walking the model once (unknown names raise as above).

    >>> list(get_modules(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), ["1", "0"]))
    ['1', '0']
    """
    names = list(names)
    for name in names:
        _check(model, name)
    modules = dict(model.named_modules(remove_duplicate=False))
    out = {}
    for name in names:
        if name in modules:
            out[name] = modules[name]
            continue
        try:  # what named_modules() does not list but attribute access finds (a compile wrapper's names)
            out[name] = model.get_submodule(name)
        except AttributeError:
            raise _unknown(model, name, modules) from None
    return out
