"""The hook behaviour matrix (docs/hook_matrix.json, tools/hook_matrix/generate.py) stays true.

- Every run: a sample of cells (each family's eager cell, one fixed cell of every other context, and one cell of
  every other context that is sensitive to its step, taken in turn by the ISO week) is observed again, in a fresh
  process, and must equal the record; a flipped record in any context and a probe with its context's step skipped
  are caught; the record has every family x context; every surprising cell names a cell that exists and runs it;
  the JSON says what tools/hook_matrix/notes.toml says; a few probes agree with plain PyTorch written here; the page
  and the ./course rerun section are rendered from the JSON.
- Every cell: set ``HOOKLAB_HOOK_MATRIX=all`` (the weekly CI does: .github/workflows/rerun.yml), and
  ``test_every_cell_is_observed_as_recorded`` re-observes all of them (a few minutes).
"""
from __future__ import annotations

import copy
import dataclasses
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


def check(*args: str, seconds: float, week: str | None = None):
    env = {**os.environ, **FIXED_ENV, **({"HOOKLAB_HOOK_MATRIX_WEEK": week} if week else {})}
    return run([sys.executable, "-m", "tools.hook_matrix", "check", *args], what=f"hook matrix check {args}",
               seconds=seconds, cwd=ROOT, env=env)


def this_week() -> str:
    import datetime

    year, week, _ = datetime.date.today().isocalendar()
    return f"{year}-W{week:02d}"


def test_the_sample_is_observed_as_recorded_and_a_flipped_record_in_every_context_is_reported(tmp_path):
    """One run of the check, as ./course rerun runs it in a side environment (tools/rerun/matrix_cells.py): this
    week's sample against the record with one sampled cell of every context flipped on purpose (one call more; the
    cell sensitive to the context's step where the sample has one). Those cells, and only those, are reported."""
    from hooklab.course import hook_matrix as hm

    week = this_week()
    sample = hook_matrix.sample_keys(week)
    doc = json.loads((ROOT / "docs" / "hook_matrix.json").read_text(encoding="utf-8"))
    flipped = {}
    for context in hm.CONTEXTS:
        key = [k for k in sample if k.endswith(f"@{context.id}")][-1]
        flipped[key] = doc["cells"][key]["calls"]
        doc["cells"][key]["calls"] += 1
    assert len(flipped) == len(hm.CONTEXTS)
    altered = tmp_path / "altered.json"
    altered.write_text(json.dumps(doc), encoding="utf-8")
    proc = check("--against", str(altered), "--report", str(tmp_path / matrix_cells.REPORT), seconds=400, week=week)
    result = matrix_cells.read(tmp_path)
    assert result.error is None, proc.stderr[-3000:]
    unexpected = [c for c in result.changed if c["key"] not in flipped or set(c["fields"]) != {"calls"}]
    assert not unexpected, \
        f"PyTorch now does something else in these cells:\n{hook_matrix.render_differences(unexpected)}"
    assert {c["key"]: c["fields"]["calls"] for c in result.changed} == {k: [n + 1, n] for k, n in flipped.items()}
    assert proc.returncode == 1 and f"{len(flipped)} of {len(sample)} cells differ" in proc.stderr


@pytest.mark.skipif(os.environ.get("HOOKLAB_HOOK_MATRIX") != "all",
                    reason="every cell of the hook matrix takes minutes: HOOKLAB_HOOK_MATRIX=all runs them (weekly CI)")
@pytest.mark.timeout(2500)
def test_every_cell_is_observed_as_recorded():
    proc = check("--all", seconds=2400)
    assert proc.returncode == 0, f"PyTorch now does something else in these cells:\n{proc.stdout}\n{proc.stderr[-3000:]}"


def test_the_sample_covers_every_family_and_context():
    from hooklab.course import hook_matrix as hm

    sample = hook_matrix.sample_keys()
    assert {k.split("@")[0] for k in sample} == {f.id for f in hm.FAMILIES}
    assert {k.split("@")[1] for k in sample} == {c.id for c in hm.CONTEXTS}
    assert len(sample) == len(set(sample))


