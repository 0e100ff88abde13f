"""Honest answers to notebook 11's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, jacrev, vmap

import hooklab
from tools.classroom.panel import answer

# --- 11.1: per-sample gradient norms with torch.func ----------------------------------------------------------------


@answer("11.1", right=True)
def per_sample_grad_norms_with_vmap_grad(model, x, y):
    params = {name: p.detach() for name, p in model.named_parameters()}

    def sample_loss(params, x_i, y_i):
        out = functional_call(model, params, (x_i.unsqueeze(0),))
        return F.mse_loss(out, y_i.unsqueeze(0))

    per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, x, y)
    squares = sum(g.reshape(g.shape[0], -1).pow(2).sum(dim=1) for g in per_sample.values())
    return squares.sqrt()


@answer("11.1", right=True)
def per_sample_grad_norms_flattening_into_one_vector(model, x, y):
    names = [name for name, _ in model.named_parameters()]
    values = tuple(p.detach() for _, p in model.named_parameters())

    def sample_loss(values, x_i, y_i):
        out = functional_call(model, dict(zip(names, values)), (x_i[None],))
        return F.mse_loss(out, y_i[None])

    grads = vmap(grad(sample_loss), in_dims=(None, 0, 0))(values, x, y)
    flat = torch.cat([g.flatten(start_dim=1) for g in grads], dim=1)
    return torch.linalg.vector_norm(flat, dim=1)


@answer("11.1", right=True)
def per_sample_grad_norms_with_jacrev(model, x, y):
    params = {name: p.detach() for name, p in model.named_parameters()}

    def sample_loss(params, x_i, y_i):
        return F.mse_loss(functional_call(model, params, (x_i.unsqueeze(0),)), y_i.unsqueeze(0))

    per_sample = vmap(jacrev(sample_loss), in_dims=(None, 0, 0))(params, x, y)
    return torch.stack([g.flatten(1).norm(dim=1) for g in per_sample.values()], dim=1).norm(dim=1)


@answer("11.1", mistake="logic", says="adds up the per-parameter norms instead of taking the norm of all parameters "
        "together (the square root of the sum of squares)")
def per_sample_grad_norms_summing_norms(model, x, y):
    params = {name: p.detach() for name, p in model.named_parameters()}

    def sample_loss(params, x_i, y_i):
        return F.mse_loss(functional_call(model, params, (x_i.unsqueeze(0),)), y_i.unsqueeze(0))

    per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, x, y)
    return sum(g.flatten(1).norm(dim=1) for g in per_sample.values())


@answer("11.1", mistake="logic", says="returns the sum of squares of the per-sample gradients, forgetting the square "
        "root")
def per_sample_grad_norms_squared(model, x, y):
    params = {name: p.detach() for name, p in model.named_parameters()}

    def sample_loss(params, x_i, y_i):
        return F.mse_loss(functional_call(model, params, (x_i.unsqueeze(0),)), y_i.unsqueeze(0))

    per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, x, y)
    return sum(g.flatten(1).pow(2).sum(dim=1) for g in per_sample.values())


@answer("11.1", mistake="wrong-target", says="takes the norm of the gradient with respect to the weight parameters "
        "only, leaving out the biases")
def per_sample_grad_norms_of_the_weights_only(model, x, y):
    params = {name: p.detach() for name, p in model.named_parameters()}

    def sample_loss(params, x_i, y_i):
        return F.mse_loss(functional_call(model, params, (x_i.unsqueeze(0),)), y_i.unsqueeze(0))

    per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))(params, x, y)
    squares = sum(g.flatten(1).pow(2).sum(dim=1) for name, g in per_sample.items() if name.endswith("weight"))
    return squares.sqrt()


@answer("11.1", mistake="logic", says="vmaps over x but not over y (in_dims None for the targets), so every sample's "
        "loss compares its prediction with the whole batch of targets")
def per_sample_grad_norms_with_unbatched_targets(model, x, y):
    params = {name: p.detach() for name, p in model.named_parameters()}

    def sample_loss(params, x_i, targets):
        return F.mse_loss(functional_call(model, params, (x_i.unsqueeze(0),)), targets)

    per_sample = vmap(grad(sample_loss), in_dims=(None, 0, None))(params, x, y)
    return sum(g.flatten(1).pow(2).sum(dim=1) for g in per_sample.values()).sqrt()


@answer("11.1", mistake="shape-or-dtype", says="differentiates the loss of the whole batch once, without vmap, and "
        "returns one norm (a 0-d tensor) instead of one per sample")
def per_sample_grad_norms_of_the_batch_loss(model, x, y):
    params = {name: p.detach() for name, p in model.named_parameters()}

    def batch_loss(params):
        return F.mse_loss(functional_call(model, params, (x,)), y)

    grads = grad(batch_loss)(params)
    return torch.cat([g.flatten() for g in grads.values()]).norm()


@answer("11.1", mistake="other", says="computes each sample's gradient with backward() in a loop, which writes (and "
        "zeroes) the parameters' .grad instead of leaving it alone")
def per_sample_grad_norms_with_a_backward_loop(model, x, y):
    norms = []
    for x_i, y_i in zip(x, y):
        model.zero_grad()
        F.mse_loss(model(x_i.unsqueeze(0)), y_i.unsqueeze(0)).backward()
        norms.append(torch.cat([p.grad.flatten() for p in model.parameters()]).norm())
    return torch.stack(norms)


# --- 11.2: a Grad-CAM that works under no_grad and inference_mode ---------------------------------------------------


@answer("11.2", right=True)
def robust_grad_cam_with_a_tensor_hook(model, layer, x, target):
    store = {}

    def keep(module, args, output):
        store["act"] = output
        output.register_hook(lambda g: store.__setitem__("grad", g))

    with torch.inference_mode(False), torch.enable_grad():
        if x.is_inference():
            x = x.clone()  # inference tensors cannot be saved for backward
        with hooklab.HookScope() as scope:
            scope.add(layer.register_forward_hook(keep))
            model(x)[:, target].sum().backward()
        weights = store["grad"].mean(dim=(2, 3), keepdim=True)
        return (weights * store["act"]).sum(dim=1).relu().detach()


@answer("11.2", right=True)
def robust_grad_cam_with_autograd_grad(model, layer, x, target):
    captured = []
    with torch.inference_mode(False):
        with torch.enable_grad():
            x = x.clone()
            handle = layer.register_forward_hook(lambda m, args, out: captured.append(out))
            try:
                score = model(x)[:, target].sum()
            finally:
                handle.remove()
            act = captured[0]
            (act_grad,) = torch.autograd.grad(score, act)
            weights = act_grad.mean(dim=(-2, -1))
            cam = torch.einsum("bc,bchw->bhw", weights, act).clamp(min=0)
    return cam.detach()


@answer("11.2", mistake="other", says="wraps the computation in torch.enable_grad() only, which does not leave "
        "inference_mode: under it registering the tensor hook raises")
def robust_grad_cam_with_enable_grad_only(model, layer, x, target):
    store = {}

    def keep(module, args, output):
        store["act"] = output
        output.register_hook(lambda g: store.__setitem__("grad", g))

    with hooklab.HookScope() as scope, torch.enable_grad():
        scope.add(layer.register_forward_hook(keep))
        model(x)[:, target].sum().backward()
    weights = store["grad"].mean(dim=(2, 3), keepdim=True)
    return (weights * store["act"]).sum(dim=1).relu().detach()


@answer("11.2", mistake="other", says="leaves inference mode with inference_mode(False) but does not clone an "
        "inference-tensor input, which cannot be saved for backward")
def robust_grad_cam_without_cloning_the_input(model, layer, x, target):
    store = {}

    def keep(module, args, output):
        store["act"] = output
        output.register_hook(lambda g: store.__setitem__("grad", g))

    with torch.inference_mode(False), torch.enable_grad(), hooklab.HookScope() as scope:
        scope.add(layer.register_forward_hook(keep))
        model(x)[:, target].sum().backward()
        weights = store["grad"].mean(dim=(2, 3), keepdim=True)
        return (weights * store["act"]).sum(dim=1).relu().detach()


@answer("11.2", mistake="logic", says="averages the gradient over the channel dimension instead of the spatial "
        "dimensions to get the channel weights")
def robust_grad_cam_averaging_over_channels(model, layer, x, target):
    store = {}

    def keep(module, args, output):
        store["act"] = output
        output.register_hook(lambda g: store.__setitem__("grad", g))

    with torch.inference_mode(False), torch.enable_grad():
        x = x.clone() if x.is_inference() else x
        with hooklab.HookScope() as scope:
            scope.add(layer.register_forward_hook(keep))
            model(x)[:, target].sum().backward()
        weights = store["grad"].mean(dim=1, keepdim=True)
        return (weights * store["act"]).sum(dim=1).relu().detach()


@answer("11.2", mistake="logic", says="forgets the final relu, so negative evidence stays in the map")
def robust_grad_cam_without_relu(model, layer, x, target):
    store = {}

    def keep(module, args, output):
        store["act"] = output
        output.register_hook(lambda g: store.__setitem__("grad", g))

    with torch.inference_mode(False), torch.enable_grad():
        x = x.clone() if x.is_inference() else x
        with hooklab.HookScope() as scope:
            scope.add(layer.register_forward_hook(keep))
            model(x)[:, target].sum().backward()
        weights = store["grad"].mean(dim=(2, 3), keepdim=True)
        return (weights * store["act"]).sum(dim=1).detach()


@answer("11.2", mistake="detach-or-graph", says="returns the map without detach(), still attached to the graph")
def robust_grad_cam_not_detached(model, layer, x, target):
    store = {}

    def keep(module, args, output):
        store["act"] = output
        output.register_hook(lambda g: store.__setitem__("grad", g))

    with torch.inference_mode(False), torch.enable_grad():
        x = x.clone() if x.is_inference() else x
        with hooklab.HookScope() as scope:
            scope.add(layer.register_forward_hook(keep))
            model(x)[:, target].sum().backward()
        weights = store["grad"].mean(dim=(2, 3), keepdim=True)
        return (weights * store["act"]).sum(dim=1).relu()


@answer("11.2", mistake="handle-left", says="never removes the forward hook it registers on the layer, so it stays "
        "on the model (and registers a new tensor hook on every later forward)")
def robust_grad_cam_leaving_the_hook(model, layer, x, target):
    store = {}

    def keep(module, args, output):
        store["act"] = output
        output.register_hook(lambda g: store.__setitem__("grad", g))

    with torch.inference_mode(False), torch.enable_grad():
        x = x.clone() if x.is_inference() else x
        layer.register_forward_hook(keep)
        model(x)[:, target].sum().backward()
        weights = store["grad"].mean(dim=(2, 3), keepdim=True)
        return (weights * store["act"]).sum(dim=1).relu().detach()


@answer("11.2", mistake="shape-or-dtype", says="sums over the batch dimension instead of the channels, so the map "
        "has shape (C, H, W) instead of (batch, H, W)")
def robust_grad_cam_summing_over_the_batch(model, layer, x, target):
    store = {}

    def keep(module, args, output):
        store["act"] = output
        output.register_hook(lambda g: store.__setitem__("grad", g))

    with torch.inference_mode(False), torch.enable_grad():
        x = x.clone() if x.is_inference() else x
        with hooklab.HookScope() as scope:
            scope.add(layer.register_forward_hook(keep))
            model(x)[:, target].sum().backward()
        weights = store["grad"].mean(dim=(2, 3), keepdim=True)
        return (weights * store["act"]).sum(dim=0).relu().detach()


# --- 11.3: a monitoring forward hook that keeps the model compiled --------------------------------------------------


@answer("11.3", right=True)
def make_monitor_with_an_in_place_counter(store):
    def monitor(module, args, output):
        store["last"] = output.detach()
        store["calls"].add_(1)

    return monitor


@answer("11.3", right=True)
def make_monitor_as_a_callable_object(store):
    class Monitor:
        def __init__(self, store):
            self.store = store

        def __call__(self, module, args, output):
            self.store["last"] = output.detach()
            self.store["calls"] += 1  # a tensor: += adds in place

    return Monitor(store)


@answer("11.3", mistake="host-sync", says="counts with a Python int (int(store['calls']) + 1), which reads the "
        "tensor on the host inside the hook and breaks the graph")
def make_monitor_with_a_python_int(store):
    def monitor(module, args, output):
        store["last"] = output.detach()
        store["calls"] = torch.tensor(int(store["calls"]) + 1)

    return monitor


@answer("11.3", mistake="host-sync", says="prints the call count inside the hook, a graph break on every call")
def make_monitor_that_prints(store):
    def monitor(module, args, output):
        store["last"] = output.detach()
        store["calls"].add_(1)
        print("monitor: call", store["calls"])

    return monitor


@answer("11.3", mistake="stale-state", says="appends every output to a list in store, which Dynamo guards by its "
        "length, so each call recompiles")
def make_monitor_appending_to_a_list(store):
    def monitor(module, args, output):
        store.setdefault("history", []).append(output.detach())
        store["last"] = store["history"][-1]
        store["calls"].add_(1)

    return monitor


@answer("11.3", mistake="detach-or-graph", says="stores the output without detach(), so store['last'] keeps the "
        "graph alive")
def make_monitor_without_detach(store):
    def monitor(module, args, output):
        store["last"] = output
        store["calls"].add_(1)

    return monitor


@answer("11.3", mistake="returns-input", says="returns the detached output from the forward hook, which replaces "
        "the layer's output and cuts the layers before it off from the graph")
def make_monitor_returning_the_output(store):
    def monitor(module, args, output):
        store["last"] = output.detach()
        store["calls"].add_(1)
        return store["last"]

    return monitor


@answer("11.3", mistake="stale-state", says="resets store['calls'] to 1 on every call instead of adding 1, so the "
        "count never goes past 1")
def make_monitor_resetting_the_count(store):
    def monitor(module, args, output):
        store["last"] = output.detach()
        store["calls"] = torch.ones((), dtype=torch.long)

    return monitor
