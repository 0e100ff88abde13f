"""Run a message's program (or its fix) and print what it shows, in the form the course stores it.

Each message the course triggers has a standalone program that shows it and the same program corrected
(``docs/programs/messages.json``; :meth:`hooklab.course.asking.Hit.run` runs the one an answer carries). Pasted into
a file, a program ends in a traceback; :func:`run` shows it the way the course prints it instead: the exception as
``Type: message`` (with the exceptions it was raised from or during), each warning as ``Category: message``, each
log record of level WARNING or higher as ``LEVEL: message``, then what the program printed; addresses and
temporary paths masked, so that the text is the same on every machine.

A program runs here, in this process, under a time bound (:data:`TIMEOUT` seconds unless ``timeout=`` says
otherwise): one that runs past it is stopped with a ``TimeoutError`` that names the bound (see :func:`run` for where
the bound cannot apply).

>>> print(run("import torch\\ntorch.ones(2).register_hook(lambda g: g)"))
RuntimeError: cannot register a hook on a tensor that doesn't require gradient
>>> print(run("print(sum([1, 2]))"))
3
"""
from __future__ import annotations

import contextlib
import io
import itertools
import linecache
import logging
import math
import re
import shlex
import signal
import sys
import threading
import traceback
import types
import warnings
from collections.abc import Callable, Iterator, Sequence

__all__ = ["LOGGERS", "TIMEOUT", "call", "describe", "install_line", "masked", "run", "shown"]

TIMEOUT = 180.0  # seconds: the course's programs take up to about 30 s (a matrix cell that compiles, two processes)

LOGGERS = ("", "torch", "torch.distributed", "torch._dynamo", "diffusers", "peft", "accelerate", "captum",
           "lightning", "lightning.pytorch", "pytorch_lightning", "lightning_fabric", "timm", "torchao")
_RUNS = itertools.count(1)  # each run's source has a name of its own
_MASKS = ((re.compile(r"0x[0-9a-fA-F]{6,}"), "0x..."), (re.compile(r"/tmp/[\w./-]+"), "/tmp/..."),
          (re.compile(r"___torch_mangle_\d+"), "___torch_mangle_N"),  # TorchScript's counter of classes made so far
          # torch's log prefix: level, date, time, process id, file:line (W1126 06:29:50.668000 445 .../x.py:1704]),
          # after the rank in a process group's worker ([rank0]:W1126 ...)
          (re.compile(r"(?m)^(\[rank\d+\]:)?([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\s\]]*\]"), r"\1\2.... torch]"),
          # a progress bar's time and rate (tqdm: [00:00<00:00, 843.08it/s])
          (re.compile(r"\[\d+:\d\d<[^\]\n]*\]"), "[...]"))


def masked(text: str) -> str:
    """``text`` without what changes from run to run (addresses, temporary paths, TorchScript's class counter, torch's
    log prefix, a progress bar's time and rate).

    >>> masked("at 0x7f3a2c1d5e10, shards: 100%|##| 1/1 [00:00<00:00, 843.08it/s]")
    'at 0x..., shards: 100%|##| 1/1 [...]'
    """
    for rx, replacement in _MASKS:
        text = rx.sub(replacement, text)
    return text


def describe(exc: BaseException) -> str:
    """An exception as a traceback ends: ``Type: message``, with the exceptions it was raised from or during."""
    before = exc.__cause__ or exc.__context__
    return "".join(traceback.format_exception_only(type(exc), exc)) + ("\n" + describe(before) if before else "")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.lines.append(f"{record.levelname}: {record.getMessage()}")


@contextlib.contextmanager
def _logs() -> Iterator[_Records]:
    handler = _Records()
    loggers = [logging.getLogger(name) for name in LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def shown(body: Callable[[], object]) -> str:
    """What calling ``body()`` shows a user, as it is (not masked): the exception it raises (with its chain), every
    warning, every log record of level WARNING or higher, and what it writes to stdout and stderr from Python."""
    parts: list[str] = []
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(record=True) as caught, _logs() as logs, \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        warnings.simplefilter("always")
        try:
            body()
        except Exception as exc:  # noqa: BLE001 (the message is what the program shows)
            parts.append(describe(exc))
    parts += [f"{w.category.__name__}: {w.message}" for w in caught]
    parts += logs.lines
    parts += [out.getvalue(), err.getvalue()]
    return "\n".join(p for p in parts if p)


def call(fn: Callable[[], object]) -> str:
    """What calling ``fn()`` shows, as :func:`run` shows a program: for a part of a program that runs elsewhere
    (in each process of a group started by :func:`hooklab.run_workers`), which then returns the text.

    >>> print(call(lambda: print(sum([1, 2]))))
    3
    """
    if not callable(fn):
        raise TypeError(f"call() takes a function to call, got {type(fn).__name__}")
    return masked(shown(fn)).rstrip("\n")


class _OutOfTime(BaseException):
    """Raised in the program when its bound rings: a BaseException, so that neither the program's ``except
    Exception`` nor :func:`shown` takes it for what the program shows."""


def _checked_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"run(): timeout is a number of seconds (or None: no bound), got {type(timeout).__name__}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"run(): timeout is a positive number of seconds (or None: no bound), got {timeout!r}")
    return float(timeout)


@contextlib.contextmanager
def _bound(seconds: float | None) -> Iterator[None]:
    """Raise :class:`_OutOfTime` in the main thread after ``seconds`` (SIGALRM); nothing where it cannot be armed
    (another thread, no SIGALRM) or where an alarm is already armed (the caller's bound applies)."""
    if (seconds is None or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread()
            or signal.getitimer(signal.ITIMER_REAL)[0] > 0):
        yield
        return

    def ring(signum: int, frame: object) -> None:
        raise _OutOfTime

    previous = signal.signal(signal.SIGALRM, ring)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        yield
    finally:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0)
        finally:  # also when the alarm rang just as the program ended
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)


