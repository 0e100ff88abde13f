"""Offload saved tensors to CPU memory with the copies overlapped with compute, and prefetched in backward.

:class:`OverlappedOffload` is :class:`hooklab.SaveOnCpu` with the copies taken off the critical path::

    with OverlappedOffload(min_bytes=1 << 20, keep=[model, x], keep_last=2):
        loss = model(x).sum()
    loss.backward()

On a GPU each saved tensor is copied to pinned CPU memory on a side CUDA stream while the next ops
run; in backward the tensors are copied back on the side stream ``prefetch`` tensors ahead (in the
reverse order of packing, which is the order backward needs them in for a chain of layers). Events
order everything, and none of them makes the host wait:

* a tensor is never read before its copy is done: the compute stream waits for the copy-back's
  event before the op that reads it (and the copy-back waits for the compute stream's work queued
  before it, so its destination is ready);
* a buffer is never reused before its copy has read it: an activation's GPU memory is released
  only after the compute stream has been made to wait for its copy to the CPU (at most
  ``in_flight`` copies are in flight in forward), and a pinned CPU buffer lives as long as the graph
  holds it (PyTorch's pinned-memory allocator also records the copies that read it);
* the last ``keep_last`` tensors of the forward pass stay on the GPU (backward needs them first, so
  copying them back could not overlap with anything); their copies to the CPU are dropped;
* what is on the GPU at once is bounded: in forward, ``in_flight`` originals (or ``keep_last``) wait for their
  copies, and leaving the ``with`` block lets go of all but the last ``keep_last`` (a plan that offloads block by
  block holds nothing of an offloaded block after it); in backward, at most ``prefetch`` tensors are copied back
  ahead of the op that reads them. Backward does not read saved tensors in exactly the reverse order of packing (a
  residual network's shortcut and main branch interleave), and a prefetch that skipped to older tensors whenever the
  order jumped would bring back most of the forward's tensors long before they are needed: here a tensor copied back
  ahead and not yet read counts against ``prefetch`` until it is read.

PyTorch's in-place error is kept: a saved tensor changed in place while its copy may still be in
flight (or while it is kept on the GPU) raises PyTorch's "modified by an inplace operation" error
when backward reads it; one changed after its copy is done cannot change the copy (backward gets
the value at save time, as with every copying helper).

Without CUDA (or for tensors already on the CPU) nothing moves: it does exactly what
:class:`hooklab.SaveOnCpu` does (the tensor is kept where it is, gradients bit-for-bit unchanged).

How it compares with torchtune's ``OffloadActivations`` (``torchtune/training/_activation_offloading.py``):
both use one side stream, pinned buffers, a bounded forward stash (``max_fwd_stash_size`` there,
``in_flight`` here), the GPU tensors still in the stash at the start of backward used directly, and
copies back that the compute stream waits for. torchtune decides when a copied-back tensor may be
freed with autograd-node hooks and ``torch._C._current_autograd_node()`` and copies back on demand
(one node at a time); it does not prefetch ahead, does not deduplicate a storage saved by several ops
(a ReLU output saved twice is copied twice), does not skip parameter views (only ``Parameter`` /
``Buffer`` instances), does not check versions (an in-place change during the copy is a silent race),
and keeps state across steps (``tracker``, a running tensor id). Here: prefetch of the next
``prefetch`` tensors, one copy per storage, parameters and ``keep`` left in place, version checks,
and the ``saved_tensors_hooks`` lifecycle of the other offloading helpers (one context per forward;
nothing grows from step to step). Not done here (torchtune neither): choosing *which* tensors to
offload by cost (see :mod:`hooklab.planner`), several devices' streams at once beyond one side stream
per device, and CPU-memory pressure checks (torchtune warns above 60 % of RAM).

>>> import torch
>>> x = torch.randn(100, requires_grad=True)
>>> with OverlappedOffload(keep_last=1) as off:
...     y = (x.exp() * 2).sum()       # on the CPU nothing moves, as with SaveOnCpu
>>> y.backward()
>>> off.stats.offloaded, off.stats.kept
(0, 1)
"""
from __future__ import annotations

import bisect
import collections
import functools
import threading
import weakref
from typing import Any

import torch

from .._torch_internals import version
from ._base import Keep
from .cpu import SaveOnCpu

__all__ = ["CudaStreams", "OverlappedOffload"]


class _Entry:
    """One offloaded saved tensor: its CPU copy, the events of its copies, and where it is now."""

    __slots__ = ("index", "device", "shape", "host", "d2h", "original", "saved_version", "modified", "loaded", "h2d",
                 "compute", "__weakref__")

    def __init__(self, index: int, device: torch.device, shape: list[int], saved_version: int | None) -> None:
        self.index, self.device, self.shape, self.saved_version = index, device, shape, saved_version
        self.host: torch.Tensor | None = None
        self.d2h: Any = None          # event: the copy to the CPU is done
        self.original: torch.Tensor | None = None   # the device tensor, while it is still held
        self.modified: int | None = None            # the version seen when the original was let go
        self.loaded: torch.Tensor | None = None     # a copy back on the device (prefetched)
        self.h2d: Any = None          # event: the copy back is done
        self.compute: Any = None      # the compute stream the tensor was made on


