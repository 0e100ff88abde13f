"""Notebook 16's checkers accept right answers written differently and reject the typical wrong ones, each for
its reason."""
import pytest
import torch

import hooklab
from exercise_support import judged, run_solution, verdict
from hooklab.course.exercises import verdict as full_verdict

# ---- 16.1 the optimizer in backward, one step per logical batch ------------------------------------------------

def on_every_parameter(model, hook):
    """``hook`` as every parameter's post-accumulate-grad hook; the handles in a HookScope."""
    scope = hooklab.HookScope()
    for p in model.parameters():
        scope.add(p.register_post_accumulate_grad_hook(hook))
    return scope


def counting_handles(model, lr, micro_batches):
    """Right, written differently: optimizers keyed by name, a counter reset at each step, and
    zero_grad(set_to_none=True) instead of p.grad = None."""
    names = {p: n for n, p in model.named_parameters()}
    optimizers = {n: torch.optim.SGD([p], lr=lr) for p, n in names.items()}
    seen = {n: 0 for n in optimizers}

    def hook(p):
        n = names[p]
        seen[n] += 1
        if seen[n] == micro_batches:
            seen[n] = 0
            optimizers[n].step()
            optimizers[n].zero_grad(set_to_none=True)

    return on_every_parameter(model, hook)


def every_micro_batch(model, lr, micro_batches):  # notebook 02's pattern, unchanged
    optimizers = {p: torch.optim.SGD([p], lr=lr) for p in model.parameters()}

    def hook(p):
        optimizers[p].step()
        p.grad = None

    return on_every_parameter(model, hook)


def stepping_on_the_last(model, lr, micro_batches, after_step):
    """Steps each parameter's SGD at the last micro-batch, then calls ``after_step(optimizer)``."""
    optimizers = {p: torch.optim.SGD([p], lr=lr) for p in model.parameters()}
    seen = {p: 0 for p in model.parameters()}

    def hook(p):
        seen[p] += 1
        if seen[p] % micro_batches == 0:
            optimizers[p].step()
            after_step(optimizers[p])

    return on_every_parameter(model, hook)


def never_frees(model, lr, micro_batches):
    return stepping_on_the_last(model, lr, micro_batches, lambda opt: None)


def zeroes_in_place(model, lr, micro_batches):
    """Steps at the right time but zeroes .grad in place (set_to_none=False): the parameters are right, and a
    .grad of zeros stays."""
    return stepping_on_the_last(model, lr, micro_batches, lambda opt: opt.zero_grad(set_to_none=False))


def hard_coded_three(model, lr, micro_batches):
    return run_solution("16.1")["attach_optimizer_in_backward"](model, lr, 3)


def returns_handles_list(model, lr, micro_batches):
    scope = run_solution("16.1")["attach_optimizer_in_backward"](model, lr, micro_batches)
    return list(scope._handles)


def forgets_a_handle(model, lr, micro_batches):
    scope = run_solution("16.1")["attach_optimizer_in_backward"](model, lr, micro_batches)
    model[0].weight.register_post_accumulate_grad_hook(lambda p: None)  # not in the scope
    return scope


def wrong_lr(model, lr, micro_batches):
    return run_solution("16.1")["attach_optimizer_in_backward"](model, lr * 2, micro_batches)


def raises_in_hook(model, lr, micro_batches):
    return on_every_parameter(model, lambda p: p.grad.nonexistent)


def compares_before_counting(model, lr, micro_batches):  # the step waits for the next logical batch's first backward
    optimizers = {p: torch.optim.SGD([p], lr=lr) for p in model.parameters()}
    since_step = {p: 0 for p in model.parameters()}

    def hook(p):
        if since_step[p] >= micro_batches:
            optimizers[p].step()
            p.grad = None
            since_step[p] = 0
        since_step[p] += 1

    return on_every_parameter(model, hook)


def one_count_for_all(model, lr, micro_batches):  # every parameter's hook moves the same counter
    optimizers = {p: torch.optim.SGD([p], lr=lr) for p in model.parameters()}
    arrivals = []

    def hook(p):
        arrivals.append(p)
        if len(arrivals) % micro_batches == 0:
            optimizers[p].step()
            p.grad = None

    return on_every_parameter(model, hook)


def before_accumulation(model, lr, micro_batches):  # a tensor hook: .grad lacks this backward's gradient yet
    def stepper(p):
        optimizer, count = torch.optim.SGD([p], lr=lr), [0]

        def hook(grad):
            count[0] += 1
            if count[0] == micro_batches:
                count[0] = 0
                if p.grad is not None:
                    optimizer.step()
                p.grad = None
        return hook

    scope = hooklab.HookScope()
    for p in model.parameters():
        scope.add(p.register_hook(stepper(p)))
    return scope


def blank_16_1(model, lr, micro_batches):
    pass


def forgets_return(model, lr, micro_batches):
    run_solution("16.1")["attach_optimizer_in_backward"](model, lr, micro_batches).remove()


