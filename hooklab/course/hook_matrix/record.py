"""What a probe's hooks saw: a log of calls, and a stable one-line description of each call's arguments.

Every hook a probe registers is a :class:`Recorder`: a small picklable object (so a model carrying it can be
pickled and deep-copied like one carrying a hook defined in a module) that appends ``(key, phase, args)`` to
:data:`LOG` and returns what its family returns in the current mode. Appending raw arguments keeps the hook
simple enough for ``torch.compile`` to trace, as it traces a learner's hook; they are described afterwards,
outside any compiler, by :func:`describe`: shapes, dtypes, ``grad_fn`` names and tensor kinds, never values,
addresses or anything that depends on the machine.

>>> describe((torch.zeros(2, 3), None, [torch.ones((), dtype=torch.bool)]))
'(f32[2,3], None, [bool[]])'
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

LOG: list[tuple[str, str, Any]] = []   # (recorder key, phase, the call's arguments)
_PHASE = ["run"]                       # the phase the running context is in ("forward", "backward", "export", ...)
_MODIFY = [False]                      # False: hooks return None; True: they return their family's modification
_RETURNS: list[Callable[..., Any] | None] = [None]  # in the modify run, another return value to try than MODIFIERS'
# family id -> what its hook returns in modify mode, given the call's arguments (filled by families.py)
MODIFIERS: dict[str, Callable[..., Any]] = {}
PLAIN_FUNCTIONS = [False]   # True: hook() gives plain functions (see there)
PASS_THROUGH = {"saved-tensors-pack", "saved-tensors-unpack"}  # families whose hook must return its argument
# set by a context that asks what a hook sees of where it runs (the thread contexts): called at each call, and the
# answer kept in SEEN as (recorder key, phase, answer)
WATCH: list[Callable[[], str] | None] = [None]
SEEN: list[tuple[str, str, str]] = []

_DTYPES = {torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
           torch.int64: "i64", torch.int32: "i32", torch.bool: "bool", torch.uint8: "u8"}


def set_phase(name: str) -> None:
    """Label the calls that follow (a context says where it is: ``forward``, ``backward``, ``export``, ...)."""
    _PHASE[0] = name


def phase() -> str:
    return _PHASE[0]


class Recorder:
    """A hook: logs its call under ``key`` and, in modify mode, returns its family's modification.

    Picklable and copyable: a copy logs under the same key, so calls of a deep-copied or unpickled model's hooks
    are counted too."""

    def __init__(self, key: str, family: str) -> None:
        self.key, self.family = key, family

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        LOG.append((self.key, _PHASE[0], args + ((kwargs,) if kwargs else ())))
        watched(self.key)
        if _MODIFY[0] and (_RETURNS[0] is not None or self.family in MODIFIERS):
            return (_RETURNS[0] or MODIFIERS[self.family])(*args, **kwargs)
        if self.family in PASS_THROUGH:  # a pack / unpack hook returns what it was given
            return args[0]
        return None

    def __repr__(self) -> str:
        return f"Recorder({self.key!r})"


# how many positional arguments each family's hook takes (a plain function is written with that many, as a
# learner writes it: TorchScript reads the signature)
ARITY = {"param-hook": 1, "post-accumulate-grad-hook": 1, "forward-pre-hook": 2, "forward-hook": 3,
         "forward-pre-hook-with-kwargs": 3, "forward-hook-always-call": 3, "backward-pre-hook": 2,
         "full-backward-hook": 3, "global-forward-pre-hook": 2, "global-forward-hook": 3,
         "global-forward-hook-with-kwargs": 4, "global-full-backward-pre-hook": 2, "global-full-backward-hook": 3,
         "state-dict-pre-hook": 3, "state-dict-post-hook": 4, "load-state-dict-post-hook": 2}


def hook(key: str, family: str) -> Callable[..., Any]:
    """A recording hook for ``family``: a :class:`Recorder`, or, while :data:`PLAIN_FUNCTIONS` is set (the
    TorchScript context, which compiles a module's hooks and so reads their source and signature), a plain
    function with the family's positional parameters that calls it: what a learner's hook is."""
    recorder = Recorder(key, family)
    if not PLAIN_FUNCTIONS[0]:
        return recorder
    arity = ARITY.get(family)
    # no annotations: TorchScript reads them (an unannotated argument is a Tensor to it, as in a learner's hook)
    if arity == 1:
        def hook1(a):
            return recorder(a)
        return hook1
    if arity == 2:
        def hook2(module, a):
            return recorder(module, a)
        return hook2
    if arity == 3:
        def hook3(module, a, b):
            return recorder(module, a, b)
        return hook3
    if arity == 4:
        def hook4(module, a, b, c):
            return recorder(module, a, b, c)
        return hook4

    def plain_hook(*args: Any, **kwargs: Any) -> Any:
        return recorder(*args, **kwargs)
    return plain_hook


class RecordingParametrization(nn.Module):
    """A parametrization that records each time the weight is computed (and doubles it in modify mode)."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        LOG.append((self.key, _PHASE[0], (weight,)))
        watched(self.key)
        return weight * 2 if _MODIFY[0] else weight


def watched(key: str) -> None:
    """Keep what the running hook sees of its surroundings (:data:`WATCH`), where a context asks."""
    if WATCH[0] is not None:
        SEEN.append((key, _PHASE[0], WATCH[0]()))


def _tensor(t: torch.Tensor) -> str:
    kind = ""
    name = type(t).__name__
    if name not in ("Tensor", "Parameter"):
        kind = name + " "
    elif isinstance(t, nn.Parameter):
        kind = "Parameter "
    try:
        if torch._C._functorch.is_batchedtensor(t):
            kind += "batched "
        elif torch._C._functorch.is_functorch_wrapped_tensor(t):
            kind += "functorch "
    except (AttributeError, RuntimeError):
        pass
    try:
        if t.is_inference():
            kind += "inference "
    except RuntimeError:
        pass
    try:
        shape = ",".join(str(int(s)) for s in t.shape)
    except (RuntimeError, TypeError):
        shape = "?"
    dtype = _DTYPES.get(t.dtype, str(t.dtype).replace("torch.", ""))
    grad_fn = getattr(t, "grad_fn", None)
    return f"{kind}{dtype}[{shape}]" + (f"<{type(grad_fn).__name__}>" if grad_fn is not None else "")


def describe(value: Any, depth: int = 0) -> str:
    """A stable one-line description of a hook argument: tensor kind, dtype, shape and ``grad_fn``; containers
    element by element; modules, nodes and other objects by their type."""
    if depth > 3:
        return "..."
    if value is None or isinstance(value, (bool, int)):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 30 else repr(value[:27] + "...")
    if isinstance(value, float):
        return "float"
    if isinstance(value, torch.Tensor):
        return _tensor(value)
    if isinstance(value, (tuple, list)):
        inner = ", ".join(describe(v, depth + 1) for v in value[:6]) + (", ..." if len(value) > 6 else "")
        return f"({inner}{',' if isinstance(value, tuple) and len(value) == 1 else ''})" if isinstance(value, tuple) \
            else f"[{inner}]"
    if isinstance(value, dict):
        keys = sorted(str(k) for k in value)
        if len(keys) > 6 or any(isinstance(v, torch.Tensor) for v in value.values()):
            return "dict(" + ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "") + ")"
        return "{" + ", ".join(f"{k}: {describe(value[k], depth + 1)}" for k in sorted(value, key=str)) + "}"
    if isinstance(value, torch.autograd.graph.Node):
        return f"Node {value.name()}"
    bucket = getattr(torch.distributed, "GradBucket", None)
    if bucket is not None and isinstance(value, bucket):
        return f"GradBucket(index={value.index()}, params={len(value.parameters())}, buffer={_tensor(value.buffer())})"
    return type(value).__name__


_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_PATH = re.compile(r"(/[\w.+-]+){2,}/?")


def clean_text(text: str, limit: int = 240) -> str:
    """An error or warning message as the matrix stores it: the first line, without addresses or paths, cut to
    ``limit`` characters."""
    first = next((line.strip() for line in str(text).strip().splitlines() if line.strip()), "")
    first = _ADDRESS.sub("0x…", first)
    first = _PATH.sub("<path>", first)
    return first if len(first) <= limit else first[:limit - 1] + "…"
