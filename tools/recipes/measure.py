"""How often ``course.ask`` puts the right recipe first, second or third, for the bank's answered questions, given
what a user would paste or type: the message the asker quotes, the asker's own words for the symptom (English, as
asked), the same words with the library the asker names (as typed into a search box: ``wandb watch() sometimes does
not log the gradients``), and a Chinese learner's phrasing of the same symptom (the recipe's ``asked_zh``, written
with the recipe).

    python -m tools.recipes.measure            # the table: each kind of query, and each question in each language
    python -m tools.recipes.measure --misses   # also every query whose recipe is not in the first three

The queries are the bank's own fields (``symptom``, ``library``, ``message``) and the recipe's ``asked_zh``: none is
the recipe's heading or its text. A question counts as found in a language when its message (pasted) or its words in
that language put its recipe in the first three: what a user who pastes the error, or else types the symptom, gets.
The goal is :data:`TARGET` for each language; tests/tools/test_recipe_search.py holds each language's share at
:data:`LANGUAGE_FLOOR` (what it reaches, stated beside it) and each kind of query at or above :data:`FLOOR`, and prints
the table with the goal. Many askers' bare words name no API and no
library ("I get the following error"): the ``symptom`` row is shown for that reason, not held to the goal.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from hooklab.course.asking import ask
from tools.ask.index import recipe_entries

from . import bank

TARGET = 0.9  # the goal: the share of questions whose recipe is in the first three, in each language
# What each language reaches with round three's recipes (584 answered questions, 2026-11-27): English 525 of 584
# (89.9 %, short of the goal by one question: many round-three askers' words name no library and no API), Chinese 566
# of 584 (97 %). With recipes 44-54 (708 answered questions, 2026-11-27; the lookup unchanged): English 632 of 708
# (89.3 %: the new askers' words compete with more recipes on nearby cases), Chinese 689 of 708 (97 %). The test holds
# each language at this floor and prints the goal beside it.
LANGUAGE_FLOOR = 0.8925
FLOOR = 0.8  # what each kind of query (but the bare symptom) reaches today: never less
LANGUAGES = {"en": ("message", "words"), "zh": ("message", "symptom-zh")}  # a language's queries of one question
K = 3


@dataclass(frozen=True)
class Query:
    recipe: str  # the bank id the recipe answers
    place: tuple[str, str]  # the recipe's notebook and heading cell, as course.ask links them
    kind: str  # "message", "symptom" (the asker's English words), "words" (the same with the library) or "symptom-zh"
    text: str


def queries() -> list[Query]:
    """Every query a user of an answered question would make, from the bank and the recipes' metadata."""
    questions = {q.id: q for q in bank.load()}
    out = []
    for entry in recipe_entries():
        rid, place = entry["id"].removeprefix("recipe:"), (entry["notebook"], entry["cell"])
        question = questions[rid]
        out.append(Query(rid, place, "symptom", question.symptom))
        named = question.library.lower() in question.symptom.lower()
        out.append(Query(rid, place, "words", question.symptom if named else f"{question.library} {question.symptom}"))
        if question.message:
            out.append(Query(rid, place, "message", question.message))
        if entry.get("asked_zh"):
            out.append(Query(rid, place, "symptom-zh", entry["asked_zh"]))
    return out


def rank(query: Query) -> int | None:
    """Where the query's recipe stands among the first :data:`K` answers (1-based), or None."""
    for position, hit in enumerate(ask(query.text, k=K, lang="en"), start=1):
        if query.place in hit.places():
            return position
    return None


def shares(results: list[tuple[Query, int | None]]) -> dict[str, tuple[int, int]]:
    """kind -> (found in the first three, asked)."""
    table: dict[str, tuple[int, int]] = {}
    for query, position in results:
        found, asked = table.get(query.kind, (0, 0))
        table[query.kind] = (found + (position is not None), asked + 1)
    return table


def per_question(results: list[tuple[Query, int | None]], kinds: tuple[str, ...] | None = None) -> tuple[int, int]:
    """(questions found by at least one of their queries of ``kinds`` (default: any), questions that have such a
    query): what a user who pastes the message, or else types their own words, gets."""
    found: dict[str, bool] = {}
    for query, position in results:
        if kinds is None or query.kind in kinds:
            found[query.recipe] = found.get(query.recipe, False) or position is not None
    return sum(found.values()), len(found)


def by_language(results: list[tuple[Query, int | None]]) -> dict[str, tuple[int, int]]:
    """language -> (questions found by their message or their words in that language, questions)."""
    return {lang: per_question(results, kinds) for lang, kinds in LANGUAGES.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.recipes.measure", description=__doc__.split("\n\n")[0])
    parser.add_argument("--misses", action="store_true", help="list the queries whose recipe is not in the first 3")
    args = parser.parse_args(argv)
    results = [(q, rank(q)) for q in queries()]
    if not results:
        print("no recipes yet: nothing to measure", file=sys.stderr)
        return 1
    print("| query | recipe in the first three | share |\n|---|---|---|")
    for kind, (found, asked) in sorted(shares(results).items()):
        print(f"| {kind} | {found} of {asked} | {found / asked:.0%} |")
    for lang, (found, asked) in by_language(results).items():
        print(f"| a question, {lang}: its message or its {lang} words | {found} of {asked} | {found / asked:.0%} |")
    held = set(json.loads(bank.HELD_OUT.read_text(encoding="utf-8"))["ids"])
    for lang, (found, asked) in by_language([r for r in results if r[0].recipe in held]).items():
        if asked:
            print(f"| the held-out questions only, {lang} | {found} of {asked} | {found / asked:.0%} |")
    if args.misses:
        for query, position in results:
            if position is None:
                print(f"miss {query.recipe} [{query.kind}] {query.text[:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