def test_16_1_accepts_right_answers():
    assert verdict("16.1", run_solution("16.1")["attach_optimizer_in_backward"]) == "correct"
    assert verdict("16.1", counting_handles) == "correct"
    assert judged("16.1", blank_16_1) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (every_micro_batch, "steps-every-micro-batch"), (never_frees, "grad-kept"),
    (zeroes_in_place, "grad-not-freed"), (hard_coded_three, "parameters"), (wrong_lr, "parameters"),
    (returns_handles_list, "not-a-scope"), (forgets_a_handle, "hook-left"), (raises_in_hook, "raised-in-backward"),
    (forgets_return, "returned-none"), ("attach", "not-a-function"), (compares_before_counting, "one-late"),
    (one_count_for_all, "uneven-steps"), (before_accumulation, "tensor-hook")])
def test_16_1_rejects_wrong_answers(answer, reason):
    assert judged("16.1", answer) == ("wrong", reason)


def test_16_1_says_how_often_it_stepped():
    assert "3 steps per logical batch" in full_verdict("16.1", every_micro_batch).en


# ---- 16.2 a logger that reads nothing on the host ---------------------------------------------------------------

def total(model):
    return torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])


def via_stack(history, spikes, step, model, limit):  # right, another way: copy_, and torch.where for the count
    norm = torch.stack([p.grad.norm() for p in model.parameters()]).norm()
    history[step % history.numel()].copy_(norm)
    spikes.add_(torch.where(norm > limit, 1.0, 0.0))


def with_item(history, spikes, step, model, limit):
    history[step % len(history)] = total(model).item()
    spikes += total(model) > limit


def with_isfinite_check(history, spikes, step, model, limit):
    norm = total(model)
    if torch.isfinite(norm):
        history[step % len(history)] = norm
    spikes += norm > limit


def counts_with_if(history, spikes, step, model, limit):  # the natural way to count: a host read per step
    norm = total(model)
    history[step % len(history)] = norm
    if norm > limit:
        spikes += 1


def rebinds_spikes(history, spikes, step, model, limit):
    norm = total(model)
    history[step % len(history)] = norm
    spikes = spikes + (norm > limit)  # noqa: F841 (the mistake: a new local tensor)


def counts_every_step(history, spikes, step, model, limit):
    history[step % len(history)] = total(model)
    spikes += 1


def counts_below(history, spikes, step, model, limit):
    norm = total(model)
    history[step % len(history)] = norm
    spikes += norm < limit


def sum_of_norms(history, spikes, step, model, limit):
    history[step % len(history)] = sum(p.grad.norm() for p in model.parameters())


def rebinds(history, spikes, step, model, limit):
    history = torch.cat([history, total(model)[None]])  # noqa: F841


def no_modulo(history, spikes, step, model, limit):
    history[min(step, len(history) - 1)] = total(model)


def clips_while_logging(history, spikes, step, model, limit):
    history[step % len(history)] = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)


def squared(history, spikes, step, model, limit):
    history[step % len(history)] = sum(p.grad.square().sum() for p in model.parameters())


def overflows(history, spikes, step, model, limit):
    history[step] = total(model)


def blank_16_2(history, spikes, step, model, limit):
    pass


def test_16_2_accepts_right_answers():
    assert verdict("16.2", run_solution("16.2")["log_norm"]) == "correct"
    assert verdict("16.2", via_stack) == "correct"
    assert judged("16.2", blank_16_2) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (with_item, "host-read"), (with_isfinite_check, "host-read"), (counts_with_if, "host-read"),
    (sum_of_norms, "sum-of-norms"), (rebinds, "not-written"), (no_modulo, "norm"),
    (clips_while_logging, "changes-gradient"), (squared, "norm"), (overflows, "raised"),
    (rebinds_spikes, "spikes-not-in-place"), (counts_every_step, "spikes"), (counts_below, "spikes"),
    (3, "not-a-function")])
def test_16_2_rejects_wrong_answers(answer, reason):
    assert judged("16.2", answer) == ("wrong", reason)


def test_16_2_counts_the_host_reads():
    assert "read a tensor's value on the host 12 times" in full_verdict("16.2", with_item).en
    assert "read a tensor's value on the host 12 times" in full_verdict("16.2", counts_with_if).en


def test_16_2_says_how_many_steps_were_above_the_limit():
    assert "`spikes` is 12; it should be 4" in full_verdict("16.2", counts_every_step).en


# ---- 16.3 prediction --------------------------------------------------------------------------------------------

def test_16_3():
    assert verdict("16.3", run_solution("16.3")["my_calls"]) == "correct"
    assert judged("16.3", []) == ("not solved", "blank")
    assert judged("16.3", [9.0, 3.0]) == ("wrong", "two-ints")
    assert judged("16.3", [9, 3, 0]) == ("wrong", "two-ints")
    assert judged("16.3", [True, 3]) == ("wrong", "two-ints")
    assert judged("16.3", [6, 3]) == ("wrong", "piled-up")   # one hook per epoch: forgot that they pile up
    assert judged("16.3", [9, 0]) == ("wrong", "copied")     # deepcopy copies hooks
    assert judged("16.3", [9, 2]) == ("wrong", "copied")     # the second copy carries two hooks
    assert judged("16.3", [12, 0]) == ("wrong", "copies-as-model")  # the copies' calls counted as the model's


def test_16_3_names_which_prediction_is_wrong():
    assert "the model's 6 is off" in full_verdict("16.3", [6, 3]).en
    assert "the EMA copies' 0 is off" in full_verdict("16.3", [9, 0]).en
