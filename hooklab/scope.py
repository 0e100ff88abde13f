"""Own hook handles and remove them all together; the one lifecycle of hooklab's recorders.

Every ``register_*hook`` call in PyTorch returns a handle with ``.remove()``.
A :class:`HookScope` keeps those handles and removes them on exit, also when the
body raises::

    with HookScope() as scope:
        scope.add(model.fc.register_forward_hook(print_shape))
        model(x)
    # the hook is gone here, whatever happened inside

:func:`named_scope` gives a scope that survives re-running a notebook cell:
asking for the same name again first removes what the previous run registered.

:class:`Recorder` is the lifecycle every hooklab recorder shares: arguments are checked when it
is made, hooks are registered when its ``with`` block is entered and removed when the block
ends (also when it raised), and one recorder records one block. It also keeps, by construction,
the rules every tool that hooks a model must keep (:meth:`Recorder._on`): a ``copy.deepcopy`` of the
model made inside the block carries none of the tool's work, pickling the model inside the block says
what to do instead, every handle is owned by the recorder's scope, and the model is let go of when the
block ends.
"""
from __future__ import annotations

import functools
import inspect
import itertools
import weakref
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar

from ._torch_internals import current_graph_task_id, handle_alive

if TYPE_CHECKING:  # typing.Self is Python >= 3.11; mypy knows typing_extensions without installing it
    from typing_extensions import Self

__all__ = ["HookScope", "LocalHook", "Recorder", "named_scope", "same_module"]


class Removable(Protocol):
    def remove(self) -> None: ...


H = TypeVar("H", bound=Removable)


_HANDLE_TYPES: set[type] = set()  # types whose .remove() was seen to take no arguments (checked once per type)


def _removable_without_arguments(handle: Any) -> bool:
    if type(handle) in _HANDLE_TYPES and "remove" not in getattr(handle, "__dict__", {}):
        return True
    remove = getattr(handle, "remove", None)
    if isinstance(handle, (list, tuple, set, dict)) or not callable(remove):
        return False
    try:
        inspect.signature(remove).bind()
    except TypeError:  # list.remove(value), set.remove(elem): not a handle
        return False
    except ValueError:  # no signature available (some builtins): trust the attribute
        return True
    if "remove" not in getattr(handle, "__dict__", {}):
        _HANDLE_TYPES.add(type(handle))
    return True


