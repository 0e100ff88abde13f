"""The cookbook shelved by chapter: one recipe notebook per chapter of ``tools/recipes/chapters.toml``
(``recipes/NN_<chapter>.ipynb``, NN its place in that file), made from the notebooks the recipes were written in,
each recipe's cells moved whole (code, outputs and metadata unchanged, so the gate sees each recipe run alone as
unchanged), and ``recipes/moved.json``, where every old notebook and recipe id leads now.

    python -m tools.recipes.regroup            # say what would move
    python -m tools.recipes.regroup --write    # move them (writes the chapters' notebooks, removes the old ones)

A chapter's setup cell is its recipes' notebooks' setup, which for most of them is one and the same; where they
differ, the lines of each, in the order first met, the course's own three lines last. Within a chapter the recipes
keep the order they had (their old notebook's number, then their place in it). Run once, when the shelves changed;
``tests/course/test_recipes.py`` then checks that every recipe sits in its chapter's notebook.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import torch

from . import chapters
from .pages import RECIPES, notebooks, split

MOVED = RECIPES / "moved.json"
COURSE_LINES = ("import hooklab", "from hooklab import course", "course.setup()")
INTRO = {"zh": "本章的食谱回答关于“{title}”的真实提问：每个食谱一个问题，附出处、回答，以及在 torch {torch} 的 CPU 上"
               "实际运行过的代码。先运行下面的准备单元格，之后每个食谱都能单独运行。",
         "en": "The recipes of this chapter answer real questions on “{title}”: one question each, with its source, "
               "the answer and code run on torch {torch} CPU. Run the setup cell below first; after it, each recipe "
               "runs on its own."}


def path_of(chapter: chapters.Chapter, number: int) -> Path:
    """``recipes/NN_<chapter id>.ipynb``."""
    return RECIPES / f"{number:02d}_{chapter.id.replace('-', '_')}.ipynb"


def _code(cell: dict[str, Any]) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def statements(code: str) -> list[str]:
    r"""The top-level statements of ``code``, each with the comments and blank lines above it.

    >>> statements("import os\n\n# a seed\nx = 1\n\ndef f():\n    return x\n")
    ['import os', '\n# a seed\nx = 1', '\ndef f():\n    return x']
    """
    lines, out, start = code.splitlines(), [], 0
    for node in ast.parse(code).body:
        end = node.end_lineno or node.lineno
        out.append("\n".join(lines[start:end]))
        start = end
    return out


def _bound(statement: str) -> set[str]:
    """The names a top-level statement binds in the notebook's namespace."""
    names: set[str] = set()
    for node in ast.parse(statement).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def merged_setup(setups: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One setup for a chapter: the common one when its notebooks share it, else each top-level statement of theirs
    once, in the order first met, the course's three lines last (they seed and print the setup's one line, the same
    in every notebook). Two setups that bind one name to different things raise: a recipe would run against the
    other's."""
    distinct = []
    for cells in setups:
        if cells not in distinct:
            distinct.append(cells)
    if len(distinct) == 1:
        return distinct[0]
    if any(len(cells) != 1 or cells[0]["cell_type"] != "code" for cells in distinct):
        raise ValueError("a recipe notebook's setup is one code cell")
    kept: list[str] = []
    binds: dict[str, str] = {}
    for cells in distinct:
        for statement in statements(_code(cells[0])):
            if statement.strip() in COURSE_LINES or statement.strip() in {k.strip() for k in kept}:
                continue
            for name in _bound(statement) - {"warnings", "logging", "os", "torch", "nn", "F"}:
                if name in binds and binds[name] != statement.strip():
                    raise ValueError(f"two setups bind {name!r} differently:\n{binds[name]}\n---\n{statement}")
                binds[name] = statement.strip()
            kept.append(statement)
    text = "\n".join(kept).strip("\n")
    cell = json.loads(json.dumps(distinct[0][0]))
    cell["source"] = (text + "\n\n" + "\n".join(COURSE_LINES)).splitlines(keepends=True)
    return [cell]


