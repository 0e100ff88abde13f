"""The exceptions hooklab raises that a caller may want to catch, in one place.

Each is also importable from :mod:`hooklab` and from the module that raises it::

    from hooklab import NotRecorded                 # or: from hooklab.errors import NotRecorded
    try:
        store["layer4"]
    except NotRecorded as missing:                  # a KeyError: the message says why nothing was recorded
        ...

Bad arguments raise the built-in ``TypeError`` / ``ValueError`` with a message that says what was
expected; the classes here are for what only shows up while the code runs. Every one of them is a
:class:`HooklabError` *and* the built-in a caller would expect (``NotRecorded`` is a ``KeyError``,
``HooksLeftBehind`` an ``AssertionError``), so ``except HooklabError`` catches all of hooklab's own.

This module is a leaf: it imports nothing from hooklab (the records an exception carries are typed by
what it reads of them), so every module may import it.

>>> from hooklab import errors
>>> issubclass(errors.UnknownModuleError, KeyError), issubclass(errors.HooksLeftBehind, AssertionError)
(True, True)
>>> all(issubclass(getattr(errors, name), errors.HooklabError) for name in errors.__all__)
True
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch

__all__ = ["BudgetError", "HooklabError", "HooksLeftBehind", "MissingTorchInternal", "NonFiniteError", "NotRecorded",
           "UnknownModuleError", "WorkerError"]


class HooklabError(Exception):
    """The base of every exception hooklab raises on purpose (mixed into the built-in each one also is)."""


class _Entry(Protocol):  # what HooksLeftBehind reads of an inventory's HookEntry
    @property
    def where(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def hook(self) -> str: ...


class _Event(Protocol):  # what NonFiniteError reads of a NonFiniteEvent
    def describe(self) -> str: ...


class _KeyErrorMessage(HooklabError, KeyError):
    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return str(self.args[0])


class NotRecorded(_KeyErrorMessage):
    """A name that was captured but has nothing recorded (the message says why)."""


class UnknownModuleError(_KeyErrorMessage):
    """A module name that does not exist in the model (message lists the ones that do)."""


class HooksLeftBehind(HooklabError, AssertionError):
    """Raised by :func:`~hooklab.no_hooks_left_behind`; ``entries`` lists the hooks the block added and kept."""

    def __init__(self, entries: Sequence[_Entry]) -> None:
        lines = "\n".join(f"  {e.where}  {e.kind}  {e.hook}" for e in entries)
        super().__init__(f"{len(entries)} hook(s) left registered by the block (remove them in a finally, "
                         f"or hand their handles to a hooklab.HookScope):\n{lines}")
        self.entries = list(entries)


class MissingTorchInternal(HooklabError, RuntimeError):
    """A private PyTorch name that hooklab needs is missing from the installed torch."""

    def __init__(self, name: str, feature: str) -> None:
        super().__init__(
            f"hooklab's {feature} needs {name}, which torch {torch.__version__} does not have "
            f"(PyTorch renamed or removed a private API). Use a torch version hooklab was tested with "
            f"(see pyproject.toml), or report it at the hooklab repository with this message."
        )
        self.name, self.feature = name, feature


class NonFiniteError(HooklabError, RuntimeError):
    """Raised by ``find_nonfinite(..., raise_first=True)`` at the first non-finite value; ``event`` says where."""

    def __init__(self, event: _Event) -> None:
        super().__init__(f"first non-finite value: {event.describe()}")
        self.event = event


class BudgetError(HooklabError, ValueError):
    """No plan of :class:`~hooklab.MemoryPlanner` meets the budget with the choices allowed."""


class WorkerError(HooklabError, RuntimeError):
    """A worker of :func:`~hooklab.run_workers` raised; ``rank`` says which, ``details`` holds its traceback
    and captured output."""

    def __init__(self, rank: int, details: str) -> None:
        super().__init__(f"worker rank {rank} raised:\n{details}")
        self.rank, self.details = rank, details
