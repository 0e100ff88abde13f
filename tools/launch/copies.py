"""Launch copies: the one-language notebooks that the site's download, Colab and Binder buttons give a learner,
each starting with a cell that installs what the notebook needs where it is missing.

    python -m tools.launch OUT --repository-url URL [--commit SHA]

writes the tree of the ``launch`` branch that the publishing workflow (.github/workflows/pages.yml) pushes:
``zh/NN_x.ipynb`` and ``en/NN_x.ipynb`` (the launch copies), and what Binder builds its image from
(``environment.yml``, ``postBuild`` and the package itself: ``pyproject.toml``, ``hooklab/``, the licences), with a
short README that says where the branch comes from.

Why the install cell is generated here and not committed in the notebooks: it has to name where hooklab comes from
(the repository's URL and the commit the notebook was written with), which a committed notebook cannot know (the
course may be forked or moved) and nbval would have to ignore. So `./course site` and this tool put it into the
copies that leave the repository, with the URL filled in from the Actions context, and the notebooks in
``notebooks/`` stay as they are (`./course lab` and Binder have hooklab installed already).

The cell (:func:`install_cell`) checks whether ``hooklab`` can be imported. Where it can (Binder, whose image is
built from environment.yml with PyTorch's CPU wheels; the course's own lab), it installs nothing and says so (and
which torch runs, where it is not the one the outputs were verified with). Where it cannot (Colab, a notebook
downloaded from the site), it runs ``pip install`` of hooklab with its ``course`` extra from the repository at that
commit, plus what that notebook imports and the runtime lacks, at the versions uv.lock pins (:func:`notebook_pins`:
the imports are read from the notebook's code with ``ast`` and mapped to distributions by the installed metadata,
``tools/notebooks/imports.py``), and says what it is installing. A distribution installed already stays as it is
("install only what is missing"); above all torch: a torch inside :func:`torch_range` (Colab ships one) is kept
and pinned on pip's command line at its own version, so that nothing replaces it with the 3 GB CUDA wheels, and
torchvision, which is built for one torch release, comes at the release that matches it. A torch outside the range,
or none, gets a message saying so, and the lock's torch is installed. The cell prints the torch it runs on and the
one the outputs were verified with. On a Python older than ``requires-python`` it stops first, saying which Python
it needs (torch 2.15.0 has no build for 3.10). Without a repository URL (a site built locally) it says how to
install hooklab from a clone instead.

``python -m tools.launch.check`` runs every launch copy top to bottom in a fresh environment, as Colab would.
"""
from __future__ import annotations

import argparse
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
# 14's copy: 2.15; on 2.13 its queue_callback cells fail, measured).
TORCH_APIS = {"queue_callback": "2.15", "node_creation_hook": "2.14"}
# Built for one torch release each (torchvision 0.29.2 asks for torch>=2.14): where the cell keeps another torch than
# the lock's, these are installed without a version, and pip picks the release that matches the running torch.
TORCH_TIED = ("torchvision",)
# What every Jupyter kernel has already: the cell never installs these (the notebook runs in whatever Jupyter opened
# it, and replacing the running kernel's IPython under it would break it).
IN_EVERY_KERNEL = frozenset({"ipython", "ipykernel", "jupyter-client", "jupyter-core", "traitlets", "comm",
                             "matplotlib-inline"})
PYTHON_KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}

