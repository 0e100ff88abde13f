"""The small model most profiles measure a library on (``build``) and its seeded input (``inputs``): a module imports
them as its own when the library needs nothing else (``from ._small import build, inputs``)."""
from __future__ import annotations

import torch
from torch import nn


def build() -> nn.Module:
    """Linear(4, 8), ReLU, Linear(8, 2): a hooked ``Linear`` (``TARGET = "0"``) with a module after it."""
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def inputs() -> tuple[torch.Tensor, ...]:
    """A batch of three, the same in every process."""
    return (torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),)
