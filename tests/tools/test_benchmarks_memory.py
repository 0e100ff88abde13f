"""Smoke test of benchmarks/bench_memory.py: the quick mode runs and prints every row and verdict in its form (never the timings)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchvision", reason="the benchmark runs torchvision's ResNet-18, and torchvision is not installed")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "bench_memory.py"
ROWS = ["baseline", "ledger", "disk", "bf16", "int8", "checkpoint", "overlap", "plan_1/2", "plan_1/4", "plan_1/10"]
PLAN = re.compile(r"^plan 1/(2|4|10) \(budget [0-9.]+ MiB\): (met, plan ([kCobi]+); [0-9.]+x time, (fastest|slower than "
                  r"the best single strategy by [0-9.]+x)|cannot be met: .+); single strategies that meet it: (none|.+)$")


@pytest.mark.timeout(330)  # about 17 s of CPU (import, a cut ResNet-18 compiled four times): 300 s is a wide margin
def test_quick_mode_prints_the_table_and_leaks_no_files(tmp_path):
    # SaveOnDisk's folders go to the temp dir: a private one, so that no other process's folders are counted
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-W", "error", str(SCRIPT), "--quick", "--compile"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("variant"))
    assert lines[header].split() == ["variant", "saved", "MiB", "x", "less", "peak", "MiB", "time", "x", "grad", "err"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[header + 2:] if line.strip()}
    rows = dict(list(rows.items())[:len(ROWS)])
    # the planner rows are there unless a budget could not be met (then its line says so below)
    cannot = {f"plan_1/{m.group(1)}" for line in lines if (m := PLAN.match(line)) and m.group(2).startswith("cannot")}
    assert [r for r in ROWS if r not in cannot] == list(rows), result.stdout
    assert rows["baseline"][1] == "1.00" and rows["baseline"][3] == "1.00"  # x less, time x
    assert all(len(cells) == 5 for cells in rows.values())
    for name in ("checkpoint", "bf16"):
        assert any(line.startswith(f"target {name}:") for line in lines), result.stdout
    # on the CPU the overlapped offload moves nothing: its bytes are the baseline's, and its GPU target is not measured
    assert rows["overlap"][0] == rows["baseline"][0]
    assert "target overlap: >= 10x less at <= 1.5x time: not measured (no GPU" in result.stdout
    # one verdict line per budget, in the documented form, each naming the single strategies that meet it;
    # a plan that was run met its budget (the meter's bytes) and its plan has one code per block (the quick model's
    # stem + layer1.0 + layer2.0; none for the head)
    plan_lines = [line for line in lines if line.startswith("plan 1/")]
    assert [line.split()[1] for line in plan_lines] == ["1/2", "1/4", "1/10"], result.stdout
    for line in plan_lines:
        m = PLAN.match(line)
        assert m, line
        if m.group(3):
            assert m.group(2).startswith("met,") and len(m.group(3)) == 3, line
            budget = float(line.split("budget ")[1].split(" MiB")[0])
            assert float(rows[f"plan_1/{m.group(1)}"][0]) <= budget + 0.005, line
    # torch.compile's activation_memory_budget: one row per budget, budget 1 the reference of "x less"
    top = next(i for i, line in enumerate(lines) if line.startswith("budget ") and "saved MiB" in line)
    assert lines[top].split() == ["budget", "saved", "MiB", "x", "less", "time", "x", "grad", "err"]
    compiled = [line.split() for line in lines[top + 2: top + 6]]
    assert [row[0] for row in compiled] == ["1.00", "0.50", "0.25", "0.10"] and compiled[0][2] == "1.00"
    assert all(float(row[1]) <= float(compiled[0][1]) for row in compiled), result.stdout  # a budget never adds
    gpu = [line for line in lines if line.startswith("GPU save_on_cpu")]
    assert len(gpu) == 1
    # the course runs tests with CUDA hidden; the GPU part must then say it skipped
    if "skipped" in gpu[0]:
        assert "no GPU" in gpu[0]
    assert list(tmp_path.glob("hooklab-saved-*")) == []  # the disk variant removed its private directories


# The argument checks run in this process (main(argv), as argparse exits): a subprocess per check cost an import of
# torch and torchvision each, about 5 s of CPU.
@pytest.mark.parametrize("argv, message", [(["--batch", "0"], "--batch must be a positive integer"),
                                           (["--device", "tpu"], "--device must be cpu or cuda")])
def test_bad_arguments_are_rejected(argv, message, capsys):
    from benchmarks import bench_memory
    with pytest.raises(SystemExit) as exited:
        bench_memory.main(["--quick", *argv])
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_device_cuda_is_refused_clearly_without_a_gpu(capsys, monkeypatch):
    import torch

    from benchmarks import bench_memory
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as with CUDA_VISIBLE_DEVICES="" (./course test)
    with pytest.raises(SystemExit) as exited:
        bench_memory.main(["--quick", "--device", "cuda"])
    assert exited.value.code == 2 and "no GPU is visible here" in capsys.readouterr().err
