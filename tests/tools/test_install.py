"""`pip install hooklab` and `pip install "hooklab[course]"`, into a fresh environment, give what they promise.

One environment (module fixtures): the plain install is made and checked first, then the course's extra is added
and checked. Both are installed by uv from a copy of the package's files (pyproject.toml, uv.lock, docs/pypi.md,
hooklab/), non-editable: uv builds the wheel and installs it with the versions uv.lock pins, offline, from
uv's cache (which ``./course`` filled when it built .venv; files are symlinked from it, so an environment takes about
100 MB and 10 s). Nothing is downloaded: without the packages in uv's cache the tests skip and say so.

- plain: ``import hooklab`` and the course's checkers (``course.setup``, ``check``, ``hint``, ``attempt``) work with
  torch alone; nbformat, nbconvert and transformers are not there, and the export and the course's language model
  raise an ImportError whose ``pip install`` adds ``hooklab[course]`` from where this hooklab came from; the checks of
  04.3 and 12.1 (torchvision, transformers) say the same in one line.
- with the course's extra: the export writes a one-language notebook and the language model's config loads.
"""
from __future__ import annotations

import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

import patience

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".tools" / "bin" / "uv"
# hang guards (an idle machine's figure, stretched by the load: tests/patience.py) and CPU-time limits on the work
INSTALL_S, INSTALL_CPU_S = 240, 240  # one `uv sync` from the cache: about 10 s, idle
RUN_S, RUN_CPU_S = 120, 120  # one python process in an installed environment (importing torch, transformers)

pytestmark = pytest.mark.timeout(INSTALL_S + RUN_S + 30)  # each fixture: one install, one run


