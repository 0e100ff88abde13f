"""The one contract of hooklab's tools (written down in hooklab's package docstring), checked on every tool.

One table, ``TOOLS``, lists every tool that hooks a model or wraps a block of code; each test below runs one rule of
the contract over all of them:

- a ``copy.deepcopy`` of the model made inside the block is neither recorded, edited nor checkpointed through the
  original (inside the block and after it), and computes with its own weights, as a plain copy does;
- pickling the model inside the block either works (the copy runs plainly) or says what to do instead;
- a tool kept after its block does not keep the model alive;
- an exception inside the block leaves nothing behind;
- a second block with the same object is refused (recorders, scopes, patches) or adds up (saved-tensor contexts,
  dispatch modes), as the docstring says;
- a forward and backward run in a second thread inside the block is treated as this thread's (module and tensor hooks
  are process-wide), warned about, or not seen at all where PyTorch's mechanism is thread-local (saved-tensor hooks,
  dispatch modes).

Recorders have a few more rules (register when entered, refuse results before recording, ``remove()`` early): the
tests after the table.
"""
from __future__ import annotations

import copy
import dataclasses
import gc
import io
import pickle
import threading
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

import hooklab
from hooklab import hook_inventory, no_hooks_left_behind
from hooklab.scope import Recorder

pytestmark = pytest.mark.timeout(300)


def model_and_batch():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2)), torch.randn(5, 4, requires_grad=True)


def run(model, x):
    model(x).sum().backward()


def _plan(model):
    """A plan that checkpoints the first block (the planner measures each block once, with its own step)."""
    x = torch.randn(5, 4)
    planner = hooklab.MemoryPlanner(model, lambda: model(x).sum(), blocks=["0", "2"], costs=hooklab.CountedCosts(),
                                    choices=("keep", "checkpoint"))
    return planner.plan(budget=planner.baseline_bytes)


def _decision(model):
    """A decision between the planner's plans (a batch large enough that the activations a checkpoint drops outweigh
    the 5,056-byte random-number state it keeps)."""
    x = torch.randn(1024, 4)
    planner = hooklab.MemoryPlanner(model, lambda: model(x).sum(), costs=hooklab.CountedCosts(),
                                    choices=("keep", "checkpoint", "segment"))
    return planner.decide(planner.baseline_bytes - 1, backends=(), rounds=2, plain=False, sequential=False)


@dataclass
class Tool:
    name: str
    make: Callable[[nn.Module, Any], Any]  # (model, a private temporary folder) -> what the `with` enters
    kind: str  # "recorder", "scope" (registers when made), "patch" (changes the model for the block), "context"
    observe: Callable[[Any], Any] | None = None  # a snapshot of what the tool recorded, from what the `with` gave
    thread: str = "same"  # a forward + backward in another thread: "same" as this thread's, "warns", "local" (unseen)
    pickles: bool = False  # pickling the model inside the block works (else: a TypeError saying what to do)
    again: str = "refuses"  # a second block with the same object: "refuses" or "adds up"
    start: Callable[[Any, nn.Module], None] | None = None  # called right after entering (Tracer: what to trace)
    known: dict[str, str] | None = None  # test -> why this tool still fails it (a strict xfail: fixed means update)
    holds_model: str = ""  # why what the `with` gave keeps the model on purpose (then dropping both frees it)


def _trace(tracer, model):
    tracer.modules(model, backward="outputs")


def _counts(meter):
    return dict(meter.counts)


