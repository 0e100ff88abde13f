"""Exercises of notebook 05: right answers written differently pass, the typical wrong ones do not."""
import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hooklab
import hooklab.course
from exercise_support import judged, run_solution, verdict
from hooklab.course.exercises import nb05

# ---- 05.1 input shape of every top-level call --------------------------------------------------

def shapes_partial_and_handles(model, x):
    rows = []

    def record(name, module, args):
        rows.append([name, args[0].shape])  # a list row and a torch.Size are fine

    handles = [child.register_forward_pre_hook(functools.partial(record, name))
               for name, child in model.named_children()]
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return rows


def shapes_with_global_pre_hook(model, x):
    names = {id(child): name for name, child in model.named_children()}
    rows = []

    def record(module, args):
        if id(module) in names:
            rows.append((names[id(module)], tuple(args[0].shape)))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(record)
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return rows


def shapes_of_outputs(model, x):
    rows = []
    with hooklab.HookScope() as scope:
        for name, child in model.named_children():
            scope.add(child.register_forward_hook(
                lambda m, args, out, name=name: rows.append((name, tuple(out.shape)))))
        model(x)
    return rows


def shapes_late_binding(model, x):
    rows = []
    with hooklab.HookScope() as scope:
        for name, child in model.named_children():
            scope.add(child.register_forward_pre_hook(lambda m, args: rows.append((name, tuple(args[0].shape)))))
        model(x)
    return rows


def shapes_leaving_hooks(model, x):
    rows = []
    for name, child in model.named_children():
        child.register_forward_pre_hook(lambda m, args, name=name: rows.append((name, tuple(args[0].shape))))
    model(x)
    return rows


def shapes_by_running_children_in_turn(model, x):
    rows = []
    for name, child in model.named_children():  # what a Sequential does, not what every model does
        rows.append((name, tuple(x.shape)))
        x = child(x)
    return rows


def shapes_of_named_modules(model, x):
    rows = []
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            scope.add(module.register_forward_pre_hook(
                lambda m, args, name=name: rows.append((name, tuple(args[0].shape)))))
        model(x)
    return rows


def shapes_as_dict(model, x):
    return dict(run_solution("05.1")["input_shapes"](model, x))


@pytest.mark.parametrize("answer", [run_solution("05.1")["input_shapes"], shapes_partial_and_handles,
                                    shapes_with_global_pre_hook])
def test_05_1_accepts_right_answers(answer):
    assert verdict("05.1", answer) == "correct"


def shapes_only(model, x):
    return [shape for _, shape in run_solution("05.1")["input_shapes"](model, x)]


def shapes_as_lists_of_ints(model, x):
    rows = []
    with hooklab.HookScope() as scope:
        for name, child in model.named_children():
            scope.add(child.register_forward_pre_hook(
                lambda m, args, name=name: rows.append((name, [int(d) for d in args[0].shape]))))
        model(x)
    return rows


def shapes_without_the_batch_dimension(model, x):
    return [(name, shape[1:]) for name, shape in run_solution("05.1")["input_shapes"](model, x)]


@pytest.mark.parametrize("answer, reason", [
    (shapes_of_outputs, "output-shapes"), (shapes_late_binding, "late-binding"), (shapes_leaving_hooks, "hook-left"),
    (shapes_by_running_children_in_turn, "call-count"), (shapes_of_named_modules, "not-top-level"),
    (shapes_as_dict, "dict-not-rows"), ("input_shapes", "not-a-function"), (shapes_only, "not-rows"),
    (shapes_without_the_batch_dimension, "row"), (lambda model, x: [], "call-count"),
    (shapes_as_lists_of_ints, "shape-not-tuple")])
def test_05_1_rejects_wrong_answers(answer, reason):
    assert judged("05.1", answer) == ("wrong", reason)


def test_05_1_messages_name_the_mistake():
    from hooklab.course import exercises
    assert "pre_hook" in exercises.verdict("05.1", shapes_of_outputs)[2]
    assert "late binding" in exercises.verdict("05.1", shapes_late_binding)[2]
    assert "still registered" in exercises.verdict("05.1", shapes_leaving_hooks)[2]


def test_05_1_blank_start_is_not_solved():
    def input_shapes(model, x):
        pass
    assert verdict("05.1", input_shapes) == "not solved"
    assert verdict("05.1", None) == "not solved"


# ---- 05.2 per-layer gradient norms -------------------------------------------------------------

