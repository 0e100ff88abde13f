"""Tests of hooklab.workers.run_workers: results by rank, errors and deadlines, nothing left behind."""
from __future__ import annotations

import glob
import multiprocessing
import os
import tempfile
import time

import pytest
import torch
import torch.distributed as dist

from hooklab.workers import WorkerError, run_workers


@pytest.fixture(autouse=True)
def private_tempdir(tmp_path, monkeypatch):
    """run_workers' rendezvous folders land here, apart from those of other processes running now."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


# Processes and folders that were there before (torch.compile on older torch keeps a pool of compile workers)
_ALREADY: tuple[set, set] = (set(), set())


@pytest.fixture(autouse=True)
def _note_what_was_there_before():
    _ALREADY[0].clear(), _ALREADY[1].clear()
    _ALREADY[0].update(p.pid for p in multiprocessing.active_children())
    _ALREADY[1].update(glob.glob(os.path.join(tempfile.gettempdir(), "hooklab-workers-*")))
    yield


def _leftovers() -> tuple[list, list]:
    """The child processes and hooklab-workers-* folders that the test added and left behind."""
    children = [p for p in multiprocessing.active_children() if p.pid not in _ALREADY[0]]
    folders = [f for f in glob.glob(os.path.join(tempfile.gettempdir(), "hooklab-workers-*")) if f not in _ALREADY[1]]
    return children, folders


def average(rank, world_size, base):
    t = torch.tensor([base + rank], dtype=torch.float64)
    dist.all_reduce(t)
    print("noise that must not reach the caller")
    return rank, world_size, t.item() / world_size


def fail_on_rank_one(rank, world_size):
    if rank == 1:
        print("worker 1 was here")
        raise ValueError("rank one refuses")
    dist.barrier()  # rank 0 waits for a peer that is gone: must not hang the caller
    return rank


def sleep_forever(rank, world_size):
    time.sleep(3600)


def test_results_come_back_ordered_by_rank(capfd):
    assert run_workers(average, 10.0, world_size=3) == [(0, 3, 11.0), (1, 3, 11.0), (2, 3, 11.0)]
    assert "noise" not in capfd.readouterr().out
    assert _leftovers() == ([], [])


def test_a_worker_error_comes_back_with_its_traceback_and_output():
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        run_workers(fail_on_rank_one, world_size=2, timeout=60)
    assert info.value.rank == 1
    assert "ValueError: rank one refuses" in info.value.details and "worker 1 was here" in info.value.details
    assert time.monotonic() - start < 30  # did not wait for the stranded rank 0
    assert _leftovers() == ([], [])


def test_a_hanging_worker_is_killed_at_the_deadline():
    start = time.monotonic()
    # a pure wait: the workers are asleep within a second (they never finish, however long the deadline)
    with pytest.raises(TimeoutError, match=r"waited 2 s for sleep_forever to finish on rank\(s\) \[0, 1\]"):
        run_workers(sleep_forever, world_size=2, timeout=2)
    assert time.monotonic() - start < 20
    assert _leftovers() == ([], [])


@pytest.mark.parametrize("kwargs, message", [
    ({"world_size": 0}, "world_size must be a positive int"),
    ({"world_size": 2.0}, "world_size must be a positive int"),
    ({"timeout": 0}, "timeout must be a positive number"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        run_workers(average, 0.0, **kwargs)


def test_not_a_function():
    with pytest.raises(TypeError, match="needs a function"):
        run_workers("average")


def tensors(rank, world_size):
    return {"grad": torch.full((3,), float(rank))}


def test_tensors_come_back_after_the_workers_are_gone():
    out = run_workers(tensors, world_size=2)
    assert [o["grad"].tolist() for o in out] == [[0.0] * 3, [1.0] * 3]


def _exit_quietly(rank, world_size):
    if rank == 1:
        os._exit(0)  # no result, exit code 0
    return rank


@pytest.mark.timeout(120)
def test_a_worker_that_exits_with_code_0_without_a_result_is_reported_at_once():
    """D7 (review row N107): it used to wait for the whole timeout, then say the rank had not finished."""
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"rank 1 raised:\nthe process exited with code 0 without a result .*os._exit"):
        run_workers(_exit_quietly, world_size=2, timeout=90)
    assert time.monotonic() - start < 45  # far from the 90 s timeout
    assert _leftovers() == ([], [])
