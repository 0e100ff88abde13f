"""course.ask finds the right recipe among its first three answers for the bank's own words (tools/recipes/measure.py):
the asker's message, the asker's English words, a Chinese learner's phrasing. Each share stays at or above the floor
it reaches today; the table is printed (pytest -s) with the goal beside it."""
from __future__ import annotations

import pytest

from tools.recipes import measure

pytestmark = pytest.mark.tools


def test_every_kind_of_query_finds_its_recipe_at_least_as_often_as_today(capsys):
    results = [(q, measure.rank(q)) for q in measure.queries()]
    table = measure.shares(results)
    assert {"message", "symptom", "symptom-zh"} <= set(table)
    with capsys.disabled():
        for kind, (found, asked) in sorted(table.items()):
            print(f"\n  course.ask, {kind}: {found} of {asked} in the first three "
                  f"({found / asked:.0%}; floor {measure.FLOOR:.0%}, goal {measure.TARGET:.0%})", end="")
    low = {kind: f"{found} of {asked}" for kind, (found, asked) in table.items() if found / asked < measure.FLOOR}
    assert not low, f"course.ask finds fewer recipes than it did: {low}"


def test_a_query_is_found_only_when_its_own_recipe_is_among_the_first_three():
    query = measure.queries()[0]
    elsewhere = measure.Query(query.recipe, ("../recipes/99_none.ipynb", "none"), query.kind, query.text)
    assert measure.rank(elsewhere) is None
