"""The recipes on the course's website: a page per chapter (``recipes-NN_chapter``, one recipe notebook each, in the site's
language, with the outputs as they were validated) and a page that lists them all (``recipes``).

tools/site/build.py's ``extra_pages`` takes :func:`pages`. Each recipe gets the anchor ``recipe-<bank id>``
(course.ask links to it), and under its question the words it was asked in: the asker's own words for the symptom
and the message they quote (recipes/bank), how a Chinese reader would ask it (the recipe's ``asked_zh``) and the API
it is about (its ``calls``), so that the site's search finds the recipe by the words a learner with the same question
types. A link from a recipe to a course notebook (``../notebooks/NN_x.ipynb#cell-id=…``) becomes a
link to that notebook's page; links elsewhere stay as they are.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hooklab.course.notebook import lang_tags, read_notebook, strip_toc_skip

from ..profiles.page import slugs_for
from . import bank, chapters

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
TITLE = re.compile(r"^#\s+(?:Recipes|食谱)?\s*(\d\d)\s*·\s*(.*?)\s*/\s*(.*?)\s*$", re.MULTILINE)
HEADING = re.compile(r"^## R([a-z-]+-\d\d) · ", re.MULTILINE)
COURSE_LINK = re.compile(r"\]\(\.\./notebooks/(\d\d_\w+)\.ipynb(?:#[^)]*)?\)")
TEXT = {
    "zh": {"title": "食谱：实践者真正问过的问题", "area": "领域", "recipes": "食谱", "profiles": "库的钩子画像",
           "asked": "提问者的原话", "asked_zh": "也常这样问", "message": "引用的报错", "calls": "涉及的 API",
           "colon": "：", "quote": "“{}”", "library": "（{}）",
           "setup": "**先运行这个单元格。** 下面每个食谱在它之后都能单独运行，不依赖前面的食谱；在 Colab 或 Binder "
                    "里打开下载的笔记本时，最前面还有一个安装单元格，先运行它，再运行这一个。",
           "after_setup": "*单独运行：先运行本页顶部的[准备单元格](#recipe-setup)，再运行这个食谱的单元格。*",
           "how": "按章查：每一章对应问题涉及的一个库或一种机制，先列本章的食谱，再列其他章里提到本章这些库的食谱；"
                  "也可以按库查（每个库的食谱分在哪几章），或者按报错和症状查。下面的框输入几个字就能筛选列表。",
           "filter": "筛选食谱：库、API 或报错里的词", "chapters": "各章", "by_library": "按库查",
           "by_symptom": "按症状和报错查（症状索引）", "elsewhere": "其他章里也涉及本章的库：",
           "library_note": "问题提到的每个库（PyTorch 本身除外），后面是它的食谱所在的章和各章的数目。",
           "chapter": "所在章",
           "intro": "每个食谱回答一个从公开问题跟踪器里收集来的真实问题：问题和出处、几句话的回答、在 CPU 上实际运行、"
                    "演示问题发生的代码和它验证过的输出、修正方法，以及讲解其中机制的课程单元格、钩子行为矩阵的格子和"
                    "消息索引的行。问题库和它的抽取方法见仓库的 `recipes/METHOD.md`；在笔记本里可以用 "
                    "`course.ask(\"报错原文或你自己的话\")` 直接查到对应的食谱。"},
    "en": {"title": "Recipes: the questions practitioners actually ask", "area": "Area", "recipes": "Recipes",
           "profiles": "Library profiles", "asked": "In the asker's words", "message": "The message quoted",
           "calls": "API", "colon": ": ", "quote": "“{}”", "library": " ({})",
           "setup": "**Run this cell first.** Each recipe below runs on its own after it, without the recipes before "
                    "it; in a downloaded notebook opened in Colab or Binder an install cell comes before this one: run "
                    "that, then this.",
           "after_setup": "*Runs on its own: run the [setup cell](#recipe-setup) at the top of this page first, then "
                          "this recipe's cells.*",
           "how": "Look a question up by chapter: each chapter is one library or mechanism a question is about, with its "
                  "own recipes first, then the recipes of other chapters that name its libraries; or by library (the "
                  "chapters that hold each library's recipes), or by message and symptom. Type a few words in the box "
                  "below to filter the lists.",
           "filter": "Filter the recipes: a library, an API, words of a message", "chapters": "Chapters",
           "by_library": "By library", "by_symptom": "By symptom and message (the symptom index)",
           "elsewhere": "In other chapters, naming this chapter's libraries:",
           "library_note": "Every library a question names (PyTorch itself aside), with the chapters that hold its "
                           "recipes and how many each.",
           "chapter": "Chapter",
           "intro": "Each recipe answers one real question gathered from public issue trackers: the question and its "
                    "source, the answer in a few sentences, code that shows it happening on a CPU with its validated "
                    "output, the fix, and the course cell, behaviour-matrix cell and message row that explain the "
                    "mechanism. The bank of questions and how it was drawn are in the repository's "
                    "`recipes/METHOD.md`; in a notebook, `course.ask(\"a pasted error or your own words\")` finds "
                    "the recipe."},
}


RECIPE_LINK = re.compile(r"\]\(\.\./recipes/(\d\d_\w+)\.ipynb(#recipe-[\w-]+)?\)")


def links_to_recipe_pages(cell: dict[str, Any]) -> dict[str, Any]:
    """A course notebook's markdown cell whose links to a recipe (``../recipes/NN_chapter.ipynb#recipe-<id>``, as
    tools/recipes/used_by.py writes them) point to the recipe on its area page on the site instead.

    >>> cell = {"cell_type": "markdown", "source": "[Rx-01](../recipes/07_hf.ipynb#recipe-x-01)"}
    >>> links_to_recipe_pages(cell)["source"]
    '[Rx-01](recipes-07_hf.md#recipe-x-01)'
    """
    if cell.get("cell_type") != "markdown" or "../recipes/" not in _source(cell):
        return cell
    return {**cell, "source": RECIPE_LINK.sub(lambda m: f"](recipes-{m[1]}.md{m[2] or ''})", _source(cell))}


def notebooks(folder: Path = RECIPES) -> list[Path]:
    return sorted(folder.glob("[0-9][0-9]_*.ipynb"))


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def split(nb: dict[str, Any]) -> tuple[list[dict[str, Any]], list[tuple[str, list[dict[str, Any]]]]]:
    """A recipe notebook as its page shows it: the setup cells (between the title and the first recipe, shown at
    the top of the page, above every recipe) and each recipe's id with its cells, from the cell that carries the
    recipe's metadata (its Chinese heading, where the page puts the anchor ``recipe-<id>``) to the next recipe's.

    >>> md = lambda rid: {"cell_type": "markdown", "source": "", "metadata": {"hooklab": {"recipe": {"id": rid}}}}
    >>> code = {"cell_type": "code", "source": "x = 1", "metadata": {}}
    >>> setup, recipes = split({"cells": [{"cell_type": "markdown", "source": "# t"}, code, md("a-01"), code, md("b-02")]})
    >>> len(setup), [(rid, len(cells)) for rid, cells in recipes]
    (1, [('a-01', 2), ('b-02', 1)])
    """
    setup: list[dict[str, Any]] = []
    recipes: list[tuple[str, list[dict[str, Any]]]] = []
    for cell in nb["cells"][1:]:
        recipe = cell.get("metadata", {}).get("hooklab", {}).get("recipe")
        if recipe:
            recipes.append((recipe["id"], []))
        (recipes[-1][1] if recipes else setup).append(cell)
    return setup, recipes


def title(nb: dict[str, Any], lang: str) -> tuple[str, str]:
    """(number, title in ``lang``) from the notebook's bilingual title cell."""
    match = TITLE.search(_source(nb["cells"][0]))
    if not match:
        raise ValueError("a recipe notebook starts with '# Recipes NN · 中文标题 / English title'")
    return match[1], match[2] if lang == "zh" else match[3]


