"""Tests of hooklab.planner: bytes and choices against an independent truth, never wall-clock times.

The truth: every valid assignment of choices to the blocks (keep, checkpoint, segment, offload) is applied for
real (checkpoint_modules / checkpoint_segments / offload_module, without the planner) and the bytes alive after
forward are measured with MemoryMeter. Costs are machine independent: CountedCosts (FLOPs counted by hand here,
bytes the offloading contexts report) and a fixed synthetic table. The planner must pick the fastest assignment
that fits, its modelled bytes must be the measured ones, and its ties must be broken as documented.
"""
from __future__ import annotations

import contextlib
import itertools
import math
import types

import pytest
import torch
from torch import nn

import hooklab
from hooklab.planner import BudgetError, CountedCosts, MeasuredCosts, MemoryPlanner
from hooklab.segments import checkpoint_segments

pytestmark = pytest.mark.timeout(300)

WIDTHS = [96, 192, 128]  # blocks of different sizes, so that the choice matters
BATCH = 32
COSTS = CountedCosts(flops_per_s=1e9, copy_bytes_per_s=1e9, overlap=0.5, encode_bytes_per_s=1e10)
CHOICES = ("keep", "checkpoint", "segment", "offload")


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


def valid(assignment) -> bool:
    """A segment block continues a checkpointed run (the planner's rule, restated)."""
    return all(c != "segment" or (i and assignment[i - 1] in ("checkpoint", "segment"))
               for i, c in enumerate(assignment))


def runs(assignment) -> list[list[str]]:
    out: list[list[str]] = []
    for i, c in enumerate(assignment):
        if c == "checkpoint":
            out.append([str(i)])
        elif c == "segment":
            out[-1].append(str(i))
    return out


def measured(model, x, step, assignment, min_bytes):
    """Bytes alive after forward (loss excluded) and the CountedCosts time of ``assignment``, applied by hand."""
    scopes = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(checkpoint_segments(model, runs(assignment)))
        for i, c in enumerate(assignment):
            if c == "offload":
                scopes.append(stack.enter_context(hooklab.offload_module(
                    model[i], lambda: hooklab.SaveOnDisk(min_bytes=min_bytes, keep=[model, x]))))
        with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
            loss = step()
            held = meter.mark() - loss.numel() * loss.element_size()
            loss.backward()
    cost = sum(block_flops(i) / COSTS.flops_per_s for i, c in enumerate(assignment) if c in ("checkpoint", "segment"))
    cost += sum(2 * s.stats.offloaded_bytes / COSTS.copy_bytes_per_s * (1 - COSTS.overlap) for s in scopes)
    model.zero_grad(set_to_none=True)
    return held, cost


@pytest.fixture(scope="module")
def truth():
    model, x, step = model_and_step()
    planner = MemoryPlanner(model, step, costs=COSTS, choices=CHOICES, min_bytes=1024, repeats=1)
    table = {a: measured(model, x, step, a, 1024)
             for a in itertools.product(CHOICES, repeat=len(WIDTHS)) if valid(a)}
    return model, x, step, planner, table


def test_the_flops_are_counted_per_block_and_every_block_chains(truth):
    _, _, _, planner, _ = truth
    assert [p.flops for p in planner.profiles] == [block_flops(i) for i in range(len(WIDTHS))]
    assert [p.chained for p in planner.profiles] == [False, True, True]  # block 0 has no block before it


def test_the_baseline_is_the_ledgers_activation_bytes(truth):
    model, x, step, planner, table = truth
    with hooklab.SavedTensorLedger(model) as ledger:
        step()
    assert planner.baseline_bytes == ledger.activation_bytes == table[("keep",) * len(WIDTHS)][0]


def test_what_an_offloaded_block_writes_and_reads_back_is_counted(truth):
    """Each view a block saves is written once and read back once per op that saved it (SaveOnDisk's counters:
    offloaded = files written, reused = packs answered by a file already written, each read again in backward)."""
    model, x, step, planner, _ = truth
    with contextlib.ExitStack() as stack:
        scopes = [stack.enter_context(hooklab.offload_module(
            model[i], lambda: hooklab.SaveOnDisk(min_bytes=1024, keep=[model, x]))) for i in range(len(WIDTHS))]
        step().backward()
    model.zero_grad(set_to_none=True)
    for k, scope in enumerate(scopes):
        option = next(o for o in planner.search.options(k, "offload" if k else None) if o.choice == "offload")
        assert (option.tensors, option.rereads, option.moved) == (scope.stats.offloaded, scope.stats.reused,
                                                                  scope.stats.offloaded_bytes), k
    assert sum(s.stats.reused for s in scopes) > 0  # Tanh's output is saved by Tanh and by the next Linear


