"""tools/launch/copies.py: the launch copies that leave the repository (the site's download button, Colab, Binder) start
with a cell that installs hooklab where it is missing, and exactly what the notebook uses at the lock's versions.
Here: what the cell and the launch branch's tree hold, that every notebook's and recipe notebook's cell installs
every distribution its code imports (read here independently of tools/notebooks/imports.py: import lines by a regular
expression, distributions by the files they installed) and what the parts of hooklab it reaches import when they run
(observed in a process of their own), and nothing else; the install cell's choices, run as Python with pip faked. The cell itself runs in a fresh environment in
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


def locked() -> dict[str, list[str]]:
    """Normalised name -> the versions uv.lock pins (parsed once while the file is unchanged: each of the 86 copies
    below asks, and parsing the lock takes a second)."""
    return notebook_imports.locked_versions(ROOT / "uv.lock")


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
            if not (hooklab or "").startswith("hooklab @ "):
                missing.append("hooklab")
        elif not any(f"{dist}=={version}" in pins for version in locked()[dist]):
            missing.append(dist)
    return missing


NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RECIPES = sorted((ROOT / "recipes").glob("[0-9][0-9]_*.ipynb"))


def imported_distributions(copy: dict) -> set[str]:
    """The distributions (not hooklab, not the standard library, not what every kernel has) the copy's code imports,
    by the regular expression and the installed files' owners."""
    code = "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in copy["cells"]
                     if c["cell_type"] == "code" and "hooklab-install" not in c.get("metadata", {}).get("tags", []))
    found = {owner(m) for m in set(IMPORT_LINE.findall(code))}
    return found - {None, "hooklab"} - launch.IN_EVERY_KERNEL


