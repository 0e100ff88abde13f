"""hooklab._saved: a signal whose exception lands in one of hooklab's finalizers is delivered again, outside it.

A finalizer cannot raise: a KeyboardInterrupt (Ctrl-C) or a SIGTERM handler's SystemExit that arrives while one runs
is printed as "Exception ignored in: <finalize object>" and dropped. hooklab's unraisable hook finishes the
finalizer's work and raises that exception again in the main thread, through a one-shot relay on the signal (no
timer, so no race), and never delivers one the program was already handling.

The tests make the signal land in the finalizer deterministically: the finalizer's work itself raises the signal
(``signal.raise_signal``, whose handler runs right there) or a handler the test controls raises the exception. They
wait for the exception as an event (a blocking wait that only the exception ends), bounded by a hang guard.
"""
from __future__ import annotations

import gc
import os
import re
import signal
import sys
import threading
import types
import weakref
from pathlib import Path

import pytest

from hooklab import _saved
from hooklab._saved import Finalizer
from patience import HangGuard, hang_guard, python

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True, scope="module")
def ctrl_c_raises():
    """Python's own SIGINT handler while these tests run: a process started in the background by a non-interactive
    shell (``cmd &``, ``nohup``) inherits SIGINT ignored, and then no Ctrl-C reaches Python at all."""
    before = signal.getsignal(signal.SIGINT)
    if before == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)
WAIT_S = 60  # hang guard (idle machine) for an exception delivered again: it comes within milliseconds


class Owner:
    """What a finalizer is attached to (any object that can be weakly referenced)."""


def raises_once(signum: int):
    """A finalizer's work that raises ``signum`` inside itself the first time (its handler runs right there) and
    finishes quietly when redone."""
    calls = []

    def work():
        calls.append(signum)
        if len(calls) == 1:
            signal.raise_signal(signum)
    work.calls = calls
    return work


def wait_for_the_exception_again(what: str) -> None:
    """Block until an exception delivered again ends the wait; fail at the hang guard if none comes (a lock
    acquire in the main thread is interrupted by a signal, and the relay's exception leaves it)."""
    __tracebackhide__ = True
    if threading.Event().wait(hang_guard(WAIT_S)):
        raise AssertionError("not reached")
    pytest.fail(f"hang guard: {what} was not delivered again (waited {hang_guard(WAIT_S):.0f} s)")


@pytest.fixture
def reported(monkeypatch):
    """What reaches the unraisable hook that was there before hooklab's (what Python would print as
    "Exception ignored"): hooklab's hook is installed on top of a spy."""
    seen: list = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: seen.append(unraisable.exc_value))
    _saved._redeliver_interrupts()
    assert getattr(sys.unraisablehook, "_hooklab", False)
    yield seen


@pytest.fixture
def sigterm_raises_system_exit():
    """A SIGTERM handler as a training script writes it (save a checkpoint on preemption, then exit): it counts its
    calls and raises SystemExit(143)."""
    calls = []

    def handler(signum, frame):
        calls.append(signum)
        raise SystemExit(143)

    before = signal.signal(signal.SIGTERM, handler)
    try:
        yield calls
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_sigterm_handlers_system_exit_inside_a_finalizer_is_raised_again_outside(reported,
                                                                                   sigterm_raises_system_exit):
    """Review round 3, N-b: a SIGTERM whose handler raises SystemExit was swallowed by SaveOnDisk's finalizer (5 of
    28 trials): the program trained on. It must leave the finalizer: the same SystemExit, the handler run once, the
    finalizer's work finished, nothing printed, the handler put back."""
    work = []

    def remove_files():
        work.append("started")
        if len(work) == 1:
            signal.raise_signal(signal.SIGTERM)  # the handler runs here, inside the finalizer
        work.append("done")

    owner = Owner()
    Finalizer(owner, remove_files)
    with pytest.raises(SystemExit) as raised:
        del owner  # the finalizer runs now (reference counting)
        wait_for_the_exception_again("the SIGTERM handler's SystemExit")
    assert raised.value.code == 143
    assert sigterm_raises_system_exit == [signal.SIGTERM]  # the handler ran once: its exception was delivered again
    assert work == ["started", "started", "done"]  # the interrupted work was redone
    assert reported == []  # nothing printed as "Exception ignored"
    assert signal.getsignal(signal.SIGTERM).__name__ == "handler"  # the program's handler is back


