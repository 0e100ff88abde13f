"""explain_hook's codes on the cases it used to get wrong, each against a plain PyTorch counter inside the hook, and
explain_hook(module): the module object instead of its name, or alone."""
from __future__ import annotations

import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch import nn

from hooklab import explain_hook
from hooklab._explain_facts import contradictions
from hooklab.explain import CODES

pytestmark = pytest.mark.timeout(120)


def counter(log, tag):
    def hook(*args):
        log.append(tag)
    return hook


def two():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))


def test_a_module_hook_and_a_tensor_hook_from_one_factory_are_told_apart():
    m, log = two(), []
    m[0].register_forward_hook(counter(log, "fwd"))
    m[1].weight.register_hook(counter(log, "w"))
    x = torch.randn(3, 4)
    r = explain_hook(m, "0", run=lambda: m(x).sum().backward())
    assert log.count("fwd") == 1 and log.count("w") == 1
    assert r.fired == {"counter.hook (forward)": {"the module": 1}}
    assert r.codes == ["fired"] and not any("more than once" in x for x in r.reasons)


def test_the_module_object_instead_of_its_name():
    m, log = two(), []
    m[1].register_forward_hook(counter(log, "fwd"))
    x = torch.randn(3, 4)
    by_name = explain_hook(m, "1", run=lambda: m(x))
    by_object = explain_hook(m, m[1], run=lambda: m(x))
    assert by_object.name == by_name.name == "1" and by_object.codes == by_name.codes == ["fired"]
    assert log == ["fwd", "fwd"]


def test_the_module_alone_is_the_model_and_the_module():
    m, log = two(), []
    m[0].register_forward_hook(counter(log, "fwd"))
    x = torch.randn(3, 4)
    r = explain_hook(m[0], run=lambda: m(x))
    assert r.calls == 1 and r.codes == ["fired"] and log == ["fwd"]
    assert "the Linear passed" in r.reasons[0]


def test_the_model_alone_is_refused_when_a_module_inside_is_hooked():
    m = two()
    m[1].register_forward_hook(counter([], "fwd"))
    with pytest.raises(ValueError, match=r"explain_hook\(model, '1', run=\.\.\.\)"):
        explain_hook(m, run=lambda: m(torch.randn(3, 4)))
    with pytest.raises(ValueError, match="not inside the model"):
        explain_hook(m, nn.Linear(4, 4), run=lambda: None)
    with pytest.raises(TypeError, match="a name from model.named_modules"):
        explain_hook(m, 3, run=lambda: None)


def test_a_pool_started_before_the_step_is_watched():
    m, log = two(), []
    m[0].register_forward_hook(lambda mod, a, o: log.append(threading.current_thread().name))
    pool = ThreadPoolExecutor(2, thread_name_prefix="pool")
    try:
        list(pool.map(lambda _i: None, range(4)))  # its threads exist before the step
        x = torch.randn(4, 4)
        r = explain_hook(m, "0", run=lambda: list(pool.map(m, x.chunk(2))))
        assert len(log) == 2 and all(n.startswith("pool") for n in log)
        assert r.calls == 2 and "threads" in r.codes and "several_calls" in r.codes
        # the profile function is gone from the pool's threads afterwards
        seen = pool.submit(lambda: __import__("sys").getprofile()).result()
        assert seen is None
    finally:
        pool.shutdown()


