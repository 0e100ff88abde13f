"""Re-run the course against another PyTorch release: ``./course rerun --torch X [--vision Y|none] [--unit-only | --library-only] [--with REQ ...]``.

1. Builds (or reuses) a side environment ``build/rerun/<name>/venv`` with the project's uv: the lock's course
   requirements, minus the exact pins of torch, torchvision, triton and the CUDA packages, plus ``torch==X``,
   ``torchvision==Y`` (unless ``--vision none``) and any ``--with`` requirement (which replaces the lock's pin of
   the same package), and hooklab itself (editable) with a ``hooklab`` kernel.
2. Runs hooklab's unit tests there with ``COURSE_RERUN=1`` (the lock-pin test and the lab test skip themselves;
   tests that need torchvision skip when it is absent); ``--library-only`` runs only the library's tests (not those
   marked ``course``: the exercises, the notebooks' format, export, lab, site; nor those marked ``pin``, which check
   how the pinned torch.compile treats hooks), which is how hooklab's torch floor is checked.
3. Unless ``--library-only``: runs every cell of the hook behaviour matrix there and lists the cells whose
   observation differs from ``docs/hook_matrix.json`` (``tools/rerun/matrix_cells.py``).
4. Unless ``--unit-only``: executes every notebook there in the fixed environment of ``./course regen``, and the
   same notebooks in the locked ``.venv`` (the baseline, cached under ``build/rerun/baseline/``), and compares
   both with the committed outputs through ``tests/sanitize.cfg`` (see ``tools/rerun/compare.py``).
5. Writes ``build/rerun/<name>/report.md``, and ``results.json`` beside it (the changed cells as data: the weekly
   workflow's summary of its runs, ``tools/rerun/ahead.py``).

Exit status: 0 nothing changed, 1 something changed (a unit test failed, a cell of the hook matrix changed, or an
output / figure changed because of PyTorch; machine drift alone is listed but is not a change), 2 usage or build
error.

Why not nox for the side environment (nox 2026.10.20 with ``venv_backend="uv"`` makes the launch check's
environments, tried: tools/launch/check.py). nox's sessions and their parameters are fixed when the noxfile is
imported; the versions here come at run time (``--torch X --with REQ``, the weekly plan from PyPI,
tools/rerun/ahead.py). A session's virtualenv is named by the session and reused (``--reuse-venv``) after checking its
type, its interpreter's links and (with ``NOX_ENABLE_STALENESS_CHECK``) its base Python, not what it holds
(``VirtualEnv._clean_location``: https://github.com/wntrblm/nox/blob/2026.08.17/nox/virtualenv.py#L770-L783, the
same in 2026.10.20); :func:`build_env` keeps one environment per run name under build/rerun/ (``--report-only`` reads
it again) and builds it again when the sha256 of its requirements changes. The environment work is uv's (``uv
export``, ``uv venv``, ``uv pip install --overrides``); what is left here is which requirements, and what runs in the
environment (the tests, the matrix, the notebooks, the baseline in .venv), which a noxfile would hold as the same code.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..notebooks import kernelspec
from . import compare, matrix_cells, report

ROOT = Path(__file__).resolve().parents[2]

UV = ROOT / ".tools" / "bin" / "uv"
BUILD = ROOT / "build" / "rerun"
BASELINE_PYTHON = ROOT / ".venv" / "bin" / "python"
# The lock's exact pins that belong to the torch build under test (exact names: `^torch` would also drop torchviz).
TORCH_SET = re.compile(r"^(torch|torchvision|triton|nvidia-[a-z0-9-]+|cuda-[a-z-]+)==")
VERSION = re.compile(r"^\d+\.\d+(\.\d+)?((a|b|rc|\.post|\.dev)\d+)?$")
REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
# ./course regen's fixed environment, plus: hide any GPU, tell the tests they run in a re-run, and let the
# environment's own `hooklab` kernelspec win over one a user installed.
FIXED_ENV = {
    "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1", "JUPYTER_PLATFORM_DIRS": "1", "PYTHONDONTWRITEBYTECODE": "1",
    "CUDA_VISIBLE_DEVICES": "", "COURSE_RERUN": "1", "JUPYTER_PREFER_ENV_PATH": "1",
}


ATLAS_ZOOS = ("transformers", "diffusers", "timm", "torchvision")


class UsageError(Exception):
    """Bad arguments or a failed build: exit status 2, with the message."""


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def say(message: str) -> None:
    print(f"[rerun] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="./course rerun", description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", required=True, metavar="X", help="torch version to install, e.g. 2.13.0")
    parser.add_argument("--vision", metavar="Y|none",
                        help="torchvision version to pair with it, or 'none' (the default: notebooks and tests "
                             "that need torchvision are then skipped with that reason)")
    parser.add_argument("--unit-only", action="store_true", help="run hooklab's unit tests only, no notebooks")
    parser.add_argument("--library-only", action="store_true",
                        help="only the library's unit tests (-m 'library and not pin'; implies --unit-only): how "
                             "hooklab's torch floor is checked, since the course itself targets the pinned torch")
    parser.add_argument("--with", dest="extra", action="append", default=[], metavar="REQ",
                        help="another requirement, replacing the lock's pin of that package (e.g. 'numpy<2')")
    parser.add_argument("--notebooks", nargs="+", metavar="NB", help="only these notebooks (default: all)")
    parser.add_argument("--report-only", action="store_true",
                        help="write the report again from the last run's results, running nothing")
    parser.add_argument("--fresh-baseline", action="store_true", help="re-run the baseline even if cached")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per notebook cell (default 300)")
    parser.add_argument("--atlas", action="append", default=[], choices=ATLAS_ZOOS, metavar="ZOO",
                        help="also measure the hook atlas of this zoo in the side environment and report what changed "
                             "against hooklab/course/assets/atlas (automatic for a zoo whose package --with replaces; hours for "
                             "transformers' whole zoo)")

    def error(message: str):  # argparse would exit 2 itself; keep one path for usage errors
        raise UsageError(f"{message}\n{parser.format_usage().strip()}")

    parser.error = error  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    if not VERSION.match(args.torch):
        raise UsageError(f"--torch {args.torch!r} is not a version like 2.13.0")
    if args.timeout < 1:
        raise UsageError(f"--timeout is the seconds one notebook cell may run, a whole number of at least 1 (default "
                         f"300), got {args.timeout}")
    if args.vision is None:
        say("no --vision given: running without torchvision (pass --vision Y to pair one, e.g. 0.28.0 "
            "with torch 2.13.0)")
        args.vision = "none"
    if args.vision != "none" and not VERSION.match(args.vision):
        raise UsageError(f"--vision {args.vision!r} is neither a version like 0.28.0 nor 'none'")
    for req in args.extra:
        name = requirement_name(req)
        if normal(name) in ("torch", "torchvision"):
            raise UsageError("use --torch / --vision for torch and torchvision, not --with")
    return args


def requirement_name(req: str) -> str:
    """The package a ``--with`` requirement names, once it parses as one (PEP 508, by ``packaging``: a name, extras,
    versions and a marker; no URL, no shell text) and before anything is built."""
    from packaging.requirements import InvalidRequirement, Requirement

    problem = "is not a requirement like 'numpy<2'"
    if not re.fullmatch(r"[A-Za-z0-9._\-\[\],<>=!~;'\" ]+", req):  # no URL, path or shell text
        raise UsageError(f"--with {req!r} {problem}")
    try:
        parsed = Requirement(req)
    except InvalidRequirement as why:
        raise UsageError(f"--with {req!r} {problem} ({str(why).splitlines()[0]})") from None
    return parsed.name


NAME_LIMIT = 120  # a folder's name; nine --with requirements (the weekly look-ahead run) would pass 200


def env_name(torch: str, vision: str, extra: list[str]) -> str:
    name = f"torch-{torch}-" + ("novision" if vision == "none" else f"vision-{vision}")
    base = name
    for req in extra:
        slug = req.replace("<=", "-le").replace(">=", "-ge").replace("==", "-eq").replace("!=", "-ne")
        slug = slug.replace("<", "-lt").replace(">", "-gt").replace("~=", "-compat")
        name += "-with-" + re.sub(r"[^A-Za-z0-9.-]+", "_", slug).strip("_-")
    if len(name) > NAME_LIMIT:  # the requirements are in the report; the name stays unique by their hash
        name = f"{base}-with-{len(extra)}-packages-{hashlib.sha256(' '.join(extra).encode()).hexdigest()[:10]}"
    return name


def needs_uv() -> None:
    """Refuse, saying what to do, where .tools/bin/uv is missing (./course rerun installs it before it starts)."""
    if not UV.exists():
        raise UsageError(f"{UV.relative_to(ROOT)} is missing: run ./course rerun (the course script installs uv "
                         "first), or ./course test once")


def requirements(torch: str, vision: str, extra: list[str]) -> str:
    """The lock's course requirements with the torch set (and any --with package) replaced."""
    needs_uv()
    exported = run_checked([str(UV), "export", "--frozen", "--no-hashes", "--no-emit-project", "--no-header"],
                           "uv could not export the lock")
    return replace_torch_set(exported, torch, vision, extra)


