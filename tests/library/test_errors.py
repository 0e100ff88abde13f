"""The exceptions a user may catch live in hooklab.errors, are importable from hooklab, and are what the tools raise."""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import torch
from torch import nn

import hooklab
from hooklab import errors
from patience import hang_guard

pytestmark = pytest.mark.timeout(120)

# the module each exception was defined in before hooklab.errors: those import paths keep working
OLD_HOMES = {
    "NotRecorded": "hooklab.capturing",
    "UnknownModuleError": "hooklab.lookup",
    "HooksLeftBehind": "hooklab.inventory",
    "MissingTorchInternal": "hooklab._torch_internals",
    "NonFiniteError": "hooklab.nonfinite",
    "BudgetError": "hooklab.planner",
    "WorkerError": "hooklab.workers",
}


def _library_modules():
    for info in pkgutil.iter_modules(hooklab.__path__):
        if not info.ispkg:  # hooklab.course is the course, not the library
            yield importlib.import_module(f"hooklab.{info.name}")


def test_every_exception_class_of_the_library_is_defined_in_hooklab_errors():
    defined_elsewhere = sorted(
        f"{module.__name__}.{name}"
        for module in _library_modules() if module is not errors
        for name, obj in vars(module).items()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__
        and not name.startswith("_")
    )
    assert defined_elsewhere == [], "public exceptions belong in hooklab/errors.py"


def test_every_public_exception_is_importable_from_hooklab_errors_and_its_old_home():
    assert sorted(errors.__all__) == sorted([*OLD_HOMES, "HooklabError"])
    for name in OLD_HOMES:
        cls = getattr(errors, name)
        assert inspect.isclass(cls) and issubclass(cls, Exception), name
        assert cls.__module__ == "hooklab.errors", name
        assert name in hooklab.__all__ and getattr(hooklab, name) is cls, name
        assert getattr(importlib.import_module(OLD_HOMES[name]), name) is cls, name


def test_key_error_subclasses_print_their_message_without_quotes():
    assert str(errors.NotRecorded("'fc' has not run yet")) == "'fc' has not run yet"
    assert str(errors.UnknownModuleError("no module 'x'")) == "no module 'x'"


def test_capture_raises_not_recorded():
    model = nn.Sequential(nn.Linear(2, 2))
    with hooklab.capture(model, "0") as store:
        pass
    with pytest.raises(hooklab.NotRecorded, match="has not run yet"):
        store["0"]
    with hooklab.capture(model, "0") as store:
        model(torch.ones(1, 2))
    with pytest.raises(errors.NotRecorded, match="no gradient reached '0'"):
        store.grads["0"]


def test_an_unknown_name_raises_unknown_module_error():
    with pytest.raises(hooklab.UnknownModuleError, match="no submodule 'O'. Names that exist: 0"):
        hooklab.get_module(nn.Sequential(nn.Linear(2, 2)), "O")


def test_a_leaked_hook_raises_hooks_left_behind():
    model = nn.Linear(2, 2)
    handle = None
    try:
        with pytest.raises(hooklab.HooksLeftBehind) as leak:
            with hooklab.no_hooks_left_behind(model):
                handle = model.register_forward_hook(print)
        assert [(e.kind, e.hook) for e in leak.value.entries] == [("forward", "print")]
    finally:
        if handle is not None:
            handle.remove()


def test_a_missing_torch_internal_raises_missing_torch_internal():
    model = nn.Linear(2, 2)
    del model._forward_hooks  # as if torch had renamed its private hook dict
    with pytest.raises(hooklab.MissingTorchInternal, match="torch .* does not have") as missing:
        hooklab.hook_inventory(model, include_global=False)
    assert "Module._forward_hooks" in missing.value.name


def test_find_nonfinite_raises_nonfinite_error():
    model = nn.Sequential(nn.Linear(2, 2))
    with torch.no_grad():
        model[0].weight.fill_(float("inf"))
    with pytest.raises(hooklab.NonFiniteError, match="first non-finite value") as info:
        with hooklab.find_nonfinite(model, raise_first=True):
            model(torch.ones(1, 2))
    assert info.value.event.module == "0"


def test_an_impossible_budget_raises_budget_error():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Sequential(nn.Linear(8, 8), nn.Tanh()))
    x = torch.randn(4, 8)
    planner = hooklab.MemoryPlanner(model, lambda: model(x).sum(), choices=("keep",), repeats=1,
                                    costs=hooklab.CountedCosts(flops_per_s=1e9, copy_bytes_per_s=1e9))
    with pytest.raises(hooklab.BudgetError, match="least this planner can reach"):
        planner.plan(1)


def _fail(rank: int, world_size: int) -> None:
    raise ValueError(f"rank {rank} of {world_size} fails on purpose")


def test_a_failing_worker_raises_worker_error():
    with pytest.raises(hooklab.WorkerError, match="fails on purpose") as info:
        hooklab.run_workers(_fail, world_size=1, timeout=hang_guard(90))
    assert info.value.rank == 0


def test_every_exception_is_a_hooklab_error_and_the_built_in_a_caller_expects():
    expected = {"NotRecorded": KeyError, "UnknownModuleError": KeyError, "HooksLeftBehind": AssertionError,
                "MissingTorchInternal": RuntimeError, "NonFiniteError": RuntimeError, "BudgetError": ValueError,
                "WorkerError": RuntimeError}
    assert sorted(expected) == sorted(OLD_HOMES)
    for name, builtin in expected.items():
        cls = getattr(errors, name)
        assert issubclass(cls, errors.HooklabError) and issubclass(cls, builtin), name
    assert hooklab.HooklabError is errors.HooklabError and "HooklabError" in hooklab.__all__
    with pytest.raises(hooklab.HooklabError):
        with hooklab.capture(nn.Linear(2, 2), "") as store:
            pass
        store[""]


def test_errors_is_a_leaf_module():
    """The exceptions are on the ground floor: errors.py imports nothing from hooklab, not even for type checking."""
    import ast
    tree = ast.parse(inspect.getsource(errors))
    imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [m for m in imported if m is None or m.startswith("hooklab") or not m or m.startswith(".")], imported
    assert all(node.level == 0 for node in ast.walk(tree) if isinstance(node, ast.ImportFrom))