@pytest.mark.parametrize("path", NOTEBOOKS + RECIPES, ids=[f"{p.parent.name[0]}{p.name[:2]}" for p in NOTEBOOKS + RECIPES])
def test_every_launch_copy_installs_everything_its_notebook_imports_and_nothing_more(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    copy = launch.launch_copy(nb, "en", launch.requirement(URL, COMMIT), launch.pins())
    assert not_installed(copy) == [], f"{path.name}: its launch copy's install cell misses these"
    hooklab, pins = cell_lists(copy)
    assert hooklab == f"hooklab @ git+{URL}@{COMMIT}"  # no extra: import hooklab needs torch only
    assert pins[0] == launch.pins()[0] and len(set(pins)) == len(pins)
    # exactly: the notebook's imports and what the parts of hooklab it reaches import, at the lock's pins
    names = {p.split("==")[0] for p in pins}
    used = imported_distributions(copy) | launch.hooklab_needs(nb) | {"torch", "numpy"}  # launch.WITH_TORCH (test below)
    used |= launch.needed_by_names(nb)  # transformers' Trainer needs accelerate (test below)
    # and torchvision where something it uses requires it (timm does): the cell installs the build for the kept torch
    assert names == used | (required_below(used) & {"torchvision"})
    for pin in pins:
        name, version = pin.split("==")
        assert version in locked()[name]


def required_below(names: set[str]) -> set[str]:
    """What the installed distributions ``names`` require, directly or below (their metadata, no extras)."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [re.sub(r"[-_.]+", "-", re.split(r"[<>=!~ ;\[(]", r, maxsplit=1)[0]).lower()
                 for r in requires if "extra ==" not in r]
    return seen


def test_notebook_01s_copy_installs_torch_numpy_and_hooklab_only():
    nb = json.loads((ROOT / "notebooks" / "01_tensor_hooks.ipynb").read_text(encoding="utf-8"))
    assert cell_lists(launch.launch_copy(nb, "en", launch.requirement(URL, COMMIT), launch.pins())) == (
        f"hooklab @ git+{URL}@{COMMIT}", [*launch.pins(), "numpy==2.4.6"])


def newly_imported(code: str) -> set[str]:
    """The distributions that hooklab's own code imports while a piece of code runs (in a process of its own, every
    ``import`` statement executed in a hooklab module recorded): the truth :func:`tools.launch.copies.hooklab_needs`
    reads from hooklab's source."""
    import os
    import subprocess

    probe = ("import builtins\nseen = set()\nreal = builtins.__import__\n"
             "def spy(name, globals=None, locals=None, fromlist=(), level=0):\n"
             "    if level == 0 and str((globals or {}).get('__name__', '')).startswith('hooklab'):\n"
             "        seen.add(name.split('.')[0])\n"
             "    return real(name, globals, locals, fromlist, level)\n"
             "builtins.__import__ = spy\n" + code + "\nprint(' '.join(sorted(seen)))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    found = {owner(module) for module in done.stdout.split()}
    return found - {None, "hooklab", "torch"} - launch.IN_EVERY_KERNEL


@pytest.mark.timeout(600)
@pytest.mark.parametrize("code, uses", [
    # notebook 12 loads the course's small trained model
    ("from hooklab.course import induction\ninduction.load_model()", "from hooklab.course import induction"),
    # the one-language export
    ("import json\nfrom hooklab import course\n"
     "course.export_notebook(json.load(open('notebooks/01_tensor_hooks.ipynb')), 'en')",
     "from hooklab import course\ncourse.export_notebook(nb, 'en')"),
    # exercise 04.3's checker builds torchvision's ResNet blocks
    ("from hooklab.course.exercises import nb04\nnb04._tiny_resnet(0, [2, 2], 4)",
     "from hooklab import course\ncourse.check('04.3', answer)"),
])
def test_what_the_parts_of_hooklab_a_notebook_reaches_import_is_installed(code, uses):
    # what the part imports when it runs, observed: each is in the cell of a notebook whose code reaches it
    needed = newly_imported(code)
    assert needed, code  # the probe sees imports (it can fail)
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": uses}]}
    _, pins = cell_lists(launch.launch_copy(nb, "en", launch.requirement(URL, COMMIT), launch.pins()))
    assert needed <= {p.split("==")[0] for p in pins}, (needed, pins)


def test_notebook_12s_cell_installs_what_its_model_loading_needs():
    nb = json.loads((ROOT / "notebooks" / "12_transformer_language_models.ipynb").read_text(encoding="utf-8"))
    _, pins = cell_lists(launch.launch_copy(nb, "en", launch.requirement(URL, COMMIT), launch.pins()))
    assert {"safetensors", "transformers"} <= {p.split("==")[0] for p in pins}  # safetensors: not imported by it


def test_every_optional_import_of_hooklab_is_in_a_part_the_copies_know():
    # an import of the `course` extra's packages that hooklab makes inside a function (the only place it makes them)
    # lies in a file that HOOKLAB_PARTS or the exercises' keys lead to: a new one elsewhere fails here
    known = {(ROOT / "hooklab" / name).resolve() for _, names in launch.HOOKLAB_PARTS for name in names}
    torch_needs = {re.sub(r"[-_.]+", "-", re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0]).lower()
                   for r in importlib.metadata.requires("torch") or []}  # typing-extensions: torch installs it
    for path in sorted((ROOT / "hooklab").rglob("*.py")):
        lazy = {m for m in re.findall(r"^[ \t]+(?:import|from)\s+([A-Za-z_]\w*)", path.read_text(encoding="utf-8"),
                                      re.MULTILINE) if m not in sys.stdlib_module_names}
        lazy = {m for m in lazy - {"torch", "hooklab", "IPython", "matplotlib_inline"}  # a module, not a docstring's word
                if importlib.util.find_spec(m) is not None and owner(m) not in torch_needs}
        if path.name == "env.py" or path.name == "__init__.py" and path.parent.name == "exercises":
            continue  # course.setup() and the exercises' display: used where installed, skipped where not
        if lazy:
            assert path.resolve() in known or re.fullmatch(r"nb\d\d\.py", path.name), (path, lazy)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_a_recipes_download_is_a_standalone_notebook_with_its_install_cell(tmp_path, lang):
    recipe = ROOT / "recipes" / "16_accelerate.ipynb"
    written = launch.write_recipe_download(recipe, lang, tmp_path, repository=URL, commit=COMMIT)
    assert written == tmp_path / recipe.name
    nb = json.loads(written.read_text(encoding="utf-8"))
    assert nb["metadata"]["hooklab_language"] == lang and nb["metadata"]["kernelspec"]["name"] == "python3"
    hooklab, pins = cell_lists(nb)
    assert hooklab == f"hooklab @ git+{URL}@{COMMIT}"
    assert {"transformers", "peft", "diffusers", "accelerate"} <= {p.split("==")[0] for p in pins}
    first_code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    assert first_code["id"] == "hooklab-install"
    other = "lang-en" if lang == "zh" else "lang-zh"
    assert not [c for c in nb["cells"] if other in c.get("metadata", {}).get("tags", [])]
    with pytest.raises(launch.LaunchError, match="not a recipe notebook"):
        launch.write_recipe_download(ROOT / "notebooks" / "01_tensor_hooks.ipynb", lang, tmp_path)


