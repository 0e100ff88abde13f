"""Launch copies: the one-language notebooks that the site's download, Colab and Binder buttons give a learner,
each starting with a cell that installs what the notebook needs where it is missing.

    python -m tools.launch OUT --repository-url URL [--commit SHA]

writes the tree of the ``launch`` branch that the publishing workflow (.github/workflows/pages.yml) pushes:
``zh/NN_x.ipynb`` and ``en/NN_x.ipynb`` (the notebooks' launch copies), ``zh/recipes/NN_x.ipynb`` and
``en/recipes/NN_x.ipynb`` (the recipe notebooks'), and what Binder builds its image from (``environment.yml``,
``postBuild`` and the package itself: ``pyproject.toml``, ``hooklab/``, the licences), with a short README that says
where the branch comes from. :func:`write_recipe_download` writes one recipe's copy on its own (the site's recipe
page download).

Why the install cell is generated here and not committed in the notebooks: it has to name where hooklab comes from
(the repository's URL and the commit the notebook was written with), which a committed notebook cannot know (the
course may be forked or moved) and nbval would have to ignore. So `./course site` and this tool put it into the
copies that leave the repository, with the URL filled in from the Actions context, and the notebooks in
``notebooks/`` stay as they are (`./course lab` and Binder have hooklab installed already).

The cell (:func:`install_cell`) checks whether ``hooklab`` can be imported. Where it can (Binder, whose image is
built from environment.yml with PyTorch's CPU wheels; the course's own lab), it installs only what of the notebook's
packages is missing, and says which torch runs where it is not the one the outputs were verified with. Where it
cannot (Colab, any Jupyter with pip, a notebook downloaded from the site), it runs ``pip install`` of hooklab from
the repository at that commit (no extra: ``import hooklab`` needs torch only) plus exactly what that notebook uses
and the runtime lacks, at the versions uv.lock pins (:func:`notebook_pins`): what its code imports (read with
``ast`` and mapped to distributions by the installed metadata, ``tools/notebooks/imports.py``) and what the parts of
hooklab it reaches import (:func:`hooklab_needs`: notebook 12's ``induction`` needs safetensors and transformers,
exercise 04.3's checker torchvision). Notebook 01's copy installs torch and hooklab, nothing else. A distribution
installed already stays as it is ("install only what is missing"); above all torch: a torch inside
:func:`torch_range` (Colab ships one) is kept and pinned on pip's command line at its own version, so that nothing
replaces it with the 3 GB CUDA wheels, and torchvision, which is built for one torch release and one build of it,
comes at the release that matches it (:func:`tied_releases`) and, for a torch of PyTorch's own index (``+cpu``,
``+cu126``), from that index; where that index cannot be reached the cell stops first, with the command to run. A
torch outside the range, or none, gets a message saying so, and the lock's torch is installed. The cell prints the
torch it runs on and the one the outputs were verified with. On a Python older than ``requires-python`` it stops
first, saying which Python it needs (torch 2.15.0 has no build for 3.10). Without a repository URL (a site built
locally) it says how to install hooklab from a clone instead.

``python -m tools.launch.check`` runs every launch copy top to bottom in a fresh environment, as Colab would.
"""
from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import tomllib

from ..notebooks import imports as notebook_imports

ROOT = Path(__file__).resolve().parents[2]
LANGS = ("zh", "en")
PACKAGE_PAGE = "docs/pypi.md"  # pyproject.toml's readme: Binder's `pip install -e .` builds the package from the branch
INSTALL_TAG = "hooklab-install"
LOCK = ROOT / "uv.lock"
# Every launch copy names torch at the lock's version whatever it imports: hooklab needs it, and the notebooks'
# outputs were recorded with it; the cell installs it only where no torch inside TORCH_FLOOR..the lock's is running.
ALWAYS = ("torch",)
# What every notebook's pins name beside what it imports: numpy, which PyPI's torch does not require (a fresh Jupyter
# has none; Colab has it): without it `import torch` warns "Failed to initialize NumPy" in the notebook's first cell,
# and torch code that needs it fails (PowerSGD's state, CommDebugMode, Tensor.numpy()). The launch check, which
# compares each cell's output with the copy's, found both.
WITH_TORCH = ("numpy",)
# The oldest torch the launch copies keep (the newest is the lock's, the top of the `course` extra's torch range).
# Below the extra's floor (2.3, where hooklab's library tests pass) the notebooks need more: transformers 5 and
# diffusers ask for torch>=2.6 (notebooks 12 and 15, and the course extra), and the notebooks have been run top to
# bottom on 2.13 (00-11 by ./course rerun, docs/rerun/torch-2.13.0.md; 12, 13, 16, 17 as launch copies, README's
# table) and 2.15, on nothing between 2.6 and 2.12. So the range the cell keeps is what has been run: 2.13 up to the
# lock's torch, raised per notebook by TORCH_APIS. The weekly launch-copies job (.github/workflows/rerun.yml) runs
# every copy at both ends.
TORCH_FLOOR = "2.13"
# Public torch APIs that some notebooks use and older releases lack, with the first release that has them (notebook 14
# §5: found by unpacking the wheels): a copy whose code names one keeps a torch only from that release on (notebook
# 14's copy: 2.15; on 2.13 its queue_callback cells fail, measured). Notebook 10's, measured on 2.13.0+cpu by the
# launch check: a process group's collective hooks (ProcessGroup.register_pre_hook) do not exist there, and DDP's
# quantization communication hooks raise IndexError in their callback; 2.14 was not run, so they keep 2.15 on.
TORCH_APIS = {"queue_callback": "2.15", "node_creation_hook": "2.14", "register_pre_hook": "2.15",
              "quantization_pertensor_hook": "2.15", "quantization_perchannel_hook": "2.15"}
