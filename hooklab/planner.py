"""Meet an activation-memory budget at the least modelled cost: per block, keep, checkpoint, offload or compress.

:class:`MemoryPlanner` measures a model once, per block (one forward with a
:class:`hooklab.SavedTensorLedger`, then a few timed forwards), and :meth:`MemoryPlanner.plan` chooses for
every block what to do with the tensors it saves for backward::

    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint", "offload"))
    plan = planner.plan(budget=planner.baseline_bytes // 4)
    print(plan)                   # block, choice, bytes held, bytes saved, time added
    with plan.apply():            # checkpoint_modules / offload_module / CompressSaved, restored on exit
        loss = step()
    loss.backward()

``step`` is a function that runs the forward pass on a sample batch and returns the scalar loss.

**The memory model.** The budget bounds the activation bytes the forward pass leaves for backward
(what the ledger counts: tensors saved by autograd, each storage once, parameters and the model's
inputs excluded). Block ``k`` saves the storages ``S_k`` (including its input when its first op
saves it) and receives the input ``I_k``. A storage the previous block *keeps*, or one saved outside
every block (the head saves the last block's output), is not counted again.
Then block ``k`` holds: ``keep`` all of ``S_k``; ``checkpoint`` only ``I_k`` (the recompute in backward
needs it); ``offload`` the tensors under ``min_bytes`` (the rest goes to CPU memory on a GPU —
:class:`hooklab.OverlappedOffload` — and to disk on a CPU — :class:`hooklab.SaveOnDisk`); ``bf16`` /
``int8`` the float tensors of at least 4 KiB at 1/2 / 1/4 of their size (+ one float scale per channel
for int8), the others as they are (:class:`hooklab.CompressSaved`). Saved tensors outside every
block (the head, the loss) are a fixed cost; pass tensors that are alive anyway (the labels) as
``keep``. During backward a checkpointed block briefly holds its recomputed
tensors again: the peak exceeds the budget by at most the largest such block.

**The time model** (a :class:`CostModel`, injectable): a checkpointed block costs its forward once
more; an offloaded block costs the bytes it moves divided by a copy speed (both ways), times
``1 - overlap``; a compressed block costs the bytes it encodes divided by an encoding speed.
:class:`MeasuredCosts` (the default) times the block forwards, a copy and an encode on this machine;
:class:`CountedCosts` counts the forward FLOPs instead and takes the speeds as numbers, so that the
plan does not depend on the machine (tests, committed notebook outputs).

**The choice** is exact: a dynamic programme over the blocks in order (state: the previous block's
choice, since a kept block already holds the next block's input) keeps, for every state, the plans
that no other plan beats in both bytes and time; the cheapest plan under the budget wins (ties: fewer
bytes, then the earlier choice in ``choices``). Compression is only offered for a block whose
gradient error (:func:`hooklab.gradient_error`, that block compressed alone) is below ``max_error``.
A budget that no plan meets raises :class:`BudgetError`, which says the least reachable memory.

>>> import torch
>>> from torch import nn
>>> _ = torch.manual_seed(0)
>>> block = lambda: nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh())
>>> model = nn.Sequential(*[block() for _ in range(4)])
>>> x = torch.randn(64, 256)
>>> planner = MemoryPlanner(model, lambda: model(x).sum(), costs=CountedCosts(), choices=("keep", "checkpoint"))
>>> plan = planner.plan(budget=planner.baseline_bytes // 2)
>>> plan.choices
{'0': 'keep', '1': 'checkpoint', '2': 'checkpoint', '3': 'checkpoint'}
>>> print(plan)
block  choice           held      saved  time added
0      keep        128.0 KiB        0 B        0 ns
1      checkpoint        0 B  128.0 KiB      168 ns
2      checkpoint   64.0 KiB   64.0 KiB      168 ns
3      checkpoint   64.0 KiB   64.0 KiB      168 ns
total              256.0 KiB  256.0 KiB      503 ns
budget 256.0 KiB: met (modelled 256.0 KiB of 512.0 KiB without a plan, 50%)
"""
from __future__ import annotations

import contextlib
import functools
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Literal, Protocol, get_args

