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
typed together, a pasted error message (the symptom row and the cell that explain it) and links into pages; for a
learner's own words it puts first the course's place that ``course.ask`` ranks first (tools/site/ask_index.py writes
its index into <lang>/_static/hooklab-ask.json; _static/hooklab-ask.js ranks with it).

The repository's URL comes from
``--repository-url``, else the environment variable HOOKLAB_REPOSITORY_URL (the publishing workflow sets it from
the Actions context), else ``[project.urls]`` Repository (or Source) in pyproject.toml: with it the theme shows the
repository, edit, issue and launch buttons, without it none of them. The sources are assembled in
build/site-src/<lang>/.

Why this build and not Jupyter Book. Jupyter Book 1 is an opinionated distribution of the same stack (Sphinx, myst-nb,
sphinx-book-theme): its ``_config.yml`` and ``_toc.yml`` become a conf.py, and ``jupyter-book build`` runs Sphinx on
one book. Here everything around that Sphinx run is what the course needs and Jupyter Book does not do: two sites
built from one set of bilingual notebooks (each notebook exported to one language first, every page linked to the
same page in the other language, Sphinx's own strings from a Chinese catalogue), the generated pages (symptom index,
hook matrix, atlas, API from the docstrings) and download copies with their install cell, then Pagefind's index of
each language's pages and the copy of ``course.ask``'s index beside it. With Jupyter Book 1 all of that would stay,
as steps before and after ``jupyter-book build`` run once per language, and the part it would replace is conf.py and
a table of contents that is generated from the notebook list here anyway; Jupyter Book 1 is in maintenance mode.
Jupyter Book 2 is a distribution of the MyST document engine (mystmd, Node.js), not of Sphinx: the theme, the
autodoc API page, the gettext catalogue and the Sphinx templates the buttons and the search page use would all have
to be rebuilt there, and it builds no site per language either (multi-language sites are an open topic there:
executablebooks/mystmd#1336). So the configuration and TOC layer stays this module's, over plain Sphinx.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomllib

from ..hook_matrix import page as hook_matrix_page  # the hook behaviour matrix page and its cell targets
from ..launch import copies as launch
from ..recipes.pages import (
    downloads as recipe_downloads,  # the notebook behind a recipe page's download
    links_to_recipe_pages,  # a section's links to the recipes that rely on it
    moved_pages as recipe_moved_pages,  # the old recipe pages' addresses, leading to where their recipes are now
)
from . import ask_index
from .pages import (
    CONF,
    FURTHER_READING,
    LABELS,
    LANDING,
    LANDING_LINES,
    LANGS,
    SiteError,
    api_groups,
    api_page,
    cell_links_to_symptom_targets,
    child_contents,
    chooser_page,
    further_reading,
    further_reading_cell,
    index_page,
    join_cjk_lines,
    landing_page,
    nested_pages,
    notebook_line,
    notebook_picture,
    notebook_title,
    public_names,
)

ROOT = Path(__file__).resolve().parents[2]
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


# --- the pages ----------------------------------------------------------------------------------------------


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
        page as symptom_page,  # the symptom page and the targets its links point to
        symptoms,  # the symptom cells
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
    downloads = src.parent / f"_downloads-{lang}"  # the notebooks behind the download buttons (build() puts them)
    if downloads.exists():
        shutil.rmtree(downloads)
    downloads.mkdir(parents=True)
    for path in chosen:
        # the download: the one-language launch copy, without the site's anchor cells and further reading
        clean = launch.launch_copy(export_notebook(read_notebook(path), lang), lang, hooklab, pinned)
        (downloads / path.name).write_text(json.dumps(clean, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        nb = symptom_page.add_site_anchors(export_notebook(read_notebook(path), lang), notebook=path.name)
        nb = hook_matrix_page.add_site_anchors(nb, path.name, cited)
        nb["cells"] = [links_to_recipe_pages(cell_links_to_symptom_targets(cell, by_cell)) for cell in nb["cells"]]
        for cell in nb["cells"]:  # no line break between two Chinese characters: a browser shows it as a space
            if cell["cell_type"] == "markdown":
                cell["source"] = join_cjk_lines("".join(cell["source"]) if isinstance(cell["source"], list)
                                                else cell["source"])
        nb = launch.launch_copy(nb, lang, hooklab, pinned)
        nb["cells"].append(further_reading_cell(reading[path.stem], lang))
        (src / path.name).write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        names.append(path.stem)
    pages = extra_pages(root, full=only is None)  # a quick build (tests) leaves the atlas out, as the API page
    for page, recipe in recipe_downloads(root / "recipes").items():  # a recipe page's download: its notebook, standalone
        if page in pages:
            launch.write_recipe_download(recipe, lang, downloads / f"{page}.ipynb", repository=repository,
                                         commit=commit, root=root)
    children = nested_pages(pages)
    for page, write in pages.items():
        text = write(root, lang, names).rstrip("\n") + "\n" + child_contents(children.get(page, []))
        (src / f"{page}.md").write_text(join_cjk_lines(text), encoding="utf-8")
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
    for name, html in recipe_moved_pages(root / "recipes", lang).items():  # the old recipe pages' addresses
        (extra / name).write_text(html, encoding="utf-8")
    return names


def symptoms_page(root: Path, lang: str, names: list[str]) -> str:
    """The symptom index (tools/messages/symptoms.py) of the notebooks ``names``."""
    from ..messages import page as symptom_page, symptoms
    from ..recipes import used_by  # the recipes that name a message or rely on a section

    return symptom_page.site_page([s for s in symptoms.collect(root)[0] if Path(s.notebook).stem in names], lang,
                                  built={f"{name}.ipynb" for name in names}, recipes=used_by.recipes(root))


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
             branch: str, launch_branch: str | None = None, locale_dir: Path | None = None,
             root: Path = ROOT) -> dict[str, Any]:
    """What tools/site/conf.py reads (through the file named by HOOKLAB_SITE); ``notebook_downloads``: the pages whose
    download button gives a notebook that :func:`assemble` wrote (the recipe pages)."""
    extra = src.parent / f"_extra-{lang}"
    licence = {"code": "LICENSE.txt" if (extra / "LICENSE.txt").is_file() else LICENCE_URLS["code"],
               "prose": "LICENSE-prose.txt" if (extra / "LICENSE-prose.txt").is_file() else LICENCE_URLS["prose"]}
    return {"lang": lang, "src": str(src), "notebooks": names, "repository_url": repository,
            "repository_branch": branch, "extra": str(extra) if any(extra.iterdir()) else None,
            "launch_branch": launch_branch if repository else None,
            "notebook_downloads": sorted(page for page in recipe_downloads(root / "recipes")
                                         if (src.parent / f"_downloads-{lang}" / f"{page}.ipynb").is_file()),
            "licence_links": licence, "locale_dir": str(locale_dir) if locale_dir else None,
            "other": {"lang": other, "label": LABELS[other], "pages": site_pages(names)}
            if other else None}


def build(out: Path, *, langs: tuple[str, ...] = LANGS, root: Path = ROOT, repository: str | None = None,
          branch: str = "main", launch_branch: str | None = None, commit: str | None = None,
          only: list[str] | None = None, quiet: bool = True, timeout: float = 900,
          progress: bool = False) -> dict[str, Any]:
    """Build the sites of ``langs`` into ``out/<lang>/`` (at the same time) and ``out/index.html``; ``only``
    (notebook names) leaves out the other notebooks and the API page (a quicker build, for tests).
    ``launch_branch``: the branch holding the launch copies (tools/launch/copies.py) that the launch buttons open;
    ``commit``: the commit the download copies install hooklab from (default: the checkout's). ``timeout``: what a
    build needs on an idle machine, stretched by the load while it runs (:func:`wait_stretched`), so that only a hung
    build fails; ``progress``: a line every minute while it runs.

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
                              locale_dir=locale_dir if lang == "zh" else None, root=root)
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
            what = f"./course {lang}" if lang in CLASSROOM else f"sphinx-build of the {lang} site"
            output[lang] = wait_stretched(proc, timeout, started, what, quiet=not progress)
            if proc.returncode != 0:
                raise SiteError(f"{what} failed (exit {proc.returncode}):\n{output[lang][-4000:]}")
        for lang in langs:
            if (out / lang).exists():
                shutil.rmtree(out / lang)
            shutil.move(src_root / f"html-{lang}" / "html", out / lang)
            shutil.rmtree(src_root / f"html-{lang}")  # what is left: myst-nb's jupyter_execute/
            (out / lang / "searchindex.js").unlink(missing_ok=True)  # Sphinx's index: the search asks Pagefind's
            for clean in (src_root / f"_downloads-{lang}").glob("*.ipynb"):  # no label-only cells in a download
                shutil.copy2(clean, out / lang / "_sources" / clean.name)
            for tool, folder in CLASSROOM.items():  # <lang>/slides/<lang>/NN_x.html, its _vendor/ beside
                target = out / lang / folder
                shutil.copytree(classroom / tool / lang, target / lang)
                shutil.copytree(classroom / tool / "_vendor", target / "_vendor")
            index_search(out / lang, pages=site_pages(names, api=only is None), timeout=300)
            ask_index.write(out / lang, lang)  # a learner's own words: the course's places as course.ask ranks them
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
    """:data:`EXTRA_PAGES`, the recipes (``recipes`` and ``recipes-NN_chapter``, from recipes/ by tools/recipes/pages.py),
    the library profiles (``profiles`` and ``profiles-<slug>``, by tools/profiles/page.py), the other frameworks'
    equivalents of a hook (``other_frameworks``, by tools/profiles/frameworks.py), then, in a ``full`` build, one
    page per zoo of the hook atlas (``atlas-<zoo>``, from hooklab/course/assets/atlas/
    by tools/atlas/pages.py), which a quick build leaves out as it leaves out the API page."""
    from ..profiles import page as profile_pages
    from ..profiles.frameworks import page as frameworks_page
    from ..recipes import pages as recipe_pages

    found = {**EXTRA_PAGES, **recipe_pages.pages(root / "recipes"), **profile_pages.pages(),
             "other_frameworks": frameworks_page}
    if not full:
        return found
    from ..atlas import pages as atlas_pages
    return {**found, **atlas_pages.pages(root / "hooklab" / "course" / "assets" / "atlas")}


def site_pages(names: list[str], *, api: bool = True, root: Path = ROOT) -> list[str]:
    """Every page of a language's site, in order: the landing page, the notebooks, then :func:`extra_pages` (the
    atlas pages and the API page only in a full build, ``api``)."""
    return ["index", *names, *extra_pages(root, full=api), *(["api"] if api else [])]


def load_factor() -> float:
    """How many times slower than on an idle machine a CPU-bound process may run now: the highest load average
    (1, 5 or 15 minutes) per core, at least 1 (tests/patience.py measures the test run's patience the same way)."""
    try:
        load, cores = max(os.getloadavg()), len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no load average, or no affinity (macOS)
        return 1.0
    return max(1.0, load / max(cores, 1))


def wait_stretched(proc: subprocess.Popen, seconds: float, started: float, what: str, *, quiet: bool = True,
                   tick: float = 60.0) -> str:
    """Wait for ``proc`` and return its output. ``seconds`` is what an idle machine needs: the limit is stretched by
    :func:`load_factor` (the highest seen while waiting), so a busy machine makes a build slow, never a failure; a
    process that is still running past the stretched limit is a hang, and the error says how long it waited and
    under what load. Unless ``quiet``, a line of progress every ``tick`` seconds."""
    factor = load_factor()
    while True:
        factor = max(factor, load_factor())
        left = seconds * factor - (time.monotonic() - started)
        if left <= 0:
            proc.kill()
            proc.wait()
            raise SiteError(f"{what} did not finish within {seconds * factor:.0f} s ({seconds:.0f} s on an idle "
                            f"machine, stretched by the load factor {factor:.1f}): it looks hung")
        try:
            text, _ = proc.communicate(timeout=min(tick, left))
            return text or ""
        except subprocess.TimeoutExpired:
            if not quiet:
                print(f"[site] {what}: still running after {time.monotonic() - started:.0f} s "
                      f"(load factor {factor:.1f})", file=sys.stderr, flush=True)


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
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text = wait_stretched(proc, timeout, time.monotonic(), f"Pagefind's index of {folder}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    done = subprocess.CompletedProcess(command, proc.returncode, text, "")
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
                       launch_branch=args.launch_branch, quiet=not args.verbose, progress=True)
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
