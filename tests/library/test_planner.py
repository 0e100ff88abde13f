"""Tests of hooklab.planner: bytes and choices against an independent truth, never times.

The truth: every assignment of choices to the blocks is applied for real (checkpoint_modules / offload_module)
and the bytes alive after forward are measured with MemoryMeter; its cost is computed here from FLOPs counted by
hand and bytes the offloading contexts report. The planner (with the deterministic CountedCosts) must pick the
cheapest assignment that fits, and its modelled bytes must be the measured ones.
"""
from __future__ import annotations

import contextlib
import itertools

import pytest
import torch
from torch import nn

import hooklab
from hooklab.planner import BudgetError, CountedCosts, MemoryPlanner

pytestmark = pytest.mark.timeout(300)

WIDTHS = [96, 192, 128]  # blocks of different sizes, so that the choice matters
BATCH = 32
COSTS = CountedCosts(flops_per_s=1e9, copy_bytes_per_s=1e9, overlap=0.5, encode_bytes_per_s=1e10)


def model_and_step(seed: int = 0):
    torch.manual_seed(seed)
    blocks, width = [], 64
    for w in WIDTHS:
        blocks.append(nn.Sequential(nn.Linear(width, w), nn.Tanh(), nn.Linear(w, w), nn.Tanh()))
        width = w
    model = nn.Sequential(*blocks)
    x = torch.randn(BATCH, 64)
    return model, x, (lambda: model(x).sum())


def block_flops(i: int) -> int:
    width_in = 64 if i == 0 else WIDTHS[i - 1]
    w = WIDTHS[i]
    return 2 * BATCH * width_in * w + 2 * BATCH * w * w  # two matrix multiplications (FlopCounterMode's count)


def measured(model, x, step, assignment, min_bytes):
    """Bytes alive after forward (loss excluded) and the cost of ``assignment``, applied without the planner."""
    names = [str(i) for i, c in enumerate(assignment) if c == "checkpoint"]
    scopes = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(hooklab.checkpoint_modules(model, names))
        for i, c in enumerate(assignment):
            if c == "offload":
                scopes.append(stack.enter_context(hooklab.offload_module(
                    model[i], lambda: hooklab.SaveOnDisk(min_bytes=min_bytes, keep=[model, x]))))
        with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
            loss = step()
            held = meter.mark() - loss.numel() * loss.element_size()
            loss.backward()
    cost = sum(block_flops(i) / COSTS.flops_per_s for i, c in enumerate(assignment) if c == "checkpoint")
    cost += sum(2 * s.stats.offloaded_bytes / COSTS.copy_bytes_per_s * (1 - COSTS.overlap) for s in scopes)
    model.zero_grad(set_to_none=True)
    return held, cost


@pytest.fixture(scope="module")
def truth():
    model, x, step = model_and_step()
    planner = MemoryPlanner(model, step, costs=COSTS, choices=("keep", "checkpoint", "offload"), min_bytes=1024,
                            repeats=1)
    table = {a: measured(model, x, step, a, 1024)
             for a in itertools.product(("keep", "checkpoint", "offload"), repeat=len(WIDTHS))}
    return model, x, step, planner, table


def test_the_flops_are_counted_per_block(truth):
    _, _, _, planner, _ = truth
    assert [p.flops for p in planner.profiles] == [block_flops(i) for i in range(len(WIDTHS))]


def test_the_baseline_is_the_ledgers_activation_bytes(truth):
    model, x, step, planner, table = truth
    with hooklab.SavedTensorLedger(model) as ledger:
        step()
    assert planner.baseline_bytes == ledger.activation_bytes == table[("keep",) * len(WIDTHS)][0]


@pytest.mark.parametrize("fraction", [1, 2, 4, 10])
def test_the_plan_is_the_cheapest_assignment_that_fits_and_its_bytes_are_measured(truth, fraction):
    model, x, step, planner, table = truth
    budget = planner.baseline_bytes // fraction
    plan = planner.plan(budget)
    assignment = tuple(plan.choices[str(i)] for i in range(len(WIDTHS)))
    held, cost = table[assignment]
    assert plan.held_bytes == held <= budget            # the model's bytes are the real ones
    best = min(c for h, c in table.values() if h <= budget)
    assert cost == pytest.approx(best, rel=1e-9, abs=1e-15)  # no assignment that fits is cheaper
    assert plan.seconds_added == pytest.approx(cost, rel=1e-9, abs=1e-15)
    # and applying it through the planner gives the same bytes as applying it by hand
    with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
        with plan.apply():
            loss = step()
        assert meter.mark() - loss.numel() * loss.element_size() == held
        loss.backward()
    model.zero_grad(set_to_none=True)


def test_every_assignments_bytes_are_modelled_exactly(truth):
    """Not only the chosen plans: the model of every assignment (27) matches the measurement."""
    _, _, _, planner, table = truth
    for assignment, (held, _) in table.items():
        prev, total = None, planner.fixed_bytes
        for k, choice in enumerate(assignment):
            option = next(o for o in planner.search.options(k, prev) if o.choice == choice)
            total += option.held
            prev = choice
        assert total == held, assignment


def test_an_impossible_budget_raises_and_says_the_least_reachable(truth):
    _, _, _, planner, table = truth
    least = min(h for h, _ in table.values())
    if least > 0:
        with pytest.raises(BudgetError, match=f"least this planner can reach .* is .*\\({least} bytes\\)"):
            planner.plan(least - 1)
    only_checkpoint = MemoryPlanner(truth[0], truth[2], costs=COSTS, choices=("checkpoint",), repeats=1)
    least_ck = min(h for a, (h, _) in table.items() if "offload" not in a)
    assert only_checkpoint.plan(least_ck).held_bytes == least_ck
    with pytest.raises(BudgetError, match="Allow more choices"):
        only_checkpoint.plan(least_ck - 1)


