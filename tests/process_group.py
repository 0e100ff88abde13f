"""Shared by the tests that start a server in its own session (`./course lab`): start it so that it cannot outlive
the test run, and end it with its children."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _ends_with(parent_pid: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` (Linux): the started process gets SIGTERM when ``parent_pid`` ends, however it ends
    (also SIGKILL, where no ``finally`` runs). It survives ``exec`` (``./course`` execs Python, which execs
    ``jupyter lab``), so the server itself gets the signal and shuts its kernels down."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)  # loaded now: the child must not load libraries between fork and exec

    def preexec() -> None:
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            os._exit(126)  # no way to tie the child to this process: do not start it at all
        if os.getppid() != parent_pid:  # the parent died before prctl: the signal would never come
            os._exit(126)
    return preexec


def start_process_group(argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(argv)`` in a session of its own (so :func:`stop_process_group` can end the whole group)
    whose leader ends when this process ends, even when this process is SIGKILLed (a CI job's time limit):
    no orphaned JupyterLab is left behind."""
    return subprocess.Popen(argv, start_new_session=True, preexec_fn=_ends_with(os.getpid()), **kwargs)


def stop_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process's whole group (the server; it shuts down its kernels, which run in sessions of their
    own and also exit when the server is gone), SIGKILL it if it is still there after 20 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass
