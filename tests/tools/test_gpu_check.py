"""The one GPU check (``./course gpu-check``, benchmarks/gpu_check.py), as far as a CPU can check it: the dry run lists
every step with its limit within 8 minutes, every file and module a step runs exists, the ResNet-152 table is formed
from its rows, and without a GPU the check refuses and says what to do. The check itself runs on a GPU only."""
from __future__ import annotations

import importlib.util
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
    rows = [{"variant": "plain", "ms": 250.0, "peak": 42 * gib},
            {"variant": "checkpoint each block + offload inputs", "ms": 375.0, "peak": 4 * gib},
            {"variant": "SaveOnCpu pinned", "error": "RuntimeError: out of pinned memory"}]
    table = gpu_check.resnet_table(rows)
    assert "| checkpoint each block + offload inputs | 375 | 1.50 | 4.00 | 10.5x |" in table
    assert "| SaveOnCpu pinned | RuntimeError: out of pinned memory |" in table
