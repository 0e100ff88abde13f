"""hooklab.clip: gradient clipping through hooks, against torch.nn.utils.clip_grad_*."""
from __future__ import annotations

import doctest

import pytest
import torch
from torch import nn

import hooklab
from hooklab import no_hooks_left_behind
from hooklab.clip import clip_grad_norm_global_hooks, clip_grad_norm_hooks, clip_grad_value_hooks


def make_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


@pytest.fixture
def xb() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(8, 6) * 10


def loss_of(model: nn.Module, xb: torch.Tensor) -> torch.Tensor:
    return model(xb).pow(2).sum()


def grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


class Shared(nn.Module):
    """One Linear used twice: its gradient arrives in two contributions."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.tanh(self.lin(x)))


@pytest.mark.parametrize("stage", ["incoming", "accumulated"])
def test_value_hooks_match_clip_grad_value(xb, stage):
    ref = make_model()
    loss_of(ref, xb).backward()
    assert max(g.abs().max().item() for g in grads(ref)) > 0.5  # clipping has work to do
    torch.nn.utils.clip_grad_value_(ref.parameters(), 0.5)

    model = make_model()
    with no_hooks_left_behind(model), clip_grad_value_hooks(model, 0.5, stage=stage) as scope:
        assert len(scope) == 6  # 4 parameter hooks + a load_state_dict post-hook on each Linear (follows assign=True)
        loss_of(model, xb).backward()
    for a, b in zip(grads(model), grads(ref)):
        assert torch.equal(a, b)


def test_shared_weight_is_clipped_once_on_the_sum_of_its_uses():
    torch.manual_seed(0)
    x = torch.randn(4, 3) * 20
    torch.manual_seed(0)
    ref = Shared()
    ref(x).sum().backward()
    assert ref.lin.weight.grad.abs().max() > 0.1
    torch.nn.utils.clip_grad_value_(ref.parameters(), 0.1)
    for stage in ("incoming", "accumulated"):
        torch.manual_seed(0)
        model = Shared()
        with clip_grad_value_hooks(model, 0.1, stage=stage):
            model(x).sum().backward()
        assert torch.equal(model.lin.weight.grad, ref.lin.weight.grad)


def test_gradient_accumulation_differs_from_clip_grad_value():
    w = nn.Parameter(torch.zeros(3))
    c1, c2 = torch.tensor([3.0, 3.0, -0.5]), torch.tensor([3.0, -3.0, -0.5])
    with clip_grad_value_hooks([w], 1.0):
        (w * c1).sum().backward()
        (w * c2).sum().backward()
    assert torch.equal(w.grad, torch.tensor([2.0, 0.0, -1.0]))  # clip(c1) + clip(c2)
    w.grad = None
    with clip_grad_value_hooks([w], 1.0, stage="accumulated"):
        (w * c1).sum().backward()
        (w * c2).sum().backward()
    assert torch.equal(w.grad, torch.tensor([1.0, -1.0, -1.0]))  # clip(clip(c1) + c2)
    w.grad = None
    (w * c1).sum().backward()
    (w * c2).sum().backward()
    torch.nn.utils.clip_grad_value_([w], 1.0)
    assert torch.equal(w.grad, torch.tensor([1.0, 0.0, -1.0]))  # clip(c1 + c2)


def test_value_hook_does_not_touch_a_gradient_shared_with_another_branch():
    # autograd gives both operands of `a + b` the same gradient tensor; the hook must not
    # change it in place, or b's gradient would be clipped too
    a = nn.Parameter(torch.tensor([3.0, -3.0, 0.5]))
    b = nn.Parameter(torch.ones(3))
    w = torch.tensor([5.0, -5.0, 0.2])
    with clip_grad_value_hooks([a], 1.0):
        ((a + b) * w).sum().backward()
    assert torch.equal(a.grad, torch.tensor([1.0, -1.0, 0.2]))
    assert torch.equal(b.grad, w)


def test_value_hooks_keep_clipping_until_removed(xb):
    model = make_model()
    with no_hooks_left_behind(model):
        scope = clip_grad_value_hooks(model, 1e-3)
        for _ in range(2):
            model.zero_grad()
            loss_of(model, xb).backward()
            assert max(g.abs().max().item() for g in grads(model)) == pytest.approx(1e-3)
        assert scope.remove() == 6
    model.zero_grad()
    loss_of(model, xb).backward()
    assert max(g.abs().max().item() for g in grads(model)) > 2e-3


def test_norm_hooks_equal_clip_grad_norm_for_a_single_parameter(xb):
    torch.manual_seed(0)
    w_ref = nn.Parameter(torch.randn(6, 3))
    w = nn.Parameter(w_ref.detach().clone())
    (xb @ w_ref).pow(2).sum().backward()
    torch.nn.utils.clip_grad_norm_([w_ref], 1.0)
    with clip_grad_norm_hooks([w], 1.0):
        (xb @ w).pow(2).sum().backward()
    assert torch.allclose(w.grad, w_ref.grad)
    assert w.grad.norm().item() == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize("stage", ["incoming", "accumulated"])
def test_norm_hooks_clip_each_parameter_not_the_global_norm(xb, stage):
    ref = make_model()
    loss_of(ref, xb).backward()
    raw = grads(ref)
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
    model = make_model()
    with clip_grad_norm_hooks(model, 1.0, stage=stage):
        loss_of(model, xb).backward()
    for g, r in zip(grads(model), raw):
        expected = r * min(1.0, 1.0 / (r.norm().item() + 1e-6))
        assert torch.allclose(g, expected, rtol=1e-5, atol=1e-7)
    total = torch.stack([g.norm() for g in grads(model)]).norm().item()
    assert total > 1.0 + 1e-3  # each tensor <= 1, together more than 1: not what clip_grad_norm_ gives
    assert torch.stack([g.norm() for g in grads(ref)]).norm().item() == pytest.approx(1.0, rel=1e-4)


def test_norm_hooks_inf_norm(xb):
    model = make_model()
    with clip_grad_norm_hooks(model, 0.5, norm_type=float("inf")):
        loss_of(model, xb).backward()
    assert max(g.abs().max().item() for g in grads(model)) == pytest.approx(0.5, rel=1e-5)


def test_norm_hooks_leave_small_gradients_alone():
    model = make_model()
    ref = make_model()
    torch.manual_seed(3)
    x = torch.randn(2, 6) * 1e-3
    loss_of(ref, x).backward()
    with clip_grad_norm_hooks(model, 100.0):
        loss_of(model, x).backward()
    for a, b in zip(grads(model), grads(ref)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("make", [clip_grad_value_hooks, clip_grad_norm_hooks])
def test_hooks_removed_after_exception(make, xb):
    model = make_model()
    with no_hooks_left_behind(model), pytest.raises(ZeroDivisionError):
        with make(model, 1.0):
            loss_of(model, xb).backward()
            1 / 0


@pytest.mark.parametrize("make", [clip_grad_value_hooks, clip_grad_norm_hooks])
@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1", True])
def test_bad_threshold(make, bad):
    model = make_model()
    wrong = TypeError if isinstance(bad, (str, bool)) else ValueError  # a wrong type, or a number out of range
    with no_hooks_left_behind(model), pytest.raises(wrong, match="must be a finite number > 0, got"):
        make(model, bad)


@pytest.mark.parametrize("make", [clip_grad_value_hooks, clip_grad_norm_hooks])
def test_bad_params_and_stage(make):
    frozen = make_model().requires_grad_(False)
    with pytest.raises(ValueError, match="nothing to clip"):
        make(frozen, 1.0)
    with pytest.raises(TypeError, match="iterable of parameters"):
        make(3, 1.0)
    with pytest.raises(TypeError, match="parameters"):
        make(["w"], 1.0)
    leaf = torch.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="leaf"):
        make([leaf * 2], 1.0)
    with pytest.raises(ValueError, match="stage"):
        make(make_model(), 1.0, stage="before")


def test_norm_type_must_be_positive():
    with pytest.raises(ValueError, match="norm_type"):
        clip_grad_norm_hooks(make_model(), 1.0, norm_type=0)


def test_single_tensor_accepted():
    w = torch.ones(3, requires_grad=True)
    with clip_grad_value_hooks(w, 0.25):
        (w * 10).sum().backward()
    assert torch.equal(w.grad, torch.full((3,), 0.25))


# --- clip_grad_norm_global_hooks: the global norm, inside backward -------------------------------------------

def global_norm(model: nn.Module, norm_type: float = 2.0) -> float:
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(p.grad, norm_type) for p in model.parameters()]), norm_type).item()


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_global_hooks_match_clip_grad_norm_over_several_steps(norm_type):
    torch.manual_seed(1)
    batches = [torch.randn(8, 6) * 10 for _ in range(3)]
    ref, model = make_model(), make_model()
    opt_ref = torch.optim.SGD(ref.parameters(), lr=1e-3)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with no_hooks_left_behind(model), clip_grad_norm_global_hooks(model, 0.5, norm_type=norm_type) as scope:
        assert len(scope) == 6
        for xb in batches:                      # three optimizer steps, the hooks stay on
            opt_ref.zero_grad()
            loss_of(ref, xb).backward()
            raw_norm = global_norm(ref, norm_type)
            torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5, norm_type=norm_type)
            opt.zero_grad()
            loss_of(model, xb).backward()
            assert raw_norm > 1.0               # clipping has work to do at every step
            for a, b in zip(grads(model), grads(ref)):
                assert torch.allclose(a, b, rtol=1e-5, atol=1e-8)
            assert global_norm(model, norm_type) == pytest.approx(0.5, rel=1e-4)
            opt_ref.step()
            opt.step()


def test_global_hooks_are_not_the_per_parameter_hooks(xb):
    per_param, global_ = make_model(), make_model()
    with clip_grad_norm_hooks(per_param, 1.0):
        loss_of(per_param, xb).backward()
    with clip_grad_norm_global_hooks(global_, 1.0):
        loss_of(global_, xb).backward()
    assert global_norm(per_param) > 1.5                      # each tensor <= 1, together more
    assert global_norm(global_) == pytest.approx(1.0, rel=1e-4)


def test_global_hooks_leave_small_gradients_alone():
    ref, model = make_model(), make_model()
    torch.manual_seed(3)
    x = torch.randn(2, 6) * 1e-3
    loss_of(ref, x).backward()
    with clip_grad_norm_global_hooks(model, 100.0):
        loss_of(model, x).backward()
    for a, b in zip(grads(model), grads(ref)):
        assert torch.equal(a, b)


class TwoHeads(nn.Module):
    """A trunk and two heads: a loss that uses one head gives the other no gradient."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.trunk, self.a, self.b = nn.Linear(6, 8), nn.Linear(8, 2), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, head: str) -> torch.Tensor:
        return getattr(self, head)(torch.tanh(self.trunk(x)))


