"""The hook behaviour matrix (docs/hook_matrix.json, tools/hook_matrix/generate.py) stays true.

- Every run: a fixed sample of cells (each family's eager cell and one cell of every other context) is observed
  again, in a fresh process, and must equal the record; the record has every family x context; every surprising
  cell names a cell that exists and runs it; the JSON says what tools/hook_matrix/notes.toml says; a few probes
  agree with plain PyTorch written here; the page and the ./course rerun section are rendered from the JSON.
- Every cell: set ``HOOKLAB_HOOK_MATRIX=all`` (the weekly CI does: .github/workflows/rerun.yml), and
  ``test_every_cell_is_observed_as_recorded`` re-observes all 870 (a few minutes).
"""
from __future__ import annotations

import copy
import json
import os
import re
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from patience import run
from tools.hook_matrix import generate as hook_matrix, page as hook_matrix_page
from tools.rerun import matrix_cells

ROOT = Path(__file__).resolve().parents[2]
KEY = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*@[a-z0-9]+(-[a-z0-9]+)*$")
FIXED_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture(scope="module")
def doc():
    return json.loads((ROOT / "docs" / "hook_matrix.json").read_text(encoding="utf-8"))


def check(*args: str, seconds: float):
    return run([sys.executable, "-m", "tools.hook_matrix", "check", *args], what=f"hook matrix check {args}",
               seconds=seconds, cwd=ROOT, env={**os.environ, **FIXED_ENV})


def test_the_fixed_sample_is_observed_as_recorded_and_a_changed_cell_is_reported(tmp_path):
    """One run of the check, as ./course rerun runs it in a side environment (tools/rerun/matrix_cells.py): the fixed
    sample against the record with one cell altered on purpose. That cell, and only that cell, is reported."""
    doc = json.loads((ROOT / "docs" / "hook_matrix.json").read_text(encoding="utf-8"))
    assert doc["cells"]["forward-hook@eager"]["calls"] == 1
    doc["cells"]["forward-hook@eager"]["calls"] = 7
    altered = tmp_path / "altered.json"
    altered.write_text(json.dumps(doc), encoding="utf-8")
    proc = check("--against", str(altered), "--report", str(tmp_path / matrix_cells.REPORT), seconds=240)
    result = matrix_cells.read(tmp_path)
    assert result.error is None, proc.stderr[-3000:]
    assert [c["key"] for c in result.changed] == ["forward-hook@eager"], \
        f"PyTorch now does something else in these cells:\n{hook_matrix.render_differences(result.changed)}"
    assert result.changed[0]["fields"] == {"calls": [7, 1]}
    assert proc.returncode == 1 and f"1 of {len(hook_matrix.sample_keys())} cells differ" in proc.stderr


@pytest.mark.skipif(os.environ.get("HOOKLAB_HOOK_MATRIX") != "all",
                    reason="every cell of the hook matrix takes minutes: HOOKLAB_HOOK_MATRIX=all runs them (weekly CI)")
def test_every_cell_is_observed_as_recorded():
    proc = check("--all", seconds=2400)
    assert proc.returncode == 0, f"PyTorch now does something else in these cells:\n{proc.stdout}\n{proc.stderr[-3000:]}"


def test_the_sample_covers_every_family_and_context():
    from hooklab.course import hook_matrix as hm

    sample = hook_matrix.sample_keys()
    assert {k.split("@")[0] for k in sample} == {f.id for f in hm.FAMILIES}
    assert {k.split("@")[1] for k in sample} == {c.id for c in hm.CONTEXTS}
    assert len(sample) == len(set(sample))


def test_every_family_and_context_is_recorded_with_stable_keys(doc):
    from hooklab.course import hook_matrix as hm

    assert list(doc["cells"]) == hm.keys()
    assert [f["id"] for f in doc["families"]] == [f.id for f in hm.FAMILIES]
    assert [c["id"] for c in doc["contexts"]] == [c.id for c in hm.CONTEXTS]
    assert doc["torch"] == torch.__version__.split("+")[0]
    for key, record in doc["cells"].items():
        assert KEY.match(key) and key == f"{record['family']}@{record['context']}"
        if record["status"] == "n/a":
            assert record["reason"] and re.search(r"[\u4e00-\u9fff]", record["reason_zh"]), key
        else:
            assert record["status"] == "observed", (key, record["status"])
            assert record["fires"] == (record["calls"] > 0) == bool(record["by_phase"]), key
            assert sum(record["by_phase"].values()) == record["calls"], key


