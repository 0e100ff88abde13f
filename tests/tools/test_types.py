"""`py.typed` promises types: mypy, with the [tool.mypy] table of pyproject.toml, finds no error in hooklab/.

mypy keeps its cache in ~/.cache/hooklab/mypy (pyproject.toml), so a second run, also from another clone, checks
only what changed (a cold run reads torch's stubs: about half a minute of CPU).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from patience import hang_guard

ROOT = Path(__file__).resolve().parents[2]
MYPY_TIMEOUT = 300  # s: a cold run on an idle machine takes about 30; a hang guard, stretched by the load

pytestmark = pytest.mark.timeout(MYPY_TIMEOUT + 30)


def test_mypy_finds_no_error_in_the_package():
    limit = hang_guard(MYPY_TIMEOUT)
    try:
        done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True,
                              timeout=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang guard: mypy did not finish checking hooklab/ within {limit:.0f} s ({MYPY_TIMEOUT} s on "
                    "an idle machine, stretched by the load)")
    report = done.stdout + done.stderr
    assert done.returncode == 0 and "Success: no issues found" in done.stdout, report
