"""Notebook 14's checkers accept right answers written differently and reject the typical wrong ones, each for
its reason."""
import multiprocessing

import pytest
import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from exercise_support import judged, run_solution, verdict
from hooklab.course.exercises import verdict as full_verdict

# ---- 14.1 once per backward -------------------------------------------------------------------

def via_tensor_hooks(params, on_done):  # right too: tensor hooks, a flag tied to the backward pass (graph task)
    queued_in = {"task": None}

    def hook(grad):
        task = torch._C._current_graph_task_id()
        if queued_in["task"] != task:
            queued_in["task"] = task
            torch.autograd.graph.queue_callback(on_done)
    return [p.register_hook(hook) for p in params]


def flag_reset_by_callback(params, on_done):  # the old reference solution: stuck once a backward has failed
    queued = [False]

    def finish():
        queued[0] = False
        on_done()

    def hook(param):
        if not queued[0]:
            queued[0] = True
            torch.autograd.graph.queue_callback(finish)
    return [p.register_post_accumulate_grad_hook(hook) for p in params]


def counts_to_all(params, on_done):  # calls on_done when every parameter has reported: never in a pass missing one
    seen = {"n": 0}

    def hook(p):
        seen["n"] += 1
        if seen["n"] % len(params) == 0:
            on_done()
    return [p.register_post_accumulate_grad_hook(hook) for p in params]


def every_hook_queues(params, on_done):
    return [p.register_post_accumulate_grad_hook(lambda p: torch.autograd.graph.queue_callback(on_done))
            for p in params]


def calls_directly(params, on_done):
    done = {"n": 0}

    def hook(p):
        done["n"] += 1
        if done["n"] % len(params) == 1:
            on_done()
    return [p.register_post_accumulate_grad_hook(hook) for p in params]


def loses_a_handle(params, on_done):
    return run_solution("14.1")["once_per_backward"](params, on_done)[:-1]


def no_handles(params, on_done):
    run_solution("14.1")["once_per_backward"](params, on_done)


def handles_as_names(params, on_done):
    run_solution("14.1")["once_per_backward"](params, on_done)
    return ["handle"] * len(params)


def never_calls(params, on_done):
    return [p.register_post_accumulate_grad_hook(lambda p: None) for p in params]


def raises_in_hook(params, on_done):
    return [p.register_post_accumulate_grad_hook(lambda p: on_done(p)) for p in params]


def blank(params, on_done):
    pass


def test_14_1_accepts_right_answers():
    assert verdict("14.1", run_solution("14.1")["once_per_backward"]) == "correct"
    assert verdict("14.1", via_tensor_hooks) == "correct"
    assert judged("14.1", blank) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (every_hook_queues, "not-once-per-pass"), (calls_directly, "grads-not-ready"), (loses_a_handle, "handle-missing"),
    (flag_reset_by_callback, "stuck-after-error"), (counts_to_all, "unused-parameter"),
    (no_handles, "returned-none"), (handles_as_names, "not-handles"), (never_calls, "never-called"),
    (raises_in_hook, "raised-in-backward"), (3, "not-a-function")])
def test_14_1_rejects_wrong_answers(answer, reason):
    assert judged("14.1", answer) == ("wrong", reason)


# ---- 14.2 the first non-finite op --------------------------------------------------------------

class Finder(TorchDispatchMode):
    """Records (phase, key(func)) of ops whose output the test `bad` judges non-finite."""

    def __init__(self, key=lambda f: f.overloadpacket.__name__, bad=lambda t: not torch.isfinite(t).all(),
                 phase=lambda: "backward" if torch._C._current_graph_task_id() != -1 else "forward"):
        super().__init__()
        self.key, self.bad, self.phase, self.found = key, bad, phase, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if any(isinstance(t, torch.Tensor) and t.is_floating_point() and self.bad(t) for t in outs):
            self.found.append((self.phase(), self.key(func)))
        return out


def answer_with(pick=lambda found: found[0] if found else None, **finder):
    def answer(fn):
        with Finder(**finder) as mode:
            fn()
        return pick(mode.found)
    return answer


