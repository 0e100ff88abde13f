"""The course in a real browser: headless Chromium (Debian's, installed by `./course`, driven by Playwright from the
lock; Playwright cannot download a browser of its own here).

- `./course lab`: a notebook run through JupyterLab's UI;
- `./course site` (one site per language, served by a local http.server: search needs http, not file://):
  Chinese and English search (a Chinese query lists exactly the pages that hold its words, the result line in
  Chinese), the language link keeping the reader's place, formulas typeset by the site's own MathJax, no Chinese checker line on the English
  pages, every figure of every notebook page displayed, and not one request leaving the site;
- `./course slides` and `./course handout`: the deck starts offline (reveal.js and MathJax from its folder), the
  handout prints (PDF pages, no code line cut at the margin, a page per section).

One browser per module; the site, the deck and the handout are built once per test run (tests/tools/conftest.py's
course_site, shared with test_site.py, and classroom_files, shared with test_slides.py).
Screenshots are saved under build/screenshots/.
"""
import functools
import http.server
import json
import os
import re
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from process_group import start_process_group, stop_process_group
from tools import kernelspec, workcopies

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("HOOKLAB_CHROMIUM", "/usr/bin/chromium"))
SHOTS = ROOT / "build" / "screenshots"
TOKEN = "hooklab-browser-test"
NOTEBOOK = "02_node_hooks_and_order.ipynb"  # small, with figures and Chinese cells
CJK = re.compile(r"[\u4e00-\u9fff]")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.is_file(),
    reason=f"{CHROMIUM} is missing: `./course test` installs it as root (apt-get install chromium fonts-noto-cjk)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, condition, deadline_s: float, *, interval: float = 0.25, on_timeout=lambda: ""):
    deadline = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"waited {deadline_s:.0f} s for {what}{on_timeout()}")
        time.sleep(interval)


