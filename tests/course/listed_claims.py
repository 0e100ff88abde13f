"""The factual claims of a notebook, listed in a TOML file under ``tests/course/claims/``, and their re-check.

Each ``[[claim]]`` names the sentence that makes it and what shows it::

    [[claim]]
    id = "accumulation-equal-sizes"
    cell = "c925aada"            # the English markdown cell (its lang-zh twin is the cell just before it)
    says = "the accumulated `.grad` equals the gradient of all 18 samples taken together"   # verbatim from `cell`
    shown_by = "dd0e8406"        # the code cell of the notebook that shows it (optional)
    output = ["accumulated .grad == gradient of the whole batch: True"]   # lines its committed output holds
    check = '''                  # plain code, run in a fresh process: the claim holds when it raises nothing
    ...
    '''

:func:`problems` reads the notebook: every cell named still exists, the sentence is still in it (a reworded claim is
listed again, with its check looked at again), its twin is a ``lang-zh`` cell, and the committed output still holds the
lines (nbval re-runs that cell). ``python tests/course/listed_claims.py FILE`` runs every ``check`` of a file in one
fresh process, each in a namespace of its own after :data:`PRELUDE`, and prints ``{claim id: "ok" | why it failed}`` as
JSON. A claim whose behaviour needs two processes (DDP across ranks) has no ``check``: its output lines are what hold it.
"""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = ROOT / "tests" / "course" / "claims"
FIELDS = {"id", "cell", "says", "shown_by", "output", "check", "how"}

PRELUDE = """
import contextlib, copy, gc, inspect, io, json, warnings, weakref
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, CheckpointError
torch.set_num_threads(1)
torch.manual_seed(0)
"""


def load(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _text(outputs: list[dict[str, Any]]) -> str:
    parts = []
    for out in outputs:
        text = out.get("text", out.get("data", {}).get("text/plain", ""))
        parts.append("".join(text) if isinstance(text, list) else text)
    return "".join(parts)


def problems(spec: dict[str, Any], notebook: dict[str, Any]) -> list[str]:
    """What no longer matches between the listed claims and the notebook (its JSON as loaded)."""
    cells = notebook["cells"]
    by_id = {c.get("id"): i for i, c in enumerate(cells)}
    found, seen = [], set()
    for claim in spec["claim"]:
        name = claim.get("id", "?")
        where = f"claim {name!r}"
        unknown = set(claim) - FIELDS
        if unknown or not {"id", "cell", "says"} <= set(claim):
            found.append(f"{where}: needs id, cell and says; unknown fields {sorted(unknown)}")
            continue
        if name in seen:
            found.append(f"{where}: listed twice")
        seen.add(name)
        if "check" not in claim and not claim.get("output"):
            found.append(f"{where}: neither a check nor output lines: nothing shows it")
        i = by_id.get(claim["cell"])
        if i is None:
            found.append(f"{where}: cell {claim['cell']} is gone from {spec['notebook']}")
            continue
        cell = cells[i]
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if "lang-en" not in cell.get("metadata", {}).get("tags", []):
            found.append(f"{where}: cell {claim['cell']} is not a lang-en markdown cell")
        elif i == 0 or "lang-zh" not in cells[i - 1].get("metadata", {}).get("tags", []):
            found.append(f"{where}: cell {claim['cell']} has no lang-zh twin before it")
        if claim["says"] not in source:
            found.append(f"{where}: cell {claim['cell']} no longer says {claim['says']!r} (reworded? list the claim "
                         "again and look at its check)")
        if "shown_by" in claim:
            j = by_id.get(claim["shown_by"])
            if j is None or cells[j]["cell_type"] != "code":
                found.append(f"{where}: code cell {claim['shown_by']} is gone")
                continue
            shown = _text(cells[j].get("outputs", []))
            found += [f"{where}: the output of {claim['shown_by']} no longer holds {line!r}"
                      for line in claim.get("output", []) if line not in shown]
        elif claim.get("output"):
            found.append(f"{where}: output lines without shown_by")
    return found


def run_checks(spec: dict[str, Any]) -> dict[str, str]:
    """Every claim's ``check`` in its own namespace after :data:`PRELUDE`: ``{id: "ok" | the error}``."""
    results = {}
    for claim in spec["claim"]:
        if "check" not in claim:
            continue
        namespace: dict[str, Any] = {"__name__": f"claim_{claim['id'].replace('-', '_')}"}
        try:
            exec(compile(PRELUDE + claim["check"], f"<claim {claim['id']}>", "exec"), namespace)
            results[claim["id"]] = "ok"
        except BaseException as error:  # noqa: BLE001 - a check may raise anything; the report names it
            if isinstance(error, KeyboardInterrupt):
                raise
            frames = traceback.extract_tb(error.__traceback__)
            line = next((f.lineno for f in reversed(frames) if f.filename.startswith("<claim")), None)
            text = (claim["check"].splitlines() + [""] * 1000)[line - PRELUDE.count("\n") - 1].strip() if line else ""
            results[claim["id"]] = f"{type(error).__name__}: {error} (at: {text})"
    return results


if __name__ == "__main__":
    print(json.dumps(run_checks(load(Path(sys.argv[1])))))
