"""Run one launch copy with nbclient, in the environment of the Python that runs this file: tools/launch/check.py
starts it with ``python -P`` in a fresh environment, so that nothing of the checkout can be imported.

    python -P tools/launch/check_runner.py COPY.ipynb EXECUTED.ipynb RESULT.json [--install-timeout S] [--timeout S]

Runs every cell in the environment's own ``python3`` kernel, going on after a cell that raises, and writes the
executed notebook and RESULT.json: code cells, how many ran without an error, the failures (``Cell N: Name:
message``, counted from 0 as nbval counts), how long the install cell took and what it printed, how many
distributions pip added, the torch installed before and after the run, the kernel's peak memory (its resident set's
high-water mark, ``VmHWM`` in ``/proc/PID/status``, read after every cell; pip, a child of the kernel, is not
counted), and why the run stopped early if it did. Where the install cell raises (the torchvision built for the
runtime's torch cannot be installed: it says which command to run), the run stops there, as Jupyter's "run all" and
Colab's "run all" stop at a failing cell: the learner sees the install cell's message and nothing else
(``stopped``); after any other failing cell the run goes on, so that one report counts every failure.

Why nbclient directly and not nbmake, the pytest plugin that runs notebooks with nbclient (tried: nbmake 1.5.5, its
kernel the fresh environment's ``python3`` through ``JUPYTER_PATH``, which works). nbmake stops a notebook at its
first failing cell (a copy with a cell made to raise: 3 of 29 code cells ran); with ``execution.allow_errors`` in the
notebook's metadata it runs on, and passes the notebook with the error in it (29 of 29 ran, one raised: PASSED). One
timeout serves every cell of a notebook, without interrupting the kernel (the install cell needs 1800 s, the others
300 s), and nbmake sets nbclient's ``on_cell_executed`` to its own mocks, where this runner reads the kernel's memory
(https://github.com/treebeardtech/nbmake/blob/v1.5.5/src/nbmake/nb_run.py#L47-L69 and #L111). The executed notebook
is kept only with ``--overwrite``, over the copy. Its verdict is one pass or fail per notebook: not the cells that
ran, each failure, the install's time, the packages added, the memory, or the torch before and after, which this
report is made of. tests/tools/test_launch_check.py runs this file on a small notebook.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from nbclient import NotebookClient

INSTALL_TAG = "hooklab-install"


def installed() -> set[str]:
    done = subprocess.run([sys.executable, "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                          timeout=300)
    return {p["name"].lower() for p in json.loads(done.stdout or "[]")}


def torch_version() -> str | None:
    """The torch installed in this environment now (a fresh process: the runner never imports torch)."""
    done = subprocess.run([sys.executable, "-c", "from importlib.metadata import version; print(version('torch'))"],
                          capture_output=True, text=True, timeout=300)
    return done.stdout.strip() or None if done.returncode == 0 else None


def peak_rss_mb(pid: int | None) -> float | None:
    """The process's peak resident set so far (Linux's ``VmHWM``), in MiB; None where it cannot be read."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii") if pid else ""
    except OSError:
        return None
    found = next((line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")), None)
    return round(int(found) / 1024, 1) if found else None


def kernel_pid(client: NotebookClient) -> int | None:
    provisioner = getattr(getattr(client, "km", None), "provisioner", None)
    return getattr(getattr(provisioner, "process", None), "pid", None)


def seconds(cell) -> float | None:
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return None
    return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 1)


class InstallStopped(Exception):
    """The install cell raised: the run stops there (the message is the cell's error)."""


def stop_at_the_install_cell(cell, cell_index, execute_reply) -> None:
    """nbclient's ``on_cell_error``: an error in the install cell ends the run."""
    if INSTALL_TAG in cell.metadata.get("tags", []):
        content = execute_reply.get("content", {})
        raise InstallStopped(f"{content.get('ename')}: {content.get('evalue', '')}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("copy", type=Path)
    parser.add_argument("executed", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--install-timeout", type=int, default=1800)
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args(argv)
    spec = KernelSpecManager().get_kernel_spec("python3")
    if not Path(os.path.abspath(spec.argv[0])).is_relative_to(os.path.abspath(sys.prefix)):
        raise SystemExit(f"the python3 kernel runs {spec.argv[0]}, not this environment's Python ({sys.prefix})")
    nb = nbformat.read(args.copy, as_version=4)
    for cell in nb.cells:  # a copy carries the outputs it was published with: a cell not reached shows none
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    before, torch_before = installed(), torch_version()
    aborted = None
    peak: list[float] = []
    client = NotebookClient(
        nb, kernel_name="python3", timeout=args.timeout, allow_errors=True, interrupt_on_timeout=True,
        record_timing=True, resources={"metadata": {"path": os.getcwd()}},
        timeout_func=lambda cell: args.install_timeout if INSTALL_TAG in cell.metadata.get("tags", [])
        else args.timeout)

    def measure(**_) -> None:
        found = peak_rss_mb(kernel_pid(client))
        if found is not None:
            peak.append(found)

    client.on_cell_executed = measure
    client.on_cell_error = stop_at_the_install_cell
    stopped = None
    try:
        client.execute()
    except InstallStopped as exc:
        stopped = str(exc)
    except Exception as exc:  # a dead kernel or a failed start: the cells not reached stay without output
        aborted = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
    args.executed.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, args.executed)
    code = [c for c in nb.cells if c.cell_type == "code"]
    failed, passed = [], 0
    for number, cell in enumerate(code):
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if errors:
            failed.append(f"Cell {number}: {errors[0].get('ename')}: {str(errors[0].get('evalue', ''))[:160]}")
        elif cell.get("execution_count") is not None:
            passed += 1
    install = next((c for c in code if INSTALL_TAG in c.metadata.get("tags", [])), None)
    output = "".join(o.get("text", "") for o in (install or {}).get("outputs", []) if o.get("output_type") == "stream")
    result = {"code_cells": len(code), "passed": passed, "failed": failed,
              "install_seconds": seconds(install) if install is not None else None,
              "install_output": output[-2000:], "stopped": stopped, "packages_added": len(installed() - before), "aborted": aborted,
              "peak_rss_mb": max(peak) if peak else None, "torch_before": torch_before,
              "torch_after": torch_version()}
    args.result.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
