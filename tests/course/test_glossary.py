"""The Chinese of every notebook keeps to the glossary of notebook 00 (its lang-both glossary cell).

One term per concept and one quotation style: a lang-zh or lang-both markdown cell that uses a rendering the
glossary rules out fails, naming the notebook, the cell index and the term to use instead. Chinese prose names
hooks in Chinese: the English "pre-hook" / "post-hook" may appear in a lang-zh cell only as an English gloss in
parentheses (反向前置钩子（backward pre-hook）); the bilingual glossary itself is lang-both and lists them. Code
(fenced blocks and inline `code`) is not prose and is not checked.

Three more kinds of drift are checked per notebook, each failure saying which rule and what to write:
- the "what you will learn" heading has one form: ``**本课你将学到**`` / ``**What you will learn**``;
- a navigation line has one form, naming the neighbouring notebooks (the nearest lower and higher numbers that
  exist) by their titles: ``上一课：[NN · 标题](NN_x.ipynb) · 下一课：[MM · 标题](MM_y.ipynb)`` and
  ``Previous: [NN · Title](NN_x.ipynb) · Next: [MM · Title](MM_y.ipynb)``, once per notebook, no final full stop;
- a term listed in ``FIRST_USE`` carries its English gloss in parentheses at its first use in a notebook's Chinese
  prose (headings, link text and code aside): 节点（autograd Node）, 梯度桶（bucket）.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
RECIPES = sorted((ROOT / "recipes").glob("[0-9][0-9]_*.ipynb"))  # the recipes keep to the same glossary
GLOSSARY_NOTEBOOK = ROOT / "notebooks" / "00_introduction.ipynb"

# the glossary's term -> the renderings it rules out (matched case-insensitively)
GLOSSARY_VARIANTS = {
    "前置钩子（前向前置钩子 / 反向前置钩子）": ["预钩子"],
    "延迟绑定": ["晚绑定"],
    "累加后钩子": ["累积后钩子", "后累积钩子"],
    "锁页内存": ["固定内存", "页锁定内存"],
    "节点（第一次出现时写“节点（autograd Node）”）": ["autograd 节点", "自动求导节点"],
    "保存张量的钩子": ["保存张量钩子", "保存的张量钩子"],
    "全局模块钩子（优化器的叫“全局优化器钩子”，注册时调用的叫“全局注册钩子”）": ["全局钩子"],
    "本课（一个笔记本是一课；“本节”只指一节）": ["本节你将学到", "本节内容"],
    "提前停止": ["早停"],
    "分发模式": ["分派模式"],
    "转向（steering）": ["引导（steering）"],
    "“…”": ["「", "」"],
}
VARIANTS = {variant: term for term, variants in GLOSSARY_VARIANTS.items() for variant in variants}
# a character that is part of a glossary term only in a longer word: rendering (regex) -> the term
PATTERN_VARIANTS = {
    r"(?<!梯度)桶": "梯度桶（bucket）",
}
# first use in a notebook's Chinese prose: the term, then (within a few characters) its English gloss
FIRST_USE = {"节点": "Node", "梯度桶": "bucket"}
LEARN_ZH, LEARN_EN = "**本课你将学到**", "**What you will learn**"
ASCII_QUOTES = '"…" (ASCII quotes)'
QUOTE_FIX = "“…”"
BARE_HOOK_WORD = re.compile(r"(?<![\w-])(?:pre|post)-hooks?\b")   # "pre-hook", "post-hooks", not "post-accumulate"
ENGLISH_GLOSS = re.compile(r"[（(][A-Za-z0-9 _·/,.'-]*[）)]")        # "（backward pre-hook）", "(Node post-hook)"
HOOK_WORD_FIX = "前置钩子 / 后置钩子 (节点的前置钩子, 前向前置钩子, 反向前置钩子, 节点的后置钩子)"

FENCED = re.compile(r"```.*?```", re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
CJK = re.compile(r"[\u4e00-\u9fff]")
QUOTED = re.compile(r'"([^"\n]*)"')


def prose(source: str) -> str:
    """The cell's text without code blocks and inline code (same length, code blanked, so offsets still match)."""
    blank = lambda m: " " * len(m.group(0))  # noqa: E731
    return INLINE_CODE.sub(blank, FENCED.sub(blank, source))


