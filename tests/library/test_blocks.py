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
