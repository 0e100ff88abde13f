"""Run the launch copies as Colab would: each notebook's launch copy top to bottom in a fresh environment that has
only pip, Jupyter and a preinstalled torch, with hooklab installed by the copy's own first cell.

    python -m tools.launch.check [NN ...] [--lang en|zh] [--out build/launch-check] [--offline] [--keep]
                                 [--torch VERSION[+BUILD] [--torch-wheels FOLDER]]
                                 [--repository-url URL [--commit SHA] | --wheel WHL]

For each notebook (default: every notebook and recipe notebook; ``rNN`` names the recipe notebook ``recipes/NN_x.ipynb``, ``recipes`` all of them):

1. the launch copy is made as tools/launch/copies.py makes it for the site and the launch branch. ``--repository-url
   URL --commit SHA`` (the weekly workflow): exactly that copy, its cell installing ``hooklab @ git+URL@SHA``, the
   real install source; otherwise hooklab's wheel is built once from the checkout (``uv build``, from a copy of the
   package's files, or ``--wheel``) and the cell installs ``hooklab @ file:///…whl``;
2. a fresh virtual environment gets pip, Jupyter's kernel machinery (ipykernel, nbclient) and torch at the lock's
   version, from uv's cache (pyproject.toml's ``launch-check`` group), as Colab ships torch preinstalled;
   ``--torch VERSION``: that torch instead (``uv pip install torch==VERSION``; the weekly workflow runs both ends of
   the range the install cell keeps, :func:`tools.launch.copies.torch_range`); ``--torch 2.13.0+cpu``: a build of
   PyTorch's own index (``https://download.pytorch.org/whl/cpu``), as a learner's Jupyter with a CPU torch has
   (``--torch-wheels FOLDER``: from a folder of wheels instead, where that index cannot be reached; the copy's cell
   still asks the index for the torchvision built for it). Nothing else is there: not torchvision, not hooklab, not
   the notebook's libraries;
3. the copy runs there with nbclient, cell after cell, going on after a cell that fails: its install cell runs pip
   against PyPI only (this machine's pip configuration is set aside, as on Colab); ``--offline``: pip may use no
   index, and the environment gets hooklab's course extra from uv's cache beforehand, so only copies whose cell
   needs nothing more run (how ``./course test`` runs notebook 01's copy without the network). Where the install
   cell raises (the torchvision for the runtime's torch cannot be installed) the run stops there, as "run all"
   does in Jupyter;
4. one line per notebook: the packages its cell names, how long the install took, what pip downloaded for it
   (files and MB, from pip's log, cached files counted), how much the environment grew, how many code cells ran
   without an error, the kernel's peak memory (its ``VmHWM``; above Binder's 2 GB it is flagged) and whether the cell replaced
   the preinstalled torch (a failure where that torch is inside the range); ``OUT/report.md`` and
   ``OUT/results.json`` keep it all, ``OUT/NN_x.ipynb`` each executed copy.

Both languages' copies hold the same code cells (checked here), so one language is run (``--lang``, default en).
Exit status: 0 every cell of every copy ran (and no torch in the range was replaced), 1 otherwise, 2 usage or
build error. The weekly workflow
(.github/workflows/rerun.yml) runs it for every notebook and recipe notebook, with PyPI's torch at both ends of the
range and with the oldest as PyTorch's CPU build.

Why not nox (tried: nox 2026.10.20, ``venv_backend="uv"``). A session ``@nox.parametrize("torch", ...)`` that runs
``uv sync`` of the ``launch-check`` group into its virtualenv, ``uv pip install torch==X``, ``ipykernel install`` and
check_runner.py builds this environment and ran notebook 01's copy (28 of 28 code cells), so nox can make it. But a
nox session has one virtualenv, and each copy needs one of its own (a copy's install cell must not find what another
copy installed: run after notebook 01's in the same environment, a copy's cell said "hooklab 0.1.0 is installed
already"), so every (torch, notebook) would be a session, 2 × 18. What the check is for stays here whoever makes the
environments: the install source chosen once (the wheel built once, or the repository at a commit), one report of
every copy that is written also when copies fail, the verdict on a replaced torch. nox would take over
:func:`fresh_env`, four commands of uv and venv, and add a second command line (options through ``--``), a session
per copy for the workflow to select, and a dependency of ``./course test``, which runs notebook 01's copy offline.
The environment work is uv's already (``uv build``, ``uv sync --frozen`` from the lock). Why nbmake does not run the
copies: check_runner.py.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..notebooks import imports as notebook_imports
from . import copies as launch

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".tools" / "bin" / "uv"
RUNNER = Path(__file__).resolve().parent / "check_runner.py"
INSTALL_CELL_S = 1800  # pip downloading a course's worth of packages on a slow connection
CELL_S = 300  # any other cell: as ./course rerun
STEP_S = 1800  # one uv step (an environment from the cache, the wheel)
BINDER_MEMORY_MB = 2048  # mybinder.org: a session's memory limit (1 GB guaranteed, up to 2 GB)
PACKAGE_FILES = ("pyproject.toml", "uv.lock", launch.PACKAGE_PAGE, "LICENSE", "LICENSE-prose.md")


class CheckError(Exception):
    """A usage or build error: exit status 2, with the message."""


@dataclass
class CopyResult:
    notebook: str
    installs: list[str]
    code_cells: int = 0
    passed: int = 0
    failed: list[str] = field(default_factory=list)  # "Cell N: ErrorName: message"
    install_seconds: float | None = None
    install_output: str = ""
    stopped: str | None = None  # the install cell raised: the run stopped there (its message)
    packages_added: int | None = None
    downloads: int | None = None  # files pip downloaded (or took from its cache) for the copy, and their MB
    downloaded_mb: float | None = None
    growth_mb: float | None = None  # how much the environment's folder grew
    seconds: float = 0.0
    aborted: str | None = None
    peak_rss_mb: float | None = None  # the kernel's high-water mark (VmHWM)
    torch_before: str | None = None  # the torch installed before the copy ran, and after
    torch_after: str | None = None
    torch_range: tuple[str, str] | None = None  # what the copy's cell keeps (default: launch.torch_range())
    differs: list[str] = field(default_factory=list)  # "Cell N": its output is not the copy's (differing_cells)

    @property
    def torch_replaced(self) -> bool:
        """The copy's cell replaced a torch that it should have kept (one inside its range)."""
        if not (self.torch_before and self.torch_after) or self.torch_before == self.torch_after:
            return False
        low, high = self.torch_range or launch.torch_range()
        release = launch._release
        return release(low) <= release(self.torch_before) <= release(high)

    @property
    def verified_torch(self) -> bool:
        """It ran on the torch release the copy's outputs were recorded with: they must then be the same."""
        return bool(self.torch_after) and launch._release(str(self.torch_after)) == launch._release(locked_torch())

    @property
    def ok(self) -> bool:
        return (not self.failed and self.aborted is None and self.stopped is None and self.passed == self.code_cells
                and not self.torch_replaced and not (self.differs and self.verified_torch))


