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
import functools
import os
import signal
import sys
import threading
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


# ------------------------------------------------------------------------------------------- lost signals
# A signal handler runs in the main thread between two bytecodes, wherever that thread is, and an exception it raises
# there (KeyboardInterrupt from Ctrl-C, SystemExit from a SIGTERM handler that saves a checkpoint on preemption)
# cannot leave a finalizer: Python prints "Exception ignored in: <finalize object>" and the program runs on. For
# hooklab's own finalizers the unraisable hook below redoes the finalizer's work and delivers that exception again,
# outside the finalizer; never a second time for one the program was already handling (N-f).
#
# Delivering it again has no race: the signal is sent again to the main thread with a one-shot relay installed as its
# handler; the relay raises the saved exception unless the main thread is still inside hooklab's finalizer code
# (then it asks for the signal once more and returns), and restores the handler that was there. An exception it
# raised that then lands in anyone's finalizer is delivered again the same way (it carries a mark). No timer, no
# time window.
_REDELIVERED = "_hooklab_redelivered"  # the mark on an exception delivered again (its signal number)
_PENDING: dict[int, tuple[Any, BaseException]] = {}  # signal number -> (the handler to restore, the exception)
_SENDER: list[Any] = []  # (pid, queue, thread) of the thread that sends signals to the main thread
_LOCK = threading.Lock()  # held to change _PENDING and the relay, and by the sender while it sends
_DEFERRED = [0]  # how many times the relay found the main thread still in hooklab's finalizer code (for the tests)


def _python_handlers() -> dict[Any, int]:
    """The code objects of the Python-level signal handlers installed now, with their signal numbers."""
    found: dict[Any, int] = {}
    for signum in signal.valid_signals():
        try:
            handler = signal.getsignal(signum)
        except (OSError, ValueError):
            continue
        while isinstance(handler, functools.partial):
            handler = handler.func
        code = getattr(getattr(handler, "__func__", handler), "__code__", None)
        if code is not None:
            found.setdefault(code, int(signum))
    return found


def _raised_by_a_handler(exc: BaseException, handlers: dict[Any, int]) -> int | None:
    """The signal whose Python handler raised ``exc`` (its frame is in the traceback), if any."""
    tb = exc.__traceback__
    while tb is not None:
        signum = handlers.get(tb.tb_frame.f_code)
        if signum is not None:
            return signum
        tb = tb.tb_next
    return None


def _lost_signal(exc: BaseException | None, outer: BaseException | None, ours: bool) -> tuple[BaseException, int] | None:
    """The exception a signal raised inside the finalizer that ended with ``exc``, and the signal's number.

    Only the part of ``exc``'s chain raised during the finalizer counts: the chain stops at ``outer``, the exception
    the program was handling when the finalizer ran (an ``OSError`` in a finalizer that runs inside the user's
    ``except KeyboardInterrupt:`` has that interrupt as its context: it is not a new one). In one of hooklab's
    finalizers that is a ``KeyboardInterrupt`` (Ctrl-C), what a Python signal handler raised (``SystemExit``,
    anything) or any other ``BaseException`` that is not an ``Exception``, also behind an error its clean-up raised
    (``shutil.rmtree``'s ``OSError``); in anyone's finalizer, an exception hooklab delivered again."""
    handlers = _python_handlers() if ours else {}
    seen: set[int] = set()
    while exc is not None and exc is not outer and id(exc) not in seen:
        seen.add(id(exc))
        again = getattr(exc, _REDELIVERED, None)
        if again is not None:
            return exc, again
        if ours:
            signum = _raised_by_a_handler(exc, handlers)
            if signum is not None:
                return exc, signum
            if not isinstance(exc, Exception):
                return exc, int(signal.SIGINT)  # Ctrl-C (default_int_handler is C: no frame), or no handler known
        exc = exc.__cause__ or exc.__context__
    return None


def _in_our_finalizer_code(frame: Any) -> bool:
    """Whether ``frame`` or a caller of it is hooklab's finalizer or unraisable hook (where an exception is lost)."""
    ours = _OUR_CODE
    while frame is not None:
        if frame.f_code in ours:
            return True
        frame = frame.f_back
    return False


def _wake() -> None:
    """Wake the sender thread: it sends each pending signal to the main thread (it needs the GIL, so it runs once
    the code that woke it lets it, never inside that code)."""
    # none yet, inherited through fork (threads are not), or ended (a profile or trace function that a profiler set
    # for new threads raised in it): a new one
    if not _SENDER or _SENDER[0][0] != os.getpid() or not _SENDER[0][2].is_alive():
        import queue
        q: Any = queue.SimpleQueue()
        sender = threading.Thread(target=_sender, args=(q, threading.main_thread().ident),
                                  name="hooklab-signal-relay", daemon=True)
        sender.start()
        _SENDER[:] = [(os.getpid(), q, sender)]
    _SENDER[0][1].put(None)