def test_a_parameter_without_gradient_this_step_does_not_stop_the_clipping(xb):
    ref, model = TwoHeads(), TwoHeads()
    ref(xb, "a").pow(2).sum().backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
    with clip_grad_norm_global_hooks(model, 0.5):
        model(xb, "a").pow(2).sum().backward()           # head b gets no gradient
        assert model.b.weight.grad is None and model.b.bias.grad is None
        for name, p in ref.named_parameters():
            if p.grad is not None:
                assert torch.allclose(dict(model.named_parameters())[name].grad, p.grad, rtol=1e-5, atol=1e-8)
        # the next step uses both heads: the countdown starts afresh and completes
        model.zero_grad()
        ref.zero_grad()
        (model(xb, "a") + model(xb, "b")).pow(2).sum().backward()
        (ref(xb, "a") + ref(xb, "b")).pow(2).sum().backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        for a, b in zip(grads(model), grads(ref)):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-8)


def test_a_stale_grad_counts_as_clip_grad_norm_counts_it(xb):
    # zero_grad(set_to_none=False) leaves zeros; a .grad left from an earlier step is part of the norm
    ref, model = TwoHeads(), TwoHeads()
    for m in (ref, model):
        m(xb, "b").sum().backward()                     # head b now holds a .grad
        m.trunk.zero_grad()
        m.a.zero_grad()
    ref(xb, "a").pow(2).sum().backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
    with clip_grad_norm_global_hooks(model, 0.5):
        model(xb, "a").pow(2).sum().backward()
    for a, b in zip(grads(model), grads(ref)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-8)


