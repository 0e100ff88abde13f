"""Every unusual cell of the library matrix (docs/library_matrix.json) as a program that runs on its own: one program
per operation, generated from the code that observed its cells, which prints those cells again.

    python -m tools.profiles.cell_programs            # write docs/programs/library_matrix.json (runs what changed)
    python -m tools.profiles.cell_programs --fresh    # run every program again
    python -m tools.profiles.cell_programs --check    # regenerate a seeded sample of the programs' code and compare
    python -m tools.profiles.cell_programs --only peft:LoraModel.unload --print   # show one program

A program is written out, not imported: the profile's small model (``build``, ``inputs``, ``TARGET``, ``loss``,
``apply`` of ``tools/profiles/libraries/<slug>.py``, through :func:`tools.profiles.programs.program_body`), then every
definition of :mod:`tools.profiles.cells` that the operation's case and the observer use (the families' recording
hooks, ``observe``, ``baseline``), then the case as :data:`tools.profiles.cells.CASES` writes it. Where the observer
reads the profile's module (``modules()[slug]``, ``from tools.profiles.libraries import <slug>``), the program reads
its own definitions (``PROFILE``). For each hook family with an unusual cell it prints the cell without the operation
(the baseline) and the cells registered before and after it, in the matrix's own words.

The generation runs each program in a fresh process and fails on a program whose cells are not the matrix's: what the
page shows is what ran. An operation whose case reads another profile's module than its own gets no program
(``no_program`` says why).
"""
from __future__ import annotations

import argparse
import ast
import functools
import json
import re
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import cells
from .programs import ROOT, _loaded, _needs as needs, program_body, run_fresh, sample

OUT = ROOT / "docs" / "programs" / "library_matrix.json"
CELLS = Path(cells.__file__)
SECONDS = 600
ABOUT = ("Each operation of the library matrix (docs/library_matrix.json) with an unusual cell, as a program that runs "
         "on its own, generated from the code that observed the cells (python -m tools.profiles.cell_programs; do not "
         "edit). For each hook family with an unusual cell it prints the cell without the operation, then registered "
         "before and after it, as the matrix stores them. `cells`: the unusual cells it shows; `prints`: what it "
         "printed (run in a fresh process with OMP_NUM_THREADS=1, offline); `no_program`: why an operation has none.")
HEADER = {
    "en": ("{operation}: what it does to your hooks, cell by cell (the library matrix)\n"
           "Generated from tools/profiles/cells.py and tools/profiles/libraries/{profile}.py; each family's hook is "
           "registered on {target} (or its first parameter, or around the run) on a fresh model, before the operation "
           "or after it, then a forward, a backward, state_dict() and load_state_dict(), and again after "
           "handle.remove()."),
    "zh": ("{operation}：它对你的钩子做了什么，逐格列出（库矩阵）\n"
           "由 tools/profiles/cells.py 与 tools/profiles/libraries/{profile}.py 生成。\n"
           "每一族钩子都在新建的模型上注册在 {target}（或它的第一个参数，或包住整次运行），\n"
           "在操作之前或之后；然后做一次前向、一次反向、state_dict() 与 load_state_dict()，\n"
           "调用 handle.remove() 之后再做一遍。"),
}
TAIL = """\
warnings.simplefilter("once")  # each warning once: a library may repeat one thousands of times
PROFILE = SimpleNamespace({profile_names})
case = {case}


def quietly(call, *args):
    \"\"\"What the library prints while it runs (a trainer's metrics and run times) is kept out of the output.\"\"\"
    with contextlib.redirect_stdout(io.StringIO()):
        return call(*args)


for family in {families}:
    print(family)
    print("  without the operation:", json.dumps(quietly(baseline, case, family)))
    for when in ("before", "after"):
        print(f"  registered {{when}} it:", json.dumps(quietly(observe, case, family, when)))
    gc.collect()  # what the runs left behind (a temporary folder) goes now, not whenever the collector runs next
"""
_LINE = re.compile(r"^  registered (before|after) it: (\{.*\})$", re.M)
_IMPORTED_PROFILE = re.compile(r"^([ \t]*)from tools\.profiles\.libraries import (\w+)(?: as (\w+))?[ \t]*\n", re.M)
_PROFILE_NAMES = ("build", "inputs", "loss", "TARGET", "apply", "remove")


