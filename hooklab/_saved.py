"""What hooklab's saved-tensor hooks share: PyTorch's in-place check for a tensor they keep instead of copying.

Without saved-tensor hooks, autograd remembers a saved tensor's version counter and raises
"modified by an inplace operation" when backward finds it changed. With hooks, PyTorch leaves that
check to the hooks (its documentation calls a modified tensor "undefined behavior"): a pack hook that
keeps the tensor itself (a detached alias, which shares the version counter) would hand backward the
modified values and give a wrong gradient without a word. :class:`Kept` records the version at pack
and checks it at unpack, with PyTorch's own message. A tensor that was copied at pack (to disk,
compressed, moved) needs no check: backward reads the values as they were saved, which is right.

>>> x = torch.ones(3, requires_grad=True)
>>> y = x.exp()
>>> kept = Kept(y)
>>> _ = y.add_(1)
>>> kept.get("SavedTensorLedger")
Traceback (most recent call last):
RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation: [torch.FloatTensor [3]] is at version 1; expected version 0 instead. Hint: the tensor was saved for backward inside hooklab.SavedTensorLedger, which checks the version as PyTorch does without saved-tensor hooks; enable anomaly detection to find the operation that failed to compute its gradient, with torch.autograd.set_detect_anomaly(True).
"""
from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading
import time
import warnings
import weakref
from typing import Any, ClassVar

import torch

from ._torch_internals import version

__all__ = ["Finalizer", "Kept", "OtherThreads", "check_version"]


def check_version(t: torch.Tensor, saved: int | None, tool: str) -> torch.Tensor:
    """Return ``t``; raise PyTorch's in-place error when its version is no longer ``saved``."""
    now = version(t)
    if saved is not None and now is not None and now != saved:
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an inplace operation: "
            f"[{t.type()} {list(t.shape)}] is at version {now}; expected version {saved} instead. Hint: the tensor "
            f"was saved for backward inside hooklab.{tool}, which checks the version as PyTorch does without "
            "saved-tensor hooks; enable anomaly detection to find the operation that failed to compute its "
            "gradient, with torch.autograd.set_detect_anomaly(True).")
    return t


class Kept:
    """A saved tensor kept as it is (detached, no copy), with the version it had when it was saved."""

    __slots__ = ("tensor", "version", "__weakref__")

    def __init__(self, t: torch.Tensor) -> None:
        self.tensor = t.detach()  # detached: the tensor itself would make a reference cycle through grad_fn
        self.version = version(t)

    def get(self, tool: str) -> torch.Tensor:
        """The tensor, after checking that no in-place op changed it since it was saved."""
        return check_version(self.tensor, self.version, tool)


class OtherThreads:
    """Counts module calls made in another thread while a saved-tensor hooks context is active in this one.

    Saved-tensor hooks are thread-local: a forward run in another thread saves its tensors without
    them, and a recorder built on them would report nothing from it. Module hooks are not
    thread-local, so a module call seen from another thread says that this happened.
    """

    def __init__(self) -> None:
        self.home = threading.get_ident()
        self.calls = 0

    def here(self) -> bool:
        """True in the thread that made this object; counts the call otherwise."""
        if threading.get_ident() == self.home:
            return True
        self.calls += 1
        return False

    def global_hook(self) -> Any:
        """Register a global forward pre-hook that counts calls from other threads; returns its handle."""
        def count(module: Any, args: Any) -> None:
            self.here()

        return torch.nn.modules.module.register_module_forward_pre_hook(count)

    def warn(self, tool: str, stacklevel: int) -> None:
        if self.calls:
            warnings.warn(
                f"{tool}: {self.calls} module call(s) ran in another thread during the block. Saved-tensor hooks are "
                "thread-local, so the tensors saved there were not seen: what it recorded covers only the thread "
                f"that entered it. Enter {tool} in the thread that runs the forward pass.",
                RuntimeWarning, stacklevel=stacklevel + 1)


def _interrupt_main() -> None:
    """Ctrl-C again, as a real signal to the main thread (it also ends a sleep or a blocking read there)."""
    main = threading.main_thread().ident  # None only before the main thread started
    if hasattr(signal, "pthread_kill") and main is not None:
        signal.pthread_kill(main, signal.SIGINT)
    else:
        _thread.interrupt_main()


_REDELIVERED = [float("-inf")]  # when an interrupt was last delivered again


def _interrupted(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a KeyboardInterrupt, or was raised while one was being handled: a Ctrl-C that
    lands inside ``shutil.rmtree`` can end as the ``OSError`` its clean-up raised, the interrupt only in
    ``__context__``."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _redeliver_interrupts() -> None:
    """Install (once, chained to the hook that was there) an unraisable hook that re-raises a lost Ctrl-C.

    Python cannot raise from a finalizer: a KeyboardInterrupt that arrives while one runs (often the
    first Python code after a long C++ step of backward, when autograd frees a saved tensor) is printed
    as "Exception ignored in: <finalize object>" and dropped, and the program runs on. For hooklab's
    own finalizers this hook finishes the finalizer's work and delivers the interrupt again to the main
    thread a moment later, outside the finalizer. Everything else goes to the previous hook.
    """
    previous = sys.unraisablehook
    if getattr(previous, "_hooklab", False):
        return

    def hook(unraisable: Any) -> None:
        ours = isinstance(unraisable.object, Finalizer)
        # an interrupt delivered again can land in another finalizer (anyone's): deliver that one again too
        again = time.monotonic() - _REDELIVERED[0] < 5.0
        if _interrupted(unraisable.exc_value) and (ours or again):
            if ours:
                with contextlib.suppress(Exception):
                    unraisable.object()  # its work again if it did not finish (hooklab's work can be redone)
            _REDELIVERED[0] = time.monotonic()
            threading.Timer(0.01, _interrupt_main).start()
            return
        previous(unraisable)

    hook._hooklab = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


class Finalizer(weakref.finalize):
    """``weakref.finalize`` whose interruption by Ctrl-C is not lost (see :func:`_redeliver_interrupts`).

    Making the first one installs the unraisable hook (a process-wide setting, changed only by using a
    tool that needs it, never by ``import hooklab``).
    """

    __slots__ = ()
    # weakref.finalize's own class attributes (CPython's), which typeshed does not list
    _registry: ClassVar[dict[weakref.finalize, Any]]
    _shutdown: ClassVar[bool]

    def __init__(self, obj: Any, func: Any, /, *args: Any, **kwargs: Any) -> None:
        _redeliver_interrupts()
        super().__init__(obj, func, *args, **kwargs)

    def __call__(self, _: Any = None) -> Any:
        """Run the work once; it stays registered until it has finished, so an interrupted run is redone
        (the work must allow that: hooklab's do nothing the second time)."""
        info = self._registry.get(self)
        if info and not self._shutdown:
            result = info.func(*info.args, **(info.kwargs or {}))
            self._registry.pop(self, None)
            return result
        return None