TOOLS = [
    Tool("capture", lambda m, d: hooklab.capture(m, ["0", "2"], grads=True), "recorder",
         observe=lambda store: dict(store.calls)),
    Tool("intervene", lambda m, d: hooklab.intervene(m, {"1": lambda value, call: value * 2}), "recorder",
         observe=lambda iv: dict(iv.calls)),
    Tool("GradientMonitor", lambda m, d: hooklab.GradientMonitor(m), "recorder", observe=lambda gm: gm.steps),
    Tool("ActivationStats", lambda m, d: hooklab.ActivationStats(m, "1"), "recorder",
         observe=lambda st: len(st.stats["1"]["mean"])),
    Tool("Tracer", lambda m, d: hooklab.Tracer(), "recorder", observe=lambda tr: len(tr.events), start=_trace),
    Tool("SavedTensorLedger", lambda m, d: hooklab.SavedTensorLedger(m), "recorder",
         observe=lambda ledger: sum(1 for r in ledger.records if r.module), thread="warns"),
    Tool("find_nonfinite", lambda m, d: hooklab.find_nonfinite(m), "recorder", observe=lambda f: f.steps,
         thread="warns"),
    Tool("clip_grad_value_hooks", lambda m, d: hooklab.clip_grad_value_hooks(m, 0.1), "scope"),
    Tool("clip_grad_norm_hooks", lambda m, d: hooklab.clip_grad_norm_hooks(m, 1.0, stage="accumulated"), "scope"),
    Tool("clip_grad_norm_global_hooks", lambda m, d: hooklab.clip_grad_norm_global_hooks(m, 1.0), "scope"),
    Tool("offload_module", lambda m, d: hooklab.offload_module(m[0], lambda: hooklab.SaveOnDisk(directory=d)),
         "scope", observe=lambda scope: scope.calls),
    Tool("checkpoint_modules", lambda m, d: hooklab.checkpoint_modules(m, ["0", "2"]), "patch", pickles=True),
    Tool("selective_checkpoint_modules",
         lambda m, d: hooklab.selective_checkpoint_modules(m, "0", policy=[torch.ops.aten.addmm]), "patch",
         pickles=True),
    Tool("checkpoint_segments", lambda m, d: hooklab.checkpoint_segments(m, [["0", "1", "2"]]), "patch"),
    Tool("MemoryPlan.apply", lambda m, d: _plan(m).apply(), "patch",
         holds_model="a MemoryPlan is made for one model, and apply() applies it to that model again"),
    Tool("SequentialCheckpoint.apply", lambda m, d: hooklab.SequentialCheckpoint(m, 2).apply(), "patch", pickles=True,
         holds_model="a SequentialCheckpoint is made for one model, and apply() applies it to that model again"),
    Tool("CheckpointEach.apply", lambda m, d: hooklab.CheckpointEach(m, ["0", "2"]).apply(), "patch", pickles=True,
         holds_model="a CheckpointEach is made for one model, and apply() applies it to that model again"),
    Tool("CompiledBudget.apply", lambda m, d: hooklab.CompiledBudget(m, "aot_eager", 0.5).apply(), "patch",
         pickles=True, holds_model="a CompiledBudget compiles one model, and apply() runs that model compiled"),
    Tool("MemoryDecision.apply", lambda m, d: _decision(m).apply(), "patch",
         holds_model="a MemoryDecision is made for one model, and apply() applies its choice to that model again"),
    Tool("SaveOnCpu", lambda m, d: hooklab.SaveOnCpu(), "context", observe=lambda c: c.stats.packed,
         thread="local", pickles=True, again="adds up"),
    Tool("SaveOnDisk", lambda m, d: hooklab.SaveOnDisk(directory=d), "context", observe=lambda c: c.stats.packed,
         thread="local", pickles=True, again="adds up"),
    Tool("OffloadStep.apply", lambda m, d: hooklab.OffloadStep(m, [], torch.device("cpu"), 0).apply(), "context",
         observe=lambda c: c.stats.packed, thread="local", pickles=True, again="adds up"),
    Tool("CompressSaved", lambda m, d: hooklab.CompressSaved("int8", min_bytes=0), "context",
         observe=lambda c: c.stats.packed, thread="local", pickles=True, again="adds up"),
    Tool("OverlappedOffload", lambda m, d: hooklab.OverlappedOffload(), "context", observe=lambda c: c.stats.packed,
         thread="local", pickles=True, again="adds up"),
    Tool("MemoryMeter", lambda m, d: hooklab.MemoryMeter(), "context", observe=lambda meter: meter.peak_bytes > 0,
         thread="local", pickles=True, again="adds up"),
    Tool("OpCounter", lambda m, d: hooklab.OpCounter(), "context", observe=_counts, thread="local", pickles=True,
         again="adds up"),
]


