"""What :class:`hooklab.MemoryPlanner` measures of a model, in three passes over ``step()``.

``profile_bytes``: one forward under a :class:`hooklab.SavedTensorLedger` (exact, machine independent): which
storages each block saves, which it receives and returns, whether it receives the previous block's output
(then a segment can run through the two), and what is saved outside every block. ``profile_flops``: one
forward without grad under a FLOP counter per block. ``profile_times``: timed forwards with grad (what a
recompute costs), on the process's CPU clock on a CPU. Each pass owns its hooks in a :class:`hooklab.HookScope`;
:func:`model_state_kept` puts buffers (batch-norm statistics), train/eval modes, gradients and the random-number
state back afterwards.
"""
from __future__ import annotations

import contextlib
import dataclasses
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .._torch_internals import storage_key, tree_flatten
from ..ledger import SavedTensorLedger
from ..meter import checked_loss
from ..offload import CompressSaved
from ..scope import HookScope
from ..segments import chained

__all__ = ["BlockProfile", "model_state_kept", "profile_bytes", "profile_flops", "profile_times"]

TOOL = "MemoryPlanner"


@dataclass(frozen=True)
class View:
    """One tensor a block saved over a storage (attention saves q, k and v: three views of one storage). An
    offloading or compressing context packs each view on its own."""

    where: tuple  # (offset, shape, strides, dtype): what a context's cache tells views apart by
    nbytes: int
    shape: tuple[int, ...]
    floating: bool
    element_size: int
    packed_size: int = 0  # an integer tensor's element size in CompressSaved (0: floating, or not smaller)
    uses: int = 1  # ops that saved this view (each unpacks it in backward: a file read, a decode, again)


@dataclass(frozen=True)
class Stored:
    """One storage a block saves: its bytes, and the views it was saved as."""

    key: int
    storage_bytes: int
    views: tuple[View, ...]


@dataclass
class BlockProfile:
    """What :class:`hooklab.MemoryPlanner` measured of one block (bytes are exact; times depend on the machine).

    ``saved``: the storages the block saves (key -> :class:`Stored`); ``inputs``: the activation storages it
    receives (key -> bytes); ``outputs``: the storages of what it returns; ``chained``: it receives the previous
    block's output itself (a segment can run through the two); ``calls``: calls per step; ``forward_s``: median
    forward time with grad; ``flops``: forward FLOPs; ``grad_error``: compression format -> gradient error.
    """

    name: str
    saved: dict[int, Stored] = field(default_factory=dict)
    inputs: dict[int, int] = field(default_factory=dict)
    outputs: set[int] = field(default_factory=set)
    chained: bool = False
    calls: int = 0
    forward_s: float = 0.0
    flops: int = 0
    grad_error: dict[str, float] = field(default_factory=dict)

    @property
    def saved_bytes(self) -> int:
        """Bytes of the storages the block saves for backward, each storage counted once."""
        return sum(s.storage_bytes for s in self.saved.values())

    @property
    def recompute_bytes(self) -> int:
        """Bytes a recompute of the block makes again (what it saves, but not its own inputs)."""
        return sum(s.storage_bytes for key, s in self.saved.items() if key not in self.inputs)


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value) if isinstance(t, torch.Tensor)]


