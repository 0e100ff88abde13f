"""Meet an activation-memory budget at the least modelled cost: per block, keep, checkpoint (alone or in a
segment with the blocks after it), offload or compress.

:class:`MemoryPlanner` measures a model once, per block (one forward with a
:class:`hooklab.SavedTensorLedger`, one under a FLOP counter, then a few timed forwards), and
:meth:`MemoryPlanner.plan` chooses for every block what to do with the tensors it saves for backward::

    planner = MemoryPlanner(model, step)             # choices: keep, checkpoint, segment, offload
    plan = planner.plan(budget=planner.baseline_bytes // 4)
    print(plan)                   # block, choice, bytes held, bytes saved, time added
    with plan.apply():            # checkpoint_modules / checkpoint_segments / offload_module, restored on exit
        loss = step()
    loss.backward()

``step`` is a function that runs the forward pass on a sample batch and returns the scalar loss.

**The memory model.** The budget bounds the activation bytes the forward pass leaves for backward
(what the ledger counts: tensors saved by autograd, each storage once, parameters and the model's
inputs excluded). Block ``k`` saves the storages ``S_k`` (including its input when its first op
saves it), receives the inputs ``I_k`` and returns ``O_k``. A storage the previous block *keeps*, or one
saved outside every block (the head saves the last block's output), is not counted again.
Then block ``k`` holds: ``keep`` all of ``S_k``; ``checkpoint`` only ``I_k`` (the recompute in backward
needs it); ``segment`` (checkpointed together with the block before it, as ``checkpoint_sequential``
does: :func:`hooklab.segments.checkpoint_segments`) only what of ``I_k`` is not ``O_{k-1}``, so a run of
segment blocks holds one input; ``offload`` the tensors under ``min_bytes`` (the rest goes to CPU memory
on a GPU — :class:`hooklab.OverlappedOffload` — and to disk on a CPU — :class:`hooklab.SaveOnDisk`);
``bf16`` / ``int8`` the float tensors of at least 4 KiB at 1/2 / 1/4 of their size (+ one float scale per
channel for int8), the others as they are (:class:`hooklab.CompressSaved`). Saved tensors outside every
block (the head, the loss) are a fixed cost; pass tensors that are alive anyway (the labels) as
``keep``. A segment is offered where a block receives the previous block's output itself (the profile
checks it). A plan's bytes are counted exactly, as the set of storages it holds. They leave out one thing autograd
does not save: the random-number state each checkpointed block call keeps until its recompute, to replay dropout
(``torch.get_rng_state()``: 5,056 bytes on a CPU, plus the GPU generator's on a GPU) — a few KiB beside blocks that
hold MiB; :meth:`MemoryPlanner.decide` counts them.

**The peak.** During backward a checkpointed block holds its recomputed tensors again, and a segment all
of its blocks' at once: the plan's ``peak_bytes`` models the most the activations reach (what the blocks
before it still hold, plus the recompute). Among equally fast plans the one with the lower peak wins, so a
segment is chosen where it is needed to meet the budget; ``plan(budget, peak=...)`` bounds the peak too.

**The time model** (a :class:`CostModel`, injectable): a checkpointed block (alone or in a segment) costs
its forward once more; an offloaded block costs the bytes it moves over a copy speed (both ways) plus a
cost per tensor, times ``1 - overlap``; a compressed block the bytes it encodes over an encoding speed plus
a cost per tensor. :class:`MeasuredCosts` (the default) times the block forwards and measures the speeds on
this machine (the process's CPU time on a CPU, medians of repeats, never faster than a plain memory copy);
:class:`CountedCosts` counts the forward FLOPs instead and takes the speeds as numbers, so that the plan
does not depend on the machine (tests, committed notebook outputs).

**The choice** is exact for the model: a dynamic programme over the blocks in the order they run (state:
the previous block's choice) keeps every plan that no other plan beats in bytes, time and peak at once;
the fastest plan under the budget wins. With measured costs, plans whose modelled added times are within
:attr:`MemoryPlanner.resolution` (5 %) of the fastest's count as equally fast, since two measurements of the
same machine differ that much; with :class:`CountedCosts` only equal times do. Among them the lower peak wins,
then fewer bytes, then the earlier choices in ``choices``, so a near tie does not flip from run to run. Compression is only offered for a block whose
gradient error (:func:`hooklab.gradient_errors`, that block compressed alone) is below ``max_error``; the
blocks compressed to one format share one context per forward pass, so a storage two of them save is
compressed once. A budget that no plan meets raises :class:`BudgetError`, which says the least reachable
memory.

**Deciding by measuring.** A time model fitted on a busy machine cannot order plans a few per cent apart, and misses
what it never measured. :meth:`MemoryPlanner.decide` uses it only to propose: it measures the model's few best plans,
PyTorch's plain ``checkpoint`` around each block (:class:`CheckpointEach`), every saved tensor of the step offloaded
(:class:`OffloadStep`, the loss's own included) and ``checkpoint_sequential`` at every segment count
(:class:`SequentialCheckpoint`), and
``torch.compile`` under ``activation_memory_budget`` (:class:`CompiledBudget`) on this machine, bytes first, then step
times in interleaved rounds, and returns a :class:`MemoryDecision`: the fastest at the median, each step timed over
the model as it is in the same round, extra rounds where the two fastest were not told apart, or a simpler one
(plain PyTorch first) in a near tie (within 1 % and never beaten in every round), with the evidence and what
measuring cost (:mod:`hooklab.planner.decide` says how).

>>> import torch
>>> from torch import nn
>>> _ = torch.manual_seed(0)
>>> block = lambda: nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh())
>>> model = nn.Sequential(*[block() for _ in range(4)])
>>> x = torch.randn(64, 256)
>>> planner = MemoryPlanner(model, lambda: model(x).sum(), costs=CountedCosts(), choices=("keep", "checkpoint"))
>>> plan = planner.plan(budget=planner.baseline_bytes // 2)
>>> plan.choices
{'0': 'checkpoint', '1': 'checkpoint', '2': 'keep', '3': 'checkpoint'}
>>> print(plan)
block  choice           held      saved  time added
0      checkpoint        0 B  128.0 KiB      168 ns
1      checkpoint   64.0 KiB   64.0 KiB      168 ns
2      keep        192.0 KiB  -64.0 KiB        0 ns
3      checkpoint        0 B  128.0 KiB      168 ns
total              256.0 KiB  256.0 KiB      503 ns
budget 256.0 KiB: met (modelled 256.0 KiB of 512.0 KiB without a plan, 50%)

With segments allowed, a quarter of the memory costs the same recompute: blocks 1 to 3 keep one input.

>>> segmented = MemoryPlanner(model, lambda: model(x).sum(), costs=CountedCosts(),
...                           choices=("keep", "checkpoint", "segment"))
>>> segmented.plan(budget=segmented.baseline_bytes // 4).choices
{'0': 'keep', '1': 'checkpoint', '2': 'segment', '3': 'segment'}
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

import torch
from torch import nn

from .._checks import flag
from .._text import format_bytes, format_table
from ..errors import BudgetError
from ..lookup import as_names, get_modules
from ..meter import gradient_errors
from ..offload import CompressSaved, OffloadScope, offload_module
from ._profile import BlockProfile, clock_of, model_state_kept, profile_bytes, profile_flops, profile_times
from ._search import CHOICES, Plan, Search, seconds_key
from .alternatives import CheckpointAndOffload, CheckpointEach, CompiledBudget, OffloadStep, SequentialCheckpoint
from .costs import CostModel, CountedCosts, MeasuredCosts, check_costs
from .decide import Candidate, MemoryDecision, measure_and_decide
from .plan import MemoryPlan, _ms

__all__ = ["BlockProfile", "BudgetError", "Candidate", "CheckpointAndOffload", "CheckpointEach", "CompiledBudget", "CostModel", "CountedCosts",
           "MeasuredCosts", "MemoryDecision", "MemoryPlan", "MemoryPlanner", "OffloadStep", "SequentialCheckpoint"]

TOOL = "MemoryPlanner"


def _inside(module: str, block: str) -> bool:
    return block == "" or module == block or module.startswith(block + ".")


def _whole(value: object, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def _check_budget(budget: object) -> None:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"budget must be an int >= 0 (bytes of activations held after forward), got {budget!r}")


def _compressing(block: nn.Module, fmt: str) -> Callable[[], OffloadScope]:
    """A context factory: ``block`` alone compressed (what its gradient error is measured under)."""
    return lambda: offload_module(block, lambda: CompressSaved(fmt))  # type: ignore[arg-type]


def _check_choices(choices: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(choices, str):
        choices = [choices]
    elif not isinstance(choices, Iterable):
        raise TypeError(f"choices must be a choice or several, e.g. ('keep', 'checkpoint'); got {choices!r}")
    picked = tuple(dict.fromkeys(["keep", *choices]))
    for c in picked:
        if c not in CHOICES:
            raise ValueError(f"unknown choice {c!r}; choose among {', '.join(CHOICES)}")
    if "segment" in picked and "checkpoint" not in picked:
        raise ValueError("'segment' continues a checkpointed run of blocks: allow 'checkpoint' too (it starts one)")
    return picked


class MemoryPlanner:
    """Measure a model's blocks once; :meth:`plan` a choice per block for a memory budget.

    ``model``: the model; ``step``: a function running the forward pass on a sample batch and
    returning the scalar loss (not calling backward); ``blocks``: module names (default: the model's
    children), none inside another, each a different module. Keyword-only: ``choices`` allowed (``"keep"``
    always is), ``max_error`` the relative gradient error a compressed block may cause (needed for ``"bf16"`` /
    ``"int8"``), ``costs`` a :class:`CostModel` (default: :meth:`MeasuredCosts.measure` on the model's
    device), ``min_bytes`` the smallest tensor an offload moves, ``repeats`` timed forwards per block, ``keep``
    tensors that are alive anyway (the labels: the model's own inputs are found by themselves), neither
    counted nor offloaded. Measuring leaves the model as it was: gradients, buffers (batch-norm statistics),
    train/eval modes and the random-number state (torch's, Python's ``random``, NumPy's global one) are put back.
    A model on the meta device (its tensors hold no memory) and a step whose loss does not require grad (a frozen
    model: nothing is saved for backward) are refused.
    """

    def __init__(self, model: nn.Module, step: Callable[[], torch.Tensor], blocks: str | Iterable[str] | None = None,
                 *, choices: str | Iterable[str] = ("keep", "checkpoint", "segment", "offload"),
                 max_error: float | None = None, costs: CostModel | None = None, min_bytes: int = 16 * 1024,
                 repeats: int = 5, keep: Iterable[torch.Tensor] = ()) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"{TOOL} takes an nn.Module, got {type(model).__name__}")
        if not callable(step):
            raise TypeError(f"step must be a function that runs the forward pass and returns the loss, "
                            f"got {type(step).__name__}")
        picked = _check_choices(choices)
        compress = [c for c in picked if c in ("bf16", "int8")]
        if compress and max_error is None:
            raise ValueError(f"{' and '.join(compress)} change the gradients: say how much you accept with "
                             "max_error= (a relative L2 error of all gradients, e.g. 1e-2)")
        if max_error is not None and (isinstance(max_error, bool) or not isinstance(max_error, (int, float))
                                      or not 0 < max_error < math.inf):
            raise ValueError(f"max_error must be a number > 0, got {max_error!r}")
        _whole(min_bytes, "min_bytes", 0)
        _whole(repeats, "repeats", 1)
        if costs is not None:
            check_costs(costs)
        keep = [keep] if isinstance(keep, torch.Tensor) else list(keep)
        if not all(isinstance(t, torch.Tensor) for t in keep):
            raise TypeError("keep takes the tensors that are alive anyway (the batch, the labels), e.g. keep=[x, y]")
        names = [n for n, _ in model.named_children()] if blocks is None else as_names(blocks)
        if not names:
            raise ValueError("the model has no children to plan for: name its blocks with blocks=[...]")
        found = get_modules(model, names)
        seen: dict[int, str] = {}
        for name, module in found.items():
            if id(module) in seen:
                raise ValueError(f"block {name!r} is the same module as block {seen[id(module)]!r}: a choice applies "
                                 "to a module (every call of it), so name it once")
            seen[id(module)] = name
        for outer in found:
            for inner in found:
                if inner != outer and _inside(inner, outer):
                    raise ValueError(f"block {inner!r} is inside block {outer!r}: name blocks that do not nest")
        param = next(model.parameters(), None)
        self.device = param.device if param is not None else torch.device("cpu")
        meta = next((n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta), None)
        if meta is not None or any(t.is_meta for t in keep):
            where = f"{meta!r} is" if meta is not None else "a tensor in keep is"
            raise ValueError(f"{TOOL}: {where} on the meta device, where tensors hold no memory, so there are no "
                             "bytes to measure: build the model on a real device (or model.to_empty(device=...) "
                             "and load its weights) and pass it a real batch")
        self.model, self.step, self.choices = model, step, picked
        self.max_error, self.min_bytes, self.keep = max_error, min_bytes, keep
        with model_state_kept(model) as params:
            self.profiles, self._top = profile_bytes(model, step, found, keep, params)
            profile_flops(model, step, found, self.profiles)
            profile_times(model, step, found, self.profiles, repeats, self.device)
        self.blocks = {p.name: found[p.name] for p in self.profiles}  # in the order they run
        if compress:
            variants = {(k, fmt): _compressing(self.blocks[p.name], fmt)
                        for k, p in enumerate(self.profiles) for fmt in compress}
            for (k, fmt), error in gradient_errors(model, step, variants).items():
                self.profiles[k].grad_error[fmt] = error
        self.costs: CostModel = costs if costs is not None else MeasuredCosts.measure(self.device, keep=[model])
        # the share of a plan's added time that two measurements of this machine cannot tell apart; a time model
        # that counts (CountedCosts) is exact
        self.resolution = 0.05 if isinstance(self.costs, MeasuredCosts) else 0.0
        self.search = Search(self.profiles, self._top, picked, self.costs, min_bytes, max_error)
        self.fixed_bytes = self.search.fixed_bytes
        self.baseline_bytes = self.search.held_bytes(("keep",) * len(self.profiles))
        # what decide() measured that does not depend on the budget: checkpoint_sequential's bytes per segment
        # count, and each compiled model (backend, fraction) with its bytes (None: it did not compile)
        self._sequential_bytes: dict[int, int] = {}
        self._compiled: dict[tuple[str, float], tuple[CompiledBudget | None, int | None]] = {}

    def plan(self, budget: int, *, peak: int | None = None, tolerance: float | None = None) -> MemoryPlan:
        """The fastest plan (by the time model) whose bytes held after forward fit ``budget`` (and whose modelled
        peak during backward fits ``peak``, if given); :class:`BudgetError` if none.

        Plans within ``tolerance`` seconds of the fastest count as equally fast (default: :attr:`resolution` times
        the fastest plan's added time: 5 % with measured costs, 0 with a counted time model): among them the
        lowest peak wins, then the fewest bytes, then the earlier choices, so that a near tie does not follow the
        noise of a measurement. The time model only proposes: :meth:`decide` measures.
        """
        _check_budget(budget)
        if peak is not None and (isinstance(peak, bool) or not isinstance(peak, int) or peak < 0):
            raise ValueError(f"peak must be an int >= 0 (bytes of activations during backward) or None, got {peak!r}")
        if tolerance is not None and (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float))
                                      or not 0 <= tolerance < math.inf):
            raise ValueError(f"tolerance must be a number of seconds >= 0 or None, got {tolerance!r}")
        return self._select(budget, peak, tolerance, None)

    def _select(self, budget: int, peak: int | None, tolerance: float | None,
                allowed: frozenset[str] | None, rng: int = 0, stop: Callable[[], bool] | None = None) -> MemoryPlan:
        """:meth:`plan`, among the plans whose choices are all in ``allowed`` (None: any); ``rng``: bytes of the
        random-number state each checkpointed block call keeps, counted against the budget (:meth:`decide`);
        ``stop``: asked as the search goes, which it ends with ``SearchStopped`` where it says True."""
        plans = [(p, self.search.held_bytes(p.choices)) for p in self.search.frontier(stop)
                 if allowed is None or set(p.choices) <= allowed]
        fitting = [(p, held) for p, held in plans if held + rng * self.search.checkpointed_calls(p.choices) <= budget
                   and (peak is None or p.peak_bytes <= peak)]
        if not fitting:
            least = min(held for p, held in plans if peak is None or p.peak_bytes <= peak) if peak is None or any(
                p.peak_bytes <= peak for p, _ in plans) else None
            also = "" if peak is None else f" with a peak of at most {format_bytes(peak)} ({peak} bytes)"
            reach = ("no plan keeps the peak that low" if least is None else
                     f"the least this planner can reach{also} with {', '.join(self.choices)} is "
                     f"{format_bytes(least)} ({least} bytes)")
            raise BudgetError(
                f"no plan meets a budget of {format_bytes(budget)} ({budget} bytes){also}: {reach}, of "
                f"{format_bytes(self.baseline_bytes)} without a plan. Allow more choices (segment, offload, or bf16 / "
                "int8 with max_error=), split the model into more blocks, or use a smaller batch.")
        fastest = min(p.seconds for p, _ in fitting)
        if tolerance is None:
            tolerance = self.resolution * fastest
        equal = [(p, held) for p, held in fitting if seconds_key(p.seconds) <= seconds_key(fastest + tolerance)]
        best, held = min(equal, key=lambda ph: (ph[0].peak_bytes, ph[1], ph[0].ranks))
        return self._plan_of(best, held, budget, peak)

    def _ranked(self, budget: int, rng: int = 0, stop: Callable[[], bool] | None = None) -> Iterator[MemoryPlan]:
        """The plans of the frontier that meet ``budget`` (``rng`` and ``stop`` as for :meth:`_select`), fastest
        first by the time model, each made when it is asked for (a frontier can hold a million plans)."""
        fitting = [(p, held) for p in self.search.frontier(stop) if (held := self.search.held_bytes(p.choices))
                   + rng * self.search.checkpointed_calls(p.choices) <= budget]
        fitting.sort(key=lambda ph: (seconds_key(ph[0].seconds), ph[0].peak_bytes, ph[1], ph[0].ranks))
        return (self._plan_of(p, held, budget, None) for p, held in fitting)

    def decide(self, budget: int, *, plans: int = 3, sequential: bool = True, plain: bool = True,
               backends: str | Iterable[str] = ("inductor",), rounds: int = 5, max_seconds: float | None = None,
               clock: Callable[[], float] | None = None) -> MemoryDecision:
        """Measure the model's few best plans and the plain-PyTorch alternatives that meet ``budget`` on this
        machine, and return the fastest (the lowest median of its per-round step time over the model as it is; a
        simpler one in a near tie: within 1 %, never beaten in every round) as a :class:`MemoryDecision`, with the
        evidence: ``print(decision)`` shows every candidate's measured bytes,
        step time and spread; ``with decision.apply():`` runs the choice.

        ``budget``: bytes held after forward, as for :meth:`plan`. Keyword-only: ``plans`` how many of the model's
        plans to measure (its pick, the fastest that only recomputes, the fastest that does not offload, then the
        next fastest); ``plain``: also ``torch.utils.checkpoint`` around each block (:class:`CheckpointEach`) and
        every saved tensor of the step offloaded (:class:`OffloadStep`);
        ``sequential``: also ``checkpoint_sequential`` at every segment count (the model must be an
        ``nn.Sequential``); ``backends``: ``torch.compile`` backends to try with ``activation_memory_budget`` (a
        model that does not compile is noted and left out; ``()``: none); ``rounds``: interleaved timing rounds
        (at least 2); ``max_seconds``: the bound on what deciding may cost, in seconds of ``clock`` (no
        measurement starts past it, half of it is kept for timing, and running out of it never raises; default: the
        time of 100 steps of the model as it is, at least 30 s); ``clock``: the clock to time with (default: the
        process's CPU time on a CPU, the wall clock after a synchronisation on a GPU; one that does not advance over
        a step is refused). The bytes count the random-number states each checkpoint keeps. How it measures and
        decides: :mod:`hooklab.planner.decide`.
        The model is left as it was (gradients, buffers, modes, the random-number state: torch's, Python's
        ``random``, NumPy's global one); the bytes of
        ``checkpoint_sequential`` and the compiled models are kept for the next call.

        >>> import torch
        >>> from torch import nn
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.Tanh()) for _ in range(6)])
        >>> x = torch.randn(64, 256)
        >>> planner = MemoryPlanner(model, lambda: model(x).sum(), choices=("keep", "checkpoint", "segment"))
        >>> decision = planner.decide(planner.baseline_bytes // 2, backends=(), rounds=3)
        >>> decision.held_bytes <= planner.baseline_bytes // 2
        True
        >>> with decision.apply():            # the plan, checkpoint_sequential or the compiled model chosen
        ...     loss = model(x).sum()
        >>> loss.backward()
        """
        _check_budget(budget)
        _whole(plans, "plans", 0)
        _whole(rounds, "rounds", 2)
        flag(sequential, "sequential")
        flag(plain, "plain")
        if isinstance(backends, str):
            backends = (backends,)
        backends = tuple(backends)
        if not all(isinstance(b, str) and b for b in backends):
            raise TypeError(f"backends are torch.compile backend names such as 'inductor', got {backends!r}")
        if max_seconds is not None and (isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float))
                                        or not 0 < max_seconds < math.inf):
            raise ValueError(f"max_seconds must be a number of seconds > 0 or None, got {max_seconds!r}")
        if clock is not None and not callable(clock):
            raise TypeError(f"clock must be a function returning seconds (e.g. time.process_time), got {clock!r}")
        name = "given" if clock is not None else "wall" if self.device.type == "cuda" else "process CPU"
        with model_state_kept(self.model):
            bound = None if max_seconds is None else float(max_seconds)
            return measure_and_decide(self, budget, plans=plans, sequential=sequential, plain=plain, backends=backends,
                                      rounds=rounds, max_seconds=bound, clock=clock or clock_of(self.device),
                                      clock_name=name)

    def _plan_of(self, best: Plan, held: int, budget: int, peak: int | None) -> MemoryPlan:
        kept = [self.search.options(k, "keep" if k else None)[0] for k in range(len(self.profiles))]
        rows = [(p.name, o, k.held) for p, o, k in zip(self.profiles, best.options, kept, strict=True)]
        return MemoryPlan(self.model, self.blocks, rows, budget, self.baseline_bytes, self.fixed_bytes, held,
                          best.peak_bytes, self.min_bytes, self.device, self.keep, peak)

    def table(self) -> str:
        """What was measured, per block: bytes saved, input bytes, FLOPs, forward time, gradient errors, and
        whether a segment can run into it from the block before."""
        rows = [(p.name, format_bytes(p.saved_bytes), format_bytes(sum(p.inputs.values())), f"{p.flops:.3g}",
                 _ms(p.forward_s), " ".join(f"{f} {e:.1e}" for f, e in p.grad_error.items()) or "-",
                 "yes" if p.chained else "-")
                for p in self.profiles]
        return format_table(("block", "saved", "input", "FLOPs", "forward", "grad error", "segment"), rows,
                            right=(1, 2, 3, 4))

    def __str__(self) -> str:
        return self.table()
