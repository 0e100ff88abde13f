"""Checked exercises: ``check(key, answer)`` runs the learner's answer on fresh inputs.

In a notebook::

    def count_relu_zeros(model, x):
        ...                                 # the learner's code
    course.check("00.1", count_relu_zeros) # says right / wrong and why (in zh, en or both: hooklab.course.lang)
    course.hint("00.1")                    # a nudge
    course.solution("00.1")                # a reference answer, only when asked for

Each notebook's exercises live in their own module (``nb00.py``, ...): a checker per exercise, registered
with :func:`exercise` and built from the rules of :mod:`._support`, each verdict with a reason id. The hints
and the reference solutions are in ``solutions/nbNN.py``: a ``HINTS`` table, and one section of real code per
exercise that starts with a line ``# [NN.K]`` (what :func:`solution` shows; the tests run it).
"""
from __future__ import annotations

import importlib
import logging
import math
import os
import pkgutil
import random
import re
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ... import _torch_internals as internals
from ..._torch_internals import print_options
from ..lang import say
from ._harness import Harness, guard_solutions_module, note_machinery, threads_left, threads_started
from ._support import (  # noqa: F401
    GLOBAL_HOOK_LEFT,
    SAVED_HOOKS_LEFT_ACTIVE,
    TENSOR_HANDLE,
    NotSolved,
    Wrong,
    call_answer,
    drop_global_hooks_added_since,
    global_full_backward_flag,
    global_hook_ids,
    no_hooks_left,
    require_callable,
    set_global_full_backward_flag,
    started,
)

__all__ = ["Exercise", "NotSolved", "UnknownExercise", "Verdict", "Wrong", "check", "exercise", "hint", "hint_text",
           "solution", "solution_text", "verdict"]


@dataclass(frozen=True)
class Exercise:
    key: str
    checker: Callable[[Any], None]
    answer: str | None     # the name the learner's answer is bound to in the notebook (and in the solution)
    data: bool             # the answer is a value (a list, a dict), not a function
    hint: tuple[str, str]  # (zh, en)
    solution: str          # reference code
    host_reads: bool = True  # False: the task forbids reading tensor values on the host (the harness refuses them)


_REGISTRY: dict[str, Exercise] = {}
_SECTION = re.compile(r"^# \[(\d\d\.\d+)\]$", re.MULTILINE)


def solutions_module(key: str) -> Any:
    """The module ``solutions/nbNN.py`` that holds exercise ``key``'s hint and reference solution (reading it from
    an answer during a check is refused: :mod:`._harness`)."""
    module = importlib.import_module(f"{__name__}.solutions.nb{key.split('.')[0]}")
    guard_solutions_module(module)
    return module


def solution_sections(module: Any) -> dict[str, str]:
    """``{key: code}``: the sections of a solutions module, each from its ``# [NN.K]`` line to the next one."""
    import inspect

    source = inspect.getsource(module)
    marks = list(_SECTION.finditer(source))
    ends = [m.start() for m in marks[1:]] + [len(source)]
    return {m.group(1): source[m.end():end].strip("\n") for m, end in zip(marks, ends)}


def exercise(key: str, *, answer: str | None = None, data: bool = False, hint: tuple[str, str] | None = None,
             solution: str | None = None, host_reads: bool = True) -> Callable:
    """Register the decorated function as the checker of exercise ``key`` (e.g. ``"00.1"``).

    ``answer`` names what the learner defines (``"count_relu_zeros"``): a function, which the framework requires
    before the checker runs (a blank answer is "not solved", anything else not callable is wrong), or with
    ``data=True`` a value the checker judges alone. The hint and the reference solution come from
    ``solutions/nbNN.py`` (``HINTS[key]`` and the section ``# [key]``) unless given here. ``host_reads=False``: the
    task forbids reading tensor values on the host, which the harness then refuses by any route (:mod:`._harness`).
    """
    def register(checker: Callable[[Any], None]) -> Callable[[Any], None]:
        if key in _REGISTRY:
            raise ValueError(f"exercise {key!r} is registered twice")
        shown_hint, code = hint, solution
        if shown_hint is None or code is None:
            module = solutions_module(key)
            shown_hint = shown_hint if shown_hint is not None else module.HINTS[key]
            code = code if code is not None else solution_sections(module)[key]
        _REGISTRY[key] = Exercise(key, checker, answer, data, shown_hint, code.strip("\n"), host_reads)
        return checker
    return register


