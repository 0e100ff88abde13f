"""Tests of hooklab.segments.checkpoint_segments against plain PyTorch: the same gradients, one input kept per
segment (measured with MemoryMeter), and every refusal the module docstring promises."""
from __future__ import annotations

import copy
import pickle
import sys
import types

import pytest
import torch
from torch import nn

import hooklab
from hooklab.segments import checkpoint_segments

pytestmark = pytest.mark.timeout(120)


def grads_of(model, run, context=None):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(5)
    if context is None:
        loss = run()
    else:
        with context:
            loss = run()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def mlp(blocks=5, width=32, dropout=0.0):
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Dropout(dropout), nn.Tanh())
                           for _ in range(blocks)])


class Layer(nn.Module):
    """A transformer-like layer: the hidden state and, as keywords, a mask and a scale."""

    def __init__(self, width=16):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, h, mask=None, scale=1.0):
        return torch.tanh(self.linear(h) * mask) * scale + h


class Looped(nn.Module):
    """Layers in a ModuleList called in a loop, as Hugging Face models call theirs (no Sequential)."""

    def __init__(self, layers=4, width=16):
        super().__init__()
        self.layers = nn.ModuleList(Layer(width) for _ in range(layers))

    def forward(self, x):
        mask = (x > 0).float()
        h = x
        for layer in self.layers:
            h = layer(h, mask=mask, scale=0.5)
        return h


def test_gradients_are_bit_for_bit_those_without_checkpoints_also_with_dropout():
    model = mlp(dropout=0.3)
    x = torch.randn(8, 32, requires_grad=True)
    plain = grads_of(model, lambda: model(x).sum())
    segmented = grads_of(model, lambda: model(x).sum(), checkpoint_segments(model, [["0", "1", "2"], ["3", "4"]]))
    assert all(torch.equal(a, b) for a, b in zip(plain, segmented, strict=True))


def test_batch_norm_blocks_give_the_same_gradients():
    torch.manual_seed(0)
    block = lambda: nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())  # noqa: E731
    model = nn.Sequential(*[block() for _ in range(4)])
    x = torch.randn(2, 4, 8, 8)
    state = copy.deepcopy(model.state_dict())
    plain = grads_of(model, lambda: model(x).square().sum())
    model.load_state_dict(state)
    segmented = grads_of(model, lambda: model(x).square().sum(), checkpoint_segments(model, [["0", "1", "2", "3"]]))
    assert all(torch.equal(a, b) for a, b in zip(plain, segmented, strict=True))


def test_a_loop_of_layers_with_keyword_arguments_keeps_one_input_and_the_mask():
    torch.manual_seed(0)
    model, x = Looped(), torch.randn(4, 16)
    plain = grads_of(model, lambda: model(x).sum())
    names = [f"layers.{i}" for i in range(4)]
    model.zero_grad(set_to_none=True)
    with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
        with checkpoint_segments(model, [names]):
            loss = model(x).sum()
        held = meter.mark() - loss.numel() * loss.element_size()
        loss.backward()
    assert held == x.numel() * 4  # the mask (computed by the parent, an argument of every layer), and nothing else
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), plain, strict=True))


def test_one_segment_keeps_one_input_where_per_block_checkpoints_keep_one_each():
    model = mlp(blocks=4)
    x = torch.randn(16, 32)

    def held(context):
        with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
            with context:
                loss = model(x).sum()
            kept = meter.mark() - loss.numel() * loss.element_size()
            loss.backward()
        model.zero_grad(set_to_none=True)
        return kept

    activation = 16 * 32 * 4
    assert held(hooklab.checkpoint_modules(model, ["0", "1", "2", "3"])) == 3 * activation  # x is the model's input
    assert held(checkpoint_segments(model, [["0", "1", "2", "3"]])) == 0
    assert held(checkpoint_segments(model, [["0", "1"], ["2", "3"]])) == activation


def test_a_second_backward_recomputes_again():
    torch.manual_seed(0)
    model, x = Looped(), torch.randn(4, 16)
    plain = grads_of(model, lambda: model(x).sum())
    model.zero_grad(set_to_none=True)
    with checkpoint_segments(model, [["layers.0", "layers.1", "layers.2"]]):
        loss = model(x).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    assert all(torch.allclose(p.grad, 2 * g) for p, g in zip(model.parameters(), plain, strict=True))


def test_no_grad_is_a_plain_call_and_the_graph_outlives_the_block():
    model = mlp(blocks=3)
    x = torch.randn(4, 32)
    with checkpoint_segments(model, [["0", "1", "2"]]):
        with torch.no_grad():
            expected = model(x)
        loss = model(x).sum()
    assert hooklab.hook_inventory(model) == []
    loss.backward()  # the recompute needs no hook: it runs after the block
    assert torch.allclose(loss, expected.sum())


def test_a_block_that_does_not_get_the_previous_output_is_refused():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return self.b(self.a(x) * 2)  # the parent changes a's output before b

    model = Scaled()
    with hooklab.no_hooks_left_behind(model), pytest.raises(RuntimeError, match="did not receive 'a''s output"):
        with checkpoint_segments(model, [["a", "b"]]):
            model(torch.randn(2, 4))


