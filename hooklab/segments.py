"""Checkpoint a run of consecutive blocks as one segment: one saved input, one recompute in backward.

:func:`hooklab.checkpoint_modules` checkpoints each named block on its own: every block keeps its own
input, so ``n`` consecutive checkpointed blocks still hold ``n`` inputs after forward.
``torch.utils.checkpoint.checkpoint_sequential`` keeps one input per *segment*, but only for an
``nn.Sequential`` it runs itself. :func:`checkpoint_segments` does what ``checkpoint_sequential`` does
for blocks that any parent calls one after the other, each getting the previous one's output (the layers
of a Hugging Face model, called in a loop with a mask and position embeddings, are such blocks)::

    with checkpoint_segments(model, [["layers.0", "layers.1", "layers.2"], ["layers.3", "layers.4"]]):
        loss = model(x).sum()      # each segment keeps its first block's inputs (and the later blocks'
    loss.backward()                # other arguments: the mask); all its blocks run again in backward

It is built from hooks, the way PyTorch's non-reentrant checkpoint is (notebook 07): a forward
pre-hook on each block records its arguments (the previous block's output as a reference to it,
every other tensor as a detached alias, with its version) and enters a ``saved_tensors_hooks``
context whose pack hook keeps a placeholder instead of the tensor; the first unpack in backward
runs the whole segment again from the recorded arguments (with each block's random-number state and
autocast state as they were) and hands every placeholder its recomputed tensor.

Rules, each checked: a block after the first must receive the previous block's output (by identity,
as it left that block's ``forward``: a forward hook that replaces it, or parent code that changes it
in between, is refused, since the recompute could not reproduce it); each block runs once per pass
through its segment; a call that passes a Hugging Face key/value cache is refused (the recompute would
append to it again). The recompute checks that it saves tensors of the same shapes, dtypes and devices
as the forward pass did, and raises otherwise. The blocks' parameters are kept as they are. As with any
checkpoint, the modules inside run again in backward: their forward hooks fire again and a
training-mode batch norm updates its running statistics again. During backward a segment holds all
the tensors its blocks save at once (no early stop): the peak grows with the segment.

>>> import torch
>>> from torch import nn
>>> _ = torch.manual_seed(0)
>>> model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(4)])
>>> x = torch.randn(8, 32, requires_grad=True)
>>> model(x).sum().backward()
>>> plain = [p.grad.clone() for p in model.parameters()]
>>> model.zero_grad()
>>> with checkpoint_segments(model, [["0", "1", "2"]]):
...     loss = model(x).sum()
>>> loss.backward()
>>> all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), plain))
True
"""
from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.utils.checkpoint  # `import torch` alone does not import it before torch 2.8
from torch import nn
from torch.autograd.graph import saved_tensors_hooks

from ._saved import Kept, check_version
from ._torch_internals import storage_key, tree_flatten, version
from .lookup import as_names, get_modules
from .scope import HookScope, LocalHook, same_module

__all__ = ["checkpoint_segments", "chained"]

TOOL = "checkpoint_segments"


def _leaves(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value) if isinstance(t, torch.Tensor)]


def chained(previous_output: Any, args: Any) -> bool:
    """Whether ``args`` (a block's arguments) contain a tensor of ``previous_output`` itself (by identity)."""
    ids = {id(t) for t in _leaves(previous_output)}
    return any(id(t) in ids for t in _leaves(args))


class _FromPrevious:
    """In a recorded call: "the previous block's output leaf number ``index``" (recomputed, never kept)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Alias:
    """In a recorded call: a tensor argument, detached (no reference cycle through the graph), with its
    ``requires_grad`` (the recompute must save what the forward pass saved) and version (checked)."""

    __slots__ = ("tensor", "version")

    def __init__(self, t: torch.Tensor) -> None:
        self.tensor = t.detach().requires_grad_(t.requires_grad)
        self.version = version(t)

    def get(self) -> torch.Tensor:
        return check_version(self.tensor, self.version, TOOL)


def _map(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` with ``leaf`` applied to everything inside its lists, tuples and dicts (copied on the way)."""
    if isinstance(value, list):
        return [_map(v, leaf) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_map(v, leaf) for v in value)
    if type(value) is dict:
        return {k: _map(v, leaf) for k, v in value.items()}
    return leaf(value)


def _record(value: Any, previous: dict[int, int]) -> Any:
    """``value`` with its tensors recorded: a leaf of the previous block's output as :class:`_FromPrevious`,
    any other tensor as an :class:`_Alias`; other objects as they are."""
    def one(v: Any) -> Any:
        if not isinstance(v, torch.Tensor):
            return v
        index = previous.get(id(v))
        return _FromPrevious(index) if index is not None else _Alias(v)
    return _map(value, one)


