"""Intervene on named modules: edit their outputs, inputs or keyword inputs for one block; capture a module's inputs.

    with intervene(model, {"model.layers.1": lambda h, call: h + steer}) as iv:
        model.generate(ids, max_new_tokens=5)         # every call of layer 1 gets the vector added
    print(iv)                                         # per module: calls, edits, what was edited, shapes

    inputs = capture_inputs(model, "model.layers.0", ids)    # runs until layer 0 is called, then stops
    inputs.args[0].shape, sorted(inputs.kwargs)              # hidden states, attention_mask, position_ids...

How it compares (checked with transformer-lens 4.3.0 and nnsight 0.8.1). TransformerLens 4 wraps a
Hugging Face model in a ``TransformerBridge`` that rewrites it (eager attention, every decoder layer
replaced by a bridge component) and puts an identity ``HookPoint`` module at every activation; its
``hooks()`` context manager adds plain forward hooks to them and removes them in ``finally``. nnsight
0.8 registers no hook at all: wrapping a model puts a controller object into every module's instance
``forward``, and the code of a ``trace`` block runs in a greenlet in step with the forward pass,
reading and assigning real tensors (``.output``); 0.7 ran that code in a worker thread with a hook on
every module, earlier releases handed out proxies. ``intervene`` does what TransformerLens does, but
on the module tree a model already has (a Hugging Face model as it is): a plain forward
hook (or pre-hook) on each named module, so it sees what that module returns or receives, nothing
inside it (for one head's output, edit the input of the output projection,
``...self_attn.o_proj`` with ``on="input"``). It does not run code interleaved with the forward,
batch several prompts' interventions into one run, run remotely, or reach values inside a module's
forward. It works under ``generate()``, where one block sees the prompt on the first call and one
token per later call with a KV cache (``call.positions`` says which positions a call holds).
"""
from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import torch
from torch import nn

from ._checks import choice, copy_output, no_call_causes, refuse_compiled, select_output
from ._text import format_table
from ._torch_internals import checkpoint_recomputed, checkpoint_region, current_graph_task_id, was_compiled
from .lookup import get_module, get_modules
from .scope import Recorder

__all__ = ["Call", "ModuleInputs", "capture_inputs", "intervene"]

On = Literal["output", "input", "kwargs"]
# the keywords that say which positions a call holds: position_ids first, since it is per row ([batch, seq]: a
# left-padded row's tokens start at 0 after its padding), where cache_position is one index into the cache for
# every row ([seq]); a module given only cache_position (older transformers' layers) gets that
_POSITION_KEYS = ("position_ids", "cache_position")
_MAX_SHAPES = 6  # shapes kept per module (generate() without a cache sees one more each step)


@dataclass(frozen=True)
class Call:
    """What an edit function learns about the call it edits.

    ``index`` counts this module's calls in the block from 0 (under ``generate()``: 0 is the prompt).
    ``positions`` are the token positions of this call: the module's own ``position_ids`` keyword
    (per row) or else its ``cache_position`` when it got one, else the one the model itself was called with in
    this forward; ``None`` when neither was given (a plain ``model(ids)`` gives a module that
    takes no positions, such as an MLP, ``None``: its positions are then ``0 .. seq - 1``).
    """

    name: str
    index: int
    positions: torch.Tensor | None


@dataclass
class _Row:
    calls: int = 0
    edited: int = 0
    what: str = ""
    shapes: list[tuple[Any, ...]] = field(default_factory=list)
    more_shapes: int = 0

    def saw(self, shape: tuple[Any, ...]) -> None:
        if shape in self.shapes:
            return
        if len(self.shapes) < _MAX_SHAPES:
            self.shapes.append(shape)
        else:
            self.more_shapes += 1


def _positions(kwargs: Mapping[str, Any]) -> torch.Tensor | None:
    for key in _POSITION_KEYS:
        value = kwargs.get(key)
        if isinstance(value, torch.Tensor):
            return value
    return None


