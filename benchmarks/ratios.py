"""Measure rows against a baseline and against their own no-op floor, in interleaved rounds, on two clocks.

Shared by the benchmarks. Each round runs every row (starting one row later each round, so that no row is
always first); a row's ratio is its time divided by the baseline's time *in the same round*, and its floor
ratio divides it by its floor row's time in the same round (the same hooks with empty bodies, registered and
removed the same way). Every ratio is shown as the median over the rounds with its spread, [min-max]: these
machines are shared, so compare ratios, not milliseconds, and read a difference smaller than the spread as
none. Times are taken on the process's CPU clock (what other jobs on the same cores disturb least; one torch
thread) and on the wall clock; ratios use the primary clock (CPU time on a CPU, wall time on a GPU, where the
host waits for the device). A target is judged only where the spread allows: "ok" when even the worst round is
within it, "over" when even the best round is over, and "within noise" when the rounds straddle it.

``torch.utils.benchmark`` is not used: it times one statement at a time on the wall clock, while a ratio to a
baseline and to a floor measured in the same rounds is what survives a busy machine.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hooklab._text import format_table
from hooklab.planner.decide import Spread  # a ratio over the rounds: median [lowest-highest]

BASELINE = "baseline (no hooks)"


@dataclass(frozen=True)
class Case:
    """One row to measure: a step, and the floor row (same hooks doing nothing) with a target ratio to it."""

    name: str
    run: Callable[[], object]
    floor: str | None = None
    target: float | None = None  # the highest acceptable ratio to the floor


def verdict(ratio: Spread | None, target: float | None) -> str:
    """ "ok" / "over" where the spread decides, "within noise" where its rounds straddle the target, "-" without."""
    if target is None or ratio is None:
        return "-"
    if ratio.high <= target:
        return "ok"
    if ratio.low > target:
        return "over"
    return "within noise"


@dataclass(frozen=True)
class Row:
    """A measured row: median ms per step on both clocks, its ratios to the baseline and to its floor."""

    name: str
    cpu_ms: float
    wall_ms: float
    ratio: Spread
    floor: str | None
    floor_ratio: Spread | None
    target: float | None
    wall_ratio: Spread | None = None  # the same ratio on the other clock (context only)

    @property
    def verdict(self) -> str:
        return verdict(self.floor_ratio, self.target)


def load() -> str:
    """The machine's load as the rows were measured: load averages over 1, 5 and 15 minutes and the CPUs."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:  # not on every platform
        return f"load average unknown, {os.cpu_count()} CPUs"
    return f"load average {one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min) on {os.cpu_count()} CPUs"


def measure(cases: Sequence[Case], *, rounds: int, repeats: int, clock: str = "cpu",
            sync: Callable[[], None] = lambda: None, warmup: int = 2) -> list[Row]:
    """Run every case ``repeats`` times per round for ``rounds`` rounds; the first case is the baseline.
    ``clock``: the primary clock of the ratios, ``"cpu"`` (this process's CPU time) or ``"wall"``."""
    names = [c.name for c in cases]
    if names[0] != BASELINE:
        raise ValueError(f"the first case must be {BASELINE!r}")
    if clock not in ("cpu", "wall"):
        raise ValueError(f"clock must be 'cpu' or 'wall', got {clock!r}")
    for c in cases:
        if c.floor is not None and c.floor not in names:
            raise ValueError(f"{c.name!r} names the floor {c.floor!r}, which is not a row")
    for c in cases:  # warm up every path (allocator, first-call costs)
        for _ in range(warmup):
            c.run()
    sync()
    cpu: dict[str, list[float]] = {name: [] for name in names}
    wall: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for c in cases[r % len(cases):] + cases[:r % len(cases)]:
            start_cpu, start_wall = time.process_time(), time.perf_counter()
            for _ in range(repeats):
                c.run()
            sync()
            cpu[c.name].append((time.process_time() - start_cpu) / repeats)
            wall[c.name].append((time.perf_counter() - start_wall) / repeats)
    primary, other = (cpu, wall) if clock == "cpu" else (wall, cpu)

    def ratios(times: dict[str, list[float]], a: str, b: str) -> Spread:
        return Spread.of([x / y for x, y in zip(times[a], times[b], strict=True)])

    return [Row(c.name, statistics.median(cpu[c.name]) * 1e3, statistics.median(wall[c.name]) * 1e3,
                ratios(primary, c.name, BASELINE), c.floor,
                ratios(primary, c.name, c.floor) if c.floor else None, c.target, ratios(other, c.name, BASELINE))
            for c in cases]


def table(rows: Sequence[Row], clock: str = "cpu") -> str:
    """The rows as text: ms on both clocks, ratio to the baseline and to the floor with their spreads, target,
    verdict."""
    def num(x: float | None) -> str:
        return "-" if x is None or not math.isfinite(x) else f"{x:.2f}"

    return format_table(
        ("case", "cpu ms", "wall ms", f"x base ({clock})", "x floor [min-max]", "target", "verdict"),
        [(r.name, f"{r.cpu_ms:.3g}", f"{r.wall_ms:.3g}", str(r.ratio),
          "-" if r.floor_ratio is None else str(r.floor_ratio), num(r.target), r.verdict) for r in rows],
        right=range(1, 6))