# Built for one torch release each, and for one build of it (CPU, a CUDA version): the release that goes with each torch
# release the cell keeps, from the pairs the course has run: the lock's (added by :func:`tied_releases`) and
# ``./course rerun --torch 2.13.0 --vision 0.28.0`` (docs/rerun/torch-2.13.0.md). Where the cell keeps a torch that
# is not the lock's, it installs the matching release (a torch release not listed: pip picks it, with the kept torch
# pinned beside it); for a torch of PyTorch's own index (a local label: ``2.13.0+cpu``, ``+cu126``) it comes from that
# index, built for that torch (PyPI's Linux torchvision is a CUDA build: with a ``+cpu`` torch, ``import torchvision``
# fails with "operator torchvision::nms does not exist"), before anything else is installed; where that index cannot
# be reached the cell stops there, saying which command to run (:func:`install_cell`).
TORCH_TIED = {"torchvision": {"2.13": "0.28.0"}}
# PyTorch's package indexes, one per build: https://download.pytorch.org/whl/cpu, .../cu126, ...
PYTORCH_INDEX = "https://download.pytorch.org/whl/"
# What every Jupyter kernel has already: the cell never installs these (the notebook runs in whatever Jupyter opened
# it, and replacing the running kernel's IPython under it would break it).
IN_EVERY_KERNEL = frozenset({"ipython", "ipykernel", "jupyter-client", "jupyter-core", "traitlets", "comm",
                             "matplotlib-inline"})
PYTHON_KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}

# The parts of hooklab that import more than torch, each only when a notebook's code reaches it (the packages of
# hooklab's `course` extra): a pattern of the notebook's code -> the part's files under hooklab/, whose imports say
# what it needs (:func:`hooklab_needs`). The exercises' checkers are found by their keys (``course.check("04.3", ...)``
# -> hooklab/course/exercises/nb04.py, where exercise 04.3 builds torchvision's ResNet blocks).
HOOKLAB_PARTS = (
    (r"\bexport_notebook\b|\bhooklab\.course\.export\b|\bcourse\s+import\s[^\n]*\bexport\b", ("course/export.py",)),
    (r"\binduction\b", ("course/induction.py",)),
    (r"\.plot\(|\bhooklab\.plot\b|\bimport\s[^\n]*\bplot\b|\bplot\.(?:norms|activation_stats|saved_bytes|timeline)\(",
     ("plot.py",)),
)
EXERCISE_KEY = re.compile(r"""\b(?:check|hint|solution|verdict)\(\s*["'](\d\d)\.\d""")

_COMMENT = {
    "zh": ("# 安装本课需要而这里还没有的包：hooklab 和本课用到的包（只有这些），版本是课程验证时用的。\n"
           "# 已经装了 {low} 到 {high} 之间的 torch（Colab 自带）时保留它，不重新下载，torchvision 装与它配套的版本；\n"
           "# 已经能导入 hooklab 时（Binder、./course lab）只补上缺的。Colab 上第一次运行要一两分钟。"),
    "en": ("# Installs what this notebook needs and this runtime lacks: hooklab and the packages this notebook uses (only\n"
           "# those), at the versions the course is verified on. A torch from {low} to {high} (Colab ships one) is kept,\n"
           "# not downloaded again, with the torchvision built for it. Where hooklab can be imported already (Binder,\n"
           "# ./course lab) only what is missing comes. The first run on Colab takes a minute or two."),
}

