"""The time model of :class:`hooklab.MemoryPlanner`: what each choice adds to a training step, in seconds.

A :class:`CostModel` answers three questions about a block: how long its forward takes when recomputed
(``checkpoint``, and each block of a ``segment``), and how long moving (``offload``) or encoding
(``bf16`` / ``int8``) its saved tensors takes, given their bytes and their number.

:class:`CountedCosts` divides counted FLOPs and bytes by stated speeds: the same plan on every machine
(tests, committed notebook outputs). :class:`MeasuredCosts` (the planner's default) uses the block
forwards the planner timed and speeds it measures on this machine with :meth:`MeasuredCosts.measure`.
Every measurement is made so that it cannot collapse to "free": on a CPU it reads the process's CPU
time (what other jobs on the same cores disturb least), each quantity is timed directly (a context's own
pack and unpack, not the difference of two noisy steps) as a median of repeats, and moving or encoding a
byte is never modelled as faster than a plain memory copy of that byte, measured first. A copy too fast for the
clock grows, then is repeated within one timing (a GPU's 64 MiB copy takes tens of microseconds); only a clock that
resolves none of that raises an error instead of giving a speed.
"""
from __future__ import annotations

import functools
import inspect
import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from torch import nn

from ..offload import CompressSaved, OverlappedOffload, SaveOnDisk

if TYPE_CHECKING:
    from ._profile import BlockProfile

__all__ = ["CostModel", "CountedCosts", "MeasuredCosts", "check_costs", "takes_rereads"]


@runtime_checkable
class CostModel(Protocol):
    """Seconds that each choice adds to a step (see :mod:`hooklab.planner`). ``moved_bytes`` / ``encoded_bytes``
    and ``tensors``: what the block's context packs in forward (each view of a storage once); ``reread_bytes`` and
    ``rereads``: the unpacks beyond the first of a view several ops saved (a file read again, a decode again)."""

    def recompute(self, block: BlockProfile) -> float:
        """Seconds a checkpoint of ``block`` adds: its forward run a second time during backward."""
        ...

    def offload(self, block: BlockProfile, moved_bytes: int, tensors: int, *, reread_bytes: int = 0,
                rereads: int = 0) -> float:
        """Seconds that moving ``block``'s saved tensors off the device and back adds."""
        ...

    def compress(self, block: BlockProfile, fmt: str, encoded_bytes: int, tensors: int, *, reread_bytes: int = 0,
                 rereads: int = 0) -> float:
        """Seconds that encoding ``block``'s saved tensors to ``fmt`` and decoding them adds."""
        ...


def takes_rereads(method: Callable[..., float]) -> bool:
    """Whether a cost model's ``offload`` / ``compress`` takes ``reread_bytes`` and ``rereads`` (a model written for
    the earlier three-argument form is called without them)."""
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return True
    return "rereads" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def check_costs(costs: object) -> None:
    """Refuse an object that is not a :class:`CostModel` (when the planner is made, not when it plans)."""
    missing = [name for name in ("recompute", "offload", "compress") if not callable(getattr(costs, name, None))]
    if missing:
        raise TypeError(f"costs must be a cost model (hooklab.CountedCosts, hooklab.MeasuredCosts, or an object with "
                        f"the methods recompute(block), offload(block, moved_bytes, tensors, *, reread_bytes, rereads) and "
                        f"compress(block, fmt, encoded_bytes, tensors, *, reread_bytes, rereads) returning seconds); got "
                        f"{type(costs).__name__}, which has no "
                        f"{', '.join(missing)}")