def test_calls_from_pool_threads_are_counted_exactly_whatever_the_thread_switches():
    """The count of calls made from a pool's threads is exact, also when threads switch as often as they can (what
    ran before in the process decides when they switch: the count once came out one short in a full run)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    pool = ThreadPoolExecutor(4, thread_name_prefix="pool")
    try:
        list(pool.map(lambda _i: None, range(8)))
        for _ in range(20):
            m, log = two(), []
            m[0].register_forward_hook(lambda mod, a, o: log.append(1))
            r = explain_hook(m, "0", run=lambda: list(pool.map(m, torch.randn(8, 4).chunk(4))))
            assert (len(log), r.calls) == (4, 4)
    finally:
        sys.setswitchinterval(interval)
        pool.shutdown()


def test_a_pool_thread_busy_when_the_step_starts_takes_the_profile_function_before_the_steps_tasks():
    """A pool thread still running an earlier task when the step gives the pool its tasks takes the profile function
    once it is free, before any task of the step: its calls are counted. (The other thread once gave up waiting for it
    after 2 s and took its turn, so that a loaded machine lost calls: order 23 of the gate found it.)"""
    pool = ThreadPoolExecutor(2, thread_name_prefix="pool")
    both = threading.Barrier(2)
    free = threading.Event()
    timer = threading.Timer(3.0, free.set)  # longer than the 2 s the other thread used to wait
    try:
        list(pool.map(lambda _i: both.wait(timeout=30), range(2)))  # the pool's two threads exist before the step
        pool.submit(free.wait, 30)  # one of them busy when the step starts
        timer.start()
        m, log = two(), []
        m[0].register_forward_hook(lambda mod, a, o: log.append(threading.current_thread().name))
        pairs = threading.Barrier(2)  # each pair of the step's tasks runs in both threads at once

        def task(chunk):
            pairs.wait(timeout=30)
            return m(chunk)
        r = explain_hook(m, "0", run=lambda: list(pool.map(task, torch.randn(8, 4).chunk(4))))
        assert len(set(log)) == 2 and len(log) == 4  # both threads called the model
        assert r.calls == 4 and "threads" in r.codes
    finally:
        timer.cancel()
        free.set()
        pool.shutdown()


def test_a_thread_started_during_the_step_keeps_nothing_of_the_model_after_it():
    """A thread the step starts and leaves running (a progress bar's monitor, a prefetcher) got explain_hook's profile
    function, which Python 3.11 cannot take back from another thread: after the step it must hold nothing, or the
    model and its hooks stay alive as long as the thread."""
    import gc
    import weakref

    stop, started = threading.Event(), threading.Event()

    def monitor():
        started.set()
        while not stop.wait(0.01):
            len([])  # a Python call now and then, as a monitor thread makes

    threads = []

    def explained() -> weakref.ref:
        m = two()
        m[0].register_forward_hook(lambda mod, a, o: None)

        def step():
            t = threading.Thread(target=monitor, daemon=True)
            t.start()
            threads.append(t)
            started.wait(10)
            m(torch.randn(2, 4))

        explain_hook(m, "0", run=step)
        return weakref.ref(m)

    try:
        alive = explained()
        gc.collect()
        assert alive() is None, "the thread started in the step keeps the model alive"
    finally:
        stop.set()
        for t in threads:
            t.join(10)


def test_a_full_backward_hook_on_a_dict_output():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return {"h": self.fc(x)}

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            return self.block(x)["h"]

    net, log = Net(), []
    net.block.register_full_backward_hook(counter(log, "bwd"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = explain_hook(net, "block", run=lambda: net(torch.randn(2, 4)).sum().backward())
    assert log == [] and "dict_output" in r.codes and "fired" not in r.codes
    assert not any("not part of the loss" in x for x in r.reasons)


def test_a_parameter_swapped_on_conversion():
    m, log = two(), []
    m[0].weight.register_hook(counter(log, "w"))
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        m.double()
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)
    r = explain_hook(m, "0", run=lambda: m(torch.randn(3, 4, dtype=torch.float64)).sum().backward())
    assert log == [] and m[0].weight.grad is not None
    assert "parameter_replaced" in r.codes and "fired" not in r.codes


def test_a_hook_that_raises_is_named():
    m = two()

    def strict(module, args, output):
        raise ValueError("bad shape")
    m[0].register_forward_hook(strict)
    with pytest.raises(ValueError, match="bad shape") as info:
        explain_hook(m, "1", run=lambda: m(torch.randn(3, 4)))
    r = info.value.hooklab_explanation
    assert "hook_raised" in r.codes and "strict" in " ".join(r.reasons)
    assert not any("not reached" in x for x in r.reasons)


def test_a_global_hook_that_fired_on_it():
    m, log = two(), []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda mod, a, o: log.append(mod) if mod is m[0] else None)
    try:
        r = explain_hook(m, "0", run=lambda: m(torch.randn(3, 4)))
    finally:
        handle.remove()
    assert log == [m[0]] and "global_hook" in r.codes


def test_a_tied_parameter():
    m, log = two(), []
    extra = nn.Linear(4, 4, bias=False)
    extra.weight = m[0].weight
    m.add_module("extra", extra)
    m[0].weight.register_hook(counter(log, "w"))
    x = torch.randn(3, 4)
    r = explain_hook(m, "0", run=lambda: (m[1](m[0](x)) + m[1](m.extra(x))).sum().backward())
    assert log == ["w"] and "tied" in r.codes and "'extra.weight'" not in r.reasons[-1] and "extra.weight" in \
        " ".join(r.reasons)


def test_a_parametrization_under_parametrize_cached_is_said_to_run_once_per_context():
    """torch.nn.utils.parametrize.cached(): the parametrized weight is computed on its first access and reused, so a
    hook on the parametrization fires once for three calls of the model. Before, the doctor said only that its hooks
    fired as expected."""
    from torch.nn.utils import parametrize

    class Symmetric(nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).transpose(-1, -2)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    parametrize.register_parametrization(m[0], "weight", Symmetric())
    log = []
    m[0].parametrizations.weight[0].register_forward_hook(lambda mod, a, o: log.append(1))
    x = torch.randn(3, 4)

    def three_steps():
        for _ in range(3):
            m(x).sum().backward()

    def cached():
        with parametrize.cached():
            three_steps()
    r = explain_hook(m, "0.parametrizations.weight.0", run=cached)
    assert len(log) == 1 and "parametrize_cached" in r.codes, (r.codes, r.reasons)
    said = " ".join(r.reasons)
    assert "a parametrization of '0.weight': it ran 1 time(s) for 3 call(s) of the model; 3 of the model's 3 " \
        "call(s) ran under torch.nn.utils.parametrize.cached()" in said
    assert not contradictions(r.reasons)
    log.clear()
    r = explain_hook(m, "0.parametrizations.weight.0", run=three_steps)  # no cache: once per access
    assert len(log) == 3 and "parametrize_cached" not in r.codes, r.codes


def test_a_parametrization_of_a_module_called_twice_in_one_call_of_the_model_is_said_to_run_once():
    """One call of the model, the parametrized Linear called twice in it (one module at two places): under
    parametrize.cached() the parametrization ran once for the two uses. Before, the doctor compared its runs with the
    model's calls only (one and one) and said only that its hooks fired as expected (the doctor's sixth round)."""
    from torch.nn.utils import parametrize

    class Scale(nn.Module):
        def forward(self, w):
            return w * 1.0
    torch.manual_seed(0)
    shared = nn.Linear(4, 4)
    m = nn.Sequential(shared, nn.Tanh(), shared)
    parametrize.register_parametrization(shared, "weight", Scale())
    log = []
    shared.parametrizations.weight[0].register_forward_hook(lambda mod, a, o: log.append(1))
    x = torch.randn(3, 4)

    def cached():
        with parametrize.cached():
            m(x).sum().backward()
    r = explain_hook(m, "0.parametrizations.weight.0", run=cached)
    assert len(log) == 1 and "parametrize_cached" in r.codes, (r.codes, r.reasons)
    said = " ".join(r.reasons)
    assert "a parametrization of '0.weight': it ran 1 time(s) for 2 call(s) of '0', which uses the tensor, in 1 " \
        "call(s) of the model" in said, said
    assert not contradictions(r.reasons)


def test_every_code_is_documented():
    assert all(isinstance(v, str) and v for v in CODES.values())


def test_a_hooked_parameter_of_another_model_kept_elsewhere_is_not_called_replaced():
    # another model, kept alive, whose weight of the same shape carries a hook of its own (a leaked optimizer-in-
    # backward hook, say): the silent hook here is on the Parameter the step uses, in a branch the loss ignores
    kept, log = two(), []
    kept[0].weight.register_post_accumulate_grad_hook(lambda p: None)
    m = two()
    m[0].weight.register_hook(counter(log, "w"))
    x = torch.randn(3, 4)
    r = explain_hook(m, "0", run=lambda: (m[0](x).detach() @ m[1].weight.T).sum().backward())
    assert log == [] and m[0].weight.grad is None and kept[0].weight.requires_grad
    assert "parameter_replaced" not in r.codes and "fired" not in r.codes
    assert any("not part of the loss" in x for x in r.reasons), r.reasons


def test_a_hook_that_raises_under_torch_compile_is_named():
    # after Dynamo's graph break the hook runs as a rewritten copy of its code: still the hook that raised
    import torch._dynamo
    m, log = two(), []

    def strict(module, args, output):
        log.append(1)
        raise ValueError("bad shape")
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda mod, a, o: strict(mod, a, o) if mod is m[0] else None)
    compiled = torch.compile(m, backend="eager")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(ValueError, match="bad shape") as info:
                explain_hook(m, "0", run=lambda: compiled(torch.randn(3, 4)))
    finally:
        handle.remove()
        torch._dynamo.reset()
    assert log and "hook_raised" in info.value.hooklab_explanation.codes
    assert "step_raised" not in info.value.hooklab_explanation.codes


def _step_codes(m, name, hook_on, step):
    log = []
    hook_on(counter(log, "h"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = explain_hook(m, name, run=step)
    return len(log), r.codes


def test_two_backward_passes_over_one_call():
    m, x = two(), torch.randn(3, 4)

    def twice():
        loss = m(x).sum()
        loss.backward(retain_graph=True)
        loss.backward()
    n, codes = _step_codes(m, "0", m[0].register_full_backward_hook, twice)
    assert n == 2 and "several_passes" in codes and "several_calls" not in codes


def test_a_post_accumulate_hook_under_autograd_grad():
    m, x = two(), torch.randn(3, 4)
    n, codes = _step_codes(m, "0", m[0].weight.register_post_accumulate_grad_hook,
                           lambda: torch.autograd.grad(m(x).sum(), list(m.parameters())))
    assert n == 0 and "not_accumulated" in codes and "fired" not in codes


def test_backward_with_inputs_that_do_not_need_the_module():
    m, x = two(), torch.randn(3, 4)
    n, codes = _step_codes(m, "0", m[0].register_full_backward_hook,
                           lambda: m(x).sum().backward(inputs=list(m[1].parameters())))
    assert n == 0 and "outside_backward_inputs" in codes
    m, x = two(), torch.randn(3, 4)  # asked for its own weight: the pass goes through it
    n, codes = _step_codes(m, "0", m[0].register_full_backward_hook,
                           lambda: m(x).sum().backward(inputs=[m[0].weight]))
    assert n == 1 and "outside_backward_inputs" not in codes


def test_a_backward_hook_under_vmap():
    m, x = two(), torch.randn(3, 4)
    n, codes = _step_codes(m, "0", m[0].register_full_backward_hook,
                           lambda: torch.func.vmap(m)(x).sum().backward())
    assert n == 0 and "vmap" in codes


def test_parameters_that_functional_call_or_weight_norm_replaced():
    m, x = two(), torch.randn(3, 4)
    fresh = {k: v.detach().clone().requires_grad_() for k, v in m.named_parameters()}
    n, codes = _step_codes(m, "0", m[0].weight.register_hook,
                           lambda: torch.func.functional_call(m, fresh, (x,)).sum().backward())
    assert n == 0 and "parameter_replaced" in codes
    m = two()
    log = []
    m[0].weight.register_hook(counter(log, "w"))
    torch.nn.utils.parametrizations.weight_norm(m[0], "weight")
    r = explain_hook(m, "0", run=lambda: m(x).sum().backward())
    assert log == [] and "parameter_replaced" in r.codes


def test_a_parameter_hook_left_behind_is_named_while_the_modules_own_hooks_fire():
    """A tensor hook on a Parameter that load_state_dict(assign=True), or the deprecated torch.nn.utils.weight_norm,
    replaced: the module's own hooks (the user's forward hook, weight_norm's pre-hook) fire, the Parameter's never
    does. The doctor named the old Parameter only when the module had no hook of its own; with one it said "fired as
    expected" (and counted WeightNorm's pre-hook as the module's hook)."""
    x = torch.randn(3, 4)
    for own_hook in (False, True):
        for replace in ("assign", "weight_norm"):
            m, log = two(), []
            if own_hook:
                m[0].register_forward_hook(counter(log, "fwd"))
            old = m[0].weight
            old.register_hook(counter(log, "w"))
            if replace == "assign":
                m.load_state_dict({k: v.clone() for k, v in m.state_dict().items()}, assign=True)
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    torch.nn.utils.weight_norm(m[0], "weight")
            r = explain_hook(m, "0", run=lambda m=m: m(x).sum().backward())
            assert "w" not in log and log.count("fwd") == int(own_hook), (own_hook, replace)
            assert "parameter_replaced" in r.codes and "fired" not in r.codes, (own_hook, replace, r.codes)
            assert not any("fired as expected" in reason for reason in r.reasons), (own_hook, replace)
            if replace == "weight_norm":
                assert any("weight_g and weight_v" in reason for reason in r.reasons), r.reasons
            del old


