"""hooklab.find_blocks on real models of the zoos, against an independent truth: transformers' own block class
(``GradientCheckpointingLayer``, what its gradient checkpointing wraps), and the block containers that timm,
torchvision and diffusers define by name (hand-known paths); and the rule's edge cases on small models."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from hooklab import BlockStack, find_blocks
from optional import needs


def library_blocks(model):
    from transformers.modeling_layers import GradientCheckpointingLayer
    return [n for n, m in model.named_modules() if isinstance(m, GradientCheckpointingLayer)]


@pytest.mark.parametrize("kind", ["llama", "t5", "llava"])
def test_transformers_blocks_are_the_library_blocks(kind):
    transformers = needs("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                    num_key_value_heads=1)
        if kind == "llama":
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**text))
            expected = {"model.layers": 2}
        elif kind == "t5":
            model = transformers.T5ForConditionalGeneration(transformers.T5Config(
                vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=3, num_heads=2))
            expected = {"encoder.block": 2, "decoder.block": 3}
        else:
            vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
                          image_size=32, patch_size=16)
            model = transformers.LlavaForConditionalGeneration(transformers.LlavaConfig(
                text_config={"model_type": "llama", **text}, vision_config={"model_type": "clip_vision_model",
                                                                            **vision}))
            expected = {"model.language_model.layers": 2, "model.vision_tower.encoder.layers": 3}
    stacks = find_blocks(model)
    assert {s.path: len(s) for s in stacks} == expected
    assert sorted(n for s in stacks for n in s.names) == sorted(library_blocks(model))
    assert stacks[0].parameters == max(s.parameters for s in stacks)  # the main stack first


def test_a_stage_list_is_found_and_the_library_blocks_are_inside_its_stages():
    transformers = needs("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.SwinModel(transformers.SwinConfig(embed_dim=8, depths=[2, 1], num_heads=[1, 2],
                                                               image_size=32, patch_size=4, window_size=4))
    (stack,) = find_blocks(model)
    assert stack.path == "encoder.layers" and stack.classes == ["SwinStage"]
    assert all(any(n.startswith(b + ".") or n == b for b in stack.names) for n in library_blocks(model))


@pytest.mark.parametrize("name, expected", [
    ("resnet18", {"layer1": 2, "layer2": 2, "layer3": 2, "layer4": 2}),
    ("mobilenet_v2", {"features": 19}),
])
def test_torchvision_blocks(name, expected):
    torchvision = needs("torchvision")
    with torch.device("meta"):
        model = torchvision.models.get_model(name, weights=None)
    assert {s.path: len(s) for s in find_blocks(model)} == expected


@pytest.mark.parametrize("name, expected", [
    ("vit_tiny_patch16_224", {"blocks": 12}),
    ("resnet18", {"layer1": 2, "layer2": 2, "layer3": 2, "layer4": 2}),
    ("convnext_atto", {"stages": 4}),
])
def test_timm_blocks(name, expected):
    timm = needs("timm")
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    assert {s.path: len(s) for s in find_blocks(model)} == expected


def test_diffusers_unet_blocks():
    diffusers = needs("diffusers")
    with torch.device("meta"):
        unet = diffusers.UNet2DModel(sample_size=8, in_channels=1, out_channels=1, layers_per_block=1,
                                     block_out_channels=(8, 16), norm_num_groups=4,
                                     down_block_types=("DownBlock2D", "DownBlock2D"),
                                     up_block_types=("UpBlock2D", "UpBlock2D"))
    found = {s.path: len(s) for s in find_blocks(unet)}
    assert found == {"down_blocks": 2, "up_blocks": 2, "mid_block.resnets": 2}


def test_the_rule_on_small_models():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn, self.experts = nn.Linear(4, 4), nn.ModuleList([nn.Sequential(nn.Linear(4, 4)) for _ in range(3)])

    leaves = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    assert find_blocks(leaves) == []  # layers, not blocks
    model = nn.Module()
    model.layers = nn.ModuleList([Block() for _ in range(2)])  # experts inside a block are not listed
    model.heads = nn.ModuleDict({"a": nn.Sequential(nn.Linear(4, 2)), "b": nn.Sequential(nn.Linear(4, 3))})
    model.mixed = nn.ModuleDict({"a": nn.Sequential(nn.Linear(4, 2)), "b": Block()})  # not one class: no stack,
    found = find_blocks(model)  # so the experts list inside it is one (largest first)
    assert [(s.path, len(s)) for s in found] == [("layers", 2), ("mixed.b.experts", 3), ("heads", 2)]
    assert found[0].names == ["layers.0", "layers.1"] and found[0].classes == ["Block"]
    assert isinstance(found[0], BlockStack) and len(found[0]) == 2
    with pytest.raises(TypeError, match="find_blocks takes an nn.Module"):
        find_blocks("model")


class Attention(nn.Module):
    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.out(torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v)


class FeedForward(nn.Module):
    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class ListOfLists(nn.Module):
    """The common hand-written transformer: ``forward`` iterates ``layers`` and each ``[attn, ff]`` and calls only the
    two modules inside; the lists themselves are never called."""

    def __init__(self, depth: int = 3) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.ModuleList([Attention(), FeedForward()]) for _ in range(depth)])

    def forward(self, x):
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return x


def called_modules(model, run) -> list[str]:
    """The plain-PyTorch truth: the names of the modules whose forward hooks fire in ``run()``, in call order."""
    fired: list[str] = []
    handles = [m.register_forward_hook(lambda m, a, o, name=name: fired.append(name))
               for name, m in model.named_modules() if name]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return fired


def test_a_list_of_lists_gives_the_modules_that_are_called_and_explain_hook_agrees():
    from hooklab import explain_hook

    model = ListOfLists()
    run = lambda: model(torch.randn(2, 4, 8))  # noqa: E731
    (stack,) = find_blocks(model)  # each layers.k is part of this stack, not a stack of its own
    assert stack.path == "layers" and stack.classes == ["Attention", "FeedForward"]
    truth = [n for n in called_modules(model, run) if n.count(".") == 2]  # layers.k.i: what forward calls
    assert stack.names == sorted(set(truth), key=truth.index) == [f"layers.{k}.{i}" for k in range(3) for i in (0, 1)]
    for name in stack.names:
        assert explain_hook(model, name, run=run).calls == 1
    for k in range(3):  # what find_blocks leaves out is what explain_hook says never fires
        assert f"layers.{k}" not in called_modules(model, run)
        assert explain_hook(model, f"layers.{k}", run=run).cause == "container"


def test_nested_lists_of_blocks_are_one_stack_of_the_blocks_inside():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return self.b(self.a(x))

    model = nn.Module()
    model.stages = nn.ModuleList([nn.ModuleList([Block() for _ in range(3)]) for _ in range(2)])
    stacks = find_blocks(model)
    assert [(s.path, s.names) for s in stacks] == [("stages", [f"stages.{i}.{j}" for i in range(2) for j in range(3)])]
    leaves = nn.Module()  # lists of lists of single layers: layers, not blocks (and a warning says what to hook)
    leaves.layers = nn.ModuleList([nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)]) for _ in range(3)])
    with pytest.warns(UserWarning, match="no module encloses one layer"):
        assert find_blocks(leaves) == []


class Functional(nn.Module):
    """One list of blocks that forward calls, one whose blocks it never calls: it reads their weights only."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([FeedForward() for _ in range(2)])
        self.weights = nn.ModuleList([FeedForward() for _ in range(3)])

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        for held in self.weights:
            x = x + torch.nn.functional.linear(torch.relu(torch.nn.functional.linear(x, held.up.weight)),
                                               held.down.weight)
        return x


