"""tools/ is a package (design review round 3): its modules import each other as a package, never by putting folders
on ``sys.path``; ``./course`` runs them as ``python -m tools.NAME``; no tool imports the tests' data."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (ROOT / "tools").glob("*.py") if p.stem != "__init__")


# the modules of the tests' own folders (data such as tests/library/zoo.py): no tool imports them
TEST_MODULES = {p.stem for p in (ROOT / "tests").rglob("*.py")}


def test_no_tool_changes_sys_path_or_imports_the_tests():
    for name in MODULES:
        tree = ast.parse((ROOT / "tools" / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
                pytest.fail(f"tools/{name}.py line {node.lineno}: sys.path (import the sibling as `from . import x`)")
            imported = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                        [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for module in imported:
                top = module.split(".")[0]
                assert top != "tests" and top not in TEST_MODULES, f"tools/{name}.py line {node.lineno}: imports {module}"


@pytest.mark.parametrize("name", MODULES)
def test_every_tool_imports_as_part_of_the_package(name):
    module = importlib.import_module(f"tools.{name}")
    assert module.__name__ == f"tools.{name}" and Path(module.__file__).parent == ROOT / "tools"


def test_the_course_script_runs_the_tools_as_modules():
    script = (ROOT / "course").read_text(encoding="utf-8")
    run = script[script.index('case "$cmd" in'):]
    assert not re.search(r"python3? tools/", run), "course runs a tool by its path: use python -m tools.NAME"
    used = set(re.findall(r"-m tools\.(\w+)", run))
    assert {"lab", "workcopies", "vendor", "regen", "site", "slides", "handout", "matrix"} <= used
    assert used <= set(MODULES)


def test_the_notebook_helpers_live_in_hooklab_course_notebook():
    """The tools' notebook I/O (read, headings, language tags, write whole) is one small module of the course
    package, which needs no optional package; the export imports it too."""
    import hooklab.course.export as export
    import hooklab.course.notebook as notebook
    assert export.read_notebook is notebook.read_notebook and export.NotebookError is notebook.NotebookError
    source = (ROOT / "hooklab" / "course" / "notebook.py").read_text(encoding="utf-8")
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(source))
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in getattr(node, "names", [])
                if isinstance(node, ast.Import)} | {node.module.split(".")[0] for node in ast.walk(ast.parse(source))
                                                    if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"__future__", "hashlib", "json", "os", "re", "tempfile", "pathlib", "typing"}, imported
