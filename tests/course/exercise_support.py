"""Shared by the exercise tests: a checker's verdict, and the reference solution run as a learner would."""
import torch
from torch import nn

import hooklab
import hooklab.course
from hooklab.course import exercises


def verdict(key, answer):
    """'correct', 'not solved' or 'wrong', from the checker itself."""
    return exercises.verdict(key, answer)[0]


def run_solution(key):
    """Execute exercise ``key``'s reference solution in a fresh namespace and return that namespace."""
    namespace = {"hooklab": hooklab, "course": hooklab.course, "torch": torch, "nn": nn}
    exec(exercises._get(key).solution, namespace)
    return namespace


def reference_answer(key):
    """The answer the reference solution of ``key`` defines (the last name it binds)."""
    namespace = run_solution(key)
    answers = [v for name, v in namespace.items() if not name.startswith("__")
               and name not in ("hooklab", "course", "torch", "nn")]
    assert answers, f"the solution of {key} defines nothing"
    return answers[-1]
