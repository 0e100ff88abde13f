"""The distributed cells: DDP, FSDP2, FSDP1 and tensor parallelism on two ``gloo`` processes
(:func:`hooklab.workers.run_workers`).

Every cell that needs a process group (the ``ddp``, ``fsdp2``, ``fsdp1`` and ``tensor-parallel`` columns, and the rows of DDP's communication hook
and FSDP2's all-reduce hook) is observed inside the workers by the same :func:`~.observe.observe`; rank 0's
observation is the cell's, and a note says where rank 1 saw something else.
"""
from __future__ import annotations

from typing import Any


def _cells(rank: int, world_size: int, keys: list[str]) -> list[dict[str, Any]]:
    import torch

    from .observe import observe
    torch.manual_seed(0)
    out = []
    for key in keys:
        family, context = key.split("@")
        try:
            out.append(observe(family, context).as_dict())
        except Exception as exc:  # noqa: BLE001 - a probe that fails is reported as such, the others still run
            out.append({"family": family, "context": context, "status": "probe failed",
                        "error": f"{type(exc).__name__}: {exc}"})
    return out


def observe_distributed(keys: list[str], *, timeout: float = 600.0) -> list[dict[str, Any]]:
    """Observe the cells ``keys`` ("family@context") in two gloo processes; rank 0's records, each with a note
    where rank 1 differed."""
    from ...workers import run_workers

    if not keys:
        return []
    ranks = run_workers(_cells, keys, world_size=2, timeout=timeout)
    merged = []
    for mine, other in zip(ranks[0], ranks[1]):
        if mine != other:
            differs = sorted(k for k in mine if mine.get(k) != other.get(k))
            mine = {**mine, "notes": [*mine.get("notes", []), "rank 1 differs in: " + ", ".join(differs)]}
        merged.append(mine)
    return merged
