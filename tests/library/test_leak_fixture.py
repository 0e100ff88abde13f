"""The library tests' autouse leak check (tests/library/conftest.py, with tests/leftovers.py) fails a test that leaves
global state behind, says what it left, and puts it back so that the next test starts clean.

It runs a small test file, next to a copy of that conftest, in a pytest of its own (a subprocess: the leaks are real).
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from patience import hang_guard

LEAKING_TESTS = '''
import pytest
import torch
from torch import nn


def print_output(module, args, output):
    pass


def test_forward_hook():
    nn.modules.module.register_module_forward_hook(print_output)


def test_forward_hook_kept_after_a_failure():
    nn.modules.module.register_module_forward_hook(print_output, always_call=True)
    assert False, "the test's own failure"


def test_optimizer_hook():
    from torch.optim.optimizer import register_optimizer_step_pre_hook
    register_optimizer_step_pre_hook(lambda opt, args, kwargs: None)


def pack(t):
    return t


def unpack(t):
    return t


def test_saved_tensors_context():
    torch.autograd.graph.saved_tensors_hooks(pack, unpack).__enter__()
    torch.autograd.graph.saved_tensors_hooks(pack, unpack).__enter__()


def test_grad_mode():
    torch.set_grad_enabled(False)


kept = []  # a context object that is freed undoes itself: these are kept entered


def test_inference_mode():
    kept.append(torch.inference_mode())
    kept[-1].__enter__()


def test_default_dtype_and_anomaly_mode():
    torch.set_default_dtype(torch.float64)
    torch.set_anomaly_enabled(True, check_nan=False)


def test_disabled_saved_tensors_hooks():
    kept.append(torch.autograd.graph.disable_saved_tensors_hooks("off"))
    kept[-1].__enter__()


def test_clean_code_passes():
    handle = nn.modules.module.register_module_forward_hook(print_output)
    handle.remove()
    with torch.no_grad(), torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        torch.ones(1) * 2


@pytest.mark.leaves_global_state(reason="checked by the test after it")
def test_marked_is_not_checked():
    torch.set_grad_enabled(False)


@pytest.mark.leaves_global_state(reason="undoes the marked test before it")
def test_after_the_marked_one_grad_is_still_off():
    assert not torch.is_grad_enabled()
    torch.set_grad_enabled(True)


def test_zzz_everything_was_put_back():
    from hooklab import hook_inventory
    from hooklab import _torch_internals as internals
    assert hook_inventory(None) == [] and internals.global_optimizer_hook_dicts()[0][2] == {}
    assert [d for _a, _k, d in internals.global_hook_dicts() if d] == []
    assert internals.top_saved_tensors_hooks() is None
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
    assert torch.get_default_dtype() == torch.float32
    assert not torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled()
    assert torch._C._autograd._saved_tensors_hooks_is_enabled()
    assert (torch.ones(1, requires_grad=True) * 2).requires_grad
'''


def run_leaking_tests(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """Run LEAKING_TESTS with the library conftest; its output and each test's outcome by name."""
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    shutil.copy(Path(__file__).parents[1] / "leftovers.py", tmp_path / "leftovers.py")  # what that conftest reads
    (tmp_path / "test_leaks.py").write_text(LEAKING_TESTS)
    # no plugin installed in the environment is loaded (nbval, doctestplus, xdist, ...): they are not needed here and
    # loading them took half of the subprocess's ~8 s of CPU
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "-rA", "-c", "/dev/null",
         "--rootdir", str(tmp_path), "-o", "markers=leaves_global_state: on purpose", str(tmp_path)],
        capture_output=True, text=True, timeout=hang_guard(240), cwd=tmp_path,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    out = done.stdout + done.stderr
    outcomes = {}
    for line in out.splitlines():  # -rA's short summary: "PASSED test_leaks.py::name", "ERROR test_leaks.py::name ..."
        found = re.match(r"(PASSED|FAILED|ERROR) test_leaks\.py::(\w+)", line)
        if found:
            outcomes.setdefault(found[2], set()).add(found[1])
    return out, {name: "+".join(sorted(kinds)) for name, kinds in outcomes.items()}


