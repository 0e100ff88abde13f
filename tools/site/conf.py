"""Sphinx configuration of the course website, one build per language (`./course site` runs it twice).

tools/site.py assembles the sources of one language (the one-language notebooks as `hooklab.course export`
writes them, the landing page, the API page) and a settings file, and passes the file's path in the
environment variable HOOKLAB_SITE: the language, the repository URL (from ``[project.urls]``, or none) and
the page names of the other language's site. Notebooks are shown as committed: nothing is executed.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

_SETTINGS = os.environ.get("HOOKLAB_SITE")
if not _SETTINGS:
    raise RuntimeError("this configuration is used by `./course site` (tools/site.py), which sets HOOKLAB_SITE "
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

# One language per site: Sphinx's own strings ("Search", "Contents", ...) and its search in that language.
language = "zh_CN" if ZH else "en"
html_search_language = "zh" if ZH else "en"
# Our translations of the interface strings that Sphinx's and the themes' Chinese catalogues lack or give in
# Taiwanese wording (tools/site.py writes them as .po files; Sphinx compiles them): they come before the built-in
# catalogues. The strings of the search page's script are added by _static/hooklab-zh.js.
locale_dirs = [SITE["locale_dir"]] if SITE.get("locale_dir") else []

# Chinese search: every pair of adjacent Han characters is a search word, in the index (below) and in the query
# (the browser cuts a Chinese query into the same pairs, all of which must be on a page). A word segmenter (jieba,
# Sphinx's default) indexes the words it knows: a word it cuts differently (混合精度 -> 混合 + 精度) was never
# found, and a learner types words, not segments. tests/tools/test_site.py measures the recall.
HAN_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
LATIN_WORD = re.compile(r"[a-zA-Z0-9_]+")
SPLIT_QUERY_JS = r"""
/* hooklab (tools/site/conf.py): a Chinese query is cut into pairs of adjacent Han characters, as the index is;
   other words are split as Sphinx splits them. */
var splitQuery = (query) => {
  const words = [];
  const han = /^[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+$/;
  for (const part of query.split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)) {
    for (const piece of part.split(/([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)/)) {
      if (!piece) continue;
      if (!han.test(piece) || piece.length === 1) words.push(piece);
      else for (let i = 0; i + 1 < piece.length; i++) words.push(piece.slice(i, i + 2));
    }
  }
  return words;
};
"""


def han_pairs(text: str) -> list[str]:
    """The Chinese search words of ``text``: each pair of adjacent Han characters (a lone one stays alone)."""
    words: list[str] = []
    for run in HAN_RUN.findall(text):
        words.extend([run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)])
    return words


if ZH:
    import sphinx.search
    from sphinx.search.zh import SearchChinese

    class SearchChinesePairs(SearchChinese):
        """Sphinx's Chinese search language with Han character pairs instead of jieba's words."""

        js_splitter_code = SPLIT_QUERY_JS

        def init(self, options: dict[str, str]) -> None:
            import snowballstemmer

            self.stemmer = snowballstemmer.stemmer("english")  # Latin words as Sphinx's zh search stems them

        def split(self, input: str) -> list[str]:
            latin = LATIN_WORD.findall(input)
            self.latin_terms.update(latin)
            return han_pairs(input) + latin

    sphinx.search.languages["zh"] = SearchChinesePairs

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
# hooklab-site.js: the language link keeps the reader's place; hooklab-zh.js: the search page's strings in Chinese
html_js_files = ["hooklab-site.js", *(["hooklab-zh.js"] if ZH else [])]
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
# The repository's public URL (tools/site.py: --repository-url, else HOOKLAB_REPOSITORY_URL, which the publishing
# workflow sets from the Actions context, else [project.urls] in pyproject.toml): with it, the theme's repository /
# edit / issue buttons and the Binder launch button; without it, none of them (never a guessed URL). The launch
# buttons open the launch copies (tools/launch.py) on the branch SITE["launch_branch"], where the publishing
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


def setup(app):
    # before pydata-sphinx-theme drops the header templates that render empty (priority 500)
    app.connect("html-page-context", _language_link, priority=400)
    app.connect("html-page-context", _no_edit_button_on_generated_pages, priority=900)  # after the theme's (501)
    app.connect("html-page-context", _launch_copies, priority=900)
    app.connect("autodoc-skip-member", _no_constructor_with_private_types)
    if ZH and SITE.get("locale_dir"):
        # before the theme adds its own catalogue (when the builder loads it), so that ours comes first
        app.add_message_catalog("booktheme", SITE["locale_dir"])
    return {"parallel_read_safe": True}