def test_the_table_shows_every_block_and_the_verdict(truth):
    _, _, _, planner, _ = truth
    text = planner.plan(planner.baseline_bytes // 4).table()
    lines = text.splitlines()
    assert lines[0].split() == ["block", "choice", "held", "saved", "time", "added"]
    assert [line.split()[0] for line in lines[1:5]] == ["0", "1", "2", "total"]
    assert lines[-1].startswith("budget ") and ": met (modelled" in lines[-1]
    assert "FLOPs" in planner.table()


def test_the_plan_gives_the_plain_gradients_and_restores_the_model_after_an_error(truth):
    model, x, step, planner, _ = truth
    model.zero_grad(set_to_none=True)
    step().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    plan = planner.plan(planner.baseline_bytes // 10)
    assert set(plan.choices.values()) >= {"offload"}
    with plan.apply():
        loss = step()
    loss.backward()
    assert all(torch.allclose(p.grad, g, rtol=0, atol=0) for p, g in zip(model.parameters(), plain))
    model.zero_grad(set_to_none=True)
    with hooklab.no_hooks_left_behind(model), pytest.raises(ZeroDivisionError):
        with plan.apply():
            step()
            1 / 0
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_compression_needs_a_stated_error_and_is_only_chosen_within_it():
    model, x, step = model_and_step()
    with pytest.raises(ValueError, match="max_error"):
        MemoryPlanner(model, step, costs=COSTS, choices=("keep", "bf16"))
    strict = MemoryPlanner(model, step, costs=COSTS, choices=("keep", "bf16", "int8"), max_error=1e-12, repeats=1)
    assert all(set(p.grad_error) == {"bf16", "int8"} and min(p.grad_error.values()) > 1e-12
               for p in strict.profiles)
    with pytest.raises(BudgetError):
        strict.plan(strict.baseline_bytes - 1)  # nothing may be compressed: keep is all there is
    loose = MemoryPlanner(model, step, costs=COSTS, choices=("keep", "bf16", "int8"), max_error=0.5, repeats=1)
    plan = loose.plan(loose.baseline_bytes // 2)
    assert set(plan.choices.values()) <= {"keep", "bf16", "int8"} and set(plan.choices.values()) & {"bf16", "int8"}
    with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
        with plan.apply():
            loss = step()
        assert meter.mark() - loss.numel() * loss.element_size() == plan.held_bytes
    assert plan.held_bytes <= loose.baseline_bytes // 2


@pytest.mark.parametrize("kwargs,error,match", [
    ({"choices": ("keep", "recompute")}, ValueError, "unknown choice 'recompute'"),
    ({"blocks": ["0", "9"]}, hooklab.UnknownModuleError, "9"),
    ({"blocks": ["0", "0.1"]}, ValueError, "inside block '0'"),
    ({"max_error": -1.0, "choices": ("bf16",)}, ValueError, "max_error"),
    ({"min_bytes": -1}, ValueError, "min_bytes"),
])
def test_bad_input_is_refused(kwargs, error, match):
    model, _, step = model_and_step()
    with pytest.raises(error, match=match):
        MemoryPlanner(model, step, costs=COSTS, **kwargs)
    assert hooklab.hook_inventory(model) == hooklab.hook_inventory(model_and_step()[0])


def test_a_bad_budget_is_refused(truth):
    with pytest.raises(ValueError, match="budget must be an int"):
        truth[3].plan(-5)
    with pytest.raises(ValueError, match="budget must be an int"):
        truth[3].plan(1.5)


def test_measured_costs_give_a_plan_too():
    """The default cost model times this machine: the choices may differ, the bytes must still fit."""
    model, x, step = model_and_step()
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint", "offload"), repeats=1)
    assert planner.costs.copy_bytes_per_s > 0 and all(p.forward_s > 0 for p in planner.profiles)
    plan = planner.plan(planner.baseline_bytes // 4)
    assert plan.held_bytes <= plan.budget


def test_keep_leaves_the_labels_out_and_the_bytes_stay_exact():
    model, x, _ = model_and_step()
    head = nn.Linear(WIDTHS[-1], 10)
    full = nn.Sequential(*model, head)
    y = torch.randint(0, 10, (BATCH,))
    step = lambda: nn.functional.cross_entropy(full(x), y)  # noqa: E731
    planner = MemoryPlanner(full, step, [str(i) for i in range(len(WIDTHS))], costs=COSTS, keep=[y], repeats=1,
                            choices=("keep", "checkpoint", "offload"), min_bytes=1024)
    plan = planner.plan(planner.baseline_bytes // 4)
    with hooklab.MemoryMeter(ignore=[*full.parameters(), x, y]) as meter:
        with plan.apply():
            loss = step()
        assert meter.mark() - loss.numel() * loss.element_size() == plan.held_bytes
        loss.backward()
    with pytest.raises(TypeError, match="keep takes the tensors"):
        MemoryPlanner(full, step, costs=COSTS, keep=[full])


def test_the_gradient_errors_are_hooklab_gradient_error():
    model, x, step = model_and_step()
    planner = MemoryPlanner(model, step, costs=COSTS, choices=("keep", "bf16"), max_error=1.0, repeats=1)
    for i, profile in enumerate(planner.profiles):
        expected = hooklab.gradient_error(
            model, step, lambda b=model[i]: hooklab.offload_module(b, lambda: hooklab.CompressSaved("bf16")))
        assert profile.grad_error["bf16"] == pytest.approx(expected, rel=1e-12)
