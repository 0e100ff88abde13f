"""How often ``course.ask`` puts a right place among its first three for a learner's own words: queries written
without API or library names for round-two questions that a recipe answers (``recipes/bank/own_words.json``).

    python -m tools.recipes.own_words            # the held-out part, each language: found in the first three, of asked
    python -m tools.recipes.own_words --tuning   # the tuning part instead (the one the lookup may be tuned on)
    python -m tools.recipes.own_words --misses   # also every query whose right places are not in the first three
    python -m tools.recipes.own_words --round 3  # round three's queries (recipes/bank/own_words_3.json), all held out
    python -m tools.recipes.own_words --draw --round 3   # draw round three's questions once (refuses a second draw)
    python -m tools.recipes.own_words --round 3 --tuning # round three's tuning queries (own_words_3_tuning.json)
    python -m tools.recipes.own_words --draw --round 3 --tuning   # draw them once
    python -m tools.recipes.own_words --round 3 --fresh  # the fresh held-out draw (own_words_3_fresh.json)
    python -m tools.recipes.own_words --draw --round 3 --fresh    # draw it once
    python -m tools.recipes.own_words --round 4          # the round-four held-out draw (own_words_4.json)
    python -m tools.recipes.own_words --draw --round 4   # draw it once

The record holds the draw and the split, with their seeds: the population is round two's questions (the bank's ids
that round one's record, ``recipes/held_out.json``, does not hold) that a recipe answers; ``random.Random(seed)``
drew them in order, and ``random.Random(split_seed)`` chose 40 % of them as the tuning part, the rest held out. The
queries were written from the bank's question text only, before any answer was read, two per language and question.

A right place for a question is its recipe, or a place the recipe's metadata links as its explanation: a course cell
(``course``: the section or symptom row at that cell, else the section the cell is in), a behaviour-matrix cell
(``matrix``) or a message row (``messages``), each where ``course.ask`` puts it (its notebook and cell). The lookup
was measured on the held-out part once before it was tuned on the tuning part (:data:`BEFORE`) and once after
(:data:`AFTER`, on the same sources: the lookup's phrases of ``asking.SYNONYMS`` are all that changed);
tests/tools/test_own_words.py holds the held-out part at :data:`FLOOR` or better on the shipped index (:data:`AFTER`
less the one question that more recipes pushed out of the first three).

Round three (``recipes/bank/own_words_3.json``) was drawn before any round-three answer was written: :data:`SIZE_3`
questions sampled with ``random.Random(SEED_3)`` from round three's questions outside its held-out part
(``recipes/held_out_3.json``), two queries per language and question written from the bank's text alone. No part of it
is for tuning: every query is held out, and the figure is reported over all of them and over those whose question a
recipe answers.

Round three's tuning part (``recipes/bank/own_words_3_tuning.json``) is a second draw, made after that measure and
before the lookup was changed for round three: :data:`SIZE_3_TUNING` questions sampled with
``random.Random(SEED_3_TUNING)`` from the round-three questions a recipe answered then, outside the held-out part and
outside round three's own-words draw, with queries written the same way. The lookup is tuned on it only; round three's
held-out queries are measured again once after (:data:`MEASURED_3_AFTER`). The tuning did not carry to round two's
held-out part, so the lookup was left unchanged (see the note at :data:`MEASURED_3`).

Round four (``recipes/bank/own_words_4.json``) is a new held-out draw, made once every earlier draw had been measured
and could serve for tuning: :data:`SIZE_4` questions sampled with ``random.Random(SEED_4)`` from the new bank's
questions outside every earlier draw (round three's that a recipe answers, and all of round four's), written the same
way and committed before round four's recipes and before the lookup changed; measured once before that change
(:data:`MEASURED_4_BEFORE`) and once after (:data:`MEASURED_4_AFTER`), then once more when the held-out questions of round
four had their recipes (:data:`MEASURED_4_ANSWERED`); the test holds the figure the shipped index gives once later
recipes joined it (:data:`MEASURED_4_HELD`, each query lost stated beside it).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hooklab.course import asking
from hooklab.course.notebook import read_notebook

from . import bank

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "recipes" / "bank" / "own_words.json"
RECORD_3 = ROOT / "recipes" / "bank" / "own_words_3.json"
SEED_3 = 6506  # fixed in the code before round three's draw ran
SIZE_3 = 55  # questions: two queries each per language, 110 per language
RECORD_3_TUNING = ROOT / "recipes" / "bank" / "own_words_3_tuning.json"
SEED_3_TUNING = 271126  # fixed in the code before the tuning draw ran
SIZE_3_TUNING = 40  # questions: two queries each per language, 80 per language
RECORD_3_FRESH = ROOT / "recipes" / "bank" / "own_words_3_fresh.json"
SEED_3_FRESH = 271127  # fixed in the code before the fresh draw ran (2026-11-27)
SIZE_3_FRESH = 55  # questions: two queries each per language, 110 per language
RECORD_4 = ROOT / "recipes" / "bank" / "own_words_4.json"
SEED_4 = 20261127  # fixed in the code before the round-four draw ran (2026-11-27)
SIZE_4 = 55  # questions: two queries each per language, 110 per language
RECIPES = ROOT / "recipes"
NOTEBOOKS = ROOT / "notebooks"
K = 3
LANGUAGES = ("en", "zh")
TUNING_SHARE = 0.4
# the held-out part, each language: (queries with a right place in the first three, queries), measured once before
# the lookup was tuned on the tuning part (2026-11-26, on the index `python -m tools.ask --write` builds from commit
# 6cc8d00's sources) and once after
BEFORE = {"en": (65, 80), "zh": (62, 80)}
AFTER = {"en": (67, 80), "zh": (65, 80)}  # after the phrases of asking.SYNONYMS tuned on the tuning part
# What the shipped index finds once recipes 21-27 (80 more answered questions) joined it, the lookup unchanged: one
# held-out question (vision-libs-16, an object's features from a two-stage detector) fell to fourth in each language
# behind new recipes for per-object features of other detectors. The test holds the held-out part at this floor.
# Recipes 28-43 (223 round-three questions answered) pushed one more English held-out query out of the first three,
# the lookup unchanged again: the floor is what the shipped index finds now. Recipes 44-54 (124 more answered questions,
# the lookup unchanged again) pushed one more English and three more Chinese held-out queries behind their new recipes
# on nearby cases (middle-layer hidden states from a serving engine, trainer callbacks, detector features, EMA copies).
# Recipes 60-65 (round five's 48 questions outside its held-out part, the lookup unchanged) pushed one more Chinese
# held-out query to fourth: ultralytics-11's "an EMA copy fails: only leaf tensors can be deep-copied", now behind three
# recipes on other models that cannot be deep-copied.
FLOOR = {"en": (64, 80), "zh": (60, 80)}
FLOOR_MOVED = 5  # queries per language the floor has moved below AFTER, each move stated above
# Round three's queries, all held out, measured once (2026-11-27) when recipes answered 43 of the 55 drawn questions
# (86 of the 110 queries per language), before any change to the lookup: a right place in the first three for
# English 83 of 110 (83 of the 86 whose question a recipe answers), Chinese 72 of 110 (72 of 86). The test holds it.
MEASURED_3 = {"en": (83, 110), "zh": (72, 110)}
# Measured once more (2026-11-27) when recipes 44-54 answered 11 more of the drawn questions (54 of 55), the lookup
# unchanged: English 104 of 110 (95 %), Chinese 92 of 110 (84 %; 92 of the 108 whose question a recipe answers). The
# test holds this figure.
MEASURED_3_AFTER = {"en": (104, 110), "zh": (92, 110)}
# Round three's tuning part (RECORD_3_TUNING), measured on the lookup shipped with recipes 01-43: English 70 of 80,
# Chinese 64 of 80. Damping long entries less (BM25's b 0.65, from 0.75) with a title weight of 0.25 (from 0.5) found
# 75 and 66 there, and 48 / 45 of round two's 52 tuning queries (from 47 / 45); but round two's held-out part fell from
# 65 to 63 of 80 in English with it, and counting a recipe above a course place at equal words (1.15 for 0.95) put
# recipes before the course's own row for a learner's "I call forward directly" (tests/course/test_ask.py). Neither
# carried to questions it was not tuned on: the lookup was left as it was, and round three's held-out queries were
# measured again unchanged (MEASURED_3_AFTER).
# Round three's fresh draw (RECORD_3_FRESH), all held out: drawn and written (by writers who read nothing but the bank's
# rows) and committed before the lookup was tuned on the tuning draw, measured once before that tuning and once after.
# Before (2026-11-27, the lookup of commit 819dd9b): English 96 of 110, Chinese 96 of 110 (87 % each).
MEASURED_3_FRESH_BEFORE = {"en": (96, 110), "zh": (96, 110)}
# After the tuning (twelve phrase groups of asking.SYNONYMS for what learners say, and one row taught in two places
# shown once with its second place under it), which found English 71 and Chinese 65 of the tuning draw's 80 (from 68
# and 63) and one more query in each language of round three's own words: English 96, Chinese 96, unchanged. The
# tuning did not carry to questions it did not see; of the 28 misses, 20 have a right place fourth to tenth, behind
# recipes for the same mechanism in other libraries or the course's section on it. The test holds this figure.
MEASURED_3_FRESH_AFTER = {"en": (96, 110), "zh": (96, 110)}
# Round four's draw (RECORD_4), all held out: drawn and written (by writers who read nothing but the bank's rows) and
# committed before round four's recipes were written and before the lookup changed. Measured once on the lookup of
# commit 4b591fe (recipes 55-58 answer round four's 34 questions outside its held-out part; the 8 held-out ones, 4 of
# them in this draw, had no recipe yet): English 96 of 110, Chinese 88 of 110 (96 and 88 of the 102 whose question a
# recipe answers).
MEASURED_4_BEFORE = {"en": (96, 110), "zh": (88, 110)}
# Then once after the lookup counted a recipe's question (its asker's words) three times (tools/ask/index.py,
# QUESTION_WEIGHT), a change chosen on the earlier draws alone (round three's tuning draw 71 / 65 -> 73 / 68 of 80,
# round three's own words 105 / 93 -> 107 / 100 and the fresh draw 96 / 96 -> 97 / 98 of 110, round two's held-out
# part unchanged): English 97 of 110 (97 of 102 whose question a recipe answers, 95 %), Chinese 92 of 110 (92 of 102,
# 90 %).
MEASURED_4_AFTER = {"en": (97, 110), "zh": (92, 110)}
# Measured a third time once recipes 59 answered round four's 8 held-out questions (written from the bank's rows and
# the course's grade, by a writer who did not see these queries), the lookup unchanged: every drawn question now has a
# recipe, and English finds 105 of 110 (95 %), Chinese 99 of 110 (90 %). The test holds this figure.
MEASURED_4_ANSWERED = {"en": (105, 110), "zh": (99, 110)}
# Once recipes 60-65 answered round five's 48 questions outside its held-out part, the lookup unchanged, one English
# query fell to fourth: reinforcement-learning-17's "LoRA plus gradient checkpointing gives a no-grad error", now behind
# round five's recipes on the same cause (peft-21, checkpointing-38: the input embeddings must require grad), which
# answer it as well but are not its own recipe. The test holds this figure, and at least 90 % in each language.
MEASURED_4_HELD = {"en": (104, 110), "zh": (99, 110)}
# The wording leaves library names out, but a model's name is what a learner calls it: these names of the bank's
# libraries are also the models the queries name.
MODEL_NAMES = frozenset({"whisper", "llava", "qwen2.5-vl", "clip", "yolov7", "detr", "yolov5", "dinov2", "dino"})

Place = tuple[str | None, str | None]


@dataclass(frozen=True)
class Query:
    id: str  # the bank id of the question
    lang: str
    text: str


def record(path: Path = RECORD) -> dict[str, Any]:
    """The committed draw, split and queries; a record that is missing or broken is a ValueError naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        needed = {"seed", "held_out", "queries"}
        if not isinstance(data, dict) or not needed <= set(data):
            raise ValueError(f"needs the keys {sorted(needed)}")
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not a record of own-words queries ({error})") from None
    return data


