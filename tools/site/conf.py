"""Sphinx configuration of the course website (`./course site`): the committed notebooks with their outputs,
rendered by myst-nb without executing anything, a language switch driven by the cells' lang-* tags."""
from __future__ import annotations

import os

from docutils import nodes

project = "hooklab"
author = "hooklab authors"
extensions = ["myst_nb"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
root_doc = "index"
language = "en"

# Notebooks are shown exactly as committed: outputs (figures included), no execution.
nb_execution_mode = "off"
nb_output_stderr = "show"
nb_merge_streams = True
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header"]

html_theme = "sphinx_book_theme"
html_title = "hooklab · PyTorch 钩子动手课 / hands-on course on PyTorch hooks"
html_static_path = ["_static"]
html_css_files = ["hooklab-site.css"]
html_js_files = ["hooklab-site.js"]
html_copy_source = False
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    "navigation_with_keys": False,
}
# where `./course lab` serves the notebooks (the per-page "open in JupyterLab" link)
LAB_URL = os.environ.get("HOOKLAB_LAB_URL", "http://localhost:8888/lab/tree/")


def _mark_markdown_cells_with_their_language() -> None:
    """Give every node a markdown cell produces the class ``tag_<lang-tag>`` (as myst-nb does for code cells).

    myst-nb renders markdown cells without a wrapper (a wrapper would break the heading structure), so the
    cell's tags are lost. Here the nodes a cell adds are found and marked: a new section gets the class on its
    title only, so that hiding one language never hides the code cells that follow in that section.
    """
    from myst_nb.core.render import MditRenderMixin

    original = MditRenderMixin.render_nb_cell_markdown
    if getattr(original, "_hooklab", False):
        return

    def render_nb_cell_markdown(self, token):
        tags = [t for t in token.meta.get("metadata", {}).get("tags", []) if t.startswith("lang-")]
        if not tags:
            return original(self, token)
        before = {id(n) for n in self.document.findall()}
        original(self, token)
        new = [n for n in self.document.findall() if id(n) not in before]
        new_ids = {id(n) for n in new}
        for node in new:
            if isinstance(node, nodes.section) or not isinstance(node, nodes.Element):
                continue
            parent = node.parent
            if parent is None or id(parent) not in new_ids or isinstance(parent, nodes.section):
                node["classes"] += [f"tag_{tag}" for tag in tags]

    render_nb_cell_markdown._hooklab = True
    MditRenderMixin.render_nb_cell_markdown = render_nb_cell_markdown


def _page_context(app, pagename, templatename, context, doctree):
    """Tell the page's script which notebook it shows (for the "open in JupyterLab" link)."""
    source = app.env.doc2path(pagename, False) if pagename in app.env.found_docs else ""
    notebook = os.path.basename(str(source)) if str(source).endswith(".ipynb") else ""
    context["metatags"] = context.get("metatags", "") + (
        f'\n<meta name="hooklab-notebook" content="{notebook}">'
        f'\n<meta name="hooklab-lab-url" content="{LAB_URL}">')


def setup(app):
    _mark_markdown_cells_with_their_language()
    app.connect("html-page-context", _page_context)
    return {"parallel_read_safe": True}
