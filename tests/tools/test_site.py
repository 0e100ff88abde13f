"""`./course site`: one static site per language, built offline from the committed notebooks.

Fast tests of the assembly (settings, pages, data tables), then one real build of both languages per test
run (`./course site`: the session fixture `course_site` of tests/tools/conftest.py, shared with
test_browser.py and across xdist workers) that the other tests read: every page and figure, the
language links, Chinese and English search, math rendered by a local MathJax, download and copy buttons, the
further reading, the API page, the licence, and the repository buttons present or absent as [project.urls] says
(a second, one-language build with the opposite setting checks the other way)."""
import functools
import html.parser
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import snowballstemmer

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("course_site", ROOT / "tools" / "site.py")
site = importlib.util.module_from_spec(spec)
sys.modules["course_site"] = site
spec.loader.exec_module(site)

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


def search_index(folder: Path) -> dict:
    text = (folder / "searchindex.js").read_text(encoding="utf-8")
    return json.loads(text[text.index("(") + 1:text.rindex(")")])


def found_by_search(index: dict, word: str) -> set[str]:
    """The pages Sphinx's search (searchtools.js) lists for a one-word query: the term's pages in the text and
    titles, and for a word of more than 2 characters that is no term, the pages of the terms containing it."""
    word = word.lower()
    if re.fullmatch(r"[a-z0-9_]+", word):  # both sites stem Latin words (the index and the query)
        word = snowballstemmer.stemmer("english").stemWord(word)
    docs = index["docnames"]
    pages: set[str] = set()
    for table in (index["terms"], index["titleterms"]):
        hits = [table[word]] if word in table else []
        if not hits and len(word) > 2:
            hits = [files for term, files in table.items() if word in term]
        for files in hits:
            pages.update(docs[i] for i in ([files] if isinstance(files, int) else files))
    return pages


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> Page:
    """Each built page parsed once (the build is read-only to the tests)."""
    return Page(path)


def pages_containing(folder: Path, word: str) -> set[str]:
    return {p.stem for p in folder.glob("*.html") if p.stem not in ("search", "genindex", "py-modindex")
            and word.lower() in parsed(p).text.lower()}


# --- fast tests: the assembly ------------------------------------------------------------------------------

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
    with pytest.raises(site.SiteError, match="Repository .*https URL"):
        site.repository_url(pyproject)
    pyproject.write_text('[project\n', encoding="utf-8")
    with pytest.raises(site.SiteError, match="cannot read"):
        site.repository_url(pyproject)


def test_readme_links_to_repository_files_never_dangle():
    readme = "See [the floor](docs/matrix/floor.md), [uv](https://docs.astral.sh/uv/), [top](#x) ![f](a.png)"
    plain = site.site_readme(readme, None)
    assert plain == "See the floor, [uv](https://docs.astral.sh/uv/), [top](#x) ![f](a.png)"
    linked = site.site_readme(readme, EXAMPLE_URL)
    assert f"[the floor]({EXAMPLE_URL}/blob/main/docs/matrix/floor.md)" in linked
    assert "[uv](https://docs.astral.sh/uv/)" in linked


def test_index_page_puts_the_notebooks_and_the_api_after_the_readme():
    text = site.index_page("# Title\n\nbody\n", ["00_a", "01_b"], "en")
    assert text.startswith("# Title\n\nbody\n")
    assert text.index("## The notebooks") < text.index("00_a") < text.index("01_b") < text.index("api")
    assert "## 笔记本" in site.index_page("# T\n", ["00_a"], "zh")
    few = site.index_page("# Title\n\nbody\n", ["00_a", "01_b"], "en", api=False)
    assert text.startswith(few) and "api" not in few  # a build of a few notebooks (only=): no API page, no link


