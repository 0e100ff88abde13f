"""Write one-language copies of the bilingual notebooks (code cells and outputs kept).

    python -m hooklab.course export --lang zh            # notebooks/*.ipynb -> build/zh/
    python -m hooklab.course export --lang en --out /tmp/en notebooks/00_introduction.ipynb
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, Iterable

import nbformat
from nbconvert.preprocessors import TagRemovePreprocessor

from .lang import has_cjk

__all__ = ["LANGS", "export_notebook", "export_notebooks"]

LANGS = ("zh", "en")


def _lang_tag(cell: dict[str, Any]) -> str | None:
    tags = [t for t in cell.get("metadata", {}).get("tags", []) if t.startswith("lang-")]
    return tags[0] if tags else None


_TITLE = re.compile(r"^(#+\s+\d+\s*·\s*)(.+?)\s+/\s+(.+?)\s*$")        # "# 01 · 张量钩子 / Tensor hooks"
_SUBTITLE = re.compile(r"^(\*\*|_|\*)(.+?)\s+·\s+(.+?)(\1)\s*$")       # "**中文副标题 · English subtitle**"
_MESSAGE = re.compile(r"^\[(\d+\.\d+)\] ")                               # "[01.2] ..." (course.check / hint)
_SOLUTION = re.compile(r"^# \[(\d+\.\d+)\] reference solution / 参考答案$")


def _pick(zh: str, en: str, lang: str) -> str | None:
    """``zh`` or ``en`` when they really are Chinese and English, else None (leave the line alone)."""
    if not has_cjk(zh) or has_cjk(en):
        return None
    return zh if lang == "zh" else en


def one_language_title(text: str, lang: str) -> str:
    r"""A bilingual title cell in one language: "# 01 · 张量钩子 / Tensor hooks", a bold
    "**中文 · English**" subtitle and lines wholly in one language; other lines are kept.

    >>> one_language_title("# 01 · 张量钩子 / Tensor hooks\n\n**看见梯度 · Seeing gradients**", "en")
    '# 01 · Tensor hooks\n\n**Seeing gradients**'
    """
    lines = []
    for line in text.split("\n"):
        title, subtitle = _TITLE.match(line), _SUBTITLE.match(line)
        if title and (picked := _pick(title[2], title[3], lang)) is not None:
            line = title[1] + picked
        elif subtitle and (picked := _pick(subtitle[2], subtitle[3], lang)) is not None:
            line = subtitle[1] + picked + subtitle[1]
        elif line.strip() and not line.lstrip().startswith(("#", "|", "-", "*", ">")):
            if has_cjk(line) != (lang == "zh"):
                continue  # a plain line wholly in the other language
        lines.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


def one_language_output(text: str, lang: str) -> str:
    r"""Printed output of ``course.check`` / ``hint`` / ``solution`` in one language.

    The course prints a message as two lines with the same ``[NN.x]`` prefix, Chinese first; keep one.

    >>> one_language_output("[01.2] 尚未完成：请先实现。\n[01.2] not solved yet: implement it first.\n", "en")
    '[01.2] not solved yet: implement it first.\n'
    """
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        first = _MESSAGE.match(line)
        if first and i + 1 < len(lines):
            second = _MESSAGE.match(lines[i + 1])
            if second and second[1] == first[1] and has_cjk(line) and not has_cjk(lines[i + 1]):
                out.append(line if lang == "zh" else lines[i + 1])
                i += 2
                continue
        solution = _SOLUTION.match(line)
        if solution:
            line = f"# [{solution[1]}] " + ("参考答案" if lang == "zh" else "reference solution")
        out.append(line)
        i += 1
    return "\n".join(out)


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def export_notebook(nb: dict[str, Any], lang: str) -> dict[str, Any]:
    """Return a copy of notebook ``nb`` keeping code cells and the markdown of ``lang`` (and ``lang-both``).

    The title cell and the printed output of the course's exercise tools are put into ``lang`` too, and
    ``metadata.hooklab_language`` records it (the checkers then answer in that language, see
    :mod:`hooklab.course.lang`)."""
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {', '.join(LANGS)}, got {lang!r}")
    other = {"zh": "lang-en", "en": "lang-zh"}[lang]
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown" and _lang_tag(cell) is None:
            raise ValueError("a markdown cell has no lang-* tag; run the structure tests first")
    # nbconvert drops the other language's cells (it works on a copy: the source stays untouched)
    node, _ = TagRemovePreprocessor(remove_cell_tags={other}).preprocess(nbformat.from_dict(copy.deepcopy(nb)), {})
    out = json.loads(json.dumps(node))  # plain dicts and lists again, strings kept as they were
    for index, cell in enumerate(out.get("cells", [])):
        if index == 0 and cell.get("cell_type") == "markdown" and _lang_tag(cell) == "lang-both" \
                and _source(cell).startswith("#"):
            cell["source"] = one_language_title(_source(cell), lang)
        elif cell.get("cell_type") == "code":
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream":
                    text = _source({"source": output.get("text", "")})
                    if (single := one_language_output(text, lang)) != text:
                        output["text"] = single
    out.setdefault("metadata", {})["hooklab_language"] = lang
    return out


def export_notebooks(lang: str, out_dir: str | Path, paths: Iterable[str | Path]) -> list[Path]:
    """Export each notebook in ``paths`` into ``out_dir`` (same file names); return the files written."""
    out_dir = Path(out_dir)
    sources = [Path(p) for p in paths]
    missing = [str(p) for p in sources if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"no such notebook: {', '.join(missing)}")
    overwritten = [str(p) for p in sources if (out_dir / p.name).resolve() == p.resolve()]
    if overwritten:
        raise ValueError(f"--out {out_dir} would overwrite the bilingual source {', '.join(overwritten)}; "
                         "choose another folder (the default is build/<lang>)")
    exported = [(p, export_notebook(json.loads(p.read_text(encoding="utf-8")), lang)) for p in sources]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for src, nb in exported:
        target = out_dir / src.name
        target.write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        written.append(target)
    return written