def norms_with_raw_hooks(model, x, y):
    squares = {}

    def record(name):
        def hook(param):
            squares[name] = squares.get(name, 0.0) + param.grad.norm().item() ** 2
        return hook

    names = [name for name, layer in model.named_children() if isinstance(layer, nn.Linear)]
    with hooklab.HookScope() as scope:
        for name in names:
            for param in model.get_submodule(name).parameters():
                scope.add(param.register_post_accumulate_grad_hook(record(name)))
        F.cross_entropy(model(x), y).backward()
    return [squares[name] ** 0.5 for name in names]  # model order, not firing order


def norms_from_tensor_hooks(model, x, y):
    found = {}
    layers = [layer for layer in model if isinstance(layer, nn.Linear)]
    with hooklab.HookScope() as scope:
        for i, layer in enumerate(layers):
            for p in (layer.weight, layer.bias):
                scope.add(p.register_hook(lambda g, i=i: found.setdefault(i, []).append(g.norm())))
        F.cross_entropy(model(x), y).backward()
    return torch.stack([torch.stack(found[i]).norm() for i in range(len(layers))])  # a 1-D tensor


def norms_without_hooks(model, x, y):
    F.cross_entropy(model(x), y).backward()
    return [torch.cat([layer.weight.grad.flatten(), layer.bias.grad]).norm().item()
            for layer in model if isinstance(layer, nn.Linear)]


def norms_in_firing_order(model, x, y):
    squares = {}
    with hooklab.HookScope() as scope:
        for name, layer in model.named_children():
            for p in layer.parameters():
                def hook(param, name=name):
                    squares[name] = squares.get(name, 0.0) + param.grad.norm().item() ** 2
                scope.add(p.register_post_accumulate_grad_hook(hook))
        F.cross_entropy(model(x), y).backward()
    return [v ** 0.5 for v in squares.values()]  # dict order = the order the hooks fired


def norms_leaving_hooks(model, x, y):
    squares = {}
    layers = [layer for layer in model if isinstance(layer, nn.Linear)]
    for i, layer in enumerate(layers):
        for p in (layer.weight, layer.bias):        # handles dropped: never removed
            p.register_post_accumulate_grad_hook(
                lambda param, i=i: squares.__setitem__(i, squares.get(i, 0.0) + param.grad.norm().item() ** 2))
    F.cross_entropy(model(x), y).backward()
    return [squares[i] ** 0.5 for i in range(len(layers))]


def norms_of_weights_only(model, x, y):
    with hooklab.GradientMonitor(model) as monitor:
        F.cross_entropy(model(x), y).backward()
    return [v[0] for name, v in monitor.norms(per="parameter").items() if name.endswith("weight")]


def norms_summed_not_combined(model, x, y):
    with hooklab.GradientMonitor(model) as monitor:
        F.cross_entropy(model(x), y).backward()
    per_param = monitor.norms(per="parameter")
    return [per_param[f"{n}.weight"][0] + per_param[f"{n}.bias"][0]
            for n, layer in model.named_children() if isinstance(layer, nn.Linear)]


def norms_per_parameter(model, x, y):
    with hooklab.GradientMonitor(model) as monitor:
        F.cross_entropy(model(x), y).backward()
    return [v[0] for v in monitor.norms(per="parameter").values()]


def norms_of_parameters_not_gradients(model, x, y):
    return [torch.cat([layer.weight.flatten(), layer.bias]).norm().item()
            for layer in model if isinstance(layer, nn.Linear)]


def norms_of_summed_output(model, x, y):
    with hooklab.GradientMonitor(model) as monitor:
        model(x).sum().backward()
    return [v[0] for v in monitor.norms().values()]


def norms_as_dict(model, x, y):
    with hooklab.GradientMonitor(model) as monitor:
        F.cross_entropy(model(x), y).backward()
    return monitor.norms()


@pytest.mark.parametrize("answer", [run_solution("05.2")["grad_norms"], norms_with_raw_hooks,
                                    norms_from_tensor_hooks, norms_without_hooks])
def test_05_2_accepts_right_answers(answer):
    assert verdict("05.2", answer) == "correct"


def norms_at_the_layer_outputs(model, x, y):
    found = []

    def on_output(module, args, out):                         # the gradient w.r.t. the layer's output, not its weights
        scope.add(out.register_hook(lambda g: found.append(g.norm().item())))

    with hooklab.HookScope() as scope:
        for layer in model:
            if isinstance(layer, nn.Linear):
                scope.add(layer.register_forward_hook(on_output))
        F.cross_entropy(model(x), y).backward()
    return found[::-1]                                        # fired from output to input