def _bound(node: ast.stmt) -> list[str]:
    """The names a top-level statement binds, a tuple's too (``_AFTER, _BEFORE = ...``)."""
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


@functools.cache
def _observer() -> tuple[list[tuple[list[str], str, set[str]]], list[tuple[set[str], str]], str]:
    """cells.py's top-level definitions ``(names, source, names used)`` in order, its absolute imports and its text."""
    text = CELLS.read_text(encoding="utf-8")
    defs, imports = [], []
    for node in ast.parse(text).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if not (isinstance(node, ast.ImportFrom) and (node.level or node.module == "__future__")):
                imports.append(({(a.asname or a.name).split(".")[0] for a in node.names},
                                ast.get_source_segment(text, node)))
        elif names := _bound(node):
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            source = "\n".join(text.splitlines()[first - 1:node.end_lineno])
            defs.append((names, source, _loaded(node)))
    return defs, imports, text


@functools.cache
def case_sources() -> dict[str, str]:
    """Each operation's case as :data:`tools.profiles.cells.CASES` writes it (a case made in a loop over a tuple of
    names, once per name)."""
    tree = ast.parse(_observer()[2])
    constants = {n.targets[0].id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                 and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Tuple)
                 and all(isinstance(e, ast.Constant) for e in n.value.elts)}
    cases_node = next(n for n in tree.body if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "CASES")
    out: dict[str, str] = {}
    for element in cases_node.value.elts:  # type: ignore[union-attr]
        if isinstance(element, ast.Call) and isinstance(element.args[0], ast.Constant):
            out[element.args[0].value] = ast.unparse(element)
        elif isinstance(element, ast.Starred) and isinstance(element.value, ast.GeneratorExp):
            loop = element.value.generators[0]
            for value in constants.get(getattr(loop.iter, "id", ""), ()):
                made = _Named(loop.target.id, value).visit(ast.parse(ast.unparse(element.value.elt), mode="eval"))
                call = made.body
                out[ast.literal_eval(call.args[0])] = ast.unparse(call)
    return out


class _Named(ast.NodeTransformer):
    """A loop variable replaced by its value (an f-string of it becomes the formatted string)."""

    def __init__(self, name: str, value: str) -> None:
        self.name, self.value = name, value

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.Constant(self.value) if node.id == self.name else node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if all(isinstance(v, ast.Constant) or (isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Constant))
               for v in node.values):
            return ast.Constant("".join(str(v.value.value if isinstance(v, ast.FormattedValue) else v.value)
                                        for v in node.values))
        return node


def _profile_of(case: str) -> str:
    tree = ast.parse(case, mode="eval").body
    named = {k.arg: k.value for k in tree.keywords}  # type: ignore[attr-defined]
    profile = named.get("profile") or (tree.args[3] if len(tree.args) > 3 else None)  # type: ignore[attr-defined]
    if isinstance(profile, ast.Constant) and profile.value:
        return profile.value
    return ast.literal_eval(tree.args[0]).split(":")[0]  # type: ignore[attr-defined]


def _own_module(source: str, slug: str) -> str:
    """``source`` reading the program's own definitions where cells.py reads profile ``slug``'s module; raises
    ValueError where it reads another profile's."""
    def one(match: re.Match[str]) -> str:
        indent, name, alias = match.groups()
        if name == "modules":
            return ""
        if name != slug:
            raise ValueError(f"its case reads another profile's module ({name}, not {slug})")
        return f"{indent}{alias or name} = PROFILE\n"
    source = _IMPORTED_PROFILE.sub(one, source)
    return re.sub(r"(?<!\.)\bmodules\(\)(?:\.get\([^)]*\)|\[[^\]]*\])", "PROFILE", source)