def answered_ids() -> dict[str, dict[str, Any]]:
    """bank id -> the recipe's metadata (``hooklab.recipe``), for every recipe of ``recipes/NN_*.ipynb``."""
    found = {}
    for path in sorted(RECIPES.glob("[0-9][0-9]_*.ipynb")):
        for cell in read_notebook(path)["cells"]:
            recipe = cell.get("metadata", {}).get("hooklab", {}).get("recipe")
            if recipe:
                found[recipe["id"]] = {**recipe, "place": (f"../recipes/{path.name}", cell.get("id"))}
    return found


def population(answered: set[str] | None = None) -> list[str]:
    """Round two's questions that a recipe answers, sorted."""
    ids = [q.id for q in bank.load()]
    pool = bank.round_two_pool(ids, bank.round_one_ids())
    answered = set(answered_ids()) if answered is None else answered
    return sorted(set(pool) & answered)


def round_three_pool() -> list[str]:
    """Round three's questions outside its held-out part, sorted (the population of round three's own words)."""
    earlier = bank.round_one_ids() | bank.round_one_ids(bank.HELD_OUT_2)
    held_out = set(json.loads(bank.HELD_OUT_3.read_text(encoding="utf-8"))["ids"])
    return sorted(set(json.loads(bank.HELD_OUT_3.read_text(encoding="utf-8"))["pool"]) - earlier - held_out)


