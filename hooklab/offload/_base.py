"""The machinery every offloading context shares: a size threshold, parameters and ``keep`` left in place,
one packed copy per storage, and counters (:class:`OffloadStats`).

A strategy (:mod:`.cpu`, :mod:`.disk`, :mod:`.compress`, :mod:`.overlap`) subclasses :class:`_OffloadHooks` and
says what applies to it and how to encode and decode a tensor.
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks

from .._saved import Kept
from .._torch_internals import StorageWeakRef, is_parameter_like, storage_key, version

if TYPE_CHECKING:  # typing.Self is Python >= 3.11
    from typing_extensions import Self

__all__ = ["Keep", "OffloadStats"]


@dataclass
class OffloadStats:
    """Counters of one offloading context.

    ``packed``: pack-hook calls; ``offloaded``: tensors moved/encoded (``offloaded_bytes``
    before, ``stored_bytes`` after encoding); ``reused``: pack calls answered with an earlier
    packed copy of the same storage; ``kept``: tensors left in memory as they were
    (``kept_bytes``): too small, a parameter, in ``keep``, or not applicable (already on CPU).
    """

    packed: int = 0
    offloaded: int = 0
    reused: int = 0
    kept: int = 0
    offloaded_bytes: int = 0
    stored_bytes: int = 0
    kept_bytes: int = 0

    def __iadd__(self, other: OffloadStats) -> OffloadStats:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


Keep = Iterable["torch.Tensor | nn.Module"]


def _keep_keys(keep: Keep) -> set[int]:
    if isinstance(keep, (torch.Tensor, nn.Module)):
        keep = [keep]
    keys: set[int] = set()
    for item in keep:
        if isinstance(item, nn.Module):
            keys.update(storage_key(t) for t in (*item.parameters(), *item.buffers()))
        elif isinstance(item, torch.Tensor):
            keys.add(storage_key(item))
        else:
            raise TypeError(f"keep takes tensors and modules, got {type(item).__name__}")
    return keys


class _OffloadHooks(saved_tensors_hooks):
    """Shared machinery: threshold, parameters and ``keep`` skipped, one packed copy per storage, counters."""

    def __init__(self, *, min_bytes: int = 0, keep: Keep = (), include_parameters: bool = False) -> None:
        if not isinstance(min_bytes, int) or isinstance(min_bytes, bool) or min_bytes < 0:
            raise ValueError(f"min_bytes must be an int >= 0 (a size in bytes), got {min_bytes!r}")
        super().__init__(self._pack, self._unpack)
        self.min_bytes = min_bytes
        self.include_parameters = include_parameters
        self._keep = _keep_keys(keep)
        self.stats = OffloadStats()
        # storage -> its packed copy; pruned of dead entries as it grows (a weakref callback would be Python code
        # run as a finalizer, where a Ctrl-C is swallowed)
        self._cache: dict[tuple, tuple[StorageWeakRef, weakref.ref]] = {}
        self._prune_at = 64
        self._lock = threading.Lock()

    # subclasses decide what applies and how to encode / decode
    def _applies(self, t: torch.Tensor) -> bool:
        return True

    def _encode(self, t: torch.Tensor) -> Any:
        raise NotImplementedError

    def _decode(self, packed: Any) -> torch.Tensor:
        raise NotImplementedError

    def _stored_nbytes(self, packed: Any) -> int:
        raise NotImplementedError

    # torch's saved_tensors_hooks.__enter__ returns None; this one returns the context, so that
    # `with SaveOnCpu() as ctx:` gives it (its stats stay readable after the block)
    def __enter__(self) -> Self:  # type: ignore[override]
        super().__enter__()
        return self

    def _pack(self, t: torch.Tensor) -> Any:
        nbytes = _nbytes(t)
        with self._lock:
            self.stats.packed += 1
        if (nbytes < self.min_bytes or (not self.include_parameters and is_parameter_like(t))
                or storage_key(t) in self._keep or not self._applies(t)):
            with self._lock:
                self.stats.kept += 1
                self.stats.kept_bytes += nbytes
            return Kept(t)  # detached, with its version: backward raises if an in-place op changes it
        key = (storage_key(t), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype, version(t))
        with self._lock:
            hit = self._cache.get(key)
            packed = hit[1]() if hit is not None and not hit[0].expired() else None
            if packed is not None:
                self.stats.reused += 1
                return packed
        packed = self._encode(t.detach())
        with self._lock:
            if len(self._cache) >= self._prune_at:
                for old in [k for k, (_, ref) in self._cache.items() if ref() is None]:
                    del self._cache[old]
                self._prune_at = max(64, 2 * len(self._cache))
            self._cache[key] = (StorageWeakRef(t.untyped_storage()), weakref.ref(packed))
            self.stats.offloaded += 1
            self.stats.offloaded_bytes += nbytes
            self.stats.stored_bytes += self._stored_nbytes(packed)
        return packed

    def _unpack(self, packed: Any) -> torch.Tensor:
        if isinstance(packed, Kept):
            return packed.get(type(self).__name__)
        return self._decode(packed)
