from pathlib import Path

import pytest

# broken notebooks are written by tests into tmp dirs; nothing under tests/ is a course notebook
collect_ignore_glob = ["*.ipynb"]

# Under `./course rerun` (COURSE_RERUN=1) the unit tests run in a side environment with another torch.
# The tests of tests/tools/ drive `./course lab`, `./course site` and the other tools, which always use the
# locked .venv: they would test the pin, not the torch being checked, so they are skipped there with that reason.
#
# The folders are the markers: tests/library/ (`library`: hooklab itself, what hooklab's torch floor is
# checked with: ./course rerun --library-only), tests/course/ (`course`: exercises and checkers, the
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
    items.sort(key=_long_first)  # stable: every file's tests stay together and in their order
    if os.environ.get("COURSE_RERUN") != "1":
        return
    skip = pytest.mark.skip(reason="COURSE_RERUN=1: ./course lab and ./course site use the locked .venv, not this torch")
    for item in items:
        if tests / "tools" in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


# The files that take long but have few tests go first (./course test passes --no-loadscope-reorder, so xdist hands the
# files out in this order). By default xdist hands out the files with the most tests first, and a worker would be
# left alone with one of these at the end while the other idles.
LONG_FIRST = (
    "tests/tools/test_browser.py", "tests/tools/test_install.py", "tests/tools/test_types.py", "notebooks/07_",
    "notebooks/11_", "tests/library/test_zoo.py", "notebooks/05_", "tests/tools/test_benchmarks_memory.py",
    "tests/tools/test_slides.py", "notebooks/12_", "tests/tools/test_lab.py", "tests/course/test_exercises_nb10.py",
    "tests/tools/test_cpu_kernels.py", "tests/tools/test_site.py", "notebooks/06_", "notebooks/08_",
)


def _long_first(item) -> int:
    return next((i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)), len(LONG_FIRST))


@pytest.fixture
def setup_undone():
    """For a test that calls ``course.setup()``: the tests that follow on this worker start from the same
    process-wide settings (tests/process_state.py)."""
    from process_state import restored
    with restored():
        yield


@pytest.fixture(autouse=True)
def a_fresh_kernels_record_of_consulted_probes():
    """The exercises' harness notes the hook-matrix probes a learner ran outside a check (exercise 17.3 refuses a
    prediction whose cells were probed); a test starts, as a fresh kernel does, with none noted."""
    import sys

    harness = sys.modules.get("hooklab.course.exercises._harness")
    if harness is not None:
        harness.forget_consulted()
    yield
