"""tools/launch/copies.py: the launch copies that leave the repository (the site's download button, Colab, Binder) start
with a cell that installs hooklab where it is missing, and exactly what the notebook imports at the lock's versions.
Here: what the cell and the launch branch's tree hold, and that every notebook's cell installs every distribution
its code imports (read here independently of tools/notebooks/imports.py: import lines by a regular expression,
distributions by the files they installed). The cell itself runs in a fresh environment in
tests/tools/test_package.py; whole launch copies run as Colab would with ``python -m tools.launch.check``."""
from __future__ import annotations

import ast
import doctest
import importlib.metadata
import importlib.util
import json
import re
import shutil
import sys
from functools import cache
from pathlib import Path

import pytest
import tomllib

from tools.launch import copies as launch
from tools.notebooks import imports as notebook_imports

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]

URL = "https://github.com/example-owner/hooklab"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def locked() -> dict[str, set[str]]:
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    found: dict[str, set[str]] = {}
    for package in lock["package"]:
        found.setdefault(re.sub(r"[-_.]+", "-", package["name"]).lower(), set()).add(package.get("version"))
    return found


def test_pins_are_torch_at_the_locked_version():
    group = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["dependency-groups"]["course"]
    assert launch.pins() == [f"torch=={version}" for version in locked()["torch"]]
    assert launch.pins()[0] in group  # the course group pins the same torch


def test_a_missing_lock_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    with pytest.raises(launch.LaunchError, match="uv.lock is missing"):
        launch.pins(tmp_path / "pyproject.toml")


def test_the_tools_docstring_examples_run():
    for module in (launch, notebook_imports):
        assert doctest.testmod(module).failed == 0, module.__name__


# ---- every notebook's cell installs what the notebook imports ------------------------------------------------

IMPORT_LINE = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", re.MULTILINE)


@cache
def file_owners() -> dict[Path, str]:
    """Installed file -> the distribution that installed it (from every distribution's RECORD): top-level modules and
    packages' ``__init__`` files only."""
    owners = {}
    for dist in importlib.metadata.distributions():
        for file in dist.files or []:
            if len(file.parts) <= 2 and file.suffix in (".py", ".so") and not file.parts[0].endswith(".dist-info"):
                name = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
                owners[Path(str(dist.locate_file(file))).resolve()] = name
    return owners


def owner(module: str) -> str | None:
    """The distribution that provides ``module`` (None: the standard library); editable installs map by name."""
    if module in sys.stdlib_module_names:
        return None
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"{module} is imported by a notebook but not installed in .venv"
    if spec.origin in (None, "built-in", "frozen"):
        return None
    where = Path(spec.origin).resolve()
    if where in file_owners():
        return file_owners()[where]
    if module == "hooklab":  # installed editable: the file is the checkout's
        return "hooklab"
    pytest.fail(f"no installed distribution's RECORD lists {where} (module {module})")


def cell_lists(copy: dict) -> tuple[str | None, list[str]]:
    """HOOKLAB and PINS as the launch copy's install cell assigns them."""
    cell, = [c for c in copy["cells"] if "hooklab-install" in c.get("metadata", {}).get("tags", [])]
    values = {}
    for node in ast.parse(cell["source"]).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("HOOKLAB", "PINS"):
                values[node.targets[0].id] = ast.literal_eval(node.value)
    return values["HOOKLAB"], values["PINS"]


def not_installed(copy: dict) -> list[str]:
    """What the launch copy's code imports that its install cell does not install at the lock's version."""
    hooklab, pins = cell_lists(copy)
    code = "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in copy["cells"]
                     if c["cell_type"] == "code" and "hooklab-install" not in c.get("metadata", {}).get("tags", []))
    missing = []
    for module in sorted(set(IMPORT_LINE.findall(code))):
        dist = owner(module)
        if dist is None or dist in launch.IN_EVERY_KERNEL:
            continue
        if dist == "hooklab":
            if not (hooklab or "").startswith("hooklab[course] @ "):
                missing.append("hooklab[course]")
        elif not any(f"{dist}=={version}" in pins for version in locked()[dist]):
            missing.append(dist)
    return missing


NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name[:2] for p in NOTEBOOKS])
def test_every_launch_copy_installs_everything_its_notebook_imports(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    copy = launch.launch_copy(nb, "en", launch.requirement(URL, COMMIT), launch.pins())
    assert not_installed(copy) == [], f"{path.name}: its launch copy's install cell misses these"
    _, pins = cell_lists(copy)
    assert pins[0] == launch.pins()[0] and len(set(pins)) == len(pins)


def test_notebook_15s_cell_installs_its_libraries_at_the_course_pins():
    # the launch copy that failed 15 of 39 cells: it installed none of these
    nb = json.loads((ROOT / "notebooks" / "15_hooks_in_libraries.ipynb").read_text(encoding="utf-8"))
    _, pins = cell_lists(launch.launch_copy(nb, "en", launch.requirement(URL, COMMIT), launch.pins()))
    for name in ("diffusers", "captum", "torchao", "pytorch-lightning", "timm", "accelerate", "peft"):
        assert [p for p in pins if p.split("==")[0] == name] == [f"{name}=={v}" for v in locked()[name]]


def test_a_cell_that_misses_an_import_is_caught():
    # the check above can fail: a notebook importing timm, with a cell that installs torch only (the old fixed list)
    source = "import torch\nimport timm\nfrom hooklab import course"
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": source}]}
    copy = launch.launch_copy(nb, "en", launch.requirement(URL, COMMIT), launch.pins())
    assert not_installed(copy) == []
    copy["cells"][0] = launch.install_cell(launch.requirement(URL, COMMIT), launch.pins(), "en")
    assert not_installed(copy) == ["timm"]
    copy["cells"][0] = launch.install_cell(f"hooklab @ git+{URL}", launch.pins() + ["timm==1.0.31"], "en")
    assert not_installed(copy) == ["hooklab[course]"]


def test_an_import_nothing_provides_is_refused_with_the_notebook_named():
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# 99 · New\ntext"},
                    {"cell_type": "code", "metadata": {}, "source": "import no_such_module_here"}]}
    with pytest.raises(launch.LaunchError, match=r"# 99 · New: 'no_such_module_here' is imported, but no installed "
                                                 r"distribution provides it: add the package"):
        launch.launch_copy(nb, "en", None, launch.pins())
    bad = {"cells": [{"cell_type": "code", "metadata": {}, "source": "def f(:\n"}]}
    with pytest.raises(launch.LaunchError, match="code cell 0 does not parse"):
        launch.notebook_pins(bad)


def test_imports_are_read_through_magics_and_version_calls():
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "%matplotlib inline\n!pip list\nimport torch\n"
                     "from importlib import metadata\nmetadata.version('captum')\nfrom . import local"},
                    {"cell_type": "code", "metadata": {"tags": ["hooklab-install"]}, "source": "import timm"}]}
    assert notebook_imports.imported_modules(nb, skip_tag="hooklab-install") == {"torch", "importlib", "captum"}
    assert launch.notebook_pins(nb) == ["captum==0.9.0", "torch==2.15.0"]


def test_requirement_names_the_repository_at_the_commit():
    assert launch.requirement(URL, COMMIT) == f"hooklab[course] @ git+{URL}@{COMMIT}"
    assert launch.requirement(URL, None) == f"hooklab[course] @ git+{URL}"
    assert launch.requirement(None, COMMIT) is None
    with pytest.raises(launch.LaunchError, match="git commit id"):
        launch.requirement(URL, "main; rm -rf /")


@pytest.mark.parametrize("lang, words", [("zh", "已经能导入 hooklab 时"), ("en", "Installs nothing where")])
def test_install_cell_says_what_it_does_in_the_notebooks_language(lang, words):
    cell = launch.install_cell(f"hooklab[course] @ git+{URL}@{COMMIT}", ["torch==2.15.0"], lang)
    source = cell["source"]
    assert cell["cell_type"] == "code" and cell["metadata"]["tags"] == ["hooklab-install", "remove-cell"]
    assert source.startswith("# ") and words in source
    assert f'HOOKLAB = "hooklab[course] @ git+{URL}@{COMMIT}"' in source and 'PINS = ["torch==2.15.0"]' in source
    assert '"-m", "pip", "install"' in source and "is installed already: nothing to install" in source
    compile(source, "<install cell>", "exec")  # valid Python
    without = launch.install_cell(None, ["torch==2.15.0"], lang)["source"]
    # without a URL, hooklab never comes from pip (what a notebook imports besides may: hooklab installed from a clone)
    assert "pip install -e \\\".[course]\\\"" in without and "HOOKLAB, *wanted" not in without
    namespace: dict = {}
    with pytest.raises(ModuleNotFoundError, match=r"hooklab is not installed\. From a clone"):
        exec(without.replace('find_spec("hooklab")', 'find_spec("hooklab_not_here")'), namespace)
    assert namespace["HOOKLAB"] is None