def test_notebook_15s_cell_installs_its_libraries_at_the_course_pins():
    # the launch copy that failed 15 of 39 cells: it installed none of these
    nb = json.loads((ROOT / "notebooks" / "15_hooks_in_libraries.ipynb").read_text(encoding="utf-8"))
    _, pins = cell_lists(launch.launch_copy(nb, "en", launch.requirement(URL, COMMIT), launch.pins()))
    for name in ("diffusers", "captum", "torchao", "pytorch-lightning", "timm", "accelerate", "peft"):
        assert [p for p in pins if p.split("==")[0] == name] == [f"{name}=={v}" for v in locked()[name]]
    # not imported by it, but timm requires it: with a +cpu torch, PyPI's (CUDA) build would break `import timm`
    assert f"torchvision=={next(iter(locked()['torchvision']))}" in pins


def test_a_cell_that_misses_an_import_is_caught():
    # the check above can fail: a notebook importing timm, with a cell that installs torch only (the old fixed list)
    source = "import torch\nimport timm\nfrom hooklab import course"
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": source}]}
    copy = launch.launch_copy(nb, "en", launch.requirement(URL, COMMIT), launch.pins())
    assert not_installed(copy) == []
    copy["cells"][0] = launch.install_cell(launch.requirement(URL, COMMIT), launch.pins(), "en")
    assert not_installed(copy) == ["timm"]
    copy["cells"][0] = launch.install_cell(None, launch.pins() + ["timm==1.0.31"], "en")
    assert not_installed(copy) == ["hooklab"]


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
    assert launch.notebook_pins(nb) == ["captum==0.9.0", "numpy==2.4.6", "torch==2.15.0"]


def test_requirement_names_the_repository_at_the_commit():
    assert launch.requirement(URL, COMMIT) == f"hooklab @ git+{URL}@{COMMIT}"
    assert launch.requirement(URL, None) == f"hooklab @ git+{URL}"
    assert launch.requirement(None, COMMIT) is None
    with pytest.raises(launch.LaunchError, match="git commit id"):
        launch.requirement(URL, "main; rm -rf /")


@pytest.mark.parametrize("lang, words", [("zh", "已经能导入 hooklab 时"), ("en", "only what is missing comes")])
def test_install_cell_says_what_it_does_in_the_notebooks_language(lang, words, monkeypatch):
    monkeypatch.delenv("HOOKLAB_LANG", raising=False)  # the cell sets it: put back (absent) after the test
    cell = launch.install_cell(f"hooklab @ git+{URL}@{COMMIT}", ["torch==2.15.0"], lang)
    source = cell["source"]
    assert cell["cell_type"] == "code" and cell["metadata"]["tags"] == ["hooklab-install", "remove-cell"]
    assert source.startswith("# ") and words in source
    assert f'HOOKLAB = "hooklab @ git+{URL}@{COMMIT}"' in source and 'PINS = ["torch==2.15.0"]' in source
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
    source = launch.install_cell(f"hooklab @ git+{URL}", ["torch==2.15.0", "timm==1.0.31"], "en",
                                 python=(sys.version_info.major, sys.version_info.minor + 1))["source"]
    ran = []
    monkeypatch.setattr("subprocess.run", lambda *a, **k: ran.append(a))
    monkeypatch.delenv("HOOKLAB_LANG", raising=False)  # the cell sets it: put back (absent) after the test
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
    (root / "recipes").mkdir()
    shutil.copy2(ROOT / "recipes" / "04_saved_tensors.ipynb", root / "recipes")
    out = tmp_path / "launch"
    written = launch.write_tree(out, repository=URL, commit=COMMIT, root=root)
    assert sorted(p.relative_to(out).as_posix() for p in written) == [
        "en/01_tensor_hooks.ipynb", "en/recipes/04_saved_tensors.ipynb",
        "zh/01_tensor_hooks.ipynb", "zh/recipes/04_saved_tensors.ipynb"]
    recipe = json.loads((out / "zh" / "recipes" / "04_saved_tensors.ipynb").read_text("utf-8"))
    assert recipe["metadata"]["hooklab_language"] == "zh"
    assert cell_lists(recipe) == (f"hooklab @ git+{URL}@{COMMIT}", [*launch.pins(), "numpy==2.4.6"])
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