def replace_torch_set(exported: str, torch: str, vision: str, extra: list[str]) -> str:
    """Drop the exact pins of the torch set and of every --with package; add the build under test."""
    replaced = {normal(REQ_NAME.match(r).group(1)) for r in extra}
    kept = []
    for line in exported.splitlines():
        if TORCH_SET.match(line):
            continue
        name = REQ_NAME.match(line)
        if name and not line.lstrip().startswith("#") and normal(name.group(1)) in replaced:
            continue
        kept.append(line)
    wanted = [f"torch=={torch}"] + ([] if vision == "none" else [f"torchvision=={vision}"]) + list(extra)
    return "\n".join(kept + ["# the build under test (./course rerun)"] + wanted) + "\n"


def run_checked(cmd: list[str], what: str, **kw) -> str:
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-25:])
        raise UsageError(f"{what} (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def build_env(folder: Path, reqs: str, extra: list[str]) -> Path:
    """Create or reuse folder/venv for these requirements; return its Python."""
    venv = folder / "venv"
    python = venv / "bin" / "python"
    stamp = venv / ".rerun-stamp"
    digest = hashlib.sha256((reqs + (ROOT / "pyproject.toml").read_text()).encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        say(f"reusing {venv.relative_to(ROOT)}")
        return python
    needs_uv()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "requirements.txt").write_text(reqs, encoding="utf-8")
    (folder / "overrides.txt").write_text("\n".join(extra) + "\n", encoding="utf-8")
    if venv.exists():
        shutil.rmtree(venv)
    interpreter = os.environ.get("UV_PYTHON") or shutil.which("python3") or sys.executable
    say(f"building {venv.relative_to(ROOT)} (a torch build is about 2.6 GB of downloads the first time) ...")
    run_checked([str(UV), "venv", "--quiet", "--python", interpreter, str(venv)], "uv could not create the venv")
    install = [str(UV), "pip", "install", "--quiet", "--compile-bytecode", "--python", str(python),
               "-r", str(folder / "requirements.txt"), "-e", str(ROOT)]
    if extra:
        install += ["--overrides", str(folder / "overrides.txt")]
    run_checked(install, "uv could not install this torch with the course's other packages "
                         "(is that torch / torchvision pair published for this Python?)")
    run_checked([str(python), "-m", "ipykernel", "install", "--sys-prefix", "--name", kernelspec.NAME,
                 "--display-name", kernelspec.DISPLAY_NAME], "could not register the hooklab kernel")
    # matplotlib's first-run font-cache notice would otherwise land in a cell
    subprocess.run([str(python), "-c", "import matplotlib.pyplot"], cwd=ROOT, capture_output=True,
                   env=dict(os.environ, MPLBACKEND="Agg"))
    stamp.write_text(digest + "\n")
    return python


def describe(python: Path) -> dict:
    code = ("import json, platform, importlib.metadata as m, torch\n"
            "def v(n):\n"
            "    try: return m.version(n)\n"
            "    except m.PackageNotFoundError: return None\n"
            "cap = getattr(torch.backends.cpu, 'get_cpu_capability', lambda: '?')()\n"
            "print(json.dumps({'torch': torch.__version__, 'torchvision': v('torchvision'), 'numpy': v('numpy'),"
            " 'python': platform.python_version(), 'cpu_capability': cap, 'machine': platform.machine()}))")
    out = run_checked([str(python), "-c", code], f"{python} cannot import torch", env=rerun_env())
    return json.loads(out.strip().splitlines()[-1])


def rerun_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(FIXED_ENV)
    return env


def unit_tests(python: Path, folder: Path, *, library_only: bool = False) -> report.UnitResult:
    junit = folder / "unit-tests.xml"
    log = folder / "unit-tests.log"
    say(f"unit tests in {python.parent.parent.relative_to(ROOT)} (log: {log.relative_to(ROOT)}) ...")
    start = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.run([str(python), "-m", "pytest", "tests", "-p", "no:cacheprovider", "-n0", "-q",
                               "-rs", f"--junitxml={junit}", *(["-m", "library and not pin"] if library_only else [])],
                              cwd=ROOT, env=rerun_env(), stdout=fh, stderr=subprocess.STDOUT)
    result = report.read_junit(junit, returncode=proc.returncode) if junit.exists() else \
        report.UnitResult(returncode=proc.returncode, error=f"pytest wrote no results, see {log}")
    result.seconds = time.perf_counter() - start
    result.summary_line = last_summary_line(log)
    say(f"unit tests: {result.summary_line or result.error}")
    return result


def last_summary_line(log: Path) -> str:
    lines = [line.strip("= ").strip() for line in log.read_text(errors="replace").splitlines()
             if re.search(r"\b(passed|failed|error|skipped|no tests ran)\b", line) and " in " in line]
    return lines[-1] if lines else ""


def notebook_key(path: Path) -> str:
    """What the baseline outputs of a notebook depend on: the notebook, the lock, hooklab's code."""
    h = hashlib.sha256()
    for part in [path, ROOT / "uv.lock", *sorted((ROOT / "hooklab").rglob("*.py"))]:
        h.update(part.read_bytes())
    return h.hexdigest()


def execute(python: Path, notebooks: list[Path], out: Path, timeout: int) -> None:
    """Run the notebooks in that Python's kernel; one line per notebook here, the kernels' chatter in a log."""
    if not notebooks:
        return
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "kernels.log", "w") as log:
        subprocess.run([str(python), "-m", "tools.rerun.execute", "--out", str(out),
                        "--timeout", str(timeout), *map(str, notebooks)],
                       cwd=ROOT, env=rerun_env(), check=False, stderr=log)


