"""`./course site`: the course as a static website, one site per language (open build/site/index.html).

    ./course site                          # build/site/zh/ and build/site/en/, and build/site/index.html
    ./course site --lang en --out /tmp/s   # one language only
    ./course site --repository-url URL     # the repository's URL (repository, edit, issue and launch buttons)
    ./course site --launch-branch launch   # the launch buttons open the copies on that branch (tools/launch/copies.py)

Built offline by Sphinx + myst-nb from the committed notebooks, outputs and figures as committed (nothing is
executed). Each language's site is built from the one-language notebooks that ``hooklab.course export`` writes, so
its pages, table of contents and Sphinx's own strings are in that language; every page links to the same page in
the other language (Chinese section anchors are the heading's text: :func:`heading_id`).
Each notebook page ends with a "further reading" list (tools/site/further_reading.toml) and has the theme's download
(.ipynb of that language, starting with the cell that installs hooklab where it is missing: tools/launch/copies.py) and
copy buttons, and a menu with its slide deck and handout (`./course slides` / `./course handout`, built into
<lang>/slides/ and <lang>/handouts/ beside the Sphinx builds: :data:`CLASSROOM`); math is rendered by a MathJax 3
copy inside the site; an API page is generated from hooklab's docstrings (grouped as in tools/site/api_groups.toml);
the landing page is written for learners (tools/site/landing/<lang>.md, with a map of the notebooks present).

Pages: the landing page, the notebooks, then :data:`EXTRA_PAGES` (page name -> a function that returns the page's
MyST Markdown: the symptom index, the hook matrix; add a page there and the sidebar, the language link and the search
take it), in a full build the hook atlas's pages (one per zoo: :func:`extra_pages`), then the API page.

Search: after Sphinx, Pagefind's extended binary (the ``site`` group's ``pagefind[extended]``, from the lock) indexes
each language's pages into <lang>/pagefind/ (:func:`index_search`; it segments Chinese into words); the search page
(tools/site/_templates/search.html) asks it through tools/site/_static/hooklab-search.js, which finds Chinese words
typed together, a pasted error message (the symptom row and the cell that explain it) and links into pages.

The repository's URL comes from
``--repository-url``, else the environment variable HOOKLAB_REPOSITORY_URL (the publishing workflow sets it from
the Actions context), else ``[project.urls]`` Repository (or Source) in pyproject.toml: with it the theme shows the
repository, edit, issue and launch buttons, without it none of them. The sources are assembled in
build/site-src/<lang>/.
"""
from __future__ import annotations

import argparse
import ast
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import tomllib

from ..hook_matrix import page as hook_matrix_page  # the hook behaviour matrix page and its cell targets
from ..launch import copies as launch

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
# The interface strings that the Chinese catalogues of Sphinx and the themes lack, or give in Taiwanese wording
# (catalogue -> English -> Chinese), written as .po files that tools/site/conf.py puts before the built-in ones.
# The search page's script strings are in tools/site/_static/hooklab-zh.js.
ZH_MESSAGES = {
    "sphinx": {"Link to this heading": "链接到本节标题", "Color mode": "颜色模式",
               "Toggle primary sidebar": "显示或隐藏目录栏", "Toggle secondary sidebar": "显示或隐藏本页目录", "Light": "浅色", "Dark": "深色",
               "System Settings": "跟随系统设置", "Back to top": "回到顶部", "Skip to main content": "跳到正文",
               "On this page": "本页内容", "Search": "搜索", "Search the docs ...": "搜索本课程……",
               "Contents": "目录", "Clear search": "清除搜索"},
    "booktheme": {"Print to PDF": "打印为 PDF", "Launch on": "启动于", "Launch interactive content": "在线运行",
                  "Download this page": "下载本页", "Source repositories": "源代码仓库",
                  "Source repository": "源代码仓库", "Open an issue": "报告问题", "open issue": "报告问题",
                  "Edit this page": "编辑本页", "suggest edit": "建议修改", "Suggest edit": "建议修改", "repository": "仓库",
                  "Repository": "仓库", "Open issue": "报告问题", "Show source": "查看源代码",
                  "Download notebook file": "下载笔记本文件", "Download source file": "下载源文件",
                  "Fullscreen mode": "全屏", "Live Code": "在线运行代码"},
}
ENV_REPOSITORY = "HOOKLAB_REPOSITORY_URL"
ENV_LAUNCH_BRANCH = "HOOKLAB_LAUNCH_BRANCH"
LICENCE_URLS = {"code": "https://opensource.org/license/mit",  # when the LICENSE files are missing
                "prose": "https://creativecommons.org/licenses/by/4.0/"}


