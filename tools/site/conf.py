"""Sphinx configuration of the course website, one build per language (`./course site` runs it twice).

tools/site/build.py assembles the sources of one language (the one-language notebooks as `hooklab.course export`
writes them, the landing page, the API page) and a settings file, and passes the file's path in the
environment variable HOOKLAB_SITE: the language, the repository URL (from ``[project.urls]``, or none) and
the page names of the other language's site. Notebooks are shown as committed: nothing is executed.

Besides the theme: the language link, the Chinese section anchors made from the heading's text, the symptom index's
row classes (and the row anchors of notebook 00's table), the hook matrix's cell anchors (its keys), the slides /
handout menu of each notebook page, the launch and edit buttons; the search page is _templates/search.html
(Pagefind's index, which tools/site/build.py writes after the build).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from sphinx.transforms import SphinxTransform

from tools.site.pages import heading_id  # the anchor of a section from its heading's text

_SETTINGS = os.environ.get("HOOKLAB_SITE")
if not _SETTINGS:
    raise RuntimeError("this configuration is used by `./course site` (tools/site/build.py), which sets HOOKLAB_SITE "
                       "to the settings of the language being built; run ./course site")
SITE = json.loads(Path(_SETTINGS).read_text(encoding="utf-8"))
LANG = SITE["lang"]  # "zh" or "en"
ZH = LANG == "zh"

project = "hooklab"
author = "hooklab authors"
copyright = "hooklab authors"
extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx_copybutton",
    "sphinx-mathjax-offline",  # MathJax 3 copied into _static/mathjax/ (the package's import name has dashes)
]
templates_path = ["_templates"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
root_doc = "index"

# One language per site: Sphinx's own strings ("Search", "Contents", ...) in that language. The search is not
# Sphinx's: tools/site/build.py indexes the built pages with Pagefind and _templates/search.html asks it.
language = "zh_CN" if ZH else "en"
# Our translations of the interface strings that Sphinx's and the themes' Chinese catalogues lack or give in
# Taiwanese wording (tools/site/build.py writes them as .po files; Sphinx compiles them): they come before the built-in
# catalogues.
locale_dirs = [SITE["locale_dir"]] if SITE.get("locale_dir") else []

# Notebooks as committed: outputs (figures included), no execution.
nb_execution_mode = "off"
nb_output_stderr = "show"
nb_merge_streams = True
myst_enable_extensions = ["colon_fence", "dollarmath", "amsmath"]
myst_heading_anchors = 3
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header"]

# API reference (api.md): autosummary tables linking to the autodoc entries on the same page.
autosummary_generate = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_class_signature = "separated"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
add_module_names = False

# Copy buttons copy the code of a doctest example without its prompts and printed results.
copybutton_prompt_text = r">>> |\.\.\. "
copybutton_prompt_is_regexp = True

html_theme = "sphinx_book_theme"
html_title = "hooklab · PyTorch 钩子动手课" if ZH else "hooklab · a hands-on course on PyTorch hooks"
html_static_path = ["_static"]
html_css_files = ["hooklab-site.css"]
# hooklab-site.js: the language link keeps the reader's place (the search page loads hooklab-search.js itself)
html_js_files = ["hooklab-site.js"]
html_extra_path = [SITE["extra"]] if SITE.get("extra") else []  # the licence files
html_copy_source = True          # _sources/NN_x.ipynb: the one-language notebook behind the download button
html_show_sourcelink = False
html_last_updated_fmt = None

_LICENCE = {
    "zh": ('代码以 <a href="{code}">MIT 许可</a>发布，文字与图以 '
           '<a href="{prose}">CC BY 4.0</a> 发布。'),
    "en": ('Code under the <a href="{code}">MIT licence</a>, prose and figures under '
           '<a href="{prose}">CC BY 4.0</a>.'),
}[LANG]
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": True,   # .ipynb (this language's notebook) and print to PDF
    "use_fullscreen_button": False,
    "navigation_with_keys": False,
    "home_page_in_toc": True,
    "search_bar_text": "搜索本课程……" if ZH else "Search the course…",
    "article_header_end": ["language-link.html", "article-header-buttons.html"],
    "extra_footer": ('<p class="hooklab-licence">' + _LICENCE.format(code=SITE["licence_links"]["code"],
                                                                     prose=SITE["licence_links"]["prose"])
                     + "</p>"),
}
# The repository's public URL (tools/site/build.py: --repository-url, else HOOKLAB_REPOSITORY_URL, which the publishing
# workflow sets from the Actions context, else [project.urls] in pyproject.toml): with it, the theme's repository /
# edit / issue buttons and the Binder launch button; without it, none of them (never a guessed URL). The launch
# buttons open the launch copies (tools/launch/copies.py) on the branch SITE["launch_branch"], where the publishing
# workflow puts them: Colab needs such a copy (its first cell installs hooklab), so it is offered only with one.
if SITE.get("repository_url"):
    html_theme_options.update({
        "repository_url": SITE["repository_url"],
        "repository_branch": SITE.get("repository_branch") or "main",
        "path_to_docs": "notebooks",   # the edit and launch buttons open notebooks/NN_x.ipynb
        "use_repository_button": True,
        "use_edit_page_button": True,
        "use_issues_button": True,
        "launch_buttons": {"binderhub_url": "https://mybinder.org", "colab_url": "https://colab.research.google.com",
                           "notebook_interface": "jupyterlab"},
    })


def _language_link(app, pagename, templatename, context, doctree):
    """The link to this page in the other language's site (language-link.html shows it)."""
    other = SITE.get("other")
    if other and pagename in set(other["pages"]) | {"search", "genindex", "py-modindex"}:
        up = "../" * (pagename.count("/") + 1)
        context["hooklab_other"] = {"href": f"{up}{other['lang']}/{pagename}.html", "lang": other["lang"],
                                    "label": other["label"]}


