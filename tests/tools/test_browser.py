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
from tools.classroom import workcopies
from tools.notebooks import kernelspec

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("HOOKLAB_CHROMIUM", "/usr/bin/chromium"))
SHOTS = ROOT / "build" / "screenshots"
TOKEN = "hooklab-browser-test"
NOTEBOOK = "02_node_hooks_and_order.ipynb"  # small, with figures and Chinese cells
CJK = re.compile(r"[\u4e00-\u9fff]")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.is_file(),
    reason=f"{CHROMIUM} is missing: `./course test` installs it as root (apt-get install chromium fonts-noto-cjk)")

# The search page loads the text of every page for each query, afresh (a learner's search is a new page load): on a
# busy 2-core machine a search took about 12 s with the site's 147 pages a language (recipes 60-68 in), so the 80
# whole terms and the 148 learner queries alone took about 50 minutes of one worker. These measures run weekly
# (HOOKLAB_SEARCH=all: .github/workflows/rerun.yml, with the recipes' search); each push asks the words typed
# together, the topic and matrix cases and the pasted messages, and checks that the page's first place for every
# learner query is course.ask's (test_the_site_ranks_a_learners_words_as_course_ask_does).
FULL_SEARCH = os.environ.get("HOOKLAB_SEARCH") == "all"
weekly_search = pytest.mark.skipif(
    not FULL_SEARCH, reason="a weekly measure of the site's search: HOOKLAB_SEARCH=all runs it (the weekly CI)")


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
    # served from a working copy, as ./course lab makes it (tools/classroom/workcopies.py): running the notebook in the lab
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
    assert "websocket_ping_timeout" not in log and "Skipped non-installed server" not in log  # tools/classroom/lab.py


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
    context = browser.new_context(**{"viewport": {"width": 1400, "height": 900}, **options})
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


@pytest.fixture(scope="module")
def searched(site, browser):
    """Every case of tests/tools/search_cases.py (the whole terms with HOOKLAB_SEARCH=all) asked of the site's search
    page in the browser, once per module:
    (result of search_cases.measure, the page's outside requests and script errors)."""
    import search_cases

    out, base = site
    page = new_page(browser, base)
    result = search_cases.measure(page, base, out, whole_terms=FULL_SEARCH)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "site-search-pasted.png"))
    found = (result, page.requests.outside(), list(page.errors))
    page.context.close()
    return found


@weekly_search
@pytest.mark.timeout(1500)  # 153 searches, and may be the first to wait for the site's build
def test_search_recall_of_whole_terms_stays_at_least_as_good(searched):
    """The review's measure of Sphinx's search on this course (50 Chinese and 30 English terms): recall 1.000 zh and
    0.986 en; best page first 23 / 12, in the top 3 40 / 23. Pagefind's pages, and every page whose text holds the
    words (hooklab-search.js checks them all), keep the recall; the page built around a term comes first more often.
    Recipes 44-54 name many of the course's terms in their titles, and among pages at the same heading depth Pagefind's
    BM25 put them before the page that says the term most: 37 Chinese terms in the top 3, of the 49 with a page built
    around them; once pages at the same depth are ordered by how often they say the term, 48 (best first: 27 zh,
    17 en; in the top 3: 27 en). Pages that tie as the page built around a term (same heading, same count) are
    each its best page (search_cases.best_pages), so the figures do not depend on the order of a set."""
    from search_cases import scores

    result, outside, errors = searched
    zh = scores([r for r in result["terms"] if r["lang"] == "zh"])
    en = scores([r for r in result["terms"] if r["lang"] == "en"])
    assert zh["queries"] == 50 and en["queries"] == 30
    missed = [(r["query"], sorted(set(r["relevant"]) - set(r["listed"]))) for r in result["terms"]
              if set(r["relevant"]) - set(r["listed"])]
    assert zh["recall"] == 1.0 and en["recall"] >= 0.986, missed
    assert zh["precision (main list)"] >= 0.99 and en["precision (main list)"] >= 0.95, (zh, en)
    assert zh["best first"] >= 23 and en["best first"] >= 12 and zh["best in top 3"] >= 40, (zh, en)
    assert outside == [] and errors == [], (outside, errors)