def _first_tensor(output: Any) -> int | str | None:
    """Where the default selection finds its tensor: the first tensor of a tuple or of a ModelOutput/dict."""
    if isinstance(output, torch.Tensor):
        return None
    if isinstance(output, Mapping):
        items: Any = output.items()
    else:
        items = enumerate(output) if isinstance(output, (tuple, list)) else ()
    for key, value in items:
        if isinstance(value, torch.Tensor):
            return key
    raise TypeError(f"returned {type(output).__name__} holding no tensor; choose what to edit with output=")


def _rebuild(output: Any, where: int | str, value: torch.Tensor) -> Any:
    """``output`` with the part at ``where`` replaced (a tuple is rebuilt, a dict/ModelOutput edited in place)."""
    if isinstance(output, tuple):
        items = list(output)
        items[int(where)] = value  # a tuple's part is always chosen by an index
        return type(output)(*items) if hasattr(output, "_fields") else type(output)(items)
    output[where] = value  # list, dict, transformers' ModelOutput (which also updates the attribute)
    return output


def _check_same(name: str, what: str, old: Any, new: Any) -> None:
    if not isinstance(new, torch.Tensor):
        raise TypeError(f"intervene: the edit of {name!r} ({what}) returned {type(new).__name__}; return a tensor "
                        "like the one it was given (or None to keep it)")
    if isinstance(old, torch.Tensor) and (new.shape != old.shape or new.dtype != old.dtype
                                          or new.device != old.device):
        raise ValueError(f"intervene: the edit of {name!r} ({what}) returned shape {tuple(new.shape)} "
                         f"{new.dtype} on {new.device}, but it replaces shape {tuple(old.shape)} {old.dtype} on "
                         f"{old.device}; return a tensor of the same shape, dtype and device (under generate() "
                         "with a KV cache, later calls hold one token: use call.positions)")


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else ()


@dataclass
class _Region:
    """The calls made inside one run of an activation-checkpointed region, replayed when backward recomputes it."""

    calls: dict[str, list[Call]] = field(default_factory=dict)  # per module, in call order
    replayed: dict[tuple[int | None, str], int] = field(default_factory=dict)  # (backward, module) -> calls replayed


