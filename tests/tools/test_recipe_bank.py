"""The bank of real questions (recipes/bank/) keeps its written method, and its held-out part was drawn by the seed,
not picked (tools/recipes/bank.py)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from tools.recipes import bank

pytestmark = pytest.mark.tools


def test_the_bank_loads_and_meets_the_quotas_of_its_method():
    questions = bank.load()
    assert bank.problems(questions) == []
    assert {q.category for q in questions} <= {path.stem for path in bank.BANK.glob("*.jsonl")}


def test_the_held_out_part_is_the_seeded_draw_over_the_bank_as_it_was_then():
    record = json.loads(bank.HELD_OUT.read_text(encoding="utf-8"))
    assert record["seed"] == bank.SEED and record["share"] == bank.HELD_OUT_SHARE
    assert record["bank_size"] == len(record["bank_ids"])
    assert record["ids"] == bank.draw(record["bank_ids"], seed=record["seed"], share=record["share"])
    # every question that was in the bank then is still there (none removed after the draw)
    assert set(record["bank_ids"]) <= {q.id for q in bank.load()}


def test_a_different_seed_draws_a_different_part():
    ids = [q.id for q in bank.load()]
    assert bank.draw(ids, seed=bank.SEED) != bank.draw(ids, seed=bank.SEED + 1)


@pytest.mark.parametrize(("line", "says"), [
    ("{not json", "not a JSON object"),
    (json.dumps({"id": "x-01"}), "the fields must be exactly"),
    (json.dumps(dict.fromkeys(bank.FIELDS, "x") | {"year": 2025, "message": None, "corpus": "issues",
                                                   "category": "x", "id": "x-01"}), "'source' must be"),
    (json.dumps(dict.fromkeys(bank.FIELDS, "x") | {"year": 1999, "message": None, "corpus": "issues",
                                                   "category": "x", "id": "x-01",
                                                   "source": "https://github.com/a/b/issues/1"}), "'year'"),
    (json.dumps(dict.fromkeys(bank.FIELDS, "x") | {"year": 2025, "message": None, "corpus": "issues",
                                                   "category": "y", "id": "x-01",
                                                   "source": "https://github.com/a/b/issues/1"}), "has category"),
])
def test_a_broken_row_is_refused_with_its_file_and_line(tmp_path, monkeypatch, line, says):
    monkeypatch.setattr(bank, "ROOT", tmp_path)
    (tmp_path / "x.jsonl").write_text(line + "\n", encoding="utf-8")
    with pytest.raises(bank.BankError, match=rf"x\.jsonl:1: .*{says}"):
        bank.load(tmp_path)


def test_a_thread_held_twice_is_declared_cited_as_itself_and_counted_once():
    """The rows found after round five to repeat a thread another row holds (bank.SAME_THREAD) cite the same thread as
    that row, say so in their question, and count once: the quotas see one question per thread."""
    questions = {q.id: q for q in bank.load()}
    for twin, row in bank.SAME_THREAD.items():
        assert questions[twin].source == questions[row].source
        assert "the same " in questions[twin].question and row in questions[twin].question, twin
    everything = list(questions.values())
    assert bank.problems(everything) == bank.problems([q for q in everything if q.id not in bank.SAME_THREAD])
    fewer = [q for q in everything if q.id not in set(bank.SAME_THREAD.values())]
    assert any("questions, the method asks" in p for p in bank.problems(fewer)), "a repeat stands in for no question"


def test_the_same_thread_twice_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(bank, "ROOT", tmp_path)
    row = dict.fromkeys(bank.FIELDS, "x") | {"year": 2025, "message": None, "corpus": "issues", "category": "x",
                                             "source": "https://github.com/a/b/issues/1"}
    lines = [json.dumps(row | {"id": "x-01"}), json.dumps(row | {"id": "x-02"})]
    (tmp_path / "x.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(bank.BankError, match="the same source appears twice"):
        bank.load(tmp_path)


def test_only_a_declared_repeat_of_a_thread_is_accepted_and_it_must_cite_the_same_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(bank, "ROOT", tmp_path)
    monkeypatch.setattr(bank, "SAME_THREAD", {"x-02": "x-01"})
    row = dict.fromkeys(bank.FIELDS, "x") | {"year": 2025, "message": None, "corpus": "issues", "category": "x",
                                             "source": "https://github.com/a/b/issues/1"}
    lines = [json.dumps(row | {"id": "x-01"}), json.dumps(row | {"id": "x-02"})]
    (tmp_path / "x.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert [q.id for q in bank.load(tmp_path)] == ["x-01", "x-02"]
    lines.append(json.dumps(row | {"id": "x-03"}))  # a third row on the thread is not declared
    (tmp_path / "x.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(bank.BankError, match="the same source appears twice"):
        bank.load(tmp_path)
    lines = [lines[0], json.dumps(row | {"id": "x-02", "source": "https://github.com/a/b/issues/2"})]
    (tmp_path / "x.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(bank.BankError, match="do not cite the same thread"):
        bank.load(tmp_path)


def test_the_quotas_are_reported_not_silently_passed():
    questions = bank.load()
    assert any("questions, the method asks" in p for p in bank.problems(questions[:10]))
    old = [q for q in questions if q.year not in bank.RECENT_YEARS]
    assert any("from 2024-2026" in p for p in bank.problems(old)) or not old


@pytest.mark.parametrize("drawn, graded", [("held_out.json", "held_out_grade.json"),
                                            ("held_out_2.json", "held_out_2_grade.json"),
                                            ("held_out_3.json", "held_out_3_grade.json"),
                                            ("held_out_4.json", "held_out_4_grade.json"),
                                            ("held_out_5.json", "held_out_5_grade.json")],
                         ids=["round one", "round two", "round three", "round four", "round five"])
def test_each_held_out_grade_covers_exactly_its_held_out_part_and_adds_up(drawn, graded):
    held_out = json.loads((bank.ROOT / "recipes" / drawn).read_text(encoding="utf-8"))["ids"]
    record = json.loads((bank.ROOT / "recipes" / graded).read_text(encoding="utf-8"))
    grades = {g["id"]: g for g in record["grades"]}
    assert sorted(grades) == sorted(held_out) and len(grades) == len(record["grades"])
    assert all(g["grade"] in ("✓", "~", "✗") and g["why"] for g in grades.values())
    assert all(g["where"] for g in grades.values() if g["grade"] != "✗"), "a ✓ or ~ names where the course answers"
    counts = {mark: sum(g["grade"] == mark for g in grades.values()) for mark in ("✓", "~", "✗")}
    assert record["summary"] == counts


def test_round_two_quotas_apply_to_the_round_two_questions_only():
    questions = bank.load()
    first = bank.round_one_ids()
    two = [q for q in questions if q.id not in first]
    assert two, "round two added questions beyond round one's record"
    # round two's dated questions below its recency floor are reported, not passed
    old_two = [q for q in two if q.year is not None and q.year not in bank.RECENT_YEARS]
    assert any("round two:" in p and "2024-2026" in p for p in bank.problems(old_two, first_round={"x-01"}))
    # questions only from issue threads fall under the floor of other places
    issues_only = [q for q in two if bank.from_issue_thread(q)]
    assert any("not from an issue" in p for p in bank.problems(issues_only, first_round={"x-01"}))
    assert not bank.from_issue_thread(next(q for q in two if "discuss.pytorch.org" in q.source))


def test_the_round_two_grade_after_answering_keeps_the_grade_before_and_names_recipes_that_exist():
    before = {g["id"]: g["grade"] for g in json.loads(
        (bank.ROOT / "recipes" / "held_out_2_grade.json").read_text(encoding="utf-8"))["grades"]}
    after = json.loads((bank.ROOT / "recipes" / "held_out_2_grade_after.json").read_text(encoding="utf-8"))
    grades = {g["id"]: g for g in after["grades"]}
    assert sorted(grades) == sorted(before) and len(grades) == len(after["grades"])
    assert all(g["before"] == before[rid] and g["grade"] in ("✓", "~", "✗") and g["why"] for rid, g in grades.items())
    assert all(g["where"] for g in grades.values() if g["grade"] != "✗"), "a ✓ or ~ names where the course answers"
    assert after["summary"] == {mark: sum(g["grade"] == mark for g in grades.values()) for mark in ("✓", "~", "✗")}
    cache: dict[str, set[str]] = {}
    for g in grades.values():
        for where in g["where"]:
            notebook, marker, rid = where.partition("#R")
            if notebook.startswith("recipes/") and marker:
                assert rid in _recipe_ids(notebook, cache), f"{g['id']}: no recipe {rid} in {notebook}"


def _cells(notebook: str) -> list[dict]:
    """A notebook's cells as a grade record names it: the notebook, or, for one of the first shelving the recipes
    were moved out of (recipes/moved.json), the cells of the chapters they went to (the moves keep each cell's id)."""
    path = bank.ROOT / notebook
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))["cells"]
    moved = json.loads((bank.ROOT / "recipes" / "moved.json").read_text(encoding="utf-8"))["notebooks"]
    stem = path.name.removesuffix(".ipynb")
    assert notebook.startswith("recipes/") and stem in moved, f"{notebook}: no such notebook, and not a moved one"
    return [c for now in moved[stem] for c in json.loads(
        (bank.ROOT / "recipes" / f"{now}.ipynb").read_text(encoding="utf-8"))["cells"]]


