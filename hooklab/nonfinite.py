"""Find where NaN / inf first appears: the first module (forward) and the first autograd Node (backward).

    with find_nonfinite(model) as found:
        loss_fn(model(x), y).backward()
    print(found)          # forward: first module whose output holds NaN/inf, producer or propagator
                          # backward: first Node (e.g. DivBackward0) that made a non-finite gradient

Forward: a forward pre-hook and forward hooks on every module see its calls in call order (not the
order of ``named_modules()``); the first call whose output holds a non-finite value is recorded, with
which call of that module it was (a module called twice), and whether it is the **producer** (its
inputs were finite) or a **propagator** (an input was already non-finite). Inputs that were already
non-finite when the model was entered are recorded too. Backward: each module's forward hook walks the
new part of the autograd graph its output adds and registers a post-hook on each Node; the first Node
whose computed gradients hold a non-finite value is recorded with its name and the module it belongs to.
``raise_first=True`` raises :class:`NonFiniteError` at the first one instead.

Cost: checking a tensor is one reduction over it (``isfinite(t.sum())``; only when that sum is not
finite, an exact ``isfinite(t).all()`` tells an overflowing sum from a non-finite value), and turning the
answer into a Python bool waits for the device on a GPU. Once the first forward and the first backward
finding are recorded, the hooks stop checking. What is kept is bounded: the findings, a call counter
per module for the current step, and the hook handles of the Nodes of graphs that are still alive.
"""
from __future__ import annotations

import dataclasses
import threading
import warnings
from typing import Any, Literal, Protocol

import torch
from torch import nn

from ._checks import flag, module as check_module, refuse_compiled
from ._text import format_table
from ._torch_internals import handle_alive, tree_flatten
from .errors import NonFiniteError
from .scope import Recorder

__all__ = ["NonFiniteDetector", "NonFiniteError", "NonFiniteEvent", "find_nonfinite"]

Phase = Literal["input", "forward", "backward"]


@dataclasses.dataclass(frozen=True)
class NonFiniteEvent:
    """One finding: where a non-finite value was first seen.

    ``phase`` is ``"input"`` (an input of the model was already non-finite when it was entered),
    ``"forward"`` (a module's output) or ``"backward"`` (a Node's computed gradient). ``kind`` is
    ``"producer"`` (what went in was finite) or ``"propagator"`` (it was already non-finite), or
    ``"input"``. ``module`` is the module's name as ``named_modules()`` gives it (``""``: the model
    itself; ``None``: unknown), ``call`` which call of it in that step (1 = its first), ``step`` the
    model call (forward) it happened in, ``node`` the Node's name in backward (``"DivBackward0"``),
    ``where`` which tensor (``"output[1]"``, ``"grad_input[0]"``, ``"kwargs['x']"``).
    """

    phase: Phase
    kind: str
    module: str | None
    call: int | None
    step: int
    where: str
    node: str | None = None
    note: str = ""

    def describe(self) -> str:
        """The finding in one line: the step, the phase, the module (and Node) and the tensor, e.g.
        ``"step 0: forward, 1 call 1, output: producer"``."""
        who = "(model)" if self.module == "" else (self.module if self.module is not None else "(unknown module)")
        if self.phase == "input":
            return f"step {self.step}: the model's input {self.where} was already non-finite when the model was called"
        if self.phase == "forward":
            text = f"step {self.step}: forward, {who} call {self.call}, {self.where}: {self.kind}"
        else:
            text = f"backward of step {self.step}: {self.node} (module {who}), {self.where}: {self.kind}"
        return f"{text} ({self.note})" if self.note else text


def _finite(t: torch.Tensor) -> bool:
    """True when every value of ``t`` is finite: one reduction (an exact check only when the sum is not finite)."""
    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return True
    if t.is_sparse:
        t = t.coalesce().values()
    elif t.is_nested:
        t = torch.cat([c.flatten() for c in t.unbind()])
    with torch.no_grad():
        if bool(torch.isfinite(t.sum())):  # a NaN or inf anywhere makes the sum NaN or inf
            return True
        return bool(torch.isfinite(t).all())  # the sum may have overflowed: look at every value


