"""Measuring what a memory-saving tool does: bytes alive, ops run, and how far it moves the gradients.

:class:`MemoryMeter` tracks the bytes of the tensors created inside its block that are still alive,
and their peak: it also sees what saved-tensor hooks cannot (recomputation in activation
checkpointing, tensors loaded back during backward). :class:`OpCounter` counts the ATen ops that
actually run, which shows what a checkpoint recomputed. Neither registers a hook (they are
``TorchDispatchMode``s): each is active inside its ``with`` block, and both slow every op down
(measure memory and time in separate runs). :func:`gradient_errors` runs a training step's forward
and backward without and with each of several contexts (an offloading or compressing helper, a
plan) and says how far each moves the parameter gradients; :func:`gradient_error` is the one-context
form.
"""
from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Hashable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import torch
from torch import nn

from ._torch_internals import StorageWeakRef, TorchDispatchMode, storage_key, tree_flatten
from .offload.modules import HooksFactory, _check_factory, _make_context

__all__ = ["MemoryMeter", "OpCounter", "gradient_error", "gradient_errors"]


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


# ------------------------------------------------------------------------------------- gradients
def _ran_backward(tool: str) -> str:
    return (f"{tool}: step() ran backward itself; step() must only run the forward pass and return the loss: "
            f"{tool} calls loss.backward() itself where it needs one")


def checked_loss(step: Callable[[], Any], params: Iterable[torch.Tensor], tool: str) -> torch.Tensor:
    """``step()``, which must run the forward pass only and return a scalar loss tensor (``params``' gradients
    are ``None`` before the call: one that is set afterwards means ``step()`` ran backward itself)."""
    try:
        loss = step()
    except RuntimeError as exc:
        if "backward through the graph a second time" not in str(exc):
            raise
        raise ValueError(_ran_backward(tool)) from exc
    if any(p.grad is not None for p in params):
        raise ValueError(_ran_backward(tool))
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        shape = f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else ""
        raise ValueError(f"{tool}: step() must return the scalar loss (a tensor with one element), got "
                         f"{type(loss).__name__}{shape}")
    return loss


K = TypeVar("K", bound=Hashable)


def gradient_errors(model: nn.Module, step: Callable[[], torch.Tensor], variants: Mapping[K, HooksFactory],
                    *, seed: int = 0) -> dict[K, float]:
    """Relative L2 error of all parameter gradients when ``step()`` runs under each ``variants[label]()``.

    ``step`` runs the forward pass and returns a scalar loss; the plain gradients (no context) are
    computed once, then once per variant, every run with the same RNG seed. The model's gradients and
    buffers (e.g. batch-norm statistics) are as before afterwards, also when a run raised.

    >>> import torch
    >>> from torch import nn
    >>> from hooklab import CompressSaved
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
    >>> x = torch.randn(32, 64)
    >>> errors = gradient_errors(model, lambda: model(x).sum(),
    ...                          {"bf16": lambda: CompressSaved("bf16"), "int8": lambda: CompressSaved("int8")})
    >>> errors["bf16"] < errors["int8"] < 1e-2
    True
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"gradient_error takes an nn.Module, got {type(model).__name__}")
    for make_hooks in variants.values():
        _check_factory(make_hooks)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no parameters that require grad")
    old_grads = [p.grad for p in params]
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}

    def restore_buffers() -> None:
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])

    def grads(context: AbstractContextManager[Any]) -> torch.Tensor:
        for p in params:
            p.grad = None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            with context:
                loss = checked_loss(step, params, "gradient_error")
            loss.backward()
        out = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten().double()
                         for p in params])
        restore_buffers()
        return out

    try:
        reference = grads(contextlib.nullcontext())
        norm = reference.norm().item()
        errors = {}
        for label, make_hooks in variants.items():
            diff = (grads(_make_context(make_hooks, "gradient_error")) - reference).norm().item()
            errors[label] = diff / norm if norm > 0 else diff
    finally:
        for p, g in zip(params, old_grads, strict=True):
            p.grad = g
        restore_buffers()  # also when step() raised (the docstring promises the buffers back)
    return errors


def gradient_error(model: nn.Module, step: Callable[[], torch.Tensor], make_hooks: HooksFactory,
                   seed: int = 0) -> float:
    """Relative L2 error of all parameter gradients when ``step()`` runs under ``make_hooks()``.

    ``step`` runs the forward pass and returns a scalar loss. Both runs use the same RNG seed;
    the model's gradients and buffers (e.g. batch-norm statistics) are restored afterwards
    (:func:`gradient_errors` measures several contexts against one plain run).

    >>> from hooklab import CompressSaved
    >>> _ = torch.manual_seed(0)
    >>> layer, x = nn.Linear(64, 64), torch.randn(32, 64)
    >>> gradient_error(layer, lambda: layer(x).tanh().sum(), lambda: CompressSaved("bf16")) < 1e-2
    True
    """
    return gradient_errors(model, step, {None: make_hooks}, seed=seed)[None]