def _recipe_ids(notebook: str, cache: dict[str, set[str]]) -> set[str]:
    if notebook not in cache:
        cache[notebook] = {c["metadata"]["hooklab"]["recipe"]["id"] for c in _cells(notebook)
                           if c.get("metadata", {}).get("hooklab", {}).get("recipe")}
    return cache[notebook]


@pytest.mark.parametrize("number", [3, 4, 5], ids=["round three", "round four", "round five"])
def test_the_grade_once_the_rest_was_answered_sets_the_held_out_recipes_aside(number):
    record = {3: bank.HELD_OUT_3, 4: bank.HELD_OUT_4, 5: bank.HELD_OUT_5}[number]
    held_out = json.loads(record.read_text(encoding="utf-8"))["ids"]
    before = {g["id"]: g["grade"] for g in json.loads(
        (bank.ROOT / "recipes" / f"held_out_{number}_grade.json").read_text(encoding="utf-8"))["grades"]}
    rest = json.loads((bank.ROOT / "recipes" / f"held_out_{number}_grade_rest.json").read_text(encoding="utf-8"))
    grades = {g["id"]: g for g in rest["grades"]}
    assert [g["id"] for g in rest["grades"]] == held_out
    assert all(g["before"] == before[rid] and g["grade"] in ("✓", "~", "✗") and g["why"] for rid, g in grades.items())
    assert all(g["where"] for g in grades.values() if g["grade"] != "✗"), "a ✓ or ~ names where the course answers"
    marks = ("✓", "~", "✗")
    assert rest["summary"] == {mark: sum(g["grade"] == mark for g in grades.values()) for mark in marks}
    assert rest["summary_before"] == {mark: sum(grade == mark for grade in before.values()) for mark in marks}
    cache: dict[str, set[str]] = {}
    # a recipe of a row that repeats the held-out question's own thread (bank.SAME_THREAD) answers it too: the record
    # must name each such case it leaned on, and say what the grade is with those counted at the first grade
    found_later = rest.get("same_thread_found_later", {"rows": {}})
    leaned_on = {}
    for g in grades.values():
        for where in g["where"]:
            notebook, marker, rid = where.partition("#R")
            if notebook.startswith("recipes/") and marker:
                assert rid not in held_out, f"{g['id']}: {where} answers a held-out question itself; it is set aside"
                assert rid in _recipe_ids(notebook, cache), f"{g['id']}: no recipe {rid} in {notebook}"
                if bank.SAME_THREAD.get(rid) == g["id"] or bank.SAME_THREAD.get(g["id"]) == rid:
                    leaned_on[g["id"]] = rid
            elif "#cell-id=" in where:
                notebook, _, cell = where.partition("#cell-id=")
                cells = _cells(notebook)
                assert cell in {c.get("id") for c in cells}, f"{g['id']}: no cell {cell} in {notebook}"
                answers = {c["id"]: c.get("metadata", {}).get("hooklab", {}).get("recipe", {}).get("id")
                           for c in cells if c.get("id")}
                assert answers[cell] not in held_out, f"{g['id']}: {where} is a held-out question's own recipe"
    assert leaned_on == found_later["rows"], "a grade leans on a recipe of the same thread that the record does not name"
    if leaned_on:
        at_first = {rid: (before[rid] if rid in leaned_on else g["grade"]) for rid, g in grades.items()}
        assert found_later["summary_at_first_grade"] == {mark: sum(v == mark for v in at_first.values())
                                                         for mark in marks}