def say(message: str) -> None:
    print(f"[launch-check] {message}", file=sys.stderr, flush=True)


def run(command: list[str], what: str, *, cwd: Path = ROOT, env: dict[str, str] | None = None,
        timeout: int = STEP_S) -> str:
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CheckError(f"{what} did not finish within {timeout} s: {' '.join(command)}") from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-20:])
        raise CheckError(f"{what} failed (exit {done.returncode}): {' '.join(command)}\n{tail}")
    return done.stdout


def uv_env(offline: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH")}
    return {**env, "UV_OFFLINE": "1"} if offline else env


def copy_package_files(source: Path) -> None:
    """What building the package and syncing an environment from the lock read, copied to ``source``."""
    for name in PACKAGE_FILES:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "hooklab", source / "hooklab", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def build_wheel(work: Path, *, offline: bool) -> Path:
    """hooklab's wheel, built by uv from a copy of the package's files (the build writes nothing into the checkout)."""
    source = work / "source"
    copy_package_files(source)
    run([str(UV), "build", "--wheel", "--out-dir", str(work / "dist"), str(source)], "uv build",
        cwd=source, env=uv_env(offline))
    wheel, = (work / "dist").glob("hooklab-*.whl")
    return wheel


def launch_copies(names: list[Path], lang: str, hooklab: str) -> dict[str, dict]:
    """The launch copies, as tools/launch/copies.py writes them, with ``hooklab`` as the cell's requirement; refuses when
    the other language's copy holds other code (then one language would not stand for both)."""
    from hooklab.course.export import export_notebook
    from hooklab.course.notebook import read_notebook

    copies = {}
    for path in names:
        nb = read_notebook(path)
        made = {code: launch.launch_copy(export_notebook(nb, code), code, hooklab, launch.pins())
                for code in launch.LANGS}
        sources = {code: [c["source"] for c in copy["cells"] if c["cell_type"] == "code"][1:]
                   for code, copy in made.items()}
        if sources["zh"] != sources["en"]:
            raise CheckError(f"{copy_name(path)}: the zh and en launch copies hold different code; run both languages")
        copies[copy_name(path)] = made[lang]
    return copies


def cell_requirements(copy: dict) -> list[str]:
    """HOOKLAB and PINS of a launch copy's install cell: what it installs."""
    cell = next(c for c in copy["cells"] if launch.INSTALL_TAG in c.get("metadata", {}).get("tags", []))
    values = {}
    for name in ("HOOKLAB", "PINS"):
        found = re.search(rf"^{name} = (.*)$", cell["source"], re.MULTILINE)
        if not found:
            raise CheckError(f"the install cell assigns no {name}")
        values[name] = json.loads(found.group(1).replace("None", "null"))
    return [values["HOOKLAB"], *values["PINS"]] if values["HOOKLAB"] else list(values["PINS"])


def cell_torch_range(copy: dict) -> tuple[str, str]:
    """LOW, HIGH of a launch copy's install cell: the torch releases it keeps."""
    cell = next(c for c in copy["cells"] if launch.INSTALL_TAG in c.get("metadata", {}).get("tags", []))
    found = re.search(r'^LOW, HIGH = "([\d.]+)", "([\d.]+)"', cell["source"], re.MULTILINE)
    if not found:
        raise CheckError("the install cell assigns no LOW, HIGH")
    return found.group(1), found.group(2)


def fresh_env(venv: Path, source: Path, *, offline: bool, torch: str | None = None,
              torch_wheels: Path | None = None) -> Path:
    """A new virtual environment with pip (``python -m venv``: the pip that Python bundles) and, linked from uv's
    cache at the lock's versions, pyproject.toml's ``launch-check`` group: torch, ipykernel, nbclient. ``offline``:
    also what the install cell would fetch, hooklab's ``course`` extra (the cell's pip then finds it installed).
    ``torch``: this torch in place of the lock's (the runtime's torch of a Colab-like run): ``2.13.0`` from PyPI,
    ``2.13.0+cpu`` from PyTorch's index for that build (or from the folder ``torch_wheels``). Its python."""
    env = {**uv_env(offline), "UV_PROJECT_ENVIRONMENT": str(venv)}
    run([sys.executable, "-m", "venv", str(venv)], "python -m venv", env=env)
    python = venv / "bin" / "python"
    selection = ["--no-default-groups", "--group", "launch-check", "--extra", "course"] if offline else \
        ["--only-group", "launch-check"]
    run([str(UV), "sync", "--quiet", "--frozen", "--inexact", "--no-install-project", *selection,
         "--python", str(python)], "uv sync (the fresh environment)", cwd=source, env=env)
    if torch and torch != locked_torch():
        build = torch.partition("+")[2]
        where = (["--find-links", str(torch_wheels)] if torch_wheels else
                 ["--extra-index-url", launch.PYTORCH_INDEX + build] if build else [])
        run([str(UV), "pip", "install", "--quiet", "--python", str(python), *where, f"torch=={torch}"],
            f"uv pip install torch=={torch} (the runtime's torch)", cwd=source, env=env)
    run([str(python), "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3",
         "--display-name", "Python 3 (ipykernel)"], "ipykernel install", env=env)
    return python


def locked_torch() -> str:
    return launch.pins()[0].split("==")[1]


def beyond_the_extra(copy: dict) -> list[str]:
    """The pins of a launch copy's cell that hooklab's course extra and torch do not cover (``--offline`` has only
    those in uv's cache for the environment)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    covered = {notebook_imports.normal(re.split(r"[<>=!~ \[;]", r, maxsplit=1)[0])
               for r in project["optional-dependencies"]["course"]} | {"torch", *launch.WITH_TORCH}  # numpy: matplotlib's
    return [p for p in cell_requirements(copy)[1:] if notebook_imports.normal(p.split("==")[0]) not in covered]


def colab_env(*, offline: bool) -> dict[str, str]:
    """The notebook's environment: pip sees PyPI only (no pip.conf, no find-links, as on Colab; ``offline``: no
    index at all), one thread, no GPU, nothing downloaded from a model hub."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "VIRTUAL_ENV", "PYTHONPATH", "UV_", "JUPYTER_PATH", "CONDA"))}
    env.update({"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "JUPYTER_PREFER_ENV_PATH": "1",
                "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1",
                "PYDEVD_DISABLE_FILE_VALIDATION": "1", "MPLBACKEND": "module://matplotlib_inline.backend_inline"})
    if "PIP_CERT" in os.environ:
        env["PIP_CERT"] = os.environ["PIP_CERT"]
    if offline:
        env["PIP_NO_INDEX"] = "1"
    return env