def test_install_cell_stops_on_a_python_too_old_before_pip(monkeypatch):
    # torch 2.15.0 has no wheel for Python 3.10: the cell says which Python it needs instead of pip's
    # "No matching distribution found"; here the required version is raised past the running one
    source = launch.install_cell(f"hooklab[course] @ git+{URL}", ["torch==2.15.0", "timm==1.0.31"], "en",
                                 python=(sys.version_info.major, sys.version_info.minor + 1))["source"]
    ran = []
    monkeypatch.setattr("subprocess.run", lambda *a, **k: ran.append(a))
    expected = (rf"this notebook needs Python 3\.{sys.version_info.minor + 1} or newer: "
                rf"its packages \(torch==2\.15\.0, "
                rf"timm==1\.0\.31\) have no build for Python 3\.{sys.version_info.minor}; open it in a Jupyter")
    with pytest.raises(RuntimeError, match=expected):
        exec(source.replace('find_spec("hooklab")', 'find_spec("hooklab_not_here")'), {})
    assert ran == []
    assert launch.minimum_python() == (3, 11)
    assert "if sys.version_info < (3, 11):" in launch.install_cell("hooklab", [], "en")["source"]


def test_launch_copy_puts_the_cell_before_the_first_code_cell_once():
    nb = {"cells": [{"cell_type": "markdown", "metadata": {"tags": ["lang-both"]}, "source": "# 01 · Title"},
                    {"cell_type": "code", "metadata": {}, "source": "import hooklab", "outputs": []}],
          "metadata": {"kernelspec": {"name": "hooklab", "display_name": "Python 3 (hooklab)"}}}
    copy = launch.launch_copy(nb, "en", launch.requirement(URL, COMMIT), launch.pins())
    assert [c["cell_type"] for c in copy["cells"]] == ["markdown", "code", "code"]
    assert copy["cells"][1]["id"] == "hooklab-install" and copy["cells"][2]["source"] == "import hooklab"
    assert copy["metadata"]["kernelspec"]["name"] == "python3"
    assert nb["metadata"]["kernelspec"]["name"] == "hooklab" and len(nb["cells"]) == 2  # the input is untouched
    again = launch.launch_copy(copy, "en", launch.requirement(URL, None), launch.pins())
    assert len(again["cells"]) == 3 and f"git+{URL}\"" in again["cells"][1]["source"]  # replaced, not stacked