def tools(*kinds: str, test: str = "", where: Callable[[Tool], bool] = lambda tool: True):
    """Parametrize a test over the tools of ``kinds`` (all by default); ``test`` names the rule for ``Tool.known``."""
    chosen = [t for t in TOOLS if (not kinds or t.kind in kinds) and where(t)]
    return pytest.mark.parametrize("tool", [
        pytest.param(t, id=t.name, marks=[pytest.mark.xfail(strict=True, reason=t.known[test])]
                     if t.known and test in t.known else []) for t in chosen])


def enter(tool: Tool, model: nn.Module, folder: Any) -> tuple[Any, Any]:
    """Make the tool and enter its block by hand: (the context manager, what its `with` gave)."""
    block = tool.make(model, folder)
    given = block.__enter__()
    if tool.start is not None:
        tool.start(given, model)
    return block, given


def one_block(tool: Tool, model: nn.Module, x: torch.Tensor, folder: Any) -> tuple[Any, Any]:
    """Make the tool and run one forward + backward inside its block: (the context manager, what its `with` gave)."""
    block = tool.make(model, folder)
    with block as given:
        if tool.start is not None:
            tool.start(given, model)
        run(model, x)
    return block, given


def plain_twin(model: nn.Module) -> nn.Module:
    """A model with ``model``'s weights and no hook, patch or context: the truth a copy is compared with."""
    twin, _ = model_and_batch()
    twin.load_state_dict(model.state_dict())
    return twin


def output_and_grads(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    out = model(x)
    out.sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


def same(a: tuple[torch.Tensor, list[torch.Tensor]], b: tuple[torch.Tensor, list[torch.Tensor]]) -> bool:
    return torch.equal(a[0], b[0]) and all(torch.equal(u, v) for u, v in zip(a[1], b[1]))


# --- copies ------------------------------------------------------------------------------------------------------
@tools(test="deepcopy_inside")
def test_a_deepcopy_made_inside_the_block_is_not_recorded_edited_or_patched_and_computes_with_its_own_weights(
        tool, tmp_path):
    """Review S9, N1 (checkpoint_modules: the copy ran the original's forward, with the original's weights, for ever),
    N2 (intervene: the copy's output stayed edited after the block)."""
    model, x = model_and_batch()
    x2 = torch.randn(3, 4)
    block, given = enter(tool, model, tmp_path)
    try:
        run(model, x)
        twin = copy.deepcopy(model)
        with torch.no_grad():
            for p in twin.parameters():
                p.mul_(-2.0)  # the copy goes its own way (an EMA, a teacher): it must compute with these weights
        seen = tool.observe(given) if tool.observe else None
        original_grads = [p.grad.clone() for p in model.parameters()]
        inside = output_and_grads(twin, x2)
        if tool.kind != "context":  # a context applies to any code in its block, the copy's included
            assert same(inside, output_and_grads(plain_twin(twin), x2)), "the copy computed as a plain model inside"
            if tool.observe:
                assert tool.observe(given) == seen, "the copy's call was recorded"
        assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), original_grads)), \
            "the copy's backward wrote the original's .grad"
    finally:
        block.__exit__(None, None, None)
    after = output_and_grads(twin, x2)
    assert same(after, output_and_grads(plain_twin(twin), x2)), "the copy computes as a plain model after the block"
    if tool.observe and tool.kind != "context":
        assert tool.observe(given) == seen, "the copy's call after the block was recorded"
    assert all(e.hook.startswith("inert copy of ") for e in hook_inventory(twin, include_global=False))
    assert "forward" not in vars(twin[0]) or vars(twin[0])["forward"].__self__ is twin[0], \
        "the copy's forward is bound to the original"
    pickle.dumps(twin)  # the copy carries nothing of the tool that cannot be saved


@tools()
def test_a_deepcopy_made_after_the_block_is_plain(tool, tmp_path):
    model, x = model_and_batch()
    one_block(tool, model, x, tmp_path)
    twin = copy.deepcopy(model)
    assert hook_inventory(twin, include_global=False) == [] and not any("forward" in vars(m) for m in twin.modules())
    assert same(output_and_grads(twin, x), output_and_grads(plain_twin(twin), x))


