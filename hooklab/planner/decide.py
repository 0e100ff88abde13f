"""Decide by measuring: the planner's model proposes, a measurement of this machine decides.

A time model fitted on a busy machine cannot order plans that are 5-30 % apart, and it under-models what it has
not seen (a disk write costs more than its per-byte speed says). :meth:`hooklab.MemoryPlanner.decide` therefore
uses the model only to propose, and decides between the proposals and the plain-PyTorch ways to meet the same budget
by running them. What it measures, in this order, each only while the measuring bound allows:

1. **Bytes** held after forward (the planner's currency: tensors made by the forward pass and alive when it ends,
   the loss and the model's inputs left out), in one forward pass under :class:`hooklab.MemoryMeter`, plus the
   random-number states the checkpoints keep, which the meter does not see (``torch.get_rng_state()``, 5,056 bytes
   on a CPU, and the GPU generator's on a GPU, per checkpointed region: per block call of a plan or of
   :class:`CheckpointEach`, per segment but the last of ``checkpoint_sequential``; the plans are proposed with
   them counted, though a :class:`hooklab.MemoryPlan`'s own ``held_bytes`` leaves them out): the model as
   it is, the planner's few best plans (its pick, the fastest plan that only recomputes, the fastest that does not
   offload), ``torch.utils.checkpoint`` around each block (:class:`CheckpointEach`), every saved tensor of the step
   offloaded (:class:`OffloadStep`: it also reaches what is saved outside every block, the loss's own tensors),
   and ``checkpoint_sequential`` at every segment count (an ``nn.Sequential`` only): its bytes are not monotonic in
   the count, so every count is measured.
2. ``torch.compile`` under ``activation_memory_budget`` = budget / baseline, and half that if the first misses the
   budget (the fraction is of the partitioner's own estimate): bytes by walking the compiled graph.
3. **Step time** (forward and backward) of every candidate that meets the budget, and of the model as it is, in
   interleaved rounds, each starting one candidate later, on the process's CPU clock (on a GPU, the wall clock
   after a synchronisation). Of the ``checkpoint_sequential`` counts that meet the budget, only those that
   recompute the fewest children are timed: a count recomputes a prefix of the children, so a longer prefix does
   all the work of a shorter one, and more. From the third round on, a candidate slower than the fastest by more
   than 5 % in every round is dropped.
4. **Extra rounds for the finalists**: where the rounds have not told the choice and the fastest other candidate
   apart (neither was faster in every round), the two and the model as it is run ``rounds`` rounds more.

**Paired, not raw**: a candidate's speed is the median over the rounds of its step time over the model as it is
*in the same round*, so a change of the machine's load between rounds, which moves every step of a round alike,
does not reorder the candidates (the *step ratio*). **The decision**: the fastest is the candidate with the lowest
median step ratio. A simpler candidate is chosen instead only in a near tie: its median is within 1 % of the
fastest's (:data:`TIE_MARGIN`) and no other candidate was faster than it in every round (the decision says it was a
tie); a wider gap that the rounds do not confirm is still a gap, and keeping the simpler one there gives time away.
Simpler, in order: a plain checkpoint (``checkpoint_sequential``, or ``checkpoint`` around each block),
``torch.compile``, a plan that only recomputes, a plan that offloads or compresses. A plan that offloads (to disk on a
CPU) is held to the same rule: it is chosen only where its median step ratio is lower than that of every
recomputing candidate by more than the tie margin, so it is never chosen where recomputing is as fast or faster.

**The cost** of deciding is measured on the same clock and stated on the decision (``seconds``, and
``wall_seconds``: on a CPU the process's CPU time does not include a compiler's subprocesses, inductor's C++ builds,
which the wall clock does). It is bounded by ``max_seconds`` (default: the time of 100 steps of the model as it is, at least
30 s), the plan search included: a measurement starts only where its expected time (a round: each candidate's last
step) still fits, and what has started is finished, so the cost passes the bound by at most the error of that
estimate, one compile or one search of the time model's plans. That search is bounded too: the planner's own pick is
looked for however little of the bound is left, but its search (a dynamic programme over the blocks, whose frontier
grows with their number: on ResNet-152's 50 blocks with four choices it alone cost more than a minute) ends where it
alone has cost the share of the bound before timing; the plain candidates are then measured and timed without it, and
a note says where the search stopped. Half the bound (:data:`TIMING_SHARE`) is kept for
timing: the plan search (after the planner's own pick), the bytes and the compiles stop where they would pass the
other half, so that the finalists are timed. Bytes are measured past that half while no candidate measured meets
the budget, but not past the whole bound (only the planner's own pick is measured however little time is left): a
model of 52 blocks whose plans all miss the budget once measured 51 ``checkpoint_sequential`` counts past any bound
(its counts are now measured nearest the square root of the block count first, where they hold least); timing starts only as many candidates as the rest of the bound
leaves time for (a step each and two rounds; the first measured first); where the timing runs out, the choice is made
among the candidates timed (the reason says so); where nothing could be timed, the simplest candidate that meets the
budget is returned untimed (its reason says so). What the bound left unmeasured is listed on the decision. A clock that does
not advance over a step, or runs backwards, is refused: step times are divided by one another.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import math
import statistics
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .._text import format_bytes, format_table
from .._torch_internals import storage_key, tree_flatten
from ..errors import BudgetError
from ..meter import MemoryMeter
from ..scope import HookScope
from ._search import SearchStopped
from .alternatives import (
    CheckpointAndOffload,
    CheckpointEach,
    CompiledBudget,
    OffloadStep,
    SequentialCheckpoint,
    graph_saved_bytes,
)
from .plan import MemoryPlan

if TYPE_CHECKING:
    from . import MemoryPlanner

__all__ = ["Candidate", "MemoryDecision", "Spread", "measure_and_decide"]

TOOL = "MemoryPlanner.decide"
DROP_AFTER = 3      # rounds before a candidate can be dropped
DROP_MARGIN = 0.05  # ... when it is slower than the fastest by more than this in every round
TIE_MARGIN = 0.01   # a simpler candidate whose median ratio is this close to the fastest's (and not beaten) is kept
DEFAULT_STEPS, DEFAULT_FLOOR = 100, 30.0  # the default bound: 100 steps of the model as it is, at least 30 s
TIMING_SHARE = 0.5  # the share of the bound kept for timing: the plan search, bytes and compiles stop at the rest
RECOMPUTE = frozenset(("keep", "checkpoint", "segment"))
RANKS = {"as is": 0, "checkpoint_sequential": 1, "checkpoint": 1, "torch.compile": 2, "plan (recompute)": 3,
         "plan": 4, "offload step": 4, "checkpoint + offload": 4}


@dataclass(frozen=True)
class Spread:
    """A ratio over the rounds: median, lowest and highest round."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        values = list(values)
        return cls(statistics.median(values), min(values), max(values))

    def __str__(self) -> str:
        return f"{self.median:.2f} [{self.low:.2f}-{self.high:.2f}]"


