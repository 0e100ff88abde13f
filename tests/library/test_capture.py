"""hooklab.capture: capture(), FeatureExtractor, layer_shapes()."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import hooklab
from gc_survivors import survivors
from hooklab import Capture, FeatureExtractor, ShapeRow, capture, layer_shapes, no_hooks_left_behind


class Block(nn.Module):
    """conv -> bn -> relu(inplace) -> conv, the relu used twice (like torchvision's BasicBlock)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(2, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn(self.conv1(x)))
        return self.relu(self.conv2(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.flat(self.pool(self.block(x))))


class Pair(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, x + 1


@pytest.fixture
def net() -> Net:
    torch.manual_seed(0)
    return Net()


@pytest.fixture
def x() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(2, 2, 5, 5)


# ---- capture -------------------------------------------------------------------------------

def test_capture_records_outputs_equal_to_direct_computation(net, x):
    with capture(net, ["block.conv1", "fc"]) as store:
        out = net(x)
    assert isinstance(store, Capture)
    assert sorted(store) == ["block.conv1", "fc"]
    assert torch.equal(store["fc"], out.detach())
    assert torch.equal(store["block.conv1"], net.block.conv1(x).detach())


def test_capture_detaches_by_default_and_keeps_graph_when_asked(net, x):
    with capture(net, "fc") as store:
        net(x)
    assert not store["fc"].requires_grad and store["fc"].grad_fn is None
    with capture(net, "fc", detach=False) as store:
        net(x)
    assert store["fc"].requires_grad and store["fc"].grad_fn is not None


def test_capture_to_cpu_and_clone(net, x):
    with capture(net, "fc", to_cpu=True, clone=True) as store:
        out = net(x)
    assert store["fc"].device.type == "cpu"
    assert store["fc"].data_ptr() != out.data_ptr()
    assert torch.equal(store["fc"], out.detach())


def test_capture_removes_hooks_on_exit(net, x):
    with no_hooks_left_behind(net), capture(net, ["block", "block.relu", "fc"], grads=True):
        assert hooklab.hook_inventory(net, include_global=False) != []
        net(x).sum().backward()


def test_capture_removes_hooks_after_an_exception(net, x):
    with no_hooks_left_behind(net), pytest.raises(ZeroDivisionError):
        with capture(net, ["block.conv1", "fc"], grads=True):
            net(x)
            1 / 0
    with capture(net, "fc") as store:  # and the model still works, with a fresh store
        net(x)
    assert store.calls["fc"] == 1


def test_capture_unknown_name_lists_existing_names_and_registers_nothing(net):
    with no_hooks_left_behind(net), pytest.raises(hooklab.UnknownModuleError) as info:
        capture(net, ["fc", "block.conv3"])
    message = str(info.value)
    assert "block.conv3" in message and "block.conv1" in message and "fc" in message


@pytest.mark.parametrize("names, error", [([], ValueError), ([1], TypeError), (3, TypeError)])
def test_capture_bad_names(net, names, error):
    with pytest.raises(error):
        capture(net, names)


def test_capture_grads_equal_autograd_grad(net, x):
    with capture(net, ["block", "fc"], grads=True, detach=False) as store:
        loss = net(x).pow(2).sum()
        act = store["block"]
        expected = torch.autograd.grad(loss, act, retain_graph=True)[0]
        loss.backward()
    assert torch.allclose(store.grads["block"], expected)
    assert torch.allclose(store.grads["fc"], 2 * store["fc"].detach())


def test_capture_grad_is_taken_before_a_following_inplace_relu(net, x):
    # a full backward hook on bn would fail here (its output is modified in place by ReLU);
    # the tensor hook sees d(loss)/d(bn output): zero where the relu cut it off
    with capture(net, "block.bn", grads=True, clone=True) as store:
        net(x).sum().backward()
    g, out = store.grads["block.bn"], store["block.bn"]
    assert g.shape == out.shape
    assert torch.all(g[out <= 0] == 0) and torch.any(g[out > 0] != 0)


def test_capture_grads_without_backward_and_under_no_grad(net, x):
    with capture(net, "fc", grads=True) as store:
        with torch.no_grad():
            net(x)
    assert "fc" in store and "fc" not in store.grads


def test_capture_grads_needs_tensor_output():
    model = nn.Sequential(Pair())
    t = torch.ones(2, requires_grad=True)
    with no_hooks_left_behind(model), pytest.raises(TypeError, match="tensor output"):
        with capture(model, "0", grads=True):
            model(t)


def test_capture_tuple_output_is_detached_elementwise():
    model = nn.Sequential(Pair())
    t = torch.ones(2, requires_grad=True)
    with capture(model, "0") as store:
        model(t)
    a, b = store["0"]
    assert isinstance(store["0"], tuple) and not a.requires_grad and torch.equal(b, t.detach() + 1)


def test_capture_counts_calls_and_keeps_last_output_and_its_grad(net, x):
    with capture(net, "block.relu", grads=True, detach=False) as store:
        loss = net(x).sum()
        last = store["block.relu"]
        expected = torch.autograd.grad(loss, last, retain_graph=True)[0]
        loss.backward()
    assert store.calls["block.relu"] == 2
    assert store["block.relu"].shape == (2, 3, 5, 5)
    assert torch.equal(store.grads["block.relu"], expected)


def test_capture_detects_output_overwritten_in_place(net, x):
    with capture(net, "block.bn") as store:
        net(x)
    with pytest.raises(RuntimeError, match="clone=True"):
        store["block.bn"]
    with capture(net, "block.bn", clone=True) as kept:
        net(x)
    assert bool((kept["block.bn"] < 0).any())  # the value before the in-place relu


def test_capture_key_errors(net, x):
    with capture(net, ["fc", "block.conv1"]) as store:
        pass
    with pytest.raises(KeyError, match="has not run yet"):
        store["fc"]
    with pytest.raises(KeyError, match="was not captured"):
        store["pool"]


def test_capture_clear(net, x):
    with capture(net, "fc", grads=True) as store:
        net(x).sum().backward()
        store.clear()
    assert len(store) == 0 and store.grads == {} and store.calls == {"fc": 0}


def test_capture_inference_mode(net, x):
    with capture(net, "block.bn") as store:
        with torch.inference_mode():
            out = net(x)
    assert store["block.bn"].shape == (2, 3, 5, 5) and out.shape == (2, 4)


# ---- FeatureExtractor ----------------------------------------------------------------------

def test_feature_extractor_returns_new_dicts_and_leaves_model_hook_free(net, x):
    with no_hooks_left_behind(net):  # neither made nor called, it leaves hooks
        fe = FeatureExtractor(net, ["block", "fc"])
        f1 = fe(x)
        f2 = fe(x + 1)
    assert f1 is not f2 and list(f1) == ["block", "fc"]
    assert torch.equal(f1["fc"], net(x).detach())
    assert not torch.equal(f1["fc"], f2["fc"])
    assert not f1["fc"].requires_grad


def test_feature_extractor_detach_false_keeps_graph(net, x):
    f = FeatureExtractor(net, "fc", detach=False)(x)
    f["fc"].sum().backward()
    assert net.fc.weight.grad is not None


def test_feature_extractor_unknown_layer_fails_at_construction(net):
    with pytest.raises(hooklab.UnknownModuleError, match="block.conv1"):
        FeatureExtractor(net, ["block.conv9"])


def test_feature_extractor_accepts_a_generator(net, x):
    f = FeatureExtractor(net, (n for n in ["fc"]))(x)
    assert f["fc"].shape == (2, 4)


def test_feature_extractor_removes_hooks_when_forward_raises(net):
    fe = FeatureExtractor(net, ["fc"])
    with no_hooks_left_behind(net), pytest.raises(RuntimeError):
        fe(torch.randn(2, 7, 5, 5))  # wrong channel count


# ---- layer_shapes --------------------------------------------------------------------------

def test_layer_shapes_rows_in_call_order(net, x):
    with no_hooks_left_behind(net):
        rows = layer_shapes(net, x)
    assert [r.name for r in rows] == ["block", "pool", "flat", "fc"]
    assert rows[0] == ShapeRow("block", "Block", "(2, 3, 5, 5)", sum(p.numel() for p in net.block.parameters()), 1)
    assert rows[-1].shape == "(2, 4)"


def test_layer_shapes_depth_and_repeated_calls(net, x):
    rows = layer_shapes(net, x, depth=2)
    names = [r.name for r in rows]
    assert names[:6] == ["block", "block.conv1", "block.bn", "block.relu", "block.conv2", "block.relu"]
    assert [r.depth for r in rows[:2]] == [1, 2]
    table = rows.table()
    assert table.splitlines()[0].split() == ["layer", "type", "output", "shape", "params"]
    assert "  block.conv1" in table and str(rows) == table


def test_layer_shapes_tuple_output():
    rows = layer_shapes(nn.Sequential(Pair()), torch.ones(3))
    assert rows[0].shape == "[(3,), (3,)]"  # hooklab's one shape notation (hooklab._text.describe_shape)


def test_layer_shapes_restores_modes_and_does_not_touch_bn_stats(net, x):
    net.train()
    before = net.block.bn.running_mean.clone()
    layer_shapes(net, x)
    assert net.training and net.block.bn.training
    assert torch.equal(net.block.bn.running_mean, before)
    net.block.bn.eval()  # a mixed state survives too
    layer_shapes(net, x)
    assert net.training and not net.block.bn.training


def test_layer_shapes_removes_hooks_and_restores_mode_after_error(net):
    net.train()
    with no_hooks_left_behind(net), pytest.raises(RuntimeError):
        layer_shapes(net, torch.randn(2, 7, 5, 5))
    assert net.training and net.block.bn.training


@pytest.mark.parametrize("depth, error", [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_layer_shapes_bad_depth(net, x, depth, error):
    with pytest.raises(error, match=r"depth must be an int >= 1, got"):  # a wrong type, or an int out of range
        layer_shapes(net, x, depth=depth)


def test_layer_shapes_needs_a_module():
    with pytest.raises(TypeError, match="nn.Module"):
        layer_shapes(lambda t: t, torch.ones(1))


def test_capture_state_stays_bounded_over_1000_training_steps():
    """One gradient hook per captured name at any time, and no objects that pile up with the steps."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    tool = capture(net, ["0", "2"], grads=True)
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad()
        net(x).square().mean().backward()
        optimizer.step()

    with no_hooks_left_behind(net), tool as store:
        for _ in range(100):
            step()
        with survivors() as kept:  # the Python objects created by the 900 steps still alive after them
            for _ in range(900):
                step()
                assert len(tool.scope) == 4  # a forward hook and a gradient hook per name, owned by its scope
        growth = len(kept)
        del kept
        assert store.calls["2"] == 1000 and set(store.grads) == {"0", "2"}
    assert growth < 50, f"{growth} more Python objects after 900 more steps"
    assert len(tool.scope) == 0


def test_grads_asked_for_but_backward_run_after_the_block_gets_a_warning():
    model = nn.Sequential(nn.Linear(3, 2))
    x = torch.ones(1, 3, requires_grad=True)
    with pytest.warns(RuntimeWarning, match=r"recorded no gradient: run backward inside the `with` block"):
        with capture(model, "0", grads=True) as store:
            out = model(x)
    out.sum().backward()
    assert dict(store.grads) == {}


def test_a_module_replaced_inside_the_block_is_named_as_a_cause():
    """Review row N98: the list of causes omitted a replaced submodule."""
    model = nn.Sequential()
    model.fc = nn.Linear(3, 2)
    with capture(model, "fc") as store:
        model.fc = nn.Linear(3, 2)
        model(torch.ones(1, 3))
    with pytest.raises(KeyError, match=r"'fc' has not run yet.*module was replaced in the model"):
        store["fc"]