@pytest.fixture
def lab(tmp_path):
    """`./course lab` on a free loopback port with a token; its process group is ended afterwards."""
    port = free_port()
    log_path = tmp_path / "lab.log"
    # served from a working copy, as ./course lab makes it (tools/workcopies.py): running the notebook in the lab
    # saves it, and the committed one must not change
    served = tmp_path / "notebooks"
    served.mkdir()
    (served / NOTEBOOK).write_bytes(workcopies.fresh_copy("both", ROOT / "notebooks" / NOTEBOOK))
    # this test's own JupyterLab settings: the learner's are not read or written, and every cell stays in
    # the page (no windowing) so that the test can see each one's prompt
    labconfig = tmp_path / "config" / "labconfig"
    labconfig.mkdir(parents=True)
    (labconfig / "default_setting_overrides.json").write_text(json.dumps(
        {"@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"}}), encoding="utf-8")
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTER_CONFIG_PATH=str(tmp_path / "config"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "user-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"))
    log = open(log_path, "w+")
    proc = start_process_group(
        [str(ROOT / "course"), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={TOKEN}", "--ServerApp.port_retries=0", f"--ServerApp.root_dir={served}"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    tail = lambda: f"\n--- lab log ---\n{log_path.read_text(errors='replace')[-3000:]}"  # noqa: E731

    def answers():
        if proc.poll() is not None:
            pytest.fail(f"./course lab exited with {proc.returncode}{tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={TOKEN}", timeout=5):
                return True
        except OSError:
            return False

    try:
        wait_until("JupyterLab's /api/status to answer", answers, 120, on_timeout=tail)
        yield port, log_path
    finally:
        stop_process_group(proc)
        log.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage"])  # root in containers; small /dev/shm
        try:
            yield chromium
        finally:
            chromium.close()


def rendering_fonts(page, selector: str) -> list[str]:
    """The platform fonts Chromium really used for the text of the first element matching ``selector``."""
    cdp = page.context.new_cdp_session(page)
    try:
        cdp.send("DOM.enable")
        cdp.send("CSS.enable")
        root = cdp.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
        node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        assert node, f"no element matches {selector}"
        fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
        return [f["familyName"] for f in fonts if f["glyphCount"] > 0]
    finally:
        cdp.detach()


def mark_first_chinese_paragraph(page, scope: str) -> str:
    """Give the first paragraph or heading with Chinese text under ``scope`` an id; return its selector."""
    found = page.evaluate("""(scope) => {
        const cjk = /[\\u4e00-\\u9fff]/;
        for (const el of document.querySelectorAll(scope + ' p, ' + scope + ' h1, ' + scope + ' h2')) {
            if (cjk.test(el.textContent) && el.offsetParent !== null) { el.id = 'hooklab-zh-probe'; return true; }
        }
        return false;
    }""", scope)
    assert found, f"no visible Chinese paragraph under {scope}"
    return "#hooklab-zh-probe"


def test_lab_runs_a_notebook_in_a_real_browser(lab, browser):
    port, log_path = lab
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(60_000)
    page.goto(f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK}?token={TOKEN}")
    # the notebook opens with the course's kernel already selected, and the kernel becomes idle
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    kernel_name = page.locator(".jp-NotebookPanel-toolbar .jp-Toolbar-kernelName").first
    kernel_name.wait_for(timeout=60_000)
    wait_until(f"the toolbar to show the kernel {kernelspec.DISPLAY_NAME!r}",
               lambda: kernelspec.DISPLAY_NAME in kernel_name.inner_text(), 60)
    wait_until("the kernel to become idle", lambda: page.locator(
        ".jp-Notebook-ExecutionIndicator[data-status='idle']").count() > 0, 90)
    # opening a working copy does not mark it changed (●): it carries the language_info the kernel reports, so the
    # copy stays the course's until the learner edits a cell
    tab = page.locator(f".lm-TabBar-tab[title*='{NOTEBOOK}']").first
    assert tab.count() == 1 and "jp-mod-dirty" not in (tab.get_attribute("class") or ""), tab.get_attribute("class")
    # the table of contents lists each section once (the lang-en twins' headings carry jp-toc-ignore)
    zh_headings = [line for c in json.loads((ROOT / "notebooks" / NOTEBOOK).read_text(encoding="utf-8"))["cells"]
                   if c["cell_type"] == "markdown" and c["metadata"].get("tags") in (["lang-zh"], ["lang-both"])
                   for line in "".join(c["source"]).split("\n") if re.match(r"#{1,6} ", line)]
    toc = page.locator(".jp-TableOfContents-tree .jp-tocItem-content")
    if toc.count() == 0:
        page.locator(".lm-TabBar-tab[data-id='table-of-contents']").click()
    wait_until("the table of contents to list the notebook's headings", lambda: toc.count() > 0, 30)
    entries = toc.all_inner_texts()
    assert len(entries) == len(zh_headings) and not any(re.search(r"[A-Za-z]{4,} [A-Za-z]{4,}", e) and
                                                         not re.search(r"[\u4e00-\u9fff]", e) for e in entries), entries
    # Chinese text is drawn with a CJK font (without one, every character is a tofu box)
    fonts = rendering_fonts(page, mark_first_chinese_paragraph(page, ".jp-MarkdownCell"))
    assert any("CJK" in f for f in fonts), f"Chinese text rendered with {fonts}: install fonts-noto-cjk"

    # Run > Run All Cells, through the menus
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator("li.lm-Menu-item[data-command='runmenu:run-all']").click()
    code_cells = json.loads((ROOT / "notebooks" / NOTEBOOK).read_text(encoding="utf-8"))["cells"]
    n_code = sum(1 for c in code_cells if c["cell_type"] == "code")

    prompts = []

    def all_ran():
        prompts[:] = [p.strip() for p in page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()]
        return len(prompts) == n_code and all(re.fullmatch(r"\[\d+\]:", p) for p in prompts)

    wait_until(f"all {n_code} code cells to finish ([n]: prompts)", all_ran, 240, interval=0.5,
               on_timeout=lambda: f" (prompts now: {prompts})\n--- lab log ---\n"
                                  f"{log_path.read_text(errors='replace')[-3000:]}")
    wait_until("the kernel to become idle after Run All", lambda: page.locator(
        ".jp-Notebook-ExecutionIndicator[data-status='idle']").count() > 0, 60)

    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert errors.count() == 0, errors.all_inner_texts()[:3]
    # the figures are displayed: scroll each into view and check the image decoded
    images = page.locator(".jp-RenderedImage img")
    wait_until("the notebook's figures to be drawn", lambda: images.count() >= 2, 30)
    for i in range(images.count()):
        images.nth(i).scroll_into_view_if_needed()
        width = page.evaluate("(img) => img.complete ? img.naturalWidth : 0", images.nth(i).element_handle())
        assert width > 100, f"figure {i} not displayed (naturalWidth {width})"
    page.screenshot(path=str(SHOTS / "lab-02.png"))
    log = log_path.read_text(errors="replace")
    assert "Traceback" not in log
    assert "websocket_ping_timeout" not in log and "Skipped non-installed server" not in log  # tools/lab.py


# ---------------------------------------------------------------- helpers for the static files


class Requests:
    """Every request a browser context makes; :meth:`outside` lists those that leave ``allowed``."""

    def __init__(self, context, *allowed: str):
        self.urls: list[str] = []
        self.allowed = ("data:", "blob:", "about:", *allowed)
        context.on("request", lambda request: self.urls.append(request.url))

    def outside(self) -> list[str]:
        return [url for url in self.urls if not url.startswith(self.allowed)]


def new_page(browser, *allowed: str, **options):
    """A page in a fresh context (own cookies and storage) with its requests and script errors recorded."""
    context = browser.new_context(viewport={"width": 1400, "height": 900}, **options)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.requests = Requests(context, *allowed)
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    return page


def notebook_stems() -> list[str]:
    return [p.stem for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]


def committed_figures(stem: str) -> int:
    """How many PNG figures the committed notebook shows."""
    nb = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))
    return sum("image/png" in output.get("data", {}) for cell in nb["cells"] if cell["cell_type"] == "code"
               for output in cell.get("outputs", []))


