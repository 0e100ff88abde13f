"""GradientMonitor and the clip hooks inside DDP and FSDP2: 2 local gloo processes (hooklab.run_workers).

The truth is computed the same way in the same process group: the same model wrapped the same way, run
without the tool, then ``‖p.grad‖`` or ``torch.nn.utils.clip_grad_*_`` applied after ``backward()``. One
launch of 2 workers runs every check of both wrappers and returns what it found; the tests read it.
Review round 2: S2, S3 (DDP), S4, D3 (FSDP2).
"""
from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import hooklab
from patience import hang_guard

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="this torch has no torch.distributed")

MAX_NORM, VALUE = 0.05, 0.02


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))


def _batches(rank: int) -> list[torch.Tensor]:
    torch.manual_seed(100 + rank)  # each rank its own batches: local gradients differ from the average
    return [torch.randn(8, 16) * 3 for _ in range(2)]


class Gate(nn.Module):
    """Two weights; ``b`` is left out on some ranks and steps."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Parameter(torch.ones(4)), nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor, use_b: bool) -> torch.Tensor:
        return (x * self.a + (x * self.b if use_b else 0)).pow(2).sum()


def _per_parameter_norm_clip(grads: list[torch.Tensor]) -> list[torch.Tensor]:
    return [g * torch.clamp(MAX_NORM / (g.norm() + 1e-6), max=1.0) for g in grads]


def _clip_truths() -> dict:
    """tool -> (make the hooks, clip the plain run's full gradients the way torch does after backward)."""
    def value(gs):
        torch.nn.utils.clip_grad_value_(gs, VALUE)
        return [g.grad for g in gs]

    def global_norm(gs):
        torch.nn.utils.clip_grad_norm_(gs, MAX_NORM)
        return [g.grad for g in gs]

    return {
        "value, accumulated": (lambda m: hooklab.clip_grad_value_hooks(m, VALUE, stage="accumulated"), value),
        "norm, accumulated": (lambda m: hooklab.clip_grad_norm_hooks(m, MAX_NORM, stage="accumulated"),
                              lambda gs: _per_parameter_norm_clip([g.grad for g in gs])),
        "global norm": (lambda m: hooklab.clip_grad_norm_global_hooks(m, MAX_NORM), global_norm),
    }


INCOMING = {"value, incoming": lambda m: hooklab.clip_grad_value_hooks(m, VALUE),
            "norm, incoming": lambda m: hooklab.clip_grad_norm_hooks(m, MAX_NORM)}


def _checks(rank: int, world_size: int, wrapper: str) -> dict:
    """Run every check in this worker; return {check: what was found} (compared with the truth here)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def wrap() -> tuple[nn.Module, nn.Module]:
        model = _model()
        if wrapper == "ddp":
            return model, DDP(model)
        from torch.distributed.fsdp import fully_shard
        for layer in (model[0], model[2]):
            fully_shard(layer)
        return model, fully_shard(model)

    def full(t: torch.Tensor) -> torch.Tensor:
        return t.full_tensor() if hasattr(t, "full_tensor") else t

    def run(wrapped: nn.Module, inner: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
        inner.zero_grad(set_to_none=True)
        wrapped(x).pow(2).mean().backward()
        return [full(p.grad).clone() for p in inner.parameters()]

    xs = _batches(rank)
    out: dict = {}
    # the truth: the same wrapper without any tool
    inner, wrapped = wrap()
    plain = [run(wrapped, inner, x) for x in xs]
    local = _model()  # this rank's own gradient, without the averaging: what the tools must NOT report
    local_norms = [[p.grad.norm().item() for p in local.parameters()]
                   for x in xs if not local.zero_grad(set_to_none=True) and local(x).pow(2).mean().backward() is None]

    # GradientMonitor (S2, D3): every norm equals ‖p.grad‖ of the plain run, the same on every rank
    inner, wrapped = wrap()
    with hooklab.GradientMonitor(inner) as gm:
        for x in xs:
            run(wrapped, inner, x)
    per_param = gm.norms(per="parameter")  # under FSDP2 a collective: every rank calls it
    truth = [[g.norm().item() for g in step] for step in plain]
    got = [[per_param[n][s] for n, _ in inner.named_parameters()] for s in range(len(xs))]
    out["monitor"] = {"equal": all(abs(a - b) <= 1e-5 * max(1.0, b) for gs, ts in zip(got, truth)
                                   for a, b in zip(gs, ts)),
                      "steps": gm.steps, "norms": got, "local_differs": any(
                          abs(a - b) > 1e-3 * b for ls, ts in zip(local_norms, truth) for a, b in zip(ls, ts)),
                      "layers": gm.norms(), "table": gm.table()}

    if wrapper == "ddp":  # rank 1 leaves b out of step 1: DDP still gives it rank 0's gradient, averaged
        from math import nan
        gate = Gate()
        ddp_gate, truth = DDP(gate, find_unused_parameters=True), []
        with hooklab.GradientMonitor(gate) as gm:
            for step, x in enumerate(xs):
                gate.zero_grad(set_to_none=True)
                ddp_gate(x[0, :4], use_b=rank == 0 or step == 0).backward()
                truth.append([p.grad.norm().item() if p.grad is not None else nan for p in gate.parameters()])
        out["monitor, b unused on rank 1"] = {"got": list(zip(*gm.norms(per="parameter").values())), "truth": truth}

    if wrapper == "ddp":  # gradient accumulation with no_sync(): 3 micro-batches per optimizer step, 2 steps
        out["no_sync"] = _accumulation_checks(rank, wrap)

    # clip hooks that act after the reduction (S3, S4): equal to clip_grad_*_ of the plain run's gradients
    for name, (make, clip_after) in _clip_truths().items():
        inner, wrapped = wrap()
        with make(inner):
            got = run(wrapped, inner, xs[0])
        ref_inner, ref_wrapped = wrap()
        run(ref_wrapped, ref_inner, xs[0])
        want = [full(g) for g in clip_after(list(ref_inner.parameters()))]
        clipped_something = any(not torch.allclose(w, p) for w, p in zip(want, plain[0]))
        out[name] = {"equal": all(torch.allclose(a, b, rtol=1e-5, atol=1e-8) for a, b in zip(got, want)),
                     "clipped_something": clipped_something,
                     "max_error": max((a - b).abs().max().item() for a, b in zip(got, want))}

    # stage="incoming" cannot be right there: it refuses, leaving no hook
    for name, make in INCOMING.items():
        inner, _ = wrap()
        before = len(hooklab.hook_inventory(inner, include_global=False))  # FSDP2's own hooks
        try:
            make(inner)
            out[name] = "no error"
        except ValueError as error:
            out[name] = str(error)
        out[name + " hooks left"] = len(hooklab.hook_inventory(inner, include_global=False)) - before
    return out


def _accumulation_checks(rank: int, wrap) -> dict:
    """GradientMonitor under DDP's no_sync() (review round 3, N11), per backward and with optimizer=, against the
    plain run's ‖p.grad‖ after each backward (the truth: the same DDP accumulation without the monitor)."""
    import contextlib

    torch.manual_seed(200 + rank)
    micro = [torch.randn(4, 16) * 3 for _ in range(6)]

    def accumulate(inner, ddp, opt, forward_inside: bool) -> list[list[float]]:
        """Two optimizer steps of three micro-batches; ‖p.grad‖ after every backward."""
        after = []
        for step in range(2):
            for i, x in enumerate(micro[3 * step:3 * step + 3]):
                quiet = contextlib.nullcontext() if i == 2 else ddp.no_sync()
                if forward_inside:
                    with quiet:
                        ddp(x).pow(2).mean().backward()
                else:  # no_sync() around the backward alone: DDP still averages
                    loss = ddp(x).pow(2).mean()
                    with quiet:
                        loss.backward()
                after.append([p.grad.norm().item() for p in inner.parameters()])
            opt.step()
            opt.zero_grad(set_to_none=True)
        return after

    def run(forward_inside: bool, **monitor_options) -> tuple[list, list, list]:
        """(the plain run's norms after each backward, what the monitor recorded, its step numbers)"""
        inner, ddp = wrap()
        plain = accumulate(inner, ddp, torch.optim.SGD(inner.parameters(), lr=0.1), forward_inside)
        inner, ddp = wrap()
        opt = torch.optim.SGD(inner.parameters(), lr=0.1)
        if monitor_options.pop("optimizer", False):
            monitor_options["optimizer"] = opt
        with hooklab.GradientMonitor(inner, **monitor_options) as gm:
            accumulate(inner, ddp, opt, forward_inside)
        got = [list(row) for row in zip(*gm.norms(per="parameter").values())]
        return plain, got, gm.step_numbers

    found = {}
    for name, forward_inside, options in [("per backward", True, {}), ("optimizer=", True, {"optimizer": True}),
                                          ("backward only in no_sync", False, {}),
                                          ("every=2, optimizer=", True, {"optimizer": True, "every": 2})]:
        plain, got, numbers = run(forward_inside, **options)
        found[name] = {"plain": plain, "got": got, "step_numbers": numbers}
    return found


def _both(rank: int, world_size: int) -> dict:
    return {wrapper: _checks(rank, world_size, wrapper) for wrapper in ("ddp", "fsdp2")}


@pytest.fixture(scope="module")
def launched():
    """One launch of 2 workers runs the checks of both wrappers."""
    return hooklab.run_workers(_both, world_size=2, timeout=hang_guard(240))


@pytest.fixture(params=["ddp", "fsdp2"])
def found(request, launched):
    return request.param, [rank[request.param] for rank in launched]


@pytest.mark.timeout(200)
def test_gradient_monitor_records_what_the_optimizer_sees(found):
    wrapper, (rank0, rank1) = found
    for result in (rank0["monitor"], rank1["monitor"]):
        assert result["steps"] == 2 and result["equal"], (wrapper, result)
        assert result["local_differs"]  # the check can fail: this rank's own gradient is not the average
    for a, b in zip(rank0["monitor"]["norms"], rank1["monitor"]["norms"]):  # the ranks agree
        assert a == pytest.approx(b, rel=1e-6)
    for layer, values in rank0["monitor"]["layers"].items():
        assert values == pytest.approx(rank1["monitor"]["layers"][layer], rel=1e-6)
    assert rank0["monitor"]["table"].splitlines()[0].split() == ["layer", "steps", "last", "min", "max"]


@pytest.mark.timeout(200)
def test_gradient_monitor_in_ddp_sees_a_gradient_another_rank_gave(launched):
    results = [rank["ddp"] for rank in launched]
    for result in results:
        got, truth = result["monitor, b unused on rank 1"].values()
        assert len(got) == len(truth) == 2
        for g, t in zip(got, truth):
            assert g == pytest.approx(t, rel=1e-6)
    assert results[0]["monitor, b unused on rank 1"]["got"] == results[1]["monitor, b unused on rank 1"]["got"]


def _close(got: list[list[float]], want: list[list[float]]) -> bool:
    return len(got) == len(want) and all(a == pytest.approx(b, rel=1e-5) for a, b in zip(got, want))


@pytest.mark.timeout(200)
def test_gradient_monitor_under_no_sync_records_what_the_optimizer_sees(launched):
    """N11: a backward whose forward ran under no_sync() is this rank's own partial sum: not recorded; the
    synchronising backward records the averaged sum, the same on every rank (per backward and with optimizer=)."""
    ranks = [rank["ddp"]["no_sync"] for rank in launched]
    for found in ranks:
        plain = found["per backward"]["plain"]
        synced = [plain[2], plain[5]]  # after the third micro-batch of each optimizer step
        for name in ("per backward", "optimizer="):
            assert _close(found[name]["got"], synced), (name, found[name])
            assert found[name]["step_numbers"] == [0, 1]
        assert _close(found["every=2, optimizer="]["got"], [plain[2]])
        assert found["every=2, optimizer="]["step_numbers"] == [0]
        # no_sync() around the backward alone: DDP averages every backward, and each one is a step
        assert _close(found["backward only in no_sync"]["got"], found["backward only in no_sync"]["plain"])
        assert found["backward only in no_sync"]["step_numbers"] == list(range(6))
    # the check can fail: the micro-batches' own gradients differ between the ranks, the recorded ones do not
    assert ranks[0]["per backward"]["plain"][0] != pytest.approx(ranks[1]["per backward"]["plain"][0], rel=1e-3)
    for name in ("per backward", "optimizer=", "backward only in no_sync"):
        assert _close(ranks[0][name]["got"], ranks[1][name]["got"]), name


@pytest.mark.timeout(200)
@pytest.mark.parametrize("tool", list(_clip_truths()))
def test_clip_hooks_equal_clip_grad_after_backward(found, tool):
    wrapper, results = found
    for result in results:
        assert result[tool]["clipped_something"], (wrapper, tool)  # the check can fail
        assert result[tool]["equal"], (wrapper, tool, result[tool])


@pytest.mark.timeout(200)
@pytest.mark.parametrize("tool", list(INCOMING))
def test_incoming_stage_refuses_with_what_to_use_instead(found, tool):
    wrapper, results = found
    why = {"ddp": "inside a process group: the incoming gradient is this rank's own, before DDP averages",
           "fsdp2": "on DTensor parameters .*FSDP2.* never fires"}[wrapper]
    for result in results:
        assert re.search(why, result[tool]), result[tool]
        assert "stage='accumulated'" in result[tool] and "after backward()" in result[tool]
        assert result[tool + " hooks left"] == 0
