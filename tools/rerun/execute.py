"""Execute notebooks with nbclient and save them, for ``./course rerun`` (run by the environment under test).

    python -m tools.rerun.execute --out DIR notebooks/NN_x.ipynb ...

Runs each notebook in the ``hooklab`` kernel of the Python that runs this script (the environment's own
kernelspec: ``JUPYTER_PREFER_ENV_PATH=1`` is set by the caller), with the same per-cell limit as
``./course regen``. Unlike regen it keeps going after a cell raises (``allow_errors``), so that one
failure is reported as one cell, and it never writes into ``notebooks/``. Writes ``DIR/<name>.ipynb``
and ``DIR/<name>.json`` (run time, and why execution stopped early if it did).

Why not nbmake (tried: nbmake 1.5.5; tools/launch/check_runner.py gives the details): it stops a notebook at its first
failing cell, or, with ``execution.allow_errors`` in the notebook's metadata, runs on and passes it; and it keeps the
executed notebook only by writing it over the source (``--overwrite``), into notebooks/, where this writes
``DIR/<name>.ipynb`` for tools/rerun/compare.py to compare output by output.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from ..notebooks.kernelspec import NAME as KERNEL


def execute(path: Path, out: Path, *, timeout: int) -> dict:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    aborted = None
    try:
        NotebookClient(nb, kernel_name=KERNEL, timeout=timeout, allow_errors=True, interrupt_on_timeout=True,
                       record_timing=False, resources={"metadata": {"path": str(path.parent)}}).execute()
    except Exception as exc:  # a dead kernel or a failed start: the cells not reached keep no output
        aborted = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
    seconds = time.perf_counter() - start
    nbformat.write(nb, out / path.name)
    info = {"seconds": round(seconds, 1), "aborted": aborted}
    (out / (path.stem + ".json")).write_text(json.dumps(info), encoding="utf-8")
    return info


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    parser.add_argument("notebooks", type=Path, nargs="+")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.notebooks:
        info = execute(path, args.out, timeout=args.timeout)
        note = f" (stopped: {info['aborted']})" if info["aborted"] else ""
        print(f"  {path.name}: {info['seconds']:.1f} s{note}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