class intervene(Recorder):  # noqa: N801 - used like a function: ``with intervene(model, edits) as iv``
    """Edit what named modules return (or receive) while the ``with`` block runs.

    Args:
        model: the model; hooks are added to the named submodules only inside the block.
        edits: ``{module name: fn}``; ``fn(value, call)`` returns the new value, or ``None`` to keep
            ``value`` (``call`` is a :class:`Call`: index and positions). Names are checked against
            ``named_modules()`` when the object is made (close matches are suggested).
        on: ``"output"`` (default): ``value`` is the module's output; when it is a tuple or a
            ``ModelOutput`` (a Hugging Face attention module returns ``(output, weights)``), ``fn``
            gets its first tensor and the container is rebuilt around the new one.
            ``"input"``: the first positional argument (a forward pre-hook); a module called with
            keywords only is refused with a message naming them. ``"kwargs"``: ``fn`` gets a copy of
            the keyword arguments as a dict and returns the dict to call the module with.
        output: with ``on="output"``, which part of a tuple/dict output to edit: an index or a key,
            as ``capture(output=)`` selects it (a function cannot be put back, so it is refused).

    A returned tensor must have the shape, dtype and device of the one it replaces (else a
    ``ValueError`` naming the module and both shapes); in ``"kwargs"`` mode the same holds for every
    tensor under a key that was there. What happened is recorded per module: ``iv.calls``,
    ``iv.edited`` (calls where ``fn`` returned a value), ``iv.table()``.

    >>> model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    >>> with intervene(model, {"0": lambda out, call: torch.zeros_like(out)}) as iv:
    ...     y = model(torch.ones(2, 3))
    >>> y.abs().sum().item(), iv.calls, iv.edited
    (0.0, {'0': 1}, {'0': 1})
    >>> print(iv)
    module  on      calls  edited  value   shapes
    0       output      1       1  tensor  (2, 3)

    Under activation checkpointing (``torch.utils.checkpoint`` with ``use_reentrant=False``, which
    :func:`~hooklab.checkpoint_modules` and Hugging Face's ``gradient_checkpointing_enable()`` use) backward
    runs the checkpointed modules' forward again: such a recomputation is not a new call. ``fn`` is called
    with the :class:`Call` of the call being recomputed (same ``index`` and ``positions``; the checkpoint also
    restores the random-number state), so the recomputed value is edited as the first one was, and ``calls``
    and ``edited`` count it once. Run backward inside the block (a backward after it recomputes without the
    edits: a warning says so). A reentrant checkpoint (``use_reentrant=True``) recomputes in a way that cannot
    be matched to its call, and is refused when it happens.

    A name that never ran inside the block gets a warning at its end, saying what may have caused it. Not
    per thread (module hooks never are), and a ``torch.compile``'d model is refused.
    """

    _model_refs = ("model", "modules")
    _sees_recomputation = True  # a checkpoint's recomputation replays the edit of the call it recomputes

    def __init__(self, model: nn.Module, edits: Mapping[str, Callable[[Any, Call], Any]], *, on: On = "output",
                 output: int | str | None = None) -> None:
        super().__init__()
        refuse_compiled(model, "intervene")
        choice(on, On, "on")
        if not isinstance(edits, Mapping) or not edits:
            raise TypeError("edits must be a non-empty dict {module name: fn(value, call)}, got "
                            f"{type(edits).__name__}" + (" (empty)" if isinstance(edits, Mapping) else ""))
        for name, fn in edits.items():
            if not callable(fn):
                raise TypeError(f"the edit for {name!r} must be a function fn(value, call), got {type(fn).__name__}")
        if output is not None and on != "output":
            raise ValueError(f"output= selects a part of a module's output, so it needs on='output' (got on={on!r})")
        if callable(output) or isinstance(output, bool) or not isinstance(output, (int, str, type(None))):
            raise TypeError(f"output= must be an index or a key (the edited part is put back there), got {output!r}")
        self.model, self.on, self.output = model, on, output  # the model and modules: let go of when the block ends
        self.edits = dict(edits)
        self.modules = get_modules(model, list(self.edits))
        self._rows = {name: _Row() for name in self.edits}
        self._model_positions: torch.Tensor | None = None
        self._compiled = was_compiled(model)
        # checkpointed regions run inside the block (the checkpoint's frame, held weakly) -> the calls made in them
        self._regions: weakref.WeakKeyDictionary[Any, _Region] = weakref.WeakKeyDictionary()

    # what was recorded -------------------------------------------------------------------------
    @property
    def calls(self) -> dict[str, int]:
        """How many times each named module ran inside the block (a checkpoint's recomputation is not a call)."""
        self._check_used()
        return {name: row.calls for name, row in self._rows.items()}

    @property
    def edited(self) -> dict[str, int]:
        """How many of those calls ``fn`` changed (returned a value other than ``None``)."""
        self._check_used()
        return {name: row.edited for name, row in self._rows.items()}

    def table(self) -> str:
        """Per module: calls, edited calls, which value was edited (``tuple[0]``...), the shapes seen."""
        self._check_used()
        rows = []
        for name, row in self._rows.items():
            shapes = ", ".join(str(s) for s in row.shapes) + (f", +{row.more_shapes} more" if row.more_shapes else "")
            rows.append((name, self.on, str(row.calls), str(row.edited), row.what or "-", shapes or "-"))
        return format_table(("module", "on", "calls", "edited", "value", "shapes"), rows, right=[2, 3])

    def __str__(self) -> str:
        return self.table()

    # hooks --------------------------------------------------------------------------------------
    def _call(self, name: str, kwargs: Mapping[str, Any]) -> tuple[Call, bool] | None:
        """The :class:`Call` of this module call and whether it is a new one (False: a checkpoint recomputes an
        earlier call, whose Call it gets); None when the call is to be left alone (the recomputation of a call
        made before the block, which was not edited either)."""
        region = checkpoint_region()
        if region is not None and region[1]:  # backward recomputes a checkpointed region
            log = self._regions.get(region[0])
            if log is None:
                return None
            key = (current_graph_task_id(), name)
            done = log.replayed.get(key, 0)
            log.replayed[key] = done + 1
            earlier = log.calls.get(name, [])
            return (earlier[done], False) if done < len(earlier) else None
        if current_graph_task_id() not in (-1, None):
            raise RuntimeError(
                f"intervene: {name!r} ran inside a backward pass, which a reentrant activation checkpoint "
                "(torch.utils.checkpoint with use_reentrant=True) does when it recomputes a region; intervene cannot "
                "tell which call that recomputes, so its edit could differ from the forward's and the gradients "
                "would be wrong. Use use_reentrant=False (the default of hooklab.checkpoint_modules and of Hugging "
                "Face's gradient_checkpointing_enable()), whose recomputation intervene follows.")
        row = self._rows[name]
        row.calls += 1
        positions = _positions(kwargs)
        call = Call(name, row.calls - 1, positions if positions is not None else self._model_positions)
        if region is not None:  # the first run of a checkpointed region: remember the call for its recomputation
            self._regions.setdefault(region[0], _Region()).calls.setdefault(name, []).append(call)
        return call, True

    def _edit(self, name: str, what: str, value: Any, call: Call, new_call: bool) -> Any:
        row = self._rows[name]
        if new_call:
            row.what = what
            row.saw(_shape(value))
        new = self.edits[name](value, call)
        if new is None:
            return None
        _check_same(name, f"{what}, call {call.index}", value, new)
        if new_call:
            row.edited += 1
        return new

    def _output_hook(self, name: str) -> Callable[..., Any]:
        def hook(module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
            found = self._call(name, kwargs)
            if found is None:
                return None
            try:
                where = self.output if self.output is not None else _first_tensor(output)
            except TypeError as exc:
                raise TypeError(f"intervene: {name!r} {exc}") from None
            if where is None:
                return self._edit(name, "tensor", output, *found)
            value = select_output(output, where, name)
            new = self._edit(name, f"{type(output).__name__}[{where!r}]", value, *found)
            return None if new is None else _rebuild(output, where, new)
        return hook

    def _input_hook(self, name: str) -> Callable[..., Any]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            found = self._call(name, kwargs)
            if found is None:
                return None
            if not args or not isinstance(args[0], torch.Tensor):
                got = f"keywords only ({', '.join(kwargs)})" if not args else f"{type(args[0]).__name__} first"
                raise TypeError(f"intervene(on='input'): {name!r} was called with {got}, so it has no positional "
                                "tensor input to edit; use on='kwargs' and edit the keyword (e.g. "
                                "kwargs['hidden_states'])")
            new = self._edit(name, "args[0]", args[0], *found)
            return None if new is None else ((new, *args[1:]), kwargs)
        return hook

    def _kwargs_hook(self, name: str) -> Callable[..., Any]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            found = self._call(name, kwargs)
            if found is None:
                return None
            call, new_call = found
            row = self._rows[name]
            if new_call:
                row.what = "kwargs"
                row.saw(tuple(sorted(kwargs)))
            new = self.edits[name](dict(kwargs), call)
            if new is None:
                return None
            if not isinstance(new, Mapping):
                raise TypeError(f"intervene(on='kwargs'): the edit of {name!r} returned {type(new).__name__}; "
                                "return the dict of keyword arguments (or None to keep them)")
            for key, old in kwargs.items():
                if isinstance(old, torch.Tensor) and key in new:
                    _check_same(name, f"kwargs[{key!r}], call {call.index}", old, new[key])
            if new_call:
                row.edited += 1
            return args, dict(new)
        return hook

    def _model_hook(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._model_positions = _positions(kwargs)  # None when this forward was given no positions

    def _register(self) -> None:
        self._on(self.model, self._model_hook, kind="forward_pre", with_kwargs=True)
        make = {"output": self._output_hook, "input": self._input_hook, "kwargs": self._kwargs_hook}[self.on]
        for name, module in self.modules.items():
            self._on(module, make(name), kind="forward" if self.on == "output" else "forward_pre", with_kwargs=True)

    def _unregister(self) -> None:
        self.scope.remove()
        if self._block_raised:
            return
        silent = [name for name, row in self._rows.items() if not row.calls]
        if silent:
            warnings.warn(f"intervene edited nothing of {', '.join(map(repr, silent))}: it never ran inside the block. "
                          f"{no_call_causes('the model' if self._compiled else None)}", RuntimeWarning, stacklevel=4)
        pending = sorted({name for frame, region in self._regions.items() if not checkpoint_recomputed(frame)
                          for name in region.calls})
        if pending:
            warnings.warn(f"intervene: calls of {', '.join(map(repr, pending))} inside an activation-checkpointed "
                          "region have not been recomputed yet: a backward after the block recomputes them without "
                          "the edits, so the gradients would not match the edited forward. Run backward inside the "
                          "`with` block.", RuntimeWarning, stacklevel=4)
        self._regions = weakref.WeakKeyDictionary()


class ModuleInputs(NamedTuple):
    """A module's complete inputs: its positional ``args`` and its keyword ``kwargs``."""

    args: tuple
    kwargs: dict


class _Stop(BaseException):
    """Raised by capture_inputs' pre-hook to end the forward once the inputs are held (a BaseException, as
    KeyboardInterrupt is, so that a forward which catches ``Exception`` does not swallow it)."""


def capture_inputs(model: nn.Module, name: str, *args: Any, detach: bool = True, **kwargs: Any) -> ModuleInputs:
    """Call ``model(*args, **kwargs)`` until module ``name`` is first called; return that call's inputs.

    The forward stops there (nothing after the module runs), the pattern quantizers use to calibrate
    one layer at a time. Tensors are detached (``detach=False`` keeps them attached); other objects,
    such as a KV cache, are the live objects the module was given. The hook is removed in
    ``finally``; a module that never runs raises a ``RuntimeError``. (The keyword ``detach`` is this
    function's own, not passed to the model.)

    >>> model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    >>> inputs = capture_inputs(model, "2", torch.ones(5, 3))
    >>> len(inputs.args), tuple(inputs.args[0].shape), inputs.kwargs
    (1, (5, 4), {})
    """
    refuse_compiled(model, "capture_inputs")
    module = get_module(model, name)
    held: list[ModuleInputs] = []

    def stop(module: nn.Module, call_args: tuple, call_kwargs: dict) -> None:
        held.append(ModuleInputs(copy_output(tuple(call_args), detach, False, False),
                                 copy_output(dict(call_kwargs), detach, False, False)))
        raise _Stop

    handle = module.register_forward_pre_hook(stop, with_kwargs=True)
    finished = False
    try:
        model(*args, **kwargs)
        finished = True
    except _Stop:
        pass
    finally:
        handle.remove()
    if held and finished:
        warnings.warn(f"capture_inputs: the forward of {type(model).__name__} caught the stop raised when {name!r} "
                      "was called (an `except BaseException:` or a bare `except:` in its code), so the rest of the "
                      "forward ran; the inputs returned are those of that first call.", RuntimeWarning, stacklevel=2)
    if not held:
        raise RuntimeError(f"capture_inputs: {name!r} never ran during {type(model).__name__}(...), so it has no "
                           "inputs to capture; name a module on the path of this forward (a container such as "
                           "nn.ModuleList is never called itself: name one of its children)")
    return held[0]
