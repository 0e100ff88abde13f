"""Honest answers to notebook 16's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import torch

from tools.classroom.panel import answer

# ---------------------------------------------------------------- 16.1: one step per logical batch


@answer("16.1", right=True)
def attach_optimizer_in_backward_counting_per_parameter(model, lr, micro_batches):
    import hooklab

    optimizers = {p: torch.optim.SGD([p], lr=lr) for p in model.parameters()}
    backwards = {p: 0 for p in optimizers}

    def step_now(p):
        backwards[p] += 1
        if backwards[p] % micro_batches == 0:  # the last micro-batch of this logical batch
            optimizers[p].step()
            p.grad = None

    scope = hooklab.HookScope("optimizer in backward")
    for p in optimizers:
        scope.add(p.register_post_accumulate_grad_hook(step_now))
    return scope


@answer("16.1", right=True)
def attach_optimizer_in_backward_with_a_class(model, lr, micro_batches):
    import hooklab

    class StepEvery:
        """Steps one parameter's own SGD on every `every`-th backward, then frees its .grad."""

        def __init__(self, param, lr, every):
            self.optimizer, self.every, self.seen = torch.optim.SGD([param], lr=lr), every, 0

        def __call__(self, param):
            self.seen += 1
            if self.seen == self.every:
                self.seen = 0
                self.optimizer.step()
                param.grad = None

    scope = hooklab.HookScope()
    for p in model.parameters():
        scope.add(p.register_post_accumulate_grad_hook(StepEvery(p, lr, micro_batches)))
    return scope


@answer("16.1", mistake="count",
        says="steps in the post-accumulate-grad hook at every backward, as in notebook 02, ignoring micro_batches, so "
             "each parameter steps once per micro-batch")
def attach_optimizer_in_backward_every_backward(model, lr, micro_batches):
    import hooklab

    optimizers = {p: torch.optim.SGD([p], lr=lr) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()
        p.grad = None

    scope = hooklab.HookScope()
    for p in optimizers:
        scope.add(p.register_post_accumulate_grad_hook(step_now))
    return scope


@answer("16.1", mistake="stale-state",
        says="steps once per logical batch but never frees .grad after the step, so the next logical batch adds "
             "onto the gradient already used")
def attach_optimizer_in_backward_keeping_grad(model, lr, micro_batches):
    import hooklab

    optimizers = {p: torch.optim.SGD([p], lr=lr) for p in model.parameters()}
    backwards = {p: 0 for p in optimizers}

    def step_now(p):
        backwards[p] += 1
        if backwards[p] % micro_batches == 0:
            optimizers[p].step()

    scope = hooklab.HookScope()
    for p in optimizers:
        scope.add(p.register_post_accumulate_grad_hook(step_now))
    return scope


@answer("16.1", mistake="count",
        says="compares the count with micro_batches before counting the current backward, so each parameter steps "
             "one micro-batch late, with the next logical batch's first gradient added in")
def attach_optimizer_in_backward_one_late(model, lr, micro_batches):
    import hooklab

    optimizers = {p: torch.optim.SGD([p], lr=lr) for p in model.parameters()}
    backwards = {p: 0 for p in optimizers}

    def step_now(p):
        if backwards[p] == micro_batches:
            optimizers[p].step()
            p.grad = None
            backwards[p] = 0
        backwards[p] += 1

    scope = hooklab.HookScope()
    for p in optimizers:
        scope.add(p.register_post_accumulate_grad_hook(step_now))
    return scope


@answer("16.1", mistake="count",
        says="one counter shared by all parameters, incremented in every parameter's hook, so it reaches "
             "micro_batches after a fraction of a logical batch and the parameters step at the wrong backwards")
def attach_optimizer_in_backward_with_one_shared_counter(model, lr, micro_batches):
    import hooklab

    optimizers = {p: torch.optim.SGD([p], lr=lr) for p in model.parameters()}
    count = [0]

    def step_now(p):
        count[0] += 1
        if count[0] % micro_batches == 0:
            optimizers[p].step()
            p.grad = None

    scope = hooklab.HookScope()
    for p in optimizers:
        scope.add(p.register_post_accumulate_grad_hook(step_now))
    return scope


@answer("16.1", mistake="wrong-hook-kind",
        says="steps from a tensor hook (register_hook), which runs before this micro-batch's gradient is added into "
             ".grad, so each step uses an incomplete sum")
def attach_optimizer_in_backward_with_tensor_hooks(model, lr, micro_batches):
    import hooklab

    scope = hooklab.HookScope()
    for p in model.parameters():
        optimizer, seen = torch.optim.SGD([p], lr=lr), [0]

        def step_now(grad, p=p, optimizer=optimizer, seen=seen):
            seen[0] += 1
            if seen[0] % micro_batches == 0 and p.grad is not None:
                optimizer.step()
                p.grad = None

        scope.add(p.register_hook(step_now))
    return scope


@answer("16.1", mistake="other",
        says="registers the hooks inside a `with hooklab.HookScope()` block and returns that scope, so every hook "
             "is removed before the function returns and no parameter ever steps")
def attach_optimizer_in_backward_inside_a_with_block(model, lr, micro_batches):
    import hooklab

    optimizers = {p: torch.optim.SGD([p], lr=lr) for p in model.parameters()}
    backwards = {p: 0 for p in optimizers}

    def step_now(p):
        backwards[p] += 1
        if backwards[p] % micro_batches == 0:
            optimizers[p].step()
            p.grad = None

    with hooklab.HookScope("optimizer in backward") as scope:
        for p in optimizers:
            scope.add(p.register_post_accumulate_grad_hook(step_now))
    return scope


# ---------------------------------------------------------------- 16.2: a logger that reads nothing on the host


def _grads(model):
    return [p.grad for p in model.parameters() if p.grad is not None]


@answer("16.2", right=True)
def log_norm_with_stacked_norms(history, spikes, step, model, limit):
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in _grads(model)]))
    history[step % len(history)] = norm
    spikes.add_((norm > limit).to(spikes.dtype))  # a tensor added on the device: no host read