def _leaves(tree: Any, prefix: str) -> list[tuple[str, torch.Tensor]]:
    """``(label, tensor)`` for every tensor in a nested output (tuples, lists, dicts, dataclasses)."""
    if isinstance(tree, torch.Tensor):
        return [(prefix, tree)]
    if isinstance(tree, dict):
        return [x for k, v in tree.items() for x in _leaves(v, f"{prefix}[{k!r}]")]
    if isinstance(tree, (tuple, list)):
        return [x for i, v in enumerate(tree) for x in _leaves(v, f"{prefix}[{i}]")]
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return [x for f in dataclasses.fields(tree) for x in _leaves(getattr(tree, f.name), f"{prefix}.{f.name}")]
    return [(prefix, t) for t in tree_flatten(tree) if isinstance(t, torch.Tensor)]


def _first_bad(pairs: list[tuple[str, torch.Tensor]]) -> str | None:
    return next((label for label, t in pairs if not _finite(t)), None)


def _kinds(pairs: list[tuple[str, torch.Tensor]]) -> set[str]:
    """Which non-finite values the tensors hold: a subset of ``{"nan", "inf"}`` (only asked after a finding)."""
    kinds = set()
    for _, t in pairs:
        if (t.is_floating_point() or t.is_complex()) and not _finite(t):
            with torch.no_grad():
                kinds |= {k for k, f in (("nan", torch.isnan), ("inf", torch.isinf)) if bool(f(t).any())}
    return kinds


def _classify(outputs: list[tuple[str, torch.Tensor]], inputs: list[tuple[str, torch.Tensor]]) -> tuple[str, str]:
    """``("producer" | "propagator", note)``: a propagator's inputs already held every kind of value its output holds.

    A NaN made from inputs that hold only -inf (an attention mask) is produced here, not propagated.
    """
    bad_in = _first_bad(inputs)
    if bad_in is None:
        return "producer", "its inputs were finite"
    out_kinds, in_kinds = _kinds(outputs), _kinds(inputs)
    if out_kinds <= in_kinds:
        return "propagator", f"its input {bad_in} was already non-finite"
    made = " and ".join(sorted(out_kinds - in_kinds))
    return "producer", f"it made {made} from inputs holding only {' and '.join(sorted(in_kinds))} (e.g. {bad_in})"


class _Known(Protocol):  # id(Node) -> the handle of a hook on it: a dict, or a HookScope keyed by id(Node)
    def get(self, key: int) -> Any: ...


def new_nodes(tensors: list[torch.Tensor], known: _Known, stop: dict[int, Any]) -> list[Any]:
    """The autograd Nodes behind ``tensors`` that are neither in ``known`` (id -> live handle) nor past ``stop``.

    A depth-first walk of ``grad_fn.next_functions`` that ends at Nodes already hooked, at the
    model's inputs' Nodes (``stop``) and at leaves (``AccumulateGrad``: no gradient is computed there).
    """
    found: list[torch.autograd.graph.Node] = []
    todo: list[torch.autograd.graph.Node | None] = [t.grad_fn for t in tensors if t.grad_fn is not None]
    seen: set[int] = set()
    while todo:
        node = todo.pop()
        key = id(node)
        if node is None or key in seen or key in stop or type(node).__name__ == "AccumulateGrad":
            continue
        seen.add(key)
        handle = known.get(key)
        if handle is not None and handle_alive(handle):
            continue
        found.append(node)
        todo.extend(n for n, _ in node.next_functions)
    return found


class _Events(list):
    """A list of findings; calling it gives the list itself (``events()``, the spelling before results were
    properties, keeps working)."""

    def __call__(self) -> _Events:
        return self


