"""Text that hooklab prints: the one table renderer behind every ``table()``, byte counts, and shapes.

One shape notation everywhere (``Tracer`` details, ``layer_shapes``, the ledger's table, error messages): a tensor is
its shape as a Python tuple, ``(2, 3)`` (``(4,)`` for one dimension), as ``tuple(t.shape)`` prints it.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch


def format_table(header: Sequence[str], rows: Iterable[Sequence[str]], *, right: Iterable[int] = (),
                 empty: str = "nothing recorded") -> str:
    """Columns padded to their widest cell, two spaces apart; columns in ``right`` right-aligned.

    >>> print(format_table(("layer", "norm"), [("fc1", "0.5"), ("head", "12.25")], right=[1]))
    layer   norm
    fc1      0.5
    head   12.25
    >>> format_table(("layer", "norm"), [])
    'nothing recorded'
    """
    rows = [tuple(header), *(tuple(r) for r in rows)]
    if len(rows) == 1:
        return empty
    right = set(right)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) if i in right else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows)


def format_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'`` (binary units, one decimal).

    >>> format_bytes(512), format_bytes(1536), format_bytes(3 * 1024 ** 3)
    ('512 B', '1.5 KiB', '3.0 GiB')
    """
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            break
        n /= 1024
    return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"


def describe_shape(value: Any) -> str:
    """What a hook received, as shapes, never values: a tensor as ``(2, 3)``, tuples and lists of them in
    brackets, a dict with its keys, a nested tensor as the shape of each component; anything else by its type.

    >>> describe_shape((torch.ones(2, 3), [torch.ones(4), None], {"mask": torch.ones(1, 2)}, 0.5))
    '[(2, 3), [(4,), None], {mask: (1, 2)}, float]'
    """
    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        if value.is_nested:  # no single shape: one per component
            return "nested[" + ", ".join(str(tuple(c.shape)) for c in value.unbind()) + "]"
        return str(tuple(value.shape))
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(describe_shape(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {describe_shape(v)}" for k, v in value.items()) + "}"
    return type(value).__name__
