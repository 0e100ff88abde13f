"""The plain-PyTorch ways to meet a memory budget that :meth:`hooklab.MemoryPlanner.decide` measures beside its plans.

:class:`CheckpointEach` is ``torch.utils.checkpoint.checkpoint(block, ..., use_reentrant=False)`` around each of the
planner's blocks (any model); :class:`SequentialCheckpoint` is ``torch.utils.checkpoint.checkpoint_sequential(model,
segments, x, use_reentrant=False)`` for an ``nn.Sequential``; :class:`CompiledBudget` is ``torch.compile(model, backend=...)``
compiled under ``torch._functorch.config.activation_memory_budget``. Each has the lifecycle of a
:class:`hooklab.MemoryPlan`: ``apply()`` is a ``with`` block inside which ``model(x)`` runs that way, and after which
the model is as before (its ``forward`` is an instance attribute for the block, removed on exit, also after an
exception); one block per call of ``apply()``. A ``copy.deepcopy`` of the model made inside the block runs plainly,
and so does a model pickled inside it.

``checkpoint_sequential`` splits the children into ``segments`` runs of ``len(model) // segments`` (the last one
takes the rest) and checkpoints all but the last: it recomputes the first ``(segments - 1) * (len // segments)``
children (:attr:`SequentialCheckpoint.recomputed`), and the bytes it holds are not monotonic in ``segments``.

>>> import torch
>>> from torch import nn
>>> _ = torch.manual_seed(0)
>>> model = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(6)])
>>> x = torch.randn(4, 16)
>>> model(x).sum().backward()
>>> plain = [p.grad.clone() for p in model.parameters()]
>>> model.zero_grad()
>>> option = SequentialCheckpoint(model, 3)
>>> print(option, option.recomputed)
checkpoint_sequential(model, 3, x, use_reentrant=False) 4
>>> with option.apply():
...     loss = model(x).sum()
>>> loss.backward()
>>> all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), plain))
True
"""
from __future__ import annotations

import contextlib
import itertools
import types
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.utils.checkpoint  # `import torch` alone does not import it before torch 2.8
from torch import nn

__all__ = ["CheckpointAndOffload", "CheckpointEach", "CompiledBudget", "OffloadStep", "SequentialCheckpoint",
           "graph_saved_bytes"]


def _patched_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """A model's ``forward`` inside an ``apply()`` block: an instance attribute bound to the model, so that a deep
    copy binds its own to the copy, which then runs its class ``forward`` plainly."""
    block = _ACTIVE.get(self)
    if block is None:  # a copy of the model, or the block has ended
        return type(self).forward(self, *args, **kwargs)
    return block.run(self, args, kwargs)


_patched_forward.__name__ = "forward"  # pickled as getattr(model, "forward"): the loaded copy runs plainly

_ACTIVE: weakref.WeakKeyDictionary[nn.Module, _Applied] = weakref.WeakKeyDictionary()


class _Applied:
    """The ``with`` block of an ``apply()``: ``model.forward`` runs ``run(model, args, kwargs)`` inside it."""

    def __init__(self, model: nn.Module, run: Callable[[nn.Module, tuple, dict], Any], tool: str, given: Any) -> None:
        self._model: nn.Module | None = model
        self.run, self._tool, self._given = run, tool, given
        self._state = "new"

    def __enter__(self) -> Any:
        model = self._model
        if self._state != "new" or model is None:
            raise RuntimeError(f"this {self._tool} block has already run; call apply() again for another block")
        self._state = "running"
        if "forward" in model.__dict__:
            self._state, self._model = "done", None
            raise RuntimeError(f"{self._tool}: the model already has a patched forward (a block of another tool is "
                               "running around it); end that block first")
        model.forward = types.MethodType(_patched_forward, model)
        _ACTIVE[model] = self
        return self._given

    def __exit__(self, *exc: object) -> None:
        model, self._model, self._given, self._state = self._model, None, None, "done"
        if model is not None and _ACTIVE.get(model) is self:
            del _ACTIVE[model]
            del model.forward


