"""The residual identity of one block, found in the tensors its modules' hooks see: the proof behind the atlas's
lookups inside a block (:mod:`tools.atlas.inside`).

:func:`recording` runs a step with a forward pre-hook and a forward hook (``with_kwargs=True``) on every module of
some blocks and keeps a copy of each floating tensor they see that has one of the block's own shapes (a copy: a later
in-place op, ``out += identity`` or ``ReLU(inplace=True)``, cannot change it). :func:`decompose` then searches those
tensors for the block's residual identity: starting from the block's input ``x`` (or a shortcut's output, where the
block changes the shape), the first tensor ``w`` that equals ``u + c * v`` (``u`` the stream so far, ``v`` a
module's output, ``c`` one, another number, or one gate per channel; or ``w = c * u + v``, the stream scaled first, as
Doge does) is the stream after the first branch and ``v`` that branch's output; a norm, an activation, dropout or a layer scale applied to ``w`` may carry the stream on
(post-norm; a ResNet's last ReLU); the search goes on until the block's output is reached. A shortcut holds no
residual sum inside it; where the stream changes shape after sums of its own, the module that makes it into the
output's shape is the shortcut the next sum adds to. A block whose output is
``x + a + m`` with no tensor in between (GPT-J, GPT-NeoX: a parallel block) is found too. A sum holds where it holds
up to float32 rounding, element by element (16 machine epsilons of the terms' size): a term left out, a bias added on
the side, shows. A tensor flattened to (tokens, channels) (OPT's and Llama 4's MLPs) is viewed in the block's shape.
"""
from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .probe import kind_of

SAMPLE = 4096
MAX_BRANCHES = 16
_ATTENTION_FUNCS = ("scaled_dot_product_attention", "flex_attention")
_ELEMENTWISE = re.compile(r"norm|drop|identity|relu|gelu|silu|swish|act|scale|tanh|sigmoid|mish|elu|softplus|gamma",
                          re.I)
NORM = re.compile(r"norm", re.I)


# ------------------------------------------------------------------------------------------------ recording
@dataclass(eq=False)
class Call:
    """One call of a module inside a block: its path relative to the block (``""``: the block), when it began and
    ended (a clock shared with the attention ops), copies of its tensors (access -> tensor) and what its hooks
    received (``kind_of``)."""

    path: str
    start: int
    end: int = -1
    inputs: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    outputs: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    input_kind: str = ""
    output_kind: str = ""
    nth: int = 1       # the how-manieth call of this module in the block call
    total: int = 1     # of how many
    flattened: set = field(default_factory=set)  # accesses whose tensor the hook gets flattened
    raw: list[tuple[str, str, torch.Tensor]] = field(default_factory=list)  # (kind, access, the tensor itself)
    overwritten: set = field(default_factory=set)  # (kind, access): changed in place later in the forward


def _target(t: Any, shapes: set | None) -> tuple | None:
    """The block shape ``t`` is kept as: its own, or the one it is a flattening of (same size, same last dimension:
    (batch * tokens, channels) for (batch, tokens, channels)); None: not kept."""
    if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 2 and t.device.type != "meta"):
        return None
    if shapes is None or tuple(t.shape) in shapes:
        return tuple(t.shape)
    return next((s for s in shapes if len(s) > t.dim() and math.prod(s) == t.numel() and s[-1] == t.shape[-1]),
                None)


def copies(prefix: str, value: Any, shapes: set | None = None, flattened: set | None = None,
           raw: list | None = None) -> list[tuple[str, torch.Tensor]]:
    """The floating tensors of a hook's argument or output, one level deep, each with how to reach it
    (``output[0]``, ``output.sample``); only those of ``shapes`` where given (a flattened one in its block shape,
    its access added to ``flattened``)."""
    found: list[tuple[str, Any]] = [(prefix, value)]
    if _target(value, shapes) is None:
        if isinstance(value, (tuple, list)):
            found = [(f"{prefix}[{i}]", v) for i, v in enumerate(value)]
        elif isinstance(value, dict) and type(value) is dict:
            found = [(f"{prefix}[{k!r}]", v) for k, v in value.items()]
        elif hasattr(value, "to_tuple") and hasattr(value, "keys"):  # a ModelOutput
            found = [(f"{prefix}.{k}", value[k]) for k in value.keys()]
        elif hasattr(value, "__dataclass_fields__"):
            found = [(f"{prefix}.{k}", getattr(value, k, None)) for k in value.__dataclass_fields__]
        else:
            found = []
    kept = []
    for label, v in found:
        shape = _target(v, shapes)
        if shape is None:
            continue
        if shape != tuple(v.shape) and flattened is not None:
            flattened.add(label)
        kept.append((label, v.detach().clone().reshape(shape)))
        if raw is not None:  # the tensor itself: a later in-place op shows as a difference from the copy
            raw.append(("out" if prefix == "output" else "in", label, v))
    return kept