def _replayed(value: Any, leaves: list[torch.Tensor] | None) -> Any:
    """A recorded call's arguments, made real again (``leaves``: the previous block's recomputed output)."""
    def one(v: Any) -> Any:
        if isinstance(v, _FromPrevious):
            assert leaves is not None  # only recorded after a previous block
            return leaves[v.index]
        return v.get() if isinstance(v, _Alias) else v
    return _map(value, one)


def _refuse_cache(name: str, value: Any) -> None:
    module = sys.modules.get("transformers.cache_utils")
    cache = getattr(module, "Cache", None)
    if cache is not None and any(isinstance(v, cache) for v in tree_flatten(value)):
        raise RuntimeError(
            f"{TOOL}: {name!r} was called with a key/value cache (use_cache=True): the block appends to it in "
            "forward and the recompute in backward would append again. Call the model with use_cache=False while "
            "training with checkpoints, as Hugging Face's own gradient checkpointing does.")


def _autocast_state(devices: Iterable[str]) -> list[tuple[str, bool, torch.dtype]]:
    state = []
    for device in sorted(set(devices) | {"cpu"}):
        try:
            state.append((device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)))
        except (TypeError, AttributeError, RuntimeError):  # torch < 2.4: autocast is not recorded
            pass
    return state


class _Holder:
    """What the graph keeps for a tensor saved inside a segment: where it was saved; in backward, its recomputation."""

    __slots__ = ("run", "call", "index", "value", "__weakref__")

    def __init__(self, run: _Run, call: int, index: int) -> None:
        self.run, self.call, self.index = run, call, index
        self.value: torch.Tensor | None = None


class _Call:
    """One block's call inside one pass through a segment."""

    __slots__ = ("name", "forward", "arguments", "rng", "cuda_rng", "autocast", "metas", "holders")

    def __init__(self, name: str, module: nn.Module, arguments: Any, preserve_rng_state: bool) -> None:
        self.name, self.forward, self.arguments = name, module.forward, arguments
        tensors = _leaves(arguments)
        cuda = sorted({t.device for t in tensors if t.device.type == "cuda"}, key=str)
        self.rng = torch.get_rng_state() if preserve_rng_state else None
        self.cuda_rng = [(d, torch.cuda.get_rng_state(d)) for d in cuda] if preserve_rng_state else []
        self.autocast = _autocast_state(t.device.type for t in tensors)
        self.metas: list[tuple[torch.Size, torch.dtype, torch.device]] = []
        self.holders: list[weakref.ref[_Holder]] = []


class _Run:
    """One pass of the forward through a segment: its calls, recorded; replayed on the first unpack in backward."""

    def __init__(self, names: Sequence[str], parameters: set[int]) -> None:
        self.names, self.parameters = names, parameters
        self.calls: list[_Call] = []

    def pack(self, t: torch.Tensor) -> Any:
        # a parameter (or a view of one, e.g. the weight.t() a Linear saves) is alive anyway: kept with its version,
        # as PyTorch keeps it. Not buffers: a training-mode batch norm's recompute updates its running statistics
        # (their version) again, and backward reads them after that
        if storage_key(t) in self.parameters:
            return Kept(t)
        call = self.calls[-1]
        holder = _Holder(self, len(self.calls) - 1, len(call.metas))
        call.metas.append((t.shape, t.dtype, t.device))
        call.holders.append(weakref.ref(holder))
        return holder

    def replay(self) -> None:
        """Run the segment's blocks again from the recorded arguments; give every live holder its tensor."""
        leaves: list[torch.Tensor] | None = None
        for call in self.calls:
            arguments = _replayed(call.arguments, leaves)
            saved = [0]

            # the recompute's own graph is never run backward: its pack hook keeps nothing. Returning ``t`` itself
            # would make a reference cycle through C++ (an op that saves its output: t -> grad_fn -> the saved
            # t) that Python's garbage collector cannot see, and every recompute's tensors would leak
            def collect(t: torch.Tensor, call: _Call = call, saved: list[int] = saved) -> None:
                if storage_key(t) in self.parameters:  # kept in forward, not counted
                    return None
                i = saved[0]
                saved[0] += 1
                if i >= len(call.metas) or call.metas[i] != (t.shape, t.dtype, t.device):
                    raise self._mismatch(call, i, t)
                holder = call.holders[i]()
                if holder is not None:
                    holder.value = t.detach() if t.requires_grad else t
                return None

            devices = [d for d, _ in call.cuda_rng]
            with contextlib.ExitStack() as stack:
                stack.enter_context(torch.random.fork_rng(devices=devices, enabled=call.rng is not None))
                if call.rng is not None:
                    torch.set_rng_state(call.rng)
                    for device, state in call.cuda_rng:
                        torch.cuda.set_rng_state(state, device)
                for device_type, enabled, dtype in call.autocast:
                    stack.enter_context(torch.autocast(device_type, enabled=enabled, dtype=dtype))
                stack.enter_context(torch.enable_grad())
                stack.enter_context(saved_tensors_hooks(collect, _never_unpacked))
                args, kwargs = arguments
                out = call.forward(*args, **kwargs)
            if saved[0] != len(call.metas):
                raise self._mismatch(call, saved[0], None)
            leaves = _leaves(out)

    def _mismatch(self, call: _Call, index: int, t: torch.Tensor | None) -> RuntimeError:
        then = call.metas[index] if index < len(call.metas) else None
        now = None if t is None else (t.shape, t.dtype, t.device)
        return RuntimeError(
            f"{TOOL}: recomputing the segment {list(self.names)} in backward, block {call.name!r} saved "
            f"{'no tensor' if now is None else 'a tensor ' + _meta(now)} as its tensor number {index + 1}, where the "
            f"forward pass saved {'none' if then is None else _meta(then)} ({len(call.metas)} in all). Its forward "
            "depends on something that changed between forward and backward (a Python flag or counter, an "
            "argument object changed in place): checkpoint that block on its own, or not at all.")


