"""Checked exercises: ``check(key, answer)`` runs the learner's answer on fresh inputs.

In a notebook::

    def count_relu_zeros(model, x):
        ...                                 # the learner's code
    course.check("00.1", count_relu_zeros) # says right / wrong and why (in zh, en or both: hooklab.course.lang)
    course.hint("00.1")                    # a nudge
    course.solution("00.1")                # a reference answer, only when asked for

Each notebook's exercises live in their own module (``nb00.py``, ...) and register
themselves with :func:`exercise`.
"""
from __future__ import annotations

import importlib
import pkgutil
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch.nn.modules import module as module_globals

from ..._torch_internals import GLOBAL_HOOK_FLAGS, global_hook_dicts, global_optimizer_hook_dicts
from ...inventory import hook_inventory
from ..lang import say

__all__ = ["Exercise", "NotSolved", "UnknownExercise", "Wrong", "check", "exercise", "hint", "hint_text", "solution",
           "solution_text", "verdict"]


class Wrong(Exception):
    """Raised by a checker: the answer is wrong; carries the reason in both languages."""

    def __init__(self, zh: str, en: str) -> None:
        super().__init__(en)
        self.zh, self.en = zh, en


class NotSolved(Wrong):
    """Raised by a checker when the answer is still the blank starting point."""


@dataclass(frozen=True)
class Exercise:
    key: str
    checker: Callable[[Any], None]
    hint: tuple[str, str]  # (zh, en)
    solution: str          # reference code


_REGISTRY: dict[str, Exercise] = {}


def exercise(key: str, *, hint: tuple[str, str], solution: str) -> Callable:
    """Register the decorated function as the checker of exercise ``key`` (e.g. ``"00.1"``)."""
    def register(checker: Callable[[Any], None]) -> Callable[[Any], None]:
        if key in _REGISTRY:
            raise ValueError(f"exercise {key!r} is registered twice")
        _REGISTRY[key] = Exercise(key, checker, hint, solution.strip("\n"))
        return checker
    return register


def _load_all() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("nb"):
            importlib.import_module(f"{__name__}.{info.name}")


class UnknownExercise(KeyError):
    """``key`` names no exercise; the message (one line, both languages) lists the keys that exist."""

    def __init__(self, key: object, known: list[str]) -> None:
        self.key, self.known = key, known
        guess = _close_key(key, known)
        zh_guess, en_guess = (f"（是不是“{guess}”？）", f" (did you mean {guess!r}?)") if guess else ("", "")
        keys = ", ".join(known)
        self.message = say(f"[{key}] 没有这道练习{zh_guess}。可用的：{keys}",
                           f"[{key}] no such exercise{en_guess}. Valid keys: {keys}",
                           both=f"[{key}] 没有这道练习{zh_guess} / no such exercise{en_guess}. 可用的 / valid keys: {keys}")
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would print the message with quotes around it
        return self.message


def _close_key(key: object, known: list[str]) -> str | None:
    """"1.3" -> "01.3", "01,3" -> "01.3": the key the learner most likely meant, if any."""
    text = str(key).strip().replace(",", ".").replace(" ", "")
    head, _, tail = text.partition(".")
    candidate = f"{head.zfill(2)}.{tail}" if head.isdigit() and tail.isdigit() else text
    return candidate if candidate in known and candidate != key else None


def _get(key: str) -> Exercise:
    _load_all()
    if key not in _REGISTRY:
        raise UnknownExercise(key, sorted(_REGISTRY))
    return _REGISTRY[key]


# A check runs the learner's code: it gets this long (seconds) before it is judged too slow.
CHECK_TIME_LIMIT = 120


class _TooSlow(BaseException):
    """Raised by the alarm inside a check that ran past :data:`CHECK_TIME_LIMIT`."""


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block after ``seconds`` (main thread on Unix; elsewhere no limit is possible)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise _TooSlow

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def _learner_settings_kept() -> Iterator[None]:
    """Checkers run with gradients on (a cell under ``no_grad`` or ``inference_mode`` must not make a
    right answer wrong), and whatever the learner's answer changes process-wide is put back."""
    threads, grad, dtype = torch.get_num_threads(), torch.is_grad_enabled(), torch.get_default_dtype()
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        with torch.inference_mode(False), torch.enable_grad():
            yield
    finally:
        torch.set_num_threads(threads)
        torch.set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
        torch.use_deterministic_algorithms(deterministic)


def verdict(key: str, answer: Any) -> tuple[str, str, str]:
    """Run exercise ``key``'s checker on ``answer``: ``("correct" | "not solved" | "wrong", zh, en)``.

    The check runs with gradients enabled (also when called under ``no_grad`` / ``inference_mode``),
    leaves the learner's RNG, thread count, grad mode and default dtype as they were, and gives the
    learner's code :data:`CHECK_TIME_LIMIT` seconds.
    """
    ex = _get(key)
    try:
        # checkers seed their own inputs; the learner's RNG is untouched
        with torch.random.fork_rng(devices=[]), _learner_settings_kept(), _time_limit(CHECK_TIME_LIMIT):
            ex.checker(answer)
    except NotSolved as why:
        return "not solved", why.zh, why.en
    except Wrong as why:
        return "wrong", why.zh, why.en
    except _TooSlow:
        return ("wrong", f"检查在 {CHECK_TIME_LIMIT} 秒内没有结束：你的代码是不是陷入了死循环，或者在等一个永远不会来的结果？",
                f"the check did not finish within {CHECK_TIME_LIMIT} s: does your code loop for ever, or wait for "
                "something that never comes?")
    return "correct", "", ""