def test_a_hooked_parameter_another_module_holds_is_not_taken_for_one_left_behind():
    """The false lead to avoid: a hooked Parameter of the same shape that another live module holds (a second model
    of another class) is not the module's old one; its own hook fired, and that is the answer."""
    m, log = two(), []
    m[0].register_forward_hook(counter(log, "fwd"))
    other = nn.Linear(4, 4)
    other.weight.register_hook(counter(log, "w"))
    x = torch.randn(3, 4)
    r = explain_hook(m, "0", run=lambda: m(x).sum().backward())
    assert log == ["fwd"] and r.codes == ["fired"], r.codes
    del other


def test_a_module_whose_hooks_fired_is_answered_without_a_garbage_collection(monkeypatch):
    """The look for Parameters left behind runs for every module whose own hooks fire: without a hooked Parameter of
    its shapes outside the model it is one pass over the objects, and garbage is not collected (a full collection
    made every such answer 100 times slower, 0.19 s against 0.001 s of CPU with transformers imported)."""
    import gc

    torch.manual_seed(0)
    # a weight of a shape no other test makes, and no bias: a bias of shape (3,) that an earlier test's object still
    # holds with a hook on it made this test depend on which tests ran before it in its worker
    m, log = nn.Sequential(nn.Linear(101, 103, bias=False), nn.Linear(103, 2)), []
    m[0].register_forward_hook(counter(log, "fwd"))
    gc.collect()  # what earlier tests left as garbage is gone before the answer is watched
    outside = [o for o in gc.get_objects() if isinstance(o, nn.Parameter) and o.shape == (103, 101)
               and o is not m[0].weight and o._backward_hooks]
    assert not outside, "a hooked Parameter of the test's own shape outside its model: the test is not alone"
    collections = []
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(a) or 0)
    x = torch.randn(3, 101)
    r = explain_hook(m, "0", run=lambda: m(x).sum().backward())
    assert r.codes == ["fired"] and log == ["fwd"] and collections == []


