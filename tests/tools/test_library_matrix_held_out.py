"""The library matrix (docs/library_matrix.json) checked on cells it was not tuned on: a fifth of its keys, chosen by
a seeded hash of the key alone (``held out``), are observed again by an independent re-implementation of the
matrix's procedure (tests/tools/library_matrix_truth.py, written from the specification, not from
tools/profiles/cells.py) in a fresh interpreter, and each must equal the committed cell.

- Every run: a week's share of the held-out cells present in the file (at least 12, and enough that every one comes
  round within :data:`WEEKS` weeks), taken in turn by the ISO week (the same all week).
- Every held-out cell present in the file: set ``HOOKLAB_PROFILES=all`` (the weekly run does).
"""
from __future__ import annotations

import json
import os
import sys
from datetime import date
from pathlib import Path

import pytest
from library_matrix_truth import SEED, SHARE, held_out, parse

from patience import run

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]
MATRIX = ROOT / "docs" / "library_matrix.json"
TRUTH = Path(__file__).with_name("library_matrix_truth.py")
SAMPLE = 12  # held-out cells observed again per run at least, rotating with the ISO week
WEEKS = 26  # ... and as many more as it takes for every held-out cell to come round within half a year
FIXED_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "CUDA_VISIBLE_DEVICES": ""}


def committed() -> dict:
    return json.loads(MATRIX.read_text(encoding="utf-8"))["cells"]


def held_out_present() -> list[str]:
    """The held-out keys that the file has a cell for, sorted."""
    return sorted(key for key in committed() if held_out(key))


def size(keys: list[str]) -> int:
    """How many held-out cells a run observes again: :data:`SAMPLE`, or more where the table has grown, so that the
    weeks of :data:`WEEKS` cover them all."""
    return min(len(keys), max(SAMPLE, -(-len(keys) // WEEKS)))


def sample(today: date | None = None) -> list[str]:
    """The cells observed again in this run: every held-out one with HOOKLAB_PROFILES=all, else :func:`size`
    consecutive ones of the sorted list, starting where the ISO week says (the same all week; every cell within
    :data:`WEEKS` weeks)."""
    keys = held_out_present()
    if os.environ.get("HOOKLAB_PROFILES") == "all":
        return keys
    year, week, _ = (today or date.today()).isocalendar()
    start = (year * 53 + week) * size(keys) % len(keys)
    return sorted({keys[(start + k) % len(keys)] for k in range(size(keys))})


def test_about_a_fifth_of_the_present_cells_is_held_out_by_the_seed_the_file_names():
    doc = json.loads(MATRIX.read_text(encoding="utf-8"))
    assert doc["held out"] == {"seed": SEED, "share": SHARE}, \
        f"the file holds out cells by {doc['held out']}, this test by seed {SEED} and share {SHARE}"
    present, kept = doc["cells"], held_out_present()
    share = len(kept) / len(present)
    assert 0.15 <= share <= 0.25, f"{len(kept)} of {len(present)} present cells are held out ({share:.1%}), not about 20 %"
    for key in kept:
        parse(key)  # each is a cell of the matrix: <slug>:<operation>|<family>|<when>


def test_the_sample_is_the_same_all_week_and_rotates_over_every_held_out_cell():
    monday = date.fromisocalendar(2026, 10, 1)
    week = sample(monday)
    assert all(sample(date.fromordinal(monday.toordinal() + d)) == week for d in range(7)), "the sample changed in a week"
    if os.environ.get("HOOKLAB_PROFILES") == "all":
        assert week == held_out_present()
        return
    assert len(week) == size(held_out_present()) >= min(SAMPLE, len(held_out_present()))
    assert sample(date.fromisocalendar(2026, 11, 1)) != week, "the sample did not move on to the next week"
    seen: set[str] = set()
    for n in range(1, WEEKS + 1):
        seen |= set(sample(date.fromisocalendar(2026, n, 1)))
    assert seen == set(held_out_present()), f"{len(set(held_out_present()) - seen)} held-out cells never sampled"


def observe(keys: list[str], tmp_path: Path) -> dict:
    """The cells observed again in a fresh interpreter (libraries leave global state: none in this worker)."""
    out = tmp_path / "observed.json"
    proc = run([sys.executable, str(TRUTH), str(out), *keys], what=f"{len(keys)} library-matrix cells observed again",
               seconds=120 + 6 * len(keys), cwd=ROOT, env={**os.environ, **FIXED_ENV})
    assert proc.returncode == 0 and out.is_file(), \
        f"the observer ended with {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.timeout(1800)
def test_the_held_out_cells_observed_again_are_the_committed_ones(tmp_path):
    keys, cells = sample(), committed()
    observed = observe(keys, tmp_path)
    assert sorted(observed) == keys, "the observer did not answer for every cell it was given"
    differ = [f"{key}\n  committed: {json.dumps(cells[key])}\n  observed:  {json.dumps(observed[key])}"
              for key in keys if observed[key] != cells[key]]
    agree = len(keys) - len(differ)
    print(f"library matrix, held-out cells: {agree} / {len(keys)} agree")
    assert not differ, (f"{len(differ)} of {len(keys)} held-out cells are observed otherwise than committed "
                        f"(python -m tools.profiles.cells --write, or a fault of the generator):\n" + "\n".join(differ))
