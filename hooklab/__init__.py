"""hooklab: tools for working with PyTorch hooks, and the helpers of the bilingual course built on them.

The library (everything importable from ``hooklab``) is for practitioners: recorders (``capture``,
``GradientMonitor``, ``ActivationStats``, ``Tracer``, ``SavedTensorLedger``), ``intervene`` (edits named
modules' outputs or inputs, also under a Hugging Face model's ``generate()``; ``capture_inputs`` returns a
module's full inputs, stopping the forward there), ``find_nonfinite`` (the first module and the first backward
Node that made NaN/inf), gradient clipping inside backward, offloading and (selective) checkpointing of saved
tensors (``OverlappedOffload`` overlaps the copies with compute on a GPU; ``MemoryPlanner`` chooses per block
between keeping, checkpointing, offloading and compressing to meet a memory budget, and its ``decide`` measures
those plans against plain ``checkpoint_sequential`` and ``torch.compile``'s memory budget on this machine),
inventories of registered hooks and a test helper that fails when code leaves hooks behind.
``all_hooks`` lists every hook system on a model (PyTorch's hooks and what accelerate, diffusers, PEFT,
quantization, parametrizations, FSDP2 / DDP / tensor parallelism and ``torch.compile`` put there), and
``explain_hook`` runs a step and says why a module's hooks did not fire, or fired twice (its probe is a profile
function that registers nothing, removed before it returns; when the step raises, the explanation goes with the
error). ``find_blocks`` finds a model's repeated blocks, the places most hooks go, by the rule hooklab's atlas of the
transformers, diffusers, timm and torchvision zoos uses (``hooklab/course/assets/atlas/``). The plots of
what the recorders recorded are functions of plain data in :mod:`hooklab.plot`. The exceptions worth catching
(``NotRecorded``, ``UnknownModuleError``, ``MissingTorchInternal``, ...) live in :mod:`hooklab.errors`, are
importable from ``hooklab`` too, and share the base :class:`HooklabError`. ``import hooklab`` changes no
process-wide setting; the course's own helpers live in :mod:`hooklab.course` and are not imported by it.
``import hooklab`` itself is quick: each name is imported from its module when it is first used (``hooklab.capture``,
``from hooklab import capture``; PEP 562), so a script pays only for the tools it uses.
One of them answers at the top level too, as practitioners type it: ``hooklab.ask("pasted error or your own
words")`` is ``hooklab.course.ask``, imported when first asked for (it is the course's lookup, not a tool of the
library, so ``__all__`` leaves it out).

Names: a tool used as a ``with`` block or a call is a lowercase function-like name (``capture``, ``intervene``,
``find_nonfinite``, ``checkpoint_modules``, ``clip_grad_value_hooks``); an object kept to be read or reused is a
CamelCase class (``GradientMonitor``, ``Tracer``, ``SavedTensorLedger``, ``SaveOnCpu``); the type of what a
lowercase tool gives is exported too (``Capture``, ``NonFiniteDetector``, ``Call``). No module is named like a
public name (``capture`` lives in :mod:`hooklab.capturing`, ``intervene`` in :mod:`hooklab.intervening`).

One lifecycle for every tool that hooks a model:

* Recorders -- ``capture``, ``intervene``, ``GradientMonitor``, ``ActivationStats``, ``Tracer``,
  ``SavedTensorLedger`` and ``find_nonfinite`` (a ``NonFiniteDetector``); see :class:`hooklab.scope.Recorder` --
  check their arguments when made, register when their ``with`` block is entered and remove every hook when it
  ends, also when it raised. One recorder records one block: entering it again raises, and so does asking a
  recorder that never recorded for its results. What it recorded stays readable after the block, read one way:
  properties (``store``, ``tr.events``, ``st.stats``, ``found.forward``, ``ledger.records``) and, where an
  argument chooses the view, methods (``gm.norms(per)``, ``tr.table(kinds)``); every report is a ``table()``
  string that ``print(recorder)`` prints. ``remove()`` ends the recording early.
* Functions that register (``clip_grad_*_hooks``, ``offload_module``) do it when called and
  return a :class:`HookScope`, the handle of everything they added: ``remove()`` it (calling it
  again does nothing) or use it as a ``with`` block, like the handle of a ``register_*hook`` call; once its
  hooks are removed it is spent, and entering it again raises (call the function again for another block).
* Tools that change a model for a while (``checkpoint_modules``, ``selective_checkpoint_modules``,
  ``checkpoint_segments``, ``MemoryPlan.apply`` and the other ways to meet a memory budget ``MemoryDecision.apply``
  returns: ``CheckpointEach.apply``, ``SequentialCheckpoint.apply``, ``CompiledBudget.apply``) are ``with`` blocks that restore it on exit in the same way; a block object is used
  once (call the function again for another block). ``FeatureExtractor``, ``layer_shapes``, ``capture_inputs``
  and ``OffloadWrapper`` hold hooks only while they run.
* Saved-tensor contexts (``SaveOnCpu``, ``SaveOnDisk``, ``CompressSaved``, ``OverlappedOffload``) and dispatch
  modes (``MemoryMeter``, ``OpCounter``) hook no model: they act on the code run inside their block, in the
  thread that entered it (PyTorch keeps both per thread). They may be entered again, and what they count adds
  up across blocks (``stats``, ``counts``, ``peak_bytes``): make a new one to count from zero.

Rules every one of them keeps (``tests/library/test_contract.py`` checks each on every tool):

* A ``copy.deepcopy`` of the model made inside a block (an EMA, a teacher) is neither recorded, edited nor
  checkpointed through the original, during the block or after it, and computes with its own weights; its copy
  of a tool's hook is inert (it holds nothing and can be pickled).
* Pickling the model inside a block either works (a checkpointed model loads as a plain one) or raises a
  ``TypeError`` that says to save ``state_dict()`` or to save after the block.
* A tool kept after its block (to read its results) does not keep the model alive.
* A module that an activation checkpoint runs again for backward is recorded once, as without the checkpoint
  (``Tracer`` shows the recomputation, marked "recomputed for backward"; ``intervene`` replays the edit of the
  call it recomputes, and refuses a reentrant checkpoint).
* An exception inside a block leaves no hook, patch, context or file behind.
* Module and tensor hooks are process-wide: a forward run in another thread inside a block is recorded as this
  thread's; where a tool sees only its own thread (the ledger, ``find_nonfinite``, ``Tracer.saved_tensors()``),
  it warns at the end of the block.
* ``names`` is always one module name or several, as ``named_modules()`` gives them; an unknown name raises an
  error listing the names that exist. Options after the first one or two arguments are keyword-only, and
  string options are ``Literal`` types checked at run time. Nothing grows per step beyond what a recorder is
  asked to record.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names as type checkers and readers see them; at run time, imported when first used (below)
    from . import plot as plot  # hooklab.plot: the figures of the tools, one module
    from ._text import format_bytes
    from .activations import ActivationStats
    from .blocks import BlockStack, find_blocks
    from .capturing import Capture, FeatureExtractor, capture
    from .checkpoint import checkpoint_modules, selective_checkpoint_modules
    from .clip import clip_grad_norm_global_hooks, clip_grad_norm_hooks, clip_grad_value_hooks
    from .errors import (
                          BudgetError,
                          HooklabError,
                          HooksLeftBehind,
                          MissingTorchInternal,
                          NonFiniteError,
                          NotRecorded,
                          UnknownModuleError,
                          WorkerError,
    )
    from .explain import HookExplanation, explain_hook
    from .intervening import Call, ModuleInputs, capture_inputs, intervene
    from .inventory import HookEntry, hook_inventory, hook_name, no_hooks_left_behind, show_hooks
    from .ledger import ModuleRow, SavedRecord, SavedTensorLedger
    from .lookup import get_module
    from .meter import MemoryMeter, OpCounter, gradient_error
    from .monitor import GradientMonitor
    from .nonfinite import NonFiniteDetector, NonFiniteEvent, find_nonfinite
    from .offload import (
                          CompressSaved,
                          OffloadScope,
                          OffloadStats,
                          OffloadWrapper,
                          OverlappedOffload,
                          SaveOnCpu,
                          SaveOnDisk,
                          offload_module,
    )
    from .planner import (
                          BlockProfile,
                          CheckpointEach,
                          CompiledBudget,
                          CostModel,
                          CountedCosts,
                          MeasuredCosts,
                          MemoryDecision,
                          MemoryPlan,
                          MemoryPlanner,
                          OffloadStep,
                          SequentialCheckpoint,
    )
    from .scope import HookScope, Recorder, named_scope
    from .segments import checkpoint_segments
    from .summary import ShapeRow, ShapeTable, layer_shapes
    from .systems import HookRecord, all_hooks, show_all_hooks
    from .tracer import Event, Tracer
    from .workers import run_workers

__version__ = "0.1.0"

__all__ = [
    "ActivationStats",
    "BlockProfile",
    "BlockStack",
    "BudgetError",
    "Call",
    "Capture",
    "CheckpointEach",
    "CompiledBudget",
    "CompressSaved",
    "CostModel",
    "CountedCosts",
    "Event",
    "FeatureExtractor",
    "GradientMonitor",
    "HookEntry",
    "HookExplanation",
    "HookRecord",
    "HookScope",
    "HooklabError",
    "HooksLeftBehind",
    "MeasuredCosts",
    "MemoryDecision",
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
    "OffloadStep",
    "OffloadStats",
    "OffloadWrapper",
    "OpCounter",
    "OverlappedOffload",
    "Recorder",
    "SaveOnCpu",
    "SaveOnDisk",
    "SavedRecord",
    "SavedTensorLedger",
    "SequentialCheckpoint",
    "ShapeRow",
    "ShapeTable",
    "Tracer",
    "UnknownModuleError",
    "WorkerError",
    "all_hooks",
    "capture",
    "capture_inputs",
    "checkpoint_modules",
    "checkpoint_segments",
    "clip_grad_norm_global_hooks",
    "clip_grad_norm_hooks",
    "clip_grad_value_hooks",
    "explain_hook",
    "find_blocks",
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
    "show_all_hooks",
    "show_hooks",
]

# Each public name's module, imported when the name is first used (``__getattr__``): ``import hooklab`` imports none of
# them, so it costs a small fraction of ``import torch`` (benchmarks/bench_startup.py); tests/library/test_lazy_import.py
# checks that this table and the imports above name the same things.
_HOMES: dict[str, tuple[str, ...]] = {
    "_text": ("format_bytes",),
    "activations": ("ActivationStats",),
    "blocks": ("BlockStack", "find_blocks"),
    "capturing": ("Capture", "FeatureExtractor", "capture"),
    "checkpoint": ("checkpoint_modules", "selective_checkpoint_modules"),
    "clip": ("clip_grad_norm_global_hooks", "clip_grad_norm_hooks", "clip_grad_value_hooks"),
    "errors": (
        "BudgetError", "HooklabError", "HooksLeftBehind", "MissingTorchInternal", "NonFiniteError", "NotRecorded",
        "UnknownModuleError", "WorkerError"),
    "explain": ("HookExplanation", "explain_hook"),
    "intervening": ("Call", "ModuleInputs", "capture_inputs", "intervene"),
    "inventory": ("HookEntry", "hook_inventory", "hook_name", "no_hooks_left_behind", "show_hooks"),
    "ledger": ("ModuleRow", "SavedRecord", "SavedTensorLedger"),
    "lookup": ("get_module",),
    "meter": ("MemoryMeter", "OpCounter", "gradient_error"),
    "monitor": ("GradientMonitor",),
    "nonfinite": ("NonFiniteDetector", "NonFiniteEvent", "find_nonfinite"),
    "offload": (
        "CompressSaved", "OffloadScope", "OffloadStats", "OffloadWrapper", "OverlappedOffload", "SaveOnCpu",
        "SaveOnDisk", "offload_module"),
    "planner": (
        "BlockProfile", "CheckpointEach", "CompiledBudget", "CostModel", "CountedCosts", "MeasuredCosts",
        "MemoryDecision", "MemoryPlan", "MemoryPlanner", "OffloadStep", "SequentialCheckpoint"),
    "scope": ("HookScope", "Recorder", "named_scope"),
    "segments": ("checkpoint_segments",),
    "summary": ("ShapeRow", "ShapeTable", "layer_shapes"),
    "systems": ("HookRecord", "all_hooks", "show_all_hooks"),
    "tracer": ("Event", "Tracer"),
    "workers": ("run_workers",),
    "course.asking": ("ask",),  # the course's lookup, as practitioners type it; not in __all__ (not a tool)
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> object:  # PEP 562: a public name, imported from its module when first asked for
    module = _HOME.get(name)
    if module is None:
        if not name.startswith("__") and name != "course":  # the course is imported by name only (hooklab.course)
            try:  # a submodule of the library (hooklab.plot, hooklab.offload, ...), as an import of each name made it
                return importlib.import_module(f"{__name__}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{__name__}.{name}":
                    raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    if name != "ask":  # hooklab.ask stays a lookup of hooklab.course.ask, not a name of the library
        globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME, "plot"})