HOOKLAB_GIT = f"hooklab @ git+{URL}@{COMMIT}"
NOTEBOOK_PINS = ["torch==2.15.0", "timm==1.0.31", "torchvision==0.29.2"]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def run_cell(monkeypatch, capsys, runtime: dict[str, str], *, hooklab_installed: bool = False,
             pins: list[str] = NOTEBOOK_PINS, reachable: tuple[str, ...] = ("pypi", CPU_INDEX),
             lang: str = "en") -> tuple[list[list[str]], str]:
    """Run a launch copy's install cell, as real Python, in a pretend runtime: ``runtime`` is what is installed
    (name -> version); pip is a fake that "installs" what it is given at the version asked for (a name alone: the
    release matching the running torch), taking ``--index-url X`` from X only where X is in ``reachable`` (PyPI where
    "pypi" is), and fails as pip does otherwise. Returns pip's command lines and what the cell printed."""
    import importlib.metadata as metadata
    import importlib.util as util
    import subprocess

    installed = dict(runtime)
    calls: list[list[str]] = []

    def version(name):
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]

    def pip(command, check=False, capture_output=False, text=False):
        assert command[1:4] == ["-m", "pip", "install"]
        calls.append(command[4:])
        args = command[4:]
        index = args[args.index("--index-url") + 1] if "--index-url" in args else "pypi"
        if index not in reachable:
            assert capture_output and not check  # the cell reads pip's failure and says what to do
            return subprocess.CompletedProcess(command, 1, "", (  # as pip 25 says it, in colour
                "\x1b[33mWARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after "
                "connection broken by 'NewConnectionError(... [Errno -2] Name or service not known)': "
                "/whl/cpu/torchvision/\x1b[0m\n\x1b[31mERROR: Could not find a version that satisfies the requirement "
                "torchvision==0.28.0 (from versions: none)\x1b[0m\n\x1b[31mERROR: No matching distribution found for "
                "torchvision==0.28.0\x1b[0m\n"))
        for requirement in [a for a in args if not a.startswith("--") and a not in (index, "1", "30")]:
            name, _, wanted = requirement.partition("==")
            if " @ " in requirement or name in installed and installed[name].split("+")[0] == wanted.split("+")[0]:
                continue  # hooklab (below); a distribution installed at the version asked for stays as it is
            build = "+" + index.rsplit("/", 1)[1] if index != "pypi" else ""
            installed[name] = (wanted or f"matching torch {installed['torch']}") + build
        installed["hooklab"] = "0.1.0"
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(metadata, "version", version)
    monkeypatch.setattr(util, "find_spec", lambda name: object() if hooklab_installed and name == "hooklab" else None)
    monkeypatch.setattr(subprocess, "run", pip)
    monkeypatch.delenv("HOOKLAB_LANG", raising=False)  # the cell sets it: put back (absent) after the test
    source = launch.install_cell(HOOKLAB_GIT, pins, lang, torch=("2.13", "2.15.0"))["source"]
    try:
        exec(source, {})
    finally:
        run_cell.installed = installed
    return calls, capsys.readouterr().out


def test_the_cell_knows_the_torchvision_of_each_torch_release_the_course_has_run():
    # the lock's pair, and the pair ./course rerun ran the course on (docs/rerun/torch-2.13.0.md)
    assert launch.tied_releases() == {"torchvision": {"2.13": "0.28.0", "2.15": next(iter(locked()["torchvision"]))}}
    title = (ROOT / "docs" / "rerun" / "torch-2.13.0.md").read_text(encoding="utf-8").splitlines()[0]
    assert "torch 2.13.0 + torchvision 0.28.0" in title
    assert locked()["torch"] == ["2.15.0"]


def test_cell_keeps_the_runtimes_torch_at_the_newest_supported_version(monkeypatch, capsys):
    # Colab-like: torch 2.15.0 (the lock's) preinstalled from PyPI, nothing else of the course's
    calls, out = run_cell(monkeypatch, capsys, {"torch": "2.15.0"})
    assert calls == [["--quiet", HOOKLAB_GIT, "torch==2.15.0", "timm==1.0.31", "torchvision==0.29.2"]]
    assert "--upgrade" not in calls[0] and "--force-reinstall" not in calls[0]
    assert "outside the range" not in out and "3 GB" not in out
    assert out.splitlines()[-2:] == ["installed: hooklab 0.1.0 | torch 2.15.0",  # the runtime's, kept
                                     "running on torch 2.15.0; the outputs shown were verified with torch 2.15.0"]


