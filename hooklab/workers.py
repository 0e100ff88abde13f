"""Run a function in a few local processes joined in a ``torch.distributed`` group, with a deadline.

Distributed hooks (DDP's communication hooks, FSDP's hooks) only show their behaviour with more
than one process. :func:`run_workers` starts ``world_size`` processes on this machine, joins them
in a process group (``gloo`` runs on the CPU), calls ``fn(rank, world_size, *args)`` in each and
returns what each returned, ordered by rank. It is meant for notebooks and tests:

- a worker's exception comes back as :class:`WorkerError` with the worker's traceback;
- a deadline bounds the whole run; on timeout, every worker is killed and :class:`TimeoutError`
  names the ranks that had not finished;
- no process, process group or rendezvous file survives the call, whatever happens: also a process a worker
  started, and also when the calling process is terminated or killed (see below);
- what workers print is captured and returned only with an error, so a notebook cell's output
  is exactly what the parent prints from the results.

On Linux the workers are forked, so ``fn`` may be defined in a notebook cell. Elsewhere they are
spawned, and ``fn`` must be importable from a module. A fork cannot run autograd once the calling process has
started autograd's worker threads (the backward of any ``torch.compile``'d model does): a forked probe tells before
the workers start, which are then spawned when ``fn`` is importable; otherwise run_workers says to call it before
compiling, or from a fresh process.

How nothing outlives the call, even a SIGKILL of the caller (a kernel restart, a job's time limit), where no
``finally`` runs: on POSIX a small guard process (``sh``) leads a process group that the workers join, so a
process a worker starts is in it too; the guard waits on a pipe that only the caller holds open, and when that
pipe closes (the call ended, or the caller died) it removes the rendezvous folder and kills the whole group. When the
call ends (returns or raises), it waits for that (on Linux, until no process of the group still runs; 30 s at most).
On Linux each worker is also tied to the caller by the kernel (``PR_SET_PDEATHSIG``): it gets SIGKILL when the
caller ends, whatever else happens. A process a worker starts in a session of its own
(``start_new_session=True``) leaves the group and is its own business.

>>> import operator
>>> run_workers(operator.add, world_size=2)  # fn(rank, world_size) in each worker: 0 + 2 and 1 + 2
[2, 3]

A function of a notebook cell that all-reduces over the group (forked workers)::

    def rank_sum(rank, world_size):
        t = torch.tensor([rank + 1.0])
        torch.distributed.all_reduce(t)
        return t.item()

    run_workers(rank_sum, world_size=2)  # [3.0, 3.0]
"""
from __future__ import annotations

import contextlib
import ctypes
import io
import math
import multiprocessing as mp
import os
import pickle
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .errors import WorkerError

__all__ = ["WorkerError", "run_workers"]


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_IN_WORKER = False  # True inside a worker: run_workers refuses to start workers from there
_LIBC: list[Any] = []  # the C library (Linux), loaded by the caller before it forks: a forked child loads nothing


def _libc() -> Any:
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def _tie_to_parent(parent: int, group: int | None, inherited: int | None) -> None:
    """In a worker, first thing: die with the caller (Linux: the kernel's parent-death signal), join the guard's
    process group, and close this process's copy of the pipe only the caller may hold."""
    global _IN_WORKER
    _IN_WORKER = True
    if inherited is not None:  # forked: the guard's pipe was inherited; only the caller may keep it open
        os.close(inherited)
    if sys.platform.startswith("linux"):
        _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the caller died before the tie was made: the signal would never come
        os._exit(1)
    if group is not None:
        with contextlib.suppress(OSError):  # the caller also does it (fork); the guard may already be gone
            os.setpgid(0, group)


# PyTorch's refusal in a forked child whose parent had started autograd's worker threads before the fork
AUTOGRAD_AFTER_FORK = "Unable to handle autograd's threading in combination with fork-based multiprocessing"
FORK_HINT = ("hooklab: the workers are forked from the process that called run_workers, and that process had "
             "already run a backward pass on autograd's worker threads (a torch.compile'd model's backward does): "
             "a forked process cannot run autograd then. Call run_workers before compiling anything in this "
             "process, or from a fresh one (restart the kernel, or a separate script).\n")


def _importable(fn: Callable[..., Any]) -> bool:
    """Whether a spawned worker can import ``fn`` by its module and qualified name (what pickling a function does):
    not one of ``__main__`` (a notebook cell's, a script's), nor a nested function, nor one whose module does not hold
    it under its name (a doctest's, an ``exec``'d one)."""
    module = sys.modules.get(getattr(fn, "__module__", None) or "__main__")
    if module is None or module.__name__ == "__main__":
        return False
    found: Any = module
    for part in getattr(fn, "__qualname__", "<locals>").split("."):
        found = getattr(found, part, None)
    return found is fn


