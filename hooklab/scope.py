"""Own hook handles and remove them all together.

Every ``register_*hook`` call in PyTorch returns a handle with ``.remove()``.
A :class:`HookScope` keeps those handles and removes them on exit, also when the
body raises::

    with HookScope() as scope:
        scope.add(model.fc.register_forward_hook(print_shape))
        model(x)
    # the hook is gone here, whatever happened inside

:func:`named_scope` gives a scope that survives re-running a notebook cell:
asking for the same name again first removes what the previous run registered.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["HookScope", "named_scope"]


@runtime_checkable
class Removable(Protocol):
    def remove(self) -> None: ...


class HookScope:
    """A set of hook handles that are removed together (on ``remove()`` or on exit)."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._handles: list[Removable] = []

    def add(self, handle: Any) -> Any:
        """Take ownership of ``handle`` (what a ``register_*hook`` call returned) and return it."""
        if not isinstance(handle, Removable):
            what = type(handle).__name__
            hint = (
                " You passed a function: register it first, e.g. "
                "scope.add(module.register_forward_hook(fn))."
                if callable(handle)
                else ""
            )
            raise TypeError(
                f"HookScope.add expects the handle returned by a register_*hook call "
                f"(an object with .remove()), got {what}.{hint}"
            )
        self._handles.append(handle)
        return handle

    def remove(self) -> int:
        """Remove every hook this scope owns; return how many there were."""
        count = 0
        while self._handles:
            self._handles.pop().remove()
            count += 1
        return count

    def __len__(self) -> int:
        return len(self._handles)

    def __enter__(self) -> HookScope:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"HookScope{label}({len(self)} hooks)"


_NAMED: dict[str, HookScope] = {}


def named_scope(name: str) -> HookScope:
    """Return the scope called ``name``, after removing the hooks it still holds.

    Use it in a notebook cell that registers hooks: running the cell again
    replaces its hooks instead of stacking a second copy.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"named_scope needs a non-empty string name, got {name!r}")
    scope = _NAMED.setdefault(name, HookScope(name))
    scope.remove()
    return scope
