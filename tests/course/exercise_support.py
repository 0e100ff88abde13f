"""Shared by the exercise tests: a checker's verdict (strict: a checker that crashes fails the test), its
reason id, and the reference solution run as a learner would."""
import torch
from torch import nn

import hooklab
import hooklab.course
from hooklab.course import exercises


def verdict(key, answer):
    """'correct', 'not solved' or 'wrong', from the checker itself (an error inside the checker propagates)."""
    return exercises.verdict(key, answer, strict=True).status


def judged(key, answer):
    """``(status, reason id)``: which misconception the checker caught ("" when correct)."""
    result = exercises.verdict(key, answer, strict=True)
    return result.status, result.reason


def run_solution(key):
    """Execute exercise ``key``'s reference solution (the code ``course.solution`` shows) in a fresh namespace,
    as a learner's notebook would, and return that namespace."""
    namespace = {"hooklab": hooklab, "course": hooklab.course, "torch": torch, "nn": nn}
    exec(exercises._get(key).solution, namespace)
    return namespace


def reference_answer(key):
    """The answer the reference solution of ``key`` defines (the name the exercise declares, else the last
    name the solution binds)."""
    namespace = run_solution(key)
    name = exercises._get(key).answer
    if name is not None:
        return namespace[name]
    answers = [v for name, v in namespace.items() if not name.startswith("__")
               and name not in ("hooklab", "course", "torch", "nn")]
    assert answers, f"the solution of {key} defines nothing"
    return answers[-1]
