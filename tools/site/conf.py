"""Sphinx configuration of the course website, one build per language (`./course site` runs it twice).

tools/site.py assembles the sources of one language (the one-language notebooks as `hooklab.course export`
writes them, the landing page, the API page) and a settings file, and passes the file's path in the
environment variable HOOKLAB_SITE: the language, the repository URL (from ``[project.urls]``, or none) and
the page names of the other language's site. Notebooks are shown as committed: nothing is executed.
"""
from __future__ import annotations

import json
import os
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
# Chinese search segments words with jieba (Sphinx's zh search language; without jieba it indexes no Chinese
# words), with the course's own terms added from the glossary (SITE["jieba_dict"]).
language = "zh_CN" if ZH else "en"
html_search_language = "zh" if ZH else "en"
if ZH and SITE.get("jieba_dict"):
    html_search_options = {"dict": SITE["jieba_dict"]}
if ZH:
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)  # not "Building prefix dict ..." on every build

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
    "article_header_end": ["language-link.html", "article-header-buttons.html"],
    "extra_footer": ('<p class="hooklab-licence">' + _LICENCE.format(code=SITE["licence_links"]["code"],
                                                                     prose=SITE["licence_links"]["prose"])
                     + "</p>"),
}
# The repository's public URL comes from one setting, [project.urls] in pyproject.toml (tools/site.py reads it):
# with it, the theme's repository / edit / issue buttons and the Binder and Colab launch buttons; without it,
# none of them (never a guessed URL).
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
    return {"parallel_read_safe": True}