@pytest.mark.timeout(1500)
def test_chinese_words_typed_together_find_the_pages_that_hold_them(searched):
    """混合精度钩子 and the like, as Chinese is typed (no space): Sphinx's search found 5 of their 126 pages, this one
    122 (measured)."""
    result, _, _ = searched
    found = sum(len(set(r["listed"]) & set(r["relevant"])) for r in result["together"])
    wanted = sum(len(r["relevant"]) for r in result["together"])
    assert len(result["together"]) == 12 and wanted > 100
    assert all(set(r["listed"]) & set(r["relevant"]) for r in result["together"]), result["together"]
    assert found >= 0.95 * wanted, (found, wanted)


@pytest.mark.timeout(1500)
def test_the_notebook_built_around_a_topic_comes_first(searched):
    """Sphinx ranked ties in notebook order: the notebook about gradient accumulation came 11th (en) / 6th (zh).
    When the symptom index became a heading per row, its rows' headings said 'gradient accumulation' and 保存的张量
    too, and it came before notebooks 16 (en) and 06 (zh), which hold them in a section's heading: the level of the
    heading now counts (an h2 before an h4), and all 8 come first again (measured)."""
    result, _, _ = searched
    ranks = {(r["lang"], r["query"]): r["rank"] for r in result["topic"]}
    assert all(rank == 1 for rank in ranks.values()), ranks


@pytest.mark.timeout(1500)
def test_a_pasted_message_finds_the_symptom_row_and_the_explaining_cell_first(searched):
    """22 error messages and warnings as a learner's run prints them (their names, shapes, numbers), on both sites:
    the symptom index's row and the cell that explains the message are among the first results, each a link into
    its page (or, where recipes quote the same message, after them). Measured: the row first in 40 of 44 (2nd in 4;
    with recipes 21-43 on the site, one message's row is 7th, behind recipes that quote it), the cell it names as the explanation 2nd in 40 and
    first in 4, so one of them is first in 44 of 44. Before the row named its cell, a message that the hook matrix
    page and another notebook also quote put the explaining cell 4th (06: torch.func under saved tensor hooks);
    Sphinx's search listed the cell's page in 20 of 44, first in 12, the symptom page in 7, and never pointed into
    a page. Each push asks each message on one site (the Chinese and the English in turn), the weekly run on both."""
    result, _, _ = searched
    rows = [(r["lang"], r["source"], r["row"], r["cell"]) for r in result["pasted"]]
    assert len(rows) == (44 if FULL_SEARCH else 22) and {lang for lang, *_ in rows} == {"zh", "en"}
    assert all(cell is not None and cell <= 3 for _, _, _, cell in rows), rows
    # the row among the first five; the checkpoint's "different metadata" error (07/16/14) puts it 7th in both
    # languages, behind the general row of the same message (checkpoint-recomputation-differs), its explaining cell
    # (3rd) and the recipe pages that quote that message (checkpointing-03, and since recipes 28-43 checkpointing-33)
    late = {"07/16/14: the learner's shapes, dtype and device": 7}
    far = [r for r in rows if r[2] is None or r[2] > late.get(r[1], 5)]
    assert not far, f"symptom rows past their place: {far}"
    assert sum(min(row, cell) == 1 for _, _, row, cell in rows) >= 38 * len(rows) / 44, rows


@pytest.mark.timeout(1500)
def test_the_hook_matrix_is_found_by_a_cells_key_and_by_its_names(searched, site):
    """The matrix page tells the reader to search for a cell's key (``forward-hook@compile``): on both sites the key
    lands first on the cell's row, whose anchor is the key (tools/site/conf.py), and so do the family's and the
    context's words typed together; a family's or a context's name lists the page above the line."""
    from search_cases import MATRIX

    result, _, _ = searched
    out, _ = site
    assert [(r["lang"], r["query"]) for r in result["matrix"]] == [(lang, query) for lang, query, _ in MATRIX]
    for r in result["matrix"]:
        if r["key"]:
            assert r["first"] == f"/{r['lang']}/hook_matrix.html#{r['key']}", r
            text = (out / r["lang"] / "hook_matrix.html").read_text(encoding="utf-8")
            assert f'id="{r["key"].replace("@", "&#64;")}"' in text, r
        else:
            assert r["rank"] is not None, r


