"""Trigger tests: the messages of DDP's communication hooks, ZeRO's DDP hook, FSDP (1 and 2) and the process group's
hooks. Most need a process group: they run together in two ``gloo`` processes (``hooklab.run_workers``, one call
with a deadline), which return what each trigger showed; the rest need none."""
from __future__ import annotations

import pickle

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint

from message_triggers import fix, fix_all, fixes_of, outcome, registered_fixes, shown, trigger, trigger_all, triggers_of

IDS = {  # message id -> the trigger below (run inside the workers)
    "register-comm-hook-or-register-builtin-comm-hook-can-873e55": "ddp_comm_hook_registered_twice",
    "register-builtin-comm-hook-or-register-comm-hook-can-fad730": "ddp_builtin_comm_hook_after_a_python_one",
    "ddp-communication-hook-s-callback-must-return-a-torch-c5f46f": "ddp_comm_hook_returns_a_tensor",
    "hook-must-be-callable-got-2b5b1e": "ddp_buffer_comm_hook_not_callable",
    "expected-to-mark-a-variable-ready-only-once-this-558255": "ddp_reentrant_checkpoint_of_a_shared_layer",
    "zeroredundancyoptimizer-must-be-constructed-with-overlap-18d34f": "zero_hook_without_overlap_with_ddp",
    "gloo-backend-using-overlapping-ddp-with-zero-may-meet-dfe3c6": "zero_hook_overlapping_on_gloo",
    "note-process-group-will-be-set-to-a-default-0115ac": "powersgd_state_unpickled",
    "only-processgrouppnccl-supports-oncompletion-hook-but-go-ffa08c": "completion_hook_on_a_gloo_group",
    "a-communication-hook-is-already-registered-71f8b0": "fsdp1_comm_hook_registered_twice",
    "the-communication-hook-must-be-callable-but-got-6a743c": "fsdp1_comm_hook_not_callable",
    "register-comm-hook-can-only-be-called-on-a-9bc4c5": "fsdp1_comm_hook_on_a_nested_instance",
    "when-using-no-shard-for-shardingstrategy-full-state-dict-bc51e7": "fsdp1_sharded_state_dict_without_sharding",
    "when-using-no-shard-for-shardingstrategy-full-state-dict-e844eb": "fsdp1_load_sharded_state_dict_without_sharding",
    "requires-a-single-root-module-but-got-d84903": "fsdp2_two_roots",
    "set-manual-backward-finalization-must-be-called-on-the-f2ea54": "fsdp2_manual_finalization_set_on_a_child",
    "state-has-already-been-lazily-initialized-for-c4e97b": "fsdp2_child_run_before_the_root",
    "parameter-is-shared-with-a-parameter-already-managed-by-26e4a1": "fsdp2_tied_weight_in_two_groups",
    "reset-iter-state-must-be-called-on-the-root-e695dc": "fsdp2_reset_iter_state_on_a_child",
    "fsdp2-wrapped-module-returned-a-view-tensor-an-in-28b19f": "fsdp2_module_returns_a_view",
    "finalize-backward-requires-manual-backward-finalization-9db11a": "fsdp2_finalize_without_manual_mode",
    "finalize-backward-must-be-called-on-the-root-module-29bc65": "fsdp2_finalize_on_a_child",
    "the-previous-gradient-reduction-must-be-waited-on-before-d2e9b3": "fsdp2_finalize_twice_without_waiting",
    "the-previous-gradient-reduction-must-be-waited-on-before-a6b1bf": "fsdp2_forward_before_waiting",
    "this-gradient-reduction-handle-was-invalidated-f82fe7": "fsdp2_wait_after_reset",
    "reset-iter-state-cannot-reset-a-gradient-reduction-owned-2e3189": "fsdp2_reset_a_root_sharing_the_comm_context",
    "set-all-reduce-hook-is-not-supported-with-multiple-7d0446": "fsdp2_all_reduce_hook_with_two_param_groups",
    "all-reduce-hook-stream-is-specified-but-hook-itself-0bf58d": "fsdp2_all_reduce_hook_removed_its_stream_kept",
    "stream-cannot-be-set-when-using-native-hsdp-9968a5": "hsdp_all_reduce_hook_with_a_stream",
    "manual-backward-finalization-requires-all-reduce-for-par-3cbe44": "hsdp_manual_finalization_without_all_reduce",
    "manual-backward-finalization-does-not-support-partial-gr-9b4eba": "hsdp_manual_finalization_after_accumulating",
    "communication-hook-is-not-supported-for-hybrid-strategie-b5ef7e": "fsdp1_comm_hook_with_hybrid_sharding",
    "did-not-find-param-with-fqn-skipping-it-the-35a5c2": "fsdp1_sharded_load_of_a_state_dict_missing_a_key",
    "fsdp-firing-post-backward-hooks-for-parameters-274aa2": "fsdp1_post_backward_hooks_under_debug_info",
}

WORLD_SIZE = 2
X = None


def _ddp(**options):
    from torch.nn.parallel import DistributedDataParallel as DDP
    return DDP(nn.Linear(2, 2), **options)


def _noop_hook(state, bucket):
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def ddp_comm_hook_registered_twice():
    m = _ddp()
    m.register_comm_hook(None, _noop_hook)
    m.register_comm_hook(None, _noop_hook)


def ddp_builtin_comm_hook_after_a_python_one():
    m = _ddp()
    m.register_comm_hook(None, _noop_hook)
    m._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)


def ddp_comm_hook_returns_a_tensor():
    def hook(state, bucket):
        return bucket.buffer()
    m = _ddp()
    m.register_comm_hook(None, hook)
    m(torch.ones(1, 2)).sum().backward()


def ddp_buffer_comm_hook_not_callable():
    _ddp()._register_buffer_comm_hook(None, 3)


class _SharedTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 2)

    def forward(self, x):
        h = checkpoint(self.layer, x, use_reentrant=True)
        return checkpoint(self.layer, h.tanh(), use_reentrant=True)


