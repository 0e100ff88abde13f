"""Notebook 02's checkers accept right answers written differently and reject the typical wrong ones."""
import pytest
import torch
from torch import nn

import hooklab
import hooklab.course
from exercise_support import judged, run_solution, verdict
from hooklab.course import exercises

# ---- 02.1 predict the trace of z = (a * b).exp() ------------------------------------------

def test_02_1_accepts_the_real_trace_as_tuples_or_lists():
    trace = run_solution("02.1")["my_trace"]
    assert verdict("02.1", trace) == "correct"
    assert verdict("02.1", [list(pair) for pair in trace]) == "correct"
    assert verdict("02.1", tuple(trace)) == "correct"


def test_02_1_the_solution_is_what_the_tracer_records():
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([3.0, 4.0], requires_grad=True)
    with hooklab.Tracer() as tr:
        ab = a * b
        z = ab.exp()
        tr.tensor(ab, "ab")
        tr.tensor(a, "a")
        tr.tensor(b, "b")
        tr.node(ab.grad_fn, "MulBackward0")
        tr.post_accumulate_grad(a, "a")
        tr.post_accumulate_grad(b, "b")
        z.sum().backward()
    assert tr.sequence() == run_solution("02.1")["my_trace"]


T, NPRE, NPOST = ("tensor", "ab"), ("node_pre", "MulBackward0"), ("node_post", "MulBackward0")
TA, PA, TB, PB = ("tensor", "a"), ("post_accumulate_grad", "a"), ("tensor", "b"), ("post_accumulate_grad", "b")


@pytest.mark.parametrize("answer, reason", [
    ([TA, PA, TB, PB, T, NPRE, NPOST], "order"),             # leaves first: the forward order, not backward's
    ([T, NPRE, NPOST, TB, PB, TA, PA], "order"),             # b before a
    ([T, NPRE, NPOST, TA, TB, PA, PB], "order"),             # both tensor hooks, then both post-accumulate hooks
    ([T, NPRE, NPOST, PA, TA, PB, TB], "order"),             # post-accumulate before the leaf's tensor hook
    ([NPRE, T, NPOST, TA, PA, TB, PB], "order"),             # Node pre-hook before the tensor hook
    ([T, NPRE, NPOST, TA, PA, TB], "not-the-seven-events"),  # one missing
    ([T, NPRE, NPOST, TA, PA, TB, ("post_accumulate_grad", "ab")], "not-the-seven-events"),
    (["tensor ab", "node_pre MulBackward0", "node_post MulBackward0", "tensor a", "post_accumulate_grad a",
      "tensor b", "post_accumulate_grad b"], "not-pairs"),        # strings, not (kind, name) pairs
    ({"tensor": "ab"}, "not-pairs"),
])
def test_02_1_rejects_wrong_traces(answer, reason):
    assert judged("02.1", answer) == ("wrong", reason)


def test_02_1_blank_start_is_not_solved():
    assert judged("02.1", []) == ("not solved", "blank")
    assert verdict("02.1", None) == "not solved"


# ---- 02.2 clip with a Node pre-hook -------------------------------------------------------

def node_clip_with_lambda_and_tuple_comprehension(y, limit):
    return y.grad_fn.register_prehook(lambda go: tuple(g.clamp(min=-limit, max=limit) for g in go))


def node_clip_with_where(y, limit):
    def clip(grad_outputs):
        (g,) = grad_outputs
        return (torch.where(g.abs() > limit, g.sign() * limit, g),)
    return y.grad_fn.register_prehook(clip)


def node_clip_with_tensor_hook(y, limit):
    return y.register_hook(lambda g: g.clamp(-limit, limit))


def node_clip_returns_tensor(y, limit):
    return y.grad_fn.register_prehook(lambda go: go[0].clamp(-limit, limit))


def node_clip_in_place(y, limit):
    def clip(grad_outputs):
        grad_outputs[0].clamp_(-limit, limit)      # also clips the sibling branch's gradient
    return y.grad_fn.register_prehook(clip)


def node_clip_post_hook(y, limit):
    # clips grad_inputs (the gradient of w), not the gradient arriving at y
    return y.grad_fn.register_hook(lambda gi, go: tuple(None if g is None else g.clamp(-limit, limit) for g in gi))


def node_clip_on_accumulate_grad(y, limit):
    acc_w = y.grad_fn.next_functions[0][0]
    return acc_w.register_prehook(lambda go: (go[0].clamp(-limit, limit),))


def node_clip_only_looks(y, limit):
    clipped = []
    return y.grad_fn.register_prehook(lambda go: clipped.append(go[0].clamp(-limit, limit)))


def node_clip_hard_coded_one(y, limit):
    return y.grad_fn.register_prehook(lambda go: (go[0].clamp(-1, 1),))