def _launch_copies(app, pagename, templatename, context, doctree):
    """Point the Binder and Colab buttons at this page's launch copy on the launch branch (``LANG/NN_x.ipynb``),
    whose first cell installs hooklab where it is missing; without a launch branch, Binder opens the committed
    notebook on the default branch (its image has hooklab installed) and there is no Colab button."""
    repository, branch = SITE.get("repository_url"), SITE.get("launch_branch")
    if not repository or pagename not in SITE["notebooks"]:
        return
    owner_repo = repository.split("://", 1)[1].split("/", 1)[1]
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        kept = []
        for button in group["buttons"]:
            if button.get("text") == "Binder" and branch:
                button["url"] = (f"https://mybinder.org/v2/gh/{owner_repo}/{branch}"
                                 f"?urlpath=lab/tree/{LANG}/{pagename}.ipynb")
            elif button.get("text") == "Colab":
                if not branch:
                    continue
                button["url"] = f"https://colab.research.google.com/github/{owner_repo}/blob/{branch}/{LANG}/{pagename}.ipynb"
            kept.append(button)
        group["buttons"] = kept


_NOTEBOOK_DOWNLOAD = {"zh": "下载笔记本（第一个单元格安装它用到的包）",
                      "en": "Download the notebook (its first cell installs what it uses)"}[LANG]


def _notebook_downloads(app, pagename, templatename, context, doctree):
    """A recipe page's download button gives its recipe notebook in this language, standalone, with the cell that
    installs what it uses (tools/site/build.py writes it into _sources/ as ``<page>.ipynb``), instead of the page's
    MyST source, which no Jupyter opens as a notebook."""
    if pagename not in SITE.get("notebook_downloads", []):
        return
    for group in context.get("header_buttons", []):
        if group.get("label") != "download-buttons":
            continue
        for button in group["buttons"]:
            if button.get("label") == "download-source-button":
                button.update(url=button["url"].rsplit("/", 1)[0] + f"/{pagename}.ipynb", text=".ipynb",
                              icon="fas fa-code", tooltip=_NOTEBOOK_DOWNLOAD)