def all_images_loaded(page, selector: str = "img") -> list[int]:
    """naturalWidth of every image matching ``selector``, once each has been scrolled to and has finished loading;
    each must be shown as Playwright means visible (a box of its own, not visibility: hidden).

    One script scrolls to them all (Playwright's scroll_into_view_if_needed, a call per image, took a third of
    the time of the site's 30 pages)."""
    page.evaluate("(s) => document.querySelectorAll(s).forEach(img => img.scrollIntoView({block: 'center'}))",
                  selector)
    page.wait_for_function("(s) => [...document.querySelectorAll(s)].every(i => i.complete)", arg=selector,
                           timeout=30_000)
    images = page.evaluate("""(s) => [...document.querySelectorAll(s)].map(img => {
        const box = img.getBoundingClientRect();
        return {width: img.naturalWidth, src: img.getAttribute('src').slice(0, 80),
                shown: box.width > 0 && box.height > 0 && getComputedStyle(img).visibility !== 'hidden'}; })""",
                           selector)
    assert all(image["shown"] for image in images), (page.url, [i["src"] for i in images if not i["shown"]])
    return [image["width"] for image in images]


# ---------------------------------------------------------------- the site


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(course_site):
    """The site built once per test run (tests/tools/conftest.py), served on a free loopback port by a local
    http.server (search needs http, not file://); yields (folder, URL)."""
    out, _ = course_site
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(out)))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        yield out, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def search(page, base: str, lang: str, query: str) -> list[str]:
    """The page names (NN_name) Sphinx's search page lists for ``query`` on the ``lang`` site."""
    page.goto(f"{base}{lang}/search.html?q={urllib.parse.quote(query)}")
    # the summary under the results says "Search finished, found N pages" (or "did not match") when it is done
    page.wait_for_function("() => { const s = document.querySelector('#search-results .search-summary'); "
                           "return s && /\\d|match/.test(s.textContent); }", timeout=60_000)
    hrefs = page.eval_on_selector_all("#search-results ul.search li a", "links => links.map(a => a.href)")
    return sorted({m[1] for href in hrefs if (m := re.search(r"/(\d\d_\w+)\.html", href))})


def prose(html: str) -> str:
    """The text of a built page's article, code blocks and outputs left out."""
    article = re.search(r"<article[^>]*>(.*)</article>", html, re.S)
    body = re.sub(r"<pre.*?</pre>|<script.*?</script>", " ", article[1] if article else html, flags=re.S)
    return re.sub(r"<[^>]+>", "", body)


