"""Repository-wide pytest setup.

1. ``--cpu-kernels``: validate every notebook under the machine's own CPU kernels (``native``), under the
   portable scalar kernels (``scalar``: ATen without vector code, oneDNN limited to SSE4.1, MKL to SSE4.2), or
   under both (``./course test`` uses ``both``). Float sums differ in their last bits between kernel paths, so an
   output that depends on them fails here on every machine, not only on a newcomer's CPU. On a CPU not made by
   Intel, oneMKL ignores ``MKL_ENABLE_INSTRUCTIONS``: the scalar kernel preloads ``tools/notebooks/cpu_shims.py``'s
   ``mkl_any_cpu`` so that it takes MKL's SSE4.2 path there too. Opt-in: ``shifted`` (the machine's own kernels,
   oneMKL's Intel code paths on any CPU, and every tensor c10 allocates 8 to 56 bytes past a 64-byte boundary:
   another place in memory than any normal run gives it) and ``all`` (the three).
2. ``./course test`` runs on two pytest-xdist workers with ``--dist loadfile``: a notebook's cells share one
   kernel and stay together on one worker (each other configuration's copy is a file of its own).
3. Each notebook's run time is reported against the course budget at the end of the run.
4. Which checks run: the gate (``tools/gate/``, ``./course test``) chooses them and says why (the fast tests, every
   course notebook, what the change touched, one part of a rotation over the rest; ``--all``: everything). A pytest
   run without it runs what it collects, but of a population (each recipe run alone) only the members drawn with the
   commit (``tools.gate.plan.sample_without_plan``).
5. Time limits are hang guards, never verdicts, and stretch with the machine's load (``tests/patience.py``):
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
SHIFTED_SUFFIX = "[shifted-memory]"
# --cpu-kernels -> the configurations it validates the notebooks in ("native" is nbval's own copy)
CONFIGURATIONS = {"native": ("native",), "scalar": ("scalar",), "both": ("native", "scalar"),
                  "shifted": ("shifted",), "all": ("native", "scalar", "shifted")}
SUFFIXES = {"scalar": SCALAR_SUFFIX, "shifted": SHIFTED_SUFFIX}
_notebook_time: dict[str, float] = defaultdict(float)


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-kernels", choices=tuple(CONFIGURATIONS), default="native",
        help="validate notebooks under the machine's own CPU kernels, the scalar ones "
             f"({' '.join(f'{k}={v}' for k, v in SCALAR_CPU_KERNELS.items())}), or both; opt-in: shifted (own "
             "kernels, MKL's Intel paths, tensors 8-56 bytes past a 64-byte boundary) or all three")


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


def scalar_environment() -> tuple[dict[str, str], str]:
    """The scalar kernel's variables, and a note on oneMKL: on a CPU not made by Intel they preload
    ``mkl_any_cpu`` (built here once), without which MKL_ENABLE_INSTRUCTIONS has no effect there."""
    from tools.notebooks import cpu_shims

    vendor = cpu_shims.cpu_vendor()
    if vendor in ("GenuineIntel", ""):
        return dict(SCALAR_CPU_KERNELS), ""
    library = cpu_shims.build("mkl_any_cpu")
    if library is None:
        return dict(SCALAR_CPU_KERNELS), (f"oneMKL ignores MKL_ENABLE_INSTRUCTIONS on this {vendor} CPU and "
                                          f"tools/notebooks/cpu_shims.py's mkl_any_cpu {cpu_shims.why_not('mkl_any_cpu')}: "
                                          "the scalar kernel multiplied matrices with MKL's own path for this CPU")
    return cpu_shims.preload(SCALAR_CPU_KERNELS, library), f"oneMKL on this {vendor} CPU: told it is an Intel CPU"


def shifted_environment() -> tuple[dict[str, str], str]:
    """The variables of ``--cpu-kernels=shifted``: both libraries of tools/notebooks/cpu_shims.py preloaded (where they
    cannot be built, ``pytest_configure`` has refused the option, saying why)."""
    from tools.notebooks import cpu_shims

    libraries = [cpu_shims.build(name) for name in ("mkl_any_cpu", "shifted_memory")]  # pytest_configure checked
    return cpu_shims.preload({cpu_shims.SHIFT_VARIABLE: "1"}, *libraries), "shifted memory, oneMKL's Intel paths"


class NotebookCopies:
    """A plugin that collects every notebook once more, as ``<path>[suffix]``, validated by a kernel started with
    the configuration's variables (worked out at the first notebook)."""

    def __init__(self, name: str):
        self.name, self.suffix = name, SUFFIXES[name]
        self._variables: dict[str, str] | None = None
        self.note = ""

    def variables(self) -> dict[str, str]:
        if self._variables is None:
            self._variables, self.note = (scalar_environment if self.name == "scalar" else shifted_environment)()
        return self._variables

    def pytest_collect_file(self, file_path, parent):
        config = parent.config
        if file_path.suffix != ".ipynb" or not getattr(config.option, "nbval", False):
            return None
        nodeid = Path(os.path.relpath(file_path, config.rootpath)).as_posix() + self.suffix
        return _notebook_class(self).from_parent(parent, path=file_path, nodeid=nodeid)


