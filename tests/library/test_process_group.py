"""tests/process_group.py: a server started by a test cannot outlive the test run, even when pytest is SIGKILLed
(a CI job's time limit), where no fixture's ``finally`` runs."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from patience import hang_guard

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

TESTS = Path(__file__).resolve().parents[1]
# a stand-in for pytest: starts a long-running process group (as the lab fixtures do), prints its pid, waits
PARENT = """
import subprocess, sys, time
sys.path.insert(0, {tests!r})
from process_group import start_process_group
argv = [sys.executable, "-c", "import time; time.sleep(120)"]
child = start_process_group(argv) if {tied} else subprocess.Popen(argv, start_new_session=True)
print(child.pid, flush=True)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its new parent to reap it counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def kill_parent_and_wait(tied: bool, wait_s: float) -> bool:
    """Start a parent that starts a child group, SIGKILL the parent; is the child still alive after ``wait_s``?"""
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(tests=str(TESTS), tied=tied)],
                              stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        assert alive(child) and os.getpgid(child) == child  # a group (and session) of its own
        parent.kill()
        parent.wait(timeout=hang_guard(10))
        deadline = time.monotonic() + wait_s
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        return alive(child)
    finally:
        parent.kill()
        parent.stdout.close()
        if child is not None and alive(child):
            os.kill(child, signal.SIGKILL)


def test_the_started_group_ends_when_the_test_process_is_killed():
    assert not kill_parent_and_wait(tied=True, wait_s=15)


def test_without_it_the_group_would_be_orphaned():
    """The control: a plain start_new_session=True (what the lab fixtures used) survives its parent's SIGKILL."""
    assert kill_parent_and_wait(tied=False, wait_s=1)