def test_every_week_the_sample_holds_a_cell_sensitive_to_each_contexts_step_and_they_take_turns(doc):
    """A cell whose record would be the same with the context's step skipped (ddp-comm-hook@retain-graph fires once
    with or without the second backward) cannot catch a broken probe: each context's sensitive cells differ from
    their family's eager cell, and the sample takes one of them each week, another the next week."""
    from hooklab.course import hook_matrix as hm

    weeks = [f"2026-W{n:02d}" for n in range(1, 9)]
    samples = {week: hook_matrix.sample_keys(week) for week in weeks}
    assert hook_matrix.sample_keys(weeks[0]) == samples[weeks[0]]  # one week, one sample
    for context in hm.CONTEXTS[1:]:
        sensitive = hook_matrix.sensitive_keys(doc["cells"], context.id)
        assert sensitive, f"{context.id}: no cell of the record is sensitive to its step"
        for key in sensitive:
            family, eager = doc["cells"][key], doc["cells"][f"{key.split('@')[0]}@eager"]
            assert any(family[f] != eager[f] for f in hook_matrix.step_fields(context.id)), key
        picked = {week: [k for k in sample if k in sensitive and k not in hook_matrix.SAMPLE_CONTEXT_CELLS]
                  for week, sample in samples.items()}
        assert all(len(keys) == 1 for keys in picked.values()), (context.id, picked)
        turns = [k for k in sensitive if k not in hook_matrix.SAMPLE_CONTEXT_CELLS]
        assert len({keys[0] for keys in picked.values()}) == min(len(weeks), len(turns)), context.id


# what each of these contexts runs with its step skipped: the run then is the eager one (a broken probe)
def _skipped_forward_only(h):
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    h.fact(rig.net(rig.x))


def _skipped_backward(h, variant="plain"):
    rig = h.rig(variant=variant)
    h.install(rig)
    h.phase("forward")
    out = rig.net(rig.x)
    h.phase("backward")
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))


def _skipped_copy(h):
    from hooklab.course.hook_matrix import contexts

    rig = h.rig()
    h.install(rig)
    contexts._run_copy(h, rig, rig.net, rig.opt)  # the original runs, as if it were the copy


def _skipped_apply(h):
    rig = h.rig(shared=True)
    h.install(rig)  # on the subject itself, once
    _skipped_backward_on(h, rig)


def _skipped_backward_on(h, rig):
    h.phase("forward")
    out = rig.net(rig.x)
    h.phase("backward")
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))
    h.exercise(rig, rig.net)


def _skipped_eager(h):
    rig = h.rig()
    h.install(rig)
    _skipped_backward_on(h, rig)


def _skipped_quantization(h):
    rig = h.rig()
    h.install(rig)
    h.phase("forward")
    h.fact(rig.net(rig.x))
    h.exercise(rig, rig.net)


SKIPPED = {"no-grad": _skipped_forward_only, "inference-mode": _skipped_forward_only,
           "autograd-grad": _skipped_backward, "backward-inputs": _skipped_backward, "retain-graph": _skipped_backward,
           "double-backward": _skipped_backward, "inplace": _skipped_backward, "view": _skipped_backward,
           "used-twice": _skipped_backward, "unused-branch": _skipped_backward, "autocast": _skipped_backward,
           "deepcopy": _skipped_copy, "pickle": _skipped_copy, "apply": _skipped_apply,
           # the contexts of round three: no jvp, no load, no meta device, no functional_call, no other thread, no
           # ContextVar, one batch, no scaler, no DataParallel, no quantization
           "forward-ad": _skipped_forward_only, "functional-call": _skipped_backward, "load-assign": _skipped_eager,
           "load-mmap": _skipped_eager, "meta-to-empty": _skipped_eager, "thread": _skipped_eager,
           "contextvar": _skipped_backward, "split-batch": _skipped_eager, "grad-scaler": _skipped_eager,
           "data-parallel": _skipped_eager, "quantization": _skipped_quantization,
           # the distributed columns: no wrapper (the broken probe runs here, in this process, as a plain model)
           "ddp": _skipped_eager, "fsdp2": _skipped_eager, "fsdp1": _skipped_eager, "tensor-parallel": _skipped_eager}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("context", sorted(SKIPPED))