def _replaced_how_in_a_group(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from hooklab._explain_facts import _replaced_how
    lin = torch.nn.Linear(4, 4)
    mesh = init_device_mesh("cpu", (world_size,))
    lin.weight = torch.nn.Parameter(distribute_tensor(lin.weight.detach(), mesh, [Shard(0)]))
    return _replaced_how(lin)


def test_what_replaced_a_parameter_is_read_from_the_parameter_itself():
    """The doctor names who replaced a hooked Parameter from what the module holds now: meta tensors (an offloading
    hook), a DTensor (FSDP2 or tensor parallelism: not a quantizer), a quantized tensor subclass, or nothing."""
    from hooklab._explain_facts import _replaced_how
    from hooklab.workers import run_workers

    plain = torch.nn.Linear(4, 4)
    assert _replaced_how(plain) == ""
    meta = torch.nn.Linear(4, 4, device="meta")
    assert "offloading hook" in _replaced_how(meta)
    from torchao.quantization import Int8WeightOnlyConfig, quantize_
    quantized = torch.nn.Sequential(torch.nn.Linear(4, 4))
    quantize_(quantized, Int8WeightOnlyConfig())
    assert "tensor subclass" in _replaced_how(quantized[0]) and "needs no gradient" in _replaced_how(quantized[0])
    said, = run_workers(_replaced_how_in_a_group, world_size=1, timeout=120)
    assert "weight is a DTensor" in said and "quantizer" not in said