def _fork_can_run_autograd() -> bool:
    """Whether a process forked now can run a backward pass: not once this one has started autograd's worker
    threads (any ``torch.compile``'d model's backward does), after which PyTorch refuses autograd in a fork.
    Asked of a tiny forked probe (a few milliseconds), since PyTorch keeps that state to itself."""
    pid = os.fork()
    if pid == 0:  # the probe: one backward, then leave without running any of the parent's clean-up
        code = 1
        try:
            x = torch.ones(1, requires_grad=True)
            (x * 2).sum().backward()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _worker(fn: Callable[..., Any], rank: int, world_size: int, args: tuple, backend: str,
            store: str, timeout: float, results: Any, parent: int, group: int | None,
            inherited: int | None) -> None:
    _tie_to_parent(parent, group, inherited)
    captured = io.StringIO()
    joined = False
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
        try:
            torch.set_num_threads(1)
            dist.init_process_group(backend, init_method=f"file://{store}", rank=rank,
                                    world_size=world_size, timeout=timedelta(seconds=timeout))
            joined = True
            # every rank has finished joining before any runs fn: otherwise a rank whose fn returns at once could
            # close the group while a peer is still completing gloo's connections (that peer would then fail)
            dist.barrier()
            # plain pickle copies tensors into the message; the queue's own pickler would share their
            # memory through a file descriptor that dies with this process
            results.put(("ok", rank, pickle.dumps(fn(rank, world_size, *args))))
        except BaseException:  # noqa: BLE001 - every failure goes back to the parent
            # the time tells the first failure from the ones it causes in the other workers
            report = traceback.format_exc()
            if AUTOGRAD_AFTER_FORK in report:
                report += FORK_HINT
            results.put(("error", rank, (time.time(), report + captured.getvalue())))
        finally:
            if joined:
                dist.destroy_process_group()


def _first_failure(rank: int, failure: tuple[float, str], results: Any) -> tuple[int, str]:
    """The earliest of the failures that arrive within a moment: a worker that raises makes its peers
    fail too (their collectives lose a partner), and the first failure is the one to report."""
    failures = {rank: failure}
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        try:
            status, other, value = results.get(timeout=max(end - time.monotonic(), 0.01))
        except queue.Empty:
            break
        if status == "error":
            failures[other] = value
    first = min(failures, key=lambda r: failures[r][0])
    return first, failures[first][1]


def _import_what_workers_import() -> None:
    """Import ``torch._dynamo`` here, once, before forking: DDP and FSDP import it when a model is wrapped (about
    2 s of CPU), and a forked worker's imports die with it, so every worker of every run would pay that again."""
    import torch._dynamo  # noqa: F401


# The guard (POSIX): leads the process group the workers join; when its stdin (a pipe only the caller holds open)
# closes, because the call ended or the caller died, it removes the rendezvous folder, then kills the group, itself
# included. It is in a process group of its own, so a signal to the caller's group (a kernel restart) spares it.
_GUARD = 'read _; rm -rf -- "$1"; kill -KILL 0'


def _start_guard(folder: Path) -> tuple[subprocess.Popen | None, int | None]:
    """The guard process and the write end of its pipe (both None where there is no POSIX shell)."""
    if os.name != "posix":
        return None, None
    read_end, write_end = os.pipe()
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
    try:
        guard = subprocess.Popen(["/bin/sh", "-c", _GUARD, "hooklab-workers-guard", str(folder)], stdin=read_end,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **group)
    except OSError:
        os.close(write_end)
        return None, None
    finally:
        os.close(read_end)
    return guard, write_end


def _stop_guard(guard: subprocess.Popen | None, write_end: int | None) -> None:
    """Close the guard's pipe: it removes the folder and kills the group (what a worker left running, a worker's own
    child processes included); wait for it, and (Linux) for every process of the group to have ended."""
    if write_end is not None:
        os.close(write_end)
    if guard is None:
        return
    try:
        guard.wait(timeout=60)
    except subprocess.TimeoutExpired:  # never seen: the guard's work is two system calls
        guard.kill()
        guard.wait()
    if not sys.platform.startswith("linux"):
        return
    # the guard's SIGKILL reaches the whole group at once, but each process ends only when it next runs (on a busy
    # machine, a while after the guard): wait until none of the group still runs, so that none is running when
    # run_workers returns. A process that has ended but not yet been reaped (a zombie: a worker's child whose
    # parent died is reaped by init) has ended. Bounded: a process stuck in the kernel would not hold the call.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        running = False
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
            except (OSError, IndexError):
                continue  # ended meanwhile
            if len(fields) > 2 and fields[2] == str(guard.pid) and fields[0] not in ("Z", "X"):
                running = True
                break
        if not running:
            return
        time.sleep(0.01)