def folder_mb(folder: Path) -> float:
    """The size of the files under ``folder`` (links not followed), in MB (10^6 bytes)."""
    return sum(p.lstat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


DOWNLOADED = re.compile(r"(?:Downloading|Using cached) (\S+) \(([\d.]+) (bytes|kB|MB|GB)\)")


def downloads(pip_log: Path) -> tuple[int, float]:
    """Files pip fetched according to its log (``PIP_LOG``), those it took from its cache included (a runtime
    without pip's cache downloads them), and their MB.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     log = Path(folder) / "pip.log"
    ...     _ = log.write_text("  Downloading torchvision-0.28.0-cp311.whl (7.5 MB)\\n"
    ...                        "  Using cached pillow-12.0.0-cp311.whl (850 kB)\\n", encoding="utf-8")
    ...     downloads(log)
    (2, 8.35)
    """
    if not pip_log.is_file():
        return 0, 0.0
    scale = {"bytes": 1e-6, "kB": 1e-3, "MB": 1.0, "GB": 1e3}
    found = {name: float(size) * scale[unit]
             for name, size, unit in DOWNLOADED.findall(pip_log.read_text(encoding="utf-8", errors="replace"))}
    return len(found), round(sum(found.values()), 2)


def check_copy(name: str, copy: dict, work: Path, *, offline: bool, keep: bool,
               out: Path, torch: str | None = None, torch_wheels: Path | None = None) -> CopyResult:
    result = CopyResult(name, installs=cell_requirements(copy), torch_range=cell_torch_range(copy))
    folder = work / Path(name.replace("/", "-")).stem
    folder.mkdir(parents=True)
    start = time.perf_counter()
    try:
        python = fresh_env(folder / "venv", work / "source", offline=offline, torch=torch, torch_wheels=torch_wheels)
        (folder / "run").mkdir()
        source = folder / Path(name).name
        size_before = folder_mb(folder / "venv")
        source.write_text(json.dumps(copy, ensure_ascii=False), encoding="utf-8")
        report = folder / "result.json"
        limit = INSTALL_CELL_S + CELL_S * len(copy["cells"]) + 120
        done = None
        try:
            done = subprocess.run([str(python), "-P", str(RUNNER), str(source), str(out / name), str(report),
                            "--install-timeout", str(INSTALL_CELL_S), "--timeout", str(CELL_S)],
                           cwd=folder / "run", env={**colab_env(offline=offline), "PIP_LOG": str(folder / "pip.log")},
                           capture_output=True, text=True,
                           timeout=limit)
        except subprocess.TimeoutExpired:
            result.aborted = f"the run did not finish within {limit} s"
        result.downloads, result.downloaded_mb = downloads(folder / "pip.log")
        result.growth_mb = round(folder_mb(folder / "venv") - size_before, 1)
        if report.exists():
            ran = json.loads(report.read_text(encoding="utf-8"))
            for key in ("code_cells", "passed", "failed", "install_seconds", "install_output", "stopped",
                        "packages_added", "aborted", "peak_rss_mb", "torch_before", "torch_after"):
                setattr(result, key, ran.get(key) if key != "aborted" or ran[key] else result.aborted)
            executed = out / name
            if executed.is_file() and result.stopped is None:
                result.differs = differing_cells(copy, json.loads(executed.read_text(encoding="utf-8")))
        elif result.aborted is None:
            tail = " ".join((done.stderr if done else "").strip().splitlines()[-3:])
            result.aborted = f"the runner wrote no result: {tail}"
    except CheckError as exc:
        result.aborted = str(exc)
    finally:
        result.seconds = time.perf_counter() - start
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    return result


SANITIZE = ROOT / "tests" / "sanitize.cfg"  # the rules nbval compares the course's outputs with
SKIP_TAGS = {"nbval-ignore-output", "nbval-skip"}  # the cells whose output nbval does not compare either


def sanitize_rules(path: Path = SANITIZE) -> list[tuple[re.Pattern[str], str]]:
    """nbval's sanitizer file as (regex, replacement) pairs, in order."""
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path, encoding="utf-8")
    return [(re.compile(parser[s]["regex"]), parser[s]["replace"]) for s in parser.sections()]


