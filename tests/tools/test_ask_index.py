"""The index of course.ask (hooklab/course/assets/ask/index.json) is what tools/ask/index.py writes from today's
notebooks and docs/, and every entry points at a cell that exists."""
from __future__ import annotations

import json

import pytest

from hooklab.course.notebook import read_notebook
from tools.ask import index
from tools.profiles import page

pytestmark = pytest.mark.tools


@pytest.fixture(scope="module")
def built():
    """The index built from today's notebooks and docs/, once for this file (a build takes about a minute)."""
    return index.build()


def test_the_shipped_index_is_current(built):
    assert index.INDEX.read_text(encoding="utf-8") == index.render(built), (
        "hooklab/course/assets/ask/index.json is stale: run `python -m tools.ask --write`")
    assert index.read_programs() == index.render_programs(built), (
        "hooklab/course/assets/ask/programs.json.gz is stale: run `python -m tools.ask --write`")


def test_the_programs_ship_apart_and_the_lookup_puts_them_back():
    from hooklab.course import asking

    shipped = json.loads(index.INDEX.read_text(encoding="utf-8"))["entries"]
    marked = [e for e in shipped if e.get("program") is True]
    assert marked and all(not isinstance(e.get("program"), dict) for e in shipped)
    entries = asking._index()[0]
    by_id = {e["id"]: e for e in entries}
    for e in marked[:50]:
        assert by_id[e["id"]]["program"]["show"]["code"]["en"], e["id"]


def test_the_index_is_read_once_per_process():
    """course.ask reads and weighs the index (4 MB, thousands of entries) on its first call only: read per call, a
    teacher's loop of questions or the own-words measure takes minutes instead of a second."""
    from hooklab.course import asking

    asking.ask("my forward hook is never called")
    assert asking._index.cache_info().currsize == 1
    hits = asking._index.cache_info().hits
    asking.ask("钩子没有被调用")
    assert asking._index.cache_info().hits == hits + 1


def test_the_titles_terms_ship_as_the_lookup_would_compute_them():
    """The lookup reads each entry's title terms from the index (tokenizing every title at its first answer took
    seconds): they are what asking.title_terms gives, so the answers are the same."""
    from hooklab.course import asking

    shipped = json.loads(index.INDEX.read_text(encoding="utf-8"))["entries"]
    assert all(len(e["title_terms"]) == 2 for e in shipped)
    assert [[frozenset(words.split()) for words in e["title_terms"]] for e in shipped] == [
        asking.title_terms(e) for e in shipped]
    assert asking._index()[4] == [asking.title_terms(e) for e in shipped]


def test_a_matrix_cell_links_to_its_row_whose_id_is_the_key():
    """The site's matrix page gives each cell's row the key as its id (``forward-hook@compile``, tools/site/conf.py):
    a link with another anchor opens the top of the page (tests/tools/test_site.py follows every link in a built site)."""
    cells = [e for e in json.loads(index.INDEX.read_text(encoding="utf-8"))["entries"] if e["kind"] == "matrix"]
    assert len(cells) > 600
    assert [e["page"] for e in cells] == [f"hook_matrix.html#{e['id'].removeprefix('matrix:')}" for e in cells]


def test_every_entry_links_to_a_notebook_and_a_cell_that_exist_or_to_a_profile_page():
    entries = json.loads(index.INDEX.read_text(encoding="utf-8"))["entries"]
    cells = {path.name: {c.get("id") for c in read_notebook(path)["cells"]}
             for path in index.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
    cells |= {f"../recipes/{path.name}": {c.get("id") for c in read_notebook(path)["cells"]}
              for path in index.RECIPES.glob("[0-9][0-9]_*.ipynb")}
    profiles = set(page.pages())
    for entry in entries:
        if entry["kind"] == "tool":  # the doctor: its page of the site's API reference
            assert entry["page"] == "api.html#hooklab.explain_hook" and "hooklab.explain_hook(model," in entry["en"]
            continue
        if entry["kind"] == "atlas":  # the hook atlas of a zoo: its site page, and the call that reads it
            zoo = entry["id"].split(":")[1]
            assert entry["page"] == f"atlas-{zoo}.html" and f"course.atlas('{zoo}')[model]" in entry["en"], entry["id"]
            continue
        if entry["kind"] == "message" and entry["notebook"] is None:  # a library's own message: on its page
            slug, _, anchor = entry["page"].removeprefix("profiles-").partition(".html#")
            assert f"profiles-{slug}" in profiles and anchor == f"libmsg-{entry['id'].rsplit('-', 1)[1]}", entry["id"]
            assert entry["zh"] and entry["en"] and entry["terms"], entry["id"]
            continue
        if entry["kind"] == "profile":  # a library profile lives on its site page (and in course.profile)
            assert entry["notebook"] is None, entry["id"]
            assert entry["page"].split("#")[0].removesuffix(".html") in profiles | {"other_frameworks"}, entry["id"]
            assert entry["zh"] and entry["en"] and entry["terms"], entry["id"]
            continue
        assert entry["notebook"] in cells, entry["id"]
        assert entry["cell"] is None or entry["cell"] in cells[entry["notebook"]], entry["id"]
        assert entry["zh"] and entry["en"] and entry["terms"], entry["id"]
    kinds = {e["kind"] for e in entries}
    assert {"section", "symptom", "message", "matrix", "recipe", "profile", "tool", "atlas"} <= kinds


def test_the_check_fails_on_a_stale_index_and_names_the_fix(built, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(index, "build", lambda: built)  # the build is the test above's; here, what main does with it
    stale = tmp_path / "index.json"
    stale.write_text('{"entries": []}\n', encoding="utf-8")
    monkeypatch.setattr(index, "INDEX", stale)
    monkeypatch.setattr(index, "ROOT", tmp_path)
    assert index.main([]) == 1
    assert "python -m tools.ask --write" in capsys.readouterr().err


def test_a_broken_data_file_is_named(tmp_path, monkeypatch, capsys):
    broken = tmp_path / "hook_matrix.json"
    broken.write_text('{"cells": ', encoding="utf-8")
    monkeypatch.setattr(index, "MATRIX", broken)
    assert index.main([]) == 1
    assert "hook_matrix.json cannot be read" in capsys.readouterr().err


def test_a_sections_anchors_are_the_sites():
    """course.ask links a section to its heading on each language's site: the anchor the index holds is the one the
    site's build makes from the heading (tools/site/ask_index.py's link, which the search page uses)."""
    from tools.site import ask_index

    sections = [e for e in json.loads(index.INDEX.read_text(encoding="utf-8"))["entries"] if e["kind"] == "section"]
    assert len(sections) > 100
    for entry in sections:
        for lang in ("zh", "en"):
            assert f"{entry['page']}#{entry['anchor'][lang]}" == ask_index.link(entry, lang), (entry["id"], lang)