@pytest.mark.timeout(900)  # the first test to use the site waits for its build (course_site) on a busy 2-core machine
@pytest.mark.parametrize(("lang", "query", "must_find"), [
    ("zh", "内存", "06_saved_tensor_hooks"),
    ("en", "register_forward_hook", "03_module_forward_hooks"),
])
def test_site_search_finds_words_of_its_language(site, browser, lang, query, must_find):
    out, base = site
    page = new_page(browser, base)
    found = search(page, base, lang, query)
    containing = sorted(stem for stem in notebook_stems()
                        if query in prose((out / lang / f"{stem}.html").read_text(encoding="utf-8")))
    assert must_find in containing, f"{query!r} is not in the prose of {must_find} any more: choose another word"
    # recall: the search lists (almost) every notebook page whose prose has the word; precision: each page it
    # lists does hold the word
    missed = sorted(set(containing) - set(found))
    assert must_find in found and len(missed) <= len(containing) // 5, (found, containing)
    assert set(found) <= {s for s in notebook_stems() if query in (out / lang / f"{s}.html").read_text("utf-8")}
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"site-{lang}-search.png"))
    assert page.requests.outside() == [] and page.errors == []
    page.context.close()


@pytest.mark.timeout(900)  # as above: may be the first to wait for the site's build
@pytest.mark.parametrize("query", ["混合精度", "反向前置钩子", "Transformer 语言模型"])
def test_chinese_search_lists_exactly_the_pages_that_hold_the_words(site, browser, query):
    """In the browser, as a learner searches: a word jieba used to split (混合精度: 0 pages before), a term whose
    character pairs also stand apart on other pages (the phrase check removes those), and a title mixing English
    and Chinese. The pages listed are exactly those whose text holds the words (test_site.py's recall table
    measures every glossary term and title the same way, without a browser)."""
    from test_site import containing, found_by_query, search_index

    out, base = site
    page = new_page(browser, base)
    found = search(page, base, "zh", query)
    holding = sorted(name for name in containing(out / "zh", query) if re.match(r"\d\d_", name))
    assert holding and found == holding, (query, found, holding)
    if query == "反向前置钩子":  # the pairs alone list more pages: the check in hooklab-zh.js removed them
        assert found_by_query(search_index(out / "zh"), query) - set(holding) - {"index", "api"}
    summary = page.locator("#search-results .search-summary").inner_text()
    assert summary.startswith("搜索完成，找到") and "pages matching" not in summary, summary
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"site-zh-search-{len(query)}.png"))
    assert page.requests.outside() == [] and page.errors == []
    page.context.close()


@pytest.mark.timeout(900)  # as above
def test_the_language_link_keeps_the_readers_place(site, browser):
    _, base = site
    page = new_page(browser, base)
    page.goto(f"{base}zh/07_activation_checkpointing.html")
    sections = "article.bd-article section[id]"
    count = page.locator(sections).count()
    index = 6  # a section well down the page
    # scrolled to it once the page has settled (figures and fonts loaded late move it down): it starts near the top
    page.wait_for_function("""([selector, i]) => { const s = document.querySelectorAll(selector)[i];
        s.scrollIntoView(); const top = s.getBoundingClientRect().top;
        return document.readyState === 'complete' && top >= 0 && top < window.innerHeight / 4; }""",
                           arg=[sections, index], timeout=30_000)
    page.locator("a.hooklab-language-link").first.evaluate("a => a.click()")  # as a reader clicks, without scrolling
    page.wait_for_url(re.compile(r"/en/07_activation_checkpointing\.html#"), timeout=30_000)
    page.wait_for_load_state("load")
    assert page.locator(sections).count() == count  # the same sections in both languages
    target = page.locator(sections).nth(index)
    assert page.url.endswith("#" + target.get_attribute("id")), page.url
    top = target.evaluate("s => s.getBoundingClientRect().top")
    assert -5 <= top <= 120 and page.evaluate("window.scrollY") > 1000, (top, page.evaluate("window.scrollY"))
    # at the top of a page the link stays plain (no fragment)
    page.evaluate("window.scrollTo(0, 0)")
    page.locator("a.hooklab-language-link").first.evaluate("a => a.click()")
    page.wait_for_url(re.compile(r"/zh/07_activation_checkpointing\.html$"), timeout=30_000)
    assert page.errors == []
    page.context.close()


