"""Saved tensors that live on an accelerator, kept in CPU memory until backward (:class:`SaveOnCpu`)."""
from __future__ import annotations

import torch

from ._base import Keep, _nbytes, _OffloadHooks

__all__ = ["SaveOnCpu"]


class _OnCpu:
    __slots__ = ("device", "tensor", "__weakref__")

    def __init__(self, device: torch.device, tensor: torch.Tensor) -> None:
        self.device, self.tensor = device, tensor


class SaveOnCpu(_OffloadHooks):
    """Save tensors that live on an accelerator to CPU memory; bring them back for backward.

    Like ``torch.autograd.graph.save_on_cpu`` plus a size threshold, counters, parameters left
    in place, and no copy at all for tensors already on the CPU (``save_on_cpu(pin_memory=True)``
    copies those too). ``pin_memory=True`` uses page-locked memory when CUDA is available
    (faster, asynchronous copies) and is skipped otherwise.

    >>> import torch
    >>> x = torch.randn(100, requires_grad=True)
    >>> with SaveOnCpu() as cpu:
    ...     y = (x * x).sum()          # on a CPU-only machine nothing moves
    >>> cpu.stats.offloaded
    0
    """

    def __init__(self, *, min_bytes: int = 0, pin_memory: bool = False, keep: Keep = (),
                 include_parameters: bool = False) -> None:
        super().__init__(min_bytes=min_bytes, keep=keep, include_parameters=include_parameters)
        self.pin_memory = pin_memory

    def _applies(self, t: torch.Tensor) -> bool:
        return t.device.type != "cpu"

    def _encode(self, t: torch.Tensor) -> _OnCpu:
        pin = self.pin_memory and torch.cuda.is_available() and not t.is_sparse
        if t.layout == torch.strided:  # the original's strides (a transposed view stays transposed): backward
            # multiplies in the same layout, so it takes the same kernels and gives the same bits as without offloading
            copy = torch.empty_like(t, device="cpu", pin_memory=pin)
        else:
            copy = torch.empty(t.size(), dtype=t.dtype, layout=t.layout, pin_memory=pin)
        copy.copy_(t, non_blocking=pin)
        return _OnCpu(t.device, copy)

    def _decode(self, packed: _OnCpu) -> torch.Tensor:
        return packed.tensor.to(packed.device, non_blocking=self.pin_memory)

    def _stored_nbytes(self, packed: _OnCpu) -> int:
        return _nbytes(packed.tensor)