def test_a_ctrl_c_inside_a_finalizer_is_raised_again_outside(reported):
    work = []

    def remove_files():
        work.append("started")
        if len(work) == 1:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C: the default handler raises KeyboardInterrupt here
        work.append("done")

    owner = Owner()
    Finalizer(owner, remove_files)
    with pytest.raises(KeyboardInterrupt):
        del owner
        wait_for_the_exception_again("the KeyboardInterrupt")
    assert work == ["started", "started", "done"] and reported == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_interrupt_that_ends_as_another_error_in_a_finalizer_is_raised_again(reported):
    """D2, found by CI: a Ctrl-C inside a finalizer's ``shutil.rmtree`` can surface as the OSError that rmtree's own
    clean-up raised (the KeyboardInterrupt only in ``__context__``); that interrupt is raised again."""
    calls = []

    def remove_folder():
        calls.append(1)
        if len(calls) == 1:
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                raise OSError(9, "Bad file descriptor")  # noqa: B904 (what the clean-up raised on the way out, in the interrupt's context: the chain is what the test checks)

    owner = Owner()
    finalizer = Finalizer(owner, remove_folder)
    with pytest.raises(KeyboardInterrupt) as raised:
        del owner
        wait_for_the_exception_again("the KeyboardInterrupt behind an OSError")
    assert calls == [1, 1] and not finalizer.alive and reported == []
    assert raised.value.__traceback__ is not None


def test_an_error_in_a_finalizer_during_the_programs_own_except_block_is_no_second_interrupt(reported):
    """Review round 3, N-f: an unrelated error in a hooklab finalizer while the program's ``except
    KeyboardInterrupt:`` block runs (a file that could not be deleted) has that interrupt as its ``__context__``; it
    was taken for a new one and a phantom second interrupt broke the program's graceful shutdown. It is reported like
    any error in a finalizer, and no signal is sent again."""
    def remove_file():
        raise PermissionError(13, "Permission denied")

    owner = Owner()
    Finalizer(owner, remove_file)
    try:
        raise KeyboardInterrupt  # the user's Ctrl-C, being handled
    except KeyboardInterrupt:
        del owner  # the finalizer fails inside the except block
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # no delivery set up
        assert _saved._PENDING == {}
    assert [type(e) for e in reported] == [PermissionError]  # printed, as every error in a finalizer is
    assert isinstance(reported[0].__context__, KeyboardInterrupt)  # ... with the user's interrupt as its context


def test_a_new_interrupt_inside_a_finalizer_during_the_programs_except_block_is_still_raised_again(reported):
    """The converse of the phantom: a second, real Ctrl-C that lands in the finalizer while the program handles the
    first is raised again (the chain is cut where the program's own exception begins, not ignored)."""
    calls = []

    def remove_file():
        calls.append(1)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)

    owner = Owner()
    Finalizer(owner, remove_file)
    first = KeyboardInterrupt("first")
    with pytest.raises(KeyboardInterrupt) as raised:
        try:
            raise first
        except KeyboardInterrupt:
            del owner
            wait_for_the_exception_again("the second KeyboardInterrupt")
    assert raised.value is not first and calls == [1, 1] and reported == []


def test_a_signal_delivered_again_waits_until_hooklabs_finalizer_code_has_returned(reported):
    """No race: the relay runs at the main thread's next bytecode; when that is still inside a hooklab finalizer
    (here one that runs on and on), the exception would be lost there again: the relay asks for the signal once
    more and returns, and the exception comes once that finalizer has finished."""
    second_done = []
    first_work = raises_once(signal.SIGINT)

    def second_work():  # runs Python code until the relay has been turned away at least once inside it
        guard = HangGuard(WAIT_S, "the relay to run inside the second finalizer")
        deferred = _saved._DEFERRED[0]
        while _saved._DEFERRED[0] == deferred:
            if guard.left() <= 0:
                guard.fail()
        second_done.append(True)

    first, second = Owner(), Owner()
    Finalizer(first, first_work)
    Finalizer(second, second_work)
    with pytest.raises(KeyboardInterrupt):
        # one statement, no bytecode of the test between the two finalizers: the interrupt is lost in the first
        # (the relay is set up), the signal comes while the second runs (the relay defers)
        del first, second
        wait_for_the_exception_again("the KeyboardInterrupt, after the second finalizer")
    assert second_done == [True] and reported == []


