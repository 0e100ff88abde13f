"""The gate inside pytest (``-p tools.gate.plugin --gate-plan=FILE``, which ``./course test`` passes).

- Deselects every test whose check the plan (:mod:`tools.gate.plan`, written by :mod:`tools.gate.command`) leaves
  out of this run; a check the plan does not know (a file added after it was made) runs, and is named at the end.
- Prints, at the end, the worker-seconds and the number of tests of each tier, and the wall time.
- Writes ``tests/gate/passed.json`` at the end (the controller, not an xdist worker): each check in which no test
  failed and at least one ran, at the hash the plan gave it. Nothing is written when pytest itself chose tests
  (``-k``, ``-m``, ``--deselect``, ``--lf``): a check may then not have run whole.
"""
from __future__ import annotations

import json
import random
import time
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tools.gate import record
from tools.gate.checks import check_of
from tools.gate.plan import SPLIT_BY_TEST, TIERS


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gate", "the test gate (tools/gate)")
    group.addoption("--gate-plan", default=None, metavar="FILE",
                    help="the plan of this run (python -m tools.gate plan writes one; ./course test passes it)")
    group.addoption("--gate-order", default=None, type=int, metavar="SEED",
                    help="shuffle the files, and the tests inside each Python file, with SEED (a notebook's cells "
                         "keep their order): the same verdict in any order (./course test --order SEED)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--gate-order: before the conftest files order the items (tests/conftest.py: the long files first, a stable
    sort), so the shuffle holds within what they keep together."""
    seed = config.getoption("gate_order", None)
    if seed is not None:
        items[:] = shuffled(items, seed)


def shuffled(items: list[Any], seed: int) -> list[Any]:
    """Items shuffled by file, and inside a Python file; a notebook's cells stay in their order.

    >>> from types import SimpleNamespace as I
    >>> got = shuffled([I(nodeid=n) for n in ("a.py::t1", "a.py::t2", "b.ipynb::Cell 0", "b.ipynb::Cell 1")], 3)
    >>> [i.nodeid for i in got if i.nodeid.startswith("b")]
    ['b.ipynb::Cell 0', 'b.ipynb::Cell 1']
    >>> sorted(i.nodeid for i in got) == ["a.py::t1", "a.py::t2", "b.ipynb::Cell 0", "b.ipynb::Cell 1"]
    True
    """
    rng = random.Random(seed)
    files: dict[str, list[Any]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)
    order = list(files)
    rng.shuffle(order)
    out = []
    for path in order:
        group = files[path]
        if ".ipynb" not in path:
            rng.shuffle(group)
        out += group
    return out


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("gate_plan", None)
    if path:
        config.pluginmanager.register(Gate(config, json.loads(Path(path).read_text(encoding="utf-8"))),
                                      "hooklab-gate")


def tier_of(plan: dict[str, Any], nodeid: str) -> str:
    """The tier of a test in the plan: its check's, "unplanned" where the plan does not know it."""
    return plan["tiers"].get(check_of(nodeid), "unplanned")


def chosen_by_pytest(config: pytest.Config) -> bool:
    """Whether pytest's own options left tests of a check out (then no check is known to have run whole)."""
    option = config.option
    return bool(getattr(option, "keyword", "") or getattr(option, "markexpr", "")
                or getattr(option, "deselect", None) or getattr(option, "lf", False))


class Gate:
    def __init__(self, config: pytest.Config, plan: dict[str, Any]) -> None:
        self.config, self.plan = config, plan
        self.outcomes: dict[str, set[str]] = defaultdict(set)
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.started = time.monotonic()
        self.recorded: int | None = None

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        shard = self.plan.get("shard")
        keep, drop = [], []
        for item in items:
            if tier_of(self.plan, item.nodeid) == "skip":
                drop.append(item)
            elif shard and item.nodeid.split("::")[0] in SPLIT_BY_TEST and \
                    zlib.crc32(item.nodeid.encode()) % shard[1] != shard[0]:
                drop.append(item)  # --all in shards: a sweep's tests are split one by one
            else:
                keep.append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        check = check_of(report.nodeid)
        self.seconds[check] += report.duration
        xfail = hasattr(report, "wasxfail")
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.tests[check] += 1
            self.outcomes[check].add("failed" if report.failed else
                                     "skipped" if report.skipped and not xfail else "passed")
        elif report.failed:  # an error in teardown
            self.outcomes[check].add("failed")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):
            return
        from tools.gate import costs

        costs.write_last_run(self.plan, dict(self.seconds), dict(self.tests),
                             {c: sorted(o) for c, o in self.outcomes.items()}, time.monotonic() - self.started)
        if chosen_by_pytest(self.config) or self.config.pluginmanager.has_plugin("tools.gate.trace"):
            return
        new = {check: self.plan["hashes"][check] for check, outcomes in self.outcomes.items()
               if "failed" not in outcomes and "passed" in outcomes and check in self.plan["hashes"]}
        record.write_passed(new, Path(self.plan["root"]))
        self.recorded = len(new)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):
            return
        write = terminalreporter.write_line
        terminalreporter.section("the gate: time by tier")
        rows: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])
        for check, seconds in self.seconds.items():
            row = rows[self.plan["tiers"].get(check, "unplanned")]
            row[0] += 1
            row[1] += self.tests[check]
            row[2] += seconds
        order = [*TIERS, "all", "named", "every", "unplanned"]
        for tier in sorted(rows, key=lambda t: order.index(t) if t in order else len(order)):
            checks, tests, seconds = rows[tier]
            write(f"{tier:<10} {checks:5.0f} checks {tests:6.0f} tests {seconds:8.0f} worker-seconds")
        write(f"{'in all':<10} {sum(r[0] for r in rows.values()):5.0f} checks "
              f"{sum(r[1] for r in rows.values()):6.0f} tests {sum(r[2] for r in rows.values()):8.0f} "
              f"worker-seconds, {time.monotonic() - self.started:.0f} s wall")
        unplanned = sorted(c for c in self.seconds if c not in self.plan["tiers"])
        if unplanned:
            write(f"checks the plan did not know (run whole): {', '.join(unplanned[:10])}"
                  + (" ..." if len(unplanned) > 10 else ""))
        if self.recorded is not None:
            write(f"tests/gate/passed.json: {self.recorded} checks recorded as passed at their inputs' hash "
                  "(commit it with the change)")