def _notebook_class(copies: NotebookCopies):
    from nbval.plugin import IPyNbFile

    class NotebookCopy(IPyNbFile):
        """The same notebook, validated by a kernel started in another CPU configuration."""

        def setup(self):
            with environment(copies.variables()):
                super().setup()

    return NotebookCopy


def pytest_collection_modifyitems(config, items):
    if "native" not in CONFIGURATIONS[config.option.cpu_kernels]:  # only the other copies of the notebooks
        suffixes = tuple(SUFFIXES.values())
        keep = [i for i in items if not _is_notebook(i) or i.nodeid.split("::")[0].endswith(suffixes)]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
    if not config.getoption("gate_plan", None):
        from tools.gate.plan import sample_without_plan
        sample_without_plan(config, items)


def _is_notebook(item) -> bool:
    return ".ipynb" in item.nodeid.split("::")[0]


def pytest_runtest_logreport(report):
    if report.when == "teardown":
        for name, value in report.user_properties:
            if name == "put back":
                _PUT_BACK[report.nodeid] = value
    path = report.nodeid.split("::")[0]
    if ".ipynb" in path:
        _notebook_time[path] += report.duration


def pytest_terminal_summary(terminalreporter):
    _put_back_summary(terminalreporter)
    if not _notebook_time:
        return
    write = terminalreporter.write_line
    terminalreporter.section(
        f"notebook run times (budget: {NOTEBOOK_BUDGET_S:.0f} s each, {COURSE_BUDGET_S:.0f} s in all "
        "per CPU-kernel configuration, 2 CPU cores)")
    for suffix, label in (("", "machine's own CPU kernels"), (SCALAR_SUFFIX, "scalar CPU kernels"),
                          (SHIFTED_SUFFIX, "shifted memory")):
        times = {p: s for p, s in _notebook_time.items() if p.endswith(".ipynb" + suffix)}
        if not times:
            continue
        for path, seconds in sorted(times.items()):
            flag = "  OVER BUDGET" if seconds > NOTEBOOK_BUDGET_S else ""
            write(f"{seconds:7.1f} s  {path}{flag}")
        total = sum(times.values())
        flag = "  OVER BUDGET" if total > COURSE_BUDGET_S else ""
        write(f"{total:7.1f} s  all notebooks, {label}{flag}")
    for copies in terminalreporter.config.stash.get(_COPIES, []):
        copies.variables()  # the note: worked out again here under xdist (the workers ran the kernels)
        if copies.note:
            write(f"{copies.suffix} {copies.note}")