def _load_all() -> None:
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("nb") and not info.ispkg:
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


# A check runs the learner's code: it gets this much CPU time (seconds) before it is judged too slow (an endless
# loop). Code that waits for something that never comes uses no CPU: it is stopped after as long in wall-clock time,
# stretched by the machine's load (a busy machine runs the same check several times slower; see _load_factor).
CHECK_TIME_LIMIT = 120
# a check counts as waiting (not computing) while it used less than this share of the wall-clock time in CPU time:
# a loop on a machine kept busy by others still gets far more (2 cores, 20 busy processes: a tenth each, seen in a
# test run beside other work), while code that sleeps or blocks uses well under one percent
WAITING_CPU_SHARE = 0.02


class _TooSlow(BaseException):
    """Raised by the alarm inside a check that ran past :data:`CHECK_TIME_LIMIT`; ``waited``: it used little CPU
    (it waited), else it computed for that long."""

    def __init__(self, waited: bool) -> None:
        super().__init__(waited)
        self.waited = waited


def _load_factor() -> float:
    """How many times slower than an idle machine this one runs a CPU-bound process now (load average per core,
    at least 1)."""
    try:
        load = max(os.getloadavg())
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return 1.0
    return max(1.0, load / cores)


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Stop the block (:class:`_TooSlow`) once it used ``seconds`` of CPU time, or waited ``seconds`` x the load
    factor of wall-clock time (main thread on Unix; elsewhere no limit is possible). An alarm ticks once a second to
    look; an alarm that was set before (a test's time limit) still rings when it is due."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return
    cpu_start, start, tick = time.process_time(), time.monotonic(), min(1.0, seconds)
    previous = signal.getsignal(signal.SIGALRM)
    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    outer_due = [start + outer_left if outer_left > 0 else math.inf]

    def arm(now: float) -> None:
        signal.setitimer(signal.ITIMER_REAL, max(min(tick, outer_due[0] - now), 0.001))

    def look(signum: int, frame: Any) -> None:
        now = time.monotonic()
        if now >= outer_due[0] and callable(previous):  # the alarm that was set before: its handler's turn
            signal.signal(signal.SIGALRM, previous)
            previous(signum, frame)  # may raise (a test's time limit); else it set its alarm again, for later
            left, _ = signal.getitimer(signal.ITIMER_REAL)
            outer_due[0] = now + left if left > 0 else math.inf
            signal.signal(signal.SIGALRM, look)
        elif (used := time.process_time() - cpu_start) >= seconds:
            raise _TooSlow(waited=False)
        elif now - start >= seconds * _load_factor() and used < WAITING_CPU_SHARE * (now - start):
            raise _TooSlow(waited=True)  # a wait: code that computes, however slowly, runs on to the CPU limit
        arm(now)

    signal.signal(signal.SIGALRM, look)
    arm(start)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_due[0] < math.inf:  # the earlier alarm, for what is left of it
            signal.setitimer(signal.ITIMER_REAL, max(outer_due[0] - time.monotonic(), 0.001))


def _numpy_random() -> Any:
    try:
        import numpy
    except ImportError:
        return None
    return numpy.random


class _Isolation:
    """The settings a check runs under, and everything the learner's answer may change process-wide put back.

    The checker gets gradients on (also under ``no_grad`` / ``inference_mode``), float32 as the default dtype
    and anomaly detection off, whatever the learner set. Afterwards the learner's thread count, grad mode,
    default dtype, deterministic mode, anomaly mode, print options and RNGs (torch, Python's ``random``,
    numpy's) are as they were, and so are the environment variables (a checker may set ``HF_HUB_OFFLINE``; an
    answer may set anything), the SIGINT handler (an answer that ignores it would leave Ctrl-C and the notebook's
    interrupt without effect), the working directory, the recursion limit, the warning filters and logging's disable
    level. A thread the learner's code started and left running is not stopped: :attr:`threads_left` names it (the
    verdict is then "wrong"). A saved-tensor hook context the answer entered and never left is popped, and
    :attr:`saved_tensor_hooks_left` says so; a global hook registered during the check and not removed (module
    forward / backward / pre hooks, the registration hooks, global optimizer hooks) is removed, and
    :attr:`global_hooks_left` says so: the verdict is then "wrong", whatever the checker found.
    """

    def __enter__(self) -> _Isolation:
        self.threads, self.grad, self.dtype = torch.get_num_threads(), torch.is_grad_enabled(), torch.get_default_dtype()
        self.deterministic = (torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled())
        self.anomaly = (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled())
        self.print_options = print_options()
        self.python_random = random.getstate()
        self.numpy_random = _numpy_random()
        self.numpy_state = self.numpy_random.get_state() if self.numpy_random is not None else None
        self.saved_tensor_hooks = internals.top_saved_tensors_hooks()
        self.saved_tensor_hooks_left = False
        self.global_hooks, self.full_backward = global_hook_ids(), global_full_backward_flag()
        self.global_hooks_left = False
        self.environ = dict(os.environ)
        self.sigint = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
        try:
            self.cwd: str | None = os.getcwd()
        except OSError:  # the working directory was deleted: nothing to go back to
            self.cwd = None
        self.recursion_limit = sys.getrecursionlimit()
        self.warning_filters = list(warnings.filters)
        self.logging_disabled = logging.root.manager.disable
        self.threads_started: list[threading.Thread] = []
        self.threads_left: list[str] = []
        self._stack = ExitStack()
        self._stack.enter_context(threads_started(self.threads_started))
        # checkers seed their own inputs; the learner's torch RNG is untouched
        self._stack.enter_context(torch.random.fork_rng(devices=[]))
        self._stack.enter_context(torch.inference_mode(False))
        self._stack.enter_context(torch.enable_grad())
        torch.set_default_dtype(torch.float32)
        torch.autograd.set_detect_anomaly(False)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.saved_tensor_hooks_left = self._pop_saved_tensor_hooks()
        self.global_hooks_left = drop_global_hooks_added_since(self.global_hooks)
        set_global_full_backward_flag(self.full_backward)
        try:
            self._stack.close()
        finally:
            self._restore_environ()
            self._restore_process()
            torch.set_num_threads(self.threads)
            torch.set_grad_enabled(self.grad)
            torch.set_default_dtype(self.dtype)
            # only when the answer changed it: the call imports torch._inductor (1.5 s of CPU in a fresh kernel)
            if (torch.are_deterministic_algorithms_enabled(),
                    torch.is_deterministic_algorithms_warn_only_enabled()) != self.deterministic:
                torch.use_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
            torch.autograd.set_detect_anomaly(self.anomaly[0], check_nan=self.anomaly[1])
            if self.print_options is not None:
                torch.set_printoptions(**self.print_options)
            random.setstate(self.python_random)
            if self.numpy_random is not None:
                self.numpy_random.set_state(self.numpy_state)

    def _restore_process(self) -> None:
        """Put back what Python (not torch) keeps process-wide, and name the threads left running."""
        if self.sigint is not None and signal.getsignal(signal.SIGINT) is not self.sigint:
            signal.signal(signal.SIGINT, self.sigint)
        if self.cwd is not None:
            try:
                if os.getcwd() != self.cwd:
                    os.chdir(self.cwd)
            except OSError:  # the answer deleted the directory it moved to
                os.chdir(self.cwd)
        if sys.getrecursionlimit() != self.recursion_limit:
            sys.setrecursionlimit(self.recursion_limit)
        if warnings.filters != self.warning_filters:
            warnings.filters[:] = self.warning_filters  # type: ignore[index]  # a list at run time
            mutated = getattr(warnings, "_filters_mutated", None)  # what warnings.simplefilter calls (Python 3.11, 3.12)
            if callable(mutated):
                mutated()
        if logging.root.manager.disable != self.logging_disabled:
            logging.disable(self.logging_disabled)
        self.threads_left = threads_left(self.threads_started)

    def _restore_environ(self) -> None:
        for name in [n for n in os.environ if n not in self.environ]:
            del os.environ[name]
        for name, value in self.environ.items():
            if os.environ.get(name) != value:
                os.environ[name] = value

    def _pop_saved_tensor_hooks(self) -> bool:
        """Pop the saved-tensor contexts entered since ``__enter__``; True if there were any."""
        def same(top: Any) -> bool:
            before = self.saved_tensor_hooks
            return top is before or (top is not None and before is not None
                                     and all(a is b for a, b in zip(top, before)))
        found = False
        for _ in range(1000):  # a bound, in case the stack cannot be read or popped as expected
            top = internals.top_saved_tensors_hooks()
            if top is None or same(top) or not internals.pop_saved_tensors_hooks():
                break
            found = True
        return found




# the packages of the course's extra (pyproject.toml) that a checker may need: without them a check says how to
# install them (pip install "hooklab[course]") instead of failing on a ModuleNotFoundError
COURSE_EXTRA_MODULES = ("transformers", "safetensors", "torchvision", "peft", "matplotlib", "nbformat", "nbconvert")


class Verdict(NamedTuple):
    """A checker's judgement: ``status`` ("correct" | "not solved" | "wrong"), why (``zh``, ``en``) and the
    ``reason`` id of that why ("" when correct)."""
    status: str
    zh: str
    en: str
    reason: str


def verdict(key: str, answer: Any, *, strict: bool = False) -> Verdict:
    """Run exercise ``key``'s checker on ``answer`` and return its :class:`Verdict`.

    The check runs with gradients enabled (also when called under ``no_grad`` / ``inference_mode``), float32
    as the default dtype and anomaly detection off; it leaves the learner's settings and random generators as
    they were (:class:`_Isolation`) and gives the learner's code :data:`CHECK_TIME_LIMIT` seconds. The answer runs
    under the leak harness (:mod:`._harness`): a host read where the task forbids it, a module or tensor of the check's
    still reachable from the answer, what the answer keeps growing from one check to the next (then the check runs a
    second time to tell), a call into the course's answer machinery or a replaced function is "wrong", whatever the
    checker found.
    "not solved" is for the blank starting point only: once the answer is a function with a body, a checker's
    "not solved yet" reason is given as "wrong". An unexpected error inside the check is a "wrong" verdict that
    names it (reason ``checker-error``), never a traceback; with ``strict=True`` (the tests) it propagates, so a
    checker that crashes fails its test instead of passing as "wrong".
    """
    note_machinery("verdict", key)  # an answer that calls the checker from inside a check
    ex = _get(key)
    isolation = _Isolation()
    harness = Harness(answer, host_reads=ex.host_reads, data=ex.data)

    def again() -> None:  # the second check that tells a bounded cache from unbounded growth
        with harness.watching(track=False):
            harness.run(ex.checker)
        harness.judge_during()

    try:
        with isolation, _time_limit(CHECK_TIME_LIMIT):
            if ex.answer is not None and not ex.data:
                # before the harness: a blank answer or one that is not a function runs no code, so it can leak
                # nothing, and its verdict needs no note of every module (about a second once a library is loaded)
                require_callable(answer, ex.answer)
            try:
                with harness.watching():
                    harness.run(ex.checker)
            except Exception:
                harness.judge_during()  # what the answer did while it ran is the verdict, whatever the checker found
                if isinstance(sys.exc_info()[1], Wrong):
                    harness.judge_kept()
                raise
            harness.judge_during()
            harness.judge_after(again)
        result = Verdict("correct", "", "", "")
    except NotSolved as why:
        result = Verdict("wrong" if started(answer) else "not solved", why.zh, why.en, why.reason)
    except Wrong as why:
        result = Verdict("wrong", why.zh, why.en, why.reason)
    except _TooSlow as slow:
        if slow.waited:
            result = Verdict("wrong", f"检查等了 {CHECK_TIME_LIMIT} 秒以上（按机器负载放宽后）也没有结束，其间几乎没有计算："
                             "你的代码是不是在等一个永远不会来的结果？",
                             f"the check did not finish within {CHECK_TIME_LIMIT} s (stretched for the machine's load) and "
                             "hardly computed meanwhile: does your code wait for something that never comes?",
                             "too-slow")
        else:
            result = Verdict("wrong", f"检查用了 {CHECK_TIME_LIMIT} 秒的 CPU 时间还没有结束：你的代码是不是陷入了死循环？",
                             f"the check did not finish within {CHECK_TIME_LIMIT} s of CPU time: does your code loop "
                             "for ever?", "too-slow")
    except ImportError as missing:
        if (missing.name or "").split(".")[0] not in COURSE_EXTRA_MODULES:
            if strict:
                raise
            result = _checker_error(missing)
        else:  # the checker needs a package of the course's extra (transformers, torchvision): say how to get it
            from .. import needs_course_extra
            package = ModuleNotFoundError(str(missing), name=(missing.name or "").split(".")[0])
            raise needs_course_extra(package, f"the check of exercise {key}") from missing
    except Exception as exc:  # an error the checker did not foresee: a verdict that names it, not a traceback
        if strict and not isolation.global_hooks_left:
            raise
        result = _checker_error(exc)
    if isolation.saved_tensor_hooks_left and result.status != "wrong":
        result = Verdict("wrong", *SAVED_HOOKS_LEFT_ACTIVE, "saved-hooks-left")
    if isolation.threads_left and result.status != "not solved":
        names = ", ".join(isolation.threads_left)
        result = Verdict("wrong", f"函数返回后，你的代码启动的线程还在运行：{names}（检查没有停止它）。在函数返回前等它结束"
                         "（`thread.join()`），或者不要启动线程。",
                         f"a thread your code started is still running after your function returned: {names} (the "
                         "check has not stopped it). Wait for it before returning (`thread.join()`), or start none.",
                         "thread-left")
    if isolation.global_hooks_left and result.status != "not solved":
        # the hook ran during the rest of the check (whatever else it found may be its doing) and would have changed
        # every module of the learner's from then on: that is the verdict; the hook is gone now
        result = Verdict("wrong", *GLOBAL_HOOK_LEFT, "global-hook-left")
    return result


def _checker_error(exc: Exception) -> Verdict:
    first = str(exc).strip().split("\n")[0]
    return Verdict("wrong", f"检查中途因意外的 {type(exc).__name__} 停止：{first}（如果你确信答案正确，这可能是检查程序的问题）。",
                   f"the check stopped on an unexpected {type(exc).__name__}: {first} (if you are sure your answer is "
                   "right, this may be a bug in the checker).", "checker-error")


def check(key: str, answer: Any) -> None:
    """Check ``answer`` to exercise ``key`` and print the verdict, and why, in the course language
    (:func:`hooklab.course.lang.course_language`: both by default).

    A key that names no exercise prints one line listing the keys that exist (no traceback).
    """
    try:
        status, zh, en, _ = verdict(key, answer)
    except UnknownExercise as unknown:
        print(unknown.message)
        return
    except ImportError as missing:  # a package of the course's extra (verdict names it): one line, no traceback
        from .. import install_command
        print(say(f"[{key}] 检查这道练习需要 {missing.name or '?'}，但它没有安装：它随课程的附加依赖一起安装，"
                  f"{install_command()}", f"[{key}] {missing}"))
        return
    if status == "correct":
        print(say(f"[{key}] 正确！", f"[{key}] correct!"))
    elif status == "not solved":
        print(say(f"[{key}] 尚未完成：{zh}", f"[{key}] not solved yet: {en}"))
    else:
        print(say(f"[{key}] 还不对：{zh}", f"[{key}] not right yet: {en}"))


def _ipython() -> Any:
    """The running IPython shell (a Jupyter kernel or the terminal), or None."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _in_notebook() -> bool:
    """True inside a Jupyter kernel, where output can be rendered as Markdown."""
    shell = _ipython()
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
    note_machinery("solution", key)
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


def solution(key: str, *, load: bool = False) -> None:
    """Show a reference solution of exercise ``key`` (a Python code block in a notebook).

    ``load=True`` puts it into a new cell below instead (IPython's ``set_next_input``), ready to run or edit;
    outside IPython it says so and prints the code.
    """
    if not isinstance(load, bool):
        raise TypeError(f"load must be True or False, got {load!r}")
    try:
        plain, markdown = solution_text(key)
    except UnknownExercise as unknown:
        print(unknown.message)
        return
    if not load:
        _show(plain, markdown)
        return
    shell = _ipython()
    if shell is None:
        print(say(f"[{key}] load=True 要在 IPython（Jupyter 笔记本或 ipython 终端）里才能把参考答案放进下一个单元格；"
                  "这里直接打印：",
                  f"[{key}] load=True puts the solution into the next cell, which needs IPython (a Jupyter notebook "
                  "or the ipython terminal); here it is printed instead:"))
        print(plain)
        return
    shell.set_next_input(plain, replace=False)
    print(say(f"[{key}] 参考答案已放进下面的新单元格。", f"[{key}] the reference solution is in a new cell below."))
