"""Checking a learner's DDP communication hook in two ``gloo`` processes (notebook 10's 10.1, 14's 14.3).

:func:`guard` wraps the learner's hook inside a worker: it records in ``report`` the first thing that went wrong
(it raised, returned ``None``, returned something that is not a Future) and keeps DDP going with a plain mean, so
that a verdict comes back instead of a hang. :func:`run_checked` runs the worker with a deadline and turns what the
workers report into verdicts.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ...workers import WorkerError, _fork_can_run_autograd, run_workers
from ._support import NotSolved, expect, fail, started

DEADLINE = 90  # seconds the two processes get before the hook is judged never to finish


def ddp_and_plain(seed: int) -> tuple[nn.Module, nn.Module, Any]:
    """A small MLP seeded with ``seed``, a plain copy of it (for the local gradient) and the MLP wrapped in DDP."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    plain = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    plain.load_state_dict(model.state_dict())
    return model, plain, DDP(model)


def _problem(hook: Callable, state: Any, bucket: Any) -> tuple[Any, tuple[str, str] | None]:
    """``hook``'s Future, or None and what went wrong: ``(kind, detail)``."""
    try:
        future = hook(state, bucket)
    except Exception as exc:  # noqa: BLE001 - reported as the verdict
        return None, ("raised", f"{type(exc).__name__}: {exc}")
    if future is None:
        return None, ("returned-none", "")
    if not (hasattr(future, "then") and hasattr(future, "wait")):
        return None, ("not-a-future", type(future).__name__)
    return future, None


def guard(hook: Callable, report: dict) -> Callable:
    """``hook`` wrapped for DDP; ``report["calls"]`` counts the calls, ``report["problem"]`` is the first
    ``(kind, detail)`` that went wrong (None while nothing did)."""
    report.setdefault("calls", 0)
    report.setdefault("problem", None)

    def checked(state, bucket):  # no annotations: DDP rejects a bucket annotated with anything but GradBucket
        report["calls"] += 1
        future, problem = _problem(hook, state, bucket)
        report["problem"] = report["problem"] or problem
        if future is None:  # keep DDP going so that the verdict, not a hang, comes back
            buf = bucket.buffer().div_(dist.get_world_size())
            return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])

        def one_tensor(done):  # DDP needs a Future of the bucket's tensor; all_reduce's own gives a list of them
            value = done.value()
            if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
                report["problem"] = report["problem"] or ("future-of-list", "")
                return value[0]  # keep DDP going (it would stop on an internal assert)
            return value
        return future.then(one_tensor)
    return checked


def run_two(worker: Callable, answer: Any, *, reason: str, failed: tuple[str, str],
            waiting: tuple[str, str]) -> list[dict]:
    """``worker(rank, world_size, answer)`` in two processes with the deadline; their reports by rank. A worker that
    fails is the verdict ``reason`` (``failed``: what failed, zh and en, followed by the error's last line); the
    deadline is the verdict ``never-completes`` (``waiting``: what the learner's code may wait for, zh and en)."""
    if not _fork_can_run_autograd():  # an answer of a notebook cell runs only in a fork, and no fork can run autograd
        fail("cannot-fork", "你的答案这次没有检查：这个内核里已经运行过编译模型的反向（torch.compile），autograd 的工作线程"
             "已经启动，之后从它 fork 出的进程都不能再运行反向。重启内核，不运行编译模型的单元格，再检查一次。",
             "your answer was not checked: this kernel has run a compiled model's backward (torch.compile), which "
             "started autograd's worker threads, and a process forked from it can no longer run a backward. "
             "Restart the kernel, leave out the cells that compile a model, and check again.")
    try:
        return run_workers(worker, answer, world_size=2, timeout=DEADLINE)
    except WorkerError as err:
        last = err.details.strip().splitlines()[-1]
        fail(reason, f"{failed[0]}：{last}", f"{failed[1]}: {last}")
    except TimeoutError:
        fail("never-completes", f"两个进程在 {DEADLINE:g} 秒内没有完成：{waiting[0]}",
             f"the two processes did not finish within {DEADLINE:g} s: {waiting[1]}")


def run_checked(worker: Callable, answer: Any, *, not_solved: tuple[str, str]) -> list[dict]:
    """``worker(rank, world_size, answer)`` in two processes; its reports by rank, or the verdict they imply.
    The blank starting point (``not_solved``) is told at once, without processes."""
    if not started(answer):
        raise NotSolved(*not_solved)
    reports = run_two(worker, answer, reason="ddp-failed", failed=("运行 DDP 时出错", "DDP failed with your hook"),
                      waiting=("你的 Future 是否永远不会完成（比如没有发起 all_reduce）？",
                               "does your Future never complete (no all_reduce started, say)?"))
    kind, detail = reports[0]["problem"] or ("", "")
    expect(kind != "raised", "raised", f"你的钩子抛出了 {detail}。", f"your hook raised {detail}.")
    expect(kind != "returned-none", "returned-none", *not_solved)
    expect(kind != "not-a-future", "not-a-future", f"你的钩子返回了 {detail}，而不是 Future。",
           f"your hook returned a {detail}, not a Future.")
    expect(kind != "future-of-list", "future-of-list",
           "你的 Future 完成时给出的是一个张量列表（`all_reduce(...).get_future()` 就是这样），而 DDP 要的是一个张量："
           "接上 `.then(lambda fut: fut.value()[0])`。",
           "your Future completes with a list of tensors (what `all_reduce(...).get_future()` gives), while DDP needs "
           "one tensor: chain `.then(lambda fut: fut.value()[0])`.")
    return reports
