"""The status of each message: shown by a symptom cell, triggered by a test (``@trigger``), or excused with the
attempt that tried to reach it (``@attempt``), read from the triage and the test files."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import symptoms
from .hook_messages_data import Message
from .hook_messages_text import shown_piece

ROOT = Path(__file__).resolve().parents[2]
TRIGGER_TESTS = ROOT / "tests" / "messages"


def _decorated(folder: Path, names: tuple[str, ...]) -> Iterator[tuple[Path, ast.FunctionDef | ast.AsyncFunctionDef,
                                                                      ast.Call, list[ast.expr]]]:
    """(test file, function, decorator, the id expressions it names) for each decorator ``names`` of the test files;
    the ids are a list literal, a dict's keys, one string, or a module-level name holding one of them."""
    for path in sorted(folder.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                     for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for deco in node.decorator_list:
                if not (isinstance(deco, ast.Call) and getattr(deco.func, "id", "") in names):
                    continue
                arg = deco.args[0] if deco.args else None
                if isinstance(arg, ast.Call) and getattr(arg.func, "id", "") == "list" and arg.args:
                    arg = arg.args[0]  # list(IDS)
                if isinstance(arg, ast.Name):
                    arg = constants.get(arg.id)  # a module-level list, or dict whose keys are the ids
                values = arg.elts if isinstance(arg, ast.List) else \
                    [k for k in arg.keys if k is not None] if isinstance(arg, ast.Dict) else [arg] if arg else []
                yield path, node, deco, values


def trigger_tests(folder: Path = TRIGGER_TESTS) -> dict[str, str]:
    """message id -> the trigger test that shows it (``tests/messages/test_x.py::name``), read from the
    ``@trigger("<id>", ...)`` decorators (and ``@trigger_all(["<id>", ...])``) of the test files."""
    out: dict[str, str] = {}
    for path, function, _, values in _decorated(folder, ("trigger", "trigger_all")):
        for value in values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.setdefault(value.value, f"{path.relative_to(folder.parents[1]).as_posix()}::{function.name}")
    return out


def attempts(folder: Path = TRIGGER_TESTS) -> dict[str, dict[str, str]]:
    """message id -> the attempt to reach it, ``{"attempt": "tests/messages/test_x.py::name", "outcome": "..."}``,
    read from the ``@attempt(["<id>", ...], outcome="...")`` decorators of the test files."""
    out: dict[str, dict[str, str]] = {}
    for path, function, deco, values in _decorated(folder, ("attempt",)):
        outcome = next((k.value for k in deco.keywords if k.arg == "outcome"), None)
        record = {"attempt": f"{path.relative_to(folder.parents[1]).as_posix()}::{function.name}",
                  "outcome": outcome.value if isinstance(outcome, ast.Constant) and isinstance(outcome.value, str)
                  else ""}
        for value in values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.setdefault(value.value, record)
    return out


def _cell_outputs(nb: dict[str, Any], index: int) -> str:
    return symptoms.output_text(nb["cells"][index])


def resolve_cell(ref: str, root: Path, cache: dict[str, dict]) -> dict[str, str] | str:
    """``"NN:cell-id"`` -> the notebook and the code cell it means (a heading: the first code cell after it); a
    string saying what is wrong when there is no such cell."""
    number, _, cell_id = ref.partition(":")
    paths = sorted((root / "notebooks").glob(f"{number}_*.ipynb"))
    if len(paths) != 1 or not cell_id:
        return "write NN:cell-id, NN a notebook's number"
    nb = cache.setdefault(paths[0].name, symptoms.read_notebook(paths[0]))
    cells = nb.get("cells", [])
    index = next((i for i, c in enumerate(cells) if c.get("id") == cell_id), None)
    if index is None:
        return f"{paths[0].name} has no cell with that id (moved or deleted?)"
    code = next((i for i in range(index, len(cells)) if cells[i].get("cell_type") == "code"), None)
    if code is None:
        return f"no code cell follows it in {paths[0].name}"
    return {"notebook": paths[0].name, "cell_id": cells[code]["id"]}


def statuses(messages: list[Message], triage: dict[str, Any], *, root: Path = ROOT) -> tuple[dict[str, dict], list[str]]:
    """message id -> its status record, and the problems found (links that point nowhere, a message with two
    statuses, an id the triage names that no message has)."""
    found, _ = symptoms.collect(root)
    cells = {s.id: s for s in found}
    tests = trigger_tests(root / "tests" / "messages")
    tried = attempts(root / "tests" / "messages")
    known = {m.id: m for m in messages}
    problems: list[str] = []
    reasons = triage["reasons"]
    out: dict[str, dict] = {}
    notebooks: dict[str, dict] = {}
    for table in ("symptom", "explained", "excused"):
        for mid in triage[table]:
            if mid not in known:
                problems.append(f"[{table}] names {mid!r}, which is no message (its text changed or went away?)")
    for mid in tests:
        if mid not in known:
            problems.append(f"{tests[mid]} triggers {mid!r}, which is no message")
    for mid, record in tried.items():
        if mid not in known:
            problems.append(f"{record['attempt']} tries to reach {mid!r}, which is no message")
        elif mid not in triage["excused"]:
            problems.append(f"{record['attempt']} tries to reach {mid!r}, which is not excused (remove the attempt)")
        if not record["outcome"]:
            problems.append(f"{record['attempt']}: write what happened as a literal outcome=\"...\"")
    for m in messages:
        out[m.id] = {"status": "open"}
        where = [t for t in ("symptom", "explained", "excused") if m.id in triage[t]]
        if len(where) > 1:
            problems.append(f"{m.id}: in both {where}; keep one")
        if m.id in triage["symptom"]:
            sid = triage["symptom"][m.id]
            s = cells.get(sid)
            if s is None:
                problems.append(f"{m.id}: [symptom] names {sid!r}, which no symptom cell has")
                continue
            nb = notebooks.setdefault(s.notebook, symptoms.read_notebook(root / "notebooks" / s.notebook))
            piece = shown_piece(m.text, _cell_outputs(nb, s.cell))
            if piece is None:
                problems.append(f"{m.id}: the symptom cell {sid!r} ({s.notebook} cell {s.cell}) does not show its "
                                f"text {m.text[:80]!r}")
                continue
            out[m.id] = {"status": "cell", "symptom": sid, "notebook": s.notebook, "cell_id": s.cell_id,
                         "example": piece}
            if m.id in tests:
                out[m.id]["test"] = tests[m.id]
        elif m.id in tests:
            row = triage["explained"].get(m.id)
            if not isinstance(row, dict):
                problems.append(f"{m.id}: triggered by {tests[m.id]} but has no [explained] row (zh, en, cell)")
                continue
            bad = {"zh", "en", "cell"} - set(row)
            if bad:
                problems.append(f"{m.id}: its [explained] row lacks {sorted(bad)}")
                continue
            where = resolve_cell(row["cell"], root, notebooks)
            if isinstance(where, str):
                problems.append(f"{m.id}: [explained] cell {row['cell']!r}: {where}")
                continue
            out[m.id] = {"status": "test", "test": tests[m.id], "zh": row["zh"], "en": row["en"], **where}
        elif m.id in triage["explained"]:
            problems.append(f"{m.id}: has an [explained] row but no trigger test (@trigger({m.id!r}))")
        elif m.id in triage["excused"]:
            value = triage["excused"][m.id]
            reason, _, why = value.partition(":")
            if reason not in reasons:
                problems.append(f"{m.id}: excuse {reason!r} is none of [reasons] ({', '.join(reasons)})")
            out[m.id] = {"status": "excused", "reason": reason, "why": why.strip(), **tried.get(m.id, {})}
            if m.id not in tried:
                problems.append(f"{m.id}: excused ({reason}) without an attempt to reach it: write one in "
                                "tests/messages/test_excused_*.py (@attempt([id], outcome=...)) and record what "
                                "happened")
    return out, problems