def violations(source: str, tag: str) -> list[tuple[str, str, str]]:
    """(rejected text, preferred term, excerpt) for each rule the cell breaks."""
    text = prose(source)
    found = []
    patterns = [(re.escape(v), v, term) for v, term in VARIANTS.items()] + [(p, p, t) for p, t in PATTERN_VARIANTS.items()]
    for pattern, variant, preferred in patterns:
        for m in re.finditer(pattern, text, flags=re.IGNORECASE):
            found.append((variant, preferred, source[max(0, m.start() - 12):m.end() + 12].replace("\n", " ")))
    if tag == "lang-zh":  # Chinese prose: any ASCII double quote; English hook words outside a gloss
        quotes = [m for m in re.finditer('"', text)]
        found += [(ASCII_QUOTES, QUOTE_FIX, source[max(0, m.start() - 12):m.end() + 12].replace("\n", " "))
                  for m in quotes[:1]]
        unglossed = ENGLISH_GLOSS.sub(lambda m: " " * len(m.group(0)), text)
        found += [(m.group(0), HOOK_WORD_FIX, source[max(0, m.start() - 12):m.end() + 12].replace("\n", " "))
                  for m in BARE_HOOK_WORD.finditer(unglossed)]
    else:  # a bilingual cell: ASCII quotes around Chinese text
        found += [(ASCII_QUOTES, QUOTE_FIX, m.group(0)) for m in QUOTED.finditer(text) if CJK.search(m.group(1))]
    return found


def chinese_cells(path: Path) -> list[tuple[int, str, str]]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = []
    for i, cell in enumerate(nb["cells"]):
        tags = cell.get("metadata", {}).get("tags", [])
        tag = next((t for t in tags if t in ("lang-zh", "lang-both")), None)
        if cell.get("cell_type") == "markdown" and tag:
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            cells.append((i, tag, source))
    return cells