def _forget(entries: dict[int, Any], index: int, _ref: object) -> None:
    """The weakref callback of an entry: drop its slot once the graph freed it."""
    entries.pop(index, None)


def _inplace_error(entry: _Entry, now: int | None) -> RuntimeError:
    return RuntimeError(
        f"one of the variables needed for gradient computation has been modified by an inplace operation: "
        f"[{entry.device.type} tensor {entry.shape}] is at version {now}; expected version {entry.saved_version} "
        "instead. (hooklab.OverlappedOffload checks saved tensors' versions as PyTorch does: do not change "
        "a tensor in place after an op saved it, or clone it first.)")


class CudaStreams:
    """The device side of :class:`OverlappedOffload`: CUDA's streams and events, in one place.

    A stream here has ``wait_stream``, ``wait_event`` and ``record_event``; an event is what ``record_event``
    returns. The CPU tests put a stand-in with the same methods in its place, which logs what waits for what and
    treats CPU tensors as the device's, so that the ordering and the memory bound are checked without a GPU.
    """

    def handles(self, device: torch.device) -> bool:
        """Whether tensors on ``device`` are copied on a side stream (CUDA devices)."""
        return device.type == "cuda"

    def current(self, device: torch.device) -> Any:
        """The stream ops on ``device`` are queued on now (the compute stream)."""
        return torch.cuda.current_stream(device)

    def new_side(self, device: torch.device) -> Any:
        """A new stream on ``device`` for the copies."""
        return torch.cuda.Stream(device=device)

    def on(self, stream: Any) -> Any:
        """A ``with`` block in which ops are queued on ``stream``."""
        return torch.cuda.stream(stream)

    def record_stream(self, tensor: torch.Tensor, stream: Any) -> None:
        """Tell the caching allocator that ``stream`` uses ``tensor`` (its memory waits for that stream)."""
        tensor.record_stream(stream)


_CUDA = CudaStreams()