def test_a_kept_pypi_torch_gets_the_torchvision_release_built_for_it_from_pypi(monkeypatch, capsys):
    # PyPI's torch 2.13.0 (a CUDA build on Linux): PyPI's torchvision 0.28.0 is built for it
    calls, out = run_cell(monkeypatch, capsys, {"torch": "2.13.0"})
    assert calls == [["--quiet", HOOKLAB_GIT, "torch==2.13.0", "timm==1.0.31", "torchvision==0.28.0"]]
    assert "running on torch 2.13.0; the outputs shown were verified with torch 2.15.0" in out


def test_a_kept_cpu_torch_gets_the_cpu_torchvision_from_pytorchs_cpu_index_first(monkeypatch, capsys):
    calls, out = run_cell(monkeypatch, capsys, {"torch": "2.13.0+cpu"})
    # first torchvision, from PyTorch's CPU index, built for exactly this torch (pinned beside it), then the rest
    assert calls == [["--quiet", "--retries", "1", "--timeout", "30", "--index-url", CPU_INDEX, "torch==2.13.0+cpu",
                      "torchvision==0.28.0"],
                     ["--quiet", HOOKLAB_GIT, "torch==2.13.0", "timm==1.0.31"]]
    assert run_cell.installed["torchvision"] == "0.28.0+cpu" and run_cell.installed["torch"] == "2.13.0+cpu"
    assert out.splitlines()[0] == ("torch 2.13.0+cpu comes from PyTorch's index for its cpu build: installing "
                                   f"torchvision==0.28.0 built for it from {CPU_INDEX} (pip) ...")
    assert "running on torch 2.13.0+cpu; the outputs shown were verified with torch 2.15.0" in out
    # the lock's release in its CPU build: the same index, the lock's torchvision
    calls, _ = run_cell(monkeypatch, capsys, {"torch": "2.15.0+cpu"})
    assert calls[0][-2:] == ["torch==2.15.0+cpu", "torchvision==0.29.2"] and CPU_INDEX in calls[0]


@pytest.mark.parametrize("lang, words", [
    ("en", ["torchvision could not be installed for this torch: torch 2.13.0+cpu comes from PyTorch's own package "
            f"index (its cpu build), and the torchvision built for it is on that index only ({CPU_INDEX}), which pip "
            "could not install from here (no connection to download.pytorch.org; pip: ERROR: Could not find a "
            "version that satisfies the requirement torchvision==0.28.0 (from versions: none))",
            "Nothing has been installed by this cell",
            f"    pip install --index-url {CPU_INDEX} torch==2.13.0+cpu torchvision==0.28.0\n"]),
    ("zh", ["无法为这个 torch 安装 torchvision：torch 2.13.0+cpu 来自 PyTorch 自己的包索引", "本单元格什么也没有安装",
            f"    pip install --index-url {CPU_INDEX} torch==2.13.0+cpu torchvision==0.28.0\n"])])
def test_where_pytorchs_index_cannot_be_reached_the_cell_stops_first_saying_what_to_run(monkeypatch, capsys, lang,
                                                                                         words):
    with pytest.raises(RuntimeError) as raised:
        run_cell(monkeypatch, capsys, {"torch": "2.13.0+cpu"}, reachable=("pypi",), lang=lang)
    message = str(raised.value)
    for text in words:
        assert text in message, message
    assert run_cell.installed == {"torch": "2.13.0+cpu"}  # nothing installed: pip's one call failed
    # a notebook that needs no torchvision runs on the same runtime: its cell never asks PyTorch's index
    calls, _ = run_cell(monkeypatch, capsys, {"torch": "2.13.0+cpu"}, reachable=("pypi",),
                        pins=["torch==2.15.0", "timm==1.0.31"])
    assert calls == [["--quiet", HOOKLAB_GIT, "torch==2.13.0", "timm==1.0.31"]]


def test_a_kept_cuda_torch_of_pytorchs_index_gets_its_torchvision_from_that_index(monkeypatch, capsys):
    cuda = "https://download.pytorch.org/whl/cu126"
    calls, out = run_cell(monkeypatch, capsys, {"torch": "2.14.1+cu126"}, reachable=("pypi", cuda))
    # a release the cell has no pair for: pip picks the torchvision built for the torch pinned beside it
    assert calls == [["--quiet", "--retries", "1", "--timeout", "30", "--index-url", cuda, "torch==2.14.1+cu126",
                      "torchvision"], ["--quiet", HOOKLAB_GIT, "torch==2.14.1", "timm==1.0.31"]]
    assert run_cell.installed["torchvision"].endswith("+cu126")