# What the cell says when the torchvision built for a kept torch of PyTorch's own index cannot be installed: it stops
# there, before anything is installed and before any other cell runs.
_STOP = {
    "zh": ("无法为这个 torch 安装 torchvision：torch {running} 来自 PyTorch 自己的包索引（{build} 版本），与它配套的 "
           "torchvision 也只在那个索引上（{index}），pip 在这里没能从那里安装（{reason}）。PyPI 上的 torchvision "
           "是 CUDA 版本，和这个 torch 一起时 import torchvision 会失败。本单元格什么也没有安装。请在这个 Jupyter "
           "的终端里运行下面的命令（或在单元格里写成 %pip install ...），再重新运行本单元格：\n\n    {command}\n\n"
           "也可以换用 PyPI 上的 torch（pip install torch=={torch}），它的 torchvision 就在 PyPI 上。"),
    "en": ("torchvision could not be installed for this torch: torch {running} comes from PyTorch's own package index "
           "(its {build} build), and the torchvision built for it is on that index only ({index}), which pip could "
           "not install from here ({reason}). PyPI's torchvision is a CUDA build: with this torch, import torchvision "
           "fails. Nothing has been installed by this cell. Run this in a terminal of this Jupyter (or in a cell, as "
           "%pip install ...), then run this cell again:\n\n    {command}\n\n"
           "Or use a torch from PyPI (pip install torch=={torch}), whose torchvision is on PyPI."),
}


class LaunchError(Exception):
    """Bad input to the launch copies (a URL, a commit); the message says what to fix."""


