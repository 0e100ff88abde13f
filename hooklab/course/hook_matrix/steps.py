"""The two pieces of a probe's step that the matrix's contexts share (:mod:`.contexts`, :mod:`.practice`): one
forward and backward of the model, and installing a family's hook as TorchScript needs it."""
from __future__ import annotations

from typing import Any

import torch

from . import record
from .families import Rig


def forward_backward(h: Any, model: Any, rig: Rig, *, x: torch.Tensor | None = None) -> torch.Tensor:
    """Forward ``x`` (the rig's input by default), then backward of the output's sum, recording the step's facts."""
    x = rig.x if x is None else x
    h.phase("forward")
    out = model(x)
    h.phase("backward")
    out.sum().backward()
    h.fact(out, rig.x.grad, *h.grads(rig))
    return out


def scripted_install(h: Any, rig: Rig) -> None:
    """Install the family's hook as TorchScript needs it, and let TorchScript script the probe's classes afresh."""
    record.PLAIN_FUNCTIONS[0] = True  # TorchScript compiles a module's hooks from their source: plain functions
    try:
        h.install(rig)
    finally:
        record.PLAIN_FUNCTIONS[0] = False
    # TorchScript keeps the types it compiled for the whole process: forget them, so that each cell scripts its
    # classes afresh (otherwise a class scripted by an earlier cell with other attributes "can't be redefined")
    torch.jit._recursive.concrete_type_store = torch.jit._recursive.ConcreteTypeStore()
    torch.jit._state._clear_class_state()
