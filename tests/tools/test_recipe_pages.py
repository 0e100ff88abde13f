"""The recipes' pages on the website (tools/recipes/pages.py): one per area in the site's language, every recipe with
its anchor and its validated outputs, links into the course's notebooks as page links, and a list of them all."""
from __future__ import annotations

import json
import re

import pytest

from hooklab.course.notebook import lang_tags, read_notebook
from tools.recipes import pages

pytestmark = pytest.mark.tools

PATHS = pages.notebooks()


def _recipe_ids(path):
    return [c["metadata"]["hooklab"]["recipe"]["id"] for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c.get("metadata", {}).get("hooklab", {}).get("recipe")]


@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_an_area_page_holds_every_recipe_with_its_anchor_and_outputs_in_one_language(path, lang):
    page = pages.area_page(path, lang)
    for rid in _recipe_ids(path):
        assert f"(recipe-{rid})=\n\n## R{rid} · " in page
    assert "```text" in page and "```python" in page
    assert "../notebooks/" not in page, "links into the course must point to its pages"
    other = "en" if lang == "zh" else "zh"
    nb = json.loads(path.read_text(encoding="utf-8"))
    twin = next(c for c in nb["cells"] if f"lang-{other}" in lang_tags(c))
    assert "".join(twin["source"]).splitlines()[0] not in page  # the other language's cells are left out


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_list_links_every_recipe_to_its_anchor(lang):
    listing = pages.index_page(PATHS, lang)
    for path in PATHS:
        for rid in _recipe_ids(path):
            assert f"(recipes-{path.stem}.md#recipe-{rid})" in listing


def test_the_site_takes_the_recipe_pages_in_a_quick_build_too():
    from tools.site import build

    names = build.extra_pages(full=False)
    assert "recipes" in names and {f"recipes-{p.stem}" for p in PATHS} <= set(names)


def test_a_notebook_without_a_title_is_refused(tmp_path):
    bad = tmp_path / "01_x.ipynb"
    bad.write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": "no title"}],
                               "metadata": {}, "nbformat": 4, "nbformat_minor": 5}), encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape("# Recipes NN")):
        pages.area_page(bad, "en")


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_symptom_page_links_each_recipe_from_the_message_rows_it_names(lang):
    """A message row on the symptom page (shown in a cell or triggered by a test) links every recipe that names it,
    to the recipe's anchor on its area page."""
    from tools.messages import page as symptom_page, symptoms
    from tools.recipes import used_by

    recipes = used_by.recipes()
    text = symptom_page.site_page(symptoms.collect()[0], lang, recipes=recipes)
    rows = {m["id"]: m for m in symptom_page.load_messages()["messages"]}
    named = [(r, row) for r in recipes for row in r.get("messages", []) if rows[row].get("status") in ("cell", "test")]
    assert named, "no recipe names a message row the page shows"
    for recipe, row in named:
        link = f"[R{recipe['id']}](recipes-{recipe['path'].removesuffix('.ipynb')}.md#recipe-{recipe['id']})"
        assert link in text, f"{row}: the symptom page does not link {link}"


def test_every_area_page_has_its_notebook_as_its_download():
    """tools/site/build.py writes each area page's download from this table: every page but the list has one, and it
    is the page's own notebook."""
    found = pages.downloads()
    assert set(found) == set(pages.pages()) - {"recipes"} and len(found) >= 12
    assert all(path.is_file() and name == f"recipes-{path.stem}" for name, path in found.items())


@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_a_page_says_to_run_its_setup_cell_first_at_the_top_and_under_each_recipe(path, lang):
    page = pages.area_page(path, lang)
    top = page.index("(recipe-setup)=")
    assert page.index(pages.TEXT[lang]["setup"]) < page.index("```python")
    assert top < page.index(f"(recipe-{_recipe_ids(path)[0]})="), "the setup note comes before the first recipe"
    first = page.index("```python", top)
    assert "course.setup()" in page[first:page.index("```\n", first + 10)], "the note stands above the setup cell"
    _, recipes = pages.split(read_notebook(path))
    for rid, cells in recipes:  # the note stands above the recipe's first code cell (its prose may quote code)
        anchor = page.index(f"(recipe-{rid})=")
        code = next(c for c in cells if c["cell_type"] == "code")
        source = "".join(code["source"]) if isinstance(code["source"], list) else code["source"]
        assert page.index(pages.TEXT[lang]["after_setup"], anchor) < page.index(f"```python\n{source.rstrip()}", anchor)
