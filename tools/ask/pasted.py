"""How often ``course.ask`` puts the place that explains a pasted error message among its first three answers, for
messages pasted as users paste them (issue 65).

    python -m tools.ask.pasted            # the table: found in the first three, per source and per way of pasting
    python -m tools.ask.pasted --misses   # also every case not found
    python -m tools.ask.pasted --draw     # draw the cases (once: the file is committed; --draw refuses to redraw)

The cases (:data:`CASES`, ``tools/ask/pasted_messages.json``) were drawn at random with a committed seed before the
lookup was tuned on them, from two sources:

- ``index``: the message index's triggered texts (``docs/hook_messages.json``, each row's ``trigger_example``: the
  text a run printed, names and numbers filled in), of the rows that explain a message in a notebook;
- ``bank``: the messages the bank's askers quote (``recipes/bank/*.jsonl``) of the questions a recipe answers, that
  say more than an exception's name (``AssertionError`` alone points at nothing).

Each is pasted one of four ways, drawn with it: with the exception's class (``RuntimeError: …``), as a traceback's
last lines, after a library's or a launcher's prefix (``[rank0]:``, a warning's ``path:line: UserWarning:``), or
after the file-path line of the frame that raised. A case is found when one of the first three answers is a right
place: for an index row, its own row or the cell that explains it; for a bank message, the recipe of its question;
for either, a place whose message is the same message (the course's row for it, a recipe quoting the same text: a
paste cannot tell them apart). tests/tools/test_ask_pasted.py holds the shares at :data:`FLOOR` and
:data:`FIRST_FLOOR`.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

from hooklab.course.asking import _index, ask, message_key

from .index import MESSAGES, ROOT, _bank, recipe_entries

CASES = Path(__file__).with_name("pasted_messages.json")
SEED = 65  # the number: drawn once, before tuning
DRAW = {"index": 150, "bank": 60}  # cases per source (the bank's answered messages number fewer: all of them)
K = 3
# Measured (210 cases): before the lookup matched messages as runs of their text, 209 in the first three (203 first);
# after, 210 (203 first). The floors: what is reached, less two cases.
FLOOR = 0.99  # the share with a right place in the first three never falls below it
FIRST_FLOOR = 0.95  # the share with a right place first
STYLES = ("class", "traceback", "prefix", "path")
_CLASS = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Warning|Interrupt))\s*:\s*")


def exception_class(row: dict[str, Any]) -> str:
    """The class a user sees before the message: what the row's call raises or warns with."""
    call = row.get("call") or ""
    if call.startswith("raise "):
        return call.removeprefix("raise ").split(".")[-1]
    if call in ("assert",):
        return "AssertionError"
    if "warn" in call or row.get("kind") == "warning" or call == "@deprecated":
        return "UserWarning"
    if "AttributeError" in call:
        return "AttributeError"
    return "RuntimeError"  # TORCH_CHECK, a C++ string, a graph break's error


def pasted(text: str, cls: str, style: str, library: str) -> str:
    """``text`` as a user pastes it, in ``style`` (one of :data:`STYLES`)."""
    line = text if _CLASS.match(text) else f"{cls}: {text}"
    if style == "class":
        return line
    if style == "traceback":
        return ('Traceback (most recent call last):\n  File "/home/user/project/train.py", line 57, in <module>\n'
                "    loss = step(model, batch)\n  File \"/home/user/project/train.py\", line 31, in step\n"
                f"    out = model(batch)\n{line}")
    if style == "prefix":
        if cls.endswith("Warning"):
            return f"/opt/conda/lib/python3.11/site-packages/{library}/utils.py:412: {line}\n  warnings.warn("
        return f"[rank0]: {line}"
    return f'  File "/content/drive/MyDrive/{library}_experiment.py", line 88, in forward\n{line}'


def _library(row: dict[str, Any]) -> str:
    source = str(row.get("library") or row.get("source") or "torch").split()[0].lower()
    return re.sub(r"[^a-z0-9_]", "_", source) or "torch"