def _missing_modules(exc: BaseException) -> list[str]:
    """The modules that an exception, or one it was raised from or during, says are not installed."""
    found: list[str] = []
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        if isinstance(at, ModuleNotFoundError) and at.name:
            found.append(at.name)
        at = at.__cause__ or at.__context__
    return found


def install_line(modules: Sequence[str], requires: Sequence[str] = ()) -> str:
    """What to install to run a program that needs ``modules``, which are not installed: ``requires`` (the
    requirements it ran with, e.g. ``flax==0.12.7``; a pin of torch is left out, the course's torch stays), else the
    package of the first module's name.

    >>> print(install_line(["flax"], ["jax[cpu]==0.10.2", "flax==0.12.7", "torch==2.15.0"]))
    To run it, install what it needs (the releases it ran with): pip install 'jax[cpu]==0.10.2' flax==0.12.7
    >>> print(install_line(["flax.linen"]))
    To run it, install the package that provides the module 'flax' (pip install flax, where the package has ...)
    """
    pins = [r for r in requires if not re.match(r"torch\s*(?:[=<>!~;\[]|$)", r.strip(), re.IGNORECASE)]
    if pins:
        return f"To run it, install what it needs (the releases it ran with): pip install {shlex.join(pins)}"
    top = modules[0].split(".")[0]
    return (f"To run it, install the package that provides the module {top!r} (pip install {top}, where the package "
            "has the module's name)")


def run(code: str, *, filename: str = "<program>", timeout: float | None = TIMEOUT,
        requires: Sequence[str] = ()) -> str:
    """Execute ``code`` in a fresh namespace (a module that stands in for ``__main__`` while it runs, as a script's
    does) and return what it showed, masked.

    The exception it raised is caught and described (``KeyboardInterrupt`` is not). A program that imports a
    library that is not installed shows ``ModuleNotFoundError: ...`` like any other error, and then a last line
    that says what to install (:func:`install_line`): ``requires``, the requirements the program ran with (a
    stored program's ``requires``), else the missing module's package.

    ``timeout``: the program's time bound in seconds (default :data:`TIMEOUT`; None: no bound). A program still
    running then is stopped, at its next Python line (a single long call into torch ends first), and ``run`` raises
    ``TimeoutError`` naming the bound. The bound is an alarm (``SIGALRM``), which exists only in the main thread on
    a POSIX system: called from another thread, or on Windows, the program has no bound and runs until it ends. When
    an alarm is already armed (a test runner's time limit, such as pytest-timeout's signal method), it is left as it
    is and the caller's bound applies instead of ``timeout``.

    >>> run("print(1)", timeout=0)
    Traceback (most recent call last):
    ValueError: run(): timeout is a positive number of seconds (or None: no bound), got 0
    """
    if not isinstance(code, str):
        raise TypeError(f"run() takes a program's source as a str, got {type(code).__name__}")
    seconds = _checked_timeout(timeout)
    if isinstance(requires, str) or not all(isinstance(r, str) for r in requires):
        raise TypeError("run(): requires is a list of requirements, e.g. ['flax==0.12.7']")
    missing: list[str] = []
    filename = f"{filename[:-1]}-{next(_RUNS)}>" if filename.startswith("<") else filename
    compiled = compile(code, filename, "exec")  # a SyntaxError is the caller's, not the program's
    # its source, where inspect looks for it (torch.compile's AOT capture and TorchScript read the functions' source)
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    script = types.ModuleType("__main__")  # a module of its own, as a script's: pickle finds its functions there
    script.__file__ = filename
    main = sys.modules.get("__main__")

    def body() -> None:
        sys.modules["__main__"] = script
        try:
            exec(compiled, script.__dict__)  # noqa: S102 (running the course's own program is the point)
        except Exception as exc:
            missing.extend(_missing_modules(exc))
            raise
        finally:
            linecache.cache.pop(filename, None)
            if main is not None:
                sys.modules["__main__"] = main

    try:
        with _bound(seconds):
            text = shown(body)
    except _OutOfTime:
        raise TimeoutError(f"the program ran past its bound of {seconds:g} s and was stopped (run(code, "
                           "timeout=...) sets the bound; None: no bound)") from None
    text = masked(text).rstrip("\n")
    return f"{text}\n{install_line(missing, requires)}" if missing else text
