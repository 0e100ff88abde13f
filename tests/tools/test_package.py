"""The package people install: ``uv build`` gives a wheel and an sdist that hold the whole package, with the metadata
PyPI shows (the package page docs/pypi.md with its links filled in as CI fills them, the SPDX licence, classifiers,
project URLs) passing ``twine check --strict``, at the sizes the maintainers' manual states (docs/maintainers/package.md); and the first cell of a launch copy
(tools/launch/copies.py: what Colab or a downloaded notebook runs) installs the wheel with the course's extra into a fresh
environment, says so, and installs nothing the second time; the installed package's doctests pass there.

Nothing is downloaded: the build's setuptools and the environment's packages (the versions uv.lock pins) come from
uv's cache, which ``./course`` filled when it built .venv (offline; without them the tests skip and say so), and pip
runs with ``PIP_NO_INDEX``, so the cell can only install the wheel given to it and must find every pin satisfied. The
wheel's size is printed (``-s`` shows it). Everything is written under pytest's temporary folder.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import patience
from tools.launch import copies as launch, package_page

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".tools" / "bin" / "uv"
EXAMPLE_URL = "https://github.com/example-owner/hooklab"
STEP_TIMEOUT = 240  # s for one build, one install or one run (each takes 5-30 s on an idle machine)
LAUNCH_CHECK_S = 240  # hang guard (stretched by the load: tests/patience.py) for notebook 01's Colab-like run

pytestmark = pytest.mark.timeout(4 * STEP_TIMEOUT)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "UV_PROJECT_ENVIRONMENT", "PYTHONDONTWRITEBYTECODE")}
    return {**env, "UV_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "HF_HUB_OFFLINE": "1", **extra}


def _run(command: list[str], what: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run(command, cwd=cwd, env=_env(**env), capture_output=True, text=True,
                              timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} did not finish within {STEP_TIMEOUT} s: {' '.join(command)}")
    if done.returncode != 0 and ("network was disabled" in done.stderr or "because the network" in done.stderr):
        pytest.skip(f"uv's cache lacks a package ({what}), and tests download nothing: "
                    f"{done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, f"{what} failed ({' '.join(command)}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of what building and locking the package read (building writes nothing into the checkout)."""
    if not UV.exists():
        pytest.skip(f"uv is not installed at {UV} (./course installs it when it builds .venv)")
    source = tmp_path_factory.mktemp("hooklab-src")
    # README.md too: setuptools puts a README into the sdist whether or not it is the package page, as in CI's build
    for name in ("pyproject.toml", "uv.lock", "README.md", launch.PACKAGE_PAGE, "LICENSE", "LICENSE-prose.md"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "hooklab", source / "hooklab", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    package_page.stamp(source, EXAMPLE_URL)  # as check_package.sh does in CI and in the release
    return source


@pytest.fixture(scope="module")
def dist(source, tmp_path_factory) -> dict[str, Path]:
    """``uv build`` of the package: the wheel and the sdist."""
    out = tmp_path_factory.mktemp("dist")
    _run([str(UV), "build", "--out-dir", str(out), str(source)], "uv build", cwd=source)
    wheel, = out.glob("hooklab-*.whl")
    sdist, = out.glob("hooklab-*.tar.gz")
    print(f"\nwheel {wheel.name}: {wheel.stat().st_size / 1024:.0f} KiB; sdist {sdist.name}: "
          f"{sdist.stat().st_size / 1024:.0f} KiB")
    return {"wheel": wheel, "sdist": sdist}


def package_files() -> set[str]:
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "hooklab").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    return {f for f in files if f.endswith((".py", ".typed")) or "/assets/" in f}


def test_wheel_and_sdist_hold_the_whole_package(dist):
    wheel = zipfile.ZipFile(dist["wheel"])
    names = set(wheel.namelist())
    missing = package_files() - names
    assert not missing, f"the wheel lacks {sorted(missing)}"
    assert "hooklab/py.typed" in names and "hooklab/course/assets/induction_lm/model.safetensors" in names
    metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Name: hooklab" in metadata and "Provides-Extra: course" in metadata
    assert "Requires-Dist: torch>=2.3" in metadata
    assert 'Requires-Dist: transformers<=5.23.0,>=5.0; extra == "course"' in metadata  # the verified version at most
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not [n for n in names if n.startswith(("tests/", "notebooks/", "tools/"))]
    with tarfile.open(dist["sdist"]) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert package_files() <= members
    assert {"pyproject.toml", "LICENSE", "LICENSE-prose.md", launch.PACKAGE_PAGE} <= members
    assert dist["wheel"].stat().st_size < 5 * 1024 * 1024  # the small trained model is the largest part