def test_a_probe_with_its_contexts_step_skipped_is_caught_by_each_sensitive_cell(context, doc):
    """A broken probe (the context's step left out: no torch.no_grad, no second backward, no copy, no DDP / FSDP /
    tensor-parallel wrapper, ...) is observed differently from the record in every cell of that context the sample may
    take, this week's included."""
    from hooklab.course import hook_matrix as hm

    broken = dataclasses.replace(hm.CONTEXT_BY_ID[context], run=SKIPPED[context], shapes=(), wrap="")
    checked = []
    for key in hook_matrix.sensitive_keys(doc["cells"], context):
        if hm.FAMILY_BY_ID[key.split("@")[0]].where == "wrapper":
            continue  # a DDP / FSDP2 row: worker processes (the check runs them)
        now = hm.observe(key.split("@")[0], broken).as_dict()
        fields = [d["fields"] for d in hook_matrix.differences({key: doc["cells"][key]}, {key: now})]
        assert fields and set(fields[0]) & set(hook_matrix.step_fields(context)), \
            f"{key}: the probe without the step of {context} is observed as recorded"
        checked.append(key)
    this_weeks = [k for k in hook_matrix.sample_keys(this_week()) if k.endswith(f"@{context}")]
    assert checked and (set(this_weeks) & set(checked) or all(hm.needs_workers(k) for k in this_weeks)), context


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
    assert observe("tensor-hook", "apply").status == "n/a"
    with pytest.raises(KeyError, match="the contexts are"):
        observe("forward-hook", "no-such-context")


class Tapping(nn.Module):
    """A module whose forward hooks the tensor it makes, counting the calls in a list it holds."""

    def __init__(self):
        super().__init__()
        self.lin, self.calls = nn.Linear(3, 3), []

    def forward(self, x):
        h = self.lin(x)
        h.register_hook(lambda grad: self.calls.append(1))
        return h


def test_a_hook_registered_in_forward_fires_on_a_copy_as_the_record_says():
    import io

    from hooklab.course.hook_matrix import observe

    torch.manual_seed(0)
    model, x = Tapping(), torch.randn(2, 3)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    for copied in (copy.deepcopy(model), torch.load(buffer, weights_only=False)):
        copied(x).sum().backward()
        assert len(copied.calls) == 1 and model.calls == []  # the copy's own forward registered it, and it fired
    for context in ("deepcopy", "pickle"):
        cell = observe("tensor-hook", context)
        assert cell.status == "observed" and cell.calls == 1 == observe("tensor-hook", "eager").calls


def test_what_a_post_accumulate_grad_hooks_return_value_does_is_recorded_for_each_size():
    from hooklab.course.hook_matrix import observe

    def attempt(value):
        p = nn.Parameter(torch.ones(3, 3))
        p.register_post_accumulate_grad_hook(value)
        try:
            (p * 2).sum().backward()
            return "ran"
        except RuntimeError as error:
            return str(error)

    cell = observe("post-accumulate-grad-hook", "eager")
    shapes = {s["shape"]: s["return_value"] for s in cell.shapes}
    same = attempt(lambda p: torch.zeros_like(p))
    assert "should return None" in same and cell.return_value == f"rejected: RuntimeError: {same}"
    assert "changed the size" in attempt(lambda p: torch.zeros(())) and "changed the size" in shapes["another-size"]
    assert attempt(lambda p: p) == "ran" and shapes["itself"] == "ignored"


def test_a_full_backward_hook_in_double_backward_is_recorded_with_and_without_a_nonlinearity_after_it():
    from hooklab.course.hook_matrix import observe

    def calls(tail):
        torch.manual_seed(0)
        lin, head, x, fired = nn.Linear(3, 3), nn.Linear(3, 1), torch.randn(2, 3, requires_grad=True), []
        lin.register_full_backward_hook(lambda *args: fired.append(1))
        h = lin(torch.tanh(x))
        grad_x, = torch.autograd.grad(head(tail(h)).sum(), x, create_graph=True)
        grad_x.square().sum().backward()
        return len(fired)

    cell = observe("full-backward-hook", "double-backward")
    tanh_tail = next(s for s in cell.shapes if s["shape"] == "tanh-tail")
    assert cell.calls == calls(lambda h: h) and tanh_tail["calls"] == calls(torch.tanh) == cell.calls + 1