_CLASSROOM = {  # tools/site/build.py builds them into <lang>/slides/<lang>/ and <lang>/handouts/<lang>/
    "zh": {"group": "上课用的材料", "slides": ("幻灯片", "本课的 reveal.js 幻灯片（离线可用：S 键打开演讲者视图）"),
           "handout": ("讲义", "本课的讲义，可以直接打印（每一节从新的一页开始）")},
    "en": {"group": "For teaching", "slides": ("Slides", "This notebook's reveal.js slide deck (works offline; S opens "
                                                          "the speaker view)"),
           "handout": ("Handout", "This notebook's handout, ready to print (each section starts a page)")},
}[LANG]


def _classroom_buttons(app, pagename, templatename, context, doctree):
    """A notebook's page links its slide deck and its handout (both in this site, in this language), in a menu
    of their own beside the download button."""
    if pagename not in SITE["notebooks"]:
        return
    up = "../" * pagename.count("/")
    buttons = [{"type": "link", "url": f"{up}{folder}/{LANG}/{pagename}.html", "text": _CLASSROOM[key][0],
                "tooltip": _CLASSROOM[key][1], "icon": icon, "label": f"hooklab-{key}-button"}
               for key, folder, icon in (("slides", "slides", "fas fa-person-chalkboard"),
                                         ("handout", "handouts", "fas fa-print"))]
    context.setdefault("header_buttons", []).append(
        {"type": "group", "tooltip": _CLASSROOM["group"], "icon": "fas fa-chalkboard-user", "buttons": buttons,
         "label": "hooklab-classroom-buttons"})


_PRIVATE_TYPE = re.compile(r"(?<![\w.])_[A-Z]\w*")


def _no_constructor_with_private_types(app, what, name, obj, skip, options):
    """A class whose constructor takes one of hooklab's private types is made by the library, not by hand
    (``MemoryPlan``: by ``MemoryPlanner.plan()``, as its docstring says): the API page leaves out its ``__init__``
    (which autodoc_class_signature = "separated" lists as a member) rather than show a type the reader cannot use."""
    import inspect

    if name != "__init__":
        return None
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return None
    return True if _PRIVATE_TYPE.search(text) else None


def _no_edit_button_on_generated_pages(app, pagename, templatename, context, doctree):
    """The landing page and the API page are generated: there is no file of theirs to edit."""
    if pagename not in SITE["notebooks"]:
        buttons = context.get("header_buttons", [])
        for button in buttons:
            if button.get("type") == "group":
                button["buttons"] = [b for b in button["buttons"] if b.get("label") != "source-edit-button"]
        context["header_buttons"] = [b for b in buttons if b.get("label") != "source-edit-button"]


class ChineseSectionIds(SphinxTransform):
    """On the Chinese site, each section's anchor is :func:`heading_id` of its heading (made unique in the page
    with -2, -3, ...), in place of the one docutils derived from its ASCII letters alone or numbered; a section's
    other anchors stay, and an explicit target's (``(row-<id>)=`` before a heading) stays first, as in English.
    Runs before Sphinx collects the anchors (table of contents, labels)."""

    default_priority = 800  # before SphinxDomains (850) and the doctree-read event (880)

    def apply(self, **kwargs: Any) -> None:
        from docutils import nodes
        from docutils.nodes import make_id

        if not ZH:
            return
        taken: set[str] = set()
        for section in self.document.findall(nodes.section):
            title = section[0].astext() if len(section) and isinstance(section[0], nodes.title) else ""
            generated = make_id(title)
            old = [i for i in section["ids"] if re.fullmatch(r"id\d+", i) or (
                generated and re.fullmatch(re.escape(generated) + r"(-\d+)?", i))]
            base = heading_id(title)
            new, n = base, 1
            while new in taken or (new in self.document.ids and self.document.ids[new] is not section):
                n += 1
                new = f"{base}-{n}"
            taken.add(new)
            for i in old:
                self.document.ids.pop(i, None)
            # an explicit target before the heading (the symptom page's ``(row-<id>)=``) stays the section's anchor,
            # as on the English site: the heading's text is an anchor of the section beside it
            explicit = [self.document.nameids[n] for n in section["names"]
                        if self.document.nametypes.get(n) and self.document.nameids.get(n) in section["ids"]]
            rest = [i for i in section["ids"] if i not in old and i not in explicit]
            section["ids"] = [*explicit, new, *rest]
            self.document.ids[new] = section


