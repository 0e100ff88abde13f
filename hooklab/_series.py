"""Records of one kind kept compactly, for the recorders that record a small tensor per hook call
(:class:`~hooklab.monitor.GradientMonitor`, :class:`~hooklab.activations.ActivationStats`)."""
from __future__ import annotations

from collections.abc import Sequence

import torch


class _Series:
    """Records of one kind kept compactly: each record is a small tensor, and every
    ``_BATCH`` of them are stacked into one tensor (no host-device sync, a few bytes per value
    instead of one tensor object, ~560 B, per record)."""

    _BATCH = 64

    def __init__(self) -> None:
        self._blocks: list[torch.Tensor] = []
        self._pending: list[torch.Tensor] = []

    def append(self, record: torch.Tensor) -> None:
        self._pending.append(record)
        if len(self._pending) >= self._BATCH:
            self._blocks.append(torch.stack(self._pending))
            self._pending = []

    def __len__(self) -> int:
        return sum(len(b) for b in self._blocks) + len(self._pending)

    def stacked(self, extra: Sequence[torch.Tensor] = ()) -> torch.Tensor | None:
        """All records as one tensor (records along dim 0); None when there are none."""
        parts = self._blocks + ([torch.stack(self._pending + list(extra))] if self._pending or extra else [])
        if not parts:
            return None
        device = parts[0].device
        return torch.cat([p.to(device) for p in parts])