class SequentialCheckpoint:
    """``checkpoint_sequential(model, segments, x, use_reentrant=False)`` as a plan: ``apply()`` is a ``with`` block
    in which ``model(x)`` runs that way. ``model`` is an ``nn.Sequential`` called with one input."""

    def __init__(self, model: nn.Module, segments: int) -> None:
        if not isinstance(model, nn.Sequential):
            raise TypeError(f"checkpoint_sequential runs an nn.Sequential, got {type(model).__name__}")
        if isinstance(segments, bool) or not isinstance(segments, int) or not 1 <= segments <= len(model):
            raise ValueError(f"segments must be an int from 1 to len(model) = {len(model)}, got {segments!r}")
        self.model, self.segments = model, segments

    @property
    def recomputed(self) -> int:
        """How many of the model's first children backward runs again (all segments but the last)."""
        return (self.segments - 1) * (len(self.model) // self.segments)

    def __str__(self) -> str:
        return f"checkpoint_sequential(model, {self.segments}, x, use_reentrant=False)"

    def apply(self) -> AbstractContextManager[SequentialCheckpoint]:
        """Inside the block ``model(x)`` is ``checkpoint_sequential(model, segments, x, use_reentrant=False)``."""
        return _Applied(self.model, self._run, "SequentialCheckpoint.apply", self)

    def _run(self, model: nn.Module, args: tuple, kwargs: dict) -> Any:
        if len(args) != 1 or kwargs:
            raise TypeError(f"checkpoint_sequential passes one input through the children; this call has "
                            f"{len(args)} positional and {len(kwargs)} keyword arguments")
        return torch.utils.checkpoint.checkpoint_sequential(model, self.segments, args[0], use_reentrant=False)


class CheckpointEach:
    """``torch.utils.checkpoint.checkpoint(block, ..., use_reentrant=False)`` around each named block, as a plan:
    ``apply()`` is :func:`hooklab.checkpoint_modules` (a ``with`` block; the blocks' ``forward`` is wrapped inside it
    and restored on exit). Every block keeps its inputs and is recomputed once in backward.

    >>> import torch
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8))
    >>> option = CheckpointEach(model, ["0", "2"])
    >>> print(option)
    checkpoint(block, use_reentrant=False) around each of the 2 blocks
    >>> with option.apply():
    ...     loss = model(torch.randn(4, 8)).sum()
    >>> loss.backward()
    >>> "forward" in model[0].__dict__    # restored on exit
    False
    """

    def __init__(self, model: nn.Module, blocks: Iterable[str]) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"CheckpointEach takes an nn.Module, got {type(model).__name__}")
        self.model, self.blocks = model, list(blocks)

    def __str__(self) -> str:
        return f"checkpoint(block, use_reentrant=False) around each of the {len(self.blocks)} blocks"

    def apply(self) -> AbstractContextManager[Any]:
        """Inside the block each named block runs under ``torch.utils.checkpoint.checkpoint``."""
        from ..checkpoint import checkpoint_modules

        return checkpoint_modules(self.model, self.blocks)


