"""Fixtures shared by the tools' tests.

``course_site``: the website (`./course site`, both languages) built ONCE per test run and shared by every test
file that uses it (tests/tools/test_site.py, tests/tools/test_browser.py), also across pytest-xdist workers: the
first worker builds while holding a lock, the others wait for it and reuse the finished build."""
from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE_BUILD_TIMEOUT = 540  # s; both languages take ~50 s of CPU, up to 230 s were seen on 2 loaded cores


@pytest.fixture(scope="session")
def course_site(tmp_path_factory) -> tuple[Path, str]:
    """(folder, log): `./course site --out folder` run once for the whole test run; folder/zh, folder/en and
    folder/index.html as `./course site` writes them, log its stderr. Read-only for the tests."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the folder all workers of this run share (each worker has its own basetemp in it)
    out, done = base / "course-site" / "site", base / "course-site" / "build.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(base / "course-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker building: wait for it (it has its own time limit)
        try:
            if not done.is_file():
                try:
                    result = subprocess.run([str(ROOT / "course"), "site", "--out", str(out)], cwd=ROOT,
                                            capture_output=True, text=True, timeout=SITE_BUILD_TIMEOUT)
                except subprocess.TimeoutExpired as exc:
                    pytest.fail(f"./course site did not build both languages within {SITE_BUILD_TIMEOUT} s; "
                                f"its output so far:\n{(exc.stderr or b'')[-3000:]!r}")
                if result.returncode != 0:
                    pytest.fail(f"./course site failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
                done.write_text(result.stderr, encoding="utf-8")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return out, done.read_text(encoding="utf-8")
