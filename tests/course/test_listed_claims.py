"""The factual claims listed for notebooks 16 and 17 (``tests/course/claims/*.toml``) still hold.

Each claim names its sentence (the English cell, which must still say it verbatim, with its Chinese twin before it),
the code cell that shows it and lines of that cell's committed output, and a check in plain code that shows the same
thing again without the notebook. The checks of one file run together in one fresh process (``listed_claims.py``),
under a CPU-time limit; a failed check names the claim, its cell and its sentence. The last tests make sure that the
two halves can fail: a claim whose sentence, cell or output changed, and a check that does not hold.
"""
from __future__ import annotations

import json
import os
import sys

import pytest

from listed_claims import CLAIMS, ROOT, load, problems, run_checks
from patience import run

FILES = sorted(CLAIMS.glob("*.toml"))
FIXED_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "CUDA_VISIBLE_DEVICES": ""}


def notebook_of(spec):
    return json.loads((ROOT / "notebooks" / spec["notebook"]).read_text(encoding="utf-8"))


def test_notebooks_16_and_17_have_their_claims_listed():
    assert {load(f)["notebook"] for f in FILES} >= {"16_hooks_across_training.ipynb", "17_hook_behaviour_matrix.ipynb"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_each_claim_names_a_sentence_and_an_output_the_notebook_still_has(path):
    spec = load(path)
    assert len(spec["claim"]) >= 15, "a notebook's list of claims should cover its factual sentences"
    found = problems(spec, notebook_of(spec))
    assert not found, f"{path.name}:\n" + "\n".join(found)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_each_claim_holds_in_a_fresh_process(path):
    spec = load(path)
    proc = run([sys.executable, str(ROOT / "tests" / "course" / "listed_claims.py"), str(path)],
               what=f"the checks of {path.name}", seconds=240, cpu_seconds=60, cwd=ROOT,
               env={**os.environ, **FIXED_ENV, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    checked = [c for c in spec["claim"] if "check" in c]
    assert set(results) == {c["id"] for c in checked}
    failed = [f"{c['id']} (cell {c['cell']}: {c['says']!r}): {results[c['id']]}"
              for c in checked if results[c["id"]] != "ok"]
    assert not failed, f"{spec['notebook']}: claims that no longer hold:\n" + "\n".join(failed)


# ------------------------------------------------------------------------------------------- they can fail
def _notebook():
    return {"cells": [
        {"cell_type": "markdown", "id": "z", "metadata": {"tags": ["lang-zh"]}, "source": "三次。"},
        {"cell_type": "markdown", "id": "e", "metadata": {"tags": ["lang-en"]}, "source": "It runs three times."},
        {"cell_type": "code", "id": "k", "metadata": {}, "source": "print(3)",
         "outputs": [{"output_type": "stream", "name": "stdout", "text": ["calls: 3\n"]}]},
    ]}


def _spec(**change):
    claim = {"id": "three", "cell": "e", "says": "three times", "shown_by": "k", "output": ["calls: 3"],
             "check": "assert 1 + 2 == 3\n"}
    claim.update(change)
    return {"notebook": "made-up.ipynb", "claim": [{k: v for k, v in claim.items() if v is not None}]}


def test_a_listed_claim_that_still_matches_passes():
    assert problems(_spec(), _notebook()) == []
    assert run_checks(_spec()) == {"three": "ok"}


@pytest.mark.parametrize("change,reported", [
    ({"cell": "gone"}, "cell gone is gone"),
    ({"says": "twice"}, "no longer says 'twice'"),
    ({"shown_by": "gone"}, "code cell gone is gone"),
    ({"output": ["calls: 2"]}, "no longer holds 'calls: 2'"),
    ({"cell": "z"}, "not a lang-en markdown cell"),
    ({"check": None, "output": None}, "nothing shows it"),
])
def test_a_changed_cell_sentence_or_output_is_reported(change, reported):
    found = problems(_spec(**change), _notebook())
    assert any(reported in f for f in found), found


def test_a_check_that_does_not_hold_is_reported_with_its_line():
    result = run_checks(_spec(check="x = torch.ones(2)\nassert x.sum() == 3, 'two ones'\n"))["three"]
    assert result.startswith("AssertionError: two ones") and "assert x.sum() == 3" in result
