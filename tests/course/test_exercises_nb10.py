"""Notebook 10's checkers accept right answers written differently and reject the typical wrong ones, each for
its reason."""
import multiprocessing

import pytest
import torch
import torch.distributed as dist

from exercise_support import judged, run_solution, verdict
from hooklab.course.exercises import _comm, nb10, verdict as full_verdict

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


def zeroing_hook(state, bucket):
    return dist.all_reduce(bucket.buffer().mul_(0), async_op=True).get_future().then(lambda f: f.value()[0])


def raising_hook(state, bucket):
    raise ValueError("no bucket today")


def forgets_return(state, bucket):
    dist.all_reduce(bucket.buffer().div_(dist.get_world_size()), async_op=True)


def returns_tensor(state, bucket):
    return bucket.buffer()


def wrong_shape_hook(state, bucket):  # DDP itself fails on a result shaped unlike the bucket
    fut = torch.futures.Future()
    fut.set_result(torch.zeros(1))
    return fut


def never_done_hook(state, bucket):
    return torch.futures.Future()


def reduce_then_reduce_again(state, bucket):  # the mean, then summed over the processes once more
    buf = bucket.buffer()
    dist.all_reduce(buf)
    fut = dist.all_reduce(buf.div_(dist.get_world_size()), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def test_10_1_accepts_right_answers():
    assert verdict("10.1", run_solution("10.1")["mean_hook"]) == "correct"
    assert verdict("10.1", mean_hook_after) == "correct"
    assert judged("10.1", blank_hook) == ("not solved", "blank")
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("answer, reason", [
    (sum_hook, "sum"), (bf16_hook, "rounded"), (local_hook, "local"), (divided_twice_hook, "divided-twice"),
    (zeroing_hook, "other"), (raising_hook, "raised"), (forgets_return, "returned-none"),
    (returns_tensor, "not-a-future"), (wrong_shape_hook, "ddp-failed"), (3, "not-a-function"),
    (reduce_then_reduce_again, "reduced-twice")])
def test_10_1_rejects_wrong_answers(answer, reason):
    assert judged("10.1", answer) == ("wrong", reason)
    assert multiprocessing.active_children() == []


def test_10_1_names_what_is_wrong_with_each_answer():
    """Each wrong hook gets the message about ITS mistake (a hook that never communicates is not told to divide)."""
    local = full_verdict("10.1", local_hook).en
    assert "never communicated" in local and "divide" not in local
    assert "ValueError: no bucket today" in full_verdict("10.1", raising_hook).en


def test_10_1_a_future_that_never_completes_is_stopped_at_the_deadline(monkeypatch):
    # a pure wait: the two workers reach the hook within about a second, two or three under load (torch._dynamo,
    # which DDP imports, is imported before forking), so 8 s leaves a wide margin and still waits on the hook
    monkeypatch.setattr(_comm, "DEADLINE", 8)
    result = full_verdict("10.1", never_done_hook, strict=True)
    assert (result.status, result.reason) == ("wrong", "never-completes")
    assert "within 8 s" in result.en
    assert multiprocessing.active_children() == []


def test_10_1_in_a_kernel_that_ran_a_compiled_backward_says_to_restart_it():
    """After a compiled backward (autograd's worker threads started) no fork can run a backward, and the answer of a
    notebook cell runs only in a fork: the verdict says the answer was not checked and to restart the kernel, not
    that the checker may have a bug (a PicklingError from spawning workers for a function of __main__, before)."""
    import subprocess
    import sys

    from patience import hang_guard

    code = ("import torch\nfrom hooklab.course.exercises import verdict\n"
            "def mean_hook(state, bucket):\n"
            "    import torch.distributed as dist\n"
            "    tensor = bucket.buffer().div_(dist.get_world_size())\n"
            "    return dist.all_reduce(tensor, async_op=True).get_future().then(lambda f: f.value()[0])\n"
            "model = torch.compile(torch.nn.Linear(2, 2), backend='aot_eager')\n"
            "model(torch.ones(1, 2)).sum().backward()\n"
            "result = verdict('10.1', mean_hook)\n"
            "print(result.status, result.reason)\nprint(result.en)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=hang_guard(120),
                         check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    status_reason, text = run.stdout.split("\n", 1)
    assert tuple(status_reason.split()) == ("wrong", "cannot-fork"), run.stdout
    assert "was not checked" in text and "Restart the kernel" in text, run.stdout


def test_10_1_what_grad_is_names_each_mistake():
    """The classification behind the verdicts, also for the .grad states this torch's DDP never produces (it
    copies the Future's result into the float32 .grad, and fails on a None result): "no-grad", "not-float32"."""
    local, mean = torch.tensor([1.0, 2.0]), torch.tensor([2.0, 3.0])
    cases = {"mean": mean, "local": local, "sum": mean * 2, "divided-twice": mean / 2, "rounded": mean * 1.01,
             "other": -mean, "no-grad": None, "not-float32": mean.double()}
    assert {nb10._grad_is(grad, local, mean, 2): kind for kind, grad in cases.items()} == {k: k for k in cases}


# ---- 10.2 unscaled norms ----------------------------------------------------------------------

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


def twice_each(scaler, norms):
    return lambda g: norms.extend([(g / scaler.get_scale()).norm().item()] * 2)


def squared_norms(scaler, norms):
    return lambda g: norms.append((g / scaler.get_scale()).square().sum().item())


def squared_by_vector_norm(scaler, norms):
    return lambda g: norms.append(torch.linalg.vector_norm(g / scaler.get_scale()).pow(2).item())


def max_norms(scaler, norms):
    return lambda g: norms.append((g / scaler.get_scale()).abs().max().item())


def no_hook(scaler, norms):
    return "hook"


def raises_in_backward(scaler, norms):
    return lambda g: norms.append(g.norm().item() / scaler.scale)


def blank(scaler, norms):
    pass


def test_10_2_accepts_right_answers():
    assert verdict("10.2", run_solution("10.2")["unscaled_norm_hook"]) == "correct"
    assert verdict("10.2", via_division_of_norm) == "correct"
    assert judged("10.2", blank) == ("not solved", "blank")


@pytest.mark.parametrize("answer, reason", [
    (scaled, "still-scaled"), (modifies, "changes-gradient"), (tensors, "not-a-float"),
    (twice_each, "one-per-parameter"), (squared_norms, "squared"),
    (squared_by_vector_norm, "squared"), (no_hook, "not-a-hook"), (max_norms, "norm"),
    (raises_in_backward, "raised-in-backward")])
def test_10_2_rejects_wrong_answers(answer, reason):
    assert judged("10.2", answer) == ("wrong", reason)


# ---- 10.3 prediction --------------------------------------------------------------------------

def test_10_3():
    assert verdict("10.3", run_solution("10.3")["my_runs"]) == "correct"
    assert judged("10.3", []) == ("not solved", "blank")
    assert judged("10.3", [1.0, 3.0]) == ("wrong", "two-ints")
    assert judged("10.3", [1, 3, 0]) == ("wrong", "two-ints")
    assert judged("10.3", [True, 3]) == ("wrong", "two-ints")
    assert judged("10.3", [3, 3]) == ("wrong", "runs")
    truth = run_solution("10.3")["my_runs"]
    assert judged("10.3", list(reversed(truth))) == ("wrong", "swapped")


def test_10_3_names_which_prediction_is_wrong():
    only_reentrant = full_verdict("10.3", [1, 2]).en
    assert "the reentrant 2 is off" in only_reentrant and "non-reentrant" not in only_reentrant
    only_plain = full_verdict("10.3", [3, 3]).en
    assert "the non-reentrant 3 is off" in only_plain and "the reentrant 3" not in only_plain
    both = full_verdict("10.3", [2, 2])
    assert "the non-reentrant 2 is off" in both.en and "the reentrant 2 is off" in both.en
    assert "非可重入的 2 不对" in both.zh and "；可重入的 2 不对" in both.zh
    for answer in ([1, 2], [3, 3]):  # the framework says "not right yet"; the message does not say it again
        zh, en = full_verdict("10.3", answer)[1:3]
        assert "not quite" not in en and not zh.startswith("不对")