_COMMENT = {
    "zh": ("# 安装本课需要而这里还没有的包：hooklab（连同课程的 course 依赖）和本课导入的包，版本是课程验证时用的。\n"
           "# 已经装了 {low} 到 {high} 之间的 torch（Colab 自带）时保留它，不重新下载；已经能导入 hooklab 时\n"
           "# （Binder、./course lab）什么也不装。Colab 上第一次运行要一两分钟。"),
    "en": ("# Installs what this notebook needs and this runtime lacks: hooklab (with the course's extra) and the\n"
           "# packages this notebook imports, at the versions the course is verified on. A torch from {low} to {high}\n"
           "# (Colab ships one) is kept, not downloaded again. Installs nothing where hooklab can be imported\n"
           "# already (Binder, ./course lab). The first run on Colab takes a minute or two."),
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


def notebook_pins(nb: dict[str, Any], *, lock: Path = LOCK, mapping: dict[str, list[str]] | None = None) -> list[str]:
    """Exactly what a notebook imports (its code cells, the install cell left out), as ``name==version`` at the
    versions ``lock`` pins, sorted: torch always; hooklab (installed from the repository) and what every Jupyter kernel
    has (:data:`IN_EVERY_KERNEL`) left out. ``mapping``: import name -> distributions (default: the installed
    metadata). A name no installed or locked distribution provides raises :class:`LaunchError`.

    >>> nb = {"cells": [{"cell_type": "code", "source": "import hooklab, timm\\nfrom IPython.display import HTML"}]}
    >>> notebook_pins(nb)
    ['timm==1.0.31', 'torch==2.15.0']
    """
    try:
        modules = notebook_imports.imported_modules(nb, skip_tag=INSTALL_TAG)
        found = set(notebook_imports.distributions(modules, mapping=mapping).values())
        wanted = sorted((found | set(ALWAYS)) - {"hooklab"} - IN_EVERY_KERNEL)
        locked = notebook_imports.locked_versions(lock)
        return [f"{name}=={notebook_imports.locked_version(name, locked, lock=lock)}" for name in wanted]
    except notebook_imports.ImportsError as exc:
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
    code), with the course's extra; None without a repository URL.

    >>> requirement("https://github.com/o/hooklab", "0123abc")
    'hooklab[course] @ git+https://github.com/o/hooklab@0123abc'
    """
    if not repository:
        return None
    if commit is not None and not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise LaunchError(f"the commit should be a git commit id (hex), got {commit!r}")
    return f"hooklab[course] @ git+{repository}" + (f"@{commit}" if commit else "")


def install_cell(hooklab: str | None, pinned: list[str], lang: str, *,
                 python: tuple[int, int] | None = None, torch: tuple[str, str] | None = None) -> dict[str, Any]:
    """The first code cell of a launch copy: installs ``hooklab`` (a pip requirement) and what of ``pinned`` is not
    installed where ``import hooklab`` would fail, and says what it is installing. A torch inside ``torch`` (default:
    :func:`torch_range`) stays: pip gets ``torch==<its version>``, and :data:`TORCH_TIED` without a version where it
    is not the pinned torch; outside it (or none), the cell says so and installs the pinned torch. It prints the torch
    it runs on and the one the outputs were verified with. On a Python older than ``python`` (default:
    requires-python's) it stops before pip, saying which Python it needs. ``hooklab=None``: it says how to install
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
                           '        "pip install -e \\".[course]\\" (or ./course lab, which installs everything)")\n')
    else:
        missing_hooklab = (f'    if sys.version_info < ({major}, {minor}):\n'
                           '        raise RuntimeError(\n'
                           f'            "this notebook needs Python {major}.{minor} or newer: "\n'
                           '            f"its packages ({\', \'.join(PINS)}) "\n'
                           '            f"have no build for Python {sys.version_info.major}.{sys.version_info.minor}; "\n'
                           '            "open it in a Jupyter with a newer Python")\n')
    source = (f"{_COMMENT[lang].format(low=low, high=high)}\n"
              "import importlib, importlib.util, re, subprocess, sys\n"
              "from importlib.metadata import PackageNotFoundError, version\n\n"
              f"HOOKLAB = {json.dumps(hooklab) if hooklab else None}\n"
              f"PINS = {json.dumps(pinned)}\n"
              f"LOW, HIGH = {json.dumps(low)}, {json.dumps(high)}  # the torch releases kept where one is installed\n"
              f"TORCH_TIED = {json.dumps(list(TORCH_TIED))}  # built for one torch release each\n\n\n"
              "def installed(name):\n"
              "    try:\n"
              "        return version(name)\n"
              "    except PackageNotFoundError:\n"
              "        return None\n\n\n"
              "def release(text):  # 2.13.0+cpu -> (2, 13, 0)\n"
              '    parts = [int(x) for x in re.match(r"\\d+(?:\\.\\d+)*", text).group().split(".")] + [0, 0]\n'
              "    return tuple(parts[:3])\n\n\n"
              'TORCH = next((p.split("==")[1] for p in PINS if p.startswith("torch==")), None)\n'
              'RUNNING = installed("torch")\n'
              "KEEP = bool(RUNNING) and release(LOW) <= release(RUNNING) <= release(HIGH)\n"
              'HAVE_HOOKLAB = importlib.util.find_spec("hooklab") is not None\n'
              "if not HAVE_HOOKLAB:\n"
              f"{missing_hooklab}"
              "# a torch in the range (or any, where hooklab is installed already) stays, pinned at its own version so\n"
              "# that pip replaces it with nothing; otherwise the torch the outputs were verified with is installed\n"
              "if RUNNING and (KEEP or HAVE_HOOKLAB):\n"
              '    torch_version = RUNNING.split("+")[0]\n'
              "else:\n"
              "    torch_version = TORCH\n"
              '    print((f"torch {RUNNING} is outside the range these notebooks run on ({LOW} to {HIGH}): "\n'
              '           f"installing torch {TORCH} in its place" if RUNNING else\n'
              '           f"torch is not installed: installing torch {TORCH}")\n'
              '          + " (from PyPI; on Linux with its CUDA libraries, about 3 GB)", flush=True)\n'
              'wanted = [f"torch=={torch_version}"]\n'
              'replacing = torch_version != (RUNNING or "").split("+")[0]\n'
              "for pin in PINS:\n"
              '    name = pin.split("==")[0]\n'
              '    if name == "torch" or (installed(name) and not (replacing and name in TORCH_TIED)):\n'
              "        continue  # installed already: kept as it is (a torchvision too, unless its torch is replaced)\n"
              "    # built for one torch release: with another torch than the pinned one, pip picks the matching release\n"
              "    wanted.append(name if name in TORCH_TIED and release(torch_version) != release(TORCH) else pin)\n"
              + ("" if hooklab is None else  # without a URL the cell stopped above where hooklab is missing
                 "if not HAVE_HOOKLAB:\n"
                 '    print("installing hooklab and what this notebook imports, at the versions the course is "\n'
                 '          "verified with (pip):", ", ".join(wanted), "...", flush=True)\n'
                 '    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", HOOKLAB, *wanted], check=True)\n'
                 "    importlib.invalidate_caches()\n"
                 '    print("installed: hooklab", version("hooklab"), "| torch", version("torch"))\n'
                 "el")
              + "if wanted[1:]:\n"
              '    print("hooklab", version("hooklab"), "is installed already; installing what this notebook imports "\n'
              '          "and this environment lacks (pip):", ", ".join(wanted[1:]), "...", flush=True)\n'
              '    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *wanted], check=True)\n'
              "    importlib.invalidate_caches()\n"
              "else:\n"
              '    print("hooklab", version("hooklab"), "is installed already: nothing to install")\n'
              'if not HAVE_HOOKLAB or wanted[1:]:\n'
              '    print(f"running on torch {version(\'torch\')}; the outputs shown were verified with torch {TORCH}")\n'
              "elif TORCH and RUNNING and release(RUNNING) != release(TORCH):\n"
              '    print(f"note: this is torch {RUNNING}; the outputs shown were verified with torch {TORCH}"\n'
              '          + ("" if KEEP else f" (outside the range these notebooks run on, {LOW} to {HIGH})"))\n')
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
    cells.insert(first_code, install_cell(hooklab, everything, lang, torch=notebook_torch_range(out)))
    out.setdefault("metadata", {})["kernelspec"] = dict(PYTHON_KERNEL)
    return out


