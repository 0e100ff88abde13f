"""Tests of hooklab.offload.overlap.OverlappedOffload on the CPU.

On a CPU-only machine nothing moves (what SaveOnCpu does); to exercise the copy, prefetch and keep-last
bookkeeping here, a subclass offloads CPU tensors too (synchronous copies instead of side-stream ones).
The GPU path (side stream, events, bit-for-bit gradients) is tested in tests/library/test_gpu_overlap.py.
"""
from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

import hooklab
from hooklab._torch_internals import storage_key, top_saved_tensors_hooks
from hooklab.offload.overlap import OverlappedOffload
from test_offload import grads_of  # one training step's gradients under a context

pytestmark = pytest.mark.timeout(120)


class EveryTensor(OverlappedOffload):
    """Offload CPU tensors as well (the CPU stands in for the device: copies, no streams)."""

    def _applies(self, t: torch.Tensor) -> bool:
        return t.layout == torch.strided


def net_and_batch(seed: int = 0):
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64),
                        nn.GELU(), nn.Linear(64, 4))
    return net, torch.randn(8, 16)


def test_on_the_cpu_it_does_what_save_on_cpu_does():
    net, x = net_and_batch()
    plain = grads_of(net, x)
    ctx = OverlappedOffload(keep=[net, x])
    got = grads_of(net, x, ctx)
    reference = hooklab.SaveOnCpu(keep=[net, x])
    grads_of(net, x, reference)
    assert all(torch.equal(a, b) for a, b in zip(plain, got))  # bitwise: nothing moved
    assert ctx.stats == reference.stats and ctx.stats.offloaded == 0 and ctx.stats.kept > 0
    assert ctx.prefetched == ctx.copied_back == ctx.served_from_device == 0


@pytest.mark.parametrize("prefetch,keep_last,in_flight", [(0, 0, 1), (2, 0, 2), (3, 2, 1), (1, 5, 3)])
def test_copies_give_bitwise_equal_gradients(prefetch, keep_last, in_flight):
    net, x = net_and_batch()
    plain = grads_of(net, x)
    ctx = EveryTensor(keep=[net, x], prefetch=prefetch, keep_last=keep_last, in_flight=in_flight)
    got = grads_of(net, x, ctx)
    assert all(torch.equal(a, b) for a, b in zip(plain, got))
    # ReLU's output is also the next Linear's input: one storage, packed once
    assert ctx.stats.reused >= 1
    assert ctx.stats.offloaded_bytes == ctx.stats.stored_bytes > 0
    offloaded = ctx.stats.offloaded
    assert ctx.copied_back == offloaded - min(keep_last, offloaded)  # each copied back once
    assert (ctx.served_from_device > 0) == (keep_last > 0)
    if prefetch and ctx.copied_back > 1:  # something older to prefetch while the newest is read
        assert 0 < ctx.prefetched < ctx.copied_back
    else:
        assert ctx.prefetched == 0


def test_prefetch_follows_the_reverse_order_of_packing():
    a = torch.randn(50, requires_grad=True)
    ctx = EveryTensor(prefetch=1)
    loaded = []
    original = ctx._load

    def spy(entry):
        if entry.loaded is None and entry.original is None:
            loaded.append(entry.index)
        original(entry)

    ctx._load = spy
    with ctx:
        h1 = a.exp()        # saves its output (index 0)
        h2 = h1.sin()       # saves h1's storage again: reused, not a new entry
        h3 = h2.exp()       # saves its output (index 1)
        h4 = h3.cos()       # saves h3's storage: reused
        loss = h4.sum()
    loss.backward()
    # backward reads the newest first; each unpack prefetches the next older one
    assert loaded[0] == 1 and loaded[1] == 0
    torch.testing.assert_close(a.grad, (-(a.exp().sin().exp()).sin() * a.exp().sin().exp()
                                        * a.exp().cos() * a.exp()))


def test_keep_last_answers_from_the_device_without_copying_back():
    x = torch.randn(100, requires_grad=True)
    ctx = EveryTensor(keep_last=10)
    with ctx:
        loss = x.exp().exp().exp().sum()
    loss.backward()
    assert ctx.stats.offloaded == 3 and ctx.served_from_device == 3 and ctx.copied_back == ctx.prefetched == 0


def test_an_inplace_change_while_the_copy_is_in_flight_raises_pytorchs_error():
    x = torch.ones(3, requires_grad=True)
    with EveryTensor(in_flight=4) as ctx:
        y = x.exp()
        y.add_(1)                   # PyTorch raises on this without hooks; so must we
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    assert ctx.stats.offloaded == 1


def test_an_inplace_change_to_a_tensor_kept_on_the_device_raises():
    x = torch.ones(3, requires_grad=True)
    with EveryTensor(keep_last=1, in_flight=1):
        y = x.exp()
    y.mul_(2)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation: \[cpu tensor \[3\]\] is at version 1; "
                                           r"expected version 0"):
        y.sum().backward()


