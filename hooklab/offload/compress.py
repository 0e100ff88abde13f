"""Saved tensors kept in a smaller, lossy form: bf16 or int8 (:class:`CompressSaved`)."""
from __future__ import annotations

from typing import Literal, get_args

import torch

from .._saved import Kept
from ._base import Keep, _nbytes, _OffloadHooks

__all__ = ["CompressSaved", "Format"]


class _Compressed:
    __slots__ = ("data", "scale", "dtype", "special", "__weakref__")

    def __init__(self, data: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype,
                 special: torch.Tensor | None = None) -> None:
        self.data, self.scale, self.dtype = data, scale, dtype
        self.special = special  # int8: the non-finite entries (where data == -128): +1 inf, -1 -inf, 0 nan


Format = Literal["bf16", "int8"]


class CompressSaved(_OffloadHooks):
    """Keep floating-point saved tensors in a smaller, lossy form: ``"bf16"`` or ``"int8"``.

    ``bf16`` halves float32 (8 bits of mantissa, about 3 significant digits); ``int8`` quarters it
    with one scale per channel (dim 1; ``x ~ q * max|x| / 127``) and sign-preserving rounding
    (a nonzero value never rounds to 0: ReLU's backward reads ``out > 0`` from its saved output,
    and plain rounding flips that mask for small values, which multiplies the gradient error
    by about 20 on a ResNet). ``int8`` keeps +-inf and nan exactly (one extra byte per such
    entry; the scale comes from the finite values), so a ``-inf`` attention mask saved for
    backward stays a mask. Backward uses the decoded values, so gradients change: measure how
    much with :func:`gradient_error`. Integer tensors (e.g. max-pool indices, int64) are stored
    losslessly in the smallest integer type that holds their values.

    ``min_bytes`` defaults to 4 KiB: small tensors (batch norm's saved mean and inverse std, one
    number per channel) would save next to nothing, and they are where precision matters most
    (on a ResNet-18, compressing them too doubles the gradient error).

    >>> import torch
    >>> from torch import nn
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
    >>> x = torch.randn(32, 64)
    >>> with CompressSaved("bf16", keep=[model, x]) as comp:
    ...     loss = model(x).sum()
    >>> comp.stats.stored_bytes * 2 == comp.stats.offloaded_bytes     # float32 -> bf16 (no ints saved)
    True
    """

    FORMATS: tuple[Format, ...] = get_args(Format)

    def __init__(self, fmt: Format = "bf16", *, min_bytes: int = 4096, keep: Keep = (),
                 include_parameters: bool = False) -> None:
        if fmt not in self.FORMATS:
            raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(self.FORMATS)}")
        super().__init__(min_bytes=min_bytes, keep=keep, include_parameters=include_parameters)
        self.fmt = fmt

    _INTS = (torch.int8, torch.int16, torch.int32)
    _SIGNED = (torch.int16, torch.int32, torch.int64)

    def _applies(self, t: torch.Tensor) -> bool:
        if t.is_floating_point():
            return t.element_size() > (1 if self.fmt == "int8" else 2)
        return t.dtype in self._SIGNED and t.numel() > 0

    @classmethod
    def integer_type(cls, t: torch.Tensor) -> torch.dtype | None:
        """The smallest integer type that holds a signed integer tensor's values, if smaller than its own (what an
        integer tensor is stored as, losslessly, in both formats); None for anything else."""
        if t.is_floating_point() or t.dtype not in cls._SIGNED or t.numel() == 0:
            return None
        lo, hi = t.min().item(), t.max().item()
        for dtype in cls._INTS:
            info = torch.iinfo(dtype)
            if info.min <= lo and hi <= info.max and torch.iinfo(t.dtype).bits > info.bits:
                return dtype
        return None

    def _encode(self, t: torch.Tensor) -> _Compressed | Kept:
        if not t.is_floating_point():
            # integer tensors (max-pool indices are int64) go, losslessly, into the smallest
            # integer type that holds their range
            dtype = self.integer_type(t)
            if dtype is not None:
                return _Compressed(t.to(dtype), None, t.dtype)
            return Kept(t)  # no smaller type holds it: keep the tensor itself, no copy
        if self.fmt == "bf16":
            return _Compressed(t.to(torch.bfloat16), None, t.dtype)
        x = t.float()
        # +-inf and nan (a -inf attention mask) are kept exactly, one byte each, and left out of
        # the scale: an infinite max would turn every other value into 0 or nan
        finite = torch.isfinite(x)
        special = None
        if not bool(finite.all()):
            odd = x[~finite]
            special = torch.where(odd.isnan(), 0, torch.sign(odd)).to(torch.int8)
            x = x.masked_fill(~finite, 0)
        # one scale per channel (dim 1) when there is one, else per tensor
        dims = [d for d in range(x.dim()) if d != 1] if x.dim() > 1 else list(range(x.dim()))
        amax = x.abs().amax(dim=dims, keepdim=True) if dims else x.abs()
        scale = amax.clamp_min(torch.finfo(torch.float32).tiny) / 127
        # sign-preserving rounding: a small nonzero value becomes +-1, never 0, so masks that
        # backward reads from a saved tensor (ReLU: grad * (out > 0)) survive exactly
        q = torch.round(x.abs() / scale).clamp_(1, 127) * torch.sign(x)
        if special is not None:
            q.masked_fill_(~finite, -128)  # -128 is never a rounded value: it marks a non-finite entry
        return _Compressed(q.to(torch.int8), scale, t.dtype, special)

    def _decode(self, packed: _Compressed) -> torch.Tensor:
        if packed.scale is None:  # bf16, or an integer tensor
            return packed.data.to(packed.dtype)
        out = packed.data.float() * packed.scale
        if packed.special is not None:
            out[packed.data == -128] = packed.special.float() * float("inf")  # 0 * inf is nan
        return out.to(packed.dtype)

    def _stored_nbytes(self, packed: _Compressed | Kept) -> int:
        if isinstance(packed, Kept):
            return _nbytes(packed.tensor)
        extra = [t for t in (packed.scale, packed.special) if t is not None]
        return _nbytes(packed.data) + sum(_nbytes(t) for t in extra)
