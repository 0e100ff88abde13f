"""Notebook 11's exercise checkers accept right answers written differently and reject the typical wrong ones."""
import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

import hooklab
import hooklab.course
from exercise_support import judged, run_solution, verdict


@pytest.fixture(autouse=True)
def no_global_hooks_leak():
    before = len(hooklab.hook_inventory(None))
    yield
    assert len(hooklab.hook_inventory(None)) == before


# ---- 11.1 per-sample gradient norms -----------------------------------------------------------

def norms_by_autograd_grad_loop(model, x, y):
    params = list(model.parameters())
    out = []
    for xi, yi in zip(x, y):
        grads = torch.autograd.grad(F.mse_loss(model(xi), yi), params)
        out.append(torch.sqrt(sum((g ** 2).sum() for g in grads)))
    return torch.stack(out)


def norms_with_jacrev_style_dict(model, x, y):
    params = dict(model.named_parameters())

    def loss(p, xi, yi):
        return F.mse_loss(functional_call(model, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))
    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    return torch.linalg.vector_norm(torch.cat([g.flatten(1) for g in grads.values()], 1), dim=1)


def norms_of_batch_gradient(model, x, y):
    params = list(model.parameters())
    grads = torch.autograd.grad(F.mse_loss(model(x), y), params)
    return torch.cat([g.flatten() for g in grads]).norm().repeat(len(x))


def norms_weights_only(model, x, y):
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xi, yi):
        return F.mse_loss(functional_call(model, p, (xi,)), yi)
    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    return torch.cat([g.flatten(1) for k, g in grads.items() if k.endswith("weight")], 1).norm(dim=1)


def norms_with_sum_loss(model, x, y):
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xi, yi):
        return F.mse_loss(functional_call(model, p, (xi,)), yi, reduction="sum")
    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    return torch.cat([g.flatten(1) for g in grads.values()], 1).norm(dim=1)


def norms_by_backward_loop(model, x, y):  # right numbers, but writes .grad
    out = []
    for xi, yi in zip(x, y):
        model.zero_grad()
        F.mse_loss(model(xi), yi).backward()
        out.append(torch.cat([p.grad.flatten() for p in model.parameters()]).norm())
    return torch.stack(out)


def norms_added_per_parameter(model, x, y):
    out = []
    for xi, yi in zip(x, y):
        grads = torch.autograd.grad(F.mse_loss(model(xi), yi), list(model.parameters()))
        out.append(torch.stack([torch.linalg.vector_norm(g) for g in grads]).sum())
    return torch.stack(out)


def norms_against_every_target(model, x, y):
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xi, targets):
        return F.mse_loss(functional_call(model, p, (xi,)).expand_as(targets), targets)
    grads = vmap(grad(loss), in_dims=(None, 0, None))(params, x, y)
    return torch.cat([g.flatten(1) for g in grads.values()], 1).norm(dim=1)


def norms_as_dict(model, x, y):
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xi, yi):
        return F.mse_loss(functional_call(model, p, (xi,)), yi)
    return {k: g.flatten(1).norm(dim=1) for k, g in vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y).items()}


def norms_as_column(model, x, y):
    return norms_by_autograd_grad_loop(model, x, y).unsqueeze(1)


def norms_leaving_a_hook(model, x, y):
    model.register_forward_hook(lambda m, a, o: None)
    return norms_by_autograd_grad_loop(model, x, y)


@pytest.mark.parametrize("answer", [run_solution("11.1")["per_sample_grad_norms"], norms_by_autograd_grad_loop,
                                    norms_with_jacrev_style_dict])
def test_11_1_accepts_right_answers(answer):
    assert verdict("11.1", answer) == "correct"


@pytest.mark.parametrize("answer, reason", [
    (norms_of_batch_gradient, "batch-gradient"), (norms_weights_only, "norms"), (norms_with_sum_loss, "scaled-loss"),
    (norms_by_backward_loop, "wrote-grad"), (norms_as_dict, "dict-per-parameter"), (norms_as_column, "shape"),
    (norms_leaving_a_hook, "hook-left"), ("norms", "not-a-function"), (norms_added_per_parameter, "summed-norms"),
    (norms_against_every_target, "unbatched-targets")])
def test_11_1_rejects_wrong_answers(answer, reason):
    assert judged("11.1", answer) == ("wrong", reason)


