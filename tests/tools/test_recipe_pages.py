"""The recipes' pages on the website (tools/recipes/pages.py): one per area in the site's language, every recipe with
its anchor and its validated outputs, links into the course's notebooks as page links, and a list of them all."""
from __future__ import annotations

import json
import re

import pytest

from hooklab.course.notebook import lang_tags
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