@pytest.mark.parametrize("path", NOTEBOOKS + RECIPES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_chinese_text_keeps_to_the_glossary(path):
    problems = [f"{path.name} cell {i}: {variant!r} -> use {preferred} ({excerpt!r})"
                for i, tag, source in chinese_cells(path) for variant, preferred, excerpt in violations(source, tag)]
    assert not problems, "terms the glossary of notebook 00 rules out:\n" + "\n".join(problems)


def _profile_texts() -> list[tuple[str, str]]:
    """(where, Chinese text) of the library profiles' words and of the other frameworks' page (tools/profiles/)."""
    from tools.profiles.frameworks_data import CONCEPTS, FRAMEWORKS
    from tools.profiles.libraries import modules

    found = []
    for slug, module in modules().items():
        library = module.LIBRARY
        found += [(f"{slug} words[zh][{part}]", text) for part, text in library.words["zh"].items()]
        found += [(f"{slug} surprise", s["zh"]) for s in library.surprises]
        found += [(f"{slug} why_source", library.why_source["zh"])] if library.why_source else []
        found += [(f"{slug} order", library.order["zh"])] if library.order else []
    for framework in FRAMEWORKS:
        found += [(f"frameworks {framework.name}", t) for t in (framework.summary_zh, framework.missing_zh,
                                                               *(framework.concept(c).zh for c in CONCEPTS))]
    return found


def test_the_library_profiles_and_the_other_frameworks_keep_to_the_glossary():
    bad = [(where, found) for where, text in _profile_texts() if (found := violations(text, "lang-zh"))]
    assert not bad, "\n".join(f"{where}: {v[0]!r} -> {v[1]!r} ({v[2]})" for where, found in bad for v in found)


def test_the_glossary_lists_every_preferred_term():
    glossary = [src for _, tag, src in chinese_cells(GLOSSARY_NOTEBOOK) if tag == "lang-both" and "Glossary" in src]
    assert len(glossary) == 1, "notebook 00 should have exactly one lang-both glossary cell"
    terms = {"前置钩子", "前向前置钩子", "反向前置钩子", "延迟绑定", "累加后钩子", "锁页内存", "“"}
    missing = [t for t in terms if t not in glossary[0]]
    assert not missing, f"the glossary cell does not list {missing}"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_variant_is_caught(variant):
    assert [v for v, _, _ in violations(f"这里写了{variant}一词。", "lang-zh")] == [variant]


def test_quotes_and_code_are_judged_as_intended():
    assert violations('原文说"只在最后执行一次"。', "lang-zh")[0][:2] == (ASCII_QUOTES, QUOTE_FIX)
    assert violations('原文说“只在最后执行一次”。', "lang-zh") == []
    assert violations('调用 `f(x, "a")` 即可；```\nprint("预钩子")\n```', "lang-zh") == []
    assert violations('前向前置钩子、反向前置钩子、累加后钩子、延迟绑定、锁页内存。', "lang-zh") == []
    # a bilingual cell may quote English with ASCII quotes, but not Chinese
    assert violations('**术语表 / Glossary** — the "usual" terms', "lang-both") == []
    assert [v for v, _, _ in violations('按编号称"第 NN 课"', "lang-both")] == [ASCII_QUOTES]


def test_english_hook_words_only_as_a_gloss_in_chinese_prose():
    bare = [v for v, _, _ in violations("`retain_grad` 写入 `.grad` 在节点 pre-hook 之前，节点 post-hook 最后。", "lang-zh")]
    assert bare == ["pre-hook", "post-hook"]
    assert [v for v, _, _ in violations("得在 pre-hooks 里替换", "lang-zh")] == ["pre-hooks"]
    assert violations("反向前置钩子（backward pre-hook）、节点的后置钩子(Node post-hook)。", "lang-zh") == []
    assert violations("累加后钩子（post-accumulate-grad hook）和 `register_forward_pre_hook`。", "lang-zh") == []
    assert violations("post-accumulate-grad hook 不是 post-hook 的一种", "lang-zh")[0][0] == "post-hook"
    # English and bilingual cells may use the English words freely
    assert violations("the Node pre-hook runs first", "lang-en") == []
    assert violations("| pre-hook · post-hook | 前置钩子 · 后置钩子 |", "lang-both") == []


# ---- one heading form, one navigation form, first use with its gloss ----------------------------------------------

def markdown_cells(path: Path) -> list[tuple[int, str, str]]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for i, cell in enumerate(nb["cells"]):
        tags = cell.get("metadata", {}).get("tags", [])
        if cell.get("cell_type") == "markdown":
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            out.append((i, next((t for t in tags if t.startswith("lang-")), ""), source))
    return out


def titles(path: Path) -> tuple[str, str]:
    """(Chinese, English) title from the notebook's title cell "# NN · 中文 / English"."""
    first = markdown_cells(path)[0][2].splitlines()[0]
    m = re.match(r"#\s*\d\d\s*·\s*(.+?)\s*/\s*(.+?)\s*$", first)
    assert m, f"{path.name}: the title cell should start with '# NN · 中文标题 / English title', not {first!r}"
    return m.group(1), m.group(2)


def expected_navigation(path: Path, notebooks: list[Path]) -> tuple[str, str]:
    number = int(path.name[:2])
    lower = [p for p in notebooks if int(p.name[:2]) < number]
    higher = [p for p in notebooks if int(p.name[:2]) > number]
    zh, en = [], []
    for label_zh, label_en, other in (("上一课", "Previous", lower[-1] if lower else None),
                                      ("下一课", "Next", higher[0] if higher else None)):
        if other is not None:
            t_zh, t_en = titles(other)
            zh.append(f"{label_zh}：[{other.name[:2]} · {t_zh}]({other.name})")
            en.append(f"{label_en}: [{other.name[:2]} · {t_en}]({other.name})")
    return " · ".join(zh), " · ".join(en)


NAV_ZH = re.compile(r"^\s*(上一课|下一课)[：:是]")
NAV_EN = re.compile(r"^\s*(Previous|Next):")


def navigation_problems(path: Path, notebooks: list[Path]) -> list[str]:
    want_zh, want_en = expected_navigation(path, notebooks)
    problems = []
    for tag, pattern, want in (("lang-zh", NAV_ZH, want_zh), ("lang-en", NAV_EN, want_en)):
        lines = [(i, line.strip()) for i, t, src in markdown_cells(path) if t == tag
                 for line in src.splitlines() if pattern.match(line)]
        if len(lines) != 1:
            problems.append(f"{path.name}: {len(lines)} {tag} navigation lines {[line for _, line in lines]}; "
                            f"end the notebook with exactly one line, written exactly as: {want}")
        for i, line in lines:
            if line != want:
                problems.append(f"{path.name} cell {i}: navigation line {line!r}; the one form is {want!r} "
                                "(neighbouring notebooks that exist, their titles as in their title cells, no full stop)")
    return problems


def heading_problems(path: Path) -> list[str]:
    cells = markdown_cells(path)
    problems = []
    for tag, want in (("lang-zh", LEARN_ZH), ("lang-en", LEARN_EN)):
        firsts = [(i, src.strip().splitlines()[0]) for i, t, src in cells if t == tag and src.strip()]
        if not firsts or firsts[0][1].strip() != want:
            got = firsts[0] if firsts else (None, "nothing")
            problems.append(f"{path.name} cell {got[0]}: the first {tag} cell should start with the heading {want!r} "
                            f"(one form in every notebook), not {got[1]!r}")
    return problems


LINK_TEXT = re.compile(r"\[[^\]\n]*\]\([^)\n]*\)")


def first_use_problems(path: Path) -> list[str]:
    problems = []
    for term, english in FIRST_USE.items():
        for i, tag, src in markdown_cells(path):
            if tag != "lang-zh":
                continue
            text = "\n".join(" " * len(line) if line.lstrip().startswith("#") else line for line in prose(src).split("\n"))
            text = LINK_TEXT.sub(lambda m: " " * len(m.group(0)), text)
            m = re.search(term, text)
            if m is None:
                continue
            glossed = re.compile(re.escape(term) + r"[\u4e00-\u9fff]{0,6}[（(][^）)]*" + re.escape(english), re.IGNORECASE)
            if not glossed.match(text, m.start()):
                excerpt = src[max(0, m.start() - 12):m.end() + 20].replace("\n", " ")
                problems.append(f"{path.name} cell {i}: first use of {term!r} in the Chinese prose needs its English "
                                f"gloss, e.g. {term}（{'autograd ' if english == 'Node' else ''}{english}）: {excerpt!r}")
            break
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_one_heading_form_one_navigation_form_and_glossed_first_uses(path):
    problems = heading_problems(path) + navigation_problems(path, NOTEBOOKS) + first_use_problems(path)
    assert not problems, "drift from the course's single forms:\n" + "\n".join(problems)


def _fixture(tmp_path, name, cells):
    cells = [{"cell_type": "markdown", "metadata": {"tags": [tag]}, "source": src} for tag, src in cells]
    path = tmp_path / name
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}), encoding="utf-8")
    return path


