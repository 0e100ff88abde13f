"""Waiting in tests on a busy machine: no verdict depends on how fast the machine is right now.

A test waits for an *event* (a process ended, a line was written, a file appeared), never for a fixed time. The only
deadlines are hang guards: they end a test that would otherwise wait for ever, and they are scaled by how busy the
machine is (:func:`load_factor`: 2 cores at a load average of 12 run a CPU-bound process about 6 times slower than
when idle), so that a slow run is never taken for a hang. Where a test must bound the work itself, it bounds CPU time
(:func:`run`'s ``cpu_seconds``), which load does not change. Every guard says what it waited for when it fires.

The figures given to these helpers are what an idle machine needs, with a margin; the root ``conftest.py`` scales
pytest-timeout's per-test limit the same way.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

_HIGHEST = [1.0]  # the highest load factor seen in this process (a guard never shrinks while it waits)


def cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def load_factor() -> float:
    """How many times slower than on an idle machine a CPU-bound process may run now: the load average (the
    highest of its 1-, 5- and 15-minute figures) per core, at least 1; never lower than what this process saw
    before (loads come and go faster than the averages follow)."""
    try:
        load = max(os.getloadavg())
    except (AttributeError, OSError):
        load = 0.0
    _HIGHEST[0] = max(_HIGHEST[0], load / cores())
    return _HIGHEST[0]


def describe_load() -> str:
    try:
        averages = "/".join(f"{a:.1f}" for a in os.getloadavg())
    except (AttributeError, OSError):
        averages = "unknown"
    return f"load factor {load_factor():.1f}: load average {averages} on {cores()} cores"


class HangGuard:
    """A deadline of ``seconds`` on an idle machine, stretched by :func:`load_factor` as the wait goes on."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds, self.what, self.start = seconds, what, time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        """Seconds left before the guard fires (the load is read again each time)."""
        return self.seconds * load_factor() - self.elapsed()

    def message(self) -> str:
        return (f"hang guard: waited {self.elapsed():.0f} s for {self.what} (the guard: {self.seconds:g} s on an idle "
                f"machine x {describe_load()})")

    def fail(self, detail: str = "") -> None:
        __tracebackhide__ = True
        pytest.fail(self.message() + (f"\n{detail}" if detail else ""), pytrace=False)


def hang_guard(seconds: float) -> float:
    """``seconds`` (enough on an idle machine) scaled for the load now: for a library call's own deadline
    (``run_workers(timeout=...)``) or a third-party API's timeout, where the wait cannot be an event."""
    return seconds * load_factor()


def wait_for(what: str, condition: Callable[[], Any], seconds: float, *, interval: float = 0.05,
             detail: Callable[[], str] = lambda: "") -> Any:
    """Check ``condition`` until it gives something true, and return it; fail, naming ``what``, when the hang
    guard of ``seconds`` (idle machine, scaled by the load) has passed. For events that nothing signals
    (a file written by another process, a server that starts answering)."""
    __tracebackhide__ = True
    guard = HangGuard(seconds, what)
    while True:
        found = condition()
        if found:
            return found
        if guard.left() <= 0:
            guard.fail(detail())
        time.sleep(interval)


def read_line(stream: Any, what: str, seconds: float) -> str:
    """The next line of ``stream`` (a pipe from a process, text or binary), waiting for it as an event; '' at EOF."""
    __tracebackhide__ = True
    guard = HangGuard(seconds, what)
    while not select.select([stream], [], [], max(min(guard.left(), 5.0), 0.0))[0]:
        if guard.left() <= 0:
            guard.fail()
    line = stream.readline()
    return line.decode() if isinstance(line, bytes) else line


def running(pid: int) -> bool:
    """True while process ``pid`` runs (a zombie, ended but not yet reaped by its parent, counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:
        return False
    return state not in ("Z", "X")


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return running(pid) if os.path.isdir("/proc") else True


def wait_until_gone(pids: Iterable[int], what: str, seconds: float) -> None:
    """Wait for every process of ``pids`` (not necessarily children of this one) to end, as events (Linux: a pidfd
    per process, readable when it ends); fail naming ``what`` and the ones still running at the hang guard."""
    __tracebackhide__ = True
    pids = list(pids)
    if not hasattr(os, "pidfd_open"):  # not Linux: look every 50 ms
        wait_for(what, lambda: not [pid for pid in pids if _exists(pid)], seconds)
        return
    guard = HangGuard(seconds, what)
    fds = {}
    for pid in pids:
        try:
            fds[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            continue  # already gone (and reaped)
    try:
        while fds:
            ready, _, _ = select.select(list(fds), [], [], max(min(guard.left(), 5.0), 0.0))
            for fd in ready:
                os.close(fd)
                del fds[fd]
            if fds and guard.left() <= 0:
                still = sorted(pid for pid in fds.values() if running(pid))
                if still:
                    guard.fail(f"still running: {still}")
                break
    finally:
        for fd in fds:
            os.close(fd)


def run(argv: list[str], *, what: str, seconds: float, cpu_seconds: float | None = None,
        **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, capture_output=True, text=True, **kwargs)`` for a test: fails (never hangs) naming
    ``what`` when the process has not ended at the hang guard (``seconds`` on an idle machine, scaled by the load),
    and, with ``cpu_seconds``, when it used more CPU time than that (Linux: the kernel stops it at that limit,
    whatever the load; a limit on the work, where the wall-clock guard is only for hangs)."""
    __tracebackhide__ = True
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    if kwargs.pop("capture_output"):
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
    guard = HangGuard(seconds, what)
    proc = subprocess.Popen(argv, **kwargs)
    if cpu_seconds is not None and hasattr(os, "prlimit") and hasattr(signal, "SIGXCPU"):
        import resource
        # soft: SIGXCPU (ends it); hard, a moment later: SIGKILL. Its children inherit the limit, each their own.
        limit = int(cpu_seconds) + 1
        try:
            resource.prlimit(proc.pid, resource.RLIMIT_CPU, (limit, limit + 5))
        except (ProcessLookupError, PermissionError):
            pass  # ended already, or not allowed here: the hang guard still bounds it
    out, err = "", ""
    while True:
        try:
            out, err = proc.communicate(timeout=max(min(guard.left(), 10.0), 0.01))
            break
        except subprocess.TimeoutExpired:
            if guard.left() <= 0:
                proc.kill()
                out, err = proc.communicate()
                guard.fail(f"--- its output (tail) ---\n{(out or '')[-3000:]}\n{(err or '')[-3000:]}")
    if cpu_seconds is not None and hasattr(signal, "SIGXCPU") and proc.returncode == -signal.SIGXCPU:
        pytest.fail(f"{what}: stopped after {cpu_seconds:g} s of CPU time (its limit; the load does not change CPU "
                    f"time, so this is the work itself)\n{(out or '')[-3000:]}\n{(err or '')[-3000:]}", pytrace=False)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def python(code: str, *args: str, what: str, seconds: float, **kwargs: Any) -> subprocess.CompletedProcess:
    """:func:`run` of ``python -c code args...`` with this interpreter."""
    __tracebackhide__ = True
    return run([sys.executable, "-c", code, *args], what=what, seconds=seconds, **kwargs)
