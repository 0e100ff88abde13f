"""environment.yml (conda / Binder) is generated from uv.lock (``python -m tools.launch.environment``: ``uv export`` of
the course group, the markers evaluated for Binder's CPython 3.11 on Linux, torch and torchvision as PyTorch's CPU
builds): the committed file equals a fresh generation, and, read independently of the generator, it pins the same
versions as uv.lock and pyproject's course group, PyTorch's CPU builds and none of the CUDA build's libraries."""
import os
import re
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^\s*-\s*([A-Za-z0-9_.\-]+)==([^\s#]+)", re.MULTILINE)


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# Binder has no GPU: torch and torchvision come as PyTorch's CPU builds ("+cpu", a local version label on the locked
# release) from its CPU index, not PyPI's Linux wheels with about 3 GB of CUDA libraries
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_BUILDS = {"torch", "torchvision"}


def conda_pins(*, local: bool = False) -> dict[str, str]:
    """name -> pinned version, without its local label (``2.15.0+cpu`` -> ``2.15.0``; ``local``: the whole pin)."""
    text = (ROOT / "environment.yml").read_text(encoding="utf-8")
    return {normal(n): v if local else v.split("+")[0] for n, v in PIN.findall(text)}


def lock_versions() -> dict[str, set[str]]:
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    versions: dict[str, set[str]] = {}
    for package in lock["package"]:
        versions.setdefault(normal(package["name"]), set()).add(package.get("version", ""))
    return versions


def course_pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pins = {}
    for requirement in project["dependency-groups"]["course"]:
        name, _, version = requirement.partition("==")
        assert version, f"course requirement {requirement!r} is not pinned exactly"
        pins[normal(name)] = version
    return pins


def test_every_conda_pin_is_the_locked_version():
    locked = lock_versions()
    pins = conda_pins()
    assert pins, "no pins found in environment.yml"
    for name, version in pins.items():
        assert name in locked, f"{name} is pinned in environment.yml but not in uv.lock"
        assert version in locked[name], f"{name}=={version} in environment.yml, uv.lock has {sorted(locked[name])}"


def test_binder_takes_pytorchs_cpu_wheels_of_the_locked_releases():
    text = (ROOT / "environment.yml").read_text(encoding="utf-8")
    assert re.search(rf"^\s*-\s*--extra-index-url {re.escape(CPU_INDEX)}\s*$", text, re.MULTILINE), \
        "environment.yml's pip section should name PyTorch's CPU index"
    pins = conda_pins(local=True)
    labelled = {name: version.split("+", 1)[1] for name, version in pins.items() if "+" in version}
    assert labelled == dict.fromkeys(CPU_BUILDS, "cpu"), "torch and torchvision pinned as +cpu, nothing else labelled"
    locked = lock_versions()
    for name in CPU_BUILDS:  # the CPU build of exactly the locked release
        assert pins[name] == f"{next(iter(locked[name]))}+cpu" and len(locked[name]) == 1


def test_conda_env_has_every_course_package_at_its_pin():
    pins = conda_pins()
    for name, version in course_pins().items():
        assert pins.get(name) == version, f"environment.yml should pin {name}=={version}"


@pytest.mark.timeout(300)
def test_the_committed_file_is_a_fresh_generation_from_the_lock():
    from tools.launch import environment

    assert (ROOT / "environment.yml").read_text(encoding="utf-8") == environment.render(), \
        "environment.yml is not what uv.lock gives: run python -m tools.launch.environment"
    assert environment.main(["--check"]) == 0


def test_the_generator_keeps_every_package_the_lock_gives_python_3_11_and_drops_only_the_cuda_builds_libraries():
    # independently of the generator: every locked package (one version each for 3.11) is pinned, but for the
    # libraries only PyPI's CUDA torch needs (torch's requirements with a Linux marker, and theirs)
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    pins = conda_pins()
    torch_linux = {normal(d["name"]) for p in lock["package"] if p["name"] == "torch"
                   for d in p["dependencies"] if "sys_platform == 'linux'" in d.get("marker", "")}
    assert {"triton", "cuda-toolkit", "nvidia-cudnn-cu13"} <= torch_linux
    assert not [name for name in pins if name in torch_linux or name.startswith(("nvidia-", "cuda-"))]
    assert pins["numpy"] == "2.4.6" and pins["networkx"] == "3.6.1"  # the lock's versions for Python 3.11
    for name in ("jinja2", "sympy", "filelock", "fsspec", "typing-extensions", "pillow"):  # the CPU torch's own
        assert name in pins


def test_conda_env_installs_hooklab_and_graphviz():
    text = (ROOT / "environment.yml").read_text(encoding="utf-8")
    assert re.search(r"^\s*-\s*-e \.\s*$", text, re.MULTILINE), "environment.yml must install hooklab itself"
    assert re.search(r"^\s*-\s*graphviz\b", text, re.MULTILINE), "conda must provide graphviz's dot"
    assert re.search(r"^\s*-\s*python=3\.11\s*$", text, re.MULTILINE)


@pytest.mark.skipif(os.environ.get("COURSE_RERUN") == "1",
                    reason="COURSE_RERUN=1: ./course rerun installs another torch on purpose")
def test_installed_environment_matches_the_lock():
    from importlib.metadata import version
    locked = lock_versions()
    for name in course_pins():
        installed = version(name).split("+")[0]
        assert installed in locked[name], f"{name} {installed} installed, uv.lock has {sorted(locked[name])}"


def test_postbuild_registers_the_kernel_the_notebooks_name_as_binder_runs_it(tmp_path):
    """Binder (repo2docker) runs postBuild with the environment's python first on PATH, as the user.

    What can be checked offline: the commands work on the course's packages and leave the kernel the notebooks
    ask for, and the torch check passes outside repo2docker (no REPO_DIR) whatever the build. What cannot:
    conda-forge (unreachable here) providing python 3.11 and graphviz, and PyTorch's CPU index (unreachable here)
    giving Binder torch 2.15.0+cpu.
    """
    import json
    import subprocess
    import sys

    from tools.notebooks.kernelspec import DISPLAY_NAME, NAME  # tools/notebooks/kernelspec.py

    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path),
           "MPLCONFIGDIR": str(tmp_path / "mpl"), "JUPYTER_PLATFORM_DIRS": "1"}
    result = subprocess.run(["bash", str(ROOT / "postBuild")], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert re.search(r"^torch 2\.15\.0\S* \((CPU|CUDA) build\)$", result.stdout, re.MULTILINE), result.stdout
    specs = list(tmp_path.rglob(f"kernels/{NAME}/kernel.json"))
    assert len(specs) == 1, f"postBuild left no kernel spec named {NAME!r} under the home folder: {result.stderr}"
    spec = json.loads(specs[0].read_text(encoding="utf-8"))
    assert spec["display_name"] == DISPLAY_NAME and spec["language"] == "python"
    notebook = json.loads((ROOT / "notebooks" / "00_introduction.ipynb").read_text(encoding="utf-8"))
    assert notebook["metadata"]["kernelspec"]["name"] == NAME
    # in Binder's image (repo2docker sets REPO_DIR) a CUDA build of torch fails the build: the CPU wheels were not used
    import torch
    inside = subprocess.run(["bash", str(ROOT / "postBuild")], cwd=ROOT, env={**env, "REPO_DIR": str(ROOT)},
                            capture_output=True, text=True, timeout=120)
    assert (inside.returncode != 0) == bool(torch.version.cuda), inside.stderr
    if torch.version.cuda:
        assert "should give Binder PyTorch's CPU wheels, and this torch is a CUDA build" in inside.stderr
