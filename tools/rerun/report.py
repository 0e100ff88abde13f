"""The report of ``./course rerun``: the unit tests' result (pytest's JUnit XML), one line per notebook and, per
changed cell, what :mod:`tools.rerun.compare` found (its kind, the diff, the claims and prose it touches); the exit
status. Pure functions, unit-tested on small synthetic notebooks (``tests/tools/test_rerun.py``).
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from .claims import maximal
from .compare import CellChange, NotebookResult

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class UnitResult:
    returncode: int
    tests: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None
    seconds: float | None = None
    summary_line: str = ""

    @property
    def passed(self) -> int:
        return self.tests - len(self.failed) - len(self.skipped)

    @property
    def ok(self) -> bool:
        return self.error is None and self.returncode == 0 and not self.failed


def read_junit(path: Path, *, returncode: int) -> UnitResult:
    result = UnitResult(returncode=returncode)
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        result.tests += 1
        if case.get("classname"):
            test_id = f"{case.get('classname').replace('.', '/')}.py::{case.get('name')}"
        else:  # a whole module skipped or failed at collection
            test_id = f"{(case.get('name') or '?').replace('.', '/')}.py"
        for child in case:
            text = child.get("message") or child.text or ""
            if text == "collection skipped" and child.text:  # the reason is in the text: (path, line, 'Skipped: ...')
                found = re.search(r"Skipped: (.*?)['\"]\)\s*$", child.text.strip())
                text = found.group(1) if found else child.text
            message = text.strip().splitlines()
            first = message[0][:300] if message else ""
            if child.tag in ("failure", "error"):
                result.failed.append((test_id, first))
                break
            if child.tag == "skipped":
                result.skipped.append((test_id, first))
                break
    return result


def fence(text: str, lang: str = "") -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def one_line(units: UnitResult | None, results: list[NotebookResult]) -> str:
    parts = []
    if units is not None:
        parts.append("unit tests: " + (units.summary_line or (units.error or f"exit {units.returncode}")))
    if results:
        changed = sum(len(r.torch_changes) for r in results)
        drift = sum(len(r.drift) for r in results)
        figures = sum(1 for r in results for f in r.figures if not f.machine_drift)
        skipped = sum(1 for r in results if r.skipped)
        parts.append(f"notebooks: {changed} changed cell(s), {figures} changed figure(s), "
                     f"{drift} cell(s) of machine drift, {skipped} notebook(s) skipped")
    return "; ".join(parts)


def exit_code(units: UnitResult | None, results: list[NotebookResult]) -> int:
    if units is not None and not units.ok:
        return 1
    for r in results:
        if r.torch_changes or r.aborted or any(not f.machine_drift for f in r.figures):
            return 1
    return 0


def _folder(name: str) -> str:
    """Where a re-run notebook lives: the course's notebooks/, or recipes/ (the recipes are re-run too)."""
    return "recipes" if (ROOT / "recipes" / name).is_file() and not (ROOT / "notebooks" / name).is_file() else "notebooks"


def _nb_short(name: str) -> str:
    return ("recipes " if _folder(name) == "recipes" else "") + name[:2]