# --- pickling ----------------------------------------------------------------------------------------------------
@tools(test="pickling")
def test_pickling_the_model_inside_the_block_works_or_says_what_to_do(tool, tmp_path):
    """Review: pickling inside intervene, ActivationStats, GradientMonitor, SavedTensorLedger and the clip scopes gave
    Python's "Can't pickle local object ..."."""
    model, x = model_and_batch()
    with tool.make(model, tmp_path) as given:
        if tool.start:
            tool.start(given, model)
        run(model, x)
        if tool.pickles:
            loaded = pickle.loads(pickle.dumps(model))
            saved = io.BytesIO()
            torch.save(model, saved)
        else:
            for save in (pickle.dumps, lambda m: torch.save(m, io.BytesIO())):
                with pytest.raises(TypeError, match=r"^cannot pickle a model that carries .*'s hooks .* "
                                                    r"save model\.state_dict\(\) .*or save after the block"):
                    save(model)
    if tool.pickles:  # what was pickled inside the block computes as a plain model
        assert all(vars(m)["forward"].__func__ is type(m).forward for m in loaded.modules() if "forward" in vars(m))
        assert same(output_and_grads(loaded, x), output_and_grads(plain_twin(model), x))
    assert len(pickle.dumps(model)) > 0  # after the block there is nothing left that cannot be pickled


# --- letting go of the model -------------------------------------------------------------------------------------
@tools()
def test_a_tool_kept_after_its_block_does_not_keep_the_model_alive(tool, tmp_path):
    """Review D5: find_nonfinite and intervene kept the model alive as long as they lived."""
    model, x = model_and_batch()
    ref = weakref.ref(model)
    block, given = one_block(tool, model, x, tmp_path)
    if tool.observe:
        tool.observe(given)  # the results stay readable
    del model
    if tool.holds_model:
        del block, given
    gc.collect()
    assert ref() is None, f"{tool.name} (kept after its block) keeps the model alive"


# --- exceptions --------------------------------------------------------------------------------------------------
def state_of(model, folder):
    return (hooklab.hook_inventory(model), torch.is_grad_enabled(), [m.training for m in model.modules()],
            [name for name, m in model.named_modules() if "forward" in m.__dict__], sorted(folder.iterdir()))


@pytest.mark.parametrize("fails", ["the block", "the model's forward"])
@tools()
def test_a_failure_inside_any_tool_leaves_nothing_behind(tool, fails, tmp_path):
    model, x = model_and_batch()
    before = state_of(model, tmp_path)
    bad = torch.randn(5, 3)  # the wrong width: the first Linear raises
    with pytest.raises((ZeroDivisionError, RuntimeError)):
        with tool.make(model, tmp_path) as given:
            if tool.start:
                tool.start(given, model)
            if fails == "the block":
                run(model, x)
                1 / 0
            model(bad)
    assert state_of(model, tmp_path) == before


@pytest.mark.parametrize("call", [
    lambda m: hooklab.layer_shapes(m, torch.randn(5, 3)),
    lambda m: hooklab.FeatureExtractor(m, ["0", "2"])(torch.randn(5, 3)),
    lambda m: hooklab.OffloadWrapper(m, hooklab.SaveOnCpu)(torch.randn(5, 3)),
    lambda m: hooklab.capture_inputs(m, "2", torch.randn(5, 3)),
], ids=["layer_shapes", "FeatureExtractor", "OffloadWrapper", "capture_inputs"])
def test_tools_that_hold_hooks_only_while_they_run_leave_nothing_when_the_model_fails(call, tmp_path):
    model, _ = model_and_batch()
    model.train()
    before = state_of(model, tmp_path)
    with pytest.raises(RuntimeError):
        call(model)
    assert state_of(model, tmp_path) == before


# --- a second block ----------------------------------------------------------------------------------------------
REFUSALS = {
    "recorder": r"has already recorded its block; make a new one for another block",
    "scope": r"has already been removed .* make a new one for another block",
    "patch": r"block has already run; call .* again for another block",
}


