"""The lint gate beside mypy: ``ruff check`` with the [tool.ruff] table of pyproject.toml finds nothing in the
package, the tests, the tools and the benchmarks (notebooks are run by nbval, not linted).

ruff takes well under a second of CPU here; the limit is a hang guard stretched by the machine's load.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from patience import hang_guard

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["hooklab", "tests", "tools", "benchmarks"]
LINT_TIMEOUT = 60  # s on an idle machine

pytestmark = pytest.mark.timeout(300)


def ruff(*args: str) -> subprocess.CompletedProcess:
    limit = hang_guard(LINT_TIMEOUT)
    try:
        return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang guard: ruff did not finish checking {', '.join(PATHS)} within {limit:.0f} s")


def test_ruff_finds_nothing():
    done = ruff("check", "--no-cache", "--output-format", "concise", *PATHS)
    assert done.returncode == 0, done.stdout + done.stderr + "\n(.venv/bin/ruff check --fix fixes what it can)"


def test_the_gate_would_catch_an_unused_import(tmp_path):
    """The table really checks: a file with an unused import and unsorted imports, linted with the project's
    settings, fails on both (a gate that passes everything would pass the test above too)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nimport os\n\nprint(os.sep)\n", encoding="utf-8")
    done = ruff("check", "--no-cache", "--output-format", "concise", "--config", str(ROOT / "pyproject.toml"),
                str(bad))
    assert done.returncode == 1 and "F401" in done.stdout and "I001" in done.stdout, done.stdout + done.stderr
