"""The website on a phone: every kind of page (the landing page, a notebook, the hook matrix, a recipe page, a library
profile, the symptom index), in both languages, is no wider than a 390 × 844 screen: what is wider (a table, a code
block) scrolls inside its own box, and long names in headings break (tools/site/_static/hooklab-site.css).

The hook matrix page was 1,007 px wide (en) and 722 px (zh) at 390 px: 26 family headings held API names with no
place to break (``post-accumulate-grad-hook: Tensor.register_post_accumulate_grad_hook``). The same page without the
site's stylesheet is wider than the screen again: the test can fail.

The site is the one tests/tools/conftest.py builds once per test run; the browser and the server are
test_browser.py's (Debian's Chromium driven by Playwright).
"""
import pytest
from test_browser import CHROMIUM, SHOTS, browser, new_page, site  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(
    not CHROMIUM.is_file(),
    reason=f"{CHROMIUM} is missing: `./course test` installs it as root (apt-get install chromium fonts-noto-cjk)")

PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True}
# one page of each kind the site has
PAGES = ("index", "07_activation_checkpointing", "hook_matrix", "recipes-02_module_forward_hooks", "profiles-accelerate",
         "symptoms")

# How wide the document is, and what overflows its own box in the article without scrolling inside it (the innermost
# such elements: a heading or a paragraph with a word longer than the screen), to say what to fix.
WIDTH = """() => {
  const over = [...document.querySelectorAll('.bd-article *')].filter((e) => e.clientWidth > 0
      && e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX === 'visible');
  const innermost = over.filter((e) => !over.some((o) => o !== e && e.contains(o)));
  return {width: document.documentElement.clientWidth, scrollWidth: document.documentElement.scrollWidth,
          out: innermost.slice(0, 5).map((e) => `${e.tagName.toLowerCase()} (${e.scrollWidth} px in ${e.clientWidth}): `
                                                 + (e.textContent || '').trim().slice(0, 80))};
}"""


def measure(browser, base: str, lang: str, name: str, *, without_site_css: bool = False) -> dict:  # noqa: F811
    page = new_page(browser, base, **PHONE)
    try:
        page.goto(f"{base}{lang}/{name}.html")
        page.wait_for_load_state("load")
        if without_site_css:
            page.evaluate("document.querySelector('link[href*=\"hooklab-site.css\"]').remove()")
        fit = page.evaluate(WIDTH)
        if not without_site_css:
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / f"site-{lang}-{name}-phone.png"))
        assert page.errors == [], page.errors
        return fit
    finally:
        page.context.close()


@pytest.mark.timeout(900)  # may be the first to wait for the site's build
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_every_kind_of_page_fits_a_phone(site, browser, lang):  # noqa: F811
    out, base = site
    for name in PAGES:
        assert (out / lang / f"{name}.html").is_file(), name
    fits = {name: measure(browser, base, lang, name) for name in PAGES}
    assert {name: fit["width"] for name, fit in fits.items()} == dict.fromkeys(PAGES, 390)
    wide = {name: (fit["scrollWidth"], fit["out"]) for name, fit in fits.items() if fit["scrollWidth"] > fit["width"]}
    assert wide == {}, wide
    bare = measure(browser, base, lang, "hook_matrix", without_site_css=True)
    assert bare["scrollWidth"] > 390 and bare["out"], bare  # long words stick out without the stylesheet
