"""The choice of :class:`hooklab.MemoryPlanner`: every block's options, and the exact search over the blocks.

The bytes of a choice depend on the previous block's choice only (a kept block already holds the next block's
input; a segment continues only after a checkpointed block), so a dynamic programme over the blocks in order,
with the previous choice as its state, keeps every plan that no other plan beats in bytes, time and peak at
once (a Pareto frontier; the frontier does not depend on the budget, so it is built once). A plan's bytes are
then counted exactly, as the set of storages it holds (:meth:`Search.held_bytes`): for blocks that share
storages only with their neighbours, which is how blocks called one after the other share them, the two agree.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, get_args

from ._profile import BlockProfile, Stored, View
from .costs import CostModel, takes_rereads

__all__ = ["CHOICES", "Choice", "Option", "Plan", "Search", "SearchStopped", "Traffic"]

Choice = Literal["keep", "checkpoint", "segment", "offload", "bf16", "int8"]
CHOICES: tuple[Choice, ...] = get_args(Choice)
COMPRESS_MIN_BYTES = 4096  # CompressSaved's default: small tensors stay exact
CHECKPOINTED = ("checkpoint", "segment")


def seconds_key(seconds: float) -> float:
    """Times compared to 15 digits: sums of the same terms in another order are equal."""
    return round(seconds, 15)


class SearchStopped(Exception):
    """The search was stopped before it ended, because its ``stop`` said so (a bound on what deciding may cost): the
    frontier is not kept, a later search starts again."""


@dataclass(frozen=True)
class Traffic:
    """What an offloading or compressing context does with a block's saved tensors: bytes and tensors moved or
    encoded in forward (one per view), and the extra unpacks in backward (a view that several ops saved is read
    back, or decoded, once per op)."""

    moved: int = 0
    tensors: int = 0
    reread_bytes: int = 0
    rereads: int = 0

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(self.moved + other.moved, self.tensors + other.tensors, self.reread_bytes + other.reread_bytes,
                       self.rereads + other.rereads)


@dataclass(frozen=True)
class Option:
    """One block's choice given the previous block's: what it holds after forward, moves or encodes, the seconds
    it adds, and the bytes its backward brings back at once (its recompute, or what it reloads or decodes)."""

    choice: str
    held: int
    moved: int
    tensors: int
    seconds: float
    transient: int
    rereads: int = 0


@dataclass(frozen=True)
class Plan:
    """A plan of the search: its choices, modelled bytes (additive, then exact), seconds and peak."""

    options: tuple[Option, ...]
    held: int         # the sum of the options' bytes (what the frontier compares)
    seconds: float
    peak: int         # the highest of the closed segments' and reloads' peaks so far
    open: int         # the peak of the segment still open (0 if the last block is not checkpointed)
    ranks: tuple[int, ...]

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(o.choice for o in self.options)

    @property
    def peak_bytes(self) -> int:
        return max(self.held, self.peak, self.open)


def _packed(v: View, choice: str, min_bytes: int) -> int | None:
    """The bytes a context stores for one view under ``choice`` (offload, bf16, int8); None if it keeps the view
    as it is (too small, not applicable), which keeps its whole storage alive."""
    if choice == "offload":
        return 0 if v.nbytes >= min_bytes else None
    if v.nbytes < COMPRESS_MIN_BYTES:
        return None
    if not v.floating:  # both formats store an integer tensor losslessly in the smallest type that holds it
        return v.nbytes // v.element_size * v.packed_size if v.packed_size else None
    small = 2 if choice == "bf16" else 1  # bf16 / int8
    if v.element_size > small:
        scale = (v.shape[1] if len(v.shape) > 1 else 1) * 4 if choice == "int8" else 0  # int8: a scale per channel
        return v.nbytes // v.element_size * small + scale
    return None


def _one(s: Stored, choice: str, min_bytes: int, done: frozenset[tuple] = frozenset()
         ) -> tuple[int, dict[tuple, int], Traffic]:
    """Of one storage under ``choice`` (keep, offload, bf16, int8): (bytes of the storage itself held, the bytes
    of each compressed copy by view, the traffic). Views in ``done`` were packed already by the same context:
    they add nothing."""
    if choice == "keep":
        return s.storage_bytes, {}, Traffic()
    kept, copies, traffic = False, {}, Traffic()
    for v in s.views:
        if (s.key, v.where) in done:
            continue
        stored = _packed(v, choice, min_bytes)
        if stored is None:
            kept = True
        else:
            traffic += Traffic(v.nbytes, 1, (v.uses - 1) * v.nbytes, v.uses - 1)
            if stored:
                copies[v.where] = stored
    return (s.storage_bytes if kept else 0), copies, traffic


def _pareto(plans: Iterable[Plan]) -> list[Plan]:
    """The plans that no other plan beats in bytes, seconds, peak and open peak at once. A plan no better than
    another in bytes and peak (as fast or slower, open peak no lower) is dropped only for one with earlier choices
    (``ranks``), so that the search ends on the tie-break :meth:`MemoryPlanner.plan` promises (among near-equal
    times: the lowest peak, the fewest bytes, the earlier choices); one with fewer bytes or a lower peak, as fast
    and no higher in open peak, is dropped whatever its choices, since the selection never takes it then. (Keeping
    those for their earlier choices made ResNet-50's 17 blocks a search of hours: 14,847 plans after 8 blocks.)"""
    kept: list[Plan] = []
    for p in sorted(plans, key=lambda p: (seconds_key(p.seconds), p.held, p.peak, p.open, p.ranks)):
        if not any(q.held <= p.held and q.peak <= p.peak and q.open <= p.open
                   and (q.ranks <= p.ranks or q.held < p.held or q.peak < p.peak) for q in kept):
            kept.append(p)
    return kept


class Search:
    """Options per block and the frontier of plans, for fixed profiles, choices and costs."""

    def __init__(self, profiles: list[BlockProfile], top: dict[int, int], choices: tuple[str, ...],
                 costs: CostModel, min_bytes: int, max_error: float | None) -> None:
        self.profiles, self.top, self.choices = profiles, top, choices
        self.costs, self.min_bytes, self.max_error = costs, min_bytes, max_error
        self._rereads = {name: takes_rereads(getattr(costs, name)) for name in ("offload", "compress")}
        self.fixed_bytes = sum(top.values())
        self._frontier: list[Plan] | None = None
        self._held: dict[tuple[str, ...], int] = {}  # held_bytes per plan: decide asks for every plan more than once

    def _held_before(self, k: int, prev: str | None) -> set[int]:
        """Storages held anyway when block ``k`` runs: the previous block's if it keeps them, and those saved
        outside every block (the head saves the last block's output)."""
        return set(self.top) | (set(self.profiles[k - 1].saved) if k and prev == "keep" else set())

    def options(self, k: int, prev: str | None) -> list[Option]:
        block = self.profiles[k]
        before = self._held_before(k, prev)
        own = [s for key, s in block.saved.items() if key not in before]
        shared = [s for key, s in block.saved.items() if key in before]  # the previous block keeps these
        options = []
        for choice in self.choices:
            if choice in CHECKPOINTED:
                skip = before
                if choice == "segment":
                    if prev not in CHECKPOINTED or not block.chained:
                        continue
                    skip = before | self.profiles[k - 1].outputs  # recomputed by the segment, not kept
                held = sum(b for key, b in block.inputs.items() if key not in skip)
                options.append(Option(choice, held, 0, 0, self.costs.recompute(block), block.recompute_bytes))
                continue
            if choice in ("bf16", "int8") and block.grad_error.get(choice, math.inf) > (self.max_error or 0):
                continue
            # the blocks of one format share one context per forward pass (MemoryPlan.apply): a view the previous
            # block compressed the same way is compressed once
            done = frozenset((s.key, v.where) for s in self.profiles[k - 1].saved.values() for v in s.views
                             ) if k and prev == choice and choice in ("bf16", "int8") else frozenset()
            held, traffic = 0, Traffic()
            for s in own:
                kept, copies, t = _one(s, choice, self.min_bytes, done)
                held, traffic = held + kept + sum(copies.values()), traffic + t
            for s in shared:  # packed again by this block's context: moved or encoded once more
                _, copies, t = _one(s, choice, self.min_bytes)
                held, traffic = held + sum(copies.values()), traffic + t
            method = "offload" if choice == "offload" else "compress"
            extra = ({"reread_bytes": traffic.reread_bytes, "rereads": traffic.rereads}
                     if self._rereads[method] else {})
            seconds = (0.0 if choice == "keep" else
                       self.costs.offload(block, traffic.moved, traffic.tensors, **extra) if choice == "offload" else
                       self.costs.compress(block, choice, traffic.moved, traffic.tensors, **extra))
            options.append(Option(choice, held, traffic.moved, traffic.tensors, seconds, traffic.moved,
                                  traffic.rereads))
        return options

    def frontier(self, stop: Callable[[], bool] | None = None) -> list[Plan]:
        """Every plan no other plan beats in bytes, seconds and peak (built once; it does not depend on a budget).
        ``stop`` is asked before each step of the search (a block given the previous block's choice); where it says
        True, :class:`SearchStopped` is raised and nothing is kept."""
        if self._frontier is not None:
            return self._frontier
        order = {c: i for i, c in enumerate(self.choices)}
        states: dict[str | None, list[Plan]] = {None: [Plan((), self.fixed_bytes, 0.0, 0, 0, ())]}
        for k in range(len(self.profiles)):
            following: dict[str | None, list[Plan]] = defaultdict(list)
            for prev, plans in states.items():
                if stop is not None and stop():
                    raise SearchStopped(f"at block {k + 1} of {len(self.profiles)}, with "
                                        f"{sum(map(len, states.values()))} plans on its frontier so far")
                for o in self.options(k, prev):
                    for p in plans:
                        if o.choice == "checkpoint":  # a new segment: its peak is what is held before it, its
                            peak, open_ = max(p.peak, p.open), p.held + o.held + o.transient  # inputs, its recompute
                        elif o.choice == "segment":
                            peak, open_ = p.peak, p.open + o.held + o.transient
                        else:  # backward reloads (or decodes) this block's tensors while the blocks before hold theirs
                            peak, open_ = max(p.peak, p.open, p.held + o.held + o.transient), 0
                        following[o.choice].append(Plan(p.options + (o,), p.held + o.held, p.seconds + o.seconds,
                                                        peak, open_, p.ranks + (order[o.choice],)))
            states = {c: _pareto(plans) for c, plans in following.items()}
        self._frontier = [p for plans in states.values() for p in plans]
        return self._frontier

    def seconds(self, choices: tuple[str, ...]) -> float:
        """The modelled time a plan adds (its options' seconds, each given the previous block's choice)."""
        total, prev = 0.0, None
        for k, choice in enumerate(choices):
            option = next((o for o in self.options(k, prev) if o.choice == choice), None)
            if option is None:
                raise ValueError(f"{choice!r} is not a choice block {self.profiles[k].name!r} has after {prev!r}")
            total, prev = total + option.seconds, choice
        return total

    def checkpointed_calls(self, choices: tuple[str, ...]) -> int:
        """The block calls a plan checkpoints (alone or in a segment): each keeps a random-number state until its
        recompute (``torch.get_rng_state()``, 5,056 bytes on a CPU), which the plan's bytes leave out."""
        return sum(p.calls for p, c in zip(self.profiles, choices, strict=True) if c in CHECKPOINTED)

    def held_bytes(self, choices: tuple[str, ...]) -> int:
        """The activation bytes a plan holds after forward, counted as the set of storages it holds (plus the
        compressed copies it makes)."""
        if choices not in self._held:
            self._held[choices] = self._count_held(choices)
        return self._held[choices]

    def _count_held(self, choices: tuple[str, ...]) -> int:
        held = dict(self.top)
        copies: dict[tuple[int, tuple, str], int] = {}  # one compressed copy per view and format (one context each)
        for k, (block, choice) in enumerate(zip(self.profiles, choices, strict=True)):
            if choice == "keep":
                held.update((key, s.storage_bytes) for key, s in block.saved.items())
            elif choice in CHECKPOINTED:
                outputs = self.profiles[k - 1].outputs if choice == "segment" else set()
                held.update((key, b) for key, b in block.inputs.items() if key not in outputs)
            else:
                for s in block.saved.values():
                    kept, copied, _ = _one(s, choice, self.min_bytes)
                    if kept:
                        held[s.key] = s.storage_bytes
                    copies.update(((s.key, where, choice), b) for where, b in copied.items())
        return sum(held.values()) + sum(copies.values())
