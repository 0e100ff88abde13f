"""Smoke test of benchmarks/bench_hook_cost.py: its table's structure, floor pairing and hook-call counts.

A one-round quick run's times mean nothing and no time is judged here; what is checked is what does
not depend on the machine: every row is there, paired with the right floor row, ratios come from the
same measurements, and each kind of hook ran the number of times per step that PyTorch promises.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch

from benchmarks import bench_hook_cost
from benchmarks.ratios import BASELINE

DEPTH = 8  # the benchmark's MLP: 8 x (Linear + ReLU) in one Sequential


def test_quick_run_table_structure_pairing_and_calls(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rows, calls = bench_hook_cost.run(quick=True, rounds=1, backend="eager")
    names = [r.name for r in rows]
    modules, params = 2 * DEPTH + 1, 2 * DEPTH
    assert names[0] == BASELINE and rows[0].ratio.median == rows[0].ratio.low == rows[0].ratio.high == 1.0
    assert calls == {
        "no-op forward hook, 1 module": 1,
        "no-op forward hook, every module": modules,
        "global forward hook (no-op)": modules,  # a global hook runs once per module call
        "full backward hooks, every module": modules,
        "tensor hooks, every parameter": params,
        "post-accumulate hooks, every parameter": params,
        "one multi-grad hook, all parameters": 1,
        "Python work in a forward hook": modules,
        "tensor stat in a forward hook": modules,
        ".item() of that stat": modules,
        ".cpu() of the output": modules,
        "compiled, forward hooks traced in": modules,  # traced hooks' side effects still happen per call
    }
    assert names == [BASELINE, *list(calls)[:-1], bench_hook_cost.COMPILED, "compiled, forward hooks traced in"]
    floors = {r.name: r.floor for r in rows if r.floor}
    assert floors == {".item() of that stat": "tensor stat in a forward hook",
                      ".cpu() of the output": "no-op forward hook, every module",
                      "compiled, forward hooks traced in": bench_hook_cost.COMPILED}
    assert all(r.target is None and r.verdict == "-" for r in rows)  # measured, not judged
    assert all(math.isfinite(r.cpu_ms) and r.cpu_ms > 0 and math.isfinite(r.ratio.median) for r in rows)
    assert all(math.isfinite(r.floor_ratio.median) for r in rows if r.floor)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("MLP 8x(Linear 64 + ReLU) forward+backward, batch 8, cpu, threads=1, cpu clock")
    assert "torch.compile backend=eager; load average" in out[0]
    assert out[1].split() == ["case", "cpu", "ms", "wall", "ms", "x", "base", "(cpu)", "x", "floor", "[min-max]",
                              "target", "verdict", "calls/step"]
    assert len(out) == 2 + len(rows)
    assert [line.split()[-1] for line in out[2:] if line.split()[-1].isdigit()] == [str(v) for v in calls.values()]


def test_a_gpu_run_is_refused_clearly_where_none_is_visible(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    with pytest.raises(SystemExit):
        bench_hook_cost.main(["--device", "cuda"])
    assert "no GPU is visible here" in capsys.readouterr().err
