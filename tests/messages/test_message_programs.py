"""docs/programs/messages.json is what the trigger tests' source makes (tools/messages/programs.py): every triggered
message has its program, and its fix or the reason it has none; what the programs print shows the message, and what
the fixes print does not. That each program prints what is stored is checked by running it
(tests/tools/test_programs.py); that each fix returns it, by the fix tests of this folder."""
from __future__ import annotations

import ast

import pytest

from tools.messages import hook_messages, programs

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def stored():
    return programs.load()


def test_the_programs_are_what_the_trigger_tests_make(stored):
    assert stored, "docs/programs/messages.json is missing: run python -m tools.messages.hook_messages --programs"
    changes = programs.stale()
    assert not changes, ("docs/programs/messages.json is not what tests/messages/ makes (run python -m "
                         "tools.messages.hook_messages --programs):\n" + "\n".join(changes[:30]))


def test_every_triggered_message_has_a_fix_or_says_why_not(stored):
    records = stored["programs"]
    neither = sorted(mid for mid, r in records.items() if not r["fix"] and not r["no_fix"])
    assert not neither, (f"{len(neither)} triggered messages have neither a fix (@fix) nor a reason (no_fix): "
                         f"{neither[:10]}")
    assert not programs.unsaid(), f"say what these fixes do, @fix(..., en=..., zh=...): {programs.unsaid()[:10]}"
    for mid, record in records.items():
        if record["no_fix"]:
            assert record["no_fix"]["en"] and record["no_fix"]["zh"], f"{mid}: say why not in both languages"


def test_what_a_program_prints_shows_its_message_and_its_fix_does_not(stored):
    texts = {m["id"]: m["text"] for m in hook_messages.load()["messages"]}
    for mid, record in stored["programs"].items():
        pattern = hook_messages.pattern(texts[mid])
        show = record["show"]
        printed = show.get("prints") if show.get("prints") is not None else show.get("prints_start")
        if printed is not None:
            if show.get("prints_start") is not None:  # the message's text up to its first variable part
                first = hook_messages.PLACEHOLDER.split(texts[mid].strip())[0]
                pattern = hook_messages.pattern(first)
            assert pattern.search(printed), f"{mid}: its program prints\n{printed[:1000]}"
        fix = record["fix"]
        if fix and fix.get("prints") is not None:
            assert not hook_messages.pattern(texts[mid]).search(fix["prints"]), f"{mid}: its fix prints it"


def test_a_program_is_cut_out_whole_and_stands_alone(tmp_path):
    """A trigger module's imports, helpers and constants that a function uses, and nothing of the harness."""
    (tmp_path / "test_x.py").write_text('''"""doc"""
from __future__ import annotations

import os
import torch
from torch import nn

from message_triggers import fix, trigger, triggers_of, no_fix

LIMIT = 3


def _helper():
    """helper doc"""
    return nn.Linear(2, LIMIT)  # a comment


def _unused():
    return os.getcwd()


@trigger("some-message-1")  # shows it
def shows_it():
    _helper()(torch.ones(2))


@fix("some-message-1", en="do it right", zh="改正")
def fixed():
    return tuple(_helper()(torch.ones(2)).shape)


no_fix("some-message-2", why="private", zh="私有")


@trigger("some-message-2")
def private():
    torch._C._nothing()
''', encoding="utf-8")
    found = programs.registry(tmp_path)
    assert sorted(found) == ["some-message-1", "some-message-2"]
    assert found["some-message-1"].fix.name == "fixed" and found["some-message-2"].no_fix == {"en": "private",
                                                                                            "zh": "私有"}
    code, needs = programs.program(found["some-message-1"].fix, "# Fix: do it right", prints=True)
    assert code == ("# Fix: do it right\nimport torch\nfrom torch import nn\n\n\nLIMIT = 3\n\n\ndef _helper():\n"
                    "    return nn.Linear(2, LIMIT)\n\n\ndef fixed():\n    return tuple(_helper()(torch.ones(2)).shape)"
                    "\n\n\nprint(fixed())\n"), code
    assert needs == []
    ast.parse(code)
    from hooklab.course.programs import run
    assert run(code) == "(3,)"
