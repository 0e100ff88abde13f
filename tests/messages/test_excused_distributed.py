"""Attempts to reach the excused messages of DDP, ZeRO, FSDP (1 and 2), the memory tracker and the process group's C++
hooks: each runs what a user would write, in a one-process ``gloo`` group of this process (made and destroyed by the
attempt), and records what happened instead (see ``message_triggers.py``)."""
from __future__ import annotations

import contextlib
import warnings

import torch
import torch.distributed as dist
from torch import nn

from message_triggers import attempt, attempts_of


@contextlib.contextmanager
def _one_process_group():
    """A gloo process group of this process alone (world size 1), destroyed on the way out."""
    assert not dist.is_initialized(), "a process group is already there"
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def _plain_grads():
    m = _model()
    m(torch.ones(2, 3)).sum().backward()
    return [p.grad for p in m.parameters()]


def _same(grads, rtol=1e-5):
    return all(torch.allclose(a, b, rtol=rtol, atol=rtol) for a, b in zip(grads, _plain_grads()))


@attempt(["ddp-logger-must-not-be-none-cac9e7", "self-logger-must-not-be-none-dfbc5f",
          "delayed-gradient-buffer-is-not-initialized-5a6578", "empty-bucket-656455",
          "built-in-communication-hook-allreduce-is-registered-6d1e5c",
          "built-in-communication-hook-fp16-compress-is-registered-ac4bca", "gradient-comm-hook-8de512",
          "detected-at-least-one-parameter-gradient-is-not-the-734ed6", "reducer-attempts-to-delete-a-non-existing-hook-898b3f",
          "result-ispyobject-internal-assert-failed-at-w-pytorch-py-186bed",
          "result-istensorlist-internal-assert-failed-at-w-pytorch-bedd36",
          "unknown-built-in-ddp-comm-hook-type-is-provided-7c4457", "assuming-no-hooks-are-registered-d0f4ed",
          "expect-autograd-hooks-internal-assert-failed-at-w-pytorc-8885d6", "expected-the-hook-result-is-a-pyobject-dab1d0",
          "expected-the-hook-result-is-either-a-tensor-or-b4b1fa",
          "grad-accumulator-del-post-hook-key-internal-assert-faile-d04ee1"],
         outcome="DDP in one gloo process (built-in ALLREDUCE and FP16_COMPRESS hooks, a Python hook, static graph, "
                 "a join, delayed all-reduce): gradients as without DDP (fp16 compression: to 1e-2)")
def ddp_with_every_kind_of_communication_hook():
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP

    def python_hook(state, bucket):
        future = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future
    same = True
    with _one_process_group():
        for setup in ("allreduce", "fp16", "python", "static", "delayed"):
            model = _model()
            delayed = {"delay_all_reduce_named_params": list(model.named_parameters())[:2],
                       "param_to_hook_all_reduce": model[2].weight} if setup == "delayed" else {}
            ddp = DDP(model, static_graph=setup == "static", **delayed)
            if setup == "allreduce":
                ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
            elif setup == "fp16":
                ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.FP16_COMPRESS)
            elif setup == "python":
                ddp.register_comm_hook(None, python_hook)
            with Join([ddp]):
                for _ in range(2):
                    ddp.zero_grad()
                    ddp(torch.ones(2, 3)).sum().backward()
            same &= _same([p.grad for p in ddp.module.parameters()], rtol=1e-2 if setup == "fp16" else 1e-5)
            del ddp
    return ("DDP in one gloo process (built-in ALLREDUCE and FP16_COMPRESS hooks, a Python hook, static graph, a join, "
            "delayed all-reduce): gradients " + ("as without DDP (fp16 compression: to 1e-2)" if same else "differ"))


@attempt(["all-reduce-future-for-bucket-not-saved-on-rank-a8aa33", "assigned-ranks-per-bucket-is-not-fully-constructed-d938f3",
          "bucket-index-was-not-assigned-to-rank-a7fe55", "bucket-indices-are-not-in-incremental-order-08cb84",
          "bucket-indices-do-not-start-from-0-01e789", "bucket-should-be-assigned-to-at-least-one-rank-456ec4",
          "overlapping-ddp-with-zero-only-supports-a-single-paramet-6eb8d4",
          "broadcast-params-from-rank-should-not-be-used-if-2b81a2",
          "class-must-implement-method-step-param-ab13c3"],
         outcome="Gloo backend using Overlapping DDP with ZeRO may meet hangs")
def zero_overlapped_with_ddp_on_gloo():
    from torch.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook import hook_with_zero_step
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    with _one_process_group():
        for groups in (1, 2):
            ddp = DDP(_model())
            params = list(ddp.parameters())
            param_groups = [{"params": params}] if groups == 1 else [{"params": params[:2]}, {"params": params[2:]}]
            zero = ZeroRedundancyOptimizer(param_groups, torch.optim.SGD, lr=0.1, overlap_with_ddp=True)
            ddp.register_comm_hook(None, hook_with_zero_step(allreduce_hook, ddp, zero))
            for _ in range(3):
                ddp(torch.ones(2, 3)).sum().backward()
            del ddp, zero


