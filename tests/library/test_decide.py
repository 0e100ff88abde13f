"""Tests of MemoryPlanner.decide: the model proposes, measurement decides; no verdict here depends on how fast this
machine is.

Times come from a deterministic clock (``FakeClock``): it advances only by what a test charges, one unit each time
a block's forward starts (a forward pre-hook on the block's first layer, which also fires when a checkpoint
recomputes the block in backward) and, where a test says so, for each tensor written to disk. The decision is then
a function of the work each candidate does, not of the machine's load. Bytes are checked against independent
plain-PyTorch truths: ``MemoryMeter`` run by the test, and the storages an outer ``saved_tensors_hooks`` is given.
"""
from __future__ import annotations

import copy
import itertools
import time

import pytest
import torch
from torch import nn

import hooklab
from hooklab.planner import CheckpointEach, CountedCosts, MemoryPlanner, SequentialCheckpoint
from hooklab.planner.decide import Candidate, _choose, beats
from saved_truth import rng_state_bytes, saved_storage_bytes

pytestmark = pytest.mark.timeout(300)

BLOCKS, WIDTH, HIDDEN, BATCH = 6, 64, 256, 32
RNG = torch.get_rng_state().nbytes  # what each checkpointed region keeps until its recompute (5,056 bytes)
# the planner's own time model: FLOPs and copies at stated speeds; offloading looks cheap to it
CHEAP_OFFLOAD = CountedCosts(flops_per_s=1e9, copy_bytes_per_s=1e12, overlap=0.5)


def model_and_step(seed: int = 0, batch: int = BATCH):
    """Six equal blocks Linear-Tanh-Linear-Tanh: each saves 40 KiB inside and passes 8 KiB on, so that
    checkpoint_sequential's bytes are not monotonic in the segment count (128, 96, 144, 112, 80 KiB for 2..6; all
    times ``batch / BATCH``)."""
    torch.manual_seed(seed)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, WIDTH), nn.Tanh())
                            for _ in range(BLOCKS)])
    x = torch.randn(batch, WIDTH)
    return model, x, (lambda: model(x).sum())


class FakeClock:
    """Seconds that advance only by what is charged: ``per_block[i]`` each time block ``i``'s forward starts (also
    in a recompute), ``per_file`` for each tensor SaveOnDisk writes."""

    def __init__(self, model: nn.Module, per_block=None, per_file: float = 0.0, monkeypatch=None) -> None:
        self.now = 0.0
        self.per_block = per_block or [1.0] * len(model)
        self.handles = [model[i][0].register_forward_pre_hook(lambda m, args, i=i: self.charge(self.per_block[i]))
                        for i in range(len(model))]
        if per_file and monkeypatch is not None:
            encode = hooklab.SaveOnDisk._encode

            def charged(context, t):
                self.charge(per_file)
                return encode(context, t)
            monkeypatch.setattr(hooklab.SaveOnDisk, "_encode", charged)

    def charge(self, seconds: float) -> None:
        self.now += seconds

    def __call__(self) -> float:
        return self.now

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def decided(planner, budget, clock, **kwargs):
    kwargs.setdefault("backends", ())
    kwargs.setdefault("rounds", 3)
    return planner.decide(budget, clock=clock, **kwargs)


def meter_bytes(model, x, apply) -> int:
    with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
        with apply():
            loss = model(x).sum()
        held = meter.mark() - loss.untyped_storage().nbytes()
    del loss
    return held


def held_truth(model, x, apply) -> int:
    """What a candidate holds after forward by two independent counts: the tensors the meter sees, and the
    random-number states (which it does not see) found by the garbage collector."""
    def run():
        with apply():
            return model(x).sum()
    return meter_bytes(model, x, apply) + rng_state_bytes(run)


# ------------------------------------------------------------------------------ what measurement decides
def test_a_plain_checkpoint_sequential_wins_where_the_models_disk_offload_loses(monkeypatch):
    """The review's case: the time model believes in offloading (it costs nothing to it); on this 'machine' a file
    costs 5 units and recomputing a block 1. The decision returns plain checkpoint_sequential, the fastest in every
    round, where the planner's own pick writes to disk."""
    model, x, step = model_and_step()
    clock = FakeClock(model, per_file=5.0, monkeypatch=monkeypatch)
    planner = MemoryPlanner(model, step, choices=("keep", "offload"), costs=CHEAP_OFFLOAD, min_bytes=1024, repeats=1)
    budget = planner.baseline_bytes // 2
    assert "offload" in planner.plan(budget).choices.values()  # what the time model alone would do
    decision = decided(planner, budget, clock, max_seconds=10_000)
    assert isinstance(decision.choice, SequentialCheckpoint)
    assert decision.choice.segments in (3, 5) and decision.choice.recomputed == 4  # the fewest children recomputed
    assert decision.reason == "the fastest (lowest median step ratio)"  # and the simplest: nothing simpler to beat
    plans = [c for c in decision.candidates if c.kind == "plan"]
    assert plans and all(decision.verdict(c) == "slower in every round" or c.status.startswith("dropped")
                         for c in plans)
    assert decision.held_bytes <= budget
    text = decision.table()
    assert "checkpoint_sequential(model, 3)" in text and "the measuring bound" not in text
    clock.remove()


