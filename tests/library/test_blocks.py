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
    leaves = nn.Module()  # lists of lists of single layers: layers, not blocks
    leaves.layers = nn.ModuleList([nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)]) for _ in range(3)])
    assert find_blocks(leaves) == []


@pytest.mark.parametrize("convert", [torch.jit.script, lambda m: torch.jit.trace(m, torch.randn(2, 4))])
def test_a_torchscript_model_is_refused(convert):
    model = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3)])
    assert [s.names for s in find_blocks(model)] == [["0", "1", "2"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit is deprecated
        scripted = convert(model)
    with pytest.raises(TypeError, match="a TorchScript model .* pass the model before scripting or tracing it"):
        find_blocks(scripted)