@contextlib.contextmanager
def model_state_kept(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Inside, the model's gradients are None (yields the parameters that require grad); afterwards its
    gradients, buffers (batch-norm running statistics and counters), train/eval modes and the random-number
    state (torch's on the CPU and on the model's GPUs, Python's ``random`` and, once imported, NumPy's global one)
    are what they were, also after an exception."""
    params: list[torch.Tensor] = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad for p in params]
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    modes = [(m, m.training) for m in model.modules()]
    gpus = sorted({t.device.index or 0 for t in [*model.parameters(), *model.buffers()] if t.device.type == "cuda"})
    python_random = random.getstate()
    numpy = sys.modules.get("numpy")  # a step may draw from it; not imported here when nothing has
    numpy_random = numpy.random.get_state() if numpy is not None else None
    try:
        for p in params:
            p.grad = None
        with torch.random.fork_rng(devices=gpus):
            yield params
    finally:
        random.setstate(python_random)
        if numpy is not None:
            numpy.random.set_state(numpy_random)
        for p, g in zip(params, grads, strict=True):
            p.grad = g
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        for m, training in modes:
            m.training = training


class _BlockLedger(SavedTensorLedger):
    """The ledger, also noting for each record the block that was running and its storage (held until read)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        self.block: str | None = None
        self.notes: list[tuple[str | None, int, View]] = []  # per record: the block, the storage key, the view
        self.alive: list[torch.Tensor] = []

    def _add(self, t: torch.Tensor, op: str, module: str | None) -> Any:
        record = super()._add(t, op, module)
        packed = CompressSaved.integer_type(t)
        view = View((t.storage_offset(), tuple(t.shape), t.stride(), t.dtype), t.numel() * t.element_size(),
                    tuple(t.shape), t.is_floating_point(), t.element_size(),
                    0 if packed is None else torch.empty((), dtype=packed).element_size())
        self.notes.append((self.block, storage_key(t), view))
        self.alive.append(t.detach())
        return record


def profile_bytes(model: nn.Module, step: Callable[[], torch.Tensor], blocks: dict[str, nn.Module],
                  keep: list[torch.Tensor], params: list[torch.Tensor]) -> tuple[list[BlockProfile], dict[int, int]]:
    """The blocks' profiles in the order they first run, and the storages saved outside every block (key -> bytes)."""
    profiles = {name: BlockProfile(name) for name in blocks}
    order: list[str] = []
    alive: list[torch.Tensor] = []  # every tensor seen, held until the storages are read (no key is reused)
    param_keys = {storage_key(t) for t in (*model.parameters(), *model.buffers())}
    model_inputs = {storage_key(t) for t in keep}  # alive anyway: not counted
    last: list[Any] = [None, None]  # the block that returned last, and its output

    def note_model_inputs(m: nn.Module, args: Any, kwargs: Any) -> None:
        model_inputs.update(storage_key(t) for t in _tensors((args, kwargs)))

    with HookScope(TOOL) as scope, torch.random.fork_rng(devices=[]), _BlockLedger(model) as ledger:
        scope.add(model.register_forward_pre_hook(note_model_inputs, with_kwargs=True))
        for name, module in blocks.items():
            def enter(m: nn.Module, args: Any, kwargs: Any, name: str = name) -> None:
                profile = profiles[name]
                profile.calls += 1
                if profile.calls == 1:
                    order.append(name)
                before = order[order.index(name) - 1] if order.index(name) else None
                profile.chained = (profile.calls == 1 and before is not None and last[0] == before
                                   and chained(last[1], (args, kwargs)))
                for t in _tensors((args, kwargs)):
                    key = storage_key(t)
                    if key not in param_keys:
                        alive.append(t)
                        profile.inputs[key] = t.untyped_storage().nbytes()
                ledger.block = name

            def leave(m: nn.Module, args: Any, output: Any, name: str = name) -> None:
                ledger.block = None
                outputs = _tensors(output)
                alive.extend(outputs)
                profiles[name].outputs = {storage_key(t) for t in outputs}
                last[:] = [name, outputs]

            scope.add(module.register_forward_pre_hook(enter, with_kwargs=True))
            scope.add(module.register_forward_hook(leave, prepend=True, always_call=True))
        loss = checked_loss(step, params, TOOL)  # the storages stay alive in ledger.alive and `alive` until read
    if not loss.requires_grad:
        raise ValueError(f"{TOOL}: the loss does not require grad (every parameter is frozen and no input requires "
                         "grad), so the step saves nothing for backward and there is no memory to plan: unfreeze "
                         "the parameters you train (requires_grad_(True)) first")
    del loss
    never = [name for name in blocks if not profiles[name].calls]
    if never:
        raise ValueError(f"{TOOL}: block {never[0]!r} never ran in step() (the model's forward does not call it); "
                         "name the blocks that run, e.g. blocks=[name for name, _ in model.named_children()]")
    for p in profiles.values():
        for key in model_inputs:
            p.inputs.pop(key, None)
        if p.calls > 1:
            p.chained = False  # a block called twice per step does not chain: each call would need its own segment
    top: dict[int, int] = {}
    views: dict[str, dict[int, dict[tuple, View]]] = {name: {} for name in blocks}  # block -> storage -> its views
    sizes: dict[int, int] = {}
    for record, (block, key, view) in zip(ledger.records, ledger.notes, strict=True):
        if record.kind != "activation" or key in model_inputs:
            continue
        if block is None:
            top[key] = record.storage_bytes
        else:
            seen = views[block].setdefault(key, {})
            earlier = seen.get(view.where)
            seen[view.where] = view if earlier is None else dataclasses.replace(earlier, uses=earlier.uses + 1)
            sizes[key] = record.storage_bytes
    for name, stored in views.items():
        profiles[name].saved = {key: Stored(key, sizes[key], tuple(v.values())) for key, v in stored.items()}
    ordered = [profiles[name] for name in order]
    # a block called twice chains into nothing either
    for before, after in zip([None, *ordered], ordered, strict=False):
        if before is None or before.calls > 1:
            after.chained = False
    return ordered, top


def profile_flops(model: nn.Module, step: Callable[[], torch.Tensor], blocks: dict[str, nn.Module],
                  profiles: list[BlockProfile]) -> None:
    """Each block's forward FLOPs (``torch.utils.flop_counter``; counted, the same on every machine)."""
    from torch.utils.flop_counter import FlopCounterMode

    by_name = {p.name: p for p in profiles}
    counters: dict[str, Any] = {}
    with HookScope(TOOL) as scope, torch.random.fork_rng(devices=[]), torch.no_grad():
        for name, module in blocks.items():
            def start(m: nn.Module, args: Any, name: str = name) -> None:
                counters[name] = FlopCounterMode(display=False)
                counters[name].__enter__()

            def stop(m: nn.Module, args: Any, out: Any, name: str = name) -> None:
                counter = counters.pop(name, None)
                if counter is not None:
                    counter.__exit__(None, None, None)
                    by_name[name].flops += counter.get_total_flops()

            scope.add(module.register_forward_pre_hook(start))
            scope.add(module.register_forward_hook(stop, always_call=True))
        step()


def clock_of(device: torch.device) -> Callable[[], float]:
    """The process's CPU time on a CPU (other jobs on the same cores disturb it least); on a GPU the wall
    clock after a synchronisation (the host does not wait for the kernels otherwise)."""
    if device.type != "cuda":
        return time.process_time

    def now() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()
    return now


def profile_times(model: nn.Module, step: Callable[[], torch.Tensor], blocks: dict[str, nn.Module],
                  profiles: list[BlockProfile], repeats: int, device: torch.device) -> None:
    """Each block's forward time with grad (what a recompute runs), the median of ``repeats`` steps; raises when
    the clock cannot resolve a block."""
    by_name = {p.name: p for p in profiles}
    clock = clock_of(device)
    times: dict[str, list[float]] = {name: [0.0] * repeats for name in blocks}
    starts: dict[str, float] = {}
    round_ = [0]
    with HookScope(TOOL) as scope, torch.random.fork_rng(devices=[]):
        for name, module in blocks.items():
            def t0(m: nn.Module, args: Any, name: str = name) -> None:
                starts[name] = clock()

            def t1(m: nn.Module, args: Any, out: Any, name: str = name) -> None:
                times[name][round_[0]] += clock() - starts[name]
            scope.add(module.register_forward_pre_hook(t0))
            scope.add(module.register_forward_hook(t1, always_call=True))
        step()  # warm-up (first-call costs, the allocator)
        for name in times:
            times[name][0] = 0.0
        for r in range(repeats):
            round_[0] = r
            loss = step()
            del loss  # the graph is not kept: a recompute's forward saves, then backward frees
    resolution = time.get_clock_info("process_time").resolution if device.type != "cuda" else 1e-6
    for name, ts in times.items():
        seconds = statistics.median(ts)
        if not seconds > 10 * resolution:
            raise RuntimeError(
                f"{TOOL}: the forward of block {name!r} took {seconds:.3g} s by this clock (resolution "
                f"{resolution:.3g} s), too little to tell what recomputing it costs; give it a larger batch, name "
                "larger blocks, or pass costs=hooklab.CountedCosts(...) (FLOPs over a stated speed)")
        by_name[name].forward_s = seconds
