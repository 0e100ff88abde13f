"""The Chinese of every notebook keeps to the glossary of notebook 00 (its lang-both glossary cell).

One term per concept and one quotation style: a lang-zh or lang-both markdown cell that uses a rendering the
glossary rules out fails, naming the notebook, the cell index and the term to use instead. Chinese prose names
hooks in Chinese: the English "pre-hook" / "post-hook" may appear in a lang-zh cell only as an English gloss in
parentheses (反向前置钩子（backward pre-hook）); the bilingual glossary itself is lang-both and lists them. Code
(fenced blocks and inline `code`) is not prose and is not checked.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
GLOSSARY_NOTEBOOK = ROOT / "notebooks" / "00_introduction.ipynb"

# rejected rendering -> the glossary's term
VARIANTS = {
    "预钩子": "前置钩子（前向前置钩子 / 反向前置钩子）",
    "晚绑定": "延迟绑定",
    "累积后钩子": "累加后钩子",
    "后累积钩子": "累加后钩子",
    "固定内存": "锁页内存",
    "页锁定内存": "锁页内存",
    "autograd 节点": "节点（第一次出现时写“节点（autograd Node）”）",
    "自动求导节点": "节点（第一次出现时写“节点（autograd Node）”）",
    "「": "“…”",
    "」": "“…”",
}
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
    for variant, preferred in VARIANTS.items():
        for m in re.finditer(re.escape(variant), text):
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chinese_text_keeps_to_the_glossary(path):
    problems = [f"{path.name} cell {i}: {variant!r} -> use {preferred} ({excerpt!r})"
                for i, tag, source in chinese_cells(path) for variant, preferred, excerpt in violations(source, tag)]
    assert not problems, "terms the glossary of notebook 00 rules out:\n" + "\n".join(problems)


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
