"""`./course site`: one static site per language, built offline from the committed notebooks.

Fast tests of the assembly (settings, pages, data tables, the landing page), then one real build of both languages
per test run (`./course site`: the session fixture `course_site` of tests/tools/conftest.py, shared with
test_browser.py and across xdist workers) that the other tests read: every page and figure, the landing page's map
of the notebooks, the language links, Chinese search (the recall table over the glossary and the titles) and English
search, the Chinese interface, math rendered by a local MathJax, download (with the install cell) and copy buttons,
the further reading, the API page, the licence, and the repository and launch buttons present or absent as the
repository URL says (a second, one-language build with the opposite setting and a launch branch checks the other
way)."""
import functools
import html.parser
import json
import re
import urllib.parse
from pathlib import Path

import pytest

from tools.site import build as site, pages

ROOT = Path(__file__).resolve().parents[2]

# Building both languages takes about 50 s of CPU; on this 2-core machine under load it took up to 230 s, so the
# test that first uses the build (its set-up counts) may take longer than the default limit.
pytestmark = pytest.mark.timeout(600)

HAN = re.compile(r"[\u4e00-\u9fff]")
CHECKER_LINE = re.compile(r"^\[\d\d\.\d+\] ", re.M)
EXAMPLE_URL = "https://github.com/example-owner/hooklab"


class Page(html.parser.HTMLParser):
    """What the tests read from one HTML page: links, resources, classes, and the article's text."""

    def __init__(self, path: Path):
        super().__init__()
        self.images, self.links, self.resources, self.anchors, self.ids = [], [], [], [], set()
        self.article, self._depth, self._pre, self.pre_texts = [], 0, 0, []
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
            self.anchors.append(attrs)
        if tag == "script" and attrs.get("src"):
            self.resources.append(attrs["src"])
        if tag == "link" and "stylesheet" in (attrs.get("rel") or ""):
            self.resources.append(attrs.get("href", ""))
        if tag == "img" or tag == "iframe":
            self.resources.append(attrs.get("src", ""))
        if tag == "article" and "bd-article" in (attrs.get("class") or ""):
            self._depth = 1  # the page's content (articles are not nested)
        if tag == "pre" and self._depth:
            self._pre += 1
            self.pre_texts.append([])

    def handle_endtag(self, tag):
        if tag == "article":
            self._depth = 0
        if tag == "pre" and self._pre:
            self._pre -= 1

    def handle_data(self, data):
        if self._depth:
            self.article.append(data)
        if self._pre:
            self.pre_texts[-1].append(data)

    @property
    def text(self) -> str:
        return "".join(self.article)

    @property
    def outputs(self) -> list[str]:
        return ["".join(parts) for parts in self.pre_texts]


def split_query_sphinx(query: str) -> list[str]:
    """The words of a query: runs of letters, digits and _ (a Chinese phrase is one word)."""
    return [w for w in re.split(r"[^\w]+|_(?=_)", query) if w]


def containing(folder: Path, query: str) -> set[str]:
    """The pages whose text holds every word of ``query`` (its parts between spaces and punctuation; a Chinese
    phrase is one part), ignoring case."""
    parts = split_query_sphinx(query)
    return {p.stem for p in folder.glob("*.html") if p.stem not in ("search", "genindex", "py-modindex")
            and all(part.lower() in parsed(p).text.lower() for part in parts)}


@functools.cache
def parsed(path: Path) -> Page:
    """Each built page parsed once (the build is read-only to the tests)."""
    return Page(path)


def pages_containing(folder: Path, word: str) -> set[str]:
    return {p.stem for p in folder.glob("*.html") if p.stem not in ("search", "genindex", "py-modindex")
            and word.lower() in parsed(p).text.lower()}


# --- fast tests: the assembly ------------------------------------------------------------------------------

def test_repository_url_comes_from_the_environment_then_project_urls(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f'[project]\nname = "x"\n[project.urls]\nRepository = "{EXAMPLE_URL}"\n', encoding="utf-8")
    other = "https://github.com/someone-else/hooklab"
    assert site.configured_repository(pyproject, {}) == EXAMPLE_URL
    assert site.configured_repository(pyproject, {"HOOKLAB_REPOSITORY_URL": ""}) == EXAMPLE_URL  # empty: unset
    assert site.configured_repository(pyproject, {"HOOKLAB_REPOSITORY_URL": other + "/"}) == other  # Actions
    with pytest.raises(pages.SiteError, match="HOOKLAB_REPOSITORY_URL should be a repository's https URL"):
        site.configured_repository(pyproject, {"HOOKLAB_REPOSITORY_URL": "someone-else/hooklab"})


