"""`--cpu-kernels=scalar` (part of `./course test`) really starts the notebook kernels with the scalar CPU kernels, and
the opt-in `--cpu-kernels=shifted` with tools/notebooks/cpu_shims.py's libraries preloaded."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("repository_conftest", ROOT / "conftest.py")
repository_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(repository_conftest)
SCALAR_CPU_KERNELS = repository_conftest.SCALAR_CPU_KERNELS
VALIDATE_TIMEOUT = 240  # s for one pytest run of the probe notebook (a kernel importing torch, on a busy machine)
# the first test waits for both runs (the fixture's and its own)
pytestmark = pytest.mark.timeout(2 * VALIDATE_TIMEOUT + 30)

# older torch (2.3, hooklab's floor) names the scalar capability "NO AVX", newer releases "DEFAULT": the same path
# (`./course rerun --torch 2.3.0 ...` runs this test too).
PROBE = ("import os, torch\n"
         "cap = torch.backends.cpu.get_cpu_capability()\n"
         "print('DEFAULT' if cap == 'NO AVX' else cap, "
         "*(os.environ.get(k) for k in ('ONEDNN_MAX_CPU_ISA', 'MKL_ENABLE_INSTRUCTIONS')))")


def probe_notebook(path: Path, expected: str, code: str = PROBE) -> Path:
    """Cell 0 prints the kernel's CPU capability and variables (``code``), stored as ``expected``; cell 1 prints a
    line other than its stored output, which every kernel must fail."""
    probe = nbformat.v4.new_code_cell(code, execution_count=1)
    probe.outputs = [nbformat.v4.new_output("stream", name="stdout", text=expected + "\n")]
    wrong = nbformat.v4.new_code_cell("print('what the kernel prints')", execution_count=2)
    wrong.outputs = [nbformat.v4.new_output("stream", name="stdout", text="not what any kernel prints\n")]
    nbformat.write(nbformat.v4.new_notebook(cells=[probe, wrong]), path)
    return path


def validate(notebook: Path, kernels: str, *options: str) -> subprocess.CompletedProcess:
    # the repository's conftest.py is loaded as a plugin so that the notebook in tmp_path gets --cpu-kernels;
    # run from the notebook's folder so that nothing else on the machine (another *.ipynb in /tmp) is collected
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", "-p", "conftest",
         f"--cpu-kernels={kernels}", "--rootdir", str(notebook.parent), "-c", "/dev/null",
         "--nbval", "--nbval-current-env", *options, str(notebook)],
        cwd=notebook.parent, env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")])),
        capture_output=True, text=True, timeout=VALIDATE_TIMEOUT)


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> Path:
    expected = "DEFAULT {ONEDNN_MAX_CPU_ISA} {MKL_ENABLE_INSTRUCTIONS}".format(**SCALAR_CPU_KERNELS)
    return probe_notebook(tmp_path_factory.mktemp("cpu-kernels") / "probe.ipynb", expected)


@pytest.fixture(scope="module")
def both(probe) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """One validation under ``--cpu-kernels=both`` (two kernels, each importing torch): the run and each cell's
    outcome, ``{node id: PASSED | FAILED}``."""
    result = validate(probe, "both", "-rA")
    summary = re.finditer(r"^(PASSED|FAILED) (\S+::Cell \d+)", result.stdout, re.MULTILINE)
    return result, {match[2]: match[1] for match in summary}


def test_scalar_configuration_reaches_the_kernel(probe, both):
    result, outcomes = both
    assert outcomes.get("probe.ipynb[scalar-cpu]::Cell 0") == "PASSED", \
        f"the scalar kernel printed something else:\n{result.stdout[-3000:]}"
    # --cpu-kernels=scalar keeps only the scalar copy (the same items as above, without the native copy)
    scalar = validate(probe, "scalar", "--collect-only")
    assert scalar.returncode == 0, scalar.stdout[-3000:]
    collected = [line for line in scalar.stdout.splitlines() if "::" in line]
    assert collected == ["probe.ipynb[scalar-cpu]::Cell 0", "probe.ipynb[scalar-cpu]::Cell 1"], scalar.stdout
    assert "2 deselected" in scalar.stdout  # the native copy was left out


def test_both_runs_each_notebook_twice_and_a_wrong_output_fails(both):
    result, outcomes = both
    assert result.returncode == 1
    assert outcomes.get("probe.ipynb::Cell 1") == "FAILED", result.stdout[-3000:]
    assert outcomes.get("probe.ipynb[scalar-cpu]::Cell 1") == "FAILED", result.stdout[-3000:]
    assert len(outcomes) == 4, result.stdout[-3000:]  # two copies of two cells, each run


# where c10 put 70 small tensors (offsets from a 64-byte boundary), and what oneMKL is told about the CPU's maker
SHIFTED_PROBE = ("import ctypes, os, torch\n"
                 "offsets = sorted({torch.empty(16).data_ptr() % 64 for _ in range(70)})\n"
                 "told_intel = ctypes.CDLL(None).mkl_serv_intel_cpu_true()\n"
                 "print(os.environ.get('HOOKLAB_SHIFT_ALLOCATIONS'), offsets, told_intel)")


def test_shifted_configuration_reaches_the_kernel(tmp_path):
    from tools.notebooks import cpu_shims

    why = cpu_shims.why_not("shifted_memory")
    if why:
        result = validate(probe_notebook(tmp_path / "probe.ipynb", "", SHIFTED_PROBE), "shifted")
        assert result.returncode != 0 and why in result.stdout + result.stderr  # refused, saying why
        return
    probe = probe_notebook(tmp_path / "probe.ipynb", "1 [8, 16, 24, 32, 40, 48, 56] 1", SHIFTED_PROBE)
    result = validate(probe, "shifted", "-rA")
    outcomes = dict((m[2], m[1]) for m in re.finditer(r"^(PASSED|FAILED) (\S+::Cell \d+)", result.stdout, re.MULTILINE))
    # only the shifted copy runs; its kernel printed the stored line, and still fails a wrong output
    assert outcomes == {"probe.ipynb[shifted-memory]::Cell 0": "PASSED",
                        "probe.ipynb[shifted-memory]::Cell 1": "FAILED"}, result.stdout[-3000:]


def test_a_notebooks_kernel_starts_without_a_launchers_variables(tmp_path):
    """A launcher's variables in the test process (left by a library that found a process group: accelerate's
    PartialState writes RANK, WORLD_SIZE, LOCAL_RANK...) do not reach a notebook's kernel: in a CI run they made
    recipes/07's Trainer wrap its model in DDP, and the cell printed another output."""
    code = ("import os\nprint(*(os.environ.get(k) for k in ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_PORT', "
            "'HOOKLAB_LANG')))")
    probe = probe_notebook(tmp_path / "probe.ipynb", "None None None None None", code)
    # and the course's language, which a launch copy's install cell run in-process left set (every later notebook's
    # exercise verdicts came in English only)
    launcher = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "29500", "HOOKLAB_LANG": "en"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", "-p", "conftest", "-rA",
         "--cpu-kernels=native", "--rootdir", str(tmp_path), "-c", "/dev/null", "--nbval", "--nbval-current-env",
         str(probe)],
        cwd=tmp_path, env=dict(os.environ, **launcher, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")])),
        capture_output=True, text=True, timeout=VALIDATE_TIMEOUT)
    assert "PASSED probe.ipynb::Cell 0" in result.stdout, result.stdout[-3000:]
