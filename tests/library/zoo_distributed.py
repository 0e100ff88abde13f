"""The zoo's DDP and FSDP2 rows: every tool inside 2 local ``gloo`` processes (``hooklab.run_workers``).

All rows run in one launch of 2 workers. In each worker the model is wrapped (``DistributedDataParallel``, or
``fully_shard`` on every ``Linear`` and the root), every batch differs by rank (so the averaged gradient is not
the local one), and every tool of ``tests/library/zoo.py`` runs with its usual check against plain PyTorch, computed the
same way in the same process group: the tools are given the inner model (as the README and notebook 10 use
them) while the forward and backward go through the wrapper. A few runners are adapted:

- ``GradientMonitor``: ``‖p.grad‖`` of the full gradient (``full_tensor()`` of FSDP2's shards);
- ``clip hooks``: every stage: ``stage="incoming"`` must refuse, ``stage="accumulated"`` (value and per-parameter
  norm) and the global-norm hooks must equal ``torch.nn.utils.clip_grad_*_`` after a plain ``backward()``;
- ``hook_inventory``: FSDP2 registers hooks of its own, so "nothing left" means "what was there before".

A worker returns, per tool, its note or the error it raised; ``tests/library/test_zoo.py`` replays them.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import hooklab
from zoo import TOOLS, Case, Inputs, Spec

# the one message each row's cells may refuse with (none today: every tool works there)
EXPLAIN: dict[str, str] = {}
NOTES = [
    "DDP / FSDP2 rows: 2 local `gloo` processes (`hooklab.run_workers`), batches that differ by rank, each tool given "
    "the inner model while forward and backward go through the wrapper, checked against the same wrapper run "
    "without the tool. `GradientMonitor` records the averaged gradient (after DDP's averaging; under FSDP2 it "
    "combines the shards' norms when asked, a collective: call `norms()` on every rank). `clip hooks` there: "
    "`stage=\"accumulated\"` and the global-norm hooks equal `clip_grad_*_` after `backward()`; `stage=\"incoming\"` "
    "refuses (in DDP it would clip each rank's gradient before averaging; under FSDP2 its hooks never fire).",
]


@dataclass
class DistSpec(Spec):
    wrapper: str = "ddp"  # "ddp" or "fsdp2"


def _rank_batch() -> Inputs:
    import torch.distributed as dist
    torch.manual_seed(10 + dist.get_rank())  # each rank its own batch
    return (torch.randn(4, 16) * 3,), {}


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 2))


DIST_SPECS: list[DistSpec] = [
    DistSpec("MLP in DDP (2 gloo processes)", _mlp, _rank_batch, ["0", "2"], "2", wrapper="ddp"),
    DistSpec("MLP in FSDP2 (fully_shard, 2 gloo processes)", _mlp, _rank_batch, ["0", "2"], "2", wrapper="fsdp2"),
]


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


class DistCase(Case):
    """A :class:`~zoo.Case` whose forward runs through DDP / FSDP2; the tools get the inner model."""

    def __init__(self, spec: DistSpec) -> None:
        torch.manual_seed(0)
        self.spec = spec
        self.eager = self.model = spec.build()
        self.args, self.kwargs = spec.inputs()
        if spec.wrapper == "ddp":
            from torch.nn.parallel import DistributedDataParallel
            self.wrapped = DistributedDataParallel(self.eager)
        else:
            from torch.distributed.fsdp import fully_shard
            for module in self.eager.modules():
                if isinstance(module, nn.Linear):
                    fully_shard(module)
            self.wrapped = fully_shard(self.eager)  # the same object, its class changed in place
        self.grads()  # the wrapper's lazy setup (FSDP2 adds hooks at its first forward)
        self.baseline = hooklab.hook_inventory(self.eager, include_global=False)

    def forward(self) -> Any:
        torch.manual_seed(1)
        return self.wrapped(*self.args, **self.kwargs)

    def grads(self) -> list[torch.Tensor]:
        params = [p for p in self.eager.parameters() if p.requires_grad]
        self.eager.zero_grad(set_to_none=True)
        self.step()
        out = [_full(p.grad).clone() for p in params]
        self.eager.zero_grad(set_to_none=True)
        return out


def run_gradient_monitor(case: DistCase) -> str:
    truth = case.grads()
    with hooklab.GradientMonitor(case.eager) as gm:
        case.step()
    norms = gm.norms(per="parameter")  # under FSDP2 a collective: both ranks call it
    for (name, values), g in zip(norms.items(), truth):
        want = torch.linalg.vector_norm(g).item()
        assert values == [values[0]] and abs(values[0] - want) <= 1e-6 * max(1.0, want), (name, values, want)
    return f"{len(norms)} parameter norms equal ‖p.grad‖ after the reduction"


def _per_parameter_norm_clip(grads: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    return [g * torch.clamp(max_norm / (g.norm() + 1e-6), max=1.0) for g in grads]


def run_clip(case: DistCase) -> str:
    raw = case.grads()
    for stage_incoming in (lambda: hooklab.clip_grad_value_hooks(case.eager, 1e-3),
                           lambda: hooklab.clip_grad_norm_hooks(case.eager, 1e-3)):
        try:
            stage_incoming()
        except ValueError as error:
            assert re.search(r"stage='incoming'.*stage='accumulated'", str(error)), error
        else:
            raise AssertionError("stage='incoming' did not refuse")
    value = [g.clamp(-1e-3, 1e-3) for g in raw]
    total = torch.linalg.vector_norm(torch.stack([g.norm() for g in raw]))
    global_norm = [g * torch.clamp(0.05 / (total + 1e-6), max=1.0) for g in raw]
    checks = {"value": (lambda: hooklab.clip_grad_value_hooks(case.eager, 1e-3, stage="accumulated"), value),
              "norm": (lambda: hooklab.clip_grad_norm_hooks(case.eager, 1e-3, stage="accumulated"),
                       _per_parameter_norm_clip(raw, 1e-3)),
              "global norm": (lambda: hooklab.clip_grad_norm_global_hooks(case.eager, 0.05), global_norm)}
    for name, (make, want) in checks.items():
        assert any(not torch.allclose(w, r) for w, r in zip(want, raw)), f"{name}: nothing to clip"
        with make():
            got = case.grads()
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-8) for a, b in zip(got, want)), name
    return "accumulated value / norm and global norm equal clip_grad_*_ after backward; incoming refuses"


def run_inventory(case: DistCase) -> str:
    first = next(p for p in case.eager.parameters())
    with hooklab.HookScope() as scope:
        scope.add(case.module(case.spec.block).register_forward_hook(lambda *a: None))
        scope.add(first.register_hook(lambda g: None))
        seen = hooklab.hook_inventory(case.eager, include_global=False)
    assert len(seen) == len(case.baseline) + 2, seen
    return f"exactly the 2 hooks registered (beside the wrapper's {len(case.baseline)}), none after"


DIST_TOOLS: dict[str, Callable[[Case], str]] = {
    **TOOLS, "GradientMonitor": run_gradient_monitor, "clip hooks": run_clip, "hook_inventory": run_inventory}


def _rows(rank: int, world_size: int) -> dict[str, dict[str, tuple[str, str]]]:
    """One worker's results for every row: row -> tool -> ("works", note) or ("raised", "<type>: <message>")."""
    return {spec.name: _row(spec) for spec in DIST_SPECS}


def _row(spec: DistSpec) -> dict[str, tuple[str, str]]:
    import warnings

    case = DistCase(spec)
    results = {}
    for tool, run in DIST_TOOLS.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results[tool] = ("works", run(case))
        except Exception as error:  # noqa: BLE001 - reported to the test, which knows what to expect
            results[tool] = ("raised", f"{type(error).__name__}: {error}")
        left = hooklab.hook_inventory(case.eager, include_global=False)
        if left != case.baseline:
            extra = [h for h in left if h not in case.baseline]
            results[tool] = ("raised", f"AssertionError: hooks left on the model: {extra or left}")
    return results


def run_rows(timeout: float = 240.0) -> list[dict[str, dict[str, tuple[str, str]]]]:
    """Every tool of every row, in one launch of 2 gloo workers: one result dict per rank."""
    return hooklab.run_workers(_rows, world_size=2, timeout=timeout)
