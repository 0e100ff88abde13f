"""The checks of the test suite, read from the tree as pytest collects them: each one's id, kind and own file.

A check's id is the file part of its tests' node ids (``tests/tools/test_site.py``,
``notebooks/07_activation_checkpointing.ipynb[scalar-cpu]``), or, for a population's member, the file and the
member's parameter id (``tests/course/test_recipes_alone.py::tensor-hooks-03``).

>>> check_of("notebooks/07_a.ipynb[scalar-cpu]::Cell 3")
'notebooks/07_a.ipynb[scalar-cpu]'
>>> check_of("tests/course/test_recipes_alone.py::test_alone[tensor-hooks-03]")
'tests/course/test_recipes_alone.py::tensor-hooks-03'
>>> own_file("recipes/40_x.ipynb[scalar-cpu]")
'recipes/40_x.ipynb'
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# pyproject.toml's testpaths, in its order
TEST_ROOTS = ("tests", "notebooks", "recipes", "hooklab")
SCALAR = "[scalar-cpu]"  # the root conftest.py's copy of a notebook under the scalar CPU kernels
NOTEBOOK = re.compile(r"^(notebooks|recipes)/\d\d_[a-z0-9_]+\.ipynb$")
# a population: a test file whose parametrized members are checks of their own (tools/gate/populations.py)
POPULATIONS = ("tests/course/test_recipes_alone.py",)
_PARAM = re.compile(r"\[(.*)\]$")


@dataclass(frozen=True)
class Check:
    id: str
    kind: str  # "test", "doctest", "notebook", "recipe-notebook", "member"

    @property
    def file(self) -> str:
        return own_file(self.id)

    @property
    def scalar(self) -> bool:
        return self.id.endswith(SCALAR)


def check_of(nodeid: str) -> str:
    """The check a test (by its pytest node id) belongs to."""
    path, _, rest = nodeid.partition("::")
    if path in POPULATIONS:
        found = _PARAM.search(rest)
        if found:
            return f"{path}::{found.group(1)}"
    return path


def own_file(check: str) -> str:
    """The repository file a check is: its test file, module or notebook."""
    return check.split("::")[0].removesuffix(SCALAR)


def kind_of(check: str) -> str:
    if "::" in check:
        return "member"
    path = own_file(check)
    if path.endswith(".ipynb"):
        return "notebook" if path.startswith("notebooks/") else "recipe-notebook"
    name = path.rsplit("/", 1)[-1]
    return "test" if name.startswith("test_") and path.startswith("tests/") else "doctest"


def checks(root: Path = ROOT) -> list[Check]:
    """Every file-level check pytest collects from ``TEST_ROOTS``: test files, modules with docstring examples,
    and each notebook and recipe notebook twice (the machine's kernels, the scalar ones). Population members are
    listed by :mod:`tools.gate.populations`."""
    found: list[str] = []
    for top in TEST_ROOTS:
        for path in sorted((root / top).rglob("*")):
            rel = path.relative_to(root).as_posix()
            if any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(root).parts):
                continue
            if path.suffix == ".ipynb" and NOTEBOOK.match(rel):
                found += [rel, rel + SCALAR]
            elif path.suffix == ".py" and path.is_file() and path.name != "conftest.py":
                if kind_of(rel) == "test" or ">>>" in path.read_text(encoding="utf-8", errors="replace"):
                    found.append(rel)
    return [Check(c, kind_of(c)) for c in found]
