"""hooklab.monitor and hooklab.activations: GradientMonitor and ActivationStats."""
from __future__ import annotations

import math
import warnings

import matplotlib
import numpy

matplotlib.use("Agg")

import pytest
import torch
from torch import nn

import hooklab
from gc_survivors import only_new_objects_collected, survivors  # noqa: F401 (a fixture)
from hooklab import no_hooks_left_behind
from hooklab.activations import ActivationStats
from hooklab.monitor import GradientMonitor


def make_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


@pytest.fixture
def batches() -> list[torch.Tensor]:
    torch.manual_seed(1)
    return [torch.randn(5, 4) for _ in range(3)]


def train(model: nn.Module, batches: list[torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """Plain SGD steps; return a copy of every parameter's .grad after each backward."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    for xb in batches:
        opt.zero_grad()
        model(xb).pow(2).mean().backward()
        seen.append({n: p.grad.clone() for n, p in model.named_parameters()})
        opt.step()
    return seen


# ---- GradientMonitor -----------------------------------------------------------------------

def test_gradient_monitor_matches_grad_norms(batches):
    model = make_mlp()
    with GradientMonitor(model) as gm:
        seen = train(model, batches)
    per_param = gm.norms(per="parameter")
    assert list(per_param) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    for name, values in per_param.items():
        assert values == pytest.approx([g[name].norm().item() for g in seen], rel=1e-6)
    per_layer = gm.norms()
    assert list(per_layer) == ["0", "2"]
    expected = [math.hypot(g["2.weight"].norm().item(), g["2.bias"].norm().item()) for g in seen]
    assert per_layer["2"] == pytest.approx(expected, rel=1e-6)
    assert gm.steps == 3


def test_gradient_monitor_layers_and_norm_type(batches):
    model = make_mlp()
    with GradientMonitor(model, "2", norm_type=float("inf")) as gm:
        seen = train(model, batches)
    assert list(gm.history) == ["2.weight", "2.bias"]
    expected = [max(g["2.weight"].abs().max().item(), g["2.bias"].abs().max().item()) for g in seen]
    assert gm.norms()["2"] == pytest.approx(expected)


def test_gradient_monitor_sees_accumulated_grad():
    model = make_mlp()
    torch.manual_seed(2)
    a, b = torch.randn(5, 4), torch.randn(5, 4)
    with GradientMonitor(model, "2") as gm:
        model(a).sum().backward()
        model(b).sum().backward()  # no zero_grad: .grad holds the sum
    assert gm.norms(per="parameter")["2.bias"][1] == pytest.approx(model[2].bias.grad.norm().item())


def test_gradient_monitor_removes_hooks_on_exit_and_after_exception(batches):
    model = make_mlp()
    with no_hooks_left_behind(model):
        with GradientMonitor(model) as gm:  # 4 parameter hooks + the model's load_state_dict post-hook
            assert len(hooklab.hook_inventory(model, include_global=False)) == 5
        gm.remove()  # after the block: does nothing
    with no_hooks_left_behind(model), pytest.raises(ZeroDivisionError):
        with GradientMonitor(model):
            model(batches[0]).sum().backward()
            1 / 0


def test_gradient_monitor_remove_keeps_history(batches):
    model = make_mlp()
    with no_hooks_left_behind(model), GradientMonitor(model) as gm:
        model(batches[0]).sum().backward()
        gm.remove()  # stop recording early: the hooks are gone already inside the block
        assert hooklab.hook_inventory(model, include_global=False) == []
        model(batches[1]).sum().backward()
    assert gm.steps == 1


def test_gradient_monitor_errors():
    model = make_mlp()
    with no_hooks_left_behind(model):  # failed constructors leave nothing behind
        with pytest.raises(hooklab.UnknownModuleError, match="0, 1, 2"):
            GradientMonitor(model, ["9"])
        with pytest.raises(ValueError, match="no parameter"):
            GradientMonitor(model, "1")  # ReLU has no parameters
        with pytest.raises(TypeError, match="nn.Module"):
            GradientMonitor([torch.ones(1)])
    with GradientMonitor(model) as gm, pytest.raises(ValueError, match="per must be"):
        gm.norms(per="module")
    with pytest.raises(ValueError, match="requires"):
        GradientMonitor(nn.Linear(2, 2).requires_grad_(False))


def test_gradient_monitor_plot(batches):
    model = make_mlp()
    with GradientMonitor(model) as gm:
        train(model, batches)
    ax = gm.plot()
    assert [line.get_label() for line in ax.get_lines()] == ["0", "2"]
    assert len(ax.get_lines()[0].get_xdata()) == 3 and ax.get_yscale() == "log"
    ax = gm.plot(per="parameter", logy=False)
    assert len(ax.get_lines()) == 4 and ax.get_yscale() == "linear"


# ---- ActivationStats -----------------------------------------------------------------------

def test_activation_stats_values(batches):
    model = make_mlp()
    with ActivationStats(model, ["0", "1"], eps=0.0) as st:
        for xb in batches:
            model(xb)
    stats = st.stats
    assert list(stats) == ["0", "1"] and len(stats["1"]["mean"]) == 3
    with torch.no_grad():
        relu_out = model[1](model[0](batches[2]))
    assert stats["1"]["mean"][2] == pytest.approx(relu_out.mean().item())
    assert stats["1"]["std"][2] == pytest.approx(relu_out.std().item())
    assert stats["1"]["near_zero"][2] == pytest.approx((relu_out == 0).float().mean().item())
    assert stats["1"]["near_zero"][2] > 0  # a ReLU zeroes something


def test_activation_stats_records_each_call():
    torch.manual_seed(0)
    relu = nn.ReLU()
    model = nn.Sequential(nn.Linear(3, 3), relu, nn.Linear(3, 3), relu)
    with ActivationStats(model, "1") as st:
        model(torch.randn(2, 3))
    assert len(st.stats["1"]["mean"]) == 2


def test_activation_stats_removes_hooks_after_exception(batches):
    model = make_mlp()
    with no_hooks_left_behind(model), pytest.raises(ZeroDivisionError):
        with ActivationStats(model, ["0", "2"]):
            model(batches[0])
            1 / 0


def test_activation_stats_errors():
    model = make_mlp()
    with no_hooks_left_behind(model):
        with pytest.raises(hooklab.UnknownModuleError, match="Names that exist"):
            ActivationStats(model, ["3"])
        with pytest.raises(ValueError, match="eps"):
            ActivationStats(model, "0", eps=-1)


def test_activation_stats_non_tensor_output():
    class Pair(nn.Module):
        def forward(self, x):
            return x, x

    model = nn.Sequential(Pair())
    with no_hooks_left_behind(model), pytest.raises(TypeError, match="needs a tensor output.*choose the tensor with output="):
        with ActivationStats(model, "0"):
            model(torch.ones(2))


def test_activation_stats_plot(batches):
    model = make_mlp()
    with ActivationStats(model, ["0", "1"]) as st:
        for xb in batches:
            model(xb)
    axes = st.plot(title="t")
    assert len(axes) == 3 and all(len(ax.get_lines()) == 2 for ax in axes)
    assert axes[2].get_title().startswith("fraction")


def test_gradient_monitor_records_true_norms_under_a_grad_scaler():
    import torch
    from torch import nn

    from hooklab import GradientMonitor

    def run(with_scaler):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1))
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
        with GradientMonitor(model, scaler=scaler if with_scaler else None) as gm:
            scaler.scale(model(torch.randn(8, 4)).square().sum()).backward()
        scaler.unscale_(torch.optim.SGD(model.parameters(), lr=0.1))
        true = {n: p.grad.norm().item() for n, p in model.named_parameters()}
        return gm.norms(per="parameter"), true

    recorded, true = run(True)
    assert all(abs(recorded[n][0] - true[n]) <= 1e-5 * max(1.0, true[n]) for n in true)
    recorded, true = run(False)
    assert all(abs(recorded[n][0] - 2.0**10 * true[n]) <= 1e-3 * 2.0**10 * true[n] for n in true)
    with pytest.raises(TypeError, match="scaler must be a torch.amp.GradScaler"):
        GradientMonitor(nn.Linear(2, 2), scaler=1024)


def test_activation_stats_of_a_single_value_has_nan_std_and_no_warning():
    head = nn.Linear(3, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ActivationStats(head, "") as st:
            head(torch.ones(1, 3))
    values = st.stats[""]
    assert math.isnan(values["std"][0]) and len(values["mean"]) == 1


def test_activation_stats_warns_about_a_name_that_never_ran():
    model = nn.Sequential(nn.Linear(2, 2), nn.ModuleList([nn.ReLU()]))
    with pytest.warns(RuntimeWarning, match=r"ActivationStats recorded no call of '1'\. Possible causes:.*ModuleList"):
        with ActivationStats(model, ["0", "1"]):
            model[0](torch.ones(1, 2))


# ---- records keyed by backward pass (S6), memory (D4, D5), swapped parameters (S11) --------

class Gate(nn.Module):
    """One module with two weights; ``b`` is left out of some steps."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2))

    def forward(self, x, use_b):
        return x * self.a + (x * self.b if use_b else 0)


def _truth_by_hand(model, steps):
    """Plain PyTorch: after each backward, ‖p.grad‖ per parameter (nan when None) and the layer's norm over the
    .grad that are set (what clip_grad_norm_ would use)."""
    per_param, per_layer = {n: [] for n, _ in model.named_parameters()}, []
    for step in steps:
        model.zero_grad(set_to_none=True)
        step()
        for n, p in model.named_parameters():
            per_param[n].append(p.grad.norm().item() if p.grad is not None else math.nan)
        per_layer.append(torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
                         .item())
    return per_param, per_layer


def test_steps_are_backward_passes_when_a_parameter_skips_one():
    m = nn.Sequential()
    m.gate = Gate()
    steps = [lambda s=s: m.gate(torch.full((2,), float(10 ** s)), use_b=s != 1).sum().backward() for s in range(3)]
    per_param, per_layer = _truth_by_hand(m, steps)
    with GradientMonitor(m) as gm:
        for step in steps:
            m.zero_grad(set_to_none=True)
            step()
    got = gm.norms(per="parameter")
    assert gm.steps == 3 and math.isnan(got["gate.b"][1]) and math.isnan(per_param["gate.b"][1])
    for name in per_param:
        assert got[name] == pytest.approx(per_param[name], nan_ok=True, rel=1e-6)
    assert gm.norms()["gate"] == pytest.approx(per_layer, rel=1e-6)  # [2, 14.14, 200], not [2, 142.1]
    rows = {line.split()[0]: line.split()[1] for line in gm.table(per="parameter").splitlines()[1:]}
    assert rows == {"gate.a": "3", "gate.b": "2"}  # steps in which each got a gradient
    ax = gm.plot(per="parameter")
    assert [len(line.get_xdata()) for line in ax.get_lines()] == [3, 3]  # aligned on the step, a gap for b


def test_a_backward_that_raises_midway_records_nothing():
    model = make_mlp()
    torch.manual_seed(3)
    xs = [torch.randn(5, 4) for _ in range(3)]

    def fail_in_the_middle(grad):
        raise ValueError("a user hook fails")

    with GradientMonitor(model) as gm:
        model(xs[0]).sum().backward()
        model.zero_grad(set_to_none=True)
        hidden = model[1](model[0](xs[1]))
        hidden.register_hook(fail_in_the_middle)  # layer 2 already has its gradient when this raises
        with pytest.raises(ValueError, match="user hook"):
            model[2](hidden).sum().backward()
        model.zero_grad(set_to_none=True)
        model(xs[2]).sum().backward()
        last = {n: p.grad.norm().item() for n, p in model.named_parameters()}
    per_param = gm.norms(per="parameter")
    assert gm.steps == 2 and all(len(v) == 2 for v in per_param.values())
    assert {n: v[1] for n, v in per_param.items()} == pytest.approx(last, rel=1e-6)


@pytest.mark.parametrize("segment", ["first", "last"])
def test_a_reentrant_checkpoint_backward_counts_with_the_one_around_it(segment):
    from torch.utils.checkpoint import checkpoint
    model = make_mlp()
    torch.manual_seed(4)
    x = torch.randn(5, 4, requires_grad=True)

    def forward():
        if segment == "first":
            return model[2](checkpoint(lambda t: model[1](model[0](t)), x, use_reentrant=True))
        return checkpoint(lambda t: model[2](model[1](t)), model[0](x), use_reentrant=True)

    with GradientMonitor(model) as gm:
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            forward().sum().backward()
    truth = {n: p.grad.norm().item() for n, p in model.named_parameters()}
    assert gm.steps == 2
    assert {n: v[-1] for n, v in gm.norms(per="parameter").items()} == pytest.approx(truth, rel=1e-6)


def test_history_is_stored_compactly():
    """D4: not one tensor object per record; 640 steps of 4 parameters hold a handful of tensors."""
    model = make_mlp()
    x = torch.randn(5, 4)
    with GradientMonitor(model) as gm:
        model(x).sum().backward()
        with survivors() as kept:  # the tensors created by the 640 steps still alive after them
            for _ in range(640):
                model(x).sum().backward()
        grown = sum(type(o) is torch.Tensor for o in kept)
        del kept
    assert gm.steps == 641 and grown <= 16, grown  # 2560 records; one tensor per record would be 2560
    assert len(gm.norms(per="parameter")["0.weight"]) == 641


@pytest.mark.usefixtures("only_new_objects_collected")  # its gc.collect() looks at what it made
def test_the_monitor_keeps_no_model_alive_after_its_block():
    import gc
    import weakref
    model = make_mlp()
    with GradientMonitor(model) as gm:
        model(torch.ones(2, 4)).sum().backward()
    expected = model[0].weight.grad.norm().item()
    ref = weakref.ref(model[0].weight)
    del model
    gc.collect()
    assert ref() is None
    assert gm.norms(per="parameter")["0.weight"] == pytest.approx([expected])


@pytest.mark.usefixtures("only_new_objects_collected")  # its gc.collect() looks at what it made
def test_activation_stats_keeps_no_model_alive_after_its_block():
    import gc
    import weakref
    model = make_mlp()
    with ActivationStats(model, ["0", "2"]) as st:
        model(torch.ones(2, 4))
    ref = weakref.ref(model[0])
    del model
    gc.collect()
    assert ref() is None and len(st.stats["0"]["mean"]) == 1


def test_load_state_dict_assign_inside_the_block_is_followed():
    model = make_mlp()
    fresh = {k: torch.randn_like(v) * 10 for k, v in model.state_dict().items()}
    x = torch.randn(5, 4)
    with no_hooks_left_behind(model), GradientMonitor(model) as gm:
        model(x).sum().backward()
        model.load_state_dict(fresh, assign=True)  # new Parameter objects
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()
    truth = {n: p.grad.norm().item() for n, p in model.named_parameters()}
    assert gm.steps == 2
    assert {n: v[1] for n, v in gm.norms(per="parameter").items()} == pytest.approx(truth, rel=1e-6)


def test_load_state_dict_assign_between_construction_and_the_block_is_followed():
    """Review round 6: a monitor made, then load_state_dict(assign=True), then entered: it recorded 0 steps, silently
    (its hooks went on the Parameter objects the model no longer held). It reads the parameters again on entering."""
    model = make_mlp()
    gm = GradientMonitor(model)
    model.load_state_dict({k: torch.randn_like(v) * 10 for k, v in model.state_dict().items()}, assign=True)
    x = torch.randn(5, 4)
    truth = []
    with no_hooks_left_behind(model), warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: every parameter watched is the model's
        with gm:
            for _ in range(2):
                model.zero_grad(set_to_none=True)
                model(x).square().sum().backward()
                truth.append({n: torch.linalg.vector_norm(p.grad).item() for n, p in model.named_parameters()})
    assert gm.steps == 2
    for i in range(2):
        assert {n: v[i] for n, v in gm.norms(per="parameter").items()} == pytest.approx(truth[i], rel=1e-6)


def test_a_parameter_replaced_by_hand_inside_the_block_gets_a_warning():
    model = make_mlp()
    with no_hooks_left_behind(model), pytest.warns(RuntimeWarning, match=r"'2.bias' were replaced by other Parameter objects.*before entering"):
        with GradientMonitor(model):
            model[2].bias = nn.Parameter(torch.zeros(3))


def test_activation_stats_history_is_stored_compactly():
    model = make_mlp()
    x = torch.randn(5, 4)
    with ActivationStats(model, ["0", "1"]) as st:
        model(x)
        with survivors() as kept:  # the tensors created by the 640 calls still alive after them
            for _ in range(640):
                model(x)
        grown = sum(type(o) is torch.Tensor for o in kept)
        del kept
    assert grown <= 2 * (640 // 64 + 2), grown  # one stacked block per 64 calls per name; 1280 records
    with torch.no_grad():
        out = model[0](x)
    assert st.stats["0"]["mean"] == pytest.approx([out.mean().item()] * 641)


def test_without_the_graph_task_id_the_monitor_says_what_torch_lacks(monkeypatch):
    """GradientMonitor keys its records by torch._C._current_graph_task_id, through hooklab's seam."""
    from hooklab import _torch_internals
    monkeypatch.setattr(_torch_internals, "_graph_task_id", None)
    model = make_mlp()
    with no_hooks_left_behind(model), pytest.raises(_torch_internals.MissingTorchInternal, match="GradientMonitor.*_current_graph_task_id"):
        with GradientMonitor(model):
            model(torch.ones(2, 4)).sum().backward()


def test_activation_stats_results_are_a_guarded_property():
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    with ActivationStats(model, "1") as st:
        model(torch.ones(4, 2))
    assert len(st.stats["1"]["mean"]) == 1
    with pytest.raises(RuntimeError, match="has recorded nothing"):
        ActivationStats(model, "1").stats


# ---- the optimizer in backward (N8), optimizer= and every= ------------------------------------------------------

def _optimizer_in_backward(model, opt_class=torch.optim.SGD, seen=None):
    """The pattern of notebook 02: each parameter's optimizer steps in its post-accumulate hook and frees .grad.
    ``seen`` (a dict) gets the norm each optimizer stepped with, read by hand: the truth."""
    optimizers = {p: opt_class([p], lr=0.1) for p in model.parameters()}

    def step(p):
        if seen is not None:
            seen.setdefault(p, []).append(p.grad.norm().item())
        optimizers[p].step()
        optimizers[p].zero_grad(set_to_none=True)
    return [p.register_post_accumulate_grad_hook(step) for p in model.parameters()]


@pytest.mark.parametrize("opt_class", [torch.optim.SGD, torch.optim.AdamW])
def test_the_optimizer_in_backward_is_recorded_when_it_steps(batches, opt_class):
    plain, truth = make_mlp(), {}
    _optimizer_in_backward(plain, opt_class, truth)
    for xb in batches:
        plain(xb).pow(2).mean().backward()
    model = make_mlp()
    handles = _optimizer_in_backward(model, opt_class)  # registered before the monitor: they run before its hook
    with GradientMonitor(model) as gm:
        for xb in batches:
            model(xb).pow(2).mean().backward()
    assert all(p.grad is None for p in model.parameters())  # the pattern freed every gradient
    assert gm.steps == len(batches)
    for (name, values), p in zip(gm.norms(per="parameter").items(), plain.parameters()):
        assert values == pytest.approx(truth[p], rel=1e-6), name
    for h in handles:
        h.remove()
    assert len(hooklab.hook_inventory(model)) == 0  # the monitor's global optimizer hook is gone too


def test_a_gradient_freed_inside_backward_by_hand_raises_saying_why(batches):
    model = make_mlp()

    def step_by_hand(p):
        with torch.no_grad():
            p.add_(p.grad, alpha=-0.1)
        p.grad = None

    handles = [p.register_post_accumulate_grad_hook(step_by_hand) for p in model.parameters()]
    with pytest.raises(RuntimeError, match=r"GradientMonitor: the gradients of '0\.weight', '0\.bias', '2\.weight', "
                                           r"'2\.bias' arrived .* freed .*Step with a torch\.optim optimizer there"):
        with GradientMonitor(model):
            model(batches[0]).sum().backward()
    for h in handles:
        h.remove()
    assert len(hooklab.hook_inventory(model)) == 0


def _accumulate(model, opt, batches, micro=2, scaler=None, overflow_at=None):
    """Optimizer steps of ``micro`` micro-batches each; ‖p.grad‖ the optimizer uses at each step (the truth),
    read after unscaling."""
    truth = []
    for step in range(len(batches) // micro):
        for xb in batches[micro * step:micro * (step + 1)]:
            loss = model(xb).pow(2).mean() * (math.inf if step == overflow_at else 1.0)
            (scaler.scale(loss) if scaler else loss).backward()
        if scaler is not None and not getattr(opt, "_step_supports_amp_scaling", False):
            scaler.unscale_(opt)
        scale = scaler.get_scale() if getattr(opt, "_step_supports_amp_scaling", False) else 1.0
        truth.append([(p.grad / scale).norm().item() for p in model.parameters()])
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
    return truth


@pytest.fixture
def six_batches() -> list[torch.Tensor]:
    torch.manual_seed(5)
    return [torch.randn(5, 4) for _ in range(6)]


def test_optimizer_records_once_per_logical_batch(six_batches):
    plain = make_mlp()
    truth = _accumulate(plain, torch.optim.SGD(plain.parameters(), lr=0.1), six_batches)
    model = make_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with GradientMonitor(model, optimizer=opt) as gm:
        # no parameter hook: only the model's load_state_dict post-hook, to follow load_state_dict(assign=True)
        assert [e.kind for e in hooklab.hook_inventory(model, include_global=False)] == ["load_state_dict_post"]
        _accumulate(model, opt, six_batches)
    assert gm.steps == 3 and gm.step_numbers == [0, 1, 2]
    got = [list(row) for row in zip(*gm.norms(per="parameter").values())]
    assert all(g == pytest.approx(t, rel=1e-6) for g, t in zip(got, truth))
    model = make_mlp()
    with GradientMonitor(model) as per_backward:  # without optimizer=, each micro-batch's backward is a step
        _accumulate(model, torch.optim.SGD(model.parameters(), lr=0.1), six_batches)
    assert per_backward.steps == 6


def test_optimizer_with_a_closure_records_the_gradients_the_closure_computed(six_batches):
    """opt.step(closure), as Lightning and LBFGS call it: the last micro-batch's backward runs inside step(), after
    the step pre-hooks, so a pre-hook sees the partial sum; the monitor reads the gradients after the step instead."""
    plain = make_mlp()
    truth = _accumulate(plain, torch.optim.SGD(plain.parameters(), lr=0.1), six_batches)
    model = make_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pre_hook_saw = []
    opt.register_step_pre_hook(lambda o, args, kwargs: pre_hook_saw.append([p.grad.norm().item()
                                                                            for p in model.parameters()]))
    with GradientMonitor(model, optimizer=opt) as gm:
        for first, last in zip(six_batches[::2], six_batches[1::2]):
            model(first).pow(2).mean().backward()

            def closure(last=last):
                loss = model(last).pow(2).mean()
                loss.backward()
                return loss

            opt.step(closure=closure) if first is six_batches[2] else opt.step(closure)  # both spellings
            opt.zero_grad(set_to_none=True)
    assert gm.step_numbers == [0, 1, 2]
    got = [list(row) for row in zip(*gm.norms(per="parameter").values())]
    assert all(g == pytest.approx(t, rel=1e-6) for g, t in zip(got, truth))
    assert not any(s == pytest.approx(t, rel=1e-6) for s, t in zip(pre_hook_saw, truth))  # the check can fail


@pytest.mark.parametrize("fused", [False, True])
def test_optimizer_under_a_grad_scaler_records_true_norms_and_what_a_skipped_step_does(six_batches, fused):
    """M2: a fused optimizer unscales inside step(), so its step pre-hook sees scaled gradients; the monitor divides
    by the scale the scaler hands it. A step the scaler skips: a fused optimizer is still called (recorded, inf / nan),
    another is not (not recorded)."""
    def run(monitored):
        model = make_mlp()
        opt = torch.optim.Adam(model.parameters(), lr=0.1, fused=fused)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
        if not monitored:
            return _accumulate(model, opt, six_batches, scaler=scaler, overflow_at=1), None
        with GradientMonitor(model, optimizer=opt) as gm:
            _accumulate(model, opt, six_batches, scaler=scaler, overflow_at=1)
        return None, gm

    truth, _ = run(False)
    _, gm = run(True)
    got = [list(row) for row in zip(*gm.norms(per="parameter").values())]
    if fused:
        assert gm.step_numbers == [0, 1, 2]
        assert all(math.isinf(v) or math.isnan(v) for v in got[1])
        got, truth = [got[0], got[2]], [truth[0], truth[2]]
    else:
        assert gm.step_numbers == [0, 1]  # the skipped step never called opt.step()
        truth = [truth[0], truth[2]]
    assert all(g == pytest.approx(t, rel=1e-5) for g, t in zip(got, truth))
    assert min(truth[0]) < 10  # the check can fail: the scaled norms are 4096 times larger


def test_every_records_one_step_in_n_and_pays_nothing_on_the_others(batches, monkeypatch):
    model = make_mlp()
    xs = batches * 3  # 9 backward passes
    truth = []
    for xb in xs:
        model.zero_grad(set_to_none=True)
        model(xb).sum().backward()
        truth.append([p.grad.norm().item() for p in model.parameters()])
    measured = []
    original = GradientMonitor._norm
    monkeypatch.setattr(GradientMonitor, "_norm", lambda self, *a: measured.append(1) or original(self, *a))
    with GradientMonitor(model, every=4) as gm:
        for xb in xs:
            model.zero_grad(set_to_none=True)
            model(xb).sum().backward()
    assert gm.steps == 3 and gm.step_numbers == [0, 4, 8]
    got = [list(row) for row in zip(*gm.norms(per="parameter").values())]
    assert all(g == pytest.approx(truth[n], rel=1e-6) for g, n in zip(got, [0, 4, 8]))
    assert len(measured) == 3 * 4  # 4 parameters in each recorded step, nothing measured in the other six
    ax = gm.plot()
    assert list(ax.get_lines()[0].get_xdata()) == [1, 5, 9] and ax.get_xlabel() == "step (backward pass)"


def test_optimizer_and_every_errors():
    model = make_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match="optimizer must be a torch.optim.Optimizer"):
        GradientMonitor(model, optimizer=[opt])
    with pytest.raises(ValueError, match="give scaler= or optimizer=, not both"):
        GradientMonitor(model, optimizer=opt, scaler=torch.amp.GradScaler("cpu"))
    for every in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="every must be an int >= 1"):
            GradientMonitor(model, every=every)


@pytest.mark.parametrize("mode", ["per backward", "optimizer="])
def test_every_hook_is_removed_also_when_the_block_raises(batches, mode):
    """Per backward the monitor adds a global optimizer step pre-hook too; with optimizer= a step pre-hook on it."""
    from hooklab._torch_internals import global_optimizer_hook_dicts, optimizer_hook_dicts

    model = make_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    options = {"optimizer": opt} if mode == "optimizer=" else {}

    def registered() -> int:
        return (len(hooklab.hook_inventory(model)) + sum(len(d) for _, _, d in optimizer_hook_dicts(opt))
                + sum(len(d) for _, _, d in global_optimizer_hook_dicts()))

    with pytest.raises(ValueError, match="inside"):
        with GradientMonitor(model, **options):
            assert registered() > 0
            model(batches[0]).sum().backward()
            opt.step()
            raise ValueError("inside the block")
    assert registered() == 0


# ---- optimizer= at its edges: load_state_dict(assign=True), parameters it does not hold, resumed runs ---------------

def _norms_before_step(model, opt, xs, *, before_step=None):
    """Plain-PyTorch truth: at each optimizer step, ‖p.grad‖ of each parameter the optimizer holds, read by hand right
    before opt.step(). ``before_step(i)`` runs before the i-th step's forward (a swap of the parameters)."""
    truth = []
    for i, xb in enumerate(xs):
        if before_step is not None:
            before_step(i)
        model(xb).pow(2).mean().backward()
        held = {id(p) for group in opt.param_groups for p in group["params"]}
        truth.append({n: p.grad.norm().item() for n, p in model.named_parameters() if id(p) in held})
        opt.step()
        opt.zero_grad(set_to_none=True)
    return truth


def _swap_in(model, opt, fresh):
    """load_state_dict(assign=True) (new Parameter objects), then the same optimizer re-pointed at them."""
    def swap(i):
        if i == 2:
            model.load_state_dict({k: v.clone() for k, v in fresh.items()}, assign=True)
            opt.param_groups[0]["params"] = list(model.parameters())
    return swap


def test_optimizer_follows_load_state_dict_assign_inside_the_block(six_batches):
    """Review of notebook 16, setup 11b: with optimizer= the monitor recorded 2 of 4 steps, nothing after the swap,
    and its end-of-block warning said load_state_dict(assign=True) is followed."""
    torch.manual_seed(9)
    fresh = {k: torch.randn_like(v) for k, v in make_mlp().state_dict().items()}
    plain = make_mlp()
    plain_opt = torch.optim.SGD(plain.parameters(), lr=0.1)
    truth = _norms_before_step(plain, plain_opt, six_batches[:4], before_step=_swap_in(plain, plain_opt, fresh))
    model = make_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with no_hooks_left_behind(model), warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: every step was recorded
        with GradientMonitor(model, optimizer=opt) as gm:
            _norms_before_step(model, opt, six_batches[:4], before_step=_swap_in(model, opt, fresh))
    assert gm.step_numbers == [0, 1, 2, 3]
    got = gm.norms(per="parameter")
    assert [{n: v[i] for n, v in got.items()} for i in range(4)] == [pytest.approx(t, rel=1e-6) for t in truth]
    assert truth[2]["2.weight"] != pytest.approx(truth[1]["2.weight"], rel=0.1)  # the swap changed the gradients


def test_optimizer_not_re_pointed_after_assign_is_said_at_the_end_of_the_block(six_batches):
    torch.manual_seed(9)
    fresh = {k: torch.randn_like(v) for k, v in make_mlp().state_dict().items()}
    model = make_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def swap_only(i):
        if i == 2:
            model.load_state_dict(fresh, assign=True)  # the optimizer still holds the old parameters

    with pytest.warns(RuntimeWarning, match=r"'0\.weight', '0\.bias', '2\.weight', '2\.bias' are in the model but "
                                            r"not in the optimizer.*Re-point the optimizer"):
        with GradientMonitor(model, optimizer=opt) as gm:
            _norms_before_step(model, opt, six_batches[:4], before_step=swap_only)
    assert gm.step_numbers == [0, 1]  # what the optimizer steps after the swap got no gradient


def test_optimizer_records_exactly_the_parameters_the_optimizer_holds(six_batches):
    """Review of notebook 16, setups 8 and 10: a parameter in no group of the optimizer (another optimizer's, or one
    left out) was recorded as if the optimizer used its gradient."""
    plain = make_mlp()
    plain_opt = torch.optim.AdamW([{"params": plain[0].parameters(), "lr": 1e-3},
                                   {"params": [plain[2].weight], "lr": 1e-2}])  # 2.bias in no group
    truth = _norms_before_step(plain, plain_opt, six_batches[:3])
    model = make_mlp()
    opt = torch.optim.AdamW([{"params": model[0].parameters(), "lr": 1e-3}, {"params": [model[2].weight], "lr": 1e-2}])
    with GradientMonitor(model, optimizer=opt) as gm:
        _norms_before_step(model, opt, six_batches[:3])
    got = gm.norms(per="parameter")
    assert sorted(got) == sorted(truth[0]) == ["0.bias", "0.weight", "2.weight"]
    assert [{n: v[i] for n, v in got.items()} for i in range(3)] == [pytest.approx(t, rel=1e-6) for t in truth]
    assert gm.norms()["2"] == pytest.approx([t["2.weight"] for t in truth], rel=1e-6)  # the layer: its weight only
    with pytest.raises(ValueError, match="optimizer= holds none of the parameters watched"):
        GradientMonitor(model, "2", optimizer=torch.optim.SGD(model[0].parameters(), lr=0.1))


@pytest.mark.parametrize("optimizer", [True, False], ids=["optimizer=", "per backward"])
def test_a_resumed_run_numbers_its_steps_as_the_uninterrupted_one(optimizer):
    """Review of notebook 16, setup 11: a run resumed from a checkpoint numbered its steps from 0 again, and with
    every=2 recorded global steps 5, 7, 9, none of which the uninterrupted run records. start_step= goes on."""
    torch.manual_seed(3)
    xs = [torch.randn(5, 4) for _ in range(10)]

    def run(model, opt, batches, **options):
        with GradientMonitor(model, every=2, **({"optimizer": opt} if optimizer else {}), **options) as gm:
            for xb in batches:
                model(xb).pow(2).mean().backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        return gm

    plain = make_mlp()  # the truth: the uninterrupted run's norms, read by hand before each step
    truth = _norms_before_step(plain, torch.optim.Adam(plain.parameters(), lr=1e-2), xs)
    model = make_mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = run(model, opt, xs[:5])
    saved = {k: v.clone() for k, v in model.state_dict().items()}, opt.state_dict()
    resumed = make_mlp()
    resumed.load_state_dict(saved[0])
    resumed_opt = torch.optim.Adam(resumed.parameters(), lr=1e-2)
    resumed_opt.load_state_dict(saved[1])
    done = int(resumed_opt.state_dict()["state"][0]["step"])  # Adam counts the steps it took
    second = run(resumed, resumed_opt, xs[5:], start_step=done)
    assert done == 5 and first.step_numbers == [0, 2, 4] and second.step_numbers == [6, 8]
    for i, step in enumerate(second.step_numbers):
        got = {n: v[i] for n, v in second.norms(per="parameter").items()}
        assert got == pytest.approx(truth[step], rel=1e-5), step
    assert list(second.plot().get_lines()[0].get_xdata()) == [7, 9]
    for bad in (-1, 1.0, True, "5", numpy.bool_(True), numpy.int64(-2), numpy.float64(3.0)):
        with pytest.raises(ValueError, match="start_step must be an int >= 0"):
            GradientMonitor(model, start_step=bad)


def test_start_step_accepts_an_integer_of_another_kind():
    """A step count read from a saved array is a numpy.int64: an integer (operator.index), taken as one."""
    model = make_mlp()
    with GradientMonitor(model, start_step=numpy.int64(3)) as gm:
        model(torch.randn(5, 4)).sum().backward()
    assert gm.step_numbers == [3] and type(gm.step_numbers[0]) is int
