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
ends (also when it raised), and one recorder records one block.
"""
from __future__ import annotations

import functools
import inspect
import weakref
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

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
        self._handles: list[Any] = []
        self._inside = False  # a `with` block of this scope is running
        self._made_outside = False  # it holds handles added outside a block (a function registered them)
        self._spent = False  # ... and they were removed: a later block would do nothing

    def add(self, handle: H) -> H:
        """Take ownership of ``handle`` (what a ``register_*hook`` call returned) and return it."""
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
        self._handles.append(handle)
        self._spent = False  # new hooks: the scope is live again
        if not self._inside:
            self._made_outside = True
        return handle

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
            handle = self._handles.pop()
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
        return f"HookScope{label}({len(self)} hooks)"


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
    """A hook function that says, when someone pickles the model it is on, why that fails and what to do.

    A hook made inside a tool is a local function, which ``pickle`` (and ``torch.save(model)``) cannot
    store: plain PyTorch says "Can't pickle local object 'capture._hook.<locals>.capture_output'".
    Copies share the function (as ``copy.deepcopy`` does for functions); its name is the function's.

    >>> import pickle
    >>> hook = LocalHook(lambda module, args, output: None, "capture")
    >>> pickle.dumps(hook)
    Traceback (most recent call last):
    TypeError: cannot pickle a model that carries capture's hooks (local functions, alive only in this process) while its block runs: save model.state_dict() (what torch.save is meant for), or save after the block, when the hooks are gone
    """

    def __init__(self, fn: Callable[..., Any], tool: str) -> None:
        functools.update_wrapper(self, fn)
        self._fn, self._tool = fn, tool

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(f"cannot pickle a model that carries {self._tool}'s hooks (local functions, alive only in this "
                        "process) while its block runs: save model.state_dict() (what torch.save is meant for), "
                        "or save after the block, when the hooks are gone")

    def __copy__(self) -> LocalHook:
        return self

    def __deepcopy__(self, memo: Any) -> LocalHook:
        return self


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


class Recorder:
    """Base of the recorders (``capture``, ``GradientMonitor``, ``ActivationStats``, ``Tracer``,
    ``SavedTensorLedger``): one object records one ``with`` block.

    ``__init__`` checks the arguments and registers nothing; entering the block registers the
    hooks (``_register``, rolled back if it raises); leaving it, or :meth:`remove`, removes them
    (``_unregister``). What was recorded stays readable afterwards. Entering a second time raises,
    and so does reading the results of a recorder whose block was never entered, since it could
    only answer "nothing".

    >>> class Count(Recorder):
    ...     def __init__(self, module):
    ...         super().__init__()
    ...         self.module, self.calls = module, 0
    ...     def _register(self):
    ...         self.scope.add(self.module.register_forward_hook(self._hook))
    ...     def _hook(self, module, args, output):
    ...         self.calls += 1
    >>> from torch import nn
    >>> import torch
    >>> layer = nn.Linear(2, 2)
    >>> with Count(layer) as count:
    ...     _ = layer(torch.ones(1, 2))
    >>> count.calls, len(layer._forward_hooks)
    (1, 0)
    >>> with count:
    ...     pass
    Traceback (most recent call last):
    RuntimeError: this Count has already recorded its block; make a new one for another block (what it recorded stays readable)
    """

    def __init__(self) -> None:
        self.scope = HookScope(type(self).__name__)
        self._state = "new"  # "new" -> "recording" -> "done"
        self._block_raised = False  # the with block ended with an exception (recorders then warn about nothing)

    def _register(self) -> None:
        """Register the hooks, adding each handle to ``self.scope``."""
        raise NotImplementedError

    def _unregister(self) -> None:
        """Undo :meth:`_register` (by default: remove every handle in ``self.scope``)."""
        self.scope.remove()

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
            self._unregister()

    def _check_used(self) -> None:
        """Raise when asked for results of a recorder whose block never ran."""
        if self._state == "new":
            name = type(self).__name__
            raise RuntimeError(f"this {name} has recorded nothing: it registers its hooks when its `with` block "
                               f"is entered (with {name}(...) as recorder: ...), then records that block")