def test_api_page_documents_every_public_name_in_its_group():
    names = site.public_names()
    import hooklab  # the source's __all__ as Python sees it
    assert names == list(hooklab.__all__)
    groups = site.api_groups()
    page = site.api_page("en", names + ["NotInAnyGroup"], groups)
    for name in names + ["NotInAnyGroup"]:
        assert re.search(rf"^\.\. auto(class|function):: {name}$", page, re.M), name
        assert re.search(rf"^   {name}$", page, re.M), name  # in its group's autosummary table
    assert page.index(groups[0]["en"]) < page.index("HookScope") < page.index(groups[1]["en"])
    assert page.rindex("Other") < page.index(".. autoclass:: NotInAnyGroup")
    grouped = [n for g in groups for n in g["names"]]
    assert len(grouped) == len(set(grouped)), "a name is in two groups"
    assert "API 参考" in site.api_page("zh", names, groups)


def test_every_notebook_has_further_reading():
    table = site.further_reading()
    names = [p.stem for p in site.notebooks()]
    assert sorted(table) == names
    for name, links in table.items():
        assert 2 <= len(links) <= 8, name
        assert all(url.startswith("https://") for _, url in links), name
    cell = site.further_reading_cell([("torch.Tensor.register_hook", "https://pytorch.org/x")], "zh")
    assert cell["source"].startswith("## 延伸阅读\n")
    assert "- [torch.Tensor.register_hook](https://pytorch.org/x)" in cell["source"]
    assert cell["metadata"]["tags"][0] == "lang-zh"


def test_bad_further_reading_says_what_to_fix(tmp_path):
    path = tmp_path / "fr.toml"
    path.write_text('[00_x]\nlinks = [["t", "http://insecure.example"]]\n', encoding="utf-8")
    with pytest.raises(site.SiteError, match=r"\[00_x\] 't': the URL should start with https://"):
        site.further_reading(path)
    path.write_text('[00_x]\nlinks = ["t"]\n', encoding="utf-8")
    with pytest.raises(site.SiteError, match=r"\[00_x\] needs links"):
        site.further_reading(path)


