"""Account for the memory autograd keeps for backward.

:class:`SavedTensorLedger` records every tensor saved for backward inside a ``with`` block
(op, shape, dtype, bytes, module), counting a storage once when several saved tensors share
it and keeping parameters apart from activations::

    with SavedTensorLedger(model) as ledger:
        loss = model(x).sum()
    ledger.label_ops(loss)        # optional: name the op that saved each tensor
    print(ledger)                 # per-module table (ledger.records_table(): one row per tensor)
    loss.backward()

What a ledger cannot see (tensors recomputed by activation checkpointing, or loaded back during backward),
:class:`~hooklab.MemoryMeter` measures op by op.
"""
from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks

from . import plot
from ._saved import Finalizer, Kept, OtherThreads
from ._text import format_bytes, format_table
from ._torch_internals import (
    StorageWeakRef,
    is_parameter_like,
    saved_tensor_attrs,
    storage_key,
    top_saved_tensors_hooks,
    tree_flatten,
)
from .scope import Recorder

__all__ = ["ModuleRow", "SavedRecord", "SavedTensorLedger"]

UNLABELED = "?"
_NO_RECOMPUTE = "hooklab.SavedTensorLedger.label_ops reads saved tensors without recomputing checkpoints"


@dataclass
class SavedRecord:
    """One tensor saved for backward.

    ``nbytes`` is the tensor's own size; ``storage_bytes`` the size of the storage it views,
    which is what stays in memory. ``shared`` is True when an earlier record already holds
    the same storage (then it adds nothing to the totals).
    """

    index: int
    op: str
    module: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    storage_bytes: int
    kind: str  # "activation", "parameter" (parameters and buffers) or "input" (the model's inputs)
    shared: bool


class _Saved(Kept):
    """What the ledger's pack hook stores in the graph instead of the tensor itself."""

    __slots__ = ("index",)

    def __init__(self, tensor: torch.Tensor, index: int) -> None:
        super().__init__(tensor)
        self.index = index


class ModuleRow(NamedTuple):
    """One row of :meth:`SavedTensorLedger.by_module`."""

    module: str
    saved: int  # tensors saved while the module ran
    activation_bytes: int
    parameter_and_input_bytes: int