def _arguments(args: tuple, kwargs: dict, shapes: set | None, flattened: set | None = None,
               raw: list | None = None) -> list[tuple[str, torch.Tensor]]:
    return copies("args", args, shapes, flattened, raw) + [
        found for k, v in kwargs.items() if isinstance(v, torch.Tensor)
        for found in copies(f"kwargs[{k!r}]", v, shapes, flattened, raw)]


class AttentionOps(TorchFunctionMode):
    """Notes, on the shared clock, each softmax over 3 or more dimensions (attention scores; a router's softmax has
    2) and each ``scaled_dot_product_attention``."""

    def __init__(self, clock: list[int]) -> None:
        super().__init__()
        self.clock, self.seen = clock, []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in _ATTENTION_FUNCS or (name in ("softmax", "_softmax") and args and isinstance(args[0], torch.Tensor)
                                        and args[0].dim() >= 3):
            self.clock[0] += 1
            self.seen.append((self.clock[0], "scaled_dot_product_attention" if name in _ATTENTION_FUNCS else "softmax"))
        return func(*args, **(kwargs or {}))


def block_shapes(blocks: dict[str, nn.Module], run: Any) -> dict[str, set]:
    """The shapes of each block's floating inputs and outputs (first call), from one light run."""
    shapes: dict[str, set] = {name: set() for name in blocks}
    handles = []
    for name, block in blocks.items():
        def hook(m: nn.Module, args: tuple, kwargs: dict, output: Any, name: str = name) -> None:
            if not shapes[name]:
                shapes[name] = {tuple(t.shape) for _, t in _arguments(args, kwargs, None) + copies("o", output)}
        handles.append(block.register_forward_hook(hook, with_kwargs=True))
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return shapes


@contextlib.contextmanager
def recording(blocks: dict[str, nn.Module], shapes: dict[str, set]) -> Iterator[tuple[dict[str, list[Call]],
                                                                                     AttentionOps]]:
    """Hooks on every module of ``blocks`` (name -> block): their calls, per block, in order, with copies of the
    tensors of the block's ``shapes``."""
    clock = [0]
    calls: dict[str, list[Call]] = {name: [] for name in blocks}
    handles = []
    for bname, block in blocks.items():
        for rel, module in block.named_modules():
            open_calls: list[Call] = []

            def pre(m: nn.Module, args: tuple, kwargs: dict, rel: str = rel, bname: str = bname,
                    open_calls: list = open_calls) -> None:
                clock[0] += 1
                call = Call(rel, clock[0], input_kind=kind_of(args))
                call.inputs = _arguments(args, kwargs, shapes[bname], call.flattened, call.raw)
                open_calls.append(call)
                calls[bname].append(call)

            def post(m: nn.Module, args: tuple, kwargs: dict, output: Any, bname: str = bname,
                     open_calls: list = open_calls) -> None:
                clock[0] += 1
                if open_calls:
                    call = open_calls.pop()
                    call.end, call.output_kind = clock[0], kind_of(output)
                    call.outputs = copies("output", output, shapes[bname], call.flattened, call.raw)
            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(module.register_forward_hook(post, with_kwargs=True))
    ops = AttentionOps(clock)
    try:
        with ops:
            yield calls, ops
        for own in calls.values():  # the tensors a hook kept without a clone, after the forward
            for call in own:
                copied = {("in", a): t for a, t in call.inputs} | {("out", a): t for a, t in call.outputs}
                for kind, access, t in call.raw:
                    copy = copied.get((kind, access))
                    if copy is not None and not torch.equal(t.detach().reshape(copy.shape), copy):
                        call.overwritten.add((kind, access))
                call.raw = []
    finally:
        for h in handles:
            h.remove()


