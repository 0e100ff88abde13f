from pathlib import Path

import pytest

# broken notebooks are written by tests into tmp dirs; nothing under tests/ is a course notebook
collect_ignore_glob = ["*.ipynb"]

# Under `./course matrix` (COURSE_MATRIX=1) the unit tests run in a side environment with another torch.
# These tests drive `./course lab` / `./course site`, which always use the locked .venv: they would test the
# pin, not the torch being checked, so they are skipped there with that reason.
USES_LOCKED_VENV = {"test_lab.py", "test_lab_command.py", "test_browser.py", "test_site.py"}


# Tests of the course rather than of the library (marker `course`): exercises and checkers, notebooks' format and
# prose, export, language, lab, site, matrix. `-m "not course"` runs the library's tests alone, which is what
# hooklab's torch floor is checked with (./course matrix --library-only); the course itself targets the pin.
COURSE_FILES = ("test_exercise", "test_attempt.py", "test_export.py", "test_language.py", "test_lab", "test_site.py",
                "test_browser.py", "test_glossary.py", "test_notebook_", "test_matrix.py")


def pytest_collection_modifyitems(config, items):
    import os

    for item in items:
        name = Path(str(item.fspath)).name
        if name.startswith(COURSE_FILES) or "setup" in item.name and name == "test_lookup_and_setup.py":
            item.add_marker(pytest.mark.course)
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