def _sender(wakes: Any, main: int | None) -> None:
    """Send the pending signals to the main thread until the relay has taken them. Sent again, 50 ms, 100 ms, ... up
    to 1 s apart, while one stays pending: a signal that comes just before the main thread blocks (a lock, a queue)
    is only handled once that call returns, and a second one ends the block. Never after the relay took it (the lock)."""
    sys.setprofile(None)  # what threading.setprofile / settrace gave new threads (a profiler watching then) is
    sys.settrace(None)    # not this thread's business: it runs for the whole process
    pause: float | None = None
    while True:
        try:
            wakes.get(timeout=pause)
            woken = True
        except Exception:  # queue.Empty: the pause ended with nothing new
            woken = False
        with _LOCK:
            for signum in list(_PENDING):
                if signal.getsignal(signum) is not _relay:  # the program set a handler of its own meanwhile: a
                    del _PENDING[signum]                    # signal now would reach it (SIG_DFL: end the process)
                elif hasattr(signal, "pthread_kill") and main is not None:
                    signal.pthread_kill(main, signum)
                else:
                    _thread.interrupt_main(signal.Signals(signum))
            pause = None if not _PENDING else 0.05 if woken or pause is None else min(1.0, 2 * pause)


def _relay(signum: int, frame: Any) -> None:
    """The one-shot handler of a signal being delivered again: raise the lost exception here, unless this is still
    inside hooklab's finalizer code (then let the sender send it once more); put the previous handler back first."""
    if _in_our_finalizer_code(frame):
        _DEFERRED[0] += 1
        _wake()
        return
    with _LOCK:
        previous, exc = _PENDING.pop(signum, (None, None))
        if previous is None:  # nothing pending (cannot happen while the relay is set): the default
            previous = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
        signal.signal(signum, previous)
    if exc is not None:
        raise exc.with_traceback(None)
    if callable(previous):  # a signal of its own, for the handler it was meant for
        previous(signum, frame)


def _deliver_again(exc: BaseException, signum: int) -> bool:
    """Raise ``exc`` again in the main thread, outside the finalizer, through a one-shot relay on ``signum``; False
    where that cannot be done (not in the main thread: handlers are set there only)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        setattr(exc, _REDELIVERED, signum)
        with _LOCK:
            current = signal.getsignal(signum)
            if current is not _relay:
                signal.signal(signum, _relay)
                _PENDING[signum] = (current, exc)
            else:  # one already waits for this signal: deliver the newest exception with it
                _PENDING[signum] = (_PENDING.get(signum, (signal.SIG_DFL, exc))[0], exc)
    except (ValueError, OSError, TypeError, AttributeError):
        return False
    _wake()
    return True


def _redeliver_interrupts() -> None:
    """Install (once, chained to the hook that was there) an unraisable hook that delivers a lost signal again.

    Python cannot raise from a finalizer: a KeyboardInterrupt (or a SIGTERM handler's SystemExit) that arrives while
    one runs, often the first Python code after a long C++ step of backward, when autograd frees a saved tensor, is
    printed as "Exception ignored in: <finalize object>" and dropped, and the program runs on. For hooklab's own
    finalizers this hook finishes the finalizer's work and delivers the exception again to the main thread, outside
    the finalizer (see the comment above :func:`_deliver_again`). Everything else goes to the previous hook.
    """
    previous = sys.unraisablehook
    if getattr(previous, "_hooklab", False):
        return

    def hook(unraisable: Any) -> None:
        ours = isinstance(unraisable.object, Finalizer)
        # sys.exc_info() here is what the program was handling when the finalizer ran (not the unraisable one)
        lost = _lost_signal(unraisable.exc_value, sys.exc_info()[1], ours)
        if lost is not None:
            if ours:
                try:
                    unraisable.object()  # its work again if it did not finish (hooklab's work can be redone)
                except Exception:  # noqa: BLE001, S110 - done as far as it goes; the signal matters now
                    pass
                except BaseException as again:  # a second signal, inside the redone work: deliver the newer one
                    lost = _lost_signal(again, sys.exc_info()[1], True) or lost
            if _deliver_again(*lost):
                return
        previous(unraisable)

    hook._hooklab = True  # type: ignore[attr-defined]
    _OUR_CODE.add(hook.__code__)
    sys.unraisablehook = hook


class Finalizer(weakref.finalize):
    """``weakref.finalize`` whose interruption by a signal (Ctrl-C, a SIGTERM handler's SystemExit) is not lost (see
    :func:`_redeliver_interrupts`).

    Making the first one installs the unraisable hook (a process-wide setting, changed only by using a
    tool that needs it, never by ``import hooklab``); the first signal delivered again starts the daemon thread
    ``hooklab-signal-relay``.
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
        (the work must allow that: hooklab's do nothing the second time). Work that fails with an error (not an
        interrupt) is not redone: the error is reported once, and at interpreter exit the other finalizers still
        run (CPython's exit loop asserts that a finalizer it called is no longer registered)."""
        info = self._registry.get(self)
        if info and not self._shutdown:
            handling = sys.exc_info()[1]  # the program's own exception, if the finalizer runs in its except block
            try:
                result = info.func(*info.args, **(info.kwargs or {}))
            except Exception as exc:
                if _lost_signal(exc, handling, True) is None:  # an error with no interrupt behind it
                    self._registry.pop(self, None)
                raise
            self._registry.pop(self, None)
            return result
        return None


# the code in which a signal delivered again must not be raised (it would be lost again)
_OUR_CODE: set[Any] = {Finalizer.__call__.__code__, _deliver_again.__code__, _wake.__code__}