def ddp_reentrant_checkpoint_of_a_shared_layer():
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(_SharedTwice(), find_unused_parameters=True)
    m(torch.ones(1, 2, requires_grad=True)).sum().backward()


def _zero_hook(**options):
    from torch.distributed.algorithms.ddp_comm_hooks.ddp_zero_hook import hook_with_zero_step
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.distributed.optim import ZeroRedundancyOptimizer
    m = _ddp()
    zero = ZeroRedundancyOptimizer(m.parameters(), torch.optim.SGD, lr=0.1, **options)
    m.register_comm_hook(None, hook_with_zero_step(allreduce_hook, m, zero))


def zero_hook_without_overlap_with_ddp():
    _zero_hook()


def zero_hook_overlapping_on_gloo():
    _zero_hook(overlap_with_ddp=True)


def completion_hook_on_a_gloo_group():
    dist.group.WORLD._register_on_completion_hook(lambda info: None)


def _fsdp1(module):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    return FSDP(module, device_id=torch.device("cpu"))


def fsdp1_comm_hook_registered_twice():
    m = _fsdp1(nn.Linear(2, 2))
    m.register_comm_hook(None, _noop_hook)
    m.register_comm_hook(None, _noop_hook)


def fsdp1_comm_hook_not_callable():
    _fsdp1(nn.Linear(2, 2)).register_comm_hook(None, 3)


def fsdp1_comm_hook_on_a_nested_instance():
    m = _fsdp1(nn.Sequential(_fsdp1(nn.Linear(2, 2))))
    m(torch.ones(1, 2))
    m.module[0].register_comm_hook(None, _noop_hook)


def powersgd_state_unpickled():
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    data = pickle.dumps(powerSGD_hook.PowerSGDState(process_group=None))
    pickle.loads(data)  # its process group becomes the default group, which needs one


def _fsdp1_unsharded():
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy, StateDictType
    m = FSDP(nn.Linear(2, 2), device_id=torch.device("cpu"), sharding_strategy=ShardingStrategy.NO_SHARD)
    FSDP.set_state_dict_type(m, StateDictType.SHARDED_STATE_DICT)
    return m


def fsdp1_sharded_state_dict_without_sharding():
    _fsdp1_unsharded().state_dict()


def fsdp1_load_sharded_state_dict_without_sharding():
    m = _fsdp1_unsharded()
    m.load_state_dict(m.state_dict())


def _mesh():
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cpu", (WORLD_SIZE,))


def _two_layers():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))


def _sharded():
    from torch.distributed.fsdp import fully_shard
    m, mesh = _two_layers(), _mesh()
    for layer in m:
        fully_shard(layer, mesh=mesh)
    return fully_shard(m, mesh=mesh)


def _x():
    return torch.ones(2, 4)


def fsdp2_two_roots():
    from torch.distributed.fsdp import fully_shard
    m = _two_layers()
    fully_shard([m[0], m[1]], mesh=_mesh())
    m[0](_x())


def fsdp2_manual_finalization_set_on_a_child():
    m = _sharded()
    m[0].set_manual_backward_finalization(True)
    m(_x())


def fsdp2_child_run_before_the_root():
    m = _sharded()
    m[0](_x())
    m(_x())


def fsdp2_tied_weight_in_two_groups():
    from torch.distributed.fsdp import fully_shard
    m, mesh = _two_layers(), _mesh()
    m[1].weight = m[0].weight
    fully_shard(m[0], mesh=mesh)
    fully_shard(m[1], mesh=mesh)
    fully_shard(m, mesh=mesh)(_x())


def fsdp2_reset_iter_state_on_a_child():
    m = _sharded()
    m(_x()).sum().backward()
    m[0].reset_iter_state()


class _ReturnsAView(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, x):
        return self.layer(x).view(-1)


def fsdp2_module_returns_a_view():
    from torch.distributed.fsdp import fully_shard
    fully_shard(_ReturnsAView(), mesh=_mesh())(_x())


def _after_backward(manual=True):
    m = _sharded()
    if manual:
        m.set_manual_backward_finalization(True)
    m(_x()).sum().backward()
    return m


def fsdp2_finalize_without_manual_mode():
    _after_backward(manual=False).finalize_backward()


def fsdp2_finalize_on_a_child():
    _after_backward()[0].finalize_backward()


def fsdp2_finalize_twice_without_waiting():
    m = _after_backward()
    m.finalize_backward(async_op=True)
    m.finalize_backward()


def fsdp2_forward_before_waiting():
    m = _after_backward()
    m.finalize_backward(async_op=True)
    m(_x())


def fsdp2_wait_after_reset():
    m = _after_backward()
    handle = m.finalize_backward(async_op=True)
    m.reset_iter_state()
    handle.wait()


def fsdp2_reset_a_root_sharing_the_comm_context():
    from torch.distributed.fsdp import fully_shard, share_comm_ctx
    mesh = _mesh()
    first, second = fully_shard(nn.Linear(4, 4), mesh=mesh), fully_shard(nn.Linear(4, 4), mesh=mesh)
    share_comm_ctx([first, second])  # e.g. two pipeline stages
    second(_x()).sum().backward()
    first.set_manual_backward_finalization(True)
    first(_x()).sum().backward()
    handle = first.finalize_backward(async_op=True)  # first's reduction is in flight ...
    try:
        second.reset_iter_state()  # ... and second tries to reset it
    finally:
        handle.wait()


def fsdp2_all_reduce_hook_with_two_param_groups():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.fsdp._fully_shard._fsdp_common import FSDPMeshInfo, ShardPlacementResult
    from torch.distributed.tensor import Shard
    mesh = init_device_mesh("cpu", (WORLD_SIZE, 1), mesh_dim_names=("dp", "ep"))

    def bias_on_the_ep_mesh(param):  # a per-parameter mesh, as for the experts of a mixture of experts
        return ShardPlacementResult(Shard(0), FSDPMeshInfo(mesh["ep"], shard_mesh_dim=0)) if param.ndim == 1 else None
    fully_shard(nn.Linear(4, 4), mesh=mesh["dp"], shard_placement_fn=bias_on_the_ep_mesh).set_all_reduce_hook(
        lambda reduce_output: None)


