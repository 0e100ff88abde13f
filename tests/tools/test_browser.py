"""The main job in a real browser: `./course lab` opened in headless Chromium (Debian's, installed by `./course`,
driven by Playwright from the lock), a notebook run through the UI; and one page of the static site.

Screenshots are saved under build/browser/.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import kernelspec
import pytest
from process_group import start_process_group, stop_process_group

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("HOOKLAB_CHROMIUM", "/usr/bin/chromium"))
SHOTS = ROOT / "build" / "browser"
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


def wait_until(what: str, condition, deadline_s: float, *, interval: float = 0.5, on_timeout=lambda: ""):
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
    # served from a copy: running the notebook in the lab saves it, and the committed one must not change
    served = tmp_path / "notebooks"
    served.mkdir()
    shutil.copy2(ROOT / "notebooks" / NOTEBOOK, served / NOTEBOOK)
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


@pytest.fixture
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

    wait_until(f"all {n_code} code cells to finish ([n]: prompts)", all_ran, 240, interval=1,
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


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("browser-site") / "site"
    result = subprocess.run([str(ROOT / "course"), "site", "--out", str(out)], cwd=ROOT, capture_output=True,
                            text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def test_static_site_page_in_a_real_browser(site_dir, browser):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.set_default_timeout(30_000)
    page.goto((site_dir / "06_saved_tensor_hooks.html").as_uri())
    page.wait_for_selector(".hooklab-lang-switch button[data-lang='zh']")

    def visible(selector):
        return page.evaluate("(s) => [...document.querySelectorAll(s)].filter(e => e.offsetParent !== null).length",
                             selector)

    assert visible(".tag_lang-zh") > 0 and visible(".tag_lang-en") > 0  # both, by default
    page.click(".hooklab-lang-switch button[data-lang='zh']")
    assert visible(".tag_lang-en") == 0 and visible(".tag_lang-zh") > 20
    assert visible(".cell_output") > 0  # code and outputs stay
    fonts = rendering_fonts(page, mark_first_chinese_paragraph(page, "article"))
    assert any("CJK" in f for f in fonts), f"Chinese text rendered with {fonts}"
    page.screenshot(path=str(SHOTS / "site-06-zh.png"))
    page.click(".hooklab-lang-switch button[data-lang='en']")
    assert visible(".tag_lang-zh") == 0 and visible(".tag_lang-en") > 20
    # figures load
    widths = page.evaluate("() => [...document.querySelectorAll('img')].filter(i => i.src.includes('_images/'))"
                           ".map(i => i.naturalWidth)")
    assert len(widths) == 2 and min(widths) > 100, widths
    # the choice is remembered on the next page
    page.goto((site_dir / "01_tensor_hooks.html").as_uri())
    page.wait_for_selector(".hooklab-lang-switch button[aria-pressed='true'][data-lang='en']")
    assert visible(".tag_lang-zh") == 0
    page.screenshot(path=str(SHOTS / "site-01-en.png"))
