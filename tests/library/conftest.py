"""Every library test leaves the process as it found it, and fails when it does not.

The root conftest.py puts back, after every test of every folder, what it changed in the process
(tests/leftovers.py). Here, in tests/library/, a test that leaves a global module or optimizer hook, a saved-tensor hook
context still entered, or a changed autograd or dtype setting (grad mode, inference mode, saved-tensor hooks
disabled, anomaly mode and its NaN check, the default dtype) also fails: an error at tear-down naming each hook and
setting with its value before and after; hooklab's tools must never leave one. A test that leaves something on
purpose says so with ``@pytest.mark.leaves_global_state(reason="...")``: it is then neither checked nor cleaned here
(the root fixture still puts it back).
"""
from __future__ import annotations

import pytest

import hooklab
from leftovers import Snapshot


@pytest.fixture(autouse=True)
def leaves_nothing_behind(request):
    """Fail a library test that leaves a global hook, a saved-tensor hook context or a changed autograd / dtype
    setting behind, naming what; then put it back. ``@pytest.mark.leaves_global_state(reason=...)`` opts out."""
    if request.node.get_closest_marker("leaves_global_state") is not None:
        yield
        return
    before = Snapshot()
    leak = None
    try:
        with hooklab.no_hooks_left_behind():  # no owner: the global module/optimizer hooks and saved-tensor context
            yield
    except hooklab.HooksLeftBehind as found:
        leak = found
    lines = [f"  {e.where}  {e.kind} hook  {e.hook}" for e in leak.entries] if leak is not None else []
    lines += [f"  {line}" for line in before.changed("autograd")]
    if lines:
        before.put_back()
        pytest.fail(f"{request.node.nodeid} left global state behind (put back now, so the tests after it start "
                    f"clean; undo it in a finally or a with block, or mark the test "
                    f"@pytest.mark.leaves_global_state(reason=...)):\n" + "\n".join(lines), pytrace=False)