def _outputs(cell: dict[str, Any]) -> list[str]:
    shown = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            shown.append(_source({"source": output.get("text", "")}))
        elif output.get("output_type") in ("execute_result", "display_data"):
            text = output.get("data", {}).get("text/plain")
            if text is not None:
                shown.append(_source({"source": text}))
    return [s.rstrip("\n") for s in shown if s.strip()]


MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>|#$])")


def asked_as(recipe: dict[str, Any], question: Any, lang: str) -> list[str]:
    """The lines under a recipe's question that say how it was asked (MyST Markdown): the asker's words for the
    symptom with the library, the message quoted, on the Chinese page the Chinese wording (``asked_zh``), and the API
    it is about.

    >>> from types import SimpleNamespace as Q
    >>> q = Q(library="peft", symptom="the hook *never* fires", message=None)
    >>> asked_as({"asked_zh": "钩子不触发", "calls": ["Module.register_forward_hook"]}, q, "en")[::2]
    ["**In the asker's words** (peft): “the hook \\\\*never\\\\* fires”", '**API**: `Module.register_forward_hook`']
    >>> asked_as({"asked_zh": "钩子不触发"}, q, "zh")[2]
    '**也常这样问**：“钩子不触发”'
    """
    text, out = TEXT[lang], []
    if question is not None:
        words = MARKDOWN_SPECIAL.sub(r"\\\1", question.symptom.strip())
        out += [f"**{text['asked']}**{text['library'].format(question.library)}{text['colon']}{text['quote'].format(words)}", ""]
        if question.message:
            out += [f"**{text['message']}**{text['colon']}", "", "```text", question.message.strip(), "```", ""]
    if lang == "zh" and recipe.get("asked_zh"):
        asked = MARKDOWN_SPECIAL.sub(r"\\\1", recipe["asked_zh"].strip())
        out += [f"**{text['asked_zh']}**{text['colon']}{text['quote'].format(asked)}", ""]
    if recipe.get("calls"):
        out += [f"**{text['calls']}**{text['colon']}" + " · ".join(f"`{call}`" for call in recipe["calls"]), ""]
    return out


