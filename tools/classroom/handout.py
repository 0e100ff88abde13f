"""`./course handout NN [NN ...|all] [--lang zh|en] [--section S ...] [--out DIR] [--pdf]`: a printable handout.

    ./course handout 06               # build/handouts/zh/06_saved_tensor_hooks.html and build/handouts/en/...
    ./course handout 06 --lang en --pdf   # also build/handouts/en/06_saved_tensor_hooks.pdf (A4, via Chromium)
    ./course handout 07 --section 4 --section exercises --pdf   # one section and the exercises: a few pages
                                      # (07_activation_checkpointing-s4-exercises.html / .pdf)

A handout is one page of print-ready HTML per notebook and language (the one-language export of
:mod:`hooklab.course.export`, nbconvert's HTML exporter), with code and outputs as committed (nothing is
executed): each ``##`` section starts on a new printed page, long code lines wrap instead of being cut at the
margin, figures are inside the page, formulas are typeset by MathJax from the output folder, and Chinese text
uses a CJK font. Open it in a browser and print (Ctrl+P, "Save as PDF"), or give --pdf to have headless
Chromium (the one the browser tests use) write the PDF. Everything works offline.

``--section`` keeps the title and the chosen ``##`` sections only (a number N is the section headed "## N. ...";
``summary`` and ``exercises`` are the notebook's closing sections): a handout for one lesson of a class rather than
the whole notebook (notebook 07 whole: about 40 A4 pages).

Why not nbconvert's ``WebPDFExporter`` (``--to webpdf``), which also prints HTML with Playwright's Chromium: it
launches only the Chromium that Playwright downloads (``playwright install chromium``, or its
``--allow-chromium-download``), with no way to name the system's browser, which is the one this project installs
(Playwright cannot download its own here); it waits a fixed ``page_render_timeout`` instead of for MathJax to finish
typesetting; and it prints either one tall page or the browser's default pages, without A4 pages, page numbers or the
``##`` page breaks. The HTML is nbconvert's (its HTML exporter); only the printing is done here, in a few lines.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from hooklab.course.notebook import LANGS, NotebookError

from . import (
    slides,  # shared: finding notebooks, the one-language export, MathJax, links
    vendor,
)

ROOT = Path(__file__).resolve().parents[2]

CHROMIUM = Path(os.environ.get("HOOKLAB_CHROMIUM", "/usr/bin/chromium"))
HEADING = {"zh": "PyTorch 钩子动手课 · 讲义", "en": "PyTorch hooks, hands-on · handout"}

HANDOUT_TEMPLATE = r"""{%- extends 'index.html.j2' -%}
{# nbconvert's lab template, with no script from a CDN: MathJax from the handout's folder, no require.js #}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
""" + slides.OFFLINE_HEAD + r"""
{%- block body_header -%}
{{ super() }}
<header class="hooklab-handout-header">{{ resources.hooklab.heading | e }}</header>
{%- endblock body_header -%}
"""

HANDOUT_CSS = """
:root {
  --jp-content-font-family: system-ui, -apple-system, "Segoe UI", "Noto Sans CJK SC", "Source Han Sans SC",
                            "PingFang SC", "Microsoft YaHei", sans-serif;
  --jp-code-font-family: "DejaVu Sans Mono", "Noto Sans Mono CJK SC", Menlo, Consolas, monospace;
  --jp-content-font-size1: 11pt;
  --jp-code-font-size: 9pt;
}
body { max-width: 190mm; margin: 0 auto; padding: 0 4mm; }
.hooklab-handout-header { font-family: var(--jp-content-font-family); color: #666; font-size: 9pt; border-bottom: 1px solid #ccc; margin: 8px 0 12px; }
/* code and printed output wrap at the margin instead of being cut off */
pre { white-space: pre-wrap; overflow-wrap: anywhere; word-break: break-word; overflow-x: visible; }
.jp-InputArea-editor, .jp-OutputArea-output { overflow-x: visible; }
img { max-width: 100%; height: auto; }
table { max-width: 100%; }
.jp-InputPrompt, .jp-OutputPrompt { display: none; }
.jp-InputArea, .jp-OutputArea-child { display: block; }
@page { size: A4; margin: 14mm 12mm 16mm; }
@media print {
  body { max-width: none; padding: 0; }
  /* each ## section starts a printed page (nbconvert puts the cell's tag on the markdown inside the cell) */
  .jp-Cell:has(.celltag_hooklab-page-break) { break-before: page; }
  h1, h2, h3 { break-after: avoid; }
  /* a figure or a code cell is kept on one page; prose flows (a long markdown cell kept whole would leave the
     page before it nearly empty: page 1 held the title alone) */
  img, .jp-RenderedImage, .jp-CodeCell .jp-InputArea { break-inside: avoid; }
  a { color: inherit; text-decoration: none; }
}
"""


def mark_sections(nb: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``nb`` whose markdown cells that start a ``##`` section (not the first one of the notebook)
    carry the tag ``hooklab-page-break`` (nbconvert writes a cell's tags into its class)."""
    out = json.loads(json.dumps(nb))
    seen_section = False
    for cell in out["cells"]:
        if cell.get("cell_type") != "markdown":
            continue
        first = slides._source(cell).lstrip("\n").split("\n", 1)[0]
        if first.startswith("## "):
            if seen_section:
                cell.setdefault("metadata", {}).setdefault("tags", []).append("hooklab-page-break")
            seen_section = True
    return out


_CLOSING = {"summary": ("Summary", "小结"), "exercises": ("Exercises", "练习")}


def _section_key(heading: str) -> str | None:
    """What ``--section`` calls a ``##`` heading: its number ("## 4. Measuring ..." -> "4"), or summary / exercises.

    >>> [_section_key(h) for h in ("## 4. Measuring", "## 小结：清单", "## Exercises <span>", "## The five sources")]
    ['4', 'summary', 'exercises', None]
    """
    text = heading[3:].strip()
    if match := re.match(r"(\d+)\.\s", text):
        return match[1]
    for key, words in _CLOSING.items():
        if text.startswith(words):
            return key
    return None


def select_sections(nb: dict[str, Any], sections: list[str]) -> dict[str, Any]:
    """A copy of one-language notebook ``nb`` with its title cell and the ``##`` sections named by ``sections``
    (numbers, ``summary``, ``exercises``), in the notebook's order; a name the notebook lacks is refused."""
    wanted = [s.lower().lstrip("0") or "0" if s.isdigit() else s.lower() for s in sections]
    out = json.loads(json.dumps(nb))
    kept, current, found = [], None, set()
    for index, cell in enumerate(out["cells"]):
        first = slides._source(cell).lstrip("\n").split("\n", 1)[0] if cell.get("cell_type") == "markdown" else ""
        if first.startswith("## "):
            current = _section_key(first)
            found.add(current)
        if index == 0 or (current is not None and current in wanted):
            kept.append(cell)
    missing = [s for s in wanted if s not in found]
    if missing:
        names = [k for k in dict.fromkeys(_section_key(h) for h in _headings(nb)) if k]
        raise slides.UsageError(f"no section {', '.join(missing)} in this notebook: choose from {', '.join(names)}")
    out["cells"] = kept
    return out


def _headings(nb: dict[str, Any]) -> list[str]:
    return [line for cell in nb["cells"] if cell.get("cell_type") == "markdown"
            for line in [slides._source(cell).lstrip("\n").split("\n", 1)[0]] if line.startswith("## ")]


def handout_html(nb: dict[str, Any], lang: str, *, mathjax_url: str, title: str) -> str:
    """The print-ready HTML of one-language notebook ``nb``."""
    import nbformat
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    node = nbformat.reads(json.dumps(mark_sections(nb)), as_version=4)
    node.metadata["title"] = title
    exporter = HTMLExporter(
        extra_loaders=[DictLoader({"hooklab_handout.html.j2": HANDOUT_TEMPLATE})],
        template_name="lab", template_file="hooklab_handout.html.j2", exclude_input_prompt=True,
        exclude_output_prompt=True, language_code=slides.LANGUAGE_CODE[lang], embed_images=True)
    resources = {"hooklab": {"mathjax_url": mathjax_url, "css": HANDOUT_CSS, "heading": HEADING[lang]}}
    html, _ = exporter.from_notebook_node(node, resources=resources)
    return html


def write_handout(path: Path, lang: str, out: Path, sections: list[str] | None = None) -> Path:
    """Write the handout of notebook ``path`` in ``lang`` to ``out``/<lang>/<name>.html (with ``sections``: only
    those, to <name>-s4-exercises.html); return that file."""
    slides.copy_assets(out, reveal=False)
    nb = slides.one_language(path, lang)
    title = slides.notebook_title(nb, path.stem)
    if sections:
        nb = select_sections(nb, sections)
    html = handout_html(nb, lang, mathjax_url=f"../{slides.MATHJAX_FILE}", title=title)
    suffix = "".join(f"-s{s.lstrip('0') or '0'}" if s.isdigit() else f"-{s.lower()}" for s in sections or [])
    target = out / lang / f"{path.stem}{suffix}.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(slides.link_siblings(html), encoding="utf-8")
    return target


def wait_for_math(page, timeout_ms: int = 30_000) -> None:
    """Wait until MathJax has typeset the page (the handout's MathJax set-up marks <html data-typeset="done">)."""
    page.wait_for_selector("html[data-typeset='done']", state="attached", timeout=timeout_ms)


def print_pdf(page, html: Path, pdf: Path) -> int:
    """Print ``html`` with Chromium page ``page`` into ``pdf`` (A4, page numbers); return the page count."""
    page.goto(html.as_uri())
    wait_for_math(page)
    page.emulate_media(media="print")
    data = page.pdf(path=str(pdf), format="A4", print_background=True, prefer_css_page_size=True,
                    display_header_footer=True, header_template="<span></span>",
                    footer_template='<div style="font-size:8pt;width:100%;text-align:center;color:#666">'
                                    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>')
    return pdf_pages(data)


def pdf_pages(data: bytes) -> int:
    """The number of pages of a PDF Chromium wrote (its page objects; no PDF library needed).

    >>> pdf_pages(b"<< /Type /Pages /Count 2 >> << /Type /Page >> << /Type /Page >>")
    2
    """
    import re

    return len(re.findall(rb"/Type\s*/Page(?![s\w])", data))


def write_pdfs(htmls: list[Path]) -> list[Path]:
    """A PDF beside each handout, printed by headless Chromium."""
    if not CHROMIUM.is_file():
        raise FileNotFoundError(f"--pdf needs Chromium at {CHROMIUM} (Debian/Ubuntu: sudo apt-get install chromium "
                                "fonts-noto-cjk; or set HOOKLAB_CHROMIUM); or open the .html and print it from "
                                "any browser")
    from playwright.sync_api import sync_playwright

    written = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                             args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)
            for html in htmls:
                pdf = html.with_suffix(".pdf")
                print_pdf(page, html, pdf)
                written.append(pdf)
        finally:
            browser.close()
    return written


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="./course handout", description=__doc__.split("\n\n")[0].split(": ", 1)[-1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("numbers", nargs="+", metavar="NN", help="notebook numbers (06 or 6), or 'all'")
    parser.add_argument("--lang", choices=LANGS, action="append",
                        help="language of the handout: zh or en (default: both, each in its own folder)")
    parser.add_argument("--out", default="build/handouts",
                        help="output folder; files go to OUT/<lang>/ (default: build/handouts)")
    parser.add_argument("--section", action="append", metavar="S",
                        help="only this ## section: its number (4), summary or exercises (repeatable; the title is "
                             "always kept)")
    parser.add_argument("--pdf", action="store_true", help="also print each handout to a PDF with headless Chromium")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    langs = args.lang or list(LANGS)
    try:
        paths = slides.find_notebooks(args.numbers)
        written = [write_handout(path, lang, out, args.section) for path in paths for lang in langs]
        if args.pdf:
            written += write_pdfs(written)
    except (slides.UsageError, NotebookError, vendor.VendorError, FileNotFoundError, OSError) as exc:
        print(f"[course] error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, slides.UsageError) else 1
    for path in written:
        print(path)
    print(f"[course] {len(written)} file(s) written; open a handout in a browser and print it (Ctrl+P)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
