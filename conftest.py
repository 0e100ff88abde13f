"""Repository-wide pytest setup.

1. ``--cpu-kernels``: validate every notebook under the machine's own CPU kernels (``native``), under the
   portable scalar kernels (``scalar``: ATen without vector code, oneDNN limited to SSE4.1, MKL to SSE4.2), or
   under both (``./course test`` uses ``both``). Float sums differ in their last bits between kernel paths, so an
   output that depends on them fails here on every machine, not only on a newcomer's CPU.
2. ``./course test`` runs on two pytest-xdist workers with ``--dist loadfile``: a notebook's cells share one
   kernel and stay together on one worker (the scalar copy is a file of its own).
3. Each notebook's run time is reported against the course budget at the end of the run.
4. Time limits are hang guards, never verdicts, and stretch with the machine's load (``tests/patience.py``):
   pytest-timeout's limit of each test (``timeout`` in pyproject.toml, or a test's ``@pytest.mark.timeout``) and
   nbval's limits for a cell, its output and a kernel's start are what an idle machine needs, multiplied by the
   load factor (load average per core) while the test runs; a guard that fires says how long it waited, for what,
   and under what load.
"""
from __future__ import annotations

import os
import signal
import threading
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import pytest

NOTEBOOK_BUDGET_S = 60.0
COURSE_BUDGET_S = 300.0
# The second configuration: the slowest, most portable kernel path of every library torch uses on a CPU.
SCALAR_CPU_KERNELS = {
    "ATEN_CPU_CAPABILITY": "default",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
}
SCALAR_SUFFIX = "[scalar-cpu]"
_notebook_time: dict[str, float] = defaultdict(float)


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-kernels", choices=("native", "scalar", "both"), default="native",
        help="validate notebooks under the machine's own CPU kernels, the scalar ones "
             f"({' '.join(f'{k}={v}' for k, v in SCALAR_CPU_KERNELS.items())}), or both")


@contextmanager
def environment(variables: dict[str, str]):
    """Set environment variables for the block (a kernel started inside inherits them), then restore them."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _scalar_notebook_class():
    from nbval.plugin import IPyNbFile

    class ScalarCpuNotebook(IPyNbFile):
        """The same notebook, validated by a kernel started with the scalar CPU kernels."""

        def setup(self):
            with environment(SCALAR_CPU_KERNELS):
                super().setup()

    return ScalarCpuNotebook


def pytest_collect_file(file_path, parent):
    config = parent.config
    if (file_path.suffix != ".ipynb" or not getattr(config.option, "nbval", False)
            or config.option.cpu_kernels == "native"):
        return None
    nodeid = Path(os.path.relpath(file_path, config.rootpath)).as_posix() + SCALAR_SUFFIX
    return _scalar_notebook_class().from_parent(parent, path=file_path, nodeid=nodeid)


def pytest_collection_modifyitems(config, items):
    if config.option.cpu_kernels == "scalar":  # only the scalar copies of the notebooks
        keep = [i for i in items if not _is_notebook(i) or SCALAR_SUFFIX in i.nodeid]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep


def _is_notebook(item) -> bool:
    return ".ipynb" in item.nodeid.split("::")[0]


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if ".ipynb" in path:
        _notebook_time[path] += report.duration


def pytest_terminal_summary(terminalreporter):
    if not _notebook_time:
        return
    write = terminalreporter.write_line
    terminalreporter.section(
        f"notebook run times (budget: {NOTEBOOK_BUDGET_S:.0f} s each, {COURSE_BUDGET_S:.0f} s in all "
        "per CPU-kernel configuration, 2 CPU cores)")
    for suffix, label in (("", "machine's own CPU kernels"), (SCALAR_SUFFIX, "scalar CPU kernels")):
        times = {p: s for p, s in _notebook_time.items() if p.endswith(".ipynb" + suffix)}
        if not times:
            continue
        for path, seconds in sorted(times.items()):
            flag = "  OVER BUDGET" if seconds > NOTEBOOK_BUDGET_S else ""
            write(f"{seconds:7.1f} s  {path}{flag}")
        total = sum(times.values())
        flag = "  OVER BUDGET" if total > COURSE_BUDGET_S else ""
        write(f"{total:7.1f} s  all notebooks, {label}{flag}")


@pytest.fixture(autouse=True)
def _process_settings_restored():
    """Whatever a test or a docstring example changes process-wide (``course.setup()`` does: threads,
    print options), the next test starts from the same settings."""
    import torch
    threads, grad = torch.get_num_threads(), torch.is_grad_enabled()
    options = {k: getattr(torch._tensor_str.PRINT_OPTS, k) for k in ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")}
    yield
    torch.set_num_threads(threads)
    torch.set_grad_enabled(grad)
    torch.set_printoptions(**options)


# ----------------------------------------------------------------------------------------- hang guards (4.)
NBVAL_OUTPUT_TIMEOUT = 5.0  # nbval's own wait for a cell's output messages after its reply (IPyNbCell.output_timeout)
_NBVAL_BASE = pytest.StashKey[dict]()


def pytest_configure(config):
    # nbval's limits as given (pyproject.toml's addopts): what an idle machine needs; scaled at each use below
    config.stash[_NBVAL_BASE] = {name: getattr(config.option, name, None)
                                 for name in ("nbval_cell_timeout", "nbval_kernel_startup_timeout")}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """nbval reads its limits when a notebook's kernel starts (the first cell's set-up) and when each cell runs:
    set them, scaled for the load now, just before."""
    base = item.config.stash.get(_NBVAL_BASE, {})
    if not _is_notebook(item) or not base:
        return
    from patience import load_factor
    factor = load_factor()
    for name, seconds in base.items():
        if seconds:
            setattr(item.config.option, name, seconds * factor)
    if hasattr(item, "output_timeout"):
        item.output_timeout = NBVAL_OUTPUT_TIMEOUT * factor


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    """pytest-timeout's limit of a test as a hang guard that stretches with the load (signal method, main thread;
    anything else is left to pytest-timeout): when the alarm rings before the limit, scaled by the load factor
    now, has passed, it is set again for the rest; when it has passed, the stacks of the other threads are printed
    (pytest-timeout's own dump) and the test fails saying how long it waited and under what load."""
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None
    from patience import HangGuard

    guard = HangGuard(settings.timeout, f"the test {item.nodeid} to finish (its traceback shows where it waited)")

    def ring(signum, frame):
        left = guard.left()
        if left > 0:
            signal.setitimer(signal.ITIMER_REAL, left)
            return
        __tracebackhide__ = True
        import pytest_timeout
        terminal = item.config.get_terminal_writer()
        if len(threading.enumerate()) > 1:
            terminal.sep("+", title="hang guard: the other threads")
            pytest_timeout.dump_stacks(terminal)
        pytest.fail(guard.message())

    def cancel():
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel
    signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True
