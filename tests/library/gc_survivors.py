"""The Python objects a block of code created that are still alive at its end, found without scanning the process.

Counting ``gc.get_objects()`` before and after a loop, with a full collection each time, costs in proportion to
everything the process holds (several hundred thousand objects in a test worker that imported torch.compile,
transformers and jupyter: ~0.4 s a collection). Here everything alive before the block is frozen (``gc.freeze``),
so the collection and the scan at its end see only the objects created inside it. The count is the objects the
block created and kept, which is never less than the net growth a before/after count would give (that one also
subtracts older objects that died meanwhile): a bound asserted on it is at least as strict.

The fixture ``only_new_objects_collected`` does the same for a whole test whose ``gc.collect()`` calls are about
objects the test made (import it into the test module to use it).
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@contextmanager
def survivors() -> Iterator[list[Any]]:
    """``with survivors() as kept: ...``: afterwards ``kept`` holds the objects created in the block that are alive
    once garbage is collected (the objects the collector tracks: containers, tensors, functions, ...)."""
    frozen_already = gc.get_freeze_count() > 0  # by the test session, say: it stays so (with more objects)
    kept: list[Any] = []
    gc.freeze()
    try:
        yield kept
        gc.collect()
        kept.extend(o for o in gc.get_objects() if o is not kept)
    finally:
        gc.unfreeze()
        if frozen_already:
            gc.freeze()


@pytest.fixture
def only_new_objects_collected() -> Iterator[None]:
    """For a test whose ``gc.collect()`` is about objects it made itself (a model let go, a file's finalizer):
    everything alive before the test is frozen while it runs, so a collection costs what the test made."""
    with survivors():
        yield