class _AsIs:
    """The model as it is (it meets the budget): ``apply()`` changes nothing."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def __str__(self) -> str:
        return "the model as it is"

    def apply(self) -> AbstractContextManager[Any]:
        """A ``with`` block that changes nothing."""
        return nullcontext(self)


@dataclass
class Candidate:
    """One way to meet the budget and what was measured of it.

    ``name``: how to apply it, in words; ``kind``: ``"as is"``, ``"checkpoint_sequential"`` or ``"checkpoint"``,
    ``"torch.compile"``, ``"plan (recompute)"``, ``"plan"`` (a :class:`hooklab.MemoryPlan`) or ``"offload step"`` (an
    :class:`OffloadStep`) or ``"checkpoint + offload"`` (a :class:`CheckpointAndOffload`, on a GPU) (the order of
    simplicity); ``option``: what
    :meth:`apply` applies (a :class:`hooklab.MemoryPlan`, :class:`CheckpointEach`, :class:`OffloadStep`,
    :class:`SequentialCheckpoint` or :class:`CompiledBudget`); ``held_bytes``: measured bytes held after forward
    (None: not measured); ``times``: step seconds per round (empty: not timed); ``status``: why it was not timed, or
    dropped.
    """

    name: str
    kind: str
    option: Any
    held_bytes: int | None = None
    times: list[float] = field(default_factory=list)
    status: str = ""

    @property
    def rank(self) -> int:
        """Its place in the order of simplicity (0: the model as it is, 1: a plain checkpoint ... 4: a plan that
        offloads or compresses)."""
        return RANKS[self.kind]

    @property
    def median(self) -> float:
        """The median of its step times over the rounds."""
        return statistics.median(self.times)

    def paired(self, baseline: Candidate) -> float:
        """The median over the rounds of its step time over ``baseline``'s in the same round (what ranks it)."""
        return statistics.median(a / b for a, b in zip(self.times, baseline.times, strict=False))

    def apply(self) -> AbstractContextManager[Any]:
        """The candidate's ``with`` block (its option's ``apply()``)."""
        return self.option.apply()


