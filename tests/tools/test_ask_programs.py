"""A message's program reaches the learner where the lookup answers: the index attaches docs/programs/*.json to its
entries (``message:<id>``, ``<stem>:<id>``), a ``Hit`` prints the program and runs it, and ``python -m hooklab.course
ask --program`` prints it."""
from __future__ import annotations

import json

import pytest

from hooklab.course import __main__ as course_cli
from hooklab.course.asking import Answers, Hit
from tools.ask import index

pytestmark = pytest.mark.tools

SHOW = {"code": {"en": "# Shows: a hook on a tensor without grad\nimport torch\n\n\n"
                       "torch.ones(2).register_hook(lambda g: g)\n",
                 "zh": "# 触发：给不需要梯度的张量注册钩子\nimport torch\n\n\n"
                       "torch.ones(2).register_hook(lambda g: g)\n"},
        "needs": [], "prints": "RuntimeError: cannot register a hook on a tensor that doesn't require gradient"}
FIX = {"code": {"en": "# Fix: require grad\nimport torch\n\n\nx = torch.ones(2, requires_grad=True)\n"
                      "x.register_hook(lambda g: g)\nprint(x.requires_grad)\n",
                "zh": "# 修正：让张量需要梯度\nimport torch\n\n\nx = torch.ones(2, requires_grad=True)\n"
                      "x.register_hook(lambda g: g)\nprint(x.requires_grad)\n"},
       "needs": [], "prints": "True"}
RECORD = {"show": SHOW, "fix": FIX, "no_fix": None}


def _hit(program=RECORD, kind="message"):
    return Hit(kind, "钩子", "a hook", "01_tensor_hooks.ipynb", "abc", "01_tensor_hooks.html", 1.0, None, program)


def _write(folder, stem, programs):
    folder.mkdir(exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps({"about": "test", "programs": programs}), encoding="utf-8")


def test_programs_attach_to_the_entries_their_file_stem_names(tmp_path):
    _write(tmp_path, "messages", {"a": RECORD, "gone": RECORD})
    _write(tmp_path, "matrix", {"tensor@plain": RECORD, "quiet@plain": {"show": None, "fix": None}})
    entries = [{"id": "message:a"}, {"id": "matrix:tensor@plain"}, {"id": "matrix:quiet@plain"},
               {"id": "section:01.1"}, {"id": "messages:a"}]
    assert index.attach_programs(entries, tmp_path) == 2
    assert entries[0]["program"] == RECORD and entries[1]["program"] == RECORD
    assert [e["id"] for e in entries if "program" in e] == ["message:a", "matrix:tensor@plain"]  # no show: none


