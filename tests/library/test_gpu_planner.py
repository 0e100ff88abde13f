"""MemoryPlanner.decide on a GPU: run with ``HOOKLAB_TEST_GPU=1 ./course test tests -m gpu`` where one is.

Not run yet: no GPU was available where these were written. What they check does not depend on the GPU's speed:
the decision's clock is the wall clock after a synchronisation, every measured byte count equals MemoryMeter's and
an independent count of the storages an outer saved_tensors_hooks is given, the choice meets the budget and gives
the plain gradients, and an offloading plan moves its tensors to CPU memory (OverlappedOffload), not to disk.
"""
from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

import hooklab
from saved_truth import rng_state_bytes, saved_storage_bytes

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600),
              pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="needs a GPU: HOOKLAB_TEST_GPU=1 ./course test tests -m gpu on a machine with one")]


def model_and_step():
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256), nn.Tanh())
                            for _ in range(6)]).cuda()
    x = torch.randn(512, 256, device="cuda")
    return model, x, (lambda: model(x).sum())


def test_decide_on_a_gpu_measures_exact_bytes_on_the_wall_clock_and_its_choice_runs():
    model, x, step = model_and_step()
    planner = hooklab.MemoryPlanner(model, step, choices=("keep", "checkpoint", "segment", "offload"))
    assert isinstance(planner.costs, hooklab.MeasuredCosts) and planner.costs.clock == "wall"
    budget = planner.baseline_bytes // 4
    decision = planner.decide(budget, backends=(), rounds=3)
    assert decision.clock == "wall" and decision.seconds > 0 and decision.held_bytes <= budget
    ignore = [*model.parameters(), x]
    for c in decision.candidates:
        if c.kind == "checkpoint_sequential" and c.held_bytes is not None:
            n = c.option.segments
            plain = lambda n=n: torch.utils.checkpoint.checkpoint_sequential(model, n, x, use_reentrant=False).sum()  # noqa: E731
            assert c.held_bytes == saved_storage_bytes(plain, ignore) + rng_state_bytes(plain)
        elif c.kind.startswith("plan") and c.held_bytes is not None:  # the plan's own bytes leave the RNG states out
            def planned(c=c):
                with c.apply():
                    return step()
            assert c.held_bytes == c.option.held_bytes + rng_state_bytes(planned)
    model.zero_grad(set_to_none=True)
    step().backward()
    plain_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    def decided():
        with decision.apply():
            return step()
    states = rng_state_bytes(decided)  # what the meter does not see: the RNG states the checkpoints keep
    with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
        with decision.apply():
            loss = step()
        assert meter.mark() - loss.untyped_storage().nbytes() + states == decision.held_bytes
    loss.backward()
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), plain_grads, strict=True))


def test_an_offloading_plan_on_a_gpu_moves_its_tensors_to_cpu_memory():
    model, x, step = model_and_step()
    planner = hooklab.MemoryPlanner(model, step, choices=("keep", "offload"))
    plan = planner.plan(planner.baseline_bytes // 2)
    assert "offload" in plan.choices.values()
    def held_on_the_gpu(context):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        with context():
            loss = step()
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated() - before
        loss.backward()
        return held
    plain = held_on_the_gpu(contextlib.nullcontext)
    # half the activations planned away, a copy or two still in flight when forward ends
    assert held_on_the_gpu(plan.apply) < 0.75 * plain

def test_a_compiled_candidate_on_a_gpu_is_measured_and_runs():
    model, x, step = model_and_step()
    planner = hooklab.MemoryPlanner(model, step, choices=("keep", "checkpoint"))
    # inductor compiles in this process: on a machine with many cores it would start a pool of compile workers
    # that outlives the test
    import torch._inductor.config

    with torch._inductor.config.patch(compile_threads=1):
        decision = planner.decide(planner.baseline_bytes // 2, backends=("inductor",), rounds=2, sequential=False)
    compiled = [c for c in decision.candidates if c.kind == "torch.compile"]
    assert compiled or any("failed" in n for n in decision.notes)
    for c in compiled:
        with c.apply():
            loss = step()
        loss.backward()
    assert not any("forward" in m.__dict__ for m in model.modules())
    torch._dynamo.reset()
