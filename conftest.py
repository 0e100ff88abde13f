"""Repository-wide pytest setup: report each notebook's run time against the course budget."""
from __future__ import annotations

from collections import defaultdict

NOTEBOOK_BUDGET_S = 60.0
COURSE_BUDGET_S = 300.0
_notebook_time: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _notebook_time[path] += report.duration


def pytest_terminal_summary(terminalreporter):
    if not _notebook_time:
        return
    write = terminalreporter.write_line
    terminalreporter.section("notebook run times (budget: 60 s each, 300 s in all, 2 CPU cores)")
    for path, seconds in sorted(_notebook_time.items()):
        flag = "  OVER BUDGET" if seconds > NOTEBOOK_BUDGET_S else ""
        write(f"{seconds:7.1f} s  {path}{flag}")
    total = sum(_notebook_time.values())
    flag = "  OVER BUDGET" if total > COURSE_BUDGET_S else ""
    write(f"{total:7.1f} s  all notebooks{flag}")