def beats(a: Candidate, b: Candidate, margin: float = 0.0) -> bool:
    """Whether ``a`` was faster than ``b`` (by more than ``margin``) in every round both ran, two rounds at least."""
    pairs = list(zip(a.times, b.times, strict=False))
    return len(pairs) >= 2 and all(tb > ta * (1 + margin) for ta, tb in pairs)


@dataclass
class MemoryDecision:
    """What :meth:`hooklab.MemoryPlanner.decide` chose, and the evidence: :meth:`apply` runs the choice (a ``with``
    block with the lifecycle of :meth:`hooklab.MemoryPlan.apply`), :meth:`table` shows every candidate's measured
    bytes, step time over the model as it is, per-round ratio to the choice and verdict.

    ``chosen``: the :class:`Candidate` chosen (``chosen.option`` is what to use: a :class:`hooklab.MemoryPlan`, a
    :class:`SequentialCheckpoint` or a :class:`CompiledBudget`); ``baseline``: the model as it is, timed in the
    same rounds; ``candidates``: all the others; ``reason``: why this one; ``rounds``: the rounds timed;
    ``seconds``: what measuring cost on ``clock``, ``wall_seconds`` on the wall clock; ``notes``: what the bound
    or a failing compile left out.
    """

    budget: int
    chosen: Candidate
    baseline: Candidate
    candidates: list[Candidate]
    reason: str
    rounds: int
    seconds: float
    wall_seconds: float
    max_seconds: float
    clock: str
    notes: list[str] = field(default_factory=list)

    @property
    def choice(self) -> Any:
        """What to use: a :class:`hooklab.MemoryPlan`, a :class:`SequentialCheckpoint`, a :class:`CompiledBudget`
        (each with ``apply()``), or the model as it is."""
        return self.chosen.option

    @property
    def held_bytes(self) -> int:
        """The chosen candidate's measured bytes held after forward (the random-number states its checkpoints keep
        included)."""
        assert self.chosen.held_bytes is not None
        return self.chosen.held_bytes

    def apply(self) -> AbstractContextManager[Any]:
        """Inside the block the model runs the chosen candidate; on exit it is as before. One block per call."""
        return self.chosen.apply()

    def ratio(self, candidate: Candidate) -> Spread | None:
        """``candidate``'s step time over the model as it is, per round (None if it was not timed)."""
        pairs = list(zip(candidate.times, self.baseline.times, strict=False))
        return Spread.of(a / b for a, b in pairs) if pairs else None

    def versus(self, candidate: Candidate) -> Spread | None:
        """``candidate``'s step time over the chosen one's, per round (None if not timed in common rounds)."""
        pairs = list(zip(candidate.times, self.chosen.times, strict=False))
        return Spread.of(a / b for a, b in pairs) if pairs else None

    def verdict(self, candidate: Candidate) -> str:
        """What the rounds say of ``candidate`` against the choice: ``"chosen"``, ``"slower in every round"``, ``"tie
        (within the spread)"``, or why it was not timed or was dropped."""
        if candidate is self.chosen:
            return "chosen"
        if candidate.status:
            return candidate.status
        if not candidate.times or not self.chosen.times:
            return "not timed"
        return "slower in every round" if beats(self.chosen, candidate) else "tie (within the spread)"

    def table(self) -> str:
        """Every candidate: measured bytes, whether it meets the budget, step time over the model as it is and
        over the choice per round (median [min-max]), verdict; then the choice, why, and what measuring cost."""
        rows = []
        for c in [self.baseline, *self.candidates]:
            held = "-" if c.held_bytes is None else format_bytes(c.held_bytes)
            meets = "-" if c.held_bytes is None else "yes" if c.held_bytes <= self.budget else "no"
            ratio, versus = self.ratio(c), self.versus(c)
            verdict = "reference" if c is self.baseline else self.verdict(c)
            rows.append((c.name, held, meets, "-" if ratio is None else str(ratio),
                         "-" if versus is None or c is self.baseline else str(versus), verdict))
        text = format_table(("candidate", "held", "meets", "x step", "x chosen", "verdict"), rows, right=(1,))
        text += (f"\nbudget {format_bytes(self.budget)}: {self.chosen.name}: {self.reason}"
                 f"\nmeasuring: {self.seconds:.1f} s on the {self.clock} clock ({self.wall_seconds:.1f} s wall; "
                 f"bound {self.max_seconds:g} s), {self.rounds} interleaved round(s)")
        for note in self.notes:
            text += f"\n{note}"
        return text

    def __str__(self) -> str:
        return self.table()