def fsdp2_all_reduce_hook_removed_its_stream_kept():
    from torch.distributed.fsdp import fully_shard
    m = fully_shard(nn.Linear(4, 4), mesh=_mesh())
    m.set_all_reduce_hook(lambda reduce_output: None, stream=torch.Stream(device="cpu"))
    m.set_all_reduce_hook(None)  # "removes" the hook; the stream set before stays
    m(_x()).sum().backward()


def _hsdp(shape=(WORLD_SIZE, 1)):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("replicate", "shard"))
    return fully_shard(nn.Linear(4, 4), mesh=mesh)  # a 2-D mesh: native HSDP


def hsdp_all_reduce_hook_with_a_stream():
    _hsdp().set_all_reduce_hook(lambda reduce_output: None, stream=torch.Stream(device="cpu"))


def hsdp_manual_finalization_without_all_reduce():
    m = _hsdp()
    m.set_manual_backward_finalization(True)
    m.set_requires_all_reduce(False)
    m(_x()).sum().backward()
    m.finalize_backward()


def hsdp_manual_finalization_after_accumulating():
    m = _hsdp()
    m.set_requires_all_reduce(False)  # gradient accumulation: a partial reduction is kept ...
    m(_x()).sum().backward()
    m.set_requires_all_reduce(True)
    m.set_manual_backward_finalization(True)  # ... and the next step finalizes by hand
    m(_x()).sum().backward()
    m.finalize_backward()


def fsdp1_comm_hook_with_hybrid_sharding():
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    intra = dist.new_group(list(range(WORLD_SIZE)))
    inter = [dist.new_group([rank]) for rank in range(WORLD_SIZE)][dist.get_rank()]  # every rank makes every group
    m = FSDP(nn.Linear(2, 2), device_id=torch.device("cpu"), sharding_strategy=ShardingStrategy.HYBRID_SHARD,
             process_group=(intra, inter))
    m.register_comm_hook(None, _noop_hook)


def fsdp1_sharded_load_of_a_state_dict_missing_a_key():
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType
    m = FSDP(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), device_id=torch.device("cpu"), use_orig_params=True)
    FSDP.set_state_dict_type(m, StateDictType.SHARDED_STATE_DICT)
    state = m.state_dict()
    del state[next(iter(state))]  # a checkpoint of another model, or one renamed by hand
    m.load_state_dict(state, strict=False)


def fsdp1_post_backward_hooks_under_debug_info():
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    level = dist.get_debug_level()
    dist.set_debug_level(dist.DebugLevel.INFO)  # what TORCH_DISTRIBUTED_DEBUG=INFO sets
    try:
        m = FSDP(nn.Linear(2, 2), device_id=torch.device("cpu"), use_orig_params=True)
        m(torch.ones(1, 2)).sum().backward()
    finally:
        dist.set_debug_level(level)


def _in_workers(rank, world_size):
    """Run every trigger of IDS in this worker; what each showed, by message id."""
    return {mid: shown(globals()[name]) for mid, name in IDS.items()}


@trigger_all(list(IDS))
def distributed_triggers_in_two_gloo_processes():
    from hooklab import run_workers
    return run_workers(_in_workers, world_size=WORLD_SIZE, timeout=180)[0]


# --- no process group needed --------------------------------------------------------------------------------

@trigger("ddp-join-hook-requires-passing-in-a-distributeddataparal-8cc6c6")
def ddp_join_hook_of_a_plain_module():
    from torch.nn.parallel.distributed import _DDPJoinHook
    _DDPJoinHook(nn.Linear(2, 2), divide_by_initial_world_size=True)


@trigger("zero-join-hook-requires-passing-in-a-zeroredundancyoptim-5f27d9")
def zero_join_hook_of_a_plain_optimizer():
    from torch.distributed.optim.zero_redundancy_optimizer import _ZeROJoinHook
    _ZeROJoinHook(torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=0.1))


@trigger("expect-start-powersgd-iter-1-if-use-error-feedback-96b563")
def powersgd_started_at_the_first_iteration():
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    powerSGD_hook.PowerSGDState(process_group=None, start_powerSGD_iter=1)


@trigger("note-process-group-is-not-serializable-and-excluded-from-ac14f6")
def powersgd_state_pickled():
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    pickle.dumps(powerSGD_hook.PowerSGDState(process_group=None))


@trigger("memtracker-does-not-support-memory-tracking-for-multiple-3233b1")
def mem_tracker_over_two_iterations_without_reset():
    from torch.distributed._tools.mem_tracker import MemTracker
    model, tracker = nn.Linear(2, 2), MemTracker()
    tracker.track_external(model)
    for _ in range(2):
        with tracker:
            model(torch.ones(1, 2)).sum().backward()


@trigger("only-one-can-be-registered-at-a-time-clear-6de2be")
def mod_tracker_user_hook_registered_twice():
    from torch.distributed._tools.mod_tracker import ModTracker
    tracker = ModTracker()
    tracker.register_user_hooks(pre_fw_hook=lambda module, args: None)
    tracker.register_user_hooks(pre_fw_hook=lambda module, args: None)


# --- fixes: each trigger's program corrected as its message (or the docs) says ------------------------------------
# Most run in the two gloo processes, as their triggers do, and check the gradients or weights against one process or
# across the processes.

IN_WORKERS = "distributed_fixes_in_two_gloo_processes"  # the @fix_all function that runs the fixes marked with it


def _same_on_every_rank(t) -> bool:
    """Whether ``t`` is the same tensor in every process of the group."""
    gathered = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, t.detach().contiguous())
    return all(torch.allclose(g, gathered[0], atol=1e-6) for g in gathered)


def _rank_x():
    """Another input in each process: only communication makes the gradients agree."""
    return torch.full((1, 2), float(dist.get_rank() + 1))


