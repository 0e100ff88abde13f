"""Re-execute notebooks and store their outputs, in the same fixed environment nbval uses.

Run through ``./course regen [notebooks/NN_x.ipynb ...]`` (all notebooks when none given):
that script sets one thread, PYTHONHASHSEED=0 and hides any GPU before calling this.
Besides executing, it normalises what Jupyter leaves behind: execution counts 1..n,
no timing or widget metadata, the project's kernel name.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from kernelspec import KERNELSPEC

ROOT = Path(__file__).resolve().parent.parent
CELL_KEYS = {"tags"}  # cell metadata worth keeping; everything else is editor state


def normalise(nb: nbformat.NotebookNode) -> None:
    nb.metadata = nbformat.from_dict({"kernelspec": KERNELSPEC, "language_info": {"name": "python"}})
    for cell in nb.cells:
        cell.metadata = nbformat.from_dict({k: v for k, v in cell.metadata.items() if k in CELL_KEYS})
        if cell.cell_type == "code":
            cell.outputs = coalesce_streams(cell.outputs)


def coalesce_streams(outputs: list) -> list:
    """One stream output per run of stdout (or stderr) text: how the kernel chunked it is noise in a diff."""
    merged: list = []
    for out in outputs:
        if (out.output_type == "stream" and merged and merged[-1].output_type == "stream"
                and merged[-1].name == out.name):
            merged[-1].text += out.text
        else:
            merged.append(out)
    return merged


def regen(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    nb.nbformat_minor = max(nb.nbformat_minor, 5)
    start = time.perf_counter()
    NotebookClient(nb, kernel_name=KERNELSPEC["name"], timeout=300, record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    normalise(nb)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"no such notebook: {', '.join(missing)}", file=sys.stderr)
        return 2
    for path in paths:
        print(f"{path.name}: {regen(path):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