def test_every_assignments_bytes_are_modelled_exactly(truth):
    """Not only the chosen plans: the model of every valid assignment matches the measurement, added up option by
    option (what the search compares) and counted as a set of storages (what a plan reports)."""
    _, _, _, planner, table = truth
    for assignment, (held, _) in table.items():
        prev, total = None, planner.fixed_bytes
        for k, choice in enumerate(assignment):
            total += next(o for o in planner.search.options(k, prev) if o.choice == choice).held
            prev = choice
        assert total == held == planner.search.held_bytes(assignment), assignment


@pytest.mark.parametrize("fraction", [1, 2, 3, 4, 6, 10, 30])
def test_the_plan_is_the_fastest_assignment_that_fits_and_its_bytes_are_measured(truth, fraction):
    model, x, step, planner, table = truth
    budget = planner.baseline_bytes // fraction
    fitting = {a: c for a, (h, c) in table.items() if h <= budget}
    if not fitting:
        with pytest.raises(BudgetError):
            planner.plan(budget)
        return
    plan = planner.plan(budget)
    assignment = tuple(plan.choices[str(i)] for i in range(len(WIDTHS)))
    held, cost = table[assignment]
    assert plan.held_bytes == held <= budget            # the model's bytes are the real ones
    assert cost == pytest.approx(min(fitting.values()), rel=1e-9, abs=1e-15)  # no assignment that fits is faster
    assert plan.seconds_added == pytest.approx(cost, rel=1e-9, abs=1e-15)
    with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:  # applied by the plan: the same bytes
        with plan.apply():
            loss = step()
        assert meter.mark() - loss.numel() * loss.element_size() == held
        loss.backward()
    model.zero_grad(set_to_none=True)


def test_a_segment_is_chosen_where_per_block_checkpoints_cannot_meet_the_budget(truth):
    model, x, step, planner, table = truth
    only_blocks = min(h for a, (h, _) in table.items() if "segment" not in a and "offload" not in a)
    recompute_only = MemoryPlanner(model, step, costs=COSTS, choices=("keep", "checkpoint", "segment"), repeats=1)
    plan = recompute_only.plan(only_blocks - 1)
    assert "segment" in plan.choices.values() and plan.held_bytes < only_blocks
    no_segments = MemoryPlanner(model, step, costs=COSTS, choices=("keep", "checkpoint"), repeats=1)
    with pytest.raises(BudgetError, match=f"least this planner can reach .* is .*\\({only_blocks} bytes\\)"):
        no_segments.plan(only_blocks - 1)


class TableCosts:
    """A fixed synthetic cost table: seconds per block and choice, whatever the bytes."""

    def __init__(self, recompute, offload=None):
        self.table = {"recompute": recompute, "offload": offload or [1.0] * len(recompute)}

    def recompute(self, block):
        return self.table["recompute"][int(block.name)]

    def offload(self, block, moved_bytes, tensors):
        return self.table["offload"][int(block.name)]

    def compress(self, block, fmt, encoded_bytes, tensors):  # not offered in these tests
        raise AssertionError("compression was not allowed")


def seconds(costs: TableCosts, assignment) -> float:
    return sum(costs.table["recompute" if c in ("checkpoint", "segment") else "offload"][i]
               for i, c in enumerate(assignment) if c != "keep")


@pytest.mark.parametrize("recompute, offload", [
    ([0.1, 0.2, 0.3], [0.25, 0.25, 0.25]),   # recompute wins early, offload late
    ([0.5, 0.01, 0.01], [0.02, 0.9, 0.9]),   # offload the first block, recompute the others
    ([1.0, 1.0, 1.0], [3.0, 3.0, 3.0]),      # ties everywhere between recompute plans
])
def test_given_a_synthetic_cost_table_the_plan_is_the_fastest_that_fits(truth, recompute, offload):
    model, x, step, _, table = truth
    costs = TableCosts(recompute, offload)
    planner = MemoryPlanner(model, step, costs=costs, choices=CHOICES, min_bytes=1024, repeats=1)
    for fraction in (1, 2, 3, 4, 6, 10, 30):
        budget = planner.baseline_bytes // fraction
        fitting = [a for a, (h, _) in table.items() if h <= budget]
        if not fitting:
            continue
        plan = planner.plan(budget)
        chosen = tuple(plan.choices[str(i)] for i in range(len(WIDTHS)))
        assert table[chosen][0] <= budget
        assert seconds(costs, chosen) == pytest.approx(min(seconds(costs, a) for a in fitting)), (fraction, chosen)


