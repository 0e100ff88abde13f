"""DDP and FSDP2 around a rig: what the ``ddp`` and ``fsdp2`` columns (and the rows of DDP's communication hook and
FSDP2's all-reduce hook) put around the network before a cell's probe runs. :func:`~.observe.observe` calls it inside
the worker processes that :func:`~.distributed.observe_distributed` starts; outside them it refuses.
"""
from __future__ import annotations

from .families import Rig


def wrap(rig: Rig, wrapper: str) -> None:
    """Wrap ``rig.net`` in DDP, or shard it with FSDP2 (the subject, then the root), in place."""
    import torch.distributed as dist

    if not dist.is_initialized():
        raise RuntimeError(f"the {wrapper} cells run in worker processes with a process group: "
                           "use hooklab.course.hook_matrix.observe_distributed")
    if wrapper == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        rig.net = DistributedDataParallel(rig.net)
    else:
        from torch.distributed.fsdp import fully_shard

        fully_shard(rig.subject)
        fully_shard(rig.net)
    import torch
    rig.opt = torch.optim.SGD(rig.net.parameters(), lr=0.1)
