"""The website's own pages and the parts it adds to each notebook's page, as MyST Markdown: the landing page with its
map of the notebooks (tools/site/landing/, landing.toml), the language chooser, the index, the API page (grouped as
api_groups.toml), each notebook's "further reading" list (further_reading.toml), the anchors of sections
(:func:`heading_id`, which Sphinx's conf.py uses too) and links into the symptom index's targets. Pure functions of
the committed files; :mod:`tools.site.build` assembles them with the notebooks and runs Sphinx.
"""
from __future__ import annotations

import ast
import html
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "tools" / "site"
LANGS = ("zh", "en")
LABELS = {"zh": "中文", "en": "English"}
FURTHER_READING = CONF / "further_reading.toml"
LANDING = CONF / "landing"          # the landing page of each language: zh.md, en.md
LANDING_LINES = CONF / "landing.toml"  # one line per notebook for its map
API_GROUPS = CONF / "api_groups.toml"
TEXT = {
    "zh": {"notebooks": "笔记本", "api": "API 参考", "further": "延伸阅读",
           "further_intro": "文档与源代码（英文页面）：",
           "api_intro": "``hooklab`` 的全部公开名称（``hooklab.__all__``），按下面包说明里的分组排列。"
                        "说明取自代码里的文档字符串（英文），其中的例子都作为测试运行过。",
           "other": "其他", "choose": "选择语言"},
    "en": {"notebooks": "The notebooks", "api": "API reference", "further": "Further reading",
           "further_intro": "Documentation and sources:",
           "api_intro": "Every public name of ``hooklab`` (``hooklab.__all__``), grouped as the package's "
                        "description below groups the tools. The text is the docstrings; their examples run as "
                        "tests.",
           "other": "Other", "choose": "Choose a language"},
}


class SiteError(Exception):
    """A problem with the site's inputs (pyproject.toml, the data tables); the message says what to fix."""


