"""The models of ``benchmarks/bench_memory.py``, built from configs with random weights (nothing downloaded), each as
a flat ``nn.Sequential`` of its blocks where it is a chain (checked to compute what the library's model computes):
timm's ViT-S/16, GPT-2 small, torchvision's ResNet-50 (and -152 on a GPU), a diffusers ``UNet2DModel``. A
:class:`Setup` is a model, its forward pass to a loss, the blocks the planner plans for and the tensors alive anyway.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torchvision
from torch import nn


@dataclass
class Setup:
    """A model, what one forward pass of it is (``forward() -> loss``), the blocks the planner plans for, and the
    tensors alive anyway (inputs, labels)."""

    name: str
    model: nn.Module
    forward: Callable[[], torch.Tensor]
    blocks: list[str]
    keep: list[torch.Tensor]
    description: str


def _checked(flat: nn.Module, reference: Callable[[], torch.Tensor], flat_out: Callable[[], torch.Tensor],
             what: str) -> None:
    with torch.no_grad():
        if not torch.allclose(flat_out(), reference(), atol=1e-5, rtol=1e-4):
            raise AssertionError(f"the flattened {what} does not compute what the library's model computes")


def sequential_resnet(seed: int, depth: int) -> nn.Sequential:
    """torchvision's ResNet as a flat Sequential: stem, the residual blocks, head (same forward)."""
    torch.manual_seed(seed)
    r = getattr(torchvision.models, f"resnet{depth}")(weights=None)
    return nn.Sequential(nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool), *r.layer1, *r.layer2, *r.layer3,
                         *r.layer4, nn.Sequential(r.avgpool, nn.Flatten(), r.fc))


def _classifier(name: str, model: nn.Sequential, batch: int, size: int, device: str, what: str) -> Setup:
    torch.manual_seed(1)
    x = torch.randn(batch, 3, size, size, device=device)
    target = torch.randint(0, 1000 if name != "vit" or size > 32 else 10, (batch,), device=device)
    return Setup(name, model, lambda: nn.functional.cross_entropy(model(x), target),
                 [str(i) for i in range(len(model) - 1)], [x, target], f"{what}, batch {batch} x 3 x {size} x {size}")


def resnet_setup(quick: bool, device: str, depth: int = 50) -> Setup:
    """ResNet-50 (ResNet-152 for the GPU rows); --quick: ResNet-50's stem, its first block and a head, 32 x 32."""
    model = sequential_resnet(0, depth)
    if quick:
        model = nn.Sequential(model[0], model[1], nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                                                nn.Linear(256, 1000)))
    batch, size = (2, 32) if quick else (256, 224) if depth == 152 else (4, 224)
    what = f"resnet{depth} stem + layer1.0 (--quick)" if quick else f"resnet{depth} (torchvision, weights=None)"
    return _classifier(f"resnet{depth}", model.to(device), batch, size, device, what)


class _VitEmbed(nn.Module):
    """timm ViT's patch embedding, class token and position embedding (its own modules and parameters only)."""

    def __init__(self, vit: nn.Module) -> None:
        super().__init__()
        self.patch_embed, self.pos_drop, self.patch_drop, self.norm_pre = (vit.patch_embed, vit.pos_drop,
                                                                           vit.patch_drop, vit.norm_pre)
        self.cls_token, self.pos_embed = vit.cls_token, vit.pos_embed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.norm_pre(self.patch_drop(self.pos_drop(x)))


class _VitHead(nn.Module):
    """timm ViT's final norm, class-token pooling and classifier."""

    def __init__(self, vit: nn.Module) -> None:
        super().__init__()
        self.norm, self.fc_norm, self.head_drop, self.head = vit.norm, vit.fc_norm, vit.head_drop, vit.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.head_drop(self.fc_norm(self.norm(x)[:, 0])))


def vit_setup(quick: bool, device: str) -> Setup:
    """timm's ViT-S/16 from its config (no weights), as Sequential(embedding, 12 blocks, head); checked equal to
    timm's forward. --quick: a 2-block ViT on 32 x 32 images."""
    import timm
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    vit = (VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=10) if quick
           else timm.create_model("vit_small_patch16_224", pretrained=False)).to(device)
    if vit.global_pool != "token" or vit.reg_token is not None or vit.no_embed_class:
        raise AssertionError("the ViT's flattening assumes class-token pooling with the class token in pos_embed")
    model = nn.Sequential(_VitEmbed(vit), *vit.blocks, _VitHead(vit))
    size = 32 if quick else 224
    s = _classifier("vit", model, 2 if quick else 4, size, device,
                    "ViT 2 blocks, width 32 (--quick)" if quick else "vit_small_patch16_224 (timm, from its config)")
    _checked(model, lambda: vit(s.keep[0]), lambda: model(s.keep[0]), "ViT")
    return s