def test_a_plan_that_recomputes_less_than_any_checkpoint_sequential_wins(monkeypatch):
    """kkkCss recomputes 3 blocks and meets 1/2; checkpoint_sequential must recompute a prefix of 4: the plan is
    faster by one block forward in every round and is chosen, though it is not the simplest. (A batch 4 times the
    usual, so that the random-number states checkpoints keep, 5,056 bytes each, are small beside the blocks.)"""
    model, x, step = model_and_step(batch=4 * BATCH)
    clock = FakeClock(model, per_file=1.0, monkeypatch=monkeypatch)  # a file costs as much as a block
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint", "segment"), costs=CountedCosts(), repeats=1)
    # 1/2, and room for the random-number states of the 3 checkpointed blocks
    decision = decided(planner, planner.baseline_bytes // 2 + 3 * RNG, clock)
    assert decision.chosen.kind == "plan (recompute)"
    assert sum(c in ("checkpoint", "segment") for c in decision.choice.choices.values()) == 3
    assert decision.reason == ("the fastest (lowest median step ratio), faster than each simpler candidate in every round")
    sequential = [c for c in decision.candidates if c.kind == "checkpoint_sequential" and c.times]
    assert sequential and all(decision.verdict(c) == "slower in every round" or c.status.startswith("dropped")
                              for c in sequential)
    clock.remove()


def test_a_tie_keeps_the_simpler_plain_choice_and_says_so(monkeypatch):
    """Without segments the fastest recompute-only plan recomputes 4 blocks, as checkpoint_sequential(..., 3) does:
    equal in every round, so the decision is a tie and the plain one is kept."""
    model, x, step = model_and_step(batch=4 * BATCH)
    clock = FakeClock(model, per_file=1.0, monkeypatch=monkeypatch)  # a file costs as much as a block
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint"), costs=CountedCosts(), repeats=1)
    # 1/2, and room for the random-number states of the 4 checkpointed blocks
    decision = decided(planner, planner.baseline_bytes // 2 + 4 * RNG, clock)
    assert decision.chosen.kind == "checkpoint_sequential"
    assert decision.reason.startswith("tie with plan ") and "the simpler is kept" in decision.reason
    tied = [c for c in decision.candidates if c.kind.startswith("plan") and decision.verdict(c) == "tie (within the spread)"]
    assert tied
    # the three rounds did not tell the two finalists apart: they ran three rounds more, with the model as it is
    assert decision.rounds == 6
    assert len(decision.chosen.times) == len(decision.baseline.times) == 6
    counts = sorted(len(c.times) for c in decision.candidates if c.times)
    assert counts[-2:] == [6, 6] and set(counts[:-2]) <= {3}  # the two finalists; the others stopped at 3
    clock.remove()


def test_disk_offload_is_chosen_only_where_every_simpler_way_was_beaten_in_every_round(monkeypatch):
    model, x, step = model_and_step()
    # recomputing a block costs 10 units, a file nothing: offloading is the fastest way to meet 1/4
    clock = FakeClock(model, per_block=[10.0] * BLOCKS, per_file=0.0, monkeypatch=monkeypatch)
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint", "segment", "offload"), costs=CHEAP_OFFLOAD,
                            min_bytes=1024, repeats=1)
    decision = decided(planner, planner.baseline_bytes // 4, clock)
    assert "offload" in decision.choice.choices.values()
    timed = [c for c in decision.candidates if c.times]
    simpler = [c for c in timed if c.rank < decision.chosen.rank]
    assert simpler and all(any(beats(o, c) for o in timed) for c in simpler)  # each beaten in every round
    clock.remove()


BASELINE = Candidate("the model as it is", "as is", None, 0, [1.0, 1.0, 1.0])


@pytest.mark.parametrize("simpler_times, expected", [
    ([1.01, 0.99, 1.005], "simpler"),         # within 1 % at the median, not beaten in every round: a tie
    ([1.10, 1.10, 1.10], "fastest"),          # slower in every round: the fastest is chosen
    ([1.00, 1.00, 1.00], "simpler"),          # equal: a tie
    ([1.02, 0.99, 1.02], "fastest"),          # 2 % slower at the median, though not in every round: no tie
    ([1.06, 0.99, 1.07], "fastest"),          # 6 % slower at the median, though not in every round: no tie
])
def test_the_simpler_is_kept_only_in_a_near_tie(simpler_times, expected):
    fastest = Candidate("plan kCo", "plan", None, 0, [1.0, 1.0, 1.0])
    simpler = Candidate("checkpoint_sequential(model, 3)", "checkpoint_sequential", None, 0, simpler_times)
    chosen, reason = _choose([fastest, simpler], [fastest, simpler], BASELINE)
    assert chosen is (simpler if expected == "simpler" else fastest)
    assert ("tie" in reason) == (expected == "simpler")


def test_candidates_are_ranked_by_their_step_over_the_model_as_it_is_in_the_same_round():
    """The machine's load rises after the first round (every step of rounds 2-3 takes 1.5x): by its raw median
    ``late`` looks the faster (1.60 s against 1.65 s), but over the model as it is in the same round ``steady`` was
    1.10 in every round and ``late`` 1.60, 1.07 and 1.13 (median 1.13): ``steady`` is chosen."""
    baseline = Candidate("the model as it is", "as is", None, 0, [1.0, 1.5, 1.5])
    steady = Candidate("plan kCs", "plan (recompute)", None, 0, [1.10, 1.65, 1.65])
    late = Candidate("plan kCC", "plan (recompute)", None, 0, [1.60, 1.60, 1.70])
    assert late.median < steady.median and not beats(steady, late) and not beats(late, steady)
    chosen, reason = _choose([steady, late], [steady, late], baseline)
    assert chosen is steady and reason == "the fastest (lowest median step ratio)"
    assert steady.paired(baseline) == pytest.approx(1.10) and late.paired(baseline) == pytest.approx(1.7 / 1.5)


def test_an_offloading_plan_is_held_to_the_same_rule_as_any_other():
    """An offloading plan the fastest at the median by less than the tie margin: the recomputing one is kept; ahead
    by more, though not in every round: taken (it does not lose to recomputation at the median)."""
    fastest = Candidate("plan kCo", "plan", None, 0, [1.00, 1.20, 1.00])
    middle = Candidate("plan kCs", "plan (recompute)", None, 0, [1.005, 1.004, 1.005])
    chosen, reason = _choose([fastest, middle], [fastest, middle], BASELINE)
    assert chosen is middle and reason.startswith("tie with plan kCo")
    middle.times = [1.05, 1.04, 1.05]  # 5 % behind at the median, ahead in one round: the offloading plan is taken
    chosen, reason = _choose([fastest, middle], [fastest, middle], BASELINE)
    assert chosen is fastest and not beats(fastest, middle)
    assert reason == "the fastest (lowest median step ratio), more than 1% ahead of each simpler candidate at the median"


# ----------------------------------------------------------------------------------------- the evidence
def test_every_candidates_bytes_are_an_independent_truths_and_the_choice_meets_the_budget():
    model, x, step = model_and_step()
    clock = FakeClock(model)
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint", "segment"), costs=CountedCosts(), repeats=1)
    budget = planner.baseline_bytes // 2
    decision = decided(planner, budget, clock)
    ignore = [*model.parameters(), x]
    assert decision.baseline.held_bytes == planner.baseline_bytes == saved_storage_bytes(step, ignore)
    sequential = {c.option.segments: c.held_bytes for c in decision.candidates if c.kind == "checkpoint_sequential"}
    assert sorted(sequential) == list(range(2, BLOCKS + 1))
    for n, held in sequential.items():
        plain = lambda n=n: torch.utils.checkpoint.checkpoint_sequential(model, n, x, use_reentrant=False).sum()  # noqa: E731
        assert held - rng_state_bytes(plain) == saved_storage_bytes(plain, ignore) == meter_bytes(
            model, x, SequentialCheckpoint(model, n).apply)
        assert rng_state_bytes(plain) == (n - 1) * RNG  # one state per checkpointed segment: all but the last
    KiB = 1024
    assert [(sequential[n] - (n - 1) * RNG) // KiB for n in range(2, BLOCKS + 1)] == [128, 96, 144, 112, 80]
    for c in decision.candidates:
        if isinstance(c.option, hooklab.MemoryPlan):  # the plan's own bytes leave the random-number states out
            assert c.option.held_bytes == meter_bytes(model, x, c.option.apply)
            assert c.held_bytes == held_truth(model, x, c.option.apply) > c.option.held_bytes
        elif isinstance(c.option, hooklab.OffloadStep):
            assert c.held_bytes == held_truth(model, x, c.option.apply) == meter_bytes(model, x, c.option.apply)
    assert decision.held_bytes <= budget
    # the counts that meet the budget but recompute more than another that does are measured, not timed
    not_timed = [n for n, held in sequential.items() if held <= budget and not decision.candidates[
        [c.name for c in decision.candidates].index(f"checkpoint_sequential(model, {n})")].times]
    assert not_timed == [6]
    clock.remove()


def test_the_decision_runs_gives_the_plain_gradients_and_leaves_the_model_as_it_was():
    model, x, step = model_and_step()
    clock = FakeClock(model)
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint"), costs=CountedCosts(), repeats=1)
    step().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    rng = torch.get_rng_state()
    with hooklab.no_hooks_left_behind(model):  # the clock's hooks were there before: allowed
        decision = decided(planner, planner.baseline_bytes // 2, clock)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))
    assert torch.equal(torch.get_rng_state(), rng)
    assert not any("forward" in m.__dict__ for m in model.modules())
    model.zero_grad(set_to_none=True)
    step().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    with decision.apply():
        loss = step()
    loss.backward()
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), plain, strict=True))
    assert not any("forward" in m.__dict__ for m in model.modules())
    clock.remove()


def test_the_measuring_cost_is_stated_and_bounded():
    model, x, step = model_and_step()
    clock = FakeClock(model)  # a step costs 6 units (more with recomputation), a bytes measurement 6
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint", "segment"), costs=CountedCosts(), repeats=1)
    budget = planner.baseline_bytes // 2
    before = clock.now
    free = decided(planner, budget, clock, rounds=5, max_seconds=10_000)
    # the plan (9 units a step) beats both checkpoint_sequential counts (10) by more than 5 % in rounds 1-3: they are
    # dropped after round 3, and with one candidate left the timing ends
    assert free.rounds == 3 and free.seconds == clock.now - before and not free.notes
    assert f"measuring: {free.seconds:.1f} s on the given clock" in free.table()
    for bound in (60, 120, 200):
        before = clock.now
        d = decided(planner, budget, clock, rounds=5, max_seconds=bound)
        assert d.seconds == clock.now - before
        assert d.seconds <= bound + 10  # no measurement starts past the bound: at most one step (<= 10 units) over it
        assert d.rounds < 3 and any("measuring bound" in n for n in d.notes)
        assert d.held_bytes <= budget
        # as many candidates are timed as the bound leaves time for; the choice is made among them, and says so
        timed = sum(1 for c in d.candidates if c.times and not c.status)
        assert d.chosen.times and d.reason.endswith(
            f"the measuring bound was reached after {d.rounds} round(s): chosen among the {timed} candidate(s) timed")
    # the default bound: 100 steps of the model as it is (6 units each), at least 30 s
    before = clock.now
    d = decided(planner, budget, clock, rounds=2)
    assert d.max_seconds == 600 and d.seconds == clock.now - before
    # a bound too small for anything: candidates are measured until one meets the budget, which is returned untimed
    tiny = decided(planner, budget, clock, max_seconds=1)
    assert tiny.held_bytes <= budget and tiny.rounds == 0 and not tiny.chosen.times
    assert tiny.reason.startswith("not timed (the measuring bound was reached)")
    measured = [c for c in tiny.candidates if c.held_bytes is not None]
    assert measured[-1] is tiny.chosen and all(c.held_bytes > budget for c in measured[:-1])
    clock.remove()


def test_the_default_bound_leaves_time_to_time_the_finalists_when_the_plan_search_is_slow(monkeypatch):
    """As on a model with many blocks, where the plan search alone costs about the whole default bound: each search
    of the time model's plans costs 200 units here, against a bound of 600 (100 steps of 6). The search stops at
    the share of the bound kept for timing, and what was found is measured and timed; nothing raises."""
    model, x, step = model_and_step()
    clock = FakeClock(model)
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint", "segment"), costs=CountedCosts(), repeats=1)
    select = planner._select

    def slow_select(*args, **kwargs):
        clock.charge(200.0)
        return select(*args, **kwargs)
    monkeypatch.setattr(planner, "_select", slow_select)
    budget = planner.baseline_bytes // 2
    decision = decided(planner, budget, clock, plain=False, sequential=False)
    assert decision.max_seconds == 600 and any(n.startswith("plan search stopped") for n in decision.notes)
    assert decision.chosen.kind.startswith("plan") and decision.held_bytes <= budget
    assert decision.rounds >= 2 and len(decision.chosen.times) == decision.rounds  # timed (one finalist: 2 rounds)
    assert decision.seconds <= decision.max_seconds
    # the same with checkpoint_sequential and the plain candidates: they are measured within the share kept before
    # timing, and the finalists are timed
    decision = decided(planner, budget, clock)
    assert decision.seconds <= decision.max_seconds + 20  # no more than a step over
    assert decision.chosen.times and decision.rounds >= 2
    assert decision.held_bytes <= budget
    clock.remove()


def test_the_planners_own_search_ends_within_the_bound_on_a_model_whose_frontier_costs_more(monkeypatch):
    """As on ResNet-152 (50 blocks, four choices), where the search of the time model's plans alone cost more than
    the bound: here each step of the search (a block given the previous block's choice) costs 100 units, against a
    bound of 600. The search stops where it has cost the half of the bound kept before timing, says so, and the
    plain candidates are measured and timed; before, the search ran to its end whatever the bound."""
    model, x, step = model_and_step()
    clock = FakeClock(model)
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint", "segment"), costs=CountedCosts(), repeats=1)
    options = planner.search.options
    searched = []

    def slow_options(k, prev):
        clock.charge(100.0)
        searched.append(k)
        return options(k, prev)
    monkeypatch.setattr(planner.search, "options", slow_options)
    budget = planner.baseline_bytes // 2
    before = clock.now
    decision = decided(planner, budget, clock, max_seconds=600)
    note = next(n for n in decision.notes if n.startswith("plan search stopped at block "))
    assert f"of {BLOCKS}, with" in note and "max_seconds= allows more" in note
    assert max(searched) < BLOCKS - 1  # it did not reach the last block
    assert not any(c.kind.startswith("plan") for c in decision.candidates)
    assert decision.held_bytes <= budget and decision.chosen.times
    # the search passed its share (300) by at most one of its steps; the rest is measuring the plain candidates
    assert decision.seconds == clock.now - before <= 600 + 10  # at most a step over the bound
    assert 300 < 100.0 * len(searched) <= 400
    # nothing of the stopped search is kept: the planner without a bound searches to the end
    monkeypatch.setattr(planner.search, "options", options)
    plan = planner.plan(budget)
    assert len(plan.choices) == BLOCKS
    clock.remove()

def test_the_model_as_it_is_when_it_meets_the_budget():
    model, x, step = model_and_step()
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint"), costs=CountedCosts(), repeats=1)
    decision = planner.decide(planner.baseline_bytes, backends=(), rounds=2)
    assert decision.chosen.kind == "as is" and decision.candidates == [] and "nothing to do" in decision.reason
    with decision.apply():
        step().backward()


def test_nothing_that_meets_the_budget_raises_a_budget_error():
    model, x, step = model_and_step()
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint"), costs=CountedCosts(), repeats=1)
    with pytest.raises(hooklab.BudgetError, match="nothing measured meets a budget of 1 B"):
        planner.decide(1, backends=(), rounds=2)


def test_a_model_that_is_not_a_sequential_has_no_checkpoint_sequential_and_says_so():
    model, x, _ = model_and_step()
    wrapper = nn.ModuleDict({"body": model})
    step = lambda: wrapper["body"](x).sum()  # noqa: E731
    planner = MemoryPlanner(wrapper, step, [f"body.{i}" for i in range(BLOCKS)],
                            choices=("keep", "checkpoint", "segment"), costs=CountedCosts(), repeats=1)
    decision = planner.decide(planner.baseline_bytes // 2, backends=(), rounds=2)
    assert all(c.kind != "checkpoint_sequential" for c in decision.candidates)
    assert any("not an nn.Sequential" in n for n in decision.notes)


def test_checkpoint_around_each_block_is_a_plain_candidate_on_any_model(monkeypatch):
    """On a model that is not an nn.Sequential the plain alternative is torch.utils.checkpoint around each block: its
    bytes are the meter's (an independent measurement) and, where the time model's own plans write to disk and a
    file costs more than a block's recompute, it is chosen."""
    model, x, _ = model_and_step()

    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = model

        def forward(self, x):
            return self.body(x)
    wrapper = Wrapper()
    step = lambda: wrapper(x).sum()  # noqa: E731
    blocks = [f"body.{i}" for i in range(BLOCKS)]
    clock = FakeClock(model, per_file=5.0, monkeypatch=monkeypatch)
    planner = MemoryPlanner(wrapper, step, blocks, choices=("keep", "offload"), costs=CHEAP_OFFLOAD, min_bytes=1024,
                            repeats=1)
    budget = planner.baseline_bytes // 2
    decision = decided(planner, budget, clock, max_seconds=10_000)
    each = next(c for c in decision.candidates if c.kind == "checkpoint")
    assert isinstance(each.option, hooklab.CheckpointEach) and each.name == "checkpoint each block"
    each_block = lambda: hooklab.checkpoint_modules(wrapper, blocks)  # noqa: E731
    assert each.held_bytes == held_truth(model, x, each_block) == meter_bytes(model, x, each_block) + BLOCKS * RNG
    assert decision.chosen is each and decision.held_bytes <= budget
    assert decided(planner, budget, clock, plain=False).chosen.kind == "plan"  # left out: a plan is chosen
    clock.remove()


# ------------------------------------------------------------------------------------------- compiling
def test_a_compiled_candidate_is_measured_and_applied_and_a_backend_that_fails_is_noted():
    model, x, step = model_and_step()
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint"), costs=CountedCosts(), repeats=1)
    budget = planner.baseline_bytes // 2
    decision = planner.decide(budget, backends=("aot_eager", "no_such_backend"), rounds=2, sequential=False,
                              max_seconds=600)  # a bound no compile on a busy machine reaches
    compiled = [c for c in decision.candidates if c.kind == "torch.compile"]
    assert compiled and compiled[0].option.fraction == pytest.approx(budget / planner.baseline_bytes), decision.table()
    assert all(c.held_bytes is not None for c in compiled)
    assert any(c.held_bytes <= budget for c in compiled) or len(compiled) == 2  # tried f, then f / 2
    assert any("no_such_backend" in n and "failed" in n for n in decision.notes)
    model.zero_grad(set_to_none=True)
    step().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    with compiled[-1].apply():
        loss = step()
    loss.backward()
    assert all(torch.allclose(p.grad, g, atol=1e-6) for p, g in zip(model.parameters(), plain, strict=True))
    assert not any("forward" in m.__dict__ for m in model.modules())
    torch._dynamo.reset()


# ----------------------------------------------------------------------------------------- lifecycle
def test_the_alternatives_apply_once_per_call_restore_on_error_and_a_copy_runs_plainly():
    model, x, step = model_and_step()
    option = SequentialCheckpoint(model, 3)
    block = option.apply()
    with block:
        copied = copy.deepcopy(model)
        with hooklab.OpCounter() as ops:
            copied(x).sum().backward()
    assert ops.counts["addmm"] == 2 * BLOCKS  # the forward's Linear layers, none run again: the copy is plain
    with pytest.raises(RuntimeError, match="already run"):
        with block:
            pass
    with pytest.raises(ZeroDivisionError), option.apply():
        raise ZeroDivisionError
    assert "forward" not in model.__dict__
    with pytest.raises(TypeError, match="one input"), option.apply():
        model(x, x)
    with pytest.raises(TypeError, match="nn.Sequential"):
        SequentialCheckpoint(nn.ModuleList([model]), 2)
    with pytest.raises(ValueError, match="segments must be an int from 1 to len"):
        SequentialCheckpoint(model, 7)
    with pytest.raises(TypeError, match="OffloadStep takes an nn.Module"):
        hooklab.OffloadStep(step, [], "cpu", 0)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="min_bytes must be an int >= 0"):
            hooklab.OffloadStep(model, [], "cpu", bad)
    assert hooklab.OffloadStep(model, [], "cpu", 0).device == torch.device("cpu")  # a name is taken as a device


def offloaded(option, model, x) -> int:
    with option.apply() as saving:
        loss = model(x).sum()
    loss.backward()
    return saving.stats.offloaded


def test_offload_step_and_compiled_budget_refuse_what_would_fail_later():
    model, x, _ = model_and_step()
    with pytest.raises(TypeError, match=r"keep takes the tensors .* \[\] for none; got None"):
        hooklab.OffloadStep(model, None, "cpu", 0)
    # one tensor is one tensor kept, as MemoryPlanner takes it (not its rows): the input is then not offloaded
    one = hooklab.OffloadStep(model, x, "cpu", 0)
    assert len(one.keep) == 1 and one.keep[0] is x
    listed, none = hooklab.OffloadStep(model, [x], "cpu", 0), hooklab.OffloadStep(model, [], "cpu", 0)
    assert offloaded(one, model, x) == offloaded(listed, model, x) == offloaded(none, model, x) - 1
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            hooklab.OffloadStep(model, [], "cuda", 0)
    for bad in (123, "", None):
        with pytest.raises(TypeError, match="backend must be a torch.compile backend"):
            hooklab.CompiledBudget(model, bad, 0.5)


@pytest.mark.parametrize("clock, match", [
    (lambda: 0.0, "the clock is too coarse for this step: pass clock=time.perf_counter"),  # does not advance
    (itertools.count(0.0, -1.0).__next__, "the clock ran backwards"),
])
def test_a_clock_that_cannot_time_a_step_is_refused(clock, match):
    model, x, step = model_and_step()
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint"), costs=CountedCosts(), repeats=1)
    with hooklab.no_hooks_left_behind(model), pytest.raises(ValueError, match=match):
        planner.decide(planner.baseline_bytes // 2, backends=(), clock=clock)
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_the_random_states_the_step_draws_from_are_put_back():
    """torch's, Python's random and NumPy's global generator: a step that draws from each leaves them as they were
    (the truth: the next draws equal those of a copy of the states taken before)."""
    import random

    import numpy as np
    model, x, _ = model_and_step()
    step = lambda: model(x * (1 + 0 * random.random() + 0 * np.random.rand()) + 0 * torch.rand(1)).sum()  # noqa: E731
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint"), costs=CountedCosts(), repeats=1)
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    planner.decide(planner.baseline_bytes // 2, backends=(), rounds=2)
    after = [random.random(), float(np.random.rand()), float(torch.rand(1))]
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch.set_rng_state(states[2])
    assert after == [random.random(), float(np.random.rand()), float(torch.rand(1))]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"rounds": 1}, ValueError, "rounds must be an int >= 2"),
    ({"plans": -1}, ValueError, "plans must be an int >= 0"),
    ({"backends": (3,)}, TypeError, "backends are torch.compile backend names"),
    ({"max_seconds": 0}, ValueError, "max_seconds must be a number of seconds > 0"),
    ({"sequential": 1}, TypeError, "sequential must be True or False"),
    ({"clock": 5}, TypeError, "clock must be a function"),
])
def test_bad_arguments_are_refused(kwargs, error, match):
    model, x, step = model_and_step()
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint"), costs=CountedCosts(), repeats=1)
    with pytest.raises(error, match=match):
        planner.decide(planner.baseline_bytes // 2, **kwargs)
    with pytest.raises(ValueError, match="budget must be an int"):
        planner.decide(-1)


def test_names_in_the_table_follow_the_candidates():
    model, x, step = model_and_step()
    clock = FakeClock(model)
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint", "segment"), costs=CountedCosts(), repeats=1)
    decision = decided(planner, planner.baseline_bytes // 4, clock)
    lines = str(decision).splitlines()
    assert lines[0].split() == ["candidate", "held", "meets", "x", "step", "x", "chosen", "verdict"]
    names = [c.name for c in itertools.chain([decision.baseline], decision.candidates)]
    assert [line.startswith(name) for line, name in zip(lines[1:], names, strict=False)] == [True] * len(names)
    assert any(line.startswith("budget ") and decision.chosen.name in line for line in lines)
    assert any(line.startswith("measuring: ") and "given clock" in line for line in lines)
    clock.remove()


def test_a_budget_below_what_the_blocks_can_reach_is_met_by_offloading_the_whole_step(tmp_path, monkeypatch):
    """The loss saves a tensor of its own (log_softmax's output, outside every block): no per-block plan reaches a
    budget below it, and before OffloadStep nothing the decision measured did. Offloading every saved tensor of the
    step meets it; its bytes are the meter's, and its gradients are the plain ones."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    model, x, _ = model_and_step()
    step = lambda: model(x).log_softmax(-1).sum()  # noqa: E731
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint"), costs=CountedCosts(), min_bytes=1024,
                            repeats=1)
    with pytest.raises(hooklab.BudgetError):
        planner.plan(4096)  # the least a plan reaches: the checkpoints' inputs and the loss's own 8 KiB
    decision = planner.decide(4096, backends=(), rounds=2)
    assert isinstance(decision.choice, hooklab.OffloadStep) and decision.chosen.name == "offload the whole step"
    assert decision.chosen.kind == "offload step"  # not "plan": it is no MemoryPlan (a GPU test read a plan's bytes)
    with hooklab.MemoryMeter(ignore=[*model.parameters(), x]) as meter:
        with decision.apply():
            loss = step()
        held = meter.mark() - loss.untyped_storage().nbytes()
    assert held == decision.held_bytes <= 4096
    loss.backward()
    offloaded = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    step().backward()
    # bitwise by construction: the same bytes read back from disk, into memory aligned as the originals (64 bytes),
    # run through the same kernels
    assert all(torch.equal(a, p.grad) for a, p in zip(offloaded, model.parameters()))
    with pytest.raises(hooklab.BudgetError, match="nothing measured meets"):
        planner.decide(4096, backends=(), rounds=2, plain=False)
    assert list(tmp_path.glob("hooklab-saved-*")) == []


# ------------------------------------------------------------------------------ on a GPU's scale, without a GPU
def test_the_copy_probe_repeats_a_copy_too_fast_for_the_clock():
    """A data-centre GPU copies 64 MiB in about 45 us: under a microsecond clock's 100 ticks. The probe used to stop
    growing at 64 MiB and raise, so the planner could not start on an A100 / H100 / H200; now it copies several times
    per timing. Here the copy is a stand-in that costs 1.5 TB/s of a fake clock's time."""
    from hooklab.planner.costs import _memory_speed
    clock = [0.0]

    def copy(dst, src):
        clock[0] += src.nbytes / 1.5e12

    speed = _memory_speed(torch.device("cpu"), 1 << 20, 3, lambda: clock[0], resolution=1e-6, max_bytes=64 << 20,
                          max_copies=1 << 12, copy=copy)  # a GPU's limits
    assert speed == pytest.approx(1.5e12, rel=1e-9)
    assert clock[0] >= 4 * 4 * (64 << 20) / 1.5e12  # 64 MiB was not enough: 4 copies per timing, 4 timings


def test_a_clock_that_resolves_no_copy_is_refused_after_the_bounds():
    from hooklab.planner.costs import _memory_speed
    with pytest.raises(RuntimeError, match=r"4096 copies of 1 MiB took 0 s by this clock.*CountedCosts"):
        _memory_speed(torch.device("cpu"), 1 << 20, 3, lambda: 0.0, resolution=1e-6, max_bytes=1 << 20,
                      max_copies=1 << 12, copy=lambda dst, src: None)


def flat_blocks(n: int, width: int = 8):
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(n)])
    x = torch.randn(4, width)
    return model, x, (lambda: model(x).sum())