def test_a_forward_hook_that_replaces_the_output_is_refused():
    model = mlp(blocks=2)
    handle = model[0].register_forward_hook(lambda m, args, out: out * 1)
    try:
        with pytest.raises(RuntimeError, match="a forward hook on it returns another tensor"):
            with checkpoint_segments(model, [["0", "1"]]):
                model(torch.randn(2, 32))
    finally:
        handle.remove()


def test_blocks_out_of_order_are_refused():
    model = mlp(blocks=3)
    with pytest.raises(RuntimeError, match="ran without '1' right before it"):
        with checkpoint_segments(model, [["1", "2"]]):
            model[2](torch.randn(2, 32, requires_grad=True))


def test_a_recompute_that_saves_something_else_raises_a_clear_error():
    class Flagged(nn.Module):
        flag = True

        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(8, 8)

        def forward(self, x):
            h = self.linear(x)
            return h.exp() if Flagged.flag else h * 2  # a Python flag that changes between forward and backward

    torch.manual_seed(0)
    model = nn.Sequential(Flagged(), Flagged())
    with checkpoint_segments(model, [["0", "1"]]):
        loss = model(torch.randn(2, 8)).sum()
    Flagged.flag = False
    try:
        with pytest.raises(RuntimeError, match=r"recomputing the segment \['0', '1'\] in backward, block '0' saved"):
            loss.backward()
    finally:
        Flagged.flag = True


def test_an_argument_changed_in_place_before_backward_raises_as_pytorch_does():
    torch.manual_seed(0)
    model, x = Looped(layers=2), torch.randn(4, 16)
    mask_holder = {}
    original = model.forward

    def forward(x):
        mask = (x > 0).float()
        mask_holder["mask"] = mask
        h = x
        for layer in model.layers:
            h = layer(h, mask=mask)
        return h

    model.forward = forward
    try:
        with checkpoint_segments(model, [["layers.0", "layers.1"]]):
            loss = model(x).sum()
        mask_holder["mask"].mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
    finally:
        model.forward = original


def test_a_key_value_cache_is_refused(monkeypatch):
    class Cache:
        pass

    monkeypatch.setitem(sys.modules, "transformers.cache_utils", types.SimpleNamespace(Cache=Cache))

    class CachedLinear(nn.Linear):
        def forward(self, x, cache=None):
            return super().forward(x)

    model = nn.Sequential(CachedLinear(4, 4))
    with pytest.raises(RuntimeError, match="key/value cache"):
        with checkpoint_segments(model, [["0"]]):
            model[0](torch.randn(2, 4), cache=Cache())


@pytest.mark.parametrize("segments, match", [
    ([["0", "1"], ["1", "2"]], "named twice"),
    ([["", "1"]], "inside"),
    ([[]], "at least one block"),
    ("0", "a list of segments"),
])
def test_bad_segments_are_refused(segments, match):
    model = mlp(blocks=3)
    with hooklab.no_hooks_left_behind(model), pytest.raises((ValueError, TypeError), match=match):
        with checkpoint_segments(model, segments):
            pass


def test_hooks_are_removed_when_the_block_raises_and_a_deepcopy_is_not_segmented():
    model = mlp(blocks=3)
    x = torch.randn(2, 32)
    with hooklab.no_hooks_left_behind(model), pytest.raises(ZeroDivisionError):
        with checkpoint_segments(model, [["0", "1", "2"]]):
            copied = copy.deepcopy(model)
            with pytest.raises(TypeError, match="cannot pickle a model that carries checkpoint_segments's hooks"):
                pickle.dumps(model)
            raise ZeroDivisionError("inside the block")
    # the copy made inside the block carries the hooks, which ignore it: it saves its tensors as usual
    with hooklab.SavedTensorLedger(copied) as ledger:
        copied(x).sum()
    assert ledger.activation_bytes > 0


def test_nothing_of_a_recompute_stays_alive_after_backward():
    """The recompute in backward runs the blocks under a pack hook of its own; if that hook returned the tensor
    itself, an op that saves its output (tanh) would make a cycle through C++ (tensor -> grad_fn -> saved tensor)
    that Python's garbage collector cannot break, and every backward would leak the recomputed activations. The
    truth is independent of the tool: the storages the recompute made, held only through weak references."""
    import gc
    import weakref

    model = mlp(blocks=4)
    x = torch.randn(8, 32)
    made: list[weakref.ref] = []

    def note(module, args, output):  # a forward hook on every Tanh: its output, in forward and in the recompute
        made.append(weakref.ref(output))
    handles = [m.register_forward_hook(note) for m in model.modules() if isinstance(m, nn.Tanh)]
    try:
        for _ in range(2):
            with checkpoint_segments(model, [["0", "1", "2"]]):
                loss = model(x).sum()
            loss.backward()
            del loss
    finally:
        for h in handles:
            h.remove()
    gc.collect()
    assert len(made) == 2 * (4 + 3)  # four Tanh in forward, three again in the recompute, twice
    assert [r for r in made if r() is not None] == []
    assert not [o for o in gc.get_objects() if type(o).__name__ == "_Run" and type(o).__module__ == "hooklab.segments"]
