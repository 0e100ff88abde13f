"""The trigger tests' harness: one small function per message makes it appear, and the test checks its exact text.

A test module of this folder decorates each trigger with the id of the message it shows (``docs/hook_messages.json``)::

    @trigger("state-dict-post-hook-must-return-none-df0a56")
    def state_dict_post_hook_returns_a_value():
        m = torch.nn.Linear(2, 2)
        m.register_state_dict_post_hook(lambda module, sd, prefix, local: {})
        m.state_dict()

and ends with ``test_trigger = triggers_of(__name__)``: one test per message, which runs the trigger and asserts that
what it raised, warned or logged (:func:`shown`) holds the message: its fixed parts in order, the variable parts
anything (:func:`tools.messages.hook_messages.pattern`). The part that matched, addresses and temporary paths masked, is the
message's printed example: ``python -m tools.messages.hook_messages --examples`` stores it, and the test then checks that the
trigger still prints exactly that.

A trigger that needs several processes returns ``{message id: text shown}`` for the ids it names (``@trigger_all``);
it runs once per test process, its ids are checked one by one.

A message that is not triggered here is excused in ``docs/hook_messages.toml`` with a reason, and the excuse stands only
with an attempt to reach it from Python: a function decorated ``@attempt(["<id>", ...], outcome="...")`` in a test
module of this folder (``test_excused_*.py``). The attempt does what a user would do to reach the message (the same
feature, used wrongly, on this machine); its test asserts that none of the attempt's messages appears in what it
showed, and that ``outcome`` (what happened instead: another error, a missing module, or what the function returns
as its finding) does. The index lists each excuse with its attempt and outcome; ``tools/messages/hook_messages_status.py`` reads
them from the decorators, as it reads ``@trigger``.

A message whose variable parts print stack traces (paths and frames that differ from machine to machine, and between
a run under ``pytest -n0`` and one under xdist) is triggered with ``@trigger("<id>", head=True)``: its example is the
printed text up to the message's first variable part.
Each triggered message also has a fix, the same program corrected (``docs/programs/messages.json`` holds both as
standalone scripts): a function decorated ``@fix("<id>")`` in the trigger's module does what the message's advice or
the docs say, shows nothing of the message, raises nothing, and returns what the corrected program prints (counts,
booleans, shapes, rounded values: nothing that changes from machine to machine)::

    @fix("cannot-register-a-hook-on-a-tensor-that-doesn-2b88aa",
         en="a hook sees gradients: register it on a tensor that requires grad",
         zh="钩子看到的是梯度：把它注册在 requires_grad 的张量上")
    def tensor_hook_on_a_tensor_that_requires_grad():
        x = torch.ones(2, requires_grad=True)
        seen = []
        x.register_hook(lambda g: seen.append(tuple(g.shape)))
        x.sum().backward()
        return seen

and the module ends with ``test_fix = fixes_of(__name__)``. ``en=`` / ``zh=`` say in one line what the fix changes
(the program's header comment in each language; the show program's header is the message's summary).

Fixes that need several processes are run as their trigger is: a function decorated ``@fix_all([...])`` returns
``{message id: outcome(fix)}`` (:func:`outcome`, called in each worker, run once per process); each fix it runs is
still decorated ``@fix("<id>", en=..., zh=..., run_by="<the @fix_all function's name>")``, so that its program is
known and its test takes its outcome from that run. A message whose trigger misuses a private API with no user-level intent gets ``no_fix("<id>", why="...")``
instead (a module-level call; ``zh=``: the reason in Chinese).
"""
from __future__ import annotations

import functools
import io
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hooklab.course import programs
from hooklab.course.programs import shown  # what a user is shown: the runner's own reading (not masked)
from tools.messages import hook_messages

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "docs" / "programs" / "messages.json"  # each message's program and fix, what each prints
EXAMPLES_ENV = "HOOKLAB_MESSAGE_EXAMPLES"  # set by `python -m tools.messages.hook_messages --examples`: where to write them
LOGGERS = programs.LOGGERS  # the loggers a program's run reads too


@dataclass(frozen=True)
class Trigger:
    ids: tuple[str, ...]
    fn: Callable[[], Any]
    module: str
    group: bool  # fn returns {id: text} instead of showing one message itself
    head: bool = False  # the example is the printed text up to the message's first variable part

    @property
    def name(self) -> str:
        return self.fn.__name__


_TRIGGERS: dict[str, list[Trigger]] = {}