@pytest.mark.parametrize("number", [3, 4, 5], ids=["round three", "round four", "round five"])
def test_each_rounds_recorded_order_is_the_order_git_shows(number):
    """The grade made once the rest of a round was answered records the order of the round's draw, grades and
    held-out recipes (``order``); git's history must show exactly that: the draw before the first grade, the first
    grade before every recipe of the round, and as many held-out recipes already committed at the second grade as the
    record says (round three: 62 of 71, recipes/METHOD.md; rounds four and five: none)."""
    from tools.recipes import held_out_order
    if not held_out_order.history_available():
        pytest.skip("needs the repository's full git history (this checkout is shallow or not a work tree)")
    recorded = json.loads((bank.ROOT / "recipes" / f"held_out_{number}_grade_rest.json").read_text(
        encoding="utf-8"))["order"]
    shown = held_out_order.round_order(number)
    assert (shown.draw[:7], shown.grade[:7], shown.grade_rest[:7]) == (
        recorded["draw"], recorded["grade"], recorded["grade_rest"])
    assert held_out_order.strictly_before(shown.draw, shown.grade)
    assert held_out_order.strictly_before(shown.grade, shown.grade_rest)
    assert shown.pool_recipes_not_after_draw == (), "a recipe of the round was there before its draw"
    assert shown.held_out_recipes_not_after_grade == (), "a held-out recipe was there before the first grade"
    assert len(shown.held_out_recipes_before_grade_rest) == recorded["held_out_recipes_already_committed"]
    assert shown.held_out_with_recipe == recorded["held_out_with_recipe"]


