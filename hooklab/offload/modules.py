"""Two ways to run a module under an offloading context: hooks on it (:func:`offload_module`, the model and its
state_dict unchanged) or a wrapper module (:class:`OffloadWrapper`, as in the tutorial)."""
from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable
from typing import Any

from torch import nn
from torch.autograd.graph import saved_tensors_hooks

from ..scope import HookScope, LocalHook, same_module
from ._base import OffloadStats

__all__ = ["HooksFactory", "OffloadScope", "OffloadWrapper", "offload_module"]


HooksFactory = Callable[[], contextlib.AbstractContextManager[Any]]


def _make_context(make_hooks: HooksFactory, tool: str) -> Any:
    """Call ``make_hooks()`` and check that it gave a context manager (a clear error instead of a raw one)."""
    hooks = make_hooks()
    if not (hasattr(hooks, "__enter__") and hasattr(hooks, "__exit__")):
        raise TypeError(f"{tool}: make_hooks() returned {type(hooks).__name__} ({hooks!r}), not a context manager; "
                        "pass a function that returns a fresh one for each forward call, e.g. "
                        "lambda: SaveOnDisk(min_bytes=4096)")
    return hooks


def _check_factory(make_hooks: Any) -> None:
    if isinstance(make_hooks, contextlib.AbstractContextManager) or isinstance(make_hooks, saved_tensors_hooks):
        raise TypeError("pass a function that makes a fresh context for each forward call, e.g. "
                        "lambda: SaveOnDisk(min_bytes=4096), not a context object")
    if not callable(make_hooks):
        raise TypeError(f"make_hooks must be callable (returning a context manager), got {type(make_hooks).__name__}")


class OffloadWrapper(nn.Module):
    """Run ``module`` under a fresh ``make_hooks()`` context on every forward call.

    The context is entered inside ``forward``, in the thread that runs it, so it also works
    under ``nn.DataParallel`` (saved-tensor hooks are thread-local). The wrapped module's
    state_dict keys gain a ``module.`` prefix; :func:`offload_module` avoids that.

    >>> from hooklab import SaveOnDisk
    >>> net = nn.Sequential(nn.Linear(10, 100), OffloadWrapper(nn.Linear(100, 100), SaveOnDisk))
    """

    def __init__(self, module: nn.Module, make_hooks: HooksFactory) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"OffloadWrapper wraps an nn.Module, got {type(module).__name__}")
        _check_factory(make_hooks)
        self.module = module
        self.make_hooks = make_hooks
        self.last_hooks: Any = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped module inside a fresh ``make_hooks()`` context (kept as :attr:`last_hooks`)."""
        hooks = _make_context(self.make_hooks, "OffloadWrapper")
        self.last_hooks = hooks
        with hooks:
            return self.module(*args, **kwargs)


class OffloadScope(HookScope):
    """What :func:`offload_module` returns: its two hooks, and a bounded summary of the calls.

    ``calls``: forward calls so far; ``stats``: the :class:`OffloadStats` of every call's context
    added up (contexts without ``stats``, e.g. torch's ``save_on_cpu``, are not counted);
    ``last``: the context of the latest call. Nothing here grows with the number of calls.
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.calls = 0
        self.stats = OffloadStats()
        self.last: contextlib.AbstractContextManager | None = None

    def __exit__(self, *exc_info: object) -> None:
        super().__exit__(*exc_info)
        if exc_info[0] is None and self.calls == 0:
            warnings.warn(
                "offload_module: the module never ran inside the block, so nothing was offloaded. If the model "
                "is torch.compile'd, hooks added after compiling do not run in the compiled code: call the "
                "eager model (model._orig_mod) inside the block.", RuntimeWarning, stacklevel=2)


def offload_module(module: nn.Module, make_hooks: HooksFactory) -> OffloadScope:
    """Make every forward call of ``module`` run under a fresh ``make_hooks()`` context.

    Uses a forward pre-hook to enter and an always-called forward hook to leave, so the
    model and its state_dict are unchanged. Returns an :class:`OffloadScope`; ``.remove()`` it
    (or use it in ``with``) to stop. ``scope.stats`` sums the counters of every call and
    ``scope.last`` is the latest call's context.
    If the module's forward raises, its context is left as after a normal exit (a hook cannot
    tell the exception apart from one already being handled around the call); a
    :class:`SaveOnDisk` context then deletes its files when the partial graph is freed.

    >>> import torch
    >>> from torch import nn
    >>> _ = torch.manual_seed(0)
    >>> model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
    >>> x = torch.randn(32, 64)
    >>> from hooklab import CompressSaved
    >>> with offload_module(model[0], lambda: CompressSaved("bf16")) as scope:
    ...     loss = model(x).sum()
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"offload_module takes an nn.Module, got {type(module).__name__}")
    _check_factory(make_hooks)
    scope = OffloadScope("offload_module")
    local = threading.local()
    registered = same_module(module)  # a copy.deepcopy made while the scope is active carries these hooks

    def enter(mod: nn.Module, args: Any) -> None:
        if not registered(mod):
            return
        scope.calls += 1  # counted also when making the context fails (the module did run)
        hooks = _make_context(make_hooks, "offload_module")
        hooks.__enter__()
        stack = getattr(local, "stack", None) or []
        stack.append(hooks)
        local.stack = stack
        scope.last = hooks

    def leave(mod: nn.Module, args: Any, output: Any) -> None:
        if not registered(mod):
            return
        stack = getattr(local, "stack", None)
        if stack:
            hooks = stack.pop()
            hooks.__exit__(None, None, None)
            if isinstance(getattr(hooks, "stats", None), OffloadStats):
                scope.stats += hooks.stats  # packing is over once the call has returned

    scope.add(module.register_forward_pre_hook(LocalHook(enter, "offload_module")))
    scope.add(module.register_forward_hook(LocalHook(leave, "offload_module"), always_call=True))
    return scope
