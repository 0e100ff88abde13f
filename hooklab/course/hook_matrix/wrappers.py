"""The distributed wrappers around a rig: what the ``ddp``, ``fsdp2``, ``fsdp1`` and ``tensor-parallel`` columns (and the
rows of DDP's communication hook and FSDP2's all-reduce hook) put around the network before a cell's probe runs.
:func:`~.observe.observe` calls it inside the worker processes that :func:`~.distributed.observe_distributed` starts;
outside them it refuses.
"""
from __future__ import annotations

from .families import Rig

# the wrappers :func:`wrap` knows; "fsdp1-orig" is FSDP1 with use_orig_params=True (a shape of the fsdp1 column)
WRAPPERS = ("ddp", "fsdp2", "fsdp1", "fsdp1-orig", "tp")


def wrap(rig: Rig, wrapper: str) -> None:
    """Wrap ``rig.net`` in DDP; shard it with FSDP2 (the subject, then the root) or FSDP1 (the subject wrapped by
    the policy, then the root); or parallelize it over the ranks (the subject's ``Linear`` column-wise, the head
    row-wise), in place. The hooks are installed afterwards, on the module a user holds then."""
    import torch
    import torch.distributed as dist

    if wrapper not in WRAPPERS:
        raise ValueError(f"no wrapper {wrapper!r}; the wrappers are: {', '.join(WRAPPERS)}")
    if not dist.is_initialized():
        raise RuntimeError(f"the {wrapper} cells run in worker processes with a process group: "
                           "use hooklab.course.hook_matrix.observe_distributed")
    if wrapper == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        rig.net = DistributedDataParallel(rig.net)
    elif wrapper == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        fully_shard(rig.subject)
        fully_shard(rig.net)
    elif wrapper.startswith("fsdp1"):
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        # device_id: on a machine without an accelerator FSDP1 refuses None (tools/profiles/libraries/fsdp1.py)
        rig.net = FullyShardedDataParallel(rig.net, auto_wrap_policy=ModuleWrapPolicy({type(rig.subject)}),
                                           device_id=torch.device("cpu"), use_orig_params=wrapper == "fsdp1-orig")
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        # the subject's 3 output features are split 2 + 1: its local shard, handed on as a plain tensor (the default
        # use_local_output=True), would be sized as if even by RowwiseParallel; as a DTensor it keeps its global size
        parallelize_module(rig.net, mesh, {"subject.lin": ColwiseParallel(use_local_output=False),
                                           "head": RowwiseParallel()})
    rig.opt = torch.optim.SGD(rig.net.parameters(), lr=0.1)