def _symptom_rows(app, doctree, docname):
    """The symptom index's rows get the classes that _static/hooklab-site.css lays out (for a phone and for print).

    - The symptom page (tools/messages/symptoms.py): every row is a section of its own under an explicit target, ``row-<id>``
      (a symptom cell's) or ``msg-<id>`` (a hook message's); the section gets the class ``hooklab-symptom-row`` and
      the page's top section ``hooklab-symptom-index``. The target is the section's anchor in both languages
      (:class:`ChineseSectionIds` keeps explicit targets first): a search result or a shared link lands on the row.
    - Notebook 00's copy of the index is a table whose rows link to symptoms' cells (``…#symptom-<id>``): the table
      gets the class ``hooklab-symptoms``, and each such row that has no anchor of its own ``symptom-row-<id>``."""
    from docutils import nodes

    rows = 0
    for section in doctree.findall(nodes.section):
        if any(re.fullmatch(r"(row|msg)-[\w-]+", i) for i in section["ids"]):
            section["classes"].append("hooklab-symptom-row")
            rows += 1
    if rows:
        top = next(iter(doctree.findall(nodes.section)), None)
        if top is not None:
            top["classes"].append("hooklab-symptom-index")
    for table in doctree.findall(nodes.table):
        rows = 0
        for row in table.findall(nodes.row):
            for ref in row.findall(nodes.reference):
                match = re.search(r"#symptom-([\w-]+)$", ref.get("refuri", ""))
                if match:
                    rows += 1
                    if not row["ids"]:
                        row["ids"].append(f"symptom-row-{match[1]}")
                    break
        if rows:
            table["classes"].append("hooklab-symptoms")


_MATRIX_KEY = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*@[a-z0-9]+(?:-[a-z0-9]+)*")


def _matrix_rows(app, doctree, docname):
    """A table row that names a cell of the hook behaviour matrix by its key (``forward-hook@compile``, in code: the
    matrix page's tables, tools/hook_matrix/page.py) gets the key as its anchor, the first row naming a key in a page
    (a surprising cell's row comes before its family's table): a search for the key, or a shared link, lands on it."""
    from docutils import nodes

    taken = set(doctree.ids)
    for row in doctree.findall(nodes.row):
        if row["ids"]:
            continue
        for literal in row.findall(nodes.literal):
            key = literal.astext().strip()
            if _MATRIX_KEY.fullmatch(key):
                if key not in taken:
                    row["ids"].append(key)
                    taken.add(key)
                break


def setup(app):
    app.add_transform(ChineseSectionIds)
    app.connect("doctree-resolved", _symptom_rows)
    app.connect("doctree-resolved", _matrix_rows)
    # before pydata-sphinx-theme drops the header templates that render empty (priority 500)
    app.connect("html-page-context", _language_link, priority=400)
    app.connect("html-page-context", _no_edit_button_on_generated_pages, priority=900)  # after the theme's (501)
    app.connect("html-page-context", _launch_copies, priority=900)
    app.connect("html-page-context", _notebook_downloads, priority=900)  # after the theme makes its buttons (501)
    app.connect("html-page-context", _classroom_buttons, priority=600)  # after the theme makes its buttons (501)
    app.connect("autodoc-skip-member", _no_constructor_with_private_types)
    if ZH and SITE.get("locale_dir"):
        # before the theme adds its own catalogue (when the builder loads it), so that ours comes first
        app.add_message_catalog("booktheme", SITE["locale_dir"])
    return {"parallel_read_safe": True}
