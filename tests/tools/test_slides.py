"""`./course slides` and `./course handout` without a browser: how a notebook is cut into slides, the reveal.js
fetcher (pinned, checked, offline message), and that the files written load nothing from outside their folder.

What they look like and that they work (the deck starts, the handout prints) is checked in Chromium by
tests/tools/test_browser.py, on the same files (tests/tools/conftest.py's classroom_files, built once per test run)."""
import hashlib
import html
import html.parser
import io
import json
import re
import sys
import tarfile
import urllib.error
import urllib.parse
from pathlib import Path

import pytest

import patience
from tools.classroom import handout, slides, vendor

ROOT = Path(__file__).resolve().parents[2]


def md(text, tag="lang-en"):
    return {"cell_type": "markdown", "metadata": {"tags": [tag]}, "source": text}


def code(text, outputs=()):
    return {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": text, "outputs": list(outputs)}


def stream(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


def kinds(nb):
    return [c["metadata"]["slideshow"]["slide_type"] for c in nb["cells"]]


# ---------------------------------------------------------------- cutting a notebook into slides


def test_headings_start_slides_and_what_does_not_fit_goes_below():
    nb = {"metadata": {}, "nbformat": 4, "nbformat_minor": 5, "cells": [
        md("# 06 · Title"), md("intro"),
        md("## 1. First section\nsome text"), code("x = 1", [stream("1\n")]),
        code("\n".join(f"y{i} = {i}" for i in range(8))),          # 8 lines: no longer fits with the above
        md("### 1.1 A subsection"), code("z = 3"),
        md("## 2. Second section"), code("w = 4")]}
    before = json.dumps(nb)
    planned = slides.plan_slides(nb, "en", limit=10)
    assert json.dumps(nb) == before  # the notebook itself is not changed
    assert kinds(planned) == ["slide", "-", "slide", "-", "subslide", "subslide", "-", "slide", "-"]


def test_a_long_code_cell_is_cut_at_blank_lines_and_marked_continued():
    blocks = ["\n".join(f"a{b}_{i} = {i}" for i in range(6)) for b in range(4)]   # 4 blocks of 6 lines
    source = "\n\n".join(blocks)
    nb = {"metadata": {}, "cells": [md("## Section"), code(source, [stream("done\n")])]}
    cells = slides.plan_slides(nb, "zh", limit=14)["cells"]
    parts = [c for c in cells if c["cell_type"] == "code"]
    notes = [c for c in cells if c["metadata"].get("hooklab_continued")]
    assert len(parts) == 2 and len(notes) == 1
    # nothing lost, nothing reordered, every part fits, cut between blocks
    assert "\n\n".join(p["source"] for p in parts) == source
    assert all(len(p["source"].split("\n")) <= 14 for p in parts)
    assert parts[1]["source"].startswith("a2_0 = 0")
    # the output stays with the last part; the note says which part follows, in the deck's language
    assert parts[0]["outputs"] == [] and parts[1]["outputs"] == [stream("done\n")]
    assert "续 2/2" in notes[0]["source"]
    note_at = cells.index(notes[0])
    assert kinds({"cells": cells})[note_at:note_at + 2] == ["subslide", "-"]  # note and part on one new sub-slide
    assert len({c["id"] for c in cells}) == len(cells)  # split cells get ids of their own


def test_outputs_that_do_not_fit_under_their_code_follow_on_a_slide_of_their_own():
    long_output = [stream("".join(f"row {i}\n" for i in range(10)))]
    cells = slides.split_cell(code("a = 1\nb = 2\nprint(a, b)", long_output), "en", limit=8)
    assert [c["cell_type"] for c in cells] == ["code", "markdown", "code"]
    assert cells[0]["outputs"] == [] and cells[2]["outputs"] == long_output
    assert cells[2]["metadata"]["transient"]["remove_source"] is True  # nbconvert shows the outputs alone
    assert "output of the code above" in cells[1]["source"]
    short = code("a = 1", [stream("1\n")])
    assert slides.split_cell(short, "en", limit=8) == [short]


def test_a_block_longer_than_a_slide_is_cut_by_lines():
    source = "\n".join(f"line_{i} = {i}" for i in range(30))   # no blank line at all
    parts = [c for c in slides.split_cell(code(source), "en", limit=12) if c["cell_type"] == "code"]
    assert [len(p["source"].split("\n")) for p in parts] == [12, 12, 6]
    assert "\n".join(p["source"] for p in parts) == source


def test_long_prose_is_cut_between_paragraphs_or_list_items():
    items = "\n".join(f"- item {i}: " + "word " * 30 for i in range(12))
    cells = slides.split_cell(md(items), "en", limit=10)
    prose = [c for c in cells if not c["metadata"].get("hooklab_continued")]
    assert len(prose) > 1
    assert "\n".join(c["source"] for c in prose) == items
    assert all(c["source"].startswith("- item") for c in prose)


def test_figures_count_by_their_height():
    import base64
    import struct

    png = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + struct.pack(">II", 640, 270) + b"\x08\x02\x00\x00\x00"
    figure = {"output_type": "display_data", "data": {"image/png": base64.b64encode(png).decode()}, "metadata": {}}
    assert slides.png_height(figure["data"]["image/png"]) == 270
    assert slides.output_lines(figure) == 10  # 270 px / 27 px per line


def test_sections_start_printed_pages_in_the_handout_except_the_first():
    nb = {"cells": [md("# Title"), md("## 1. One"), code("x"), md("## 2. Two"), md("text\n## not at the start")]}
    marked = handout.mark_sections(nb)
    assert ["hooklab-page-break" in c["metadata"].get("tags", []) for c in marked["cells"]] == \
        [False, False, False, True, False]
    assert "tags" not in nb["cells"][3]["metadata"] or nb["cells"][3]["metadata"]["tags"] == ["lang-en"]


def test_a_handout_of_chosen_sections_keeps_the_title_and_those_sections_only():
    nb = {"cells": [md("# 07 · Title"), md("**What you will learn**"), md("## 1. One"), code("one"),
                    md("## 4. Four <span class=\"jp-toc-ignore\"></span>"), code("four"), md("### 4.1 Part"),
                    code("four-one"), md("## 5. Five"), code("five"), md("## Summary"), md("- a"),
                    md("## Exercises"), code("course.check('07.1', None)")]}
    picked = handout.select_sections(nb, ["4", "exercises"])
    assert [handout.slides._source(c) for c in picked["cells"]] == [
        "# 07 · Title", "## 4. Four <span class=\"jp-toc-ignore\"></span>", "four", "### 4.1 Part", "four-one",
        "## Exercises", "course.check('07.1', None)"]
    assert len(nb["cells"]) == 14  # the notebook itself is untouched
    assert [handout.slides._source(c) for c in handout.select_sections(nb, ["04"])["cells"]][1] == \
        "## 4. Four <span class=\"jp-toc-ignore\"></span>"
    with pytest.raises(slides.UsageError, match="no section 9 in this notebook: choose from 1, 4, 5, summary, exercises"):
        handout.select_sections(nb, ["9"])
    zh = {"cells": [md("# 07 · 标题"), md("## 小结：清单"), md("- 甲"), md("## 练习")]}
    assert len(handout.select_sections(zh, ["summary"])["cells"]) == 3


def test_section_handouts_are_written_beside_the_whole_one(tmp_path, capsys):
    assert handout.main(["07", "--lang", "en", "--section", "4", "--section", "exercises", "--out", str(tmp_path)]) == 0
    written = capsys.readouterr().out.split()
    assert written == [str(tmp_path / "en" / "07_activation_checkpointing-s4-exercises.html")]
    html = Path(written[0]).read_text(encoding="utf-8")
    assert "Measuring on a real network" in html and "Exercises" in html and "Selective activation" not in html


def test_handout_keeps_code_cells_and_figures_whole_but_lets_prose_flow():
    css = handout.HANDOUT_CSS
    assert "img, .jp-RenderedImage, .jp-CodeCell .jp-InputArea { break-inside: avoid; }" in css
    # a markdown cell is a .jp-InputArea too: kept whole, a long "what you will learn" left page 1 with the title
    kept_whole = [sel.strip() for rule in re.findall(r"([^{}]+)\{[^}]*break-inside:\s*avoid", css)
                  for sel in rule.split(",")]
    assert ".jp-InputArea" not in kept_whole and ".jp-CodeCell .jp-InputArea" in kept_whole, kept_whole


def test_notebook_numbers():
    assert [p.name[:2] for p in slides.find_notebooks(["3", "00"])] == ["03", "00"]
    assert len(slides.find_notebooks(["all"])) == len(list((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))
    with pytest.raises(slides.UsageError, match=r"no notebook '99': give a number from 00 to \d\d, or 'all'"):
        slides.find_notebooks(["99"])


# ---------------------------------------------------------------- the reveal.js fetcher


def tarball(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def fake_package(data: bytes) -> vendor.Package:
    return vendor.Package("fake.js", "1.0.0", hashlib.sha256(data).hexdigest(), keep=("dist/", "LICENSE"),
                          drop=(".map",))


def test_fetcher_checks_the_hash_and_unpacks_only_what_a_deck_loads(tmp_path, monkeypatch):
    data = tarball({"package/dist/reveal.js": b"js", "package/dist/reveal.js.map": b"map",
                    "package/src/big.js": b"src", "package/LICENSE": b"MIT"})
    package = fake_package(data)
    (tmp_path / package.tarball).write_bytes(data)  # a copy put there by hand: used, no network
    monkeypatch.setattr(vendor.urllib.request, "urlopen", lambda *a, **k: pytest.fail("no download expected"))
    folder = vendor.ensure(package, cache=tmp_path)
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == ["LICENSE", "dist/reveal.js"]
    assert vendor.ensure(package, cache=tmp_path) == folder  # second time: the unpacked folder as it is


def test_fetcher_refuses_a_file_with_another_hash(tmp_path):
    data = tarball({"package/dist/reveal.js": b"js"})
    package = fake_package(data)
    (tmp_path / package.tarball).write_bytes(tarball({"package/dist/reveal.js": b"changed"}))
    with pytest.raises(vendor.VendorError, match="not the pinned"):
        vendor.ensure(package, cache=tmp_path)
    assert not (tmp_path / "fake.js-1.0.0").exists()


def test_fetcher_refuses_paths_outside_its_folder(tmp_path):
    data = tarball({"package/dist/../../evil.js": b"x"})
    package = fake_package(data)
    (tmp_path / package.tarball).write_bytes(data)
    with pytest.raises(vendor.VendorError, match="unsafe path"):
        vendor.ensure(package, cache=tmp_path)
    assert not (tmp_path.parent / "evil.js").exists() and not (tmp_path / "fake.js-1.0.0").exists()


def test_fetcher_offline_says_what_to_do(tmp_path, monkeypatch):
    def offline(url, timeout):
        assert timeout == 7
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setattr(vendor.urllib.request, "urlopen", offline)
    with pytest.raises(vendor.VendorError) as error:
        vendor.ensure(vendor.REVEAL, cache=tmp_path, timeout=7)
    message = str(error.value)
    assert "could not download reveal.js 4.6.1" in message and "Temporary failure" in message
    assert f"copy {vendor.REVEAL.tarball} (sha256 {vendor.REVEAL.sha256})" in message
    assert f"into {tmp_path}/" in message
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_the_pin_is_the_layout_nbconvert_reveal_template_loads():
    """nbconvert's reveal template loads dist/reveal.js, dist/reveal.css, dist/theme/*.css, plugin/notes/notes.js:
    reveal.js 4's layout; its own default (a CDN URL) names the major version it is written for."""
    import nbconvert

    template = (Path(sys.prefix) / "share/jupyter/nbconvert/templates/reveal/index.html.j2").read_text()
    for path in ("/dist/reveal.js", "/dist/reveal.css", "/plugin/notes/notes.js", "/dist/theme/"):
        assert path in template
    assert "reveal.js@4." in template and vendor.REVEAL.version.startswith("4.")
    assert nbconvert.__version__.startswith("7.")


# ---------------------------------------------------------------- the files written


class Resources(html.parser.HTMLParser):
    def __init__(self, text):
        super().__init__()
        self.urls = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script" and attrs.get("src"):
            self.urls.append(attrs["src"])
        if tag == "link" and attrs.get("href"):
            self.urls.append(attrs["href"])
        if tag == "img" and not attrs.get("src", "").startswith("data:"):
            self.urls.append(attrs.get("src", ""))


@pytest.mark.timeout(400)  # may be the first to wait for the decks and handouts (classroom_files)
def test_deck_and_handout_load_only_files_in_their_folder(classroom_files):
    out, printed = classroom_files  # `./course slides 06` and `./course handout 6 --lang en --lang zh` (conftest.py)
    for tool, langs in (("slides", ["zh", "en"]), ("handout", ["en", "zh"])):
        pages = [out / tool / lang / "06_saved_tensor_hooks.html" for lang in langs]
        assert printed[tool] == [str(page) for page in pages]  # the files written, in the order of --lang
        for lang, page in zip(langs, pages):
            text = page.read_text(encoding="utf-8")
            assert f'<html lang="{lang}">' in text  # the page's language, for fonts and screen readers
            urls = Resources(text).urls
            assert urls, "no script or style sheet found"
            for url in urls:
                assert not url.startswith(("http:", "https:", "//")), url
                assert (page.parent / url).resolve().is_file(), f"{url} is missing from the output folder"
            if lang == "en":
                assert "保存" not in text  # one language: the English deck/handout holds no Chinese prose
            assert 'href="07_activation_checkpointing.html' in text  # links to other notebooks: their own page
    # every # / ## heading that starts a cell made a slide; the deck holds one <section> per slide and one per
    # (sub-)slide in it (nbconvert nests them)
    nb = slides.one_language(ROOT / "notebooks" / "06_saved_tensor_hooks.ipynb", "en")
    headings = [c for c in nb["cells"] if c["cell_type"] == "markdown" and re.match(r"#{1,2} ", slides._source(c))]
    planned = kinds(slides.plan_slides(nb, "en"))
    assert planned.count("slide") == len(headings) > 5
    deck = (out / "slides" / "en" / "06_saved_tensor_hooks.html").read_text(encoding="utf-8")
    assert deck.count("<section") == 2 * planned.count("slide") + planned.count("subslide")


def test_bad_input_gets_a_clear_message(tmp_path, capsys):
    # slides.py's main() in this process; handout.py as the real command, which also runs slides.py's set-up of
    # the import path (handout imports it) and `sys.exit(main())` (each command line imports hooklab and nbconvert
    # anew: ~7 s of CPU)
    assert slides.main(["42", "--out", str(tmp_path)]) == 2
    stderr = capsys.readouterr().err
    assert "no notebook '42'" in stderr and "Traceback" not in stderr
    assert not any(tmp_path.iterdir())
    result = patience.run([sys.executable, "-m", "tools.classroom.handout", "6", "--lang", "fr"], cwd=ROOT,
                          what="python -m tools.classroom.handout to refuse --lang fr", seconds=120)
    assert result.returncode == 2 and "invalid choice: 'fr'" in result.stderr and "Traceback" not in result.stderr


def test_docstring_examples_run():
    """The tools' docstring examples (pytest collects doctests under hooklab/, not tools/)."""
    import doctest

    for module in (slides, handout, vendor):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module.__name__
    assert doctest.testmod(slides).attempted >= 4  # they did run


def unresolved_links(deck: str) -> list[str]:
    """The deck's links within itself (``href="#..."``) that reveal.js cannot open: it looks a named link up with
    ``document.getElementById(decodeURIComponent(fragment))``."""
    ids = {html.unescape(found) for found in re.findall(r'\bid="([^"]*)"', deck)}
    return [fragment for fragment in re.findall(r'href="#([^"/][^"]*)"', deck)
            if urllib.parse.unquote(html.unescape(fragment)) not in ids]


def test_a_percent_encoded_heading_id_is_found_as_revealjs_looks_it_up():
    nbconvert_wrote = '<h2 id="%E5%B0%8F%E7%BB%93">小结<a class="anchor-link" href="#%E5%B0%8F%E7%BB%93">¶</a></h2>'
    assert unresolved_links(nbconvert_wrote) == ["%E5%B0%8F%E7%BB%93"]  # the check can fail: the link did not open
    assert unresolved_links(slides.decoded_ids(nbconvert_wrote)) == []
    quoted = '<h2 id="a%22b%26c">x</h2><a href="#a%22b%26c">'  # what the decoded text holds is escaped in the attribute
    assert slides.decoded_ids(quoted).startswith('<h2 id="a&quot;b&amp;c">') and unresolved_links(
        slides.decoded_ids(quoted)) == []


@pytest.mark.timeout(400)  # may be the first to wait for the decks and handouts (classroom_files)
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_every_heading_link_of_a_deck_opens_its_heading(classroom_files, lang):
    """Every heading's ¶ link (and every other link within the deck) names an element id as reveal.js looks it up; in
    the Chinese decks the headings' ids were percent-encoded and their links opened nothing (slides.decoded_ids)."""
    out, _ = classroom_files
    deck = (out / "slides" / lang / "06_saved_tensor_hooks.html").read_text(encoding="utf-8")
    anchors = re.findall(r'<a class="anchor-link" href="#([^"]*)"', deck)
    assert len(anchors) > 10
    if lang == "zh":
        assert sum("%E" in a for a in anchors) > 5  # Chinese headings, named percent-encoded as a browser sends them
    assert unresolved_links(deck) == []