def test_ties_go_to_the_lower_peak_then_the_earlier_choices_and_are_stable(truth):
    model, x, step, _, table = truth
    costs = TableCosts([1.0] * len(WIDTHS))
    planner = MemoryPlanner(model, step, costs=costs, choices=("keep", "checkpoint", "segment"), repeats=1)
    again = MemoryPlanner(model, step, costs=costs, choices=("keep", "checkpoint", "segment"), repeats=1)
    for fraction in (2, 3, 4, 10):
        budget = planner.baseline_bytes // fraction
        plan = planner.plan(budget)
        assert again.plan(budget).choices == plan.choices == planner.plan(budget).choices  # the same every time
        chosen = tuple(plan.choices.values())
        equally_fast = [p for p in planner.search.frontier()
                        if p.seconds == plan.seconds_added and planner.search.held_bytes(p.choices) <= budget]
        assert plan.peak_bytes == min(p.peak_bytes for p in equally_fast)
        best = [p for p in equally_fast if p.peak_bytes == plan.peak_bytes]
        least = min(planner.search.held_bytes(p.choices) for p in best)
        assert plan.held_bytes == least
        assert chosen == min(p.choices for p in best if planner.search.held_bytes(p.choices) == least)
        assert sum(c != "keep" for c in chosen) == min(sum(c != "keep" for c in a) for a, (h, _) in table.items()
                                                        if h <= budget and "offload" not in a)
    # at the full budget nothing is recomputed; just under it, one block is, alone (a segment would only add peak)
    assert set(planner.plan(planner.baseline_bytes).choices.values()) == {"keep"}
    assert sorted(planner.plan(planner.baseline_bytes - 1).choices.values()) == ["checkpoint", "keep", "keep"]


def test_a_peak_bound_is_met_or_refused(truth):
    model, _, step, planner, _ = truth
    budget = planner.baseline_bytes // 6
    free = planner.plan(budget)
    bounded = planner.plan(budget, peak=free.peak_bytes)
    assert bounded.peak_bytes <= free.peak_bytes and bounded.held_bytes <= budget
    assert "peak during backward (modelled)" in bounded.table()
    with pytest.raises(BudgetError, match="with a peak of at most"):
        planner.plan(budget, peak=1)