def area_page(path: Path, lang: str) -> str:
    """One recipe notebook as a page of ``lang``'s site (MyST Markdown)."""
    nb = read_notebook(path)
    number, name = title(nb, lang)
    out = [f"# {TEXT[lang]['recipes']} {number} · {name}", ""]
    libraries: list[str] = []
    meta: dict[str, Any] = {}
    questions = {q.id: q for q in bank.load()}
    setup, _recipes = split(nb)
    setup_code = [cell for cell in setup if cell["cell_type"] == "code" and _source(cell).strip()]
    for cell in nb["cells"][1:]:
        text = _source(cell)
        recipe = cell.get("metadata", {}).get("hooklab", {}).get("recipe")
        if recipe:  # the twins of a recipe's heading: the Chinese one carries the metadata
            meta, libraries = recipe, recipe.get("libraries", [])
        if cell["cell_type"] == "markdown":
            tags = lang_tags(cell)
            if f"lang-{lang}" not in tags and "lang-both" not in tags:
                continue
            text = COURSE_LINK.sub(lambda m: f"]({m[1]}.ipynb)", strip_toc_skip(text))
            heading = HEADING.match(text)
            if heading:
                out += [f"(recipe-{heading[1]})=", ""]
            out += [text.rstrip(), ""]
            if heading:
                chapter = chapters.of(heading[1])
                out += [f"**{TEXT[lang]['chapter']}**{TEXT[lang]['colon']}[{chapter.title(lang)}]"
                        f"(recipes.md#chapter-{chapter.id})", ""]
                out += asked_as(meta, questions.get(heading[1]), lang)
                if setup_code:  # a reader who lands on this recipe's anchor has not seen the setup cell
                    out += [TEXT[lang]["after_setup"], ""]
            profiled = slugs_for(libraries) if heading else []
            if profiled:  # what the recipe's libraries do to a model's hooks, measured
                out += [f"**{TEXT[lang]['profiles']}**: "
                        + ", ".join(f"[{name}](profiles-{slug}.md)" for name, slug in profiled), ""]
        elif cell["cell_type"] == "code" and text.strip():
            if cell is (setup_code[0] if setup_code else None):
                out += ["(recipe-setup)=", "", TEXT[lang]["setup"], ""]
            out += ["```python", text.rstrip(), "```", ""]
            for shown in _outputs(cell):
                out += ["```text", shown, "```", ""]
    return "\n".join(out)