def _shown(cell: dict, rules: list[tuple[re.Pattern[str], str]]) -> list[str]:
    """What a code cell shows, as nbval compares it: its streams and text results, its error's name and message,
    each sanitized (images and HTML are not compared)."""
    shown: list[str] = []
    stream = None
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "stream":  # one text per run of a stream: a kernel sends a print in as many pieces as it likes
            piece = "".join(output.get("text", ""))
            if stream == output.get("name") and shown:
                shown[-1] += piece
                continue
            stream = output.get("name")
            shown.append(f"{stream}: {piece}")
            continue
        stream = None
        if kind in ("execute_result", "display_data"):
            text = "".join(output.get("data", {}).get("text/plain", ""))
        elif kind == "error":
            text = f"{output.get('ename')}: {output.get('evalue')}"
        else:
            continue
        shown.append(text)
    cleaned = []
    for text in shown:
        for regex, replace in rules:
            text = regex.sub(replace, text)
        cleaned.append(text.rstrip())
    return [t for t in cleaned if t]


def differing_cells(copy: dict, ran: dict, rules: list[tuple[re.Pattern[str], str]] | None = None) -> list[str]:
    """The code cells of a launch copy whose output, run, is not what the copy shows (``Cell N``, numbered as the
    runner numbers them: the install cell is 0, and is not compared): the check that a copy that runs without an error also
    teaches what it says (notebook 03 without numpy printed "Numpy is not available" and raised nothing)."""
    rules = sanitize_rules() if rules is None else rules
    committed = [c for c in copy["cells"] if c["cell_type"] == "code"]
    executed = [c for c in ran["cells"] if c["cell_type"] == "code"]
    if len(committed) != len(executed):
        return [f"the run holds {len(executed)} code cells, the copy {len(committed)}"]
    found = []
    for number, (before, after) in enumerate(zip(committed, executed, strict=True)):
        tags = set(before.get("metadata", {}).get("tags", []))
        if launch.INSTALL_TAG in tags or tags & SKIP_TAGS or not before.get("outputs"):
            continue
        if _shown(before, rules) != _shown(after, rules):
            found.append(f"Cell {number}")
    return found


