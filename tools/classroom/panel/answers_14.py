"""Honest answers to notebook 14's exercises (the panel: tools/classroom/panel/__init__.py)."""
from __future__ import annotations

import torch

from tools.classroom.panel import answer

# ---------------------------------------------------------------- 14.1: a callback that runs once per backward pass


@answer("14.1", right=True)
def once_per_backward_keyed_by_graph_task(params, on_done):
    queued_for = [None]  # the backward pass (graph task) a callback was last queued for

    def after_grad(p):
        task = torch._C._current_graph_task_id()
        if queued_for[0] != task:  # a new backward: a failed one never ran its callback, and that is fine
            queued_for[0] = task
            torch.autograd.graph.queue_callback(on_done)

    return [p.register_post_accumulate_grad_hook(after_grad) for p in params]


@answer("14.1", right=True)
def once_per_backward_with_a_callable_class(params, on_done):
    class OncePerBackward:
        def __init__(self, on_done):
            self.on_done, self.task = on_done, None

        def __call__(self, param):
            task = torch._C._current_graph_task_id()
            if task != self.task:
                self.task = task
                torch.autograd.graph.queue_callback(self.on_done)  # runs after every Node, all .grad written

    hook = OncePerBackward(on_done)
    handles = []
    for p in params:
        handles.append(p.register_post_accumulate_grad_hook(hook))
    return handles


@answer("14.1", mistake="count",
        says="calls on_done() directly from every parameter's post-accumulate-grad hook, so it runs once per "
             "parameter, before the other parameters' .grad are written, instead of once at the end")
def once_per_backward_calling_directly(params, on_done):
    return [p.register_post_accumulate_grad_hook(lambda p: on_done()) for p in params]


@answer("14.1", mistake="count",
        says="queues the end-of-backward callback from every parameter's hook with no flag, so on_done runs as many "
             "times as there are parameters in the backward")
def once_per_backward_queueing_every_time(params, on_done):
    def after_grad(p):
        torch.autograd.graph.queue_callback(on_done)

    return [p.register_post_accumulate_grad_hook(after_grad) for p in params]


@answer("14.1", mistake="stale-state",
        says="a flag set when the callback is queued is reset only by the callback itself, so after a backward that "
             "fails halfway (its callback never runs) the flag stays set and on_done never runs again")
def once_per_backward_with_a_flag_reset_by_the_callback(params, on_done):
    queued = [False]

    def done():
        queued[0] = False
        on_done()

    def after_grad(p):
        if not queued[0]:
            queued[0] = True
            torch.autograd.graph.queue_callback(done)

    return [p.register_post_accumulate_grad_hook(after_grad) for p in params]


@answer("14.1", mistake="wrong-hook-kind",
        says="uses a multi-grad hook over the parameters, which fires when their gradients are computed, before "
             "AccumulateGrad has written .grad, not at the end of the backward pass")
def once_per_backward_with_a_multi_grad_hook(params, on_done):
    handle = torch.autograd.graph.register_multi_grad_hook(list(params), lambda grads: on_done(), mode="all")
    return [handle]


@answer("14.1", mistake="count",
        says="counts post-accumulate-grad hooks up to the number of parameters before calling on_done, so a "
             "backward that leaves a parameter out never reaches the count")
def once_per_backward_counting_to_all_params(params, on_done):
    params = list(params)
    arrived = [0]

    def after_grad(p):
        arrived[0] += 1
        if arrived[0] == len(params):
            arrived[0] = 0
            on_done()

    return [p.register_post_accumulate_grad_hook(after_grad) for p in params]


# ---------------------------------------------------------------- 14.2: the first op with a non-finite output


def _floats(value):
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _floats(v)]
    return []