def test_cell_installs_only_what_the_runtime_lacks(monkeypatch, capsys):
    # Colab ships torchvision and timm of its own: they stay
    calls, _ = run_cell(monkeypatch, capsys, {"torch": "2.14.1", "torchvision": "0.28.9", "timm": "1.0.20"})
    assert calls == [["--quiet", HOOKLAB_GIT, "torch==2.14.1"]]


@pytest.mark.parametrize("running", ["2.12.1", "2.15.1", "2.16.0.dev20261101", "2.12.0+cpu"])
def test_a_torch_outside_the_range_gets_a_message_and_the_locked_torch(monkeypatch, capsys, running):
    calls, out = run_cell(monkeypatch, capsys, {"torch": running, "torchvision": "0.27.0", "timm": "1.0.31"})
    assert out.splitlines()[0] == (f"torch {running} is outside the range these notebooks run on (2.13 to 2.15.0): "
                                   "installing torch 2.15.0 in its place (from PyPI; on Linux with its CUDA "
                                   "libraries, about 3 GB)")
    # the runtime's torchvision was built for the torch being replaced: it goes too, from PyPI as torch; timm stays
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
    # notebook 10: on 2.13.0+cpu the launch check found its cells 7 and 9 failing (DDP's quantization hooks raise
    # IndexError in their callback; ProcessGroup.register_pre_hook does not exist)
    ten = json.loads((ROOT / "notebooks" / "10_distributed_and_mixed_precision.ipynb").read_text(encoding="utf-8"))
    assert launch.notebook_torch_range(ten) == ("2.15", "2.15.0")


def test_every_copy_installs_numpy_which_pypis_torch_does_not_require():
    # A fresh Jupyter has no numpy and PyPI's torch does not require it. The launch check ran the copies without it:
    # every copy's first cell showed torch's "Failed to initialize NumPy" warning (found by comparing outputs),
    # notebook 10's PowerSGDState and notebook 14's CommDebugMode raised ModuleNotFoundError, and notebook 03's
    # `output.numpy()` printed "Numpy is not available" instead of the error the cell teaches
    for name in ("01_tensor_hooks.ipynb", "03_module_forward_hooks.ipynb", "10_distributed_and_mixed_precision.ipynb"):
        nb = json.loads((ROOT / "notebooks" / name).read_text(encoding="utf-8"))
        assert [p for p in launch.notebook_pins(nb) if p.startswith("numpy==")] == ["numpy==2.4.6"], name


def test_a_site_build_reads_the_lock_and_the_installed_packages_once_per_process(tmp_path):
    """A site build asks each of its notebooks (36, both languages) for its pins: the lock is 1 MB of TOML and the
    installed packages' metadata a second to read. Read on each question (with torch's sources, read then too), that
    was ten minutes of the build (the CI's hang guard gave up on it); read once, a second question reads nothing."""
    nb = json.loads((ROOT / "notebooks" / "14_hooks_in_frameworks.ipynb").read_text(encoding="utf-8"))
    first = launch.notebook_pins(nb)
    lock, installed = (notebook_imports._parsed_lock.cache_info().misses,
                       notebook_imports._installed_distributions.cache_info().misses)
    assert launch.notebook_pins(nb) == first
    assert notebook_imports._parsed_lock.cache_info().misses == lock
    assert notebook_imports._installed_distributions.cache_info().misses == installed
    changed = tmp_path / "uv.lock"  # a changed lock is read again
    changed.write_text('[[package]]\nname = "torch"\nversion = "9.9"\n', encoding="utf-8")
    assert notebook_imports.locked_versions(changed) == {"torch": ["9.9"]}
    changed.write_text('[[package]]\nname = "torch"\nversion = "9.10"\n', encoding="utf-8")
    assert notebook_imports.locked_versions(changed) == {"torch": ["9.10"]}


def test_a_copy_using_transformers_trainer_installs_accelerate():
    # transformers' Trainer raises ImportError without accelerate, which importing transformers does not need: the
    # launch check ran a copy of a recipe notebook whose cell builds a Trainer without it (the trainers chapter now)
    nb = json.loads((ROOT / "recipes" / "20_trainers_and_trackers.ipynb").read_text(encoding="utf-8"))
    assert "accelerate==1.15.0" in launch.notebook_pins(nb)
    lightning = {"cells": [{"cell_type": "code", "source": "import lightning.pytorch as pl\ntrainer = pl.Trainer()"}]}
    assert launch.needed_by_names(lightning) == set()