class _Embed(nn.Module):
    """GPT-2's token and position embeddings (and their dropout), as the first block."""

    def __init__(self, transformer: nn.Module) -> None:
        super().__init__()
        self.wte, self.wpe, self.drop = transformer.wte, transformer.wpe, transformer.drop

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.drop(self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device)))


class _Head(nn.Module):
    """GPT-2's final layer norm and LM head; logits flattened to (batch x tokens, vocabulary)."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.ln_f, self.lm_head = lm.transformer.ln_f, lm.lm_head

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.ln_f(h)).flatten(0, 1)


def gpt2_setup(quick: bool, device: str) -> Setup:
    """GPT-2 small from its config (random weights, no dropout, SDPA attention), flattened: embeddings, the 12
    blocks (each gets and returns the hidden states; causal attention without a mask), head. Checked against
    GPT2LMHeadModel's own forward."""
    from transformers import GPT2Config, GPT2LMHeadModel

    layers, width, heads, vocab, batch, tokens = (2, 32, 2, 64, 2, 64) if quick else (12, 768, 12, 50257, 4, 256)
    config = GPT2Config(n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=max(tokens, 1024),
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    lm = GPT2LMHeadModel(config).to(device)
    model = nn.Sequential(_Embed(lm.transformer), *lm.transformer.h, _Head(lm))
    torch.manual_seed(1)
    ids = torch.randint(0, vocab, (batch, tokens + 1), device=device)
    x, target = ids[:, :-1].contiguous(), ids[:, 1:].flatten()
    _checked(model, lambda: lm(x).logits.flatten(0, 1), lambda: model(x), "GPT-2")
    return Setup("gpt2", model, lambda: nn.functional.cross_entropy(model(x), target),
                 [str(i) for i in range(len(model) - 1)], [x, target],
                 f"GPT-2 from a config ({layers} layers, width {width}, {heads} heads, vocabulary {vocab}), batch "
                 f"{batch} x {tokens} tokens, {config._attn_implementation} attention")


def unet_setup(quick: bool, device: str) -> Setup:
    """diffusers' UNet2DModel from a small config (random weights), trained to predict the noise: blocks are its down
    blocks, mid block and up blocks."""
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    if quick:
        config: dict[str, Any] = dict(sample_size=16, block_out_channels=(8, 16), layers_per_block=1,
                                      norm_num_groups=4, attention_head_dim=4,
                                      down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                      up_block_types=("AttnUpBlock2D", "UpBlock2D"))
    else:
        config = dict(sample_size=64, block_out_channels=(64, 128, 256, 256), layers_per_block=2,
                      down_block_types=("DownBlock2D", "DownBlock2D", "AttnDownBlock2D", "DownBlock2D"),
                      up_block_types=("UpBlock2D", "AttnUpBlock2D", "UpBlock2D", "UpBlock2D"))
    model = UNet2DModel(**config).to(device)
    batch, size = (2, 16) if quick else (4, 64)
    torch.manual_seed(1)
    x = torch.randn(batch, 3, size, size, device=device)
    noise = torch.randn_like(x)
    t = torch.randint(0, 1000, (batch,), device=device)
    blocks = ([f"down_blocks.{i}" for i in range(len(model.down_blocks))] + ["mid_block"]
              + [f"up_blocks.{i}" for i in range(len(model.up_blocks))])
    channels = "x".join(map(str, config["block_out_channels"]))
    return Setup("unet", model, lambda: nn.functional.mse_loss(model(x, t).sample, noise), blocks, [x, noise, t],
                 f"diffusers UNet2DModel (channels {channels}, {config['layers_per_block']} layers per block), batch "
                 f"{batch} x 3 x {size} x {size}")
SETUPS = {"vit": vit_setup, "gpt2": gpt2_setup, "resnet50": resnet_setup, "unet": unet_setup}