@attempt(["expected-acc-grad-to-be-set-e821be", "expected-flat-param-to-be-set-dd0790", "expected-inp-tensors-to-be-set-ad7093",
          "expects-0-or-1-shard-per-rank-but-got-b0efc2", "failed-to-clone-tensor-with-name-on-rank-this-8fedac",
          "fsdp-assumes-is-in-the-state-dict-but-the-6ff5a5", "fsdp-does-not-support-gradients-of-gradients-a75893",
          "load-local-state-dict-assume-one-shard-per-shardedtensor-c8e7bb",
          "load-sharded-state-dict-can-only-be-called-when-aea787", "local-shard-size-and-the-tensor-in-the-state-6b5cb8",
          "local-state-dict-can-only-be-used-when-parameters-4a93b7",
          "no-flatparameter-in-state-dict-for-this-fsdp-instance-1f55f9",
          "sharded-state-dict-can-only-be-used-when-parameters-cd0c84", "should-have-returned-early-f1ab4c",
          "tensors-in-local-state-dict-should-be-shardedtensor-89e8fa",
          "expects-backward-pre-or-backward-post-state-but-got-c57456", "expects-to-have-saved-tensor-for-aa7bfb",
          "invalid-post-backward-hook-state-3e91ed", "the-grad-fn-is-needed-to-access-the-accumulategrad-6dfc2e"],
         outcome="FSDP (1) in one process: two training steps (one layer frozen), full, local and sharded state_dicts "
                 "saved and loaded")
def fsdp1_state_dicts_and_double_backward():
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType
    with _one_process_group(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FSDP's own notes on a world of one
        frozen = _model()
        frozen[0].requires_grad_(False)
        for module in (FSDP(frozen, device_id=torch.device("cpu"), use_orig_params=True),
                       FSDP(_model(), device_id=torch.device("cpu"), use_orig_params=False)):
            for _ in range(2):
                module(torch.ones(2, 3)).sum().backward()
        model = FSDP(_model(), device_id=torch.device("cpu"), use_orig_params=False)
        x = torch.ones(2, 3, requires_grad=True)
        y = model(x).sum()
        (g,) = torch.autograd.grad(y, x, create_graph=True)
        with contextlib.suppress(RuntimeError):
            g.sum().backward()  # a gradient of a gradient
        for kind in (StateDictType.FULL_STATE_DICT, StateDictType.LOCAL_STATE_DICT, StateDictType.SHARDED_STATE_DICT):
            with FSDP.state_dict_type(model, kind):
                model.load_state_dict(model.state_dict())
    return ("FSDP (1) in one process: two training steps (one layer frozen), full, local and sharded state_dicts "
            "saved and loaded")


@attempt(["expected-at-most-1-param-group-for-backward-compatibilit-9b6b6e", "expected-is-root-to-be-true-6e994e",
          "expected-manual-backward-finalization-mode-to-be-set-351091", "expected-module-fqn-to-be-str-got-4b850d",
          "finalize-backward-must-be-called-after-backward-complete-5c14ac",
          "finalize-backward-must-be-called-after-the-first-forward-2741d5", "pre-save-pre-load-0bfca9"],
         outcome="FSDP2 in one process: trained, finalized by hand, state_dict saved and loaded")
def fsdp2_training_finalization_and_state_dict():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    with _one_process_group():
        mesh = init_device_mesh("cpu", (1,))
        model = _model()
        fully_shard(model[0], mesh=mesh)
        fully_shard(model[2], mesh=mesh)
        fully_shard(model, mesh=mesh)
        for manual in (False, True):
            model.set_manual_backward_finalization(manual) if hasattr(model, "set_manual_backward_finalization") \
                else None
            model(torch.ones(2, 3)).sum().backward()
            if manual and hasattr(model, "finalize_backward"):
                model.finalize_backward()
        model.load_state_dict(model.state_dict())
    return "FSDP2 in one process: trained, finalized by hand, state_dict saved and loaded"


@attempt(["module-is-none-skipping-post-bw-hook-f09d90", "module-is-none-skipping-pre-bw-hook-a20cf4"],
         outcome="MemTracker over forward and backward: peak memory recorded")
def mem_tracker_over_a_training_step():
    from torch.distributed._tools.mem_tracker import MemTracker
    model = _model()
    tracker = MemTracker()
    tracker.track_external(model)
    with tracker:
        model(torch.ones(2, 3)).sum().backward()
    return "MemTracker over forward and backward: peak memory " + ("recorded" if tracker.get_tracker_snapshot("peak")
                                                                 else "missing")


@attempt(["does-not-support-registeraborthook-1c32ae", "does-not-support-registercompletionhook-b7838e",
          "does-not-support-unregisteraborthook-3cc0b3", "does-not-support-unregistercompletionhook-8e8fe1",
          "flightrecorderhook-cannot-start-trace-dump-5a1d8a", "flightrecorderhook-dumping-trace-on-collective-failure-228b32",
          "flightrecorderhook-global-rank-changed-from-6ce9ff",
          "flightrecorderhook-no-global-rank-mapping-for-process-gr-8fcf70", "flightrecorderhook-no-trace-to-dump-9dfce2",
          "flightrecorderhook-null-process-group-2d0433", "flightrecorderhook-trace-dump-did-not-finish-within-4d084e",
          "flightrecorderhook-trace-dump-failed-0d2ca6", "flightrecorderhook-trace-dump-failed-6bb711",
          "healthcheckhook-null-process-group-41d345", "nancheckhook-null-process-group-901388",
          "trace-hook-execution-failed-6c2c4d"],
         outcome="the gloo group's hook methods from Python:")
def process_group_hooks_from_python():
    with _one_process_group():
        group = dist.group.WORLD
        names = sorted(n for n in dir(group) if "hook" in n.lower())
        backend = group._get_backend(torch.device("cpu"))
        backend_names = sorted(n for n in dir(backend) if "hook" in n.lower() or "abort" in n.lower())
        with contextlib.suppress(Exception):
            group._register_on_completion_hook(lambda info: None)  # gloo refuses it (a triggered message)
        t = torch.ones(2)
        dist.all_reduce(t)
        dist.barrier()
    return f"the gloo group's hook methods from Python: {names}; its backend's: {backend_names}"


test_attempt = attempts_of(__name__)
