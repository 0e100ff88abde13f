"""Notebook 14's checkers accept right answers written differently and reject the typical wrong ones."""
import multiprocessing
from collections import Counter

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from exercise_support import run_solution, verdict


# ---- 14.1 once per backward -------------------------------------------------------------------

def test_14_1():
    assert verdict("14.1", run_solution("14.1")["once_per_backward"]) == "correct"

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
        handles = run_solution("14.1")["once_per_backward"](params, on_done)
        return handles[:-1]

    def no_handles(params, on_done):
        run_solution("14.1")["once_per_backward"](params, on_done)
        return None

    def blank(params, on_done):
        pass

    assert verdict("14.1", via_tensor_hooks) == "correct"
    assert verdict("14.1", every_hook_queues) == "wrong"
    assert verdict("14.1", calls_directly) == "wrong"
    assert verdict("14.1", loses_a_handle) == "wrong"
    assert verdict("14.1", no_handles) == "wrong"
    assert verdict("14.1", blank) == "not solved"
    assert verdict("14.1", 3) == "wrong"


# ---- 14.2 count aten ops ------------------------------------------------------------------------

def test_14_2():
    assert verdict("14.2", run_solution("14.2")["count_ops"]) == "correct"

    class Plain(TorchDispatchMode):
        def __init__(self, key):
            super().__init__()
            self.key, self.counts = key, Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
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

    def off_by_one(fn):
        with Plain(lambda f: f.overloadpacket.__name__) as mode:
            fn()
        counts = dict(mode.counts)
        counts["addmm"] += 1
        return counts

    def blank(fn):
        pass

    assert verdict("14.2", with_list) == "correct"
    assert verdict("14.2", full_names) == "wrong"
    assert verdict("14.2", function_mode) == "wrong"
    assert verdict("14.2", off_by_one) == "wrong"
    assert verdict("14.2", lambda fn: [1, 2]) == "wrong"
    assert verdict("14.2", blank) == "not solved"


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


def test_14_3():
    assert verdict("14.3", run_solution("14.3")["counting_mean_hook"]) == "correct"
    assert verdict("14.3", after_division) == "correct"
    assert verdict("14.3", counts_parameters) == "wrong"
    assert verdict("14.3", no_state) == "wrong"
    assert verdict("14.3", sums) == "wrong"
    assert verdict("14.3", returns_tensor) == "wrong"   # not a Future
    assert verdict("14.3", blank_hook) == "not solved"
    assert verdict("14.3", "hook") == "wrong"
    assert multiprocessing.active_children() == []