def trigger(message_id: str, *, head: bool = False) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register ``fn`` as the trigger of the message ``message_id`` (``head``: see the module docstring)."""
    def register(fn: Callable[[], Any]) -> Callable[[], Any]:
        _TRIGGERS.setdefault(fn.__module__, []).append(Trigger((message_id,), fn, fn.__module__, False, head))
        return fn
    return register


def trigger_all(message_ids: list[str]) -> Callable[[Callable[[], dict[str, str]]], Callable[[], dict[str, str]]]:
    """Register ``fn`` as the trigger of several messages: it returns ``{id: text shown}`` (run once per process)."""
    def register(fn: Callable[[], dict[str, str]]) -> Callable[[], dict[str, str]]:
        cached = functools.cache(fn)
        functools.update_wrapper(cached, fn)
        _TRIGGERS.setdefault(fn.__module__, []).append(Trigger(tuple(message_ids), cached, fn.__module__, True))
        return cached
    return register


_MASKS = ((re.compile(r"0x[0-9a-fA-F]{6,}"), "0x..."), (re.compile(r"/tmp/[\w./-]+"), "/tmp/..."),
          (re.compile(r"___torch_mangle_\d+"), "___torch_mangle_N"))  # TorchScript's counter of classes made so far
_LABEL = re.compile(r"^[\w.]*(?:Error|Warning|Exception|Unsupported): ")


def masked(text: str) -> str:
    """``text`` without what changes from run to run (addresses, temporary paths)."""
    for rx, replacement in _MASKS:
        text = rx.sub(replacement, text)
    return text


@functools.cache
def messages() -> dict[str, dict[str, Any]]:
    return {m["id"]: m for m in hook_messages.load()["messages"]}


def example(message: dict[str, Any], text: str) -> str | None:
    """The part of ``text`` that is the message, masked; None when ``text`` does not show the message."""
    match = hook_messages.pattern(message["text"]).search(text)
    # a message that starts with a variable part matches from the start of its line: drop the exception's name
    return _LABEL.sub("", masked(match.group(0))) if match else None


def head_of(message: dict[str, Any], found: str) -> str:
    """The part of an example that shows the message's text up to its first variable part."""
    first = hook_messages.PLACEHOLDER.split(message["text"].strip())[0]
    match = hook_messages.pattern(first).search(found)
    return match.group(0) if match else found


def _write_example(message_id: str, value: str) -> None:
    path = os.environ.get(EXAMPLES_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"id": message_id, "example": value}, ensure_ascii=False) + "\n")


def _warned_once_forgotten() -> None:
    """The process-wide "warn once" cache emptied: transformers' ``Logger.warning_once`` (an ``lru_cache`` that
    transformers puts on :class:`logging.Logger`, which diffusers' warnings use too) shows a text once per process, so a
    trigger run after another test that showed it would show nothing: what a trigger shows must not depend on what ran
    before it in the process."""
    import logging

    clear = getattr(getattr(logging.Logger, "warning_once", None), "cache_clear", None)
    if clear is not None:
        clear()


def _unmangled(text: str) -> str:
    """``text`` without TorchScript's mark of a class it has compiled before in the process (``___torch_mangle_N.``):
    whether a class name carries it depends on what the process scripted earlier, not on the message."""
    return text.replace("___torch_mangle_N.", "")


def check(case: Trigger, message_id: str) -> None:
    _warned_once_forgotten()
    message = messages().get(message_id)
    assert message is not None, (f"{case.module}.{case.name}: {message_id!r} is no message of docs/hook_messages.json "
                                 "(its text changed? run python -m tools.messages.hook_messages)")
    if case.group:
        texts = case.fn()
        assert message_id in texts, f"{case.name} returned no text for {message_id}: {sorted(texts)}"
        text = texts[message_id]
    else:
        text = shown(case.fn)
    found = example(message, text)
    assert found is not None, (f"{case.name} did not show {message_id}:\n  expected: {message['text'][:600]!r}\n"
                               f"  it showed: {text[:3000]!r}")
    if case.head:
        found = head_of(message, found)
    if os.environ.get(EXAMPLES_ENV):
        _write_example(message_id, found)
    elif "trigger_example" in message:
        stored = message["trigger_example"]
        assert _unmangled(found) == _unmangled(stored), (f"{case.name} shows {message_id} differently from the stored example:\n"
                                 f"  stored: {stored!r}\n  now:    {found!r}\n"
                                 "(run python -m tools.messages.hook_messages --examples when this is expected)")


@dataclass(frozen=True)
class Attempt:
    ids: tuple[str, ...]
    fn: Callable[[], Any]
    module: str
    outcome: str

    @property
    def name(self) -> str:
        return self.fn.__name__


_ATTEMPTS: dict[str, list[Attempt]] = {}