def one_line(r: CopyResult) -> str:
    install = f"install {r.install_seconds:.1f} s" if r.install_seconds is not None else "install –"
    added = f" (+{r.packages_added} packages)" if r.packages_added is not None else ""
    cells = f"{r.passed}/{r.code_cells} code cells ran"
    memory = f", kernel peak {r.peak_rss_mb:.0f} MiB" if r.peak_rss_mb is not None else ""
    if r.peak_rss_mb is not None and r.peak_rss_mb > BINDER_MEMORY_MB:
        memory += f" (over Binder's {BINDER_MEMORY_MB} MiB)"
    cells += memory
    note = f"; stopped: {r.aborted}" if r.aborted else ""
    if r.stopped:
        note += f"; its install cell stopped the run: {r.stopped[:400]}"
    if r.downloads is not None:
        added += f", pip downloaded {r.downloads} files ({r.downloaded_mb:.0f} MB)"
    if r.growth_mb is not None:
        added += f", the environment grew {r.growth_mb:.0f} MB"
    if r.torch_replaced:
        note += f"; the cell replaced torch {r.torch_before} (inside the range) with {r.torch_after}"
    failed = f"; failed: {'; '.join(r.failed[:3])}" + (" …" if len(r.failed) > 3 else "") if r.failed else ""
    if r.differs:
        failed += (f"; output not the copy's in {', '.join(r.differs[:6])}" + (" …" if len(r.differs) > 6 else "")
                   + ("" if r.verified_torch else f" (torch {r.torch_after}: allowed)"))
    return f"{r.notebook}: {install}{added}, {cells} in {r.seconds:.0f} s{failed}{note}"