def test_11_1_says_why():
    assert "batch loss" in hooklab.course.exercises.verdict("11.1", norms_of_batch_gradient)[2]
    assert "`.grad`" in hooklab.course.exercises.verdict("11.1", norms_by_backward_loop)[2]
    assert "times the right ones" in hooklab.course.exercises.verdict("11.1", norms_with_sum_loss)[2]


def test_11_1_blank_start_is_not_solved():
    def per_sample_grad_norms(model, x, y):
        pass
    assert judged("11.1", per_sample_grad_norms) == ("not solved", "blank")
    assert verdict("11.1", None) == "not solved"


# ---- 11.2 a Grad-CAM that works anywhere ------------------------------------------------------

def _cam(model, layer, x, target, *, relu=True, mean=True):
    store = {}

    def keep(module, args, output):
        store["act"] = output
        output.register_hook(lambda g: store.__setitem__("grad", g))
    with hooklab.HookScope() as scope:
        scope.add(layer.register_forward_hook(keep))
        model(x)[:, target].sum().backward()
    weights = store["grad"].mean(dim=(2, 3), keepdim=True) if mean else store["grad"].sum(dim=(2, 3), keepdim=True)
    cam = (weights * store["act"]).sum(1)
    return (cam.relu() if relu else cam).detach()


def cam_with_autograd_grad(model, layer, x, target):
    with torch.inference_mode(False), torch.enable_grad():
        x = x.clone()
        acts = {}
        with hooklab.HookScope() as scope:
            scope.add(layer.register_forward_hook(lambda m, a, o: acts.__setitem__("a", o)))
            out = model(x)
        g, = torch.autograd.grad(out[:, target].sum(), acts["a"])
        return (g.mean((2, 3), keepdim=True) * acts["a"]).sum(1).clamp(min=0).detach()


def cam_enable_grad_only(model, layer, x, target):  # the notebook's grad_cam: fails in inference_mode
    with torch.enable_grad():
        return _cam(model, layer, x, target)


def cam_inference_mode_false_no_clone(model, layer, x, target):
    with torch.inference_mode(False), torch.enable_grad():
        return _cam(model, layer, x, target)


def cam_no_relu(model, layer, x, target):
    with torch.inference_mode(False), torch.enable_grad():
        return _cam(model, layer, x.clone(), target, relu=False)


def cam_summed_weights(model, layer, x, target):
    with torch.inference_mode(False), torch.enable_grad():
        return _cam(model, layer, x.clone(), target, mean=False)


def cam_not_detached(model, layer, x, target):
    with torch.inference_mode(False), torch.enable_grad():
        x = x.clone()
        store = {}
        with hooklab.HookScope() as scope:
            scope.add(layer.register_forward_hook(lambda m, a, o: store.__setitem__("a", o)))
            out = model(x)
        g, = torch.autograd.grad(out[:, target].sum(), store["a"], create_graph=True)
        return (g.mean((2, 3), keepdim=True) * store["a"]).sum(1).relu()


def cam_leaving_hooks(model, layer, x, target):
    store = {}

    def keep(module, args, output):
        store["act"] = output
        output.register_hook(lambda g: store.__setitem__("grad", g))
    with torch.inference_mode(False), torch.enable_grad():
        layer.register_forward_hook(keep)  # handle thrown away
        model(x.clone())[:, target].sum().backward()
    return (store["grad"].mean((2, 3), keepdim=True) * store["act"]).sum(1).relu().detach()


@pytest.mark.parametrize("answer", [run_solution("11.2")["robust_grad_cam"], cam_with_autograd_grad])
def test_11_2_accepts_right_answers(answer):
    assert verdict("11.2", answer) == "correct"


def cam_forgets_return(model, layer, x, target):
    cam_with_autograd_grad(model, layer, x, target)


def cam_of_whole_batch(model, layer, x, target):
    return cam_with_autograd_grad(model, layer, x, target).sum(0)


def cam_fails_normally(model, layer, x, target):
    return cam_with_autograd_grad(model, layer, x, target + 10)