def test_a_new_notebook_without_further_reading_is_refused(tmp_path):
    (tmp_path / "notebooks").mkdir()
    nb = {"cells": [{"cell_type": "markdown", "metadata": {"tags": ["lang-both"]}, "source": "# 99 · 新 / New"}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "notebooks" / "99_new.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    with pytest.raises(site.SiteError, match=r"has no \[99_new\] table"):
        site.assemble(tmp_path / "src", "en", root=tmp_path)


def test_glossary_terms_feed_the_chinese_word_splitter():
    nb = json.loads((ROOT / "notebooks" / "00_introduction.ipynb").read_text(encoding="utf-8"))
    terms = site.glossary_terms(nb)
    for term in ("钩子", "句柄", "激活检查点", "累加后钩子", "保存的张量"):
        assert term in terms
    assert all(re.fullmatch(r"[\u4e00-\u9fff]{2,}", t) for t in terms)


def test_chooser_page_links_both_languages():
    page = site.chooser_page(["zh", "en"])
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
    for lang in site.LANGS:
        for name in [*names, "index", "api", "search"]:
            assert (out / lang / f"{name}.html").is_file(), (lang, name)
        listed = [link[:-5] for link in parsed(out / lang / "index.html").links if link[:-5] in names]
        assert listed[:len(names)] == names  # the sidebar, in course order
    assert "快速开始 / Quick start" in (out / "en" / "index.html").read_text(encoding="utf-8")  # the README
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
        for lang in site.LANGS:
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
        for lang in site.LANGS:
            images = [src for src in parsed(out / lang / f"{path.stem}.html").images if src.startswith("_images/")]
            assert len(images) == figures, (lang, path.name, figures, images)
            for src in images:
                assert (out / lang / src).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", src


def test_chinese_search_finds_chinese_words(built):
    out, _ = built
    index = search_index(out / "zh")
    for word in ("内存", "钩子", "梯度", "反向传播", "激活检查点"):
        containing = pages_containing(out / "zh", word)
        found = found_by_search(index, word)
        assert containing, word
        missed = containing - found
        assert len(missed) <= len(containing) // 5, (word, sorted(missed))  # recall >= 80 %
    assert {"06_saved_tensor_hooks", "07_activation_checkpointing"} <= found_by_search(index, "内存")


def test_english_search_finds_api_names(built):
    out, _ = built
    for lang in site.LANGS:
        index = search_index(out / lang)
        for word in ("register_forward_hook", "saved_tensors_hooks"):
            containing = pages_containing(out / lang, word)
            assert containing and containing <= found_by_search(index, word), (lang, word)
    assert {"03_module_forward_hooks", "api"} <= found_by_search(search_index(out / "en"), "HookScope".lower())


def test_math_is_rendered_by_the_local_mathjax_and_nothing_loads_from_outside(built):
    out, _ = built
    for lang in site.LANGS:
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
    for lang in site.LANGS:
        for name in notebook_names():
            page = parsed(out / lang / f"{name}.html")
            downloads = [a["href"] for a in page.anchors if "btn-download-source-button" in a.get("class", "")]
            assert downloads == [f"_sources/{name}.ipynb"], (lang, name, downloads)
            nb = json.loads((out / lang / downloads[0]).read_text(encoding="utf-8"))
            assert nb["metadata"]["hooklab_language"] == lang  # the one-language notebook of this site
            assert "copybutton.js" in " ".join(page.resources)
        assert (out / lang / "_static" / "copybutton.js").is_file()
        assert (out / lang / "_static" / "clipboard.min.js").is_file()


def test_every_notebook_page_ends_with_its_further_reading(built):
    out, _ = built
    table = site.further_reading()
    for lang in site.LANGS:
        for name in notebook_names():
            page = parsed(out / lang / f"{name}.html")
            heading = site.TEXT[lang]["further"]
            assert heading in page.text, (lang, name)
            tail = page.links[page.links.index(table[name][0][1]):]
            assert [url for _, url in table[name]] == [u for u in tail if u.startswith("https://")][:len(table[name])]


def test_api_page_lists_every_public_name(built):
    out, _ = built
    for lang in site.LANGS:
        page = parsed(out / lang / "api.html")
        for name in site.public_names():
            assert f"hooklab.{name}" in page.ids, (lang, name)  # autodoc's entry
            assert f"#hooklab.{name}" in page.links, (lang, name)  # the autosummary table links to it
        assert site.TEXT[lang]["api"] in page.text
        assert ">>> " in "".join(page.outputs)  # docstring examples render as code


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


def test_repository_buttons_follow_project_urls_both_ways(built, tmp_path):
    out, _ = built
    configured = site.repository_url(ROOT / "pyproject.toml")
    page = out / "en" / "01_tensor_hooks.html"
    assert repository_buttons(page) == {b: bool(configured) for b in REPO_BUTTONS}
    # the other way: a build with the opposite setting (English, to keep it short)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f'[project]\nname = "hooklab"\n[project.urls]\nRepository = "{EXAMPLE_URL}"\n'
                         if not configured else '[project]\nname = "hooklab"\n', encoding="utf-8")
    other = site.repository_url(pyproject)
    result = site.build(tmp_path / "site", langs=("en",), repository=other, only=["01_tensor_hooks"],
                        timeout=300)
    warnings = [line for line in result["output"]["en"].splitlines() if "WARNING" in line]
    assert not [w for w in warnings if "myst.xref_missing" not in w]  # links to the notebooks left out, only
    flipped = tmp_path / "site" / "en" / "01_tensor_hooks.html"
    assert repository_buttons(flipped) == {b: bool(other) for b in REPO_BUTTONS}
    if other:
        text = flipped.read_text(encoding="utf-8")
        assert f"{EXAMPLE_URL}/edit/main/notebooks/01_tensor_hooks.ipynb" in text
        assert "mybinder.org/v2/gh/example-owner/hooklab/main?urlpath=lab/tree/notebooks/01_tensor_hooks.ipynb" in text
        index = (tmp_path / "site" / "en" / "index.html").read_text(encoding="utf-8")
        assert "btn-source-edit-button" not in index  # the landing page is generated: nothing to edit
        assert f"{EXAMPLE_URL}/blob/main/docs/matrix/floor.md" in index
