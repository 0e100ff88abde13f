"""``./course test --trace``: what each check runs and reads, recorded into ``tests/gate/reads.json``.

A check depends on a repository file when, while the check ran, a line inside one of the file's functions ran
(coverage.py, the files of this repository only: a module's top level runs whenever anything imports it, and
``import hooklab`` imports all of hooklab, so its top level says nothing), or when the check opened the file, listed
a folder, or started a program of the repository (Python's audit events ``open``, ``os.listdir``, ``os.scandir``,
``subprocess.Popen``; the import system's own reads of source files are not counted).

It is recorded in the test process (this pytest plugin: one coverage and one set of reads per check, switched
when the next check starts) and in every Python process started under it: the notebooks' kernels, the recipes'
kernels, the tools run as commands (``sitecustomize.py`` in ``tools/gate/trace_site/``, put first on
``PYTHONPATH``, does the same there for the check named by ``HOOKLAB_GATE_CHECK``). nbval stops a kernel by
killing it, so a kernel is asked to write what it saw before it is stopped.

A traced run is slower and writes no record of passed checks. Only the repository's tracked files and the folders
that hold them are kept.

>>> sorted(body_lines_of_source("X = 1\\ndef f():\\n    a = 1\\n    return a\\nclass C:\\n    def g(self):\\n        pass\\n"))
[3, 4, 7]
"""
from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(__file__).resolve().parent / "trace_site"
OMIT = [str(ROOT / p) for p in (".venv/*", ".tools/*", "build/*", "work/*", "tools/gate/*")]
_IMPORT_FILES = ("<frozen importlib._bootstrap_external>", "<frozen importlib._bootstrap>")


def body_lines_of_source(source: str) -> set[int]:
    """The line numbers inside the bodies of a source's functions (and lambdas)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for statement in node.body:
                lines.update(range(statement.lineno, (statement.end_lineno or statement.lineno) + 1))
        elif isinstance(node, ast.Lambda):
            lines.update(range(node.body.lineno, (node.body.end_lineno or node.body.lineno) + 1))
    return lines


@functools.cache
def body_lines(path: str) -> frozenset[int]:
    try:
        return frozenset(body_lines_of_source(Path(path).read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return frozenset()


def _relative(path: Any) -> str | None:
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        return None
    try:
        rel = Path(os.path.abspath(os.fspath(path))).relative_to(ROOT)
    except ValueError:
        return None
    return rel.as_posix() if rel.parts else None


class Recorder:
    """One process's recording: a coverage of this repository's files and the paths it reads, per check."""

    def __init__(self, out: Path, label: str) -> None:
        import coverage

        self.out, self.label = out, label
        # include=, not source=: coverage then measures the repository's files that run, without walking the tree for
        # the ones that did not
        self.coverage = coverage.Coverage(data_file=None, include=[f"{ROOT}/*"], omit=OMIT, config_file=False)
        self.reads: set[str] = set()
        self.check = ""
        self.flushing = False
        sys.addaudithook(self._audit)
        self.coverage.start()

    def _audit(self, event: str, args: tuple) -> None:
        if self.flushing:
            return
        if event in ("open", "os.listdir", "os.scandir"):
            path = args[0] if args else "."
            if isinstance(path, int):
                return
            caller = sys._getframe(1).f_code.co_filename
            if caller in _IMPORT_FILES or "__editable__" in caller:
                return  # the import system reading a module's source or bytecode, or a folder to find one
        elif event == "subprocess.Popen":
            program = args[1][0] if args[1] and isinstance(args[1], (list, tuple)) else args[0]
            path = program
        else:
            return
        rel = _relative(path)
        if rel is not None and self.check:
            self.reads.add(rel)

    def switch(self, check: str) -> None:
        """Write what was seen for the check so far, and go on for ``check``."""
        if check != self.check:
            self.flush()
            self.check = check

    def flush(self) -> None:
        if not self.check:
            return
        self.coverage.stop()
        self.flushing = True
        try:
            data = self.coverage.get_data()
            ran = set()
            noise = import_lines()
            for file in data.measured_files():
                lines = set(data.lines(file) or []) - noise.get(file, set())
                if body_lines(file).intersection(lines):
                    rel = _relative(file)
                    if rel is not None:
                        ran.add(rel)
            self.coverage.erase()
        finally:
            self.flushing = False
            self.coverage.start()
        paths = sorted(ran | self.reads)
        self.reads = set()
        if paths:
            self.out.mkdir(parents=True, exist_ok=True)
            with open(self.out / f"{self.label}-{os.getpid()}.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps({"check": self.check, "paths": paths}) + "\n")


_recorder: list[Recorder] = []
_noise: list[dict[str, set[int]]] = []


def import_lines() -> dict[str, set[int]]:
    """The lines inside functions that run when hooklab's and the tools' modules are imported (a decorator's helper,
    a table built at import): they run in every process that imports them, so they are no sign of a dependency.
    Measured once per traced run, in a fresh interpreter (``python -m tools.gate.trace``), and read by every
    process from the run's folder."""
    if not _noise:
        path = Path(os.environ.get("HOOKLAB_GATE_TRACE", _out())) / "import-lines.json"
        found = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        _noise.append({f: set(lines) for f, lines in found.items()})
    return _noise[0]


def measure_import_lines(out: Path) -> None:
    """Import every module of hooklab/ and tools/ under coverage; write the function lines that ran."""
    import importlib
    import pkgutil

    import coverage

    cov = coverage.Coverage(data_file=None, include=[f"{ROOT}/*"], omit=OMIT, config_file=False)
    cov.start()
    for package in ("hooklab", "tools"):
        top = importlib.import_module(package)
        for info in pkgutil.walk_packages(top.__path__, f"{package}."):
            if info.name.endswith(("__main__", ".conf")) or ".gate" in info.name:
                continue
            try:
                importlib.import_module(info.name)
            except Exception:  # noqa: BLE001 - a module that cannot be imported here adds nothing to measure
                pass
    cov.stop()
    data = cov.get_data()
    found = {f: sorted(body_lines(f).intersection(data.lines(f) or [])) for f in data.measured_files()}
    out.write_text(json.dumps({f: lines for f, lines in found.items() if lines}), encoding="utf-8")


def start_in_child() -> None:
    """In a process started under a traced run (sitecustomize.py): record for the check that started it."""
    out, check = os.environ.get("HOOKLAB_GATE_TRACE"), os.environ.get("HOOKLAB_GATE_CHECK", "")
    if not out or not check or _recorder:
        return
    import atexit

    recorder = Recorder(Path(out), "child")
    recorder.check = check
    _recorder.append(recorder)
    atexit.register(recorder.flush)


def flush_child() -> None:
    """Write what this process saw so far (a kernel is asked this before nbval kills it)."""
    if _recorder:
        _recorder[0].flush()


# --------------------------------------------------------------------------------------------- the pytest plugin
def _out() -> Path:
    """Where the processes write what they saw (``HOOKLAB_GATE_TRACE_DIR``, for the gate's own tests)."""
    return Path(os.environ.get("HOOKLAB_GATE_TRACE_DIR", ROOT / "build" / "gate" / "trace"))


def _reads_file() -> Path:
    """The reads.json a traced run writes (``HOOKLAB_GATE_READS``, for the gate's own tests)."""
    from tools.gate import record

    return Path(os.environ.get("HOOKLAB_GATE_READS", record.READS))


def pytest_configure(config: Any) -> None:
    out = _out()
    if not hasattr(config, "workerinput"):  # the controller (or a run without workers): a fresh folder
        import shutil

        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
    os.environ["HOOKLAB_GATE_TRACE"] = str(out)
    if not hasattr(config, "workerinput"):
        subprocess.run([sys.executable, "-m", "tools.gate.trace", str(out / "import-lines.json")], cwd=ROOT,
                       check=True, timeout=600)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(SITE), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    if hasattr(config, "workerinput") or getattr(config.option, "numprocesses", None) in (None, 0):
        _recorder.append(Recorder(out, "pytest"))
        _stop_kernels_after_a_flush()


def pytest_runtest_setup(item: Any) -> None:
    from tools.gate.checks import check_of

    check = check_of(item.nodeid)
    os.environ["HOOKLAB_GATE_CHECK"] = check
    if _recorder:
        _recorder[0].switch(check)


def pytest_sessionfinish(session: Any) -> None:
    if _recorder:
        _recorder[0].flush()
    if not hasattr(session.config, "workerinput"):
        session.config._gate_traced = combine(_out(), _reads_file())  # read by the terminal summary below


def pytest_terminal_summary(terminalreporter: Any) -> None:
    written = getattr(terminalreporter.config, "_gate_traced", None)
    if written is not None:
        terminalreporter.write_line(f"{_reads_file()}: what {written} checks ran and read, recorded")


def _stop_kernels_after_a_flush() -> None:
    """nbval kills a notebook's kernel at the end: first ask it to write what it saw."""
    try:
        from nbval.kernel import RunningKernel
    except ImportError:
        return
    stop = RunningKernel.stop

    def flushed_stop(self: Any) -> None:
        try:
            msg_id = self.execute_cell_input("from tools.gate import trace as _t; _t.flush_child()", allow_stdin=False)
            self.await_idle(msg_id, 60)
        except Exception:  # noqa: BLE001 - a kernel that died already has nothing more to say
            pass
        stop(self)

    RunningKernel.stop = flushed_stop


def tracked(root: Path = ROOT) -> tuple[set[str], set[str]]:
    """(the files git tracks, the folders that hold them)."""
    done = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, timeout=60, check=True)
    files = {f for f in done.stdout.decode().split("\0") if f}
    folders = {p.rsplit("/", k)[0] for p in files for k in range(1, p.count("/") + 1)}
    return files, folders


def combine(out: Path, reads_file: Path, root: Path = ROOT) -> int:
    """Merge every process's recording into reads.json (the checks traced now replace their entries)."""
    from tools.gate import record

    files, folders = tracked(root)
    seen: dict[str, set[str]] = defaultdict(set)
    for part in sorted(out.glob("*.jsonl")):
        for line in part.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            seen[entry["check"]].update(p for p in entry["paths"] if p in files or p in folders)
    reads = record.traced_reads(reads_file)
    reads.update({check: sorted(paths) for check, paths in seen.items()})
    paths = sorted({p for found in reads.values() for p in found})
    index = {p: i for i, p in enumerate(paths)}
    record.save(reads_file, {
        "about": "for each check, the repository files whose functions it ran and the files and folders it read "
                 "(./course test --trace, tools/gate/trace.py)",
        "paths": paths, "checks": {c: [index[p] for p in found] for c, found in sorted(reads.items())}})
    return len(seen)


if __name__ == "__main__":
    measure_import_lines(Path(sys.argv[1]))
