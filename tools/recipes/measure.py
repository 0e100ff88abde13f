"""How often ``course.ask`` puts the right recipe first, second or third, for the bank's answered questions, given
what a user would paste or type: the message the asker quotes, the asker's own words for the symptom (English, as
asked), and a Chinese learner's phrasing of the same symptom (the recipe's ``asked_zh``, written with the recipe).

    python -m tools.recipes.measure            # the table, and the share in the first three for each kind of query
    python -m tools.recipes.measure --misses   # also every query whose recipe is not in the first three

The queries are the bank's own fields (``symptom``, ``message``) and the recipe's ``asked_zh``: none is the recipe's
heading or its text. The goal is :data:`TARGET` for each kind of query; tests/tools/test_recipe_search.py holds every
share at or above :data:`FLOOR` (what the lookup reaches today, so a change that makes search worse fails) and prints
the table.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from hooklab.course.asking import ask
from tools.ask.index import recipe_entries

from . import bank

TARGET = 0.9  # the goal: the share of queries whose recipe is in the first three
FLOOR = 0.8  # what every share reaches today (message 97 %, English words 82 %, Chinese words 88 %): never less
K = 3


@dataclass(frozen=True)
class Query:
    recipe: str  # the bank id the recipe answers
    place: tuple[str, str]  # the recipe's notebook and heading cell, as course.ask links them
    kind: str  # "message", "symptom" (English, the asker's words) or "symptom-zh"
    text: str


def queries() -> list[Query]:
    """Every query a user of an answered question would make, from the bank and the recipes' metadata."""
    questions = {q.id: q for q in bank.load()}
    out = []
    for entry in recipe_entries():
        rid, place = entry["id"].removeprefix("recipe:"), (entry["notebook"], entry["cell"])
        question = questions[rid]
        out.append(Query(rid, place, "symptom", question.symptom))
        if question.message:
            out.append(Query(rid, place, "message", question.message))
        if entry.get("asked_zh"):
            out.append(Query(rid, place, "symptom-zh", entry["asked_zh"]))
    return out


def rank(query: Query) -> int | None:
    """Where the query's recipe stands among the first :data:`K` answers (1-based), or None."""
    for position, hit in enumerate(ask(query.text, k=K, lang="en"), start=1):
        if (hit.notebook, hit.cell) == query.place:
            return position
    return None


def shares(results: list[tuple[Query, int | None]]) -> dict[str, tuple[int, int]]:
    """kind -> (found in the first three, asked)."""
    table: dict[str, tuple[int, int]] = {}
    for query, position in results:
        found, asked = table.get(query.kind, (0, 0))
        table[query.kind] = (found + (position is not None), asked + 1)
    return table


def per_question(results: list[tuple[Query, int | None]]) -> tuple[int, int]:
    """(questions found by at least one of their queries, questions): what a user who tries the message and then
    their own words gets."""
    found: dict[str, bool] = {}
    for query, position in results:
        found[query.recipe] = found.get(query.recipe, False) or position is not None
    return sum(found.values()), len(found)


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
    found, asked = per_question(results)
    print(f"| any of a question's queries | {found} of {asked} | {found / asked:.0%} |")
    if args.misses:
        for query, position in results:
            if position is None:
                print(f"miss {query.recipe} [{query.kind}] {query.text[:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
