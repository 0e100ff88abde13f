"""tools/ is a package of subsystem packages (ARCHITECTURE.md): its modules import each other as a package, never by
putting folders on ``sys.path``; ``./course`` runs them as ``python -m tools.PACKAGE[.MODULE]``; no tool imports the
tests' data; a package imports only packages on its floor or below, and no modules (of tools/ or hooklab/) import
each other in a circle. The modules' names before this layout still run for one release, with a note."""
from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools._moved import MOVED, _Finder, note

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(p for p in (ROOT / "tools").rglob("*.py") if p.name != "conf.py")  # conf.py: Sphinx execs it


def dotted(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = sorted(dotted(p) for p in FILES if p.name != "__main__.py")

# the floors of ARCHITECTURE.md: a package imports packages on its own floor (without a circle) or below
FLOORS = {"notebooks": 1, "messages": 2, "hook_matrix": 2, "atlas": 2, "doctor": 2, "ask": 2, "recipes": 2,
          "profiles": 2,
          "classroom": 3, "launch": 3, "site": 4, "rerun": 4, "gate": 4}

# the modules of the tests' own folders (data such as tests/library/zoo.py): no tool imports them
TEST_MODULES = {p.stem for p in (ROOT / "tests").rglob("*.py")}


def test_every_package_of_tools_is_on_a_floor_and_says_what_it_owns():
    packages = {p.parent.name for p in (ROOT / "tools").glob("*/__init__.py")}
    assert packages == set(FLOORS)
    architecture = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for name in packages:
        doc = importlib.import_module(f"tools.{name}").__doc__ or ""
        assert "import" in doc and len(doc.split()) > 30, f"tools/{name}/__init__.py: say what it owns and may import"
        assert f"`tools/{name}/`" in architecture, f"ARCHITECTURE.md does not place tools/{name}/"


def test_no_tool_changes_sys_path_or_imports_the_tests():
    for path in FILES:
        name = path.relative_to(ROOT)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
                pytest.fail(f"{name} line {node.lineno}: sys.path (import the sibling as `from . import x`)")
            imported = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                        [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for module in imported:
                top = module.split(".")[0]
                assert top != "tests" and top not in TEST_MODULES, f"{name} line {node.lineno}: imports {module}"


@pytest.mark.parametrize("name", MODULES)
def test_every_tool_imports_as_part_of_its_package(name):
    module = importlib.import_module(name)
    assert module.__name__ == name and Path(module.__file__).resolve().is_relative_to(ROOT / "tools")


def _run_time_nodes(tree: ast.AST):
    """Every node of the tree but those under ``if TYPE_CHECKING:`` (imports for annotations only, never run)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in [child, *_run_time_nodes(child)])
            continue
        yield node
        yield from _run_time_nodes(node)


def imports_of(path: Path, known: set[str], *, annotations: bool = False) -> set[str]:
    """The modules of ``known`` that the file imports (at its top or inside a function), resolved as Python does;
    with ``annotations``, also those it imports under ``if TYPE_CHECKING:`` (for annotations only)."""
    name = dotted(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in (ast.walk(tree) if annotations else _run_time_nodes(tree)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        # a module's import of its own package's __init__ (a name the package defines, read when a function runs)
        # is no edge: the package's face is not a room of its own
        out |= {t for t in targets if t in known and t != name and not name.startswith(t + ".")}
    return out


def import_graph(*folders: str, annotations: bool = False) -> dict[str, set[str]]:
    files = [p for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))
             if p.name not in ("__main__.py", "conf.py")]
    known = {dotted(p) for p in files}
    return {dotted(p): imports_of(p, known, annotations=annotations) for p in files}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_imports_for_annotations_only_are_no_edge():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import b\nelse:\n    import c\n"
                     "def f():\n    import d\n")
    imported = {a.name for n in _run_time_nodes(tree) if isinstance(n, ast.Import) for a in n.names}
    assert imported == {"c", "d"}


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_modules_import_each_other_in_a_circle():
    """Imports for annotations only (``if TYPE_CHECKING:``) count too: a circle through them is a circle of the
    design (two modules that need each other's types), which a type checker follows (review round 6:
    ``hook_messages`` and ``hook_messages_status`` shared ``Message`` that way)."""
    graph = import_graph("tools", "hooklab", annotations=True)
    assert graph["tools.messages.hook_messages"] and graph["hooklab.course.hook_matrix.observe"]  # the graph was read
    assert circles(graph) == []


def test_the_circle_finder_sees_imports_for_annotations(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "dotted", lambda path: path.stem)  # two modules outside the checkout
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from b import B\n")
    (tmp_path / "b.py").write_text("import a\n")
    known = {"a", "b"}
    graph = {name: imports_of(tmp_path / f"{name}.py", known, annotations=True) for name in known}
    assert circles(graph) == [["a", "b"]]
    assert imports_of(tmp_path / "a.py", known) == set()  # at run time, no edge


def test_no_package_of_tools_imports_one_on_a_higher_floor_and_hooklab_imports_no_tool():
    graph = import_graph("tools", "hooklab")
    for module, targets in graph.items():
        if module.startswith("hooklab"):
            assert not [t for t in targets if t.startswith("tools")], module
            continue
        mine = module.split(".")[1] if module.count(".") else ""
        for target in targets:
            theirs = target.split(".")[1] if target.count(".") else ""
            if mine in FLOORS and theirs in FLOORS:
                assert FLOORS[theirs] <= FLOORS[mine], f"{module} (floor {FLOORS[mine]}) imports {target} " \
                                                       f"(floor {FLOORS[theirs]})"
            if mine == "" or mine == "_moved":  # tools/__init__.py and the old names: nothing of the subsystems
                assert theirs in ("", "_moved"), f"{module} imports {target}"


def test_the_course_script_runs_the_tools_as_modules():
    script = (ROOT / "course").read_text(encoding="utf-8")
    run = script[script.index('case "$cmd" in'):]
    assert not re.search(r"python3? tools/", run), "course runs a tool by its path: use python -m tools.NAME"
    used = set(re.findall(r"-m (tools\.[\w.]+)", run))
    assert {"tools.classroom.lab", "tools.classroom.workcopies", "tools.classroom.vendor", "tools.notebooks.regen",
            "tools.site", "tools.classroom.slides", "tools.classroom.handout", "tools.rerun"} <= used
    for name in used:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin and Path(spec.origin).is_relative_to(ROOT / "tools"), name
        main = Path(spec.origin).with_name("__main__.py") if spec.submodule_search_locations else Path(spec.origin)
        assert main.exists() and ('if __name__ == "__main__":' in main.read_text(encoding="utf-8")
                                  or main.name == "__main__.py"), f"{name} does not run as a command"


# --- the names before this layout -----------------------------------------------------------------------------------

@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_name_imports_the_new_module_and_runs_it_after_a_note(old, monkeypatch):
    new = importlib.import_module(MOVED[old])
    assert importlib.import_module(f"tools.{old}") is new
    assert new.__spec__.name == MOVED[old]  # the old name's import left the module's own spec alone
    calls = []
    monkeypatch.setattr("runpy.run_module", lambda *a, **kw: calls.append((a, kw)))
    code = _Finder().find_spec(f"tools.{old}").loader.get_code(f"tools.{old}")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        exec(code, {"__name__": "__main__"})
    assert err.getvalue() == note(old) + "\n" and f"python -m {MOVED[old]}" in err.getvalue()
    assert calls == [((MOVED[old],), {"run_name": "__main__", "alter_sys": True})]


# the old entry points whose command line has --help (argparse): run for real, as a maintainer's script would
WITH_HELP = ["matrix", "matrix_ahead", "matrix_run", "runtimes", "pinned_links", "package_page", "launch_check",
             "symptoms", "hook_messages", "slides", "handout"]


@pytest.mark.parametrize("old", WITH_HELP)
def test_an_old_entry_point_still_runs_with_a_note(old):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", f"tools.{old}", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.splitlines()[0] == note(old)
    assert proc.stdout.startswith("usage:")
    same = subprocess.run([sys.executable, "-m", MOVED[old], "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)
    assert same.returncode == 0 and same.stdout == proc.stdout and note(old) not in same.stderr


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
