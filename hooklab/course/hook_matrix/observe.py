"""Observe one cell of the matrix: run a family's probe in a context, twice, and say what happened.

The first run records (every hook returns ``None``); the second, where the family has a return value to try,
returns its modification (:data:`.record.MODIFIERS`) and compares what the run produced (outputs, gradients,
state-dict keys, ...) with the first run: ``used`` when it changed, ``ignored`` when not, ``rejected`` when the
run raised instead. A cell that cannot mean anything gets ``n/a`` and the reason (:func:`not_applicable`).

Where the answer depends on how the probe is written (a context's :class:`~.contexts.Shape`, a family's
:class:`~.families.Returned`), the cell also records each other way under ``shapes``.
"""
from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from . import record
from .families import BY_ID as FAMILIES, FORWARD_FAILURE, Family, Rig, Subject
from .record import clean_text, describe

# the families that exist only on a wrapped model: the wrapper their rows put around every rig
FAMILY_WRAPPER = {"ddp-comm-hook": "ddp", "fsdp2-all-reduce-hook": "fsdp2"}


@dataclass
class Harness:
    """What a context's function is given: build the rig, install the family's hook, label phases, keep facts."""

    family: Family
    wrap: str = ""                      # "", "ddp" or "fsdp2": the distributed wrapper around every rig
    facts: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rigs: list[Rig] = field(default_factory=list)

    def rig(self, *, variant: str = "plain", shared: bool = False, inline: bool = False) -> Rig:
        rig = Rig.build(tapped=self.family.where == "forward-code", variant=variant, shared=shared, inline=inline)
        self.rigs.append(rig)
        wrapper = self.wrap or FAMILY_WRAPPER.get(self.family.id, "")
        if wrapper:
            from .wrappers import wrap
            wrap(rig, wrapper)
        return rig

    def install(self, rig: Rig, module: nn.Module | None = None) -> None:
        if record.phase() == "run":
            record.set_phase("register")
        self.family.install(rig, rig.subject if module is None else module)

    def phase(self, name: str) -> None:
        record.set_phase(name)

    def fact(self, *values: Any) -> None:
        """Record what the run produced (tensors are compared with ``allclose``, anything else with ``==``)."""
        for value in values:
            if isinstance(value, torch.Tensor):
                local = getattr(value, "to_local", None)  # a DTensor (FSDP2): this rank's shard
                value = (local() if callable(local) else value).detach().clone()
            self.facts.append(value)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def grads(self, rig: Rig, net: nn.Module | None = None) -> list[Any]:
        return [p.grad for p in (net or rig.net).parameters()]

    def exercise(self, rig: Rig, model: Any, opt: torch.optim.Optimizer | None = None) -> None:
        """Run what the state families act in, on the object a user would hold after this context: the model's
        ``state_dict()`` and ``load_state_dict()``, the optimizer's ``step()``, its ``state_dict()`` and
        ``load_state_dict()``."""
        opt = rig.opt if opt is None else opt
        acts = self.family.acts
        if "state" in acts:
            self.phase("state_dict")
            state = model.state_dict()
            self.fact(sorted(state))
            self.phase("load_state_dict")
            model.load_state_dict(state)
        if "step" in acts:
            self.phase("step")
            opt.step()
            self.fact(*[p for group in opt.param_groups for p in group["params"]])
        if "optimizer-state" in acts:
            self.phase("state_dict")
            state = opt.state_dict()
            self.fact(sorted(state))
            self.phase("load_state_dict")
            opt.load_state_dict(state)
            self.fact(opt.param_groups[0]["lr"])

    def close(self) -> None:
        for rig in reversed(self.rigs):
            rig.close()


@dataclass
class Run:
    calls: list[tuple[str, str]]      # (phase, description) of each call of the family's hook
    error: str | None
    warnings: list[str]
    facts: list[Any]
    notes: list[str]
    expected_failure: bool = False