def test_the_metadata_is_what_pypi_shows_and_twine_passes_it(dist):
    wheel = zipfile.ZipFile(dist["wheel"])
    raw = wheel.read(next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    headers, _, description = raw.partition("\n\n")
    fields = [tuple(line.split(": ", 1)) for line in headers.splitlines() if ": " in line]
    for expected in [("License-Expression", "MIT"), ("License-File", "LICENSE"), ("Requires-Python", ">=3.11"),
                     ("Author", "the hooklab authors"), ("Description-Content-Type", "text/markdown"),
                     ("Project-URL", f"Repository, {EXAMPLE_URL}"), ("Project-URL", f"Issues, {EXAMPLE_URL}/issues"),
                     ("Project-URL", "Homepage, https://example-owner.github.io/hooklab/"),
                     ("Classifier", "Programming Language :: Python :: 3.11"), ("Classifier", "Typing :: Typed")]:
        assert expected in fields, expected
    assert not [f for f in fields if f[0] == "Classifier" and f[1].startswith("License ::")]  # PEP 639: the expression
    page = package_page.stamp_page((ROOT / launch.PACKAGE_PAGE).read_text(encoding="utf-8"), EXAMPLE_URL)
    assert description.strip() == page.strip() and "OWNER" not in description
    print(f"\npackage page: {len(description.strip()):,} characters")
    done = _run([sys.executable, "-m", "twine", "check", "--strict", str(dist["wheel"]), str(dist["sdist"])],
                "twine check --strict", cwd=dist["wheel"].parent)
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_the_readme_states_the_sizes_of_this_build(dist):
    built = {kind: path.stat().st_size for kind, path in dist.items()}
    problems = package_page.stale_sizes(package_page.README.read_text(encoding="utf-8"), built)  # the manual's package.md
    assert not problems, "; ".join(problems) + ": write them with `python -m tools.launch.package_page sizes DIST --write`"


@pytest.fixture(scope="module")
def fresh(source, tmp_path_factory) -> Iterator[Path]:
    """A fresh virtual environment with pip (``python -m venv``), given the packages the course's extra and the
    install cell's pins need, at uv.lock's versions (``uv sync --inexact --no-install-project``, offline, linked from
    uv's cache; pip stays), and pytest with pytest-doctestplus for the doctests: everything but hooklab. Its python."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    try:
        _run([sys.executable, "-m", "venv", str(venv)], "python -m venv", cwd=venv.parent)
        _run([str(UV), "sync", "--frozen", "--inexact", "--no-install-project", "--no-default-groups", "--extra",
              "course", "--group", "course", "--group", "dev", "--link-mode", "symlink", "--python",
              str(venv / "bin" / "python")],
             "uv sync (the environment without hooklab)", cwd=source, UV_PROJECT_ENVIRONMENT=str(venv))
        yield venv / "bin" / "python"
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # the throwaway environment goes when the module's tests are done


CELL_ENV = {"PIP_NO_INDEX": "1"}  # pip may install only the wheel it is given: every pin must be satisfied


def test_install_cell_installs_the_wheel_then_skips_and_the_doctests_pass(dist, fresh, tmp_path):
    requirement = f"hooklab[course] @ {dist['wheel'].as_uri()}"
    source = launch.install_cell(requirement, launch.pins(), "en")["source"]
    (tmp_path / "cell.py").write_text(source, encoding="utf-8")
    first = _run([str(fresh), "cell.py"], "the install cell (first run)", cwd=tmp_path, **CELL_ENV)
    assert first.stdout.startswith("installing hooklab and what this notebook imports, at the versions the course is "
                                   f"verified with (pip): {', '.join(launch.pins())} ...\n")
    assert "installed: hooklab 0.1.0 | torch 2.15.0" in first.stdout, first.stdout
    second = _run([str(fresh), "cell.py"], "the install cell (second run)", cwd=tmp_path, **CELL_ENV)
    assert second.stdout == "hooklab 0.1.0 is installed already: nothing to install\n"
    where = _run([str(fresh), "-c", "import hooklab, hooklab.course.induction as m; print(hooklab.__file__); "
                                    "print(m.config().num_hidden_layers)"], "import", cwd=tmp_path).stdout
    assert "/site-packages/hooklab/__init__.py" in where and where.endswith("2\n"), where  # the wheel, course extra
    # the installed package's docstring examples, as the test suite runs them in the checkout
    doctests = _run([str(fresh), "-m", "pytest", "-p", "no:cacheprovider", "-q", "--doctest-modules", "--doctest-plus",
                     "-o", "doctest_optionflags=ELLIPSIS FLOAT_CMP", "--pyargs", "hooklab"],
                    "the installed package's doctests", cwd=tmp_path)
    assert " passed" in doctests.stdout and " failed" not in doctests.stdout, doctests.stdout[-2000:]


def test_notebook_01s_launch_copy_runs_in_a_fresh_environment(dist, tmp_path):
    """The smallest Colab-like run (tools/launch/check.py): notebook 01's launch copy, top to bottom, in a fresh
    environment with pip, Jupyter's kernel and torch, its first cell installing the wheel; offline: the course extra's
    packages come from uv's cache beforehand and pip uses no index (the weekly workflow runs every copy online)."""
    done = patience.run([sys.executable, "-m", "tools.launch.check", "01", "--offline", "--wheel", str(dist["wheel"]),
                         "--out", str(tmp_path)], what="python -m tools.launch.check 01 --offline (a fresh environment "
                        "from uv's cache, pip, notebook 01)", seconds=LAUNCH_CHECK_S, cwd=ROOT, env=_env())
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    line, = [x for x in done.stdout.splitlines() if x.startswith("01_tensor_hooks.ipynb: ")]
    print(f"\n{line}")
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))["results"]
    result, = results
    assert result["failed"] == [] and result["aborted"] is None and result["passed"] == result["code_cells"] > 20
    assert result["installs"] == [f"hooklab @ {dist['wheel'].resolve().as_uri()}", *launch.pins(), "numpy==2.4.6"]
    assert "installed: hooklab 0.1.0 | torch 2.15.0" in result["install_output"]  # the cell installed the wheel
