"""Smoke test of benchmarks/bench_monitoring.py: quick mode prints every row of the table (not the numbers)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchvision", reason="the benchmark runs torchvision's ResNet-18, and torchvision is not installed")

ROOT = Path(__file__).resolve().parent.parent
ROWS = {
    "baseline (no hooks)": "-",
    "floor: no-op forward hooks layer1-4": "-",
    "capture layer1-4": "1.05",
    "floor: no-op forward hooks 10 top-level": "-",
    "capture 10 top-level": "1.05",
    "capture layer1-4 + grads": "1.05",
    "floor: no-op post-accumulate hooks": "-",
    "gradient monitor, 62 params": "1.10",
    "activation stats layer1-4": "-",
    "clip value hooks": "-",
    "clip_grad_value_ after (ref)": "-",
}


def test_quick_mode_prints_the_ratio_table():
    result = subprocess.run(
        [sys.executable, "-W", "error", str(ROOT / "benchmarks" / "bench_monitoring.py"),
         "--quick", "--rounds", "1"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("ResNet-18 forward+backward, input 2x3x64x64, cpu, threads=1, cpu clock")
    assert lines[1].split() == ["case", "ms", "ratio", "target", "verdict"]
    assert len(lines) == 2 + len(ROWS)
    for row, target in ROWS.items():
        match = [line for line in lines if line.startswith(row + " ") and line[len(row):].split()[0][0].isdigit()]
        assert len(match) == 1, f"row {row!r} missing from:\n{result.stdout}"
        ms, ratio, shown_target, verdict = match[0][len(row):].split()
        assert float(ms) > 0 and float(ratio) > 0
        assert shown_target == target
        assert verdict in (("-",) if target == "-" else ("ok", "over"))
    baseline = next(line for line in lines if line.startswith("baseline"))
    assert baseline.split()[-3] == "1.00"
