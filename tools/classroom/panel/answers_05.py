"""Honest answers to notebook 05's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

import hooklab
from tools.classroom.panel import answer

# --- 05.1: the shape of the first input of every call of a top-level child ------------------------------------------


@answer("05.1", right=True)
def input_shapes_with_a_default_argument(model, x):
    rows = []
    with hooklab.HookScope() as scope:
        for name, child in model.named_children():
            def record(module, args, name=name):
                rows.append((name, tuple(args[0].shape)))
            scope.add(child.register_forward_pre_hook(record))
        with torch.no_grad():
            model(x)
    return rows


def _record_shape(rows, name, module, args):
    rows.append((name, tuple(int(n) for n in args[0].shape)))


@answer("05.1", right=True)
def input_shapes_with_partial_and_handles(model, x):
    rows = []
    handles = [child.register_forward_pre_hook(functools.partial(_record_shape, rows, name))
               for name, child in model.named_children()]
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return rows


@answer("05.1", mistake="other", says="the hook reads the loop variable name when it runs (late binding), so every "
        "row carries the last child's name")
def input_shapes_with_late_binding(model, x):
    rows = []
    with hooklab.HookScope() as scope:
        for name, child in model.named_children():
            scope.add(child.register_forward_pre_hook(
                lambda module, args: rows.append((name, tuple(args[0].shape)))))  # noqa: B023 - the learner's bug
        model(x)
    return rows


@answer("05.1", mistake="wrong-target", says="hooks every module of named_modules() (the model itself and nested "
        "submodules) instead of the top-level children only")
def input_shapes_of_every_module(model, x):
    rows = []
    with hooklab.HookScope() as scope:
        for name, module in model.named_modules():
            scope.add(module.register_forward_pre_hook(
                lambda m, args, name=name: rows.append((name, tuple(args[0].shape)))))
        model(x)
    return rows


@answer("05.1", mistake="count", says="collects the shapes in a dict keyed by name, so a child called twice gives "
        "one row (the last call's) instead of two")
def input_shapes_in_a_dict(model, x):
    shapes = {}
    with hooklab.HookScope() as scope:
        for name, child in model.named_children():
            scope.add(child.register_forward_pre_hook(
                lambda m, args, name=name: shapes.__setitem__(name, tuple(args[0].shape))))
        model(x)
    return list(shapes.items())


@answer("05.1", mistake="handle-left", says="registers the pre-hooks and never removes them")
def input_shapes_leaving_the_hooks(model, x):
    rows = []
    for name, child in model.named_children():
        child.register_forward_pre_hook(lambda m, args, name=name: rows.append((name, tuple(args[0].shape))))
    model(x)
    return rows


@answer("05.1", mistake="logic", says="sorts the rows into the children's registration order instead of keeping the "
        "order the calls happen in")
def input_shapes_in_registration_order(model, x):
    rows = []
    order = {name: i for i, (name, _) in enumerate(model.named_children())}
    with hooklab.HookScope() as scope:
        for name, child in model.named_children():
            scope.add(child.register_forward_pre_hook(
                lambda m, args, name=name: rows.append((name, tuple(args[0].shape)))))
        model(x)
    return sorted(rows, key=lambda row: order[row[0]])


@answer("05.1", mistake="shape-or-dtype", says="records each shape as a list instead of a tuple of ints")
def input_shapes_as_lists(model, x):
    rows = []
    with hooklab.HookScope() as scope:
        for name, child in model.named_children():
            scope.add(child.register_forward_pre_hook(
                lambda m, args, name=name: rows.append((name, list(args[0].shape)))))
        model(x)
    return rows


# --- 05.2: the gradient norm of every Linear, weight and bias combined ----------------------------------------------


@answer("05.2", right=True)
def grad_norms_with_post_accumulate_hooks(model, x, y):
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    squares = {}

    def record(param, layer):
        squares[layer] = squares.get(layer, 0.0) + param.grad.pow(2).sum().item()

    with hooklab.HookScope() as scope:
        for i, layer in enumerate(linears):
            for p in layer.parameters():
                scope.add(p.register_post_accumulate_grad_hook(functools.partial(record, layer=i)))
        F.cross_entropy(model(x), y).backward()
    return [math.sqrt(squares[i]) for i in range(len(linears))]


@answer("05.2", right=True)
def grad_norms_with_the_gradient_monitor(model, x, y):
    names = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    with hooklab.GradientMonitor(model, names) as monitor:
        F.cross_entropy(model(x), y).backward()
    per_layer = monitor.norms()
    return [per_layer[name][-1] for name in names]


@answer("05.2", right=True)
def grad_norms_with_tensor_hooks_on_the_parameters(model, x, y):
    grads = {}
    with hooklab.HookScope() as scope:
        for name, p in model.named_parameters():
            def keep(grad, name=name):
                grads[name] = grad.detach().clone()
            scope.add(p.register_hook(keep))
        F.cross_entropy(model(x), y).backward()
    norms = []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            parts = [grads[f"{name}.weight"]] + ([grads[f"{name}.bias"]] if m.bias is not None else [])
            norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in parts]))))
    return norms


@answer("05.2", mistake="logic", says="takes the norm of the weight's gradient only and leaves the bias out")
def grad_norms_of_the_weights_only(model, x, y):
    norms = {}
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    with hooklab.HookScope() as scope:
        for i, layer in enumerate(linears):
            scope.add(layer.weight.register_post_accumulate_grad_hook(
                lambda p, i=i: norms.__setitem__(i, p.grad.norm().item())))
        F.cross_entropy(model(x), y).backward()
    return [norms[i] for i in range(len(linears))]


@answer("05.2", mistake="logic", says="adds the weight's and the bias's norms (|dW| + |db|) instead of combining "
        "them as sqrt(|dW|^2 + |db|^2)")
def grad_norms_adding_the_two_norms(model, x, y):
    norms = {}
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    with hooklab.HookScope() as scope:
        for i, layer in enumerate(linears):
            for p in layer.parameters():
                scope.add(p.register_post_accumulate_grad_hook(
                    lambda p, i=i: norms.__setitem__(i, norms.get(i, 0.0) + p.grad.norm().item())))
        F.cross_entropy(model(x), y).backward()
    return [norms[i] for i in range(len(linears))]


@answer("05.2", mistake="wrong-target", says="uses full backward hooks on the Linear layers and takes the norm of "
        "grad_output, the gradient at the layer's output, not of its parameters")
def grad_norms_from_full_backward_hooks(model, x, y):
    norms = {}
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    with hooklab.HookScope() as scope:
        for i, layer in enumerate(linears):
            scope.add(layer.register_full_backward_hook(
                lambda m, gi, go, i=i: norms.__setitem__(i, go[0].norm().item())))
        F.cross_entropy(model(x), y).backward()
    return [norms[i] for i in range(len(linears))]


@answer("05.2", mistake="wrong-target", says="in the post-accumulate hook takes the norm of the parameter it receives "
        "(the weights) instead of its .grad")
def grad_norms_of_the_parameters_themselves(model, x, y):
    squares = {}
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    with hooklab.HookScope() as scope:
        for i, layer in enumerate(linears):
            for p in layer.parameters():
                scope.add(p.register_post_accumulate_grad_hook(
                    lambda p, i=i: squares.__setitem__(i, squares.get(i, 0.0) + p.detach().pow(2).sum().item())))
        F.cross_entropy(model(x), y).backward()
    return [math.sqrt(squares[i]) for i in range(len(linears))]


@answer("05.2", mistake="logic", says="returns the norms in the order the hooks fired (output to input) instead of "
        "from input to output")
def grad_norms_in_firing_order(model, x, y):
    rows = []
    with hooklab.HookScope() as scope:
        for m in model.modules():
            if isinstance(m, nn.Linear):
                def record(p, layer=m):
                    if p is layer.weight:  # the bias's hook fires first: by the weight's, both are in
                        parts = [layer.weight.grad] + ([layer.bias.grad] if layer.bias is not None else [])
                        rows.append(math.sqrt(sum(g.pow(2).sum().item() for g in parts)))
                scope.add(m.weight.register_post_accumulate_grad_hook(record))
        F.cross_entropy(model(x), y).backward()
    return rows


@answer("05.2", mistake="handle-left", says="never removes the post-accumulate hooks it registers on the parameters")
def grad_norms_leaving_the_hooks(model, x, y):
    squares = {}
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linears):
        for p in layer.parameters():
            p.register_post_accumulate_grad_hook(
                lambda p, i=i: squares.__setitem__(i, squares.get(i, 0.0) + p.grad.pow(2).sum().item()))
    F.cross_entropy(model(x), y).backward()
    return [math.sqrt(squares[i]) for i in range(len(linears))]


# --- 05.3: Grad-CAM for a given target class per image ---------------------------------------------------------------


@answer("05.3", right=True)
def grad_cam_with_capture(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        scores = model(x)
        scores.gather(1, target[:, None]).sum().backward()
    model.zero_grad(set_to_none=True)
    activation, gradient = store[layer], store.grads[layer]
    weights = gradient.mean(dim=(2, 3), keepdim=True)
    return F.relu((weights * activation).sum(dim=1))


@answer("05.3", right=True)
def grad_cam_with_a_forward_hook_and_autograd_grad(model, layer, x, target):
    kept = {}
    module = model.get_submodule(layer)
    with hooklab.HookScope() as scope:
        scope.add(module.register_forward_hook(lambda m, args, output: kept.__setitem__("a", output)))
        scores = model(x)
    picked = scores[torch.arange(len(x)), target].sum()
    (gradient,) = torch.autograd.grad(picked, kept["a"])
    activation = kept["a"].detach()
    alpha = gradient.mean(dim=(-2, -1), keepdim=True)
    return torch.clamp((alpha * activation).sum(dim=1), min=0)


@answer("05.3", right=True)
def grad_cam_with_a_tensor_hook_from_a_forward_hook(model, layer, x, target):
    store = {}

    def on_forward(module, args, output):
        store["activation"] = output.detach()
        output.register_hook(lambda grad: store.__setitem__("gradient", grad.detach()))

    module = dict(model.named_modules())[layer]
    with hooklab.HookScope() as scope:
        scope.add(module.register_forward_hook(on_forward))
        scores = model(x)
        one_hot = F.one_hot(target, scores.shape[1]).to(scores.dtype)
        (scores * one_hot).sum().backward()
    model.zero_grad(set_to_none=True)
    weights = store["gradient"].mean(dim=(2, 3), keepdim=True)
    return F.relu((weights * store["activation"]).sum(dim=1))


@answer("05.3", mistake="wrong-target", says="backpropagates each image's predicted class (argmax) and ignores "
        "target")
def grad_cam_of_the_predicted_class(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        scores = model(x)
        predicted = scores.argmax(1)
        scores.gather(1, predicted[:, None]).sum().backward()
    model.zero_grad(set_to_none=True)
    weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)
    return F.relu((weights * store[layer]).sum(dim=1))


@answer("05.3", mistake="logic", says="indexes scores[:, target], which picks every image's score for every target "
        "in the batch, so each map mixes the other images' classes")
def grad_cam_with_column_indexing(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        scores = model(x)
        scores[:, target].sum().backward()
    model.zero_grad(set_to_none=True)
    weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)
    return F.relu((weights * store[layer]).sum(dim=1))


@answer("05.3", mistake="logic", says="averages the gradient over the channels (dim 1) instead of over the spatial "
        "dimensions to get one weight per channel")
def grad_cam_averaging_over_channels(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        scores = model(x)
        scores.gather(1, target[:, None]).sum().backward()
    model.zero_grad(set_to_none=True)
    weights = store.grads[layer].mean(dim=1, keepdim=True)
    return F.relu((weights * store[layer]).sum(dim=1))


@answer("05.3", mistake="logic", says="leaves out the final ReLU, so the maps keep their negative values")
def grad_cam_without_the_relu(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        scores = model(x)
        scores.gather(1, target[:, None]).sum().backward()
    model.zero_grad(set_to_none=True)
    weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)
    return (weights * store[layer]).sum(dim=1)


@answer("05.3", mistake="shape-or-dtype", says="upsamples the maps to the input's size, where the layer's "
        "resolution (N x h x w) is asked for")
def grad_cam_upsampled(model, layer, x, target):
    with hooklab.capture(model, layer, grads=True) as store:
        scores = model(x)
        scores.gather(1, target[:, None]).sum().backward()
    model.zero_grad(set_to_none=True)
    weights = store.grads[layer].mean(dim=(2, 3), keepdim=True)
    cam = F.relu((weights * store[layer]).sum(dim=1, keepdim=True))
    return F.interpolate(cam, size=x.shape[-2:], mode="bilinear", align_corners=False)[:, 0]


@answer("05.3", mistake="late-registration", says="registers the tensor hook on the kept activation after "
        "backward has run, so it never fires and no gradient is recorded")
def grad_cam_hooking_the_activation_after_backward(model, layer, x, target):
    kept = {}
    module = model.get_submodule(layer)
    with hooklab.HookScope() as scope:
        scope.add(module.register_forward_hook(lambda m, args, output: kept.__setitem__("a", output)))
        scores = model(x)
        scores.gather(1, target[:, None]).sum().backward()
        scope.add(kept["a"].register_hook(lambda grad: kept.__setitem__("g", grad)))
    model.zero_grad(set_to_none=True)
    weights = kept["g"].mean(dim=(2, 3), keepdim=True)
    return F.relu((weights * kept["a"].detach()).sum(dim=1))


@answer("05.3", mistake="handle-left", says="registers the forward hook without keeping its handle, so it is never "
        "removed")
def grad_cam_leaving_the_forward_hook(model, layer, x, target):
    kept = {}

    def on_forward(module, args, output):
        kept["a"] = output.detach()
        output.register_hook(lambda grad: kept.__setitem__("g", grad.detach()))

    model.get_submodule(layer).register_forward_hook(on_forward)
    scores = model(x)
    scores.gather(1, target[:, None]).sum().backward()
    model.zero_grad(set_to_none=True)
    weights = kept["g"].mean(dim=(2, 3), keepdim=True)
    return F.relu((weights * kept["a"]).sum(dim=1))