@pytest.mark.parametrize("answer, reason", [
    (cam_enable_grad_only, "inference-mode"), (cam_inference_mode_false_no_clone, "inference-input"),
    (cam_no_relu, "no-relu"), (cam_summed_weights, "cam"), (cam_not_detached, "attached"),
    (cam_leaving_hooks, "hook-left"), (cam_forgets_return, "returned-none"), (cam_of_whole_batch, "shape"),
    (cam_fails_normally, "raised"), (42, "not-a-function")])
def test_11_2_rejects_wrong_answers(answer, reason):
    assert judged("11.2", answer) == ("wrong", reason)


def test_11_2_says_why():
    assert "inference_mode(False)" in hooklab.course.exercises.verdict("11.2", cam_enable_grad_only)[2]
    assert "clone()" in hooklab.course.exercises.verdict("11.2", cam_inference_mode_false_no_clone)[2]
    assert "relu" in hooklab.course.exercises.verdict("11.2", cam_no_relu)[2]


def test_11_2_blank_start_is_not_solved():
    def robust_grad_cam(model, layer, x, target):
        pass
    assert judged("11.2", robust_grad_cam) == ("not solved", "blank")
    assert verdict("11.2", None) == "not solved"


# ---- 11.3 a monitoring hook that stays compiled -----------------------------------------------

def monitor_with_attribute_style(store):
    def hook(module, args, output):
        store.update(last=output.detach())
        store["calls"] += 1  # in place on the 0-d tensor
    return hook


def monitor_appending(store):
    store["history"] = []

    def hook(module, args, output):
        store["history"].append(output.detach())
        store["last"] = output.detach()
        store["calls"].add_(1)
    return hook


def monitor_printing(store):
    def hook(module, args, output):
        print("seen", tuple(output.shape))
        store["last"] = output.detach()
        store["calls"].add_(1)
    return hook


def monitor_item(store):
    def hook(module, args, output):
        store["last"] = output.detach()
        store["calls"].add_(1)
        store["max"] = output.abs().max().item()
    return hook


def monitor_python_int(store):
    store["calls"] = 0

    def hook(module, args, output):
        store["last"] = output.detach()
        store["calls"] += 1
    return hook


def monitor_not_detached(store):
    def hook(module, args, output):
        store["last"] = output
        store["calls"].add_(1)
    return hook


def monitor_returning_output(store):
    def hook(module, args, output):
        store["last"] = output.detach()
        store["calls"].add_(1)
        return output * 1.5
    return hook


def monitor_returning_detached(store):
    def hook(module, args, output):
        kept = output.detach()
        store["last"] = kept
        store["calls"].add_(1)
        return kept
    return hook


def monitor_not_counting(store):
    def hook(module, args, output):
        store["last"] = output.detach()
    return hook


@pytest.mark.parametrize("answer", [run_solution("11.3")["make_monitor"], monitor_with_attribute_style])
def test_11_3_accepts_right_answers(answer):
    assert verdict("11.3", answer) == "correct"


def monitor_input(store):
    def hook(module, args, output):
        store["last"] = args[0].detach()
        store["calls"].add_(1)
    return hook


def monitor_missing_key(store):
    def hook(module, args, output):
        store["last"] = output.detach()
        store["count"].add_(1)
    return hook


@pytest.mark.parametrize("answer, reason", [
    (monitor_appending, "recompiles"), (monitor_printing, "graph-break"), (monitor_item, "graph-break"),
    (monitor_python_int, "recompiles"), (monitor_not_detached, "attached"), (monitor_returning_output, "changes-output"),
    (monitor_returning_detached, "cuts-graph"),
    (monitor_not_counting, "calls-count"), (monitor_input, "last-output"), (monitor_missing_key, "raised-compiled"),
    (lambda store: 3, "not-a-hook")])
def test_11_3_rejects_wrong_answers(answer, reason):
    assert judged("11.3", answer) == ("wrong", reason)


def test_11_3_says_why():
    assert "compiled 6 times" in hooklab.course.exercises.verdict("11.3", monitor_appending)[2]
    assert "graph break" in hooklab.course.exercises.verdict("11.3", monitor_printing)[2]
    assert "graph break" in hooklab.course.exercises.verdict("11.3", monitor_item)[2]


def test_11_3_blank_start_is_not_solved():
    def make_monitor(store):
        pass
    assert judged("11.3", make_monitor) == ("not solved", "blank")
    assert verdict("11.3", None) == "not solved"