def test_a_leaking_test_fails_naming_what_it_left_and_the_next_one_starts_clean(tmp_path):
    out, outcomes = run_leaking_tests(tmp_path)
    assert outcomes == {
        "test_forward_hook": "ERROR+PASSED",  # the test passed, its tear-down failed
        "test_forward_hook_kept_after_a_failure": "ERROR+FAILED",
        "test_optimizer_hook": "ERROR+PASSED",
        "test_saved_tensors_context": "ERROR+PASSED",
        "test_grad_mode": "ERROR+PASSED",
        "test_inference_mode": "ERROR+PASSED",
        "test_default_dtype_and_anomaly_mode": "ERROR+PASSED",
        "test_disabled_saved_tensors_hooks": "ERROR+PASSED",
        "test_clean_code_passes": "PASSED",
        "test_marked_is_not_checked": "PASSED",
        "test_after_the_marked_one_grad_is_still_off": "PASSED",
        "test_zzz_everything_was_put_back": "PASSED",
    }, out
    expected = [
        "test_leaks.py::test_forward_hook left global state behind",
        "  (global)  forward hook  print_output",
        "test_leaks.py::test_forward_hook_kept_after_a_failure left global state behind",
        "  (global)  optimizer_step_pre hook  test_optimizer_hook.<lambda>",
        "  (this thread)  saved_tensors hook  pack / unpack",
        "  grad mode (torch.is_grad_enabled()): True before the test, False after it",
        "  inference mode (torch.is_inference_mode_enabled()): False before the test, True after it",
        "  default dtype (torch.get_default_dtype()): torch.float32 before the test, torch.float64 after it",
        "  anomaly mode, NaN check (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()): "
        "(False, True) before the test, (True, False) after it",
        "  saved-tensor hooks enabled (torch.autograd.graph.disable_saved_tensors_hooks): True before the test, "
        "False after it",
    ]
    missing = [line for line in expected if line not in out]
    assert missing == [], out


SPAWN_THEN_LEAVE = """
import multiprocessing as mp, subprocess, sys
sys.path.insert(0, sys.argv[1])
from leftovers import FileSnapshot

before = FileSnapshot()
p = mp.get_context("spawn").Process(target=print, args=("a spawned worker",))
p.start(); p.join(60)
print("after a spawn:", before.left())
sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("after a sleeper:", [line.split(" (")[0] for line in before.left()] == [f"child process {sleeper.pid}"])
"""


def test_the_resource_tracker_a_spawn_starts_is_no_leftover_and_a_real_child_still_is():
    """The first 'spawn' in a process starts multiprocessing's resource tracker, which lives as long as the
    interpreter: the file that happened to spawn first must not fail for it (in one order of the gate five files did,
    each after the tracker killed by the file before had been started again), and a child a test leaves still counts.
    In a fresh interpreter, so that the tracker starts inside the snapshot."""
    done = subprocess.run([sys.executable, "-c", SPAWN_THEN_LEAVE, str(Path(__file__).parents[1])],
                          capture_output=True, text=True, timeout=hang_guard(120))
    assert done.stdout.splitlines()[-2:] == ["after a spawn: []", "after a sleeper: True"], done.stdout + done.stderr


def test_the_kind_of_global_backward_hooks_is_put_back_after_a_test_that_removed_its_hook():
    """torch sets its flag for global backward hooks (full or old-style) with the first one and never resets it when
    the hook is removed: in one order of the gate a test that registered and removed a full one made a later test's
    old-style global backward hook raise. The flag is a setting the fixture reads and puts back."""
    import torch

    from leftovers import Snapshot

    before = Snapshot()
    try:
        torch.nn.modules.module.register_module_full_backward_hook(lambda *args: None).remove()
        assert any("_global_is_full_backward_hook" in line for line in before.changed("other"))
        before.put_back()
        torch.nn.modules.module.register_module_backward_hook(lambda *args: None).remove()  # raised while the flag stayed
    finally:
        before.put_back()


def test_a_logger_level_a_test_set_is_put_back_and_a_message_it_hid_is_shown_again():
    """transformers' and diffusers' ``set_verbosity_error`` set their library's logger to ERROR for the process: left
    so by one test, a later message trigger of a diffusers warning showed nothing in one order of the gate. The
    loggers' levels are a setting the fixture reads and puts back, ``logging.disable`` with them."""
    import logging

    from hooklab.course.programs import shown
    from leftovers import Snapshot

    logger = logging.getLogger("hooklab.test_leak_fixture")
    logger.setLevel(logging.WARNING)  # configured, as a library configures its loggers when it is imported
    before = Snapshot()
    try:
        logger.setLevel(logging.ERROR)
        logging.disable(logging.CRITICAL)
        changed = before.changed("other")
        assert any("hooklab.test_leak_fixture" in line and "logging.disable" in line for line in changed), changed
        assert shown(lambda: logger.warning("a library's warning")) == ""
        before.put_back()
        assert before.changed("other") == []
        assert shown(lambda: logger.warning("a library's warning")) == "WARNING: a library's warning"
    finally:
        before.put_back()
        logger.setLevel(logging.NOTSET)