def _never_unpacked(packed: None) -> torch.Tensor:
    raise RuntimeError(f"{TOOL}: a tensor saved by a recompute was unpacked; the recompute's graph is not meant to be "
                       "run backward")


def _meta(meta: tuple[torch.Size, torch.dtype, torch.device]) -> str:
    shape, dtype, device = meta
    return f"of shape {tuple(shape)} {str(dtype).replace('torch.', '')} on {device}"


def _unpack(packed: Any) -> torch.Tensor:
    if isinstance(packed, Kept):
        return packed.get(TOOL)
    holder: _Holder = packed
    if holder.value is None:  # the first unpack of this pass's backward (or a second backward): recompute
        holder.run.replay()
    value = holder.value
    assert value is not None  # replay() raised if the recompute did not save it
    holder.value = None  # let go once used; an unpack in a later backward recomputes again
    return value


class _Segment:
    """The hooks of one segment, and the pass through it in progress (per thread)."""

    def __init__(self, names: list[str], modules: list[nn.Module], preserve_rng_state: bool) -> None:
        self.names, self.modules, self.preserve_rng_state = names, modules, preserve_rng_state
        self.parameters = {storage_key(p) for m in modules for p in m.parameters()}
        self.local = threading.local()

    def _state(self) -> Any:
        st = self.local
        if not hasattr(st, "run"):
            st.run, st.expect, st.previous, st.contexts = None, 0, None, []
        return st

    def register(self, scope: HookScope) -> None:
        for position, (name, module) in enumerate(zip(self.names, self.modules, strict=True)):
            registered = same_module(module)  # a copy.deepcopy made inside the block carries these hooks

            def pre(mod: nn.Module, args: Any, kwargs: Any, position: int = position, name: str = name,
                    registered: Any = registered) -> None:
                if registered(mod):
                    self._enter(position, name, mod, args, kwargs)

            def post(mod: nn.Module, args: Any, output: Any, position: int = position,
                     registered: Any = registered) -> None:
                if registered(mod):
                    self._leave(position, output)

            scope.add(module.register_forward_pre_hook(LocalHook(pre, TOOL), with_kwargs=True))
            # first among the forward hooks: it sees the output as forward returned it, before any hook replaces it
            scope.add(module.register_forward_hook(LocalHook(post, TOOL), prepend=True, always_call=True))

    def _enter(self, position: int, name: str, module: nn.Module, args: Any, kwargs: Any) -> None:
        st = self._state()
        if not torch.is_grad_enabled():  # nothing is saved for backward: a plain call
            st.run = None
            return
        if position == 0:
            st.run = _Run(self.names, self.parameters)
            previous: dict[int, int] = {}
        else:
            before = self.names[position - 1]
            if st.run is None or st.expect != position:
                raise RuntimeError(
                    f"{TOOL}: block {name!r} ran without {before!r} right before it in the same pass, but they "
                    f"are one segment ({self.names}): its blocks must run once each, in this order, every time "
                    "the first one runs. Checkpoint them apart (hooklab.checkpoint_modules) or name other blocks.")
            previous = {id(t): i for i, t in enumerate(st.previous)}
            if not any(id(t) in previous for t in _leaves((args, kwargs))):
                st.run = None
                raise RuntimeError(
                    f"{TOOL}: block {name!r} did not receive {before!r}'s output as {before!r}'s forward returned "
                    "it (a forward hook on it returns another tensor, or the code between the two changes it), so "
                    "the recompute in backward could not reproduce its input. Checkpoint the two blocks apart "
                    "(hooklab.checkpoint_modules), or move that change into one of the blocks.")
        _refuse_cache(name, (args, kwargs))
        run = st.run
        run.calls.append(_Call(name, module, _record((args, kwargs), previous), self.preserve_rng_state))
        context = saved_tensors_hooks(run.pack, _unpack)
        context.__enter__()
        st.contexts.append(context)
        st.previous = None

    def _leave(self, position: int, output: Any) -> None:
        st = self._state()
        if not st.contexts or st.run is None:
            return
        st.contexts.pop().__exit__(None, None, None)
        if position == len(self.names) - 1:
            st.run, st.expect, st.previous = None, 0, None  # the pass is over: the graph holds the run now
        else:
            st.expect, st.previous = position + 1, _leaves(output)

    def reset(self) -> None:
        st = self._state()
        while st.contexts:  # a forward that raised inside a block: leave its context
            st.contexts.pop().__exit__(None, None, None)
        st.run, st.expect, st.previous = None, 0, None