class SiteError(Exception):
    """A problem with the site's inputs (pyproject.toml, the data tables); the message says what to fix."""


def notebooks(root: Path = ROOT) -> list[Path]:
    return sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


# --- settings -----------------------------------------------------------------------------------------------

def repository_url(pyproject: Path) -> str | None:
    """The repository's public URL: ``[project.urls]`` Repository, else Source, in ``pyproject``; None when
    neither is set (then no page shows a repository, edit or launch button)."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SiteError(f"cannot read [project.urls] from {pyproject}: {exc}") from None
    urls = {str(k).lower(): v for k, v in data.get("project", {}).get("urls", {}).items()}
    for key in ("repository", "source"):
        if key in urls:
            return check_url(urls[key], f"[project.urls] {key.capitalize()} in {pyproject}")
    return None


def configured_repository(pyproject: Path, environ: dict[str, str] | None = None) -> str | None:
    """The repository's URL for the site: ``HOOKLAB_REPOSITORY_URL`` when set (the publishing workflow sets it to
    ``github.server_url/github.repository``), else :func:`repository_url` of ``pyproject``."""
    value = (os.environ if environ is None else environ).get(ENV_REPOSITORY, "").strip()
    return check_url(value, f"${ENV_REPOSITORY}") if value else repository_url(pyproject)


def check_url(url: Any, where: str) -> str:
    if not isinstance(url, str) or not re.fullmatch(r"https://[^\s/]+/[^\s/]+/[^\s/]+/?", url):
        raise SiteError(f"{where} should be a repository's https URL such as https://github.com/OWNER/REPO, "
                        f"got {url!r}")
    return url.rstrip("/")


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


# --- the pages ----------------------------------------------------------------------------------------------

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
    return text


def index_page(landing: str, names: list[str], lang: str, *, api: bool = True, extra: Iterable[str] = ()) -> str:
    """The landing page (index.md): the learners' page, then hidden tables of contents that fill the sidebar with
    the notebooks, the ``extra`` pages (the symptom index) and the API page."""
    pages = [*extra, *(["api"] if api else [])]
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


def assemble(src: Path, lang: str, *, root: Path = ROOT, repository: str | None = None,
             branch: str = "main", only: list[str] | None = None, commit: str | None = None,
             launch_branch: str | None = None) -> list[str]:
    """Fill ``src`` with the sources of ``lang``'s site: the one-language notebooks (each a launch copy, with the
    cell that installs hooklab from ``repository`` at ``commit`` first, and its further reading appended), index.md,
    api.rst and the licence files; return the notebook page names in order.
    ``only`` (notebook names): those notebooks, and neither the API page (whose autodoc imports hooklab and torch)
    nor the atlas pages of :func:`extra_pages`."""
    from hooklab.course.export import export_notebook
    from hooklab.course.notebook import read_notebook

    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    from ..messages import (
        symptoms,  # tools/messages/symptoms.py: the symptom index page, and the targets its links point to
    )

    reading = further_reading()
    chosen = [path for path in notebooks(root) if only is None or path.stem in only]
    for path in chosen:
        if path.stem not in reading:
            raise SiteError(f"{FURTHER_READING} has no [{path.stem}] table: add the notebook's further reading")
    hooklab, pinned = launch.requirement(repository, commit), launch.pins(root / "pyproject.toml")
    found = symptoms.collect(root)[0]
    by_cell = {(s.notebook, s.cell_id): s.id for s in found}
    matrix = json.loads((root / "docs" / "hook_matrix.json").read_text(encoding="utf-8"))
    cited = hook_matrix_page.cited_cells(matrix)
    names = []
    for path in chosen:
        nb = symptoms.add_site_anchors(export_notebook(read_notebook(path), lang), notebook=path.name)
        nb = hook_matrix_page.add_site_anchors(nb, path.name, cited)
        nb["cells"] = [cell_links_to_symptom_targets(cell, by_cell) for cell in nb["cells"]]
        nb = launch.launch_copy(nb, lang, hooklab, pinned)
        nb["cells"].append(further_reading_cell(reading[path.stem], lang))
        (src / path.name).write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        names.append(path.stem)
    pages = extra_pages(root, full=only is None)  # a quick build (tests) leaves the atlas out, as the API page
    for page, write in pages.items():
        (src / f"{page}.md").write_text(write(root, lang, names), encoding="utf-8")
    extra = src.parent / f"_extra-{lang}"
    if extra.exists():
        shutil.rmtree(extra)
    (extra / "landing").mkdir(parents=True)
    lines, cards = tomllib.loads(LANDING_LINES.read_text(encoding="utf-8")), []
    for name in names:
        nb = read_notebook(root / "notebooks" / f"{name}.ipynb")
        number, title = notebook_title(nb, lang)
        picture, data = notebook_picture(nb, number)
        (extra / "landing" / picture).write_bytes(data)
        cards.append({"name": name, "number": number, "title": title, "picture": f"landing/{picture}",
                      "line": notebook_line(nb, name, lang, lines)})
    torch = next(p.split("==")[1] for p in launch.pins(root / "pyproject.toml") if p.startswith("torch=="))
    landing = landing_page((LANDING / f"{lang}.md").read_text(encoding="utf-8"), cards, repository=repository,
                           launch=bool(repository and launch_branch), torch=torch, lang=lang)
    (src / "index.md").write_text(index_page(landing, names, lang, api=only is None, extra=pages), encoding="utf-8")
    if only is None:
        import inspect

        import hooklab  # imported already (by the export); the API page's autodoc imports it too

        public = public_names(root)
        classes = {n for n in public if inspect.isclass(getattr(hooklab, n, None))}
        (src / "api.rst").write_text(api_page(lang, public, api_groups(), classes), encoding="utf-8")
    for name in ("LICENSE", "LICENSE-prose.md"):
        if (root / name).is_file():
            shutil.copy2(root / name, extra / (Path(name).stem + ".txt"))
    return names


def symptoms_page(root: Path, lang: str, names: list[str]) -> str:
    """The symptom index (tools/messages/symptoms.py) of the notebooks ``names``."""
    from ..messages import symptoms

    return symptoms.site_page([s for s in symptoms.collect(root)[0] if Path(s.notebook).stem in names], lang,
                              built={f"{name}.ipynb" for name in names})


def hook_matrix_site_page(root: Path, lang: str, names: list[str]) -> str:
    """The hook behaviour matrix (docs/hook_matrix.json, tools/hook_matrix/page.py), linking into the notebooks
    ``names``."""
    matrix = json.loads((root / "docs" / "hook_matrix.json").read_text(encoding="utf-8"))
    return hook_matrix_page.page(matrix, lang, built=set(names))


# The site's pages besides the landing page, the notebooks and the API page, in the sidebar's order after the
# notebooks: page name -> a function (repository root, language "zh" / "en", the notebook page names) that returns
# the page in MyST Markdown. Add a page here; the sidebar, the language link, the search index and the tests
# (tests/tools/test_site.py) take every entry. A link to a notebook is [text](NN_name.ipynb) or
# [text](NN_name.ipynb#anchor), to another page [text](name.md).
EXTRA_PAGES: dict[str, Callable[[Path, str, list[str]], str]] = {"symptoms": symptoms_page,
                                                                 "hook_matrix": hook_matrix_site_page}


def write_catalogs(folder: Path, messages: dict[str, dict[str, str]] = ZH_MESSAGES) -> Path:
    """``folder``/zh_CN/LC_MESSAGES/<catalogue>.mo for each catalogue of ``messages`` (compiled by Babel, which
    Sphinx uses for its own catalogues); returns ``folder``, the locale directory conf.py gives Sphinx."""
    from babel.messages.catalog import Catalog
    from babel.messages.mofile import write_mo

    target = folder / "zh_CN" / "LC_MESSAGES"
    target.mkdir(parents=True, exist_ok=True)
    for domain, table in messages.items():
        catalog = Catalog(locale="zh_CN", domain=domain)
        for english, chinese in table.items():
            catalog.add(english, chinese)
        with open(target / f"{domain}.mo", "wb") as mo:
            write_mo(mo, catalog)
    return folder


def settings(src: Path, lang: str, names: list[str], *, other: str | None, repository: str | None,
             branch: str, launch_branch: str | None = None, locale_dir: Path | None = None) -> dict[str, Any]:
    """What tools/site/conf.py reads (through the file named by HOOKLAB_SITE)."""
    extra = src.parent / f"_extra-{lang}"
    licence = {"code": "LICENSE.txt" if (extra / "LICENSE.txt").is_file() else LICENCE_URLS["code"],
               "prose": "LICENSE-prose.txt" if (extra / "LICENSE-prose.txt").is_file() else LICENCE_URLS["prose"]}
    return {"lang": lang, "src": str(src), "notebooks": names, "repository_url": repository,
            "repository_branch": branch, "extra": str(extra) if any(extra.iterdir()) else None,
            "launch_branch": launch_branch if repository else None,
            "licence_links": licence, "locale_dir": str(locale_dir) if locale_dir else None,
            "other": {"lang": other, "label": LABELS[other], "pages": site_pages(names)}
            if other else None}


def build(out: Path, *, langs: tuple[str, ...] = LANGS, root: Path = ROOT, repository: str | None = None,
          branch: str = "main", launch_branch: str | None = None, commit: str | None = None,
          only: list[str] | None = None, quiet: bool = True, timeout: float = 900) -> dict[str, Any]:
    """Build the sites of ``langs`` into ``out/<lang>/`` (at the same time) and ``out/index.html``; ``only``
    (notebook names) leaves out the other notebooks and the API page (a quicker build, for tests).
    ``launch_branch``: the branch holding the launch copies (tools/launch/copies.py) that the launch buttons open;
    ``commit``: the commit the download copies install hooklab from (default: the checkout's).

    Returns the notebook page names, each language's Sphinx output (warnings) and the seconds it took.
    Raises :class:`SiteError` when a build fails (with Sphinx's output)."""
    started = time.monotonic()
    src_root = out.parent / (out.name + "-src")
    src_root.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    if commit is None and repository:
        commit = launch.current_commit(root)
    locale_dir = write_catalogs(src_root / "locale")
    procs = {}
    names: list[str] = []
    try:
        for lang in langs:
            src = src_root / lang
            names = assemble(src, lang, root=root, repository=repository, branch=branch, only=only, commit=commit,
                             launch_branch=launch_branch)
            others = [o for o in LANGS if o != lang and (o in langs or (out / o / "index.html").is_file())]
            config = settings(src, lang, names, other=others[0] if others else None, repository=repository,
                              branch=branch, launch_branch=launch_branch,
                              locale_dir=locale_dir if lang == "zh" else None)
            config_file = src_root / f"settings-{lang}.json"
            config_file.write_text(json.dumps(config, ensure_ascii=False, indent=1), encoding="utf-8")
            # Sphinx writes into a staging folder, moved to out/<lang> when it succeeded: myst-nb puts its
            # jupyter_execute/ folder next to the output folder, which must not be out/ (shared by the languages)
            staging = src_root / f"html-{lang}"
            if staging.exists():
                shutil.rmtree(staging)
            command = [sys.executable, "-m", "sphinx", "-b", "html", "-c", str(CONF), "-E", "-j", "1",
                       str(src), str(staging / "html")]
            if quiet:
                command.insert(3, "-q")
            env = {**os.environ, "HOOKLAB_SITE": str(config_file), "PYTHONPATH": str(root)}
            procs[lang] = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           text=True, cwd=root)
        # the slide decks and handouts of the notebooks, both languages, beside the Sphinx builds
        classroom = src_root / "classroom"
        if classroom.exists():
            shutil.rmtree(classroom)
        numbers = [name[:2] for name in names]
        for tool in CLASSROOM:
            command = [sys.executable, "-m", f"tools.classroom.{tool}", *numbers, *[a for lang in langs for a in ("--lang", lang)],
                       "--out", str(classroom / tool)]
            procs[tool] = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(root)}, cwd=root,
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        output = {}
        for lang, proc in procs.items():
            try:
                text, _ = proc.communicate(timeout=max(1.0, timeout - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                raise SiteError(f"sphinx-build of the {lang} site did not finish within {timeout:.0f} s") from None
            output[lang] = text
            if proc.returncode != 0:
                what = f"./course {lang}" if lang in CLASSROOM else f"sphinx-build of the {lang} site"
                raise SiteError(f"{what} failed (exit {proc.returncode}):\n{text[-4000:]}")
        for lang in langs:
            if (out / lang).exists():
                shutil.rmtree(out / lang)
            shutil.move(src_root / f"html-{lang}" / "html", out / lang)
            shutil.rmtree(src_root / f"html-{lang}")  # what is left: myst-nb's jupyter_execute/
            (out / lang / "searchindex.js").unlink(missing_ok=True)  # Sphinx's index: the search asks Pagefind's
            for tool, folder in CLASSROOM.items():  # <lang>/slides/<lang>/NN_x.html, its _vendor/ beside
                target = out / lang / folder
                shutil.copytree(classroom / tool / lang, target / lang)
                shutil.copytree(classroom / tool / "_vendor", target / "_vendor")
            index_search(out / lang, pages=site_pages(names, api=only is None),
                         timeout=max(30.0, timeout - (time.monotonic() - started)))
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    built = [lang for lang in LANGS if (out / lang / "index.html").is_file()]
    (out / "index.html").write_text(chooser_page(built), encoding="utf-8")
    output = {lang: text for lang, text in output.items() if lang not in CLASSROOM}
    return {"names": names, "output": output, "seconds": time.monotonic() - started}


# The classroom files built into each language's site, linked from each notebook's page (conf.py): tool -> folder.
# `./course slides` / `./course handout` (tools/classroom/slides.py, tools/classroom/handout.py) write them, with reveal.js and MathJax
# in a _vendor/ folder beside: <lang>/slides/<lang>/NN_x.html, <lang>/handouts/<lang>/NN_x.html.
CLASSROOM = {"slides": "slides", "handout": "handouts"}
SEARCH_ROOT = "article.bd-article"   # what Pagefind indexes of a page: the article (not the sidebars and buttons)
SEARCH_SKIP = "a.headerlink, .hooklab-language-link, .copybtn"  # in the article, not its text


def extra_pages(root: Path = ROOT, *, full: bool = True) -> dict[str, Callable[[Path, str, list[str]], str]]:
    """:data:`EXTRA_PAGES`, then, in a ``full`` build, one page per zoo of the hook atlas (``atlas-<zoo>``, from
    hooklab/course/assets/atlas/ by tools/atlas/pages.py), which a quick build leaves out as it leaves out the API page."""
    if not full:
        return dict(EXTRA_PAGES)
    from ..atlas import pages as atlas_pages
    return {**EXTRA_PAGES, **atlas_pages.pages(root / "hooklab" / "course" / "assets" / "atlas")}


def site_pages(names: list[str], *, api: bool = True, root: Path = ROOT) -> list[str]:
    """Every page of a language's site, in order: the landing page, the notebooks, then :func:`extra_pages` (the
    atlas pages and the API page only in a full build, ``api``)."""
    return ["index", *names, *extra_pages(root, full=api), *(["api"] if api else [])]


def index_search(folder: Path, *, pages: list[str], timeout: float = 300) -> None:
    """Write Pagefind's search index of the built site ``folder`` into ``folder``/pagefind/ (the search page's
    _static/hooklab-search.js reads it): the article of each of ``pages``, in the language of the site's
    ``<html lang>``, by Pagefind's extended binary (installed from the lock: the ``site`` group's
    ``pagefind[extended]``), which segments Chinese into words."""
    try:
        from pagefind_bin_extended import get_executable
    except ImportError:
        raise SiteError("the site's search needs Pagefind's extended binary (the package pagefind-bin-extended, "
                        "in the site group of pyproject.toml): run ./course site, which installs it") from None
    command = [str(get_executable()), "--site", str(folder), "--root-selector", SEARCH_ROOT,
               "--exclude-selectors", SEARCH_SKIP, "--glob", "{" + ",".join(pages) + "}.html", "--quiet"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SiteError(f"Pagefind did not index {folder} within {timeout:.0f} s") from None
    if done.returncode != 0 or not (folder / "pagefind" / "pagefind.js").is_file():
        raise SiteError(f"Pagefind could not index {folder} (exit {done.returncode}):\n"
                        f"{(done.stdout + done.stderr)[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./course site", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "build" / "site"), help="output folder (default: build/site)")
    parser.add_argument("--lang", choices=LANGS, action="append",
                        help="build only this language's site (repeatable; default: both)")
    parser.add_argument("--repository-url", metavar="URL",
                        help=f"the repository's URL (default: ${ENV_REPOSITORY}, else [project.urls] Repository "
                             "in pyproject.toml); shows the repository, edit, issue and launch buttons")
    parser.add_argument("--launch-branch", metavar="BRANCH", default=os.environ.get(ENV_LAUNCH_BRANCH) or None,
                        help=f"the branch with the launch copies (tools/launch/copies.py) that the Binder and Colab buttons "
                             f"open (default: ${ENV_LAUNCH_BRANCH}; without one: Binder opens the default branch's "
                             "notebooks and there is no Colab button)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show Sphinx's progress")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    try:
        repository = (check_url(args.repository_url, "--repository-url") if args.repository_url
                      else configured_repository(ROOT / "pyproject.toml"))
        if args.launch_branch and not re.fullmatch(r"[A-Za-z0-9._/-]+", args.launch_branch):
            raise SiteError(f"--launch-branch should be a branch name, got {args.launch_branch!r}")
        result = build(out, langs=tuple(args.lang or LANGS), repository=repository,
                       launch_branch=args.launch_branch, quiet=not args.verbose)
    except SiteError as exc:
        print(f"[course] error: {exc}", file=sys.stderr)
        return 1
    for lang, text in result["output"].items():
        if text.strip():
            print(f"[course] sphinx ({lang}):\n{text.rstrip()}", file=sys.stderr)
    print(f"[course] site built in {result['seconds']:.0f} s: {out / 'index.html'} "
          f"({', '.join(f'{out / lang}/' for lang in args.lang or LANGS)})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
