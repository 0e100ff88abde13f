"""Tests of hooklab.workers.run_workers: results by rank, errors and deadlines, nothing left behind."""
from __future__ import annotations

import glob
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from hooklab.workers import WorkerError, run_workers
from patience import read_line, running, wait_until_gone

ROOT = Path(__file__).resolve().parents[2]
# A run_workers deadline that no test reaches: a test that would wait for it is stopped by its hang guard instead
# (pytest-timeout, scaled by the load), so a slow machine never turns "did not wait" into a failure.
NEVER = 3600


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
    # rank 0 is stranded in a barrier until gloo's timeout (the same NEVER): it is the error that ends the call
    with pytest.raises(WorkerError) as info:
        run_workers(fail_on_rank_one, world_size=2, timeout=NEVER)
    assert info.value.rank == 1
    assert "ValueError: rank one refuses" in info.value.details and "worker 1 was here" in info.value.details
    assert _leftovers() == ([], [])


def test_a_hanging_worker_is_killed_at_the_deadline():
    # the workers never finish, however long the deadline: the deadline ends the call, and nothing is left
    with pytest.raises(TimeoutError, match=r"waited 2 s for sleep_forever to finish on rank\(s\) \[0, 1\]"):
        run_workers(sleep_forever, world_size=2, timeout=2)
    assert _leftovers() == ([], [])


@pytest.mark.parametrize("kwargs, error, message", [
    ({"world_size": 0}, ValueError, "world_size must be a positive int"),
    ({"world_size": 2.0}, ValueError, "world_size must be a positive int"),
    ({"timeout": 0}, ValueError, "timeout must be a positive, finite number of seconds, got 0"),
    ({"timeout": float("inf")}, ValueError, "timeout must be a positive, finite number of seconds, got inf"),
    ({"timeout": float("nan")}, ValueError, "timeout must be a positive, finite number of seconds, got nan"),
    ({"timeout": "5"}, TypeError, r"timeout must be a number of seconds \(an int or a float\), got str '5'"),
    ({"timeout": True}, TypeError, "timeout must be a number of seconds .*got bool True"),
])
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        run_workers(average, 0.0, **kwargs)
    assert _leftovers() == ([], [])


def nested(rank, world_size):
    return run_workers(average, 0.0, world_size=1)


def test_run_workers_inside_a_worker_is_refused_clearly():
    """Review round 3: it failed with multiprocessing's "daemonic processes are not allowed to have children"."""
    with pytest.raises(WorkerError, match=r"(?s)RuntimeError: run_workers was called inside a worker of run_workers"
                                          r".*Call run_workers once, from the notebook or script"):
        run_workers(nested, world_size=1, timeout=NEVER)
    assert _leftovers() == ([], [])


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
    """D7 (review row N107): it used to wait for the whole timeout, then say the rank had not finished (that wait
    would now run into this test's hang guard: the deadline is NEVER)."""
    with pytest.raises(WorkerError, match=r"rank 1 raised:\nthe process exited with code 0 without a result .*os._exit"):
        run_workers(_exit_quietly, world_size=2, timeout=NEVER)
    assert _leftovers() == ([], [])


# ------------------------------------------------------------ nothing outlives the call (review round 3, N-a, RW15)
def start_a_child(rank, world_size):
    """A worker that starts a process of its own (a data loader's, a tool's) and returns without ending it."""
    return subprocess.Popen(["sleep", "3600"]).pid


@pytest.mark.skipif(os.name != "posix", reason="process groups: POSIX")
def test_a_process_a_worker_started_ends_with_the_call():
    children = run_workers(start_a_child, world_size=2, timeout=NEVER)
    wait_until_gone(children, "the processes the workers started to end with run_workers", 30)
    assert _leftovers() == ([], [])


# a child that holds 256 MiB (written, so really held): the kernel frees that as it ends, which takes a moment after
# SIGKILL, as a data loader's worker would; a process that holds nothing ends too fast to show the difference
SLEEPER = [sys.executable, "-c", "import time; held = b'x' * (256 << 20); print('ready', flush=True); time.sleep(600)"]


def start_a_python_child(rank, world_size, raise_after):
    """A worker whose own child process (a Python, as a data loader's worker is) outlives it unless something ends it;
    it returns the child's pid, or raises with it in the message."""
    child = subprocess.Popen(SLEEPER, stdout=subprocess.PIPE)
    child.stdout.readline()  # it holds its memory now
    if raise_after:
        raise RuntimeError(f"failing after starting child {child.pid}")
    return child.pid


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the wait for the group reads /proc (Linux)")
@pytest.mark.parametrize("raise_after", [False, True], ids=["returns", "raises"])
def test_no_child_of_a_worker_is_running_when_the_call_returns_or_raises(raise_after):
    """RW15: a worker's own child process was seen alive after run_workers. The guard's SIGKILL reaches the whole
    group, but a process ends only when it next runs: the call now waits until none of the group runs. Checked at
    once when the call ends (no waiting here), on the call's return and on its error; a zombie (killed, not yet
    reaped by init) has ended."""
    pids: list[int] = []
    try:
        if raise_after:
            with pytest.raises(WorkerError, match="failing after starting child") as raised:
                run_workers(start_a_python_child, True, world_size=2, timeout=NEVER)
            pids = [int(pid) for pid in re.findall(r"failing after starting child (\d+)", str(raised.value))]
            assert pids, str(raised.value)
        else:
            pids = run_workers(start_a_python_child, False, world_size=2, timeout=NEVER)
        assert [pid for pid in pids if running(pid)] == []
        assert _leftovers() == ([], [])
    finally:  # nothing survives a failing test either
        for pid in pids:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


