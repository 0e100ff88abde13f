"""What a notebook's code needs installed: the modules its code cells import, the distributions that provide them, and
the versions uv.lock pins for those.

- :func:`imported_modules`: the top-level names of every absolute ``import`` / ``from ... import`` in the code cells
  (parsed with :mod:`ast`, after IPython's own translation of ``%magics`` and ``!shell`` lines, so a cell that
  runs in Jupyter parses here), plus the distributions a cell asks ``importlib.metadata.version("...")`` about;
- :func:`distributions`: import name -> distribution, from the installed packages' metadata
  (:func:`importlib.metadata.packages_distributions`: what ``import timm`` loads is the distribution ``timm``,
  ``import pytorch_lightning`` is ``pytorch-lightning``); the standard library is left out;
- :func:`locked_versions`: the versions uv.lock pins, by normalised distribution name.

``tools/launch/copies.py`` builds each launch copy's install cell from these (the notebook's imports at the lock's
versions); ``tools/rerun/ahead.py`` reads which notebooks use a library.

>>> nb = {"cells": [{"cell_type": "code", "source": "%matplotlib inline\\nimport torch.nn as nn\\n"
...                  "from timm import create_model\\nimport os, json\\nprint(version('captum'))"}]}
>>> sorted(imported_modules(nb))
['captum', 'json', 'os', 'timm', 'torch']
>>> sorted(third_party(imported_modules(nb)))
['captum', 'timm', 'torch']
"""
from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "uv.lock"
VERSION_CALLS = {"version", "distribution", "metadata"}  # importlib.metadata's calls that need the distribution


class ImportsError(Exception):
    """A notebook imports something that no installed distribution (or no locked one) provides: the message says
    which notebook, which name, and what to do."""


def normal(name: str) -> str:
    """A distribution's normalised name (PEP 503): ``PyTorch_Lightning`` -> ``pytorch-lightning``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def code_of(cell: Mapping[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def python_of(code: str) -> str:
    """The Python that Jupyter runs for a cell: IPython translates ``%magic`` and ``!shell`` lines first."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # without IPython, only plain Python cells parse
        return code
    return TransformerManager().transform_cell(code)


def code_trees(nb: Mapping[str, Any], *, skip_tag: str | None = None) -> list[ast.Module]:
    """The syntax tree of each code cell of a notebook (magics made Python), cells tagged ``skip_tag`` left out. A
    cell that does not parse raises :class:`ImportsError` naming it."""
    trees = []
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code" or (skip_tag and skip_tag in cell.get("metadata", {}).get("tags", [])):
            continue
        try:
            trees.append(ast.parse(python_of(code_of(cell))))
        except SyntaxError as exc:
            raise ImportsError(f"code cell {index} does not parse as Python ({exc.msg}, line {exc.lineno}), so "
                               "its imports cannot be read") from None
    return trees


def imported_modules(nb: Mapping[str, Any], *, skip_tag: str | None = None) -> set[str]:
    """Top-level names a notebook's code cells import (absolute imports; ``import a.b`` gives ``a``), plus the names
    passed as a string to ``version(...)`` / ``metadata.version(...)`` (the distribution must be installed for those).
    Cells tagged ``skip_tag`` are left out (the launch copy's own install cell). A cell that does not parse raises
    :class:`ImportsError` naming it."""
    found: set[str] = set()
    for tree in code_trees(nb, skip_tag=skip_tag):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.Call) and _called_name(node.func) in VERSION_CALLS and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


def _called_name(func: ast.expr) -> str | None:
    """``version`` for ``version(...)`` and for ``metadata.version(...)`` / ``importlib.metadata.version(...)``."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        base = func.value
        base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
        return func.attr if base_name == "metadata" else None
    return None


def third_party(modules: Iterable[str]) -> set[str]:
    """The names that are not the standard library's."""
    return {m for m in modules if m not in sys.stdlib_module_names and m != "__future__"}


@functools.cache
def _installed_distributions() -> Mapping[str, list[str]]:
    """:func:`importlib.metadata.packages_distributions`, read once per process (it reads every installed package's
    metadata: a second a call, asked once per notebook and hooklab module by a site build)."""
    return importlib.metadata.packages_distributions()


def distributions(modules: Iterable[str], *, mapping: Mapping[str, list[str]] | None = None) -> dict[str, str]:
    """import name -> normalised distribution name, from the installed metadata (or ``mapping``, import name ->
    distribution names, as :func:`importlib.metadata.packages_distributions` gives it). A name that is already a
    distribution's name (``version("captum")``) maps to itself when installed. Raises :class:`ImportsError` for a
    name that no installed distribution provides, or that several do.

    >>> distributions(["pytorch_lightning", "torch"], mapping={"pytorch_lightning": ["pytorch-lightning"],
    ...                                                      "torch": ["torch"], "torchgen": ["torch"]})
    {'pytorch_lightning': 'pytorch-lightning', 'torch': 'torch'}
    """
    table = _installed_distributions() if mapping is None else mapping
    installed = {normal(d) for names in table.values() for d in names}
    found = {}
    for module in sorted(third_party(modules)):
        providers = sorted({normal(d) for d in table.get(module, [])})
        if not providers and normal(module) in installed:
            providers = [normal(module)]
        if len(providers) != 1:
            what = "no installed distribution provides it" if not providers else \
                f"several distributions provide it ({', '.join(providers)})"
            raise ImportsError(f"{module!r} is imported, but {what}: add the package that provides it to "
                               "pyproject.toml's course group and run `.tools/bin/uv lock`")
        found[module] = providers[0]
    return found


def read_lock(lock: Path = LOCK) -> dict[str, Any]:
    """uv.lock's data, parsed once while the file is unchanged (a site build asks for it twice per notebook; parsing
    its 1 MB of TOML takes a second): shared, to be read only."""
    stat = lock.stat()
    return _parsed_lock(str(lock), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _parsed_lock(path: str, _mtime_ns: int, _size: int) -> dict[str, Any]:
    return tomllib.loads(Path(path).read_text(encoding="utf-8"))


def locked_versions(lock: Path = LOCK) -> dict[str, list[str]]:
    """Normalised distribution name -> the versions uv.lock pins (more than one where the lock forks by Python
    version, as numpy's does)."""
    data = read_lock(lock)
    versions: dict[str, list[str]] = {}
    for package in data.get("package", []):
        if "version" in package:
            versions.setdefault(normal(package["name"]), []).append(package["version"])
    return versions


def locked_version(name: str, locked: Mapping[str, list[str]], *, lock: Path = LOCK) -> str:
    """The one version uv.lock pins for ``name`` here: where the lock forks, the one installed in this Python."""
    versions = locked.get(normal(name), [])
    if len(versions) > 1:
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        versions = [v for v in versions if v == installed]
    if len(versions) != 1:
        raise ImportsError(f"{lock} pins no single version of {name} for this Python "
                           f"({', '.join(locked.get(normal(name), [])) or 'none'}): run ./course test once "
                           "to sync .venv with the lock, or add the package to pyproject.toml's course group")
    return versions[0]