def asked(site, browser, measure):
    """``measure`` (a function of tests/tools/search_cases.py) run in a new page of the built site: (its rows, the
    page's outside requests and script errors)."""
    out, base = site
    page = new_page(browser, base)
    rows = measure(page, base, out)
    found = (rows, page.requests.outside(), list(page.errors))
    page.context.close()
    return found


@pytest.fixture(scope="module")
def learner_searched(site, browser):
    """The learner's own words of tests/tools/search_cases.py (issue 56) asked of both sites, once per module."""
    import search_cases

    return asked(site, browser, search_cases.measure_learner)


@weekly_search
@pytest.mark.timeout(1500)  # 94 searches, and may be the first to wait for the site's build
def test_a_learners_own_words_find_a_useful_first_result(learner_searched):
    """Queries as learners type them, symptoms in their own words (hook not firing, grad is None after backward,
    钩子没有被调用, 显存一直涨): the first result is a notebook that teaches it, the symptom's row or cell, its kind of
    symptom or a recipe. Measured: before the site's search knew learners' words, 15 of 48 English and 19 of 46
    Chinese; with a table of learners' words scored against headings and anchors, at best 35 of 48 (73 %) and 31 of 46
    (67 %); once the first result is the course's place that course.ask ranks first (hooklab-ask.js: BM25 over each
    place's whole text, not its heading only), 44 of 48 (92 %) and 42 of 46 (91 %). The goal is 90 %: this holds
    what is reached, less two queries."""
    from search_cases import LEARNER

    # what is reached, less two queries: a new page (a recipe, a section) can take a first place that was right
    assert_useful_first(learner_searched, LEARNER, queries=40, en=42, zh=40)


def assert_useful_first(searched, cases, *, queries: int, en: int, zh: int) -> None:
    """The learner queries ``cases`` (at least ``queries`` per language) were all asked, at least ``en`` / ``zh`` of
    them have a useful first result, and the pages asked nothing outside the site and raised no script error."""
    from search_cases import learner_shares

    rows, outside, errors = searched
    shares = learner_shares(rows)
    assert len(cases["en"]) >= queries and len(cases["zh"]) >= queries
    assert shares["en"][1] == len(cases["en"]) and shares["zh"][1] == len(cases["zh"])
    missed = [(r["lang"], r["query"], r["rank"], r["first"]) for r in rows if r["rank"] != 1]
    assert shares["en"][0] >= en and shares["zh"][0] >= zh, (shares, missed)
    assert outside == [] and errors == [], (outside, errors)


@pytest.mark.timeout(1500)  # 148 rankings, and may be the first to wait for the site's build
def test_the_site_ranks_a_learners_words_as_course_ask_does(site, browser):
    """The search page's first place for a learner's own words is course.ask's (hooklab-ask.js ranks the site's copy
    of its index, tools/site/ask_index.py): for every learner query, held out or not, the browser's best place is
    ``ask(query, k=1, kinds=LEARNER_KINDS)``'s, and its link lands on an element of the built page."""
    from search_cases import LEARNER, LEARNER_HELD_OUT, targets

    from hooklab.course.asking import LEARNER_KINDS, ask

    out, base = site
    page = new_page(browser, base)
    differ, dead = [], []
    for lang in ("en", "zh"):
        page.goto(f"{base}{lang}/search.html")
        queries = [q for q, _ in LEARNER[lang] + LEARNER_HELD_OUT[lang]]
        firsts = page.evaluate("""async (queries) => {
            const index = await window.hooklabAsk.load(document.documentElement.dataset.content_root || "./");
            return queries.map((q) => { const best = window.hooklabAsk.rank(index, q)[0];
                                        return best ? [best.title, best.link] : null; }); }""", queries)
        for query, first in zip(queries, firsts, strict=True):
            python = ask(query, k=1, kinds=LEARNER_KINDS, lang=lang)
            if (first[0] if first else None) != (python[0].title(lang) if python else None):
                differ.append((lang, query, first, python[0].title(lang) if python else None))
            elif first:
                path, _, anchor = first[1].partition("#")
                if not (out / lang / path).is_file() or (anchor and anchor not in targets(out / lang / path).element):
                    dead.append((lang, query, first[1]))
    assert differ == [] and dead == [], (differ, dead)
    assert page.requests.outside() == [] and page.errors == []
    page.context.close()


