"""A plan of :class:`hooklab.MemoryPlanner`: a choice per block, its modelled bytes and time; ``apply()`` runs it."""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .._text import format_bytes, format_table
from .._torch_internals import tree_flatten
from ..checkpoint import checkpoint_modules
from ..offload import CompressSaved, Format, OverlappedOffload, SaveOnDisk, offload_module
from ..scope import HookScope, LocalHook
from ..segments import checkpoint_segments
from ._search import Option

__all__ = ["CODES", "MemoryPlan"]

CODES = {"keep": "k", "checkpoint": "C", "segment": "s", "offload": "o", "bf16": "b", "int8": "i"}


def _ms(seconds: float) -> str:
    """``0.000168e-3 -> '168 ns'``: three significant digits in the unit that fits."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


@dataclass
class MemoryPlan:
    """A choice per block, its modelled bytes and time; :meth:`apply` runs it, :meth:`table` shows it. Made by
    :meth:`MemoryPlanner.plan`, not by hand.

    ``choices``: block -> ``"keep"``, ``"checkpoint"`` (the first block of a segment, or a block checkpointed
    alone), ``"segment"`` (checkpointed together with the block before it), ``"offload"``, ``"bf16"`` or
    ``"int8"``; ``segments``: the checkpointed runs of blocks; ``held_bytes``: activation bytes held after
    forward (modelled exactly); ``peak_bytes``: the most the activations reach during backward, by the model
    (a segment's recompute, or a block's reload, on top of what the blocks before it hold);
    ``seconds_added``: the modelled time the plan adds to a step.
    """

    model: nn.Module
    blocks: dict[str, nn.Module]
    rows: list[tuple[str, Option, int]]  # (block, option, bytes the block holds without a plan)
    budget: int
    baseline_bytes: int
    fixed_bytes: int
    held_bytes: int
    peak_bytes: int
    min_bytes: int
    device: torch.device
    keep: list[torch.Tensor] = field(default_factory=list)
    peak_budget: int | None = None

    @property
    def choices(self) -> dict[str, str]:
        """Block name -> the choice made for it: ``"keep"``, ``"checkpoint"``, ``"segment"`` (checkpointed with
        the block before it), ``"offload"``, ``"bf16"`` or ``"int8"``."""
        return {name: option.choice for name, option, _ in self.rows}

    @property
    def codes(self) -> str:
        """The choices as one letter per block, in the order the blocks run: ``k`` keep, ``C`` checkpoint, ``s``
        segment, ``o`` offload, ``b`` bf16, ``i`` int8 (``"kCss"``)."""
        return "".join(CODES[option.choice] for _, option, _ in self.rows)

    @property
    def segments(self) -> list[list[str]]:
        """The checkpointed runs of blocks, each a list of names: one block alone is a plain checkpoint."""
        runs: list[list[str]] = []
        for name, option, _ in self.rows:
            if option.choice == "checkpoint":
                runs.append([name])
            elif option.choice == "segment":
                runs[-1].append(name)
        return runs

    @property
    def seconds_added(self) -> float:
        """Modelled seconds the plan adds to a training step (recomputation, copies, encoding), all blocks."""
        return sum(option.seconds for _, option, _ in self.rows)

    def table(self) -> str:
        """The plan as an aligned table: per block its choice, the bytes it holds, the bytes saved and the time
        added, then the totals and whether the budget is met (also what ``print(plan)`` shows)."""
        rows = [(name, option.choice, format_bytes(option.held), format_bytes(kept - option.held),
                 _ms(option.seconds)) for name, option, kept in self.rows]
        rows.append(("total", "", format_bytes(self.held_bytes), format_bytes(self.baseline_bytes - self.held_bytes),
                     _ms(self.seconds_added)))
        text = format_table(("block", "choice", "held", "saved", "time added"), rows, right=(2, 3, 4))
        share = self.held_bytes / max(self.baseline_bytes, 1)
        text += (f"\nbudget {format_bytes(self.budget)}: met (modelled {format_bytes(self.held_bytes)} of "
                 f"{format_bytes(self.baseline_bytes)} without a plan, {share:.0%})")
        if self.peak_budget is not None or any(len(run) > 1 for run in self.segments):
            limit = "" if self.peak_budget is None else f" (at most {format_bytes(self.peak_budget)} asked)"
            text += (f"\npeak during backward (modelled): {format_bytes(self.peak_bytes)}{limit}: a segment recomputes "
                     "all its blocks at once")
        return text

    def __str__(self) -> str:
        return self.table()

    def _check_blocks(self) -> None:
        """N10: a block replaced since the planner measured it would silently not follow the plan."""
        for name, module in self.blocks.items():
            try:
                now = self.model.get_submodule(name)
            except AttributeError:
                now = None
            if now is not module:
                what = "is gone" if now is None else f"is now another module ({type(now).__name__})"
                raise RuntimeError(
                    f"MemoryPlan.apply: block {name!r} {what}: it was replaced after the planner measured the model, "
                    "and the plan's bytes and times are those of the module it replaced. Make a new MemoryPlanner "
                    "for the model as it is now, and plan again.")

    def apply(self) -> AbstractContextManager[MemoryPlan]:
        """Inside the block the model runs the plan; on exit (also after an exception) it is as before.

        The block is used once: call ``plan.apply()`` again for another block.
        """
        self._check_blocks()
        return _AppliedPlan(self)


class _AppliedPlan:
    """The ``with`` block of :meth:`MemoryPlan.apply`: the plan's hooks and checkpoints on entry, all gone on exit
    (also after an exception); one block per object."""

    def __init__(self, plan: MemoryPlan) -> None:
        self._plan: MemoryPlan | None = plan
        self._stack = contextlib.ExitStack()
        self._state = "new"

    def __enter__(self) -> MemoryPlan:
        if self._state != "new" or self._plan is None:
            raise RuntimeError("this MemoryPlan.apply block has already run; call plan.apply() again for another "
                               "block")
        self._state = "running"
        plan = self._plan
        try:
            self._enter(plan, self._stack)
        except BaseException:
            self._end()
            raise
        return plan

    def __exit__(self, *exc: object) -> None:
        self._end()

    def _end(self) -> None:
        self._state, self._plan = "done", None  # the plan (and its model) is let go of when the block ends
        self._stack.close()

    @staticmethod
    def _enter(plan: MemoryPlan, stack: contextlib.ExitStack) -> None:
        inputs: list[torch.Tensor] = []
        compressing: dict[str, CompressSaved] = {}  # one context per format and forward pass, shared by its blocks
        cuda = plan.device.type == "cuda"
        scope = stack.enter_context(HookScope("MemoryPlan.apply"))

        def note(m: nn.Module, args: Any, kwargs: Any) -> None:
            inputs[:] = [t for t in tree_flatten((args, kwargs)) if isinstance(t, torch.Tensor)]
            compressing.clear()  # a new forward pass
        # a LocalHook: a deep copy of the model made inside the block carries an inert copy, pickling says what to do
        scope.add(plan.model.register_forward_pre_hook(LocalHook(note, "MemoryPlan.apply", plan.model),
                                                       with_kwargs=True))
        stack.callback(inputs.clear)
        stack.callback(compressing.clear)
        singles = [run[0] for run in plan.segments if len(run) == 1]
        longer = [run for run in plan.segments if len(run) > 1]
        if singles:
            stack.enter_context(checkpoint_modules(plan.model, singles))
        if longer:
            stack.enter_context(checkpoint_segments(plan.model, longer))
        for name, choice in plan.choices.items():
            make: Callable[[], Any]
            if choice == "offload":
                def offloading(m: int = plan.min_bytes) -> Any:
                    keep: list[torch.Tensor | nn.Module] = [plan.model, *inputs, *plan.keep]
                    return (OverlappedOffload(min_bytes=m, keep=keep) if cuda
                            else SaveOnDisk(min_bytes=m, keep=keep))
                make = offloading
            elif choice in ("bf16", "int8"):
                fmt: Format = "bf16" if choice == "bf16" else "int8"

                def shared(fmt: Format = fmt) -> Any:  # a storage two blocks save is compressed once
                    if fmt not in compressing:
                        compressing[fmt] = CompressSaved(fmt, keep=[plan.model, *inputs, *plan.keep])
                    return compressing[fmt]
                make = shared
            else:
                continue
            stack.callback(offload_module(plan.blocks[name], make).remove)