def test_deciding_for_a_model_of_52_blocks_ends_within_its_bound_when_nothing_meets_the_budget(tmp_path,
                                                                                                monkeypatch):
    """ResNet-152 as a flat Sequential has 52 blocks: with a budget nothing meets, decide went on measuring all 51
    checkpoint_sequential counts past any bound (on an H200 it had not finished after 230 s). Now nothing is measured
    past the bound, and the error says so."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    model, x, step = flat_blocks(52)
    clock = FakeClock(model)  # each block's forward costs 1 unit: a step 52 (more with a recompute)
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint"), costs=CountedCosts(), repeats=1)
    before = clock.now
    with pytest.raises(hooklab.BudgetError, match="the measuring bound was reached before one met the budget"):
        decided(planner, 64, clock, max_seconds=600)
    assert clock.now - before <= 600 + 2 * 52 * 2  # at most one measurement (a forward and a recompute) over it
    clock.remove()


def test_a_candidate_that_raises_when_it_runs_is_left_out_with_a_note(monkeypatch):
    """Checkpointing a block that changes its own input in place (a ReLU(inplace=True) as a block: torchvision's
    ResNet's children) raises in backward; the decision leaves that candidate out and says why."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 256)),
                          nn.Sequential(nn.ReLU(inplace=True)),
                          nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 64), nn.Tanh()))
    x = torch.randn(32, 64)
    step = lambda: model(x).sum()  # noqa: E731
    clock = FakeClock(model)
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint"), costs=CountedCosts(), repeats=1)
    budget = planner.baseline_bytes * 3 // 4
    assert CheckpointEach(model, list(planner.blocks))  # measured below: it meets the budget, then fails in backward
    d = decided(planner, budget, clock, max_seconds=10_000, sequential=False)
    each = [c for c in d.candidates if c.kind == "checkpoint"]
    assert each and each[0].status.startswith("failed: RuntimeError") and each[0] is not d.chosen
    assert any("checkpoint each block: failed when run (RuntimeError" in n for n in d.notes)
    assert d.held_bytes <= budget
    clock.remove()