def test_global_hooks_with_accumulation(xb):
    torch.manual_seed(4)
    micro = [torch.randn(8, 6) * 10 for _ in range(2)]
    ref = make_model()
    for m in micro:
        loss_of(ref, m).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
    every = make_model()                                   # hooks on for both backwards
    with clip_grad_norm_global_hooks(every, 0.5):
        for m in micro:
            loss_of(every, m).backward()
    assert global_norm(every) == pytest.approx(0.5, rel=1e-4)   # clip(clip(g1) + g2): norm right ...
    assert not all(torch.allclose(a, b, rtol=1e-5, atol=1e-8) for a, b in zip(grads(every), grads(ref)))
    last = make_model()                                    # ... direction not; hooks on the last backward only
    loss_of(last, micro[0]).backward()
    with clip_grad_norm_global_hooks(last, 0.5):
        loss_of(last, micro[1]).backward()
    for a, b in zip(grads(last), grads(ref)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-8)


def test_global_hooks_after_a_backward_that_raised(xb):
    # a backward that fails halfway must not leave the countdown half done for the next one
    model, ref = make_model(), make_model()

    def fail(param):
        raise RuntimeError("boom")

    with clip_grad_norm_global_hooks(model, 0.5):
        handle = model[2].bias.register_post_accumulate_grad_hook(fail)   # the first parameter to get its grad
        with pytest.raises(RuntimeError, match="boom"):
            loss_of(model, xb).backward()
        handle.remove()
        model.zero_grad()
        loss_of(model, xb).backward()
    loss_of(ref, xb).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
    for a, b in zip(grads(model), grads(ref)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-8)


