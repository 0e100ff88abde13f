"""The gate runs a test that forks processes running autograd in a fresh interpreter, where an earlier test on its
worker has left this one unable to fork such a process (``./course test`` loads it: ``-p tools.gate.fresh``).

The tests are :data:`FORKS_AUTOGRAD`: DataLoader workers, ``hooklab.run_workers``, and the exercises whose checker
runs the answer in a process group (their answers are functions of a notebook cell: only a fork can run them). A fork
cannot run autograd once this process has started autograd's worker threads (an earlier test's compiled backward
does, and PyTorch then refuses in the child: "Unable to handle autograd's threading in combination with fork-based
multiprocessing"), and nothing can stop those threads. Where that has happened, such a test runs in a fresh
interpreter instead, so its verdict is the same whatever ran before it on this worker (``./course test --order 23``
failed 29 of them otherwise). Asking costs one forked probe, about 30 ms. Like the rest of the gate's code, this
module is no input of any check: changing it re-runs none.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

FORKS_AUTOGRAD = (
    "tests/course/test_exercises_", "tests/course/test_exercise_coverage.py",
    "tests/library/test_explain_processes_and_swaps.py", "tests/library/test_explain_facts.py",
    "tests/library/test_ledger.py", "tests/library/test_explain_matrix.py", "tests/library/test_distributed_tools.py",
    "tests/library/test_errors.py", "tests/library/test_workers.py", "tests/tools/test_doctor_population.py",
    "tests/messages/test_libraries.py", "tests/messages/test_distributed.py",
)
FRESH_INTERPRETER = "HOOKLAB_TEST_IN_A_FRESH_INTERPRETER"  # set in the fresh interpreter: it runs the test itself
CHILD_LIMIT_S = 270  # the test's own limit in the fresh interpreter, under the one it has here (pyproject.toml: 300 s);
# both stretch with the load (conftest.py), so a busy machine is not taken for a hang


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if not pyfuncitem.nodeid.startswith(FORKS_AUTOGRAD) or os.environ.get(FRESH_INTERPRETER):
        return None
    from hooklab.workers import _fork_can_run_autograd
    if _fork_can_run_autograd():
        return None
    _run_in_a_fresh_interpreter(pyfuncitem)
    return True


def _run_in_a_fresh_interpreter(item) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    env[FRESH_INTERPRETER] = "1"
    # log records below WARNING are not reported with a failure: torch.compile's DEBUG trace records once filled the
    # whole report and hid the assertion that failed
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", f"timeout={CHILD_LIMIT_S}",
            "-o", "log_level=WARNING", item.nodeid]
    why = ("this worker can no longer fork a process that runs autograd (an earlier test started autograd's worker "
           "threads), so the test ran in a fresh interpreter")
    # No limit of its own here: the child ends itself at its test's limit, stretched with the load, and reports
    # where it waited; this test's own limit (stretched the same way) is the guard beyond it, and subprocess.run
    # kills the child when that guard ends the wait.
    run = subprocess.run(argv, cwd=item.config.rootpath, env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        pytest.fail(f"{why}, where it failed (exit {run.returncode}):\n{failure_report(run.stdout + run.stderr)}",
                    pytrace=False)


def failure_report(output: str, limit: int = 6000) -> str:
    """What a failed pytest run says about its failure: from its FAILURES section on, and where that is longer than
    ``limit``, its beginning (where the assertion is) and its end (the summary), the middle left out and counted."""
    start = output.find("= FAILURES =")
    text = output[output.rfind("\n", 0, start) + 1:] if start >= 0 else output
    if len(text) <= limit:
        return text
    head, tail = text[:limit * 2 // 3], text[-(limit // 3):]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters left out ...]\n{tail}"
