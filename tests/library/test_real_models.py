"""Reproductions of the bugs found by running hooklab's tools on real models (review: real-models.md).

Each test fails on the code before its fix. Small stand-ins are used where they show the same
pattern; torchvision models where the pattern is theirs (tests/library/test_zoo.py runs the whole zoo).
"""
from __future__ import annotations

import sys
import warnings

import pytest
import torch
from torch import nn

import hooklab
from hooklab.tracer import in_place_on_outputs


class InPlaceNet(nn.Module):
    """The two in-place patterns of torchvision CNNs: ReLU(inplace=True) after a layer, out += identity."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.relu = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        out = self.relu(self.bn(self.conv(x)))
        identity = out
        out = self.conv2(out)
        out += identity
        return out


class Block(nn.Module):
    """Appends to the list it passed to its layers, as torchvision's _DenseBlock does."""

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, feats):
            return torch.tanh(self.lin(sum(feats)))

    def __init__(self):
        super().__init__()
        self.stem, self.a, self.b = nn.Linear(4, 4), self.Layer(), self.Layer()

    def forward(self, x):
        feats = [self.stem(x)]
        feats.append(self.a(feats))
        feats.append(self.b(feats))
        return feats[-1]


# ---------------------------------------------------------------- Tracer and in-place ops
def test_tracer_modules_traces_a_model_with_in_place_ops_instead_of_crashing():
    torch.manual_seed(0)
    net, x = InPlaceNet(), torch.randn(2, 3, 8, 8)
    net(x).sum().backward()
    ref = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    with hooklab.no_hooks_left_behind(net), pytest.warns(UserWarning, match="modifies module outputs in place"), \
            hooklab.Tracer() as tr:
        traced = tr.modules(net)
        net(x).sum().backward()
    assert traced == ["conv", "bn", "relu", "conv2"]
    assert [n for k, n in tr.sequence(["module_forward"])] == traced
    # backward is seen through the outputs' tensor hooks, in backward order
    assert [n for k, n in tr.sequence(["module_backward_pre"])] == ["conv2", "relu", "bn", "conv"]
    assert all(e.phase == "backward" for e in tr.events if e.kind == "module_backward_pre")
    assert all(torch.equal(p.grad, r) for p, r in zip(net.parameters(), ref))  # gradients unchanged


def test_tracer_output_hooks_see_the_gradient_of_the_output_before_an_in_place_op():
    lin = nn.Linear(3, 3)
    x = torch.randn(2, 3)
    with hooklab.Tracer() as tr:
        tr.module(lin, "lin", backward="outputs")
        y = lin(x)
        y.mul_(2)                       # in place on the output: full backward hooks would forbid this
        y.sum().backward()
    assert tr.sequence() == [("module_forward_pre", "lin"), ("module_forward", "lin"),
                             ("module_backward_pre", "lin")]


def test_explicit_full_backward_hooks_still_give_grad_input():
    net = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    with hooklab.Tracer() as tr:
        tr.modules(net)                 # no in-place op: full hooks, as before
        net(torch.randn(2, 3, requires_grad=True)).sum().backward()
    assert ("module_backward", "0") in tr.sequence()


def test_in_place_detection_on_torchvision_resnet():
    tv = pytest.importorskip("torchvision")
    found = in_place_on_outputs(tv.models.resnet18(weights=None))
    assert "relu" in found and "layer1.0" in found  # ReLU(inplace=True), and BasicBlock's out += identity


def test_tracer_output_hooks_do_not_grow_with_steps():
    net = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True))
    with pytest.warns(UserWarning), hooklab.Tracer() as tr:
        tr.modules(net)
        net(torch.randn(2, 3)).sum().backward()
        after_one = len(tr.scope)  # the module hooks and one step's output-tensor hooks
        sizes = []
        for _ in range(300):  # 300 steps' worth of output hooks if the freed ones were kept
            net(torch.randn(2, 3)).sum().backward()
            sizes.append(len(tr.scope))
        assert max(sizes) <= 64 + 2 * after_one, "the handles grow with the steps"


def test_tracer_modules_registration_is_linear_in_the_number_of_modules():
    """Counted, not timed (a busy machine's clock cannot tell 8x from 24x on a few milliseconds): the Python calls,
    C calls included, that registering on every module makes."""
    def calls(n):
        model = nn.Sequential(*[nn.Sequential(nn.Linear(2, 2), nn.Tanh()) for _ in range(n)])
        counted = [0]

        def count(frame, event, arg):
            if event in ("call", "c_call"):
                counted[0] += 1
        with hooklab.Tracer() as tr:
            sys.setprofile(count)
            try:
                tr.modules(model, backward=False)
            finally:
                sys.setprofile(None)
            model(torch.ones(1, 2))  # (a traced model that never runs gets a warning at the end of the block)
        return counted[0]
    calls(50)  # what the first call imports and caches
    small, large = calls(100), calls(800)
    assert small > 100 and large / small < 8 * 1.5, (small, large)  # 8x the modules: quadratic would be ~64x