def test_the_json_says_what_the_notes_say(doc):
    table = hook_matrix.notes()
    observed = {k: {f: v for f, v in r.items() if f in hook_matrix.OBSERVED or f in ("family", "context")}
                for k, r in doc["cells"].items()}
    assert hook_matrix.records(observed, table) == doc["cells"], "run python -m tools.hook_matrix annotate"
    unknown = set(table.get("cell", {})) - set(doc["cells"])
    assert not unknown, f"tools/hook_matrix/notes.toml names cells the matrix does not have: {sorted(unknown)}"
    assert set(table["family"]) == {f["id"] for f in doc["families"]}


def code_cell(notebook: str, cell_id: str) -> dict:
    nb = json.loads((ROOT / "notebooks" / notebook).read_text(encoding="utf-8"))
    found = [c for c in nb["cells"] if c.get("id") == cell_id]
    assert len(found) == 1, f"{notebook} has no cell with id {cell_id!r}"
    assert found[0]["cell_type"] == "code" and found[0]["outputs"], f"{notebook}#{cell_id} is not a code cell with output"
    return found[0]


def test_every_surprising_cell_is_taught_by_a_cell_that_runs_it(doc):
    from hooklab.course import hook_matrix as hm

    surprising = [r for r in doc["cells"].values() if r["surprising"]]
    assert len(surprising) >= 30
    for record in surprising:
        key = f"{record['family']}@{record['context']}"
        taught = record["taught_by"]
        assert taught and taught["scope"] == "cell", f"{key} is surprising but no cell teaches it"
        assert record["why"]["en"] and re.search(r"[\u4e00-\u9fff]", record["why"]["zh"]), key
        source = "".join(code_cell(taught["notebook"], taught["cell"])["source"])
        if taught["notebook"].startswith("17_"):  # notebook 17 runs the cell's probe, by its family and context
            assert re.search(rf'"{record["family"]}[@"]', source) and f'{record["context"]}"' in source, \
                (key, taught)
        else:  # an earlier notebook's cell uses the family's API in that context
            family, context = hm.FAMILY_BY_ID[record["family"]], hm.CONTEXT_BY_ID[record["context"]]
            assert re.search(family.pattern, source), f"{key}: {taught} does not use {family.api}"
            assert re.search(context.pattern, source), f"{key}: {taught} does not run {context.title}"


def test_every_family_cites_the_cell_that_teaches_it(doc):
    from hooklab.course import hook_matrix as hm

    for family in hm.FAMILIES:
        taught = hook_matrix.teaching(f"{family.id}@eager", {"family": hook_matrix.notes()["family"]})
        source = "".join(code_cell(taught["notebook"], taught["cell"])["source"])
        assert re.search(family.pattern, source), f"{family.id}: {taught} does not use {family.api}"


# ---- the probes against plain PyTorch -------------------------------------------------------------------------

def plain_net():
    """The probe's model written out: x -> tanh -> lin -> head."""
    torch.manual_seed(0)
    lin, head = nn.Linear(3, 3), nn.Linear(3, 1)
    x = torch.randn(2, 3, requires_grad=True)
    return lin, head, x


def test_the_probes_agree_with_plain_pytorch():
    from hooklab.course.hook_matrix import observe

    calls = []
    lin, head, x = plain_net()
    lin.register_full_backward_hook(lambda *args: calls.append("full"))
    torch.autograd.grad(head(lin(torch.tanh(x))).sum(), list(lin.parameters()) + list(head.parameters()))
    assert observe("full-backward-hook", "autograd-grad").calls == len(calls) == 0

    calls = []
    lin, head, x = plain_net()
    lin.weight.register_hook(lambda grad: calls.append("weight"))
    head(lin(lin(torch.tanh(x)))).sum().backward()
    assert observe("param-hook", "used-twice").calls == len(calls) == 1

    calls = []
    lin, head, x = plain_net()
    lin.register_forward_hook(lambda *args: calls.append("forward"))
    torch.utils.checkpoint.checkpoint(lambda t: head(lin(torch.tanh(t))), x, use_reentrant=False).sum().backward()
    assert observe("forward-hook", "checkpoint").calls == len(calls) == 2

    calls = []
    lin, head, x = plain_net()
    lin.register_forward_hook(lambda *args: calls.append("forward"))
    copy.deepcopy(lin)(x)
    lin.weight.register_hook(lambda grad: calls.append("weight"))
    head(copy.deepcopy(lin)(torch.tanh(x))).sum().backward()
    assert calls == ["forward", "forward"]  # the copies' forward hook; the weight hook was not copied
    assert observe("param-hook", "deepcopy").calls == 0 and observe("forward-hook", "deepcopy").calls == 1


