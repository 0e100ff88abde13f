from pathlib import Path

import pytest

# broken notebooks are written by tests into tmp dirs; nothing under tests/ is a course notebook
collect_ignore_glob = ["*.ipynb"]

# Under `./course matrix` (COURSE_MATRIX=1) the unit tests run in a side environment with another torch.
# These tests drive `./course lab` / `./course site`, which always use the locked .venv: they would test the
# pin, not the torch being checked, so they are skipped there with that reason.
USES_LOCKED_VENV = {"test_lab.py", "test_lab_command.py", "test_browser.py", "test_site.py"}


def pytest_collection_modifyitems(config, items):
    import os

    if os.environ.get("COURSE_MATRIX") != "1":
        return
    skip = pytest.mark.skip(reason="COURSE_MATRIX=1: ./course lab and ./course site use the locked .venv, not this torch")
    for item in items:
        if Path(str(item.fspath)).name in USES_LOCKED_VENV:
            item.add_marker(skip)



@pytest.fixture
def setup_undone():
    """For a test that calls ``course.setup()``: the tests that follow on this worker start from the same
    process-wide settings (tests/process_state.py)."""
    from process_state import restored
    with restored():
        yield