def program(operation: str, families: list[str]) -> str:
    """The program of ``operation``'s cells of ``families`` (raises ValueError where it cannot be written out)."""
    case = case_sources()[operation]
    slug = _profile_of(case)
    defs, imports, _ = _observer()
    known = {name: i for i, (names, _, _) in enumerate(defs) for name in names}
    roots = {"observe", "baseline", "Case"} | _loaded(ast.parse(case))
    chosen: set[int] = set()
    todo = sorted(roots & set(known))
    while todo:
        i = known[todo.pop()]
        if i not in chosen:
            chosen.add(i)
            todo += sorted(defs[i][2] & set(known))
    written = "\n\n\n".join(_own_module(defs[i][1], slug) for i in sorted(chosen))
    from .libraries import modules
    module = modules()[slug]
    profile_names = [n for n in _PROFILE_NAMES if hasattr(module, n)]
    aliases = {alias or name for i in chosen for _, name, alias in _IMPORTED_PROFILE.findall(defs[i][1])} - {"modules"}
    for alias in sorted(aliases):  # what the case reads of its profile's module: profile.inputs()
        profile_names += [a for a in re.findall(rf"\b{alias}\.(\w+)", written) if a not in profile_names
                          and hasattr(module, a)]
    tail = TAIL.format(profile_names=", ".join(f"{n}={n}" for n in profile_names), case=case,
                       families="(" + "".join(f"\n        {f!r}," for f in families) + "\n)")
    used = set().union(*(defs[i][2] for i in chosen), _loaded(ast.parse(case)))
    observer_imports = "\n".join(src for names, src in imports if names & used)
    body = program_body(slug, tuple(profile_names), written + "\n\n\n" + tail)
    first, rest = body.split("\n\n\n", 1)  # "from __future__ import annotations", the profile's imports
    lines = ["import contextlib", "import gc", "import io", "import json", "import warnings",
             "from types import SimpleNamespace", *observer_imports.splitlines(), *first.splitlines()[2:]]
    imports = "\n".join(dict.fromkeys(line for line in lines if line))
    return f"from __future__ import annotations\n\n{imports}\n\n\n{rest.lstrip()}"


def header(operation: str, lang: str) -> str:
    """The program's opening comment in ``lang``: what it shows and where it was generated from."""
    slug = _profile_of(case_sources()[operation])
    from .libraries import modules
    target = getattr(modules()[slug], "TARGET", "") or "the model"
    text = HEADER[lang].format(operation=operation, profile=slug, target=target)
    lines = text.splitlines() if lang == "zh" else [  # the Chinese lines are broken where they read well
        line for paragraph in text.splitlines()
        for line in textwrap.wrap(paragraph, 110, break_long_words=False, break_on_hyphens=False)]
    return "\n".join(f"# {line}" for line in lines)


def printed_cells(text: str, operation: str, families: list[str]) -> dict[str, dict[str, Any]]:
    """The cells a program printed, by the matrix's keys."""
    lines = _LINE.findall(text)
    if len(lines) != 2 * len(families):
        return {}
    return {f"{operation}|{families[i // 2]}|{when}": json.loads(cell) for i, (when, cell) in enumerate(lines)}


def _matrix() -> dict[str, Any]:
    return json.loads(cells.MATRIX.read_text(encoding="utf-8"))