def _env() -> dict[str, str]:
    # PYTHONDONTWRITEBYTECODE (./course test sets it) is dropped: the first run writes torch's and hooklab's bytecode
    # into the fresh environment (a temporary folder), and the second run reads it instead of compiling them again.
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "UV_PROJECT_ENVIRONMENT", "PYTHONDONTWRITEBYTECODE")}
    return {**env, "UV_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of what building the package reads, so that building writes nothing into the checkout."""
    if not UV.exists():
        pytest.skip(f"uv is not installed at {UV} (./course installs it when it builds .venv)")
    copy = tmp_path_factory.mktemp("hooklab-src")
    for name in ("pyproject.toml", "uv.lock", "docs/pypi.md"):  # docs/pypi.md: pyproject.toml's readme
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    shutil.copytree(ROOT / "hooklab", copy / "hooklab", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return copy


def _install(project: Path, venv: Path, *extras: str) -> Path:
    """``uv sync`` of the package alone (no dependency group) plus ``extras`` into ``venv``; its python."""
    command = [str(UV), "sync", "--frozen", "--no-default-groups", "--no-editable", "--link-mode", "symlink",
               "--python", sys.executable, *(f"--extra={e}" for e in extras)]
    done = patience.run(command, what=f"uv sync {' '.join(extras) or '(no extra)'} to install into {venv}",
                        seconds=INSTALL_S, cpu_seconds=INSTALL_CPU_S, cwd=project,
                        env={**_env(), "UV_PROJECT_ENVIRONMENT": str(venv)})
    if done.returncode != 0:
        if "network was disabled" in done.stderr or "because the network" in done.stderr:
            pytest.skip(f"uv's cache lacks a package the install needs (torch?), and tests download nothing: "
                        f"{done.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"{' '.join(command)} failed:\n{done.stderr}")
    return venv / "bin" / "python"


def _run(python: Path, code: str, cwd: Path) -> str:
    done = patience.run([str(python), "-c", textwrap.dedent(code)], what=f"{python} to run the checks",
                        seconds=RUN_S, cpu_seconds=RUN_CPU_S, cwd=cwd, env=_env())
    assert done.returncode == 0, f"{python} -c ... failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


PLAIN = """
    import importlib.util, pathlib
    import torch
    import hooklab
    from hooklab import course
    print("hooklab from", pathlib.Path(hooklab.__file__).parent.parent.name)
    print("missing:", *[m for m in ("nbformat", "nbconvert", "transformers", "matplotlib")
                        if importlib.util.find_spec(m) is None])
    print("typed:", (pathlib.Path(hooklab.__file__).parent / "py.typed").exists())
    course.setup(verbose=False)
    course.check("00.1", None)
    course.attempt(lambda: hooklab.get_module(torch.nn.Linear(1, 1), "x"))
    model = torch.nn.Sequential(torch.nn.ReLU())
    with hooklab.capture(model, "0") as store:
        model(-torch.ones(2))
    print("captured:", store["0"].tolist())
    for key in ("04.3", "12.1"):  # their checks need torchvision / transformers, of the course's extra
        course.check(key, lambda *args: None)
    for what, get in (("export", lambda: course.export_notebook),
                      ("model", lambda: __import__("hooklab.course.induction").course.induction.config())):
        try:
            get()
        except ImportError as exc:
            print(what, type(exc).__name__, exc.name, "|", exc)
        else:
            print(what, "no error")
"""

WITH_COURSE = """
    import json, pathlib
    from hooklab import course
    from hooklab.course import induction
    written = course.export_notebooks("en", "out", [{notebook!r}])
    cells = json.loads(written[0].read_text())["cells"]
    print("cells:", len(cells), "| zh tags left:", sum("lang-zh" in c.get("metadata", {{}}).get("tags", [])
                                                     for c in cells))
    print("layers:", induction.config().num_hidden_layers)
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """One fresh environment: first as ``pip install hooklab`` leaves it, then with the course's extra added
    (torch is installed once, which halves the test's time; the plain checks run before the extra exists)."""
    return tmp_path_factory.mktemp("install") / "venv"


@pytest.fixture(scope="module")
def plain(project, venv, tmp_path_factory) -> str:
    """What the checks print in an environment of ``pip install hooklab``."""
    python = _install(project, venv)
    return _run(python, PLAIN, tmp_path_factory.mktemp("plain-run"))


@pytest.fixture(scope="module")
def with_course(project, venv, plain, tmp_path_factory) -> str:
    """What the checks print once ``pip install "hooklab[course]"`` has added the extra to that environment."""
    python = _install(project, venv, "course")
    notebook = ROOT / "notebooks" / "00_introduction.ipynb"
    return _run(python, WITH_COURSE.format(notebook=str(notebook)), tmp_path_factory.mktemp("course-run"))


def test_plain_install_gives_the_library_and_the_checkers_with_torch_alone(plain):
    assert "hooklab from site-packages" in plain  # the installed wheel, not the checkout
    assert "missing: nbformat nbconvert transformers matplotlib" in plain
    assert "typed: True" in plain
    assert "[00.1]" in plain and "UnknownModuleError: Linear has no submodule 'x'" in plain
    assert "captured: [0.0, 0.0]" in plain


def test_plain_install_says_which_extra_the_export_and_the_model_need(plain, project):
    export = next(line for line in plain.splitlines() if line.startswith("export "))
    model = next(line for line in plain.splitlines() if line.startswith("model "))
    # the command adds the extra to this installation, from where it came (here: a folder; hooklab is not on PyPI)
    command = f'pip install "hooklab[course] @ {project.as_uri()}"'
    assert export.startswith("export ImportError nbformat |") and command in export, export
    assert model.startswith("model ImportError ") and command in model, model
    assert "safetensors" in model or "transformers" in model
    # the checks that need a package of the extra say so in one line each (review round 3, N-d), with that command
    for key, package in (("04.3", "torchvision"), ("12.1", "transformers")):
        line = next(line for line in plain.splitlines() if line.startswith(f"[{key}] the check"))
        assert line == (f"[{key}] the check of exercise {key} needs {package}, which is not installed: it comes with "
                        f"the course's extra, {command}"), line


def test_course_extra_gives_the_export_and_the_language_model(with_course):
    assert "| zh tags left: 0" in with_course and "cells: 0 " not in with_course, with_course
    assert "layers: 2" in with_course