def attempt(message_ids: list[str], *, outcome: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register ``fn`` as the attempt to reach the excused messages ``message_ids``; ``outcome``: a piece of what it
    shows instead (a string it returns is shown, as what it printed is). Write both as literals: the index reads them
    from the source."""
    def register(fn: Callable[[], Any]) -> Callable[[], Any]:
        _ATTEMPTS.setdefault(fn.__module__, []).append(Attempt(tuple(message_ids), fn, fn.__module__, outcome))
        return fn
    return register


def _returned(fn: Callable[[], Any]) -> Callable[[], None]:
    def run() -> None:
        result = fn()
        if isinstance(result, str):
            print(result)
    return run


def check_attempt(case: Attempt) -> None:
    known = messages()
    for message_id in case.ids:
        message = known.get(message_id)
        assert message is not None, f"{case.module}.{case.name}: {message_id!r} is no message of docs/hook_messages.json"
        assert message["status"] == "excused", (f"{case.name}: {message_id} is {message['status']}, not excused: "
                                                "remove it from the attempt")
    text = masked(shown(_returned(case.fn)))
    reached = [mid for mid in case.ids if example(known[mid], text) is not None]
    assert not reached, (f"{case.name} reached {reached}: trigger them (@trigger, an [explained] row) instead of "
                         f"excusing them.\n  it showed: {text[:3000]!r}")
    assert case.outcome in text, (f"{case.name}: the recorded outcome {case.outcome!r} is not what happened:\n"
                                  f"  it showed: {text[:3000]!r}")


def attempts_of(module: str) -> Callable[[Attempt], None]:
    """The parametrized test of a module of attempts: one case per attempt."""
    cases = _ATTEMPTS.get(module, [])

    @pytest.mark.parametrize("case", cases, ids=[c.name for c in cases])
    def test_attempt(case: Attempt) -> None:
        check_attempt(case)
    return test_attempt  # type: ignore[return-value]


def triggers_of(module: str) -> Callable[[str], None]:
    """The parametrized test of a test module: one case per message its triggers show."""
    cases = [(mid, t) for t in _TRIGGERS.get(module, []) for mid in t.ids]

    @pytest.mark.parametrize("message_id, case", cases, ids=[f"{t.name}:{mid}" for mid, t in cases])
    def test_trigger(message_id: str, case: Trigger) -> None:
        check(case, message_id)
    return test_trigger  # type: ignore[return-value]


def registered() -> dict[str, list[Trigger]]:
    return _TRIGGERS


# --- fixes ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fix:
    ids: tuple[str, ...]
    fn: Callable[[], Any]
    module: str
    group: bool  # fn returns {id: outcome(fix)} from worker processes instead of being the fix itself
    en: str = ""  # the fix in one line, the program's header comment (English)
    zh: str = ""  # the same in Chinese
    run_by: str = ""  # the @fix_all function of the module that runs this fix (in worker processes)
    needs: tuple[str, ...] = ()  # what it needs that this machine may lack: "cuda" (skipped without a CUDA device)

    @property
    def name(self) -> str:
        return self.fn.__name__


_FIXES: dict[str, list[Fix]] = {}
_NO_FIX: dict[str, dict[str, str]] = {}  # module -> {message id: why it has no fix}
_NO_FIX_ZH: dict[str, dict[str, str]] = {}  # the same reasons in Chinese


def fix(message_id: str, *, en: str = "", zh: str = "", run_by: str = "",
        needs: tuple[str, ...] = ()) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register ``fn`` as the fix of the message ``message_id``: the trigger corrected; it returns what it prints.
    ``en`` / ``zh``: what the fix does in one line (its program's header comment in each language); ``run_by``: the
    name of the ``@fix_all`` function that runs it (in worker processes), when it is not run in the test's process;
    ``needs``: ``("cuda",)`` for a fix that needs a CUDA device (its test is skipped without one)."""
    def register(fn: Callable[[], Any]) -> Callable[[], Any]:
        _FIXES.setdefault(fn.__module__, []).append(Fix((message_id,), fn, fn.__module__, False, en, zh, run_by,
                                                   tuple(needs)))
        return fn
    return register


def fix_all(message_ids: list[str]) -> Callable[[Callable[[], dict[str, dict[str, str]]]],
                                                 Callable[[], dict[str, dict[str, str]]]]:
    """Register ``fn`` as the fixes of several messages run elsewhere (worker processes): it returns
    ``{id: outcome(the fix)}`` (run once per process)."""
    def register(fn: Callable[[], dict[str, dict[str, str]]]) -> Callable[[], dict[str, dict[str, str]]]:
        cached = functools.cache(fn)
        functools.update_wrapper(cached, fn)
        _FIXES.setdefault(fn.__module__, []).append(Fix(tuple(message_ids), cached, fn.__module__, True))
        return cached
    return register


def no_fix(message_id: str, *, why: str, zh: str = "", module: str | None = None) -> None:
    """Record that the message ``message_id`` has no fix, and why (its trigger misuses a private API, say; ``zh``:
    the same in Chinese). Call it at module level with literals: the programs' generator reads them from the source."""
    name = module or sys._getframe(1).f_globals["__name__"]
    if not why.strip():
        raise ValueError(f"no_fix({message_id!r}): say why the message has no fix")
    _NO_FIX.setdefault(name, {})[message_id] = why
    _NO_FIX_ZH.setdefault(name, {})[message_id] = zh


def printed(value: Any) -> str:
    """What ``print(value)`` writes, without the last newline: a fix's printed result."""
    out = io.StringIO()
    print(value, file=out)
    return out.getvalue()[:-1]


def outcome(fn: Callable[[], Any]) -> dict[str, str]:
    """Run a fix as its program does (``print(fn())``): ``shown`` (what it showed, masked, with the printed result),
    ``prints`` (the printed result; absent when it raised). Picklable: workers return it."""
    result: list[Any] = []

    def program() -> None:
        result.append(fn())
        print(printed(result[0]))
    text = masked(shown(program))
    return {"shown": text, **({"prints": masked(printed(result[0]))} if result else {})}


@functools.cache
def programs() -> dict[str, dict[str, Any]]:
    """The stored programs by message id (``docs/programs/messages.json``), empty before the first generation."""
    if not PROGRAMS.is_file():
        return {}
    return dict(json.loads(PROGRAMS.read_text(encoding="utf-8"))["programs"])


def check_fix(case: Fix, message_id: str) -> None:
    message = messages().get(message_id)
    assert message is not None, f"{case.module}.{case.name}: {message_id!r} is no message of docs/hook_messages.json"
    assert any(message_id in t.ids for t in _TRIGGERS.get(case.module, [])), (
        f"{case.name}: {message_id} has no trigger in {case.module}: a fix corrects the trigger of its module")
    if "cuda" in case.needs:
        import torch
        if not torch.cuda.is_available():
            pytest.skip(f"{case.name} needs a CUDA device")
    if case.run_by:
        runners = [f for f in _FIXES.get(case.module, []) if f.group and f.name == case.run_by]
        assert runners, f"{case.name}: run_by={case.run_by!r} names no @fix_all function of {case.module}"
        case = runners[0]
    if case.group:
        results = case.fn()
        assert message_id in results, f"{case.name} returned no outcome for {message_id}: {sorted(results)}"
        result = results[message_id]
    else:
        result = outcome(case.fn)
    assert "prints" in result, f"{case.name} (the fix of {message_id}) raised:\n{result['shown'][:3000]}"
    assert example(message, result["shown"]) is None, (f"{case.name} (the fix of {message_id}) still shows it:\n"
                                                       f"{result['shown'][:3000]}")
    stored = ((programs().get(message_id) or {}).get("fix") or {}).get("prints")
    if stored is not None:
        # a fresh interpreter also shows what a library logs when it is imported (torchao's notices, before and
        # after the value: stderr comes last), which this process imported already: the value is a run of its lines
        lines, value = stored.splitlines(), result["prints"].splitlines()
        assert any(lines[i:i + len(value)] == value for i in range(len(lines) - len(value) + 1)), (
            f"{case.name} returns {result['prints']!r}; its program is stored as printing {stored!r} "
            "(run python -m tools.messages.hook_messages --programs when this is expected)")


def fixes_of(module: str) -> Callable[[str], None]:
    """The parametrized test of a module's fixes: one case per message a fix corrects."""
    fixes = _FIXES.get(module, [])
    run_elsewhere = {(f.run_by, mid) for f in fixes if f.run_by for mid in f.ids}  # tested through their own case
    cases = [(mid, f) for f in fixes for mid in f.ids if not (f.group and (f.name, mid) in run_elsewhere)]

    @pytest.mark.parametrize("message_id, case", cases, ids=[f"{f.name}:{mid}" for mid, f in cases])
    def test_fix(message_id: str, case: Fix) -> None:
        check_fix(case, message_id)
    return test_fix  # type: ignore[return-value]


def registered_fixes() -> dict[str, list[Fix]]:
    return _FIXES


def registered_no_fixes() -> dict[str, dict[str, str]]:
    return _NO_FIX
