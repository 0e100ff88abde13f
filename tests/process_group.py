"""Shared by the tests that start a server in its own session (`./course lab`): end it with its children."""
import os
import signal
import subprocess


def stop_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process's whole group (server and kernels), SIGKILL it if it is still there after 20 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass
