"""Every recipe runs on its own: a practitioner copies one recipe from its page of the site (tools/recipes/pages.py),
which shows the notebook's setup cell at its top and then each recipe. Here each recipe's cells run after that setup
cell alone, in a fresh kernel, and must give the outputs committed in the notebook, compared as nbval compares them
(streams merged, tests/sanitize.cfg's rules applied to both sides).

Every recipe is a test of its own, and a member of a population for the gate (tools/gate/populations.py): a push
runs the recipes whose cells (or what their notebook runs and reads) changed since they last passed, and two drawn
with the commit; ``./course test --all`` runs every one. A pytest run without the gate runs the drawn two
(tools/gate/plan.py: ``sample_without_plan``)."""
from __future__ import annotations

import configparser
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from patience import hang_guard
from tools.notebooks.kernelspec import KERNELSPEC
from tools.recipes.pages import notebooks, split

pytestmark = pytest.mark.course

ROOT = Path(__file__).resolve().parents[2]
SANITIZE = configparser.ConfigParser(interpolation=None)
SANITIZE.read(ROOT / "tests" / "sanitize.cfg", encoding="utf-8")
RULES = [(re.compile(SANITIZE[s]["regex"]), SANITIZE[s]["replace"]) for s in SANITIZE.sections()]


def _recipes() -> list[tuple[Path, str]]:
    found = []
    for path in notebooks(ROOT / "recipes"):
        _, recipes = split(nbformat.read(path, as_version=4))
        found += [(path, rid) for rid, _ in recipes]
    return found


ALL = _recipes()


def sanitize(text: str) -> str:
    for regex, replace in RULES:
        text = regex.sub(replace, text)
    return text


def shown(outputs) -> list[str]:
    """A cell's outputs as nbval compares them: one text per stream name (merged in order), the plain text of
    results and displays, an error as its class and message; each sanitized."""
    texts, streams = [], {}
    for out in outputs:
        if out["output_type"] == "stream":
            if out["name"] in streams:
                texts[streams[out["name"]]] += out["text"]
            else:
                streams[out["name"]] = len(texts)
                texts.append(out["text"])
        elif out["output_type"] in ("execute_result", "display_data") and "text/plain" in out.get("data", {}):
            texts.append(out["data"]["text/plain"])
        elif out["output_type"] == "error":
            texts.append(f"{out['ename']}: {out['evalue']}")
    return [sanitize("".join(t) if isinstance(t, list) else t) for t in texts]


def run_alone(path: Path, rid: str) -> list[str]:
    """Run ``rid``'s code cells after the notebook's setup cells in a fresh kernel; the differences from the
    committed outputs, one line each (empty: the recipe runs on its own)."""
    setup, recipes = split(nbformat.read(path, as_version=4))
    cells = [c for c in setup + dict(recipes)[rid] if c["cell_type"] == "code"]
    committed = [shown(c.get("outputs", [])) for c in cells]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c["source"]) for c in cells])
    client = NotebookClient(nb, kernel_name=KERNELSPEC["name"], timeout=int(hang_guard(300)), record_timing=False,
                            resources={"metadata": {"path": str(path.parent)}})
    try:
        client.execute()
    except CellExecutionError:
        pass  # the cell that raised keeps its error output; it is reported below
    problems = []
    for k, (cell, want) in enumerate(zip(nb.cells, committed)):
        got = shown(cell.get("outputs", []))
        if got != want:
            where = "setup" if k < len([c for c in setup if c["cell_type"] == "code"]) else f"code cell {k}"
            first = next((f"{g!r} != {w!r}" for g, w in zip(got, want) if g != w), f"{len(got)} outputs != {len(want)}")
            problems.append(f"{where} (id {cells[k].get('id')}): {first[:600]}")
    return problems


def test_every_recipe_is_found_once():
    assert len(ALL) == len({rid for _, rid in ALL}) and len(ALL) >= 200, "a recipe id appears twice, or recipes went missing"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("path,rid", ALL, ids=[rid for _, rid in ALL])
def test_a_recipe_run_alone_after_its_notebooks_setup_gives_its_committed_outputs(path, rid):
    problems = run_alone(path, rid)
    assert not problems, f"{path.name} · {rid}, run alone after the setup cell:\n" + "\n".join(problems)
