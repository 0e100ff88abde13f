"""Every library test leaves the process as it found it.

The autouse fixture ``leaves_nothing_behind`` compares, before and after each test in tests/library/ (its fixtures'
set-up and tear-down included):

- the global hooks: torch.nn.modules.module's global module hooks and torch.optim.optimizer's global optimizer
  hooks, and the saved-tensor hook contexts (``torch.autograd.graph.saved_tensors_hooks``) still entered, read
  through hooklab's own :func:`hooklab.no_hooks_left_behind`;
- the process-wide autograd and tensor settings: grad mode, inference mode, whether saved-tensor hooks are
  disabled, anomaly mode (and its NaN check) and the default dtype.

A test that changes any of them fails (an error at tear-down, naming each hook and each setting with its value before
and after), and what it left is put back so that the next test starts clean. A test that leaves something on
purpose says so with ``@pytest.mark.leaves_global_state(reason="...")``: it is then neither checked nor cleaned.
"""
from __future__ import annotations

import pytest
import torch

# the flags torch keeps next to the global hooks, keyed by the same handle ids
import torch.nn.modules.module as _module_globals

import hooklab
from hooklab import _torch_internals as internals

_kept_guards: list = []  # inference-mode guards entered to undo a leaked one (a guard is undone when it is freed)


def _set_inference_mode(mode: bool) -> None:
    # torch has no setter: a guard object sets the mode until it is freed, so the guard is kept
    guard = torch._C._InferenceMode(mode)
    guard.__enter__()
    _kept_guards.append(guard)


def _set_saved_tensors_hooks_enabled(enabled: bool) -> None:
    if enabled:
        torch._C._autograd._saved_tensors_hooks_enable()
    else:
        torch._C._autograd._saved_tensors_hooks_disable("disabled before this test (put back by tests/library/conftest.py)")


# name: (read it, set it back); inference mode before grad mode, since leaving inference mode sets grad mode
SETTINGS = {
    "inference mode (torch.is_inference_mode_enabled())": (torch.is_inference_mode_enabled, _set_inference_mode),
    "grad mode (torch.is_grad_enabled())": (torch.is_grad_enabled, torch.set_grad_enabled),
    "saved-tensor hooks enabled (torch.autograd.graph.disable_saved_tensors_hooks)":
        (torch._C._autograd._saved_tensors_hooks_is_enabled, _set_saved_tensors_hooks_enabled),
    "anomaly mode, NaN check (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())":
        (lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
         lambda mode: torch.set_anomaly_enabled(*mode)),
    "default dtype (torch.get_default_dtype())": (torch.get_default_dtype, torch.set_default_dtype),
}


def settings() -> dict[str, object]:
    """The process-wide settings a test must not change, by name."""
    return {name: read() for name, (read, _set) in SETTINGS.items()}


def global_hook_keys() -> list[tuple[str, set]]:
    """Each global hook dict (module and optimizer hooks, and the flags kept beside them) with its keys now."""
    dicts = [(attr, d) for attr, _kind, d in internals.global_hook_dicts() + internals.global_optimizer_hook_dicts()]
    dicts += [(attr, getattr(_module_globals, attr)) for attr in internals.GLOBAL_HOOK_FLAGS
              if isinstance(getattr(_module_globals, attr, None), dict)]
    return [(attr, set(d)) for attr, d in dicts]


def _dict_named(attr: str) -> dict:
    import torch.optim.optimizer as optimizer_globals
    found = getattr(_module_globals, attr, None)
    return found if isinstance(found, dict) else getattr(optimizer_globals, attr)


def put_back(hook_keys: list[tuple[str, set]], full_backward: object, saved_top: object,
             before: dict[str, object]) -> None:
    """Remove the global hooks added since ``hook_keys`` was read, leave the saved-tensor contexts entered since,
    and set every setting of :func:`settings` back to its value in ``before``."""
    for attr, keys in hook_keys:
        hooks = _dict_named(attr)
        for key in set(hooks) - keys:
            del hooks[key]
    _module_globals._global_is_full_backward_hook = full_backward
    for _ in range(1000):  # a bound: a leak is a few contexts, never an endless stack
        if internals.top_saved_tensors_hooks() == saved_top or not internals.pop_saved_tensors_hooks():
            break
    for name, (_read, set_back) in SETTINGS.items():
        if settings()[name] != before[name]:
            set_back(before[name])


def describe(leak: hooklab.HooksLeftBehind | None, before: dict[str, object], after: dict[str, object]) -> str:
    """What the test left behind, one line each (empty when nothing)."""
    lines = []
    if leak is not None:
        lines += [f"  {e.where}  {e.kind} hook  {e.hook}" for e in leak.entries]
    lines += [f"  {name}: {before[name]} before the test, {after[name]} after it"
              for name in before if before[name] != after[name]]
    return "\n".join(lines)


@pytest.fixture(autouse=True)
def leaves_nothing_behind(request):
    """Fail a library test that leaves a global hook, a saved-tensor hook context or a changed autograd / dtype
    setting behind, naming what; then put it back. ``@pytest.mark.leaves_global_state(reason=...)`` opts out."""
    if request.node.get_closest_marker("leaves_global_state") is not None:
        yield
        return
    before, hook_keys = settings(), global_hook_keys()
    full_backward, saved_top = internals.global_full_backward(), internals.top_saved_tensors_hooks()
    leak = None
    try:
        with hooklab.no_hooks_left_behind():  # no owner: the global module/optimizer hooks and saved-tensor context
            yield
    except hooklab.HooksLeftBehind as found:
        leak = found
    after = settings()
    left = describe(leak, before, after)
    if left:
        put_back(hook_keys, full_backward, saved_top, before)
        pytest.fail(f"{request.node.nodeid} left global state behind (put back now, so the tests after it start "
                    f"clean; undo it in a finally or a with block, or mark the test "
                    f"@pytest.mark.leaves_global_state(reason=...)):\n{left}", pytrace=False)
