"""The course's notebook format, as checks that return readable problems (empty list = fine)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hooklab.course.notebook import TOC_SKIP, heading_lines, lang_tags
from tools.notebooks.kernelspec import NAME as KERNEL_NAME  # tools/notebooks/kernelspec.py

NAME_RE = re.compile(r"^\d\d_[a-z0-9_]+\.ipynb$")
CJK_RE = re.compile(r"[\u4e00-\u9fff]")
ADDRESS_RE = re.compile(r"0x[0-9a-fA-F]{8,}")
IMPORT_RE = re.compile(r"^\s*(import hooklab|from hooklab[\s.])", re.MULTILINE)
LANG_TAGS = {"lang-zh", "lang-en", "lang-both"}


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else (value or "")


def _heading_levels(text: str) -> list[int]:
    """The Markdown levels (number of #) of the heading lines of ``text``, in order."""
    lines = text.split("\n")
    return [len(lines[k]) - len(lines[k].lstrip("#")) for k in heading_lines(text)]


def check_notebook(path: Path) -> list[str]:
    """Every way ``path`` breaks the course's format, one message each."""
    problems: list[str] = []
    if not NAME_RE.match(path.name):
        problems.append(f"file name {path.name!r} is not NN_slug.ipynb (two digits, lowercase ASCII)")
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return problems + [f"not a readable notebook: {exc}"]
    cells = nb.get("cells", [])

    kernel = nb.get("metadata", {}).get("kernelspec", {}).get("name")
    if kernel != KERNEL_NAME:
        problems.append(f"kernel name is {kernel!r}, expected {KERNEL_NAME!r}")

    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        tags = lang_tags(cell)
        if len(tags) != 1 or tags[0] not in LANG_TAGS:
            problems.append(f"cell {i}: markdown cell needs exactly one of {sorted(LANG_TAGS)}, has {tags}")
            continue
        if tags[0] == "lang-zh":
            if not CJK_RE.search(_text(cell.get("source"))):
                problems.append(f"cell {i}: lang-zh cell has no Chinese text")
            nxt = cells[i + 1] if i + 1 < len(cells) else {}
            if nxt.get("cell_type") != "markdown" or lang_tags(nxt) != ["lang-en"]:
                problems.append(f"cell {i}: lang-zh cell is not followed by its lang-en twin")
        if tags[0] == "lang-en":
            prev = cells[i - 1] if i > 0 else {}
            if prev.get("cell_type") != "markdown" or lang_tags(prev) != ["lang-zh"]:
                problems.append(f"cell {i}: lang-en cell does not follow a lang-zh twin")
            if CJK_RE.search(_text(cell.get("source"))):
                problems.append(f"cell {i}: lang-en cell contains Chinese text")
            if prev.get("cell_type") == "markdown" and lang_tags(prev) == ["lang-zh"]:
                zh_levels, en_levels = _heading_levels(_text(prev.get("source"))), _heading_levels(_text(cell.get("source")))
                if zh_levels != en_levels:
                    problems.append(f"cell {i}: the twins' headings differ (lang-zh cell {i - 1} has levels {zh_levels}, "
                                    f"this lang-en cell {en_levels}); a one-language copy would lose a section")
        # JupyterLab's table of contents lists each section once: the lang-en twin's headings carry TOC_SKIP
        text = _text(cell.get("source"))
        lines = text.split("\n")
        for k in heading_lines(text):
            if tags[0] == "lang-en" and not lines[k].rstrip().endswith(TOC_SKIP):
                problems.append(f"cell {i}: lang-en heading {lines[k].strip()!r} does not end with {TOC_SKIP} "
                                "(the table of contents would list the section twice)")
        if tags[0] != "lang-en" and TOC_SKIP in text:
            problems.append(f"cell {i}: {TOC_SKIP} belongs on lang-en headings only")

    code = [(i, c) for i, c in enumerate(cells) if c.get("cell_type") == "code"]
    counts = [c.get("execution_count") for _, c in code]
    if counts != list(range(1, len(counts) + 1)):
        problems.append(f"execution counts are {counts}, expected 1..{len(counts)} (regenerate the notebook)")
    for i, cell in code:
        if lang_tags(cell):
            problems.append(f"cell {i}: code cell carries a language tag")
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if out.get("output_type") == "error":
                problems.append(f"cell {i}: error output ({out.get('ename')})")
            if "image/svg+xml" in data:
                problems.append(f"cell {i}: SVG output (nbval compares it as text; use PNG)")
            if out.get("name") == "stderr":
                problems.append(f"cell {i}: stderr output (a warning that can come and go)")
            text = _text(out.get("text")) + _text(data.get("text/plain"))
            if ADDRESS_RE.search(text):
                problems.append(f"cell {i}: output shows a memory address")
    if not any(IMPORT_RE.search(_text(c.get("source"))) for _, c in code):
        problems.append("no code cell imports hooklab")
    return problems