def node_clip_returns_nothing_useful(y, limit):
    y.grad_fn.register_prehook(lambda go: (go[0].clamp(-limit, limit),))
    return y.grad_fn                                   # the Node, not the handle


@pytest.mark.parametrize("answer", [run_solution("02.2")["clip_at_node"], node_clip_with_lambda_and_tuple_comprehension,
                                    node_clip_with_where])
def test_02_2_accepts_right_answers(answer):
    assert verdict("02.2", answer) == "correct"


def node_clip_sets_y_grad(y, limit):
    def clip(grad_outputs):
        y.grad = grad_outputs[0].clamp(-limit, limit)     # overwrites what retain_grad kept
        return (y.grad,)
    return y.grad_fn.register_prehook(clip)


def node_clip_returns_another_handle(y, limit):
    y.grad_fn.register_prehook(lambda go: (go[0].clamp(-limit, limit),))
    return y.grad_fn.register_prehook(lambda go: None)  # removing this one leaves the clipping on


def node_clip_with_global_hook(y, limit):
    torch.nn.modules.module.register_module_full_backward_hook(lambda m, gi, go: None)
    return y.grad_fn.register_prehook(lambda go: (go[0].clamp(-limit, limit),))


@pytest.mark.parametrize("answer, reason", [
    (node_clip_with_tensor_hook, "tensor-hook"), (node_clip_returns_tensor, "backward-raised"),
    (node_clip_in_place, "in-place"), (node_clip_post_hook, "clipped-w-grad"),
    (node_clip_on_accumulate_grad, "clipped-w-grad"), (node_clip_only_looks, "not-returned"),
    (node_clip_hard_coded_one, "clip-values"), (node_clip_returns_nothing_useful, "not-a-handle"),
    (node_clip_sets_y_grad, "retained-grad-changed"), (node_clip_returns_another_handle, "wrong-handle"),
    (node_clip_with_global_hook, "global-hook-left")])
def test_02_2_rejects_wrong_answers(answer, reason):
    assert judged("02.2", answer) == ("wrong", reason)


def test_02_2_says_which_gradient_was_clipped():
    status, zh, en, reason = exercises.verdict("02.2", node_clip_post_hook)
    assert (status, reason) == ("wrong", "clipped-w-grad") and "`y.grad_fn`" in en and "`y.grad_fn`" in zh
    status, zh, en, reason = exercises.verdict("02.2", node_clip_with_tensor_hook)
    assert (status, reason) == ("wrong", "tensor-hook") and "tensor hook" in en and "张量钩子" in zh


def test_02_2_blank_start_is_not_solved():
    def clip_at_node(y, limit):
        # your code here
        pass
    assert verdict("02.2", clip_at_node) == "not solved"
    assert verdict("02.2", None) == "not solved"


# ---- 02.3 Adam stepped inside backward ----------------------------------------------------

def adam_one_optimizer_stepped_per_hook(model, X, Y, steps, lr):
    # one Adam over all parameters: when a hook calls step(), only that parameter has a .grad,
    # and Adam skips parameters without one, so each step updates exactly one parameter
    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def hook(p):
        opt.step()
        p.grad = None

    handles = [p.register_post_accumulate_grad_hook(hook) for p in model.parameters()]
    losses = []
    try:
        for _ in range(steps):
            loss = nn.functional.cross_entropy(model(X), Y)
            loss.backward()
            losses.append(loss.detach())               # 0-d tensors are accepted too
    finally:
        for handle in handles:
            handle.remove()
    return losses


def adam_with_named_scope_and_closures(model, X, Y, steps, lr):
    import torch.nn.functional as F
    scope = hooklab.named_scope("fused-adam")
    for p in model.parameters():
        opt = torch.optim.Adam([p], lr=lr)

        def step(param, opt=opt):                     # default argument: no late binding
            opt.step()
            param.grad = None

        scope.add(p.register_post_accumulate_grad_hook(step))
    losses = []
    try:
        for _ in range(steps):
            loss = F.cross_entropy(model(X), Y)
            losses.append(float(loss.detach()))
            loss.backward()
    finally:
        scope.remove()
    return losses


def adam_usual_loop(model, X, Y, steps, lr):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(X), Y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    return losses


def _fused(model, X, Y, steps, lr, make_optimizer, free=True, keep_hooks=False, late_binding=False):
    optimizers = {p: make_optimizer([p], lr) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()
        if free:
            p.grad = None

    handles = []
    for p in model.parameters():
        if late_binding:
            handles.append(p.register_post_accumulate_grad_hook(lambda _: step_now(p)))
        else:
            handles.append(p.register_post_accumulate_grad_hook(step_now))
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(X), Y)
        losses.append(loss.item())
        loss.backward()
    if not keep_hooks:
        for handle in handles:
            handle.remove()
    return losses


