"""What each check costs, and the table of it in ``docs/maintainers/tests.md``.

Every run under the gate writes ``build/gate/last-run.json``: the worker-seconds of each check it ran (setup, call
and teardown of all its tests), the number of tests, their outcomes, the wall time and the load. ``python -m
tools.gate costs`` takes a run's figures into ``tests/gate/costs.json`` (a check measured now replaces its old
figure; only a run of the push form, ``--every`` or ``./course test``, is taken: ``--all`` runs the sweeps, whose
cost is another check's) and writes the table again.

>>> protects_of_text("'''Every recipe runs on its own: one recipe at a time.\\n\\nMore.'''")
'Every recipe runs on its own: one recipe at a time.'
"""
from __future__ import annotations

import ast
import datetime
import json
import os
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from tools.gate import record
from tools.gate.checks import ROOT, Check, checks
from tools.gate.plan import FAST_S, PARTS, UNKNOWN_S, rotation_parts

LAST_RUN = ROOT / "build" / "gate" / "last-run.json"
TABLE_FILE = ROOT / "docs" / "maintainers" / "tests.md"
BEGIN, END = "<!-- gate-table: python -m tools.gate table writes this part; do not edit it by hand -->", \
    "<!-- /gate-table -->"


def write_last_run(plan: dict[str, Any], seconds: dict[str, float], tests: dict[str, int],
                   outcomes: dict[str, list[str]], wall: float) -> None:
    try:
        load = "/".join(f"{a:.1f}" for a in os.getloadavg())
    except OSError:
        load = "unknown"
    out = Path(plan.get("root") or ROOT) / LAST_RUN.relative_to(ROOT)  # the planned tree's, not always this one's
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "mode": plan.get("mode"), "commit": plan.get("commit"), "date": datetime.date.today().isoformat(),
        "wall": round(wall, 1), "load average at the end": load, "cores": os.cpu_count(),
        "seconds": {c: round(s, 2) for c, s in sorted(seconds.items())}, "tests": tests, "outcomes": outcomes,
    }, indent=1), encoding="utf-8")


def check_of_junit(classname: str, name: str, root: Path = ROOT) -> str:
    """The check of a JUnit test case (pytest's ``classname``: the dotted path of the file, and a class)."""
    if ".ipynb" in classname:
        head, _, tail = classname.partition(".ipynb")
        return head.replace(".", "/", 1) + ".ipynb" + tail
    parts = classname.split(".")
    for k in range(len(parts), 0, -1):
        path = "/".join(parts[:k]) + ".py"
        if (root / path).is_file():
            member = re.search(r"\[(.*)\]$", name)
            from tools.gate.checks import POPULATIONS

            return f"{path}::{member.group(1)}" if path in POPULATIONS and member else path
    return classname


def run_from_junit(path: Path, root: Path = ROOT) -> dict[str, Any]:
    """A run's figures as ``build/gate/last-run.json`` holds them, read from pytest's JUnit XML."""
    import xml.etree.ElementTree as ET

    suite = ET.parse(path).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    seconds: dict[str, float] = defaultdict(float)
    tests: dict[str, int] = defaultdict(int)
    for case in suite.iter("testcase"):
        check = check_of_junit(case.get("classname", ""), case.get("name", ""), root)
        seconds[check] += float(case.get("time", 0))
        tests[check] += 1
    return {"mode": "every", "commit": "", "date": (suite.get("timestamp") or "")[:10],
            "wall": float(suite.get("time", 0)), "cores": None, "load average at the end": "unknown",
            "seconds": dict(seconds), "tests": dict(tests)}


def main(argv: list[str]) -> int:
    """``costs [FILE]``: FILE a run's last-run.json (default: the last run's) or pytest's JUnit XML (``.xml``)."""
    source = Path(argv[0]) if argv else LAST_RUN
    if not source.is_file():
        print(f"{source}: no run to read (./course test --every writes one)", file=sys.stderr)
        return 2
    run = run_from_junit(source) if source.suffix == ".xml" else json.loads(source.read_text(encoding="utf-8"))
    if run.get("mode") not in ("every", "push", "touched", "named"):
        print(f"{source}: a run of mode {run.get('mode')!r}; its sweeps are not the push form whose cost the "
              "gate plans with (run ./course test --every)", file=sys.stderr)
        return 2
    data = record.load(record.COSTS)
    found = data.setdefault("checks", {})
    known = {c.id for c in checks()}
    found.update({c: round(s, 1) for c, s in run["seconds"].items() if c in known or "::" in c})
    for gone in [c for c in found if "::" not in c and c not in known]:  # a file removed or renamed
        del found[gone]
    data["about"] = ("each check's worker-seconds in its push form (setup, call and teardown of its tests), from a run "
                     "of python -m tools.gate measure; read by tools/gate/plan.py")
    data["measured"] = {"date": run.get("date"), "commit": run.get("commit"), "cores": run.get("cores"),
                        "load average at the end": run.get("load average at the end"), "wall": run.get("wall")}
    record.save(record.COSTS, data)
    write_table()
    print(f"tests/gate/costs.json: {len(run['seconds'])} checks measured; "
          f"{TABLE_FILE.relative_to(ROOT)}: the table written again")
    return 0


