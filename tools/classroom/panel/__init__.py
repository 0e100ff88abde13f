"""The exercises' panel: honest answers to the course's exercises, right and wrong, written from the notebooks alone.

Each module ``answers_NN`` holds answers to notebook NN's exercises, as a learner would write them in the exercise
cell: the writer read the notebook (its lessons, the exercise's statement and its starting cell) and never the
checkers, their tests or the reference solutions, and did not run a checker while writing. A wrong answer is an
honest attempt with one real mistake, named by a tag of :data:`MISTAKES` and a sentence; a right answer is written in
a style of its own. The panel measures the checkers' feedback: a right answer accepted, a wrong one diagnosed by its
actual mistake. Part of it is held out (:func:`held_out`), drawn with a committed seed before any figure was read.

>>> sorted(MISTAKES)[:3]
['count', 'detach-or-graph', 'global-state']
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# the kinds of mistakes learners make with hooks (the course's pitfalls, the symptom index, the bank's questions),
# fixed before the panel was written; each wrong answer has one of them
MISTAKES = {
    "returns-input": "a hook returns its input, or another value, where its return value replaces the result",
    "no-return": "the hook or function computes the right thing and does not return it",
    "late-registration": "the hook is registered after the point where it could fire (after backward, after the "
                         "forward, on a tensor already consumed)",
    "host-sync": ".item(), .cpu(), .tolist() or a print inside a hook that runs on every call",
    "handle-left": "a hook left registered: the handle never removed, or removed on one path only",
    "re-registered": "a hook registered again on every call, so it fires several times",
    "in-place-grad": "the gradient edited in place inside a hook",
    "inputs-no-grad": "a full backward hook on a module whose inputs do not require grad",
    "wrong-hook-kind": "a hook of another kind than the task needs (forward for pre, tensor for post-accumulate, "
                       "module for tensor, global for local, ...)",
    "wrong-signature": "the hook's or the function's arguments taken in the wrong order or number",
    "wrong-target": "the hook on the wrong object: another module, tensor, parameter or node",
    "shape-or-dtype": "a result of the wrong shape, dtype or device",
    "stale-state": "state kept across calls that should be fresh (a list never cleared, a count never reset), or "
                   "reset when it should be kept",
    "count": "a count that is off: calls, firings or elements counted wrongly",
    "detach-or-graph": "a tensor detached, cloned or kept where it should not be (the graph broken, memory kept, a "
                       "saved tensor not the one autograd needs)",
    "global-state": "a process-wide setting or global hook changed and not put back",
    "logic": "the computation itself wrong (a formula, a condition, a sign, a scale)",
    "other": "a mistake none of the tags above names (say it in the sentence)",
}


@dataclass(frozen=True)
class Answer:
    """One answer of the panel: ``id`` is ``"<module>:<function>"``; ``make`` is the function that is the answer
    (``built=False``) or that returns it (``built=True``: an answer that is a class instance or a value)."""
    id: str
    key: str
    right: bool
    mistake: str | None
    says: str
    make: Callable[..., Any]
    built: bool = False

    def answer(self) -> Any:
        """What the learner passes to ``course.check``."""
        return self.make() if self.built else self.make


PANEL: dict[str, Answer] = {}


def answer(key: str, *, right: bool = False, mistake: str | None = None, says: str = "",
           built: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as an answer to exercise ``key`` ("03.1"): right, or wrong with a tag of
    :data:`MISTAKES` and a sentence saying the mistake (``says``)."""
    if right and mistake is not None:
        raise ValueError(f"{key}: a right answer has no mistake")
    if not right and mistake not in MISTAKES:
        raise ValueError(f"{key}: a wrong answer names one mistake of MISTAKES, got {mistake!r}")
    if not right and not says:
        raise ValueError(f"{key}: say the mistake in a sentence")

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        entry = Answer(f"{fn.__module__.rpartition('.')[2]}:{fn.__name__}", key, right, mistake, says, fn, built)
        if entry.id in PANEL:
            raise ValueError(f"two answers are named {entry.id}")
        PANEL[entry.id] = entry
        return fn
    return register


def load() -> dict[str, Answer]:
    """Every answer of the panel, by id (the modules imported once)."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("answers_"):
            importlib.import_module(f"{__name__}.{info.name}")
    return dict(sorted(PANEL.items()))


HELD_OUT_SEED = 8001  # drawn once, when the panel was complete, before any answer was run through a checker
HELD_OUT_SHARE = 0.2


def held_out(answers: list[tuple[str, bool]], seed: int = HELD_OUT_SEED) -> set[str]:
    """The held-out part of ``answers`` (``(id, right)`` pairs): 20 % of each notebook's wrong answers and 20 % of its
    right ones, drawn with ``seed`` from the sorted ids.

    >>> sorted(held_out([("answers_00:a", False), ("answers_00:b", False), ("answers_00:c", False),
    ...                  ("answers_00:d", False), ("answers_00:e", False), ("answers_00:f", True)], seed=1))
    ['answers_00:b']
    """
    rng = random.Random(seed)
    out: set[str] = set()
    groups: dict[tuple[str, bool], list[str]] = {}
    for i, right in sorted(answers):
        groups.setdefault((i.partition(":")[0], right), []).append(i)
    for _group, members in sorted(groups.items()):
        out |= set(rng.sample(members, round(len(members) * HELD_OUT_SHARE)))
    return out