def test_tracer_modules_takes_one_name_as_a_string_and_rejects_a_non_module():
    model = nn.Sequential(nn.Linear(1, 1), nn.ReLU())
    with hooklab.Tracer() as tr:
        with pytest.raises(TypeError, match="takes an nn.Module"):
            tr.modules("model")
        assert tr.modules(model, "0", backward=False) == ["0"]  # one name, as every tool's names= takes it
        model(torch.ones(1, 1))
    assert tr.sequence() == [("module_forward_pre", "0"), ("module_forward", "0")]


def test_tracer_shows_keyword_inputs():
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    q = torch.randn(2, 3, 8)
    with hooklab.Tracer() as tr:
        tr.module(mha, "attn", backward=False)
        mha(query=q, key=q, value=q)
    assert tr.events[0].detail == "input [] kwargs {query: (2, 3, 8), key: (2, 3, 8), value: (2, 3, 8)}"


# ---------------------------------------------------------------- torch.compile
@pytest.fixture
def compiled():
    torch._dynamo.reset()
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    cnet = torch.compile(net, backend="eager")
    cnet(torch.randn(3, 4))          # the first call compiles
    yield net, cnet
    torch._dynamo.reset()


@pytest.mark.parametrize("make", [
    lambda c: hooklab.capture(c, "_orig_mod.0"),
    lambda c: hooklab.FeatureExtractor(c, ["_orig_mod.0"]),
    lambda c: hooklab.ActivationStats(c, ["_orig_mod.0"]),
], ids=["capture", "FeatureExtractor", "ActivationStats"])
def test_tools_refuse_a_compiled_wrapper_with_the_way_forward(compiled, make):
    with pytest.raises(TypeError, match=r"torch.compile'd .*model._orig_mod"):
        make(compiled[1])


def test_tracer_refuses_a_compiled_wrapper(compiled):
    with hooklab.Tracer() as tr, pytest.raises(TypeError, match=r"model._orig_mod"):
        tr.modules(compiled[1])


def test_names_on_a_compiled_wrapper(compiled):
    net, cnet = compiled
    assert hooklab.get_module(cnet, "0") is net[0]  # the wrapper forwards attribute access
    with pytest.raises(hooklab.UnknownModuleError, match=r"torch.compile wrapper.*model._orig_mod"):
        hooklab.get_module(cnet, "9")


@pytest.mark.pin
def test_hooks_on_a_submodule_of_a_compiled_model_say_they_saw_nothing(compiled):
    net, cnet = compiled  # torch.compile marks only the model it was given, not its submodules
    x = torch.randn(3, 4)
    with pytest.warns(RuntimeWarning, match=r"ActivationStats recorded no call of ''.*model containing this module"):
        with hooklab.ActivationStats(net[0], ""):
            cnet(x)
    with pytest.warns(RuntimeWarning, match=r"Tracer recorded no event of the modules it traced \(fc\)"):
        with hooklab.Tracer() as tr:
            tr.module(net[0], "fc")
            cnet(x)