# ----------------------------------------------------------------------------------------------- the table
def protects_of_text(source: str) -> str:
    """A test module's first sentence of its docstring: what it protects."""
    try:
        doc = ast.get_docstring(ast.parse(source)) or ""
    except SyntaxError:
        doc = ""
    first = " ".join(doc.split("\n\n")[0].split())
    match = re.match(r"(.+?\.)(\s|$)", first)
    return (match.group(1) if match else first)[:160]


def protects(check: Check) -> str:
    path = ROOT / check.file
    if check.kind in ("notebook", "recipe-notebook"):
        where = "the scalar CPU kernels" if check.scalar else "the machine's CPU kernels"
        what = "the notebook's" if check.kind == "notebook" else "the recipe notebook's"
        return f"{what} committed outputs, run under {where}"
    if not path.is_file():
        return ""
    if check.kind == "doctest":
        return "the module's docstring examples"
    return protects_of_text(path.read_text(encoding="utf-8", errors="replace"))


def standing(found: list[Check], costs: dict[str, float]) -> dict[str, str]:
    """Each check's tier on a push that touched nothing: fast, notebooks, or its rotation part."""
    out, rotated = {}, {}
    for c in found:
        cost = costs.get(c.id, UNKNOWN_S)
        if c.kind == "doctest" or (c.kind == "test" and c.id in costs and cost <= FAST_S):
            out[c.id] = "fast"
        elif c.kind == "notebook" and not c.scalar:
            out[c.id] = "notebooks"
        else:
            rotated[c.id] = cost
    out.update({c: f"rotation {b + 1}/{PARTS}" for c, b in rotation_parts(rotated, costs).items()})
    return out


def table(found: list[Check], costs: dict[str, float], measured: dict[str, Any]) -> str:
    tiers = standing(found, costs)
    by_tier: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for c in found:
        by_tier[tiers[c.id]][0] += 1
        by_tier[tiers[c.id]][1] += costs.get(c.id, UNKNOWN_S)
    always = sum(by_tier[t][1] for t in ("fast", "notebooks"))
    parts = [by_tier[f"rotation {k + 1}/{PARTS}"][1] for k in range(PARTS)]
    lines = [BEGIN, "",
             f"测量 / Measured: {measured.get('date')}, commit {measured.get('commit')}, "
             f"{measured.get('cores')} 核 / cores, 结束时的负载 / load average at the end "
             f"{measured.get('load average at the end')}; `python -m tools.gate measure` 重新测量 / measures again.",
             "",
             "| 层 / tier | 检查 / checks | 工作秒 / worker-seconds |", "|---|---:|---:|"]
    for tier in sorted(by_tier, key=lambda t: (("fast", "notebooks").index(t), t) if t in ("fast", "notebooks") else (2, t)):
        n, s = by_tier[tier]
        lines.append(f"| {tier} | {n:.0f} | {s:,.0f} |")
    lines += ["", f"一次没有改动任何东西的推送 / A push that touched nothing: {always:,.0f} + 一个轮换部分 / one "
                  f"rotation part ({min(parts):,.0f}–{max(parts):,.0f}) worker-seconds; "
                  f"全部检查各一次 / every check once: {sum(s for _n, s in by_tier.values()):,.0f}.", "",
              "<details><summary>每个检查 / every check</summary>", "",
              "| 检查 / check | 层 / tier | 工作秒 / worker-s | 保护什么 / what it protects |", "|---|---|---:|---|"]
    for c in sorted(found, key=lambda c: (-costs.get(c.id, 0.0), c.id)):
        cost = f"{costs[c.id]:.1f}" if c.id in costs else "?"
        text = protects(c).replace("|", "\\|")
        lines.append(f"| `{c.id}` | {tiers[c.id]} | {cost} | {text} |")
    lines += ["", "</details>", "", END]
    return "\n".join(lines)


def write_table() -> None:
    data = record.load(record.COSTS)
    text = TABLE_FILE.read_text(encoding="utf-8")
    new = table(checks(), data.get("checks", {}), data.get("measured", {}))
    if BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = head + new + tail
    else:
        text = text.rstrip("\n") + "\n\n" + new + "\n"
    TABLE_FILE.write_text(text, encoding="utf-8")

