"""The hook behaviour matrix: every hook family of PyTorch under every way code runs, observed by running it.

Rows are hook families (:data:`FAMILIES`), columns the ways code runs (:data:`CONTEXTS`); a cell is the key
``"<family>@<context>"``. :func:`observe` runs one cell's probe and returns an :class:`Observation`::

    >>> from hooklab.course import hook_matrix
    >>> print(hook_matrix.observe("forward-hook", "no-grad").summary())  # doctest: +ELLIPSIS
    forward-hook@no-grad: fires 1x (forward 1) | receives 1x (Subject, (f32[2,3],), f32[2,3]) | ...

``tools/hook_matrix/generate.py`` runs every cell and keeps the results in ``docs/hook_matrix.json``; notebook 17 teaches
how to read it and how to add a context.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from .contexts import BY_ID as CONTEXT_BY_ID, CONTEXTS, Context, new_context
from .distributed import observe_distributed
from .families import BY_ID as FAMILY_BY_ID, FAMILIES, Family
from .observe import Observation, not_applicable, observe

__all__ = ["CONTEXTS", "CONTEXT_BY_ID", "FAMILIES", "FAMILY_BY_ID", "Context", "Family", "Observation", "keys",
           "needs_workers", "new_context", "not_applicable", "observe", "observe_distributed", "recorded"]

RECORD = Path(__file__).resolve().parents[1] / "assets" / "hook_matrix.json.gz"  # docs/hook_matrix.json, packaged


def recorded() -> dict[str, Any]:
    """The recorded matrix (the repository's ``docs/hook_matrix.json``, shipped with the package): the torch it was
    observed with, and per cell what was observed and what the course says of it.

    >>> from hooklab.course import hook_matrix
    >>> cell = hook_matrix.recorded()["cells"]["forward-hook@no-grad"]
    >>> cell["status"], cell["fires"]
    ('observed', True)
    """
    return json.loads(gzip.decompress(RECORD.read_bytes()).decode("utf-8"))


def keys() -> list[str]:
    """Every cell's key, family by family, in the order of :data:`FAMILIES` and :data:`CONTEXTS`."""
    return [f"{f.id}@{c.id}" for f in FAMILIES for c in CONTEXTS]


def needs_workers(key: str) -> bool:
    """Whether the cell runs in worker processes (a DDP, FSDP2, FSDP1 or tensor-parallel column, or a DDP or FSDP2
    row)."""
    family, context = key.split("@")
    return CONTEXT_BY_ID[context].wrap != "" or FAMILY_BY_ID[family].where == "wrapper"
