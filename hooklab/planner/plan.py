"""A plan of :class:`hooklab.MemoryPlanner`: a choice per block, its modelled bytes and time; ``apply()`` runs it."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .._text import format_bytes, format_table
from .._torch_internals import tree_flatten
from ..checkpoint import checkpoint_modules
from ..offload import CompressSaved, Format, OverlappedOffload, SaveOnDisk, offload_module
from ..scope import HookScope
from ..segments import checkpoint_segments
from ._search import Option

__all__ = ["MemoryPlan"]


def _ms(seconds: float) -> str:
    """``0.000168e-3 -> '168 ns'``: three significant digits in the unit that fits."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


@dataclass
class MemoryPlan:
    """A choice per block, its modelled bytes and time; :meth:`apply` runs it, :meth:`table` shows it.

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
        return {name: option.choice for name, option, _ in self.rows}

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
        return sum(option.seconds for _, option, _ in self.rows)

    def table(self) -> str:
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

    @contextlib.contextmanager
    def apply(self) -> Iterator[MemoryPlan]:
        """Inside the block the model runs the plan; on exit (also after an exception) it is as before."""
        self._check_blocks()
        inputs: list[torch.Tensor] = []
        compressing: dict[str, CompressSaved] = {}  # one context per format and forward pass, shared by its blocks
        cuda = self.device.type == "cuda"
        with HookScope("MemoryPlan.apply") as scope, contextlib.ExitStack() as stack:
            def note(m: nn.Module, args: Any, kwargs: Any) -> None:
                inputs[:] = [t for t in tree_flatten((args, kwargs)) if isinstance(t, torch.Tensor)]
                compressing.clear()  # a new forward pass
            scope.add(self.model.register_forward_pre_hook(note, with_kwargs=True))
            stack.callback(inputs.clear)
            stack.callback(compressing.clear)
            singles = [run[0] for run in self.segments if len(run) == 1]
            longer = [run for run in self.segments if len(run) > 1]
            if singles:
                stack.enter_context(checkpoint_modules(self.model, singles))
            if longer:
                stack.enter_context(checkpoint_segments(self.model, longer))
            for name, choice in self.choices.items():
                make: Callable[[], Any]
                if choice == "offload":
                    def offloading(m: int = self.min_bytes) -> Any:
                        keep: list[torch.Tensor | nn.Module] = [self.model, *inputs, *self.keep]
                        return (OverlappedOffload(min_bytes=m, keep=keep) if cuda
                                else SaveOnDisk(min_bytes=m, keep=keep))
                    make = offloading
                elif choice in ("bf16", "int8"):
                    fmt: Format = "bf16" if choice == "bf16" else "int8"

                    def shared(fmt: Format = fmt) -> Any:  # a storage two blocks save is compressed once
                        if fmt not in compressing:
                            compressing[fmt] = CompressSaved(fmt, keep=[self.model, *inputs, *self.keep])
                        return compressing[fmt]
                    make = shared
                else:
                    continue
                stack.callback(offload_module(self.blocks[name], make).remove)
            yield self
