"""One module per library profile (see :mod:`tools.profiles.spec` for what each defines). A module imports its
library only inside its functions: the profile's words are read in the project's environment, where a library that
is measured beside it (``requirement``) is not installed."""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def modules() -> dict[str, ModuleType]:
    """Every profile module, by its library's slug, in the order of their file names."""
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        library = getattr(module, "LIBRARY", None)
        if library is None:
            raise LookupError(f"{module.__name__} defines no LIBRARY (a tools.profiles.spec.Library)")
        if library.slug in found:
            raise ValueError(f"two profile modules for {library.slug!r}")
        found[library.slug] = module
    return found