def test_global_hooks_removed_on_exit_and_on_exception(xb):
    model = make_model()
    with no_hooks_left_behind(model), clip_grad_norm_global_hooks(model, 1.0):
        loss_of(model, xb).backward()
    with no_hooks_left_behind(model), pytest.raises(ZeroDivisionError):
        with clip_grad_norm_global_hooks(model, 1.0):
            assert len(hooklab.hook_inventory(model, include_global=False)) == 6
            1 / 0
    model.zero_grad()
    loss_of(model, xb).backward()
    assert global_norm(model) > 2.0                          # no clipping left behind


def test_global_hooks_bad_input():
    for bad in (0, -1.0, float("nan"), float("inf"), "1", True):
        with pytest.raises((TypeError, ValueError), match="max_norm must be a finite number > 0, got"):
            clip_grad_norm_global_hooks(make_model(), bad)
    for bad in (0, -2.0):
        with pytest.raises(ValueError, match="norm_type must be > 0"):
            clip_grad_norm_global_hooks(make_model(), 1.0, norm_type=bad)
    for bad in (True, "2"):  # not a number: the same TypeError as GradientMonitor's (hooklab._checks.check_norm_type)
        with pytest.raises(TypeError, match="norm_type must be a number"):
            clip_grad_norm_global_hooks(make_model(), 1.0, norm_type=bad)
    with pytest.raises(TypeError):
        clip_grad_norm_global_hooks(make_model(), 1.0, 2.0)     # norm_type is keyword-only
    with pytest.raises(ValueError, match="nothing to clip"):
        clip_grad_norm_global_hooks(make_model().requires_grad_(False), 1.0)
    w = nn.Parameter(torch.ones(2))
    with pytest.raises(ValueError, match="more than once"):
        clip_grad_norm_global_hooks([w, w], 1.0)
    leaf = torch.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="leaf"):
        clip_grad_norm_global_hooks([leaf * 2], 1.0)


def test_global_hooks_docstring_example_runs():
    finder = doctest.DocTestFinder()
    (test,) = finder.find(clip_grad_norm_global_hooks, "clip_grad_norm_global_hooks",
                          globs={"clip_grad_norm_global_hooks": clip_grad_norm_global_hooks})
    assert test.examples
    result = doctest.DocTestRunner().run(test)
    assert result.failed == 0 and result.attempted == len(test.examples)


def _scaled_run(make_scope):
    """Grads after a GradScaler backward and unscale_, with the hooks make_scope(model, scaler) registers."""
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 6) * 5
    scope = make_scope(model, scaler) if make_scope else None
    try:
        scaler.scale(model(x).square().sum()).backward()
    finally:
        if scope is not None:
            scope.remove()
    scaler.unscale_(optimizer)
    return model, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("kind", ["value", "norm", "global"])
def test_scaler_makes_hook_clipping_equal_to_clipping_after_unscale(kind):
    reference_model, _ = _scaled_run(None)
    if kind == "value":
        torch.nn.utils.clip_grad_value_(reference_model.parameters(), 0.05)
        tool = lambda m, s: clip_grad_value_hooks(m, 0.05, scaler=s)  # noqa: E731
        unaware = lambda m, s: clip_grad_value_hooks(m, 0.05)  # noqa: E731
    elif kind == "norm":
        for p in reference_model.parameters():
            torch.nn.utils.clip_grad_norm_([p], 0.5)
        tool = lambda m, s: clip_grad_norm_hooks(m, 0.5, scaler=s)  # noqa: E731
        unaware = lambda m, s: clip_grad_norm_hooks(m, 0.5)  # noqa: E731
    else:
        torch.nn.utils.clip_grad_norm_(reference_model.parameters(), 0.5)
        tool = lambda m, s: clip_grad_norm_global_hooks(m, 0.5, scaler=s)  # noqa: E731
        unaware = lambda m, s: clip_grad_norm_global_hooks(m, 0.5)  # noqa: E731
    reference = [p.grad for p in reference_model.parameters()]
    _, with_scaler = _scaled_run(tool)
    _, without = _scaled_run(unaware)
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(with_scaler, reference))
    assert not all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(without, reference))