def test_an_exception_delivered_again_that_lands_in_another_finalizer_is_delivered_once_more(reported):
    """Anyone's finalizer (here a plain ``weakref.finalize``) may be the next Python code the main thread runs:
    the exception delivered again is marked, and hooklab's hook delivers it once more."""
    our_work = raises_once(signal.SIGINT)

    def their_work():  # loops until the relay's KeyboardInterrupt ends it
        guard = HangGuard(WAIT_S, "the relay's KeyboardInterrupt inside the other finalizer")
        while guard.left() > 0:
            pass
        guard.fail()

    ours, theirs = Owner(), Owner()
    Finalizer(ours, our_work)
    weakref.finalize(theirs, their_work)
    with pytest.raises(KeyboardInterrupt) as raised:
        del ours, theirs  # one statement: the next Python code after hooklab's finalizer is the other one
        wait_for_the_exception_again("the KeyboardInterrupt that landed in another finalizer")
    assert getattr(raised.value, _saved._REDELIVERED) == signal.SIGINT
    assert reported == []


def test_an_error_in_another_finalizer_goes_to_the_previous_hook(reported):
    def their_work():
        raise KeyboardInterrupt  # not hooklab's finalizer, not a signal hooklab delivered: not hooklab's business

    theirs = Owner()
    weakref.finalize(theirs, their_work)
    del theirs
    assert [type(e) for e in reported] == [KeyboardInterrupt] and _saved._PENDING == {}


# ------------------------------------------------------------------- real signals in real processes
_CTRL_C_CHILD = r"""
import os, signal, sys, threading, time
import torch, hooklab
torch.set_num_threads(1)
torch.manual_seed(0)
x = torch.randn(1500, 1500, requires_grad=True)
w = torch.randn(1500, 1500, requires_grad=True)
with hooklab.SaveOnDisk(min_bytes=0, directory=sys.argv[1]):
    y = x.tanh() @ (w * 1.0)        # w * 1.0: not a parameter, so its copy is on disk and freed after mm's backward
inner = sys.unraisablehook
def spy(unraisable):
    print("unraisable", type(unraisable.exc_value).__name__, type(unraisable.object).__name__, flush=True)
    inner(unraisable)
sys.unraisablehook = spy
def arm(grad):                      # a real SIGINT while mm's backward computes (C++, no Python running)
    threading.Timer(0.25, os.kill, (os.getpid(), signal.SIGINT)).start()
y.grad_fn.register_prehook(arm)
try:
    y.sum().backward()
    threading.Event().wait(float(sys.argv[2]))  # the interrupt ends this wait, wherever it landed
    print("NOT interrupted", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.timeout(400)
def test_a_real_ctrl_c_that_lands_in_a_finalizer_is_not_swallowed(tmp_path):
    """D2: the first Python code after a long C++ backward step is often a finalizer (a file of SaveOnDisk freed);
    a KeyboardInterrupt raised there was printed as "Exception ignored" and dropped. The first Ctrl-C must stop
    the program. Where the real signal lands is a matter of timing (the tests above make it land in a finalizer
    every time); the verdict is not: the program is interrupted, nothing is printed, nothing is left on disk."""
    seen_in_finalizer = False
    for _ in range(3):
        run = python(_CTRL_C_CHILD, str(tmp_path), str(hang_guard(WAIT_S)), what="a program interrupted by Ctrl-C "
                     "during backward to end", seconds=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert "interrupted" in run.stdout.split() and "NOT interrupted" not in run.stdout, run.stdout + run.stderr
        assert "Exception ignored" not in run.stderr, run.stderr
        assert os.listdir(tmp_path) == []  # and nothing left on disk
        # the interrupt itself, or an error its handling raised (rmtree's clean-up: OSError), inside our finalizer
        seen_in_finalizer |= re.search(r"unraisable \w+ Finalizer", run.stdout) is not None
        if seen_in_finalizer:
            break
    if not seen_in_finalizer:
        pytest.skip("in 3 runs the real signal never landed in a finalizer (timing); the tests above make it land "
                    "there every time")


_SIGTERM_CHILD = r"""
import os, signal, sys, threading
import torch, hooklab
torch.manual_seed(0)
real_remove, removed = os.remove, []
def remove(path):                    # SIGTERM while SaveOnDisk's finalizer deletes its 2nd file
    removed.append(path)
    if len(removed) == 2:
        signal.raise_signal(signal.SIGTERM)
    real_remove(path)
