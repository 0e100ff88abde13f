"""Meters that see every op below Python (``TorchDispatchMode``s, not hooks): bytes alive, ops run.

:class:`MemoryMeter` tracks the bytes of the tensors created inside its block that are still alive,
and their peak: it also sees what saved-tensor hooks cannot (recomputation in activation
checkpointing, tensors loaded back during backward). :class:`OpCounter` counts the ATen ops that
actually run, which shows what a checkpoint recomputed. Neither registers a hook: each is active
inside its ``with`` block, and both slow every op down (measure memory and time in separate runs).
"""
from __future__ import annotations

import collections
from typing import Any, Iterable

import torch

from ._torch_internals import StorageWeakRef, TorchDispatchMode, storage_key, tree_flatten

__all__ = ["MemoryMeter", "OpCounter"]


class MemoryMeter(TorchDispatchMode):
    """Track the bytes of tensor storages created inside the block that are still alive, and their peak.

    Every op that runs inside the block is seen (it is a ``TorchDispatchMode``), so this also
    counts what a :class:`SavedTensorLedger` cannot: recomputation in activation checkpointing,
    tensors loaded back during backward, gradients. Storages alive before the block (pass the
    parameters, buffers and the input batch as ``ignore``) are not counted. Call :meth:`mark`
    to read the current bytes at a point (e.g. after forward). It slows every op down: measure
    memory and time in separate runs.

    >>> from torch import nn
    >>> model, x = nn.Sequential(nn.Linear(100, 100), nn.Tanh()), torch.ones(8, 100)
    >>> with MemoryMeter(ignore=[*model.parameters(), x]) as meter:
    ...     loss = model(x).sum(); held = meter.mark(); loss.backward()
    >>> held >= 8 * 100 * 4, meter.peak_bytes >= held   # at least tanh's saved output was alive
    (True, True)
    """

    def __init__(self, ignore: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        ignore = list(ignore)
        bad = [t for t in ignore if not isinstance(t, torch.Tensor)]
        if bad:
            raise TypeError(f"MemoryMeter(ignore=...) takes tensors (e.g. [*model.parameters(), x]), "
                            f"got {type(bad[0]).__name__}")
        self._ignore = {storage_key(t) for t in ignore}
        self._live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current_bytes = 0
        self.peak_bytes = 0

    def _track(self, objs: Iterable[Any]) -> None:
        for t in objs:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            key = storage_key(t)
            if key in self._ignore:
                continue
            if key in self._live:
                ref, nbytes = self._live[key]
                if not ref.expired():
                    continue
                self.current_bytes -= nbytes  # same address, new storage: the old one died
            self._live[key] = (StorageWeakRef(storage), storage.nbytes())
            self.current_bytes += storage.nbytes()

    def mark(self) -> int:
        """Forget storages that died, update the peak, and return the bytes alive now."""
        for key in [k for k, (ref, _) in self._live.items() if ref.expired()]:
            self.current_bytes -= self._live.pop(key)[1]
        return self.current_bytes

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self._track(tree_flatten((args, kwargs)))
        self._track(tree_flatten(out))
        self.peak_bytes = max(self.peak_bytes, self.mark())
        return out

    def __exit__(self, *exc_info: Any) -> Any:
        result = super().__exit__(*exc_info)
        self.mark()
        return result


class OpCounter(TorchDispatchMode):
    """Count the ATen ops that run inside the block, by name (``"addmm"``, ``"gelu"``, ...).

    A ``TorchDispatchMode`` sees every op that actually executes below Python, including the ones
    backward runs and those a checkpoint recomputes; an op that selective checkpointing answers
    from its cache does not execute, so it is not counted. The counts are exact and the same on
    every machine, unlike timings.

    >>> with OpCounter() as ran:
    ...     y = torch.tanh(torch.ones(2) * 3)
    >>> dict(ran.counts)
    {'ones': 1, 'mul': 1, 'tanh': 1}
    """

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))