@pytest.fixture(scope="module")
def held_out_searched(site, browser):
    """The held-out learner queries of tests/tools/search_cases.py (LEARNER_HELD_OUT) asked of both sites."""
    import search_cases

    return asked(site, browser, functools.partial(search_cases.measure_learner,
                                                  queries=search_cases.LEARNER_HELD_OUT))


@weekly_search
@pytest.mark.timeout(1500)  # 54 searches, and may be the first to wait for the site's build
def test_held_out_learner_words_find_a_useful_first_result(held_out_searched):
    """27 English and 27 Chinese queries in learners' own words written before the search was tuned on LEARNER's
    (issue 56) and never tuned on: whether what was tuned holds for words it did not see. Measured before that
    round: 15 of 27 English (56 %) and 15 of 27 Chinese (56 %); after it 18 of 27 (67 %) and 16 of 27 (59 %); with
    course.ask's ranking (its phrases added from LEARNER's misses only) 23 of 27 (85 %) and 22 of 27 (81 %). The
    goal is 90 %, as for LEARNER: this holds what is reached, less two queries."""
    from search_cases import LEARNER_HELD_OUT

    assert_useful_first(held_out_searched, LEARNER_HELD_OUT, queries=20, en=21, zh=20)


@pytest.fixture(scope="module")
def recipes_searched(site, browser):
    """Every recipe's queries of tests/tools/search_cases.py (issue 53) asked of its site, once per module."""
    import search_cases

    return asked(site, browser, search_cases.measure_recipes)


@pytest.mark.timeout(3000)  # about 480 searches
@pytest.mark.skipif(os.environ.get("HOOKLAB_RECIPES") != "all",
                    reason="about 480 searches: HOOKLAB_RECIPES=all runs them (the weekly CI, with every recipe)")
def test_the_sites_search_finds_each_recipe_by_its_askers_words(recipes_searched):
    """Each recipe of recipes/*.ipynb asked of the English site by the library and the asker's words (and the message,
    pasted, when there is one) and of the Chinese site by its asked_zh: the recipe's anchor or its page among the
    first three results. Measured per question (a site built before 9 of the recipes, left out): before, 127 of 206
    English (62 %) and 104 of 189 Chinese (55 %); after the learner's words (hooklab-search.js's SYNONYMS and the
    places whose headings say the same), 152 of 206 (74 %) and 131 of 189 (69 %; 143 of 206 with the asked_zh
    written since). On a site built afresh with all 215 recipes, 158 of 215 (73 %) and 149 of 215 (69 %); once each
    recipe's page says under its question the words it was asked in (the asker's words with the library, the message
    quoted, on the Chinese page its asked_zh, the API it is about: tools/recipes/pages.py), 215 of 215 English and
    214 of 215 Chinese (100 %; the pasted messages alone 51 of 63, the others putting the course's symptom row that
    explains the message first). These queries are the words now on the page, so this measures that the search finds a
    recipe by what it quotes; the held-out learner queries measure words no page was written for. The goal is 90 %
    in each language: this holds it."""
    from search_cases import recipe_found, recipe_shares

    rows, outside, errors = recipes_searched
    assert rows and all(r["on site"] for r in rows), sorted({r["recipe"] for r in rows if not r["on site"]})
    shares = recipe_shares(rows)
    misses = [(r["lang"], r["recipe"], r["query"][:80], r["first"]) for r in rows if not recipe_found(r)]
    assert shares["en"][0] >= 0.95 * shares["en"][1], (shares, misses)  # reached, less a margin for new pages
    assert shares["zh"][0] >= 0.95 * shares["zh"][1], (shares, misses)
    assert outside == [] and errors == [], (outside, errors)