def render_report(results: list[CopyResult], meta: dict) -> str:
    lines = ["# Launch copies, run as Colab would", "",
             f"- {meta['lang']} copies; hooklab from {meta['hooklab']}; Python {meta['python']}",
             "- each in a fresh virtual environment (`python -m venv`) with pip, ipykernel, nbclient and torch "
             f"{meta.get('torch') or locked_torch()} (preinstalled, as Colab ships torch; the outputs were verified "
             f"with {locked_torch()}, the cell keeps {' to '.join(launch.torch_range())}); the install cell's pip " + ("used no index (`--offline`: its packages preinstalled from uv's cache)"
                              if meta["offline"] else "downloaded from PyPI only (with pip's own cache), and for a torch of PyTorch's own index "
                              "the torchvision built for it from that index"),
             f"- {sum(r.ok for r in results)} of {len(results)} copies ran every code cell (and, on the torch their outputs "
             "were recorded with, showed them: each cell's streams, text results and errors compared as nbval compares "
             "them, with tests/sanitize.cfg)",
             f"- kernel peak: the kernel's resident-set high-water mark (VmHWM); Binder's limit is {BINDER_MEMORY_MB} MiB",
             "- downloads: the files pip fetched for the copy by its log (those taken from pip's cache counted) and their "
             "size; growth: how much the environment's folder grew",
             "", "| notebook | the install cell names | install | packages added | downloads | growth | code cells run "
             "| total | kernel peak | torch before → after | failed |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        installs = ", ".join(f"`{p.split(' @ ')[0]}`" for p in r.installs)
        install = f"{r.install_seconds:.1f} s" if r.install_seconds is not None else "–"
        failed = "; ".join(r.failed) or (r.aborted or "")
        if r.stopped:
            failed = f"stopped by its install cell: {r.stopped}"
        fetched = f"{r.downloads} files, {r.downloaded_mb:.0f} MB" if r.downloads is not None else "–"
        growth = f"{r.growth_mb:.0f} MB" if r.growth_mb is not None else "–"
        added = r.packages_added if r.packages_added is not None else "–"
        peak = f"{r.peak_rss_mb:.0f} MiB" if r.peak_rss_mb is not None else "–"
        if r.peak_rss_mb is not None and r.peak_rss_mb > BINDER_MEMORY_MB:
            peak += " (over Binder's limit)"
        torch = f"{r.torch_before} → {r.torch_after}" if r.torch_before else "–"
        if r.torch_replaced:
            failed = "; ".join(x for x in (failed, "replaced a torch inside the range") if x)
        if r.differs:
            said = f"output not the copy's: {', '.join(r.differs)}" + ("" if r.verified_torch else " (another torch)")
            failed = "; ".join(x for x in (failed, said) if x)
        lines.append(f"| {r.notebook} | {installs} | {install} | {added} | {fetched} | {growth} | "
                     f"{r.passed}/{r.code_cells} | {r.seconds:.0f} s | {peak} | {torch} | "
                     f"{' '.join(failed.replace('|', '/').split())} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.launch.check", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", metavar="NN",
                        help="notebook numbers or names; rNN a recipe notebook, 'recipes' all of them (default: all)")
    parser.add_argument("--lang", choices=launch.LANGS, default="en", help="which language's copies (default en)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "launch-check", help="where the report goes")
    parser.add_argument("--offline", action="store_true",
                        help="pip may use no index: what the cell installs comes from uv's cache beforehand")
    parser.add_argument("--keep", action="store_true", help="keep the environments (under OUT)")
    parser.add_argument("--wheel", type=Path, metavar="WHL",
                        help="install this hooklab wheel (default: build one from the checkout with uv)")
    parser.add_argument("--repository-url", metavar="URL",
                        help="the cell installs hooklab from this repository, as the published copies do (git+URL)")
    parser.add_argument("--commit", metavar="SHA", help="with --repository-url: the commit (default: the checkout's)")
    parser.add_argument("--torch", metavar="VERSION",
                        help="the torch preinstalled in each environment, as a runtime ships one (default: the lock's); "
                             "2.13.0: PyPI's; 2.13.0+cpu: the CPU build of PyTorch's index")
    parser.add_argument("--torch-wheels", type=Path, metavar="FOLDER",
                        help="with --torch X+BUILD: take that torch from this folder of wheels, not PyTorch's index")
    return parser.parse_args(argv)


def chosen(names: list[str]) -> list[Path]:
    """The notebooks named (``01``, ``01_tensor_hooks``), recipe notebooks (``r01``, ``recipes/01_tensor_and_node_hooks``;
    ``recipes``: every one); no names: every notebook and every recipe notebook."""
    every = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    recipes = sorted((ROOT / "recipes").glob("[0-9][0-9]_*.ipynb"))
    if not names:
        return every + recipes
    picked = []
    for name in names:
        if name == "recipes":
            picked += recipes
            continue
        recipe = re.fullmatch(r"(?:r|recipes/)(.+)", name)
        pool, key = (recipes, recipe.group(1)) if recipe else (every, name)
        found = [p for p in pool if p.name.startswith(key) or p.stem == Path(key).stem]
        if len(found) != 1:
            raise CheckError(f"{name!r} names {'no' if not found else 'more than one'} notebook "
                             f"(e.g. 01 or 01_tensor_hooks; r01 or recipes/01_tensor_and_node_hooks for a recipe)")
        picked += found
    return picked


def copy_name(path: Path) -> str:
    """How a copy is named in the report: ``01_tensor_hooks.ipynb``, ``recipes/01_tensor_and_node_hooks.ipynb``."""
    return f"recipes/{path.name}" if path.parent.name == "recipes" else path.name


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        paths = chosen(args.notebooks)
        if args.repository_url and (args.wheel or args.offline):
            raise CheckError("--repository-url installs hooklab from the repository: not with --wheel or --offline")
        if args.commit and not args.repository_url:
            raise CheckError("--commit goes with --repository-url")
        if args.torch and not re.fullmatch(r"\d+\.\d+\.\d+(\+[a-z0-9.]+)?", args.torch):
            raise CheckError(f"--torch should be a release such as 2.13.0 or a build such as 2.13.0+cpu, "
                             f"got {args.torch!r}")
        if args.torch_wheels and not (args.torch and "+" in args.torch and args.torch_wheels.is_dir()):
            raise CheckError("--torch-wheels FOLDER goes with --torch X+BUILD (a folder of wheels holding that torch)")
        if not UV.exists():
            raise CheckError(f"{UV} is missing: ./course installs it (./course test, for instance)")
        args.out = args.out.resolve()  # the runner runs in a folder of its own
        args.out.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="launch-check-", dir=args.out if args.keep else None))
        try:
            wheel = None
            if args.repository_url:
                hooklab = launch.requirement(args.repository_url.rstrip("/"), args.commit or launch.current_commit())
                copy_package_files(work / "source")
            elif args.wheel:
                if not re.fullmatch(r"hooklab-[^-]+-py3-none-any\.whl", args.wheel.name) or not args.wheel.is_file():
                    raise CheckError(f"--wheel {args.wheel}: not a hooklab wheel (uv build --wheel writes one)")
                wheel = args.wheel.resolve()
                copy_package_files(work / "source")
            else:
                say("building hooklab's wheel ...")
                wheel = build_wheel(work, offline=args.offline)
            if wheel is not None:
                hooklab = f"hooklab @ {wheel.as_uri()}"
            copies = launch_copies(paths, args.lang, hooklab)
            beyond = {name: missing for name, copy in copies.items()
                      if args.offline and (missing := beyond_the_extra(copy))}
            if beyond:
                raise CheckError("--offline runs the copies whose cell needs no more than hooklab's course extra; "
                                 + "; ".join(f"{n} also installs {', '.join(m)}" for n, m in beyond.items()))
            results = []
            for name, copy in copies.items():
                say(f"{name}: installs {', '.join(cell_requirements(copy)[1:])} (and hooklab) ...")
                result = check_copy(name, copy, work, offline=args.offline, keep=args.keep,
                                    out=args.out, torch=args.torch, torch_wheels=args.torch_wheels)
                say(one_line(result))
                results.append(result)
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    except (CheckError, launch.LaunchError) as exc:
        print(f"[launch-check] error: {exc}", file=sys.stderr)
        return 2
    source = (f"{wheel.name} ({'given' if args.wheel else 'built from this checkout'})" if wheel is not None
              else f"`{hooklab.split(' @ ', 1)[1]}` (the install source of the published copies)")
    meta = {"lang": args.lang, "hooklab": source, "offline": args.offline, "torch": args.torch or locked_torch(),
            "python": ".".join(map(str, sys.version_info[:3]))}
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "results": [asdict(r) for r in results]},
                                                      indent=1), encoding="utf-8")
    (args.out / "report.md").write_text(render_report(results, meta), encoding="utf-8")
    for result in results:
        print(one_line(result))
    print(f"{sum(r.ok for r in results)} of {len(results)} launch copies ran every code cell, showing what they show "
          f"(report: {args.out / 'report.md'})")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
