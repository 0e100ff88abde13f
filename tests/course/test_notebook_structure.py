"""The course notebooks follow the format; the checks catch each kind of breakage."""
import copy
import json
from pathlib import Path

import pytest

from notebook_rules import check_notebook

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks_numbered_from_00():
    names = [p.name for p in NOTEBOOKS]
    assert names, "no notebooks found"
    numbers = [int(n[:2]) for n in names if n[:2].isdigit()]
    assert numbers == list(range(len(numbers))), f"numbering has gaps or repeats: {names}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_course_notebook_follows_the_format(path):
    assert check_notebook(path) == []


# --- a known-good notebook, then one deliberate breakage per rule -------------------------

def md(text, *tags):
    return {"cell_type": "markdown", "metadata": {"tags": list(tags)}, "source": text}


def code(source, count, outputs=()):
    return {"cell_type": "code", "metadata": {}, "source": source, "execution_count": count,
            "outputs": list(outputs)}


GOOD = {
    "nbformat": 4, "nbformat_minor": 5,
    "metadata": {"kernelspec": {"name": "hooklab", "display_name": "Python 3 (hooklab)", "language": "python"}},
    "cells": [
        md("# 99 · 标题 / Title", "lang-both"),
        md("## 1. 钩子\n钩子（hook）让我们观察梯度。", "lang-zh"),
        md('## 1. Hooks <span class="jp-toc-ignore"></span>\nA hook lets us watch a gradient.', "lang-en"),
        code("import hooklab\nhooklab.setup()", 1,
             [{"output_type": "stream", "name": "stdout", "text": "ready\n"}]),
        code("print(1 + 1)", 2, [{"output_type": "stream", "name": "stdout", "text": "2\n"}]),
    ],
}


def broken(mutate):
    nb = copy.deepcopy(GOOD)
    mutate(nb)
    return nb


def set_(path, value):
    def mutate(nb):
        target = nb
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


def add_output(output):
    return lambda nb: nb["cells"][4]["outputs"].append(output)


BREAKAGES = {
    "missing lang tag": (set_(["cells", 1, "metadata", "tags"], []), "needs exactly one of"),
    "two lang tags": (set_(["cells", 1, "metadata", "tags"], ["lang-zh", "lang-en"]), "needs exactly one of"),
    "zh without en twin": (lambda nb: nb["cells"].pop(2), "not followed by its lang-en twin"),
    "en without zh twin": (lambda nb: nb["cells"].pop(1), "does not follow a lang-zh twin"),
    "twins swapped": (lambda nb: nb["cells"].__setitem__(slice(1, 3), nb["cells"][2:0:-1]),
                      "not followed by its lang-en twin"),
    "zh cell in English": (set_(["cells", 1, "source"], "A hook, in English only."), "has no Chinese text"),
    "en cell in Chinese": (set_(["cells", 2, "source"], "钩子"), "lang-en cell contains Chinese text"),
    "counts out of order": (set_(["cells", 4, "execution_count"], 5), "execution counts are [1, 5]"),
    "cell not run": (set_(["cells", 4, "execution_count"], None), "execution counts are [1, None]"),
    "error output": (add_output({"output_type": "error", "ename": "ValueError", "evalue": "x",
                                 "traceback": []}), "error output (ValueError)"),
    "svg output": (add_output({"output_type": "display_data", "metadata": {},
                               "data": {"image/svg+xml": "<svg/>", "text/plain": "fig"}}), "SVG output"),
    "stderr output": (add_output({"output_type": "stream", "name": "stderr", "text": "Warning\n"}),
                      "stderr output"),
    "memory address": (add_output({"output_type": "execute_result", "execution_count": 2, "metadata": {},
                                   "data": {"text/plain": "<function f at 0x7f3a2b1c9d80>"}}),
                       "memory address"),
    "wrong kernel": (set_(["metadata", "kernelspec", "name"], "python3"), "kernel name is 'python3'"),
    "no hooklab import": (set_(["cells", 3, "source"], "import torch"), "no code cell imports hooklab"),
    "lang tag on code": (set_(["cells", 4, "metadata"], {"tags": ["lang-en"]}), "code cell carries a language tag"),
    "en heading listed in the TOC": (set_(["cells", 2, "source"], "## 1. Hooks\nA hook."),
                                     "does not end with <span class=\"jp-toc-ignore\"></span>"),
    "en twin without the zh heading": (set_(["cells", 2, "source"], "A hook lets us watch a gradient."),
                                       "the twins' headings differ"),
    "zh heading left out of the TOC": (set_(["cells", 1, "source"], '## 1. 钩子 <span class="jp-toc-ignore"></span>'),
                                       "belongs on lang-en headings only"),
}


def write(tmp_path, nb, name="99_fixture.ipynb"):
    path = tmp_path / name
    path.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")
    return path


def test_good_fixture_passes(tmp_path):
    assert check_notebook(write(tmp_path, GOOD)) == []


@pytest.mark.parametrize("name", BREAKAGES)
def test_each_breakage_is_reported(tmp_path, name):
    mutate, expected = BREAKAGES[name]
    problems = check_notebook(write(tmp_path, broken(mutate)))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("filename", ["1_intro.ipynb", "01-intro.ipynb", "01_Intro.ipynb", "01_导论.ipynb"])
def test_bad_file_names_are_reported(tmp_path, filename):
    problems = check_notebook(write(tmp_path, GOOD, filename))
    assert any("is not NN_slug.ipynb" in p for p in problems), problems


def test_unreadable_notebook_is_reported(tmp_path):
    path = tmp_path / "99_broken.ipynb"
    path.write_text("{not json", encoding="utf-8")
    assert any("not a readable notebook" in p for p in check_notebook(path))