def wanted(matrix: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """Each operation with an unusual cell: the families of its unusual cells, in the matrix's order."""
    matrix = matrix or _matrix()
    out: dict[str, set[str]] = {}
    for key in matrix["unusual"]["cells"]:
        operation, family, _ = key.split("|")
        out.setdefault(operation, set()).add(family)
    return {op: [f for f in matrix["families"] if f in fams] for op, fams in sorted(out.items())}


def build_records(only: set[str] | None = None) -> dict[str, dict[str, Any]]:
    matrix = _matrix()
    records: dict[str, dict[str, Any]] = {}
    for operation, families in wanted(matrix).items():
        if only and operation not in only:
            continue
        cells_shown = sorted(k for k in matrix["unusual"]["cells"] if k.split("|")[0] == operation)
        try:
            code = program(operation, families)
        except ValueError as why:
            records[operation] = {"cells": cells_shown, "show": None, "fix": None, "no_program": str(why)}
            continue
        records[operation] = {"cells": cells_shown, "families": families, "needs": needs(code),
                              "show": {"code": {lang: f"{header(operation, lang)}\n{code}" for lang in HEADER},
                                       "prints": None}, "fix": None}
    return records


def _body(code: str) -> str:
    return "\n".join(line for line in code.splitlines() if not line.startswith("#"))


def fill(records: dict[str, dict[str, Any]], old: dict[str, Any] | None = None, jobs: int = 2) -> list[str]:
    """Run each program whose code changed (all of them without ``old``) and check that it prints the matrix's
    cells; returns the problems."""
    matrix = _matrix()
    todo = []
    for operation, entry in records.items():
        before = ((old or {}).get(operation) or {}).get("show") or {}
        if entry["show"] is None:
            continue
        if before.get("prints") is not None and _body(before["code"]["en"]) == _body(entry["show"]["code"]["en"]):
            entry["show"]["prints"] = before["prints"]
        else:
            todo.append(operation)

    def one(operation: str) -> tuple[str, str]:
        start = time.monotonic()
        try:
            out = run_fresh(records[operation]["show"]["code"]["en"], timeout=SECONDS)
        except Exception as error:  # noqa: BLE001 - a program that cannot run is a problem of the generation
            out = f"(the program failed: {error})"
        print(f"ran {operation} in {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
        return operation, out

    with ThreadPoolExecutor(jobs) as pool:
        for operation, out in pool.map(one, todo):
            records[operation]["show"]["prints"] = out
    problems = []
    for operation, entry in records.items():
        if entry["show"] is None:
            continue
        printed = printed_cells(entry["show"]["prints"] or "", operation, entry["families"])
        if printed != expected_cells(matrix, operation, entry["families"]):
            problems.append(f"{operation}: the program's cells are not the matrix's:\n"
                            f"{(entry['show']['prints'] or '')[-1500:]}")
    return problems


def expected_cells(matrix: dict[str, Any], operation: str, families: list[str]) -> dict[str, dict[str, Any]]:
    """The matrix's cells of ``operation`` and ``families``, both registrations, by key."""
    return {f"{operation}|{family}|{when}": matrix["cells"][f"{operation}|{family}|{when}"]
            for family in families for when in cells.WHEN}


def render(records: dict[str, dict[str, Any]]) -> str:
    return json.dumps({"about": ABOUT, "programs": records}, ensure_ascii=False, indent=1) + "\n"


def load(path: Path = OUT) -> dict[str, Any]:
    """docs/programs/library_matrix.json's programs (empty when the file is missing)."""
    return json.loads(path.read_text(encoding="utf-8"))["programs"] if path.is_file() else {}


def check(seed_text: str = "library matrix", k: int = 4) -> list[str]:
    """What differs between the committed file and the matrix (which operations have a program, which cells each
    shows) and a regeneration of a seeded sample of the programs' code (not run)."""
    stored = load()
    if not stored:
        return [f"{OUT.relative_to(ROOT)} is missing: python -m tools.profiles.cell_programs"]
    problems = []
    need = wanted()
    if sorted(need) != sorted(stored):
        problems.append(f"the operations with unusual cells changed: new {sorted(set(need) - set(stored))[:5]}, "
                        f"gone {sorted(set(stored) - set(need))[:5]}")
    chosen = set(sample([op for op in need if op in stored], seed_text, k))
    for operation, entry in build_records(chosen).items():
        old = stored[operation]
        for field in ("cells", "show.code", "needs", "no_program"):
            new_value, old_value = ((entry.get("show") or {}).get("code"), (old.get("show") or {}).get("code")) \
                if field == "show.code" else (entry.get(field), old.get(field))
            if new_value != old_value:
                problems.append(f"{operation}: its {field} changed")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.profiles.cell_programs", description=__doc__.split("\n")[0])
    parser.add_argument("--fresh", action="store_true", help="run every program again")
    parser.add_argument("--check", action="store_true", help="compare a regenerated sample with the file")
    parser.add_argument("--only", help="operations, comma-separated")
    parser.add_argument("--print", action="store_true", help="print the programs instead of writing the file")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        print("\n".join(problems) or "the library matrix's programs are as generated")
        return 1 if problems else 0
    only = set(args.only.split(",")) if args.only else None
    records = build_records(only)
    if args.print:
        for operation, entry in records.items():
            print(entry["show"]["code"]["en"] if entry["show"] else f"# {operation}: no program ({entry['no_program']})")
        return 0
    old = load()
    problems = fill(records, None if args.fresh else old, args.jobs)
    if only:
        records = {**old, **records}
    OUT.write_text(render(dict(sorted(records.items()))), encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {sum(bool(e['show']) for e in records.values())} programs, "
          f"{sum('no_program' in e for e in records.values())} operations without one", file=sys.stderr)
    if problems:
        print("\n\n".join(problems), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