def _noting(inputs: list[torch.Tensor]) -> Callable[..., None]:
    """A forward pre-hook (with kwargs) that notes the model's input tensors in ``inputs``."""
    def note(m: nn.Module, args: Any, kwargs: Any) -> None:
        inputs.extend(t for t in tree_flatten((args, kwargs)) if isinstance(t, torch.Tensor))
    return note


def _rng_state_bytes(device: torch.device) -> int:
    """Bytes of the random-number state a checkpointed region keeps: the CPU generator's, and on a GPU its
    generator's too."""
    cpu = torch.get_rng_state().nbytes
    return cpu + (torch.cuda.get_rng_state(device).nbytes if device.type == "cuda" else 0)


@contextlib.contextmanager
def _rng_states_noted(states: list[weakref.ref[torch.Tensor]]) -> Iterator[None]:
    """Inside, every random-number state that ``torch.get_rng_state`` and ``torch.cuda.get_rng_state`` return is
    noted in ``states`` (weakly): a checkpointed region (``torch.utils.checkpoint``, :func:`hooklab.checkpoint_modules`,
    each block call of :func:`hooklab.segments.checkpoint_segments`) keeps one (5,056 bytes on a CPU, and one per
    GPU its inputs are on) until its recompute, to replay dropout; those still alive after the forward are held."""
    cpu, cuda = torch.get_rng_state, torch.cuda.get_rng_state

    def noted(get: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        @functools.wraps(get)
        def state(*args: Any, **kwargs: Any) -> torch.Tensor:
            t = get(*args, **kwargs)
            states.append(weakref.ref(t))
            return t
        return state
    torch.get_rng_state, torch.cuda.get_rng_state = noted(cpu), noted(cuda)
    try:
        yield
    finally:
        torch.get_rng_state, torch.cuda.get_rng_state = cpu, cuda


class _Measure:
    """The clock, the bound and what was left out; bytes and step times of the candidates."""

    def __init__(self, planner: MemoryPlanner, max_seconds: float | None, clock: Callable[[], float]) -> None:
        self.planner, self.clock = planner, clock
        self.max_seconds = math.inf if max_seconds is None else max_seconds
        self.start, self.wall_start = clock(), time.perf_counter()
        self.step_estimate = 0.0
        self.met = False  # a candidate measured so far meets the budget
        self.measured = 0  # candidates whose bytes were measured (past the bound only the first one is)
        self.notes: list[str] = []

    def spent(self) -> float:
        return self.clock() - self.start

    def allows(self, seconds: float) -> bool:
        return self.spent() + seconds <= self.max_seconds

    def allows_preparing(self, seconds: float) -> bool:
        """Whether the plan search, a bytes measurement or a compile may start: :data:`TIMING_SHARE` of the bound is
        kept for timing."""
        return self.spent() + seconds <= self.max_seconds * (1 - TIMING_SHARE)

    def _ignored(self) -> list[torch.Tensor]:
        model = self.planner.model
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        return [*model.parameters(), *model.buffers(), *grads, *self.planner.keep]

    def held_bytes(self, option: Any) -> int:
        """Bytes held after one forward pass under ``option.apply()`` (MemoryMeter), less the loss and the model's
        inputs, plus the random-number states the checkpoints keep (:func:`_rng_states_noted`: MemoryMeter does not
        see them); the graph is let go of (no backward)."""
        model, inputs, states = self.planner.model, list[torch.Tensor](), list[weakref.ref[torch.Tensor]]()
        with HookScope(TOOL) as scope:
            scope.add(model.register_forward_pre_hook(_noting(inputs), with_kwargs=True))
            with MemoryMeter(ignore=self._ignored()) as meter:
                with option.apply(), _rng_states_noted(states):
                    loss = self.planner.step()
                held = meter.mark()
                counted = {storage_key(t): t.untyped_storage().nbytes() for t in [loss, *inputs]
                           if storage_key(t) in meter._live}
        kept = {storage_key(t): t.untyped_storage().nbytes() for ref in states if (t := ref()) is not None}
        del loss
        inputs.clear()
        return held - sum(counted.values()) + sum(kept.values())

    def compiled_bytes(self, option: CompiledBudget) -> int:
        """Compile (with the budget set), run one step and walk the compiled graph for the bytes it saves."""
        model, inputs = self.planner.model, list[torch.Tensor]()
        with HookScope(TOOL) as scope:
            scope.add(model.register_forward_pre_hook(_noting(inputs), with_kwargs=True))
            with option.apply():
                loss = self.planner.step()
        alive = {t.untyped_storage().data_ptr() for t in [*self._ignored(), *inputs]}
        held = graph_saved_bytes(loss, alive)
        loss.backward()
        return held

    def step(self, option: Any) -> float:
        """Seconds of one training step (forward under ``option.apply()``, backward) on the clock."""
        start = self.clock()
        with option.apply():
            loss = self.planner.step()
        loss.backward()
        del loss
        seconds = self.clock() - start
        if not seconds > 0:  # 0: the clock did not advance (too coarse); below 0: it ran backwards
            raise ValueError(
                f"{TOOL}: a training step took {seconds!r} s on the given clock: "
                + ("the clock ran backwards" if seconds < 0 else "the clock is too coarse for this step")
                + ": pass clock=time.perf_counter or a bigger batch (step times are divided by one another)")
        return seconds


def _propose(m: _Measure, budget: int, count: int) -> list[MemoryPlan]:
    """The model's few best plans that meet the budget: its pick, the fastest that only recomputes, the fastest that
    does not offload, then the next fastest; ``count`` at most, each once. The search stops (noted) where the share
    of the bound before timing is spent."""
    planner, plans = m.planner, list[MemoryPlan]()
    rng = _rng_state_bytes(planner.device)  # kept per checkpointed block call: measured below, so counted here too
    started = m.spent()

    def stop() -> bool:
        """The planner's own pick is looked for however little of the bound is left, but its search (a frontier
        over many blocks can cost more than the bound) ends where it alone has cost the share of the bound before
        timing; the other searches end where that share of the whole decision is spent."""
        if not plans:
            return m.spent() - started > m.max_seconds * (1 - TIMING_SHARE)
        return not m.allows_preparing(0.0)

    searches = [functools.partial(planner._select, budget, None, None, allowed, rng, stop)
                for allowed in (None, RECOMPUTE, frozenset(c for c in planner.choices if c != "offload"))]
    try:
        for search in searches:
            if len(plans) >= count:
                return plans
            if plans and stop():
                m.notes.append(f"plan search stopped after {len(plans)} plan(s): the share of the measuring bound "
                               "before timing was spent")
                return plans
            try:
                plan = search()
            except BudgetError:
                continue
            if all(p.choices != plan.choices for p in plans):
                plans.append(plan)
        for plan in planner._ranked(budget, rng, stop):
            if len(plans) >= count:
                break
            if all(p.choices != plan.choices for p in plans):
                plans.append(plan)
    except SearchStopped as stopped:  # a model of many blocks: its frontier alone can cost more than the bound
        m.notes.append(f"plan search stopped {stopped}, after {m.spent() - started:.1f} s (the bound is "
                       f"{m.max_seconds:g} s): {len(plans)} plan(s) of the time model measured (max_seconds= allows "
                       "more; MemoryPlanner.plan() searches without a bound)")
    return plans[:count]


def measure_and_decide(planner: MemoryPlanner, budget: int, *, plans: int, sequential: bool, plain: bool,
                       backends: tuple[str, ...], rounds: int, max_seconds: float | None, clock: Callable[[], float],
                       clock_name: str) -> MemoryDecision:
    """See :meth:`hooklab.MemoryPlanner.decide` (this module's docstring says how)."""
    model = planner.model
    m = _Measure(planner, max_seconds, clock)
    baseline = Candidate("the model as it is", "as is", _AsIs(model))
    m.step_estimate = m.step(baseline)  # the first step allocates the gradients; not a round
    if max_seconds is None:
        m.max_seconds = max(DEFAULT_STEPS * m.step_estimate, DEFAULT_FLOOR)
    held = baseline.held_bytes = m.held_bytes(baseline)
    if held <= budget:
        return _decision(m, budget, baseline, baseline, [], "the model as it is meets the budget: nothing to do", 0,
                         clock_name)
    candidates: list[Candidate] = []
    for plan in _propose(m, budget, plans):
        kind = "plan (recompute)" if set(plan.choices.values()) <= RECOMPUTE else "plan"
        candidate = Candidate(f"plan {plan.codes}", kind, plan)
        candidates.append(_measured(m, candidate, budget, functools.partial(m.held_bytes, plan)))
    if plain:
        each = CheckpointEach(model, planner.blocks)
        candidates.append(_measured(m, Candidate("checkpoint each block", "checkpoint", each), budget,
                                    functools.partial(m.held_bytes, each)))
        whole = OffloadStep(model, planner.keep, planner.device, planner.min_bytes)
        candidates.append(_measured(m, Candidate("offload the whole step", "offload step", whole), budget,
                                    functools.partial(m.held_bytes, whole)))
        if planner.device.type == "cuda":  # to pinned memory, overlapped; on a CPU (to disk) it is rarely worth it
            both = CheckpointAndOffload(model, planner.blocks, planner.keep, planner.device, planner.min_bytes)
            candidates.append(_measured(m, Candidate("checkpoint each block, its inputs offloaded", "checkpoint + offload",
                                                     both), budget, functools.partial(m.held_bytes, both)))
    if sequential and isinstance(model, nn.Sequential) and len(model) >= 2:
        candidates += _sequential(m, planner, model, budget)
    elif sequential:
        m.notes.append(f"checkpoint_sequential: not offered: the model is a {type(model).__name__}, not an "
                       "nn.Sequential")
    for backend in backends:
        candidates += _compiled(m, planner, backend, budget, min(1.0, budget / held))
    eligible = [c for c in candidates if c.held_bytes is not None and c.held_bytes <= budget and not c.status]
    live = list(eligible)
    done = _race(m, baseline, live, rounds)
    if live:
        chosen, reason = _choose([c for c in candidates if c.times], live, baseline)
        if any("timing" in note and "measuring bound" in note for note in m.notes):
            reason += (f"; the measuring bound was reached after {done} round(s): chosen among the "
                       f"{len(live)} candidate(s) timed")
        return _decision(m, budget, chosen, baseline, candidates, reason, done, clock_name)
    meeting = [c for c in candidates if c.held_bytes is not None and c.held_bytes <= budget]
    if not meeting:
        best = min((c for c in [baseline, *candidates] if c.held_bytes is not None), key=lambda c: c.held_bytes or 0)
        raise BudgetError(
            f"nothing measured meets a budget of {format_bytes(budget)} ({budget} bytes): the least held was "
            f"{format_bytes(best.held_bytes or 0)} ({best.name}), of {format_bytes(held)} as it is. Allow more "
            "choices (segment, offload, bf16 / int8 with max_error=), a compile backend, more measuring time "
            "(max_seconds=), or use a smaller batch." + "".join(f" {n}." for n in m.notes))
    chosen = min(eligible or meeting, key=lambda c: c.rank)  # the first of the simplest kind
    return _decision(m, budget, chosen, baseline, candidates, "not timed (the measuring bound was reached): the "
                     "simplest candidate that meets the budget", done, clock_name)


def _measured(m: _Measure, c: Candidate, budget: int, measure: Callable[[], int]) -> Candidate:
    """``c`` with its bytes measured and its status: past the share of the bound before timing, only while no
    candidate measured so far meets the budget; past the whole bound, none but the first (the planner's own pick), so
    that deciding ends within its bound and still has one candidate's bytes. A candidate that raises when it runs is
    left out, with a note."""
    if (not m.allows_preparing(m.step_estimate) and m.met) or (not m.allows(m.step_estimate) and m.measured):
        c.status = "not measured: the measuring bound was reached"
        if not m.met and not any(n.startswith("bytes: ") for n in m.notes):
            m.notes.append("bytes: candidates not measured: the measuring bound was reached before one met the "
                           "budget (max_seconds= allows more)")
        return c
    m.measured += 1
    try:
        c.held_bytes = measure()
    except Exception as error:  # e.g. a checkpointed block whose output the next module changes in place
        _failed(m, c, error)
        return c
    if c.held_bytes > budget:
        c.status = "over the budget"
    m.met = m.met or c.held_bytes <= budget
    return c


def _failed(m: _Measure, c: Candidate, error: BaseException) -> None:
    """``c`` raised when it ran: it is left out, and the notes say why (deciding goes on with the others)."""
    first = (str(error).strip().splitlines() or [""])[0]
    c.status = f"failed: {type(error).__name__}: {first[:160]}"
    c.held_bytes = None
    m.notes.append(f"{c.name}: failed when run ({type(error).__name__}: {first[:200]}); left out")


def _sequential(m: _Measure, planner: MemoryPlanner, model: nn.Sequential, budget: int) -> list[Candidate]:
    """``checkpoint_sequential`` at every segment count, its bytes measured (once per planner); of those that meet
    the budget, the ones that recompute more children than another are not timed."""
    cache = planner._sequential_bytes
    out = []
    # nearest to sqrt(len) first (where checkpoint_sequential holds least), so a bound that stops the measuring
    # early has measured the counts most likely to meet the budget
    for n in sorted(range(2, len(model) + 1), key=lambda n: (abs(n - math.sqrt(len(model))), n)):
        option = SequentialCheckpoint(model, n)

        def bytes_of(n: int = n, option: SequentialCheckpoint = option) -> int:
            if n not in cache:
                cache[n] = m.held_bytes(option)
            return cache[n]
        out.append(_measured(m, Candidate(f"checkpoint_sequential(model, {n})", "checkpoint_sequential", option),
                             budget, bytes_of))
    out.sort(key=lambda c: c.option.segments)
    meeting = [c for c in out if c.held_bytes is not None and c.held_bytes <= budget]
    if meeting:
        least = min(meeting, key=lambda c: c.option.recomputed)
        for c in meeting:
            if c.option.recomputed > least.option.recomputed:
                c.status = (f"not timed: recomputes the first {c.option.recomputed} children; "
                            f"{least.option.segments} segments also meet the budget with {least.option.recomputed}")
    return out


def _compiled(m: _Measure, planner: MemoryPlanner, backend: str, budget: int, fraction: float) -> list[Candidate]:
    """``torch.compile`` at ``fraction``, and at half of it if the first misses the budget (each compiled once per
    planner); a backend that fails is noted."""
    out = []
    for f in (fraction, fraction / 2):
        key = (backend, round(f, 6))
        if key not in planner._compiled:
            if not m.allows_preparing(m.step_estimate):
                m.notes.append(f"torch.compile(backend={backend!r}) at {f:.3g}: not compiled: the share of the "
                               "measuring bound before timing was spent")
                break
            try:
                made = CompiledBudget(planner.model, backend, f)
                planner._compiled[key] = (made, m.compiled_bytes(made))
            except Exception as error:  # a model that does not compile, a backend that is not installed
                first = (str(error).strip().splitlines() or [""])[0]
                m.notes.append(f"torch.compile(backend={backend!r}): failed ({type(error).__name__}: {first[:200]})")
                planner._compiled[key] = (None, None)
        option, held = planner._compiled[key]
        if option is None or held is None:
            break
        c = Candidate(f"torch.compile {backend} @{f:.3g}", "torch.compile", option, held)
        c.status = "" if held <= budget else "over the budget"
        out.append(c)
        if held <= budget:
            break
    return out


def _race(m: _Measure, baseline: Candidate, live: list[Candidate], rounds: int) -> int:
    """Interleaved rounds over the baseline and the live candidates (dropping those clearly slower), then the
    finalists' extra rounds where the first did not tell them apart; the rounds run."""
    if not live:
        return 0
    # as many candidates as the bound leaves time for: a step each before the rounds and two rounds (the fewest that
    # tell two apart), a candidate's step taken as 1.5 steps of the model as it is (a recompute adds a forward)
    left = m.max_seconds - m.spent() - 2 * m.step_estimate
    affordable = max(1, int(left // (3 * 1.5 * m.step_estimate))) if m.step_estimate > 0 else len(live)
    racing = list(live)
    if affordable < len(racing):
        m.notes.append(f"timing of {len(racing) - affordable} candidate(s) not started: the measuring bound leaves "
                       f"time for {affordable} (the first measured)")
        for late in racing[affordable:]:
            late.status = "not timed: the measuring bound was reached"
        del racing[affordable:]
    gc.collect()  # what compiling left behind is collected now, not in the middle of a timed step
    last = {id(baseline): m.step_estimate}  # each candidate's last step: what the next round is expected to cost
    for k, c in enumerate(racing):  # one step each before the rounds (first-call costs)
        if not m.allows(m.step_estimate):
            m.notes.append(f"timing of {len(racing) - k} candidate(s) not started: the measuring bound was reached")
            for late in racing[k:]:
                late.status = "not timed: the measuring bound was reached"
            del racing[k:]
            break
        try:
            last[id(c)] = m.step(c)
        except Exception as error:
            _failed(m, c, error)
    racing[:] = [c for c in racing if not c.status]
    done = _rounds(m, baseline, racing, last, rounds, 0, drop=True) if racing else 0
    live[:] = [c for c in live if not c.status and c.times]
    if len(live) >= 2 and done >= 2:
        chosen, _ = _choose(live, live, baseline)
        rival = min((c for c in live if c is not chosen), key=lambda c: c.paired(baseline))
        if not beats(chosen, rival) and not beats(rival, chosen):
            done = _rounds(m, baseline, [chosen, rival], last, done + rounds, done, drop=False)
    return done


def _rounds(m: _Measure, baseline: Candidate, racing: list[Candidate], last: dict[int, float], until: int,
            done: int, drop: bool) -> int:
    """Rounds ``done`` .. ``until - 1`` over the baseline and ``racing`` (each round starting one later), while the
    bound allows; with ``drop``, a candidate slower than the fastest by more than 5 % in every round leaves from the
    third round on. Returns the rounds done."""
    for r in range(done, until):
        members = [baseline, *racing]
        if not m.allows(sum(last[id(c)] for c in members)):
            m.notes.append(f"timing stopped after {r} round(s): the measuring bound was reached")
            break
        k = r % len(members)
        for c in members[k:] + members[:k]:
            c.times.append(m.step(c))
            last[id(c)] = c.times[-1]
        done = r + 1
        if drop and done >= DROP_AFTER and len(racing) > 1:
            fastest = min(racing, key=lambda c: c.paired(baseline))
            for c in list(racing):
                if c is not fastest and beats(fastest, c, DROP_MARGIN):
                    c.status = (f"dropped after round {done}: slower than {fastest.name} by more than "
                                f"{DROP_MARGIN:.0%} in every round")
                    racing.remove(c)
        if drop and len(racing) == 1 and done >= 2:
            break
    return done


def _choose(timed: list[Candidate], live: list[Candidate], baseline: Candidate) -> tuple[Candidate, str]:
    """The fastest of the ``live`` candidates by the median of their per-round ratios to ``baseline``, unless a
    simpler one ties with it (within :data:`TIE_MARGIN` at the median, and no other candidate faster than it in
    every round). ``timed``: every candidate timed, those dropped as slower included."""
    speed = {id(c): c.paired(baseline) for c in timed}
    # equal medians: the less simple counts as the fastest, so that an exact tie is decided as a tie
    fastest = min(live, key=lambda c: (speed[id(c)], -c.rank))
    unbeaten = [c for c in live if c.rank < fastest.rank
                and speed[id(c)] <= speed[id(fastest)] * (1 + TIE_MARGIN)
                and not any(beats(o, c) for o in live if o is not c)]
    if unbeaten:
        chosen = min(unbeaten, key=lambda c: (c.rank, speed[id(c)]))
        gap = speed[id(fastest)] / speed[id(chosen)] - 1
        return chosen, (f"tie with {fastest.name}, the fastest at the median ({-gap:.1%} apart, within "
                        f"{TIE_MARGIN:.0%}), which was not faster in every round: the simpler is kept")
    if len(timed) == 1:
        return fastest, "the only candidate that meets the budget and was timed"
    simpler = [c for c in timed if c.rank < fastest.rank]
    if simpler and all(beats(fastest, c) for c in simpler):
        return fastest, "the fastest (lowest median step ratio), faster than each simpler candidate in every round"
    return fastest, "the fastest (lowest median step ratio)" + (
        f", more than {TIE_MARGIN:.0%} ahead of each simpler candidate at the median" if simpler else "")


def _decision(m: _Measure, budget: int, chosen: Candidate, baseline: Candidate, candidates: list[Candidate],
              reason: str, rounds: int, clock_name: str) -> MemoryDecision:
    return MemoryDecision(budget, chosen, baseline, candidates, reason, rounds, m.spent(),
                          time.perf_counter() - m.wall_start, m.max_seconds, clock_name, m.notes)