def first_call(own: list[Call]) -> tuple[Call, list[Call]] | None:
    """The block's first call and the calls inside it, each numbered among the calls of its module."""
    block = next((c for c in own if c.path == ""), None)
    if block is None:
        return None
    inner = [c for c in own if c.path != "" and block.start < c.start and 0 <= c.end <= block.end]
    count: dict[str, int] = {}
    for c in inner:
        count[c.path] = count.get(c.path, 0) + 1
        c.nth = count[c.path]
    for c in inner:
        c.total = count[c.path]
    return block, inner


# ------------------------------------------------------------------------------------------------ values
@dataclass(frozen=True)
class Place:
    """Where a hook sees a tensor: a module's output (``out``: forward hook) or input (``in``: forward pre-hook)."""

    kind: str
    path: str
    access: str
    time: int
    nth: int = 1
    total: int = 1
    flattened: bool = False
    overwritten: bool = False  # a later in-place op of the same forward changes this tensor: clone it in the hook

    @property
    def depth(self) -> int:
        return 0 if not self.path else self.path.count(".") + 1


@dataclass(eq=False)
class Value:
    """One value (tensors equal within tolerance) and every place a hook sees it."""

    tensor: torch.Tensor
    places: list[Place] = field(default_factory=list)

    @property
    def time(self) -> int:
        return min(p.time for p in self.places)

    def produced(self) -> bool:
        return any(p.kind == "out" and p.path for p in self.places)


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same value: one tensor seen at two places (an ``Identity``, dropout in eval, a view) is equal bit for
    bit; a millionth is allowed."""
    if a.shape != b.shape:
        return False
    scale = max(float(b.abs().max()) if b.numel() else 0.0, 1e-12)
    if not torch.allclose(a.flatten()[:256], b.flatten()[:256], rtol=1e-6, atol=1e-7 * scale):
        return False
    return bool(torch.allclose(a, b, rtol=1e-6, atol=1e-7 * scale))


def values_of(block: Call, inner: list[Call], shapes: set) -> list[Value]:
    """The distinct tensors of ``shapes`` that the block and its modules see, with their places."""
    values: list[Value] = []

    def add(t: torch.Tensor, place: Place) -> None:
        if tuple(t.shape) not in shapes:
            return
        for v in values:
            if close(t, v.tensor):
                v.places.append(place)
                return
        values.append(Value(t, [place]))
    for access, t in block.inputs:
        add(t, Place("in", "", access, block.start, overwritten=("in", access) in block.overwritten))
    for c in inner:
        for access, t in c.inputs:
            add(t, Place("in", c.path, access, c.start, c.nth, c.total, access in c.flattened,
                         ("in", access) in c.overwritten))
        for access, t in c.outputs:
            add(t, Place("out", c.path, access, c.end, c.nth, c.total, access in c.flattened,
                         ("out", access) in c.overwritten))
    for access, t in block.outputs:
        add(t, Place("out", "", access, block.end, overwritten=("out", access) in block.overwritten))
    return values


def _channel_dim(t: torch.Tensor) -> int:
    return t.dim() - 1 if t.dim() == 3 else 1


_ROUNDING = 16 * torch.finfo(torch.float32).eps  # a float32 sum of a few terms is within this of their size


def _fit(d: torch.Tensor, v: torch.Tensor, size: torch.Tensor) -> tuple[str, float | None] | None:
    """``d == c * v`` up to float32 rounding (elementwise, on the scale ``size`` of the terms summed), for ``c`` = 1
    (``("scalar", 1.0)``), another number (``("scalar", c)``: the shortest decimal, up to 8 significant digits,
    with which the sum holds to half the rounding allowed, so that a sum rebuilt with it holds; sentences show 4)
    or one ``c`` per item and channel (``("per channel", None)``); None if none holds."""
    d64, v64 = d.double(), v.double()
    if bool(((d64 - v64).abs() <= _ROUNDING * (size + v64.abs())).all()):
        return ("scalar", 1.0)
    vv = float((v64 * v64).sum())
    if vv <= 1e-30:
        return None
    c = float((d64 * v64).sum()) / vv

    def fits(c: float, within: float = _ROUNDING) -> bool:
        return bool(((d64 - c * v64).abs() <= within * (size + abs(c) * v64.abs())).all())
    if abs(c) > 1e-6 and fits(c):  # kept as the shortest decimal that fits with half the margin (0.5, not 0.50000002)
        return ("scalar", next((float(f"{c:.{n}g}") for n in range(1, 9) if fits(float(f"{c:.{n}g}"), _ROUNDING / 2)),
                               float(f"{c:.8g}")))
    if d.dim() < 3:
        return None
    ch = _channel_dim(d)
    dm, vm, sm = (t.movedim(ch, 1).flatten(2) for t in (d64, v64, size))  # (items, channels, the rest)
    if dm.shape[-1] < 4:
        return None
    spread = float(vm.var(-1).sum()) / max(float((vm * vm).mean(-1).sum()), 1e-30)
    if spread < 1e-6:  # v is one value per item and channel: any such d would fit, which proves nothing
        return None
    g = ((dm * vm).sum(-1) / (vm * vm).sum(-1).clamp_min(1e-30)).unsqueeze(-1)
    if float(g.abs().max()) > 1e-6 and bool(((dm - g * vm).abs() <= _ROUNDING * (sm + (g * vm).abs())).all()):
        return ("per channel", None)
    return None


def _few_channels(t: torch.Tensor) -> torch.Tensor:
    ch = _channel_dim(t)
    return t.movedim(ch, 1)[:, :8].movedim(1, ch)


def _sum_of(w: Value, u: Value, v: Value) -> tuple[tuple[str, float | None], tuple[str, float | None] | None] | None:
    """Is ``w == u + c * v`` (or ``w == c * u + v``: a stream scaled before the branch is added, as Doge's residual
    weights do), with ``v``'s part above rounding? Returns (the branch's coefficient, the stream's) or None.
    (A large feature map is checked on 8 channels first, and compared whole only where those agree.)"""
    if w.tensor.shape != u.tensor.shape or v.tensor.shape != w.tensor.shape:
        return None
    if w.tensor.numel() > SAMPLE and w.tensor.dim() >= 3:
        few = [_few_channels(t.tensor).double() for t in (w, u, v)]
        size = few[0].abs() + few[1].abs()
        if _fit(few[0] - few[1], few[2], size) is None and _fit(few[0] - few[2], few[1], few[0].abs()) is None:
            return None
    w64, u64 = w.tensor.double(), u.tensor.double()
    d = w64 - u64
    if float(d.norm()) <= 50 * torch.finfo(torch.float32).eps * float(w64.norm()):
        return None  # w is u: nothing was added
    size = w64.abs() + u64.abs()
    found = _fit(d, v.tensor, size)
    if found is not None:
        return found, None
    base = _fit(w64 - v.tensor.double(), u.tensor, w64.abs() + v.tensor.double().abs())
    if base is not None and base != ("scalar", 1.0):
        return ("scalar", 1.0), base
    return None


# ------------------------------------------------------------------------------------------------ the identity
@dataclass(eq=False)
class Branch:
    """One term of the identity: the branch's output (``summand``), the sum it makes (``after``), its coefficient,
    the stream the next branch reads (``stream``: the sum, or the sum through a norm or an activation, made by
    ``through``), whether it runs beside another branch on one input (``parallel``), and the stream it adds to."""

    summand: Value
    after: Value
    coefficient: tuple[str, float | None]
    base: Value
    base_scale: tuple[str, float | None] | None = None  # the stream is scaled before the branch is added
    stream: Value | None = None
    through: str | None = None
    parallel: bool = False
    aside: bool = False    # the next branch adds to an earlier stream: this sum reaches the output only through it


@dataclass
class Identity:
    """What :func:`decompose` found: the branches, the block output's access, the shortcut (the module whose output
    the first branch adds to, where the block changes the shape), or why nothing was found."""

    branches: list[Branch] = field(default_factory=list)
    output: str | None = None
    shortcut: Value | None = None
    shortcut_reads: Value | None = None  # the stream the shortcut reads, where it is not the block's input
    shortcut_is_block: bool = False  # the shortcut is a residual block itself, whose own sums no hook sees whole
    why: str | None = None
    start: Value | None = None  # the block's input


def _elementwise(call: Call, modules: dict[str, nn.Module], channels: int) -> bool:
    """A norm, an activation, dropout or a layer scale: what may follow a sum and still carry the stream."""
    module = modules.get(call.path)
    if module is None or not _ELEMENTWISE.search(type(module).__name__):
        return False
    return sum(p.numel() for p in module.parameters()) <= 4 * channels


def _closure(start: list[Value], inner: list[Call], values: list[Value], modules: dict[str, nn.Module],
             channels: int) -> dict[Value, str | None]:
    """``start`` and what elementwise modules make of it: value -> the module that made it (None: ``start``)."""
    found: dict[Value, str | None] = {v: None for v in start}
    grew = True
    while grew:
        grew = False
        for call in inner:
            if not call.inputs or not call.outputs or not _elementwise(call, modules, channels):
                continue
            if any(close(call.inputs[0][1], v.tensor) for v in found if v.tensor.shape == call.inputs[0][1].shape):
                target = next((v for v in values if close(call.outputs[0][1], v.tensor)), None)
                if target is not None and target not in found:
                    found[target] = call.path
                    grew = True
    return found


def decompose(block: Call, inner: list[Call], x_access: str, modules: dict[str, nn.Module]) -> Identity:
    """The block's residual identity from its input at ``x_access`` to one of its outputs (see the module
    docstring). Where the block changes the shape and no identity holds with a shortcut free of residual sums, a
    whole residual block that changes the shape (Hiera's first layer of a stage, whose own shortcut is pooled
    where no hook sees it) may be the shortcut: ``shortcut_is_block`` says so."""
    x = dict(block.inputs).get(x_access)
    if x is None:
        return Identity(why="the block's input is not a floating tensor")
    if not bool(x.any()):  # DETR's decoder starts from zeros: the first sum is the first branch's output itself
        return Identity(why="the block's input is all zeros in this run (a decoder that starts from zeros), so its "
                            "first sum equals its first branch's output: the identity cannot be told")
    found = _decompose(block, inner, x_access, modules, whole_blocks=False)
    if found.why is not None and tuple(x.shape) not in {tuple(t.shape) for _, t in block.outputs}:
        again = _decompose(block, inner, x_access, modules, whole_blocks=True)
        if again.why is None and again.shortcut is not None:
            again.shortcut_is_block = True
            return again
    return found


def _weight(v: Value, modules: dict[str, nn.Module]) -> int:
    """The parameters of the largest module whose output ``v`` is (a path's whole module, not its last norm)."""
    return max((sum(q.numel() for q in modules[p.path].parameters()) for p in v.places
                if p.kind == "out" and p.path in modules and p.path), default=0)


def _decompose(block: Call, inner: list[Call], x_access: str, modules: dict[str, nn.Module],
               whole_blocks: bool) -> Identity:
    x = dict(block.inputs)[x_access]
    out_shapes = {tuple(t.shape) for _, t in block.outputs}
    values = values_of(block, inner, {tuple(x.shape)} | out_shapes)
    start = next(v for v in values if any(p.kind == "in" and p.path == "" and p.access == x_access for p in v.places))
    ends = [v for v in values if any(p.kind == "out" and p.path == "" for p in v.places)]
    channels = x.shape[_channel_dim(x)] if x.dim() >= 3 else x.shape[-1]
    first = [start]
    reshaped = tuple(x.shape) not in out_shapes
    if reshaped:  # a shortcut: a module's output of the output's shape, made from x, with no residual sum inside
        first += [v for v in values if tuple(v.tensor.shape) in out_shapes and any(
            p.kind == "out" and p.path and any(close(t, x) for _, t in _inputs_of(inner, p))
            and (whole_blocks or not _holds_a_sum(p, inner, values)) for p in v.places)]
    frontier = _closure(first, inner, values, modules, channels)
    earlier: dict[Value, str | None] = {}  # the streams before the last sum (a sum may be added to one of them)
    found = Identity(start=start)
    moved: dict[Value, Value] = {}  # the stream just made into the output's shape: each candidate -> what it read
    before: dict[Value, str | None] = {}  # the frontier it read

    def settle(base: Value) -> None:
        """The stream made into the output's shape: the candidate the next sum adds to is the shortcut."""
        read = moved.get(base, next(iter(moved.values())))
        found.shortcut, found.shortcut_reads = base, (read if read is not start else None)
        if found.branches:
            found.branches[-1].stream, found.branches[-1].through = read, before.get(read)
        moved.clear()
    for _ in range(MAX_BRANCHES):
        done = [e for e in ends if e in frontier]
        if done and moved:
            found.why = "after its last residual sum the block makes the stream into another shape, and that is its " \
                "output: no sum leads to the output"
            return found
        if done and found.branches:
            last = found.branches[-1]
            last.stream, last.through = done[0], frontier[done[0]]
            found.output = next(p.access for p in done[0].places if p.kind == "out" and p.path == "")
            return found
        step = _next_sum(frontier, values, shortcuts=moved or ([] if found.branches else first[1:]))
        if step is None and found.branches and not moved:  # added to an earlier stream: the last sum only feeds
            step = _next_sum({v: t for v, t in earlier.items() if v not in frontier}, values,  # this branch
                             after=found.branches[-1].after.time)
            if step is not None:
                found.branches[-1].stream, found.branches[-1].aside = found.branches[-1].after, True
        if step is None and reshaped and len(first) == 1 and found.shortcut is None and not moved and not any(
                tuple(v.tensor.shape) in out_shapes for v in frontier):
            moved = _reshaping(frontier, inner, values, out_shapes)
            if not moved:
                found.why = f"the block changes the stream's shape and no module makes the " \
                    f"{'stream' if found.branches else 'input'} into the output's shape alone (no shortcut)"
                return found
            earlier.update(frontier)
            before, frontier = frontier, _closure(list(moved), inner, values, modules, channels)
            continue
        if step is None:
            parallel = _parallel(frontier, ends, values)
            if parallel:
                if moved:
                    settle(parallel[0].base)
                elif found.branches:
                    found.branches[-1].stream = parallel[0].base
                elif parallel[0].base is not start and (parallel[0].base in first or reshaped):  # to a shortcut
                    found.shortcut = parallel[0].base
                found.branches += parallel
                found.output = next(p.access for p in parallel[-1].after.places if p.kind == "out" and p.path == "")
                return found
            found.why = "no residual sum: no tensor a hook sees is the block's input plus a module's output (a block " \
                "without a skip connection, or one whose sum no hook sees)" if not found.branches else \
                "after the last branch found, no sum leads to the block's output"
            return found
        if moved:
            settle(step.base)
        elif found.branches and not found.branches[-1].aside:
            found.branches[-1].stream, found.branches[-1].through = step.base, frontier[step.base]
        elif not found.branches and step.base is not start and (step.base in first or reshaped):
            if step.summand in first[1:] and step.coefficient == ("scalar", 1.0) and step.base_scale is None and \
                    _weight(step.summand, modules) < _weight(step.base, modules):  # two paths from x, one sum: the
                step.base, step.summand = step.summand, step.base  # lighter one is the shortcut (HF ResNet's)
            found.shortcut = step.base  # where the block changes the shape, what the first sum adds to is never x
        found.branches.append(step)
        earlier.update(frontier)
        frontier = _closure([step.after], inner, values, modules, channels)
    found.why = f"more than {MAX_BRANCHES} branches"
    return found


def _inputs_of(inner: list[Call], place: Place) -> list[tuple[str, torch.Tensor]]:
    return next((c.inputs for c in inner if c.path == place.path and c.end == place.time), [])


def _holds_a_sum(place: Place, inner: list[Call], values: list[Value]) -> bool:
    """Does a residual sum happen inside the module call whose output ``place`` is? A shortcut has none: a module
    that holds one (EfficientViT's ``downsample``, residual blocks around a patch merging) is part of the stream."""
    call = next((c for c in inner if c.path == place.path and c.end == place.time), None)
    if call is None:
        return False
    inside = [v for v in values if any(call.start <= p.time <= call.end for p in v.places)]
    for w in sorted(inside, key=lambda v: v.time):
        if not w.produced():
            continue
        for u in inside:
            if u is w or u.time >= w.time:
                continue
            if any(v is not u and v is not w and v.produced() and v.time <= w.time and _sum_of(w, u, v) is not None
                   for v in inside):
                return True
    return False


def _reshaping(frontier: dict[Value, str | None], inner: list[Call], values: list[Value], out_shapes: set
               ) -> dict[Value, Value]:
    """Where the stream changes shape inside the block, after residual sums of its own (EfficientViT's and SHViT's
    downsampling stages: residual blocks, a patch merging, more residual blocks): each module output of the
    output's shape made from the stream alone, with no residual sum inside that module -> the stream it read (the
    next sum tells which of them is the stream: a patch merging's output, not its first convolution's)."""
    found: dict[Value, Value] = {}
    for v in values:
        if tuple(v.tensor.shape) not in out_shapes or v in frontier:
            continue
        for p in v.places:
            if p.kind != "out" or not p.path:
                continue
            read = next((u for u in frontier for _, t in _inputs_of(inner, p) if close(t, u.tensor)), None)
            if read is not None and not _holds_a_sum(p, inner, values):
                found[v] = read
                break
    return found


def _next_sum(frontier: dict[Value, str | None], values: list[Value], after: int = -1,
              shortcuts: Iterable[Value] = ()) -> Branch | None:
    """The earliest ``w == u + c * v`` (seen after ``after``) with ``u`` on the frontier and ``v`` a module's output
    made before ``w``, not on the frontier unless it is one of the ``shortcuts`` (RepVGG's strided block adds two
    convolutions of its input, each of which could be the shortcut); of several such ``v``, one added as it is
    (``c`` = 1) before one scaled, before one gated, and the last made (a norm's output before the linear layer
    that feeds it)."""
    shortcuts = set(shortcuts)
    for w in sorted(values, key=lambda v: v.time):
        if w in frontier or w.time <= after:
            continue
        found = []
        for u in frontier:
            if w.time <= u.time:
                continue
            for v in values:
                if v is u or v is w or (v in frontier and v not in shortcuts) or not v.produced() or v.time > w.time:
                    continue
                fit = _sum_of(w, u, v)
                if fit is not None:
                    coefficient, base_scale = fit
                    rank = 3 if base_scale else 0 if coefficient == ("scalar", 1.0) else \
                        1 if coefficient[0] == "scalar" else 2
                    found.append((rank, -v.time, Branch(v, w, coefficient, base=u, base_scale=base_scale)))
        if found:
            return min(found, key=lambda f: (f[0], f[1]))[2]
    return None


def _parallel(frontier: dict[Value, str | None], ends: list[Value], values: list[Value]) -> list[Branch]:
    """``output == u + a + m`` for two modules' outputs ``a`` and ``m`` and no tensor in between (a parallel
    block: GPT-J's two branches read one norm's output, GPT-NeoX's one norm each, RepGhost's, beside a shortcut,
    its primary convolution's output)."""
    outs = [v for v in values if v.produced() and v not in ends]
    for end in ends:
        for u in frontier:
            if u.tensor.shape != end.tensor.shape:
                continue
            d = end.tensor.double() - u.tensor.double()
            for i, a in enumerate(outs):
                for m in outs[i + 1:]:
                    if a is u or m is u or a.tensor.shape != d.shape or m.tensor.shape != d.shape:
                        continue
                    a64, m64 = a.tensor.double(), m.tensor.double()
                    size = end.tensor.double().abs() + u.tensor.double().abs() + a64.abs() + m64.abs()
                    if bool(((d - a64 - m64).abs() <= _ROUNDING * size).all()):
                        first, second = sorted((a, m), key=lambda v: v.time)
                        return [Branch(first, end, ("scalar", 1.0), base=u, parallel=True),
                                Branch(second, end, ("scalar", 1.0), base=u, stream=end, parallel=True)]
    return []


def attention_ops(ops: list[tuple[int, str]], begin: int, end: int) -> list[str]:
    return sorted({name for t, name in ops if begin < t <= end})


def is_norm(module: nn.Module | None) -> bool:
    return module is not None and bool(NORM.search(type(module).__name__))
