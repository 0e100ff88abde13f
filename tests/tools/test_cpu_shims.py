"""tools/notebooks/cpu_shims.py's two preloaded libraries do what conftest.py's CPU configurations rely on.

- ``mkl_any_cpu``: oneMKL obeys ``MKL_ENABLE_INSTRUCTIONS`` on any x86-64 CPU (on one not made by Intel it ignores
  the variable without the library); MKL_VERBOSE's first line names the path it took.
- ``shifted_memory``: with ``HOOKLAB_SHIFT_ALLOCATIONS=1`` every tensor c10 allocates lies 8 to 56 bytes past a
  64-byte boundary (all seven offsets in turn), tensors are freed and computed with as usual; without the variable,
  or in a program that is not PyTorch, nothing changes.
- the scalar configuration preloads ``mkl_any_cpu`` exactly on a CPU not made by Intel.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from patience import wait_for
from tools.notebooks import cpu_shims

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 120  # s for one Python importing torch, a hang guard on a busy machine
pytestmark = [pytest.mark.timeout(4 * RUN_TIMEOUT),
              pytest.mark.skipif(cpu_shims.why_not("shifted_memory") is not None,
                                 reason=f"the CPU shims {cpu_shims.why_not('shifted_memory')}")]


def python(code: str, **variables: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_TIMEOUT,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **variables})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_mkl_takes_the_path_mkl_enable_instructions_names():
    library = cpu_shims.build("mkl_any_cpu")
    code = "import torch; torch.ones(8, 8) @ torch.ones(8, 8)"
    banner = python(code, LD_PRELOAD=str(library), MKL_VERBOSE="1", MKL_ENABLE_INSTRUCTIONS="SSE4_2").splitlines()[0]
    assert "SSE4.2" in banner, banner


SHIFTS = """
import gc, torch
before = [torch.empty(16).data_ptr() % 64 for _ in range(70)]
a = torch.randn(300, 200); b = torch.randn(200, 100)
product = a @ b
exact = (a.double() @ b.double()).float()
del a, b; gc.collect()
print(sorted(set(before)), torch.allclose(product, exact, atol=1e-4), product.data_ptr() % 64 != 0)
"""


def test_every_tensor_lies_off_the_64_byte_boundary_and_computes_as_usual():
    libraries = f"{cpu_shims.build('shifted_memory')}"
    shifted = python(SHIFTS, LD_PRELOAD=libraries, HOOKLAB_SHIFT_ALLOCATIONS="1").split("]")
    assert shifted[0] + "]" == "[8, 16, 24, 32, 40, 48, 56]" and shifted[1].split() == ["True", "True"]
    plain = python(SHIFTS, LD_PRELOAD=libraries).split("]")  # the variable unset: c10's 64-byte boundary
    assert plain[0] + "]" == "[0]" and plain[1].split() == ["True", "False"]


def test_a_program_that_is_not_pytorch_runs_as_usual():
    done = subprocess.run([sys.executable, "-c", "import json; print(json.dumps(list(range(3))))"],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT,
                          env={**os.environ, "LD_PRELOAD": str(cpu_shims.build("shifted_memory")),
                               "HOOKLAB_SHIFT_ALLOCATIONS": "1"})
    assert (done.returncode, done.stdout, done.stderr) == (0, "[0, 1, 2]\n", "")


def test_the_scalar_configuration_preloads_mkl_any_cpu_on_a_cpu_not_made_by_intel(monkeypatch):
    spec = importlib.util.spec_from_file_location("repository_conftest", ROOT / "conftest.py")
    repository_conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(repository_conftest)
    for vendor, preloaded in (("GenuineIntel", False), ("AuthenticAMD", True)):
        monkeypatch.setattr(cpu_shims, "cpu_vendor", lambda vendor=vendor: vendor)
        variables, note = repository_conftest.scalar_environment()
        assert {k: variables[k] for k in repository_conftest.SCALAR_CPU_KERNELS} == \
            repository_conftest.SCALAR_CPU_KERNELS
        assert ("libmkl_any_cpu" in variables.get("LD_PRELOAD", "")) == preloaded, (vendor, variables)
        assert ("told it is an Intel CPU" in note) == preloaded


def test_an_unknown_shim_is_refused():
    with pytest.raises(ValueError, match="mkl_any_cpu"):
        cpu_shims.why_not("faster_cpu")


# a compiler that compiles, then (builder 1 only) says so and waits until the test lets it finish
SLOW_CC = """#!/bin/sh
cc "$@" || exit $?
touch "$HOOKLAB_TEST_COMPILED"
i=0
while [ ! -e "$HOOKLAB_TEST_GO" ]; do
    i=$((i + 1)); [ $i -gt 2400 ] && exit 3   # 120 s at most
    sleep 0.05
done
"""
BUILD_IN = "import sys; from pathlib import Path; from tools.notebooks import cpu_shims; cpu_shims.BUILD = Path(sys.argv[1]); " \
           "print(cpu_shims.build('mkl_any_cpu'))"


def test_two_builds_at_once_leave_each_other_s_partial_library_alone(tmp_path, monkeypatch):
    """CS10: a builder's clean-up of libraries built from an earlier source text (lib<name>-*.so) deleted the
    partial library another builder was about to move into place, which then failed with FileNotFoundError.
    Builder 1 (a process) has compiled its partial file and waits; builder 2 (this process) builds and cleans up;
    then builder 1 finishes."""
    build = tmp_path / "cpu-shims"
    compiler = tmp_path / "slow-cc"
    compiler.write_text(SLOW_CC, encoding="utf-8")
    compiler.chmod(0o755)
    compiled, go = tmp_path / "compiled", tmp_path / "go"
    first = subprocess.Popen([sys.executable, "-c", BUILD_IN, str(build)], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "CC": str(compiler), "HOOKLAB_TEST_COMPILED": str(compiled),
                                  "HOOKLAB_TEST_GO": str(go)})
    try:
        wait_for("builder 1 to have compiled its partial library", compiled.exists, RUN_TIMEOUT)
        older = build / "libmkl_any_cpu-000000000000.so"  # built from an earlier source text: to be cleaned up
        older.write_bytes(b"")
        monkeypatch.setattr(cpu_shims, "BUILD", build)
        monkeypatch.delenv("CC", raising=False)
        target = cpu_shims.build("mkl_any_cpu")
        assert target is not None and target.is_file() and not older.exists()
        go.touch()
        out, err = first.communicate(timeout=RUN_TIMEOUT)
        assert first.returncode == 0, err[-3000:]
        assert out.strip() == str(target)
        assert sorted(p.name for p in build.iterdir()) == [target.name]  # no partial or source file left
    finally:
        go.touch()
        if first.poll() is None:
            first.kill()
        first.communicate()


def test_a_compiler_that_fails_without_a_word_is_named(tmp_path, monkeypatch):
    """CS3: with CC=false the error was 'could not compile the CPU shim mkl_any_cpu:' and nothing after it."""
    monkeypatch.setattr(cpu_shims, "BUILD", tmp_path)
    monkeypatch.setenv("CC", "false")
    with pytest.raises(RuntimeError, match=r"could not compile the CPU shim mkl_any_cpu: `false \.\.\.` exited with "
                                           r"code 1 and printed nothing\. Set CC to a working C compiler \(now false\)"):
        cpu_shims.build("mkl_any_cpu")
    assert list(tmp_path.iterdir()) == []  # its partial files are gone