class _Logs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, rec: logging.LogRecord) -> None:
        self.messages.append(f"{rec.name} {rec.levelname.lower()}: {clean_text(rec.getMessage())}")


def _run(family: Family, context: Any, *, modify: bool, wrap: str = "", returns: Any = None) -> Run:
    """One run of ``context`` (anything with a ``run(h)``: a Context or a Shape); ``returns``: in the modify run,
    the hooks' return value instead of the family's modification."""
    from .contexts import cleanup

    harness = Harness(family, wrap=wrap)
    record.LOG.clear()
    record._MODIFY[0] = modify
    record._RETURNS[0] = returns if modify else None
    record.set_phase("run")
    error, expected = None, False
    handler = _Logs()
    loggers = [logging.getLogger(name) for name in ("torch", "torch._dynamo", "torch._inductor", "torch.export",
                                                    "torch.fx", "torch.utils.checkpoint")]
    saved = [(lg, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.propagate = False
    try:
        # what PyTorch prints (FX prints a traceback of its own when a traced module raises) is not the cell's
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("always")
            try:
                context.run(harness)
            except Exception as exc:  # noqa: BLE001 - the error is what the cell records
                text = f"{type(exc).__name__}: {clean_text(str(exc))}"
                if FORWARD_FAILURE in str(exc) or FORWARD_FAILURE in text:
                    expected = True
                else:
                    error = text
            finally:
                harness.close()
                cleanup()
    finally:
        for lg, propagate in saved:
            lg.removeHandler(handler)
            lg.propagate = propagate
        record._MODIFY[0] = False
        record._RETURNS[0] = None
        record.WATCH[0] = None
        record.SEEN.clear()
        record.set_phase("run")
    found = sorted({f"{w.category.__name__}: {clean_text(str(w.message))}" for w in caught} | set(handler.messages))
    calls = [(phase, describe(args)) for key, phase, args in record.LOG if key == family.id]
    record.LOG.clear()
    return Run(calls, error, found, harness.facts, harness.notes, expected)


def _same(a: list[Any], b: list[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)) or x.shape != y.shape:
                return False
            if not torch.allclose(x.float(), y.float(), rtol=1e-4, atol=1e-6, equal_nan=True):
                return False
        elif x != y:
            return False
    return True


def not_applicable(family: Family, context: Any) -> tuple[str, str] | None:
    """Why the cell ``family@context`` means nothing (it is then not run), in English and in Chinese; or None."""
    from .contexts import WRAPPER_CONTEXTS

    if family.where == "wrapper":
        own, zh_own = ("DDP", "DDP") if family.id == "ddp-comm-hook" else ("FSDP2", "FSDP2")
        if context.id in ("ddp", "fsdp2"):
            if context.title.startswith(own) or (own == "DDP" and context.id == "ddp"):
                return (f"the family belongs to {own}: its plain run is {family.id}@eager",
                        f"这一族本来就属于 {zh_own}：它的普通运行就是 {family.id}@eager")
            return (f"{own}'s hook under {context.title}: the two wrappers are not stacked",
                    f"{zh_own} 的钩子放进 {context.zh}：两种包装器不叠加使用")
        if context.id not in WRAPPER_CONTEXTS and context.unwrapped:
            en, zh = context.unwrapped
            return en.format(own=own, family=family.id), zh.format(own=zh_own, family=family.id)
        if context.id not in WRAPPER_CONTEXTS:
            return (f"{context.title} does not run a {own}-wrapped training step (it traces or transforms the module "
                    "inside the wrapper, not its reducer)",
                    f"{context.zh} 不运行 {zh_own} 包装的训练步（它追踪或变换包装器里面的模块，而不是它的归约器）")
    if not (family.acts & context.varies):
        where = {"state": ("state_dict() / load_state_dict()", "state_dict() / load_state_dict()"),
                 "step": ("optimizer.step()", "optimizer.step()"),
                 "optimizer-state": ("the optimizer's state_dict() / load_state_dict()",
                                     "优化器的 state_dict() / load_state_dict()"),
                 "forward": ("the forward pass", "前向"), "backward": ("the backward pass", "反向")}
        acts = sorted(family.acts)
        return (f"the hook runs in {' and '.join(where[a][0] for a in acts)}, which {context.title} does not change",
                f"钩子在{'和'.join(where[a][1] for a in acts)}中运行，{context.zh} 不改变这一部分")
    if context.id in ("deepcopy", "pickle", "apply"):
        # (under deepcopy and pickle a hook registered by forward code is observed: the copy runs that code too)
        if family.where == "forward-code" and context.id == "apply":
            return ("registered by the module's forward code, anew in each call, on a tensor it makes: there is "
                    "nothing for model.apply() to register",
                    "由模块的前向代码在每次调用时挂在它产生的张量上：没有什么要 model.apply() 去注册")
        if family.where == "scope":
            return (f"registered for the whole process or thread, not on the model: {context.title} does not touch it",
                    f"对整个进程或线程注册，不在模型上：{context.zh} 碰不到它")
        if family.where == "optimizer" and context.id == "apply":
            return ("registered on the optimizer, which model.apply() does not visit",
                    "注册在优化器上，model.apply() 不会访问它")
    return None


@dataclass
class Observation:
    """One cell: what the family's hook did in the context (or why the cell is n/a)."""

    family: str
    context: str
    status: str                       # "observed" or "n/a"
    reason: str = ""                  # n/a: why
    reason_zh: str = ""               # the same in Chinese
    calls: int = 0
    by_phase: dict[str, int] = field(default_factory=dict)
    receives: list[str] = field(default_factory=list)
    return_value: str = ""
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    shapes: list[dict[str, Any]] = field(default_factory=list)  # the other ways of writing the probe, each observed

    @property
    def key(self) -> str:
        return f"{self.family}@{self.context}"

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> Observation:
        """An observation from its record (:meth:`as_dict`, or a cell of ``docs/hook_matrix.json``)."""
        fields = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in record.items() if k in fields})

    @property
    def fires(self) -> bool:
        return self.calls > 0

    def as_dict(self) -> dict[str, Any]:
        if self.status == "n/a":
            return {"family": self.family, "context": self.context, "status": "n/a", "reason": self.reason,
                    "reason_zh": self.reason_zh}
        out = {"family": self.family, "context": self.context, "status": self.status, "fires": self.fires,
               "calls": self.calls, "by_phase": self.by_phase, "receives": self.receives,
               "return_value": self.return_value, "error": self.error, "warnings": self.warnings,
               "notes": self.notes}
        if self.shapes:
            out["shapes"] = self.shapes
        return out

    def summary(self) -> str:
        """One line: what fired, how often, with what, and what the return value did."""
        if self.status == "n/a":
            return f"{self.key}: n/a ({self.reason})"
        phases = ", ".join(f"{p} {n}" for p, n in self.by_phase.items())
        parts = [f"fires {self.calls}x ({phases})" if self.calls else "does not fire"]
        if self.receives:
            parts.append("receives " + "; ".join(self.receives))
        if self.return_value:
            parts.append(f"return value: {self.return_value}")
        if self.error:
            parts.append(f"raises {self.error}")
        parts += self.notes
        for shape in self.shapes:
            same = "calls" in shape and all(shape[k] == getattr(self, k) for k in SAME)
            parts.append(f"{shape['en']}: {'the same' if same else shape_summary(shape)}")
        return f"{self.key}: " + " | ".join(parts)