def render_report(meta: dict, units: UnitResult | None, results: list[NotebookResult]) -> str:
    v = meta.get("versions", {})
    req = meta.get("requested", {})
    lines = [f"# Course re-run: {meta.get('name', '?')}", ""]
    lines += [
        f"- torch **{v.get('torch', req.get('torch'))}**, torchvision **{v.get('torchvision') or 'none'}**"
        + (f", with {', '.join(f'`{w}`' for w in req.get('with', []))}" if req.get("with") else "")
        + f"; numpy {v.get('numpy', '?')}, Python {v.get('python', '?')}",
        f"- CPU: {v.get('cpu_capability', '?')} kernels, {meta.get('host', v.get('machine', '?'))}",
        "- fixed environment: " + " ".join(f"`{k}={val}`" for k, val in meta.get("fixed_env", {}).items()),
        "- compared as nbval compares (`tests/sanitize.cfg`, images left out); \"Cell N\" counts code cells "
        "from 0 like nbval; diffs are `- committed` / `+ fresh`",
        "- baseline: the same notebooks run in the locked `.venv` on this machine; a cell that differs there too "
        "is **machine drift**, listed apart and not counted as a change",
        "",
        f"**Result**: {one_line(units, results)} → exit {exit_code(units, results)}", "",
    ]
    if units is not None:
        lines += ["## hooklab's unit tests", ""]
        if units.error:
            lines += [f"Could not run: {units.error}", ""]
        else:
            lines += [f"`{units.summary_line or f'{units.passed} passed, {len(units.failed)} failed'}`"
                      + (f" ({units.seconds:.0f} s)" if units.seconds and " in " not in units.summary_line else ""),
                      ""]
        if units.failed:
            lines += ["Failed:", ""] + [f"- `{t}`: {m}" for t, m in units.failed] + [""]
        if units.skipped:
            reasons: dict[str, list[str]] = {}
            for t, m in units.skipped:
                reasons.setdefault(m, []).append(t)
            lines += ["Skipped, by reason:", ""]
            for reason, tests in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
                example = tests[0] + (f" and {len(tests) - 1} more" if len(tests) > 1 else "")
                lines.append(f"- {len(tests)} × {reason or '(no reason given)'} (`{example}`)")
            lines.append("")
    if meta.get("library_only"):
        lines += ["Only the library's tests ran (`--library-only`: not the course's exercises, notebook format, export, "
                  "lab or site tests); notebooks not run.", ""]
        return "\n".join(lines)
    if meta.get("unit_only"):
        lines += ["Notebooks not run (`--unit-only`).", ""]
        return "\n".join(lines)
    lines += ["## Notebooks", "",
              "| notebook | code cells | compared | changed (PyTorch) | machine drift | figures changed | run time | note |",
              "|---|---|---|---|---|---|---|---|"]
    for r in results:
        figs = [f for f in r.figures if not f.machine_drift]
        note = r.skipped or r.aborted or ""
        if r.skipped:
            lines.append(f"| {r.notebook} | {r.code_cells} | – | – | – | – | – | skipped: {note} |")
            continue
        secs = f"{r.seconds:.1f} s" if r.seconds is not None else "–"
        lines.append(f"| {r.notebook} | {r.code_cells} | {r.compared} | {len(r.torch_changes)} | {len(r.drift)} | "
                     f"{len(figs)} | {secs} | {note} |")
    lines.append("")
    for heading, none, cells in (
            ("Changed cells", "None: every compared output is the committed one (machine drift aside).",
             [c for r in results for c in r.torch_changes]),
            ("Machine drift (differs on the baseline too: not caused by this PyTorch)", "None.",
             [c for r in results for c in r.drift])):
        lines += [f"## {heading}", ""] + ([] if cells else [none, ""])
        for c in cells:
            lines += _cell_section(c)
    lines += ["## Figures that changed", "",
              "nbval does not compare images; look at these in `build/rerun/<name>/executed/`.", ""]
    figures = [f for r in results for f in r.figures]
    if not figures:
        lines += ["None.", ""]
    for f in figures:
        where = "machine drift (the baseline's figure differs too)" if f.machine_drift else "not on the baseline"
        lines.append(f"- {_nb_short(f.notebook)} · Cell {f.cell_num}, under \"{f.heading}\": {f.note}; {where}")
    lines.append("")
    return "\n".join(lines)


def _cell_section(c: CellChange) -> list[str]:
    out = [f"### {_nb_short(c.notebook)} · Cell {c.cell_num}: {c.kind}", "",
           f"- nbval id: `{_folder(c.notebook)}/{c.notebook}::Cell {c.cell_num}` (`In [{c.cell_num + 1}]`)",
           f"- under: **{c.heading}**" + (f" ({c.claim})" if c.claim else ""),
           f"- guessed kind: **{c.kind}**: {c.why}"]
    if c.machine_drift:
        out.append(f"- baseline: {c.baseline_note}")
    if c.symptom:
        out.append(f"- symptom index: the message of `{c.symptom}` is no longer in the output: update the cell's "
                   "`hooklab.symptom.message` (and run `tools/messages/symptoms.py --write`), or teach what changed")
    if c.paragraph:
        out += ["", f"> {c.paragraph}"]
    out += ["", fence(c.diff, "diff"), ""]
    if c.vanished:
        gone = maximal(c.vanished)
        shown = ", ".join(f"`{p}`" for p in gone[:12]) + (" …" if len(gone) > 12 else "")
        out += [f"Gone from the output: {shown}", ""]
        if c.prose:
            out += ["Prose that quotes what is gone (a claim `./course regen` would leave stale):", ""]
            for nb, index, tag, phrase, line in c.prose:
                line = re.sub(r"^([-*>]|\d+\.)\s+", "", line)
                clipped = line if len(line) <= 400 else line[:400] + " …"
                out.append(f"- {_nb_short(nb)} · markdown cell {index} ({tag}), quotes `{phrase}`: {clipped}")
            out.append("")
        else:
            out += ["No prose quotes it.", ""]
    return out