import torch
from torch import nn

from ._text import format_bytes, format_table
from ._torch_internals import storage_key
from .checkpoint import checkpoint_modules
from .errors import BudgetError
from .ledger import SavedTensorLedger
from .lookup import as_names, get_modules
from .offload import CompressSaved, Format, OverlappedOffload, SaveOnDisk, offload_module

__all__ = ["BlockProfile", "BudgetError", "CostModel", "CountedCosts", "MeasuredCosts", "MemoryPlan",
           "MemoryPlanner"]

Choice = Literal["keep", "checkpoint", "offload", "bf16", "int8"]
CHOICES: tuple[Choice, ...] = get_args(Choice)
COMPRESS_MIN_BYTES = 4096  # CompressSaved's default: small tensors stay exact


@dataclass(frozen=True)
class _Stored:
    """One storage a block saves: its bytes, and the tensor it was saved as (bytes, shape, float or not)."""

    key: int
    storage_bytes: int
    nbytes: int
    shape: tuple[int, ...]
    floating: bool
    element_size: int


@dataclass
class BlockProfile:
    """What :class:`MemoryPlanner` measured of one block (bytes are exact; times depend on the machine)."""

    name: str
    saved: dict[int, _Stored] = field(default_factory=dict)   # storages the block saves
    inputs: dict[int, int] = field(default_factory=dict)      # activation storages it receives: key -> bytes
    forward_s: float = 0.0     # median forward time of the block
    flops: int = 0             # forward FLOPs (torch.utils.flop_counter)
    grad_error: dict[str, float] = field(default_factory=dict)  # compression format -> gradient error

    @property
    def saved_bytes(self) -> int:
        return sum(s.storage_bytes for s in self.saved.values())


class CostModel(Protocol):
    """Seconds that each choice adds to a step (see the module docstring)."""

    def recompute(self, block: BlockProfile) -> float: ...

    def offload(self, block: BlockProfile, moved_bytes: int) -> float: ...

    def compress(self, block: BlockProfile, fmt: str, encoded_bytes: int) -> float: ...