def test_a_cell_that_means_nothing_says_why_and_runs_nothing():
    from hooklab.course.hook_matrix import observe

    cell = observe("state-dict-pre-hook", "autograd-grad")
    assert cell.status == "n/a" and "state_dict()" in cell.reason and "autograd.grad" in cell.reason
    assert observe("tensor-hook", "pickle").status == "n/a"
    with pytest.raises(KeyError, match="the contexts are"):
        observe("forward-hook", "no-such-context")


def test_the_recording_hooks_leave_nothing_behind():
    from torch.nn.modules import module as module_globals

    from hooklab.course.hook_matrix import observe, record
    before = (len(module_globals._global_forward_hooks), len(module_globals._global_backward_hooks))
    assert observe("global-forward-hook", "eager").calls > 0
    assert observe("saved-tensors-pack", "no-grad").calls == 0
    assert (len(module_globals._global_forward_hooks), len(module_globals._global_backward_hooks)) == before
    assert not record.LOG and record.phase() == "run" and not record._MODIFY[0]
    x = torch.ones(1, requires_grad=True)
    x.sum().backward()  # no saved-tensor or node-creation hook is left active: a plain backward runs
    assert x.grad is not None


# ---- comparing, the page, ./course rerun ------------------------------------------------------------------------

def test_differences_name_each_changed_field(doc):
    recorded = {k: doc["cells"][k] for k in ("forward-hook@eager", "tensor-hook@no-grad")}
    observed = copy.deepcopy(recorded)
    assert hook_matrix.differences(recorded, observed) == []
    observed["forward-hook@eager"]["calls"] = 2
    observed["tensor-hook@no-grad"]["error"] = "RuntimeError: something else"
    found = hook_matrix.differences(recorded, observed)
    assert [d["key"] for d in found] == ["forward-hook@eager", "tensor-hook@no-grad"]
    assert found[0]["fields"] == {"calls": [1, 2]}
    text = hook_matrix.render_differences(found)
    assert "forward-hook@eager:" in text and "recorded 1" in text and "observed 2" in text


def test_the_page_shows_every_cell_and_links_to_the_cells_that_teach(doc):
    for lang in ("zh", "en"):
        text = hook_matrix_page.page(doc, lang)
        for key in doc["cells"]:
            assert f"`{key}`" in text, (lang, key)
        surprising = [k for k, r in doc["cells"].items() if r["surprising"]]
        assert text.count("⚠") >= 2 * len(surprising)
        assert "{ref}`17 · " in text and "<matrix-17-top-full-backward-hook-autograd-grad>" in text
    assert re.search(r"[\u4e00-\u9fff]", hook_matrix_page.page(doc, "zh").split("## ")[1])
    only_17 = hook_matrix_page.page(doc, "en", built={"17_hook_behaviour_matrix"})
    assert "<matrix-08-" not in only_17 and "<matrix-17-" in only_17


def test_the_site_copy_of_a_notebook_gets_a_target_before_each_cited_cell(doc):
    name = "17_hook_behaviour_matrix.ipynb"
    nb = json.loads((ROOT / "notebooks" / name).read_text(encoding="utf-8"))
    cited = hook_matrix_page.cited_cells(doc)
    out = hook_matrix_page.add_site_anchors(nb, name, cited)
    targets = [c for c in out["cells"] if "hooklab-matrix-anchor" in c["metadata"].get("tags", [])]
    assert len(targets) == len(cited[name]) and len(out["cells"]) == len(nb["cells"]) + len(targets)
    for i, cell in enumerate(out["cells"]):
        if cell in targets:
            assert out["cells"][i + 1]["id"] in cited[name]
            assert cell["source"] == f"({hook_matrix_page.anchor(name, out['cells'][i + 1]['id'])})="
    assert nb["cells"] == json.loads((ROOT / "notebooks" / name).read_text(encoding="utf-8"))["cells"]


