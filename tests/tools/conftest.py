"""Fixtures shared by the tools' tests, each built ONCE per test run and shared by every test file that uses it,
also across pytest-xdist workers (:func:`once_per_run`: the first worker builds while holding a lock, the others
wait for it and reuse the finished build). Read-only for the tests.

- ``course_site``: the website (`./course site`, both languages), for tests/tools/test_site.py and
  tests/tools/test_browser.py;
- ``classroom_files``: the slide deck and the handout of notebook 06 in both languages (`./course slides`,
  `./course handout`), for tests/tools/test_slides.py and tests/tools/test_browser.py."""
from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE_BUILD_TIMEOUT = 540  # s on an idle machine (stretched by the load); both languages: ~320 s of CPU, 3 min on 2 cores


def once_per_run(tmp_path_factory, name: str, build: Callable[[Path], str]) -> tuple[Path, str]:
    """(folder, text): ``build(folder)`` run once for the whole test run, and the text it returned (a log). The
    first worker to get here builds while holding a lock; the others wait for it (the build has its own time
    limit) and reuse its result. A build that fails is tried again by the next test that needs it."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the folder all workers of this run share (each worker has its own basetemp in it)
    out, done = base / name / "out", base / name / "done.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not done.is_file():
                done.write_text(build(out), encoding="utf-8")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return out, done.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def course_site(tmp_path_factory) -> tuple[Path, str]:
    """(folder, log): `./course site --out folder`; folder/zh, folder/en and folder/index.html as `./course site`
    writes them, log its stderr."""
    def build(out: Path) -> str:
        from patience import run  # a hang guard stretched by the load: a busy machine makes the build slow only

        result = run([str(ROOT / "course"), "site", "--out", str(out)], cwd=ROOT, seconds=SITE_BUILD_TIMEOUT,
                     what="./course site to build both languages")
        if result.returncode != 0:
            pytest.fail(f"./course site failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
        return result.stderr

    return once_per_run(tmp_path_factory, "course-site", build)


# what classroom_files runs: `./course slides` with both languages by default, `./course handout` with --lang
CLASSROOM_COMMANDS = {"slides": ["06"], "handout": ["6", "--lang", "en", "--lang", "zh"]}


@pytest.fixture(scope="session")
def classroom_files(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    """(folder, printed): `./course slides 06 --out folder/slides` and `./course handout 6 --lang en --lang zh
    --out folder/handout`, and the lines each printed on stdout (the files written).

    The tools' main() runs in this process (this worker has hooklab and nbconvert imported already; a command
    line of its own would import them again, ~7 s of CPU each): python -m tools.classroom.slides / tools.classroom.handout run as
    commands in tests/tools/test_slides.py::test_bad_input_gets_a_clear_message."""
    from tools.classroom import handout, slides

    def build(out: Path) -> str:
        printed = {}
        for tool, module in (("slides", slides), ("handout", handout)):
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                status = module.main([*CLASSROOM_COMMANDS[tool], "--out", str(out / tool)])
            if status != 0:
                pytest.fail(f"./course {tool} {' '.join(CLASSROOM_COMMANDS[tool])} failed (exit {status}):\n"
                            f"{stderr.getvalue()[-3000:]}")
            printed[tool] = stdout.getvalue().split()
        return json.dumps(printed)

    out, printed = once_per_run(tmp_path_factory, "classroom", build)
    return out, json.loads(printed)
