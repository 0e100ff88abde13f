"""Two small libraries a notebook's kernel can preload (``LD_PRELOAD``) to run the course's code on other CPU paths.

The notebooks are validated under the machine's own CPU kernels and the scalar ones (``conftest.py``). Two things
those environment variables cannot reach:

1. ``mkl_any_cpu``: oneMKL (PyTorch's BLAS on x86) asks ``mkl_serv_intel_cpu_true()`` whether the CPU is made by
   Intel. On any other CPU (AMD's, with AVX-512 or not) it runs one generic code path and ignores
   ``MKL_ENABLE_INSTRUCTIONS``, so on such a machine both configurations multiply matrices alike, and an output that
   changes with MKL's instruction set (the AVX-512, AVX2 or SSE4.2 path an Intel CPU takes) passes there and fails on
   an Intel CPU. Answering "Intel" makes MKL choose by the CPU's instruction sets, as on an Intel CPU, and obey
   ``MKL_ENABLE_INSTRUCTIONS``. The scalar configuration preloads it on a CPU not made by Intel.
2. ``shifted_memory``: c10, PyTorch's CPU allocator, puts every tensor's data on a 64-byte boundary
   (``posix_memalign(64)``), so a copy of a tensor always has the original's alignment. With
   ``HOOKLAB_SHIFT_ALLOCATIONS=1`` this library moves each block c10 asks for 8, 16, ..., 56 bytes past a 64-byte
   boundary, in turn: tensors, copies and outputs lie at other alignments than on any normal run, so a result that
   depends on where its data lies (oneMKL's generic ``sdot`` / ``sgemv`` do, by 16 bytes) changes.
   ``--cpu-kernels=shifted`` preloads both libraries; the other blocks (and every other program) are served as usual.

``build(name)`` compiles a library with the system's C compiler (``cc``) into ``build/cpu-shims/`` once; where that
cannot work (not Linux on x86-64, no compiler), it returns ``None`` and ``why_not(name)`` says why.
"""
from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "cpu-shims"
SHIFT_VARIABLE = "HOOKLAB_SHIFT_ALLOCATIONS"

MKL_ANY_CPU = r"""
/* oneMKL asks the first whether the CPU is made by Intel (yes: it picks its code path by the instruction sets);
   the second only names that path in MKL_VERBOSE's first line. */
int mkl_serv_intel_cpu_true(void) { return 1; }
int mkl_serv_intel_cpu(void) { return 1; }
"""

SHIFTED_MEMORY = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_memalign(size_t alignment, size_t size);
extern void __libc_free(void *block);

#define MAGIC 0x686f6f6b6c616221ULL  /* written before a shifted block, with the address to free */
static int enabled = -1;
static int shifted_any;
static unsigned long count;
static uintptr_t c10_start, c10_end;

static int find_c10(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size; (void)data;
    const char *slash = strrchr(info->dlpi_name, '/');
    if (strcmp(slash ? slash + 1 : info->dlpi_name, "libc10.so") != 0) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *segment = &info->dlpi_phdr[i];
        if (segment->p_type == PT_LOAD && (segment->p_flags & PF_X)) {
            c10_start = info->dlpi_addr + segment->p_vaddr;
            c10_end = c10_start + segment->p_memsz;
            return 1;
        }
    }
    return 0;
}

static int called_from_c10(void *caller) {
    if (!c10_end) dl_iterate_phdr(find_c10, NULL);  /* until torch is loaded */
    return c10_end && (uintptr_t)caller >= c10_start && (uintptr_t)caller < c10_end;
}