def test_a_plans_time_can_be_priced_again(truth):
    _, _, _, planner, _ = truth
    plan = planner.plan(planner.baseline_bytes // 4)
    assert planner.search.seconds(tuple(plan.choices.values())) == pytest.approx(plan.seconds_added, rel=1e-12)
    with pytest.raises(ValueError, match="'segment' is not a choice block '0' has after None"):
        planner.search.seconds(("segment", "keep", "keep"))


def test_an_impossible_budget_raises_and_says_the_least_reachable(truth):
    _, _, _, planner, table = truth
    least = min(h for h, _ in table.values())
    if least > 0:
        with pytest.raises(BudgetError, match=f"least this planner can reach .* is .*\\({least} bytes\\)"):
            planner.plan(least - 1)
    assert planner.plan(least).held_bytes == least


def test_the_table_shows_every_block_and_the_verdict(truth):
    _, _, _, planner, _ = truth
    text = planner.plan(planner.baseline_bytes // 4).table()
    lines = text.splitlines()
    assert lines[0].split() == ["block", "choice", "held", "saved", "time", "added"]
    assert [line.split()[0] for line in lines[1:5]] == ["0", "1", "2", "total"]
    assert lines[5].startswith("budget ") and ": met (modelled" in lines[5]
    assert planner.table().splitlines()[0].split() == ["block", "saved", "input", "FLOPs", "forward", "grad",
                                                       "error", "segment"]


def test_the_plan_gives_the_plain_gradients_and_restores_the_model_after_an_error(truth):
    model, x, step, planner, _ = truth
    model.zero_grad(set_to_none=True)
    step().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    recompute_only = MemoryPlanner(model, step, costs=COSTS, choices=("keep", "checkpoint", "segment"), repeats=1)
    plans = [planner.plan(planner.baseline_bytes // f) for f in (3, 10, 30)]
    plans += [recompute_only.plan(recompute_only.baseline_bytes // f) for f in (3, 10)]
    assert {"offload", "checkpoint", "segment"} <= {c for plan in plans for c in plan.choices.values()}
    for plan in plans:
        with plan.apply():
            loss = step()
        loss.backward()
        assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), plain, strict=True)), plan.choices
        model.zero_grad(set_to_none=True)
    for plan in plans:
        with hooklab.no_hooks_left_behind(model), pytest.raises(ZeroDivisionError):
            with plan.apply():
                step()
                raise ZeroDivisionError("inside the block")
        assert not any("forward" in m.__dict__ for m in model.modules())


def test_apply_refuses_a_block_replaced_since_it_was_measured():
    """N10: the new block would silently not follow the plan (review round 3: 4096 B held against 0 B planned)."""
    model, x, step = model_and_step()
    planner = MemoryPlanner(model, step, costs=COSTS, choices=CHOICES, min_bytes=1024, repeats=1)
    plan = planner.plan(planner.baseline_bytes // 10)
    old = model[2]
    model[2] = nn.Sequential(nn.Linear(192, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh())
    with hooklab.no_hooks_left_behind(model), pytest.raises(RuntimeError, match="block '2' is now another module"):
        with plan.apply():
            step()
    model[2] = old
    with plan.apply():
        step().backward()


def test_measuring_leaves_batch_norm_statistics_modes_gradients_and_the_rng_as_they_were():
    """N5: five training-mode forwards used to update the running statistics (num_batches_tracked became 5)."""
    torch.manual_seed(0)
    block = lambda c: nn.Sequential(nn.Conv2d(c, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())  # noqa: E731
    model = nn.Sequential(block(3), block(8), nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 2)))
    x, y = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 0, 1])
    step = lambda: nn.functional.cross_entropy(model(x), y)  # noqa: E731
    step().backward()
    model[1].eval()  # a mixed state, as a fine-tuning run may have
    before = {k: v.clone() for k, v in model.state_dict().items()}
    grads = [p.grad.clone() for p in model.parameters()]
    modes = [m.training for m in model.modules()]
    rng = torch.get_rng_state()
    MemoryPlanner(model, step, choices=("keep", "checkpoint", "segment", "offload", "bf16"), max_error=1.0,
                  costs=COSTS, keep=[y], repeats=2)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))
    assert [m.training for m in model.modules()] == modes
    assert torch.equal(torch.get_rng_state(), rng)


def test_a_block_object_named_twice_in_the_model_counts_once_in_the_baseline():
    """Review round 3 (MP17): Sequential(a, b, a) overstated the baseline (49280 vs 41088 bytes)."""
    torch.manual_seed(0)
    a = nn.Sequential(nn.Linear(32, 32), nn.Tanh())
    model = nn.Sequential(a, nn.Sequential(nn.Linear(32, 32), nn.Tanh()), a)
    x = torch.randn(64, 32)
    step = lambda: model(x).sum()  # noqa: E731
    planner = MemoryPlanner(model, step, costs=COSTS, choices=CHOICES, min_bytes=1024, repeats=1)
    with hooklab.SavedTensorLedger(model) as ledger:
        step()
    assert [p.name for p in planner.profiles] == ["0", "1"] and planner.profiles[0].calls == 2
    assert planner.baseline_bytes == ledger.activation_bytes
    assert [p.chained for p in planner.profiles] == [False, False]  # a segment never runs through a twice-called block
    for fraction in (2, 4):
        plan = planner.plan(planner.baseline_bytes // fraction)
        with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
            with plan.apply():
                loss = step()
            assert meter.mark() - loss.numel() * loss.element_size() == plan.held_bytes
            loss.backward()
    with pytest.raises(ValueError, match="block '2' is the same module as block '0'"):
        MemoryPlanner(model, step, ["0", "1", "2"], costs=COSTS)


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


class Split(nn.Module):
    """Saves three views of one storage, as attention saves q, k and v cut from one projection."""

    def __init__(self, width: int = 48) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).split(x.shape[-1], dim=-1)
        return (q * k).tanh() * v + x