def norms_of_the_values_in_grad_hooks(model, x, y):
    squares = {}
    layers = [layer for layer in model if isinstance(layer, nn.Linear)]
    with hooklab.HookScope() as scope:
        for i, layer in enumerate(layers):
            for p in layer.parameters():
                scope.add(p.register_post_accumulate_grad_hook(   # `param` is the weight, not its gradient
                    lambda param, i=i: squares.__setitem__(i, squares.get(i, 0.0) + param.norm().item() ** 2)))
        F.cross_entropy(model(x), y).backward()
    return [squares[i] ** 0.5 for i in range(len(layers))]


def norms_with_names(model, x, y):
    with hooklab.GradientMonitor(model) as monitor:
        F.cross_entropy(model(x), y).backward()
    return [(name, v[0]) for name, v in monitor.norms().items()]


def norms_all_nan(model, x, y):
    return [float("nan")] * sum(isinstance(layer, nn.Linear) for layer in model)


@pytest.mark.parametrize("answer, reason", [
    (norms_all_nan, "norm-values"), (norms_in_firing_order, "reversed"), (norms_leaving_hooks, "hook-left"), (norms_of_weights_only, "norm-values"),
    (norms_summed_not_combined, "norm-values"), (norms_per_parameter, "layer-count"),
    (norms_of_parameters_not_gradients, "weight-norm"), (norms_of_the_values_in_grad_hooks, "weight-norm"),
    (norms_at_the_layer_outputs, "grad-output-norm"), (norms_of_summed_output, "norm-values"),
    (norms_as_dict, "dict-not-list"), (norms_with_names, "not-floats")])
def test_05_2_rejects_wrong_answers(answer, reason):
    assert judged("05.2", answer) == ("wrong", reason)


def test_05_2_reversed_order_is_named():
    from hooklab.course import exercises
    assert "reversed" in exercises.verdict("05.2", norms_in_firing_order)[2]


def test_05_2_checks_doubled_weights_and_clipping_hooks_and_removes_them():
    """The checker's cases include exploding (2x Kaiming) networks and one with clip hooks it removes."""
    seen = {}

    def spy(model, x, y):  # keeps the first and the last count only: a list of them all would grow (the harness)
        seen.setdefault("first", len(hooklab.hook_inventory(model, include_global=False)))
        seen["last"] = len(hooklab.hook_inventory(model, include_global=False))
        return run_solution("05.2")["grad_norms"](model, x, y)

    assert verdict("05.2", spy) == "correct"
    assert seen["last"] > 0 and seen["first"] == 0
    doubled, standard = nb05._deep_relu(32, 6, 12, 7, 2.0), nb05._deep_relu(32, 6, 12, 7, 1.0)
    assert torch.allclose(doubled[0].weight.detach(), 2 * standard[0].weight.detach())


def test_05_2_blank_start_is_not_solved():
    def grad_norms(model, x, y):
        pass
    assert verdict("05.2", grad_norms) == "not solved"
    assert verdict("05.2", None) == "not solved"


# ---- 05.3 Grad-CAM for any class ---------------------------------------------------------------

def cam_with_raw_hooks(model, layer, x, target):
    kept = {}

    def forward_hook(module, args, out):
        kept["activation"] = out.detach()
        scope.add(out.register_hook(lambda g: kept.update(gradient=g)))

    with hooklab.HookScope() as scope:
        scope.add(model.get_submodule(layer).register_forward_hook(forward_hook))
        scores = model(x)
        scores[torch.arange(len(x)), target].sum().backward()
    alpha = kept["gradient"].mean(dim=(2, 3))
    return F.relu(torch.einsum("nc,nchw->nhw", alpha, kept["activation"]))


def cam_with_autograd_grad(model, layer, x, target):
    with hooklab.capture(model, layer, detach=False) as store:
        scores = model(x)
    activation = store[layer]
    score = sum(scores[i, int(t)] for i, t in enumerate(target))
    gradient, = torch.autograd.grad(score, activation)
    cam = (gradient.mean(dim=(2, 3), keepdim=True) * activation).sum(dim=1, keepdim=True)
    return cam.clamp(min=0).detach()  # (N, 1, h, w) is accepted too


def cam_of_predicted_class(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        scores = model(x)
        scores.max(dim=1).values.sum().backward()  # ignores target
    weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)
    return F.relu((weights * store[layer]).sum(dim=1))