def test_a_change_after_the_copy_is_done_does_not_reach_the_copy():
    x = torch.ones(3, requires_grad=True)
    with EveryTensor(in_flight=1) as ctx:
        y = x.exp()
        z = y.sin()          # saves y again (reused), then a new tensor pushes y's copy out of flight
        w = z.exp()
    assert ctx._entries and all(e().original is None for e in ctx._entries.values() if e() is not None
                                and e().index == 0)
    w.sum().backward()
    torch.testing.assert_close(x.grad, torch.exp(torch.sin(x.exp())) * torch.cos(x.exp()) * x.exp())


def test_nothing_grows_after_backward_and_hooks_are_gone():
    net, x = net_and_batch()
    ctx = EveryTensor(keep=[net, x])
    grads_of(net, x, ctx)
    assert ctx._entries == {}  # every entry died with the graph
    assert top_saved_tensors_hooks() is None


def test_hooks_are_removed_when_the_body_raises():
    net, x = net_and_batch()
    with pytest.raises(ZeroDivisionError):
        with EveryTensor():
            net(x)
            1 / 0
    assert top_saved_tensors_hooks() is None


@pytest.mark.parametrize("option,bad", [("prefetch", -1), ("keep_last", 1.5), ("in_flight", 0), ("prefetch", True)])
def test_bad_options_are_refused(option, bad):
    with pytest.raises(ValueError, match=option):
        OverlappedOffload(**{option: bad})


def test_the_forward_is_offloaded_per_module_with_offload_module():
    net, x = net_and_batch()
    plain = grads_of(net, x)
    with hooklab.offload_module(net[2], lambda: EveryTensor(prefetch=1)) as scope:
        got = grads_of(net, x)
    assert all(torch.equal(a, b) for a, b in zip(plain, got))
    assert scope.stats.offloaded >= 1 and scope.calls == 1


def test_on_the_cpu_the_kept_tensors_keep_pytorchs_inplace_error_too():
    x = torch.ones(3, requires_grad=True)
    with OverlappedOffload() as ctx:
        y = x.exp()          # on the CPU: kept, not copied (as SaveOnCpu)
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    assert ctx.stats.kept == 1 and ctx.stats.offloaded == 0


class SaveOnCpuEveryTensor(hooklab.SaveOnCpu):
    """SaveOnCpu copying CPU tensors as well (on a GPU it copies every saved tensor to the CPU)."""

    def _applies(self, t: torch.Tensor) -> bool:
        return True


@pytest.mark.parametrize("context", [lambda: EveryTensor(keep_last=0), lambda: SaveOnCpuEveryTensor()],
                         ids=["OverlappedOffload", "SaveOnCpu"])
def test_a_copy_keeps_the_saved_tensors_strides_so_backward_runs_the_same_kernels(context):
    """mm saves ``h.t()``, a transposed view of an activation; a contiguous copy would make backward multiply in
    another layout, where a CPU's (or GPU's) matrix multiply may sum in another order and change the last bits."""
    def step(ctx):
        torch.manual_seed(0)
        a, b = torch.randn(96, 64, requires_grad=True), torch.randn(96, 80, requires_grad=True)
        with ctx:
            out = a.tanh().t() @ b
        saved = out.grad_fn._saved_self
        out.square().sum().backward()
        return saved.stride(), a.grad, b.grad

    plain_strides, *plain = step(contextlib.nullcontext())
    ctx = context()
    strides, *got = step(ctx)
    assert ctx.stats.offloaded >= 1 and plain_strides == (1, 64)
    assert strides == plain_strides  # not (96, 1): the copy is transposed like the original
    assert all(torch.equal(g, p) for g, p in zip(got, plain))  # bitwise: same computation, same values and layout


# -- the device side through a stand-in for CUDA's streams and events ---------------------------------------------
# CudaStreams is the one place OverlappedOffload touches streams and events; FakeStreams has the same methods, treats
# CPU tensors as the device's and logs what waits for what, so the ordering and the memory bound are checked here.

class FakeEvent:
    def __init__(self, stream: str) -> None:
        self.stream, self.waited_by = stream, []


class FakeStream:
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: FakeStream) -> None:
        self.log.append(("wait_stream", self.name, other.name))

    def wait_event(self, event: FakeEvent) -> None:
        event.waited_by.append(self.name)
        self.log.append(("wait_event", self.name, event.stream))

    def record_event(self) -> FakeEvent:
        self.log.append(("record_event", self.name))
        return FakeEvent(self.name)


class FakeStreams:
    def __init__(self) -> None:
        self.log: list = []
        self.compute = FakeStream("compute", self.log)
        self._current = self.compute

    def handles(self, device: torch.device) -> bool:
        return device.type == "cpu"

    def current(self, device: torch.device) -> FakeStream:
        return self._current

    def new_side(self, device: torch.device) -> FakeStream:
        return FakeStream("side", self.log)

    @contextlib.contextmanager
    def on(self, stream: FakeStream):
        before, self._current = self._current, stream
        try:
            yield
        finally:
            self._current = before

    def record_stream(self, tensor: torch.Tensor, stream: FakeStream) -> None:
        self.log.append(("record_stream", stream.name))