def entries(paths: list[Path], lang: str) -> dict[str, dict[str, Any]]:
    """Every recipe of the notebooks at ``paths``: id -> its heading's line in ``lang`` (``R<id> · …``), its page
    (``recipes-NN_chapter``) and the libraries its metadata names."""
    found: dict[str, dict[str, Any]] = {}
    for path in paths:
        nb = read_notebook(path)
        for cell in nb["cells"]:
            recipe = cell.get("metadata", {}).get("hooklab", {}).get("recipe")
            if recipe:
                found.setdefault(recipe["id"], {})["libraries"] = recipe.get("libraries", [])
            if f"lang-{lang}" in lang_tags(cell) and (heading := HEADING.match(_source(cell))):
                line = strip_toc_skip(_source(cell).splitlines()[0]).removeprefix("## ").strip()
                found.setdefault(heading[1], {}).update(line=line, page=f"recipes-{path.stem}")
    return found


def _order(rid: str) -> tuple[str, int]:
    head, _sep, number = rid.rpartition("-")
    return head, int(number)


def _entry_line(rid: str, entry: dict[str, Any]) -> str:
    """A recipe's line in the index: its heading, linked, and the libraries it is about (what the filter also finds)."""
    named = [lib for lib in entry.get("libraries", []) if chapters.names(lib) not in chapters.UNIVERSAL]
    return f"- [{entry['line']}]({entry['page']}.md#recipe-{rid})" + (f" · {', '.join(named)}" if named else "")


def index_page(paths: list[Path], lang: str) -> str:
    """The page that lists every recipe: by chapter (tools/recipes/chapters.toml), each chapter's own recipes then those of
    other chapters that name its libraries; then the libraries, each with the chapters that hold its recipes; a box
    above filters the lists as the reader types."""
    text = TEXT[lang]
    found = entries(paths, lang)
    by_chapter: dict[str, list[str]] = {c.id: [] for c in chapters.load()}
    for rid in sorted(found, key=_order):
        by_chapter[chapters.of(rid).id].append(rid)
    out = [f"# {text['title']}", "", text["intro"], "", text["how"], "",
           f'<div class="hooklab-recipe-filter"><input type="search" placeholder="{text["filter"]}" '
           f'aria-label="{text["filter"]}"></div>', "", f"## {text['chapters']}", ""]
    out += [f"- [{c.title(lang)}](#chapter-{c.id}) ({len(by_chapter[c.id])})" for c in chapters.load()]
    out += ["", f"[{text['by_library']}](#recipes-by-library) · [{text['by_symptom']}](symptoms.md)", ""]
    for chapter in chapters.load():
        own = by_chapter[chapter.id]
        out += [f"(chapter-{chapter.id})=", "", f"## {chapter.title(lang)}", ""]
        out += [_entry_line(rid, found[rid]) for rid in own] + [""]
        elsewhere = [rid for rid in sorted(found, key=_order) if rid not in own
                     and chapter.libraries & {chapters.names(lib) for lib in found[rid].get("libraries", [])}]
        if elsewhere:
            out += [f"**{text['elsewhere']}**", ""]
            out += [_entry_line(rid, found[rid]) + f" · *{chapters.of(rid).title(lang)}*" for rid in elsewhere]
            out.append("")
    out += ["(recipes-by-library)=", "", f"## {text['by_library']}", "", text["library_note"], ""]
    libraries: dict[str, dict[str, Any]] = {}
    for rid, entry in found.items():
        for lib in entry.get("libraries", []):
            key = chapters.names(lib)
            if key in chapters.UNIVERSAL:
                continue
            seen = libraries.setdefault(key, {"name": lib, "count": 0, "chapters": {}})
            seen["count"] += 1
            here = chapters.of(rid)
            seen["chapters"][here.id] = seen["chapters"].get(here.id, 0) + 1
    order = {c.id: n for n, c in enumerate(chapters.load())}
    titles = {c.id: c.title(lang) for c in chapters.load()}
    for key in sorted(libraries, key=lambda k: (-libraries[k]["count"], k)):
        seen = libraries[key]
        held = sorted(seen["chapters"], key=lambda c: (-seen["chapters"][c], order[c]))
        out.append(f"- **{seen['name']}** ({seen['count']}){text['colon']}"
                   + " · ".join(f"[{titles[c]}](#chapter-{c}) ({seen['chapters'][c]})" for c in held))
    out.append("")
    return "\n".join(out)


