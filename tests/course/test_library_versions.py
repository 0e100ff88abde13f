"""Notebook 15 states the release of every library it runs, once per language, and those are the releases uv.lock
pins (moving a pin means re-running the notebook, not editing a version label)."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import tomllib

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "15_hooks_in_libraries.ipynb"
# the name in the prose -> the package in uv.lock
LIBRARIES = {"accelerate": "accelerate", "diffusers": "diffusers", "PEFT": "peft", "captum": "captum",
             "pytorch-lightning": "pytorch-lightning", "timm": "timm", "torchao": "torchao"}


def locked() -> dict[str, str]:
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    return {p["name"]: p["version"] for p in lock["package"]}


def test_notebook_15_states_the_locked_library_versions_in_both_languages():
    versions = locked()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for tag, marker in (("lang-zh", "**已在 torch"), ("lang-en", "**Verified on torch")):
        (text,) = [c.source for c in nb.cells if c.cell_type == "markdown" and tag in c.metadata.get("tags", [])
                   and marker in c.source]
        statement = text[text.index(marker):].split("\n")[0]
        for name, package in LIBRARIES.items():
            stated = re.findall(rf"(?<![\w-]){re.escape(name)} (\d+\.\d+\.\d+)", statement)
            assert stated == [versions[package]], (
                f"{NOTEBOOK.name} ({tag}) states {name} {stated}, uv.lock pins {versions[package]}: re-run the "
                "notebook on the new release, teach what changed, then update the statement")


def test_the_setup_cell_prints_the_installed_versions():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    versions = locked()
    printed = "".join(o.get("text", "") for o in nb.cells[5].get("outputs", []))
    for package in LIBRARIES.values():
        assert re.search(rf"^{re.escape(package)}\s+{re.escape(versions[package])}$", printed, re.MULTILINE), package