def _check_arguments(fn: Any, world_size: Any, timeout: Any) -> None:
    if _IN_WORKER:
        raise RuntimeError("run_workers was called inside a worker of run_workers: a worker cannot start workers "
                           "of its own (they would not be in its process group). Call run_workers once, from the "
                           "notebook or script, with world_size set to the number of processes you need.")
    if not callable(fn):
        raise TypeError(f"run_workers needs a function fn(rank, world_size, ...), got {type(fn).__name__}")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds (an int or a float), got {type(timeout).__name__} "
                        f"{timeout!r}")
    if not (timeout > 0 and math.isfinite(timeout)):
        raise ValueError(f"timeout must be a positive, finite number of seconds, got {timeout!r}")


def run_workers(fn: Callable[..., Any], *args: Any, world_size: int = 2, backend: str = "gloo",
                timeout: float = 120.0) -> list[Any]:
    """Call ``fn(rank, world_size, *args)`` in ``world_size`` processes of one process group.

    Returns the workers' return values (they must be picklable), ordered by rank. Raises
    :class:`WorkerError` when a worker raises and :class:`TimeoutError` when the workers have
    not all finished after ``timeout`` seconds; in every case all workers are gone on return.
    """
    _check_arguments(fn, world_size, timeout)
    if dist.is_available() is False:
        raise RuntimeError("this PyTorch build has no torch.distributed")
    ctx = mp.get_context("fork") if sys.platform.startswith("linux") else mp.get_context("spawn")
    if ctx.get_start_method() == "fork" and not _fork_can_run_autograd():
        if not _importable(fn):
            raise RuntimeError(FORK_HINT.replace("hooklab: the workers are", "run_workers: the workers would be")
                               + "(Or define fn in an importable module: run_workers then starts the workers with "
                               "'spawn' instead of forking.)")
        ctx = mp.get_context("spawn")  # fn is importable: fresh interpreters instead of forks
    if ctx.get_start_method() == "fork":
        _import_what_workers_import()
        _libc()
    folder = Path(tempfile.mkdtemp(prefix="hooklab-workers-"))
    results = ctx.Queue()
    guard, write_end = None, None
    procs: list[Any] = []
    values: dict[int, Any] = {}
    try:
        guard, write_end = _start_guard(folder)
        group = guard.pid if guard is not None else None
        inherited = write_end if ctx.get_start_method() == "fork" else None
        procs = [ctx.Process(target=_worker, args=(fn, rank, world_size, args, backend, str(folder / "store"),
                                                   timeout, results, os.getpid(), group, inherited), daemon=True)
                 for rank in range(world_size)]
        for p in procs:
            p.start()
            if group is not None:
                with contextlib.suppress(OSError):  # the worker does it too; either may come first
                    os.setpgid(p.pid, group)
        deadline = time.monotonic() + timeout
        while len(values) < world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(world_size)) - set(values))
                raise TimeoutError(f"run_workers waited {timeout:g} s for {getattr(fn, '__name__', fn)} to "
                                   f"finish on rank(s) {missing}; every worker was stopped")
            try:
                status, rank, value = results.get(timeout=min(left, 0.5))
            except queue.Empty:
                # a worker that ended without a result (killed, or os._exit(0) inside fn) will never send one
                dead = [rank for rank, p in enumerate(procs) if p.exitcode is not None and rank not in values]
                if dead and results.empty():
                    code = procs[dead[0]].exitcode
                    why = (" (fn, or code it called, ended the process with os._exit(0) before returning)"
                           if code == 0 else "")
                    raise WorkerError(dead[0], f"the process exited with code {code} without a result{why}") from None
                continue
            if status == "error":
                raise WorkerError(*_first_failure(rank, value, results))
            values[rank] = pickle.loads(value)
        return [values[rank] for rank in range(world_size)]
    finally:
        for p in procs:
            if p.is_alive():
                p.join(timeout=5 if len(values) == world_size else 0)
        _stop_guard(guard, write_end)  # the folder, and every process left in the group (a worker's children too)
        for p in procs:
            if p.is_alive():
                p.kill()
            if p.pid is not None:
                p.join(timeout=5)
        results.close()
        results.join_thread()
        shutil.rmtree(folder, ignore_errors=True)