def draw() -> dict[str, Any]:
    """The cases, drawn with :data:`SEED` from today's message index and bank."""
    rng = random.Random(SEED)
    rows = json.loads(MESSAGES.read_text(encoding="utf-8"))["messages"]
    index_rows = [r for r in rows if r.get("trigger_example") and r.get("notebook")]
    answered = {e["id"].removeprefix("recipe:") for e in recipe_entries()}
    bank = [q for q in _bank().values() if q["id"] in answered and q.get("message")
            and len(message_key(_CLASS.sub("", q["message"])).split()) >= 3]
    cases = []
    for source, pool in (("index", sorted(index_rows, key=lambda r: r["id"])), ("bank", sorted(bank, key=lambda q: q["id"]))):
        for row in rng.sample(pool, min(DRAW[source], len(pool))):
            style = rng.choice(STYLES)
            if source == "index":
                text, cls = row["trigger_example"], exception_class(row)
                case = {"source": "index", "row": row["id"], "message": row["text"], "notebook": row["notebook"],
                        "cell": row.get("cell_id")}
            else:
                found = _CLASS.match(row["message"])
                text, cls = row["message"], found.group(1) if found else "RuntimeError"
                case = {"source": "bank", "row": row["id"], "message": row["message"]}
            cases.append({**case, "style": style, "paste": pasted(text, cls, style, _library(row))})
    return {"about": "Error messages pasted as users paste them, drawn at random (seed below) before course.ask was "
                     "tuned on them; written by `python -m tools.ask.pasted --draw`; do not edit.",
            "seed": SEED, "draw": DRAW, "pools": {"index": len(index_rows), "bank": len(bank)}, "cases": cases}


def cases() -> list[dict[str, Any]]:
    return json.loads(CASES.read_text(encoding="utf-8"))["cases"]


def _key(text: str | None) -> str:
    return message_key(_CLASS.sub("", text or "")) if text else ""


def right(case: dict[str, Any], entry: dict[str, Any]) -> bool:
    """Whether ``entry`` is a right answer to ``case`` (see the module's docstring)."""
    if case["source"] == "index":
        own = entry["id"] == f"message:{case['row']}" or (
            case.get("cell") and (entry.get("notebook"), entry.get("cell")) == (case["notebook"], case["cell"]))
    else:
        own = entry["id"] == f"recipe:{case['row']}"
    same = _key(entry.get("message")) == _key(case["message"]) and bool(_key(case["message"]))
    return bool(own or same)


def rank(case: dict[str, Any]) -> int | None:
    """Where the first right answer stands among the first :data:`K` (1-based), or None."""
    entries = _index()[0]
    by_place: dict[tuple[Any, Any, Any], list[dict[str, Any]]] = {}
    for entry in entries:  # ask() answers one hit per place: any entry at that place may be the right one
        place = (entry.get("notebook"), entry.get("cell"), None if entry.get("cell") else entry.get("page"))
        by_place.setdefault(place, []).append(entry)
    for position, hit in enumerate(ask(case["paste"], k=K, lang="en"), start=1):
        shown = [(hit.notebook, hit.cell, None if hit.cell else hit.page),
                 *((notebook, cell, None if cell else page) for notebook, cell, page in hit.also)]
        if any(right(case, entry) for place in shown for entry in by_place.get(place, [])):
            return position
    return None


def table(results: list[tuple[dict[str, Any], int | None]]) -> dict[str, tuple[int, int, int]]:
    """"all", each source and each style -> (found in the first three, found first, asked)."""
    out: dict[str, tuple[int, int, int]] = {}
    for case, position in results:
        for group in ("all", f"source {case['source']}", f"style {case['style']}"):
            found, first, asked = out.get(group, (0, 0, 0))
            out[group] = (found + (position is not None), first + (position == 1), asked + 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.ask.pasted", description=__doc__.split("\n\n")[0])
    parser.add_argument("--draw", action="store_true", help=f"draw the cases into {CASES.relative_to(ROOT)} (once)")
    parser.add_argument("--misses", action="store_true", help="list the cases not in the first three")
    args = parser.parse_args(argv)
    if args.draw:
        if CASES.exists():
            print(f"{CASES.relative_to(ROOT)} exists: the cases are drawn once, before tuning", file=sys.stderr)
            return 1
        drawn = draw()
        CASES.write_text(json.dumps(drawn, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {CASES.relative_to(ROOT)}: {len(drawn['cases'])} cases")
        return 0
    results = [(case, rank(case)) for case in cases()]
    print("| cases | the explaining place in the first three | share | first | share |\n|---|---|---|---|---|")
    for group, (found, first, asked) in table(results).items():
        print(f"| {group} | {found} of {asked} | {found / asked:.0%} | {first} of {asked} | {first / asked:.0%} |")
    if args.misses:
        for case, position in results:
            if position != 1:
                first = ask(case["paste"], k=1, lang="en")
                print(f"{'not first' if position else 'miss'} {case['source']} {case['row']} [{case['style']}] {case['message'][:90]!r} -> "
                      f"{first[0].kind + ' ' + first[0].title('en')[:70] if first else 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
