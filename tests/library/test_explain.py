"""hooklab.explain_hook: each case of "my hook did not fire (or fired twice)" from the notebooks, checked against what
plain PyTorch hooks see in the same step, and the probes gone afterwards (also when the step raises)."""
from __future__ import annotations

import copy
import sys
import threading
import warnings

import pytest
import torch
from torch import nn

import hooklab
from hooklab import UnknownModuleError, explain_hook, no_hooks_left_behind
from hooklab.explain import COMPILED, COPY, FUSED, GRAPH, REPLICA, SELF
from patience import hang_guard


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def counting(log):
    def hook(module, args, output):
        log.append(module)
    return hook


def test_a_plain_call_each_hook_fires_once():
    model, log = mlp(), []
    model[0].register_forward_hook(counting(log))
    report = explain_hook(model, "0", run=lambda: model(torch.ones(1, 3)))
    assert len(log) == 1 and log[0] is model[0]  # plain PyTorch: the hook fired once, on the module
    assert (report.calls, report.forward_runs) == (1, 1)
    assert report.fired == {"counting.hook (forward)": {SELF: 1}}
    assert report.reasons == ["'0' ran 1 time(s) as a module and its hooks fired as expected "
                              "(counting.hook (forward) 1)"]
    assert "called as a module (module(...))  1" in str(report)


def test_forward_called_directly():
    model, log = mlp(), []
    model[0].register_forward_hook(counting(log))
    report = explain_hook(model, "0", run=lambda: model[0].forward(torch.ones(1, 3)))
    assert log == []
    assert (report.calls, report.forward_runs) == (0, 1)
    assert report.fired["counting.hook (forward)"] == {}
    assert any("without a module call" in r and "call module(x)" in r for r in report.reasons)


def test_module_called_twice_and_backward_hooks_under_no_grad():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(self.lin(x))

    model, fired = Twice(), []
    model.lin.register_full_backward_hook(lambda m, gi, go: fired.append(1))
    with torch.no_grad():
        report = explain_hook(model, "lin", run=lambda: model(torch.ones(1, 2)))
    assert fired == [] and report.calls == 2 and report.calls_without_grad == 2
    assert any("without gradients" in r for r in report.reasons)
    x = torch.ones(1, 2, requires_grad=True)
    report = explain_hook(model, "lin", run=lambda: model(x).sum().backward())
    assert len(fired) == 2 and list(report.fired.values()) == [{SELF: 2}]
    assert any("called 2 times" in r for r in report.reasons)


def test_transformer_encoder_layer_fast_path_is_seen_and_not_disturbed():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True).eval()
    x = torch.randn(2, 3, 8)
    calls = []
    seen = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, a: calls.append(m))
    try:
        with torch.no_grad():
            expected = layer(x)
    finally:
        seen.remove()
    assert layer.self_attn not in calls  # plain PyTorch: a global hook never sees self_attn on the fast path
    with torch.no_grad():
        out = []
        report = explain_hook(layer, "self_attn", run=lambda: out.append(layer(x)))
    assert torch.equal(out[0], expected)
    assert report.calls == 0 and list(report.fast_paths) == [
        "nn.TransformerEncoderLayer's fast path (torch._transformer_encoder_layer_fwd)"]
    assert "fast path" in report.reasons[0]
    with torch.no_grad():  # a local hook on a submodule turns the fast path off: then self_attn runs
        handle = layer.self_attn.register_forward_hook(lambda *a: None)
        report = explain_hook(layer, "self_attn", run=lambda: layer(x))
        handle.remove()
    assert report.calls == 1 and list(report.fast_paths) == [  # the layer's path is off; attention takes its own
        "nn.MultiheadAttention's fast path (torch._native_multi_head_attention)"]


def test_out_proj_is_used_functionally():
    torch.manual_seed(0)
    attn = nn.MultiheadAttention(4, 2)  # training mode: no fast path, F.multi_head_attention_forward
    x = torch.randn(3, 1, 4)
    report = explain_hook(attn, "out_proj", run=lambda: attn(x, x, x))
    assert report.calls == 0 and report.parent_calls == 1
    assert report.cause == "parameters used directly"
    assert "read by MultiheadAttention.forward" in report.reasons[0]