class Watched(EveryTensor):
    """OverlappedOffload through FakeStreams, counting what is on the 'device' at every pack and unpack: the
    originals not yet let go (forward) and the copies back not yet freed (backward), by their storages."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._streams = FakeStreams()
        self.originals: list = []   # (storage weakref, storage key, the event of its copy out): no entry kept here
        self.copies: list = []      # (storage weakref, bytes)
        self.peak_originals = self.peak_copies_bytes = self.peak_ahead = 0
        self.freed_before_its_copy_was_waited_for = 0
        self.alive_at_backward = None

    def _census(self) -> None:
        alive = [(ref, n, e) for ref, n, e in self.originals if not ref.expired()]
        for ref, _, d2h in self.originals:
            if ref.expired() and "compute" not in d2h.waited_by:
                self.freed_before_its_copy_was_waited_for += 1
        self.originals = alive
        self.peak_originals = max(self.peak_originals, len(self._held))
        if self._in_backward and self.alive_at_backward is None:  # forward is over: what is still on the 'device'
            self.alive_at_backward = len({key for ref, key, _ in alive})  # storages (a view and its base: one)
        self.peak_copies_bytes = max(self.peak_copies_bytes, sum(n for ref, n in self.copies if not ref.expired()))
        self.peak_ahead = max(self.peak_ahead, len(self._ahead))

    def _encode(self, t):
        from hooklab._torch_internals import StorageWeakRef
        entry = super()._encode(t)
        self.originals.append((StorageWeakRef(t.untyped_storage()), storage_key(t), entry.d2h))
        self._census()
        return entry

    def _load(self, entry) -> None:
        from hooklab._torch_internals import StorageWeakRef
        fresh = entry.loaded is None and entry.original is None and entry.host is not None
        super()._load(entry)
        if fresh:
            assert entry.loaded.untyped_storage().data_ptr() != entry.host.untyped_storage().data_ptr()
            self.copies.append((StorageWeakRef(entry.loaded.untyped_storage()), entry.loaded.nbytes))

    def _decode(self, entry):
        out = super()._decode(entry)
        if entry.h2d is not None:  # read only after the compute stream waited for its copy back
            assert "compute" in entry.h2d.waited_by
        self._census()
        return out


class Bottleneck(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c, c, 1), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
                                  nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
                                  nn.Conv2d(c, c, 1), nn.BatchNorm2d(c))
        self.down = nn.Conv2d(c, c, 1)

    def forward(self, x):
        out = self.body(x)
        out += self.down(x)         # a shortcut branch: backward reads its tensors between the main branch's
        return torch.relu_(out)


def residual_net_and_batch():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), *[Bottleneck(16) for _ in range(6)], nn.Flatten(),
                        nn.Linear(16 * 12 * 12, 10))
    return net, torch.randn(4, 3, 12, 12)


@pytest.mark.parametrize("prefetch,in_flight,keep_last", [(2, 2, 0), (1, 1, 2), (4, 3, 1)])
def test_through_stand_in_streams_the_device_holds_a_bounded_number_of_tensors(prefetch, in_flight, keep_last):
    """Forward holds at most ``in_flight`` (or ``keep_last``) originals, each let go only after the compute stream
    waited for its copy; backward holds at most ``prefetch`` copies back not yet read, and its copies back alive at
    once stay a small part of what was offloaded (before the bounded prefetch a residual network's backward held
    most of them: the order of reads jumps between the branches, and every jump prefetched further ahead)."""
    net, x = residual_net_and_batch()
    plain = grads_of(net, x)
    ctx = Watched(keep=[net, x], prefetch=prefetch, in_flight=in_flight, keep_last=keep_last)
    got = grads_of(net, x, ctx)
    assert all(torch.equal(a, b) for a, b in zip(plain, got))
    assert ctx.stats.offloaded > 20 and ctx.copied_back > 20
    assert ctx.peak_originals <= max(in_flight, keep_last)          # held by the context in forward
    assert ctx.alive_at_backward <= keep_last                       # by anyone, once forward is over
    assert ctx.freed_before_its_copy_was_waited_for == 0
    assert ctx.peak_ahead <= prefetch
    assert ctx.peak_copies_bytes <= ctx.stats.offloaded_bytes / 4


def test_leaving_the_block_lets_go_of_all_but_keep_last():
    """A plan that offloads block by block enters one context per block: none may keep its last originals on the
    device after its block (with ``in_flight=2`` each kept two, most of a small block's activations)."""
    net, x = residual_net_and_batch()
    contexts = []

    def make():
        contexts.append(Watched(in_flight=2, keep=[net]))  # its BatchNorm buffers are alive anyway
        return contexts[-1]

    with hooklab.offload_module(net[1], make), hooklab.offload_module(net[2], make):
        loss = net(x).square().sum()
        assert len(contexts) == 2
        assert all(not c._held for c in contexts)
        # block 1's tensors are used by nothing else once forward is over (block 2 offloads its input too); block
        # 2's output is saved by block 3, which runs plainly
        assert all(ref.expired() for ref, _, _ in contexts[0].originals)
    loss.backward()
    kept = Watched(in_flight=2, keep_last=1)
    with kept:
        net(x).sum()
    assert len(kept._held) == 1