def _ddp_grads_agree(m) -> bool:
    m(_rank_x()).sum().backward()
    return all(_same_on_every_rank(p.grad) for p in m.parameters())


def _allreduce_hook(state, bucket):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    return allreduce_hook(state, bucket)


@fix("register-comm-hook-or-register-builtin-comm-hook-can-873e55",
     en="register exactly one communication hook, before training",
     zh="只注册一个通信钩子，并且在训练开始之前",
     run_by="distributed_fixes_in_two_gloo_processes")
def ddp_comm_hook_registered_once():
    m = _ddp()
    m.register_comm_hook(None, _allreduce_hook)  # one hook, registered before training
    return {"grads_agree": _ddp_grads_agree(m)}


@fix("register-builtin-comm-hook-or-register-comm-hook-can-fad730",
     en="choose one communication hook: here the built-in ALLREDUCE alone",
     zh="通信钩子只选一个：这里只用内置的 ALLREDUCE",
     run_by="distributed_fixes_in_two_gloo_processes")
def ddp_builtin_comm_hook_alone():
    m = _ddp()
    m._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)  # the built-in one, instead of a Python one
    return {"grads_agree": _ddp_grads_agree(m)}


@fix("ddp-communication-hook-s-callback-must-return-a-torch-c5f46f",
     en="the hook returns a Future: all_reduce(..., async_op=True).get_future()",
     zh="钩子返回 Future：all_reduce(..., async_op=True).get_future()",
     run_by="distributed_fixes_in_two_gloo_processes")
def ddp_comm_hook_returns_a_future():
    def hook(state, bucket):
        buffer = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(buffer, async_op=True).get_future().then(lambda fut: fut.value()[0])
    m = _ddp()
    m.register_comm_hook(None, hook)
    return {"grads_agree": _ddp_grads_agree(m)}