def round_three_tuning_pool(answered: set[str] | None = None) -> list[str]:
    """Round three's questions outside its held-out part and its own-words draw that a recipe answers, sorted."""
    drawn = set(record(RECORD_3)["held_out"])
    answered = set(answered_ids()) if answered is None else answered
    return sorted((set(round_three_pool()) - drawn) & answered)


def round_three_fresh_pool(answered: set[str] | None = None) -> list[str]:
    """Round three's questions that a recipe answers, its held-out part included, outside round three's own-words
    draw and its tuning draw, sorted (the population of the fresh draw)."""
    earlier = bank.round_one_ids() | bank.round_one_ids(bank.HELD_OUT_2)
    pool = set(json.loads(bank.HELD_OUT_3.read_text(encoding="utf-8"))["pool"]) - earlier
    used = set(record(RECORD_3)["held_out"]) | set(record(RECORD_3_TUNING)["tuning"])
    answered = set(answered_ids()) if answered is None else answered
    return sorted((pool - used) & answered)


def round_four_pool(answered: set[str] | None = None) -> list[str]:
    """The new bank's questions outside every earlier own-words draw, sorted: round three's that a recipe answers
    (outside own_words_3.json, own_words_3_tuning.json and own_words_3_fresh.json) and all of round four's (drawn
    before round four's recipes were written; a question left unanswered counts as not found)."""
    earlier = bank.round_one_ids() | bank.round_one_ids(bank.HELD_OUT_2)
    three = set(json.loads(bank.HELD_OUT_3.read_text(encoding="utf-8"))["pool"]) - earlier
    used = (set(record(RECORD_3)["held_out"]) | set(record(RECORD_3_TUNING)["tuning"])
            | set(record(RECORD_3_FRESH)["held_out"]))
    answered = set(answered_ids()) if answered is None else answered
    four = set(json.loads(bank.HELD_OUT_4.read_text(encoding="utf-8"))["pool"])
    return sorted(((three - used) & answered) | four)