def test_the_rerun_reports_the_changed_cells_of_the_matrix(tmp_path):
    assert matrix_cells.read(tmp_path).error and matrix_cells.exit_code(None) == 0
    (tmp_path / matrix_cells.REPORT).write_text(json.dumps([]), encoding="utf-8")
    same = matrix_cells.read(tmp_path)
    assert matrix_cells.exit_code(same) == 0 and "Every cell is observed as recorded" in matrix_cells.section(same)
    changed = [{"key": "forward-hook@compile-hook-after", "fields": {"calls": [0, 1]}}]
    (tmp_path / matrix_cells.REPORT).write_text(json.dumps(changed), encoding="utf-8")
    result = matrix_cells.read(tmp_path)
    assert matrix_cells.exit_code(result) == 1 and matrix_cells.one_line(result) == "hook matrix: 1 changed cell(s)"
    section = matrix_cells.section(result)
    assert "`forward-hook@compile-hook-after`" in section and "calls: recorded `0`, now `1`" in section


def _never_observe(*args, **kwargs):
    raise AssertionError("the check observed cells before refusing its arguments")


def test_annotate_refuses_notes_that_fit_no_cell_or_cite_no_notebook(monkeypatch):
    """HM11, HM15: a note for a cell that does not exist (a typo in its key) and a `taught` naming a notebook that does
    not exist were accepted ("annotated 870 cells", exit 0): never shown, or a link to nowhere."""
    real = hook_matrix.notes()
    written = []
    monkeypatch.setattr(hook_matrix, "write", lambda doc, path=None: written.append(doc))
    monkeypatch.setattr(hook_matrix, "notes", lambda path=None: real)
    assert hook_matrix.main(["annotate"]) == 0  # the course's own notes fit: the JSON they give is the committed one
    assert written == [json.loads((ROOT / "docs" / "hook_matrix.json").read_text(encoding="utf-8"))]
    bad = copy.deepcopy(real)
    bad["cell"]["forward-hook@eagr"] = {"surprising": True, "en": "a typo", "zh": "笔误"}
    bad["cell"]["forward-hook@eager"] = {"taught": "99_no_such_notebook.ipynb#2b266702"}
    bad["family"]["tensor-hook"] = {"taught": "01_tensor_hooks.ipynb#nocellid"}
    bad["family"]["tensor-hok"] = {"taught": "01_tensor_hooks.ipynb#2b266702"}
    monkeypatch.setattr(hook_matrix, "notes", lambda path=None: bad)
    written.clear()
    with pytest.raises(SystemExit) as refused:
        hook_matrix.main(["annotate"])
    message = str(refused.value)
    for part in ('[cell."forward-hook@eagr"] (no such cell)', "[family.tensor-hok] (no such family)",
                 "(no notebook notebooks/99_no_such_notebook.ipynb)",
                 "(notebook 01_tensor_hooks.ipynb has no cell 'nocellid')"):
        assert part in message, message
    assert written == []


def test_check_refuses_a_report_in_a_missing_folder_before_observing(tmp_path, monkeypatch):
    """HM9: `check --report <missing folder>/...` observed every cell, then failed with a raw FileNotFoundError."""
    monkeypatch.setattr(hook_matrix, "observe", _never_observe)
    with pytest.raises(SystemExit, match=r"--report .*: the folder .*no-such-folder does not exist"):
        hook_matrix.main(["check", "--report", str(tmp_path / "no-such-folder" / "report.json")])


def test_check_against_a_truncated_matrix_names_the_file_and_how_to_restore_it(tmp_path, monkeypatch):
    """HM3: a cut-short docs/hook_matrix.json gave a raw JSONDecodeError that named no file."""
    monkeypatch.setattr(hook_matrix, "observe", _never_observe)
    text = (ROOT / "docs" / "hook_matrix.json").read_text(encoding="utf-8")
    cut = tmp_path / "hook_matrix.json"
    cut.write_text(text[:len(text) // 2], encoding="utf-8")
    with pytest.raises(SystemExit, match=rf"{re.escape(str(cut))} is not valid JSON \(line \d+, column \d+\).*cut "
                                         r"short.*git checkout -- docs/hook_matrix\.json"):
        hook_matrix.main(["check", "--against", str(cut)])
    cut.write_text("[]", encoding="utf-8")
    with pytest.raises(SystemExit, match="is JSON but not a hook matrix"):
        hook_matrix.main(["check", "--against", str(cut)])