def cam_with_column_indexing(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        scores = model(x)
        scores[:, target].sum().backward()  # an N x N block: every image's score for every target
    weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)
    return F.relu((weights * store[layer]).sum(dim=1))


def cam_without_relu(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        model(x).gather(1, target[:, None]).sum().backward()
    weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)
    return (weights * store[layer]).sum(dim=1)


def cam_without_spatial_mean(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        model(x).gather(1, target[:, None]).sum().backward()
    return F.relu((store.grads[layer] * store[layer]).sum(dim=1))


def cam_leaving_hooks(model, layer, x, target):
    kept = {}

    def forward_hook(module, args, out):
        kept["activation"] = out
        out.register_hook(lambda g: kept.update(gradient=g))

    model.get_submodule(layer).register_forward_hook(forward_hook)  # handle dropped: never removed
    model(x).gather(1, target[:, None]).sum().backward()
    weights = kept["gradient"].mean(dim=(2, 3), keepdim=True)
    return F.relu((weights * kept["activation"].detach()).sum(dim=1))


def cam_upsampled(model, layer, x, target):
    cam = run_solution("05.3")["grad_cam"](model, layer, x, target)
    return F.interpolate(cam[:, None], size=x.shape[-2:], mode="bilinear", align_corners=False)[:, 0]


def cam_of_probabilities(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        model(x).softmax(dim=1).gather(1, target[:, None]).sum().backward()
    weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)
    return F.relu((weights * store[layer]).sum(dim=1))


@pytest.mark.parametrize("answer", [run_solution("05.3")["grad_cam"], cam_with_raw_hooks, cam_with_autograd_grad])
def test_05_3_accepts_right_answers(answer):
    assert verdict("05.3", answer) == "correct"


def cam_as_a_list(model, layer, x, target):
    return run_solution("05.3")["grad_cam"](model, layer, x, target).tolist()


def cam_hooked_once_backward_is_done(model, layer, x, target):
    with hooklab.capture(model, layer, detach=False) as store:
        model(x).gather(1, target[:, None]).sum().backward()
    activation, grads = store[layer], []
    activation.register_hook(grads.append)        # too late: the backward pass has gone through it already
    weights = grads[0].mean(dim=(2, 3), keepdim=True)
    return F.relu((weights * activation.detach()).sum(dim=1))


def cam_per_channel(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        model(x).gather(1, target[:, None]).sum().backward()
    weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)
    return F.relu(weights * store[layer])                   # the channels never summed: N x C x h x w


@pytest.mark.parametrize("answer, reason", [
    (cam_of_predicted_class, "predicted-class"), (cam_with_column_indexing, "cam-values"), (cam_without_relu, "no-relu"),
    (cam_without_spatial_mean, "cam-values"), (cam_leaving_hooks, "hook-left"), (cam_upsampled, "upsampled"),
    (cam_of_probabilities, "cam-values"), (cam_as_a_list, "not-a-tensor"), (cam_per_channel, "cam-shape"),
    (cam_hooked_once_backward_is_done, "hook-after-backward")])
def test_05_3_rejects_wrong_answers(answer, reason):
    assert judged("05.3", answer) == ("wrong", reason)


def test_05_3_messages_name_the_mistake():
    from hooklab.course import exercises
    assert "*predicted*" in exercises.verdict("05.3", cam_of_predicted_class)[2]
    assert "ReLU" in exercises.verdict("05.3", cam_without_relu)[2]
    assert "upsampled" in exercises.verdict("05.3", cam_upsampled)[2]


def test_05_3_true_cam_matches_capture_on_a_trained_like_model():
    """The checker's hook-free truth agrees with section 6's capture-based recipe."""
    model = nb05._small_cnn(7, 3, 4, 2)
    torch.manual_seed(0)
    x = torch.randn(3, 1, 8, 8)
    target = torch.tensor([0, 1, 1])
    with hooklab.capture(model, "4", grads=True) as store:
        model(x).gather(1, target[:, None]).sum().backward()
    recipe = F.relu((store.grads["4"].mean(dim=(2, 3), keepdim=True) * store["4"]).sum(dim=1))
    assert torch.allclose(nb05._true_cam(model, 4, x, target), recipe, atol=1e-6)


def test_05_3_blank_start_is_not_solved():
    def grad_cam(model, layer, x, target):
        pass
    assert verdict("05.3", grad_cam) == "not solved"
    assert verdict("05.3", None) == "not solved"
