"""An independent truth for what plain PyTorch saves for backward, for the planner's tests."""
from __future__ import annotations

from torch.autograd.graph import saved_tensors_hooks


def saved_storage_bytes(run, ignore) -> int:
    """The independent truth for plain PyTorch: bytes of the distinct storages an outer saved_tensors_hooks is given
    during ``run()`` (what the graph keeps for backward), leaving out ``ignore``'s storages."""
    skip = {t.untyped_storage().data_ptr() for t in ignore}
    seen: dict[int, int] = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in skip:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        loss = run()
    del loss
    return sum(seen.values())


def rng_state_bytes(run) -> int:
    """The independent truth for the random-number states a checkpoint keeps (``torch.get_rng_state()`` per region,
    and ``torch.cuda.get_rng_state()`` per GPU its inputs are on, to replay dropout in its recompute): bytes of the
    uint8 CPU tensors the size of such a state which ``run()`` makes and are still alive after it, found by the
    garbage collector."""
    import gc

    import torch

    sizes = {torch.get_rng_state().shape} | ({torch.cuda.get_rng_state().shape} if torch.cuda.is_available() else set())
    gc.collect()
    before = {id(o) for o in gc.get_objects() if issubclass(type(o), torch.Tensor)}
    loss = run()
    new = [o for o in gc.get_objects() if issubclass(type(o), torch.Tensor) and id(o) not in before
           and o.dtype == torch.uint8 and o.shape in sizes and o.device.type == "cpu"]
    held = sum(t.nbytes for t in new)
    del loss, new
    return held