def current_commit(root: Path = ROOT) -> str | None:
    """The checkout's commit (``GITHUB_SHA`` in Actions is the same), or None outside a git checkout."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


BRANCH_README = """# hooklab: launch copies (generated)

This branch is written by the publishing workflow (.github/workflows/pages.yml) from commit {commit} of
{repository}: it holds the one-language notebooks (`zh/`, `en/`) that the course website's Colab and Binder
buttons open, each starting with a cell that installs hooklab where it is missing, and what Binder builds its image
from (`environment.yml`, `postBuild`, the package). Do not edit it: every push to the default branch replaces it.
The course itself, its tests and its tools are on the default branch.

本分支由发布工作流自动生成，供网站上的 Colab / Binder 按钮打开；请不要修改，课程本身在默认分支上。
"""


def write_tree(out: Path, *, repository: str, commit: str | None, root: Path = ROOT) -> list[Path]:
    """Write the launch branch's files into ``out`` (emptied first); return the launch copies written."""
    from hooklab.course.export import export_notebook
    from hooklab.course.notebook import read_notebook

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    hooklab, pinned = requirement(repository, commit), pins(root / "pyproject.toml")
    written = []
    for lang in LANGS:
        (out / lang).mkdir()
        for path in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")):
            nb = launch_copy(export_notebook(read_notebook(path), lang), lang, hooklab, pinned,
                             lock=root / "uv.lock")
            target = out / lang / path.name
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