def further_reading(path: Path = FURTHER_READING) -> dict[str, list[tuple[str, str]]]:
    """The further-reading table: notebook name -> [(title, url), ...]."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    table = {}
    for name, entry in data.items():
        links = entry.get("links") if isinstance(entry, dict) else None
        if not isinstance(links, list) or not all(isinstance(link, list) and len(link) == 2 and
                                                  all(isinstance(s, str) for s in link) for link in links):
            raise SiteError(f"{path}: [{name}] needs links = [[title, url], ...]")
        for title, url in links:
            if not url.startswith("https://"):
                raise SiteError(f"{path}: [{name}] {title!r}: the URL should start with https://, got {url!r}")
        table[name] = [(title, url) for title, url in links]
    return table


def api_groups(path: Path = API_GROUPS) -> list[dict[str, Any]]:
    return tomllib.loads(path.read_text(encoding="utf-8"))["group"]


def public_names(root: Path = ROOT) -> list[str]:
    """``hooklab.__all__``, read from the source (without importing torch)."""
    tree = ast.parse((root / "hooklab" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise SiteError(f"{root / 'hooklab' / '__init__.py'} has no __all__")


def glossary_terms(nb: dict[str, Any]) -> list[str]:
    """The Chinese terms of notebook 00's glossary table (the column 中文), each a word of two or more Han
    characters (tests/tools/test_site.py measures the Chinese search on them)."""
    terms: list[str] = []
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] != "markdown" or "| English | 中文 |" not in source:
            continue
        for line in source.split("\n"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) != 2 or cells[1] in ("中文", "---"):
                continue
            for term in re.split(r"\s*·\s*", re.sub(r"（.*?）|\(.*?\)", "", cells[1])):
                if re.fullmatch(r"[\u4e00-\u9fff]{2,}", term) and term not in terms:
                    terms.append(term)
    return terms


def heading_id(title: str) -> str:
    """A section's anchor from its heading's text: lower case, runs of anything but letters and digits (Han
    characters are letters) as one '-', the section number left out (a section added before it renumbers it, and
    the anchor stays). docutils makes the anchor from the ASCII letters only, so a Chinese heading got a
    positional one (``#id5``) that every heading added before it moved.

    >>> heading_id("3. 保存的张量：`pack_hook` 与 unpack"), heading_id("1.2 Gradient accumulation"), heading_id("…")
    ('保存的张量-pack_hook-与-unpack', 'gradient-accumulation', 'section')
    """
    text = re.sub(r"^\s*\d+(?:\.\d+)*\.?\s+", "", title)
    return re.sub(r"[^\w]+", "-", text.lower()).strip("-") or "section"
_CELL_LINK = re.compile(r"\]\((\d\d_\w+\.ipynb)#cell-id=([\w-]+)\)")


def cell_links_to_symptom_targets(cell: dict[str, Any], by_cell: dict[tuple[str, str], str]) -> dict[str, Any]:
    """A markdown cell whose links to a cell of a notebook (JupyterLab's ``NN_x.ipynb#cell-id=...``, as notebook 00's
    symptom index writes them) point to the site's target before that symptom cell instead (``#symptom-<id>``,
    tools/messages/symptoms.py's anchors); a cell that is no symptom's: to the notebook's page.

    >>> cell = {"cell_type": "markdown", "source": "[a](01_x.ipynb#cell-id=c1) [b](02_y.ipynb#cell-id=zz)"}
    >>> cell_links_to_symptom_targets(cell, {("01_x.ipynb", "c1"): "boom"})["source"]
    '[a](01_x.ipynb#symptom-boom) [b](02_y.ipynb)'
    """
    if cell.get("cell_type") != "markdown":
        return cell
    text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    if "#cell-id=" not in text:
        return cell

    def target(match: re.Match[str]) -> str:
        symptom = by_cell.get((match[1], match[2]))
        return f"]({match[1]}#symptom-{symptom})" if symptom else f"]({match[1]})"
    return {**cell, "source": _CELL_LINK.sub(target, text)}


def further_reading_cell(links: list[tuple[str, str]], lang: str) -> dict[str, Any]:
    """The markdown cell appended to a notebook's page: a heading and a list of links."""
    items = "\n".join(f"- [{title}]({url})" for title, url in links)
    source = f"## {TEXT[lang]['further']}\n\n{TEXT[lang]['further_intro']}\n\n{items}\n"
    return {"cell_type": "markdown", "id": "hooklab-further-reading",
            "metadata": {"tags": [f"lang-{lang}", "hooklab-further-reading"]}, "source": source}
_TITLE_LINE = re.compile(r"^#\s+(\d+)\s*·\s*(.+?)\s+/\s+(.+?)\s*$")  # "# 01 · 张量钩子 / Tensor hooks"
_SUBTITLE_LINE = re.compile(r"^\*\*(.+?)\s+·\s+(.+?)\*\*\s*$")       # "**中文 · English**"
_HOOK_CODE = re.compile(r"register_\w*hook|saved_tensors_hooks|hooklab\.\w+\(|checkpoint\(|\.check\(")


def _text(cell: dict[str, Any]) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def notebook_title(nb: dict[str, Any], lang: str) -> tuple[str, str]:
    """(number, title in ``lang``) from a notebook's bilingual title cell ("# 01 · 张量钩子 / Tensor hooks")."""
    first = _text(nb["cells"][0]).split("\n")[0]
    match = _TITLE_LINE.match(first)
    if not match:
        raise SiteError(f"the first cell should start with a title line '# NN · 中文 / English', got {first!r}")
    return match[1], match[2] if lang == "zh" else match[3]


def notebook_line(nb: dict[str, Any], name: str, lang: str, lines: dict[str, Any]) -> str:
    """The notebook's line on the landing page: tools/site/landing.toml's, else its title cell's subtitle, else the
    first point of its "what you will learn" (cut at the first clause): a new notebook appears with a line."""
    entry = lines.get(name)
    if isinstance(entry, dict) and isinstance(entry.get(lang), str):
        return entry[lang]
    for line in _text(nb["cells"][0]).split("\n"):
        if match := _SUBTITLE_LINE.match(line.strip()):
            return match[1] if lang == "zh" else match[2]
    heading = "本课你将学到" if lang == "zh" else "What you will learn"
    for cell in nb["cells"][1:4]:
        text = _text(cell)
        if f"lang-{lang}" in cell.get("metadata", {}).get("tags", []) and heading in text:
            body = [ln.strip().lstrip("-*0123456789. ") for ln in text.split(heading, 1)[1].split("\n")[1:]]
            first = next((ln for ln in body if ln), "")
            return re.split(r"(?<=[。；;])|(?<=\.)\s", first.replace("**", ""), maxsplit=1)[0].rstrip("；;")
    return ""


def notebook_picture(nb: dict[str, Any], number: str) -> tuple[str, bytes]:
    """(file name, bytes) of the notebook's picture on the landing page: its first figure (PNG), or, for a notebook
    without one, a card drawn from its code: the number and the first lines that register or use a hook."""
    import base64

    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            data = output.get("data", {}).get("image/png")
            if data:
                return f"{number}.png", base64.b64decode("".join(data) if isinstance(data, list) else data)
    code = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        for line in _text(cell).split("\n"):
            line = line.strip()
            if _HOOK_CODE.search(line) and not line.startswith("#") and line not in code:
                code.append(line if len(line) <= 44 else line[:43] + "…")
        if len(code) >= 4:
            break
    hue = (int(number) * 47) % 360
    rows = "".join(f'<text x="20" y="{104 + 22 * i}" class="c">{html.escape(line)}</text>'
                   for i, line in enumerate(code[:4]))
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 400 200" width="400" height="200">'
           f'<style>.c{{font:14px monospace;fill:#1d2430}}.n{{font:bold 56px sans-serif;fill:hsl({hue},55%,38%)}}'
           f'</style><rect width="400" height="200" rx="10" fill="hsl({hue},45%,94%)"/>'
           f'<text x="20" y="66" class="n">{number}</text>{rows}</svg>')
    return f"{number}.svg", svg.encode("utf-8")


