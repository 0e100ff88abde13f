"""What hooklab's saved-tensor hooks share: PyTorch's in-place check for a tensor they keep instead of copying.

Without saved-tensor hooks, autograd remembers a saved tensor's version counter and raises
"modified by an inplace operation" when backward finds it changed. With hooks, PyTorch leaves that
check to the hooks (its documentation calls a modified tensor "undefined behavior"): a pack hook that
keeps the tensor itself (a detached alias, which shares the version counter) would hand backward the
modified values and give a wrong gradient without a word. :class:`Kept` records the version at pack
and checks it at unpack, with PyTorch's own message. A tensor that was copied at pack (to disk,
compressed, moved) needs no check: backward reads the values as they were saved, which is right.

>>> x = torch.ones(3, requires_grad=True)
>>> y = x.exp()
>>> kept = Kept(y)
>>> _ = y.add_(1)
>>> kept.get("SavedTensorLedger")
Traceback (most recent call last):
RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation: [torch.FloatTensor [3]] is at version 1; expected version 0 instead. Hint: the tensor was saved for backward inside hooklab.SavedTensorLedger, which checks the version as PyTorch does without saved-tensor hooks; enable anomaly detection to find the operation that failed to compute its gradient, with torch.autograd.set_detect_anomaly(True).
"""
from __future__ import annotations

import threading
import warnings
from typing import Any

import torch

from ._torch_internals import version

__all__ = ["Kept", "OtherThreads", "check_version"]


def check_version(t: torch.Tensor, saved: int | None, tool: str) -> torch.Tensor:
    """Return ``t``; raise PyTorch's in-place error when its version is no longer ``saved``."""
    now = version(t)
    if saved is not None and now is not None and now != saved:
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an inplace operation: "
            f"[{t.type()} {list(t.shape)}] is at version {now}; expected version {saved} instead. Hint: the tensor "
            f"was saved for backward inside hooklab.{tool}, which checks the version as PyTorch does without "
            "saved-tensor hooks; enable anomaly detection to find the operation that failed to compute its "
            "gradient, with torch.autograd.set_detect_anomaly(True).")
    return t


class Kept:
    """A saved tensor kept as it is (detached, no copy), with the version it had when it was saved."""

    __slots__ = ("tensor", "version", "__weakref__")

    def __init__(self, t: torch.Tensor) -> None:
        self.tensor = t.detach()  # detached: the tensor itself would make a reference cycle through grad_fn
        self.version = version(t)

    def get(self, tool: str) -> torch.Tensor:
        """The tensor, after checking that no in-place op changed it since it was saved."""
        return check_version(self.tensor, self.version, tool)


class OtherThreads:
    """Counts module calls made in another thread while a saved-tensor hooks context is active in this one.

    Saved-tensor hooks are thread-local: a forward run in another thread saves its tensors without
    them, and a recorder built on them would report nothing from it. Module hooks are not
    thread-local, so a module call seen from another thread says that this happened.
    """

    def __init__(self) -> None:
        self.home = threading.get_ident()
        self.calls = 0

    def here(self) -> bool:
        """True in the thread that made this object; counts the call otherwise."""
        if threading.get_ident() == self.home:
            return True
        self.calls += 1
        return False

    def global_hook(self) -> Any:
        """Register a global forward pre-hook that counts calls from other threads; returns its handle."""
        def count(module: Any, args: Any) -> None:
            self.here()

        return torch.nn.modules.module.register_module_forward_pre_hook(count)

    def warn(self, tool: str, stacklevel: int) -> None:
        if self.calls:
            warnings.warn(
                f"{tool}: {self.calls} module call(s) ran in another thread during the block. Saved-tensor hooks are "
                "thread-local, so the tensors saved there were not seen: what it recorded covers only the thread "
                f"that entered it. Enter {tool} in the thread that runs the forward pass.",
                RuntimeWarning, stacklevel=stacklevel + 1)
