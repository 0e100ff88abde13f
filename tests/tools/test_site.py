"""`./course site`: the static website builds offline from the committed notebooks; every page and figure is
there; the language switch hides the other language."""
import html.parser
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("course_site", ROOT / "tools" / "site.py")
site = importlib.util.module_from_spec(spec)
sys.modules["course_site"] = site
spec.loader.exec_module(site)
STATIC = ROOT / "tools" / "site" / "_static"


class Page(html.parser.HTMLParser):
    """Image sources, links and the classes of every element of one HTML page."""

    def __init__(self, path: Path):
        super().__init__()
        self.images, self.links, self.classes, self.metas = [], [], [], {}
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag == "meta" and attrs.get("name"):
            self.metas[attrs["name"]] = attrs.get("content", "")
        self.classes.append((tag, (attrs.get("class") or "").split()))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "site"
    result = subprocess.run([str(ROOT / "course"), "site", "--out", str(out)], cwd=ROOT, capture_output=True,
                            text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "site built" in result.stderr
    return out


def test_every_notebook_has_a_page_and_the_landing_page_lists_them_in_order(built):
    names = [p.stem for p in site.notebooks()]
    assert names and names[0].startswith("00_")
    for name in names:
        assert (built / f"{name}.html").is_file(), name
    index = Page(built / "index.html")
    listed = [link[:-5] for link in index.links if link[:-5] in names]
    assert listed[:len(names)] == names  # the sidebar, in course order
    text = (built / "index.html").read_text(encoding="utf-8")
    assert "快速开始 / Quick start" in text  # the README is the landing page
    assert (built / "search.html").is_file() and (built / "searchindex.js").is_file()
    searchindex = (built / "searchindex.js").read_text(encoding="utf-8")
    assert "register_hook" in searchindex


def test_every_figure_of_the_notebooks_is_on_its_page(built):
    for path in site.notebooks():
        nb = json.loads(path.read_text(encoding="utf-8"))
        figures = sum(1 for c in nb["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
        page = Page(built / f"{path.stem}.html")
        images = [src for src in page.images if src.startswith("_images/")]
        assert len(images) == figures, (path.name, figures, images)
        for src in images:
            file = built / src
            assert file.is_file() and file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", src


def test_cells_carry_their_language_and_code_is_shared(built):
    for path in site.notebooks():
        page = Page(built / f"{path.stem}.html")
        classes = [c for _, cs in page.classes for c in cs]
        assert classes.count("tag_lang-zh") > 0 and classes.count("tag_lang-en") > 0, path.name
        headings = [(tag, cs) for tag, cs in page.classes if tag in ("h2", "h3")
                    and ("tag_lang-zh" in cs or "tag_lang-en" in cs)]
        assert headings, path.name  # section headings are marked (their TOC entries follow them)
        # code cells belong to neither language, so neither choice hides them
        code_cells = [cs for tag, cs in page.classes if "cell" in cs and "tag_lang-zh" not in cs
                      and "tag_lang-en" not in cs]
        assert code_cells, path.name
        assert page.metas.get("hooklab-notebook") == path.name
        assert page.metas.get("hooklab-lab-url", "").startswith("http://localhost:8888/lab/tree/")


def test_language_switch_hides_the_other_language():
    css = re.sub(r"/\*.*?\*/", "", (STATIC / "hooklab-site.css").read_text(encoding="utf-8"), flags=re.S)
    rules = re.findall(r"([^{}]+)\{([^}]*)\}", css)
    hidden = [selector for selector, body in rules if "display: none" in body]
    assert hidden, "no rule hides anything"
    selectors = {s.strip() for group in hidden for s in group.split(",")}
    assert 'html[data-hooklab-lang="zh"] .tag_lang-en' in selectors
    assert 'html[data-hooklab-lang="en"] .tag_lang-zh' in selectors
    assert not any('"both"' in s for s in selectors)  # both: nothing hidden
    js = (STATIC / "hooklab-site.js").read_text(encoding="utf-8")
    assert 'setAttribute("data-hooklab-lang", mode)' in js
    for mode in ('"zh"', '"en"', '"both"'):
        assert mode in js


def test_site_pages_use_the_switch(built):
    page = (built / "01_tensor_hooks.html").read_text(encoding="utf-8")
    assert "hooklab-site.js" in page and "hooklab-site.css" in page
    assert (built / "_static" / "hooklab-site.js").is_file()


def test_index_page_puts_the_notebooks_after_the_readme():
    text = site.index_page("# Title\n\nbody\n", ["00_a", "01_b"])
    assert text.startswith("# Title\n\nbody\n")
    assert text.index("```{toctree}") < text.index("00_a") < text.index("01_b")