def pins(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The pins every launch copy installs, whatever it imports: torch, at the version uv.lock (beside
    ``pyproject``) pins.

    >>> pins()
    ['torch==2.15.0']
    """
    lock = pyproject.parent / "uv.lock"
    if not lock.is_file():
        raise LaunchError(f"{lock} is missing: the launch copies install the versions it pins")
    locked = notebook_imports.locked_versions(lock)
    try:
        return [f"{name}=={notebook_imports.locked_version(name, locked, lock=lock)}" for name in ALWAYS]
    except notebook_imports.ImportsError as exc:
        raise LaunchError(str(exc)) from None


def torch_range(pyproject: Path = ROOT / "pyproject.toml") -> tuple[str, str]:
    """The torch releases a launch copy keeps where one is installed: from :data:`TORCH_FLOOR` up to the top of the
    ``course`` extra's torch range (``torch>=2.3,<=2.15.0``), which is the lock's torch.

    >>> torch_range()
    ('2.13', '2.15.0')
    """
    extra = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["optional-dependencies"]["course"]
    spec = next((r for r in extra if notebook_imports.normal(re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0]) == "torch"),
                None)
    found = re.fullmatch(r"\s*torch\s*>=\s*([\d.]+)\s*,\s*<=\s*([\d.]+)\s*", spec or "")
    if not found:
        raise LaunchError(f"{pyproject}: the course extra should name torch as 'torch>=A,<=B', got {spec!r}")
    if _release(TORCH_FLOOR) < _release(found.group(1)) or _release(TORCH_FLOOR) > _release(found.group(2)):
        raise LaunchError(f"TORCH_FLOOR {TORCH_FLOOR} is outside the course extra's torch range {spec!r}")
    return TORCH_FLOOR, found.group(2)


def notebook_torch_range(nb: dict[str, Any], *, pyproject: Path = ROOT / "pyproject.toml") -> tuple[str, str]:
    """:func:`torch_range`, its lower end raised to the first release of every :data:`TORCH_APIS` name the notebook's
    code uses.

    >>> notebook_torch_range({"cells": [{"cell_type": "code", "source": "torch.autograd.graph.queue_callback(f)"}]})
    ('2.15', '2.15.0')
    """
    low, high = torch_range(pyproject)
    code = "\n".join(notebook_imports.code_of(c) for c in nb.get("cells", []) if c.get("cell_type") == "code"
                     and INSTALL_TAG not in c.get("metadata", {}).get("tags", []))
    for api, first in TORCH_APIS.items():
        if re.search(rf"\b{re.escape(api)}\b", code) and _release(first) > _release(low):
            low = first
    return low, high


def _release(text: str) -> tuple[int, int, int]:
    """``2.13`` -> ``(2, 13, 0)``, ``2.13.0+cpu`` -> ``(2, 13, 0)`` (as the install cell compares versions)."""
    parts = [int(x) for x in re.match(r"\d+(?:\.\d+)*", text).group().split(".")]  # type: ignore[union-attr]
    return (parts + [0, 0])[0], (parts + [0, 0])[1], (parts + [0, 0, 0])[2]


def tied_releases(lock: Path = LOCK) -> dict[str, dict[str, str]]:
    """:data:`TORCH_TIED` with the lock's pair added: for each package built for one torch release, torch's
    ``major.minor`` -> the package's release that goes with it.

    >>> tied_releases()
    {'torchvision': {'2.13': '0.28.0', '2.15': '0.29.2'}}
    """
    locked = notebook_imports.locked_versions(lock)
    try:
        torch = notebook_imports.locked_version("torch", locked, lock=lock)
        found = {}
        for name, pairs in TORCH_TIED.items():
            release = _release(torch)
            found[name] = {**pairs, f"{release[0]}.{release[1]}": notebook_imports.locked_version(name, locked,
                                                                                                   lock=lock)}
        return found
    except notebook_imports.ImportsError as exc:
        raise LaunchError(str(exc)) from None


def tied_requirements(names: set[str], lock: Path = LOCK) -> set[str]:
    """The :data:`TORCH_TIED` packages that the distributions ``names`` require, directly or below (by the lock's
    dependency graph): timm requires torchvision, so a notebook importing timm gets the torchvision built for the kept
    torch from the cell, before pip would take PyPI's for timm's sake (a CUDA build, which a ``+cpu`` torch cannot
    load: ``import timm`` fails).

    >>> sorted(tied_requirements({"timm"})), sorted(tied_requirements({"captum"}))
    (['torchvision'], [])
    """
    packages = {notebook_imports.normal(p["name"]): p for p in notebook_imports.read_lock(lock).get("package", [])}
    seen: set[str] = set()
    todo = [notebook_imports.normal(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for dep in packages.get(name, {}).get("dependencies", []):  # and the extras a requirement names
            target = notebook_imports.normal(dep["name"])
            todo.append(target)
            extras = packages.get(target, {}).get("optional-dependencies", {})
            todo += [notebook_imports.normal(d["name"]) for extra in dep.get("extra", []) for d in extras.get(extra, [])]
    return seen & set(TORCH_TIED)


def hooklab_parts(nb: dict[str, Any]) -> list[Path]:
    """The files of hooklab (beyond its core, which needs torch only) that a notebook's code reaches: see
    :data:`HOOKLAB_PARTS`.

    >>> [p.name for p in hooklab_parts({"cells": [{"cell_type": "code",
    ...     "source": "from hooklab.course import induction\\ncourse.check('04.3', f)"}]})]
    ['induction.py', 'nb04.py', 'nb04.py']
    """
    code = "\n".join(notebook_imports.code_of(c) for c in nb.get("cells", []) if c.get("cell_type") == "code"
                     and INSTALL_TAG not in c.get("metadata", {}).get("tags", []))
    package = ROOT / "hooklab"
    parts = [package / name for pattern, names in HOOKLAB_PARTS if re.search(pattern, code) for name in names]
    for number in sorted(set(EXERCISE_KEY.findall(code))):
        parts += [p for p in (package / "course" / "exercises" / f"nb{number}.py",
                              package / "course" / "exercises" / "solutions" / f"nb{number}.py") if p.is_file()]
    return parts


def hooklab_needs(nb: dict[str, Any], *, mapping: dict[str, list[str]] | None = None) -> set[str]:
    """The distributions that the parts of hooklab a notebook reaches (:func:`hooklab_parts`) import, read from their
    code with ``ast`` (torch and hooklab left out): what ``import hooklab`` alone does not need but this notebook
    will, at run time (notebook 12's ``induction.load_model()``: safetensors and transformers).

    >>> sorted(hooklab_needs({"cells": [{"cell_type": "code", "source": "course.export_notebook(nb, 'en')"}]}))
    ['nbconvert', 'nbformat']
    """
    modules: set[str] = set()
    for path in hooklab_parts(nb):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    modules -= {"torch", "hooklab"}
    try:
        return set(notebook_imports.distributions(modules, mapping=mapping).values())
    except notebook_imports.ImportsError as exc:
        raise LaunchError(f"hooklab's own code: {exc}") from None


# What a library's API needs at run time that importing the library does not: transformers' Trainer and
# TrainingArguments raise ImportError without accelerate (transformers[torch]; the launch check found it in recipes 19)
NEEDED_BY_NAME = {("transformers", "Trainer"): "accelerate", ("transformers", "TrainingArguments"): "accelerate",
                  ("transformers", "Seq2SeqTrainer"): "accelerate", ("transformers", "Seq2SeqTrainingArguments"): "accelerate"}


def needed_by_names(nb: dict[str, Any]) -> set[str]:
    """The distributions that the names a notebook takes from a library need (:data:`NEEDED_BY_NAME`): ``from
    transformers import Trainer`` or ``transformers.Trainer(...)`` needs accelerate.

    >>> needed_by_names({"cells": [{"cell_type": "code", "source": "from transformers import Trainer"}]})
    {'accelerate'}
    >>> needed_by_names({"cells": [{"cell_type": "code", "source": "import lightning as pl\\npl.Trainer()"}]})
    set()
    """
    used: set[tuple[str, str]] = set()
    for node in (n for tree in notebook_imports.code_trees(nb, skip_tag=INSTALL_TAG) for n in ast.walk(tree)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            used.update((node.module.split(".")[0], alias.name) for alias in node.names)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            used.add((node.value.id, node.attr))
    return {needed for key, needed in NEEDED_BY_NAME.items() if key in used}


def notebook_pins(nb: dict[str, Any], *, lock: Path = LOCK, mapping: dict[str, list[str]] | None = None) -> list[str]:
    """Exactly what a notebook uses, as ``name==version`` at the versions ``lock`` pins, sorted: what its code cells
    import (the install cell left out), what the parts of hooklab it reaches import (:func:`hooklab_needs`), the
    :data:`TORCH_TIED` packages those require (:func:`tied_requirements`), torch and :data:`WITH_TORCH` (numpy);
    hooklab (installed from the repository) and what every Jupyter kernel has (:data:`IN_EVERY_KERNEL`) left out. ``mapping``: import name -> distributions (default: the installed metadata). A name no installed or
    locked distribution provides raises :class:`LaunchError`.

    >>> nb = {"cells": [{"cell_type": "code", "source": "import hooklab, timm\\nfrom IPython.display import HTML"}]}
    >>> notebook_pins(nb)  # timm requires torchvision: the cell installs the one built for the kept torch
    ['numpy==2.4.6', 'timm==1.0.31', 'torch==2.15.0', 'torchvision==0.29.2']
    >>> notebook_pins({"cells": [{"cell_type": "code", "source": "from hooklab.course import induction"}]})
    ['numpy==2.4.6', 'safetensors==0.8.0', 'torch==2.15.0', 'transformers==5.23.0']
    """
    try:
        modules = notebook_imports.imported_modules(nb, skip_tag=INSTALL_TAG)
        found = set(notebook_imports.distributions(modules, mapping=mapping).values())
        found |= hooklab_needs(nb, mapping=mapping)
        found |= needed_by_names(nb)
        found |= tied_requirements(found, lock)
        wanted = sorted((found | set(ALWAYS) | set(WITH_TORCH)) - {"hooklab"} - IN_EVERY_KERNEL)
        locked = notebook_imports.locked_versions(lock)
        return [f"{name}=={notebook_imports.locked_version(name, locked, lock=lock)}" for name in wanted]
    except (notebook_imports.ImportsError, LaunchError) as exc:
        title = next((notebook_imports.code_of(c).strip().splitlines()[0] for c in nb.get("cells", [])
                      if c.get("cell_type") == "markdown" and notebook_imports.code_of(c).strip()), "a notebook")
        raise LaunchError(f"{title}: {exc}") from None


def minimum_python(pyproject: Path = ROOT / "pyproject.toml") -> tuple[int, int]:
    """The oldest Python that ``requires-python`` allows (``>=3.11`` -> ``(3, 11)``): the install cell stops on an
    older one.

    >>> minimum_python()
    (3, 11)
    """
    spec = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["requires-python"]
    found = re.fullmatch(r"\s*>=\s*(\d+)\.(\d+)\s*", spec)
    if not found:
        raise LaunchError(f"{pyproject}: requires-python should be '>=3.N', got {spec!r}")
    return int(found.group(1)), int(found.group(2))


def requirement(repository: str | None, commit: str | None) -> str | None:
    """What ``pip install`` is given for hooklab: the repository at ``commit`` (the notebook's own version of the
    code), without an extra (the cell names what the notebook uses itself); None without a repository URL.

    >>> requirement("https://github.com/o/hooklab", "0123abc")
    'hooklab @ git+https://github.com/o/hooklab@0123abc'
    """
    if not repository:
        return None
    if commit is not None and not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise LaunchError(f"the commit should be a git commit id (hex), got {commit!r}")
    return f"hooklab @ git+{repository}" + (f"@{commit}" if commit else "")


_CELL_BODY = r'''

def installed(name):
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def release(text):  # 2.13.0+cpu -> (2, 13, 0)
    parts = [int(x) for x in re.match(r"\d+(?:\.\d+)*", text).group().split(".")] + [0, 0]
    return tuple(parts[:3])


TORCH = next((p.split("==")[1] for p in PINS if p.startswith("torch==")), None)
RUNNING = installed("torch")
KEEP = bool(RUNNING) and release(LOW) <= release(RUNNING) <= release(HIGH)
HAVE_HOOKLAB = importlib.util.find_spec("hooklab") is not None
if not HAVE_HOOKLAB:
@MISSING_HOOKLAB@
# a torch in the range (or any, where hooklab is installed already) stays, pinned at its own version so that pip
# replaces it with nothing; otherwise the torch the outputs were verified with is installed (PyPI's)
if RUNNING and (KEEP or HAVE_HOOKLAB):
    torch_version = RUNNING.split("+")[0]
    build = RUNNING.partition("+")[2]  # cpu, cu126, ...: a torch of PyTorch's own index, for that build
else:
    torch_version, build = TORCH, ""
    print((f"torch {RUNNING} is outside the range these notebooks run on ({LOW} to {HIGH}): "
           f"installing torch {TORCH} in its place" if RUNNING else
           f"torch is not installed: installing torch {TORCH}")
          + " (from PyPI; on Linux with its CUDA libraries, about 3 GB)", flush=True)
wanted = [f"torch=={torch_version}"]
tied = []  # built for the running torch's build: from PyTorch's index for that build
replacing = torch_version != (RUNNING or "").split("+")[0]
for pin in PINS:
    name = pin.split("==")[0]
    if name == "torch" or (installed(name) and not (replacing and name in TORCH_TIED)):
        continue  # installed already: kept as it is (a torchvision too, unless its torch is replaced)
    if name in TORCH_TIED and release(torch_version) != release(TORCH):
        # built for one torch release: the one for this torch (not listed: pip picks it, torch pinned beside it)
        match = TORCH_TIED[name].get("%d.%d" % release(torch_version)[:2])
        pin = f"{name}=={match}" if match else name
    (tied if name in TORCH_TIED and build else wanted).append(pin)
if tied:  # first, so that where it cannot be installed nothing else is
    index = PYTORCH_INDEX + build
    command = ["--index-url", index, f"torch=={RUNNING}", *tied]
    print(f"torch {RUNNING} comes from PyTorch's index for its {build} build: installing {', '.join(tied)} "
          f"built for it from {index} (pip) ...", flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--retries", "1", "--timeout", "30",
                           *command], capture_output=True, text=True)
    if done.returncode != 0:  # pip's first error, and whether it could connect at all (colour codes left out)
        said = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", done.stderr or done.stdout or "")
                .splitlines() if line.strip()]
        errors = [line for line in said if line.startswith("ERROR")] or said[-1:] or [f"exit status {done.returncode}"]
        offline = any(re.search(r"connection|resolve|unreachable", line, re.I) for line in said)
        reason = ("no connection to " + index.split("/")[2] + "; " if offline else "") + "pip: " + errors[0][:300]
        raise RuntimeError(STOP.format(running=RUNNING, build=build, index=index, torch=TORCH, reason=reason,
                                       command=" ".join(["pip install", *command])))
    importlib.invalidate_caches()
@INSTALL_HOOKLAB@if wanted[1:]:
    print("hooklab", version("hooklab"), "is installed already; installing what this notebook imports "
          "and this environment lacks (pip):", ", ".join(wanted[1:]), "...", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *wanted], check=True)
    importlib.invalidate_caches()
elif not tied:
    print("hooklab", version("hooklab"), "is installed already: nothing to install")
if not HAVE_HOOKLAB or wanted[1:] or tied:
    print(f"running on torch {version('torch')}; the outputs shown were verified with torch {TORCH}")
elif TORCH and RUNNING and release(RUNNING) != release(TORCH):
    print(f"note: this is torch {RUNNING}; the outputs shown were verified with torch {TORCH}"
          + ("" if KEEP else f" (outside the range these notebooks run on, {LOW} to {HIGH})"))
'''

_INSTALL_HOOKLAB = '''if not HAVE_HOOKLAB:
    print("installing hooklab and what this notebook imports, at the versions the course is "
          "verified with (pip):", ", ".join(wanted), "...", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", HOOKLAB, *wanted], check=True)
    importlib.invalidate_caches()
    print("installed: hooklab", version("hooklab"), "| torch", version("torch"))
el'''


# hooklab's checkers answer in the copy's language: outside a Jupyter server that names the notebook to the kernel
# (Colab, nbclient) nothing else tells them, and they print both languages (the launch check saw it)
_LANG_COMMENT = {"en": "# hooklab's messages in English", "zh": "# hooklab 的提示用中文"}


def install_cell(hooklab: str | None, pinned: list[str], lang: str, *, python: tuple[int, int] | None = None,
                 torch: tuple[str, str] | None = None, lock: Path = LOCK) -> dict[str, Any]:
    """The first code cell of a launch copy: installs ``hooklab`` (a pip requirement) and what of ``pinned`` is not
    installed where ``import hooklab`` would fail (where it would not: what of ``pinned`` is missing), and says what
    it is installing. A torch inside ``torch`` (default: :func:`torch_range`) stays: pip gets ``torch==<its
    version>``, and :data:`TORCH_TIED` at the release that goes with it (:func:`tied_releases`, from ``lock``). A
    kept torch of PyTorch's own index (``2.13.0+cpu``) gets those from that index, for its build, in a pip call of
    their own before anything else; where that fails (the index cannot be reached) the cell raises a
    ``RuntimeError`` in the notebook's language that gives the command to run, having installed nothing, so that
    Jupyter's "run all" stops there instead of failing cell after cell. A torch outside the range (or none): the cell
    says so and installs the pinned torch, from PyPI. It prints the torch it runs on and the one the outputs were
    verified with. On a Python older than ``python`` (default: requires-python's) it stops before pip, saying which
    Python it needs. It sets ``HOOKLAB_LANG`` to ``lang`` unless it is set. ``hooklab=None``: it says how to install
    from a clone. Tagged ``hooklab-install`` (and ``remove-cell``: the site's page does not show it; the downloaded
    file has it).
    """
    if lang not in LANGS:
        raise LaunchError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    major, minor = python or minimum_python()
    low, high = torch or torch_range()
    if hooklab is None:
        missing_hooklab = ('    raise ModuleNotFoundError(\n'
                           '        "hooklab is not installed. From a clone of the course\'s repository: "\n'
                           '        "pip install -e \\".[course]\\" (or ./course lab, which installs everything)")')
    else:
        missing_hooklab = (f'    if sys.version_info < ({major}, {minor}):\n'
                           '        raise RuntimeError(\n'
                           f'            "this notebook needs Python {major}.{minor} or newer: "\n'
                           '            f"its packages ({\', \'.join(PINS)}) "\n'
                           '            f"have no build for Python {sys.version_info.major}.{sys.version_info.minor}; "\n'
                           '            "open it in a Jupyter with a newer Python")')
    source = (f"{_COMMENT[lang].format(low=low, high=high)}\n"
              "import importlib, importlib.util, os, re, subprocess, sys\n"
              "from importlib.metadata import PackageNotFoundError, version\n\n"
              f"os.environ.setdefault(\"HOOKLAB_LANG\", {json.dumps(lang)})  {_LANG_COMMENT[lang]}\n"
              f"HOOKLAB = {json.dumps(hooklab) if hooklab else None}\n"
              f"PINS = {json.dumps(pinned)}\n"
              f"LOW, HIGH = {json.dumps(low)}, {json.dumps(high)}  # the torch releases kept where one is installed\n"
              f"TORCH_TIED = {json.dumps(tied_releases(lock))}  # torch release -> the one built for it\n"
              f"PYTORCH_INDEX = {json.dumps(PYTORCH_INDEX)}  # + cpu, cu126, ...: PyTorch's index for each build\n"
              f"STOP = {json.dumps(_STOP[lang], ensure_ascii=False)}\n"
              + _CELL_BODY.replace("@MISSING_HOOKLAB@", missing_hooklab)
              .replace("@INSTALL_HOOKLAB@", "" if hooklab is None else _INSTALL_HOOKLAB))
    return {"cell_type": "code", "execution_count": None, "id": "hooklab-install",
            "metadata": {"tags": [INSTALL_TAG, "remove-cell"]}, "outputs": [], "source": source}


def launch_copy(nb: dict[str, Any], lang: str, hooklab: str | None, pinned: list[str], *,
                lock: Path = LOCK) -> dict[str, Any]:
    """A one-language notebook (as ``hooklab.course export`` writes it) made ready to leave the repository: the
    install cell first, before the title's first code cell, installing ``pinned`` and what this notebook imports
    (:func:`notebook_pins`, versions from ``lock``), and a plain Python 3 kernel (Colab's and Binder's ``python3``;
    the course's kernel ``hooklab`` exists only where ./course or postBuild registered it)."""
    out = copy.deepcopy(nb)
    cells = [c for c in out["cells"] if INSTALL_TAG not in c.get("metadata", {}).get("tags", [])]
    out["cells"] = cells
    given = {notebook_imports.normal(p.split("==")[0]) for p in pinned}
    everything = list(pinned) + [p for p in notebook_pins(out, lock=lock)
                                 if notebook_imports.normal(p.split("==")[0]) not in given]
    first_code = next((i for i, c in enumerate(cells) if c.get("cell_type") == "code"), len(cells))
    cells.insert(first_code, install_cell(hooklab, everything, lang, torch=notebook_torch_range(out), lock=lock))
    out.setdefault("metadata", {})["kernelspec"] = dict(PYTHON_KERNEL)
    return out


def launch_notebook(path: Path, lang: str, *, repository: str | None, commit: str | None,
                    root: Path = ROOT) -> dict[str, Any]:
    """The launch copy of one notebook or recipe notebook (``notebooks/NN_x.ipynb``, ``recipes/NN_x.ipynb``) in
    ``lang``: exported to one language, with its install cell (hooklab from ``repository`` at ``commit``; without a
    repository the cell says how to install it from a clone), versions from ``root``'s lock."""
    from hooklab.course.export import export_notebook
    from hooklab.course.notebook import read_notebook

    return launch_copy(export_notebook(read_notebook(path), lang), lang, requirement(repository, commit),
                       pins(root / "pyproject.toml"), lock=root / "uv.lock")


def write_recipe_download(recipe: Path, lang: str, target: Path, *, repository: str | None = None,
                          commit: str | None = None, root: Path = ROOT) -> Path:
    """Write the notebook a recipe page's download gives: ``recipe`` (``recipes/NN_x.ipynb``) in ``lang``, standalone,
    its first code cell installing hooklab and exactly what the recipe uses (:func:`launch_notebook`), to ``target``
    (a file, or a folder to write ``<recipe's name>.ipynb`` into); returns the file written.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     written = write_recipe_download(ROOT / "recipes" / "02_module_forward_hooks.ipynb", "en", Path(folder))
    ...     nb = json.loads(written.read_text(encoding="utf-8"))
    >>> written.name, nb["metadata"]["hooklab_language"], nb["cells"][1]["id"]
    ('02_module_forward_hooks.ipynb', 'en', 'hooklab-install')
    """
    if recipe.parent.name != "recipes" or recipe.suffix != ".ipynb" or not recipe.is_file():
        raise LaunchError(f"{recipe}: not a recipe notebook (recipes/NN_x.ipynb)")
    nb = launch_notebook(recipe, lang, repository=repository, commit=commit, root=root)
    target = target / recipe.name if target.is_dir() else target
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return target


def current_commit(root: Path = ROOT) -> str | None:
    """The checkout's commit (``GITHUB_SHA`` in Actions is the same), or None outside a git checkout."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


BRANCH_README = """# hooklab: launch copies (generated)

This branch is written by the publishing workflow (.github/workflows/pages.yml) from commit {commit} of
{repository}: it holds the one-language notebooks (`zh/`, `en/`; the recipe notebooks in `zh/recipes/`,
`en/recipes/`) that the course website's Colab and Binder buttons open, each starting with a cell that installs hooklab where it is missing, and what Binder builds its image
from (`environment.yml`, `postBuild`, the package). Do not edit it: every push to the default branch replaces it.
The course itself, its tests and its tools are on the default branch.

本分支由发布工作流自动生成，供网站上的 Colab / Binder 按钮打开；请不要修改，课程本身在默认分支上。
"""


def write_tree(out: Path, *, repository: str, commit: str | None, root: Path = ROOT) -> list[Path]:
    """Write the launch branch's files into ``out`` (emptied first): ``LANG/NN_x.ipynb`` for every notebook and
    ``LANG/recipes/NN_x.ipynb`` for every recipe notebook; return the launch copies written."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    written = []
    sources = [(path, "") for path in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
    sources += [(path, "recipes") for path in sorted((root / "recipes").glob("[0-9][0-9]_*.ipynb"))]
    for lang in LANGS:
        for path, folder in sources:
            nb = launch_notebook(path, lang, repository=repository, commit=commit, root=root)
            target = out / lang / folder / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
            written.append(target)
    for name in ("environment.yml", "postBuild", "pyproject.toml", PACKAGE_PAGE, "LICENSE", "LICENSE-prose.md"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, out / name)
    shutil.copytree(root / "hooklab", out / "hooklab", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (out / "README.md").write_text(BRANCH_README.format(commit=commit or "(unknown)", repository=repository),
                                   encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.launch", description=__doc__.split("\n")[0])
    parser.add_argument("out", help="folder to write the launch branch's files into (emptied first)")
    parser.add_argument("--repository-url", required=True, metavar="URL",
                        help="the repository's https URL (in Actions: $GITHUB_SERVER_URL/$GITHUB_REPOSITORY)")
    parser.add_argument("--commit", help="the commit hooklab is installed from (default: the checkout's HEAD)")
    args = parser.parse_args(argv)
    try:
        if not re.fullmatch(r"https://[^\s/]+/[^\s/]+/[^\s/]+", args.repository_url.rstrip("/")):
            raise LaunchError(f"--repository-url should be https://HOST/OWNER/REPO, got {args.repository_url!r}")
        written = write_tree(Path(args.out), repository=args.repository_url.rstrip("/"),
                             commit=args.commit or current_commit())
    except LaunchError as exc:
        print(f"[course] error: {exc}", file=sys.stderr)
        return 1
    print(f"[course] {len(written)} launch copies in {args.out}/zh and {args.out}/en", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