def test_with_run_a_list_whose_blocks_are_never_called_is_not_a_stack():
    """The module tree alone cannot tell: both lists look like stacks (``called`` None: not checked). With
    ``run``, the list whose blocks the step never calls is left out, and every name kept is one whose hook fires
    (the truth: plain forward hooks on every module)."""
    model = Functional()
    run = lambda: model(torch.randn(2, 8))  # noqa: E731
    unchecked = find_blocks(model)
    assert {s.path for s in unchecked} == {"blocks", "weights"} and {s.called for s in unchecked} == {None}
    fired = set(called_modules(model, run))
    assert not any(n.startswith("weights.") for n in fired)
    checked = find_blocks(model, run=run)
    assert [(s.path, s.called) for s in checked] == [("blocks", True)]
    assert set(checked[0].names) <= fired
    with pytest.raises(TypeError, match="run is a function of no arguments"):
        find_blocks(model, run=torch.randn(2, 8))

    def fails():
        model(torch.randn(2, 8))
        raise RuntimeError("the step failed")
    with pytest.raises(RuntimeError, match="the step failed"):  # its pre-hooks are removed even so
        find_blocks(model, run=fails)
    assert not any(m._forward_pre_hooks for m in model.modules())


def test_a_sequential_of_sequentials_lists_each_level_once_and_says_which_holds_which():
    """By the rule (a stack that is a called block of another is listed too: torchvision's ConvNeXt ``features``
    and its stages), the root and both inner Sequentials are stacks; each inner one says it is a block of the root
    (``within``), so one level is one stack. Every name is of a module that a forward calls (plain hooks)."""
    model = nn.Sequential(*[nn.Sequential(FeedForward(), FeedForward()) for _ in range(2)])
    run = lambda: model(torch.randn(2, 8))  # noqa: E731
    stacks = find_blocks(model, run=run)
    assert sorted((s.path, s.within) for s in stacks) == [("", None), ("0", ""), ("1", "")]
    assert [s.path for s in stacks if s.within is None] == [""]
    fired = set(called_modules(model, run))
    assert all(set(s.names) <= fired for s in stacks)