@pytest.mark.timeout(900)
def test_search_details_a_character_fsdp_phrases_and_links_into_pages(site, browser):
    """One character (钩) finds pages; FSDP finds the pages that say only FSDP2; pages holding an English phrase
    come before pages holding its words apart, which follow under a line of their own; a result links to a place in
    its page that exists."""
    from search_cases import article, ask, holds, page_of

    out, base = site
    page = new_page(browser, base)
    one = ask(page, base, out / "zh", "zh", "钩")
    assert len(one["main"]) >= 15 and all("钩" in article(out / "zh" / f"{page_of(h)}.html").text for h in one["main"])
    fsdp2_only = {p.stem for p in (out / "en").glob("*.html") if "FSDP2" in article(p).text
                  and not re.search(r"FSDP(?!\d)", article(p).text)}
    found = {page_of(h) for h in ask(page, base, out / "en", "en", "FSDP")["main"]}
    assert fsdp2_only and fsdp2_only <= found, (fsdp2_only, found)
    answer = ask(page, base, out / "en", "en", "state dict")
    assert answer["main"] and answer["more"]
    assert all(holds(article(out / "en" / f"{page_of(h)}.html").text, "state dict", "en") for h in answer["main"])
    assert not any(holds(article(out / "en" / f"{page_of(h)}.html").text, "state dict", "en") for h in answer["more"])
    assert page.locator(".hooklab-search-more-note").inner_text().startswith("Other pages")
    first = ask(page, base, out / "zh", "zh", "梯度累积")["main"][0]
    assert "#" in first and page_of(first) == "16_hooks_across_training", first
    page.goto(urllib.parse.urljoin(f"{base}zh/search.html", first))
    target = page.evaluate("() => { const e = document.getElementById(decodeURIComponent(location.hash.slice(1)));"
                           " return e ? e.getBoundingClientRect().top : null; }")
    assert target is not None and -5 <= target <= 200, target
    assert page.requests.outside() == [] and page.errors == []
    page.context.close()


@pytest.mark.timeout(900)  # as above: may be the first to wait for the site's build
@pytest.mark.parametrize("query", ["混合精度", "反向前置钩子", "Transformer 语言模型"])
def test_chinese_search_lists_exactly_the_pages_that_hold_the_words(site, browser, query):
    """In the browser, as a learner searches: a word jieba used to split (混合精度: 0 pages before), a term whose
    words also stand apart on other pages, and a title mixing English and Chinese: the first list is exactly the
    pages whose text holds the words (the pages holding them apart come after it, under a line)."""
    from search_cases import ask, page_of
    from test_site import containing

    out, base = site
    page = new_page(browser, base)
    answer = ask(page, base, out / "zh", "zh", query)
    found = sorted(page_of(h) for h in answer["main"])
    holding = sorted(name for name in containing(out / "zh", query) if name not in ("search", "genindex"))
    assert holding and found == holding, (query, found, holding)
    summary = page.locator("#search-results .search-summary").inner_text()
    assert summary.startswith("找到") and "pages" not in summary, summary
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
def test_the_recipe_index_filters_its_chapters_as_the_reader_types(site, browser, lang):
    """tools/recipes/pages.py's index and hooklab-site.js: words typed in the box leave the items that hold them all,
    and hide a chapter with none left; the DeepSpeed answer filed under reinforcement learning is found under DeepSpeed
    by the libraries its line names."""
    _, base = site
    page = new_page(browser, base)
    page.goto(f"{base}{lang}/recipes.html")
    box = page.locator(".hooklab-recipe-filter input")
    visible = "() => Array.from(document.querySelectorAll('article section li')).filter(li => li.offsetParent).length"
    everything = page.evaluate(visible)
    box.fill("deepspeed generate")
    page.wait_for_function(f"() => ({visible})() < {everything}", timeout=30_000)
    shown = page.eval_on_selector_all("article section li", "lis => lis.filter(li => li.offsetParent)"
                                      ".map(li => li.textContent.toLowerCase())")
    assert shown and all("deepspeed" in t and "generate" in t for t in shown), shown
    deepspeed = page.locator("section#chapter-fsdp-deepspeed-megatron")
    assert deepspeed.is_visible() and deepspeed.locator("a[href$='#recipe-reinforcement-learning-13']").first.is_visible()
    assert not page.locator("section#chapter-rnn").is_visible()  # nothing of it left
    box.fill("")
    page.wait_for_function(f"() => ({visible})() === {everything}", timeout=30_000)
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