def test_the_practice_contexts_agree_with_plain_pytorch():
    """load_state_dict(assign=True) and to_empty leave a parameter's hook on the old object; saved-tensor hooks do not
    reach a step on another thread; a hook sees a ContextVar set around backward() on the caller's thread, not on a
    pool's; under GradScaler a parameter hook receives the gradient times the loss scale: each as the record says."""
    import contextvars
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from hooklab.course.hook_matrix import observe

    lin, head, x = plain_net()
    calls = []
    lin.weight.register_hook(lambda grad: calls.append("assign"))
    lin.load_state_dict({k: v.clone() for k, v in lin.state_dict().items()}, assign=True)
    head(lin(torch.tanh(x))).sum().backward()
    with torch.device("meta"):
        meta = nn.Linear(3, 3)
    meta.weight.register_hook(lambda grad: calls.append("meta"))
    meta.to_empty(device="cpu")
    meta.reset_parameters()
    meta(x).sum().backward()
    assert calls == [] and observe("param-hook", "load-assign").calls == observe("param-hook", "meta-to-empty").calls == 0
    assert observe("param-hook", "load-mmap").calls == 1

    packed = []
    lin, head, x = plain_net()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
        worker = threading.Thread(target=lambda: head(lin(torch.tanh(x))).sum().backward())
        worker.start()
        worker.join(60)
    assert packed == [] and observe("saved-tensors-pack", "thread").calls == 0

    var, seen = contextvars.ContextVar("probe", default="unset"), []
    lin, head, x = plain_net()
    lin.weight.register_hook(lambda grad: seen.append(var.get()))
    token = var.set("set")
    head(lin(torch.tanh(x))).sum().backward()
    with ThreadPoolExecutor(1) as pool:
        pool.submit(head(lin(torch.tanh(x))).sum().backward).result(60)
    var.reset(token)
    cell = observe("param-hook", "contextvar")
    assert seen == ["set", "unset"]
    assert "'set around backward()'" in cell.notes[0] and "'unset'" in cell.shapes[0]["notes"][0]

    received = []
    lin, head, x = plain_net()
    lin.weight.register_hook(lambda grad: received.append(grad.norm()))
    head(lin(torch.tanh(x))).sum().backward()
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(head(lin(torch.tanh(x))).sum()).backward()
    ratio = f"{round(float(received[1] / received[0]), 1):g} x"
    assert ratio == f"{scaler.get_scale():g} x" and ratio in observe("param-hook", "grad-scaler").notes[0]


def test_the_recording_hooks_leave_nothing_behind():
    from torch.nn.modules import module as module_globals

    from hooklab.course.hook_matrix import observe, record
    dicts = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_forward_hooks_with_kwargs",
             "_global_backward_pre_hooks", "_global_backward_hooks")
    before = [len(getattr(module_globals, name)) for name in dicts]
    for family in ("global-forward-pre-hook", "global-forward-hook", "global-forward-hook-with-kwargs",
                   "global-full-backward-pre-hook", "global-full-backward-hook"):
        assert observe(family, "eager").calls > 0, family
    assert observe("saved-tensors-pack", "no-grad").calls == 0
    assert [len(getattr(module_globals, name)) for name in dicts] == before  # with_kwargs' flag too (see families)
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
    # a cell recorded in two shapes shows both: the overview's symbol, and each shape's words in each language
    cell = doc["cells"]["full-backward-hook@double-backward"]
    shape = next(s for s in cell["shapes"] if "calls" in s)
    assert hook_matrix_page.symbol(cell).endswith(f"{cell['calls']}/{shape['calls']}")
    for lang in ("zh", "en"):
        assert shape[lang] in hook_matrix_page.observed(cell, lang)
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


def test_the_package_ships_the_record_as_written():
    """hook_matrix.recorded() (what notebook 17 reads, in a launch copy too, where no repository is) is
    docs/hook_matrix.json, byte for byte once unpacked, and writing the record writes it."""
    from hooklab.course.hook_matrix import RECORD, recorded

    doc = hook_matrix.load()
    assert recorded() == doc
    assert RECORD.read_bytes() == hook_matrix.packaged_bytes(doc), (
        "hooklab/course/assets/hook_matrix.json.gz is not docs/hook_matrix.json: python -m tools.hook_matrix annotate "
        "writes both")
