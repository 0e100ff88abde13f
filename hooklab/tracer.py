"""Record every hook firing of one forward + backward pass, in the order PyTorch runs them.

Register observing hooks *through* a :class:`Tracer`; each firing becomes an :class:`Event`
(step, phase, kind, name, detail). Every hook the tracer added is removed when the ``with``
block ends, also when it raises. The hooks only look: they return ``None`` and never change
a value::

    with Tracer() as tr:
        with tr.saved_tensors():          # pack / unpack of saved tensors
            y = w * x
        tr.tensor(y, "y")                 # tensor hook
        tr.node(y.grad_fn, "mul")         # Node pre-hook and post-hook
        tr.post_accumulate_grad(w, "w")   # leaf: after .grad was written
        y.sum().backward()
    print(tr.table())                     # tr.events: the Event records
    tr.plot()

``retain_grad`` has no hook object in PyTorch. ``tr.retain_grad(t, name)`` calls
``t.retain_grad()`` and records a ``retain_grad`` event at the first moment the tracer can
*see* that ``t.grad`` was written: its own pre-hook on ``t.grad_fn`` (which PyTorch runs right
after it writes ``.grad``), or any later traced event, whichever comes first. Such an event is
an observation, not a hook call, and its detail says so.
"""
from __future__ import annotations

import itertools
import warnings
import weakref
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch import nn

from . import plot
from ._checks import choice, module as check_module, no_call_causes, refuse_compiled
from ._inplace import in_place_on_outputs
from ._saved import OtherThreads, check_version
from ._text import describe_shape, format_table
from ._torch_internals import current_graph_task_id, tree_flatten, version, was_compiled
from .lookup import as_names, get_modules
from .scope import Recorder, recomputing

__all__ = ["KINDS", "Event", "Tracer", "describe", "in_place_on_outputs"]

# Every kind of event, in the order the timeline stacks its lanes (top to bottom).
Kind = Literal[
    "module_forward_pre",
    "module_forward",
    "pack",
    "module_backward_pre",
    "tensor",
    "retain_grad",
    "node_pre",
    "unpack",
    "node_post",
    "post_accumulate_grad",
    "multi_grad",
    "module_backward",
]
KINDS: tuple[Kind, ...] = get_args(Kind)
Phase = Literal["forward", "backward"]
_FORWARD_KINDS = {"module_forward_pre", "module_forward", "pack"}


@dataclass(frozen=True)
class Event:
    """One hook firing: its position, the pass it happened in, what fired and on what."""

    step: int
    phase: Phase
    kind: Kind
    name: str  # the label given when registering
    detail: str  # shapes of what the hook received (never values)


def describe(value: Any) -> str:
    """A short, stable description of what a hook received: shapes, never values (hooklab's one shape notation).

    >>> describe((torch.ones(2, 3), None))
    '[(2, 3), None]'
    """
    return describe_shape(value)


def _phase(kind: Kind) -> Phase:
    # The autograd engine sets a graph-task id while it runs a backward pass (-1 otherwise).
    task_id = current_graph_task_id()
    if task_id is not None:
        return "backward" if task_id != -1 else "forward"
    return "forward" if kind in _FORWARD_KINDS else "backward"


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string (the label shown in the table), got {name!r}")
    return name


def _check_tensor(t: Any, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what} expects a tensor, got {type(t).__name__}")
    if not t.requires_grad:
        raise ValueError(
            f"{what}: this tensor does not require grad, so no gradient will ever reach it. "
            "Call .requires_grad_() on a leaf, or trace a tensor computed from one."
        )
    return t


Backward = Literal["full", "outputs"]
MultiMode = Literal["all", "any"]


def _again() -> str:
    """A module event's note when an activation checkpoint runs the module again for backward."""
    return " (recomputed for backward)" if recomputing() else ""


