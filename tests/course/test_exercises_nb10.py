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


def local_hook(state, bucket):  # never communicates: each rank keeps its own gradient
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def divided_twice_hook(state, bucket):
    buf = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0] / dist.get_world_size())


def message(key, answer):
    import hooklab.course.exercises
    status, zh, en = hooklab.course.exercises.verdict(key, answer)
    assert status == "wrong" and zh and zh != en
    return en


def test_10_1():
    assert verdict("10.1", run_solution("10.1")["mean_hook"]) == "correct"
    assert verdict("10.1", mean_hook_after) == "correct"
    assert verdict("10.1", blank_hook) == "not solved"
    assert verdict("10.1", 3) == "wrong"
    assert multiprocessing.active_children() == []


def test_10_1_names_what_is_wrong_with_each_answer():
    """Each wrong hook gets the message about ITS mistake (a hook that never communicates is not told to divide)."""
    assert "the **sum** of the two processes' gradients" in message("10.1", sum_hook)
    assert "off by low-precision rounding" in message("10.1", bf16_hook)
    local = message("10.1", local_hook)
    assert "never communicated" in local and "divide" not in local
    assert "divided by the number of processes once more" in message("10.1", divided_twice_hook)
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
    assert verdict("10.3", [1.0, 3.0]) == "wrong"
    assert verdict("10.3", [1, 3, 0]) == "wrong"


def test_10_3_names_which_prediction_is_wrong():
    only_reentrant = message("10.3", [1, 2])
    assert "the reentrant 2 is off" in only_reentrant and "non-reentrant" not in only_reentrant
    only_plain = message("10.3", [3, 3])
    assert "the non-reentrant 3 is off" in only_plain and "the reentrant 3" not in only_plain
    both = message("10.3", [2, 2])
    assert "the non-reentrant 2 is off" in both and "the reentrant 2 is off" in both
    import hooklab.course.exercises
    for answer in ([1, 2], [3, 3]):  # the framework says "not right yet"; the message does not say it again
        zh, en = hooklab.course.exercises.verdict("10.3", answer)[1:]
        assert "not quite" not in en and not zh.startswith("不对")