def numbered(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells with their execution counts 1, 2, ... in order, as a run from the top numbers them (and each
    result's count with its cell's)."""
    out, count = [], 0
    for cell in cells:
        cell = json.loads(json.dumps(cell))
        if cell["cell_type"] == "code":
            count += 1
            cell["execution_count"] = count
            for output in cell.get("outputs", []):
                if "execution_count" in output:
                    output["execution_count"] = count
        out.append(cell)
    return out


def plan(folder: Path = RECIPES) -> tuple[dict[Path, dict[str, Any]], dict[str, Any]]:
    """(each chapter's notebook by its path, what moved.json records)."""
    version = torch.__version__.split("+")[0]
    shelves: dict[str, list[tuple[str, list[dict[str, Any]]]]] = {}
    setups: dict[str, list[list[dict[str, Any]]]] = {}
    old_of: dict[str, str] = {}
    metadata = None
    for path in notebooks(folder):
        nb = json.loads(path.read_text(encoding="utf-8"))
        metadata = metadata or nb["metadata"]
        setup, recipes = split(nb)
        for rid, cells in recipes:
            chapter = chapters.of(rid)
            shelves.setdefault(chapter.id, []).append((rid, cells))
            setups.setdefault(chapter.id, []).append(setup)
            old_of[rid] = path.stem
    out: dict[Path, dict[str, Any]] = {}
    where: dict[str, str] = {}
    for number, chapter in enumerate(chapters.load(), start=1):
        if chapter.id not in shelves:
            continue
        path = path_of(chapter, number)
        intro = {lang: INTRO[lang].format(title=chapter.title(lang), torch=version) for lang in INTRO}
        title = {"cell_type": "markdown", "id": hashlib.sha1(chapter.id.encode()).hexdigest()[:8],
                 "metadata": {"tags": ["lang-both"]},
                 "source": (f"# Recipes {number:02d} · {chapter.zh} / {chapter.en}\n\n"
                            f"{intro['zh']} / {intro['en']}").splitlines(keepends=True)}
        cells = [title, *merged_setup(setups[chapter.id])]
        for rid, recipe in shelves[chapter.id]:
            cells += recipe
            where[rid] = path.stem
        out[path] = {"cells": numbered(cells), "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}
    old: dict[str, list[str]] = {}
    for rid, stem in old_of.items():
        old.setdefault(stem, [])
        if where[rid] not in old[stem]:
            old[stem].append(where[rid])
    moved = {"about": "Where each recipe notebook of the first shelving (by the round of the bank that asked it) and "
                      "each recipe id lead now that the recipes are shelved by chapter (python -m "
                      "tools.recipes.regroup): the site's page of an old notebook lists its recipes' new places.",
             "notebooks": {stem: old[stem] for stem in sorted(old) if [stem] != old[stem]},
             "recipes": {rid: {"was": old_of[rid], "now": where[rid]} for rid in sorted(where)
                         if old_of[rid] != where[rid]}}
    return out, moved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.recipes.regroup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the chapters' notebooks and recipes/moved.json")
    args = parser.parse_args(argv)
    shelved, moved = plan()
    for path, nb in shelved.items():
        count = sum(1 for c in nb["cells"] if c.get("metadata", {}).get("hooklab", {}).get("recipe"))
        print(f"{path.relative_to(RECIPES.parent)}: {count} recipes")
    if not args.write:
        return 0
    before = sorted(notebooks())
    for path, nb in shelved.items():
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for path in before:
        if path not in shelved:
            path.unlink()
    if MOVED.exists():  # a second regrouping: keep where the first shelving's names lead
        previous = json.loads(MOVED.read_text(encoding="utf-8"))
        moved["notebooks"] = {**previous["notebooks"], **moved["notebooks"]}
    MOVED.write_text(json.dumps(moved, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {len(shelved)} notebooks and {MOVED.relative_to(RECIPES.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
