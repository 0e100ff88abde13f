"""The prose of the notebooks stays in step with the pinned PyTorch and with the outputs beside it.

- Each notebook states once, in each language, the torch version it is verified on, and that is the locked
  version: moving the pin means re-validating the notebooks, not editing version labels in 180 places.
- No other hand-written "(torch 2.x)" / "on torch 2.x" labels: they go stale silently when the pin moves.
- Prose quotes an autograd node name (`...Backward0`) or a warning's words only when an output of the same
  notebook shows them, so that `./course regen` cannot turn a changed output green while the text beside it
  still states the old fact. A sentence that explicitly describes an older release ("before torch 2.15 ...",
  "2.15 之前 ...") is history, not a claim about the pinned version, and is exempt.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import nbformat
import pytest
import tomllib

from hooklab.course.notebook import strip_toc_skip
from tools.messages.symptoms import MARKER_END, MARKER_START  # tools/messages/symptoms.py

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

VERSION = r"(\d+\.\d+\.\d+)"
STATEMENTS = {
    "lang-en": re.compile(rf"\*\*Verified on torch {VERSION}\*\*"),
    "lang-zh": re.compile(rf"\*\*已在 torch {VERSION} 上验证\*\*"),
}
STALE_LABELS = [
    re.compile(r"[（(]torch 2\.\d+(\.\d+)?[)）]"),      # "(torch 2.13)", "（torch 2.13）"
    re.compile(r"\b[Oo]n torch 2\.\d+"),                # "On torch 2.13, ..."
    re.compile(r"torch 2\.\d+(\.\d+)? ?(上|中|里)"),      # "在 torch 2.13 上"
]
HISTORY = re.compile(r"(?i)\b(before|up to|until|since|from|prior to) (torch |pytorch )?2\.\d+"
                     r"|2\.\d+ ?(之前|及以前|以前|起|开始)")
NODE_NAME = re.compile(r"\b[A-Z]\w*Backward\d+\b")
WARNING_TALK = re.compile(r"\b\w+Warning\b|(?i:\bthe warning\b|\bwarning (says|said|text|message)\b)")
QUOTED = re.compile(r"[\"“]([^\"”]{12,})[\"”]")
SENTENCE_END = re.compile(r"(?<=[.。!?！？;；])\s+|(?<=[。！？；])|\n")


@functools.cache  # uv.lock is about 1 MB of TOML: parsed once, not once per notebook
def locked_torch() -> str:
    lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
    versions = {p["version"] for p in lock["package"] if p["name"] == "torch"}
    assert len(versions) == 1, f"uv.lock should pin one torch, has {sorted(versions)}"
    return versions.pop()


def markdown(nb) -> list[tuple[int, str, str]]:
    """(index, language tag, source without the table-of-contents marker) of every markdown cell written by hand:
    notebook 00's generated symptom index is left out (it quotes other notebooks' outputs; tests/tools/test_symptoms.py
    checks each quote against its own cell's output)."""
    cells, generated = [], False
    for i, c in enumerate(nb.cells):
        if c.cell_type != "markdown":
            continue
        if MARKER_START in c.source or MARKER_END in c.source:
            generated = MARKER_START in c.source
            continue
        if not generated:
            cells.append((i, (c.metadata.get("tags") or ["?"])[0], strip_toc_skip(c.source)))
    return cells


def output_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def claims(text: str) -> list[str]:
    """The sentences of a markdown cell that speak about the present (history sentences left out)."""
    return [s for s in SENTENCE_END.split(text) if s.strip() and not HISTORY.search(s)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_states_the_locked_torch_version_once_per_language(path):
    nb = nbformat.read(path, as_version=4)
    torch_version = locked_torch()
    for tag, pattern in STATEMENTS.items():
        found = [(i, m.group(1)) for i, t, src in markdown(nb) if t == tag for m in pattern.finditer(src)]
        assert len(found) == 1, f"{path.name}: {tag} needs exactly one '{pattern.pattern}', found {found}"
        (cell, stated), = found
        assert stated == torch_version, (
            f"{path.name} cell {cell} says verified on torch {stated}, but uv.lock pins {torch_version}: "
            "run `./course test` on the new pin, teach what changed, then update the statement")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_hand_written_version_labels(path):
    nb = nbformat.read(path, as_version=4)
    stale = []
    for i, _, src in markdown(nb):
        text = STATEMENTS["lang-en"].sub("", STATEMENTS["lang-zh"].sub("", src))
        stale += [(i, m.group(0)) for pattern in STALE_LABELS for m in pattern.finditer(text)]
    assert not stale, (f"{path.name}: version labels that go stale when the pin moves (the notebook states "
                       f"its verified version once at the top): {stale}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_prose_quotes_only_node_names_and_warnings_an_output_shows(path):
    nb = nbformat.read(path, as_version=4)
    shown = output_text(nb)
    unproven = []
    for i, tag, src in markdown(nb):
        for sentence in claims(src):
            unproven += [(i, name) for name in NODE_NAME.findall(sentence) if name not in shown]
            if tag == "lang-en" and WARNING_TALK.search(sentence):
                unproven += [(i, q) for q in QUOTED.findall(sentence)
                             if re.search(r"[A-Za-z]", q) and q.lower() not in shown.lower()]
    assert not unproven, (f"{path.name}: prose quotes node names or warning text that no output of the "
                          f"notebook shows (stale after a PyTorch change?): {unproven}")


def test_the_rules_catch_what_they_are_for():
    stale = "**In fact** (torch 2.13): x. On torch 2.13 it runs. 在 torch 2.13 上成立。"
    assert sum(len(p.findall(stale)) for p in STALE_LABELS) == 3
    assert not any(p.search("since PyTorch 2.6 the default is") for p in STALE_LABELS)
    assert claims("The last Node is `ViewBackward0`. Before torch 2.15 it was `ViewBackward0`.") == [
        "The last Node is `ViewBackward0`."]
    assert claims("最后一个节点是 `A`。2.15 之前是 `B`。") == ["最后一个节点是 `A`。"]