@dataclass(frozen=True)
class CountedCosts:
    """A time model that does not depend on the machine: FLOPs and bytes divided by stated speeds.

    Defaults describe a data-centre GPU (100 TFLOP/s sustained, 25 GB/s each way over PCIe, half of
    an offload's copy hidden behind compute, 500 GB/s to encode). Change them to describe yours.
    """

    flops_per_s: float = 100e12
    copy_bytes_per_s: float = 25e9
    overlap: float = 0.5
    encode_bytes_per_s: float = 500e9

    def __post_init__(self) -> None:
        for name in ("flops_per_s", "copy_bytes_per_s", "encode_bytes_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not 0 <= self.overlap < 1:
            raise ValueError(f"overlap must be in [0, 1), got {self.overlap!r}")

    def recompute(self, block: BlockProfile) -> float:
        return block.flops / self.flops_per_s

    def offload(self, block: BlockProfile, moved_bytes: int) -> float:
        return 2 * moved_bytes / self.copy_bytes_per_s * (1 - self.overlap)

    def compress(self, block: BlockProfile, fmt: str, encoded_bytes: int) -> float:
        return 2 * encoded_bytes / self.encode_bytes_per_s  # encode in forward, decode in backward


@dataclass(frozen=True)
class MeasuredCosts:
    """Times measured on this machine: block forwards, and speeds of an offload's copy and of encoding."""

    copy_bytes_per_s: float
    encode_bytes_per_s: dict[str, float]
    overlap: float = 0.0

    def recompute(self, block: BlockProfile) -> float:
        return block.forward_s

    def offload(self, block: BlockProfile, moved_bytes: int) -> float:
        return 2 * moved_bytes / self.copy_bytes_per_s * (1 - self.overlap)

    def compress(self, block: BlockProfile, fmt: str, encoded_bytes: int) -> float:
        return encoded_bytes / self.encode_bytes_per_s[fmt]

    @classmethod
    def measure(cls, device: torch.device, *, probe_bytes: int = 4 << 20, repeats: int = 3) -> MeasuredCosts:
        """Time a round trip of a ``probe_bytes`` tensor (to CPU memory from a GPU, to disk from a CPU)
        and its bf16 / int8 encode + decode; on a GPU the copies overlap, so ``overlap`` is 0.5."""
        probe = torch.randn(probe_bytes // 4, device=device)

        def best(fn: Callable[[], Any]) -> float:
            times = []
            for _ in range(repeats + 1):
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                fn()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times.append(time.perf_counter() - start)
            return max(min(times[1:]), 1e-9)

        def round_trip(make: Callable[[], Any]) -> Callable[[], None]:
            def run() -> None:
                leaf = probe.clone().requires_grad_()
                with make():
                    y = leaf * 1.5  # saves nothing of interest...
                    z = y.exp()     # ...exp saves its output: one probe-sized tensor packed and unpacked
                z.sum().backward()
            return run

        plain = best(round_trip(contextlib.nullcontext))
        offload = OverlappedOffload if device.type == "cuda" else SaveOnDisk
        moved = max(best(round_trip(offload)) - plain, 1e-9)
        encode = {fmt: probe_bytes / max(best(round_trip(functools.partial(CompressSaved, fmt))) - plain, 1e-9)
                  for fmt in get_args(Format)}
        return cls(copy_bytes_per_s=2 * probe_bytes / moved, encode_bytes_per_s=encode,
                   overlap=0.5 if device.type == "cuda" else 0.0)


# ------------------------------------------------------------------------------------- measuring
class _KeyedLedger(SavedTensorLedger):
    """The ledger, also noting each record's storage (for relations between blocks) while it is alive."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        self.keys: list[tuple[int, int, bool]] = []  # per record: storage key, element size, floating
        self.alive: list[torch.Tensor] = []          # saved tensors held until the profile is read

    def _add(self, t: torch.Tensor, op: str, module: str | None) -> Any:
        record = super()._add(t, op, module)
        self.keys.append((storage_key(t), t.element_size(), t.is_floating_point()))
        self.alive.append(t.detach())
        return record


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _inside(module: str, block: str) -> bool:
    return module == block or module.startswith(block + ".")


def _profile(model: nn.Module, step: Callable[[], torch.Tensor], blocks: dict[str, nn.Module],
             repeats: int, keep: list[torch.Tensor]) -> tuple[list[BlockProfile], dict[int, int]]:
    """One forward under the ledger (bytes, storages), one under a FLOP counter, then timed forwards."""
    from torch.utils.flop_counter import FlopCounterMode

    profiles = {name: BlockProfile(name) for name in blocks}
    held: list[torch.Tensor] = []
    param_keys = {storage_key(p) for p in (*model.parameters(), *model.buffers())}
    model_inputs: set[int] = {storage_key(t) for t in keep}  # alive anyway: not counted
    handles = []
    try:
        handles.append(model.register_forward_pre_hook(
            lambda m, args: model_inputs.update(storage_key(t) for t in _tensors(args))))
        for name, module in blocks.items():
            def note_inputs(m: nn.Module, args: Any, _name: str = name) -> None:
                for t in _tensors(args):
                    key = storage_key(t)
                    if key not in param_keys:
                        held.append(t)
                        profiles[_name].inputs[key] = t.untyped_storage().nbytes()
            handles.append(module.register_forward_pre_hook(note_inputs))
        with torch.random.fork_rng(devices=[]), _KeyedLedger(model) as ledger:
            loss = step()
        for key in model_inputs:
            for p in profiles.values():
                p.inputs.pop(key, None)
        top: dict[int, int] = {}  # storages saved outside every block: key -> bytes
        for record, (key, size, floating) in zip(ledger.records, ledger.keys):
            if record.kind != "activation" or key in model_inputs:
                continue
            owner = next((p for p in profiles.values() if _inside(record.module, p.name)), None)
            if owner is None:
                top[key] = record.storage_bytes
            elif key not in owner.saved:
                owner.saved[key] = _Stored(key, record.storage_bytes, record.nbytes, record.shape, floating, size)
        del loss, ledger, held
    finally:
        for h in handles:
            h.remove()

    # FLOPs of each block's forward (counted, machine independent)
    counters: dict[str, Any] = {}
    handles = []
    try:
        for name, module in blocks.items():
            def start(m: nn.Module, args: Any, _name: str = name) -> None:
                counters[_name] = FlopCounterMode(display=False)
                counters[_name].__enter__()

            def stop(m: nn.Module, args: Any, out: Any, _name: str = name) -> None:
                counters[_name].__exit__(None, None, None)
                profiles[_name].flops = counters[_name].get_total_flops()
            handles += [module.register_forward_pre_hook(start), module.register_forward_hook(stop, always_call=True)]
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            step()
    finally:
        for h in handles:
            h.remove()

    # forward times (median of `repeats` runs, without grad: a forward recomputed in backward)
    times: dict[str, list[float]] = {name: [] for name in blocks}
    starts: dict[str, float] = {}
    sync = torch.cuda.synchronize if any(p.is_cuda for p in model.parameters()) else (lambda: None)
    handles = []
    try:
        for name, module in blocks.items():
            def t0(m: nn.Module, args: Any, _name: str = name) -> None:
                sync()
                starts[_name] = time.perf_counter()

            def t1(m: nn.Module, args: Any, out: Any, _name: str = name) -> None:
                sync()
                times[_name].append(time.perf_counter() - starts[_name])
            handles += [module.register_forward_pre_hook(t0), module.register_forward_hook(t1)]
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            for _ in range(repeats):
                step()
    finally:
        for h in handles:
            h.remove()
    for name, ts in times.items():
        profiles[name].forward_s = statistics.median(ts) if ts else 0.0
    return list(profiles.values()), top


# --------------------------------------------------------------------------------------- planning
@dataclass(frozen=True)
class _Option:
    choice: str
    held: int       # bytes this block holds with this choice (given the previous block's choice)
    moved: int      # bytes offloaded or encoded
    seconds: float  # modelled time added


@dataclass
class MemoryPlan:
    """A choice per block, its modelled bytes and time; :meth:`apply` runs it, :meth:`table` shows it."""

    model: nn.Module
    blocks: dict[str, nn.Module]
    rows: list[tuple[str, _Option, int]]  # (block, option, bytes the block holds without a plan)
    budget: int
    baseline_bytes: int
    fixed_bytes: int
    min_bytes: int
    device: torch.device
    keep: list[torch.Tensor] = field(default_factory=list)

    @property
    def choices(self) -> dict[str, str]:
        return {name: option.choice for name, option, _ in self.rows}

    @property
    def held_bytes(self) -> int:
        """Modelled activation bytes held after forward (blocks + what is saved outside them)."""
        return self.fixed_bytes + sum(option.held for _, option, _ in self.rows)

    @property
    def seconds_added(self) -> float:
        return sum(option.seconds for _, option, _ in self.rows)

    def table(self) -> str:
        rows = [(name, option.choice, format_bytes(option.held), format_bytes(kept - option.held),
                 _ms(option.seconds)) for name, option, kept in self.rows]
        rows.append(("total", "", format_bytes(self.held_bytes), format_bytes(self.baseline_bytes - self.held_bytes),
                     _ms(self.seconds_added)))
        text = format_table(("block", "choice", "held", "saved", "time added"), rows, right=(2, 3, 4))
        return (f"{text}\nbudget {format_bytes(self.budget)}: met (modelled {format_bytes(self.held_bytes)} of "
                f"{format_bytes(self.baseline_bytes)} without a plan, {self.held_bytes / max(self.baseline_bytes, 1):.0%})")

    def __str__(self) -> str:
        return self.table()

    @contextlib.contextmanager
    def apply(self) -> Iterator[MemoryPlan]:
        """Inside the block the model runs the plan; on exit (also after an exception) it is as before."""
        choices = self.choices
        inputs: list[torch.Tensor] = []
        device_offload = self.device.type == "cuda"
        with contextlib.ExitStack() as stack:
            def note(m: nn.Module, args: Any) -> None:
                inputs[:] = list(_tensors(args))
            stack.callback(self.model.register_forward_pre_hook(note).remove)
            stack.callback(inputs.clear)
            names = [n for n, c in choices.items() if c == "checkpoint"]
            if names:
                stack.enter_context(checkpoint_modules(self.model, names))
            for name, choice in choices.items():
                make: Callable[[], Any]
                if choice == "offload":
                    def offloading(m: int = self.min_bytes) -> Any:
                        keep: list[torch.Tensor | nn.Module] = [self.model, *inputs, *self.keep]
                        return (OverlappedOffload(min_bytes=m, keep=keep) if device_offload
                                else SaveOnDisk(min_bytes=m, keep=keep))
                    make = offloading
                elif choice in ("bf16", "int8"):
                    fmt: Format = "bf16" if choice == "bf16" else "int8"

                    def compressing(fmt: Format = fmt) -> Any:
                        return CompressSaved(fmt, keep=[self.model, *inputs, *self.keep])
                    make = compressing
                else:
                    continue
                scope = offload_module(self.blocks[name], make)
                stack.callback(scope.remove)
            yield self


def _ms(seconds: float) -> str:
    """``0.000168e-3 -> '168 ns'``: three significant digits in the unit that fits."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _held_bytes(stored: Iterable[_Stored], choice: str, min_bytes: int) -> tuple[int, int]:
    """(bytes held, bytes moved or encoded) of these storages under ``choice`` (keep, offload, bf16, int8)."""
    held = moved = 0
    for s in stored:
        h, m = _one(s, choice, min_bytes)
        held, moved = held + h, moved + m
    return held, moved


def _one(s: _Stored, choice: str, min_bytes: int) -> tuple[int, int]:
    """(bytes held, bytes moved or encoded) of one storage under ``choice``."""
    if choice == "keep":
        return s.storage_bytes, 0
    if choice == "offload":
        return (0, s.nbytes) if s.nbytes >= min_bytes else (s.storage_bytes, 0)
    small = 2 if choice == "bf16" else 1  # bf16 / int8
    if s.floating and s.nbytes >= COMPRESS_MIN_BYTES and s.element_size > small:
        scale = (s.shape[1] if len(s.shape) > 1 else 1) * 4 if choice == "int8" else 0
        return s.nbytes // s.element_size * small + scale, s.nbytes
    return s.storage_bytes, 0


class MemoryPlanner:
    """Measure a model's blocks once; :meth:`plan` a choice per block for a memory budget.

    ``model``: the model; ``step``: a function running the forward pass on a sample batch and
    returning the scalar loss; ``blocks``: module names (default: the model's children), none inside
    another. Keyword-only: ``choices`` allowed (``"keep"`` always is), ``max_error`` the relative
    gradient error a compressed block may cause (needed for ``"bf16"`` / ``"int8"``), ``costs`` a
    :class:`CostModel` (default: :meth:`MeasuredCosts.measure` on the model's device), ``min_bytes``
    the smallest tensor an offload moves, ``repeats`` timed forwards per block, ``keep`` tensors that
    are alive anyway (the labels: the model's own inputs are found by themselves), neither counted
    nor offloaded.
    """

    def __init__(self, model: nn.Module, step: Callable[[], torch.Tensor], blocks: str | Iterable[str] | None = None,
                 *, choices: Iterable[str] = ("keep", "checkpoint", "offload"), max_error: float | None = None,
                 costs: CostModel | None = None, min_bytes: int = 16 * 1024, repeats: int = 3,
                 keep: Iterable[torch.Tensor] = ()) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"MemoryPlanner takes an nn.Module, got {type(model).__name__}")
        if not callable(step):
            raise TypeError(f"step must be a function that runs the forward pass and returns the loss, "
                            f"got {type(step).__name__}")
        choices = tuple(dict.fromkeys(["keep", *([choices] if isinstance(choices, str) else choices)]))
        for c in choices:
            if c not in CHOICES:
                raise ValueError(f"unknown choice {c!r}; choose among {', '.join(CHOICES)}")
        compress = [c for c in choices if c in ("bf16", "int8")]
        if compress and max_error is None:
            raise ValueError(f"{' and '.join(compress)} change the gradients: say how much you accept with "
                             "max_error= (a relative L2 error of all gradients, e.g. 1e-2)")
        if max_error is not None and not (isinstance(max_error, (int, float)) and max_error > 0):
            raise ValueError(f"max_error must be a number > 0, got {max_error!r}")
        if not isinstance(min_bytes, int) or isinstance(min_bytes, bool) or min_bytes < 0:
            raise ValueError(f"min_bytes must be an int >= 0 (a size in bytes), got {min_bytes!r}")
        if not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
        keep = [keep] if isinstance(keep, torch.Tensor) else list(keep)
        if not all(isinstance(t, torch.Tensor) for t in keep):
            raise TypeError("keep takes the tensors that are alive anyway (the batch, the labels), e.g. keep=[x, y]")
        names = [n for n, _ in model.named_children()] if blocks is None else as_names(blocks)
        if not names:
            raise ValueError("the model has no children to plan for: name its blocks with blocks=[...]")
        found = get_modules(model, names)
        for outer in found:
            for inner in found:
                if inner != outer and _inside(inner, outer):
                    raise ValueError(f"block {inner!r} is inside block {outer!r}: name blocks that do not nest")
        self.model, self.step, self.blocks = model, step, found
        self.choices, self.max_error, self.min_bytes = choices, max_error, min_bytes
        param = next(model.parameters(), None)
        self.device = param.device if param is not None else torch.device("cpu")
        self.keep = keep
        self.profiles, self._top = _profile(model, step, found, repeats, keep)
        self.fixed_bytes = sum(self._top.values())
        if compress:
            _grad_errors(model, step, self.profiles, found, compress)
        self.costs: CostModel = costs if costs is not None else MeasuredCosts.measure(self.device)

    def _kept(self, k: int, prev: str | None) -> int:
        return sum(s.storage_bytes for s in self._stored(k, prev)[1].values())

    @property
    def baseline_bytes(self) -> int:
        """Activation bytes held after forward without a plan (modelled the same way as a plan's)."""
        return self.fixed_bytes + sum(self._kept(k, "keep") for k in range(len(self.profiles)))

    def _stored(self, k: int, prev: str | None) -> tuple[BlockProfile, dict[int, _Stored]]:
        """Block ``k`` and the storages it must hold itself (not those the previous block keeps)."""
        block, before = self.profiles[k], self._held_before(k, prev)
        return block, {key: s for key, s in block.saved.items() if key not in before}

    def _held_before(self, k: int, prev: str | None) -> set[int]:
        """Storages held anyway when block ``k`` runs: the previous block's if it keeps them, and those
        saved outside every block (the head saves the last block's output)."""
        return set(self._top) | (set(self.profiles[k - 1].saved) if k and prev == "keep" else set())

    def _options(self, k: int, prev: str | None) -> list[_Option]:
        block, own = self._stored(k, prev)
        shared = [s for key, s in block.saved.items() if key not in own]  # the previous block keeps these
        options = []
        for choice in self.choices:
            if choice == "checkpoint":
                before = self._held_before(k, prev)
                held = sum(b for key, b in block.inputs.items() if key not in before)
                options.append(_Option(choice, held, 0, self.costs.recompute(block)))
                continue
            if choice in ("bf16", "int8") and block.grad_error.get(choice, math.inf) > (self.max_error or 0):
                continue
            held, moved = _held_bytes(own.values(), choice, self.min_bytes)
            for s in shared:  # packed again by this block's context: moved or encoded once more
                h, m = _one(s, choice, self.min_bytes)
                moved += m
                if choice in ("bf16", "int8") and m:
                    held += h  # a compressed copy next to the original the previous block keeps
            seconds = (0.0 if choice == "keep" else self.costs.offload(block, moved) if choice == "offload"
                       else self.costs.compress(block, choice, moved))
            options.append(_Option(choice, held, moved, seconds))
        return options

    def plan(self, budget: int) -> MemoryPlan:
        """The plan with the least modelled time whose modelled bytes fit ``budget``; :class:`BudgetError` if none."""
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
            raise ValueError(f"budget must be an int >= 0 (bytes of activations held after forward), got {budget!r}")
        order = {c: i for i, c in enumerate(self.choices)}
        # frontier[choice of the last block] = Pareto-optimal (bytes, seconds, ranks, options)
        frontier: dict[str | None, list[tuple[int, float, tuple[int, ...], tuple[_Option, ...]]]] = {
            None: [(self.fixed_bytes, 0.0, (), ())]}
        for k in range(len(self.profiles)):
            nxt: dict[str | None, list] = {}
            for prev, plans in frontier.items():
                for option in self._options(k, prev):
                    for held, seconds, ranks, opts in plans:
                        nxt.setdefault(option.choice, []).append(
                            (held + option.held, seconds + option.seconds, ranks + (order[option.choice],),
                             opts + (option,)))
            frontier = {c: _pareto(plans) for c, plans in nxt.items()}
        candidates = [p for plans in frontier.values() for p in plans]
        fitting = [p for p in candidates if p[0] <= budget]
        if not fitting:
            least = min(p[0] for p in candidates)
            raise BudgetError(
                f"no plan meets a budget of {format_bytes(budget)} ({budget} bytes): the least this planner can "
                f"reach with {', '.join(self.choices)} is {format_bytes(least)} ({least} bytes), of "
                f"{format_bytes(self.baseline_bytes)} without a plan. Allow more choices (offload, or bf16 / int8 "
                "with max_error=), split the model into more blocks, or use a smaller batch.")
        held, seconds, ranks, opts = min(fitting, key=lambda p: (round(p[1], 15), p[0], p[2]))
        rows = [(p.name, o, self._kept(i, "keep")) for i, (p, o) in enumerate(zip(self.profiles, opts))]
        return MemoryPlan(self.model, self.blocks, rows, budget, self.baseline_bytes, self.fixed_bytes,
                          self.min_bytes, self.device, self.keep)

    def table(self) -> str:
        """What was measured, per block: bytes saved, input bytes, FLOPs, forward time, gradient errors."""
        rows = [(p.name, format_bytes(p.saved_bytes), format_bytes(sum(p.inputs.values())), f"{p.flops:.3g}",
                 f"{p.forward_s * 1e3:.2f} ms", " ".join(f"{f} {e:.1e}" for f, e in p.grad_error.items()) or "-")
                for p in self.profiles]
        return format_table(("block", "saved", "input", "FLOPs", "forward", "grad error"), rows, right=(1, 2, 3, 4))

    def __str__(self) -> str:
        return self.table()


def _grad_errors(model: nn.Module, step: Callable[[], torch.Tensor], profiles: list[BlockProfile],
                 blocks: dict[str, nn.Module], formats: list[str]) -> None:
    """Each block's gradient error with only that block compressed (as :func:`hooklab.gradient_error`
    measures it, the plain gradients computed once); gradients and buffers are restored."""
    params = [p for p in model.parameters() if p.requires_grad]
    old_grads = [p.grad for p in params]
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}

    def grads(context: Any) -> torch.Tensor:
        for p in params:
            p.grad = None
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            with context:
                loss = step()
            loss.backward()
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten().double() for p in params])

    try:
        reference = grads(contextlib.nullcontext())
        norm = reference.norm().item() or 1.0
        for profile in profiles:
            for fmt in formats:
                approx = grads(offload_module(blocks[profile.name], lambda f=fmt: CompressSaved(f)))  # type: ignore[misc]
                profile.grad_error[fmt] = (approx - reference).norm().item() / norm
    finally:
        for p, g in zip(params, old_grads):
            p.grad = g
        with torch.no_grad():
            for name, b in model.named_buffers():
                b.copy_(buffers[name])


def _pareto(plans: list[tuple[int, float, tuple[int, ...], tuple[_Option, ...]]]) -> list:
    """The plans no other plan beats in both bytes and seconds (ties broken by the choices' order)."""
    plans.sort(key=lambda p: (p[0], round(p[1], 15), p[2]))
    kept: list = []
    best = math.inf
    for p in plans:
        if round(p[1], 15) < best:
            kept.append(p)
            best = round(p[1], 15)
    return kept
