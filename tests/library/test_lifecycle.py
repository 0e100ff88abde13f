"""The one lifecycle of hooklab's tools (written down in hooklab's package docstring), checked on each tool.

Recorders check their arguments when made, register when their ``with`` block is entered, remove on
exit (also when it raised), record one block only, and refuse to report before they ever recorded.
Functions that register return a HookScope whose ``remove()`` may be called twice.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

import hooklab
from hooklab import hook_inventory, no_hooks_left_behind
from hooklab.scope import Recorder


def model_and_batch():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2)), torch.randn(5, 4, requires_grad=True)


def run(model, x):
    model(x).sum().backward()


# (name, make the recorder, read its results, what it recorded after one forward + backward)
RECORDERS = [
    ("capture", lambda m: hooklab.capture(m, ["0", "2"], grads=True), None,
     lambda store: sorted(store) == ["0", "2"] and sorted(store.grads) == ["0", "2"]),
    ("GradientMonitor", lambda m: hooklab.GradientMonitor(m), lambda r: r.norms(),
     lambda r: r.steps == 1 and sorted(r.norms()) == ["0", "2"]),
    ("ActivationStats", lambda m: hooklab.ActivationStats(m, "1"), lambda r: r.stats(),
     lambda r: len(r.stats()["1"]["mean"]) == 1),
    ("SavedTensorLedger", lambda m: hooklab.SavedTensorLedger(m), lambda r: r.table(),
     lambda r: len(r.records) > 0 and r.activation_bytes > 0),
    ("Tracer", lambda m: hooklab.Tracer(), lambda r: r.table(), lambda r: len(r.events) > 0),
    ("find_nonfinite", lambda m: hooklab.find_nonfinite(m), lambda r: r.table(),
     lambda r: r.steps == 1 and not r.found),
    ("intervene", lambda m: hooklab.intervene(m, {"1": lambda value, call: value * 2}), lambda r: r.table(),
     lambda r: r.calls["1"] == 1 and r.edited["1"] == 1),
]
IDS = [r[0] for r in RECORDERS]


def enter(recorder, model):
    result = recorder.__enter__()
    if isinstance(recorder, hooklab.Tracer):
        recorder.modules(model)
    return result


@pytest.mark.parametrize("name, make, read, recorded", RECORDERS, ids=IDS)
def test_made_registers_nothing_entered_registers_exit_removes(name, make, read, recorded):
    model, x = model_and_batch()
    with no_hooks_left_behind(model):  # constructing a recorder registers nothing
        recorder = make(model)
    assert isinstance(recorder, Recorder)
    with no_hooks_left_behind(model):  # global hooks and saved-tensor contexts included
        result = enter(recorder, model)
        try:
            assert hook_inventory(model) != []
            run(model, x)
        finally:
            recorder.__exit__(None, None, None)
    assert recorded(result), "what was recorded stays readable after the block"


@pytest.mark.parametrize("name, make, read, recorded", RECORDERS, ids=IDS)
def test_exit_after_an_exception_removes_everything(name, make, read, recorded):
    model, x = model_and_batch()
    with no_hooks_left_behind(model), pytest.raises(ZeroDivisionError):
        with make(model) as result:
            if isinstance(result, hooklab.Tracer):
                result.modules(model)
            run(model, x)
            1 / 0


@pytest.mark.parametrize("name, make, read, recorded", RECORDERS, ids=IDS)
def test_one_recorder_records_one_block(name, make, read, recorded):
    model, x = model_and_batch()
    recorder = make(model)
    enter(recorder, model)
    run(model, x)
    recorder.__exit__(None, None, None)
    with no_hooks_left_behind(model):  # a refused second block registers nothing
        with pytest.raises(RuntimeError, match=f"this {type(recorder).__name__} has already recorded its block; "
                                               "make a new one"):
            with recorder:
                pass


READERS = [r for r in RECORDERS if r[2] is not None]


@pytest.mark.parametrize("name, make, read, recorded", READERS, ids=[r[0] for r in READERS])
def test_reading_a_recorder_that_never_recorded_says_how_to_use_it(name, make, read, recorded):
    model, _ = model_and_batch()
    with pytest.raises(RuntimeError, match=r"has recorded nothing: it registers its hooks when its `with` block"):
        read(make(model))


@pytest.mark.parametrize("name, make, read, recorded", RECORDERS, ids=IDS)
def test_remove_stops_recording_early_and_may_be_called_again(name, make, read, recorded):
    model, x = model_and_batch()
    recorder = make(model)
    with recorder:
        if isinstance(recorder, hooklab.Tracer):
            recorder.modules(model)
        run(model, x)
        recorder.remove()
        recorder.remove()
        assert hook_inventory(model) == []  # inside the block: remove() took them off already
        run(model, x)
    recorder.remove()
    assert not recorder.recording


def test_a_failed_registration_is_rolled_back():
    model, _ = model_and_batch()

    class Fails(Recorder):
        def _register(self):
            self.scope.add(model.register_forward_hook(lambda *a: None))
            raise RuntimeError("registration failed half way")

    recorder = Fails()
    with no_hooks_left_behind(model), pytest.raises(RuntimeError, match="half way"):
        with recorder:
            pass
    assert not recorder.recording


@pytest.mark.parametrize("register", [
    lambda m: hooklab.clip_grad_value_hooks(m, 0.1),
    lambda m: hooklab.clip_grad_norm_hooks(m, 1.0),
    lambda m: hooklab.clip_grad_norm_global_hooks(m, 1.0),
    lambda m: hooklab.offload_module(m[0], lambda: hooklab.CompressSaved("bf16")),
], ids=["clip_grad_value_hooks", "clip_grad_norm_hooks", "clip_grad_norm_global_hooks", "offload_module"])
def test_functions_register_now_and_return_a_scope(register):
    model, x = model_and_batch()
    with no_hooks_left_behind(model):
        scope = register(model)
        assert isinstance(scope, hooklab.HookScope) and hook_inventory(model) != []
        run(model, x)
        scope.remove()
        scope.remove()
    with no_hooks_left_behind(model), register(model):
        assert hook_inventory(model) != []
        run(model, x)


def test_options_after_the_first_arguments_are_keyword_only():
    model, _ = model_and_batch()
    with pytest.raises(TypeError, match="positional argument"):
        hooklab.clip_grad_norm_hooks(model, 1.0, 2.0)
    with pytest.raises(TypeError, match="positional argument"):
        hooklab.SaveOnDisk(1024)
    with pytest.raises(TypeError, match="positional argument"):
        hooklab.CompressSaved("bf16", 1024)


# --- every tool, when the code inside its block fails --------------------------------------------------------------
# (name, make the context manager around the step: lambda model, private temp dir -> context manager)
CONTEXTS = [
    ("capture", lambda m, d: hooklab.capture(m, ["0", "2"], grads=True)),
    ("GradientMonitor", lambda m, d: hooklab.GradientMonitor(m)),
    ("ActivationStats", lambda m, d: hooklab.ActivationStats(m, "1")),
    ("SavedTensorLedger", lambda m, d: hooklab.SavedTensorLedger(m)),
    ("clip_grad_value_hooks", lambda m, d: hooklab.clip_grad_value_hooks(m, 0.1)),
    ("clip_grad_norm_hooks", lambda m, d: hooklab.clip_grad_norm_hooks(m, 1.0)),
    ("clip_grad_norm_global_hooks", lambda m, d: hooklab.clip_grad_norm_global_hooks(m, 1.0)),
    ("offload_module", lambda m, d: hooklab.offload_module(m[0], lambda: hooklab.SaveOnDisk(directory=d))),
    ("checkpoint_modules", lambda m, d: hooklab.checkpoint_modules(m, ["0", "2"])),
    ("selective_checkpoint_modules",
     lambda m, d: hooklab.selective_checkpoint_modules(m, "0", policy=[torch.ops.aten.addmm])),
    ("SaveOnCpu", lambda m, d: hooklab.SaveOnCpu()),
    ("SaveOnDisk", lambda m, d: hooklab.SaveOnDisk(directory=d)),
    ("CompressSaved", lambda m, d: hooklab.CompressSaved("int8", min_bytes=0)),
    ("MemoryMeter", lambda m, d: hooklab.MemoryMeter()),
    ("OpCounter", lambda m, d: hooklab.OpCounter()),
    ("named_scope", lambda m, d: hooklab.named_scope("lifecycle-test")),
    ("find_nonfinite", lambda m, d: hooklab.find_nonfinite(m)),
    ("intervene", lambda m, d: hooklab.intervene(m, {"1": lambda value, call: value * 2})),
    ("OverlappedOffload", lambda m, d: hooklab.OverlappedOffload()),
    ("MemoryPlan.apply", lambda m, d: _plan(m).apply()),
]


def _plan(model):
    """A plan that checkpoints the first block (the planner measures each block once, with its own step)."""
    x = torch.randn(5, 4)
    planner = hooklab.MemoryPlanner(model, lambda: model(x).sum(), blocks=["0", "2"], costs=hooklab.CountedCosts(),
                                    choices=("keep", "checkpoint"))
    return planner.plan(budget=planner.baseline_bytes)


def state_of(model, folder):
    return (hooklab.hook_inventory(model), torch.is_grad_enabled(), [m.training for m in model.modules()],
            [name for name, m in model.named_modules() if "forward" in m.__dict__], sorted(folder.iterdir()))


@pytest.mark.parametrize("fails", ["the block", "the model's forward"])
@pytest.mark.parametrize("name, make", CONTEXTS, ids=[c[0] for c in CONTEXTS])
def test_a_failure_inside_any_tool_leaves_nothing_behind(name, make, fails, tmp_path):
    model, x = model_and_batch()
    before = state_of(model, tmp_path)
    bad = torch.randn(5, 3)  # the wrong width: the first Linear raises
    with pytest.raises((ZeroDivisionError, RuntimeError)):
        with make(model, tmp_path):
            if fails == "the block":
                run(model, x)
                1 / 0
            model(bad)
    assert state_of(model, tmp_path) == before


@pytest.mark.parametrize("call", [
    lambda m: hooklab.layer_shapes(m, torch.randn(5, 3)),
    lambda m: hooklab.FeatureExtractor(m, ["0", "2"])(torch.randn(5, 3)),
    lambda m: hooklab.OffloadWrapper(m, hooklab.SaveOnCpu)(torch.randn(5, 3)),
], ids=["layer_shapes", "FeatureExtractor", "OffloadWrapper"])
def test_tools_that_hold_hooks_only_while_they_run_leave_nothing_when_the_model_fails(call, tmp_path):
    model, _ = model_and_batch()
    model.train()
    before = state_of(model, tmp_path)
    with pytest.raises(RuntimeError):
        call(model)
    assert state_of(model, tmp_path) == before