class Tracer(Recorder):
    """Context manager that records hook firings as :class:`Event` s (see the module doc).

    A recorder (:class:`~hooklab.scope.Recorder`): the registering methods (``tensor()``,
    ``module()``, ...) are called inside its ``with`` block, and every hook they added is removed
    when the block ends; the events stay readable.

    >>> w = torch.ones(3, requires_grad=True)
    >>> with Tracer() as tr:
    ...     y = w * 2
    ...     _ = tr.tensor(y, "y")
    ...     _ = tr.post_accumulate_grad(w, "w")
    ...     y.sum().backward()
    >>> tr.sequence()
    [('tensor', 'y'), ('post_accumulate_grad', 'w')]
    >>> print(tr.table())
    step  phase     kind                  name  detail
    1     backward  tensor                y     (3,)
    2     backward  post_accumulate_grad  w     .grad (3,)
    """

    _sees_recomputation = True  # a checkpoint's recomputation is shown, as what it is

    def __init__(self) -> None:
        super().__init__()
        self._events: list[Event] = []
        self._known: dict[int, tuple[weakref.ref[torch.Tensor], str]] = {}  # id -> tensor the tracer can name (one lookup a pack)
        self._retained: list[list[Any]] = []  # [tensor ref, name, ref to the .grad last seen, version]
        self._module_labels: list[str] = []  # modules traced through module() / modules()
        self._full_backward: list[str] = []  # ... of them, those with full backward hooks
        self._compiled_roots: list[str] = []  # traced models that have a torch.compile wrapper

    # ------------------------------------------------------------------ lifecycle
    def _register(self) -> None:
        """Nothing yet: the methods below register, inside the block."""

    def _unregister(self) -> None:
        self._poll_retained("observed at the end of the block")
        self.scope.remove()
        if (self._module_labels and not self._block_raised
                and not any(e.kind.startswith("module") for e in self._events)):
            shown = ", ".join(self._module_labels[:5]) + (", ..." if len(self._module_labels) > 5 else "")
            compiled = ", ".join(self._compiled_roots) or None
            warnings.warn(f"Tracer recorded no event of the modules it traced ({shown}). {no_call_causes(compiled)}",
                          RuntimeWarning, stacklevel=5)

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        exc = exc_info[0] if exc_info else None
        if (isinstance(exc, RuntimeError) and "BackwardHookFunction" in str(exc) and self._full_backward
                and hasattr(exc, "add_note")):  # add_note: Python >= 3.11
            exc.add_note(f"hooklab: the Tracer traced the backward of {', '.join(self._full_backward[:3])} with "
                         "full backward hooks, which PyTorch forbids when a later op modifies the module's output "
                         "in place (e.g. a following ReLU(inplace=True)). Trace it with backward='outputs' (or "
                         "False); see Tracer.module.")
        super().__exit__(exc_type, *exc_info)

    @property
    def events(self) -> list[Event]:
        """The recorded :class:`Event` s, in the order the hooks fired."""
        self._check_used()
        return self._events

    def __len__(self) -> int:
        return len(self._events)

    def __repr__(self) -> str:
        state = f"{len(self.scope)} hooks" if self.recording else self._state
        return f"Tracer({len(self._events)} events, {state})"

    def clear(self) -> None:
        """Forget the recorded events (the hooks stay registered)."""
        self._events.clear()

    # ------------------------------------------------------------------ recording
    def _open(self, what: str) -> None:
        if not self.recording:
            where = "its block has ended" if self._state == "done" else "its block has not been entered"
            raise RuntimeError(f"{what} registers hooks, so it is called inside the Tracer's `with` block "
                               f"({where}): with Tracer() as tr: tr.{what.rstrip('()')}(...)")

    def _record(self, kind: Kind, name: str, detail: str) -> None:  # runs at every hook firing: kept short
        if self._state != "recording":
            return
        if self._retained:
            self._poll_retained()
        self._events.append(Event(len(self._events) + 1, _phase(kind), kind, name, detail))

    def _append(self, kind: Kind, name: str, detail: str, phase: Phase | None = None) -> None:
        self._events.append(Event(len(self._events) + 1, phase or _phase(kind), kind, name, detail))

    def _poll_retained(self, when: str = "observed") -> None:
        for entry in self._retained:
            tensor = entry[0]()
            if tensor is None or tensor.grad is None:
                continue
            grad = tensor.grad
            if entry[2]() is grad and entry[3] == version(grad):
                continue
            entry[2], entry[3] = weakref.ref(grad), version(grad)
            # .grad is only ever written by a backward pass, even when seen after it ended
            self._append("retain_grad", entry[1], f"{describe(grad)} .grad written ({when})", "backward")

    def _remember(self, t: torch.Tensor, name: str) -> None:
        entry = self._known.get(id(t))
        if entry is None or entry[0]() is not t:  # the first name given to a tensor stays its name
            self._known[id(t)] = (weakref.ref(t), name)

    def _name_of(self, t: torch.Tensor) -> str | None:
        entry = self._known.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None  # the same object, not a reused id

    # ------------------------------------------------------------------ tensors and Nodes
    def name(self, t: torch.Tensor, name: str) -> torch.Tensor:
        """Give ``t`` a label for saved-tensor events without registering any hook; return ``t``."""
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"name() expects a tensor, got {type(t).__name__}")
        self._remember(t, _check_name(name))
        return t

    def tensor(self, t: torch.Tensor, name: str) -> torch.utils.hooks.RemovableHandle:
        """Trace ``t.register_hook``: fires when the gradient with respect to ``t`` is computed."""
        self._open("tensor()")
        _check_name(name)
        _check_tensor(t, "tensor()")
        self._remember(t, name)

        def tensor_hook(grad: torch.Tensor) -> None:
            self._record("tensor", name, describe(grad))

        return self.scope.add(t.register_hook(tensor_hook))

    def retain_grad(self, t: torch.Tensor, name: str) -> None:
        """Call ``t.retain_grad()`` and record when ``t.grad`` gets written (an observation).

        PyTorch cannot undo ``retain_grad``: ``t`` keeps its ``.grad`` after the block ends.
        """
        self._open("retain_grad()")
        _check_name(name)
        _check_tensor(t, "retain_grad()")
        if t.is_leaf:
            raise ValueError(
                f"retain_grad(): {name!r} is a leaf tensor; leaves keep .grad anyway. "
                "Trace it with tensor() or post_accumulate_grad() instead."
            )
        t.retain_grad()
        self._remember(t, name)
        grad = t.grad
        self._retained.append([weakref.ref(t), name, weakref.ref(grad) if grad is not None else (lambda: None),
                               version(grad) if grad is not None else -1])

        def observe(grad_outputs: Any) -> None:  # runs right after PyTorch writes t.grad
            if self.recording:
                self._poll_retained()

        node = t.grad_fn
        assert node is not None  # not a leaf (refused above), and it requires grad
        self.scope.add(node.register_prehook(observe))

    def node(self, node: Any, name: str | None = None) -> tuple[Any, Any]:
        """Trace a Node (``y.grad_fn``, or a non-leaf tensor ``y``): its pre-hook and post-hook.

        ``node_pre`` fires just before the Node computes, ``node_post`` just after;
        together they bracket the Node's own execution.
        """
        self._open("node()")
        if isinstance(node, torch.Tensor):
            if node.grad_fn is None:
                raise ValueError(
                    "node(): this tensor has no grad_fn (it is a leaf or does not require grad). "
                    "A leaf's gradient is written by an AccumulateGrad Node, reachable as "
                    "y.grad_fn.next_functions[i][0] from a tensor y computed from it; "
                    "or trace the leaf with tensor() / post_accumulate_grad()."
                )
            node = node.grad_fn
        if not isinstance(node, torch.autograd.graph.Node):
            raise TypeError(f"node() expects an autograd Node such as y.grad_fn, got {type(node).__name__}")
        label = _check_name(name) if name is not None else node.name()

        def node_pre(grad_outputs: Any) -> None:
            self._record("node_pre", label, f"grad_outputs {describe(grad_outputs)}")

        def node_post(grad_inputs: Any, grad_outputs: Any) -> None:
            self._record("node_post", label, f"grad_inputs {describe(grad_inputs)}")

        return self.scope.add(node.register_prehook(node_pre)), self.scope.add(node.register_hook(node_post))

    def post_accumulate_grad(self, p: torch.Tensor, name: str) -> torch.utils.hooks.RemovableHandle:
        """Trace ``p.register_post_accumulate_grad_hook`` (leaf tensors only)."""
        self._open("post_accumulate_grad()")
        _check_name(name)
        _check_tensor(p, "post_accumulate_grad()")
        if not p.is_leaf:
            raise ValueError(
                f"post_accumulate_grad(): {name!r} is not a leaf (it was made by {type(p.grad_fn).__name__}). "
                "Only leaves accumulate into .grad, so PyTorch refuses this hook on them. "
                "Use tensor() or retain_grad() for intermediate tensors."
            )
        self._remember(p, name)

        def post_accumulate_hook(param: torch.Tensor) -> None:
            self._record("post_accumulate_grad", name, f".grad {describe(param.grad)}")

        return self.scope.add(p.register_post_accumulate_grad_hook(post_accumulate_hook))

    post_accumulate = post_accumulate_grad  # the old name (before issue 26), kept for notebooks saved with it

    def multi_grad(self, tensors: Sequence[torch.Tensor], name: str, *, mode: MultiMode = "all") -> Any:
        """Trace ``torch.autograd.graph.register_multi_grad_hook(tensors, ..., mode=mode)``."""
        self._open("multi_grad()")
        _check_name(name)
        choice(mode, MultiMode, "multi_grad(): mode")
        tensors = list(tensors)
        if not tensors:
            raise ValueError("multi_grad(): give at least one tensor")
        for t in tensors:
            _check_tensor(t, "multi_grad()")

        def multi_hook(grads: Any) -> None:
            self._record("multi_grad", name, f"mode={mode} {describe(grads)}")

        handle = torch.autograd.graph.register_multi_grad_hook(tensors, multi_hook, mode=mode)
        return self.scope.add(handle)

    # ------------------------------------------------------------------ modules
    def module(self, m: nn.Module, name: str | None = None, *, forward: bool = True,
               backward: bool | Backward = True) -> None:
        """Trace a module's forward pre/post hooks and its backward.

        ``backward=True`` (or ``"full"``) uses PyTorch's full backward pre/post hooks: events
        ``module_backward_pre`` (grad_output) and ``module_backward`` (grad_input). Those hooks
        wrap the module's outputs, and PyTorch then forbids an in-place op on them
        (``nn.ReLU(inplace=True)`` after a traced layer, as in torchvision's ResNets).
        ``backward="outputs"`` traces such models: a tensor hook on each output records
        ``module_backward_pre`` (the gradient with respect to that output, also when a later op
        overwrites it in place); there is no ``module_backward`` event then (grad_input needs the
        full hooks). ``backward=False`` traces the forward only.

        With full hooks, PyTorch warns "Full backward hook is firing when gradients are computed with
        respect to module outputs since no inputs require gradients" when no input of the module
        requires grad (the first layer of a model fed plain data): the ``module_backward`` event then
        reports ``None`` for each input. A module that returns a ``PackedSequence`` (an RNN fed packed
        sequences) gets no full backward hook call at all; trace it with ``backward="outputs"``, which
        hooks every tensor inside the output.
        """
        self._open("module()")
        check_module(m, "Tracer.module()")
        refuse_compiled(m, "Tracer.module()")
        if backward not in (True, False, "full", "outputs"):
            raise ValueError(f"module(): backward must be True, False, 'full' or 'outputs', got {backward!r}")
        label = _check_name(name) if name is not None else type(m).__name__
        self._module_labels.append(label)
        if was_compiled(m) and label not in self._compiled_roots:
            self._compiled_roots.append(label)
        if forward:
            def forward_pre(mod: nn.Module, args: Any, kwargs: Any) -> None:
                extra = f" kwargs {describe(kwargs)}" if kwargs else ""
                self._record("module_forward_pre", label, f"input {describe(args)}{extra}{_again()}")

            def forward_post(mod: nn.Module, args: Any, output: Any) -> None:
                self._record("module_forward", label, f"output {describe(output)}{_again()}")

            self._on(m, forward_pre, kind="forward_pre", with_kwargs=True)
            self._on(m, forward_post)
        if backward == "outputs":
            self._on(m, self._output_grad_hooks(label))
        elif backward:
            def backward_pre(mod: nn.Module, grad_output: Any) -> None:
                self._record("module_backward_pre", label, f"grad_output {describe(grad_output)}")

            def backward_post(mod: nn.Module, grad_input: Any, grad_output: Any) -> None:
                self._record("module_backward", label, f"grad_input {describe(grad_input)}")

            self._on(m, backward_pre, kind="backward_pre")
            self._on(m, backward_post, kind="backward")
            self._full_backward.append(label)

    def _output_grad_hooks(self, label: str) -> Any:
        def hook_outputs(mod: nn.Module, args: Any, output: Any) -> None:
            if not self.recording or not torch.is_grad_enabled():
                return
            # every tensor in the output, also inside a PackedSequence or a dict
            outs = [t for t in tree_flatten(output) if isinstance(t, torch.Tensor) and t.requires_grad]
            self.scope.prune()  # forget the hooks of graphs already freed, so nothing grows step after step
            for i, t in enumerate(outs):
                what = "grad_output" if len(outs) == 1 else f"grad_output[{i}]"

                def output_grad(grad: torch.Tensor, what: str = what) -> None:
                    self._record("module_backward_pre", label, f"{what} {describe(grad)} (output tensor hook)")

                self.scope.add(t.register_hook(output_grad))
        return hook_outputs

    def modules(self, model: nn.Module, names: str | Iterable[str] | None = None, *, forward: bool = True,
                backward: bool | Backward | Literal["auto"] = "auto") -> list[str]:
        """Trace submodules of ``model`` by name, one or several (default: every module without children).

        Unknown names raise an error listing the names that exist. Returns the names traced.
        ``backward="auto"`` (the default) uses full backward hooks unless the model modifies
        module outputs in place (``ReLU(inplace=True)``, ``out += identity``: see
        :func:`in_place_on_outputs`); then it uses ``backward="outputs"`` and warns (see
        :meth:`module`). Pass ``backward=`` explicitly to choose.
        """
        self._open("modules()")
        check_module(model, "Tracer.modules()")
        refuse_compiled(model, "Tracer.modules()")
        if names is None:  # the modules without children (the model itself when it has none)
            chosen = [n for n, mod in model.named_modules() if n and not any(True for _ in mod.children())] or [""]
        else:
            chosen = as_names(names)
        found = get_modules(model, chosen)  # one walk of the model, however many names
        if backward == "auto":
            in_place = in_place_on_outputs(model)
            backward = "outputs" if in_place else True
            if in_place:
                shown = ", ".join(in_place[:3]) + (", ..." if len(in_place) > 3 else "")
                warnings.warn(
                    f"Tracer.modules: this model modifies module outputs in place ({shown}), where PyTorch "
                    "forbids full backward hooks; backward is traced through tensor hooks on the outputs "
                    "(module_backward_pre events, no module_backward). Pass backward='outputs' or False to "
                    "choose explicitly.", UserWarning, stacklevel=2)
        if was_compiled(model):
            label = type(model).__name__
            if label not in self._compiled_roots:
                self._compiled_roots.append(label)
        for n in chosen:
            self.module(found[n], n or type(model).__name__, forward=forward, backward=backward)
        return chosen

    # ------------------------------------------------------------------ saved tensors
    @contextmanager
    def saved_tensors(self) -> Iterator[Tracer]:
        """Record pack (forward) and unpack (backward) of tensors saved for backward inside this block.

        A saved tensor is named after a tensor the tracer knows (same object), else ``saved<i>``.
        Saved-tensor hooks are thread-local: a forward run in another thread is not seen, and the
        block warns when a module ran in another thread meanwhile. Its version is checked at unpack, so a saved tensor modified in place raises PyTorch's
        "modified by an inplace operation" error, as it does without saved-tensor hooks.
        """
        self._open("saved_tensors()")
        counter = itertools.count()
        threads = OtherThreads()  # saved-tensor hooks are thread-local: notice a forward in another thread

        def pack(t: torch.Tensor) -> tuple[str, torch.Tensor, int | None, weakref.ref[torch.Tensor]]:
            label = self._name_of(t) or f"saved{next(counter)}"
            self._record("pack", label, describe(t))
            # detached, and the tensor itself only by a weak reference (for a name given to it later): ``t`` itself,
            # an output its op saves, would be a reference cycle through grad_fn that the garbage collector cannot
            # break (a graph let go of without backward would leak)
            return label, t.detach(), version(t), weakref.ref(t)

        def unpack(packed: tuple[str, torch.Tensor, int | None, weakref.ref[torch.Tensor]]) -> torch.Tensor:
            label, t, saved, original = packed
            alive = original()
            self._record("unpack", (self._name_of(alive) if alive is not None else None) or label, describe(t))
            return check_version(t, saved, "Tracer.saved_tensors()")

        watch = threads.global_hook()
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                yield self
        finally:
            watch.remove()
        threads.warn("Tracer.saved_tensors()", stacklevel=3)

    # ------------------------------------------------------------------ reading
    def _wanted(self, kinds: Iterable[Kind] | None) -> set[str] | None:
        self._check_used()
        if kinds is None:
            return None
        wanted: set[str] = {kinds} if isinstance(kinds, str) else set(kinds)
        unknown = sorted(wanted - set(KINDS))
        if unknown:
            raise ValueError(f"unknown event kind(s) {unknown}; kinds are {', '.join(KINDS)}")
        return wanted

    def sequence(self, kinds: Iterable[Kind] | None = None) -> list[tuple[str, str]]:
        """``(kind, name)`` of each event in order, optionally only the given kinds."""
        wanted = self._wanted(kinds)
        return [(e.kind, e.name) for e in self._events if wanted is None or e.kind in wanted]

    def table(self, kinds: Iterable[Kind] | None = None) -> str:
        """The events as a fixed-width text table (``print(tr)`` prints it too)."""
        wanted = self._wanted(kinds)
        rows = [(str(e.step), e.phase, e.kind, e.name, e.detail)
                for e in self._events if wanted is None or e.kind in wanted]
        return format_table(("step", "phase", "kind", "name", "detail"), rows, empty="no events recorded")

    def __str__(self) -> str:
        return self.table()

    def plot(self, *, ax: Any = None, title: str = "hook firing order", annotate: bool = True) -> Any:
        """Draw the events as a timeline (:func:`hooklab.plot.timeline`); return the matplotlib Axes."""
        return plot.timeline(self.events, kinds=KINDS, ax=ax, title=title, annotate=annotate)
