"""hooklab.explain_hook on the classes of setups it got wrong (issue 55, item 3): each built small, run once plainly
(the truth: does the hook fire, how many times) and then under explain_hook, whose verdict must name the real cause
or say what it saw and what to check. Each docstring says what explain_hook said before the fix. Every hook a test
registers is removed in ``finally``."""
from __future__ import annotations

import warnings
from contextlib import contextmanager

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from hooklab import explain_hook
from hooklab.explain import SELF


def factory(log):
    def hook(module, args, output):
        log.append(module)
    return hook


@contextmanager
def hooks(*handles):
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def test_a_torchscript_submodule_inside_an_eager_model():
    """Before: AttributeError '_CachedForward' object has no attribute '__getattr__' (type(target).forward of a
    ScriptModule), for the scripted module itself and for a module inside it."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated
        model = nn.Sequential(torch.jit.script(nn.Sequential(nn.Linear(2, 2), nn.ReLU())), nn.ReLU())
    with pytest.raises(RuntimeError, match="not supported on ScriptModules"):  # the truth: none on the scripted one
        model[0].register_forward_hook(factory([]))
    log = []
    with hooks(model[0][0].register_forward_hook(factory(log))):  # accepted on a module inside it...
        inside = explain_hook(model, "0.0", run=lambda: model(torch.ones(1, 2)))
    assert log == []  # ...and never run
    assert inside.calls == 0 and inside.cause == "scripted"
    assert "lives inside the TorchScript module '0'" in inside.reasons[0]
    itself = explain_hook(model, "0", run=lambda: model(torch.ones(1, 2)))
    assert itself.calls == 1 and itself.cause == "ran"
    assert "is a TorchScript module inside an eager model" in itself.reasons[0]
    assert not any("fired as expected" in r for r in itself.reasons)


def test_two_hooks_from_one_factory_are_counted_once_each():
    """Before: both hooks share one code object, so each firing counted for both: {'the module': 2} each, and the
    false cause 'registered more than once' for a module called once."""
    model, log = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), []
    with hooks(model[0].register_forward_hook(factory(log)), model[0].register_forward_hook(factory(log)),
               model[1].register_forward_hook(factory(log))):
        report = explain_hook(model, "0", run=lambda: model(torch.ones(1, 2)))
    assert [m is model[0] for m in log] == [True, True, False]  # the truth: each of its two hooks fired once
    assert list(report.fired.values()) == [{SELF: 1}, {SELF: 1}]
    assert not any("more than once" in r for r in report.reasons)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

    def forward(self, x):
        return self.b(self.a(x).relu())


@pytest.mark.pin  # what torch.compile does with hooks added after compiling changes between releases
def test_compiled_in_place_under_a_backend_that_returns_the_graph_module():
    """Before: cause 'graph', "a graph module ran instead (... made by torch.fx, torch.export or a quantizer ...)":
    the GraphModule was dynamo's output, called by the model compiled in place."""
    torch._dynamo.reset()
    model, log = nn.Sequential(Block(), nn.Linear(2, 1)), []
    model.compile(backend=lambda gm, example_inputs: gm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model(torch.ones(1, 2))
        with hooks(model[0].register_forward_hook(factory(log))):
            report = explain_hook(model, "0", run=lambda: model(torch.ones(1, 2)))
    torch._dynamo.reset()
    assert log == []  # the truth: a hook added after compiling does not run
    assert report.calls == 0 and report.cause == "compiled"
    assert "compiled in place" in report.reasons[0] and "torch.fx" not in report.reasons[0]
    assert any(k.startswith("a graph module made by torch.compile") for k in report.ran_instead)


class AuxInTraining(nn.Module):
    def __init__(self):
        super().__init__()
        self.main, self.aux = nn.Linear(2, 2), nn.Linear(2, 2)

    def forward(self, x):
        y = self.main(x)
        if self.training:
            y = y + self.aux(x)
        return y


class AuxInEval(AuxInTraining):
    def forward(self, x):
        return self.main(x) if self.training else self.main(x) + self.aux(x)


@pytest.mark.parametrize("cls, mode, needed", [(AuxInTraining, "eval", "training"), (AuxInEval, "train", "eval")])
def test_a_branch_that_runs_only_in_the_other_mode(cls, mode, needed):
    """Before: plain 'not reached' ("this input's path does not go through it"), with at most a generic note on
    eval mode, and nothing at all for a branch that runs only in eval mode."""
    model, log = getattr(cls(), mode)(), []
    with hooks(model.aux.register_forward_hook(factory(log))):
        report = explain_hook(model, "aux", run=lambda: model(torch.ones(1, 2)))
        assert log == []  # the truth: not in this mode...
        getattr(model, "train" if mode == "eval" else "eval")()
        model(torch.ones(1, 2))
        assert len(log) == 1  # ...and once in the other
    assert report.cause == "not reached"
    assert report.reasons[0].startswith(f"'aux' is called only in {needed} mode: {cls.__name__}.forward")
    assert "self.training" in report.reasons[0]
    model = AuxInTraining().train()  # in the mode the branch asks for, the source is not blamed
    report = explain_hook(model, "aux", run=lambda: model.main(torch.ones(1, 2)))
    assert "only in" not in report.reasons[0]


def test_a_module_replaced_after_hooking_is_not_said_to_fire_as_expected():
    """Before: "'bn' ran 1 time(s) as a module and its hooks fired as expected (no hooks on it)" after
    fuse_modules(inplace=True) put an Identity where the hooked BatchNorm was; the same for model.x = new."""
    import torch.ao.quantization as tq

    class ConvBN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn, self.relu = nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU()

        def forward(self, x):
            return self.relu(self.bn(self.conv(x)))

    model, log = ConvBN().eval(), []
    old = model.bn
    with hooks(old.register_forward_hook(factory(log))):
        tq.fuse_modules(model, [["conv", "bn", "relu"]], inplace=True)
        report = explain_hook(model, "bn", run=lambda: model(torch.randn(1, 1, 5, 5)))
    assert log == [] and isinstance(model.bn, nn.Identity)  # the truth: the hook on the old BatchNorm never ran
    assert report.calls == 1 and not any("as expected" in r for r in report.reasons)
    assert "it is an Identity" in report.reasons[0] and "BatchNorm2d" in report.reasons[0]
    seq, log = nn.Sequential(nn.Linear(2, 2), nn.ReLU()), []
    with hooks(seq[0].register_forward_hook(factory(log))):
        kept = seq[0]
        seq[0] = nn.Linear(2, 2)
        report = explain_hook(seq, "0", run=lambda: seq(torch.ones(1, 2)))
        assert kept is not seq[0]
    assert log == [] and "outside the model that did not run carry hooks (Linear)" in report.reasons[0]


def test_a_forward_that_raises_with_always_call_hooks():
    """Before: "'1' ran 1 time(s) as a module and its hooks fired as expected (factory.hook (forward) 1, <lambda>
    (forward) 0)": a hook that never ran called 'as expected', and nothing on always_call."""
    class Broken(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    model, kept, skipped = nn.Sequential(nn.Linear(2, 2), Broken()), [], []
    with hooks(model[1].register_forward_hook(factory(kept), always_call=True),
               model[1].register_forward_hook(lambda m, a, o: skipped.append(m))):
        with pytest.raises(ValueError, match="boom") as raised:
            explain_hook(model, "1", run=lambda: model(torch.ones(1, 2)))
    assert (len(kept), len(skipped)) == (1, 0)  # the truth: only the always_call hook ran
    report = raised.value.hooklab_explanation
    assert report.raised_inside and list(report.fired.values()) == [{SELF: 1}, {}]
    assert not any("as expected" in r for r in report.reasons)
    text = next(r for r in report.reasons if "always_call=True" in r)
    assert "factory.hook (forward) fired 1 time(s)" in text and "<lambda> (forward))" in text.split("did not run")[1]
    with pytest.raises(ValueError, match="before"):  # raised outside the module: not said to be inside it
        explain_hook(model, "0", run=lambda: (model[0](torch.ones(1, 2)), (_ for _ in ()).throw(ValueError("before"))))


def test_reentrant_checkpoint_with_no_input_that_requires_grad():
    """Before: "its backward hooks never fired: 1 of its 1 call(s) ran without gradients (torch.no_grad /
    inference_mode)", a false cause: the step used no no_grad, checkpoint's first pass did."""
    model, log = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), []

    def step():
        h = model[0](torch.ones(1, 2)).detach()
        (checkpoint(model[1], h, use_reentrant=True).sum() + model[0].weight.sum()).backward()

    with hooks(model[1].register_full_backward_hook(lambda m, gi, go: log.append(m))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "None of the inputs have requires_grad=True"
            report = explain_hook(model, "1", run=step)
    assert log == [] and model[1].weight.grad is None  # the truth: never recomputed, no gradient
    text = report.reasons[0]
    assert "torch.utils.checkpoint's first pass" in text and "no input of the checkpointed function" in text
    assert "torch.no_grad" not in text


def test_non_reentrant_checkpoint_recompute_is_not_a_second_use():
    """Before: "'0' was called 2 times in this step (used twice, in a loop, ...): each hook fires once per call",
    while its backward hook fired once (the second call was checkpoint's recomputation)."""
    model, log = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), []
    with hooks(model[0].register_full_backward_hook(lambda m, gi, go: log.append(m))), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Full backward hook is firing when ... no inputs require gradients"
        report = explain_hook(model, "0", run=lambda: checkpoint(model, torch.ones(1, 2), use_reentrant=False)
                              .sum().backward())
    assert len(log) == 1 and report.calls == 2  # the truth: one backward hook call
    assert any("1 of them torch.utils.checkpoint's recomputation" in r for r in report.reasons)
    assert not any("used twice" in r for r in report.reasons)


def test_fast_path_advice_that_would_not_help_is_not_given():
    """Before: for out_proj under MultiheadAttention's fast path: cause 'fast path' and "a forward hook on any
    submodule of the layer, training mode or gradients turn the fast path off": none of them makes out_proj run."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True).eval()
    x, log = torch.randn(2, 3, 8), []
    with hooks(layer.self_attn.out_proj.register_forward_hook(factory(log))):
        with torch.no_grad():
            report = explain_hook(layer, "self_attn.out_proj", run=lambda: layer(x))
        layer.train()
        layer(x).sum().backward()  # the advice followed: training mode, gradients, a hook on it
        layer.eval()
    assert log == []  # the truth: out_proj is never called, fast path or not
    assert report.fast_paths and report.cause == "parameters used directly"
    assert "would not help" in report.reasons[0] and "Hook 'self_attn'" in report.reasons[0]


# ---- the classes the matrix's property test (test_explain_matrix.py) found, each in plain PyTorch
class Counter:
    """A hook that is an object, as a stats collector's bound method or a class with __call__ is."""

    def __init__(self):
        self.calls = 0

    def __call__(self, module, args, output):
        self.calls += 1


def test_a_copy_made_after_registering_an_object_hook():
    """Before: cause 'another model', "a copy made before your hooks were registered": deepcopy copies a hook that is
    an object, so the copy carries a copy of it (under the same handle id), which fired."""
    import copy

    model, hook = nn.Sequential(nn.Linear(2, 2)), Counter()
    with hooks(model[0].register_forward_hook(hook)):
        copied = copy.deepcopy(model)
        report = explain_hook(model, "0", run=lambda: copied(torch.ones(1, 2)))
        fired_on_copy = copied[0]._forward_hooks[next(iter(model[0]._forward_hooks))].calls
    assert hook.calls == 0 and fired_on_copy == 1  # the truth: the copy's copy of the hook fired
    assert report.cause == "copy" and "made after your hooks were registered" in report.reasons[0]


def test_two_backward_passes_are_not_a_second_registration():
    """Before: "fired 2 times on '0' for 1 call(s): it is registered more than once" for retain_graph=True and a
    second backward."""
    model, log = nn.Sequential(nn.Linear(2, 2)), []
    x = torch.ones(1, 2, requires_grad=True)

    def step():
        loss = model(x).sum()
        loss.backward(retain_graph=True)
        loss.backward()

    with hooks(model[0].register_full_backward_hook(lambda m, gi, go: log.append(m))):
        report = explain_hook(model, "0", run=step)
    assert len(log) == 2  # the truth: once per backward pass
    assert report.backward_passes == {"backward()": 2}
    assert not any("more than once" in r for r in report.reasons)
    assert any("the step ran 2 backward passes" in r for r in report.reasons)


def test_a_parameter_hook_that_did_not_fire_is_not_as_expected():
    """Before: "'0' ran 1 time(s) as a module and its hooks fired as expected (<lambda> (weight: tensor hook) 0)"."""
    model, log = nn.Sequential(nn.Linear(2, 2)), []
    with hooks(model[0].weight.register_hook(lambda g: log.append(g))):
        with torch.no_grad():
            quiet = explain_hook(model, "0", run=lambda: model(torch.ones(1, 2)))
        x = torch.ones(1, 2, requires_grad=True)
        only_x = explain_hook(model, "0", run=lambda: model(x).sum().backward(inputs=[x]))
    assert log == []  # the truth: neither step gives the weight a gradient
    assert not any("as expected" in r for r in quiet.reasons + only_x.reasons)
    assert "ran without gradients" in quiet.reasons[0]
    assert "backward(inputs=...)" in only_x.reasons[0]


def test_symbolic_tracing_is_not_calling_forward_directly():
    """Before: cause 'forward called directly' ("call module(x)"): FX's symbolic_trace ran its forward while tracing
    it, and the GraphModule it made ran instead."""
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(x).relu()

    model, log = nn.Sequential(Block()), []
    with hooks(model[0].register_forward_hook(factory(log))):
        def step():
            model[0] = torch.fx.symbolic_trace(model[0])
            model(torch.ones(1, 2))
        report = explain_hook(model, "0", run=step)
    assert log == []  # the truth: never fired
    assert report.cause == "graph" and report.forward_callers == {"torch.fx._symbolic_trace": 1}
    assert not any("call module(x)" in r for r in report.reasons)


def test_torch_jit_script_refusing_a_hook_is_the_cause():
    """Before: cause 'parameters used directly' (TorchScript's scripting read the parameters) for a step that raised
    in torch.jit.script before anything ran."""
    model = nn.Sequential(nn.Linear(2, 2))
    with hooks(model[0].register_forward_hook(lambda m, args, out: None)), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated
        with pytest.raises(Exception) as raised:  # the truth: scripting refuses the lambda
            explain_hook(model, "0", run=lambda: torch.jit.script(model)(torch.ones(1, 2)))
    report = raised.value.hooklab_explanation
    assert report.cause == "step raised" and "inside torch.jit" in report.raised_in
    assert not any("parameters were read" in r for r in report.reasons)
