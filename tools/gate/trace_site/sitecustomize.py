"""Started first in every Python process of a traced test run (``./course test --trace`` puts this folder first on
PYTHONPATH): records what the process runs and reads for the check that started it (tools/gate/trace.py)."""
import os

if os.environ.get("HOOKLAB_GATE_TRACE"):
    try:
        from tools.gate import trace as _trace
    except ImportError:  # the repository is not on this process's path: nothing is recorded
        pass
    else:
        _trace.start_in_child()
