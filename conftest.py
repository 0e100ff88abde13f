"""Repository-wide pytest setup.

1. ``--cpu-kernels``: validate every notebook under the machine's own CPU kernels (``native``), under the
   portable scalar kernels (``scalar``: ATen without vector code, oneDNN limited to SSE4.1, MKL to SSE4.2), or
   under both (``./course test`` uses ``both``). Float sums differ in their last bits between kernel paths, so an
   output that depends on them fails here on every machine, not only on a newcomer's CPU.
2. ``./course test`` runs on two pytest-xdist workers with ``--dist loadfile``: a notebook's cells share one
   kernel and stay together on one worker (the scalar copy is a file of its own).
3. Each notebook's run time is reported against the course budget at the end of the run.
"""
from __future__ import annotations

import os
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
