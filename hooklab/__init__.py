"""hooklab: helpers for the bilingual hands-on course on PyTorch hooks.

The notebooks show raw PyTorch first; hooklab holds what a learner would otherwise
retype in every notebook, and tools worth keeping after the course.
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
