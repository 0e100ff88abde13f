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
built from environment.yml; the course's own lab), it installs nothing and says so. Where it cannot (Colab, a
notebook downloaded from the site), it runs ``pip install`` of hooklab with its ``course`` extra from the repository
at that commit, plus exactly what that notebook imports, at the versions uv.lock pins (:func:`notebook_pins`: the
imports are read from the notebook's code with ``ast`` and mapped to distributions by the installed metadata,
``tools/notebooks/imports.py``; torch always), and says what it is installing. On a Python older than
``requires-python`` it stops first, saying which Python it needs (torch 2.15.0 has no build for 3.10). Without a
repository URL (a site built locally) it says how to install hooklab from a clone instead.

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
# Every launch copy installs torch at the lock's version whatever it imports: hooklab needs it, and the notebooks'
# outputs were recorded with it (the cell says so when another torch is running).
ALWAYS = ("torch",)
# What every Jupyter kernel has already: the cell never installs these (the notebook runs in whatever Jupyter opened
# it, and replacing the running kernel's IPython under it would break it).
IN_EVERY_KERNEL = frozenset({"ipython", "ipykernel", "jupyter-client", "jupyter-core", "traitlets", "comm",
                             "matplotlib-inline"})
PYTHON_KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}

_COMMENT = {
    "zh": ("# 安装本课需要的包：hooklab（连同课程的 course 依赖）和本课导入的每个包，\n"
           "# 版本都是课程验证时用的（torch 等）。已经能导入 hooklab 时（Binder、./course lab）什么也不装。\n"
           "# Colab 上第一次运行要几分钟。"),
    "en": ("# Installs what this notebook needs: hooklab (with the course's extra) and every package this\n"
           "# notebook imports, at the versions the course is verified on (torch, ...). Installs nothing where\n"
           "# hooklab can be imported already (Binder, ./course lab). The first run on Colab takes a few minutes."),
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
                 python: tuple[int, int] | None = None) -> dict[str, Any]:
    """The first code cell of a launch copy: installs ``hooklab`` (a pip requirement) and ``pinned`` where
    ``import hooklab`` would fail, and says what it is installing; on a Python older than ``python`` (default:
    requires-python's) it stops before pip, saying which Python it needs. ``hooklab=None``: it says how to install
    from a clone. Tagged ``hooklab-install`` (and ``remove-cell``: the site's page does not show it; the downloaded
    file has it).
    """
    if lang not in LANGS:
        raise LaunchError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    major, minor = python or minimum_python()
    if hooklab is None:
        action = ('    raise ModuleNotFoundError(\n'
                  '        "hooklab is not installed. From a clone of the course\'s repository: "\n'
                  '        "pip install -e \\".[course]\\" (or ./course lab, which installs everything)")\n')
    else:
        action = (f'    if sys.version_info < ({major}, {minor}):\n'
                  '        raise RuntimeError(\n'
                  f'            "this notebook needs Python {major}.{minor} or newer: "\n'
                  '            f"its packages ({\', \'.join(PINS)}) "\n'
                  '            f"have no build for Python {sys.version_info.major}.{sys.version_info.minor}; "\n'
                  '            "open it in a Jupyter with a newer Python")\n'
                  '    print("installing hooklab and what this notebook imports, at the versions the course is "\n'
                  '          "verified with (pip):", ", ".join(PINS), "...", flush=True)\n'
                  '    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", HOOKLAB, *PINS], check=True)\n'
                  '    importlib.invalidate_caches()\n'
                  '    print("installed: hooklab", version("hooklab"), "| torch", version("torch"))\n')
    source = (f"{_COMMENT[lang]}\n"
              "import importlib, importlib.util, subprocess, sys\n"
              "from importlib.metadata import version\n\n"
              f"HOOKLAB = {json.dumps(hooklab) if hooklab else None}\n"
              f"PINS = {json.dumps(pinned)}\n\n"
              'if importlib.util.find_spec("hooklab") is None:\n'
              f"{action}"
              "else:\n"
              '    print("hooklab", version("hooklab"), "is installed already: nothing to install")\n'
              'TORCH = next((p.split("==")[1] for p in PINS if p.startswith("torch==")), None)\n'
              'if TORCH and version("torch") != TORCH:\n'
              '    print(f"note: this is torch {version(\'torch\')}; the outputs shown were recorded with torch {TORCH}")\n')
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
    cells.insert(first_code, install_cell(hooklab, everything, lang))
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