def with_list(fn):  # right too: every op logged, then searched
    log = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            outs = out if isinstance(out, (tuple, list)) else (out,)
            log.append((torch._C._current_graph_task_id() != -1, func.overloadpacket.__name__,
                        all(torch.isfinite(t).all() for t in outs if isinstance(t, torch.Tensor) and t.is_floating_point())))
            return out
    with Log():
        fn()
    bad = [("backward" if in_backward else "forward", name) for in_backward, name, finite in log if not finite]
    return bad[0] if bad else None


def function_mode(fn):  # sees Python-level calls, none from backward
    found = []

    class F(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = getattr(func, "__name__", str(func))
            if (not found and not name.startswith("__") and isinstance(out, torch.Tensor) and out.is_floating_point()
                    and not torch.isfinite(out).all()):   # "__get__": reading .grad is seen too
                found.append(("forward", name))
            return out
    with F():
        fn()
    return found[0] if found else None


# backward's ops are not looked at
forward_only = answer_with(bad=lambda t: torch._C._current_graph_task_id() == -1 and not torch.isfinite(t).all())
nan_only = answer_with(bad=lambda t: torch.isnan(t).any())
inf_only = answer_with(bad=lambda t: torch.isinf(t).any())  # misses the NaN of sqrt(x < 0)
last_found = answer_with(pick=lambda found: found[-1] if found else None)
full_names = answer_with(key=str)
always_forward = answer_with(phase=lambda: "forward")


class InputFinder(TorchDispatchMode):
    """Looks at what each op is given instead of what it makes."""

    def __init__(self):
        super().__init__()
        self.first = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        given = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
        if self.first is None and any(torch.isinf(a).any() or torch.isnan(a).any() for a in given):
            self.first = ("backward" if torch._C._current_graph_task_id() != -1 else "forward",
                          func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def by_inputs(fn):
    with InputFinder() as mode:
        fn()
    return mode.first


def blank_find(fn):
    pass


def test_14_2_accepts_right_answers():
    assert verdict("14.2", run_solution("14.2")["first_nonfinite_op"]) == "correct"
    assert verdict("14.2", with_list) == "correct"
    assert judged("14.2", blank_find) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (full_names, "full-op-names"), (function_mode, "no-backward"), (forward_only, "no-backward"),
    (nan_only, "inf-missed"), (inf_only, "not-found"),
    (last_found, "not-first"), (by_inputs, "checked-inputs"), (always_forward, "phase"), (lambda fn: ["forward", "exp"], "not-a-pair"),
    (lambda fn: run_solution("14.2")["first_nonfinite_op"](fn) or ("forward", "tanh"), "expected-none")])
def test_14_2_rejects_wrong_answers(answer, reason):
    assert judged("14.2", answer) == ("wrong", reason)


def test_14_2_names_what_is_wrong():
    assert "`torch.isnan` misses inf" in full_verdict("14.2", nan_only).en
    assert "a `TorchFunctionMode` does not see" in full_verdict("14.2", function_mode).en


# ---- 14.3 a comm hook with state (each check runs two gloo processes) ----------------------------

def after_division(state, bucket):
    state["calls"] = state["calls"] + 1
    state["values"] = state["values"] + bucket.buffer().numel()
    world = dist.get_world_size()
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0] / world)


def counts_parameters(state, bucket):
    state["calls"] += 1
    state["values"] += len(bucket.parameters())
    grads = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(grads, async_op=True).get_future().then(lambda f: f.value()[0])


def no_state(state, bucket):
    grads = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(grads, async_op=True).get_future().then(lambda f: f.value()[0])


def sums(state, bucket):
    state["calls"] += 1
    state["values"] += bucket.buffer().numel()
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])


def halves_before_and_after(state, bucket):  # divided by the world size twice: the mean halved
    state["calls"] += 1
    state["values"] += bucket.buffer().numel()
    world = dist.get_world_size()
    fut = dist.all_reduce(bucket.buffer() / world, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0].div(world))


def future_of_a_list(state, bucket):  # all_reduce's own Future completes with [tensor], not the tensor
    state["calls"] += 1
    state["values"] += bucket.buffer().numel()
    grads = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(grads, async_op=True).get_future()


def returns_tensor(state, bucket):
    state["calls"] += 1
    state["values"] += bucket.buffer().numel()
    return bucket.buffer()


def blank_hook(state, bucket):
    pass