# run_workers in a process of its own (the caller the test kills): each worker reports its pid and the pid of a
# process it started on the pipe `report`, then trains for ever
_CALLER = r"""
import os, subprocess, sys, tempfile
import torch, hooklab
report, tempfile.tempdir = int(sys.argv[1]), sys.argv[2]
if sys.argv[3] == "handled":   # the usual SIGTERM handler: raise SystemExit, so that every `finally` runs
    import signal
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))

def train(rank, world_size):
    child = subprocess.Popen(["sleep", "3600"])
    os.write(report, f"{os.getpid()} {child.pid} {os.getpgid(0)}\n".encode())
    w = torch.ones(64, requires_grad=True)
    while True:
        (w * 2.0).sum().backward()

hooklab.run_workers(train, world_size=2, timeout=3600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the guard and the parent-death signal are tested "
                    "on Linux (pidfd waits)")
@pytest.mark.parametrize("signum, how", [(signal.SIGTERM, "default"), (signal.SIGKILL, "default"),
                                         (signal.SIGTERM, "handled")],
                         ids=["SIGTERM", "SIGKILL", "SIGTERM-as-SystemExit"])
def test_no_worker_outlives_a_caller_that_is_terminated_or_killed(tmp_path, signum, how):
    """Review round 3, N-a: a SIGTERM or SIGKILL to the caller left both workers training for ever (4 of 4 trials,
    30 s later) and the rendezvous folder in place. The caller here is killed while its workers train; every
    worker, every process a worker started and the guard must end, as events (no sleep), and the folder go."""
    read_end, write_end = os.pipe()
    caller = subprocess.Popen([sys.executable, "-c", _CALLER, str(write_end), str(tmp_path), how],
                              pass_fds=(write_end,), cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    os.close(write_end)
    report = os.fdopen(read_end, "rb", buffering=0)
    pids = []
    try:
        lines = [read_line(report, "a worker of the killed caller to report its pid", 120) for _ in range(2)]
        workers, children, groups = zip(*(map(int, line.split()) for line in lines))
        pids = [*workers, *children, groups[0]]
        assert groups[0] == groups[1] and groups[0] not in workers  # one group, led by the guard
        assert glob.glob(str(tmp_path / "hooklab-workers-*"))  # the rendezvous folder, in use
        caller.send_signal(signum)
        assert caller.wait(timeout=60) in (-signum, 143)
        wait_until_gone(pids, f"the workers, the processes they started and the guard to end after "
                              f"{signal.Signals(signum).name} to the caller", 60)
        assert not glob.glob(str(tmp_path / "hooklab-workers-*")), "the rendezvous folder was left"
    finally:
        caller.kill()
        caller.wait()
        report.close()
        caller.stdout.close()
        for pid in pids:
            if running(pid):
                os.kill(pid, signal.SIGKILL)


AFTER_COMPILE = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
from torch import nn
import hooklab
from ddp_step import ddp_step

compiled = torch.compile(nn.Linear(3, 3), backend="eager")
compiled(torch.randn(2, 3)).sum().backward()  # autograd's worker threads are running now: a fork cannot use autograd
try:
    hooklab.run_workers(lambda rank, world: rank, timeout=60)
except RuntimeError as error:
    print("refused:", "before compiling" in str(error) and "importable module" in str(error))


def claims_a_module(rank, world):  # as a doctest's function: its __module__ is a real module that does not hold it
    return rank


claims_a_module.__module__ = "ddp_step"
try:
    hooklab.run_workers(claims_a_module, timeout=60)
except RuntimeError as error:
    print("refused too:", "importable module" in str(error))
print("spawned:", hooklab.run_workers(ddp_step, timeout=float(sys.argv[2])))
"""


def test_after_a_compiled_backward_the_workers_are_spawned_or_refused_clearly(tmp_path):
    """PyTorch refuses autograd in a process forked after a compiled model's backward ("Unable to handle autograd's
    threading in combination with fork-based multiprocessing"): run_workers sees it before forking, starts the
    workers with 'spawn' when fn is importable (a DDP backward then works in them) and otherwise says what to do, also
    for a function whose module does not hold it (a doctest's: it failed to pickle). In a subprocess, so that this test process can still fork."""
    from patience import hang_guard

    (tmp_path / "ddp_step.py").write_text(
        "import torch\nfrom torch import nn\nfrom torch.nn.parallel import DistributedDataParallel\n\n\n"
        "def ddp_step(rank, world):\n    model = DistributedDataParallel(nn.Linear(3, 3))\n"
        "    model(torch.ones(2, 3)).sum().backward()\n    return rank\n", encoding="utf-8")
    limit = hang_guard(240)
    try:
        done = subprocess.run([sys.executable, "-c", AFTER_COMPILE, str(tmp_path), str(limit / 2)],
                              capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang guard: the script (a compile, then two run_workers calls) did not end within {limit:.0f} s")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-3:] == ["refused: True", "refused too: True", "spawned: [0, 1]"], \
        done.stdout + done.stderr