def test_checkpoint_and_offload_holds_less_than_either_through_decides_measurement(tmp_path, monkeypatch):
    """Each candidate kind through the code that measures it (``_Measure.held_bytes`` and ``step``): checkpointing
    each block and offloading what the checkpoints keep (their inputs) holds less than checkpointing alone, which
    keeps one input per block; its gradients are the plain step's, bit for bit (disk gives back the same bytes)."""
    from hooklab.planner.alternatives import CheckpointAndOffload, CheckpointEach
    from hooklab.planner.decide import _Measure
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    model, x, step = model_and_step()
    planner = MemoryPlanner(model, step, choices=("keep", "checkpoint"), costs=CountedCosts(), repeats=1,
                            min_bytes=1024)
    m = _Measure(planner, None, time.process_time)
    blocks = list(planner.blocks)
    both = CheckpointAndOffload(model, blocks, [], torch.device("cpu"), 1024)
    each = CheckpointEach(model, blocks)
    plain = [p.grad.clone() for p in model.parameters()] if all(p.grad is not None for p in model.parameters()) \
        else None
    assert m.held_bytes(both) < m.held_bytes(each) < planner.baseline_bytes
    model.zero_grad(set_to_none=True)
    step().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    assert m.step(both) > 0
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), plain))
    assert not any("forward" in mod.__dict__ for mod in model.modules()) and list(tmp_path.glob("hooklab-saved-*")) == []
    with pytest.raises(ValueError, match="keep_last"):
        CheckpointAndOffload(model, blocks, [], "cpu", 0, keep_last=-1)
