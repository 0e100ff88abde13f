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
at that commit, plus the pins the course is verified on (torch, torchvision, ...: :func:`pins`), and says what it
is doing. Without a repository URL (a site built locally) it says how to install hooklab from a clone instead.
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

ROOT = Path(__file__).resolve().parent.parent
LANGS = ("zh", "en")
INSTALL_TAG = "hooklab-install"
# The packages a notebook imports, pinned as the course's environment pins them (pyproject.toml's course group):
# the notebooks' outputs were recorded with these. Jupyter, the test tools and the language pack are left out: the
# notebook runs in whatever Jupyter opened it.
RUNTIME = ("torch", "torchvision", "torchviz", "matplotlib", "transformers", "safetensors")
PYTHON_KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}

_COMMENT = {
    "zh": ("# 安装本课需要的包：hooklab（连同课程的 course 依赖）和课程验证时用的版本（torch 等）。\n"
           "# 已经能导入 hooklab 时（Binder、./course lab）什么也不装。Colab 上第一次运行要几分钟。"),
    "en": ("# Installs what this notebook needs: hooklab (with the course's extra) and the versions the course is\n"
           "# verified on (torch, ...). Installs nothing where hooklab can be imported already (Binder, ./course lab).\n"
           "# The first run on Colab takes a few minutes."),
}


class LaunchError(Exception):
    """Bad input to the launch copies (a URL, a commit); the message says what to fix."""


def pins(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The exact pins of the packages the notebooks import, from pyproject.toml's ``course`` dependency group.

    >>> [p.split("==")[0] for p in pins()]
    ['torch', 'torchvision', 'torchviz', 'matplotlib', 'transformers', 'safetensors']
    """
    group = tomllib.loads(pyproject.read_text(encoding="utf-8"))["dependency-groups"]["course"]
    by_name = {re.split(r"[=<>!~ \[;]", spec, maxsplit=1)[0].lower(): spec for spec in group if isinstance(spec, str)}
    missing = [name for name in RUNTIME if name not in by_name or "==" not in by_name[name]]
    if missing:
        raise LaunchError(f"{pyproject}: the course group pins no exact version of {', '.join(missing)}")
    return [by_name[name] for name in RUNTIME]


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


def install_cell(hooklab: str | None, pinned: list[str], lang: str) -> dict[str, Any]:
    """The first code cell of a launch copy: installs ``hooklab`` (a pip requirement) and ``pinned`` where
    ``import hooklab`` would fail, and says what it did. ``hooklab=None``: it says how to install from a clone.
    Tagged ``hooklab-install`` (and ``remove-cell``: the site's page does not show it; the downloaded file has it).
    """
    if lang not in LANGS:
        raise LaunchError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    if hooklab is None:
        action = ('    raise ModuleNotFoundError(\n'
                  '        "hooklab is not installed. From a clone of the course\'s repository: "\n'
                  '        "pip install -e \\".[course]\\" (or ./course lab, which installs everything)")\n')
    else:
        action = ('    print("installing hooklab and the packages the course is verified with (pip) ...", flush=True)\n'
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
              'TORCH = next(p.split("==")[1] for p in PINS if p.startswith("torch=="))\n'
              'if version("torch") != TORCH:\n'
              '    print(f"note: this is torch {version(\'torch\')}; the outputs shown were recorded with torch {TORCH}")\n')
    return {"cell_type": "code", "execution_count": None, "id": "hooklab-install",
            "metadata": {"tags": [INSTALL_TAG, "remove-cell"]}, "outputs": [], "source": source}


def launch_copy(nb: dict[str, Any], lang: str, hooklab: str | None, pinned: list[str]) -> dict[str, Any]:
    """A one-language notebook (as ``hooklab.course export`` writes it) made ready to leave the repository: the
    install cell first, before the title's first code cell, and a plain Python 3 kernel (Colab's and Binder's
    ``python3``; the course's kernel ``hooklab`` exists only where ./course or postBuild registered it)."""
    out = copy.deepcopy(nb)
    cells = [c for c in out["cells"] if INSTALL_TAG not in c.get("metadata", {}).get("tags", [])]
    first_code = next((i for i, c in enumerate(cells) if c.get("cell_type") == "code"), len(cells))
    cells.insert(first_code, install_cell(hooklab, pinned, lang))
    out["cells"] = cells
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
            nb = launch_copy(export_notebook(read_notebook(path), lang), lang, hooklab, pinned)
            target = out / lang / path.name
            target.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
            written.append(target)
    for name in ("environment.yml", "postBuild", "pyproject.toml", "LICENSE", "LICENSE-prose.md"):
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