def adam_with_sgd(model, X, Y, steps, lr):
    return _fused(model, X, Y, steps, lr, lambda ps, lr: torch.optim.SGD(ps, lr=lr))


def adam_grad_not_freed(model, X, Y, steps, lr):
    return _fused(model, X, Y, steps, lr, lambda ps, lr: torch.optim.Adam(ps, lr=lr), free=False)


def adam_hooks_left_attached(model, X, Y, steps, lr):
    return _fused(model, X, Y, steps, lr, lambda ps, lr: torch.optim.Adam(ps, lr=lr), keep_hooks=True)


def adam_new_optimizer_in_every_hook(model, X, Y, steps, lr):
    def step_now(p):
        torch.optim.Adam([p], lr=lr).step()            # Adam's state (moments, step count) is lost every time
        p.grad = None

    with hooklab.HookScope() as scope:
        for p in model.parameters():
            scope.add(p.register_post_accumulate_grad_hook(step_now))
        losses = []
        for _ in range(steps):
            loss = nn.functional.cross_entropy(model(X), Y)
            losses.append(loss.item())
            loss.backward()
    return losses


def adam_late_binding_lambda(model, X, Y, steps, lr):
    return _fused(model, X, Y, steps, lr, lambda ps, lr: torch.optim.Adam(ps, lr=lr), late_binding=True)


def adam_from_tensor_hooks(model, X, Y, steps, lr):
    optimizers = {p: torch.optim.Adam([p], lr=lr) for p in model.parameters()}
    with hooklab.HookScope() as scope:
        for p in model.parameters():
            # a tensor hook runs BEFORE accumulation: p.grad is not written yet
            scope.add(p.register_hook(lambda g, p=p: optimizers[p].step()))
        losses = []
        for _ in range(steps):
            loss = nn.functional.cross_entropy(model(X), Y)
            losses.append(loss.item())
            loss.backward()
    return losses


def adam_losses_after_the_update(model, X, Y, steps, lr):
    losses = _fused(model, X, Y, steps, lr, lambda ps, lr: torch.optim.Adam(ps, lr=lr))
    return losses[1:] + [nn.functional.cross_entropy(model(X), Y).item()]


@pytest.mark.parametrize("answer", [run_solution("02.3")["train_in_backward"], adam_one_optimizer_stepped_per_hook,
                                    adam_with_named_scope_and_closures])
def test_02_3_accepts_right_answers(answer):
    assert verdict("02.3", answer) == "correct"


def adam_returns_the_last_loss(model, X, Y, steps, lr):
    return _fused(model, X, Y, steps, lr, lambda ps, lr: torch.optim.Adam(ps, lr=lr))[-1]


def adam_two_backward_passes_per_step(model, X, Y, steps, lr):
    losses = _fused(model, X, Y, steps, lr, lambda ps, lr: torch.optim.Adam(ps, lr=lr))
    nn.functional.cross_entropy(model(X), Y).backward()       # one more pass, "to check": it accumulates again
    model.zero_grad(set_to_none=True)
    return losses


def adam_zeroes_grads_at_the_end(model, X, Y, steps, lr):
    losses = _fused(model, X, Y, steps, lr, lambda ps, lr: torch.optim.Adam(ps, lr=lr))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)                          # zeros are not "no gradient"
    return losses


@pytest.mark.parametrize("answer, reason", [
    (adam_usual_loop, "grads-held-together"), (adam_with_sgd, "not-per-parameter-adam"),
    (adam_grad_not_freed, "grads-held-together"), (adam_hooks_left_attached, "hook-left"),
    (adam_new_optimizer_in_every_hook, "not-per-parameter-adam"), (adam_late_binding_lambda, "grads-held-together"),
    (adam_from_tensor_hooks, "grads-held-together"), (adam_losses_after_the_update, "losses"),
    (adam_returns_the_last_loss, "not-a-loss-list"), (adam_two_backward_passes_per_step, "backward-count"),
    (adam_zeroes_grads_at_the_end, "grad-not-freed")])
def test_02_3_rejects_wrong_answers(answer, reason):
    assert judged("02.3", answer) == ("wrong", reason)


def test_02_3_explains_why_the_usual_loop_is_not_enough():
    status, zh, en, reason = exercises.verdict("02.3", adam_usual_loop)
    assert (status, reason) == ("wrong", "grads-held-together") and "at the same time" in en and "同时" in zh


def test_02_3_blank_start_is_not_solved():
    def train_in_backward(model, X, Y, steps, lr):
        # your code here
        pass
    assert verdict("02.3", train_in_backward) == "not solved"
    assert verdict("02.3", None) == "not solved"
