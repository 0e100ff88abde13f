"""Notebook 14's checkers accept right answers written differently and reject the typical wrong ones, each for
its reason."""
import multiprocessing
from collections import Counter

import pytest
import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from hooklab.course.exercises import verdict as full_verdict

from exercise_support import judged, run_solution, verdict


# ---- 14.1 once per backward -------------------------------------------------------------------

def via_tensor_hooks(params, on_done):  # tensor hooks run before .grad is written; the callback still waits
    pending = {"queued": False}

    def finish():
        pending["queued"] = False
        on_done()

    def hook(grad):
        if not pending["queued"]:
            pending["queued"] = True
            torch.autograd.graph.queue_callback(finish)
    return [p.register_hook(hook) for p in params]


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
    (no_handles, "returned-none"), (handles_as_names, "not-handles"), (never_calls, "never-called"),
    (raises_in_hook, "raised-in-backward"), (3, "not-a-function")])
def test_14_1_rejects_wrong_answers(answer, reason):
    assert judged("14.1", answer) == ("wrong", reason)


# ---- 14.2 count aten ops ------------------------------------------------------------------------

class Plain(TorchDispatchMode):
    def __init__(self, key, only_forward=False):
        super().__init__()
        self.key, self.only_forward, self.counts = key, only_forward, Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not (self.only_forward and torch._C._current_graph_task_id() != -1):
            self.counts[self.key(func)] += 1
        return func(*args, **(kwargs or {}))


def with_list(fn):  # a different way to the same numbers
    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))
    with Log():
        fn()
    return dict(Counter(seen))


def full_names(fn):
    with Plain(str) as mode:
        fn()
    return dict(mode.counts)


def function_mode(fn):
    counts = Counter()

    class F(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            counts[getattr(func, "__name__", str(func))] += 1
            return func(*args, **(kwargs or {}))
    with F():
        fn()
    return dict(counts)


def forward_only(fn):  # skips the ops the autograd engine runs
    with Plain(lambda f: f.overloadpacket.__name__, only_forward=True) as mode:
        fn()
    return dict(mode.counts)


def off_by_one(fn):
    with Plain(lambda f: f.overloadpacket.__name__) as mode:
        fn()
    counts = dict(mode.counts)
    counts["addmm"] += 1
    return counts


def blank_count(fn):
    pass


def test_14_2_accepts_right_answers():
    assert verdict("14.2", run_solution("14.2")["count_ops"]) == "correct"
    assert verdict("14.2", with_list) == "correct"
    assert judged("14.2", blank_count) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (full_names, "full-op-names"), (function_mode, "function-mode"), (forward_only, "no-backward-ops"),
    (off_by_one, "counts"), (lambda fn: [1, 2], "not-a-dict")])
def test_14_2_rejects_wrong_answers(answer, reason):
    assert judged("14.2", answer) == ("wrong", reason)


def test_14_2_names_the_counts_that_differ():
    assert "addmm: yours " in full_verdict("14.2", off_by_one).en


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
    (returns_tensor, "not-a-future"), ("hook", "not-a-function")])
def test_14_3_rejects_wrong_answers(answer, reason):
    assert judged("14.3", answer) == ("wrong", reason)
    assert multiprocessing.active_children() == []