int posix_memalign(void **out, size_t alignment, size_t size) {
    if (enabled < 0) {
        const char *value = getenv("HOOKLAB_SHIFT_ALLOCATIONS");
        enabled = value != NULL && strcmp(value, "1") == 0;
    }
    if (alignment == 0 || (alignment & (alignment - 1)) || alignment % sizeof(void *)) return EINVAL;
    if (enabled && alignment == 64 && called_from_c10(__builtin_return_address(0))) {
        size_t shift = 8 * (1 + __atomic_fetch_add(&count, 1, __ATOMIC_RELAXED) % 7);  /* 8 .. 56 bytes */
        char *base = __libc_memalign(64, size + 128);
        if (base == NULL) return ENOMEM;
        char *block = base + 64 + shift;
        ((uint64_t *)block)[-2] = MAGIC;
        ((char **)block)[-1] = base;
        shifted_any = 1;
        *out = block;
        return 0;
    }
    void *block = __libc_memalign(alignment, size);
    if (block == NULL) return ENOMEM;
    *out = block;
    return 0;
}

void free(void *block) {
    uintptr_t at = (uintptr_t)block;
    if (shifted_any && at % 64 != 0 && at % 8 == 0 && ((uint64_t *)block)[-2] == MAGIC) {
        char *base = ((char **)block)[-1];
        if ((uintptr_t)base % 64 == 0 && at - (uintptr_t)base > 64 && at - (uintptr_t)base < 128) {
            ((uint64_t *)block)[-2] = 0;
            __libc_free(base);
            return;
        }
    }
    __libc_free(block);
}
"""

SOURCES = {"mkl_any_cpu": MKL_ANY_CPU, "shifted_memory": SHIFTED_MEMORY}


def why_not(name: str) -> str | None:
    """Why ``name`` cannot be built and preloaded here, or ``None`` when it can."""
    if name not in SOURCES:
        raise ValueError(f"no CPU shim named {name!r}; there are {sorted(SOURCES)}")
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"needs Linux on x86-64 (LD_PRELOAD, oneMKL), this is {platform.system()} on {platform.machine()}"
    if _compiler() is None:
        return "needs a C compiler (cc, gcc or clang) to build it"
    return None


def _compiler() -> str | None:
    return next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)


def build(name: str) -> Path | None:
    """The library ``name`` compiled (once per source text) into build/cpu-shims/, or ``None`` when
    ``why_not(name)``. A compiler that fails raises ``RuntimeError`` with its message."""
    if why_not(name) is not None:
        return None
    source = SOURCES[name]
    target = BUILD / f"lib{name}-{hashlib.sha256(source.encode()).hexdigest()[:12]}.so"
    if target.exists():
        return target
    BUILD.mkdir(parents=True, exist_ok=True)
    # this builder's own files, named so that no other builder's clean-up below can take them for a library
    c_file = target.with_name(f"{target.name}.partial-{os.getpid()}.c")
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    try:
        c_file.write_text(source, encoding="utf-8")
        command = [_compiler(), "-shared", "-fPIC", "-O2", "-o", str(partial), str(c_file)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            said = "\n".join(t.strip() for t in (done.stderr, done.stdout) if t.strip())
            raise RuntimeError(f"could not compile the CPU shim {name}: `{command[0]} ...` exited with "
                               f"code {done.returncode}" + (f":\n{said}" if said else " and printed nothing")
                               + f". Set CC to a working C compiler (now {os.environ.get('CC') or 'unset: cc'}), "
                               "or unset CC to use cc")
        os.replace(partial, target)  # whole or not at all: two test workers may build it at once
        for older in BUILD.glob(f"lib{name}-*.so"):  # built from an earlier source text: another hash, whole
            if older != target and re.fullmatch(rf"lib{re.escape(name)}-[0-9a-f]{{12}}\.so", older.name):
                older.unlink(missing_ok=True)
    finally:
        c_file.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)
    return target


def preload(variables: dict[str, str], *libraries: Path) -> dict[str, str]:
    """``variables`` with ``LD_PRELOAD`` holding ``libraries`` before whatever this process's LD_PRELOAD holds."""
    already = os.environ.get("LD_PRELOAD", "")
    return {**variables, "LD_PRELOAD": " ".join([*(str(p) for p in libraries), *already.split()])}


def cpu_vendor() -> str:
    """The CPU's vendor string (``GenuineIntel``, ``AuthenticAMD``, ...), or ``""`` where /proc/cpuinfo is absent."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""
