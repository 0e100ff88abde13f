"""hooklab: tools for working with PyTorch hooks, and the helpers of the bilingual course built on them.

The library (everything importable from ``hooklab``) is for practitioners: recorders (``capture``,
``FeatureExtractor``, ``GradientMonitor``, ``ActivationStats``, ``Tracer``, ``SavedTensorLedger``),
gradient clipping inside backward, offloading and (selective) checkpointing of saved tensors,
inventories of registered hooks and a test helper that fails when code leaves hooks behind.
``import hooklab`` changes no process-wide setting; the course's own helpers live in
:mod:`hooklab.course` and are not imported by it.

One lifecycle for every tool that registers hooks:

* Every one is a context manager: leaving the ``with`` block removes every hook it added, also
  when the block raised.
* Those that register when they are called or constructed (the clipping functions and
  ``offload_module`` return a :class:`HookScope`; ``GradientMonitor``, ``ActivationStats``,
  ``Tracer``) also have ``remove()`` for use without a ``with``; calling it again does nothing.
  ``capture()`` and ``SavedTensorLedger`` register when the block is entered and record that
  block only.
* Tools that change a model for a while (``checkpoint_modules``, ``selective_checkpoint_modules``)
  restore it on exit in the same way.
* Options after the first one or two arguments are keyword-only; ``layers``/``names`` are module
  names as ``named_modules()`` gives them, and an unknown name raises an error listing the
  names that exist.
* Nothing grows per step beyond what a recorder is asked to record.
"""
from .capture import Capture, FeatureExtractor, ShapeRow, ShapeTable, capture, layer_shapes
from .clip import clip_grad_norm_global_hooks, clip_grad_norm_hooks, clip_grad_value_hooks
from .inventory import HookEntry, HooksLeftBehind, hook_inventory, hook_name, no_hooks_left_behind, show_hooks
from .ledger import MemoryMeter, SavedRecord, SavedTensorLedger, format_bytes
from .lookup import UnknownModuleError, get_module
from .monitor import ActivationStats, GradientMonitor
from .offload import (CompressSaved, OffloadScope, OffloadStats, OffloadWrapper, SaveOnCpu,
                      SaveOnDisk, checkpoint_modules, gradient_error, offload_module)
from .scope import HookScope, named_scope
from .selective import OpCounter, selective_checkpoint_modules
from .tracer import Event, Tracer
from .workers import WorkerError, run_workers

__version__ = "0.1.0"

__all__ = [
    "ActivationStats",
    "Capture",
    "CompressSaved",
    "Event",
    "FeatureExtractor",
    "GradientMonitor",
    "HookEntry",
    "HookScope",
    "HooksLeftBehind",
    "MemoryMeter",
    "OffloadScope",
    "OffloadStats",
    "OffloadWrapper",
    "OpCounter",
    "SaveOnCpu",
    "SaveOnDisk",
    "SavedRecord",
    "SavedTensorLedger",
    "ShapeRow",
    "ShapeTable",
    "Tracer",
    "UnknownModuleError",
    "WorkerError",
    "capture",
    "checkpoint_modules",
    "clip_grad_norm_global_hooks",
    "clip_grad_norm_hooks",
    "clip_grad_value_hooks",
    "format_bytes",
    "get_module",
    "gradient_error",
    "hook_inventory",
    "hook_name",
    "layer_shapes",
    "named_scope",
    "no_hooks_left_behind",
    "offload_module",
    "run_workers",
    "selective_checkpoint_modules",
    "show_hooks",
]