def test_repository_url_comes_from_project_urls_only(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n', encoding="utf-8")
    assert site.repository_url(pyproject) is None  # not set: no URL, never a guessed one
    pyproject.write_text(f'[project]\nname = "x"\n[project.urls]\nHomepage = "https://example.org"\n'
                         f'Source = "{EXAMPLE_URL}/"\n', encoding="utf-8")
    assert site.repository_url(pyproject) == EXAMPLE_URL
    pyproject.write_text(f'[project.urls]\nSource = "https://a.org/b/c"\nRepository = "{EXAMPLE_URL}"\n',
                         encoding="utf-8")
    assert site.repository_url(pyproject) == EXAMPLE_URL  # Repository first
    pyproject.write_text('[project.urls]\nRepository = "github.com/x"\n', encoding="utf-8")
    with pytest.raises(pages.SiteError, match="Repository .*https URL"):
        site.repository_url(pyproject)
    pyproject.write_text('[project\n', encoding="utf-8")
    with pytest.raises(pages.SiteError, match="cannot read"):
        site.repository_url(pyproject)


def test_index_page_is_the_landing_page_with_the_notebooks_and_the_api_in_the_sidebar():
    text = pages.index_page("# Title\n\nbody\n", ["00_a", "01_b"], "en")
    assert text.startswith("# Title\n\nbody\n")
    assert text.index(":hidden:") < text.index("00_a") < text.index("01_b") < text.index("\napi\n")
    assert ":caption: 笔记本" in pages.index_page("# T\n", ["00_a"], "zh")
    few = pages.index_page("# Title\n\nbody\n", ["00_a", "01_b"], "en", api=False)
    assert text.startswith(few) and "\napi\n" not in few  # a build of a few notebooks (only=): no API page


def test_pages_named_after_a_parent_page_sit_under_it_in_the_sidebar():
    extra = ["symptoms", "recipes", "recipes-01_a", "profiles", "profiles-captum", "profiles-peft", "atlas-timm"]
    assert pages.nested_pages(extra) == {"recipes": ["recipes-01_a"], "profiles": ["profiles-captum", "profiles-peft"]}
    landing = pages.index_page("# T\n", ["00_a"], "en", extra=extra).split("```{toctree}")[-1]
    assert all(f"\n{name}\n" in landing for name in ("symptoms", "recipes", "profiles", "atlas-timm", "api"))
    assert not any(f"\n{name}\n" in landing for name in ("recipes-01_a", "profiles-captum", "profiles-peft"))
    contents = pages.child_contents(["profiles-captum", "profiles-peft"])
    assert ":hidden:" in contents and contents.index("profiles-captum") < contents.index("profiles-peft")
    assert pages.child_contents([]) == ""


def _notebook(title: str, *cells: dict) -> dict:
    return {"cells": [{"cell_type": "markdown", "metadata": {"tags": ["lang-both"]}, "source": title}, *cells],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_each_notebook_has_a_title_a_line_and_a_picture_for_the_landing_page():
    learn = {"cell_type": "markdown", "metadata": {"tags": ["lang-en"]},
             "source": "**What you will learn**\n\n- How hooks fire: in order. And more.\n- Other things."}
    code = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": 1,
            "source": "h = x.register_hook(lambda g: g * 2)\n# model.register_forward_hook(f) in a comment\ny = 1"}
    nb = _notebook("# 99 · 新课 / New notebook", learn, code)
    assert pages.notebook_title(nb, "zh") == ("99", "新课") and pages.notebook_title(nb, "en") == ("99", "New notebook")
    assert pages.notebook_line(nb, "99_new", "en", {"99_new": {"en": "Curated."}}) == "Curated."
    assert pages.notebook_line(nb, "99_new", "en", {}) == "How hooks fire: in order."  # a new notebook: its own
    subtitled = _notebook("# 99 · 新课 / New\n\n**副标题 · A subtitle**")
    assert pages.notebook_line(subtitled, "99_new", "zh", {}) == "副标题"
    name, svg = pages.notebook_picture(nb, "99")
    assert name == "99.svg" and b"x.register_hook(lambda g: g * 2)" in svg and b"in a comment" not in svg
    figure = {**code, "outputs": [{"output_type": "display_data", "metadata": {},
                                   "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}}]}
    assert pages.notebook_picture(_notebook("# 99 · a / b", figure), "99") == ("99.png", b"\x89PNG\r\n\x1a\n")
    with pytest.raises(pages.SiteError, match="title line"):
        pages.notebook_title(_notebook("# Untitled"), "en")


def test_landing_page_fills_in_the_map_and_keeps_the_blocks_that_apply():
    template = ("# {{notebook_count}} notebooks on torch {{torch}}\n<!-- if repository -->\nrepo: {{repository}}\n"
                "<!-- end -->\n<!-- if launch -->\nlaunch\n<!-- end -->\nclone {{repository_or_placeholder}}\n"
                "{{notebook_map}}\n")
    cards = [{"name": "00_a", "number": "00", "title": "A & B", "picture": "landing/00.svg", "line": "x < y"}]
    text = pages.landing_page(template, cards, repository=EXAMPLE_URL, launch=False, torch="2.15.0", lang="en")
    assert text.startswith("# 1 notebooks on torch 2.15.0\nrepo: " + EXAMPLE_URL) and "launch" not in text
    assert f"clone {EXAMPLE_URL}" in text
    assert '<a class="hooklab-card" href="00_a.html"><img src="landing/00.svg"' in text
    assert "00 · A &amp; B" in text and "x &lt; y" in text  # escaped
    bare = pages.landing_page(template, cards, repository=None, launch=False, torch="2.15.0", lang="zh")
    assert "repo:" not in bare and "clone <仓库地址>" in bare
    with pytest.raises(pages.SiteError, match="unknown"):
        pages.landing_page("{{nope}}", cards, repository=None, launch=False, torch="2", lang="en")


def test_api_page_documents_every_public_name_in_its_group():
    names = pages.public_names()
    import hooklab  # the source's __all__ as Python sees it
    assert names == list(hooklab.__all__)
    groups = pages.api_groups()
    page = pages.api_page("en", names + ["NotInAnyGroup"], groups)
    for name in names + ["NotInAnyGroup"]:
        assert re.search(rf"^\.\. auto(class|function):: {name}$", page, re.M), name
        assert re.search(rf"^   {name}$", page, re.M), name  # in its group's autosummary table
    assert page.index(groups[0]["en"]) < page.index("HookScope") < page.index(groups[1]["en"])
    assert page.rindex("Other") < page.index(".. autoclass:: NotInAnyGroup")
    grouped = [n for g in groups for n in g["names"]]
    assert len(grouped) == len(set(grouped)), "a name is in two groups"
    assert "API 参考" in pages.api_page("zh", names, groups)
    # a class with a lowercase name (a context manager) is documented as a class, with its members
    import inspect
    classes = {n for n in names if inspect.isclass(getattr(hooklab, n))}
    assert {"capture", "intervene"} <= classes
    assert ".. autoclass:: intervene\n   :members:" in pages.api_page("en", names, groups, classes)


def test_every_notebook_has_further_reading():
    table = pages.further_reading()
    names = [p.stem for p in site.notebooks()]
    assert sorted(table) == names
    for name, links in table.items():
        assert 2 <= len(links) <= 8, name
        assert all(url.startswith("https://") for _, url in links), name
    cell = pages.further_reading_cell([("torch.Tensor.register_hook", "https://pytorch.org/x")], "zh")
    assert cell["source"].startswith("## 延伸阅读\n")
    assert "- [torch.Tensor.register_hook](https://pytorch.org/x)" in cell["source"]
    assert cell["metadata"]["tags"][0] == "lang-zh"


def test_bad_further_reading_says_what_to_fix(tmp_path):
    path = tmp_path / "fr.toml"
    path.write_text('[00_x]\nlinks = [["t", "http://insecure.example"]]\n', encoding="utf-8")
    with pytest.raises(pages.SiteError, match=r"\[00_x\] 't': the URL should start with https://"):
        pages.further_reading(path)
    path.write_text('[00_x]\nlinks = ["t"]\n', encoding="utf-8")
    with pytest.raises(pages.SiteError, match=r"\[00_x\] needs links"):
        pages.further_reading(path)


def test_a_new_notebook_without_further_reading_is_refused(tmp_path):
    (tmp_path / "notebooks").mkdir()
    nb = {"cells": [{"cell_type": "markdown", "metadata": {"tags": ["lang-both"]}, "source": "# 99 · 新 / New"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "notebooks" / "99_new.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    with pytest.raises(pages.SiteError, match=r"has no \[99_new\] table"):
        site.assemble(tmp_path / "src", "en", root=tmp_path)


def test_glossary_terms_are_read_from_notebook_00():
    nb = json.loads((ROOT / "notebooks" / "00_introduction.ipynb").read_text(encoding="utf-8"))
    terms = pages.glossary_terms(nb)
    for term in ("钩子", "句柄", "激活检查点", "累加后钩子", "保存的张量"):
        assert term in terms
    assert all(re.fullmatch(r"[\u4e00-\u9fff]{2,}", t) for t in terms)


def test_chooser_page_links_both_languages():
    page = pages.chooser_page(["zh", "en"])
    assert 'href="zh/index.html"' in page and 'href="en/index.html"' in page
    assert "<script" not in page and "http" not in page.split("<body>")[1]


# --- one real build of both languages ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built(course_site):
    """The site as `./course site` builds it, once per test run (tests/tools/conftest.py); (folder, stderr)."""
    out, log = course_site
    assert "site built" in log
    return out, log


def notebook_names():
    return [p.stem for p in site.notebooks()]


def test_build_is_quiet(built):
    _, log = built
    assert "WARNING" not in log and "ERROR" not in log, log[-3000:]


def test_every_notebook_has_a_page_in_both_languages_in_order(built):
    out, _ = built
    names = notebook_names()
    assert names and names[0].startswith("00_")
    for lang in pages.LANGS:
        for name in [*names, "index", "api", "search"]:
            assert (out / lang / f"{name}.html").is_file(), (lang, name)
        listed = [link[:-5] for link in parsed(out / lang / "index.html").links if link[:-5] in names]
        assert listed[:len(names)] == names  # the sidebar, in course order
    assert "./course test" not in (out / "en" / "index.html").read_text(encoding="utf-8")  # not the README
    chooser = parsed(out / "index.html")
    assert [a["href"] for a in chooser.anchors if "hooklab-choose" in a.get("class", "")] == \
        ["zh/index.html", "en/index.html"]


def test_every_page_links_the_same_page_in_the_other_language(built):
    out, _ = built
    for lang, other in (("zh", "en"), ("en", "zh")):
        for path in sorted((out / lang).glob("*.html")):
            links = [a for a in parsed(path).anchors if "hooklab-language-link" in a.get("class", "")]
            assert len(links) == 1, path
            assert links[0]["href"] == f"../{other}/{path.name}" and links[0]["hreflang"] == other, path
            assert (out / other / path.name).is_file(), path


def test_each_site_is_in_its_language_checker_lines_included(built):
    out, _ = built
    seen = {"zh": 0, "en": 0}
    for name in notebook_names():
        for lang in pages.LANGS:
            page = parsed(out / lang / f"{name}.html")
            for output in page.outputs:
                for line in output.split("\n"):
                    if CHECKER_LINE.match(line):
                        seen[lang] += 1
                        if lang == "en":
                            assert not HAN.search(line), (name, line)
        # no Chinese on an English page but in the cells both languages share (a glossary's Chinese column)
        nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
        shared = sum(len(HAN.findall("".join(c["source"]))) for c in nb["cells"]
                     if c["cell_type"] == "markdown" and "lang-both" in c["metadata"].get("tags", []))
        first = nb["cells"][0]  # a shared title cell is put into one language
        title = len(HAN.findall("".join(first["source"]))) if "lang-both" in first["metadata"].get("tags", []) else 0
        en_han = len(HAN.findall(parsed(out / "en" / f"{name}.html").text))
        assert en_han <= shared - title, (name, en_han, shared)
    assert seen["zh"] > 20 and seen["en"] == seen["zh"]  # the same checker lines, one language each


def test_every_figure_of_the_notebooks_is_on_its_page(built):
    out, _ = built
    for path in site.notebooks():
        nb = json.loads(path.read_text(encoding="utf-8"))
        figures = sum(1 for c in nb["cells"] for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
        for lang in pages.LANGS:
            images = [src for src in parsed(out / lang / f"{path.stem}.html").images if src.startswith("_images/")]
            assert len(images) == figures, (lang, path.name, figures, images)
            for src in images:
                assert (out / lang / src).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", src


def test_math_is_rendered_by_the_local_mathjax_and_nothing_loads_from_outside(built):
    out, _ = built
    for lang in pages.LANGS:
        page = (out / lang / "06_saved_tensor_hooks.html").read_text(encoding="utf-8")
        assert r'<span class="math notranslate nohighlight">\(y = a \cdot b\)</span>' in page
        assert "$y = a" not in page  # no raw TeX left
        assert parsed(out / lang / "06_saved_tensor_hooks.html").resources.count("_static/mathjax/tex-chtml.js") == 1
        assert (out / lang / "_static" / "mathjax" / "tex-chtml.js").stat().st_size > 100_000
        assert (out / lang / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()
        for path in (out / lang).glob("*.html"):
            external = [r for r in parsed(path).resources if re.match(r"(https?:)?//", r)]
            assert not external, (path, external)
        for js in (out / lang / "_static").glob("*.js"):  # theme scripts that would fetch from a CDN
            assert "cdn.jsdelivr" not in js.read_text(encoding="utf-8", errors="replace"), js


def test_download_and_copy_buttons(built):
    out, _ = built
    for lang in pages.LANGS:
        for name in notebook_names():
            page = parsed(out / lang / f"{name}.html")
            downloads = [a["href"] for a in page.anchors if "btn-download-source-button" in a.get("class", "")]
            assert downloads == [f"_sources/{name}.ipynb"], (lang, name, downloads)
            nb = json.loads((out / lang / downloads[0]).read_text(encoding="utf-8"))
            assert nb["metadata"]["hooklab_language"] == lang  # the one-language notebook of this site
            # opens clean in Jupyter and Colab: none of the site's label cells ("(symptom-x)=") or its further reading
            sources = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in nb["cells"]]
            assert not [t for t in sources if re.fullmatch(r"\s*\([\w-]+\)=\s*", t)], (lang, name)
            assert not any("hooklab-further-reading" in c.get("metadata", {}).get("tags", []) for c in nb["cells"])
            assert "copybutton.js" in " ".join(page.resources)
        assert (out / lang / "_static" / "copybutton.js").is_file()
        assert (out / lang / "_static" / "clipboard.min.js").is_file()


def test_every_notebook_page_ends_with_its_further_reading(built):
    out, _ = built
    table = pages.further_reading()
    for lang in pages.LANGS:
        for name in notebook_names():
            page = parsed(out / lang / f"{name}.html")
            heading = pages.TEXT[lang]["further"]
            assert heading in page.text, (lang, name)
            tail = page.links[page.links.index(table[name][0][1]):]
            assert [url for _, url in table[name]] == [u for u in tail if u.startswith("https://")][:len(table[name])]


def public_members() -> dict[str, list[str]]:
    """Class name -> its own public methods and properties, for every class in ``hooklab.__all__``."""
    import inspect

    import hooklab

    members = {}
    for name in hooklab.__all__:
        cls = getattr(hooklab, name)
        if not inspect.isclass(cls):
            continue
        own = []
        for attr in vars(cls):
            raw = inspect.getattr_static(cls, attr)
            raw = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
            if not attr.startswith("_") and (isinstance(raw, property) or inspect.isfunction(raw)):
                own.append(attr)
        members[name] = own
    return members


def test_every_public_method_and_property_has_a_docstring():
    """autodoc leaves a member without a docstring off the API page (MemoryPlan.table, which the class's own
    docstring points to, was missing)."""
    import inspect

    import hooklab

    undocumented = []
    for name, own in public_members().items():
        for attr in own:
            raw = inspect.getattr_static(getattr(hooklab, name), attr)
            raw = raw.fget if isinstance(raw, property) else getattr(raw, "__func__", raw)
            if not (raw.__doc__ or "").strip():
                undocumented.append(f"{name}.{attr}")
    assert not undocumented, f"no docstring (so not on the API page): {undocumented}"
    assert sum(map(len, public_members().values())) > 40  # the check looks at real members


def test_api_page_lists_every_public_name(built):
    out, _ = built
    for lang in pages.LANGS:
        page = parsed(out / lang / "api.html")
        for name in pages.public_names():
            assert f"hooklab.{name}" in page.ids, (lang, name)  # autodoc's entry
            assert f"#hooklab.{name}" in page.links, (lang, name)  # the autosummary table links to it
        assert pages.TEXT[lang]["api"] in page.text
        assert ">>> " in "".join(page.outputs)  # docstring examples render as code
        for cls, own in public_members().items():
            for attr in own:
                assert f"hooklab.{cls}.{attr}" in page.ids, (lang, cls, attr)  # every public method / property
        # no private type of hooklab's on the page (MemoryPlan's constructor took a list of _Option)
        assert not re.search(r"(?<![\w.])_[A-Z][a-z]\w*", page.text), re.findall(r"(?<![\w.])_[A-Z][a-z]\w*", page.text)
        assert "MemoryPlanner.plan" in page.text


def test_footer_states_the_licences(built):
    out, _ = built
    for lang, words in (("zh", "代码以"), ("en", "Code under the")):
        text = (out / lang / "01_tensor_hooks.html").read_text(encoding="utf-8")
        footer = re.search(r'<p class="hooklab-licence">(.*?)</p>', text, re.S)
        assert footer and words in footer[1] and "MIT" in footer[1] and "CC BY 4.0" in footer[1], lang
        for href in re.findall(r'href="([^"]+)"', footer[1]):
            assert href.startswith("https://") or (out / lang / href).is_file(), href


REPO_BUTTONS = ("btn-source-repository-button", "btn-source-edit-button", "Binder", "Colab")


def repository_buttons(page: Path) -> dict[str, bool]:
    text = page.read_text(encoding="utf-8")
    return {button: button in text for button in REPO_BUTTONS}


def install_cell(notebook: Path) -> str:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    first_code = next(c for c in cells if c["cell_type"] == "code")
    assert "hooklab-install" in first_code["metadata"]["tags"]
    return "".join(first_code["source"])


def test_repository_and_launch_buttons_follow_the_repository_url_both_ways(built, tmp_path):
    out, _ = built
    configured = site.configured_repository(ROOT / "pyproject.toml")
    page = out / "en" / "01_tensor_hooks.html"
    assert repository_buttons(page) == {**{b: bool(configured) for b in REPO_BUTTONS}, "Colab": False}
    # without a URL, the downloaded notebook's first cell says how to install hooklab from a clone
    assert 'pip install -e \\".[course]\\"' in install_cell(out / "en" / "_sources" / "01_tensor_hooks.ipynb")
    # the other way: a build with a URL (as the publishing workflow gives it) and the launch copies' branch
    other = None if configured else EXAMPLE_URL
    result = site.build(tmp_path / "site", langs=("zh",), repository=other, launch_branch="launch",
                        commit="0123456789abcdef0123456789abcdef01234567", only=["01_tensor_hooks"], timeout=300)
    warnings = [line for line in result["output"]["zh"].splitlines() if "WARNING" in line]
    assert not [w for w in warnings if "myst.xref_missing" not in w]  # links to the notebooks left out, only
    flipped = tmp_path / "site" / "zh" / "01_tensor_hooks.html"
    assert repository_buttons(flipped) == {b: bool(other) for b in REPO_BUTTONS}
    if other:
        text = flipped.read_text(encoding="utf-8")
        assert f"{EXAMPLE_URL}/edit/main/notebooks/01_tensor_hooks.ipynb" in text  # edit: the source notebook
        # launch: this language's launch copy on the launch branch (tools/launch/copies.py, pushed by pages.yml)
        assert ("https://mybinder.org/v2/gh/example-owner/hooklab/launch?urlpath=lab/tree/zh/01_tensor_hooks.ipynb"
                in text)
        assert ("https://colab.research.google.com/github/example-owner/hooklab/blob/launch/zh/01_tensor_hooks.ipynb"
                in text)
        # every label of the Chinese page's buttons is Chinese, but for names (Binder, Colab) and file types
        labels = re.findall(r'<span class="btn__text-container">([^<]*)</span>', text)
        tooltips = re.findall(r'<a [^>]*class="btn[^"]*"[^>]*title="([^"]*)"', text)
        english = [t for t in labels + tooltips if re.search(r"[A-Za-z]{3,}", t.replace("Binder", "")
                   .replace("Colab", "").replace("reveal.js", "")) and not HAN.search(t) and not t.startswith(".")]
        assert {"仓库", "报告问题", "建议修改"} <= set(labels) and not english, (labels, english)
        cell = install_cell(tmp_path / "site" / "zh" / "_sources" / "01_tensor_hooks.ipynb")
        assert f'"hooklab @ git+{EXAMPLE_URL}@0123456789abcdef0123456789abcdef01234567"' in cell
        index = (tmp_path / "site" / "zh" / "index.html").read_text(encoding="utf-8")
        assert "btn-source-edit-button" not in index  # the landing page is generated: nothing to edit
        landing = parsed(tmp_path / "site" / "zh" / "index.html")
        assert f"git clone {EXAMPLE_URL} hooklab" in landing.text and f"{EXAMPLE_URL}/issues" in landing.links
        assert "Colab" in landing.text  # how to launch: said only where there are launch copies


def test_landing_page_maps_every_notebook_with_a_line_and_a_picture(built):
    out, _ = built
    names = notebook_names()
    for lang in pages.LANGS:
        page = parsed(out / lang / "index.html")
        cards = [a["href"][:-5] for a in page.anchors if "hooklab-card" in a.get("class", "")]
        assert cards == names, lang  # every notebook present, in order (15 and 16 as they land)
        pictures = [src for src in page.images if src.startswith("landing/")]
        assert len(pictures) == len(names), lang
        for src in pictures:
            data = (out / lang / src).read_bytes()
            assert data.startswith(b"\x89PNG") or data.startswith(b"<svg"), src
        text = page.text
        assert "./course lab" in text and "pip install" in text and pages.TEXT[lang]["api"] in text
        for name in names:
            nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
            assert pages.notebook_title(nb, lang)[1] in text, (lang, name)
    # the English landing page is English (but for the name of the button to the Chinese site)
    assert not HAN.search(parsed(out / "en" / "index.html").text.replace("中文", ""))
    assert len(HAN.findall(parsed(out / "zh" / "index.html").text)) > 500


def test_chinese_site_interface_is_chinese(built):
    out, _ = built
    page = (out / "zh" / "01_tensor_hooks.html").read_text(encoding="utf-8")
    titles = set(re.findall(r'title="([^"]*)"', page))
    for english in ("Link to this heading", "Color mode", "Toggle primary sidebar", "Toggle secondary sidebar",
                    "Print to PDF", "列印成 PDF", "Search"):
        assert english not in titles, english
    assert {"链接到本节标题", "颜色模式", "显示或隐藏目录栏", "打印为 PDF"} <= titles
    assert 'placeholder="搜索本课程……"' in page
    # the search page's own strings are in hooklab-search.js, in both languages (it reads <html lang>)
    js = (out / "zh" / "_static" / "hooklab-search.js").read_text(encoding="utf-8")
    assert "找到 ${n} 个页面。" in js and "没有找到包含这些词的页面" in js


def test_downloaded_notebooks_start_with_the_install_cell(built):
    out, _ = built
    for lang in pages.LANGS:
        for name in notebook_names():
            nb = json.loads((out / lang / "_sources" / f"{name}.ipynb").read_text(encoding="utf-8"))
            assert nb["metadata"]["kernelspec"]["name"] == "python3"  # Colab, Binder, any Jupyter
            assert "import hooklab" not in install_cell(out / lang / "_sources" / f"{name}.ipynb")
            assert "hooklab-install" not in (out / lang / f"{name}.html").read_text(encoding="utf-8")  # not shown


# --- the search index, the anchors, the classroom files ---------------------------------------------------------

def test_heading_ids_come_from_the_heading_text_without_the_section_number():
    assert pages.heading_id("1. 梯度累积：每个微批次里钩子看到什么") == "梯度累积-每个微批次里钩子看到什么"
    assert pages.heading_id("12. 梯度累积：每个微批次里钩子看到什么") == pages.heading_id("1. 梯度累积：每个微批次里钩子看到什么")
    assert pages.heading_id("3.2 `register_hook` 与 Hook order") == "register_hook-与-hook-order"
    assert pages.heading_id("？") == "section"


def test_extra_pages_are_in_the_page_list_the_sidebar_and_the_language_link_use():
    assert site.site_pages(["00_a", "01_b"]) == ["index", "00_a", "01_b", *site.extra_pages(), "api"]
    assert [p for p in site.site_pages(["00_a"]) if p.startswith("atlas-")] == ["atlas-transformers", "atlas-diffusers", "atlas-timm", "atlas-torchvision"]
    assert "api" not in site.site_pages(["00_a"], api=False)
    assert all(callable(write) for write in site.EXTRA_PAGES.values())
    page = site.EXTRA_PAGES["symptoms"](ROOT, "en", [p.stem for p in site.notebooks()])
    assert page.startswith("# Symptom index")


def test_each_site_has_a_pagefind_index_of_its_pages_and_the_search_page_asks_it(built):
    out, _ = built
    for lang, code in (("zh", "zh-cn"), ("en", "en")):
        folder = out / lang / "pagefind"
        assert (folder / "pagefind.js").is_file() and (folder / "wasm.unknown.pagefind").is_file(), lang
        entry = json.loads((folder / "pagefind-entry.json").read_text(encoding="utf-8"))
        assert list(entry["languages"]) == [code], entry  # one language per site, from <html lang>
        assert entry["languages"][code]["page_count"] == len(site.site_pages(notebook_names())), entry
        search = parsed(out / lang / "search.html")
        assert "_static/hooklab-search.js" in search.resources
        assert not [r for r in search.resources if "searchtools" in r or "searchindex" in r], search.resources
        assert not (out / lang / "searchindex.js").exists()  # Sphinx's own index is not shipped


def test_each_site_ships_course_asks_places_with_links_that_land(built):
    """The search page ranks a learner's own words with _static/hooklab-ask.json (tools/site/ask_index.py): every
    symptom and section of course.ask's index is in it, with its terms, and its link names a page and an element
    of that page in this language's site (a section's anchor as the site makes it from the heading)."""
    from hooklab.course.asking import LEARNER_KINDS, _index

    out, _ = built
    wanted = {e["id"] for e in _index()[0] if e["kind"] in LEARNER_KINDS and e.get("page")}
    for lang in ("zh", "en"):
        assert "_static/hooklab-ask.js" in parsed(out / lang / "search.html").resources
        index = json.loads((out / lang / "_static" / "hooklab-ask.json").read_text(encoding="utf-8"))
        assert {p["id"] for p in index["places"]} == wanted, lang
        assert len(index["idf"]) == len(index["vocabulary"]) and index["average"] > 0
        dead = []
        for place in index["places"]:
            assert place["terms"] and len(place["terms"]) % 2 == 0, place["id"]
            path, _, anchor = place["link"].partition("#")
            if not (out / lang / path).is_file() or (anchor and anchor not in parsed(out / lang / path).ids):
                dead.append(place["link"])
        assert dead == [], (lang, dead)


def test_every_link_course_ask_gives_opens_the_place_it_names(built):
    """Every entry of course.ask's shipped index, of every kind (a matrix cell, a recipe, a profile as much as a
    symptom or a section), answers with a link (``Hit.site_link``, what ``Hit.url`` puts after the site's address) to
    a page of this language's built site and, where the link has an anchor, to an element of that page with that
    id: a link whose anchor is missing opens the top of the page (the matrix page is megabytes long)."""
    from hooklab.course import asking

    out, _ = built
    entries = [e for e in asking._index()[0] if e.get("page")]
    assert {e["kind"] for e in entries} == set(asking.KINDS)
    checked, dead = 0, []
    for entry in entries:
        for lang in ("zh", "en"):
            link = asking.hit(entry).site_link(lang)
            path, _, anchor = link.partition("#")
            page = out / path
            if not page.is_file():
                dead.append((entry["id"], link, "no such page"))
            elif anchor and urllib.parse.unquote(anchor) not in parsed(page).ids:
                dead.append((entry["id"], link, "no element with that id"))
            checked += 1
    assert dead == [], (len(dead), dead[:10])
    assert checked == 2 * len(entries) and sum(e["kind"] == "matrix" for e in entries) > 600


def test_chinese_section_anchors_are_the_heading_text(built):
    """Chinese section anchors were positional (#id5: a heading added before moved them all): each is now its
    heading's text (heading_id), unique in the page; the English ones are docutils' (also from the text)."""
    out, _ = built
    checked = 0
    for name in notebook_names():
        text = (out / "zh" / f"{name}.html").read_text(encoding="utf-8")
        sections = re.findall(r'<section id="([^"]+)">\s*(?:<span id="[^"]*"></span>)*<h([1-6])>(.*?)'
                              r'<a class="headerlink"', text, re.S)
        assert sections, name
        for anchor, _, heading in sections:
            title = html.unescape(re.sub(r"<[^>]+>", "", heading)).strip()
            assert re.fullmatch(re.escape(pages.heading_id(title)) + r"(-\d+)?", anchor), (name, anchor, title)
            checked += 1
        assert not re.search(r'<section id="id\d+"', text), name
    assert checked > 150


def test_symptom_index_rows_have_anchors_and_the_layout_class(built):
    """Every row of the symptom page (tools/messages/symptoms.py writes ``(row-<symptom>)=`` or ``(msg-<message>)=`` before
    the row's heading) is a section whose own anchor is that target, in both languages (on the Chinese site the
    anchor made from the heading's text stands beside it), with the class the site's stylesheet lays out for a phone
    and for print; a symptom's row links to the cell it names in that notebook's page, a message's row to the cell
    that explains it. Notebook 00's copy of the index is a table: each row's anchor is named after the cell it links
    to."""
    out, _ = built
    names = notebook_names()
    for lang in pages.LANGS:
        source = site.EXTRA_PAGES["symptoms"](ROOT, lang, names)
        targets = re.findall(r"^\(((?:row|msg)-[\w-]+)\)=$", source, re.M)
        text = (out / lang / "symptoms.html").read_text(encoding="utf-8")
        sections = [(dict(re.findall(r'(\w+)="([^"]*)"', attrs)), body) for attrs, body in
                    re.findall(r"<section\b([^>]*)>(.*?)(?=<section\b|</section>)", text, re.S)]
        rows = [(a["id"], a.get("class", "").split(), body) for a, body in sections
                if re.match(r"(row|msg)-", a.get("id", ""))]
        assert len(targets) > 300 and [r[0] for r in rows] == targets, lang  # each row once, in the page's order
        assert all("hooklab-symptom-row" in classes for _, classes, _ in rows), lang
        assert "hooklab-symptom-index" in sections[0][0].get("class", "").split(), lang
        linked = 0
        for row, _, body in rows:
            links = re.findall(r'href="(\d\d_\w+\.html)#([^"]+)"', body)
            if row.startswith("row-"):
                assert (links[0][1] if links else None) == f"symptom-{row[4:]}", (lang, row)
            for page, anchor in links[:1]:
                assert f'id="{anchor}"' in (out / lang / page).read_text(encoding="utf-8"), (lang, row, page, anchor)
                linked += 1
        assert linked > 200, (lang, linked)
        text = (out / lang / "00_introduction.html").read_text(encoding="utf-8")
        assert len(re.findall(r'<table class="[^"]*\bhooklab-symptoms\b', text)) == 1, lang
        rows = re.findall(r'<tr class="row-(?:even|odd)" id="symptom-row-([\w-]+)">', text)
        links = re.findall(r'href="\d\d_\w+\.html#symptom-([\w-]+)"', text)
        assert rows and rows == links, lang  # one anchor per row, named after the cell it links to


def test_each_hook_matrix_cell_has_its_key_as_an_anchor(built):
    """The matrix page tells the reader to search for a cell's key (``forward-hook@compile``): the row that names it
    has the key as its anchor (tools/site/conf.py), for each of the matrix's cells, once."""
    out, _ = built
    cells = json.loads((ROOT / "docs" / "hook_matrix.json").read_text(encoding="utf-8"))["cells"]
    for lang in pages.LANGS:
        text = (out / lang / "hook_matrix.html").read_text(encoding="utf-8")
        anchors = [a for a in map(html.unescape, re.findall(r'<tr\b[^>]*\bid="([^"]+)"', text)) if "@" in a]
        assert sorted(anchors) == sorted(cells), lang  # Sphinx writes the @ as &#64;


def test_every_notebook_page_links_its_slides_and_handout_in_the_site(built):
    out, _ = built
    for lang in pages.LANGS:
        assert (out / lang / "slides" / "_vendor" / "reveal.js" / "dist" / "reveal.js").is_file()
        assert (out / lang / "handouts" / "_vendor" / "mathjax" / "tex-svg.js").is_file()
        for name in notebook_names():
            page = parsed(out / lang / f"{name}.html")
            for folder in ("slides", "handouts"):
                link = f"{folder}/{lang}/{name}.html"
                assert link in page.links, (lang, name, folder)
                target = (out / lang / link).read_text(encoding="utf-8")
                nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
                assert pages.notebook_title(nb, lang)[1] in target, (lang, link)  # this language's deck / handout
            labels = "".join(a.get("title", "") for a in page.anchors)
            assert ("幻灯片" in labels) == (lang == "zh"), (lang, name)



def test_a_busy_machine_makes_the_build_slow_never_a_failure_and_a_hang_is_named(monkeypatch):
    """The build's limits are what an idle machine needs, stretched by the load (tools/site/build.py's
    wait_stretched): a step that needs 3 s passes a 1 s limit at a load factor of 10; at a load factor of 1 it is
    taken for a hang, killed, and the error says what it waited for, how long and under what load."""
    import subprocess
    import sys
    import time

    def sleeper():
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3); print('done')"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    monkeypatch.setattr(site, "load_factor", lambda: 10.0)
    assert site.wait_stretched(sleeper(), 1.0, time.monotonic(), "a step", tick=0.5).strip() == "done"
    monkeypatch.setattr(site, "load_factor", lambda: 1.0)
    proc = sleeper()
    with pytest.raises(site.SiteError, match=r"a step did not finish within 1 s .*load factor 1\.0.*hung"):
        site.wait_stretched(proc, 1.0, time.monotonic(), "a step", tick=0.5)
    assert proc.poll() is not None  # killed, not left running


def _local(url: str) -> bool:
    return bool(url) and not re.match(r"^(?:[a-z][a-z0-9+.-]*:|//)", url, re.I)


def test_an_old_recipe_pages_address_leads_to_where_its_recipes_are_now(built):
    """The recipes were shelved by chapter (recipes/moved.json): the page at each old notebook's address, in both
    languages, links each recipe it held to its anchor on its chapter's page (the crawl below checks the anchors)."""
    out, _ = built
    moved = json.loads((ROOT / "recipes" / "moved.json").read_text(encoding="utf-8"))
    for lang in ("zh", "en"):
        for old in moved["notebooks"]:
            assert (out / lang / f"recipes-{old}.html").is_file(), (lang, old)
        for rid, row in moved["recipes"].items():
            text = (out / lang / f"recipes-{row['was']}.html").read_text(encoding="utf-8")
            assert f'href="recipes-{row["now"]}.html#recipe-{rid}"' in text, (lang, rid)


def test_a_crawl_finds_no_dead_link_anchor_or_resource(built):
    """Every page of both sites, the slides and the handouts included (not the themes' files in _static/): each local link, script, stylesheet, image
    and frame names a file the site has, and each #anchor into a page is an id of that page (reveal.js's #/N slide
    addresses aside). No page asks for a file the build removed (Sphinx's searchindex.js)."""
    out, _ = built
    pages_by_path: dict[Path, Page] = {}

    def page_of(path: Path) -> Page:
        if path not in pages_by_path:
            pages_by_path[path] = Page(path)
        return pages_by_path[path]

    dead = []
    for path in sorted(out.rglob("*.html")):
        if "_static" in path.relative_to(out).parts:  # the themes' template files, copied as they are: not pages
            continue
        page = page_of(path)
        for url in page.resources + page.links:
            if not _local(url):
                continue
            target, _, anchor = url.partition("#")
            target = target.split("?")[0]
            file = (path.parent / target).resolve() if target else path
            if file.is_dir():
                file = file / "index.html"
            if not file.is_file():
                dead.append(f"{path.relative_to(out)}: {url} (no such file)")
            elif anchor and not anchor.startswith("/") and file.suffix == ".html" \
                    and not {anchor, urllib.parse.unquote(anchor)} & set(page_of(file).ids):
                # a browser looks the fragment up as written, then percent-decoded (HTML's "indicated part"), and
                # reveal.js decodes it: the decks' headings carry decoded ids (tools/classroom/slides.py)
                dead.append(f"{path.relative_to(out)}: {url} (no such anchor)")
    assert not dead, f"{len(dead)} dead links:\n" + "\n".join(dead[:40])


def test_no_chinese_page_breaks_a_line_between_two_chinese_characters(built):
    """A browser shows a line break between two Chinese characters as a space: the Chinese site's pages (the landing
    page, the notebooks, the extra pages) hold none outside code (tools/site/pages.py's join_cjk_lines)."""
    out, _ = built
    between = re.compile(r"[\u4e00-\u9fff，。、；：）][ \t]*\n[ \t]*[\u4e00-\u9fff（]")
    broken = []
    for path in sorted((out / "zh").glob("*.html")):
        page = Page(path)
        code = {piece for pre in page.pre_texts for piece in pre}  # code keeps its lines
        # one text node at a time: a line break between two elements (paragraphs, list items) shows no space
        found = next((m for piece in page.article if piece not in code for m in [between.search(piece)] if m), None)
        if found:
            broken.append(f"{path.name}: {found[0]!r}")
    assert not broken, "\n".join(broken)


def test_the_landing_pages_link_the_maintainers_manual_where_the_repository_is_known():
    """The site's "For maintainers" line: the manual (CONTRIBUTING.md, which indexes docs/maintainers/) that the
    README's sections moved to; it exists in the repository and is linked only where the repository's URL is."""
    assert (ROOT / "CONTRIBUTING.md").is_file()
    for lang in pages.LANGS:
        template = (pages.LANDING / f"{lang}.md").read_text(encoding="utf-8")
        block = template.split("<!-- if repository -->")[1].split("<!-- end -->")[0]
        assert "({{repository}}/blob/HEAD/CONTRIBUTING.md)" in block, lang
        assert "README" not in template, lang


def recipe_headings(cells: list[dict]) -> list[str]:
    """The recipes' ids in the order their headings (``## R<id> · ...``) come in these cells."""
    return [found[1] for cell in cells if cell["cell_type"] == "markdown"
            if (found := re.match(r"## R([\w-]+) ·", "".join(cell["source"])))]


def test_a_recipe_pages_download_is_its_notebook_with_the_install_cell(built):
    """A recipe page's download button gives the recipe notebook in the page's language, standalone, its first code
    cell installing what it uses (tools/launch/copies.py), not the page's MyST source."""
    from tools.recipes import pages as recipe_pages

    out, _ = built
    recipe_notebooks = recipe_pages.downloads()
    assert len(recipe_notebooks) >= 12
    for lang in pages.LANGS:
        for name, recipe in recipe_notebooks.items():
            page = parsed(out / lang / f"{name}.html")
            downloads = [a["href"] for a in page.anchors if "btn-download-source-button" in a.get("class", "")]
            assert downloads == [f"_sources/{name}.ipynb"], (lang, name, downloads)
            notebook = out / lang / downloads[0]
            nb = json.loads(notebook.read_text(encoding="utf-8"))
            assert nb["metadata"]["hooklab_language"] == lang and nb["nbformat"] == 4
            assert "pip" in install_cell(notebook)
            committed = [c for c in json.loads(recipe.read_text(encoding="utf-8"))["cells"]
                         if f"lang-{lang}" in c.get("metadata", {}).get("tags", [])]
            assert recipe_headings(nb["cells"]) == recipe_headings(committed) != []  # every recipe of the page


def test_the_matrix_page_has_no_bare_address_a_phone_cannot_break():
    """The matrix page's "source only" paragraphs held bare addresses (one unbreakable word each) that made the page
    wider than a 390 px phone; they are links named by their file now (tools/hook_matrix/page.py: linked)."""
    doc = json.loads((ROOT / "docs" / "hook_matrix.json").read_text(encoding="utf-8"))
    assert any("https://" in entry["en"] for entry in doc.get("source_only", []))  # the data has bare addresses
    for lang in pages.LANGS:
        from tools.hook_matrix import page as hook_matrix_page

        text = hook_matrix_page.page(doc, lang)
        assert re.findall(r"(?<!\]\()https?://\S+", text) == [], lang
        assert "[engine.cpp](https://github.com/pytorch/pytorch/blob/" in text