@dataclass(frozen=True)
class CountedCosts:
    """A time model that does not depend on the machine: FLOPs and bytes divided by stated speeds.

    Defaults describe a data-centre GPU (100 TFLOP/s sustained, 25 GB/s each way over PCIe, half of
    an offload's copy hidden behind compute, 500 GB/s to encode). Change them to describe yours. An offload
    brings a tensor back once however many ops saved it (as :class:`hooklab.OverlappedOffload` does); a
    compressed tensor is decoded once per op that saved it.

    >>> CountedCosts(copy_bytes_per_s=1e9, overlap=0).offload(None, 10**6, tensors=3)   # out and back: 2 ms
    0.002
    """

    flops_per_s: float = 100e12
    copy_bytes_per_s: float = 25e9
    overlap: float = 0.5
    encode_bytes_per_s: float = 500e9

    def __post_init__(self) -> None:
        for name in ("flops_per_s", "copy_bytes_per_s", "encode_bytes_per_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == math.inf:
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if isinstance(self.overlap, bool) or not isinstance(self.overlap, (int, float)) or not 0 <= self.overlap < 1:
            raise ValueError(f"overlap must be a number in [0, 1), got {self.overlap!r}")

    def recompute(self, block: BlockProfile) -> float:
        """Seconds to run ``block``'s forward again in backward: its FLOPs at :attr:`flops_per_s`."""
        return block.flops / self.flops_per_s

    def offload(self, block: BlockProfile, moved_bytes: int, tensors: int, *, reread_bytes: int = 0,
                rereads: int = 0) -> float:
        """Seconds of copying ``moved_bytes`` out in forward and back in backward that compute does not hide."""
        return 2 * moved_bytes / self.copy_bytes_per_s * (1 - self.overlap)

    def compress(self, block: BlockProfile, fmt: str, encoded_bytes: int, tensors: int, *, reread_bytes: int = 0,
                 rereads: int = 0) -> float:
        """Seconds to encode ``encoded_bytes`` in forward and decode them in backward (``fmt`` is not used)."""
        return (2 * encoded_bytes + reread_bytes) / self.encode_bytes_per_s  # encode in forward, decode in backward


@dataclass(frozen=True)
class MeasuredCosts:
    """Times measured on this machine: the block forwards (timed by the planner), and the speeds of an
    offload's round trip and of each encoding's, per byte and per tensor (:meth:`measure`).

    ``copy_bytes_per_s``: bytes per second moved out and back (disk on a CPU, CPU memory from a GPU), each way;
    ``encode_bytes_per_s``: per format, bytes per second encoded and decoded (the round trip);
    ``per_tensor_s``: per choice (``"offload"``, ``"bf16"``, ``"int8"``), the fixed seconds of one tensor's round
    trip (a file opened and closed, a kernel launched); ``per_context_s``: the fixed seconds of one offloading
    context (a private folder made, locked and removed on a CPU); ``overlap``: the share of an offload hidden
    behind compute (0.5 for :class:`hooklab.OverlappedOffload` on a GPU, 0 on a CPU); ``memory_bytes_per_s``:
    the plain memory copy that bounds every speed above; ``clock``: what was timed (``"cpu"`` or ``"wall"``).
    A view several ops saved is read back from disk once per op (half a round trip each), and decoded once per
    op; from CPU memory it comes back once.
    """

    copy_bytes_per_s: float
    encode_bytes_per_s: dict[str, float]
    overlap: float = 0.0
    per_tensor_s: dict[str, float] = field(default_factory=dict)
    memory_bytes_per_s: float = math.inf
    clock: str = "cpu"
    per_context_s: float = 0.0

    def recompute(self, block: BlockProfile) -> float:
        """Seconds to run ``block``'s forward again: its forward time as measured."""
        return block.forward_s

    def offload(self, block: BlockProfile, moved_bytes: int, tensors: int, *, reread_bytes: int = 0,
                rereads: int = 0) -> float:
        """Seconds of copying ``moved_bytes`` out and back at the measured speed (files read again per extra use
        from disk, the per-tensor and per-context costs included), less the overlapped part."""
        if not tensors:
            return 0.0
        per_tensor = self.per_tensor_s.get("offload", 0.0)
        seconds = self.per_context_s + tensors * per_tensor + 2 * moved_bytes / self.copy_bytes_per_s
        if self.overlap == 0.0:  # from disk each op reads its file again (OverlappedOffload serves it once)
            seconds += (rereads * per_tensor + 2 * reread_bytes / self.copy_bytes_per_s) / 2
        return seconds * (1 - self.overlap)

    def compress(self, block: BlockProfile, fmt: str, encoded_bytes: int, tensors: int, *, reread_bytes: int = 0,
                 rereads: int = 0) -> float:
        """Seconds to encode and decode ``encoded_bytes`` in format ``fmt`` at its measured round-trip speed, with
        the per-tensor cost (an extra use of a view decodes it again)."""
        per_tensor = self.per_tensor_s.get(fmt, 0.0)
        return ((tensors + rereads / 2) * per_tensor
                + (encoded_bytes + reread_bytes / 2) / self.encode_bytes_per_s[fmt])

    @classmethod
    def measure(cls, device: torch.device | str = "cpu", *, probe_bytes: int = 4 << 20, repeats: int = 9,
                keep: Iterable[torch.Tensor | nn.Module] = ()) -> MeasuredCosts:
        """Measure the speeds on ``device``: a plain copy first (the bound), then the round trip of a probe
        through each strategy (to disk on a CPU, to CPU memory from a GPU, bf16, int8), as 4 tensors of a quarter
        of ``probe_bytes`` and as 32 tensors of a 32nd (the sizes of a network's activations): the context's own
        pack and unpack of each tensor, timed directly, the median of ``repeats``. Per-byte and per-tensor costs
        follow from the two; the fixed cost of one offloading context is timed empty, with ``keep`` (pass the model:
        a plan's contexts leave its parameters and buffers in place, and that takes time too).

        >>> costs = MeasuredCosts.measure("cpu", probe_bytes=1 << 20, repeats=3)
        >>> costs.copy_bytes_per_s <= costs.memory_bytes_per_s and costs.clock
        'cpu'
        """
        device = torch.device(device)
        if isinstance(probe_bytes, bool) or not isinstance(probe_bytes, int) or probe_bytes < 64 * 1024:
            raise ValueError(f"probe_bytes must be an int >= 65536, got {probe_bytes!r}")
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 3:
            raise ValueError(f"repeats must be an int >= 3 (medians of paired runs), got {repeats!r}")
        cuda = device.type == "cuda"
        timer = _wall_clock(device) if cuda else time.process_time
        memory = _memory_speed(device, probe_bytes, repeats, timer)
        offload = OverlappedOffload if cuda else SaveOnDisk
        strategies: dict[str, Callable[[], Any]] = {
            "offload": lambda: offload(min_bytes=0), "bf16": functools.partial(CompressSaved, "bf16", min_bytes=0),
            "int8": functools.partial(CompressSaved, "int8", min_bytes=0)}
        context = _context_seconds(lambda: offload(min_bytes=0, keep=keep), repeats, timer)
        per_byte, per_tensor = {}, {}
        for name, make in strategies.items():
            few = _round_trip(device, probe_bytes, 4, make, repeats, timer)
            many = _round_trip(device, probe_bytes, 32, make, repeats, timer)
            tensor_s = max((many - few) / 28, 0.0)
            floor = (2 if name == "offload" else 1) / memory  # out and back / one pass at least
            per_byte[name] = max((few - 4 * tensor_s) / probe_bytes, floor)
            per_tensor[name] = tensor_s
        return cls(copy_bytes_per_s=2 / per_byte["offload"],
                   encode_bytes_per_s={fmt: 1 / per_byte[fmt] for fmt in ("bf16", "int8")},
                   overlap=0.5 if cuda else 0.0, per_tensor_s=per_tensor, memory_bytes_per_s=memory,
                   clock="wall" if cuda else "cpu", per_context_s=context)


def _wall_clock(device: torch.device) -> Callable[[], float]:
    def now() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()
    return now


def _memory_speed(device: torch.device, probe_bytes: int, repeats: int, timer: Callable[[], float], *,
                  resolution: float | None = None, max_bytes: int | None = None, max_copies: int | None = None,
                  copy: Callable[[torch.Tensor, torch.Tensor], Any] | None = None) -> float:
    """Bytes per second of a plain copy. The probe grows (by 4, to ``max_bytes``: 64 MiB on a CPU; on a GPU 1 GiB or
    an eighth of its free memory) and then is copied several times per timing (by 4) until a timing
    lasts 100 ticks of the clock: a data-centre GPU copies 64 MiB in about 45 us, under a microsecond clock's 100
    ticks (to ``max_copies``: 4096 on a GPU, 16 on a CPU). Only a clock that resolves none of that raises.
    ``copy(dst, src)``: what a copy is (tests time a stand-in with a fake clock)."""
    if resolution is None:
        resolution = time.get_clock_info("process_time").resolution if timer is time.process_time else 1e-6
    if max_bytes is None:
        max_bytes = 64 << 20
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            max_bytes = max(64 << 20, min(1 << 30, free // 8))
    if max_copies is None:  # a GPU copies 1 GiB in under a millisecond; a CPU needs no more than 16 x 64 MiB
        max_copies = 1 << 12 if device.type == "cuda" else 16
    copy = copy if copy is not None else (lambda dst, src: dst.copy_(src))
    size, copies = probe_bytes, 1
    while True:
        src = torch.randn(size // 4, device=device)
        dst = torch.empty_like(src)
        times = []
        for _ in range(repeats + 1):
            start = timer()
            for _ in range(copies):
                copy(dst, src)
            times.append(timer() - start)
        seconds = statistics.median(times[1:])
        if seconds > 100 * resolution:
            return size * copies / seconds
        del src, dst
        if size * 4 <= max_bytes:
            size *= 4
        elif copies * 4 <= max_copies:
            copies *= 4
        else:
            raise RuntimeError(
                f"MeasuredCosts.measure: {copies} copies of {size >> 20} MiB took {seconds:.3g} s by this clock "
                f"(resolution {resolution:.3g} s), too little to measure a speed from; pass "
                "costs=hooklab.CountedCosts(...) with the speeds of this machine")


def _context_seconds(make: Callable[[], Any], repeats: int, timer: Callable[[], float]) -> float:
    """Median seconds of making, entering and leaving a context that packs nothing."""
    seconds = []
    for _ in range(repeats + 1):
        start = timer()
        with make():
            pass
        seconds.append(timer() - start)
    return statistics.median(seconds[1:])


def _round_trip(device: torch.device, probe_bytes: int, tensors: int, make: Callable[[], Any], repeats: int,
                timer: Callable[[], float]) -> float:
    """Median seconds of a round trip of ``probe_bytes`` (as ``tensors`` tensors) through the context ``make()``
    gives: what its pack hook does in forward, its unpack hook in backward, and freeing what it stored. Timed
    directly (not as the difference of two steps, whose noise is larger than a fast encoding)."""
    chunks = [c.clone() for c in torch.randn(probe_bytes // 4, device=device).chunk(tensors)]
    seconds = []
    for _ in range(repeats + 1):  # the first is a warm-up
        with make() as context:
            start = timer()
            packed = [context._pack(t) for t in chunks]
            for p in packed:
                context._unpack(p)
            del packed  # files are deleted, buffers freed, as when autograd frees the saved tensors
            seconds.append(timer() - start)
    return statistics.median(seconds[1:])