class NonFiniteDetector(Recorder):
    """What :func:`find_nonfinite` returns: a recorder of the first non-finite values (see the module doc).

    ``forward``, ``backward`` and ``bad_input`` are the first :class:`NonFiniteEvent` of each kind
    (``None`` when none was seen), ``steps`` counts the model's calls, ``found`` is True when anything
    was found; ``table()`` (and ``print``) reports them.
    """

    _tool = "find_nonfinite"
    _model_refs = ("model", "_modules")

    def __init__(self, model: nn.Module, *, raise_first: bool = False, backward: bool = True) -> None:
        super().__init__()
        refuse_compiled(model, "find_nonfinite")
        if isinstance(model, nn.parallel.DistributedDataParallel):
            raise TypeError("find_nonfinite got a DistributedDataParallel wrapper. It checks the forward and the "
                            "autograd graph of this process only; a gradient averaged across ranks can be non-finite "
                            "because of another rank. Pass model.module (the hooks then see this rank's graph) and "
                            "run the detector on every rank.")
        check_module(model, "find_nonfinite")
        if any(type(p).__name__ == "DTensor" for p in model.parameters()):
            raise TypeError("find_nonfinite got a model with sharded (DTensor) parameters (FSDP2 / tensor "
                            "parallel): each rank sees only its shard, so a finding would be partial. Run it on "
                            "the unsharded model (one process).")
        flag(raise_first, "raise_first")
        flag(backward, "backward")
        self.model, self.raise_first, self.check_backward = model, raise_first, backward
        self._names = {id(m): n for n, m in model.named_modules()}
        self._modules = {n: m for n, m in model.named_modules()}
        self._forward: NonFiniteEvent | None = None    # the results, read through the properties below
        self._backward: NonFiniteEvent | None = None
        self._bad_input: NonFiniteEvent | None = None
        self._steps = 0
        self._stack: list[str] = []          # modules running now (innermost last)
        self._calls: dict[str, int] = {}     # calls per module in the current step
        self._stop: dict[int, Any] = {}      # the Nodes behind the current step's inputs
        self._last_node_hook: Any = None     # the handle of the newest Node hook (alive while its graph is)
        self._node_hook_ran = False          # ... and whether a Node hook ran since it was added
        self._thread = threading.get_ident()
        self._other_thread = False

    # -- hooks ------------------------------------------------------------------------------------
    def _register(self) -> None:
        # per-module hooks, in call order; not global ones: on torch 2.15 removing a global forward hook
        # registered with_kwargs=True leaves its flag behind, and every later torch.compile call then warns
        self._thread = threading.get_ident()
        for module in self._modules.values():
            self._on(module, self._pre, kind="forward_pre")
            self._on(module, self._post, with_kwargs=True)
            self._on(module, self._pop, always_call=True)  # also when forward raises
        self._on(self.model, self._entry_kwargs, kind="forward_pre", with_kwargs=True)

    def _unregister(self) -> None:
        unchecked = (self._last_node_hook is not None and handle_alive(self._last_node_hook)
                     and not self._node_hook_ran and not self.found)
        try:
            self.scope.remove()
        finally:
            self._stop.clear()
            self._stack.clear()
            self._last_node_hook = None
        if unchecked and not self._block_raised:
            warnings.warn("find_nonfinite found nothing, but the backward of the last forward in the block did not run "
                          "inside it, and its graph is still alive: a backward after the block is not checked (the Node hooks are "
                          "removed when the block ends). Run backward inside the `with` block; to check the forward "
                          "only, pass backward=False (or run it under torch.no_grad()).", RuntimeWarning,
                          stacklevel=4)
        if self._other_thread and not self._block_raised:
            warnings.warn("find_nonfinite: the model was called from another thread inside the block; those calls "
                          "were not checked (module hooks are not per thread). Run the detector in the thread that "
                          "calls the model.", RuntimeWarning, stacklevel=4)

    def _mine(self, module: nn.Module) -> str | None:
        name = self._names.get(id(module))
        if name is not None and threading.get_ident() != self._thread:
            self._other_thread = True
            return None
        return name

    def _record(self, event: NonFiniteEvent) -> None:
        setattr(self, {"input": "_bad_input", "forward": "_forward", "backward": "_backward"}[event.phase], event)
        if self.raise_first:
            raise NonFiniteError(event)

    def _pre(self, module: nn.Module, args: tuple) -> None:
        name = self._mine(module)
        if name is None:
            return
        if not self._stack:  # the model (or a part of it called on its own) is entered: a new step
            self._steps += 1
            self._calls.clear()
            self._stack.clear()
            self._stop = {id(t.grad_fn): t.grad_fn for _, t in _leaves(args, "args") if t.grad_fn is not None}
            self.scope.prune()  # forget the hooks on Nodes of graphs already freed
            if module is not self.model:  # the model's own pre-hook checks its args and kwargs
                self._check_entry(_leaves(args, "args"))
        self._stack.append(name)
        self._calls[name] = self._calls.get(name, 0) + 1

    def _pop(self, module: nn.Module, args: tuple, output: Any) -> None:
        if self._stack and self._names.get(id(module)) == self._stack[-1] and threading.get_ident() == self._thread:
            self._stack.pop()

    def _entry_kwargs(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if self._mine(module) is not None and self._stack == [""]:
            self._check_entry(_leaves(args, "args") + _leaves(kwargs, "kwargs"))
            self._stop.update({id(t.grad_fn): t.grad_fn for _, t in _leaves(kwargs, "kwargs")
                               if t.grad_fn is not None})

    def _check_entry(self, inputs: list[tuple[str, torch.Tensor]]) -> None:
        if self._bad_input is None and self._forward is None:
            where = _first_bad(inputs)
            if where is not None:
                self._record(NonFiniteEvent("input", "input", None, None, self._steps, where))

    def _post(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        name = self._mine(module)
        if name is None:
            return
        outputs = _leaves(output, "output")
        if self._forward is None:
            where = _first_bad(outputs)
            if where is not None:
                self._record(self._forward_event(module, name, args, kwargs, outputs, where))
        if self.check_backward and self._backward is None and torch.is_grad_enabled():
            for node in new_nodes([t for _, t in outputs], self.scope, self._stop):
                handle = node.register_hook(self._node_hook(node.name(), name, self._steps))
                self._last_node_hook = self.scope.add(handle, key=id(node))
                self._node_hook_ran = False

    def _forward_event(self, module: nn.Module, name: str, args: tuple, kwargs: dict,
                       outputs: list[tuple[str, torch.Tensor]], where: str) -> NonFiniteEvent:
        kind, note = _classify(outputs, _leaves(args, "args") + _leaves(kwargs, "kwargs"))
        if kind == "producer":
            bad_state = _first_bad([(n, t) for n, t in [*module.named_parameters(), *module.named_buffers()]])
            if bad_state:
                note = f"its parameter or buffer {bad_state!r} is non-finite"
        elif self._bad_input is not None:
            note += ": the model's input already was"
        elif len(self._stack) > 1:  # the value was made outside any submodule call, in the caller's own code
            parent = self._stack[-2]
            note += f", made by code between submodule calls in the forward of {parent or '(model)'}"
        return NonFiniteEvent("forward", kind, name, self._calls.get(name, 1), self._steps, where, None, note)

    def _node_hook(self, node_name: str, module: str, step: int):
        def check_gradient(grad_inputs: tuple, grad_outputs: tuple) -> None:
            self._node_hook_ran = True
            if self._backward is not None:
                return
            ins = [(f"grad_input[{i}]", g) for i, g in enumerate(grad_inputs) if isinstance(g, torch.Tensor)]
            where = _first_bad(ins)
            if where is None:
                return
            outs = [(f"grad_output[{i}]", g) for i, g in enumerate(grad_outputs) if isinstance(g, torch.Tensor)]
            if _first_bad(outs) is None:
                kind, note = "producer", "the gradient it received was finite"
                if self._forward is not None or self._bad_input is not None:
                    note += "; the forward already held non-finite values, which its backward may use"
            else:
                kind, note = "propagator", ("the gradient it received was already non-finite: it came from outside "
                                            "the model's graph (the loss, or code after the model's output)")
            self._record(NonFiniteEvent("backward", kind, module, None, step, where, node_name, note))
        return check_gradient

    # -- results ----------------------------------------------------------------------------------
    @property
    def forward(self) -> NonFiniteEvent | None:
        """The first module call whose output held a non-finite value (``None``: none seen)."""
        self._check_used()
        return self._forward

    @property
    def backward(self) -> NonFiniteEvent | None:
        """The first backward Node that computed a non-finite gradient (``None``: none seen)."""
        self._check_used()
        return self._backward

    @property
    def bad_input(self) -> NonFiniteEvent | None:
        """A model input that was already non-finite when the model was called (``None``: none seen)."""
        self._check_used()
        return self._bad_input

    @property
    def steps(self) -> int:
        """How many times the model (or a part of it called on its own) was entered inside the block."""
        self._check_used()
        return self._steps

    @property
    def found(self) -> bool:
        """True when any non-finite value was seen."""
        self._check_used()
        return any(e is not None for e in (self._bad_input, self._forward, self._backward))

    @property
    def events(self) -> _Events:
        """The findings in the order they can happen: model input, forward, backward.

        (``events()``, the spelling before results became properties, gives the same list.)
        """
        self._check_used()
        return _Events(e for e in (self._bad_input, self._forward, self._backward) if e is not None)

    def table(self) -> str:
        """One row per finding (or ``no non-finite value seen in N steps``)."""
        self._check_used()
        rows = [(e.phase, e.kind, "-" if e.module is None else (e.module or "(model)"),
                 "-" if e.call is None else str(e.call), str(e.step), e.node or "-", e.where, e.note)
                for e in self.events]
        return format_table(("phase", "kind", "module", "call", "step", "node", "where", "note"), rows,
                            empty=f"no non-finite value seen in {self._steps} step(s)")

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        found = [e.phase for e in (self._bad_input, self._forward, self._backward) if e is not None]
        return f"NonFiniteDetector(steps={self._steps}, found={found}, hooks={len(self.scope)})"


def find_nonfinite(model: nn.Module, *, raise_first: bool = False, backward: bool = True) -> NonFiniteDetector:
    """A ``with`` block that records the first module and the first backward Node whose output holds NaN/inf.

    Args:
        model: the model; its calls inside the block are checked (forward and, if ``backward``, backward).
        raise_first: raise :class:`NonFiniteError` at the first non-finite value instead of recording it.
        backward: also hook the autograd Nodes each module's output adds, to find the first bad gradient.

    >>> class Scale(nn.Module):
    ...     def forward(self, x):
    ...         return x / x.sum()            # 0 / 0 = NaN when the input sums to 0
    >>> model = nn.Sequential(nn.ReLU(), Scale(), nn.Linear(2, 1))
    >>> with find_nonfinite(model) as found:
    ...     _ = model(torch.zeros(1, 2))
    >>> print(found.forward.module, found.forward.kind, found.forward.call)
    1 producer 1
    >>> x = torch.tensor([[1.0, -1.0]], requires_grad=True)
    >>> with find_nonfinite(nn.Identity()) as found:
    ...     y = nn.Identity()(x)          # not the model given: not checked
    >>> found.steps
    0

    A ``torch.compile``'d model is refused (hooks added after compiling do not run in compiled code),
    and so are a ``DistributedDataParallel`` wrapper and sharded (DTensor) parameters: the detector sees
    one process's graph. Calls made from another thread are not checked (a warning says so).
    """
    return NonFiniteDetector(model, raise_first=raise_first, backward=backward)