@tools(test="second_block")
def test_a_second_block_with_the_same_object_is_refused_or_adds_up(tool, tmp_path):
    model, x = model_and_batch()
    block, given = one_block(tool, model, x, tmp_path)
    first = tool.observe(given) if tool.observe else None
    if tool.again == "refuses":
        with no_hooks_left_behind(model), pytest.raises(RuntimeError, match=REFUSALS[tool.kind]):
            with block:
                run(model, x)
        return
    model.zero_grad(set_to_none=True)  # the same work as the first block (no accumulation into .grad)
    x.grad = None
    with block:  # a saved-tensor context or a dispatch mode: the second block's work adds to the first's
        run(model, x)
    second = tool.observe(given)
    if isinstance(first, dict):
        assert all(second[k] == 2 * v for k, v in first.items())
    elif isinstance(first, bool):
        assert first and second
    else:
        assert second == 2 * first


# --- recomputation by an activation checkpoint ---------------------------------------------------------------
@tools("recorder")
@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpoint_recomputing_the_model_is_not_recorded_again(tool, reentrant, tmp_path):
    """Backward recomputes a checkpointed region, calling its modules again: a recorder records each call once,
    as without the checkpoint (capture counted the recomputation as a second call, ActivationStats a second
    record, find_nonfinite a new step); a tool that shows the recomputation says so, and intervene replays its
    edit or, with a reentrant checkpoint, refuses."""
    from torch.utils.checkpoint import checkpoint

    def observed(checkpointed: bool) -> Any:
        model, x = model_and_batch()
        block = tool.make(model, tmp_path)
        with block as given:
            if tool.start is not None:
                tool.start(given, model)
            out = checkpoint(model, x, use_reentrant=reentrant) if checkpointed else model(x)
            out.sum().backward()
        return given

    plain = observed(False)
    if tool.name == "intervene" and reentrant:
        with pytest.raises(RuntimeError, match="use_reentrant=False"):
            observed(True)
        return
    recomputed = observed(True)
    if tool.name == "Tracer":  # shown, and marked as what it is
        again = [e for e in recomputed.events if e.detail.endswith("(recomputed for backward)")]
        assert len(recomputed.events) == len(plain.events) + len(again) and again
        return
    if tool.name == "SavedTensorLedger":  # the region's tensors go through the checkpoint's own hooks (none reach
        # the ledger) or, reentrant, are saved again while backward recomputes: never more than without it
        saved = sum(1 for r in recomputed.records if r.module)
        assert saved <= sum(1 for r in plain.records if r.module) and (reentrant or saved == 0)
        return
    assert tool.observe is not None
    assert tool.observe(recomputed) == tool.observe(plain)


# --- another thread ----------------------------------------------------------------------------------------------
def in_another_thread(fn: Callable[[], Any]) -> Any:
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)

    worker = threading.Thread(target=target)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the forward + backward in the other thread did not end within 120 s"
    if errors:
        raise errors[0]
    return result[0]


def _delta(before: Any, after: Any) -> Any:
    if isinstance(before, dict):
        return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    if isinstance(before, bool):
        return after and not before
    return after - before