class SavedTensorLedger(Recorder):
    """Record every tensor saved for backward while the ``with`` block runs.

    Pass the model to attribute each record to the innermost module running when the tensor
    was saved (``"(top)"`` = code outside any submodule) and to sort what is saved into
    ``"parameter"`` (the model's parameters and buffers, e.g. batch norm's running stats),
    ``"input"`` (tensors passed to the model's forward) and ``"activation"`` (everything the
    forward pass created). Parameters and inputs are alive anyway; activations are the memory
    that training costs on top of inference. Without a model, a leaf tensor that requires grad
    (or a view of one) counts as a parameter and everything else as an activation.

    How the op is found: a pack hook is not told which op is saving. :meth:`label_ops` walks
    the graph from the outputs after forward and reads every ``grad_fn._saved_*`` attribute;
    each read runs the ledger's unpack hook, which says which record it was. Tensors saved
    by a node the walk cannot reach (a graph already freed, another output) stay ``"?"``.

    Limits: only the innermost ``saved_tensors_hooks`` context runs, so the ledger sees
    nothing saved inside an inner context (``save_on_cpu``, activation checkpointing, the
    offloading helpers). Use :meth:`note` to add tensors kept alive some other way (the
    inputs a checkpointed block holds), or :class:`MemoryMeter` to measure everything.
    Saved-tensor hooks are thread-local: a forward run in another thread is not recorded, and the
    ledger warns at the end of its block when a module ran in another thread meanwhile (enter it in
    the thread that runs the forward). The ledger lets go of the model when its block ends.

    The pack hook stores the tensor detached (returning the tensor itself would make a
    reference cycle through its ``grad_fn`` when an op saves its own output), so memory and
    gradients are exactly as without the ledger; it also checks the tensor's version in backward,
    so a saved tensor modified in place raises PyTorch's "modified by an inplace operation" error
    as it does without the ledger. ``live_bytes`` / ``peak_bytes`` follow the
    activation bytes the graph still holds: they drop as backward frees each saved tensor.

    >>> x = torch.ones(1000, requires_grad=True)
    >>> with SavedTensorLedger() as ledger:
    ...     h = x.exp()
    ...     y = (h * h).sum()        # h saved by exp (its output) and twice by mul
    >>> len(ledger.records), ledger.activation_bytes   # 3 records, one storage of 4000 bytes counted once
    (3, 4000)
    >>> ledger.label_ops(y), [r.op for r in ledger.records]
    (3, ['ExpBackward0', 'MulBackward0', 'MulBackward0'])

    With a model, records are attributed to modules, and parameters and inputs are kept apart
    (``Tanh`` saves its output, which is also what the last layer saves: counted once):

    >>> _ = torch.manual_seed(0); model = nn.Sequential(nn.Linear(10, 20), nn.Tanh(), nn.Linear(20, 1))
    >>> with SavedTensorLedger(model) as ledger:
    ...     loss = model(torch.ones(4, 10)).sum()
    >>> print(ledger.table())
    module  saved  activation  param/input
    0           1         0 B        160 B
    1           1       320 B          0 B
    2           2         0 B         80 B
    total       4       320 B        240 B
    """

    _model_refs = ("model",)
    _sees_recomputation = True  # its module hooks only say which module a saved tensor belongs to

    def __init__(self, model: nn.Module | None = None) -> None:
        super().__init__()
        if model is not None and not isinstance(model, nn.Module):
            raise TypeError(f"SavedTensorLedger takes an nn.Module or None, got {type(model).__name__}")
        self.model = model  # let go of when the block ends (the records stay readable)
        self._records: list[SavedRecord] = []  # read through .records
        self.live_bytes = 0
        self.peak_bytes = 0
        self._stack: list[str] = []
        self._hooks = saved_tensors_hooks(self._pack, self._unpack)
        self._hooks_entered = False
        self._param_keys: set[int] = set()
        self._input_keys: set[int] = set()
        self._live: dict[int, int] = {}  # storage key -> number of live handles
        self._held: set[int] = set()  # ids of the live handles (each released once)
        self._key_bytes: dict[int, int] = {}
        self._key_refs: dict[int, StorageWeakRef] = {}
        self._prune_at = 64  # drop the entries of dead storages when _key_refs reaches this size
        self._probe: list[int] | None = None
        self._threads = OtherThreads()

    # -- lifecycle (hooklab.scope.Recorder) ----------------------------------------------
    def _register(self) -> None:
        self._threads = OtherThreads()  # the thread that enters is the one whose saved tensors are seen
        if self.model is not None:
            self._param_keys = {storage_key(p) for p in (*self.model.parameters(), *self.model.buffers())}
            self._on(self.model, self._note_inputs, kind="forward_pre", with_kwargs=True)
            for name, mod in self.model.named_modules():
                enter, leave = self._module_hooks(name)
                self._on(mod, enter, kind="forward_pre")
                self._on(mod, leave, always_call=True)
        else:  # no module hooks to notice a forward in another thread: one global pre-hook does
            self.scope.add(self._threads.global_hook())
        self._hooks.__enter__()
        self._hooks_entered = True

    def _unregister(self) -> None:
        if not self._hooks_entered:  # registering the module hooks failed before the context was entered
            self.scope.remove()
            return
        self._hooks_entered = False
        top = top_saved_tensors_hooks()
        if top is not None and top[0] != self._pack:
            warnings.warn("SavedTensorLedger exited while a saved-tensor hooks context entered inside it is still "
                          "active: exit them in reverse order (nested `with` blocks do). The ledger's exit removes "
                          "that context's hooks instead of its own, so each recorded the other's tensors.",
                          RuntimeWarning, stacklevel=4)
        try:
            self._hooks.__exit__(None, None, None)
        finally:
            self.scope.remove()
            self._stack.clear()
        if not self._block_raised:
            self._threads.warn("SavedTensorLedger", stacklevel=5)

    def _module_hooks(self, name: str) -> tuple[Callable[..., None], Callable[..., None]]:
        def pre_hook(mod: nn.Module, args: Any) -> None:
            if self._threads.here():
                self._stack.append(name)

        def post_hook(mod: nn.Module, args: Any, output: Any) -> None:
            if threading.get_ident() == self._threads.home and self._stack:
                self._stack.pop()

        return pre_hook, post_hook

    def _note_inputs(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        if threading.get_ident() != self._threads.home:
            return
        self._input_keys.update(storage_key(t) for t in tree_flatten((args, kwargs))
                                if isinstance(t, torch.Tensor))

    # -- hooks -------------------------------------------------------------------------
    def _kind(self, t: torch.Tensor, key: int) -> str:
        if key in self._param_keys:
            return "parameter"
        if key in self._input_keys:
            return "input"
        # also with a model: FSDP2 saves the all-gathered copy of a sharded parameter, which is
        # not among model.parameters() but is a leaf that requires grad (or a view of one)
        return "parameter" if is_parameter_like(t) else "activation"

    def _forget_dead_storages(self) -> None:
        """Drop the entries of storages that died (bounded memory however many steps the block runs)."""
        for key in [k for k, ref in self._key_refs.items() if ref.expired() and k not in self._live]:
            del self._key_refs[key], self._key_bytes[key]
        self._prune_at = max(64, 2 * len(self._key_refs))

    def _add(self, t: torch.Tensor, op: str, module: str | None) -> SavedRecord:
        key = storage_key(t)
        storage_bytes = t.untyped_storage().nbytes()
        kind = self._kind(t, key)
        ref = self._key_refs.get(key)
        shared = ref is not None and not ref.expired()
        if not shared:
            if len(self._key_refs) >= self._prune_at:
                self._forget_dead_storages()
            self._key_refs[key] = StorageWeakRef(t.untyped_storage())
            self._key_bytes[key] = storage_bytes
        record = SavedRecord(
            index=len(self._records), op=op,
            module=self._stack[-1] if module is None and self._stack else (module or ""),
            shape=tuple(t.shape), dtype=str(t.dtype).replace("torch.", ""),
            nbytes=t.numel() * t.element_size(), storage_bytes=storage_bytes, kind=kind, shared=shared,
        )
        self._records.append(record)
        return record

    def _hold(self, key: int, kind: str) -> None:
        if kind != "activation":
            return
        self._live[key] = self._live.get(key, 0) + 1
        if self._live[key] == 1:
            self.live_bytes += self._key_bytes[key]
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def _release_storage(self, key: int, token: int) -> None:
        if token not in self._held:  # already released (a finalizer run again after an interrupt)
            return
        self._held.discard(token)
        self._live[key] -= 1
        if self._live[key] == 0:
            del self._live[key]
            self.live_bytes -= self._key_bytes[key]

    def _pack(self, t: torch.Tensor) -> _Saved:
        if t.numel() == 0:
            # torch < 2.12's checkpoint(use_reentrant=False) saves an empty placeholder: no bytes, no record
            return _Saved(t, -1)
        record = self._add(t, UNLABELED, None)
        key = storage_key(t)
        handle = _Saved(t, record.index)
        self._hold(key, record.kind)
        if record.kind == "activation":
            self._held.add(id(handle))
            Finalizer(handle, self._release_storage, key, id(handle))  # a Ctrl-C that lands in it is delivered again
        return handle

    def _unpack(self, handle: _Saved) -> torch.Tensor:
        if self._probe is not None and handle.index >= 0:
            self._probe.append(handle.index)
        return handle.get("SavedTensorLedger")

    # -- after forward -------------------------------------------------------------------
    def note(self, tensor: torch.Tensor, op: str = "noted", module: str = "") -> SavedRecord:
        """Count ``tensor`` as kept for backward by other means (e.g. a checkpointed block's input).

        Its bytes count in the totals (once per storage) but not in ``live_bytes``.
        """
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"note() takes a tensor, got {type(tensor).__name__}")
        return self._add(tensor.detach(), op, module)

    def label_ops(self, *outputs: torch.Tensor) -> int:
        """Name the op of each record by walking the graph behind ``outputs``; return how many got a name.

        Call it after forward and before backward (backward frees the saved tensors). Reading a
        saved tensor of a checkpointed region would normally recompute the region; the walk
        forbids that (``disable_saved_tensors_hooks``), and the inputs such a region keeps are
        labelled ``"checkpoint input"`` instead.
        """
        if not outputs:
            raise ValueError("label_ops needs the output tensor(s) of the recorded forward, e.g. label_ops(loss)")
        roots: list[torch.autograd.graph.Node | None] = []
        for out in outputs:
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"label_ops takes tensors, got {type(out).__name__}")
            if out.grad_fn is None:
                raise ValueError("an output has no grad_fn: it was not computed from tensors that require grad "
                                 "(or the graph was built under torch.no_grad())")
            roots.append(out.grad_fn)
        # keep the visited nodes alive: on torch < 2.13 a Node's Python wrapper dies when it is dropped
        # and the next wrapper may reuse its id(), so a set of ids would silently skip real nodes
        seen: dict[int, Any] = {}
        labelled = 0
        stack = list(roots)
        with torch.autograd.graph.disable_saved_tensors_hooks(_NO_RECOMPUTE):
            while stack:
                node = stack.pop()
                if node is None or id(node) in seen:
                    continue
                seen[id(node)] = node
                labelled += self._label_node(node)
                stack.extend(fn for fn, _ in node.next_functions)
        return labelled

    def _label_node(self, node: Any) -> int:
        count = 0
        for attr in saved_tensor_attrs(node):
            self._probe = []
            op = node.name()
            try:
                getattr(node, attr)
            except RuntimeError as exc:
                # a checkpointed region unpacks its inputs, then tries to recompute (refused);
                # anything else (e.g. already freed by backward) names nothing
                op = "checkpoint input" if _NO_RECOMPUTE in str(exc) else ""
            finally:
                hits, self._probe = self._probe, None
            for index in hits:
                if op and self._records[index].op == UNLABELED:
                    self._records[index].op = op
                    count += 1
        return count

    # -- reports -------------------------------------------------------------------------
    @property
    def records(self) -> list[SavedRecord]:
        """One :class:`SavedRecord` per tensor saved for backward inside the block, in the order they were saved."""
        self._check_used()
        return self._records

    @property
    def input_bytes(self) -> int:
        """Bytes of the model's inputs saved (alive anyway while the caller holds them)."""
        return self._unique_bytes("input")

    def _unique_bytes(self, kind: str) -> int:
        return sum(r.storage_bytes for r in self._records if r.kind == kind and not r.shared)

    @property
    def activation_bytes(self) -> int:
        """Bytes of activations saved (each storage counted once)."""
        return self._unique_bytes("activation")

    @property
    def parameter_bytes(self) -> int:
        """Bytes of parameters saved (they live on anyway; saving them costs nothing extra)."""
        return self._unique_bytes("parameter")

    def by_module(self) -> list[ModuleRow]:
        """One :class:`ModuleRow` per module, in the order they first saved a tensor."""
        self._check_used()
        rows: dict[str, list[int]] = {}
        for r in self._records:
            row = rows.setdefault(r.module, [0, 0, 0])
            row[0] += 1
            if not r.shared:
                row[1 if r.kind == "activation" else 2] += r.storage_bytes
        return [ModuleRow(name or "(top)", n, act, other) for name, (n, act, other) in rows.items()]

    def table(self) -> str:
        """The per-module table and the totals, as text (``print(ledger)`` prints it too)."""
        rows = [(m, str(n), format_bytes(a), format_bytes(p)) for m, n, a, p in self.by_module()]
        rows.append(("total", str(len(self._records)), format_bytes(self.activation_bytes),
                     format_bytes(self.parameter_bytes + self.input_bytes)))
        return format_table(("module", "saved", "activation", "param/input"), rows, right=range(1, 4))

    def __str__(self) -> str:
        return self.table()

    def records_table(self, limit: int | None = None) -> str:
        """One row per saved tensor (the first ``limit`` ones), as text; ``(shared)`` marks a storage
        already counted by an earlier record.

        >>> x = torch.ones(1000, requires_grad=True)
        >>> with SavedTensorLedger() as ledger:
        ...     y = x.exp().sum()
        >>> _ = ledger.label_ops(y)
        >>> print(ledger.records_table())
        #  module  op            shape    dtype    kind        bytes
        0  (top)   ExpBackward0  (1000,)  float32  activation  3.9 KiB
        """
        self._check_used()
        rows = [(str(r.index), r.module or "(top)", r.op, str(r.shape), r.dtype, r.kind,
                 format_bytes(r.nbytes) + (" (shared)" if r.shared else "")) for r in self._records[:limit]]
        return format_table(("#", "module", "op", "shape", "dtype", "kind", "bytes"), rows,
                            empty="no saved tensor recorded")

    def plot(self, *, ax: Any = None, top: int = 15) -> Any:
        """Horizontal bar chart of activation bytes per module, the ``top`` largest (:func:`hooklab.plot.saved_bytes`)."""
        return plot.saved_bytes({r.module: r.activation_bytes for r in self.by_module()}, ax=ax, top=top)