def test_each_drift_class_is_caught(tmp_path):
    a = _fixture(tmp_path, "01_a.ipynb", [("lang-both", "# 01 · 甲 / Alpha"), ("lang-zh", "**本课你将学到**\n\n节点（autograd Node）"),
                                          ("lang-en", "**What you will learn**"),
                                          ("lang-zh", "下一课：[02 · 乙](02_b.ipynb)"), ("lang-en", "Next: [02 · Beta](02_b.ipynb)")])
    b = _fixture(tmp_path, "02_b.ipynb", [("lang-both", "# 02 · 乙 / Beta"), ("lang-zh", "**本节内容**\n\n这里的节点没有注释，梯度桶（bucket）有。"),
                                          ("lang-en", "**What you will learn**"),
                                          ("lang-zh", "上一课：[第 01 课 · 甲](01_a.ipynb)。"), ("lang-en", "Previous: [01 · Alpha](01_a.ipynb)")])
    both = [a, b]
    assert heading_problems(a) == [] and navigation_problems(a, both) == [] and first_use_problems(a) == []
    assert "'**本课你将学到**'" in heading_problems(b)[0]
    assert "上一课：[01 · 甲](01_a.ipynb)" in navigation_problems(b, both)[0]
    assert "first use of '节点'" in first_use_problems(b)[0] and len(first_use_problems(b)) == 1
    c = _fixture(tmp_path, "03_c.ipynb", [("lang-both", "# 03 · 丙 / Gamma"), ("lang-zh", "**本课你将学到**"),
                                          ("lang-en", "**What you will learn**")])
    assert "end the notebook with exactly one line" in navigation_problems(c, both + [c])[0]
    assert "Next: [03 · Gamma](03_c.ipynb)" in " ".join(navigation_problems(b, both + [c]))  # a new neighbour
    # variants of glossary terms, including a case change and a bare 桶
    for text, variant in [("外层的保存张量钩子", "保存张量钩子"), ("Autograd 节点钩子", "autograd 节点"), ("全局钩子先运行", "全局钩子"),
                          ("**本节你将学到**", "本节你将学到"), ("放进一个桶里", r"(?<!梯度)桶")]:
        assert [v for v, _, _ in violations(text, "lang-zh")] == [variant], text
    assert violations("全局模块钩子、全局优化器钩子、全局注册钩子、梯度桶、保存张量的钩子", "lang-zh") == []