@pytest.mark.timeout(900)  # as above: may be the first to wait for the site's build
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_site_formulas_are_typeset(site, browser, lang):
    _, base = site
    page = new_page(browser, base)
    page.goto(f"{base}{lang}/06_saved_tensor_hooks.html")
    page.wait_for_function("() => document.querySelectorAll('article mjx-container').length >= 3", timeout=30_000)
    paragraph = page.locator("article p:has(mjx-container)").first
    paragraph.scroll_into_view_if_needed()
    text = paragraph.evaluate("p => { const c = p.cloneNode(true); c.querySelectorAll('mjx-container')"
                              ".forEach(m => m.remove()); return c.textContent; }")
    assert "$" not in text and "\\(" not in text and "\\cdot" not in text, text  # no LaTeX source left
    assert paragraph.locator("mjx-container").first.bounding_box()["width"] > 10  # drawn, not an empty box
    SHOTS.mkdir(parents=True, exist_ok=True)
    paragraph.screenshot(path=str(SHOTS / f"site-{lang}-06-formula.png"))
    assert page.requests.outside() == [] and page.errors == []
    page.context.close()


CHECKER_LINE = re.compile(r"^\[\d\d\.\d+\] ", re.M)
HAN = re.compile(r"[\u4e00-\u9fff]")


@pytest.mark.timeout(900)  # 30 pages, and may be the first to wait for the site's build
def test_every_site_page_shows_its_figures_in_its_language_and_nothing_leaves_the_site(site, browser):
    _, base = site
    page = new_page(browser, base)
    page.goto(base + "index.html")
    assert sorted(page.eval_on_selector_all("a.hooklab-choose", "a => a.map(x => x.getAttribute('href'))")) == \
        ["en/index.html", "zh/index.html"]
    english_checker_lines = 0
    for lang, other in (("zh", "en"), ("en", "zh")):
        for stem in notebook_stems():
            page.goto(f"{base}{lang}/{stem}.html")
            widths = all_images_loaded(page, "article img[src*='_images/']")
            assert len(widths) == committed_figures(stem) and all(w > 0 for w in widths), (lang, stem, widths)
            # the checker's printed lines are in the page's language only
            lines = [line for text in page.eval_on_selector_all("article pre", "p => p.map(x => x.textContent)")
                     for line in text.split("\n") if CHECKER_LINE.match(line)]
            assert all(bool(HAN.search(line)) == (lang == "zh") for line in lines), (lang, stem, lines[:4])
            english_checker_lines += len(lines) if lang == "en" else 0
            # the language link leads to the same page in the other language
            link = page.locator(f"a.hooklab-language-link[hreflang='{other}']").first
            assert link.get_attribute("href").endswith(f"{other}/{stem}.html"), link.get_attribute("href")
        if lang == "en":
            page.goto(f"{base}en/01_tensor_hooks.html")
            page.locator("article pre", has_text=CHECKER_LINE).first.scroll_into_view_if_needed()
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "site-en-01-checker.png"))
    assert english_checker_lines > 10  # the check above did look at checker output
    assert page.requests.outside() == [], page.requests.outside()[:10]
    assert len(page.requests.urls) > 100 and page.errors == []
    page.context.close()


# ---------------------------------------------------------------- slides and handouts