os.remove = remove
def preempted(signum, frame):         # save a checkpoint, then stop: the usual preemption handler
    print("checkpoint saved", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, preempted)
net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh())
with hooklab.SaveOnDisk(min_bytes=0, directory=sys.argv[1]):
    loss = net(torch.randn(32, 64)).sum()
loss.backward()
del loss
threading.Event().wait(float(sys.argv[2]))   # the SystemExit ends this wait
print("NOT stopped: training on", flush=True)
"""


@pytest.mark.timeout(300)
def test_a_sigterm_during_save_on_disk_backward_stops_the_program(tmp_path):
    """N-b in a real program: SIGTERM (its handler saves and raises SystemExit) while SaveOnDisk deletes a file in
    its finalizer. The program must stop with the handler's exit code, once, leaving no file."""
    run = python(_SIGTERM_CHILD, str(tmp_path), str(hang_guard(WAIT_S)), what="a program stopped by SIGTERM "
                 "during backward to end", seconds=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 143, run.stdout + run.stderr
    assert run.stdout.split("\n").count("checkpoint saved") == 1 and "NOT stopped" not in run.stdout
    assert "Exception ignored" not in run.stderr, run.stderr
    assert os.listdir(tmp_path) == []


def test_the_hook_reports_what_it_cannot_deliver_again_from_another_thread(reported):
    """Signal handlers run in the main thread only: an exception in another thread's hooklab finalizer cannot be a
    signal's; the hook reports it as Python would."""
    owner = Owner()
    finalizer = Finalizer(owner, lambda: None)
    errors = []

    def other():
        try:
            sys.unraisablehook(types.SimpleNamespace(exc_type=SystemExit, exc_value=SystemExit(3),
                                                     exc_traceback=None, err_msg=None, object=finalizer))
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert errors == [] and [type(e) for e in reported] == [SystemExit] and _saved._PENDING == {}
    finalizer.detach()
    del owner
    gc.collect()


def test_a_finalizer_whose_work_fails_does_not_stop_the_others_at_exit(tmp_path):
    """Work that fails with an ordinary error stays failed (it is not redone): at interpreter exit CPython's loop
    over the finalizers asserted that the failed one was gone, and the AssertionError ended the loop, so the
    finalizers after it (another tool's folder) never ran. In a subprocess: its exit is what is checked."""
    import subprocess
    import sys

    from patience import hang_guard

    script = (
        "import pathlib, sys\n"
        "from hooklab._saved import Finalizer\n"
        "class Owner: pass\n"
        "def fails(): raise PermissionError(13, 'Permission denied')\n"
        "def writes(): pathlib.Path(sys.argv[1]).write_text('ran')\n"
        "keep = [Owner(), Owner()]\n"
        "Finalizer(keep[0], writes)\n"
        "Finalizer(keep[1], fails)  # the exit loop calls the newest first\n"
    )
    done_file = tmp_path / "done"
    result = subprocess.run([sys.executable, "-c", script, str(done_file)], capture_output=True, text=True,
                            timeout=hang_guard(120))
    assert "PermissionError" in result.stderr  # reported, as every error in a finalizer is
    assert "AssertionError" not in result.stderr, result.stderr
    assert done_file.read_text() == "ran"