@pytest.mark.timeout(900)  # as above
def test_a_chinese_section_link_made_from_its_heading_lands_on_it(site, browser):
    """A shared link to a Chinese section names it by its heading's text (not #id5, which moved whenever a heading
    was added before it); the language link still lands on the same section."""
    from tools.site.pages import heading_id

    _, base = site
    page = new_page(browser, base)
    page.goto(f"{base}zh/16_hooks_across_training.html")
    anchor, title = page.evaluate("""() => { const s = document.querySelectorAll('article.bd-article section[id]')[3];
        const h = s.querySelector('h2, h3').cloneNode(true); h.querySelectorAll('a.headerlink').forEach(a => a.remove());
        return [s.id, h.textContent.trim()]; }""")
    assert re.fullmatch(re.escape(heading_id(title)) + r"(-\d+)?", anchor), (anchor, title)
    assert re.search(r"[\u4e00-\u9fff]", anchor), anchor
    page.goto(f"{base}zh/16_hooks_across_training.html#{urllib.parse.quote(anchor)}")
    page.wait_for_load_state("load")
    top = page.evaluate("(id) => document.getElementById(id).getBoundingClientRect().top", anchor)
    assert -5 <= top <= 150 and page.evaluate("window.scrollY") > 500, (anchor, top)
    page.locator("a.hooklab-language-link").first.evaluate("a => a.click()")
    page.wait_for_url(re.compile(r"/en/16_hooks_across_training\.html#"), timeout=30_000)
    index = page.evaluate("() => [...document.querySelectorAll('article.bd-article section[id]')]"
                          ".findIndex(s => '#' + s.id === location.hash)")
    assert index == 3, index  # the same section: the 4th of the page in both languages
    assert page.errors == []
    page.context.close()


# What a phone shows of the symptom page: each row (every element whose anchor is row-<symptom> or msg-<message>,
# whatever element the page makes of it) with its box and its link's, the elements that scroll sideways, and the
# text that reaches past the screen's edge or its element's box (a code block's words are measured, not its box).
PHONE_FIT = """() => {
  const width = document.documentElement.clientWidth, article = document.querySelector('article.bd-article');
  const describe = (e) => `${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}: ${e.textContent.trim().slice(0, 60)}`;
  const rows = [...article.querySelectorAll('[id^="row-"], [id^="msg-"]')].map((row) => {
    const box = row.getBoundingClientRect(), link = row.querySelector('a.reference.internal');
    const at = link && link.getBoundingClientRect();
    return {id: row.id, left: box.left, right: box.right, height: box.height,
            link: at && {left: at.left, right: at.right, width: at.width}};
  });
  const sideways = [...article.querySelectorAll('*')].filter((e) => e.scrollWidth > e.clientWidth + 1
    && /auto|scroll/.test(getComputedStyle(e).overflowX)).map((e) => `${describe(e)} (${e.scrollWidth} > ${e.clientWidth})`);
  const cut = [...article.querySelectorAll('h1, h2, h3, h4, p, li, pre, code, td, th, a')].filter((e) => {
    const text = document.createRange();
    text.selectNodeContents(e);
    const words = text.getBoundingClientRect(), box = e.getBoundingClientRect();
    return words.width > 0 && (words.right > width + 1 || words.left < -1 || box.right > width + 1
                               || (e.tagName === 'PRE' && words.right > box.right + 1));
  }).map(describe);
  return {width, rows, sideways, cut, scrollWidth: document.documentElement.scrollWidth};
}"""


