"""Checking a learner's DDP communication hook in two ``gloo`` processes (notebook 10's 10.1, 14's 14.3).

:func:`guard` wraps the learner's hook inside a worker: it records in ``report`` what went wrong (raised, returned
``None``, returned something that is not a Future) and keeps DDP going with a plain mean, so that a verdict comes
back instead of a hang. :func:`run_checked` runs the worker with a deadline and turns what the workers report into
``NotSolved`` / ``Wrong``.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from ...workers import WorkerError, run_workers
from . import NotSolved, Wrong


def ddp_and_plain(seed: int) -> tuple[nn.Module, nn.Module, nn.Module]:
    """A small MLP seeded with ``seed``, a plain copy of it (for the local gradient) and the MLP wrapped in DDP."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    plain = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))
    plain.load_state_dict(model.state_dict())
    return model, plain, DDP(model)


def guard(hook: Callable, report: dict) -> Callable:
    """``hook`` wrapped for DDP; ``report["calls"]`` counts the calls, ``report["problem"]`` says what went wrong."""
    report.setdefault("calls", 0)
    report.setdefault("problem", None)

    def checked(state, bucket):  # no annotations: DDP rejects a bucket annotated with anything but GradBucket
        report["calls"] += 1
        try:
            future = hook(state, bucket)
        except Exception as exc:  # noqa: BLE001 - reported as the verdict
            future = None
            report["problem"] = report["problem"] or (f"抛出了 {type(exc).__name__}: {exc}",
                                                      f"raised {type(exc).__name__}: {exc}")
        if future is None and report["problem"] is None:
            report["problem"] = "none"
        elif future is not None and not (hasattr(future, "then") and hasattr(future, "wait")):
            name = type(future).__name__
            report["problem"] = report["problem"] or (f"返回了 {name}，而不是 Future", f"returned a {name}, not a Future")
            future = None
        if future is None:  # keep DDP going so that the verdict, not a hang, comes back
            buf = bucket.buffer().div_(dist.get_world_size())
            return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])
        return future
    return checked


def run_checked(worker: Callable, answer: Any, *, not_solved: tuple[str, str], timeout: float = 90) -> list[dict]:
    """``worker(rank, world_size, answer)`` in two processes; its reports by rank, or the verdict it implies."""
    try:
        reports = run_workers(worker, answer, world_size=2, timeout=timeout)
    except WorkerError as err:
        last = err.details.strip().splitlines()[-1]
        raise Wrong(f"运行 DDP 时出错：{last}", f"DDP failed with your hook: {last}") from None
    except TimeoutError:
        raise Wrong(f"两个进程在 {timeout:g} 秒内没有完成：你的 Future 是否永远不会完成（比如没有发起 all_reduce）？",
                    f"the two processes did not finish within {timeout:g} s: does your Future never complete (no "
                    "all_reduce started, say)?") from None
    problem = reports[0]["problem"]
    if problem == "none":
        raise NotSolved(*not_solved)
    if problem:
        zh, en = problem
        raise Wrong(f"你的钩子{zh}。", f"your hook {en}.")
    return reports