def test_14_3_accepts_right_answers():
    assert verdict("14.3", run_solution("14.3")["counting_mean_hook"]) == "correct"
    assert verdict("14.3", after_division) == "correct"
    assert judged("14.3", blank_hook) == ("not solved", "blank")
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("answer, reason", [
    (counts_parameters, "values-not-counted"), (no_state, "calls-not-counted"), (sums, "not-mean"),
    (halves_before_and_after, "divided-twice"),
    (returns_tensor, "not-a-future"), (future_of_a_list, "future-of-list"), ("hook", "not-a-function")])
def test_14_3_rejects_wrong_answers(answer, reason):
    assert judged("14.3", answer) == ("wrong", reason)
    assert multiprocessing.active_children() == []


def test_14_3_says_how_to_get_one_tensor_out_of_the_future():
    assert ".then(lambda fut: fut.value()[0])" in full_verdict("14.3", future_of_a_list).en


# ---- 14.4 a hook that sees FSDP2's full weight (each check runs two gloo processes) ------------------

def by_prepended_forward_hook(module, record):  # right too: a forward hook in front of FSDP's free
    return [module.register_forward_hook(lambda m, args, out: record(m.weight.detach().clone()), prepend=True)]


def plain_forward_hook(module, record):  # runs after FSDP's free: sees the shard
    return module.register_forward_hook(lambda m, args, out: record(m.weight.detach().clone()))


def prepended_pre_hook(module, record):  # runs before FSDP's gather: sees the shard
    return module.register_forward_pre_hook(lambda m, args: record(m.weight.detach().clone()), prepend=True)


def no_copy(module, record):  # the full weight itself, whose storage FSDP2 frees after forward
    return module.register_forward_pre_hook(lambda m, args: record(m.weight))


def twice_per_forward(module, record):
    return [module.register_forward_pre_hook(lambda m, args: record(m.weight.detach().clone())),
            module.register_forward_hook(lambda m, args, out: record(m.weight.detach().clone()), prepend=True)]


def keeps_one(module, record):
    return twice_per_forward(module, record)[:1]


def raises_in_forward(module, record):
    def look(module, args):
        raise ValueError("no weight today")
    return module.register_forward_pre_hook(look)


class Unremovable:
    def remove(self):
        raise RuntimeError("cannot remove")


def remove_raises(module, record):  # fails outside the learner's call and the steps: the worker itself fails
    run_solution("14.4")["watch_full_weight"](module, record)
    return Unremovable()


def waits_for_ever(module, record):
    import threading
    return module.register_forward_pre_hook(lambda m, a: threading.Event().wait())


def blank_watch(module, record):
    pass


def test_14_4_accepts_right_answers():
    assert verdict("14.4", run_solution("14.4")["watch_full_weight"]) == "correct"
    assert verdict("14.4", by_prepended_forward_hook) == "correct"
    assert judged("14.4", blank_watch) == ("not solved", "blank")
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("answer, reason", [
    (plain_forward_hook, "sees-shard"), (prepended_pre_hook, "sees-shard"), (no_copy, "not-cloned"),
    (twice_per_forward, "once-per-forward"), (keeps_one, "once-per-forward"),
    (lambda module, record: module.register_forward_pre_hook(lambda m, a: None), "never-called"),
    (lambda module, record: None if module.register_forward_pre_hook(lambda m, a: None) else None, "returned-none"),
    (lambda module, record: module.register_forward_pre_hook(lambda m, a: record(m.weight.detach() * 2)), "wrong-values"),
    (lambda module, record: 1 / 0, "raised"), (raises_in_forward, "raised-in-step"), (remove_raises, "fsdp-failed"),
    ("watch", "not-a-function")])
def test_14_4_rejects_wrong_answers(answer, reason):
    assert judged("14.4", answer) == ("wrong", reason)
    assert multiprocessing.active_children() == []


def test_14_4_a_hook_that_never_returns_is_stopped_at_the_deadline(monkeypatch):
    # a pure wait: the workers reach the hook within a few seconds even under load, so 8 s still waits on the hook
    from hooklab.course.exercises import _comm
    monkeypatch.setattr(_comm, "DEADLINE", 8)
    result = full_verdict("14.4", waits_for_ever, strict=True)
    assert (result.status, result.reason) == ("wrong", "never-completes")
    assert "within 8 s" in result.en
    assert multiprocessing.active_children() == []