def phone_misfits(fit: dict) -> list:
    """What does not fit the phone's screen in PHONE_FIT's measure (empty: everything fits)."""
    width = fit["width"]
    outside = [r["id"] for r in fit["rows"] if r["height"] <= 0 or r["left"] < 0 or r["right"] > width
               or (r["link"] and (r["link"]["width"] <= 20 or r["link"]["left"] < 0 or r["link"]["right"] > width))]
    return [*(f"row outside the screen: {row}" for row in outside), *fit["sideways"], *fit["cut"],
            *([f"the page is {fit['scrollWidth']} px wide"] if fit["scrollWidth"] > width else [])]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_symptom_index_fits_a_phone(site, browser, lang):
    """At 390 px the symptom index's table had its last column ("where") cut off (603 px of table in 358); the index
    is now a row per message or symptom, each under its own anchor (tools/messages/symptoms.py), and on a phone nothing of it
    is cut off or scrolls sideways: every row and its link lie inside the screen, the exact words and the printed
    example wrap inside their code blocks, the coverage table is a card per source; a row's anchor lands on it. The
    same measure of the page without the site's stylesheet finds the code blocks scrolling sideways and the page
    wider than the screen: the test can fail."""
    from tools.site.build import EXTRA_PAGES

    out, base = site
    source = EXTRA_PAGES["symptoms"](ROOT, lang, notebook_stems())
    targets = re.findall(r"^\(((?:row|msg)-[\w-]+)\)=$", source, re.M)
    page = new_page(browser, base, viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    page.goto(f"{base}{lang}/symptoms.html")
    fit = page.evaluate(PHONE_FIT)
    assert len(targets) > 300 and [r["id"] for r in fit["rows"]] == targets  # every row, by its anchor
    assert sum(1 for r in fit["rows"] if r["link"]) > 200
    assert phone_misfits(fit) == [], phone_misfits(fit)[:10]
    assert page.evaluate("document.querySelectorAll('table.hooklab-labelled').length") == 1  # the coverage cards
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"site-{lang}-symptoms-phone.png"))
    row = "row-pack-hook-modifies-input-in-place"
    page.goto(f"{base}{lang}/symptoms.html#{row}")
    page.wait_for_load_state("load")
    top = page.evaluate("(id) => document.getElementById(id).getBoundingClientRect().top", row)
    assert 0 <= top <= 200 and page.evaluate("window.scrollY") > 1000, top
    page.screenshot(path=str(SHOTS / f"site-{lang}-symptoms-phone-row.png"))
    assert page.requests.outside() == [] and page.errors == []
    page.evaluate("document.querySelector('link[href*=\"hooklab-site.css\"]').remove()")
    bare = phone_misfits(page.evaluate(PHONE_FIT))
    assert sum(" (" in m and m.startswith("pre") for m in bare) > 100 and any("px wide" in m for m in bare), bare[:5]
    page.context.close()