# a shape that observed these as the cell did: the same
SAME = ("calls", "by_phase", "receives", "return_value", "error", "notes")


def shape_summary(shape: dict[str, Any]) -> str:
    """One shape of a cell (an entry of ``shapes``) in a few words: what fired, with what, and the return value."""
    parts = []
    if "calls" in shape:
        phases = ", ".join(f"{p} {n}" for p, n in shape["by_phase"].items())
        parts.append(f"fires {shape['calls']}x ({phases})" if shape["calls"] else "does not fire")
        if shape["receives"]:
            parts.append("receives " + "; ".join(shape["receives"]))
    if shape.get("return_value"):
        parts.append(f"return value: {shape['return_value']}")
    if shape.get("error"):
        parts.append(f"raises {shape['error']}")
    parts += shape.get("notes", [])
    return ", ".join(parts)


def _receives(calls: list[tuple[str, str]], limit: int = 4) -> list[str]:
    counts = Counter(desc for _, desc in calls)
    shown = [f"{n}x {desc}" for desc, n in counts.items()]
    return shown[:limit] + ([f"... {len(shown) - limit} more kinds"] if len(shown) > limit else [])


def _return_value(family: Family, context: Any, first: Run, wrap: str, returns: Any = None) -> str:
    """What the family's return value did: the modify run (returning ``returns``, or the family's modification)
    compared with the recording run ``first``."""
    if first.error is not None:
        return "not tried (the run raised)"
    if not first.calls:
        return "not tried (never called)"
    second = _run(family, context, modify=True, wrap=wrap, returns=returns)
    if second.error is not None:
        return f"rejected: {second.error}"
    return "ignored" if _same(first.facts, second.facts) else "used"