def test_round_three_floors_and_library_quotas_are_reported_not_silently_passed():
    questions = bank.load()
    earlier = bank.round_one_ids() | (bank.round_two_ids() or set())
    three = [q for q in questions if q.id not in earlier]
    assert len(three) >= 387 and len(questions) >= 700
    first, second = bank.round_one_ids(), bank.round_two_ids()
    issues_only = [q for q in three if bank.from_issue_thread(q)]
    assert any(p.startswith("round three:") and "not from an issue" in p
               for p in bank.problems(issues_only, first_round=first, second_round=second))
    without_captum = [q for q in three if q.library.lower() != "captum"]
    assert any("name captum" in p for p in bank.problems(without_captum, first_round=first, second_round=second))


def test_every_question_names_a_query_that_a_log_records(tmp_path):
    logged = {query for _, query in bank.logged_queries()}
    assert all(q.query in logged for q in bank.load())
    (tmp_path / "queries-x.tsv").write_text("a category\tissues\tno count here\n", encoding="utf-8")
    with pytest.raises(bank.BankError, match="queries-x.tsv:1: a query log line"):
        bank.logged_queries(tmp_path)


@pytest.mark.parametrize("number", [2, 3, 4, 5], ids=["round two", "round three", "round four", "round five"])
def test_a_later_rounds_held_out_part_is_the_seeded_draw_over_that_round_only(number):
    records = (bank.HELD_OUT, bank.HELD_OUT_2, bank.HELD_OUT_3, bank.HELD_OUT_4)[:number - 1]
    path, seed = {2: (bank.HELD_OUT_2, bank.SEED_2), 3: (bank.HELD_OUT_3, bank.SEED_3),
                  4: (bank.HELD_OUT_4, bank.SEED_4), 5: (bank.HELD_OUT_5, bank.SEED_5)}[number]
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record["seed"] == seed and len({bank.SEED, bank.SEED_2, bank.SEED_3, bank.SEED_4, bank.SEED_5}) == 5
    assert record["share"] == bank.HELD_OUT_SHARE
    earlier: set[str] = set()
    for before in records:
        earlier |= set(json.loads(before.read_text(encoding="utf-8"))["bank_ids"])
    assert record["pool"] == bank.round_two_pool(record["bank_ids"], earlier)
    assert record["pool_size"] == len(record["pool"]) and record["bank_size"] == len(record["bank_ids"])
    assert record["ids"] == bank.draw(record["pool"], seed=record["seed"], share=record["share"])
    assert not set(record["ids"]) & earlier, "no question of an earlier round enters this round's held-out part"
    assert set(record["bank_ids"]) <= {q.id for q in bank.load()}