def test_launch_branch_tree_holds_the_copies_and_what_binder_builds(tmp_path):
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    for name in ("environment.yml", "postBuild", "pyproject.toml", "uv.lock", launch.PACKAGE_PAGE, "LICENSE",
                 "LICENSE-prose.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, root / name)
    shutil.copytree(ROOT / "hooklab", root / "hooklab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "notebooks" / "01_tensor_hooks.ipynb", root / "notebooks")
    out = tmp_path / "launch"
    written = launch.write_tree(out, repository=URL, commit=COMMIT, root=root)
    assert sorted(p.relative_to(out).as_posix() for p in written) == ["en/01_tensor_hooks.ipynb",
                                                                      "zh/01_tensor_hooks.ipynb"]
    for lang in ("zh", "en"):
        nb = json.loads((out / lang / "01_tensor_hooks.ipynb").read_text(encoding="utf-8"))
        assert nb["metadata"]["hooklab_language"] == lang
        first_code = next(c for c in nb["cells"] if c["cell_type"] == "code")
        assert f"git+{URL}@{COMMIT}" in first_code["source"]
    assert "-e ." in (out / "environment.yml").read_text(encoding="utf-8")  # Binder installs this tree's hooklab
    assert (out / "hooklab" / "course" / "assets" / "induction_lm" / "model.safetensors").is_file()
    assert not (out / ".github").exists() and not (out / "notebooks").exists()  # no workflow runs on the branch
    assert COMMIT in (out / "README.md").read_text(encoding="utf-8")
    assert (out / launch.PACKAGE_PAGE).read_text(encoding="utf-8") == (ROOT / launch.PACKAGE_PAGE).read_text(
        encoding="utf-8")  # pyproject.toml's readme: `pip install -e .` needs it


def test_command_line_refuses_a_url_that_is_not_a_repository(tmp_path, capsys):
    assert launch.main([str(tmp_path / "out"), "--repository-url", "github.com/x"]) == 1
    assert "--repository-url should be https://HOST/OWNER/REPO" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ---- the install cell's choices, run with fakes (no pip, no download) -----------------------------------------

HOOKLAB_GIT = f"hooklab[course] @ git+{URL}@{COMMIT}"
NOTEBOOK_PINS = ["torch==2.15.0", "timm==1.0.31", "torchvision==0.29.2"]


def run_cell(monkeypatch, capsys, runtime: dict[str, str], *, hooklab_installed: bool = False,
             pins: list[str] = NOTEBOOK_PINS) -> tuple[list[list[str]], str]:
    """Run a launch copy's install cell in a pretend runtime: ``runtime`` is what is installed (name -> version);
    pip is a fake that "installs" what it is given at the version asked for (a name alone: the release matching the
    running torch). Returns pip's command lines and what the cell printed."""
    import importlib.metadata as metadata
    import importlib.util as util
    import subprocess

    installed = dict(runtime)
    calls: list[list[str]] = []

    def version(name):
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]

    def pip(command, check):
        assert check is True and command[1:4] == ["-m", "pip", "install"]
        calls.append(command[4:])
        for requirement in command[5:]:
            name, _, wanted = requirement.partition("==")
            if " @ " in requirement or name in installed and installed[name].split("+")[0] == wanted:
                continue  # hooklab (below); a distribution installed at the version asked for stays as it is
            installed[name] = wanted or f"matching torch {installed['torch']}"
        installed["hooklab"] = "0.1.0"

    monkeypatch.setattr(metadata, "version", version)
    monkeypatch.setattr(util, "find_spec", lambda name: object() if hooklab_installed and name == "hooklab" else None)
    monkeypatch.setattr(subprocess, "run", pip)
    source = launch.install_cell(HOOKLAB_GIT, pins, "en", torch=("2.13", "2.15.0"))["source"]
    exec(source, {})
    return calls, capsys.readouterr().out


def test_cell_keeps_the_runtimes_torch_at_the_newest_supported_version(monkeypatch, capsys):
    # Colab-like: torch 2.15.0 (the lock's) preinstalled, nothing else of the course's
    calls, out = run_cell(monkeypatch, capsys, {"torch": "2.15.0+cu130"})
    assert calls == [["--quiet", HOOKLAB_GIT, "torch==2.15.0", "timm==1.0.31", "torchvision==0.29.2"]]
    assert "--upgrade" not in calls[0] and "--force-reinstall" not in calls[0]
    assert "outside the range" not in out and "3 GB" not in out
    assert out.splitlines()[-2:] == ["installed: hooklab 0.1.0 | torch 2.15.0+cu130",  # the runtime's, kept
                                     "running on torch 2.15.0+cu130; the outputs shown were verified with torch 2.15.0"]


def test_cell_keeps_the_oldest_supported_torch_and_lets_pip_match_torchvision(monkeypatch, capsys):
    calls, out = run_cell(monkeypatch, capsys, {"torch": "2.13.0+cpu"})
    # torch pinned at the runtime's own release (+cpu is a local label: ==2.13.0 matches it, no download), and
    # torchvision without a version: 0.29.2 asks for torch>=2.14, pip picks the release built for 2.13
    assert calls == [["--quiet", HOOKLAB_GIT, "torch==2.13.0", "timm==1.0.31", "torchvision"]]
    assert "running on torch 2.13.0+cpu; the outputs shown were verified with torch 2.15.0" in out
    assert "outside the range" not in out


def test_cell_installs_only_what_the_runtime_lacks(monkeypatch, capsys):
    # Colab ships torchvision and timm of its own: they stay (hooklab[course]'s ranges still bound what pip keeps)
    calls, _ = run_cell(monkeypatch, capsys, {"torch": "2.14.1", "torchvision": "0.28.9", "timm": "1.0.20"})
    assert calls == [["--quiet", HOOKLAB_GIT, "torch==2.14.1"]]


@pytest.mark.parametrize("running", ["2.12.1", "2.15.1", "2.16.0.dev20261101"])
def test_a_torch_outside_the_range_gets_a_message_and_the_locked_torch(monkeypatch, capsys, running):
    calls, out = run_cell(monkeypatch, capsys, {"torch": running, "torchvision": "0.27.0", "timm": "1.0.31"})
    assert out.splitlines()[0] == (f"torch {running} is outside the range these notebooks run on (2.13 to 2.15.0): "
                                   "installing torch 2.15.0 in its place (from PyPI; on Linux with its CUDA "
                                   "libraries, about 3 GB)")
    # the runtime's torchvision was built for the torch being replaced: it goes too; timm stays
    assert calls == [["--quiet", HOOKLAB_GIT, "torch==2.15.0", "torchvision==0.29.2"]]
    assert out.splitlines()[-1] == "running on torch 2.15.0; the outputs shown were verified with torch 2.15.0"


def test_without_torch_the_cell_says_it_installs_the_locked_one(monkeypatch, capsys):
    calls, out = run_cell(monkeypatch, capsys, {})
    assert out.startswith("torch is not installed: installing torch 2.15.0 (from PyPI; on Linux with its CUDA")
    assert calls == [["--quiet", HOOKLAB_GIT, "torch==2.15.0", "timm==1.0.31", "torchvision==0.29.2"]]


@pytest.mark.parametrize("running, note", [
    ("2.15.0+cpu", None),  # Binder's CPU build of the lock's torch: the same release, nothing to say
    ("2.13.0+cpu", "note: this is torch 2.13.0+cpu; the outputs shown were verified with torch 2.15.0"),
    ("2.9.1", "note: this is torch 2.9.1; the outputs shown were verified with torch 2.15.0 (outside the range these "
              "notebooks run on, 2.13 to 2.15.0)")])
def test_where_hooklab_is_installed_nothing_is_and_another_torch_is_named(monkeypatch, capsys, running, note):
    # Binder, ./course lab: everything the notebook imports is there
    runtime = {"torch": running, "hooklab": "0.1.0", "timm": "1.0.31", "torchvision": "0.29.2+cpu"}
    calls, out = run_cell(monkeypatch, capsys, runtime, hooklab_installed=True)
    assert calls == []
    assert out.splitlines() == ["hooklab 0.1.0 is installed already: nothing to install"] + ([note] if note else [])


def test_the_torch_range_is_the_floor_up_to_the_course_extras_top():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extra, = [r for r in project["optional-dependencies"]["course"] if r.startswith("torch>")]
    low, high = launch.torch_range()
    assert (low, high) == (launch.TORCH_FLOOR, "2.15.0") and extra == f"torch>=2.3,<={high}"
    assert launch.pins() == [f"torch=={high}"]  # the top of the range is the torch the outputs were verified with
    assert launch._release("2.3") <= launch._release(low) <= launch._release(high)
    assert 'LOW, HIGH = "2.13", "2.15.0"' in launch.install_cell(HOOKLAB_GIT, launch.pins(), "zh")["source"]


def test_a_course_extra_without_a_torch_range_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\noptional-dependencies = {course = ["torch>=2.3"]}\n',
                                             encoding="utf-8")
    with pytest.raises(launch.LaunchError, match=r"should name torch as 'torch>=A,<=B', got 'torch>=2.3'"):
        launch.torch_range(tmp_path / "pyproject.toml")
    (tmp_path / "pyproject.toml").write_text('[project]\noptional-dependencies = {course = ["torch>=2.3,<=2.12"]}\n',
                                             encoding="utf-8")
    with pytest.raises(launch.LaunchError, match="TORCH_FLOOR 2.13 is outside"):
        launch.torch_range(tmp_path / "pyproject.toml")


