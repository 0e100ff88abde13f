"""Trigger tests: the messages of DDP's communication hooks, ZeRO's DDP hook, FSDP (1 and 2) and the process group's
hooks. Most need a process group: they run together in two ``gloo`` processes (``hooklab.run_workers``, one call
with a deadline), which return what each trigger showed; the rest need none."""
from __future__ import annotations

import pickle

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.checkpoint import checkpoint

from message_triggers import shown, trigger, trigger_all, triggers_of

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


test_trigger = triggers_of(__name__)