def _observed(family: Family, context: Any, wrap: str) -> tuple[Run, dict[str, Any]]:
    """The recording run of ``context`` and what it observed, as a record's fields (without family and context)."""
    first = _run(family, context, modify=False, wrap=wrap)
    phases: dict[str, int] = {}
    for phase, _ in first.calls:
        phases[phase] = phases.get(phase, 0) + 1
    notes = list(dict.fromkeys(first.notes))
    if first.expected_failure:
        notes.insert(0, "the forward raised on purpose")
    returned = "" if family.modify is None else _return_value(family, context, first, wrap)
    return first, {"calls": len(first.calls), "by_phase": phases, "receives": _receives(first.calls),
                   "return_value": returned, "error": first.error, "warnings": first.warnings, "notes": notes}


def observe(family_id: str, context: Any, *, wrap: str = "") -> Observation:
    """Run the probe of ``family_id`` in ``context`` (an id of the matrix, or a :class:`~.contexts.Context` of one's
    own) and return what it observed."""
    from ..exercises._harness import note_machinery
    from .contexts import BY_ID as CONTEXTS

    # the probes are what the exercises' checkers compute the truth with: a call from an answer is noted
    note_machinery("hook_matrix.observe", f"{family_id}@{getattr(context, 'id', context)}")

    if family_id not in FAMILIES:
        raise KeyError(f"no hook family {family_id!r}; the families are: {', '.join(FAMILIES)}")
    if isinstance(context, str):
        if context not in CONTEXTS:
            raise KeyError(f"no context {context!r}; the contexts are: {', '.join(CONTEXTS)}")
        context = CONTEXTS[context]
    family, context_id = FAMILIES[family_id], context.id
    reason = not_applicable(family, context)
    if reason is not None:
        return Observation(family_id, context_id, "n/a", reason=reason[0], reason_zh=reason[1])
    wrap = wrap or context.wrap
    first, seen = _observed(family, context, wrap)
    shapes = []
    for other in family.also:  # the same run, the hook returning another value
        if first.calls and first.error is None:
            shapes.append({"shape": other.id, "en": f"returning {other.en}", "zh": f"返回{other.zh}",
                           "return_value": _return_value(family, context, first, wrap, other.value)})
    for shape in getattr(context, "shapes", ()):  # the context's run written another way
        if shape.applies(family):
            _, other_seen = _observed(family, shape, wrap)
            shapes.append({"shape": shape.id, "en": shape.en, "zh": shape.zh,
                           **{k: v for k, v in other_seen.items() if k != "warnings"}})
    return Observation(family_id, context_id, "observed", warnings=seen.pop("warnings"), shapes=shapes, **seen)


def is_subject(module: Any) -> bool:
    return isinstance(module, Subject)