# What a distributed launcher sets (torchrun; accelerate's PartialState writes them into os.environ when it finds a
# CPU process group), and the course's language (a launch copy's install cell sets it). A kernel inherits the test
# process's environment: left there by one test, they made the next notebook's transformers Trainer wrap its model in
# DDP, or print the exercises' verdicts in English only. A notebook runs as in a learner's Jupyter, without them.
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                      "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
KERNEL_UNSET = (*LAUNCHER_VARIABLES, "HOOKLAB_LANG")
_PUT_BACK: dict[str, str] = {}  # test -> what it left and was put back (tests/leftovers.py)


@pytest.fixture(autouse=True)
def _process_put_back(request):
    """Whatever a test or a docstring example changes process-wide (tests/leftovers.py: global hooks, autograd and
    torch settings, os.environ, the working directory) is put back after it, so the next test starts from the same
    process whatever ran before it; what was put back is listed at the end of the run."""
    from leftovers import Snapshot

    before = Snapshot()
    yield
    left = before.hooks_added() + before.changed("autograd") + before.changed("other") + before.environ_changed()
    if left:
        before.put_back()
        request.node.user_properties.append(("put back", "; ".join(left)))  # reaches the controller with the report


@pytest.fixture(autouse=True, scope="module")
def _file_put_back(request):
    """What a test file leaves that outlives its tests by design (tests/leftovers.py: modules still carrying hooks,
    child processes, threads that are not daemons): a file that leaves one fails at its end, naming what, and it is
    removed."""
    if _is_notebook_path(str(request.node.nodeid)):
        yield
        return
    from leftovers import FileSnapshot

    before = FileSnapshot()
    yield
    left = before.left()
    if left:
        pytest.fail(f"{request.node.nodeid} left behind, after its last test (each removed now):\n  "
                    + "\n  ".join(left), pytrace=False)


def _is_notebook_path(path: str) -> bool:
    return ".ipynb" in path.split("::")[0]


def _put_back_summary(terminalreporter) -> None:
    if not _PUT_BACK:
        return
    terminalreporter.section("what tests changed in the process, put back after them (tests/leftovers.py)")
    for nodeid, text in sorted(_PUT_BACK.items())[:60]:
        terminalreporter.write_line(f"{nodeid}: {text[:300]}")
    if len(_PUT_BACK) > 60:
        terminalreporter.write_line(f"... and {len(_PUT_BACK) - 60} more")


# ----------------------------------------------------------------------------------------- hang guards (5.)
NBVAL_OUTPUT_TIMEOUT = 5.0  # nbval's own wait for a cell's output messages after its reply (IPyNbCell.output_timeout)
_NBVAL_BASE = pytest.StashKey[dict]()
_COPIES = pytest.StashKey[list]()


def pytest_configure(config):
    # nbval's limits as given (pyproject.toml's addopts): what an idle machine needs; scaled at each use below
    config.stash[_NBVAL_BASE] = {name: getattr(config.option, name, None)
                                 for name in ("nbval_cell_timeout", "nbval_kernel_startup_timeout")}
    # 1. one more copy of every notebook per configuration other than the machine's own
    copies = [NotebookCopies(name) for name in CONFIGURATIONS[config.option.cpu_kernels] if name != "native"]
    if any(c.name == "shifted" for c in copies):
        from tools.notebooks import cpu_shims
        why = cpu_shims.why_not("shifted_memory")
        if why:  # at once, not at the first notebook
            raise pytest.UsageError(f"--cpu-kernels={config.option.cpu_kernels}: the shifted configuration {why}; "
                                    "use --cpu-kernels=both here")
    for plugin in copies:
        config.pluginmanager.register(plugin, f"hooklab-notebooks-{plugin.name}")
    config.stash[_COPIES] = copies


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """nbval reads its limits when a notebook's kernel starts (the first cell's set-up) and when each cell runs:
    set them, scaled for the load now, just before."""
    base = item.config.stash.get(_NBVAL_BASE, {})
    if not _is_notebook(item) or not base:
        return
    for name in KERNEL_UNSET:  # the kernel starts at the notebook's first cell: as the committed outputs were made
        os.environ.pop(name, None)
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