@pytest.mark.pin  # what torch.compile does with hooks added after compiling changes between releases
def test_compiled_wrapper_runs_instead():
    model, log = mlp(), []
    compiled = torch.compile(model, backend="eager")
    compiled(torch.ones(1, 3))  # compiled before the hook exists
    model[0].register_forward_hook(counting(log))
    report = explain_hook(model, "0", run=lambda: compiled(torch.ones(1, 3)))
    assert log == []  # plain PyTorch: the hook added after compiling does not run
    assert report.calls == 0 and report.ran_instead == {f"{COMPILED}: OptimizedModule": 1}
    assert "torch.compile wrapper" in report.reasons[0] and "model._orig_mod" in report.reasons[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the probes' global hook gives no compile warning of its own
        explain_hook(model, "0", run=lambda: compiled(torch.ones(1, 3)))


def test_deepcopy_runs_instead_and_carries_the_hooks():
    model, log = mlp(), []
    model[0].register_forward_hook(counting(log))
    ema = copy.deepcopy(model)
    report = explain_hook(model, "0", run=lambda: ema(torch.ones(1, 3)))
    assert len(log) == 1 and log[0] is ema[0]
    assert report.calls == 0 and report.fired == {"counting.hook (forward)": {COPY: 1}}
    assert report.reasons[0].startswith("'0' itself never ran: a copy of it ran instead (Linear")
    fresh = mlp()  # a copy made before the hook: nothing of ours on it, but the same type and shapes
    report = explain_hook(model, "0", run=lambda: fresh(torch.ones(1, 3)))
    assert "a module like it outside the model" in report.reasons[0]


def test_data_parallel_replicas_share_the_hook_dicts():
    model, log = mlp(), []
    model[0].register_forward_hook(counting(log))

    def replicas():  # what nn.DataParallel does per GPU (parameters as non-leaf views, as replicate() gives them)
        replica = model[0]._replicate_for_data_parallel()
        for name, p in model[0].named_parameters():
            setattr(replica, name, p.view_as(p))
        thread = threading.Thread(target=lambda: replica(torch.ones(1, 3)))  # parallel_apply uses threads
        thread.start()
        thread.join(timeout=hang_guard(60))
    report = explain_hook(model, "0", run=replicas)
    assert len(log) == 1 and log[0] is not model[0]
    assert report.fired == {"counting.hook (forward)": {REPLICA: 1}}
    assert "replica" in report.reasons[0]


def test_fx_graph_module_inlines_a_block():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, x):
            return self.b(self.a(x).relu())

    model, log, leaf = nn.Sequential(Block(), nn.Linear(2, 1)), [], []
    model[0].register_forward_hook(counting(log))
    model[0].a.register_forward_hook(counting(leaf))
    graph = torch.fx.symbolic_trace(model)  # tracing calls the block's hooks once, with Proxies
    log.clear(), leaf.clear()
    report = explain_hook(model, "0", run=lambda: graph(torch.ones(1, 2)))
    assert log == [] and len(leaf) == 1  # plain PyTorch: the block's hook is gone, the leaf's still fires
    assert report.calls == 0 and any(k.startswith(GRAPH) for k in report.ran_instead)
    assert "FX GraphModule" in report.reasons[0]
    assert explain_hook(model, "0.a", run=lambda: graph(torch.ones(1, 2))).calls == 1


def test_fused_conv_pre_hook_fires_twice_and_bn_is_folded():
    import torch.ao.quantization as tq

    class ConvBN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn, self.relu = nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU()

        def forward(self, x):
            return self.relu(self.bn(self.conv(x)))

    model, pre, post, bn_log = ConvBN().eval(), [], [], []
    model.conv.register_forward_pre_hook(lambda m, a: pre.append(type(m).__name__))
    for name in ("conv", "relu"):  # one lambda, made twice: the same code object on two modules
        getattr(model, name).register_forward_hook(lambda m, a, o, name=name: post.append((name, type(m).__name__)))
    model.bn.register_forward_hook(counting(bn_log))
    fused = tq.fuse_modules(model, [["conv", "bn", "relu"]])
    report = explain_hook(model, "conv", run=lambda: fused(torch.randn(1, 1, 5, 5)))
    assert pre == ["ConvReLU2d", "Conv2d"]  # plain PyTorch: the pre-hook fires on the fused module and its copy
    assert post == [("conv", "Conv2d"), ("relu", "ConvReLU2d")]  # conv's forward hook on the copy only
    assert list(report.fired.values()) == [{FUSED: 1, COPY: 1}, {COPY: 1}]
    assert any("fired 2 times" in r and "fuse_modules" in r for r in report.reasons)
    report = explain_hook(model, "bn", run=lambda: fused(torch.randn(1, 1, 5, 5)))
    assert bn_log == [] and "folded" in report.reasons[0]


def test_probes_removed_when_the_step_raises():
    model = mlp()

    def broken():
        model(torch.ones(1, 3))
        raise ValueError("the step failed")

    before = (sys.getprofile(), threading.getprofile())
    with no_hooks_left_behind(model):
        with pytest.raises(ValueError, match="the step failed"):
            explain_hook(model, "0", run=broken)
    assert (sys.getprofile(), threading.getprofile()) == before


