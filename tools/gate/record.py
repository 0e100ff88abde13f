"""What the gate knows of each check, committed in ``tests/gate/``, and the hash a check passes at.

- ``costs.json``: each check's cost, worker-seconds on an idle 2-core machine (``python -m tools.gate costs``
  reads them from a run's JUnit XML);
- ``reads.json``: the repository files and folders each check was seen to run or read (``./course test --trace``,
  :mod:`tools.gate.trace`); a check not traced yet reads its own file and what it imports (:func:`static_reads`);
- ``passed.json``: for each check, the hash of its inputs when it last passed in full (written by every run).

A check's inputs are its reads plus what every test runs under (the environment's lock, pytest's settings, the
conftest files on its path); the gate's own code and records are no input of anything.

>>> module_file("hooklab.capturing") == "hooklab/capturing.py"
True
>>> sorted(imports_of("import os\\nfrom hooklab import explain\\nfrom . import x", "hooklab/a.py"))
['hooklab', 'hooklab.explain', 'hooklab.x', 'os']
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from tools.gate.checks import ROOT, SCALAR, own_file

RECORDS = ROOT / "tests" / "gate"
COSTS, READS, PASSED = RECORDS / "costs.json", RECORDS / "reads.json", RECORDS / "passed.json"
# no check's input: the gate itself (its own tests check it) and what it writes
NOT_INPUTS = ("tools/gate/", "tests/gate/")
# what every check runs under
EVERY_CHECK = ("uv.lock", "pyproject.toml", "conftest.py")
# folders pytest puts on sys.path (pyproject.toml's pythonpath): where a bare ``import patience`` is found
IMPORT_PATHS = ("", "tests", "tests/library", "tests/course", "tests/messages")
# what the scalar copy of a notebook adds: its CPU configuration
SCALAR_INPUTS = ("tools/notebooks/cpu_shims.py",)
NOTEBOOK_INPUTS = ("tests/sanitize.cfg",)


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------------------------- reads
def traced_reads(root: Path = ROOT) -> dict[str, list[str]]:
    """check -> the paths its trace saw (reads.json stores each path once and indexes it); ``root``: the tree,
    or a reads.json itself."""
    data = load(root if root.suffix == ".json" else root / READS.relative_to(ROOT))
    paths = data.get("paths", [])
    return {check: [paths[i] for i in found] for check, found in data.get("checks", {}).items()}


@functools.cache
def module_file(name: str, root: Path = ROOT) -> str | None:
    """The repository file a dotted module name is imported from (pytest's pythonpath), or None."""
    parts = name.split(".")
    for base in IMPORT_PATHS:
        folder = root / base if base else root
        for candidate in (folder.joinpath(*parts).with_suffix(".py"), folder.joinpath(*parts, "__init__.py")):
            if candidate.is_file():
                return candidate.relative_to(root).as_posix()
    return None


def imports_of(source: str, path: str) -> set[str]:
    """The dotted names a Python source imports (``from a import b`` gives ``a`` and ``a.b``: b may be a module)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    package = path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    if not path.endswith("__init__.py"):
        package = package.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1] if package else []
                base = ".".join([*up, base] if base else up)
            if base:
                names.add(base)
                names.update(f"{base}.{a.name}" for a in node.names if a.name != "*")
    return names


@functools.cache
def _imports_of_file(path: str, root: Path) -> frozenset[str]:
    text = (root / path).read_text(encoding="utf-8", errors="replace")
    return frozenset(imports_of(text, path))


def static_reads(check: str, root: Path = ROOT) -> set[str]:
    """What a check not traced yet reads: its own file and every repository module it imports, closed over their
    imports (``import hooklab`` imports all of it: coarse, never too little for Python code)."""
    return set(_static_reads(own_file(check), root))


@functools.cache
def _static_reads(own: str, root: Path) -> frozenset[str]:
    if own.endswith(".ipynb"):
        from tools.notebooks.imports import code_of, python_of

        nb = json.loads((root / own).read_text(encoding="utf-8"))
        source = "\n".join(python_of(code_of(c)) for c in nb.get("cells", []) if c.get("cell_type") == "code")
        todo = list(imports_of(source, own))
    else:
        todo = list(_imports_of_file(own, root)) if (root / own).is_file() else []
    seen, found = set(todo), {own}
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for k in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ too
            file = module_file(".".join(parts[:k]), root)
            if file is None or file in found:
                continue
            found.add(file)
            for more in _imports_of_file(file, root):
                if more not in seen:
                    seen.add(more)
                    todo.append(more)
    return frozenset(found)


def inputs(check: str, reads: dict[str, list[str]], root: Path = ROOT) -> list[str]:
    """Every repository path whose content a check's verdict may depend on, sorted."""
    own = own_file(check)
    twin = check.removesuffix(SCALAR)  # the scalar copy of a notebook reads what its twin reads
    found = set(reads[check]) if check in reads else set(reads[twin]) if twin in reads else static_reads(check, root)
    found |= {own, *EVERY_CHECK}
    if own.startswith("tests/"):
        folder = own.split("/")
        found |= {p for p in ("tests/conftest.py", f"tests/{folder[1]}/conftest.py") if (root / p).is_file()}
    if own.endswith(".ipynb"):
        found |= set(NOTEBOOK_INPUTS)
    if check.endswith(SCALAR):
        found |= set(SCALAR_INPUTS)
    return sorted(p for p in found if not p.startswith(NOT_INPUTS))


# ----------------------------------------------------------------------------------------------- hashes
def path_digest(path: str, root: Path = ROOT) -> str:
    """A file's content hash; a folder's, the sorted names in it (a file added or removed changes it)."""
    full = root / path
    if full.is_file():
        return hashlib.sha1(full.read_bytes()).hexdigest()
    if full.is_dir():
        names = sorted(p.name for p in full.iterdir() if not p.name.startswith(".") and p.name != "__pycache__")
        return hashlib.sha1("\n".join(names).encode()).hexdigest()
    return "missing"


class Hasher:
    """Hashes of checks' inputs, each path read once."""

    def __init__(self, root: Path = ROOT, reads: dict[str, list[str]] | None = None) -> None:
        self.root = root
        self.reads = traced_reads(root) if reads is None else reads
        self._digests: dict[str, str] = {}

    def digest(self, path: str) -> str:
        if path not in self._digests:
            self._digests[path] = path_digest(path, self.root)
        return self._digests[path]

    def check(self, check: str, extra: bytes = b"", paths: list[str] | None = None) -> str:
        """The hash of a check's inputs (``extra``: a member's own content, ``paths``: its inputs, for a
        population's member)."""
        h = hashlib.sha1(check.encode() + b"\0" + extra)
        for path in inputs(check, self.reads, self.root) if paths is None else paths:
            h.update(f"{path}\0{self.digest(path)}\n".encode())
        return h.hexdigest()[:20]


def passed(root: Path = ROOT) -> dict[str, str]:
    return load(root / PASSED.relative_to(ROOT)).get("checks", {})


def write_passed(new: dict[str, str], root: Path = ROOT) -> None:
    """Add the checks that passed in full now, at their hashes, to passed.json."""
    if not new:
        return
    path = root / PASSED.relative_to(ROOT)
    data = load(path)
    data.setdefault("checks", {}).update(new)
    data["about"] = ("for each check, the hash of its inputs when it last passed in full (tools/gate/record.py); "
                     "written by ./course test, committed with the change")
    save(path, data)


def costs(root: Path = ROOT) -> dict[str, float]:
    return load(root / COSTS.relative_to(ROOT)).get("checks", {})


def relative(path: str | os.PathLike[str], root: Path = ROOT) -> str | None:
    """A path as the records name it (relative to the root, '/'-separated), or None outside the repository."""
    try:
        rel = Path(os.path.abspath(os.fspath(path))).relative_to(root)
    except ValueError:
        return None
    return rel.as_posix() if rel.parts else None
