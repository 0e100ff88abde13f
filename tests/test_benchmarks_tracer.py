"""Smoke test of benchmarks/bench_tracer.py: the quick mode runs and prints every row (not the numbers)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS = [
    "baseline (no hooks)",
    "no-op hooks, everything",
    "tracer: modules fwd+bwd",
    "tracer: parameters",
    "tracer: saved tensors",
    "tracer: everything",
]


def test_quick_mode_prints_the_ratio_table():
    result = subprocess.run(
        [sys.executable, "-W", "error", str(ROOT / "benchmarks" / "bench_tracer.py"), "--quick", "--repeats", "2"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["case", "ms", "ratio", "events"]
    for row in ROWS:
        match = [line for line in lines if line.startswith(row)]
        assert len(match) == 1, f"row {row!r} missing from:\n{result.stdout}"
        ratio = float(match[0][len(row):].split()[1])
        assert ratio > 0
    baseline = next(line for line in lines if line.startswith(ROWS[0]))
    assert baseline.split()[-2:] == ["1.00", "0"]
    traced = next(line for line in lines if line.startswith("tracer: everything"))
    assert int(traced.split()[-1]) > 0  # the tracer did record events
