"""hooklab._saved's signal relay (a signal whose exception lands in one of hooklab's finalizers is delivered again,
outside it), tested in a fresh interpreter. Signals, their handlers and the relay's thread belong to the whole
process, and in the full test run a test that ran earlier in the same worker left a state behind under which every
redelivery waited in vain; the cases are in tests/library/signal_cases.py (alone: ``./course test
tests/library/signal_cases.py``)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("signal_cases.py")


@pytest.mark.timeout(900)
def test_the_signal_cases_pass_in_a_fresh_interpreter():
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                               str(CASES.relative_to(ROOT))], cwd=ROOT, capture_output=True, text=True, timeout=800)
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(f"the signal cases did not finish in 800 s (each has its own hang guard):\n{timeout.stdout}")
    assert done.returncode == 0, f"the signal cases failed:\n{done.stdout[-8000:]}\n{done.stderr[-3000:]}"
    assert " passed" in done.stdout.splitlines()[-1], done.stdout[-2000:]
