"""`py.typed` promises types: mypy, with the [tool.mypy] table of pyproject.toml, finds no error in hooklab/.

mypy keeps its cache in ~/.cache/hooklab/mypy (pyproject.toml), so a second run, also from another clone, checks
only what changed (a cold run reads torch's stubs: about half a minute of CPU).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MYPY_TIMEOUT = 300  # s: a cold run on a busy machine

pytestmark = pytest.mark.timeout(MYPY_TIMEOUT + 30)


def test_mypy_finds_no_error_in_the_package():
    try:
        done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True,
                              timeout=MYPY_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"mypy did not finish checking hooklab/ within {MYPY_TIMEOUT} s")
    report = done.stdout + done.stderr
    assert done.returncode == 0 and "Success: no issues found" in done.stdout, report