def draw_three(pool: list[str], seed: int = SEED_3, size: int = SIZE_3) -> list[str]:
    """Round three's drawn questions: ``size`` of the sorted pool sampled with ``random.Random(seed)``, sorted.

    >>> draw_three(["a-01", "a-02", "b-01", "b-02"], seed=1, size=2)
    ['a-02', 'b-01']
    """
    return sorted(random.Random(seed).sample(sorted(pool), k=size))


def draw(population: list[str], seed: int) -> list[str]:
    """The population in the order ``random.Random(seed)`` draws it."""
    return random.Random(seed).sample(sorted(population), k=len(population))


def split(population: list[str], seed: int, share: float = TUNING_SHARE) -> tuple[list[str], list[str]]:
    """(the tuning part, the held-out part), each sorted: ``share`` of the questions drawn with ``seed`` to tune on."""
    tuning = sorted(random.Random(seed).sample(sorted(population), k=round(share * len(population))))
    return tuning, sorted(set(population) - set(tuning))


def queries(part: str = "held_out", data: dict[str, Any] | None = None) -> list[Query]:
    """The queries of one part (``"held_out"`` or ``"tuning"``), in the record's order."""
    if part not in ("held_out", "tuning"):
        raise ValueError(f"part is 'held_out' or 'tuning', got {part!r}")
    data = record() if data is None else data
    ids = set(data.get(part, []))
    return [Query(q["id"], q["lang"], q["text"]) for q in data["queries"] if q["id"] in ids]