def _refuse_overlaps(segments: list[list[str]], found: dict[str, nn.Module]) -> None:
    seen: dict[int, str] = {}
    for names in segments:
        for name in names:
            module = found[name]
            if id(module) in seen:
                raise ValueError(f"{TOOL}: {name!r} is named twice (or is the same module as {seen[id(module)]!r}); "
                                 "each block belongs to one segment, once")
            seen[id(module)] = name
    for outer, parent in found.items():
        inside = {id(m) for m in parent.modules() if m is not parent}
        for inner, child in found.items():
            if id(child) in inside:
                raise ValueError(f"{TOOL}: {inner!r} is inside {outer!r}; name blocks that do not nest (the "
                                 "outer one's recompute would run the inner one outside its segment)")


def checkpoint_segments(model: nn.Module, segments: Sequence[str | Iterable[str]], *,
                        preserve_rng_state: bool = True) -> AbstractContextManager[list[list[str]]]:
    """Inside the block, each segment (a list of block names, in the order they run) is checkpointed as one.

    A segment keeps the inputs its first block receives (and any other argument of the later blocks, such as
    a mask); every tensor its blocks save for backward is dropped and recomputed, all blocks together, when
    backward first needs one. ``preserve_rng_state`` (default True) replays each block with the random-number
    state it had (dropout gives the same mask). Hooks are removed on exit, also after an exception; a graph
    made inside the block can still be backpropagated afterwards. The block is used once (call the function
    again for another block). See the module docstring for the rules.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"{TOOL} takes an nn.Module, got {type(model).__name__}")
    if isinstance(segments, str) or not isinstance(segments, Sequence):
        raise TypeError(f"{TOOL} takes a list of segments, each a list of block names in the order they run, e.g. "
                        f"[['layers.0', 'layers.1'], ['layers.2', 'layers.3']]; got {type(segments).__name__}")
    segments = [s if isinstance(s, str) else list(s) for s in segments]
    if any(not s for s in segments):
        raise ValueError(f"{TOOL}: a segment needs at least one block name, e.g. [['layers.0', 'layers.1']]")
    names = [as_names(s) for s in segments]
    found = get_modules(model, [n for s in names for n in s])
    _refuse_overlaps(names, found)
    return _SegmentsBlock(names, [_Segment(s, [found[n] for n in s], preserve_rng_state) for s in names])


class _SegmentsBlock:
    """The ``with`` block of :func:`checkpoint_segments`: registers the segments' hooks on entry, removes them on
    exit (also after an exception) and lets go of the blocks; one block per object."""

    def __init__(self, names: list[list[str]], parts: list[_Segment]) -> None:
        self._names, self._parts = names, parts
        self._scope: HookScope | None = None
        self._state = "new"

    def __enter__(self) -> list[list[str]]:
        if self._state != "new":
            raise RuntimeError(f"this {TOOL} block has already run; call {TOOL}(...) again for another block")
        self._state = "running"
        self._scope = HookScope(TOOL)
        try:
            for part in self._parts:
                part.register(self._scope)
        except BaseException:
            self._end()
            raise
        return self._names

    def __exit__(self, *exc: object) -> None:
        self._end()

    def _end(self) -> None:
        self._state = "done"
        parts, self._parts = self._parts, []  # the model is let go of when the block ends
        try:
            if self._scope is not None:
                self._scope.remove()
        finally:
            for part in parts:
                part.reset()