@answer("14.2", right=True)
def first_nonfinite_op_with_a_dispatch_mode(fn):
    from torch.utils._python_dispatch import TorchDispatchMode

    class FirstNonFinite(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.first = None

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if self.first is None and not all(bool(torch.isfinite(t).all()) for t in _floats(out)):
                phase = "backward" if torch._C._current_graph_task_id() != -1 else "forward"
                self.first = (phase, func.overloadpacket.__name__)
            return out

    with FirstNonFinite() as mode:
        fn()
    return mode.first


@answer("14.2", right=True)
def first_nonfinite_op_recording_every_op(fn):
    from torch.utils._python_dispatch import TorchDispatchMode

    ops = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            in_backward = torch._C._current_graph_task_id() != -1
            finite = all(torch.isfinite(t).all().item() for t in _floats(result))
            ops.append(("backward" if in_backward else "forward", func.overloadpacket.__name__, finite))
            return result

    with Record():
        fn()
    return next(((phase, name) for phase, name, finite in ops if not finite), None)


@answer("14.2", mistake="wrong-target",
        says="checks each op's inputs instead of its output, so it names the op after the one that made the first "
             "non-finite value")
def first_nonfinite_op_checking_inputs(fn):
    from torch.utils._python_dispatch import TorchDispatchMode

    class FirstNonFinite(TorchDispatchMode):
        first = None

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if self.first is None and not all(bool(torch.isfinite(t).all()) for t in _floats(list(args))):
                phase = "backward" if torch._C._current_graph_task_id() != -1 else "forward"
                self.first = (phase, func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with FirstNonFinite() as mode:
        fn()
    return mode.first


@answer("14.2", mistake="logic",
        says="checks only ops whose output is a single tensor and skips tuple outputs, so an op that returns a tuple "
             "holding the first non-finite value is passed over")
def first_nonfinite_op_single_tensors_only(fn):
    from torch.utils._python_dispatch import TorchDispatchMode

    found = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if (not found and isinstance(out, torch.Tensor) and out.is_floating_point()
                    and not torch.isfinite(out).all()):
                found.append(("backward" if torch._C._current_graph_task_id() != -1 else "forward",
                              func.overloadpacket.__name__))
            return out

    with Watch():
        fn()
    return found[0] if found else None


@answer("14.2", mistake="logic",
        says="overwrites the answer at every op with a non-finite output, so it returns the last such op instead of "
             "the first")
def first_nonfinite_op_keeping_the_last(fn):
    from torch.utils._python_dispatch import TorchDispatchMode

    found = {}

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not all(bool(torch.isfinite(t).all()) for t in _floats(out)):
                found["op"] = ("backward" if torch._C._current_graph_task_id() != -1 else "forward",
                               func.overloadpacket.__name__)
            return out

    with Watch():
        fn()
    return found.get("op")


@answer("14.2", mistake="no-return",
        says="the mode's __torch_dispatch__ runs the op and checks its output but does not return it, so every op "
             "yields None and fn() breaks")
def first_nonfinite_op_dropping_the_result(fn):
    from torch.utils._python_dispatch import TorchDispatchMode

    found = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not found and not all(bool(torch.isfinite(t).all()) for t in _floats(out)):
                found.append(("backward" if torch._C._current_graph_task_id() != -1 else "forward",
                              func.overloadpacket.__name__))

    with Watch():
        fn()
    return found[0] if found else None


@answer("14.2", mistake="other",
        says="names the op by its overload (func.__name__, such as 'exp.default') instead of its overload packet's "
             "name ('exp')")
def first_nonfinite_op_named_by_overload(fn):
    from torch.utils._python_dispatch import TorchDispatchMode

    class FirstNonFinite(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.first = None

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if self.first is None and not all(bool(torch.isfinite(t).all()) for t in _floats(out)):
                phase = "backward" if torch._C._current_graph_task_id() != -1 else "forward"
                self.first = (phase, func.__name__)
            return out

    with FirstNonFinite() as mode:
        fn()
    return mode.first


# ---------------------------------------------------------------- 14.3: a communication hook with state


@answer("14.3", right=True)
def counting_mean_hook_dividing_first(state, bucket):
    import torch.distributed as dist

    state["calls"] += 1
    state["values"] += bucket.buffer().numel()
    grads = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(grads, async_op=True).get_future().then(lambda fut: fut.value()[0])


@answer("14.3", right=True)
def counting_mean_hook_with_the_default_allreduce(state, bucket):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    state["calls"] = state.get("calls", 0) + 1
    state["values"] = state.get("values", 0) + bucket.buffer().numel()
    return default_hooks.allreduce_hook(None, bucket)  # the default process group; it divides by the world size


@answer("14.3", right=True)
def counting_mean_hook_dividing_after(state, bucket):
    import torch.distributed as dist

    state["calls"] += 1
    state["values"] += bucket.buffer().numel()
    world = dist.get_world_size()
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0] / world)


@answer("14.3", mistake="logic",
        says="all-reduces the bucket without dividing by the world size, so .grad becomes the sum of the processes' "
             "gradients instead of their mean")
def counting_mean_hook_summing(state, bucket):
    import torch.distributed as dist

    state["calls"] += 1
    state["values"] += bucket.buffer().numel()
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda fut: fut.value()[0])