class HookScope:
    """A set of hook handles that are removed together (on ``remove()`` or on exit).

    >>> from torch import nn
    >>> layer = nn.Linear(2, 2)
    >>> with HookScope() as scope:
    ...     _ = scope.add(layer.register_forward_hook(lambda m, args, out: None))
    ...     len(scope), len(layer._forward_hooks)
    (1, 1)
    >>> len(layer._forward_hooks)          # removed on exit, also when the block raises
    0

    A scope handed back with its hooks already registered (what ``clip_grad_*_hooks`` and
    ``offload_module`` return) is spent once they are removed; entering it again raises:

    >>> scope = HookScope("clip")
    >>> _ = scope.add(layer.register_forward_hook(lambda m, args, out: None))
    >>> with scope:
    ...     pass
    >>> with scope:
    ...     pass
    Traceback (most recent call last):
    RuntimeError: this HookScope 'clip' has already been removed (its block ended, or remove() was called), so a block with it would do nothing; make a new one for another block, e.g. call the function that returned it again
    """

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._handles: dict[Hashable, Any] = {}  # key -> handle, in the order they were added
        self._numbers = itertools.count()  # the keys of handles added without one
        self._prune_at = 64  # prune() walks the handles once there are this many
        self._inside = False  # a `with` block of this scope is running
        self._made_outside = False  # it holds handles added outside a block (a function registered them)
        self._spent = False  # ... and they were removed: a later block would do nothing

    def add(self, handle: H, *, key: Hashable | None = None) -> H:
        """Take ownership of ``handle`` (what a ``register_*hook`` call returned) and return it.

        With a ``key``, the handle replaces the one added earlier under that key, which is removed:
        a hook on "the newest output of layer 3" stays one hook however many forward passes run.

        >>> import torch
        >>> scope = HookScope()
        >>> for step in range(3):
        ...     out = torch.ones(2, requires_grad=True) * 2
        ...     _ = scope.add(out.register_hook(lambda grad: None), key="newest output")
        >>> len(scope), len(out._backward_hooks)
        (1, 1)
        """
        if not _removable_without_arguments(handle):
            what = type(handle).__name__
            if callable(handle):
                hint = " You passed a function: register it first, e.g. scope.add(module.register_forward_hook(fn))."
            elif isinstance(handle, (list, tuple, set, dict)):
                hint = " You passed a collection: add each handle on its own (for h in handles: scope.add(h))."
            else:
                hint = ""
            raise TypeError(
                f"HookScope.add expects the handle returned by a register_*hook call "
                f"(an object whose .remove() takes no arguments), got {what}.{hint}"
            )
        if key is None:
            key = (HookScope, next(self._numbers))  # a key no caller can pass
        else:
            previous = self._handles.pop(key, None)
            if previous is not None:
                previous.remove()
        self._handles[key] = handle
        self._spent = False  # new hooks: the scope is live again
        if not self._inside:
            self._made_outside = True
        return handle

    def get(self, key: Hashable) -> Any:
        """The handle added under ``key`` (``None`` when there is none)."""
        return self._handles.get(key)

    def prune(self) -> int:
        """Forget the handles whose hooks went away with their tensor or autograd Node (a freed graph); return
        how many handles are left.

        A recorder that hooks each step's tensors or Nodes calls it once per step: it walks the handles only
        once their number has doubled since the last walk, so the scope holds at most about twice the hooks
        still alive, whatever the number of steps.
        """
        if len(self._handles) >= self._prune_at:
            for key in [k for k, h in self._handles.items() if not handle_alive(h)]:
                del self._handles[key]
            self._prune_at = max(64, 2 * len(self._handles))
        return len(self._handles)

    def remove(self) -> int:
        """Remove every hook this scope owns; return how many there were.

        A handle whose ``remove()`` raises does not stop the others from being removed;
        the first such error is raised once all of them have been tried. A scope whose hooks
        were registered before its block (what ``clip_grad_*_hooks`` and ``offload_module``
        return) is spent once they are removed: entering it again raises instead of running a
        block in which nothing happens.
        """
        if self._handles and self._made_outside:
            self._spent = True
        count, first_error = 0, None
        while self._handles:
            _key, handle = self._handles.popitem()  # the newest first
            count += 1
            try:
                handle.remove()
            except Exception as error:  # keep removing the rest, report afterwards
                first_error = first_error or error
        if first_error is not None:
            raise first_error
        return count

    def __len__(self) -> int:
        return len(self._handles)

    def __enter__(self) -> Self:
        if self._spent and not self._handles:
            label = f" {self.name!r}" if self.name else ""
            raise RuntimeError(f"this HookScope{label} has already been removed (its block ended, or remove() was "
                               "called), so a block with it would do nothing; make a new one for another block, "
                               "e.g. call the function that returned it again")
        self._inside = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._inside = False
        self.remove()

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"{type(self).__name__}{label}({len(self)} hooks)"


def same_module(module: Any) -> Callable[[Any], bool]:
    """A test for a module hook: is the module it was called with the one it was registered on?

    ``copy.deepcopy(model)`` copies a module's hook dicts, closures included, so a copy made inside
    a block would run the tool's hooks for ever (into a store whose block has ended). A hook that
    starts with ``if not registered(mod): return`` ignores such copies. ``nn.DataParallel``'s
    replicas share the original's hook dicts and still count as the module. The module is held
    weakly: a copy's hook does not keep the original alive.

    >>> import copy
    >>> from torch import nn
    >>> layer = nn.Linear(2, 2)
    >>> registered = same_module(layer)
    >>> registered(layer), registered(copy.deepcopy(layer))
    (True, False)
    """
    ref = weakref.ref(module)

    def registered(mod: Any) -> bool:
        original = ref()
        if mod is original:
            return True
        hooks = getattr(original, "_forward_hooks", None)  # a DataParallel replica shares this dict
        return hooks is not None and getattr(mod, "_forward_hooks", None) is hooks

    return registered


