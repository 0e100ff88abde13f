"""Measure rows against a baseline and against their own no-op floor, in interleaved rounds.

Shared by bench_monitoring.py and bench_tracer.py. Each round runs every row (starting one row later
each round, so that no row is always first); a row's ratio is its time divided by the baseline's time
*in the same round*, and its floor ratio divides it by its floor row's time in the same round (the
same hooks with empty bodies, registered and removed the same way). The table shows medians over the
rounds: these machines are noisy, so compare ratios, not milliseconds.
"""
from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hooklab._text import format_table  # noqa: E402

BASELINE = "baseline (no hooks)"


@dataclass(frozen=True)
class Case:
    """One row to measure: a step, and the floor row (same hooks doing nothing) with a target ratio to it."""

    name: str
    run: Callable[[], object]
    floor: str | None = None
    target: float | None = None  # the highest acceptable ratio to the floor


@dataclass(frozen=True)
class Row:
    """A measured row: median ms per step, median ratio to the baseline and to the floor."""

    name: str
    ms: float
    ratio: float
    floor: str | None
    floor_ratio: float | None
    target: float | None

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "-"
        return "ok" if self.floor_ratio <= self.target else "over"


def measure(cases: Sequence[Case], *, rounds: int, repeats: int, clock: Callable[[], float],
            sync: Callable[[], None] = lambda: None, warmup: int = 2) -> list[Row]:
    """Run every case ``repeats`` times per round for ``rounds`` rounds; the first case is the baseline."""
    names = [c.name for c in cases]
    if names[0] != BASELINE:
        raise ValueError(f"the first case must be {BASELINE!r}")
    for c in cases:
        if c.floor is not None and c.floor not in names:
            raise ValueError(f"{c.name!r} names the floor {c.floor!r}, which is not a row")
    for c in cases:  # warm up every path (allocator, first-call costs)
        for _ in range(warmup):
            c.run()
    sync()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for c in cases[r % len(cases):] + cases[:r % len(cases)]:
            start = clock()
            for _ in range(repeats):
                c.run()
            sync()
            times[c.name].append((clock() - start) / repeats)

    def ratio(a: list[float], b: list[float]) -> float:
        return statistics.median(x / y for x, y in zip(a, b))

    return [Row(c.name, statistics.median(times[c.name]) * 1e3, ratio(times[c.name], times[BASELINE]), c.floor,
                ratio(times[c.name], times[c.floor]) if c.floor else None, c.target) for c in cases]


def table(rows: Sequence[Row]) -> str:
    """The rows as text: ms, ratio to the baseline, ratio to the floor, target and verdict."""
    def num(x: float | None) -> str:
        return "-" if x is None or not math.isfinite(x) else f"{x:.2f}"

    return format_table(("case", "ms", "x base", "x floor", "target", "verdict"),
                        [(r.name, f"{r.ms:.3g}", num(r.ratio), num(r.floor_ratio), num(r.target), r.verdict)
                         for r in rows], right=range(1, 5))