@pytest.mark.parametrize("kind", ["mlp", "conv with max-pool indices", "views of one storage"])
def test_compressed_blocks_share_one_context_and_every_assignments_bytes_are_exact(kind):
    """With compression the bytes depend on which blocks share a format (one context per format and forward pass:
    a storage two blocks save is compressed once) and on integer tensors (max-pool indices, stored losslessly in
    a smaller type); every assignment, applied by hand, against the model."""
    torch.manual_seed(0)
    if kind == "mlp":
        model = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
                                for _ in range(3)])
        x = torch.randn(BATCH, 64)
    elif kind == "views of one storage":
        model = nn.Sequential(*[Split() for _ in range(3)])
        x = torch.randn(BATCH, 48)
    else:
        model = nn.Sequential(*[nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
                                for _ in range(3)])
        x = torch.randn(4, 4, 32, 32)
    step = lambda: model(x).sum()  # noqa: E731
    choices = ("keep", "bf16", "int8")
    planner = MemoryPlanner(model, step, costs=COSTS, choices=choices, max_error=1.0, repeats=1)
    packed = [v.packed_size for p in planner.profiles for s in p.saved.values() for v in s.views if not v.floating]
    assert packed == ([2, 2, 1] if kind.startswith("conv") else [])  # int64 indices of 32x32, 16x16: int16; 8x8: int8
    if kind.startswith("views"):
        assert all(max(len(s.views) for s in p.saved.values()) == 3 for p in planner.profiles)
    for assignment in itertools.product(choices, repeat=3):
        shared: dict[str, hooklab.CompressSaved] = {}
        with contextlib.ExitStack() as stack:
            for i, c in enumerate(assignment):
                if c in ("bf16", "int8"):
                    stack.callback(hooklab.offload_module(model[i], lambda c=c, shared=shared: shared.setdefault(
                        c, hooklab.CompressSaved(c, keep=[model, x]))).remove)
            with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
                loss = step()
                held = meter.mark() - loss.numel() * loss.element_size()
        prev, total = None, planner.fixed_bytes
        for k, choice in enumerate(assignment):
            total += next(o for o in planner.search.options(k, prev) if o.choice == choice).held
            prev = choice
        assert total == held == planner.search.held_bytes(assignment), assignment


def test_plans_within_the_tolerance_count_as_equally_fast_and_the_lower_peak_wins(truth):
    model, x, step, _, table = truth
    # recomputing block 3 costs a little more than block 2: with no tolerance the cheaper one wins, with a
    # tolerance both are equally fast and the one with the lower modelled peak wins (the same on every run)
    costs = TableCosts([1.0, 1.0, 1.001])
    planner = MemoryPlanner(model, step, costs=costs, choices=("keep", "checkpoint"), repeats=1)
    assert planner.resolution == 0.0  # a cost table is exact: only equal times tie
    budget = planner.baseline_bytes - 1
    exact = planner.plan(budget)
    loose = planner.plan(budget, tolerance=0.01)
    candidates = [p for p in planner.search.frontier() if planner.search.held_bytes(p.choices) <= budget
                  and p.seconds <= min(q.seconds for q in planner.search.frontier()
                                       if planner.search.held_bytes(q.choices) <= budget) + 0.01]
    assert loose.peak_bytes == min(p.peak_bytes for p in candidates)
    assert exact.seconds_added == min(p.seconds for p in candidates)
    with pytest.raises(ValueError, match="tolerance must be"):
        planner.plan(budget, tolerance=-1.0)


def test_the_gradient_errors_are_hooklab_gradient_error():
    model, x, step = model_and_step()
    planner = MemoryPlanner(model, step, costs=COSTS, choices=("keep", "bf16"), max_error=1.0, repeats=1)
    for i, profile in enumerate(planner.profiles):
        expected = hooklab.gradient_error(
            model, step, lambda b=model[i]: hooklab.offload_module(b, lambda: hooklab.CompressSaved("bf16")))
        assert profile.grad_error["bf16"] == pytest.approx(expected, rel=1e-12)


def _backward_in_step():
    model, x, _ = model_and_step()

    def step():
        loss = model(x).sum()
        loss.backward()
        return loss
    return model, step