def test_where_hooklab_is_installed_the_cell_still_installs_what_this_notebook_lacks(monkeypatch, capsys):
    # one Jupyter, notebook 01's copy first (hooklab installed), then notebook 15's: its libraries must come too;
    # the running torch stays whatever it is, pinned at its own release
    calls, out = run_cell(monkeypatch, capsys, {"torch": "2.13.0+cpu", "hooklab": "0.1.0", "torchvision": "0.28.0"},
                          hooklab_installed=True)
    assert calls == [["--quiet", "torch==2.13.0", "timm==1.0.31"]]
    assert out.splitlines() == [
        "hooklab 0.1.0 is installed already; installing what this notebook imports and this environment lacks "
        "(pip): timm==1.0.31 ...",
        "running on torch 2.13.0+cpu; the outputs shown were verified with torch 2.15.0"]


def test_a_notebook_using_a_newer_torch_api_keeps_torch_only_from_its_release():
    # notebook 14 calls torch.autograd.graph.queue_callback, new in 2.15.0: on 2.13.0 its cells failed (measured)
    fourteen = json.loads((ROOT / "notebooks" / "14_hooks_in_frameworks.ipynb").read_text(encoding="utf-8"))
    assert launch.notebook_torch_range(fourteen) == ("2.15", "2.15.0")
    copy = launch.launch_copy(fourteen, "en", launch.requirement(URL, COMMIT), launch.pins())
    assert 'LOW, HIGH = "2.15", "2.15.0"' in copy["cells"][next(
        i for i, c in enumerate(copy["cells"]) if c["cell_type"] == "code")]["source"]
    one = json.loads((ROOT / "notebooks" / "01_tensor_hooks.ipynb").read_text(encoding="utf-8"))
    assert launch.notebook_torch_range(one) == launch.torch_range()
    nodes = {"cells": [{"cell_type": "code", "source": "with torch.autograd.graph.node_creation_hook(f): pass"}]}
    assert launch.notebook_torch_range(nodes) == ("2.14", "2.15.0")
