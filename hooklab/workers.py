"""Run a function in a few local processes joined in a ``torch.distributed`` group, with a deadline.

Distributed hooks (DDP's communication hooks, FSDP's hooks) only show their behaviour with more
than one process. :func:`run_workers` starts ``world_size`` processes on this machine, joins them
in a process group (``gloo`` runs on the CPU), calls ``fn(rank, world_size, *args)`` in each and
returns what each returned, ordered by rank. It is meant for notebooks and tests:

- a worker's exception comes back as :class:`WorkerError` with the worker's traceback;
- a deadline bounds the whole run; on timeout, every worker is killed and :class:`TimeoutError`
  names the ranks that had not finished;
- no process, process group or rendezvous file survives the call, whatever happens;
- what workers print is captured and returned only with an error, so a notebook cell's output
  is exactly what the parent prints from the results.

On Linux the workers are forked, so ``fn`` may be defined in a notebook cell. Elsewhere they are
spawned, and ``fn`` must be importable from a module.

>>> def rank_sum(rank, world_size):
...     t = torch.tensor([rank + 1.0])
...     torch.distributed.all_reduce(t)
...     return t.item()
>>> run_workers(rank_sum, world_size=2)
[3.0, 3.0]
"""
from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import pickle
import queue
import shutil
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from .errors import WorkerError

__all__ = ["WorkerError", "run_workers"]


def _worker(fn: Callable[..., Any], rank: int, world_size: int, args: tuple, backend: str,
            store: str, timeout: float, results: Any) -> None:
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
            results.put(("error", rank, (time.time(), traceback.format_exc() + captured.getvalue())))
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


def run_workers(fn: Callable[..., Any], *args: Any, world_size: int = 2, backend: str = "gloo",
                timeout: float = 120.0) -> list[Any]:
    """Call ``fn(rank, world_size, *args)`` in ``world_size`` processes of one process group.

    Returns the workers' return values (they must be picklable), ordered by rank. Raises
    :class:`WorkerError` when a worker raises and :class:`TimeoutError` when the workers have
    not all finished after ``timeout`` seconds; in every case all workers are gone on return.
    """
    if not callable(fn):
        raise TypeError(f"run_workers needs a function fn(rank, world_size, ...), got {type(fn).__name__}")
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if dist.is_available() is False:
        raise RuntimeError("this PyTorch build has no torch.distributed")
    ctx = mp.get_context("fork") if sys.platform.startswith("linux") else mp.get_context("spawn")
    if ctx.get_start_method() == "fork":
        _import_what_workers_import()
    folder = Path(tempfile.mkdtemp(prefix="hooklab-workers-"))
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(fn, rank, world_size, args, backend, str(folder / "store"),
                                               timeout, results), daemon=True)
             for rank in range(world_size)]
    values: dict[int, Any] = {}
    try:
        for p in procs:
            p.start()
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
                    raise WorkerError(dead[0], f"the process exited with code {code} without a result{why}")
                continue
            if status == "error":
                raise WorkerError(*_first_failure(rank, value, results))
            values[rank] = pickle.loads(value)
        return [values[rank] for rank in range(world_size)]
    finally:
        for p in procs:
            if p.is_alive():
                p.join(timeout=5 if len(values) == world_size else 0)
            if p.is_alive():
                p.kill()
            if p.pid is not None:
                p.join(timeout=5)
        results.close()
        results.join_thread()
        shutil.rmtree(folder, ignore_errors=True)