def notebook_map(cards: list[dict[str, str]]) -> str:
    """The landing page's map of the notebooks: a card per notebook (picture, number and title, one line), in
    raw HTML (the grid is in _static/hooklab-site.css)."""
    items = "\n".join(
        f'<a class="hooklab-card" href="{c["name"]}.html"><img src="{c["picture"]}" alt="" loading="lazy">'
        f'<span class="hooklab-card-title">{c["number"]} · {html.escape(c["title"])}</span>'
        f'<span class="hooklab-card-line">{html.escape(c["line"])}</span></a>' for c in cards)
    return f'<div class="hooklab-map">\n{items}\n</div>'


_CJK = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"  # Han, CJK punctuation, full-width forms
_CJK_BREAK = re.compile(f"(?<=[{_CJK}])\n[ \t]*(?=[{_CJK}])")


def join_cjk_lines(markdown: str) -> str:
    r"""``markdown`` with every line break between two Chinese characters (or full-width punctuation) removed, outside
    fenced code: a browser, Sphinx and PyPI's renderer show such a break as a space, which Chinese text does not have.

    >>> join_cjk_lines("钩子在\n  前向时运行。\nEnglish\n继续\n```\n代码\n里\n```")
    '钩子在前向时运行。\nEnglish\n继续\n```\n代码\n里\n```'
    """
    parts = re.split(r"(^```.*?^```[ \t]*$)", markdown, flags=re.M | re.S)
    return "".join(part if k % 2 else _CJK_BREAK.sub("", part) for k, part in enumerate(parts))


def landing_page(template: str, cards: list[dict[str, str]], *, repository: str | None, launch: bool,
                 torch: str, lang: str) -> str:
    """tools/site/landing/<lang>.md filled in: ``{{notebook_map}}``, ``{{notebook_count}}``, ``{{torch}}``,
    ``{{repository}}`` / ``{{repository_or_placeholder}}``; a block between ``<!-- if repository -->`` (or
    ``<!-- if launch -->``) and ``<!-- end -->`` is kept only with a repository URL (with launch copies)."""
    keep = {"repository": bool(repository), "launch": launch}

    def block(match: re.Match[str]) -> str:
        return match[2] if keep[match[1]] else ""
    text = re.sub(r"<!-- if (repository|launch) -->\n(.*?)<!-- end -->\n", block, template, flags=re.S)
    placeholder = "<仓库地址>" if lang == "zh" else "<repository URL>"
    values = {"notebook_map": notebook_map(cards), "notebook_count": str(len(cards)), "torch": torch,
              "repository": repository or "", "repository_or_placeholder": repository or placeholder}
    text = re.sub(r"\{\{(\w+)\}\}", lambda m: values.get(m[1], m[0]), text)
    if "{{" in text or "<!-- if" in text:
        raise SiteError(f"{LANDING / (lang + '.md')}: an unknown {{{{placeholder}}}} or an unclosed block is left")
    return join_cjk_lines(text)


