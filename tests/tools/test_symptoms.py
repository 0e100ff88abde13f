"""The symptom index (tools/messages/symptoms.py): every entry still matches its cell's committed output, notebook 00's section
is current, the generator touches only the markdown between the markers, and the site and the matrix use it."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from tools.messages import page as symptom_page, symptoms
from tools.rerun import compare, report as rerun_report

ROOT = Path(__file__).resolve().parents[2]


def test_every_symptom_entry_is_valid_and_its_message_is_in_its_cells_output():
    found, problems = symptoms.collect(ROOT)
    assert not problems, "symptom index problems:\n" + "\n".join(problems)
    assert found, "no cell is tagged 'symptom'"
    for s in found:  # an independent reading of the same cells
        cell = json.loads((ROOT / "notebooks" / s.notebook).read_text(encoding="utf-8"))["cells"][s.cell]
        assert "symptom" in cell["metadata"]["tags"] and cell["id"] == s.cell_id
        if s.message is not None:
            shown = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                            for o in cell["outputs"])
            assert s.message in shown, f"{s.notebook} cell {s.cell} ({s.id}) no longer shows {s.message!r}"


def test_notebook_15_is_indexed():
    found = [s for s in symptoms.collect(ROOT)[0] if s.notebook.startswith("15_")]
    assert len(found) >= 10 and all(s.heading["zh"] and s.heading["en"] for s in found)


def test_notebook_00_section_is_current():
    nb = symptoms.read_notebook(symptoms.NOTEBOOK_00)
    current = symptoms.section_is_current(nb, symptoms.collect(ROOT)[0])
    if current is None:
        pytest.skip("notebook 00 has no symptom-index marker cells yet (the lead inserts them; then this test checks "
                    "the section)")
    assert current, "notebook 00's symptom index is stale: run .venv/bin/python -m tools.messages.symptoms --write"


def cell(kind, source, tags=(), **extra):
    c = {"cell_type": kind, "id": f"c{abs(hash(source)) % 10**8}", "metadata": {"tags": list(tags)}, "source": source}
    if kind == "code":
        c.update(outputs=extra.pop("outputs", []), execution_count=1)
    c["metadata"].update(extra)
    return c


def stream(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


def fixture_notebook(tmp_path, name="07_demo.ipynb", message="RuntimeError: boom"):
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        cell("markdown", "# 07 · 演示 / Demo", ["lang-both"]),
        cell("markdown", "## 1. 出错", ["lang-zh"]),
        cell("markdown", '## 1. Failing <span class="jp-toc-ignore"></span>', ["lang-en"]),
        cell("code", "boom()", ["symptom"], outputs=[stream("RuntimeError: boom\n")],
             hooklab={"symptom": {"id": "boom-raises", "zh": "调用 boom 报错", "en": "boom raises", "message": message}}),
    ]}
    (tmp_path / "notebooks").mkdir(exist_ok=True)
    (tmp_path / "notebooks" / name).write_text(json.dumps(nb), encoding="utf-8")
    return nb


def test_collect_reads_entries_with_their_sections(tmp_path):
    fixture_notebook(tmp_path)
    (found,), problems = symptoms.collect(tmp_path)
    assert problems == []
    assert (found.id, found.notebook, found.cell, found.heading) == ("boom-raises", "07_demo.ipynb", 3,
                                                                     {"zh": "1. 出错", "en": "1. Failing"})


@pytest.mark.parametrize("change, says", [
    (lambda c: c["metadata"]["hooklab"]["symptom"].update(message="RuntimeError: bang"), "not in the cell's committed"),
    (lambda c: c["metadata"]["hooklab"]["symptom"].update(id="Boom Raises"), "not kebab-case"),
    (lambda c: c["metadata"]["hooklab"]["symptom"].update(zh="boom raises"), "should be one line of Chinese"),
    (lambda c: c["metadata"]["hooklab"]["symptom"].update(en="调用"), "should be one line of English"),
    (lambda c: c["metadata"]["hooklab"]["symptom"].pop("message"), "exactly the keys"),
    (lambda c: c["metadata"].pop("hooklab"), "has no metadata hooklab.symptom"),
    (lambda c: c["metadata"].update(tags=[]), "not the tag 'symptom'"),
])
def test_each_broken_entry_is_reported(tmp_path, change, says):
    nb = fixture_notebook(tmp_path)
    change(nb["cells"][3])
    (tmp_path / "notebooks" / "07_demo.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    problems = symptoms.collect(tmp_path)[1]
    assert any(says in p for p in problems), problems


def test_an_id_used_twice_is_reported(tmp_path):
    fixture_notebook(tmp_path, "07_demo.ipynb")
    fixture_notebook(tmp_path, "08_other.ipynb")
    assert any("is used twice" in p for p in symptoms.collect(tmp_path)[1])


def notebook_00(extra_between=()):
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        cell("markdown", "# 00 · 导论 / Introduction", ["lang-both"]),
        cell("code", "print(1)", outputs=[stream("1\n")]),
        cell("markdown", symptoms.MARKER_START, ["lang-both"]),
        *extra_between,
        cell("markdown", symptoms.MARKER_END, ["lang-both"]),
        cell("code", "print(2)", outputs=[stream("2\n")]),
    ]}


def test_the_section_is_written_between_the_markers_and_nothing_else_changes(tmp_path):
    fixture_notebook(tmp_path)
    found = symptoms.collect(tmp_path)[0]
    nb = notebook_00([cell("markdown", "old text", ["lang-zh"]), cell("markdown", "old", ["lang-en"])])
    before = copy.deepcopy(nb)
    assert symptoms.section_is_current(nb, found) is False
    assert symptoms.update_section(nb, found) is True
    assert symptoms.section_is_current(nb, found) is True and symptoms.update_section(nb, found) is False
    outside = lambda n: [c for i, c in enumerate(n["cells"]) if i < 3 or i >= len(n["cells"]) - 2]  # noqa: E731
    assert outside(nb) == outside(before)  # the code cells (with outputs) and the markers are untouched
    zh, en = nb["cells"][3], nb["cells"][4]
    assert zh["metadata"]["tags"] == ["lang-zh"] and en["metadata"]["tags"] == ["lang-en"]
    assert zh["source"].startswith("## 症状索引") and en["source"].startswith('## Symptom index <span class="jp-toc-ignore">')
    assert "[07 · 1. Failing](07_demo.ipynb#cell-id=" in en["source"] and "`RuntimeError: boom`" in en["source"]
    assert "[07 · 1. 出错](07_demo.ipynb#cell-id=" in zh["source"] and "调用 boom 报错" in zh["source"]


def test_the_generated_cells_keep_the_course_format(tmp_path):
    from notebook_rules import check_notebook
    fixture_notebook(tmp_path)
    nb = notebook_00()
    symptoms.update_section(nb, symptoms.collect(tmp_path)[0])
    for c in nb["cells"]:
        if c["cell_type"] == "code":
            c["execution_count"] = 1 + [x for x in nb["cells"] if x["cell_type"] == "code"].index(c)
    nb["metadata"]["kernelspec"] = {"name": "hooklab"}
    nb["cells"][1]["source"] = "import hooklab"
    path = tmp_path / "00_intro.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert check_notebook(path) == []


@pytest.mark.parametrize("cells, says", [
    ([cell("code", "x = 1")], "markdown cells only"),
])
def test_a_code_cell_between_the_markers_is_refused(cells, says):
    nb = notebook_00(cells)
    with pytest.raises(symptoms.SymptomError, match=says):
        symptoms.update_section(nb, [])


def test_missing_or_misplaced_markers_are_refused():
    nb = notebook_00()
    del nb["cells"][2]
    with pytest.raises(symptoms.SymptomError, match="needs one markdown cell"):
        symptoms.update_section(nb, [])
    nb = notebook_00()
    del nb["cells"][2:4]
    assert symptoms.section_is_current(nb, []) is None
    with pytest.raises(symptoms.SymptomError, match="no symptom-index markers"):
        symptoms.update_section(nb, [])


def test_messages_with_backticks_and_pipes_stay_one_table_cell():
    assert symptoms.code_span("`x` requires a | b") == "`` `x` requires a \\| b ``"
    assert symptoms.code_span("plain") == "`plain`"


def test_the_site_page_links_to_anchors_the_site_adds(tmp_path):
    nb = fixture_notebook(tmp_path)
    found = symptoms.collect(tmp_path)[0]
    page = symptom_page.site_page(found, "en")
    assert page.startswith("# Symptom index") and "{ref}`07 · 1. Failing <symptom-boom-raises>`" in page
    anchored = symptom_page.add_site_anchors(nb)
    assert [c["source"] for c in anchored["cells"]][3:5] == ["(symptom-boom-raises)=", "boom()"]
    assert len(nb["cells"]) == 4  # the notebook itself is not changed


def test_site_assembles_the_symptom_page_and_the_anchors(tmp_path):
    from tools.site import build as site
    src = tmp_path / "src"
    names = site.assemble(src, "en", only=["15_hooks_in_libraries"])
    assert names == ["15_hooks_in_libraries"]
    page = (src / "symptoms.md").read_text(encoding="utf-8")
    nb = json.loads((src / "15_hooks_in_libraries.ipynb").read_text(encoding="utf-8"))
    targets = [c["source"] for c in nb["cells"] if "hooklab-symptom-anchor" in c["metadata"].get("tags", [])]
    listed = [s.id for s in symptoms.collect(ROOT)[0] if s.notebook.startswith("15_")]
    assert targets == [f"(symptom-{i})=" for i in listed]
    assert all(f"<symptom-{i}>" in page for i in listed)
    assert "symptoms" in (src / "index.md").read_text(encoding="utf-8").split("```{toctree}")[-1]


def test_the_rerun_report_says_when_a_symptom_message_is_gone():
    committed = {"cells": [cell("code", "boom()", ["symptom"], outputs=[stream("RuntimeError: boom\n")],
                                hooklab={"symptom": {"id": "boom-raises", "zh": "报错", "en": "raises",
                                                     "message": "RuntimeError: boom"}})]}
    fresh = copy.deepcopy(committed)
    fresh["cells"][0]["outputs"] = [stream("RuntimeError: boom happened differently\n")]
    assert compare.compare_notebook("07_demo.ipynb", committed, fresh, None, []).changes[0].symptom == ""
    fresh["cells"][0]["outputs"] = [stream("RuntimeError: bang\n")]
    (change,) = compare.compare_notebook("07_demo.ipynb", committed, fresh, None, []).changes
    assert change.symptom == "boom-raises: RuntimeError: boom"
    assert any("symptom index: the message of `boom-raises: RuntimeError: boom`" in line
               for line in rerun_report._cell_section(change))


# --- the site's page: every row under its own anchor, the hook messages and their coverage, the silent kinds -----

def test_every_row_of_the_page_has_its_anchor_and_its_words():
    from tools.messages import hook_messages
    found = symptoms.collect(ROOT)[0]
    data = hook_messages.load()
    for lang in ("zh", "en"):
        page = symptom_page.site_page(found, lang)
        for s in found:  # each symptom cell once, under a target made from its id
            assert page.count(f"\n(row-{s.id})=\n####") == 1, (lang, s.id)
            if s.message is not None:
                assert s.message in page
        for m in data["messages"]:
            if m["status"] in ("test", "excused"):
                assert page.count(f"\n(msg-{m['id']})=\n####") == 1, (lang, m["id"])
            assert m["text"] in page, (lang, m["id"])  # the exact words, in a code block
            if m["status"] == "test":
                assert m["example"] in page and m["test"] in page
        targets = re.findall(r"^\((\S+)\)=$", page, flags=re.M)
        assert len(targets) == len(set(targets)), "a target is used twice"


def test_the_page_states_the_coverage_counted_from_the_data():
    from tools.messages import hook_messages
    data = hook_messages.load()
    page = symptom_page.site_page(symptoms.collect(ROOT)[0], "en")
    for row in hook_messages.coverage(data["messages"]):
        name = row["source"]
        triggered = row["cell"] + row["test"]
        assert (f"| {name} | {row['messages']} | {row['cell']} | {row['test']} | {row['excused']} | "
                f"{triggered}/{row['messages'] - row['excused']} |") in page
    total = hook_messages.coverage(data["messages"])[-1]
    assert f"{total['messages']} messages: {total['cell']} shown by a cell, {total['test']} triggered by a test" in page


def test_silent_rows_are_grouped_by_their_kind():
    silent = symptom_page.load_silent()
    found = {s.id: s for s in symptoms.collect(ROOT)[0]}
    listed = [r for kind in silent["kind"] for r in kind["rows"]]
    assert not [r for r in listed if r not in found], "docs/silent_symptoms.toml names ids no symptom cell has"
    assert len(listed) == len(set(listed)), "a silent row is in two kinds"
    assert {"fires-twice", "never-fires", "fires-on-a-copy", "sees-another-tensor", "scaled-gradient",
            "return-value"} <= {kind["id"] for kind in silent["kind"]}
    page = symptom_page.site_page(list(found.values()), "en")
    silent_part = page.split("\n## Silent symptoms\n")[1].split("\n## ")[0]
    for kind in silent["kind"]:
        section = silent_part.split(f"(kind-{kind['id']})=\n### {kind['en']}\n")[1].split("\n(kind-")[0]
        assert all(f"(row-{r})=" in section for r in kind["rows"]), kind["id"]
    other = [s.id for s in found.values() if s.message is None and s.id not in listed]
    assert all(f"(row-{r})=" in silent_part.split("(kind-other)=")[1] for r in other)


def test_matrix_ids_of_silent_rows_exist_in_the_hook_matrix():
    silent = symptom_page.load_silent()
    found = {s.id for s in symptoms.collect(ROOT)[0]}
    assert set(silent["matrix"]) <= found
    cells = json.loads((ROOT / "docs" / "hook_matrix.json").read_text(encoding="utf-8"))["cells"]
    missing = {row: key for row, key in silent["matrix"].items() if key not in cells}
    assert not missing, f"matrix ids not in docs/hook_matrix.json: {missing}"
    # a row and its matrix cell tell of the same thing: a row about a hook that never runs cites a cell where it
    # does not fire, a row about a hook that runs again cites one where it fired more than once
    for row, key in silent["matrix"].items():
        if any(word in row for word in ("ignored", "drops")):
            assert not cells[key]["fires"] or set(cells[key]["by_phase"]) <= {"trace", "export", "capture"}, row
        if "again" in row:
            assert cells[key]["calls"] > 1, row


def test_a_partial_site_leaves_out_the_rows_that_point_into_notebooks_it_lacks():
    found = [s for s in symptoms.collect(ROOT)[0] if s.notebook.startswith("04_")]
    page = symptom_page.site_page(found, "en", built={"04_module_backward_hooks.ipynb"})
    refs = set(re.findall(r"<(symptom-[^>]+|explain-[^>]+)>`", page))
    assert refs and all(r.startswith("symptom-") or r.startswith("explain-04-") for r in refs)


def test_explain_anchors_are_put_before_the_cells_message_rows_point_to():
    from tools.messages import hook_messages
    data = hook_messages.load()
    row = next(m for m in data["messages"] if m["status"] == "test")
    nb = symptoms.read_notebook(ROOT / "notebooks" / row["notebook"])
    anchored = symptom_page.add_site_anchors(nb, notebook=row["notebook"])
    cells = anchored["cells"]
    target = symptom_page.explain_target(row["notebook"], row["cell_id"])
    i = next(i for i, c in enumerate(cells) if c["source"] == f"({target})=")
    assert cells[i + 1]["id"] == row["cell_id"] and cells[i + 1]["cell_type"] == "code"
    assert len(symptom_page.add_site_anchors(nb)["cells"]) < len(cells)  # without the notebook's name: none of these


# --- damaged inputs: a clear error naming the file ------------------------------------------------------------

def test_a_truncated_notebook_is_named_with_how_to_restore_it(tmp_path, monkeypatch, capsys):
    damaged = tmp_path / "00_introduction.ipynb"
    damaged.write_bytes(symptoms.NOTEBOOK_00.read_bytes()[:5000])
    with pytest.raises(symptoms.SymptomError, match=r"cannot read the notebook .*00_introduction\.ipynb.*git checkout"):
        symptoms.read_notebook(damaged)
    damaged.write_bytes(b"\xff\xfe{not utf-8")
    with pytest.raises(symptoms.SymptomError, match="00_introduction.ipynb"):
        symptoms.read_notebook(damaged)
    monkeypatch.setattr(symptoms, "NOTEBOOK_00", damaged)
    assert symptoms.main([]) == 1
    err = capsys.readouterr().err
    assert "00_introduction.ipynb" in err and "git checkout" in err and "Traceback" not in err


def test_notebook_00_without_its_markers_fails_the_check(tmp_path, monkeypatch, capsys):
    nb = notebook_00()
    nb["cells"] = [c for c in nb["cells"] if symptoms.MARKER_START not in symptoms._text(c.get("source"))
                   and symptoms.MARKER_END not in symptoms._text(c.get("source"))]
    stripped = tmp_path / "00_introduction.ipynb"
    stripped.write_text(json.dumps(nb), encoding="utf-8")
    monkeypatch.setattr(symptoms, "NOTEBOOK_00", stripped)
    assert symptoms.main([]) == 1
    err = capsys.readouterr().err
    assert "no symptom-index markers" in err and symptoms.MARKER_START in err


def test_the_page_lists_the_left_out_texts_by_category_and_each_excuse_with_its_attempt():
    from tools.messages import hook_messages_data
    data = hook_messages_data.load()
    page = symptom_page.site_page(symptoms.collect(ROOT)[0], "en", messages=data)
    left_out = hook_messages_data.left_out_texts(data)
    assert left_out and sum(map(len, left_out.values())) >= 40
    section = page.split("## Texts left out", 1)[1]
    for category, texts in left_out.items():
        assert f"({len(texts)})" in section and category.split(":")[0] in section
        for text in texts:
            assert symptoms.code_span(" ".join(text.split())) in section
    for m in data["messages"]:
        if m["status"] == "excused":
            assert f"`{m['attempt']}`" in page, m["id"]


def test_every_category_of_left_out_texts_has_its_chinese_name():
    from tools.messages import hook_messages_data, hook_messages_families
    data = hook_messages_data.load()
    page = symptom_page.site_page(symptoms.collect(ROOT)[0], "zh", messages=data)
    for category in hook_messages_data.left_out_texts(data):
        zh = hook_messages_families.left_out_category(category, "zh")
        assert zh != category and symptoms.CJK.search(zh), f"{category}: add it to OTHER_MEANINGS_ZH"
        assert f"### {symptom_page._heading_text(zh)} (" in page


def test_a_message_with_a_python_copy_of_its_check_has_one_row_the_explained_one():
    """The C++ check and its Python copy in Dynamo print the same words: the page holds one row for them, among the
    errors with its explanation, none among the excused messages (a search for the words finds only that row)."""
    from tools.messages import hook_messages_data
    data = hook_messages_data.load()
    page = symptom_page.site_page(symptoms.collect(ROOT)[0], "en", messages=data)
    words = "Tensor post accumulate grad hooks should return None."
    rows = [m for m in data["messages"] if m["text"] == words]
    assert len(rows) == 1 and rows[0]["status"] == "test"
    errors, excused = page.split("## Messages not triggered here", 1)
    assert f"(msg-{rows[0]['id']})=" in errors and words not in excused
