"""Notebook 10's checkers accept right answers written differently and reject the typical wrong ones."""
import multiprocessing

import torch
import torch.distributed as dist

from exercise_support import run_solution, verdict


# ---- 10.1 comm hook (each check runs two gloo processes) ---------------------------------------

def mean_hook_after(state, bucket):
    world = dist.get_world_size()
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0] / world)


def sum_hook(state, bucket):
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])


def bf16_hook(state, bucket):
    buf = bucket.buffer().to(torch.bfloat16).div_(dist.get_world_size())
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])


def blank_hook(state, bucket):
    pass


def test_10_1():
    assert verdict("10.1", run_solution("10.1")["mean_hook"]) == "correct"
    assert verdict("10.1", mean_hook_after) == "correct"
    assert verdict("10.1", sum_hook) == "wrong"     # not divided by the world size
    assert verdict("10.1", bf16_hook) == "wrong"    # returns bf16
    assert verdict("10.1", blank_hook) == "not solved"
    assert verdict("10.1", 3) == "wrong"
    assert multiprocessing.active_children() == []


# ---- 10.2 unscaled norms ----------------------------------------------------------------------

def test_10_2():
    assert verdict("10.2", run_solution("10.2")["unscaled_norm_hook"]) == "correct"

    def via_division_of_norm(scaler, norms):
        return lambda g: norms.append(g.norm().item() / scaler.get_scale())

    def scaled(scaler, norms):
        return lambda g: norms.append(g.norm().item())

    def modifies(scaler, norms):
        def hook(g):
            norms.append((g / scaler.get_scale()).norm().item())
            return g / scaler.get_scale()
        return hook

    def tensors(scaler, norms):
        return lambda g: norms.append((g / scaler.get_scale()).norm())

    def blank(scaler, norms):
        pass

    assert verdict("10.2", via_division_of_norm) == "correct"
    assert verdict("10.2", scaled) == "wrong"
    assert verdict("10.2", modifies) == "wrong"
    assert verdict("10.2", tensors) == "wrong"
    assert verdict("10.2", blank) == "not solved"


# ---- 10.3 prediction --------------------------------------------------------------------------

def test_10_3():
    assert verdict("10.3", run_solution("10.3")["my_runs"]) == "correct"
    assert verdict("10.3", []) == "not solved"
    assert verdict("10.3", [1, 2]) == "wrong"
    assert verdict("10.3", [3, 3]) == "wrong"
    assert verdict("10.3", [1.0, 3.0]) == "wrong"
    assert verdict("10.3", [1, 3, 0]) == "wrong"