def _section_of(entries: list[dict[str, Any]]) -> Callable[[str, str], Place | None]:
    """(notebook, cell id) -> the place of the section that cell is in (the last section heading at or before it)."""
    headings: dict[str, dict[str, str]] = {}
    for e in entries:
        if e["kind"] == "section":
            headings.setdefault(e["notebook"], {})[e["cell"]] = e["cell"]
    order: dict[str, list[str | None]] = {}

    def section(notebook: str, cell: str) -> Place | None:
        if notebook not in headings:
            return None
        if notebook not in order:
            order[notebook] = [c.get("id") for c in read_notebook(NOTEBOOKS / notebook)["cells"]]
        ids = order[notebook]
        if cell not in ids:
            return None
        for before in reversed(ids[: ids.index(cell) + 1]):
            if before in headings[notebook]:
                return notebook, before
        return None

    return section


def right_places(entries: list[dict[str, Any]] | None = None) -> dict[str, set[Place]]:
    """bank id -> the places that answer it: its recipe and what its metadata links (see the module's text)."""
    entries = asking._index()[0] if entries is None else entries
    by_id = {e["id"]: e for e in entries}
    places = {(e.get("notebook"), e.get("cell")) for e in entries}
    section = _section_of(entries)
    out: dict[str, set[Place]] = {}
    for rid, recipe in answered_ids().items():
        found: set[Place] = {recipe["place"]}
        for link in recipe.get("course", []):
            notebook, _, cell = link.partition("#")
            if (notebook, cell) in places:
                found.add((notebook, cell))
            elif (inside := section(notebook, cell)) is not None:
                found.add(inside)
        for prefix, key in (("matrix", "matrix"), ("message", "messages")):
            for name in recipe.get(key, []):
                entry = by_id.get(f"{prefix}:{name}")
                if entry is not None:
                    found.add((entry.get("notebook"), entry.get("cell")))
        out[rid] = found
    return out


def rank(query: Query, places: set[Place]) -> int | None:
    """Where the first right place stands among ``course.ask``'s first :data:`K` answers (1-based), or None."""
    for position, hit in enumerate(asking.ask(query.text, k=K, lang=query.lang), start=1):
        if not hit.places().isdisjoint(places):
            return position
    return None


def measure(part: str = "held_out", data: dict[str, Any] | None = None,
            ) -> tuple[dict[str, tuple[int, int]], list[tuple[Query, int | None]]]:
    """(language -> (queries with a right place in the first three, queries), every query with its rank)."""
    places = right_places()
    results = [(q, rank(q, places.get(q.id, set()))) for q in queries(part, data)]
    table = {lang: (sum(r is not None for q, r in results if q.lang == lang), sum(q.lang == lang for q, _ in results))
             for lang in LANGUAGES}
    return table, results


@dataclass(frozen=True)
class Draw:
    """One own-words draw: its record, its population, its seed and size, whether it is for tuning, and what it is."""

    path: Path
    population: Callable[[], list[str]]
    seed: int
    size: int
    tuning: bool
    when: str  # why a second draw is refused
    about: str  # how it was drawn, written into the record


