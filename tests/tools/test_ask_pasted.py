"""course.ask on error messages pasted as users paste them (tools/ask/pasted.py, issue 65): the place that explains
the message is among the first three for the drawn cases at the floor reached, a paste is matched as the message's
text (its order, not its words), and a learner's own words are not taken for a message (the site's port of the
ranking, which leaves message matching out, ranks them as course.ask does)."""
from __future__ import annotations

import json

import pytest

from hooklab.course import asking
from tools.ask import pasted

pytestmark = pytest.mark.tools


@pytest.mark.timeout(900)
def test_pasted_messages_find_the_place_that_explains_them(capsys):
    drawn = json.loads(pasted.CASES.read_text(encoding="utf-8"))
    cases = drawn["cases"]
    assert drawn["seed"] == pasted.SEED and len(cases) >= 150
    assert {c["source"] for c in cases} == {"index", "bank"} and {c["style"] for c in cases} == set(pasted.STYLES)
    results = [(case, pasted.rank(case)) for case in cases]
    table = pasted.table(results)
    with capsys.disabled():
        for group, (found, first, asked) in table.items():
            print(f"\n  pasted messages, {group}: {found} of {asked} in the first three, {first} first", end="")
    found, first, asked = table["all"]
    missed = [(c["row"], c["style"]) for c, position in results if position is None]
    assert found / asked >= pasted.FLOOR, missed
    assert first / asked >= pasted.FIRST_FLOOR


def test_a_case_is_found_only_at_its_own_place():
    case = next(c for c in pasted.cases() if c["source"] == "bank")
    assert pasted.rank({**case, "row": "none-00", "message": "zz qq yy xx ww"}) is None
    assert pasted.rank(case) is not None


def test_the_paste_forms_are_what_users_paste():
    assert pasted.pasted("boom at {x}", "RuntimeError", "class", "torch") == "RuntimeError: boom at {x}"
    assert pasted.pasted("RuntimeError: boom", "RuntimeError", "prefix", "torch") == "[rank0]: RuntimeError: boom"
    assert pasted.pasted("old", "UserWarning", "prefix", "peft").startswith("/opt/conda/lib/python3.11/site-packages/"
                                                                               "peft/utils.py:412: UserWarning: old")
    traceback = pasted.pasted("boom", "ValueError", "traceback", "torch")
    assert traceback.startswith("Traceback (most recent call last):") and traceback.endswith("\nValueError: boom")


def test_a_learners_words_are_not_taken_for_a_message_of_the_sites_places():
    """hooklab-ask.js ranks the course's own places (LEARNER_KINDS) by their words alone: it is course.ask's
    ranking as long as no learner query holds the message of a symptom, which would rank it by the message."""
    from search_cases import LEARNER, LEARNER_HELD_OUT

    places = [e for e in asking._index()[0] if e["kind"] in asking.LEARNER_KINDS and e.get("message")]
    queries = [q for lang in ("en", "zh") for q, _ in LEARNER[lang] + LEARNER_HELD_OUT[lang]]
    assert len(places) > 50 and len(queries) > 100
    taken = [(q, e["id"]) for q in queries for e in places
             if asking.message_match(asking._pasted(q), e["message"])[0] >= asking.MESSAGE_SHARE]
    assert taken == []