@answer("14.3", mistake="count",
        says="adds the number of gradient tensors in the bucket (len(bucket.gradients())) to state['values'] "
             "instead of the number of elements")
def counting_mean_hook_counting_tensors(state, bucket):
    import torch.distributed as dist

    state["calls"] += 1
    state["values"] += len(bucket.gradients())
    grads = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(grads, async_op=True).get_future().then(lambda fut: fut.value()[0])


@answer("14.3", mistake="count",
        says="adds the number of parameters in the bucket to state['calls'] instead of 1 per call of the hook")
def counting_mean_hook_one_call_per_parameter(state, bucket):
    import torch.distributed as dist

    state["calls"] += len(bucket.parameters())
    state["values"] += bucket.buffer().numel()
    grads = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(grads, async_op=True).get_future().then(lambda fut: fut.value()[0])


@answer("14.3", mistake="logic",
        says="divides by the world size before the all-reduce and again after it, so .grad is the mean divided by "
             "the world size once more")
def counting_mean_hook_dividing_twice(state, bucket):
    import torch.distributed as dist

    world = dist.get_world_size()
    state["calls"] += 1
    state["values"] += bucket.buffer().numel()
    grads = bucket.buffer().div_(world)
    return dist.all_reduce(grads, async_op=True).get_future().then(lambda fut: fut.value()[0] / world)


# ---------------------------------------------------------------- 14.4: a hook that sees FSDP2's full weight


@answer("14.4", right=True)
def watch_full_weight_with_a_pre_hook(module, record):
    def see(mod, args):  # registered plainly after fully_shard: runs after FSDP's own pre-hook has gathered
        record(mod.weight.detach().clone())

    return module.register_forward_pre_hook(see)


@answer("14.4", right=True)
def watch_full_weight_with_a_prepended_forward_hook(module, record):
    def see(mod, args, output):  # prepend=True: before FSDP's forward hook frees the weight again
        with torch.no_grad():
            record(mod.weight.clone())

    return [module.register_forward_hook(see, prepend=True)]


@answer("14.4", mistake="wrong-hook-kind",
        says="uses a plain forward hook, which runs after FSDP's own forward hook has resharded the unit, so it "
             "records the sharded DTensor instead of the full weight")
def watch_full_weight_with_a_plain_forward_hook(module, record):
    def see(mod, args, output):
        record(mod.weight.detach().clone())

    return module.register_forward_hook(see)


@answer("14.4", mistake="other",
        says="registers the forward pre-hook with prepend=True, which puts it in front of FSDP's gathering pre-hook, "
             "so it records the shard")
def watch_full_weight_with_a_prepended_pre_hook(module, record):
    def see(mod, args):
        record(mod.weight.detach().clone())

    return module.register_forward_pre_hook(see, prepend=True)


@answer("14.4", mistake="detach-or-graph",
        says="records the gathered weight itself (detach() only, no copy): FSDP frees that storage after forward, so "
             "the recorded tensor cannot be read later")
def watch_full_weight_without_copying(module, record):
    def see(mod, args):
        record(mod.weight.detach())

    return module.register_forward_pre_hook(see)


@answer("14.4", mistake="detach-or-graph",
        says="copies the weight with clone() but does not detach it, so what it records is part of the autograd "
             "graph (requires grad, with a grad_fn) rather than a plain tensor")
def watch_full_weight_clone_with_graph(module, record):
    def see(mod, args):
        record(mod.weight.clone())

    return module.register_forward_pre_hook(see)


@answer("14.4", mistake="count",
        says="registers both a plain forward pre-hook and a prepended forward hook, each recording the full weight, "
             "so every forward pass calls record twice")
def watch_full_weight_twice(module, record):
    def before(mod, args):
        record(mod.weight.detach().clone())

    def after(mod, args, output):
        record(mod.weight.detach().clone())

    return [module.register_forward_pre_hook(before), module.register_forward_hook(after, prepend=True)]
