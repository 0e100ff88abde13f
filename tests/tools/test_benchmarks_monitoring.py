"""Smoke test of benchmarks/bench_monitoring.py: every observer is measured beside its no-op floor.

The numbers of a one-round quick run mean nothing (this test judges no target); what it checks is
the table's structure: each observer row names a floor row that registers the same hooks with empty
bodies, ratios and verdicts are computed from the same measurements, and the run warns about nothing.
"""
from __future__ import annotations

import math
import warnings

import pytest

pytest.importorskip("torchvision",
                    reason="the benchmark runs torchvision's ResNet-18, and torchvision is not installed")

from benchmarks import bench_monitoring  # noqa: E402
from benchmarks.ratios import BASELINE  # noqa: E402

OBSERVERS = {
    "capture layer1-4": "floor: no-op forward hooks layer1-4",
    "capture 10 top-level": "floor: no-op forward hooks 10 top-level",
    "capture layer1-4 + grads": "floor: no-op forward + output-grad hooks layer1-4",
    "activation stats layer1-4": "floor: no-op forward hooks layer1-4",
    "gradient monitor, 62 params": "floor: no-op post-accumulate hooks",
    "saved-tensor ledger": "floor: no-op module + saved-tensor hooks",
    "find_nonfinite (finite run)": "floor: no-op module + Node hooks",
}


def test_quick_run_measures_every_observer_against_its_floor(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows = bench_monitoring.run(quick=True, rounds=1)
    by_name = {r.name: r for r in rows}
    assert rows[0].name == BASELINE and rows[0].ratio.median == 1.0
    for observer, floor in OBSERVERS.items():
        row = by_name[observer]
        assert row.floor == floor and floor in by_name and by_name[floor].floor is None
        assert row.target == bench_monitoring.TARGET == 1.10
        spread = row.floor_ratio
        assert spread.low <= spread.median <= spread.high
        assert row.verdict == ("ok" if spread.high <= 1.10 else "over" if spread.low > 1.10 else "within noise")
    assert {r.name for r in rows if r.floor} == set(OBSERVERS)
    assert all(math.isfinite(r.cpu_ms) and r.cpu_ms > 0 and math.isfinite(r.wall_ms) and math.isfinite(r.ratio.median)
               for r in rows)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ResNet-18 forward+backward, input 2x3x32x32, cpu, threads=1, cpu clock")
    assert "load average" in out[0]
    assert out[1].split() == ["case", "cpu", "ms", "wall", "ms", "x", "base", "(cpu)", "x", "floor", "[min-max]",
                              "target", "verdict"]
    assert len(out) == 2 + len(rows)


def test_a_gpu_run_is_refused_clearly_where_none_is_visible(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    with pytest.raises(SystemExit):
        bench_monitoring.main(["--device", "cuda"])
    assert "no GPU is visible here" in capsys.readouterr().err
