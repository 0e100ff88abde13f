"""The seed of a run's samples: the commit checked out, so that the same commit draws the same sample and a red run
can be repeated (tests/tools/test_programs.py, tests/tools/test_profile_programs.py; the gate draws a population's
sample the same way, tools/gate/plan.py)."""
from __future__ import annotations

import os
import subprocess
from datetime import date
from pathlib import Path


def seed(root: Path, today: date | None = None) -> str:
    """The commit checked out (CI's ``GITHUB_SHA`` or ``git rev-parse HEAD``), else the day: the same seed draws the
    same sample, so a red run can be repeated.

    >>> seed(Path("/nonexistent-folder"), date(2026, 11, 28)) == "2026-11-28" or "GITHUB_SHA" in os.environ
    True
    """
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        head = None
    if head is not None and head.returncode == 0 and head.stdout.strip():
        return head.stdout.strip()
    return (today or date.today()).isoformat()
