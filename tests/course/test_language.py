"""The course's own messages (checker verdicts, hints, solutions) follow one language setting: zh, en or both."""
import ast
import contextlib
import doctest
import io
import json
import re
from pathlib import Path

import pytest

import hooklab.course.export
import hooklab.course.lang
from hooklab.course import exercises
from hooklab.course.export import export_notebook, one_language_output
from hooklab.course.lang import ENV_VAR, cjk_ratio, course_language, has_cjk, say

ROOT = Path(__file__).resolve().parents[2]
EXERCISE_MODULES = sorted((ROOT / "hooklab" / "course" / "exercises").glob("nb*.py"))
# Chinese messages name APIs and give an English term in brackets on first use ("句柄（handle）");
# the Chinese prose still dominates. English messages contain no CJK character at all.
MIN_CJK_RATIO = 0.6


def keys():
    exercises._load_all()
    return sorted(exercises._REGISTRY)


def printed(fn, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(*args)
    return out.getvalue()


@pytest.fixture
def lang(monkeypatch):
    """Set the course language for one test (JPY_SESSION_NAME cleared so nothing else decides)."""
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    return lambda value: monkeypatch.setenv(ENV_VAR, value)


@pytest.mark.parametrize("module", [hooklab.course.lang, hooklab.course.export], ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_cjk_helpers():
    assert has_cjk("钩子") and has_cjk("，") and not has_cjk("hook, handle `grad`")
    assert cjk_ratio("钩子（hook）在反向传播时触发。") > 0.8
    assert cjk_ratio("the hook fires in backward, see `钩子`") == 0.0   # code spans do not count
    assert cjk_ratio("") == 0.0


def test_language_setting_default_env_and_errors(lang, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert course_language() == "both"
    for value in ("zh", "en", "both", " EN "):
        lang(value)
        assert course_language() == value.strip().lower()
    lang("fr")
    with pytest.raises(ValueError, match="HOOKLAB_LANG must be one of zh, en, both, got 'fr'"):
        course_language()
    with pytest.raises(ValueError, match="lang must be one of"):
        say("中", "en", lang="de")


def test_exported_copy_names_its_language_to_the_kernel(tmp_path, monkeypatch):
    """Jupyter names the kernel's notebook in JPY_SESSION_NAME: a one-language copy answers in its language
    even when the lab was not started with --lang; HOOKLAB_LANG still wins."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    copy = tmp_path / "01_demo.ipynb"
    copy.write_text(json.dumps({"cells": [], "metadata": {"hooklab_language": "en"}}), encoding="utf-8")
    monkeypatch.setenv("JPY_SESSION_NAME", str(copy))
    assert course_language() == "en"
    monkeypatch.setenv(ENV_VAR, "zh")
    assert course_language() == "zh"
    monkeypatch.delenv(ENV_VAR)
    for name, text in [("plain.ipynb", json.dumps({"cells": [], "metadata": {}})), ("broken.ipynb", "{"),
                       ("missing.ipynb", None), ("notes.txt", "hooklab_language")]:
        path = tmp_path / name
        if text is not None:
            path.write_text(text, encoding="utf-8")
        monkeypatch.setenv("JPY_SESSION_NAME", str(path))
        assert course_language() == "both", name


# where each rule of exercises/_support.py takes its zh and en messages (positional index of zh; en follows it)
_MESSAGE_ARGS = {"Wrong": 0, "NotSolved": 0, "fail": 1, "expect": 2, "guarded": 1}


def _message_literals():
    """(file:line, zh, en) for every verdict given with two literal messages (Wrong / NotSolved and the rules
    fail / expect / guarded), and every hint of the HINTS tables."""
    def text(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):  # f-string: the literal parts, each {…} as a placeholder
            return "".join(v.value if isinstance(v, ast.Constant) else " x " for v in node.values)
        return None

    exercises_dir = ROOT / "hooklab" / "course" / "exercises"
    paths = [*EXERCISE_MODULES, *sorted(exercises_dir.glob("_*.py")), *sorted((exercises_dir / "solutions").glob("nb*.py"))]
    found = []
    for path in dict.fromkeys(paths):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            pair = None
            name = getattr(getattr(node, "func", None), "id", None) if isinstance(node, ast.Call) else None
            if name in _MESSAGE_ARGS:
                first = _MESSAGE_ARGS[name]
                pair = node.args[first:first + 2]
            elif isinstance(node, ast.Dict) and path.parent.name == "solutions":  # HINTS = {key: (zh, en)}
                for value in node.values:
                    if isinstance(value, ast.Tuple) and len(value.elts) == 2 \
                            and None not in (zh := text(value.elts[0]), en := text(value.elts[1])):
                        found.append((f"{path.name}:{value.lineno}", zh, en))
            if pair and len(pair) == 2 and None not in (zh := text(pair[0]), en := text(pair[1])):
                found.append((f"{path.name}:{node.lineno}", zh, en))
    return found


def test_every_checker_message_is_really_in_its_language():
    messages = _message_literals()
    assert len(messages) > 100, "the scan found too few messages: did the checkers' form change?"
    english_with_cjk = [(where, en) for where, _, en in messages if has_cjk(en)]
    assert english_with_cjk == []
    not_chinese = [(where, zh, round(cjk_ratio(zh), 2)) for where, zh, _ in messages
                   if cjk_ratio(zh) < MIN_CJK_RATIO]
    assert not_chinese == []


@pytest.mark.parametrize("key", keys())
def test_checker_hint_and_solution_print_in_the_chosen_language(key, lang):
    wrong_answer = 42  # every checker rejects a number, with its "pass a function / a list" message
    lang("en")
    for out in (printed(exercises.check, key, None), printed(exercises.check, key, wrong_answer),
                printed(exercises.hint, key), printed(exercises.solution, key)):
        assert out.startswith(f"# [{key}] reference solution\n") or out.startswith(f"[{key}] ")
        assert not has_cjk(out), out
    lang("zh")
    for out in (printed(exercises.check, key, None), printed(exercises.check, key, wrong_answer),
                printed(exercises.hint, key)):
        assert out.count("\n") == 1 and out.startswith(f"[{key}] "), out
        assert cjk_ratio(out.split("] ", 1)[1]) >= MIN_CJK_RATIO, out
    assert printed(exercises.solution, key).startswith(f"# [{key}] 参考答案\n")
    lang("both")  # what the committed notebooks show: Chinese line, then English line
    zh_line, en_line = printed(exercises.check, key, None).splitlines()
    assert zh_line.startswith(f"[{key}] 尚未完成：") and en_line.startswith(f"[{key}] not solved yet: ")
    assert printed(exercises.solution, key).startswith(f"# [{key}] reference solution / 参考答案\n")


def test_export_puts_title_and_checker_output_into_one_language():
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "metadata": {"tags": ["lang-both"]},
         "source": "# 07 · 激活检查点 / Activation checkpointing\n\n**用时间换内存 · Trading time for memory**\n\n"
                   "不保存，反向时重算。\nKeep nothing, recompute in backward."},
        {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": 'hooklab.course.check("07.1", f)',
         "outputs": [{"output_type": "stream", "name": "stdout",
                      "text": ["[07.1] 尚未完成：请先实现 `f`。\n", "[07.1] not solved yet: implement `f` first.\n"]}]},
        {"cell_type": "code", "metadata": {}, "execution_count": 2, "source": 'hooklab.course.solution("07.1")',
         "outputs": [{"output_type": "stream", "name": "stdout",
                      "text": "# [07.1] reference solution / 参考答案\ndef f():\n    return 1\n"}]},
        {"cell_type": "code", "metadata": {}, "execution_count": 3, "source": "print('[x] 中文')",
         "outputs": [{"output_type": "stream", "name": "stdout", "text": "[1.0] 一\n[2.0] two\nplain\n"}]},
    ]}
    en, zh = export_notebook(nb, "en"), export_notebook(nb, "zh")
    assert en["cells"][0]["source"] == ("# 07 · Activation checkpointing\n\n**Trading time for memory**\n\n"
                                        "Keep nothing, recompute in backward.")
    assert zh["cells"][0]["source"] == "# 07 · 激活检查点\n\n**用时间换内存**\n\n不保存，反向时重算。"
    assert en["cells"][1]["outputs"][0]["text"] == "[07.1] not solved yet: implement `f` first.\n"
    assert zh["cells"][1]["outputs"][0]["text"] == "[07.1] 尚未完成：请先实现 `f`。\n"
    assert en["cells"][2]["outputs"][0]["text"] == "# [07.1] reference solution\ndef f():\n    return 1\n"
    assert zh["cells"][2]["outputs"][0]["text"].startswith("# [07.1] 参考答案\ndef f():")
    # lines that are not a course message pair (different keys) are left alone, and so is the source
    assert en["cells"][3]["outputs"] == nb["cells"][3]["outputs"]
    assert nb["cells"][0]["source"].startswith("# 07 · 激活检查点 / Activation")


def test_one_language_output_leaves_other_text_alone():
    text = "[01.1] correct!\n[01.1] 正确！\nsomething else 中文\n"  # English first: not the course's pair
    assert one_language_output(text, "en") == text


@pytest.mark.parametrize("lang_", ["en", "zh"])
def test_exported_course_notebooks_are_one_language(tmp_path, lang_):
    """The course's own exports: no title or checker output in the other language (the glossary is
    naturally bilingual and stays)."""
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = export_notebook(json.loads(path.read_text(encoding="utf-8")), lang_)
        title = "".join(nb["cells"][0]["source"])
        assert has_cjk(title) == (lang_ == "zh"), (path.name, title)
        for cell in nb["cells"]:
            for output in cell.get("outputs", []):
                lines = "".join(output.get("text", "")).splitlines()
                for line in [x for x in lines if re.match(r"\[\d+\.\d+\] ", x)]:
                    body = line.split("] ", 1)[1]
                    if lang_ == "en":
                        assert not has_cjk(line), (path.name, line)
                    else:
                        assert cjk_ratio(body) >= MIN_CJK_RATIO, (path.name, line)