def baseline(notebooks: list[Path], timeout: int, fresh: bool) -> Path | None:
    if not BASELINE_PYTHON.exists():
        say("no locked .venv: the report cannot separate machine drift (run ./course test once)")
        return None
    out = BUILD / "baseline"
    out.mkdir(parents=True, exist_ok=True)
    stale = [p for p in notebooks if fresh or not (out / p.name).exists() or not (out / (p.stem + ".key")).exists()
             or (out / (p.stem + ".key")).read_text().strip() != notebook_key(p)]
    if stale:
        say(f"baseline: running {len(stale)} notebook(s) in the locked .venv ...")
        execute(BASELINE_PYTHON, stale, out, timeout)
        for p in stale:
            if (out / p.name).exists():
                (out / (p.stem + ".key")).write_text(notebook_key(p) + "\n")
    else:
        say("baseline: reusing build/rerun/baseline (same notebooks, lock and hooklab code)")
    return out


def atlas_zoos(args: argparse.Namespace) -> list[str]:
    """The zoos whose atlas this run measures: those asked for with --atlas, and those whose package --with
    replaces (``--with transformers==X`` shows what release X changed)."""
    replaced = {normal(REQ_NAME.match(r).group(1)) for r in args.extra}
    return sorted(set(args.atlas) | {z for z in ATLAS_ZOOS if z in replaced})


