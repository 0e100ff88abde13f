"""The "what works where" table of the maintainers' manual (docs/maintainers/package.md), from the zoo test's own data (zoo.py, zoo_distributed.py).

    .venv/bin/python tests/library/zoo_table.py          # Markdown, to paste into docs/maintainers/package.md

The table states what tests/library/test_zoo.py asserts, cell by cell: it cannot claim more than the test shows;
test_zoo.py checks that the manual holds exactly this text (a golden text).
"""
from __future__ import annotations

from zoo import EXPLAIN, NOTES, SPECS, TOOLS, expected
from zoo_distributed import DIST_SPECS, EXPLAIN as DIST_EXPLAIN, NOTES as DIST_NOTES

SPECS, NOTES, EXPLAIN = SPECS + DIST_SPECS, NOTES + DIST_NOTES, {**EXPLAIN, **DIST_EXPLAIN}

MARKS = {"works": "✓", "refuses": "refuses", "n/a": "–", "xfail": "✗"}


def cell(spec, tool: str) -> str:
    want = expected(spec, tool)
    return MARKS[want.split(":")[0]]


def table() -> str:
    """The table, its legend and its notes, as the manual shows them (Markdown)."""
    lines: list[str] = []
    tools = list(TOOLS)
    lines.append("| model | " + " | ".join(f"`{t}`" if " " not in t else t for t in tools) + " |")
    lines.append("|---|" + "---|" * len(tools))
    for spec in SPECS:
        name = f"{spec.name} †" if spec.heavy else spec.name
        lines.append(f"| {name} | " + " | ".join(cell(spec, t) for t in tools) + " |")
    lines.append("")
    lines.append("✓ works (the test checks what it recorded against plain PyTorch) · refuses: a clear error saying "
          "why and what to do instead · – not applicable · ✗ known defect · † full size: run with "
          "HOOKLAB_ZOO_HEAVY=1 (about 10 minutes on 2 busy cores)")
    for note in NOTES:
        lines.append(f"- {note}")
    notes = {}
    for spec in SPECS:
        for tool in tools:
            want = expected(spec, tool)
            if want.startswith(("refuses", "xfail")):
                notes.setdefault(want, []).append(f"{spec.name} / {tool}")
    for want, where in notes.items():
        kind = want.split(":")[0]
        lines.append(f"- {MARKS[kind]} ({', '.join(where)}): {EXPLAIN.get(want, want)}")
    for spec in SPECS:
        if spec.note:
            lines.append(f"- {spec.name}: {spec.note}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
