"""``./course rerun``'s part for the hook behaviour matrix: which cells of ``docs/hook_matrix.json`` another PyTorch
changes.

The side environment's Python runs every probe (``python -m tools.hook_matrix check --all --report ...``, in the
fixed environment of ``./course rerun``) and writes the cells whose observation differs from the record: a hook
that fires more or less often, receives something else, treats its return value otherwise, or raises another error.
The report gets a section listing them, field by field, and a changed cell makes ``./course rerun`` exit 1, like a
changed notebook output.
"""
from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
REPORT = "hook-matrix.json"
LOG = "hook-matrix.log"


@dataclass
class HookMatrixResult:
    changed: list[dict[str, Any]] = field(default_factory=list)   # {"key", "fields": {name: [recorded, observed]}}
    error: str | None = None                                       # the check could not run (its log says why)
    seconds: float | None = None


def check(python: Path, folder: Path, env: dict[str, str], *, timeout: float = 3600) -> HookMatrixResult:
    """Run every cell of the matrix in ``python``'s environment; the cells that differ from the record."""
    report, log = folder / REPORT, folder / LOG
    report.unlink(missing_ok=True)
    start = time.perf_counter()
    with open(log, "w") as fh:
        try:
            proc = subprocess.run([str(python), "-m", "tools.hook_matrix", "check", "--all", "--report", str(report)],
                                  cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            code = None
    result = read(folder)
    result.seconds = time.perf_counter() - start
    if code is None:
        result.error = f"the hook matrix check did not finish in {timeout:.0f} s (see {log.relative_to(ROOT)})"
    elif code not in (0, 1) or (code == 1 and not result.changed and result.error is None):
        result.error = f"the hook matrix check failed (exit {code}); see {log.relative_to(ROOT)}"
    return result


def read(folder: Path) -> HookMatrixResult:
    """The result of the last check in ``folder`` (for ``--report-only``)."""
    report = folder / REPORT
    if not report.is_file():
        return HookMatrixResult(error=f"no {REPORT} in {folder.name}: the hook matrix check wrote nothing")
    return HookMatrixResult(changed=json.loads(report.read_text(encoding="utf-8")))


def exit_code(result: HookMatrixResult | None) -> int:
    return 0 if result is None or (not result.changed and result.error is None) else 1


def one_line(result: HookMatrixResult | None) -> str:
    if result is None:
        return "hook matrix: not checked"
    if result.error:
        return f"hook matrix: {result.error}"
    return f"hook matrix: {len(result.changed)} changed cell(s)"


def section(result: HookMatrixResult | None) -> str:
    """The report's section: each changed cell and its fields, recorded then observed."""
    if result is None:
        return ""
    lines = ["", "## Hook behaviour matrix (docs/hook_matrix.json)", ""]
    if result.error:
        return "\n".join(lines + [f"Could not check: {result.error}", ""])
    if not result.changed:
        return "\n".join(lines + ["Every cell is observed as recorded.", ""])
    lines += [f"{len(result.changed)} cell(s) observed differently from the record (teach what changed, then "
              "`python -m tools.hook_matrix generate --keys ...`):", ""]
    for item in result.changed:
        lines.append(f"- `{item['key']}`")
        for name, (then, now) in item["fields"].items():
            lines.append(f"  - {name}: recorded `{json.dumps(then, ensure_ascii=False)}`, now "
                         f"`{json.dumps(now, ensure_ascii=False)}`")
    return "\n".join(lines + [""])
