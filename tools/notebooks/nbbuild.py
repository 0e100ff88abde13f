"""Write a course notebook from Python, in the course's format (outputs come from regen).

    from tools.notebooks.nbbuild import Notebook
    nb = Notebook()
    nb.both("# 00 · 导论 / Introduction")
    nb.pair("中文说明……", "English explanation...")
    nb.code("import hooklab\nhooklab.setup()")
    nb.write("notebooks/00_introduction.ipynb")

then ``./course regen notebooks/00_introduction.ipynb`` fills in the outputs. The committed
.ipynb is the source of truth afterwards; edit it in JupyterLab or with nbformat.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from .kernelspec import KERNELSPEC


def _clean(text: str) -> str:
    return text.strip("\n")


class Notebook:
    def __init__(self) -> None:
        self.cells: list = []

    def both(self, text: str) -> None:
        """A markdown cell that is naturally bilingual (title, glossary)."""
        self.cells.append(new_markdown_cell(_clean(text), metadata={"tags": ["lang-both"]}))

    def pair(self, zh: str, en: str) -> None:
        """A Chinese markdown cell followed by its English twin."""
        self.cells.append(new_markdown_cell(_clean(zh), metadata={"tags": ["lang-zh"]}))
        self.cells.append(new_markdown_cell(_clean(en), metadata={"tags": ["lang-en"]}))

    def code(self, source: str, *tags: str, symptom: dict | None = None) -> None:
        """A code cell (shared by both languages); tags such as ``nbval-ignore-output``. ``symptom``
        (``{"id", "zh", "en", "message"}``) tags it ``symptom`` for the symptom index (tools/messages/symptoms.py)."""
        meta: dict = {"tags": [*tags, "symptom"] if symptom else list(tags)} if tags or symptom else {}
        if symptom:
            meta["hooklab"] = {"symptom": symptom}
        self.cells.append(new_code_cell(_clean(source), metadata=meta))

    def write(self, path: str | Path) -> None:
        nb = new_notebook(cells=self.cells, metadata={"kernelspec": KERNELSPEC, "language_info": {"name": "python"}})
        nbformat.validate(nb)
        nbformat.write(nb, str(path))