def test_scaler_must_be_a_grad_scaler():
    model = nn.Linear(2, 2)
    for tool in (clip_grad_value_hooks, clip_grad_norm_hooks, clip_grad_norm_global_hooks):
        with pytest.raises(TypeError, match="scaler must be a torch.amp.GradScaler"):
            tool(model, 1.0, scaler=2.0**16)
    assert not model.weight._backward_hooks and not model.weight._post_accumulate_grad_hooks


@pytest.mark.parametrize("stage", ["incoming", "accumulated"])
def test_sparse_gradients_are_clipped_like_their_dense_version(stage):
    def grads(tool):
        torch.manual_seed(0)
        emb = nn.Embedding(10, 3, sparse=True)
        dense = nn.Embedding(10, 3)
        dense.load_state_dict(emb.state_dict())
        idx = torch.tensor([1, 2, 2, 7])  # row 2 twice: the sparse gradient has a repeated index
        with tool(emb), tool(dense):
            (emb(idx) * 100).sum().backward()
            (dense(idx) * 100).sum().backward()
        return emb.weight.grad.to_dense(), dense.weight.grad

    for tool in (lambda m: clip_grad_value_hooks(m, 0.5, stage=stage),
                 lambda m: clip_grad_norm_hooks(m, 1.0, stage=stage),
                 lambda m: clip_grad_norm_global_hooks(m, 1.0)):
        sparse, dense = grads(tool)
        assert torch.allclose(sparse, dense)


# ---- review round 2: S11 (parameters swapped by load_state_dict), N12 (a used-up generator) -----------------

def _per_parameter_norm_clip(params, max_norm):
    for p in params:
        p.grad.mul_(torch.clamp(max_norm / (p.grad.norm() + 1e-6), max=1.0))


@pytest.mark.parametrize("make, truth", [
    (lambda m: clip_grad_value_hooks(m, 1e-3), lambda ps: torch.nn.utils.clip_grad_value_(ps, 1e-3)),
    (lambda m: clip_grad_value_hooks(m, 1e-3, stage="accumulated"),
     lambda ps: torch.nn.utils.clip_grad_value_(ps, 1e-3)),
    (lambda m: clip_grad_norm_hooks(m, 1e-3), lambda ps: _per_parameter_norm_clip(ps, 1e-3)),
    (lambda m: clip_grad_norm_global_hooks(m, 1e-3), lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1e-3)),
], ids=["value", "value-accumulated", "norm", "global"])
@pytest.mark.parametrize("into", ["the model", "a submodule"])
def test_clip_hooks_follow_load_state_dict_assign(make, truth, into):
    """Round 3's N6: a load into a submodule (model.fc1.load_state_dict(sd, assign=True)) stopped the clipping."""
    model = make_model()
    torch.manual_seed(5)
    fresh = {k: torch.randn_like(v) * 10 for k, v in model.state_dict().items()}
    if into == "a submodule":
        fresh = {k.removeprefix("0."): v for k, v in fresh.items() if k.startswith("0.")}
    target = (lambda m: m) if into == "the model" else (lambda m: m[0])
    xb = torch.randn(8, 6) * 100
    with no_hooks_left_behind(model), make(model):
        target(model).load_state_dict(fresh, assign=True)  # new Parameter objects inside the block
        loss_of(model, xb).backward()
    ref = make_model()
    target(ref).load_state_dict(fresh)
    loss_of(ref, xb).backward()
    assert max(g.abs().max().item() for g in grads(ref)) > 1e-2  # clipping has work to do
    truth(list(ref.parameters()))
    for a, b in zip(grads(model), grads(ref)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-9)


def test_a_used_up_generator_of_parameters_gets_a_message_saying_so():
    model = make_model()
    params = model.parameters()
    list(params)
    with pytest.raises(ValueError, match=r"empty iterator.*read only once.*list\(model.parameters\(\)\)"):
        clip_grad_value_hooks(params, 0.1)
    with pytest.raises(ValueError, match="no parameter that requires a gradient"):
        clip_grad_value_hooks([], 0.1)