def downloads(folder: Path = RECIPES) -> dict[str, Path]:
    """The recipe notebook behind each recipe page's download button: page name (``recipes-NN_chapter``) -> notebook.
    The site gives it as a standalone notebook in the page's language whose first code cell installs what it uses
    (tools/launch/copies.py: ``write_recipe_download``), not the page's MyST source.

    >>> downloads()["recipes-02_module_forward_hooks"].name
    '02_module_forward_hooks.ipynb'
    """
    return {f"recipes-{path.stem}": path for path in notebooks(folder)}


MOVED_TEXT = {"zh": ("这一页搬走了", "食谱现在按章排列（每章一个库或一种机制）。这一页原来的食谱在：", "English"),
              "en": ("This page has moved", "The recipes are now shelved by chapter (a library or a mechanism each). "
                                            "The recipes this page held are now at:", "中文")}


def moved_pages(folder: Path = RECIPES, lang: str = "en") -> dict[str, str]:
    """A small HTML page at each old recipe page's address (``recipes-NN_old.html``, recipes/moved.json), which the
    site copies as it is: it lists where each recipe it held is now, and takes the reader there at once when they
    all went to one chapter. Old links, anchors included, still lead to the recipe.

    >>> page = moved_pages(lang="en")["recipes-01_autograd_hooks.html"]
    >>> "recipes-01_tensor_and_node_hooks.html#recipe-tensor-hooks-01" in page
    True
    """
    path = folder / "moved.json"
    if not path.is_file():
        return {}
    moved = json.loads(path.read_text(encoding="utf-8"))
    held: dict[str, list[tuple[str, str]]] = {}
    for rid, where in moved["recipes"].items():
        held.setdefault(where["was"], []).append((rid, where["now"]))
    title, lead, other_name = MOVED_TEXT[lang]
    other = "en" if lang == "zh" else "zh"
    out = {}
    for old, chapters_now in moved["notebooks"].items():
        rows = "".join(f'<li><a href="recipes-{now}.html#recipe-{rid}">R{rid}</a> ({now})</li>'
                       for rid, now in sorted(held.get(old, []), key=lambda pair: _order(pair[0])))
        refresh = (f'<meta http-equiv="refresh" content="0; url=recipes-{chapters_now[0]}.html">'
                   if len(chapters_now) == 1 else "")
        out[f"recipes-{old}.html"] = (f'<!DOCTYPE html>\n<html lang="{lang}"><head><meta charset="utf-8">{refresh}'
                                      f"<title>{title}</title></head><body><h1>{title}</h1><p>{lead}</p>"
                                      f"<ul>{rows}</ul><p><a class=\"hooklab-language-link\" hreflang=\"{other}\" "
                                      f"href=\"../{other}/recipes-{old}.html\">{other_name}</a></p></body></html>\n")
    return out


def pages(folder: Path = RECIPES) -> dict[str, Callable[[Path, str, list[str]], str]]:
    """The site's recipe pages: ``recipes`` (the list), then ``recipes-NN_chapter`` for each recipe notebook; name -> a
    function of (root, language, notebook names), as tools/site/build.py's ``extra_pages`` takes them."""
    paths = notebooks(folder)
    if not paths:
        return {}
    found: dict[str, Callable[[Path, str, list[str]], str]] = {
        "recipes": lambda root, lang, names: index_page(paths, lang)}
    for path in paths:
        found[f"recipes-{path.stem}"] = lambda root, lang, names, path=path: area_page(path, lang)
    return found

