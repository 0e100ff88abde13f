"""Re-execute notebooks and store their outputs, in the same fixed environment nbval uses.

Run through ``./course regen [notebooks/NN_x.ipynb ...]`` (all notebooks when none given):
that script sets one thread, PYTHONHASHSEED=0 and hides any GPU before calling this.
Besides executing, it normalises what Jupyter leaves behind: execution counts 1..n,
no timing or widget metadata, the project's kernel name, one stream output per run of stdout
(or stderr) text. nbconvert's preprocessors do the clearing and the merging.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbconvert.preprocessors import ClearMetadataPreprocessor, CoalesceStreamsPreprocessor

from .kernelspec import KERNELSPEC

ROOT = Path(__file__).resolve().parents[2]
# cell metadata worth keeping (tags; "hooklab": the symptom index's entry, tools/messages/symptoms.py); the rest is editor state
CELL_KEYS = {"tags", "hooklab"}
CLEAN_UP = (
    # code cells keep their tags only, the notebook its language's name (the kernel is set below)
    ClearMetadataPreprocessor(preserve_cell_metadata_mask=CELL_KEYS, preserve_nb_metadata_mask={("language_info", "name")}),
    # how the kernel chunked a stream is noise in a diff (a '\r' progress line is rewritten as a terminal shows it)
    CoalesceStreamsPreprocessor(),
)


def normalise(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    for step in CLEAN_UP:
        nb, _ = step.preprocess(nb, {})
    nb.metadata = nbformat.from_dict({**nb.metadata, "kernelspec": KERNELSPEC})
    for cell in nb.cells:
        if cell.cell_type != "code":  # ClearMetadataPreprocessor leaves the other cells' metadata as it is
            cell.metadata = nbformat.from_dict({k: v for k, v in cell.metadata.items() if k in CELL_KEYS})
    return nb


def regen(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    nb.nbformat_minor = max(nb.nbformat_minor, 5)
    start = time.perf_counter()
    NotebookClient(nb, kernel_name=KERNELSPEC["name"], timeout=300, record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    nb = normalise(nb)
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
