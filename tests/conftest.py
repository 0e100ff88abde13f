from pathlib import Path

import pytest

# broken notebooks are written by tests into tmp dirs; nothing under tests/ is a course notebook
collect_ignore_glob = ["*.ipynb"]

# Under `./course matrix` (COURSE_MATRIX=1) the unit tests run in a side environment with another torch.
# The tests of tests/tools/ drive `./course lab`, `./course site` and the other tools, which always use the
# locked .venv: they would test the pin, not the torch being checked, so they are skipped there with that reason.
#
# The folders are the markers: tests/library/ (`library`: hooklab itself, what hooklab's torch floor is
# checked with: ./course matrix --library-only), tests/course/ (`course`: exercises and checkers, the
# notebooks' format and prose, export, language), tests/tools/ (`tools`: lab, site, matrix, benchmarks,
# the environment). `-m library` runs the library's tests alone.
FOLDER_MARKERS = ("library", "course", "tools")


def pytest_collection_modifyitems(config, items):
    import os

    tests = Path(__file__).resolve().parent
    for item in items:
        path = Path(str(item.fspath)).resolve()
        if tests in path.parents and path.parent != tests:
            folder = path.relative_to(tests).parts[0]
            if folder in FOLDER_MARKERS:
                item.add_marker(getattr(pytest.mark, folder))
    if os.environ.get("COURSE_MATRIX") != "1":
        return
    skip = pytest.mark.skip(reason="COURSE_MATRIX=1: ./course lab and ./course site use the locked .venv, not this torch")
    for item in items:
        if tests / "tools" in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


@pytest.fixture
def setup_undone():
    """For a test that calls ``course.setup()``: the tests that follow on this worker start from the same
    process-wide settings (tests/process_state.py)."""
    from process_state import restored
    with restored():
        yield
