"""Which recipes rely on a section of the course: each section of a course notebook that a recipe links to (the
recipe's ``course`` links, ``NN_x.ipynb#<cell id>``) says, under its heading, which libraries' recipes use its
mechanism, with a link to each recipe.

    python -m tools.recipes.used_by           # say which sections' notes are out of date
    python -m tools.recipes.used_by --write   # rewrite them in notebooks/ (markdown only: no output changes)

The note is part of the section's heading cells (the ``lang-zh`` one and its ``lang-en`` twin), right under the
heading, between the markers ``<!-- recipes -->`` and ``<!-- /recipes -->``, so no cell is added and no cell index
moves. A recipe's link
``../recipes/NN_chapter.ipynb#recipe-<id>`` opens the recipe notebook in JupyterLab; the site turns it into a link to the
recipe on its area page (:func:`tools.recipes.pages.links_to_recipe_pages`). tests/tools/test_recipe_used_by.py
checks that the notes in notebooks/ are what this writes.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from hooklab.course.notebook import lang_tags, read_notebook

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- recipes -->", "<!-- /recipes -->"
BLOCK = re.compile(r"\n\n" + re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
HEADING = re.compile(r"^#{2,3} ")
RECIPE_LINK = re.compile(r"\[([^\]]*)\]\(\.\./recipes/[^)]*\)")  # [text](../recipes/NN_chapter.ipynb#recipe-id)
PER_LIBRARY = 3  # recipes named per library in one note; the rest are counted
LEAD = {"zh": "**食谱里用到本节机制的库**：", "en": "**Libraries whose recipes rely on this section**: "}
MORE = {"zh": "另有 {n} 个", "en": "{n} more"}
SEP = {"zh": ("、", "；"), "en": (", ", "; ")}
ITSELF = {"zh": "PyTorch 本身", "en": "PyTorch itself"}


def _source(cell: dict[str, Any]) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def recipes(root: Path = ROOT) -> list[dict[str, Any]]:
    """Every recipe's metadata with the notebook it is in (``path``: ``NN_chapter.ipynb``), in the order of the files."""
    found = []
    for path in sorted((root / "recipes").glob("[0-9][0-9]_*.ipynb")):
        for cell in read_notebook(path)["cells"]:
            recipe = cell.get("metadata", {}).get("hooklab", {}).get("recipe")
            if recipe:
                found.append({**recipe, "path": path.name})
    return found


def section_heading(cells: list[dict[str, Any]], index: int) -> int | None:
    """The index of the ``lang-zh`` heading cell (## or ###) of the section that holds cell ``index``."""
    for k in range(index, -1, -1):
        cell = cells[k]
        if cell["cell_type"] == "markdown" and lang_tags(cell) == ["lang-zh"] and HEADING.match(_source(cell)):
            return k
    return None


def library_name(name: str, lang: str) -> str:
    return ITSELF[lang] if name == "torch" else name


def note(uses: list[dict[str, Any]], lang: str) -> str:
    """The note for one section: each library (PyTorch itself last) with up to :data:`PER_LIBRARY` recipe links."""
    by_library: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for recipe in uses:
        libraries = [n for n in recipe.get("libraries", []) if n != "torch"] or ["torch"]
        for name in libraries:
            if recipe not in by_library[name]:
                by_library[name].append(recipe)
    inner, outer = SEP[lang]
    parts = []
    for name in sorted(by_library, key=lambda n: (n == "torch", n.lower())):
        found = by_library[name]
        links = [f"[R{r['id']}](../recipes/{r['path']}#recipe-{r['id']})" for r in found[:PER_LIBRARY]]
        if len(found) > PER_LIBRARY:
            links.append(MORE[lang].format(n=len(found) - PER_LIBRARY))
        opening, closing = ("（", "）") if lang == "zh" else (" (", ")")
        parts.append(f"{library_name(name, lang)}{opening}{inner.join(links)}{closing}")
    return f"{BEGIN}\n{LEAD[lang]}{outer.join(parts)}\n{END}"


def notes(root: Path = ROOT) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """notebook name -> index of a section's lang-zh heading cell -> the recipes that link into that section."""
    found: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    cells_of: dict[str, list[dict[str, Any]]] = {}
    for recipe in recipes(root):
        for link in recipe.get("course", []):
            name, _, cell_id = link.partition("#")
            cell_id = cell_id.removeprefix("cell-id=")
            if name not in cells_of:
                cells_of[name] = read_notebook(root / "notebooks" / name)["cells"]
            cells = cells_of[name]
            index = next((k for k, c in enumerate(cells) if c.get("id") == cell_id), None)
            heading = None if index is None else section_heading(cells, index)
            if heading is not None and recipe not in found[name][heading]:
                found[name][heading].append(recipe)
    return found


def rewritten(nb: dict[str, Any], sections: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """``nb`` with every note removed, then one note under each heading of ``sections`` (both languages)."""
    cells = [dict(c) for c in nb["cells"]]
    for cell in cells:
        if cell["cell_type"] == "markdown" and BEGIN in _source(cell):
            cell["source"] = BLOCK.sub("", _source(cell))
    for index, uses in sections.items():
        twin = cells[index + 1]
        if lang_tags(twin) != ["lang-en"]:
            raise ValueError(f"cell {index + 1} should be the lang-en twin of heading cell {index}")
        for cell, lang in ((cells[index], "zh"), (twin, "en")):
            heading, newline, rest = _source(cell).partition("\n")
            cell["source"] = heading + "\n\n" + note(uses, lang) + (newline + rest if rest else "")
    return {**nb, "cells": cells}


def without_notes(nb: dict[str, Any]) -> dict[str, Any]:
    """``nb`` without the notes, and with any other link to a recipe kept as its text (the slides and handouts: no
    recipe lies beside a slide or a printed page).

    >>> cell = {"cell_type": "markdown", "source": "## 2. T\\n\\n<!-- recipes -->\\nx\\n<!-- /recipes -->\\n\\nText"}
    >>> without_notes({"cells": [cell]})["cells"][0]["source"]
    '## 2. T\\n\\nText'
    >>> without_notes({"cells": [{"cell_type": "markdown", "source": "see [Rx-01](../recipes/07_a.ipynb#recipe-x-01)"}]}
    ...               )["cells"][0]["source"]
    'see Rx-01'
    """
    def plain(text: str) -> str:
        return RECIPE_LINK.sub(r"\1", BLOCK.sub("", text))

    cells = [{**c, "source": plain(_source(c))} if c.get("cell_type") == "markdown"
             and (BEGIN in _source(c) or "../recipes/" in _source(c))
             else c for c in nb["cells"]]
    return {**nb, "cells": cells}


def out_of_date(root: Path = ROOT, *, write: bool = False) -> list[str]:
    """The course notebooks whose notes differ from what the recipes say (rewritten when ``write``)."""
    found = notes(root)
    changed = []
    for path in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = read_notebook(path)
        new = rewritten(nb, found.get(path.name, {}))
        if [_source(c) for c in new["cells"]] != [_source(c) for c in nb["cells"]]:
            changed.append(path.name)
            if write:
                for cell in new["cells"]:
                    if isinstance(cell["source"], str):
                        cell["source"] = cell["source"].splitlines(keepends=True)
                path.write_text(json.dumps(new, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.recipes.used_by", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the notes in notebooks/")
    args = parser.parse_args(argv)
    changed = out_of_date(write=args.write)
    if changed and not args.write:
        print("out of date (python -m tools.recipes.used_by --write): " + ", ".join(changed), file=sys.stderr)
        return 1
    print(("rewrote: " + ", ".join(changed)) if changed else "every section's note is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
