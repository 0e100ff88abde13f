"""Run code that may fail or warn, and print what happened in a stable, short form.

Teaching a pitfall means showing its error or warning; a traceback is long and full of
paths, so ``attempt`` prints one line per event instead::

    course.attempt(lambda: torch.ones(2).backward())
    # RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any


def first_sentence(message: object) -> str:
    """The first sentence (up to the first '. ' or newline) of an error or warning message."""
    return str(message).strip().split("\n")[0].split(". ")[0]


def attempt(fn: Callable[..., Any], *args: Any, quiet: bool = False, **kwargs: Any) -> Any:
    """Call ``fn(*args, **kwargs)``; print the exception it raised and each warning it gave.

    Prints ``ran without error`` when nothing happened (unless ``quiet``), one line
    ``ErrorType: first sentence`` per exception or warning otherwise. Returns ``fn``'s
    result, or ``None`` when it raised. ``KeyboardInterrupt`` is never swallowed.
    """
    if not callable(fn):
        raise TypeError(f"attempt() needs something to call, e.g. attempt(lambda: model(x)); got {type(fn).__name__}")
    result, error = None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:  # showing the error is the point
            error = exc
    for warning in caught:
        print(f"{warning.category.__name__}: {first_sentence(warning.message)}")
    if error is not None:
        print(f"{type(error).__name__}: {first_sentence(error)}")
    elif not caught and not quiet:
        print("ran without error")
    return result