class OverlappedOffload(SaveOnCpu):
    """Like :class:`hooklab.SaveOnCpu`, with copies on a side CUDA stream and prefetch in backward.

    Options (keyword-only): ``min_bytes``, ``keep``, ``include_parameters`` as for the other
    offloading helpers; ``prefetch`` (default 2): how many tensors ahead backward copies back;
    ``keep_last`` (default 0): how many of the last offloaded tensors stay on the GPU for backward;
    ``in_flight`` (default 2): how many copies to the CPU may be pending before the compute stream
    waits for the oldest (and its GPU memory can be freed); ``pin_memory`` (default True).

    ``stats`` counts as for ``SaveOnCpu``; ``copied_back``: tensors copied back to the device,
    ``prefetched`` of them ahead of the op that needed them; ``served_from_device``: unpacks answered
    by a tensor kept on the GPU (``keep_last``).
    """

    def __init__(self, *, min_bytes: int = 0, keep: Keep = (), include_parameters: bool = False,
                 prefetch: int = 2, keep_last: int = 0, in_flight: int = 2, pin_memory: bool = True) -> None:
        for name, value, low in (("prefetch", prefetch, 0), ("keep_last", keep_last, 0), ("in_flight", in_flight, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        super().__init__(min_bytes=min_bytes, pin_memory=pin_memory, keep=keep, include_parameters=include_parameters)
        self.prefetch, self.keep_last, self.in_flight = prefetch, keep_last, in_flight
        self.prefetched = 0
        self.served_from_device = 0
        self.copied_back = 0
        self._entries: dict[int, weakref.ref] = {}
        self._order: list[int] = []             # indices in packing order (for prefetch)
        self._held: collections.deque[_Entry] = collections.deque()  # entries whose original is held
        self._ahead: set[int] = set()          # entries copied back ahead and not read yet (at most ``prefetch``)
        self._next = 0
        self._in_backward = False
        self._side_streams: dict[torch.device, Any] = {}
        self._streams: CudaStreams = _CUDA  # tests put a stand-in here (tests/library/test_overlap.py)
        self._state = threading.RLock()

    def _applies(self, t: torch.Tensor) -> bool:
        return super()._applies(t) and t.layout == torch.strided

    def __exit__(self, *exc: Any) -> None:
        # forward under this context is over: only the last keep_last originals may stay on the device (the compute
        # stream waits for each copy before their memory is reused; the host never waits)
        try:
            with self._state:
                while len(self._held) > self.keep_last:
                    self._let_go(self._held.popleft())
        finally:
            super().__exit__(*exc)

    # -- streams --------------------------------------------------------------------------------
    def _side(self, device: torch.device) -> Any:
        stream = self._side_streams.get(device)
        if stream is None:
            stream = self._side_streams[device] = self._streams.new_side(device)
        return stream

    # -- forward ------------------------------------------------------------------------------
    # the packed value is this class's own _Entry, not SaveOnCpu's: _pack / _unpack only pass it through
    def _encode(self, t: torch.Tensor) -> _Entry:  # type: ignore[override]
        with self._state:
            if self._in_backward:  # a new forward pass after a backward: forget what was consumed
                self._in_backward = False
                self._order = [i for i in self._order if i in self._entries]
            entry = _Entry(self._next, t.device, list(t.shape), version(t))
            self._next += 1
            streams = self._streams
            on_device = streams.handles(t.device)
            pin = self.pin_memory and on_device and torch.cuda.is_available()
            entry.host = torch.empty_like(t, device="cpu", pin_memory=pin)  # t's strides: see SaveOnCpu._encode
            if on_device:
                entry.compute = streams.current(t.device)
                side = self._side(t.device)
                side.wait_stream(entry.compute)  # t is computed before the copy reads it
                with streams.on(side):
                    entry.host.copy_(t, non_blocking=pin)
                    entry.d2h = side.record_event()
            else:
                entry.host.copy_(t)
            entry.original = t
            entries = self._entries
            entries[entry.index] = weakref.ref(entry, functools.partial(_forget, entries, entry.index))
            self._order.append(entry.index)
            self._held.append(entry)
            while len(self._held) > max(self.in_flight, self.keep_last):
                self._let_go(self._held.popleft())
        return entry

    def _let_go(self, entry: _Entry) -> None:
        """Drop the device original once the compute stream waits for its copy; note an in-place change."""
        original = entry.original
        if original is None:
            return
        if entry.d2h is not None:
            entry.compute.wait_event(entry.d2h)  # its memory is reused only after the copy has read it
        now = version(original)
        if now != entry.saved_version:  # changed while the copy may have been in flight
            entry.modified = now
        entry.original = None

    # -- backward -----------------------------------------------------------------------------
    def _start_backward(self) -> None:
        self._in_backward = True
        while len(self._held) > self.keep_last:
            self._let_go(self._held.popleft())
        for entry in self._held:  # the last keep_last: used from the device, their copies are not needed
            if entry.d2h is not None:
                entry.compute.wait_event(entry.d2h)  # the copy has read the tensor before it may ever be freed
            entry.host = None
        self._held.clear()  # they stay held by their entries (the graph), not by the context

    def _load(self, entry: _Entry) -> None:
        """Start copying ``entry`` back to its device (on the side stream), unless that is under way."""
        if entry.loaded is not None or entry.original is not None or entry.host is None:
            return
        streams = self._streams
        if streams.handles(entry.device):
            compute = streams.current(entry.device)
            side = self._side(entry.device)
            dest = torch.empty_like(entry.host, device=entry.device)
            side.wait_stream(compute)  # dest's memory may have been in use by queued compute work
            with streams.on(side):
                dest.copy_(entry.host, non_blocking=True)
                entry.h2d = side.record_event()
            streams.record_stream(dest, side)  # freed unused (backward failed): not reused before the copy ends
            entry.loaded = dest
        else:
            entry.loaded = entry.host.to(entry.device)
        self.copied_back += 1

    def _decode(self, entry: _Entry) -> torch.Tensor:  # type: ignore[override]  # see _encode
        with self._state:
            if not self._in_backward:
                self._start_backward()
            if entry.modified is not None:
                raise _inplace_error(entry, entry.modified)
            if entry.original is not None:  # kept on the device (keep_last)
                now = version(entry.original)
                if now != entry.saved_version:
                    raise _inplace_error(entry, now)
                self.served_from_device += 1
                return entry.original
            self._load(entry)
            self._ahead.discard(entry.index)  # read now: no longer ahead
            self._ahead = {i for i in self._ahead if i in self._entries}  # freed with the graph unread
            # prefetch: the next tensors in reverse order of packing, while fewer than `prefetch` are ahead
            pos = bisect.bisect_left(self._order, entry.index)
            for index in reversed(self._order[:pos]):
                if len(self._ahead) >= self.prefetch:
                    break
                ref = self._entries.get(index)
                other = ref() if ref is not None else None
                if other is None or other.loaded is not None or other.original is not None:
                    continue
                self._load(other)
                self._ahead.add(index)
                self.prefetched += 1
            # the copy back stays with the entry until the graph frees it (a storage saved by two ops
            # is unpacked twice; with retain_graph=True it stays, as the plain graph keeps its tensors)
            tensor, event = entry.loaded, entry.h2d
            assert tensor is not None  # _load gave it its copy
        if event is not None:
            self._streams.current(entry.device).wait_event(event)
        return tensor

    def _stored_nbytes(self, entry: _Entry) -> int:  # type: ignore[override]  # see _encode
        host = entry.host
        assert host is not None  # _encode made it
        return host.numel() * host.element_size()
