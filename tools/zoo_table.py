"""Print the README's "what works where" table from the zoo test's own data (tests/library/zoo.py).

    .venv/bin/python tools/zoo_table.py          # Markdown, to paste into README.md

The table states what tests/library/test_zoo.py asserts, cell by cell: it cannot claim more than the test shows.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "library"))

from zoo import EXPLAIN, NOTES, SPECS, TOOLS, expected  # noqa: E402
from zoo_distributed import DIST_SPECS, EXPLAIN as DIST_EXPLAIN, NOTES as DIST_NOTES  # noqa: E402

SPECS, NOTES, EXPLAIN = SPECS + DIST_SPECS, NOTES + DIST_NOTES, {**EXPLAIN, **DIST_EXPLAIN}

MARKS = {"works": "✓", "refuses": "refuses", "n/a": "–", "xfail": "✗"}


def cell(spec, tool: str) -> str:
    want = expected(spec, tool)
    return MARKS[want.split(":")[0]]


def main() -> None:
    tools = list(TOOLS)
    print("| model | " + " | ".join(f"`{t}`" if " " not in t else t for t in tools) + " |")
    print("|---|" + "---|" * len(tools))
    for spec in SPECS:
        name = f"{spec.name} †" if spec.heavy else spec.name
        print(f"| {name} | " + " | ".join(cell(spec, t) for t in tools) + " |")
    print()
    print("✓ works (the test checks what it recorded against plain PyTorch) · refuses: a clear error saying "
          "why and what to do instead · – not applicable · ✗ known defect · † full size: run with "
          "HOOKLAB_ZOO_HEAVY=1 (about 10 minutes on 2 busy cores)")
    for note in NOTES:
        print(f"- {note}")
    notes = {}
    for spec in SPECS:
        for tool in tools:
            want = expected(spec, tool)
            if want.startswith(("refuses", "xfail")):
                notes.setdefault(want, []).append(f"{spec.name} / {tool}")
    for want, where in notes.items():
        kind = want.split(":")[0]
        print(f"- {MARKS[kind]} ({', '.join(where)}): {EXPLAIN.get(want, want)}")
    for spec in SPECS:
        if spec.note:
            print(f"- {spec.name}: {spec.note}")


if __name__ == "__main__":
    main()