@answer("16.2", right=True)
def log_norm_with_get_total_norm(history, spikes, step, model, limit):
    norm = torch.nn.utils.get_total_norm(_grads(model))
    history[step % history.shape[0]] = norm
    spikes += torch.where(norm > limit, 1, 0).to(spikes.dtype)


@answer("16.2", right=True)
def log_norm_from_squares(history, spikes, step, model, limit):
    squares = torch.stack([g.double().square().sum() for g in _grads(model)]).sum()
    norm = squares.sqrt().to(history.dtype)
    history[step % len(history)] = norm
    spikes.copy_(spikes + (norm > limit))


@answer("16.2", mistake="host-sync",
        says="writes the condition as `if norm > limit:`, which turns a tensor into a Python bool and reads it on "
             "the host every step")
def log_norm_with_an_if(history, spikes, step, model, limit):
    norm = torch.nn.utils.get_total_norm(_grads(model))
    history[step % len(history)] = norm
    if norm > limit:
        spikes += 1


@answer("16.2", mistake="host-sync",
        says="stores norm.item() in the history, a read on the host at every step")
def log_norm_storing_item(history, spikes, step, model, limit):
    norm = torch.nn.utils.get_total_norm(_grads(model))
    history[step % len(history)] = norm.item()
    spikes.add_((norm > limit).to(spikes.dtype))


@answer("16.2", mistake="logic",
        says="adds up the parameters' norms instead of taking the 2-norm of all gradients together")
def log_norm_summing_norms(history, spikes, step, model, limit):
    norm = torch.stack([g.norm() for g in _grads(model)]).sum()
    history[step % len(history)] = norm
    spikes.add_((norm > limit).to(spikes.dtype))


@answer("16.2", mistake="in-place-grad",
        says="gets the total norm from clip_grad_norm_(params, limit), which also clips the gradients in place, so "
             "the logger changes training")
def log_norm_with_clip_grad_norm(history, spikes, step, model, limit):
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=limit)
    history[step % len(history)] = norm
    spikes.add_((norm > limit).to(spikes.dtype))


@answer("16.2", mistake="no-return",
        says="rebinds the local name spikes to spikes + 1 instead of adding in place, so the caller's counter "
             "never changes")
def log_norm_rebinding_spikes(history, spikes, step, model, limit):
    norm = torch.nn.utils.get_total_norm(_grads(model))
    history[step % len(history)] = norm
    spikes = spikes + (norm > limit).to(spikes.dtype)


# ---------------------------------------------------------------- 16.3: how many calls (a prediction)


@answer("16.3", right=True, built=True)
def my_calls_with_the_pile_up_and_the_copies():
    # epoch 1: 1 hook, model x3 -> 3, the EMA copy carries 1 hook -> 1
    # epoch 2: 2 hooks (never removed), model x3 -> 6, the new copy carries both -> 2
    return [9, 3]


@answer("16.3", mistake="re-registered", built=True,
        says="forgets that the hook registered in epoch 1 is still there in epoch 2, so counts one hook per epoch "
             "on the model and on each copy")
def my_calls_one_hook_per_epoch():
    return [6, 2]


@answer("16.3", mistake="count", built=True,
        says="assumes AveragedModel's deep copy drops the module's forward hooks, so predicts no calls from the "
             "EMA copies")
def my_calls_copies_without_hooks():
    return [9, 0]


@answer("16.3", mistake="wrong-target", built=True,
        says="counts the EMA copies' firings as the model's own, as if the hook only ever fired on model[0]")
def my_calls_all_on_the_model():
    return [12, 0]