def atlas_diff(python: Path, folder: Path, zoos: list[str]) -> str:
    """The hook atlas of ``zoos`` measured with the side environment's ``python`` (tools/atlas/generate.py, into
    ``folder``/atlas/), and a Markdown section: what changed against the committed hooklab/course/assets/atlas/<zoo>.json (models
    added, removed, and per model the block container, what a block's hook receives, the never-firing modules and
    their causes, generate and checkpointing)."""
    from ..atlas import pages as atlas_pages

    out = folder / "atlas"
    lines = ["", "## Hook atlas", ""]
    for zoo in zoos:
        say(f"atlas: measuring {zoo} with {python} (log: {(out / (zoo + '.log')).relative_to(ROOT)}) ...")
        out.mkdir(parents=True, exist_ok=True)
        with open(out / f"{zoo}.log", "w") as log:
            subprocess.run([str(python), "-m", "tools.atlas", "run", "--zoo", zoo, "--out", str(out)], cwd=ROOT,
                           env=rerun_env(), stdout=log, stderr=subprocess.STDOUT)
            subprocess.run([str(python), "-m", "tools.atlas", "write", "--zoo", zoo, "--src", str(out),
                            "--dest", str(out)], cwd=ROOT, env=rerun_env(), stdout=log, stderr=subprocess.STDOUT)
        old, new = atlas_pages.load(zoo, ROOT / "hooklab" / "course" / "assets" / "atlas"), atlas_pages.load(zoo, out)
        if old is None or new is None:
            lines.append(f"- {zoo}: no atlas to compare ({'hooklab/course/assets/atlas' if old is None else out}/{zoo}.json missing; "
                         f"see {(out / (zoo + '.log')).relative_to(ROOT)})")
            continue
        lines += [atlas_pages.diff_text(old, new), ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
        name = env_name(args.torch, args.vision, args.extra)
        folder = BUILD / name
        if args.report_only:
            if not (folder / "unit-tests.xml").exists():
                raise UsageError(f"--report-only: no earlier run in {folder.relative_to(ROOT)}")
            python = folder / "venv" / "bin" / "python"
            versions = describe(python)
            units = report.read_junit(folder / "unit-tests.xml", returncode=0)
            units.summary_line = last_summary_line(folder / "unit-tests.log")
            units.returncode = 1 if units.failed else 0
        else:
            python = build_env(folder, requirements(args.torch, args.vision, args.extra), args.extra)
            versions = describe(python)
            if not versions["torch"].startswith(args.torch):
                raise UsageError(f"asked for torch {args.torch}, the environment has {versions['torch']}")
            units = unit_tests(python, folder, library_only=args.library_only)
        # the hook behaviour matrix's cells under this PyTorch (tools/rerun/matrix_cells.py)
        hooks = None if args.library_only else (matrix_cells.read(folder) if args.report_only else
                                                matrix_cells.check(python, folder, rerun_env()))
        # the course's notebooks, then the recipes (every recipe re-runs here; ./course test runs a sample)
        all_notebooks = (sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
                         + sorted((ROOT / "recipes").glob("[0-9][0-9]_*.ipynb")))
        if args.notebooks:
            chosen = [ROOT / n if not Path(n).is_absolute() else Path(n) for n in args.notebooks]
            missing = [str(p) for p in chosen if not p.is_file()]
            if missing:
                raise UsageError(f"no such notebook: {', '.join(missing)}")
            all_notebooks = [p.resolve() for p in chosen]
    except UsageError as exc:
        print(f"[rerun] error: {exc}", file=sys.stderr)
        return 2
    results: list[compare.NotebookResult] = []
    if not args.unit_only and not args.library_only:
        needs_vision = {p: compare.needs_torchvision(compare.read_nb(p)) for p in all_notebooks}
        runnable = [p for p in all_notebooks if not (args.vision == "none" and needs_vision[p])]
        fresh_dir = folder / "executed"
        if args.report_only:
            base_dir = BUILD / "baseline" if (BUILD / "baseline").exists() else None
        else:
            if fresh_dir.exists():
                shutil.rmtree(fresh_dir)
            say(f"notebooks: running {len(runnable)} in {name} ...")
            execute(python, runnable, fresh_dir, args.timeout)
            base_dir = baseline(runnable, args.timeout, args.fresh_baseline)
        results = compare.compare_all(
            all_notebooks, fresh_dir, base_dir, ROOT / "tests" / "sanitize.cfg",
            fresh_label=f"fresh (torch {versions['torch']})",
            skipped={p.name: "needs torchvision, and this run has none (--vision none)"
                     for p in all_notebooks if p not in runnable})
    meta = {"name": name, "requested": {"torch": args.torch, "vision": args.vision, "with": args.extra},
            "versions": versions, "unit_only": args.unit_only or args.library_only,
            "library_only": args.library_only, "fixed_env": FIXED_ENV,
            "host": f"{platform.machine()}, {os.cpu_count()} CPU cores"}
    text = report.render_report(meta, units, results) + matrix_cells.section(hooks)
    zoos = atlas_zoos(args)
    if zoos and not args.report_only:
        text += atlas_diff(python, folder, zoos)
    written = folder / "report.md"
    written.write_text(text, encoding="utf-8")
    code = max(report.exit_code(units, results), matrix_cells.exit_code(hooks))
    write_results(folder / "results.json", meta, units, results, code, hooks)
    say(f"report: {written.relative_to(ROOT)}")
    say(report.one_line(units, results))
    say(matrix_cells.one_line(hooks))
    return code


def write_results(path: Path, meta: dict, units: report.UnitResult, results: list, code: int,
                  hooks: matrix_cells.HookMatrixResult | None = None) -> None:
    """What report.md says, as data: the run, its versions, the unit tests' result and failures, every changed
    cell and figure that is not machine drift, and the hook matrix's changed cells (``python -m tools.rerun.ahead
    summary`` reads these)."""
    data = {
        "name": meta["name"], "requested": meta["requested"], "versions": meta["versions"], "exit": code,
        "unit_tests": units.summary_line or units.error or "", "failed_tests": [t for t, _ in units.failed],
        "cells": [{"notebook": c.notebook, "cell": c.cell_num, "kind": c.kind, "heading": c.heading, "why": c.why}
                  for r in results for c in r.torch_changes],
        "figures": [{"notebook": f.notebook, "cell": f.cell_num, "note": f.note}
                    for r in results for f in r.figures if not f.machine_drift],
        "aborted": [f"{r.notebook}: {r.aborted}" for r in results if r.aborted],
        "hook_matrix": ({"error": hooks.error, "changed": [c["key"] for c in hooks.changed]} if hooks is not None
                        else None),
    }
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
