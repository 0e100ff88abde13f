"""Each library's rows of the library matrix, in short: what ``course.profile`` prints first and each library's page
opens with (hooklab/course/assets/profiles/library_rows.json, made from docs/library_matrix.json).

``python -m tools.profiles.rows [--write | --check]``; ``python -m tools.profiles.cells --write`` writes it too.

For each library: how many of its operations were observed and, for each operation that changes what a hook does,
which hooks behave otherwise registered before it and registered after it, which registering after it fixes (the
matrix's own proof: the "after" cell is the baseline), and the differences seen in the most cells, in both languages.
The worst operation first (the most unusual cells), then by name.

>>> matrix = {"families": ["forward-hook", "tensor-hook"], "operations": {"lib": {"observed": 2}},
...           "cells": {"lib:a|forward-hook|before": {}, "lib:b|forward-hook|before": {}},
...           "unusual": {"cells": {"lib:a|forward-hook|before": ["never fires"],
...                                 "lib:a|tensor-hook|before": ["never fires"]},
...                       "fixes": {"lib:a|forward-hook|before": {"fix": "register the hook after the operation"}}}}
>>> row = summary(matrix)["libraries"]["lib"]
>>> row["operations"][0]["name"], row["operations"][0]["before"], row["operations"][0]["fixed"], row["same"]
('a', ['forward-hook', 'tensor-hook'], ['forward-hook'], ['b'])
>>> row["operations"][0]["most"]
[{'en': 'never fires', 'zh': '再也不触发', 'cells': 2}]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LIBRARY_MATRIX = ROOT / "docs" / "library_matrix.json"
ROWS = ROOT / "hooklab" / "course" / "assets" / "profiles" / "library_rows.json"
ABOUT = ("Each library's rows of the library matrix (docs/library_matrix.json) in short, the worst operation first: "
         "the hooks that behave otherwise registered before and after it, those registering after it fixes, the "
         "differences seen in the most cells (python -m tools.profiles.rows --write)")
# The matrix's words for how a cell differs, in Chinese (the matrix keeps the English ones)
HOW_ZH = {"the operation raised": "操作本身报错", "could not be registered": "注册不上",
          "registered where it could not be without the operation": "不做这个操作时注册不上，做了以后能注册",
          "fires during the operation": "操作期间就触发", "never fires": "再也不触发", "fires otherwise": "触发次数不同",
          "given another object": "拿到的是别的对象",
          "given the object it was registered on, no longer at its place": "拿到的是注册时的那个对象，它已不在原位",
          "fires after handle.remove()": "handle.remove() 之后还触发", "a run raises": "运行时报错",
          "a run that raised no longer raises": "原来报错的运行不再报错"}


def _family_order(families: list[str], keys: list[str], when: str) -> list[str]:
    named = {key.split("|")[1] for key in keys if key.endswith(f"|{when}")}
    return [family for family in families if family in named]


def library(slug: str, matrix: dict[str, Any]) -> dict[str, Any] | None:
    """Library ``slug``'s rows in short; None when none of its operations was observed."""
    standing = matrix.get("operations", {}).get(slug)
    if not standing or not standing["observed"]:
        return None
    families, odd = matrix["families"], matrix["unusual"]
    observed = sorted({key.split("|")[0] for key in matrix["cells"] if key.startswith(f"{slug}:")})
    changing = []
    for operation in observed:
        keys = [key for key in odd["cells"] if key.split("|")[0] == operation]
        if not keys:
            continue
        hows = Counter(how for key in keys for how in odd["cells"][key])
        changing.append((-len(keys), {
            "name": operation.split(":", 1)[1], "cells": len(keys),
            "before": _family_order(families, keys, "before"), "after": _family_order(families, keys, "after"),
            "fixed": _family_order(families, [key for key in keys if key in odd["fixes"]], "before"),
            "most": [{"en": how, "zh": HOW_ZH.get(how, how), "cells": n} for how, n in hows.most_common(3)]}))
    changing.sort(key=lambda pair: (pair[0], pair[1]["name"]))
    named = {row["name"] for _, row in changing}
    return {"observed": len(observed), "operations": [row for _, row in changing],
            "same": [op.split(":", 1)[1] for op in observed if op.split(":", 1)[1] not in named]}


def summary(matrix: dict[str, Any]) -> dict[str, Any]:
    """Every library's rows in short, as library_rows.json stores them."""
    rows = {slug: library(slug, matrix) for slug in sorted(matrix.get("operations", {}))}
    return {"about": ABOUT, "families": len(matrix["families"]),
            "libraries": {slug: row for slug, row in rows.items() if row}}


def text(matrix: dict[str, Any]) -> str:
    return json.dumps(summary(matrix), indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.profiles.rows", description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help=f"write {ROWS.relative_to(ROOT)}")
    mode.add_argument("--check", action="store_true", help="exit 1 when the committed file is not made from the matrix")
    args = parser.parse_args(argv)
    made = text(json.loads(LIBRARY_MATRIX.read_text(encoding="utf-8")))
    if args.write:
        ROWS.write_text(made, encoding="utf-8")
        print(f"wrote {ROWS.relative_to(ROOT)}")
        return 0
    if not ROWS.exists() or ROWS.read_text(encoding="utf-8") != made:
        print(f"{ROWS.relative_to(ROOT)} is not made from {LIBRARY_MATRIX.relative_to(ROOT)}: "
              "python -m tools.profiles.rows --write", file=sys.stderr)
        return 1
    print(f"{ROWS.relative_to(ROOT)} is made from {LIBRARY_MATRIX.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