@pytest.mark.timeout(600)  # may be the first to wait for the decks and handouts (classroom_files)
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_slide_deck_runs_offline(classroom_files, browser, lang):
    from tools import slides

    deck = classroom_files[0] / "slides" / lang / "06_saved_tensor_hooks.html"
    nb = slides.one_language(ROOT / "notebooks" / "06_saved_tensor_hooks.ipynb", lang)
    sections = [c for c in nb["cells"] if c["cell_type"] == "markdown" and re.match(r"#{1,2} ", slides._source(c))]
    page = new_page(browser, "file://")
    page.set_viewport_size({"width": 1280, "height": 720})
    page.goto(deck.as_uri())
    page.wait_for_function("() => window.Reveal && Reveal.isReady()", timeout=30_000)
    assert page.evaluate("Reveal.getHorizontalSlides().length") == len(sections)
    total = page.evaluate("Reveal.getTotalSlides()")
    assert total > len(sections)  # sections too long for one slide go on sub-slides
    page.wait_for_selector("html[data-typeset='done']", state="attached")
    assert page.locator("mjx-container").count() >= 3  # the formulas of section 1, typeset by the local MathJax
    # nearly every slide fits the 1280 x 720 screen (the few that do not scroll)
    overflow = page.evaluate("""() => { const out = [];
        Reveal.getHorizontalSlides().forEach((h, i) => {
          const n = h.querySelectorAll(':scope > section').length || 1;
          for (let j = 0; j < n; j++) { Reveal.slide(i, j); const s = Reveal.getCurrentSlide();
                                        out.push(s.scrollHeight - s.clientHeight); } });
        return out; }""")
    assert len(overflow) == total and sum(o > 8 for o in overflow) <= 2, overflow
    # the first code slide of section 1, shown
    page.evaluate("Reveal.slide(1, 1)")
    page.wait_for_function("() => { const at = Reveal.getIndices(); return at.h === 1 && at.v === 1; }")
    page.evaluate("() => new Promise(drawn => requestAnimationFrame(() => requestAnimationFrame(drawn)))")
    if lang == "zh":
        fonts = rendering_fonts(page, mark_first_chinese_paragraph(page, ".reveal .present"))
        assert any("CJK" in f for f in fonts), f"Chinese text rendered with {fonts}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"slides-{lang}-06.png"))
    assert page.requests.outside() == [] and page.errors == []
    page.context.close()


@pytest.mark.timeout(600)  # as above
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_handout_prints(classroom_files, browser, lang, tmp_path):
    from tools import handout

    path = classroom_files[0] / "handout" / lang / "06_saved_tensor_hooks.html"
    page = new_page(browser, "file://")
    page.set_viewport_size({"width": 703, "height": 1000})  # A4's width less the handout's 12 mm margins, at 96 dpi
    # printed as `./course handout --pdf` does it (it opens the page, waits for MathJax, emulates print media)
    pdf = tmp_path / path.with_suffix(".pdf").name  # beside the test, not in the shared folder
    pages = handout.print_pdf(page, path, pdf)
    assert pages > 5 and pdf.read_bytes().startswith(b"%PDF"), pages
    # no page is left nearly empty before the first section: the title and the introduction share page 1 (a
    # markdown cell kept whole used to push the introduction to page 2, leaving the title alone)
    first_section = page.evaluate("""() => { const h = [...document.querySelectorAll('h2')][0];
        return h ? h.getBoundingClientRect().top + window.scrollY : 0; }""")
    intro_top = page.evaluate("""() => { const c = document.querySelectorAll('.jp-Cell')[1];
        return c.getBoundingClientRect().top + window.scrollY; }""")
    assert intro_top < 400 < first_section, (intro_top, first_section)  # the introduction right under the title
    widths = all_images_loaded(page)
    assert len(widths) == committed_figures("06_saved_tensor_hooks") and min(widths) > 100, widths
    assert page.locator("mjx-container").count() >= 3
    # no code line is cut at the margin: in print, each <pre> and its text end inside the printable width (without
    # wrapping, a long line widens its <pre> beyond the page, or overflows it)
    cut = page.evaluate("""() => [...document.querySelectorAll('pre')].filter(p => {
        const box = p.getBoundingClientRect(), text = document.createRange();
        text.selectNodeContents(p);
        return p.scrollWidth > p.clientWidth + 1 || box.right > document.documentElement.clientWidth + 1
               || text.getBoundingClientRect().right > box.right + 1;
      }).map(p => p.textContent.slice(0, 80))""")
    assert page.locator("pre").count() > 20 and cut == [], cut
    longest = max(len(line) for text in page.eval_on_selector_all("pre", "p => p.map(x => x.textContent)")
                  for line in text.split("\n"))
    assert longest > 90  # there are lines long enough to be cut at A4 width without wrapping
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(SHOTS / f"handout-{lang}-06-print.png"))
    # each ## section starts a new page: without that rule the same handout prints on fewer pages
    page.add_style_tag(content=".jp-Cell { break-before: auto !important; }")
    pages_unbroken = handout.pdf_pages(page.pdf(format="A4", prefer_css_page_size=True))
    sections = page.locator(".jp-Cell:has(.celltag_hooklab-page-break)").count()
    assert sections >= 5 and pages_unbroken < pages, (sections, pages_unbroken, pages)
    assert page.requests.outside() == [] and page.errors == []
    page.context.close()