def test_another_profiler_is_left_alone(monkeypatch):
    """With another profiler active the fallback is a global module hook: fine in a process that compiled nothing,
    refused in one that did (the hook would make torch.compile recompile)."""
    import hooklab.explain
    model, events = mlp(), []
    monkeypatch.setattr(hooklab.explain, "_has_compiled", lambda: False)
    sys.setprofile(lambda frame, event, arg: events.append(event))
    try:
        with no_hooks_left_behind(model):
            report = explain_hook(model, "0", run=lambda: model(torch.ones(1, 3)))
        assert sys.getprofile() is not None
        monkeypatch.setattr(hooklab.explain, "_has_compiled", lambda: True)
        with pytest.raises(RuntimeError, match="another profiler is active .* recompile"):
            explain_hook(model, "0", run=lambda: model(torch.ones(1, 3)))
    finally:
        sys.setprofile(None)
    assert events and report.calls == 1 and not report.profiled
    assert "not counted (another profiler is active)" in str(report)
    attn = nn.MultiheadAttention(4, 2)  # out_proj computed functionally: not seen without the profile function
    x = torch.randn(3, 1, 4)
    sys.setprofile(lambda frame, event, arg: None)
    try:
        monkeypatch.setattr(hooklab.explain, "_has_compiled", lambda: False)
        report = explain_hook(attn, "out_proj", run=lambda: attn(x, x, x))
    finally:
        sys.setprofile(None)
    assert report.cause == "not observed" and "another profiler was active" in report.reasons[0]


@pytest.mark.parametrize("replacement", [None, lambda frame, event, arg: None], ids=["None", "its own profiler"])
def test_a_step_that_stops_the_profile_function_is_told_not_not_called(replacement):
    """A step that calls sys.setprofile itself ends explain_hook's watch: it said 'model not called' although the
    model ran (plain PyTorch's forward hook fired)."""
    model, log = mlp(), []
    model[0].register_forward_hook(counting(log))

    def step():
        sys.setprofile(replacement)
        model(torch.ones(1, 3))

    before = (sys.getprofile(), threading.getprofile())
    report = explain_hook(model, "0", run=step)
    assert len(log) == 1  # the truth: it was called, and its hook fired
    assert report.cause == "profiler stopped" and report.profile_stopped
    assert "stopped explain_hook's profile function" in report.reasons[-1]
    assert "whether '0' was called is not known" in report.reasons[-1]
    assert (sys.getprofile(), threading.getprofile()) == before

    def after_the_call():  # called first, then the profiler stopped: the counts so far, said to be partial
        model(torch.ones(1, 3))
        sys.setprofile(replacement)
        model(torch.ones(1, 3))

    report = explain_hook(model, "0", run=after_the_call)
    assert report.calls == 1 and len(log) == 3 and report.cause == "ran"
    assert any("the counts are those of the step up to that point" in r for r in report.reasons)
    assert sys.getprofile() is None
    assert "profiler stopped" in hooklab.explain.CAUSES


def test_bad_input():
    model = nn.Sequential()
    model.add_module("encoder", mlp())
    with pytest.raises(UnknownModuleError, match="Did you mean .*'encoder.0'"):
        explain_hook(model, "encoder.O", run=lambda: None)
    with pytest.raises(TypeError, match="run is the step to watch"):
        explain_hook(model, "encoder.0", run=model(torch.ones(1, 3)))
    with pytest.raises(TypeError, match="needs the model"):
        explain_hook("model", "0", run=lambda: None)
    assert hooklab.explain_hook is explain_hook


def test_a_batchnorm_folded_by_fx_fuse_is_named_as_folded():
    """torch.fx.experimental.optimization.fuse folds an eval-mode BatchNorm into the convolution before it: the
    graph module it returns has no BatchNorm, so the BatchNorm's hooks never fire (plain PyTorch shows it)."""
    from torch.fx.experimental.optimization import fuse

    model, bn_log = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU()).eval(), []
    model[1].register_forward_hook(counting(bn_log))
    fused = fuse(model)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in fused.modules())
    report = explain_hook(model, "1", run=lambda: fused(torch.randn(1, 1, 5, 5)))
    assert bn_log == [] and report.calls == 0
    assert any("fold it into the convolution" in r for r in report.reasons), report.reasons
    plain = explain_hook(model, "0", run=lambda: fused(torch.randn(1, 1, 5, 5)))
    assert not any("is a BatchNorm" in r for r in plain.reasons)  # said of the BatchNorm only
