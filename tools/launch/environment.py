"""environment.yml (conda / Binder), generated from uv.lock: ``uv export`` gives the pins, this adds what it cannot.

    python -m tools.launch.environment            # writes environment.yml
    python -m tools.launch.environment --check    # exit 1 when environment.yml is not what it would write

``uv export --frozen --only-group course`` writes every package the lock resolves for the course's teaching
environment (pyproject.toml's ``course`` group, everything below it included) at its locked version, with the
environment markers of the lock's forks (numpy and networkx have one version for Python 3.11 and another from 3.12).
What a conda environment file needs beyond that, and uv does not write (it has no conda output, and no notion of
PyTorch's builds), is done here:

- the markers are evaluated for Binder's interpreter (CPython 3.11 on Linux x86_64): a package whose marker does not
  hold there is left out, and the rest carry no marker;
- torch and torchvision are PyTorch's CPU builds (``2.15.0+cpu``, the locked release with the ``+cpu`` label) from its
  CPU index, named in the pip section: Binder has no GPU, and PyPI's Linux torch would pull about 3 GB of CUDA
  libraries into the image. What only those CUDA builds need (torch's Linux-only requirements in the lock:
  cuda-toolkit, the nvidia-* libraries, triton, and whatever only they bring) is left out: the ``+cpu`` wheel does not
  require it (its metadata names filelock, typing-extensions, setuptools, sympy, networkx, jinja2, fsspec);
- conda's own part: the Python (3.11, the oldest the lock resolves for), graphviz (the ``dot`` program torchviz
  renders with), pip, and hooklab itself from the checkout (``-e .``).

So the pins are uv's and a test (tests/tools/test_environment.py) checks that the committed file equals a fresh
generation; after ``uv lock`` moves a pin, ``python -m tools.launch.environment`` writes the file again.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".tools" / "bin" / "uv"
TARGET = ROOT / "environment.yml"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_BUILDS = ("torch", "torchvision")
PYTHON = "3.11"
# Binder's interpreter, as packaging's markers name it (mybinder.org builds for Linux on x86_64)
BINDER = {"python_version": PYTHON, "python_full_version": f"{PYTHON}.0", "sys_platform": "linux",
          "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
          "implementation_name": "cpython", "platform_python_implementation": "CPython"}
EXPORT = ["export", "--frozen", "--only-group", "course", "--no-emit-project", "--no-hashes", "--no-header",
          "--no-annotate", "--format", "requirements-txt"]

HEADER = """\
# conda / Binder environment for the hooklab course. GENERATED from uv.lock by `python -m tools.launch.environment`
# (uv export of the course group, every package at its locked version, for CPython {python} on Linux x86_64):
# do not edit; tests/tools/test_environment.py checks it is current. torch and torchvision are PyTorch's CPU builds
# (the "+cpu" wheels of its CPU index, the locked releases): Binder has no GPU, and PyPI's Linux torch would pull
# about 3 GB of CUDA libraries into the image (which is why the CUDA packages of the lock are not here).
# conda env create -f environment.yml && conda activate hooklab
# then: python -m ipykernel install --user --name hooklab   (Binder runs this from postBuild)
name: hooklab
channels:
  - conda-forge
dependencies:
  - python={python}
  - graphviz          # the `dot` program torchviz renders with
  - pip
  - pip:
      - --extra-index-url {index}
"""


class GenerateError(Exception):
    """uv could not export the lock, or the lock lacks what the file needs: the message says what."""


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def exported(root: Path = ROOT) -> str:
    """``uv export`` of the course group (offline: the lock alone is read)."""
    done = subprocess.run([str(UV), *EXPORT], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "UV_OFFLINE": "1"})
    if done.returncode != 0:
        raise GenerateError(f"uv export failed: {done.stderr.strip()[-2000:]}")
    return done.stdout


def cuda_only(lock: Path) -> set[str]:
    """The packages of the lock that only torch's Linux-only requirements (its CUDA build's libraries) bring: reachable
    from the course group's requirements through those, and not without them."""
    packages = {normal(p["name"]): p for p in tomllib.loads(lock.read_text(encoding="utf-8"))["package"]}
    project = next((p for p in packages.values() if p.get("source", {}).get("editable") == "."), None)
    if project is None:
        raise GenerateError(f"{lock} has no entry for the project itself")
    roots = {normal(d["name"]) for d in project.get("dev-dependencies", {}).get("course", [])}

    def reach(skip_torch_linux: bool) -> set[str]:
        seen, todo = set(), list(roots)
        while todo:
            name = todo.pop()
            if name in seen or name not in packages:
                continue
            seen.add(name)
            for dep in packages[name].get("dependencies", []):
                if skip_torch_linux and name == "torch" and "sys_platform == 'linux'" in dep.get("marker", ""):
                    continue
                todo.append(normal(dep["name"]))
                extras = packages.get(normal(dep["name"]), {}).get("optional-dependencies", {})
                todo += [normal(d["name"]) for extra in dep.get("extra", []) for d in extras.get(extra, [])]
        return seen

    return reach(False) - reach(True)


def pins(text: str, *, lock: Path = ROOT / "uv.lock") -> list[str]:
    """The export's requirements that hold on Binder's interpreter, without their markers, the CUDA-only packages
    left out and torch and torchvision as their CPU builds, in the export's order (by name).

    >>> pins("numpy==2.4.6 ; python_full_version < '3.12'\\nnumpy==2.5.5 ; python_full_version >= '3.12'\\n"
    ...      "torch==2.15.0 ; python_full_version < '3.15'\\nnvidia-nccl-cu13==2.30.7 ; sys_platform == 'linux'\\n"
    ...      "torchvision==0.29.2\\n")
    ['numpy==2.4.6', 'torch==2.15.0+cpu', 'torchvision==0.29.2+cpu']
    """
    from packaging.markers import Marker

    skip = cuda_only(lock)
    found = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        requirement, _, marker = (part.strip() for part in line.partition(";"))
        if marker and not Marker(marker).evaluate(BINDER):
            continue
        name, _, version = requirement.partition("==")
        if not version:
            raise GenerateError(f"uv export gave {requirement!r}, not a pin (name==version)")
        if normal(name) in skip:
            continue
        found.append(f"{name}=={version}+cpu" if normal(name) in CPU_BUILDS else requirement)
    missing = [n for n in CPU_BUILDS if not any(normal(p.split("==")[0]) == n for p in found)]
    if missing:
        raise GenerateError(f"the export has no {', '.join(missing)}: the course group should pin them")
    return found


def render(root: Path = ROOT) -> str:
    """environment.yml's text, from ``root``'s lock."""
    lines = [HEADER.format(python=PYTHON, index=CPU_INDEX)]
    lines += [f"      - {pin}\n" for pin in pins(exported(root), lock=root / "uv.lock")]
    lines.append("      - -e .\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.launch.environment", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when environment.yml is not current")
    args = parser.parse_args(argv)
    try:
        text = render()
    except GenerateError as exc:
        print(f"[course] error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print("[course] environment.yml is not what uv.lock gives: python -m tools.launch.environment",
                  file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"[course] wrote {TARGET.name} ({text.count(chr(10) + '      - ') - 1} pins)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
