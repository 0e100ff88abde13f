"""The weekly re-run looks ahead of the lock: which ``./course rerun`` runs test what uv.lock does not pin yet, and
one summary of which cells changed in them.

    python -m tools.rerun.ahead plan >> "$GITHUB_OUTPUT"          # runs=[...]: the workflow's job matrix
    python -m tools.rerun.ahead summary DIR [DIR ...]              # Markdown: every run's changed cells

``plan`` asks PyPI (its JSON API) and compares with uv.lock. The runs, each left out when it would re-test the lock:

1. **newest PyTorch**: the newest torchvision release and the newest torch release it accepts (its requirement on
   torch is an exact pin in some releases, a lower bound in others): ``--torch T --vision V``. ``TORCH`` and
   ``VISION`` in the environment (the workflow's manual inputs) name the pair instead, without asking PyPI;
2. **newest libraries**: transformers and the libraries notebook 15 imports (:data:`LIBRARIES`), each at its
   newest release where that is newer than the lock's, together on the locked torch and torchvision:
   ``--torch LOCKED --vision LOCKED --with transformers==A --with diffusers==B ...`` (``./course rerun`` puts
   each in place of the lock's pin, overriding the other packages' requirements on it);
3. **PyTorch pre-release**: where PyPI has a torch pre-release newer than its newest release, with the newest
   torchvision pre-release that accepts it (else none): ``--torch 2.16.0rc1 --vision ...``; its environment lets
   uv take pre-releases (``prerelease: allow``).

Each run writes ``build/rerun/<name>/results.json`` beside its report (tools/rerun/command.py); ``summary`` turns the
results of all runs into one table and a list of the changed cells, for the workflow's summary page.
Standard library and ``packaging`` only: the workflow runs it before any environment is built.

Dependabot does watch PyPI for the lock (.github/dependabot.yml: the ``uv`` ecosystem, grouped updates, torch and
torchvision in one group) and keeps the workflows' actions current: it opens a pull request that moves uv.lock, and CI
tests that lock with ``./course test`` (the notebooks' stored outputs compared by nbval). What the look ahead does that
Dependabot does not: it keeps the lock and runs what a pull request's CI does not run, in side environments, against
the newer PyTorch and libraries: a PyTorch pre-release (Dependabot proposes releases only), every notebook re-executed
with its outputs compared cell by cell (``./course rerun``'s report of which cells changed and why, which maintainers
read before rewriting prose around a new behaviour), and the newest torch with the newest libraries in one run. So
a pin moves by a reviewed pull request (Dependabot's or a maintainer's)
after the look ahead has said what the move changes.
Nor nox's ``parametrize``: it holds a list fixed in the noxfile, and these runs are what PyPI has this week.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "uv.lock"
PYPI = "https://pypi.org/pypi/{}/json"
# transformers (notebook 12, hooklab.course) and the libraries notebook 15 imports (tests/tools/test_rerun_ahead.py
# checks the list against the notebook's imports)
LIBRARIES = ("transformers", "accelerate", "captum", "diffusers", "peft", "pytorch-lightning", "timm", "torchao",
             "torchinfo")
VERSION = re.compile(r"^\d+\.\d+(\.\d+)?((a|b|rc|\.post|\.dev)\d+)?$")  # what ./course rerun accepts

Fetch = Callable[[str], dict]


class PlanError(Exception):
    """PyPI gave nothing usable for a run: the message says which package and why."""


def fetch(project: str) -> dict:
    with urllib.request.urlopen(PYPI.format(project), timeout=60) as response:
        return json.load(response)


def locked(lock: Path = LOCK) -> dict[str, str]:
    """Normalised name -> the version uv.lock pins (the first, where the lock forks by Python version)."""
    found: dict[str, str] = {}
    for package in tomllib.loads(lock.read_text(encoding="utf-8")).get("package", []):
        if "version" in package:
            found.setdefault(re.sub(r"[-_.]+", "-", package["name"]).lower(), package["version"])
    return found


def releases(pypi_json: dict, *, pre: bool = False) -> list:
    """The versions of a project's PyPI JSON that have files not all yanked: final releases, or (``pre``) only the
    pre-releases (a, b, rc, dev)."""
    from packaging.version import InvalidVersion, Version

    found = []
    for text, files in pypi_json.get("releases", {}).items():
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if version.is_prerelease == pre and files and not all(f.get("yanked") for f in files):
            found.append(version)
    return found


def torch_requirement(requires_dist: list[str] | None):
    """torchvision's requirement on torch (not one that only an extra needs).

    >>> str(torch_requirement(["numpy", "torch==2.9.0", "pillow!=8.3.*,>=5.3.0"]).specifier)
    '==2.9.0'
    >>> str(torch_requirement(["torch (>=2.14.0)", "scipy ; extra == 'scipy'"]).specifier)
    '>=2.14.0'
    """
    from packaging.requirements import InvalidRequirement, Requirement

    for line in requires_dist or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name == "torch" and "extra" not in str(requirement.marker or ""):
            return requirement
    return None


def newest_pair(torchvision_json: dict, torch_json: dict) -> tuple[str, str]:
    """(torch, torchvision): the newest torchvision, and the newest torch it accepts.

    >>> vision = {"info": {"version": "0.29.2", "requires_dist": ["numpy", "torch>=2.14.0"]}}
    >>> torch = {"releases": {"2.14.0": [{}], "2.15.0": [{}], "2.16.0rc1": [{}], "2.15.1": [{"yanked": True}]}}
    >>> newest_pair(vision, torch)
    ('2.15.0', '0.29.2')
    >>> newest_pair({"info": {"version": "0.20.1", "requires_dist": ["torch (==2.5.1)"]}}, torch)
    ('2.5.1', '0.20.1')
    """
    info = torchvision_json["info"]
    requirement = torch_requirement(info.get("requires_dist"))
    if requirement is None:
        raise PlanError(f"torchvision {info['version']} on PyPI names no torch requirement; run the workflow by "
                        "hand with both inputs")
    pins = [spec.version for spec in requirement.specifier if spec.operator == "=="]
    if pins:
        return pins[0], info["version"]
    accepted = [v for v in releases(torch_json) if requirement.specifier.contains(v)]
    if not accepted:
        raise PlanError(f"no torch release on PyPI satisfies torchvision {info['version']}'s {requirement}")
    return str(max(accepted)), info["version"]


def newest_release(pypi_json: dict) -> str | None:
    found = releases(pypi_json)
    return str(max(found)) if found else None


def newer(candidate: str | None, than: str | None) -> bool:
    from packaging.version import Version

    return candidate is not None and (than is None or Version(candidate) > Version(than))


def checked(version: str, what: str) -> str:
    if not VERSION.match(version):
        raise PlanError(f"{what} {version!r} on PyPI is not a version ./course rerun takes")
    return version


def run_entry(name: str, title: str, args: list[str], *, prerelease: bool = False) -> dict[str, str]:
    return {"name": name, "title": title, "args": " ".join(args),
            "prerelease": "allow" if prerelease else "if-necessary-or-explicit"}


def newest_pytorch_run(get: Fetch, lock: Mapping[str, str], environ: Mapping[str, str]) -> tuple[dict | None, str]:
    """Run 1 (or None) and a line saying what was found."""
    torch, vision = environ.get("TORCH", "").strip(), environ.get("VISION", "").strip()
    if bool(torch) != bool(vision):
        raise PlanError("give both TORCH and VISION, or neither (then the newest pair on PyPI is used)")
    given = bool(torch)
    if not given:
        torch, vision = newest_pair(get("torchvision"), get("torch"))
    checked(torch, "torch")
    if vision != "none":
        checked(vision, "torchvision")
    if not given and (torch, vision) == (lock.get("torch"), lock.get("torchvision")):
        return None, f"newest PyTorch: torch {torch} + torchvision {vision} is the locked pair: nothing to run"
    line = f"newest PyTorch: torch {torch} + torchvision {vision}" + (" (given by hand)" if given else "")
    return run_entry("newest-pytorch", f"torch {torch}", ["--torch", torch, "--vision", vision]), line


def newest_libraries_run(get: Fetch, lock: Mapping[str, str]) -> tuple[dict | None, str]:
    """Run 2 (or None) and a line saying what was found."""
    ahead, same = [], []
    for library in LIBRARIES:
        newest = newest_release(get(library))
        if newer(newest, lock.get(library)):
            ahead.append(f"{library}=={checked(newest or '', library)}")
        else:
            same.append(library)
    if not ahead:
        return None, f"newest libraries: none is newer than the lock ({', '.join(same)})"
    title = ", ".join(a.replace("==", " ") for a in ahead)
    args = ["--torch", lock["torch"], "--vision", lock["torchvision"]]
    for requirement in ahead:
        args += ["--with", requirement]
    return (run_entry("newest-libraries", title, args),
            f"newest libraries: {title}" + (f" (the lock's: {', '.join(same)})" if same else ""))


def pytorch_prerelease_run(get: Fetch) -> tuple[dict | None, str]:
    """Run 3 (or None) and a line saying what was found."""
    torch_json, vision_json = get("torch"), get("torchvision")
    final = newest_release(torch_json)
    pre = [v for v in releases(torch_json, pre=True) if newer(str(v), final)]
    if not pre:
        return None, f"PyTorch pre-release: none on PyPI newer than torch {final}"
    torch = checked(str(max(pre)), "torch")
    vision = "none"
    vision_final = newest_release(vision_json)
    vision_pre = [v for v in releases(vision_json, pre=True) if newer(str(v), vision_final)]
    if vision_pre:
        candidate = str(max(vision_pre))
        requirement = torch_requirement(get(f"torchvision/{candidate}").get("info", {}).get("requires_dist"))
        if requirement is not None and requirement.specifier.contains(torch, prereleases=True):
            vision = checked(candidate, "torchvision")
    return (run_entry("pytorch-prerelease", f"torch {torch} (pre-release)", ["--torch", torch, "--vision", vision],
                      prerelease=True),
            f"PyTorch pre-release: torch {torch} + torchvision {vision}")


def plan(get: Fetch = fetch, *, lock: Mapping[str, str] | None = None,
         environ: Mapping[str, str] | None = None) -> tuple[list[dict], list[str]]:
    """The runs (see the module's docstring) and one line per kind of run saying what was found."""
    lock = locked() if lock is None else lock
    environ = os.environ if environ is None else environ
    runs, lines = [], []
    for make in (lambda: newest_pytorch_run(get, lock, environ), lambda: newest_libraries_run(get, lock),
                 lambda: pytorch_prerelease_run(get)):
        run, line = make()
        lines.append(line)
        if run is not None:
            runs.append(run)
    return runs, lines


# ---- the summary of the runs ---------------------------------------------------------------------------------

def read_results(folders: list[Path]) -> list[dict[str, Any]]:
    """Every ``results.json`` under the folders (a run's folder or one holding several), sorted by run name."""
    found = []
    for folder in folders:
        for path in sorted(folder.rglob("results.json")) if folder.is_dir() else []:
            data = json.loads(path.read_text(encoding="utf-8"))
            if "cells" in data and "name" in data:
                found.append(data)
    return sorted(found, key=lambda r: r["name"])


def _hook_matrix_cell(hooks: dict[str, Any] | None) -> str:
    """The summary's hook-matrix column: not checked, could not check, or how many cells changed."""
    if hooks is None:
        return "–"
    return f"not checked: {hooks['error']}" if hooks.get("error") else f"{len(hooks['changed'])} changed"


def summary(results: list[dict[str, Any]], lines: list[str] = ()) -> str:
    """Markdown: one row per run (what it installed, unit tests, changed cells and figures), then each changed cell."""
    out = ["# What changed ahead of the lock", ""]
    out += [f"- {line}" for line in lines]
    if lines:
        out.append("")
    if not results:
        return "\n".join(out + ["No run wrote results (nothing was newer than the lock, or the runs failed to "
                                "build: see their logs)."]) + "\n"
    out += ["| run | versions | unit tests | changed cells | changed figures | notebooks stopped | hook matrix | exit |",
            "|---|---|---|---|---|---|---|---|"]
    for r in results:
        versions = f"torch {r['versions'].get('torch')}, torchvision {r['versions'].get('torchvision') or 'none'}"
        versions += "".join(f", `{w}`" for w in r["requested"].get("with", []))
        out.append(f"| {r['name']} | {versions} | {r['unit_tests'] or '–'} | {len(r['cells'])} | "
                   f"{len(r['figures'])} | {len(r['aborted'])} | {_hook_matrix_cell(r.get('hook_matrix'))} | "
                   f"{r['exit']} |")
    out.append("")
    for r in results:
        hooks = (r.get("hook_matrix") or {}).get("changed") or []
        if r["cells"] or r["figures"] or r["aborted"] or r["failed_tests"] or hooks:
            out += [f"## {r['name']}", ""]
            out += [f"- unit test failed: `{t}`" for t in r["failed_tests"]]
            out += [f"- {c['notebook'][:2]} · Cell {c['cell']} ({c['kind']}), under \"{c['heading']}\": {c['why']}"
                    for c in r["cells"]]
            out += [f"- {f['notebook'][:2]} · Cell {f['cell']}: figure {f['note']}" for f in r["figures"]]
            out += [f"- {a}" for a in r["aborted"]]
            out += [f"- hook matrix cell `{key}` observed differently" for key in hooks]
            out += ["", f"The diffs are in the run's report.md ({r['name']}).", ""]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.rerun.ahead", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("plan", help="print runs=[...] (GitHub step output) and what was found (stderr)")
    summary_command = commands.add_parser("summary", help="Markdown summary of the runs' results.json")
    summary_command.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.command == "summary":
        print(summary(read_results(args.folders)), end="")
        return 0
    try:
        runs, lines = plan()
    except (PlanError, OSError, ValueError) as exc:
        print(f"[rerun-ahead] error: could not plan the runs from PyPI: {exc}", file=sys.stderr)
        return 1
    for line in lines:
        print(f"[rerun-ahead] {line}", file=sys.stderr)
    print(f"runs={json.dumps(runs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