def test_a_block_that_raised_gets_no_extra_warning_about_what_did_not_run():
    model = nn.Sequential(nn.Linear(2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ZeroDivisionError):
            with hooklab.ActivationStats(model, "0"), hooklab.Tracer() as tr:
                tr.modules(model)
                1 / 0


@pytest.mark.pin
def test_hooks_on_the_eager_model_of_a_compiled_one_say_they_saw_nothing(compiled):
    net, cnet = compiled
    x = torch.randn(3, 4)
    with pytest.warns(RuntimeWarning, match="ActivationStats recorded no call.*torch.compile"):
        with hooklab.ActivationStats(net, ["0"]):
            cnet(x)
    with pytest.warns(RuntimeWarning, match="Tracer recorded no event of the modules it traced.*torch.compile"):
        with hooklab.Tracer() as tr:
            tr.modules(net)
            cnet(x)
    with hooklab.capture(net, "0") as store:
        cnet(x)
    with pytest.raises(KeyError, match="has been torch.compile'd"):
        store["0"]


def test_eager_model_of_a_compiled_one_works_when_called_itself(compiled):
    net, _ = compiled
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with hooklab.ActivationStats(net, ["0"]) as st:
            net(torch.randn(3, 4))
    assert len(st.stats["0"]["mean"]) == 1


# ---------------------------------------------------------------- tuple / dict outputs
def test_capture_and_stats_take_an_output_selector_for_tuple_outputs():
    torch.manual_seed(0)
    lstm, x = nn.LSTM(4, 5, batch_first=True), torch.randn(2, 3, 4)
    with hooklab.capture(lstm, "", grads=True, output=0) as store:
        out, _ = lstm(x)
        out.square().sum().backward()
    assert torch.equal(store[""], out.detach())
    assert torch.allclose(store.grads[""], 2 * out.detach())
    with hooklab.ActivationStats(lstm, [""], output=lambda o: o[1][0]) as st:
        _, (h, _) = lstm(x)
    assert st.stats[""]["mean"] == [pytest.approx(h.mean().item())]


@pytest.mark.parametrize("tool", ["capture", "stats"])
def test_tuple_output_without_selector_says_how_to_choose(tool):
    lstm = nn.LSTM(4, 5)
    with hooklab.no_hooks_left_behind(lstm), \
            pytest.raises(TypeError, match=r"returned tuple; choose the tensor with output= \(an index"):
        if tool == "capture":
            with hooklab.capture(lstm, "", grads=True):
                lstm(torch.randn(3, 2, 4))
        else:
            with hooklab.ActivationStats(lstm, [""]):
                lstm(torch.randn(3, 2, 4))


def test_dict_output_selected_by_key():
    class D(nn.Module):
        def forward(self, x):
            return {"out": x * 2, "aux": x}
    d = D()
    with hooklab.ActivationStats(d, [""], output="out") as st:
        d(torch.ones(2, 2))
    assert st.stats[""]["mean"] == [2.0]
    with pytest.raises(TypeError, match="output='nope' does not select anything"):
        with hooklab.ActivationStats(d, [""], output="nope"):
            d(torch.ones(2, 2))


# ---------------------------------------------------------------- nested tensors, sparse gradients
@pytest.fixture
def encoder_and_mask():
    torch.manual_seed(0)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, batch_first=True, dropout=0.0), 2,
                                enable_nested_tensor=True).eval()
    x, mask = torch.randn(2, 6, 16), torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    return enc, x, mask


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_nested_tensor_outputs(encoder_and_mask):
    enc, x, mask = encoder_and_mask
    table = hooklab.layer_shapes(enc, x, src_key_padding_mask=mask, depth=2)
    assert [r.shape for r in table] == ["nested[(6, 16), (4, 16)]"] * 2  # the Tracer's notation (below) too
    with torch.no_grad(), hooklab.ActivationStats(enc, ["layers.0"]) as st, hooklab.Tracer() as tr:
        tr.modules(enc, ["layers.1"], backward=False)
        out = enc(x, src_key_padding_mask=mask)
    assert out.shape == (2, 6, 16)
    assert tr.events[-1].detail == "output nested[(6, 16), (4, 16)]"
    assert st.stats["layers.0"]["near_zero"] == [0.0]


def test_gradient_monitor_on_sparse_gradients():
    emb = nn.Embedding(10, 4, sparse=True)
    with hooklab.GradientMonitor(emb) as gm:
        emb(torch.tensor([1, 2, 1])).sum().backward()
    assert gm.norms(per="parameter")["weight"] == [pytest.approx(emb.weight.grad.to_dense().norm().item())]


# ---------------------------------------------------------------- checkpoint_modules (offload.py)
def test_checkpoint_modules_with_a_list_argument_the_caller_appends_to():
    torch.manual_seed(0)
    m, x = Block(), torch.randn(3, 4)
    m(x).square().sum().backward()
    ref = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    with hooklab.checkpoint_modules(m, ["a"]):
        loss = m(x).square().sum()
    loss.backward()
    assert all(torch.allclose(p.grad, r) for p, r in zip(m.parameters(), ref))


# ---------------------------------------------------------------- smaller ones
def test_hook_inventory_lists_a_hook_on_a_tied_weight_once():
    m = nn.Module()
    m.emb, m.dec = nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)
    m.dec.weight = m.emb.weight
    h = m.emb.weight.register_hook(lambda g: None)
    try:
        assert [(e.where, e.kind) for e in hooklab.hook_inventory(m, include_global=False)] == \
            [("emb.weight", "tensor")]
    finally:
        h.remove()


def test_missing_gradient_says_why():
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    net[0].requires_grad_(False)
    with hooklab.capture(net, ["0", "2"], grads=True) as st:
        net(torch.randn(3, 4)).sum().backward()
    assert st.grads["2"].shape == (3, 2)
    with pytest.raises(KeyError, match="no gradient reached '0'.*frozen layer"):
        st.grads["0"]
    with pytest.raises(KeyError, match="'9' was not captured"):
        st.grads["9"]


def test_feature_extractor_warns_on_a_module_called_twice():
    relu = nn.ReLU()
    net = nn.Sequential(nn.Linear(2, 2), relu, nn.Linear(2, 2), relu)
    with pytest.warns(UserWarning, match="'1' ran more than once"):
        out = hooklab.FeatureExtractor(net, ["1"])(torch.ones(1, 2))
    assert out["1"].shape == (1, 2)


def test_layer_shapes_says_when_no_module_ran_at_that_depth():
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, batch_first=True), 2, enable_nested_tensor=False)
    with pytest.warns(UserWarning, match="no module at depth <= 1 was called.*try depth=2"):
        table = hooklab.layer_shapes(enc, torch.randn(2, 3, 16), depth=1)
    assert len(table) == 0
    assert len(hooklab.layer_shapes(enc, torch.randn(2, 3, 16), depth=2)) == 2
