"""Smoke test of benchmarks/bench_tracer.py: each traced row is measured beside the same hooks doing nothing."""
from __future__ import annotations

import warnings

from benchmarks import bench_tracer
from benchmarks.ratios import BASELINE


def test_quick_run_pairs_every_traced_row_with_its_floor():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows, events = bench_tracer.run(quick=True, rounds=2)
    by_name = {r.name: r for r in rows}
    assert rows[0].name == BASELINE and rows[0].ratio.median == 1.0
    traced = [r for r in rows if r.name.startswith("tracer: ")]
    assert [r.name for r in traced] == ["tracer: modules fwd+bwd", "tracer: parameters", "tracer: saved",
                                        "tracer: everything"]
    for row in traced:
        assert row.floor == "floor: no-op hooks, " + row.name.removeprefix("tracer: ")
        assert row.floor in by_name and row.target == 1.10
        low, high = row.floor_ratio.low, row.floor_ratio.high  # the verdict follows the spread, whatever the numbers
        assert low <= row.floor_ratio.median <= high
        assert row.verdict == ("ok" if high <= 1.10 else "over" if low > 1.10 else "within noise")
        assert events[row.name] > 0, f"{row.name} recorded no event"
    # everything records what the three parts record together
    assert events["tracer: everything"] == sum(events[r.name] for r in traced[:3])