class Parts(nn.Module):
    """The hand-written layout no module encloses: each layer a list of its parts, a bare norm among them, and the
    residual additions in the model's forward."""

    def __init__(self, depth: int = 3) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.ModuleList([nn.LayerNorm(8), Attention(), nn.LayerNorm(8), FeedForward()])
                                     for _ in range(depth)])

    def forward(self, x):
        for norm1, attn, norm2, ff in self.layers:
            x = x + attn(norm1(x))
            x = x + ff(norm2(x))
        return x


def test_a_layout_no_module_encloses_gets_no_stack_and_a_warning_whose_advice_holds():
    """The warning's advice, checked with plain hooks: the residual stream after layer 0 is what a forward
    pre-hook on ``layers.1.0`` receives, and it is layer 0's input plus its attention's and feed-forward's
    outputs (forward hooks on ``layers.0.1`` and ``layers.0.3``)."""
    model = Parts()
    with pytest.warns(UserWarning, match=r"no module encloses one layer of Parts: layers\.0, layers\.1, .*"
                                         r"a forward pre-hook on layers\.i\.0"):
        assert find_blocks(model) == []
    seen = {}
    hooks = [model.layers[0][0].register_forward_pre_hook(lambda m, a: seen.update(x0=a[0])),
             model.layers[1][0].register_forward_pre_hook(lambda m, a: seen.update(x1=a[0])),
             model.layers[0][1].register_forward_hook(lambda m, a, o: seen.update(attn=o)),
             model.layers[0][3].register_forward_hook(lambda m, a, o: seen.update(ff=o))]
    try:
        with torch.no_grad():
            model(torch.randn(2, 5, 8))
    finally:
        for h in hooks:
            h.remove()
    assert torch.allclose(seen["x1"], seen["x0"] + seen["attn"] + seen["ff"], atol=1e-6)


@pytest.mark.parametrize("convert", [torch.jit.script, lambda m: torch.jit.trace(m, torch.randn(2, 4))])
def test_a_torchscript_model_is_refused(convert):
    model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3)])
    assert [s.names for s in find_blocks(model)] == [["0", "1", "2"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated
        scripted = convert(model)
    with pytest.raises(TypeError, match="a TorchScript model .* pass the model before scripting or tracing it"):
        find_blocks(scripted)


class LazyBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.act = nn.LazyLinear(4), nn.ReLU()

    def forward(self, x):
        return self.act(self.lin(x))


class LazyStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([LazyBlock() for _ in range(3)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_lazy_modules_not_run_yet_are_refused_saying_to_run_the_model_once():
    """Their parameters have no size before the first forward (torch's own ValueError came from counting them): the
    error names one and says what to do, and doing it works, as does ``run``, which runs the model first."""
    model = LazyStack()
    with pytest.raises(ValueError, match=r"find_blocks: LazyStack has lazy modules that have not run yet \(layers\.0"
                                         r"\.lin\.weight is uninitialized, and 5 more\): .* Run the model once first "
                                         r"\(model\(x\)\), or pass run=lambda: model\(x\)"):
        find_blocks(model)
    model(torch.randn(2, 4))
    assert [(s.path, s.names, s.parameters) for s in find_blocks(model)] == [
        ("layers", ["layers.0", "layers.1", "layers.2"], 3 * (4 * 4 + 4))]
    fresh = LazyStack()
    assert [(s.path, s.called) for s in find_blocks(fresh, run=lambda: fresh(torch.randn(2, 4)))] == [("layers", True)]