def _draws() -> dict[str, Draw]:
    """The draws ``--draw`` can make, by (round, part): each once."""
    return {
        "3": Draw(RECORD_3, round_three_pool, SEED_3, SIZE_3, False,
                  "round three's questions are drawn once, before any round-three answer is written",
                  "Round three's questions outside its held-out part (recipes/held_out_3.json: pool less ids), "
                  "sampled with random.Random(seed).sample(sorted(pool), k=size), before any round-three answer was "
                  "written. Every query is held out: none is read while tuning the lookup."),
        "3-tuning": Draw(RECORD_3_TUNING, round_three_tuning_pool, SEED_3_TUNING, SIZE_3_TUNING, True,
                         "round three's tuning questions are drawn once",
                         "Round three's questions that a recipe answered, outside its held-out part "
                         "(recipes/held_out_3.json) and outside round three's own-words draw (own_words_3.json), "
                         "sampled with random.Random(seed).sample(sorted(pool), k=size), before the lookup was changed "
                         "for round three. Every query here is for tuning."),
        "3-fresh": Draw(RECORD_3_FRESH, round_three_fresh_pool, SEED_3_FRESH, SIZE_3_FRESH, False,
                        "the fresh questions are drawn once",
                        "Round three's questions that a recipe answers (its held-out part, recipes/held_out_3.json, "
                        "included), outside round three's own-words draw (own_words_3.json) and its tuning draw "
                        "(own_words_3_tuning.json), sampled with random.Random(seed).sample(sorted(pool), k=size) "
                        "before the lookup was tuned on the tuning draw for Chinese. Every query is held out: none is "
                        "read while tuning the lookup, and each is measured once before and once after that tuning."),
        "4": Draw(RECORD_4, round_four_pool, SEED_4, SIZE_4, False, "the round-four questions are drawn once",
                  "The new bank's questions outside every earlier own-words draw: round three's that a recipe answers "
                  "(outside own_words_3.json, own_words_3_tuning.json and own_words_3_fresh.json) and all 42 of "
                  "round four's (recipes/held_out_4.json's pool), sampled with "
                  "random.Random(seed).sample(sorted(pool), k=size) before round four's recipes were written and "
                  "before the lookup was changed again. Every query is held out: none is read while tuning the "
                  "lookup; a question no recipe answers counts as not found."),
    }


def _draw_once(draw: Draw) -> int:
    """Draw ``draw.size`` of its population with its seed into a new record (its queries are written afterwards); a
    record that exists is never drawn again."""
    if draw.path.exists():
        print(f"error: {draw.path.relative_to(ROOT)} exists: {draw.when}", file=sys.stderr)
        return 1
    pool = draw.population()
    drawn = draw_three(pool, draw.seed, draw.size)
    parts = {"tuning": drawn, "held_out": []} if draw.tuning else {"held_out": drawn}
    draw.path.write_text(json.dumps({"seed": draw.seed, "size": draw.size, "pool": pool, **parts, "queries": [],
                                     "draw": draw.about}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"drew {len(drawn)} of the {len(pool)} questions (seed {draw.seed}): {draw.path.relative_to(ROOT)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.recipes.own_words", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tuning", action="store_true", help="measure the tuning part instead of the held-out part")
    parser.add_argument("--misses", action="store_true", help="list the queries with no right place in the first 3")
    parser.add_argument("--round", type=int, choices=(2, 3, 4), default=2,
                        help="round two's record, round three's or round four's")
    parser.add_argument("--fresh", action="store_true", help="round three's fresh draw (own_words_3_fresh.json)")
    parser.add_argument("--draw", action="store_true", help="draw round three's questions (once)")
    args = parser.parse_args(argv)
    if args.draw:
        if args.round not in (3, 4):
            parser.error("--draw is for --round 3 or 4 (round two's draw is recorded)")
        key = "4" if args.round == 4 else "3-fresh" if args.fresh else "3-tuning" if args.tuning else "3"
        return _draw_once(_draws()[key])
    if args.fresh and (args.round != 3 or args.tuning):
        parser.error("--fresh is round three's fresh held-out draw: use it with --round 3, without --tuning")
    if args.round == 4 and args.tuning:
        parser.error("round four's draw is all held out: it has no tuning part")
    chosen = (RECORD_4 if args.round == 4 else RECORD_3_FRESH if args.fresh else RECORD_3_TUNING if args.tuning
              else RECORD_3)
    data = record(chosen) if args.round in (3, 4) else None
    part = "tuning" if args.tuning else "held_out"
    table, results = measure(part, data)
    print(f"| {part} part | a right place in the first three | share |\n|---|---|---|")
    for lang, (found, asked) in table.items():
        print(f"| {lang} | {found} of {asked} | {found / asked:.0%} |" if asked else f"| {lang} | 0 of 0 | - |")
    if args.round in (3, 4):
        answered = set(answered_ids())
        for lang in LANGUAGES:
            mine = [(q, r) for q, r in results if q.lang == lang and q.id in answered]
            print(f"| {lang}, questions a recipe answers | {sum(r is not None for _, r in mine)} of {len(mine)} | |")
    if args.misses:
        for query, position in results:
            if position is None:
                top = [f"{h.kind}:{h.title('en')[:50]}" for h in asking.ask(query.text, k=K, lang="en")]
                print(f"miss {query.id} [{query.lang}] {query.text}\n    got {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
