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
