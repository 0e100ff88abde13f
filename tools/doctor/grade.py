"""How an answer of ``hooklab.explain_hook`` is graded against a setup's cause class.

The doctor's answer carries machine-readable cause codes (:attr:`hooklab.explain.HookExplanation.codes`, one per
fact it saw); the answer is **right** when the setup's class is among them and none of them contradicts what was
observed: ``fired`` (its "fired as expected") of a hook that did not fire, or a cause of not firing
(:data:`SILENT`) other than the setup's own for a hook that fired. Codes that state other facts (the hook fired in
threads, the module ran several times) are not counted against it. A doctor from before the codes existed is read through
:func:`prose_codes`, a fixed table of its causes and sentences (kept so the "before" figures can be measured again).
A **crash** is an exception that is not the step's own (the step's own comes back with ``hooklab_explanation``).
"""
from __future__ import annotations

import re
from typing import Any

# causes that say the hook did not fire
SILENT = ("no_grad", "frozen", "module_replaced", "parameter_replaced", "graph", "dict_output", "not_reached",
          "not_accumulated", "outside_backward_inputs", "vmap")
# the old doctor's words -> codes (used only when an answer has no `codes`)
_CAUSES = {"copy": "copy_ran", "another model": "copy_ran", "graph": "graph", "compiled": "compiled",
           "not reached": "not_reached", "bypassed": "not_reached", "step raised": "step_raised"}
_SENTENCES = (
    (r"fired as expected", "fired"),
    (r"was called \d+ times in this step", "several_calls"),
    (r"ran without gradients", "no_grad"),
    (r"module\(s\) outside the model that did not run carry hooks", "module_replaced"),
    (r"Parameter\(s\) outside the model|were not the Parameters it held", "parameter_replaced"),
    (r"the error was raised inside|^the step raised", "step_raised"),
)


def prose_codes(report: Any) -> list[str]:
    """Codes read from an answer's cause and sentences (for a doctor without ``codes``)."""
    codes = []
    if report.cause in _CAUSES:
        codes.append(_CAUSES[report.cause])
    for pattern, code in _SENTENCES:
        if any(re.search(pattern, r) for r in report.reasons) and code not in codes:
            codes.append(code)
    return codes


def codes_of(report: Any) -> list[str]:
    """The answer's codes: its own, or read from its prose."""
    own = getattr(report, "codes", None)
    return list(own) if own is not None else prose_codes(report)


def grade(label: str, fired: int, result: Any) -> dict[str, Any]:
    """``{"verdict": right | wrong | crash, "codes": [...], "false_fired": bool}`` for the doctor's ``result`` (a
    HookExplanation, or the exception explain_hook raised) on a setup of class ``label`` whose hook fired ``fired``
    times."""
    report = result
    if isinstance(result, BaseException):
        report = getattr(result, "hooklab_explanation", None)
        if report is None:
            return {"verdict": "crash", "codes": [], "false_fired": False,
                    "error": f"{type(result).__name__}: {str(result)[:200]}"}
    codes = codes_of(report)
    false_fired = "fired" in codes and fired == 0
    contradicts = fired > 0 and any(c in SILENT and c != label for c in codes)
    right = label in codes and not false_fired and not contradicts
    return {"verdict": "right" if right else "wrong", "codes": codes, "false_fired": false_fired}