def nested_pages(pages: Iterable[str]) -> dict[str, list[str]]:
    """The pages the sidebar shows under another one: a page named ``<parent>-<part>`` (``profiles-captum``,
    ``recipes-17_transformers``) whose parent page is among ``pages``, by parent, in their order. The parent's page
    lists them in a hidden table of contents (:func:`child_contents`); the landing page lists only the others."""
    names = list(pages)
    found: dict[str, list[str]] = {}
    for name in names:
        parent = name.split("-", 1)[0]
        if parent != name and parent in names:
            found.setdefault(parent, []).append(name)
    return found


def child_contents(children: list[str]) -> str:
    """The hidden table of contents a parent page ends with, which puts ``children`` under it in the sidebar."""
    return "\n".join(["", "```{toctree}", ":hidden:", ":maxdepth: 1", "", *children, "```", ""]) if children else ""


def index_page(landing: str, names: list[str], lang: str, *, api: bool = True, extra: Iterable[str] = ()) -> str:
    """The landing page (index.md): the learners' page, then hidden tables of contents that fill the sidebar with
    the notebooks, the ``extra`` pages (the symptom index, the recipes, ...: not those :func:`nested_pages` puts
    under another page) and the API page."""
    extra = list(extra)
    nested = {child for children in nested_pages(extra).values() for child in children}
    pages = [*(name for name in extra if name not in nested), *(["api"] if api else [])]
    toctree = ["", "```{toctree}", ":hidden:", ":maxdepth: 1", f":caption: {TEXT[lang]['notebooks']}", "",
               *names, "```", "",
               *(["```{toctree}", ":hidden:", ":maxdepth: 1", "", *pages, "```", ""] if pages else [])]
    return landing.rstrip("\n") + "\n" + "\n".join(toctree)


def api_page(lang: str, names: list[str], groups: list[dict[str, Any]], classes: set[str] | None = None) -> str:
    """api.rst: the package's description, then per group an autosummary table and the autodoc entries.
    ``classes``: the names that are classes (documented with their members; ``capture`` and ``intervene`` are
    classes too); without it, the names that start with a capital letter."""
    title = TEXT[lang]["api"]
    out = [title, "=" * (len(title.encode("utf-8"))), "", TEXT[lang]["api_intro"], "",
           ".. automodule:: hooklab", "   :no-members:", "", ".. currentmodule:: hooklab", ""]
    listed: set[str] = set()
    sections = []
    for group in groups:
        members = [n for n in group["names"] if n in names]
        listed.update(members)
        if members:
            sections.append((group[lang], members))
    rest = [n for n in names if n not in listed]
    if rest:
        sections.append((TEXT[lang]["other"], rest))
    for heading, members in sections:
        out += [heading, "-" * len(heading.encode("utf-8")), "", ".. autosummary::", "   :nosignatures:", "",
                *[f"   {n}" for n in members], ""]
        for name in members:
            is_class = name in classes if classes is not None else name[:1].isupper()
            kind = "autoclass" if is_class else "autofunction"
            out += [f".. {kind}:: {name}"] + (["   :members:"] if kind == "autoclass" else []) + [""]
    return "\n".join(out)


def chooser_page(langs: list[str]) -> str:
    """build/site/index.html: a choice between the languages' sites (no script)."""
    links = "\n".join(f'  <li><a class="hooklab-choose" hreflang="{lang}" lang="{lang}" href="{lang}/index.html">'
                      f"{html.escape(LABELS[lang])}</a></li>" for lang in langs)
    return f"""<!DOCTYPE html>
<html lang="zh-CN">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>hooklab · PyTorch 钩子动手课 / a hands-on course on PyTorch hooks</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 36rem; margin: 3rem auto; padding: 0 1rem; line-height: 1.5; }}
ul {{ list-style: none; padding: 0; display: flex; gap: 1rem; flex-wrap: wrap; }}
a.hooklab-choose {{ display: block; padding: 0.8rem 1.6rem; border: 1px solid #0a7d91; border-radius: 6px;
  color: #0a7d91; text-decoration: none; font-size: 1.2rem; }}
a.hooklab-choose:hover {{ background: #0a7d91; color: #fff; }}
</style>
</head>
<body>
<h1>hooklab</h1>
<p>PyTorch 钩子动手课 · a hands-on course on PyTorch hooks</p>
<p>{TEXT["zh"]["choose"]} / {TEXT["en"]["choose"]}:</p>
<ul>
{links}
</ul>
</body>
</html>
"""