def check(key: str, answer: Any) -> None:
    """Check ``answer`` to exercise ``key`` and print the verdict, and why, in the course language
    (:func:`hooklab.course.lang.course_language`: both by default).

    A key that names no exercise prints one line listing the keys that exist (no traceback).
    """
    try:
        status, zh, en = verdict(key, answer)
    except UnknownExercise as unknown:
        print(unknown.message)
        return
    if status == "correct":
        print(say(f"[{key}] 正确！", f"[{key}] correct!"))
    elif status == "not solved":
        print(say(f"[{key}] 尚未完成：{zh}", f"[{key}] not solved yet: {en}"))
    else:
        print(say(f"[{key}] 还不对：{zh}", f"[{key}] not right yet: {en}"))


def _in_notebook() -> bool:
    """True inside a Jupyter kernel, where output can be rendered as Markdown."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _show(plain: str, markdown: str) -> None:
    """Markdown in a notebook (code in backticks renders as code, long lines wrap between words), plain text elsewhere."""
    if _in_notebook():
        from IPython.display import display
        display({"text/markdown": markdown, "text/plain": plain}, raw=True)
    else:
        print(plain)


def hint_text(key: str) -> tuple[str, str]:
    """Exercise ``key``'s hint as ``(plain text, Markdown)``: one line per language, never a raw line break inside one."""
    zh, en = (" ".join(part.split()) for part in _get(key).hint)
    return (say(f"[{key}] 提示：{zh}", f"[{key}] hint: {en}"),
            say(f"**[{key}] 提示**：{zh}", f"**[{key}] hint**: {en}",
                both=f"**[{key}] 提示**：{zh}\n\n**[{key}] hint**: {en}"))


def solution_text(key: str) -> tuple[str, str]:
    """Exercise ``key``'s reference solution as ``(plain text, Markdown)``."""
    code = _get(key).solution
    plain = say(f"# [{key}] 参考答案", f"# [{key}] reference solution", both=f"# [{key}] reference solution / 参考答案")
    title = say(f"**[{key}] 参考答案**", f"**[{key}] reference solution**",
                both=f"**[{key}] 参考答案 / reference solution**")
    return f"{plain}\n{code}", f"{title}\n\n```python\n{code}\n```"


def hint(key: str) -> None:
    """Show the hint of exercise ``key`` in both languages (rendered as Markdown in a notebook)."""
    try:
        _show(*hint_text(key))
    except UnknownExercise as unknown:
        print(unknown.message)


def solution(key: str) -> None:
    """Show a reference solution of exercise ``key`` (a Python code block in a notebook)."""
    try:
        _show(*solution_text(key))
    except UnknownExercise as unknown:
        print(unknown.message)


def require_callable(answer: Any, name: str) -> None:
    """The usual first step of a checker: a blank answer is 'not solved', a non-function is wrong."""
    if answer is None or answer is ...:
        raise NotSolved(f"请先实现 `{name}`。", f"implement `{name}` first.")
    if not callable(answer):
        raise Wrong(f"需要传入函数 `{name}`，收到的是 {type(answer).__name__}。",
                    f"pass the function `{name}`, not a {type(answer).__name__}.")


def call_answer(answer: Callable, *args: Any, allow_none: bool = False) -> Any:
    """Call the learner's function; its exceptions become a readable verdict.

    Returning ``None`` means "not solved yet", unless ``allow_none`` (a hook that may observe).
    """
    try:
        result = answer(*args)
    except Exception as exc:  # the learner's code failed: say how, in both languages
        raise Wrong(f"你的函数抛出了 {type(exc).__name__}: {exc}",
                    f"your function raised {type(exc).__name__}: {exc}") from exc
    if result is None and not allow_none:
        raise NotSolved("你的函数还没有返回任何值（返回了 None）。", "your function returns None so far.")
    return result


def _global_dicts() -> list[dict]:
    """Every dict in which torch keeps global module and optimizer hooks and their flags (a handle's id,
    unique across all of them, is the key in each)."""
    flags = [d for attr in GLOBAL_HOOK_FLAGS if isinstance(d := getattr(module_globals, attr, None), dict)]
    return [d for _, _, d in (*global_hook_dicts(), *global_optimizer_hook_dicts())] + flags


def global_hook_ids() -> set[int]:
    """The ids of the global module and optimizer hooks registered right now."""
    return {key for hooks in _global_dicts() for key in hooks}


def drop_global_hooks_added_since(before: set[int]) -> bool:
    """Remove the global hooks registered after ``before`` was taken (a learner forgot them); True if any."""
    found = False
    for hooks in _global_dicts():
        for key in [k for k in hooks if k not in before]:
            del hooks[key]
            found = True
    return found


@contextmanager
def no_hooks_left(*owners: Any) -> Iterator[None]:
    """Around a call of the learner's function: afterwards it is wrong to have left a hook on an
    ``owner`` (module or tensor) or a global module hook; leaked global hooks are removed at once."""
    on_owners = [len(hook_inventory(owner, include_global=False)) for owner in owners]
    globals_before = global_hook_ids()
    try:
        yield
    finally:
        leaked_global = drop_global_hooks_added_since(globals_before)
    if leaked_global:
        raise Wrong("函数返回后还留着一个全局钩子（它会影响之后的每个模块！）；把句柄交给 `hooklab.HookScope` 或调用 `handle.remove()`。",
                    "a global hook is still registered after your function returned (it affects every module from "
                    "then on!); hand its handle to a `hooklab.HookScope` or call `handle.remove()`.")
    if any(len(hook_inventory(owner, include_global=False)) > n for owner, n in zip(owners, on_owners)):
        raise Wrong("函数返回后还留着钩子；把句柄交给 `hooklab.HookScope` 或调用 `handle.remove()`。",
                    "a hook is still registered after your function returned; hand its handle to a "
                    "`hooklab.HookScope` or call `handle.remove()`.")