def luminance(rgb: str) -> float:
    r, g, b = (int(v) / 255 for v in re.findall(r"\d+", rgb)[:3])
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", ["06_saved_tensor_hooks", "symptoms"])
def test_printing_in_dark_mode_gives_dark_text_on_white(site, browser, tmp_path, name):
    """A reader in dark mode who printed got pale grey text on white paper (the browser drops the dark
    background): in print every text of the article is dark enough to read on white (contrast 7:1 or more). On the
    symptom index, every row's code blocks (the exact words, the printed example) wrap inside the page."""
    _, base = site
    page = new_page(browser, base)
    page.add_init_script("localStorage.setItem('theme', 'dark'); localStorage.setItem('mode', 'dark');")
    page.goto(f"{base}en/{name}.html")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    screen = page.evaluate("getComputedStyle(document.querySelector('article p')).color")
    assert luminance(screen) > 0.4  # light text on the dark screen
    page.emulate_media(media="print")
    colours = page.evaluate("""() => [...document.querySelectorAll(
        'article p, article h1, article h2, article h3, article h4, article li, article pre, article td, article code')]
        .filter(e => e.textContent.trim()).map(e => getComputedStyle(e).color)""")
    assert len(colours) > 100
    contrast = [(1.05) / (luminance(c) + 0.05) for c in colours]  # against white paper
    assert min(contrast) >= 7, sorted(set(c for c, k in zip(colours, contrast) if k < 7))
    if name == "symptoms":
        page.set_viewport_size({"width": 703, "height": 1000})  # A4's width less 12 mm margins, at 96 dpi
        blocks = page.evaluate("""() => [...document.querySelectorAll('section.hooklab-symptom-row pre')].map(p => {
            const box = p.getBoundingClientRect(), text = document.createRange();
            text.selectNodeContents(p);
            return p.scrollWidth <= p.clientWidth + 1 && text.getBoundingClientRect().right <= box.right + 1
                   && box.right <= document.documentElement.clientWidth + 1; })""")
        assert len(blocks) > 300 and all(blocks), blocks.count(False)
    pdf = page.pdf(format="A4")
    assert pdf.startswith(b"%PDF")
    (tmp_path / "dark.pdf").write_bytes(pdf)
    assert page.errors == []
    page.context.close()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_a_notebook_page_opens_its_slides_and_handout(site, browser, lang):
    """The slides and the handout are in the site (no clone needed): the notebook page's buttons open the deck,
    which starts offline, and the handout, which prints."""
    _, base = site
    page = new_page(browser, base)
    page.goto(f"{base}{lang}/06_saved_tensor_hooks.html")
    slides = page.locator(f"a[href$='slides/{lang}/06_saved_tensor_hooks.html']").first
    handout = page.locator(f"a[href$='handouts/{lang}/06_saved_tensor_hooks.html']").first
    assert slides.count() == 1 and handout.count() == 1
    here, deck, sheet = page.url, slides.get_attribute("href"), handout.get_attribute("href")
    page.goto(urllib.parse.urljoin(here, deck))
    page.wait_for_function("() => window.Reveal && Reveal.isReady()", timeout=30_000)
    assert page.evaluate("Reveal.getTotalSlides()") > 10
    page.goto(urllib.parse.urljoin(here, sheet))
    page.wait_for_selector("html[data-typeset='done']", state="attached", timeout=30_000)
    assert page.locator(".jp-Cell").count() > 20 and page.pdf(format="A4").startswith(b"%PDF")
    assert page.requests.outside() == [] and page.errors == []
    page.context.close()


# ---------------------------------------------------------------- slides and handouts


@pytest.mark.timeout(600)  # may be the first to wait for the decks and handouts (classroom_files)
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_slide_deck_runs_offline(classroom_files, browser, lang):
    from tools.classroom import slides

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
    # a link to a cell (notebook 00's symptom rows link cells) opens the slide that holds it, not slide 1
    target = next(c["id"] for c in nb["cells"][len(nb["cells"]) // 2:] if c["cell_type"] == "code")
    page = new_page(browser, "file://")
    page.goto(deck.as_uri() + f"#cell-id={target}")
    page.wait_for_function("() => window.Reveal && Reveal.isReady()", timeout=30_000)
    page.wait_for_function(f"() => Reveal.getCurrentSlide().contains(document.getElementById('cell-id={target}'))",
                           timeout=10_000)
    assert page.evaluate("Reveal.getIndices().h") > 0
    page.context.close()


@pytest.mark.timeout(600)  # as above
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_handout_prints(classroom_files, browser, lang, tmp_path):
    from tools.classroom import handout

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