@pytest.mark.parametrize("case, error, match", [
    ("choices", ValueError, "unknown choice 'recompute'"),
    ("segment alone", ValueError, "allow 'checkpoint' too"),
    ("unknown block", hooklab.UnknownModuleError, "9"),
    ("nested", ValueError, "inside block '0'"),
    ("root and child", ValueError, "block '0' is inside block ''"),
    ("max_error", ValueError, "max_error"),
    ("min_bytes", ValueError, "min_bytes"),
    ("repeats True", ValueError, "repeats must be an int >= 1, got True"),
    ("costs object", TypeError, "costs must be a cost model .* got object, which has no recompute, offload, compress"),
    ("step runs backward", ValueError, r"step\(\) ran backward itself"),
    ("step returns None", ValueError, r"step\(\) must return the scalar loss .* got NoneType"),
    ("step returns a vector", ValueError, r"got Tensor of shape \(32, 128\)"),
    ("never runs", ValueError, "block '0.1' never ran"),
    ("frozen", ValueError, "the loss does not require grad .* nothing for backward"),
    ("meta", ValueError, "'0.0.weight' is on the meta device, where tensors hold no memory"),
])
def test_bad_input_is_refused_at_construction_and_leaves_no_hook(case, error, match):
    model, x, step = model_and_step()
    kwargs: dict = {"costs": COSTS}
    if case == "choices":
        kwargs["choices"] = ("keep", "recompute")
    elif case == "segment alone":
        kwargs["choices"] = ("keep", "segment")
    elif case == "unknown block":
        kwargs["blocks"] = ["0", "9"]
    elif case == "nested":
        kwargs["blocks"] = ["0", "0.1"]
    elif case == "root and child":
        kwargs["blocks"] = ["", "0"]
    elif case == "max_error":
        kwargs.update(max_error=-1.0, choices=("bf16",))
    elif case == "min_bytes":
        kwargs["min_bytes"] = -1
    elif case == "repeats True":
        kwargs["repeats"] = True
    elif case == "costs object":
        kwargs["costs"] = object()
    elif case == "step runs backward":
        model, step = _backward_in_step()
    elif case == "step returns None":
        step = lambda: None  # noqa: E731
    elif case == "step returns a vector":
        step = lambda: model(x)  # noqa: E731
    elif case == "never runs":
        kwargs["blocks"] = ["0.1", "1"]
        step = lambda: model[1](torch.randn(BATCH, 96)).sum()  # noqa: E731
    elif case == "frozen":
        model.requires_grad_(False)
    elif case == "meta":
        model.to("meta")
        step = lambda: model(x.to("meta")).sum()  # noqa: E731
    with hooklab.no_hooks_left_behind(model), pytest.raises(error, match=match):
        MemoryPlanner(model, step, **kwargs)
    assert all(p.grad is None for p in model.parameters())


def test_a_bad_budget_or_peak_is_refused(truth):
    for bad in (-5, 1.5, True):
        with pytest.raises(ValueError, match="budget must be an int"):
            truth[3].plan(bad)
    with pytest.raises(ValueError, match="peak must be an int"):
        truth[3].plan(10**6, peak=-1)


