"""The exercises' panel (tools/classroom/panel/): honest answers, right and wrong, written from the notebooks alone,
with a held-out part drawn once with its committed seed; the figures measured on it are those of the committed file.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from tools.classroom import panel
from tools.classroom.panel import measure

ROOT = Path(__file__).resolve().parents[2]


def test_the_panel_is_large_enough_and_every_wrong_answer_names_its_mistake():
    answers = panel.load()
    wrong = [a for a in answers.values() if not a.right]
    right = [a for a in answers.values() if a.right]
    assert len(wrong) >= 150 and len(right) >= 50, (len(wrong), len(right))
    per_notebook = Counter(a.key.split(".")[0] for a in wrong)
    exercises = {key for nb in (ROOT / "notebooks").glob("*.ipynb")  # each exercise cell's own check
                 for key in re.findall(r'^ *"course\.check\(\\"(\d\d\.\d)\\"', nb.read_text(encoding="utf-8"), re.M)}
    assert len(exercises) >= 50
    assert {k.split(".")[0] for k in exercises} == set(per_notebook) and min(per_notebook.values()) >= 10, per_notebook
    assert {a.key for a in right} == exercises  # every exercise has a right answer
    assert {a.key for a in answers.values()} <= exercises
    for a in wrong:
        assert a.mistake in panel.MISTAKES and len(a.says.split()) >= 5, a.id


def test_the_held_out_part_is_the_one_drawn_with_its_seed():
    answers = panel.load()
    held = json.loads(measure.HELD_OUT.read_text(encoding="utf-8"))
    assert held["seed"] == panel.HELD_OUT_SEED and held["of"] == len(answers)
    assert set(held["ids"]) == panel.held_out([(a.id, a.right) for a in answers.values()])


def test_the_figures_count_the_panel_as_it_is_split():
    answers = panel.load()
    held = set(json.loads(measure.HELD_OUT.read_text(encoding="utf-8"))["ids"])
    figures = json.loads(measure.FIGURES.read_text(encoding="utf-8"))
    for part, members in (("held_out", [a for a in answers.values() if a.id in held]),
                          ("tuning", [a for a in answers.values() if a.id not in held])):
        fig = figures["before"][part]
        assert (fig["right"], fig["wrong"]) == (sum(a.right for a in members), sum(not a.right for a in members))
        assert fig["right_accepted"] <= fig["right"] and fig["wrong_rejected"] <= fig["wrong"]


def test_the_figures_of_a_measurement_are_counted_per_part(monkeypatch, tmp_path):
    held = tmp_path / "held.json"
    held.write_text(json.dumps({"ids": ["answers_00:b", "answers_00:c"]}), encoding="utf-8")
    monkeypatch.setattr(measure, "HELD_OUT", held)
    rows = [{"id": "answers_00:a", "right": True, "status": "correct"},
            {"id": "answers_00:b", "right": False, "status": "wrong"},
            {"id": "answers_00:c", "right": False, "status": "correct"},
            {"id": "answers_00:d", "right": False, "status": "checker raised"}]
    got = measure.figures(rows, {"answers_00:b": True, "answers_00:d": True})
    assert got["held_out"] == {"right": 0, "right_accepted": 0, "wrong": 2, "wrong_rejected": 1, "checker_raised": 0,
                               "wrong_diagnosed": 1}
    assert got["tuning"] == {"right": 1, "right_accepted": 1, "wrong": 1, "wrong_rejected": 0, "checker_raised": 1,
                             "wrong_diagnosed": 1}


def test_a_tuning_run_checks_no_held_out_answer():
    held = set(json.loads(measure.HELD_OUT.read_text(encoding="utf-8"))["ids"])
    ours = [a for a in panel.load().values() if a.id.startswith("answers_00:")]
    kept = next(a.id for a in ours if a.right and a.id not in held)
    assert any(a.id in held for a in ours)
    # the child's skip is what --tuning passes: the held-out ids (here also every other answer, to run one checker)
    loaded = dict(panel.PANEL)
    panel.PANEL.clear()  # the child's process starts with none: the module registers its answers again
    try:
        rows = measure._check_module("answers_00", frozenset(held | {a.id for a in ours if a.id != kept}))
    finally:
        panel.PANEL.clear()
        panel.PANEL.update(loaded)
    assert [r["id"] for r in rows] == [kept] and rows[0]["status"] == "correct"
