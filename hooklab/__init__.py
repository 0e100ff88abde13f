"""hooklab: tools for working with PyTorch hooks, and the helpers of the bilingual course built on them.

The library (everything importable from ``hooklab``) is for practitioners: recorders (``capture``,
``FeatureExtractor``, ``GradientMonitor``, ``ActivationStats``, ``Tracer``, ``SavedTensorLedger``),
gradient clipping inside backward, offloading and (selective) checkpointing of saved tensors
(``OverlappedOffload`` overlaps the copies with compute on a GPU; ``MemoryPlanner`` chooses per block
between keeping, checkpointing, offloading and compressing to meet a memory budget at the least cost),
inventories of registered hooks and a test helper that fails when code leaves hooks behind.
``intervene`` (a recorder-style block) edits named modules' outputs or inputs, also under a Hugging
Face model's ``generate()``, and ``capture_inputs`` returns a module's full inputs, stopping the forward there.
``find_nonfinite`` (a recorder) names the first module and the first backward Node that made NaN/inf.
The exceptions worth catching (``NotRecorded``, ``UnknownModuleError``, ``MissingTorchInternal``, ...) live in
:mod:`hooklab.errors` and are importable from ``hooklab`` too.
``import hooklab`` changes no process-wide setting; the course's own helpers live in
:mod:`hooklab.course` and are not imported by it.

One lifecycle for every tool that registers hooks:

* Functions that register (``clip_grad_*_hooks``, ``offload_module``) do it when called and
  return a :class:`HookScope`, the handle of everything they added: ``remove()`` it (calling it
  again does nothing) or use it as a ``with`` block, like the handle of a ``register_*hook`` call; once its
  hooks are removed it is spent, and entering it again raises (call the function again for another block).
* Recorders (``capture``, ``GradientMonitor``, ``ActivationStats``, ``Tracer``,
  ``SavedTensorLedger``; see :class:`hooklab.scope.Recorder`) check their arguments when made,
  register when their ``with`` block is entered and remove every hook when it ends, also when
  it raised. One recorder records one block: entering it again raises, and so does asking a
  recorder that never recorded for its results. What it recorded stays readable after the
  block; ``remove()`` ends the recording early.
* Tools that change a model for a while (``checkpoint_modules``, ``selective_checkpoint_modules``,
  ``checkpoint_segments``)
  are ``with`` blocks that restore it on exit in the same way; ``FeatureExtractor`` holds hooks
  only while it runs; ``OpCounter`` and ``MemoryMeter`` register no hooks (they are dispatch
  modes, active inside their block).
* ``names`` is always one module name or several, as ``named_modules()`` gives them; an unknown
  name raises an error listing the names that exist. Options after the first one or two
  arguments are keyword-only, and string options are ``Literal`` types checked at run time.
* Nothing grows per step beyond what a recorder is asked to record; every report is a
  ``table()`` string that ``print(recorder)`` prints.
"""
from .capture import Capture, FeatureExtractor, capture
from .checkpoint import checkpoint_modules, selective_checkpoint_modules
from .clip import clip_grad_norm_global_hooks, clip_grad_norm_hooks, clip_grad_value_hooks
from .inventory import HookEntry, hook_inventory, hook_name, no_hooks_left_behind, show_hooks
from .intervene import ModuleInputs, capture_inputs, intervene
from ._text import format_bytes
from .ledger import ModuleRow, SavedRecord, SavedTensorLedger
from .lookup import get_module
from .monitor import ActivationStats, GradientMonitor
from .nonfinite import NonFiniteDetector, NonFiniteEvent, find_nonfinite
from .meter import MemoryMeter, OpCounter, gradient_error
from .planner import CountedCosts, MeasuredCosts, MemoryPlan, MemoryPlanner
from .offload import (CompressSaved, OffloadScope, OffloadStats, OffloadWrapper, OverlappedOffload, SaveOnCpu,
                      SaveOnDisk, offload_module)
from .errors import (BudgetError, HooksLeftBehind, MissingTorchInternal, NonFiniteError, NotRecorded,
                     UnknownModuleError, WorkerError)
from .scope import HookScope, Recorder, named_scope
from .segments import checkpoint_segments
from .summary import ShapeRow, ShapeTable, layer_shapes
from .tracer import Event, Tracer
from .workers import run_workers

__version__ = "0.1.0"

__all__ = [
    "ActivationStats",
    "BudgetError",
    "Capture",
    "CompressSaved",
    "CountedCosts",
    "Event",
    "FeatureExtractor",
    "GradientMonitor",
    "HookEntry",
    "HookScope",
    "HooksLeftBehind",
    "MeasuredCosts",
    "MemoryMeter",
    "MemoryPlan",
    "MemoryPlanner",
    "MissingTorchInternal",
    "ModuleInputs",
    "ModuleRow",
    "NonFiniteDetector",
    "NonFiniteError",
    "NonFiniteEvent",
    "NotRecorded",
    "OffloadScope",
    "OffloadStats",
    "OffloadWrapper",
    "OpCounter",
    "OverlappedOffload",
    "Recorder",
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
    "capture_inputs",
    "checkpoint_modules",
    "checkpoint_segments",
    "clip_grad_norm_global_hooks",
    "clip_grad_norm_hooks",
    "clip_grad_value_hooks",
    "find_nonfinite",
    "format_bytes",
    "get_module",
    "gradient_error",
    "hook_inventory",
    "hook_name",
    "intervene",
    "layer_shapes",
    "named_scope",
    "no_hooks_left_behind",
    "offload_module",
    "run_workers",
    "selective_checkpoint_modules",
    "show_hooks",
]