def test_keep_leaves_the_labels_out_and_the_bytes_stay_exact():
    model, x, _ = model_and_step()
    head = nn.Linear(WIDTHS[-1], 10)
    full = nn.Sequential(*model, head)
    y = torch.randint(0, 10, (BATCH,))
    step = lambda: nn.functional.cross_entropy(full(x), y)  # noqa: E731
    planner = MemoryPlanner(full, step, [str(i) for i in range(len(WIDTHS))], costs=COSTS, keep=[y], repeats=1,
                            choices=CHOICES, min_bytes=1024)
    for fraction in (3, 6):
        plan = planner.plan(planner.baseline_bytes // fraction)
        with hooklab.MemoryMeter(ignore=[*full.parameters(), x, y]) as meter:
            with plan.apply():
                loss = step()
            assert meter.mark() - loss.numel() * loss.element_size() == plan.held_bytes
            loss.backward()
    with pytest.raises(TypeError, match="keep takes the tensors"):
        MemoryPlanner(full, step, costs=COSTS, keep=[full])


# ------------------------------------------------------------------------------- the measured time model
def test_measured_costs_give_a_plan_and_never_a_speed_above_a_memory_copy():
    model, x, step = model_and_step()
    costs = MeasuredCosts.measure("cpu", probe_bytes=1 << 20, repeats=3)  # this machine (small, to stay quick)
    planner = MemoryPlanner(model, step, costs=costs, repeats=3)
    assert isinstance(costs, MeasuredCosts) and costs.clock == "cpu"
    assert planner.resolution == 0.05  # of a plan's added time: what two measurements of one machine differ by
    assert 0 < costs.copy_bytes_per_s <= costs.memory_bytes_per_s < math.inf
    assert all(0 < s <= costs.memory_bytes_per_s for s in costs.encode_bytes_per_s.values())
    assert all(p.forward_s > 0 for p in planner.profiles)
    plan = planner.plan(planner.baseline_bytes // 4)
    assert plan.held_bytes <= plan.budget


def test_a_strategy_measured_as_free_is_floored_at_the_memory_copy(monkeypatch):
    """Review round 3: the difference of two noisy minima gave 8.4e15 B/s (offload and bf16 modelled as free)."""
    from hooklab.planner import costs as costs_module
    monkeypatch.setattr(costs_module, "_round_trip", lambda *args, **kwargs: 1e-12)  # "as good as free"
    costs = MeasuredCosts.measure("cpu", probe_bytes=1 << 20, repeats=3)
    assert costs.copy_bytes_per_s == pytest.approx(costs.memory_bytes_per_s)  # 2 bytes moved per byte, both ways
    assert costs.encode_bytes_per_s == {"bf16": pytest.approx(costs.memory_bytes_per_s),
                                        "int8": pytest.approx(costs.memory_bytes_per_s)}
    assert costs.per_tensor_s == {"offload": 0.0, "bf16": 0.0, "int8": 0.0}


def test_a_clock_that_cannot_resolve_the_measurement_raises(monkeypatch):
    from hooklab.planner import _profile, costs as costs_module
    frozen = types.SimpleNamespace(process_time=lambda: 1.0, perf_counter=lambda: 1.0,
                                   get_clock_info=lambda name: types.SimpleNamespace(resolution=0.015))
    monkeypatch.setattr(costs_module, "time", frozen)
    with pytest.raises(RuntimeError, match="too little to measure a speed from; pass costs=hooklab.CountedCosts"):
        MeasuredCosts.measure("cpu", probe_bytes=1 << 20, repeats=3)
    monkeypatch.setattr(_profile, "time", frozen)
    model, _, step = model_and_step()
    with hooklab.no_hooks_left_behind(model), pytest.raises(RuntimeError, match="the forward of block '0' took 0 s"):
        MemoryPlanner(model, step, costs=COSTS, repeats=2)


@pytest.mark.parametrize("kwargs, match", [({"probe_bytes": 10}, "probe_bytes"), ({"repeats": 1}, "repeats"),
                                           ({"repeats": True}, "repeats")])
def test_measure_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MeasuredCosts.measure("cpu", **kwargs)


def test_the_search_stays_small_on_seventeen_blocks_with_every_choice(monkeypatch):
    """ResNet-50 as 17 blocks with all six choices made the search run for hours: a plan no better in bytes and
    peak was kept for its earlier choices even where another had fewer bytes. Counted, not timed: on 17 small conv
    blocks the plans the search weighs (733,110 then, a frontier of 48,062) stay in the tens of thousands."""
    from hooklab.planner import _search

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
                            for _ in range(17)])
    x = torch.randn(2, 8, 16, 16)
    planner = MemoryPlanner(model, lambda: model(x).square().mean(), [str(i) for i in range(17)],
                            choices=("keep", "checkpoint", "segment", "offload", "bf16", "int8"), max_error=0.05,
                            costs=CountedCosts(), repeats=1, min_bytes=0)
    weighed = []
    pareto = _search._pareto

    def counting(plans):
        plans = list(plans)
        weighed.append(len(plans))
        return pareto(plans)
    monkeypatch.setattr(_search, "_pareto", counting)
    frontier = planner.search.frontier()
    assert sum(weighed) < 100_000 and len(frontier) < 5_000, (sum(weighed), len(frontier))
    plan = planner.plan(planner.baseline_bytes // 4)  # and it still plans: the budget met, by the exact count
    assert plan.held_bytes <= planner.baseline_bytes // 4
