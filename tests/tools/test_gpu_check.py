"""The one GPU check (``./course gpu-check``, benchmarks/gpu_check.py), as far as a CPU can check it: the dry run lists
every step with its limit within 8 minutes, every file and module a step runs exists, the ResNet-152 table is formed
from its rows, and without a GPU the check refuses and says what to do. The check itself runs on a GPU only."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_check

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.tools, pytest.mark.timeout(300)]


def run_course(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(["./course", "gpu-check", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)


def test_the_dry_run_lists_every_step_within_eight_minutes():
    done = run_course("--dry-run")
    assert done.returncode == 0, done.stderr
    total = sum(s.seconds for s in gpu_check.STEPS)
    assert total <= gpu_check.TOTAL_S == 480
    assert f"{len(gpu_check.STEPS)} steps, {total} s at most in all (limit 480 s)" in done.stdout
    for step in gpu_check.STEPS:
        assert f"{step.name} " in done.stdout and f"{step.seconds} s" in done.stdout
    for variant in gpu_check.VARIANTS:
        assert variant in done.stdout


def test_every_file_and_module_a_step_runs_exists():
    for step in gpu_check.STEPS:
        command = gpu_check._command(step)
        assert command[0] == sys.executable
        if "pytest" in command:
            files = [a for a in command if a.endswith(".py")]
            assert files and all((ROOT / f).is_file() for f in files)
        else:
            module = command[command.index("-m") + 1]
            assert importlib.util.find_spec(module) is not None, module


def test_without_a_gpu_the_check_refuses_and_says_what_to_do():
    done = run_course()
    assert done.returncode == 2
    assert "no CUDA device is visible" in done.stdout and "--dry-run" in done.stdout


def test_the_resnet_table_gives_each_variant_over_the_model_as_it_is():
    gib = gpu_check.GIB
    rows = [{"variant": "plain", "ms": 250.0, "peak": 42 * gib, "s": 9.4},
            {"variant": "checkpoint each block + offload inputs", "ms": 375.0, "peak": 4 * gib, "s": 12.0},
            {"variant": "SaveOnCpu pinned", "error": "RuntimeError: out of pinned memory", "s": 3.0}]
    table = gpu_check.resnet_table(rows)
    assert "| checkpoint each block + offload inputs | 375 | 1.50 | 4.00 | 10.5x | 12 |" in table
    assert "| SaveOnCpu pinned | RuntimeError: out of pinned memory | | | | 3 |" in table


def test_rows_measured_before_the_step_is_stopped_at_its_limit_reach_the_table():
    # the step prints each row as soon as it is measured; a step stopped at its limit has printed some of them
    printed = "\n".join(gpu_check.ROW + json.dumps(r) for r in (
        {"variant": "plain", "ms": 300.0, "peak": 40 * gpu_check.GIB, "s": 8.0},
        {"variant": "OverlappedOffload", "ms": 2000.0, "peak": 30 * gpu_check.GIB, "s": 70.0}))
    rows = gpu_check.rows_from("torchvision loaded\n" + printed + "\n")
    assert [r["variant"] for r in rows] == ["plain", "OverlappedOffload"]
    assert "| OverlappedOffload | 2000 | 6.67 | 30.00 | 1.3x | 70 |" in gpu_check.resnet_table(rows)
    assert "plain was not measured" in gpu_check.resnet_table(rows[1:])
