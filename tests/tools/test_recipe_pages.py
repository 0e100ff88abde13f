"""The recipes' pages on the website (tools/recipes/pages.py): one per area in the site's language, every recipe with
its anchor and its validated outputs, links into the course's notebooks as page links, and a list of them all, grouped
by the cookbook's chapters (tools/recipes/chapters.toml, tools/recipes/chapters.py): every recipe in one chapter, the
look-ups a reader makes one click from the list."""
from __future__ import annotations

import json
import re

import pytest

from hooklab.course.notebook import lang_tags, read_notebook
from tools.recipes import chapters, pages

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



def _sections(listing: str) -> dict[str, str]:
    """chapter id -> the text of its section of the index."""
    parts = re.split(r"^\(chapter-([\w-]+)\)=$", listing.split("(recipes-by-library)=")[0], flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def _own(section: str) -> list[str]:
    own = section.split("**")[0]  # the chapter's own recipes come before "in other chapters"
    return re.findall(r"#recipe-([\w-]+)\)", own)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_every_recipe_is_listed_once_under_its_own_chapter_and_chapters_stay_readable(lang):
    listing = pages.index_page(PATHS, lang)
    sections = _sections(listing)
    assert list(sections) == [c.id for c in chapters.load()]
    found = pages.entries(PATHS, lang)
    seen = [rid for section in sections.values() for rid in _own(section)]
    assert sorted(seen) == sorted(found), "each recipe once, under its own chapter"
    for cid, section in sections.items():
        assert all(chapters.of(rid).id == cid for rid in _own(section))
        assert len(_own(section)) <= 45, f"{cid}: a chapter of about 40 recipes at most"
    assert 'class="hooklab-recipe-filter"' in listing and "(symptoms.md)" in listing


# What a reader has in hand -> the chapter they click in the index -> recipes that must be in that chapter's section
# (its own or "in other chapters"). The first two are the review's look-ups (round 7): the DeepSpeed answer sits in a
# recipe the bank filed under reinforcement learning; the Grad-CAM++ and EigenCAM ones in a notebook whose name says
# nothing of CAM.
LOOKUPS = [
    ("my forward hook does not fire under DeepSpeed ZeRO-3", "fsdp-deepspeed-megatron",
     ["reinforcement-learning-13", "fsdp-deepspeed-megatron-06", "fsdp-deepspeed-megatron-24"]),
    ("Grad-CAM on a YOLO model", "grad-cam", ["grad-cam-01", "grad-cam-05", "grad-cam-07", "grad-cam-21"]),
    ("Opacus per-sample gradients with a PEFT model", "privacy-per-sample", ["privacy-per-sample-17"]),
    ("gradients are None in a Trainer callback under DeepSpeed", "fsdp-deepspeed-megatron", ["trainers-trackers-13"]),
    ("FLOPs from DeepSpeed's profiler grow each step", "fsdp-deepspeed-megatron", ["profilers-flops-memory-11"]),
]


@pytest.mark.parametrize("question, chapter, expected", LOOKUPS, ids=[q for q, _c, _e in LOOKUPS])
def test_a_lookup_is_one_click_from_the_index(question, chapter, expected):
    for lang in ("en", "zh"):
        listing = pages.index_page(PATHS, lang)
        assert f"(#chapter-{chapter})" in listing.split("(chapter-")[0], "the chapter is in the list at the top"
        section = _sections(listing)[chapter]
        missing = [rid for rid in expected if f"#recipe-{rid})" not in section]
        assert not missing, f"{question!r}: not under {chapter} ({lang}): {missing}"


def test_the_libraries_list_names_the_chapters_of_each_library():
    listing = pages.index_page(PATHS, "en")
    libraries = listing.split("(recipes-by-library)=")[1]
    line = next(x for x in libraries.splitlines() if x.startswith("- **deepspeed**"))
    assert "(#chapter-fsdp-deepspeed-megatron)" in line and "(#chapter-reinforcement-learning)" in line
    assert "- **torch**" not in libraries  # named by half the recipes: no guide


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_a_recipe_page_names_the_chapter_of_each_recipe(lang):
    path = PATHS[0]
    page = pages.area_page(path, lang)
    for rid, _cells in pages.split(pages.read_notebook(path))[1]:
        chapter = chapters.of(rid)
        at = page.index(f"(recipe-{rid})=")
        assert page.index(f"](recipes.md#chapter-{chapter.id})", at) < page.index("```python", at)


def _write(tmp_path, body: str):
    bank = tmp_path / "bank"
    bank.mkdir()
    for name in ("a", "b"):
        (bank / f"{name}.jsonl").write_text("", encoding="utf-8")
    path = tmp_path / "chapters.toml"
    path.write_text(body, encoding="utf-8")
    return path, bank


@pytest.mark.parametrize("body, message", [
    ('[[chapter]]\nid = "x"\nen = "X"\nzh = "X"\ncategories = ["a"]\n', "no chapter holds the bank's categories b"),
    ('[[chapter]]\nid = "x"\nen = "X"\nzh = "X"\ncategories = ["a", "b", "c"]\n', "the bank has no category c"),
    ('[[chapter]]\nid = "x"\nen = "X"\nzh = "X"\ncategories = ["a", "b"]\n'
     '[[chapter]]\nid = "y"\nen = "Y"\nzh = "Y"\ncategories = ["b"]\n', "category 'b' is in chapters 'x' and 'y'"),
    ('[[chapter]]\nid = "x"\nen = "X"\ncategories = ["a", "b"]\n', "chapter 1 has no zh"),
    ('[[chapter]\n', "cannot be read"),
])
def test_a_chapters_file_that_leaves_a_category_out_or_twice_is_refused(tmp_path, body, message):
    path, bank = _write(tmp_path, body)
    with pytest.raises(chapters.ChapterError, match=re.escape(message)):
        chapters.load(path, bank)


def test_a_recipe_id_without_a_number_is_refused():
    with pytest.raises(chapters.ChapterError, match="is not a recipe id"):
        chapters.of("grad-cam")
