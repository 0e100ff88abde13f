"""Populations: test files whose parametrized members are checks of their own, each with its own content.

One recipe run alone (``tests/course/test_recipes_alone.py``) is a member: its content is the recipe's cells and its
notebook's setup cells (code and committed outputs), not the notebook's file, so a recipe moved to another notebook,
or another recipe edited, leaves it untouched; it reads what its notebook was seen to read.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tools.gate.checks import ROOT

RECIPES_ALONE = "tests/course/test_recipes_alone.py"


def _cell_text(cell: dict) -> str:
    """A code cell's source and outputs, without the execution counts: a notebook's numbering of its cells, which a
    recipe moved to another notebook gets anew, is not what it runs or prints."""
    outputs = [{k: v for k, v in output.items() if k != "execution_count"} for output in cell.get("outputs", [])]
    return json.dumps({"source": cell.get("source"), "outputs": outputs}, sort_keys=True)


def recipes_alone(root: Path = ROOT) -> dict[str, tuple[bytes, str]]:
    """member id -> (its content's digest, the recipe notebook whose reads it shares)."""
    from tools.recipes.pages import notebooks, split

    found: dict[str, tuple[bytes, str]] = {}
    for path in notebooks(root / "recipes"):
        nb = json.loads(path.read_text(encoding="utf-8"))
        setup, recipes = split(nb)
        head = "".join(_cell_text(c) for c in setup if c.get("cell_type") == "code")
        for rid, cells in recipes:
            body = "".join(_cell_text(c) for c in cells if c.get("cell_type") == "code")
            found[rid] = (hashlib.sha1((head + body).encode()).digest(), path.relative_to(root).as_posix())
    return found


def members(root: Path = ROOT) -> dict[str, dict[str, tuple[bytes, str]]]:
    """population file -> member id -> (content digest, the check whose reads the member shares)."""
    return {RECIPES_ALONE: recipes_alone(root)}