class OffloadStep:
    """Every tensor the step saves for backward, from ``min_bytes`` up, moved out of memory while the ``with`` block
    runs: :class:`hooklab.SaveOnDisk` on a CPU, :class:`hooklab.OverlappedOffload` (pinned CPU memory) on a GPU. It
    wraps what the block runs, the loss included, so it also reaches tensors saved outside every block (a language
    model's log-softmax over its vocabulary), which no per-block plan can. The model's parameters and ``keep`` (a
    tensor, or a list of tensors alive anyway; ``[]`` for none) are never moved. ``device``: the model's device
    (``"cuda"`` is refused where CUDA is not available).

    >>> import torch
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.Tanh())
    >>> option = OffloadStep(model, keep=[], device=torch.device("cpu"), min_bytes=1024)
    >>> with option.apply() as saving:
    ...     loss = model(torch.randn(32, 64)).log_softmax(-1).sum()
    >>> loss.backward()
    >>> saving.stats.offloaded > 0
    True
    """

    def __init__(self, model: nn.Module, keep: Iterable[Any], device: torch.device | str, min_bytes: int) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"OffloadStep takes an nn.Module, got {type(model).__name__}")
        if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 0:
            raise ValueError(f"min_bytes must be an int >= 0 (a size in bytes), got {min_bytes!r}")
        if isinstance(keep, torch.Tensor):
            keep = [keep]  # one tensor, as MemoryPlanner takes it (not iterated row by row)
        elif not isinstance(keep, Iterable):
            raise TypeError(f"keep takes the tensors that are alive anyway (the batch, the labels), e.g. keep=[x, y]; "
                            f"[] for none; got {keep!r}")
        device = torch.device(device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("OffloadStep: device 'cuda' was given, but CUDA is not available on this machine: pass "
                             "the model's device (torch.device('cpu') offloads to disk)")
        self.model, self.keep, self.device, self.min_bytes = model, list(keep), device, min_bytes

    def __str__(self) -> str:
        where = "pinned CPU memory (OverlappedOffload)" if self.device.type == "cuda" else "disk (SaveOnDisk)"
        return f"every saved tensor of the step from {self.min_bytes} bytes up to {where}"

    def apply(self) -> AbstractContextManager[Any]:
        """The saved-tensor context around the step."""
        from ..offload import OverlappedOffload, SaveOnDisk

        keep = [self.model, *self.keep]
        if self.device.type == "cuda":
            return OverlappedOffload(min_bytes=self.min_bytes, keep=keep)
        return SaveOnDisk(min_bytes=self.min_bytes, keep=keep)


class CheckpointAndOffload:
    """Each named block checkpointed (:class:`CheckpointEach`) and what the checkpoints still keep moved out of memory
    (:class:`OffloadStep`'s context): each block's inputs, and what is saved outside the blocks. PyTorch's
    non-reentrant checkpoint saves a block's inputs as saved tensors before its own hooks start, so the outer context
    is given them. On a GPU that context is :class:`hooklab.OverlappedOffload` with the last ``keep_last`` tensors
    left on the device (the last blocks' inputs, which backward reads first: copying them out and back could not
    overlap with anything); on a CPU, :class:`hooklab.SaveOnDisk`. The source's ResNet-152 case: checkpointing alone
    keeps the blocks' inputs (15 GiB of 42 at batch 256); moved out, what stays is one block's recompute at a time.

    >>> import torch
    >>> from torch import nn
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64))
    >>> option = CheckpointAndOffload(model, ["0", "2"], keep=[], device=torch.device("cpu"), min_bytes=1024)
    >>> print(option)
    checkpoint each of the 2 blocks, their inputs from 1024 bytes up to disk (SaveOnDisk)
    >>> with option.apply():
    ...     loss = model(torch.randn(32, 64)).sum()
    >>> loss.backward()
    >>> "forward" in model[0].__dict__    # restored on exit
    False
    """

    def __init__(self, model: nn.Module, blocks: Iterable[str], keep: Iterable[Any], device: torch.device | str,
                 min_bytes: int, *, keep_last: int = 2) -> None:
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
            raise ValueError(f"keep_last must be an int >= 0 (tensors left on the device), got {keep_last!r}")
        self.checkpoints = CheckpointEach(model, blocks)
        self.offload = OffloadStep(model, keep, device, min_bytes)
        self.model, self.blocks, self.keep_last = model, self.checkpoints.blocks, keep_last

    def __str__(self) -> str:
        where = (f"pinned CPU memory (OverlappedOffload, the last {self.keep_last} kept)"
                 if self.offload.device.type == "cuda" else "disk (SaveOnDisk)")
        return (f"checkpoint each of the {len(self.blocks)} blocks, their inputs from {self.offload.min_bytes} bytes "
                f"up to {where}")

    @contextlib.contextmanager
    def apply(self) -> Iterator[Any]:
        """Inside the block each named block is checkpointed and the saved tensors go out of memory."""
        from ..offload import OverlappedOffload

        with contextlib.ExitStack() as stack:
            stack.enter_context(self.checkpoints.apply())
            if self.offload.device.type == "cuda":
                keep = [self.model, *self.offload.keep]
                saving = stack.enter_context(OverlappedOffload(min_bytes=self.offload.min_bytes, keep=keep,
                                                               keep_last=self.keep_last))
            else:
                saving = stack.enter_context(self.offload.apply())
            yield saving


_TAGS = itertools.count()


def _fresh_forward(tag: str) -> Callable[..., Any]:
    """A function that runs a module's class ``forward``, with a code object of its own: dynamo caches compiled code
    per code object and does not guard on the partitioner's settings, so each budget needs its own."""
    def forward(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return type(module).forward(module, *args, **kwargs)
    forward.__code__ = forward.__code__.replace(co_name=f"forward_{tag}")
    return forward


class CompiledBudget:
    """``torch.compile(model, backend=backend)`` compiled under ``activation_memory_budget = fraction`` (the
    partitioner keeps at most about that share of the activations and recomputes the rest): ``apply()`` is a
    ``with`` block in which ``model(...)`` runs the compiled code. The first call compiles (with the budget set;
    any later recompilation too). It uses the model's eager kernels only with ``backend="aot_eager"``. ``backend``
    is a backend name or function (anything else is refused here, not at the first call)."""

    def __init__(self, model: nn.Module, backend: str | Callable[..., Any], fraction: float) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"CompiledBudget takes an nn.Module, got {type(model).__name__}")
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ValueError(f"fraction must be a number in [0, 1] (activation_memory_budget), got {fraction!r}")
        if not (isinstance(backend, str) and backend) and not callable(backend):
            raise TypeError(f"backend must be a torch.compile backend: a name such as 'inductor' or 'aot_eager', or a "
                            f"backend function; got {backend!r}")
        self.model, self.backend, self.fraction = model, backend, float(fraction)
        tag = backend if isinstance(backend, str) else getattr(backend, "__name__", "backend")
        self._compiled = torch.compile(_fresh_forward(f"{tag}_{next(_TAGS)}"), backend=backend)

    def __str__(self) -> str:
        return f"torch.compile(model, backend={self.backend!r}) with activation_memory_budget={self.fraction:.3g}"

    def apply(self) -> AbstractContextManager[CompiledBudget]:
        """Inside the block ``model(...)`` runs the compiled model (compiled with the budget on its first call)."""
        return _Applied(self.model, self._run, "CompiledBudget.apply", self)

    def _run(self, model: nn.Module, args: tuple, kwargs: dict) -> Any:
        from torch._functorch import config as functorch_config

        with functorch_config.patch(activation_memory_budget=self.fraction):
            return self._compiled(model, *args, **kwargs)


def graph_saved_bytes(loss: torch.Tensor, alive: set[int]) -> int:
    """Bytes of the storages the autograd graph from ``loss`` saves (each once), leaving out the storages whose
    ``data_ptr()`` is in ``alive``: what a compiled graph holds (its ops run below :class:`hooklab.MemoryMeter`).
    Reading an eager node's ``_saved_*`` attribute would unpack a saved-tensor hook: use it on graphs made without
    saved-tensor hooks."""
    seen_nodes, storages = set(), {}
    stack = [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        values: list[Any] = list(getattr(node, "saved_tensors", ()) or ())
        values += [getattr(node, a) for a in dir(node) if a.startswith("_saved_")]
        for value in values:
            for t in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in alive:
                    storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        stack.extend(fn for fn, _ in node.next_functions)
    return sum(storages.values())
