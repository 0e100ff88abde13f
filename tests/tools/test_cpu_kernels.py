"""`--cpu-kernels=scalar` (part of `./course test`) really starts the notebook kernels with the scalar CPU kernels."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("repository_conftest", ROOT / "conftest.py")
repository_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(repository_conftest)
SCALAR_CPU_KERNELS = repository_conftest.SCALAR_CPU_KERNELS

# older torch (2.3, hooklab's floor) names the scalar capability "NO AVX", newer releases "DEFAULT": the same path
# (`./course matrix --torch 2.3.0 ...` runs this test too).
PROBE = ("import os, torch\n"
         "cap = torch.backends.cpu.get_cpu_capability()\n"
         "print('DEFAULT' if cap == 'NO AVX' else cap, "
         "*(os.environ.get(k) for k in ('ONEDNN_MAX_CPU_ISA', 'MKL_ENABLE_INSTRUCTIONS')))")


def probe_notebook(path: Path, expected: str) -> Path:
    cell = nbformat.v4.new_code_cell(PROBE, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=expected + "\n")]
    nb = nbformat.v4.new_notebook(cells=[cell])
    nbformat.write(nb, path)
    return path


def validate(notebook: Path, kernels: str) -> subprocess.CompletedProcess:
    # the repository's conftest.py is loaded as a plugin so that the notebook in tmp_path gets --cpu-kernels;
    # run from the notebook's folder so that nothing else on the machine (another *.ipynb in /tmp) is collected
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n0", "-p", "no:cacheprovider", "-p", "conftest",
         f"--cpu-kernels={kernels}", "--rootdir", str(notebook.parent), "-c", "/dev/null",
         "--nbval", "--nbval-current-env", str(notebook)],
        cwd=notebook.parent, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True, text=True, timeout=240)


def test_scalar_configuration_reaches_the_kernel(tmp_path):
    expected = "DEFAULT {ONEDNN_MAX_CPU_ISA} {MKL_ENABLE_INSTRUCTIONS}".format(**SCALAR_CPU_KERNELS)
    notebook = probe_notebook(tmp_path / "probe.ipynb", expected)
    result = validate(notebook, "scalar")
    assert result.returncode == 0, f"the scalar kernel printed something else:\n{result.stdout[-3000:]}"
    assert "1 passed" in result.stdout and "deselected" in result.stdout  # the native copy was left out


def test_both_runs_each_notebook_twice_and_a_wrong_output_fails(tmp_path):
    notebook = probe_notebook(tmp_path / "probe.ipynb", "not what any kernel prints")
    result = validate(notebook, "both")
    assert result.returncode == 1
    assert "2 failed" in result.stdout, result.stdout[-3000:]
    assert "probe.ipynb[scalar-cpu]::Cell 0" in result.stdout