@pytest.mark.parametrize(("number", "attribute"), [(2, "HELD_OUT_2"), (3, "HELD_OUT_3"), (4, "HELD_OUT_4"),
                                                   (5, "HELD_OUT_5")],
                         ids=["round two", "round three", "round four", "round five"])
def test_a_later_round_is_drawn_once(tmp_path, monkeypatch, capsys, number, attribute):
    existing = tmp_path / f"held_out_{number}.json"
    existing.write_text("{}", encoding="utf-8")
    monkeypatch.setattr(bank, attribute, existing)
    assert bank.main(["draw", "--round", str(number)]) == 1
    assert "drawn once" in capsys.readouterr().err
    assert existing.read_text(encoding="utf-8") == "{}"


def test_round_four_is_forum_and_qa_pages_only_and_its_floor_is_reported():
    """Round four looked only for forum, Q&A and discussion threads: an issue thread in it, or fewer such questions
    than it kept, is reported; round three's floors still count round three's questions only."""
    questions = bank.load()
    first, second, third = bank.round_one_ids(), bank.round_two_ids(), bank.round_three_ids()
    four_ids = bank.round_four_ids()
    four = [q for q in questions if q.id in four_ids]
    assert len(four) >= bank.ROUND_FOUR_MIN_NOT_ISSUE and not any(bank.from_issue_thread(q) for q in four)
    assert not four_ids & (first | second | third)
    assert bank.problems(questions) == []
    rest = [q for q in questions if q.id not in four_ids]
    assert any(p.startswith("round four:") and "under" in p
               for p in bank.problems(rest + four[1:], first_round=first, second_round=second))
    issue = next(q for q in rest if bank.from_issue_thread(q))
    stray = dataclasses.replace(four[0], source=issue.source)
    assert any("round four: a question from an issue" in p
               for p in bank.problems([q for q in questions if q is not four[0] and q is not issue] + [stray]))


def test_round_five_is_dated_recent_questions_and_lifts_the_new_questions_to_the_methods_share():
    """Round five looked only for questions whose source shows a year in 2024-2026: an undated or older question in
    it, or fewer questions than it kept, is reported; and the new questions of rounds two to five together meet the
    method's 60 % from 2024-2026 (of those whose year is visible), which round five was drawn to reach."""
    questions = bank.load()
    earlier = bank.round_one_ids() | bank.round_two_ids() | bank.round_three_ids() | bank.round_four_ids()
    five = [q for q in questions if q.id not in earlier]
    assert len(five) >= bank.ROUND_FIVE_MIN > 0 and all(q.year in bank.RECENT_YEARS for q in five)
    new = [q for q in questions if q.id not in bank.round_one_ids() and q.year is not None]
    assert sum(q.year in bank.RECENT_YEARS for q in new) / len(new) >= bank.NEW_MIN_RECENT_SHARE == 0.6
    undated = dataclasses.replace(five[0], year=None)
    found = bank.problems([q for q in questions if q is not five[0]] + [undated])
    assert any(p.startswith("round five:") and "without a visible year" in p for p in found)
    fewer = bank.problems([q for q in questions if q is not five[-1]])
    assert any(p.startswith("round five:") and "under the" in p for p in fewer)
    without_five = [q for q in questions if q.id in earlier]
    assert any(p.startswith("the new questions") for p in bank.problems(without_five))
