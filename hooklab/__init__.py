"""hooklab: helpers for the bilingual hands-on course on PyTorch hooks.

The notebooks show raw PyTorch first; hooklab holds what a learner would otherwise
retype in every notebook, and tools worth keeping after the course.
"""
from .attempt import attempt
from .capture import Capture, FeatureExtractor, ShapeRow, ShapeTable, capture, layer_shapes
from .clip import clip_grad_norm_global_hooks, clip_grad_norm_hooks, clip_grad_value_hooks
from .env import setup
from .exercises import check, hint, solution
from .export import export_notebook, export_notebooks
from .inventory import HookEntry, hook_inventory, hook_name, show_hooks
from .ledger import MemoryMeter, SavedRecord, SavedTensorLedger, format_bytes
from .lookup import UnknownModuleError, get_module
from .monitor import ActivationStats, GradientMonitor
from .offload import (CompressSaved, OffloadScope, OffloadStats, OffloadWrapper, SaveOnCpu,
                      SaveOnDisk, checkpoint_modules, gradient_error, offload_module)
from .scope import HookScope, named_scope
from .tracer import Event, Tracer

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
    "MemoryMeter",
    "OffloadScope",
    "OffloadStats",
    "OffloadWrapper",
    "SavedRecord",
    "SavedTensorLedger",
    "SaveOnCpu",
    "SaveOnDisk",
    "ShapeRow",
    "ShapeTable",
    "Tracer",
    "UnknownModuleError",
    "attempt",
    "capture",
    "check",
    "checkpoint_modules",
    "clip_grad_norm_global_hooks",
    "clip_grad_norm_hooks",
    "clip_grad_value_hooks",
    "export_notebook",
    "export_notebooks",
    "format_bytes",
    "get_module",
    "gradient_error",
    "hint",
    "hook_inventory",
    "hook_name",
    "layer_shapes",
    "named_scope",
    "offload_module",
    "setup",
    "show_hooks",
    "solution",
]
