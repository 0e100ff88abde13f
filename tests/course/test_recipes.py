"""The recipes (recipes/NN_chapter.ipynb): the course's notebook format, and every recipe answers a question of the bank
(a held-out one only after the course was graded on it), with links that lead somewhere (a course cell, a matrix cell, a message row)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hooklab.course.notebook import lang_tags, read_notebook
from notebook_rules import check_notebook

pytestmark = pytest.mark.course

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "recipes").glob("[0-9][0-9]_*.ipynb"))
BANK = {json.loads(line)["id"]: json.loads(line) for path in sorted((ROOT / "recipes" / "bank").glob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}
# each round's held-out part, and the grade of the course on it recorded before any of those questions was answered
_ROUNDS = (("held_out.json", "held_out_grade.json"), ("held_out_2.json", "held_out_2_grade.json"),
           ("held_out_3.json", "held_out_3_grade.json"), ("held_out_4.json", "held_out_4_grade.json"),
           ("held_out_5.json", "held_out_5_grade.json"))
HELD_OUT = {rid for drawn, _ in _ROUNDS if (ROOT / "recipes" / drawn).exists()
            for rid in json.loads((ROOT / "recipes" / drawn).read_text(encoding="utf-8"))["ids"]}
GRADED = {row["id"] for _, graded in _ROUNDS if (ROOT / "recipes" / graded).exists()
          for row in json.loads((ROOT / "recipes" / graded).read_text(encoding="utf-8"))["grades"]}
HEADING = re.compile(r"^## R([a-z-]+-\d\d) · \S")


def _source(cell):
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _recipes(path):
    cells = read_notebook(path)["cells"]
    return [(cell, cells[k + 1]) for k, cell in enumerate(cells)
            if cell.get("metadata", {}).get("hooklab", {}).get("recipe")]


def test_there_are_recipe_notebooks_each_with_recipes():
    assert RECIPES, "no recipes/NN_chapter.ipynb"
    assert all(_recipes(path) for path in RECIPES)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_a_recipe_notebook_follows_the_course_format(path):
    assert check_notebook(path) == []


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_recipe_answers_a_question_of_the_bank_held_out_ones_only_once_graded(path):
    for zh, en in _recipes(path):
        recipe = zh["metadata"]["hooklab"]["recipe"]
        assert recipe["id"] in BANK, f"{path.name}: {recipe['id']} is not a question of recipes/bank/"
        assert recipe["id"] not in HELD_OUT or recipe["id"] in GRADED, (
            f"{path.name}: {recipe['id']} is held out: grade the course on it (recipes/held_out*_grade.json) first")
        assert lang_tags(zh) == ["lang-zh"] and lang_tags(en) == ["lang-en"], recipe["id"]
        for cell in (zh, en):
            heading = HEADING.match(_source(cell))
            assert heading and heading[1] == recipe["id"], f"{path.name}: heading of {recipe['id']}"
        assert BANK[recipe["id"]]["source"] in _source(zh) and BANK[recipe["id"]]["source"] in _source(en), (
            f"{path.name}: {recipe['id']} must link to its source in both languages")


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_link_of_a_recipe_leads_to_a_cell_a_matrix_cell_or_a_message_that_exists(path):
    matrix = json.loads((ROOT / "docs" / "hook_matrix.json").read_text(encoding="utf-8"))["cells"]
    messages = {row["id"] for row in json.loads((ROOT / "docs" / "hook_messages.json").read_text(
        encoding="utf-8"))["messages"]}
    for zh, _ in _recipes(path):
        recipe = zh["metadata"]["hooklab"]["recipe"]
        assert recipe.get("course") or recipe.get("matrix") or recipe.get("messages"), (
            f"{recipe['id']}: link the course cell, matrix cell or message row that explains the mechanism")
        for link in recipe.get("course", []):
            notebook, _, cell = link.partition("#")
            ids = {c.get("id") for c in read_notebook(ROOT / "notebooks" / notebook)["cells"]}
            assert cell.removeprefix("cell-id=") in ids, f"{recipe['id']}: no cell {link}"
        for key in recipe.get("matrix", []):
            assert key in matrix, f"{recipe['id']}: no matrix cell {key}"
        for row in recipe.get("messages", []):
            assert row in messages, f"{recipe['id']}: no message row {row}"


def test_every_recipe_sits_in_its_chapters_notebook_named_by_its_topic():
    """The cookbook is shelved by chapter (tools/recipes/chapters.toml, issue 81): each recipe in the notebook of
    the chapter its bank category belongs to, NN its chapter's place, the name its chapter's id; no notebook name
    carries the bank's making (its rounds, draws and held-out parts). A new recipe goes to its chapter's notebook."""
    from tools.recipes import chapters, regroup

    order = {chapter.id: number for number, chapter in enumerate(chapters.load(), start=1)}
    for path in RECIPES:
        assert not re.search(r"round|held_out|draw", path.stem), f"{path.name}: named by the bank's making"
        for zh, _ in _recipes(path):
            chapter = chapters.of(zh["metadata"]["hooklab"]["recipe"]["id"])
            assert path == regroup.path_of(chapter, order[chapter.id]), (
                f"{zh['metadata']['hooklab']['recipe']['id']} is in {path.name}, its chapter is "
                f"{regroup.path_of(chapter, order[chapter.id]).name}")


def test_every_old_notebook_and_moved_recipe_leads_to_where_it_is_now():
    """recipes/moved.json: each notebook of the first shelving names the chapters its recipes went to, each moved
    recipe the notebook it is in now; the site's page at each old address lists them (tools/recipes/pages.py)."""
    from tools.recipes import pages

    moved = json.loads((ROOT / "recipes" / "moved.json").read_text(encoding="utf-8"))
    where = {zh["metadata"]["hooklab"]["recipe"]["id"]: path.stem for path in RECIPES for zh, _ in _recipes(path)}
    assert all(where[rid] == row["now"] for rid, row in moved["recipes"].items())
    for old, now in moved["notebooks"].items():
        assert not (ROOT / "recipes" / f"{old}.ipynb").exists() and all(where_now in where.values() for where_now in now)
        assert {row["now"] for row in moved["recipes"].values() if row["was"] == old} == set(now), old
    html = pages.moved_pages(lang="zh")
    assert set(html) == {f"recipes-{old}.html" for old in moved["notebooks"]}
    for rid, row in moved["recipes"].items():
        assert f'href="recipes-{row["now"]}.html#recipe-{rid}"' in html[f"recipes-{row['was']}.html"], rid