class LocalHook:
    """A tool's hook function, kept to the module it was registered on.

    * Pickling: a hook made inside a tool is a local function, which ``pickle`` (and ``torch.save(model)``)
      cannot store; plain PyTorch says "Can't pickle local object 'capture._hook.<locals>.capture_output'".
      A ``LocalHook`` says why and what to do instead.
    * Copies: ``copy.deepcopy(model)`` copies the module's hook dicts; the copy of a ``LocalHook`` is an
      :class:`InertHook` that does nothing and holds nothing, so a copy made inside a tool's block (an EMA or
      teacher model) is neither recorded nor edited by the tool, during the block or after it, and can be pickled.
    * ``module``: when given, the hook does nothing when called with another module (see :func:`same_module`).

    Its name (what :func:`~hooklab.hook_inventory` shows) is the function's.

    >>> import copy, pickle
    >>> hook = LocalHook(lambda module, args, output: "edited", "capture")
    >>> pickle.dumps(hook)
    Traceback (most recent call last):
    TypeError: cannot pickle a model that carries capture's hooks (local functions, alive only in this process) while its block runs: save model.state_dict() (what torch.save is meant for), or save after the block, when the hooks are gone
    >>> hook(None, (), None), copy.deepcopy(hook)(None, (), None)
    ('edited', None)
    """

    def __init__(self, fn: Callable[..., Any], tool: str, module: Any = None) -> None:
        functools.update_wrapper(self, fn)
        self._fn, self._tool = fn, tool
        self._registered = None if module is None else same_module(module)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._registered is not None and not self._registered(args[0]):
            return None
        return self._fn(*args, **kwargs)

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(f"cannot pickle a model that carries {self._tool}'s hooks (local functions, alive only in this "
                        "process) while its block runs: save model.state_dict() (what torch.save is meant for), "
                        "or save after the block, when the hooks are gone")

    def __copy__(self) -> LocalHook:
        return self

    def __deepcopy__(self, memo: Any) -> InertHook:
        return InertHook(getattr(self, "__qualname__", self._tool))


class InertHook:
    """What a copy of a model carries in place of a tool's hook (see :class:`LocalHook`): it returns ``None`` at
    once, holds no reference to the tool or the model, and pickles by name."""

    def __init__(self, name: str) -> None:
        self.__qualname__ = f"inert copy of {name}"  # the name hook_inventory shows

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __reduce__(self) -> tuple[Any, ...]:
        return InertHook, (self.__qualname__.removeprefix("inert copy of "),)


_NAMED: dict[str, HookScope] = {}