def test_attaching_is_deterministic_and_a_broken_file_is_named(tmp_path):
    _write(tmp_path, "messages", {"b": RECORD, "a": RECORD})
    first, second = [{"id": "message:a"}, {"id": "message:b"}], [{"id": "message:a"}, {"id": "message:b"}]
    index.attach_programs(first, tmp_path)
    index.attach_programs(second, tmp_path)
    assert index.render({"entries": first}) == index.render({"entries": second})
    (tmp_path / "messages.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(index.IndexError_, match="messages.json cannot be read"):
        index.attach_programs(first, tmp_path)
    (tmp_path / "messages.json").write_text('{"about": "x"}', encoding="utf-8")
    with pytest.raises(index.IndexError_, match="no \"programs\" object"):
        index.attach_programs(first, tmp_path)


def test_the_committed_programs_attach_to_message_entries():
    entries = index.message_entries()
    attached = index.attach_programs(entries)
    programs = json.loads((index.PROGRAMS / "messages.json").read_text(encoding="utf-8"))["programs"]
    explained = {e["id"].removeprefix("message:") for e in entries}
    assert attached >= len(set(programs) & explained) > 100
    with_program = [e for e in entries if "program" in e]
    assert all(e["program"]["show"]["code"]["zh"] for e in with_program)


def test_a_hit_prints_its_program_in_either_language_and_runs_it(capsys):
    hit = _hit()
    assert hit.program_text("zh").startswith("# 触发：") and "# 打印：\n#   RuntimeError: cannot register" in \
        hit.program_text("zh")
    assert hit.program_text().startswith("# Shows:") and hit.program_text(fix=True).endswith("# prints:\n#   True\n")
    shown = hit.run()
    assert shown == SHOW["prints"] and capsys.readouterr().out == SHOW["prints"] + "\n"
    assert hit.run(fix=True) == "True"
    assert hit == _hit(program=None)  # the program is data the hit carries, not what the hit is
    assert "program" not in repr(hit)


def test_a_hit_without_a_program_or_a_fix_says_so():
    with pytest.raises(LookupError, match="this section has no program"):
        _hit(program=None, kind="section").run()
    no_fix = {"show": SHOW, "fix": None, "no_fix": {"en": "private API", "zh": "私有接口"}}
    with pytest.raises(LookupError, match=r"no fix \(private API\)"):
        _hit(no_fix).program_text(fix=True)


def test_the_answers_say_which_hit_has_a_program_and_the_command_line_prints_it(capsys):
    answers = Answers([_hit(program=None, kind="section"), _hit()], "hook", "en")
    text = repr(answers)
    assert "ask(...)[1].run()" in text and "ask(...)[1].run(fix=True)" in text and "ask(...)[0]" not in text
    assert "ask(...)[1].run()" in repr(Answers([_hit(program=None), _hit()], "钩子", "zh"))
    printed = course_cli._programs(answers, "both")
    assert "# 触发：" in printed and "# Shows:" in printed and "# 修正：" in printed and "# Fix:" in printed
    assert course_cli._programs(Answers([_hit(program=None)], "x", "en"), "en") == \
        "None of these answers has a program."


def test_the_command_line_takes_program(monkeypatch, capsys):
    monkeypatch.setattr("hooklab.course.asking.ask", lambda query, k, lang: Answers([_hit()], query, "en"))
    assert course_cli.main(["ask", "cannot register a hook", "--program", "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "# Shows: a hook on a tensor without grad" in out and "# Fix: require grad" in out


def test_a_profile_answer_offers_one_program_per_surprising_fact_by_number_or_name():
    from hooklab.course import asking

    entry = next(e for e in asking._index()[0] if e["id"] == "profile:swa_utils")
    hit = Hit("profile", entry["zh"], entry["en"], None, None, entry.get("page"), 1.0, None, None,
              tuple(entry["programs"]))
    ids = [p["id"] for p in hit.programs]
    assert ids == ["swa_utils:facts.copied_hooks", "swa_utils:facts.stateful_hook"]
    assert hit.program_text("en", which=1) == hit.program_text("en", which="facts.stateful_hook")
    assert hit.program_text("en", which=0) != hit.program_text("en", which=1)
    assert "# 打印：" in hit.program_text("zh", which=0)
    with pytest.raises(LookupError, match="numbered from 0"):
        hit.program_text(which=2)
    with pytest.raises(LookupError, match="no program 'nothing'"):
        hit.run(which="nothing")
    shown = repr(Answers([hit], "AveragedModel", "en"))
    assert "2 programs, one per surprising fact: ask(...)[0].run(which=k)" in shown


@pytest.mark.parametrize("lang", ["xx", None, 5, "both", "ZH", "", ["en"]])
def test_a_program_is_printed_only_in_a_language_it_has(lang):
    """Anything but "zh" or "en" is refused as ``ask`` refuses a language it does not know, not answered in
    English."""
    with pytest.raises(ValueError, match=r"program_text: lang is 'zh' or 'en', .* got "
                                         + ("'" if isinstance(lang, str) else type(lang).__name__)):
        _hit().program_text(lang)
    with pytest.raises(ValueError, match="program_text: lang is 'zh' or 'en'"):
        _hit().program_text(lang, fix=True)


def _profile_hit():
    from hooklab.course import asking

    entry = next(e for e in asking._index()[0] if e["id"] == "profile:swa_utils")
    return Hit("profile", entry["zh"], entry["en"], None, None, entry.get("page"), 1.0, None, None,
               tuple(entry["programs"]))


@pytest.mark.parametrize("which", [True, False, 1.5, 1.0, None, b"facts.stateful_hook", ["facts.stateful_hook"]])
def test_a_program_is_picked_by_a_whole_number_or_a_facts_name_and_nothing_else(which):
    hit = _profile_hit()
    with pytest.raises(TypeError, match=r"which is a program's number \(a whole number from 0\) or its fact's name, "
                                        rf"got {type(which).__name__}; its programs: 0 swa_utils:facts.copied_hooks, "
                                        r"1 swa_utils:facts.stateful_hook"):
        hit.run(which=which)
    with pytest.raises(TypeError, match="which is a program's number"):
        hit.program_text("en", which=which)


def test_a_hit_with_one_program_has_only_number_zero():
    hit = _hit()
    assert hit.program_text("en", which=0) == hit.program_text("en")
    for which in (1, -1, "facts.anything"):
        with pytest.raises(LookupError, match=rf"this message has one program, which=0; got which={which!r}"):
            hit.program_text("en", which=which)
    with pytest.raises(TypeError, match="got bool"):
        hit.run(which=True)
