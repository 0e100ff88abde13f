"""The course's notebook files, as plain JSON: read them, find their headings and language tags, write them whole.

What the one-language export (:mod:`hooklab.course.export`) and the course's tools (slides, handouts, the site, the
matrix report, the working copies) share. It needs nothing beyond the standard library (nbformat is not imported),
so the tools and ``pip install hooklab`` without the course's extra can use it.

>>> nb = {"cells": [{"cell_type": "markdown", "metadata": {"tags": ["lang-en"]}, "source": "## 1. Setup"}]}
>>> lang_tags(nb["cells"][0]), heading_lines(nb["cells"][0]["source"])
(['lang-en'], [0])
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["LANGS", "TOC_SKIP", "NotebookError", "heading_lines", "is_json", "lang_tags", "read_notebook",
           "sha256_hex", "strip_toc_skip", "write_atomic"]

LANGS = ("zh", "en")  # the languages of the one-language copies


class NotebookError(ValueError):
    """A notebook file that cannot be read (or exported); the message names the file and what to do."""


def lang_tags(cell: dict[str, Any]) -> list[str]:
    """The ``lang-*`` tags of a cell (the course's notebook format wants exactly one on a markdown cell).

    >>> lang_tags({"metadata": {"tags": ["lang-en", "nbval-ignore-output"]}}), lang_tags({})
    (['lang-en'], [])
    """
    tags = cell.get("metadata", {}).get("tags", [])
    return [t for t in tags if isinstance(t, str) and t.startswith("lang-")] if isinstance(tags, list) else []


# Ends every heading line of a lang-en cell: JupyterLab's table of contents leaves out a heading that holds an
# element of class jp-toc-ignore, so the both-languages view lists each section once (at its Chinese cell, where
# the pair starts). The one-language copies drop the marker and list every heading of their language.
TOC_SKIP = '<span class="jp-toc-ignore"></span>'
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^#{1,6}\s")


def heading_lines(text: str) -> list[int]:
    """Indices of the Markdown heading lines of ``text`` (lines in fenced code blocks are code, not headings).

    >>> heading_lines("## 1. Setup\\ntext\\n```python\\n# a comment\\n```\\n### 1.1 More")
    [0, 5]
    """
    found, fenced = [], False
    for i, line in enumerate(text.split("\n")):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and _HEADING.match(line):
            found.append(i)
    return found


def strip_toc_skip(text: str) -> str:
    """``text`` without the table-of-contents marker (and the space before it)."""
    return text.replace(" " + TOC_SKIP, "").replace(TOC_SKIP, "")


def read_notebook(path: str | Path) -> dict[str, Any]:
    """The JSON of the notebook file at ``path``; :class:`NotebookError` (naming the file and what to do) when it
    is not UTF-8 JSON."""
    path = Path(path)
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise NotebookError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}), so it is no .ipynb "
                            "notebook; check the file name, or restore the file (git checkout -- FILE)") from None
    except json.JSONDecodeError as exc:
        raise NotebookError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); it may "
                            "be cut short: restore it (git checkout -- FILE) or save it again from JupyterLab") from None


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all: a temporary file in the same folder, then
    ``os.replace`` (which also replaces a hard link instead of writing through it)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as a plain open() would have made it (mkstemp gives 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_json(data: bytes) -> bool:
    try:
        json.loads(data.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return False
    return True