@tools()
def test_a_forward_and_backward_in_another_thread_is_seen_warned_about_or_thread_local(tool, tmp_path):
    model, x = model_and_batch()
    truth = output_and_grads(plain_twin(model), x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tool.make(model, tmp_path) as given:
            if tool.start:
                tool.start(given, model)
            before = tool.observe(given) if tool.observe else None
            there = in_another_thread(lambda: output_and_grads(model, x))
            middle = tool.observe(given) if tool.observe else None
            here = output_and_grads(model, x)
            after = tool.observe(given) if tool.observe else None
    warned = [str(w.message) for w in caught if "another thread" in str(w.message)]
    if tool.thread == "same":  # module and tensor hooks (and patched forwards) are process-wide
        assert same(there, here) and not warned
        if tool.observe:
            assert _delta(before, middle) == _delta(middle, after) and _delta(middle, after)
    elif tool.thread == "warns":  # the tool sees this thread only, and says so
        assert warned and _delta(before, middle) in (0, {})
    else:  # "local": saved-tensor hooks and dispatch modes are per thread; the docstring says so
        assert not warned and _delta(before, middle) in (0, {}, False) and same(there, truth)


# --- recorders ---------------------------------------------------------------------------------------------------
@tools("recorder")
def test_made_registers_nothing_entered_registers_exit_removes(tool, tmp_path):
    model, x = model_and_batch()
    with no_hooks_left_behind(model):  # constructing a recorder registers nothing
        recorder = tool.make(model, tmp_path)
    assert isinstance(recorder, Recorder)
    with no_hooks_left_behind(model):  # global hooks and saved-tensor contexts included
        given = recorder.__enter__()
        if tool.start:
            tool.start(given, model)
        try:
            assert hook_inventory(model) != []
            run(model, x)
        finally:
            recorder.__exit__(None, None, None)
    assert tool.observe(given), "what was recorded stays readable after the block"


@tools("recorder", where=lambda tool: tool.name != "capture")  # capture's store raises its own NotRecorded
def test_reading_a_recorder_that_never_recorded_says_how_to_use_it(tool, tmp_path):
    model, _ = model_and_batch()
    with pytest.raises(RuntimeError, match=r"has recorded nothing: it registers its hooks when its `with` block"):
        tool.observe(tool.make(model, tmp_path))


@tools("recorder")
def test_remove_stops_recording_early_and_may_be_called_again(tool, tmp_path):
    model, x = model_and_batch()
    recorder = tool.make(model, tmp_path)
    with recorder as given:
        if tool.start:
            tool.start(given, model)
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
            self._on(model, lambda *a: None)
            raise RuntimeError("registration failed half way")

    recorder = Fails()
    with no_hooks_left_behind(model), pytest.raises(RuntimeError, match="half way"):
        with recorder:
            pass
    assert not recorder.recording


@tools("scope")
def test_functions_register_now_and_return_a_scope(tool, tmp_path):
    model, x = model_and_batch()
    with no_hooks_left_behind(model):
        scope = tool.make(model, tmp_path)
        assert isinstance(scope, hooklab.HookScope) and hook_inventory(model) != []
        run(model, x)
        scope.remove()
        scope.remove()
    with no_hooks_left_behind(model), tool.make(model, tmp_path):
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


WHILE_RUNNING = ["layer_shapes", "FeatureExtractor", "OffloadWrapper", "capture_inputs"]  # tested above
NOT_TOOLS = {  # public names that neither hook a model nor wrap a block themselves, and what they are
    "HookScope": "the owner of handles that every tool uses", "named_scope": "a HookScope by name",
    "Recorder": "the base class of the recorders", "Capture": "what capture's block gives",
    "NonFiniteDetector": "what find_nonfinite returns", "OffloadScope": "what offload_module returns",
    "MemoryPlanner": "measures a model once; its plan's apply() is the tool", "MemoryPlan": "ditto",
    "MemoryDecision": "what MemoryPlanner.decide returns; its apply() is the tool",
    "CountedCosts": "a cost model", "MeasuredCosts": "a cost model", "ShapeTable": "layer_shapes' result",
    "no_hooks_left_behind": "a test helper: checks, registers nothing",
    "hook_inventory": "reads hooks", "show_hooks": "reads hooks", "hook_name": "names a hook",
    "get_module": "looks a module up", "format_bytes": "formats a number",
    "gradient_error": "runs a step with and without a saved-tensor context (one of the table's)",
    "run_workers": "starts processes", "plot": "functions that draw results",
    "all_hooks": "reads hooks", "show_all_hooks": "reads hooks", "find_blocks": "reads the module tree",
    "explain_hook": "runs a step with a profile function it removes before returning (tests/library/test_explain.py)",
}


def test_every_public_tool_is_in_the_contract_table():
    """A new tool gets the contract tests by being added to TOOLS; records and exceptions are not tools."""
    def is_record(obj: Any) -> bool:
        return isinstance(obj, type) and (issubclass(obj, (BaseException, tuple)) or dataclasses.is_dataclass(obj)
                                          or getattr(obj, "_is_protocol", False))
    in_table = {t.name.split(".")[0] for t in TOOLS}
    unclassified = {name for name in hooklab.__all__ if not is_record(getattr(hooklab, name))} - in_table \
        - set(WHILE_RUNNING) - set(NOT_TOOLS)
    assert unclassified == set(), "add them to TOOLS (or say why they are no tool)"
