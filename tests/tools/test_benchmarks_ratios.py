"""benchmarks/ratios.py: ratios per round against the same round's baseline and floor, and a verdict only where the
spread allows one. Checked on counted work (no clock is judged): rows that do the baseline's work twice."""
from __future__ import annotations

import pytest

from benchmarks.ratios import BASELINE, Case, Spread, load, measure, table, verdict


@pytest.mark.parametrize("spread, expected", [
    (Spread(1.02, 0.95, 1.08), "ok"),            # every round within the target
    (Spread(1.30, 1.15, 1.40), "over"),          # every round over it
    (Spread(1.05, 0.98, 1.21), "within noise"),  # the rounds straddle it: no verdict
    (Spread(1.10, 1.10, 1.10), "ok"),
])
def test_a_verdict_is_given_only_where_the_spread_decides(spread, expected):
    assert verdict(spread, 1.10) == expected
    assert verdict(spread, None) == verdict(None, 1.10) == "-"


def test_spread_of_rounds_and_its_text():
    s = Spread.of([1.2, 0.9, 1.0])
    assert (s.median, s.low, s.high) == (1.0, 0.9, 1.2)
    assert str(s) == "1.00 [0.90-1.20]"


def test_rows_are_measured_in_interleaved_rounds_against_the_same_rounds_baseline():
    order: list[str] = []

    def work(name: str, n: int):
        def run() -> None:
            order.append(name)
            sum(i * i for i in range(20000 * n))
        return run

    cases = [Case(BASELINE, work("base", 1)), Case("floor", work("floor", 1)),
             Case("twice", work("twice", 2), floor="floor", target=1.10)]
    rows = measure(cases, rounds=3, repeats=1, warmup=0)
    assert order == ["base", "floor", "twice", "floor", "twice", "base", "twice", "base", "floor"]  # rotated
    base, floor, twice = rows
    assert base.ratio == Spread(1.0, 1.0, 1.0) and base.floor_ratio is None and base.verdict == "-"
    assert twice.floor == "floor" and twice.floor_ratio.low <= twice.floor_ratio.median <= twice.floor_ratio.high
    assert twice.verdict in ("ok", "over", "within noise")
    assert all(r.cpu_ms > 0 and r.wall_ms > 0 for r in rows)
    lines = table(rows).splitlines()
    assert lines[0].split()[:4] == ["case", "cpu", "ms", "wall"] and len(lines) == 4
    assert "load average" in load() or "unknown" in load()


def test_a_bad_case_list_is_refused():
    with pytest.raises(ValueError, match="the first case must be"):
        measure([Case("x", lambda: None)], rounds=1, repeats=1)
    with pytest.raises(ValueError, match="names the floor 'nope'"):
        measure([Case(BASELINE, lambda: None), Case("x", lambda: None, floor="nope")], rounds=1, repeats=1)
    with pytest.raises(ValueError, match="clock must be"):
        measure([Case(BASELINE, lambda: None)], rounds=1, repeats=1, clock="sundial")
