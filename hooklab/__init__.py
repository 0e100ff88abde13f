"""hooklab: helpers for the bilingual hands-on course on PyTorch hooks.

The notebooks show raw PyTorch first; hooklab holds what a learner would otherwise
retype in every notebook, and tools worth keeping after the course.
"""
from .env import setup
from .exercises import check, hint, solution
from .export import export_notebook, export_notebooks
from .inventory import HookEntry, hook_inventory, hook_name, show_hooks
from .lookup import UnknownModuleError, get_module
from .scope import HookScope, named_scope
from .tracer import Event, Tracer
from .capture import Capture, FeatureExtractor, ShapeRow, ShapeTable, capture, layer_shapes
from .clip import clip_grad_norm_hooks, clip_grad_value_hooks
from .monitor import ActivationStats, GradientMonitor

__version__ = "0.1.0"

__all__ = [
    "ActivationStats",
    "Capture",
    "FeatureExtractor",
    "GradientMonitor",
    "ShapeRow",
    "ShapeTable",
    "capture",
    "clip_grad_norm_hooks",
    "clip_grad_value_hooks",
    "layer_shapes",
    "Event",
    "Tracer",
    "HookEntry",
    "HookScope",
    "UnknownModuleError",
    "check",
    "export_notebook",
    "export_notebooks",
    "get_module",
    "hook_inventory",
    "hint",
    "hook_name",
    "named_scope",
    "setup",
    "show_hooks",
    "solution",
]