def named_scope(name: str) -> HookScope:
    """Return the scope called ``name``, after removing the hooks it still holds.

    Use it in a notebook cell that registers hooks: running the cell again
    replaces its hooks instead of stacking a second copy.

    >>> from torch import nn
    >>> layer = nn.Linear(2, 2)
    >>> for run in range(2):                # the same cell, run twice
    ...     _ = named_scope("cell-3").add(layer.register_forward_hook(lambda m, args, out: None))
    >>> len(layer._forward_hooks)          # one hook, not two
    1
    >>> named_scope("cell-3").remove()
    0
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"named_scope needs a non-empty string name, got {name!r}")
    scope = _NAMED.setdefault(name, HookScope(name))
    scope.remove()
    scope._spent = scope._made_outside = False  # a named scope is meant to be filled again
    return scope


HookKind = Literal["forward", "forward_pre", "backward", "backward_pre", "load_state_dict_post"]
_REGISTER: dict[str, str] = {
    "forward": "register_forward_hook",
    "forward_pre": "register_forward_pre_hook",
    "backward": "register_full_backward_hook",
    "backward_pre": "register_full_backward_pre_hook",
    "load_state_dict_post": "register_load_state_dict_post_hook",
}


def recomputing() -> bool:
    """Whether module code runs now for a backward pass: an activation checkpoint recomputing its region
    (``use_reentrant=False`` recomputes while backward unpacks a tensor, ``use_reentrant=True`` inside its own
    backward), not a forward of the step. Read from the autograd engine (a backward pass is running).

    >>> import torch
    >>> from torch.utils.checkpoint import checkpoint
    >>> seen = []
    >>> def f(x):
    ...     seen.append(recomputing())
    ...     return x.sin()
    >>> checkpoint(f, torch.ones(2, requires_grad=True), use_reentrant=False).sum().backward()
    >>> seen                          # the forward, then the recomputation during backward
    [False, True]
    """
    task = current_graph_task_id()
    return task is not None and task != -1


def _not_when_recomputing(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def forward_hook(*args: Any, **kwargs: Any) -> Any:
        if recomputing():
            return None
        return fn(*args, **kwargs)
    return forward_hook


class Recorder:
    """Base of the recorders (``capture``, ``intervene``, ``GradientMonitor``, ``ActivationStats``, ``Tracer``,
    ``SavedTensorLedger``, ``NonFiniteDetector`` from ``find_nonfinite``): one object records one ``with`` block.

    ``__init__`` checks the arguments and registers nothing; entering the block registers the
    hooks (``_register``, rolled back if it raises); leaving it, or :meth:`remove`, removes them
    (``_unregister``) and lets go of the model (``_release``: the attributes named in
    ``_model_refs``). What was recorded stays readable afterwards. Entering a second time raises,
    and so does reading the results of a recorder whose block was never entered, since it could
    only answer "nothing".

    A recorder registers its module hooks through :meth:`_on`, which keeps the rules every tool
    keeps: the hook ignores a ``copy.deepcopy`` of the module (inside the block and after it),
    pickling the model inside the block says what to do instead, and the handle belongs to
    ``self.scope``, and a forward (pre-)hook is not called for a module that runs again for backward (an
    activation checkpoint recomputing its region, reentrant or not: see :func:`recomputing`), so a call is
    recorded once, as without the checkpoint; a tool that must see the recomputation (``intervene`` replays its
    edits, ``Tracer`` shows it) sets ``_sees_recomputation``. Other handles (tensor and Node hooks) go to
    ``self.scope`` too, under a key
    when a newer one replaces an older one (:meth:`HookScope.add`), and :meth:`HookScope.prune`
    forgets those of freed graphs.

    >>> class Count(Recorder):
    ...     _model_refs = ("module",)
    ...     def __init__(self, module):
    ...         super().__init__()
    ...         self.module, self.calls = module, 0
    ...     def _register(self):
    ...         self._on(self.module, self._hook)
    ...     def _hook(self, module, args, output):
    ...         self.calls += 1
    >>> import copy
    >>> from torch import nn
    >>> import torch
    >>> layer = nn.Linear(2, 2)
    >>> with Count(layer) as count:
    ...     _ = layer(torch.ones(1, 2))
    ...     twin = copy.deepcopy(layer)
    ...     _ = twin(torch.ones(1, 2))      # a copy's call: not counted
    >>> count.calls, len(layer._forward_hooks), count.module
    (1, 0, None)
    >>> with count:
    ...     pass
    Traceback (most recent call last):
    RuntimeError: this Count has already recorded its block; make a new one for another block (what it recorded stays readable)
    """

    _tool: ClassVar[str] = ""  # the name users call it by, for messages (default: the class name)
    _model_refs: ClassVar[tuple[str, ...]] = ()  # attributes that hold the model or its parts: dropped at block end
    _sees_recomputation: ClassVar[bool] = False  # forward hooks also run when a checkpoint recomputes a module

    def __init__(self) -> None:
        self.scope = HookScope(type(self).__name__)
        self._state = "new"  # "new" -> "recording" -> "done"
        self._block_raised = False  # the with block ended with an exception (recorders then warn about nothing)

    @property
    def _tool_name(self) -> str:
        return self._tool or type(self).__name__

    def _on(self, module: Any, fn: Callable[..., Any], *, kind: HookKind = "forward", **flags: Any) -> Any:
        """Register ``fn`` as a ``kind`` hook of ``module`` for this block and return the handle.

        ``flags`` go to the ``register_*`` call (``with_kwargs``, ``always_call``, ``prepend``). The hook
        does nothing when called with a copy of ``module`` (``copy.deepcopy`` copies hook dicts), a copy
        carries an inert hook instead of it, pickling the model while it is registered raises a message
        naming this tool, and the handle is owned by ``self.scope`` (removed when the block ends).
        """
        register = getattr(module, _REGISTER[kind])
        if kind in ("forward", "forward_pre") and not self._sees_recomputation:
            fn = _not_when_recomputing(fn)
        return self.scope.add(register(LocalHook(fn, self._tool_name, module), **flags))

    def _register(self) -> None:
        """Register the hooks, adding each handle to ``self.scope``."""
        raise NotImplementedError

    def _unregister(self) -> None:
        """Undo :meth:`_register` (by default: remove every handle in ``self.scope``)."""
        self.scope.remove()

    def _release(self) -> None:
        """Let go of the model: each attribute named in ``_model_refs`` becomes empty (``None``, or an empty dict or
        list), so a recorder kept after its block (to read its results) does not keep the model alive."""
        for name in self._model_refs:
            value = getattr(self, name, None)
            setattr(self, name, type(value)() if isinstance(value, (dict, list)) else None)

    @property
    def recording(self) -> bool:
        """True inside the ``with`` block (the hooks are registered)."""
        return self._state == "recording"

    def __enter__(self) -> Self:
        if self._state != "new":
            raise RuntimeError(f"this {type(self).__name__} has already recorded its block; make a new one for "
                               "another block (what it recorded stays readable)")
        self._state = "recording"
        try:
            self._register()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        self._block_raised = exc_type is not None
        self.remove()

    def remove(self) -> None:
        """Stop recording now, as leaving the ``with`` block does; calling it again does nothing."""
        if self._state == "recording":
            self._state = "done"
            try:
                self._unregister()
            finally:
                self._release()

    def _check_used(self) -> None:
        """Raise when asked for results of a recorder whose block never ran."""
        if self._state == "new":
            name = type(self).__name__
            raise RuntimeError(f"this {name} has recorded nothing: it registers its hooks when its `with` block "
                               f"is entered (with {name}(...) as recorder: ...), then records that block")