class _Counts(nn.Module):
    """A layer with a buffer that counts the rows it saw in this process."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 2)
        self.register_buffer("rows", torch.zeros(()))

    def forward(self, x):
        self.rows += x.shape[0]
        return self.layer(x)


@fix("hook-must-be-callable-got-2b5b1e",
     en="the buffer hook is a function (state, buffers) that returns futures",
     zh="缓冲区钩子是一个函数 (state, buffers)，返回 future 列表",
     run_by="distributed_fixes_in_two_gloo_processes")
def ddp_buffer_comm_hook_callable():
    from torch.nn.parallel import DistributedDataParallel as DDP

    def sum_buffers(state, buffers):  # the docstring's use: a counter summed over the processes
        return [dist.all_reduce(b, async_op=True).get_future() for b in buffers.values()]
    m = DDP(_Counts())
    m._register_buffer_comm_hook(None, sum_buffers)  # instead of broadcasting process 0's buffers
    m(torch.ones(dist.get_rank() + 1, 2)).sum().backward()  # 1 row in process 0, 2 in process 1
    return {"rows_seen_by_all": int(m.module.rows)}


class _SharedTwiceNonReentrant(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 2)

    def forward(self, x):
        h = checkpoint(self.layer, x, use_reentrant=False)  # the non-reentrant checkpoint DDP supports
        return checkpoint(self.layer, h.tanh(), use_reentrant=False)


@fix("expected-to-mark-a-variable-ready-only-once-this-558255",
     en="checkpoint with use_reentrant=False, which DDP supports for a layer used twice",
     zh="用 use_reentrant=False 的检查点，DDP 支持同一层用两次",
     run_by="distributed_fixes_in_two_gloo_processes")
def ddp_non_reentrant_checkpoint_of_a_shared_layer():
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    m = DDP(_SharedTwiceNonReentrant(), find_unused_parameters=True)
    return {"grads_agree": _ddp_grads_agree(m)}


def _zero_trained():
    """Three steps of DDP with ZeRO (the optimizer's state sharded); whether the weights agree and moved."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    m = _ddp()
    start = m.module.weight.detach().clone()
    zero = ZeroRedundancyOptimizer(m.parameters(), torch.optim.SGD, lr=0.1)
    for _ in range(3):
        m(_rank_x()).sum().backward()
        zero.step()
        zero.zero_grad()
    return {"weights_agree": _same_on_every_rank(m.module.weight), "trained": not torch.equal(start, m.module.weight)}


@fix("zeroredundancyoptimizer-must-be-constructed-with-overlap-18d34f",
     en="on gloo, ZeRO steps after backward, without the overlapping hook (that one needs NCCL)",
     zh="在 gloo 上让 ZeRO 在反向之后 step，不用重叠钩子（它需要 NCCL）",
     run_by="distributed_fixes_in_two_gloo_processes")
@fix("gloo-backend-using-overlapping-ddp-with-zero-may-meet-dfe3c6",
     en="on gloo, ZeRO steps after backward, without the overlapping hook (that one needs NCCL)",
     zh="在 gloo 上让 ZeRO 在反向之后 step，不用重叠钩子（它需要 NCCL）",
     run_by="distributed_fixes_in_two_gloo_processes")
def zero_without_the_overlapping_hook_on_gloo():
    # hook_with_zero_step wants ZeroRedundancyOptimizer(overlap_with_ddp=True), which runs on NCCL only: on gloo
    # it stops with "may meet hangs". Here ZeRO steps after backward, without the hook: the same training
    return _zero_trained()


def _quiet(logger, start, fn):
    """``fn()`` with ``logger``'s records that start with ``start`` left out (a notice expected where it appears)."""
    def keep(record):
        return not record.getMessage().startswith(start)
    logger.addFilter(keep)
    try:
        return fn()
    finally:
        logger.removeFilter(keep)


def _powersgd_logger():
    import logging
    return logging.getLogger("torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook")


@fix("note-process-group-will-be-set-to-a-default-0115ac",
     en="set process_group after loading a saved PowerSGD state; its notices are expected",
     zh="加载保存的 PowerSGD 状态后设置 process_group；这两条提示是预期的",
     run_by="distributed_fixes_in_two_gloo_processes")
@fix("note-process-group-is-not-serializable-and-excluded-from-ac14f6",
     en="set process_group after loading a saved PowerSGD state; its notices are expected",
     zh="加载保存的 PowerSGD 状态后设置 process_group；这两条提示是预期的",
     run_by="distributed_fixes_in_two_gloo_processes")
def powersgd_state_unpickled_and_given_its_group():
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    group = dist.new_group(list(range(WORLD_SIZE)))
    state = powerSGD_hook.PowerSGDState(process_group=group, start_powerSGD_iter=2)
    data = _quiet(_powersgd_logger(), "NOTE: Process group is not serializable", lambda: pickle.dumps(state))
    loaded = _quiet(_powersgd_logger(), "NOTE: Process group will be set", lambda: pickle.loads(data))
    loaded.process_group = group  # the group it was made for, set after loading, as the notice says
    m = _ddp()
    m.register_comm_hook(loaded, powerSGD_hook.powerSGD_hook)  # the loaded state at work
    for _ in range(3):
        m.zero_grad()
        m(_rank_x()).sum().backward()
    return {"iterations": loaded.iter, "grads_agree": all(_same_on_every_rank(p.grad) for p in m.parameters())}


@fix("only-processgrouppnccl-supports-oncompletion-hook-but-go-ffa08c",
     en="on gloo, learn of a collective's completion from its work's future",
     zh="在 gloo 上通过集合通信 work 的 future 得知它何时完成",
     run_by="distributed_fixes_in_two_gloo_processes")
def completion_observed_through_the_work_future():
    t = torch.ones(1)
    future = dist.all_reduce(t, async_op=True).get_future()  # gloo has no completion hook: the work's future tells
    future.wait()
    return {"completed": future.done(), "sum": t.item()}


def _fsdp1_counting_hook(calls):
    from torch.distributed.algorithms._comm_hooks import default_hooks

    def hook(state, grad, output=None):
        calls.append(1)
        return default_hooks.reduce_scatter_hook(state, grad, output)
    return default_hooks.DefaultState(dist.group.WORLD), hook


def _fsdp1_grads_agree_with_one_process(m, reference):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    m(torch.ones(1, 2)).sum().backward()
    reference(torch.ones(1, 2)).sum().backward()
    with FSDP.summon_full_params(m, with_grads=True):
        return all(torch.allclose(p.grad, r.grad, atol=1e-6) for p, r in zip(m.parameters(), reference.parameters()))


def _fsdp1_and_reference(module_fn):
    import copy

    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    torch.manual_seed(0)
    module = module_fn()
    reference = copy.deepcopy(module)
    return FSDP(module, device_id=torch.device("cpu"), use_orig_params=True), reference


def _fsdp1_with_one_hook():
    calls = []
    m, reference = _fsdp1_and_reference(lambda: nn.Linear(2, 2))
    m.register_comm_hook(*_fsdp1_counting_hook(calls))  # one hook, a function (state, grad, output)
    return {"grads_as_one_process": _fsdp1_grads_agree_with_one_process(m, reference), "hook_calls": len(calls)}


@fix("a-communication-hook-is-already-registered-71f8b0",
     en="register one communication hook on FSDP, once",
     zh="在 FSDP 上只注册一次通信钩子",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp1_comm_hook_registered_once():
    return _fsdp1_with_one_hook()  # registered once, before training


@fix("the-communication-hook-must-be-callable-but-got-6a743c",
     en="the communication hook is a function (state, grad, output)",
     zh="通信钩子是一个函数 (state, grad, output)",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp1_comm_hook_callable():
    return _fsdp1_with_one_hook()  # the hook is a function, not 3


@fix("register-comm-hook-can-only-be-called-on-a-9bc4c5",
     en="register the communication hook on the root FSDP instance",
     zh="在根 FSDP 实例上注册通信钩子",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp1_comm_hook_on_the_root_instance():
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    calls = []
    m = FSDP(nn.Sequential(_fsdp1(nn.Linear(2, 2))), device_id=torch.device("cpu"))
    m.register_comm_hook(*_fsdp1_counting_hook(calls))  # on the root: FSDP gives it to every nested instance
    m(torch.ones(1, 2)).sum().backward()
    return {"hook_calls": len(calls)}


def _fsdp1_sharded():
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy, StateDictType
    torch.manual_seed(0)
    # a sharded state_dict needs sharded parameters: FULL_SHARD (NO_SHARD has nothing to shard and gives a full one)
    m = FSDP(nn.Linear(2, 2), device_id=torch.device("cpu"), sharding_strategy=ShardingStrategy.FULL_SHARD,
             use_orig_params=True)
    FSDP.set_state_dict_type(m, StateDictType.SHARDED_STATE_DICT)
    return m


def _local_shapes(state):
    return {key: [list(shard.tensor.shape) for shard in value.local_shards()] for key, value in sorted(state.items())}


@fix("when-using-no-shard-for-shardingstrategy-full-state-dict-bc51e7",
     en="a sharded state_dict from sharded parameters: FULL_SHARD, not NO_SHARD",
     zh="分片的 state_dict 要来自分片的参数：用 FULL_SHARD，不用 NO_SHARD",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp1_sharded_state_dict_of_sharded_parameters():
    return _local_shapes(_fsdp1_sharded().state_dict())  # each process holds its shard


@fix("when-using-no-shard-for-shardingstrategy-full-state-dict-e844eb",
     en="save and load a sharded state_dict under FULL_SHARD, not NO_SHARD",
     zh="在 FULL_SHARD 下保存和加载分片的 state_dict，不用 NO_SHARD",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp1_load_sharded_state_dict_of_sharded_parameters():
    m = _fsdp1_sharded()
    state = m.state_dict()
    saved = {key: value.local_shards()[0].tensor.clone() for key, value in state.items()}
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
    result = m.load_state_dict(state)
    restored = m.state_dict()
    return {"missing": result.missing_keys, "unexpected": result.unexpected_keys,
            "restored": all(torch.equal(restored[k].local_shards()[0].tensor, v) for k, v in saved.items())}


def _fsdp2_matches_one_process(m, steps=1, run=None) -> bool:
    """Whether FSDP2's gradients (gathered) are those of the unsharded model in one process."""
    reference = _two_layers()
    for _ in range(steps):
        reference(_x()).sum().backward()
        (run or (lambda: m(_x()).sum().backward()))()
    return all(torch.allclose(p.grad.full_tensor(), r.grad, atol=1e-6)
               for p, r in zip(m.parameters(), reference.parameters()))


@fix("requires-a-single-root-module-but-got-d84903",
     en="call fully_shard on the parent too: one root over both modules",
     zh="对父模块也调用 fully_shard：两个模块之上只有一个根",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_one_root_over_both():
    from torch.distributed.fsdp import fully_shard
    m, mesh = _two_layers(), _mesh()
    fully_shard([m[0], m[1]], mesh=mesh)
    fully_shard(m, mesh=mesh)  # their parent: the root
    return {"grads_as_one_process": _fsdp2_matches_one_process(m)}


def _manual_step(m):
    m(_x()).sum().backward()
    m.finalize_backward()


@fix("set-manual-backward-finalization-must-be-called-on-the-f2ea54",
     en="set_manual_backward_finalization on the root module",
     zh="在根模块上调用 set_manual_backward_finalization",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_manual_finalization_set_on_the_root():
    m = _sharded()
    m.set_manual_backward_finalization(True)  # on the root
    return {"grads_as_one_process": _fsdp2_matches_one_process(m, run=lambda: _manual_step(m))}


@fix("state-has-already-been-lazily-initialized-for-c4e97b",
     en="run the first forward through the root module",
     zh="第一次前向传播要经过根模块",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_root_run_first():
    m = _sharded()
    m(_x())  # the first forward through the root
    out = m[0](_x())
    return {"child_output": list(out.shape), "grads_as_one_process": _fsdp2_matches_one_process(m)}


@fix("parameter-is-shared-with-a-parameter-already-managed-by-26e4a1",
     en="both modules of a tied weight in one group: fully_shard([m0, m1])",
     zh="共享权重的两个模块放进同一组：fully_shard([m0, m1])",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_tied_weight_in_one_group():
    from torch.distributed.fsdp import fully_shard
    m, mesh = _two_layers(), _mesh()
    m[1].weight = m[0].weight
    fully_shard([m[0], m[1]], mesh=mesh)  # both modules of the tied weight in one group
    fully_shard(m, mesh=mesh)
    reference = _two_layers()
    reference[1].weight = reference[0].weight
    m(_x()).sum().backward()
    reference(_x()).sum().backward()
    return {"tied": m[1].weight is m[0].weight,
            "grad_as_one_process": bool(torch.allclose(m[0].weight.grad.full_tensor(), reference[0].weight.grad,
                                                       atol=1e-6))}


@fix("reset-iter-state-must-be-called-on-the-root-e695dc",
     en="reset_iter_state on the root module",
     zh="在根模块上调用 reset_iter_state",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_reset_iter_state_on_the_root():
    m = _sharded()
    m(_x()).sum().backward()
    m.reset_iter_state()  # on the root
    m.zero_grad()
    return {"grads_as_one_process": _fsdp2_matches_one_process(m)}


class _ReturnsACopy(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, x):
        return self.layer(x).view(-1).clone()  # not a view: in-place ops on it keep the pre-backward hook


@fix("fsdp2-wrapped-module-returned-a-view-tensor-an-in-28b19f",
     en="return a copy (.clone()), not a view, from the FSDP2 module",
     zh="FSDP2 模块返回副本（.clone()），而不是视图",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_module_returns_a_copy():
    import copy

    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(0)
    module = _ReturnsACopy()
    reference = copy.deepcopy(module)
    m = fully_shard(module, mesh=_mesh())
    out = m(_x())
    out += 1  # the in-place op the message warns about, now harmless
    out.sum().backward()
    reference(_x()).sum().backward()
    return {"grads_as_one_process": all(torch.allclose(p.grad.full_tensor(), r.grad, atol=1e-6)
                                        for p, r in zip(m.parameters(), reference.parameters()))}


def _manual_sharded():
    m = _sharded()
    m.set_manual_backward_finalization(True)  # before forward
    return m


@fix("finalize-backward-requires-manual-backward-finalization-9db11a",
     en="call set_manual_backward_finalization(True) before forward, then finalize_backward",
     zh="前向之前先调用 set_manual_backward_finalization(True)，再 finalize_backward",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_finalize_in_manual_mode():
    m = _manual_sharded()
    return {"grads_as_one_process": _fsdp2_matches_one_process(m, run=lambda: _manual_step(m))}


@fix("finalize-backward-must-be-called-on-the-root-module-29bc65",
     en="finalize_backward on the root module",
     zh="在根模块上调用 finalize_backward",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_finalize_on_the_root():
    m = _manual_sharded()
    return {"grads_as_one_process": _fsdp2_matches_one_process(m, run=lambda: _manual_step(m))}  # m, not m[0]


def _async_step(m):
    m(_x()).sum().backward()
    m.finalize_backward(async_op=True).wait()  # wait on the handle before anything else


@fix("the-previous-gradient-reduction-must-be-waited-on-before-d2e9b3",
     en="wait() on the asynchronous finalize_backward handle before finalizing again",
     zh="再次 finalize 之前，先对异步 finalize_backward 的句柄调用 wait()",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_finalize_waited_on():
    m = _manual_sharded()
    return {"grads_as_one_process": _fsdp2_matches_one_process(m, steps=2, run=lambda: _async_step(m))}


@fix("the-previous-gradient-reduction-must-be-waited-on-before-a6b1bf",
     en="wait() on the reduction handle before the next forward",
     zh="下一次前向之前，先对梯度归约的句柄调用 wait()",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_forward_after_waiting():
    m = _manual_sharded()
    matches = _fsdp2_matches_one_process(m, steps=2, run=lambda: _async_step(m))  # wait(), then the next forward
    return {"grads_as_one_process": matches}


@fix("this-gradient-reduction-handle-was-invalidated-f82fe7",
     en="wait() on the handle before reset_iter_state, and keep no old handle",
     zh="在 reset_iter_state 之前调用 wait()，不要留着旧句柄",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_wait_before_reset():
    m = _manual_sharded()
    m(_x()).sum().backward()
    m.finalize_backward(async_op=True).wait()  # wait first; after a reset, no old handle is kept
    m.reset_iter_state()
    m.zero_grad()
    return {"grads_as_one_process": _fsdp2_matches_one_process(m, run=lambda: _manual_step(m))}


@fix("reset-iter-state-cannot-reset-a-gradient-reduction-owned-2e3189",
     en="wait() on the other root's reduction before reset_iter_state",
     zh="reset_iter_state 之前先等另一个根的梯度归约完成",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_reset_after_waiting_on_the_other_root():
    from torch.distributed.fsdp import fully_shard, share_comm_ctx
    mesh = _mesh()
    first, second = fully_shard(nn.Linear(4, 4), mesh=mesh), fully_shard(nn.Linear(4, 4), mesh=mesh)
    share_comm_ctx([first, second])
    second(_x()).sum().backward()
    first.set_manual_backward_finalization(True)
    first(_x()).sum().backward()
    first.finalize_backward(async_op=True).wait()  # first's reduction done ...
    second.reset_iter_state()  # ... then second may reset
    return {"first_has_grads": all(p.grad is not None for p in first.parameters())}


class _WithExperts(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer, self.experts = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return self.experts(self.layer(x))


@fix("set-all-reduce-hook-is-not-supported-with-multiple-7d0446",
     en="the parameters on the other mesh in a fully_shard unit of their own, one hook per unit",
     zh="另一网格上的参数单独成为一个 fully_shard 单元，每个单元一个钩子",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_all_reduce_hook_per_unit():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (WORLD_SIZE, 1), mesh_dim_names=("dp", "ep"))
    model, calls = _WithExperts(), {"experts": 0, "root": 0}
    fully_shard(model.experts, mesh=mesh["ep"])  # the parameters on the other mesh: a unit of their own
    fully_shard(model, mesh=mesh["dp"])
    model.experts.set_all_reduce_hook(lambda out: calls.__setitem__("experts", calls["experts"] + 1))  # one each
    model.set_all_reduce_hook(lambda out: calls.__setitem__("root", calls["root"] + 1))
    model(_x()).sum().backward()
    return calls


@fix("all-reduce-hook-stream-is-specified-but-hook-itself-0bf58d",
     en="to stop an all-reduce hook, set one that does nothing, not None (no stream on CPU)",
     zh="要停用 all-reduce 钩子就换成什么都不做的钩子，不要传 None（CPU 上不设 stream）",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp2_all_reduce_hook_replaced_by_one_that_does_nothing():
    from torch.distributed.fsdp import fully_shard
    m = fully_shard(_two_layers(), mesh=_mesh())
    # no stream: a CPU stream has no events for backward to wait on (an accelerator's stream, where there is one)
    m.set_all_reduce_hook(lambda reduce_output: reduce_output.mul_(1))
    m.set_all_reduce_hook(lambda reduce_output: None)  # to stop it: a hook that does nothing, not None
    return {"grads_as_one_process": _fsdp2_matches_one_process(m)}


@fix("stream-cannot-be-set-when-using-native-hsdp-9968a5",
     en="under HSDP, set the all-reduce hook without a stream",
     zh="HSDP 下设置 all-reduce 钩子时不传 stream",
     run_by="distributed_fixes_in_two_gloo_processes")
def hsdp_all_reduce_hook_without_a_stream():
    calls = []
    m = _hsdp()
    m.set_all_reduce_hook(lambda reduce_output: calls.append(1))  # HSDP runs it in its own all-reduce stream
    m(_x()).sum().backward()
    return {"hook_calls": len(calls)}


@fix("manual-backward-finalization-requires-all-reduce-for-par-3cbe44",
     en="set_requires_all_reduce(True) before finalize_backward",
     zh="finalize_backward 之前调用 set_requires_all_reduce(True)",
     run_by="distributed_fixes_in_two_gloo_processes")
def hsdp_manual_finalization_with_all_reduce():
    m = _hsdp()
    m.set_manual_backward_finalization(True)
    m.set_requires_all_reduce(False)
    m(_x()).sum().backward()
    m.set_requires_all_reduce(True)  # before finalization
    m.finalize_backward()
    return {"grads_agree": all(_same_on_every_rank(p.grad.full_tensor()) for p in m.parameters())}


@fix("manual-backward-finalization-does-not-support-partial-gr-9b4eba",
     en="accumulate gradients with automatic finalization (no manual finalization)",
     zh="累积梯度时使用自动收尾，不用手动 finalize",
     run_by="distributed_fixes_in_two_gloo_processes")
def hsdp_automatic_finalization_while_accumulating():
    m = _hsdp()
    m.set_requires_all_reduce(False)  # accumulate ...
    m(_x()).sum().backward()
    m.set_requires_all_reduce(True)  # ... and the next step finalizes itself (no manual finalization)
    m(_x()).sum().backward()
    return {"grads_agree": all(_same_on_every_rank(p.grad.full_tensor()) for p in m.parameters())}


@fix("communication-hook-is-not-supported-for-hybrid-strategie-b5ef7e",
     en="a communication hook with FULL_SHARD, not a hybrid strategy",
     zh="通信钩子配 FULL_SHARD，不配混合分片策略",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp1_comm_hook_with_full_sharding():
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
    calls = []
    m = FSDP(nn.Linear(2, 2), device_id=torch.device("cpu"), sharding_strategy=ShardingStrategy.FULL_SHARD)
    m.register_comm_hook(*_fsdp1_counting_hook(calls))
    m(torch.ones(1, 2)).sum().backward()
    return {"hook_calls": len(calls)}


@fix("did-not-find-param-with-fqn-skipping-it-the-35a5c2",
     en="load a sharded state_dict with every key of the model (strict=True)",
     zh="加载包含模型所有键的分片 state_dict（strict=True）",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp1_sharded_load_of_a_complete_state_dict():
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType
    m = FSDP(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), device_id=torch.device("cpu"), use_orig_params=True)
    FSDP.set_state_dict_type(m, StateDictType.SHARDED_STATE_DICT)
    state = m.state_dict()  # every key of this model
    result = m.load_state_dict(state, strict=True)
    return {"keys": len(state), "missing": result.missing_keys, "unexpected": result.unexpected_keys}


@fix("fsdp-firing-post-backward-hooks-for-parameters-274aa2",
     en="leave TORCH_DISTRIBUTED_DEBUG unset: the debugging notice is off",
     zh="不设置 TORCH_DISTRIBUTED_DEBUG：调试提示就关闭了",
     run_by="distributed_fixes_in_two_gloo_processes")
def fsdp1_post_backward_hooks_at_the_default_debug_level():
    m, reference = _fsdp1_and_reference(lambda: nn.Linear(2, 2))  # TORCH_DISTRIBUTED_DEBUG unset: OFF
    return {"debug_level": str(dist.get_debug_level()), "grads_as_one_process":
            _fsdp1_grads_agree_with_one_process(m, reference)}


@fix("ddp-join-hook-requires-passing-in-a-distributeddataparal-8cc6c6",
     en="give Join the DDP instance itself, for inputs of uneven length",
     zh="把 DDP 实例本身交给 Join，处理长度不等的输入",
     run_by="distributed_fixes_in_two_gloo_processes")
def ddp_join_over_uneven_inputs():
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(nn.Linear(2, 2))
    optimizer = torch.optim.SGD(m.parameters(), lr=0.1)
    batches = 2 + dist.get_rank()  # uneven: 2 batches here, 3 there
    with Join([m]):  # the DDP instance itself, which carries the join hook
        for _ in range(batches):
            optimizer.zero_grad()
            m(_rank_x()).sum().backward()
            optimizer.step()
    return {"batches_done": _gathered_ints(batches), "weights_agree": _same_on_every_rank(m.module.weight)}


@fix("zero-join-hook-requires-passing-in-a-zeroredundancyoptim-5f27d9",
     en="give Join the ZeroRedundancyOptimizer, for inputs of uneven length",
     zh="把 ZeroRedundancyOptimizer 交给 Join，处理长度不等的输入",
     run_by="distributed_fixes_in_two_gloo_processes")
def zero_join_over_uneven_inputs():
    from torch.distributed.algorithms.join import Join
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(nn.Linear(2, 2))
    zero = ZeroRedundancyOptimizer(m.parameters(), torch.optim.SGD, lr=0.1)
    batches = 2 + dist.get_rank()
    with Join([m, zero]):  # the ZeroRedundancyOptimizer, which carries ZeRO's join hook
        for _ in range(batches):
            m(torch.ones(1, 2)).sum().backward()
            zero.step()
    return {"batches_done": _gathered_ints(batches), "weights_agree": _same_on_every_rank(m.module.weight)}


def _gathered_ints(n):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, n)
    return out


@fix("expect-start-powersgd-iter-1-if-use-error-feedback-96b563",
     en="start_powerSGD_iter > 1 with error feedback: here 2",
     zh="开启误差反馈时 start_powerSGD_iter 要大于 1：这里取 2",
     run_by="distributed_fixes_in_two_gloo_processes")
def powersgd_started_at_the_third_iteration():
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    m = _ddp()
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
    m.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    for _ in range(3):  # two iterations of plain all-reduce, then PowerSGD
        m.zero_grad()
        m(_rank_x()).sum().backward()
    return {"iterations": state.iter, "grads_agree": all(_same_on_every_rank(p.grad) for p in m.parameters())}


def _worker_fixes() -> dict:
    """The fixes run by the @fix_all function below, by message id."""
    return {mid: f.fn for f in registered_fixes().get(__name__, []) if f.run_by == IN_WORKERS for mid in f.ids}


def _fixes_in_workers(rank, world_size):
    """Run every fix of this module's workers here: what each showed and printed, by message id."""
    return {mid: outcome(fn) for mid, fn in _worker_fixes().items()}


@fix_all(list(_worker_fixes()))
def distributed_fixes_in_two_gloo_processes():
    from hooklab import run_workers
    return run_workers(_fixes_in_workers, world_size=WORLD_SIZE, timeout=240)[0]


@fix("memtracker-does-not-support-memory-tracking-for-multiple-3233b1",
     en="call reset_mod_stats() before each iteration",
     zh="每次迭代之前调用 reset_mod_stats()")
def mem_tracker_reset_before_each_iteration():
    from torch.distributed._tools.mem_tracker import MemTracker
    model, tracker = nn.Linear(2, 2), MemTracker()
    tracker.track_external(model)
    iterations = 0
    for _ in range(2):
        tracker.reset_mod_stats()  # clear the last iteration's module stats first
        with tracker:
            model(torch.ones(1, 2)).sum().backward()
        iterations += 1
    return {"iterations": iterations, "modules_tracked": len(tracker.memory_tracking)}


@fix("only-one-can-be-registered-at-a-time-clear-6de2be",
     en="clear_user_hooks() before registering another user hook",
     zh="注册新的用户钩子之前先调用 clear_user_hooks()")
def mod_tracker_user_hook_replaced_after_clearing():
    from torch.distributed._tools.mod_tracker import ModTracker
    seen = []
    tracker = ModTracker()
    tracker.register_user_hooks(pre_fw_hook=lambda module, args: seen.append("first"))
    tracker.clear_user_hooks()  # then the new one
    tracker.register_user_hooks(pre_fw_hook=lambda module, args: seen.append("second"))
    with tracker:
        nn.Linear(2, 2)(torch.ones(1, 2))
    return sorted(set(seen))


test_trigger = triggers_of(__name__)
test_fix = fixes_of(__name__)
