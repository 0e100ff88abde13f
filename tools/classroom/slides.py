"""`./course slides NN [NN ...|all] [--lang zh|en] [--out DIR]`: a reveal.js slide deck of a notebook, for a class.

    ./course slides 06                # build/slides/zh/06_saved_tensor_hooks.html and build/slides/en/...
    ./course slides 06 --lang en      # the English deck only
    ./course slides all --lang zh     # every notebook

A deck shows one language (the one-language export of :mod:`hooklab.course.export`), with code and outputs as
committed: nothing is executed. Each ``#``/``##`` heading starts a slide; what does not fit on it goes on
vertical sub-slides under it (arrow down), and a code cell too long for one slide is cut at blank lines, each
later part marked "continued". Press S for the speaker view, F for full screen, Esc for the overview.

The decks work offline: the output folder holds reveal.js (fetched once, pinned, from the npm registry by
tools/classroom/vendor.py), MathJax (from the sphinx-mathjax-offline package in .venv) and the figures inside the page.
Copy the whole output folder (e.g. to a USB stick) and open <lang>/NN_x.html in any browser.
"""
from __future__ import annotations

import argparse
import base64
import copy
import json
import math
import re
import shutil
import sys
import unicodedata
from html import escape, unescape
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from hooklab.course.export import export_notebook
from hooklab.course.notebook import LANGS, NotebookError, heading_lines, read_notebook

from ..recipes import used_by
from . import vendor

ROOT = Path(__file__).resolve().parents[2]

NOTEBOOKS = ROOT / "notebooks"
VENDOR_DIR = "_vendor"                 # in the output folder, beside the <lang>/ folders
REVEAL_DIR = f"{VENDOR_DIR}/reveal.js"
MATHJAX_FILE = f"{VENDOR_DIR}/mathjax/tex-svg.js"
LINES_PER_SLIDE = 24                   # lines of code (or their height in prose, outputs, figures) on one slide
LINE_PX = 27                           # height of one line on a 1280 x 720 slide (19 px code font, 1.4 spacing)
COLUMNS = 110                          # characters of prose per line on a slide (a Chinese character counts 2)
PROSE_SPACING = 1.4                    # a line of prose is this much taller than a line of code
CONTINUED = {"zh": "（续 {part}/{parts}）", "en": "(continued, {part}/{parts})"}
OUTPUT_NOTE = {"zh": "（上面代码的输出）", "en": "(output of the code above)"}
LANGUAGE_CODE = {"zh": "zh", "en": "en"}  # ISO 639-1: nbconvert replaces anything else ("zh-CN") by "en"


class UsageError(ValueError):
    """Bad command-line input; the message says what to give instead."""


# ---------------------------------------------------------------- which notebooks


def find_notebooks(numbers: list[str], root: Path = ROOT) -> list[Path]:
    """The notebooks named by two-digit numbers (``"06"`` or ``"6"``) or ``"all"``, in course order.

    >>> [p.name for p in find_notebooks(["2", "00"])]
    ['02_node_hooks_and_order.ipynb', '00_introduction.ipynb']
    """
    available = sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if numbers == ["all"]:
        return available
    by_number = {p.name[:2]: p for p in available}
    found = []
    for number in numbers:
        key = number.zfill(2) if number.isdigit() else number
        if key not in by_number:
            raise UsageError(f"no notebook {number!r}: give a number from {min(by_number)} to {max(by_number)}, "
                             f"or 'all' (the notebooks are in {root / 'notebooks'})")
        found.append(by_number[key])
    return found


def one_language(path: Path, lang: str) -> dict[str, Any]:
    """The notebook at ``path`` in ``lang`` only (nothing executed), without the notes that name the recipes
    relying on a section (tools/recipes/used_by.py: a slide or a printed page has no recipes beside it)."""
    return used_by.without_notes(export_notebook(read_notebook(path), lang))


# ---------------------------------------------------------------- how much fits on a slide


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def text_lines(text: str, columns: int = COLUMNS) -> int:
    """Screen lines ``text`` takes when wrapped at ``columns`` (a wide, e.g. Chinese, character counts 2).

    >>> text_lines("a" * 100, 84), text_lines("钩子" * 30, 84), text_lines("x\\n\\ny", 84)
    (2, 2, 3)
    """
    total = 0
    for line in text.split("\n"):
        width = sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)
        total += max(1, math.ceil(width / columns))
    return total


def png_height(data: str) -> int:
    """Pixel height of a base64 PNG (0 when it is not one)."""
    try:
        head = base64.b64decode("".join(data.split())[:64])
    except ValueError:
        return 0
    return int.from_bytes(head[20:24], "big") if head[:8] == b"\x89PNG\r\n\x1a\n" else 0


def output_lines(output: dict[str, Any]) -> int:
    """Screen lines one output takes on a slide (a figure by its height, shown at most a slide high)."""
    data = output.get("data", {})
    if output.get("output_type") == "stream":
        return text_lines(_source({"source": output.get("text", "")}).rstrip("\n"), 100)
    if "image/png" in data:
        height = png_height(_source({"source": data["image/png"]}))
        return min(LINES_PER_SLIDE, math.ceil(height / LINE_PX)) if height else LINES_PER_SLIDE // 2
    if "text/plain" in data:
        return text_lines(_source({"source": data["text/plain"]}).rstrip("\n"), 100)
    return 2


def cell_lines(cell: dict[str, Any]) -> int:
    """Screen lines a cell takes on a slide: its source, plus its outputs for a code cell."""
    source = _source(cell).rstrip("\n")
    if cell.get("cell_type") == "code":
        return len(source.split("\n")) + sum(output_lines(o) for o in cell.get("outputs", []))
    return math.ceil(PROSE_SPACING * text_lines(source)) + 2 * len(heading_lines(source))


# ---------------------------------------------------------------- splitting long cells


_LIST_ITEM = re.compile(r"^(?:[-*+]|\d+\.) ")


def _blocks(text: str) -> list[str]:
    """``text`` cut at blank lines and before top-level list items, outside fenced code (``` blocks stay whole);
    blank lines stay with the block before them."""
    blocks: list[str] = []
    current: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
        elif not fenced and _LIST_ITEM.match(line) and any(x.strip() for x in current):
            blocks.append("\n".join(current))  # a list may be cut between its items
            current = []
        current.append(line)
        if not fenced and not line.strip() and any(x.strip() for x in current):
            blocks.append("\n".join(current))
            current = []
    if any(x.strip() for x in current):
        blocks.append("\n".join(current))
    return blocks


def split_text(text: str, limit: int, measure) -> list[str]:
    """``text`` cut at blank lines into parts that each measure at most ``limit`` where the blocks allow (a
    block longer than ``limit`` is cut into ``limit``-line pieces).

    >>> split_text("a\\nb\\n\\nc\\nd\\n\\ne", 3, lambda t: len(t.strip().split("\\n")))
    ['a\\nb', 'c\\nd', 'e']
    """
    pieces: list[str] = []
    for block in _blocks(text):
        lines = block.rstrip("\n").split("\n")
        if measure(block) > limit and len(lines) > limit:
            pieces.extend("\n".join(lines[i:i + limit]) for i in range(0, len(lines), limit))
        else:
            pieces.append(block)
    parts: list[str] = []
    for piece in pieces:
        joined = f"{parts[-1]}\n{piece}" if parts else piece  # a block keeps the blank line after it
        if parts and measure(joined) <= limit:
            parts[-1] = joined
        else:
            parts.append(piece)
    return [p.strip("\n") for p in parts if p.strip()]


def _code_lines(text: str) -> int:
    return len(text.strip("\n").split("\n"))


def _note(text: str) -> dict[str, Any]:
    """The small grey line that starts the sub-slide of a cell's later part."""
    return {"cell_type": "markdown", "metadata": {"hooklab_continued": True},
            "source": f'<p class="hooklab-continued">{text}</p>'}


def split_cell(cell: dict[str, Any], lang: str, limit: int = LINES_PER_SLIDE) -> list[dict[str, Any]]:
    """A cell too long for one slide as several cells, each later part preceded by a small "continued" note.

    Markdown is cut between paragraphs (or list items); code at blank lines, and when the outputs do not fit
    under the code's last part they follow on a slide of their own (the code hidden there). A cell that fits
    is returned as it is (in a list)."""
    source = _source(cell)
    kind = cell.get("cell_type")
    if kind == "code":
        parts = split_text(source, limit, _code_lines) if _code_lines(source) > limit else [source]
        outputs = cell.get("outputs", [])
        own_slide = bool(outputs) and _code_lines(parts[-1]) + sum(output_lines(o) for o in outputs) > limit
        if len(parts) < 2 and not own_slide:
            return [cell]
    elif kind == "markdown":
        if cell_lines(cell) <= limit:
            return [cell]
        parts = split_text(source, limit, lambda t: cell_lines({"cell_type": "markdown", "source": t}))
        if len(parts) < 2:
            return [cell]
    else:
        return [cell]
    cells: list[dict[str, Any]] = []
    for number, part in enumerate(parts, 1):
        piece = copy.deepcopy(cell)
        piece["source"] = part
        if number > 1:
            piece.pop("id", None)  # the first piece keeps the cell's id: a link to the cell lands on it
        if kind == "code" and (number < len(parts) or own_slide):
            piece["outputs"] = []
        if number > 1:
            cells.append(_note(CONTINUED[lang].format(part=number, parts=len(parts))))
        cells.append(piece)
    if kind == "code" and own_slide:
        shown = copy.deepcopy(cell)
        shown.pop("id", None)
        shown["source"] = parts[-1]
        shown.setdefault("metadata", {}).setdefault("transient", {})["remove_source"] = True  # nbconvert: no input
        cells += [_note(OUTPUT_NOTE[lang]), shown]
    return cells


def plan_slides(nb: dict[str, Any], lang: str, limit: int = LINES_PER_SLIDE) -> dict[str, Any]:
    """A copy of one-language notebook ``nb`` with reveal.js slide metadata (the notebook is not changed).

    A markdown cell that starts with a ``#`` or ``##`` heading starts a slide; ``###`` starts a vertical
    sub-slide; any other cell goes on the current (sub-)slide while it fits ``limit`` lines, else it starts a
    sub-slide. Cells too long for a slide are split first (:func:`split_cell`).
    """
    out = copy.deepcopy(nb)
    cells: list[dict[str, Any]] = []
    for cell in out["cells"]:
        cells.extend(split_cell(cell, lang, limit))
    used = 0
    for index, cell in enumerate(cells):
        source = cell["source"] = _source(cell)
        # a cell keeps its id (the anchor a link to it names: notebook 00's symptom rows); split pieces get their own
        cell["id"] = cell.get("id") or f"hooklab-{index}"
        first = source.lstrip("\n").split("\n", 1)[0]
        level = len(first) - len(first.lstrip("#")) if cell["cell_type"] == "markdown" and heading_lines(
            source.lstrip("\n"))[:1] == [0] else 0
        height = cell_lines(cell)
        if index == 0 or level in (1, 2):
            kind = "slide"
        elif level == 3 or (used and used + height > limit):
            kind = "subslide"
        else:
            kind = "-"
        if cell["metadata"].get("hooklab_continued"):  # the note sits on the slide of the part it announces
            kind = "subslide"
        elif index and cells[index - 1]["metadata"].get("hooklab_continued"):
            kind = "-"
        cell.setdefault("metadata", {})["slideshow"] = {"slide_type": kind}
        used = height if kind != "-" else used + height
    out["cells"] = cells
    return out


# ---------------------------------------------------------------- the deck

# nbconvert template blocks shared by the deck and the handout (tools/classroom/handout.py): MathJax from the output's own
# folder (not a CDN), with <html data-typeset="done"> once every formula is drawn, and the page's CSS inline
OFFLINE_HEAD = r"""{%- block html_head_js_mathjax -%}
<script>
window.MathJax = {
  tex: {inlineMath: [['$', '$'], ['\\(', '\\)']], displayMath: [['$$', '$$'], ['\\[', '\\]']],
        processEscapes: true},
  svg: {fontCache: 'global'},
  // <html data-typeset="done"> once every formula is drawn (printing waits for it)
  startup: {pageReady: () => MathJax.startup.defaultPageReady().then(() => {
    document.documentElement.dataset.typeset = 'done'; })}
};
</script>
<script defer src="{{ resources.hooklab.mathjax_url }}"></script>
{%- endblock html_head_js_mathjax -%}
{%- block html_head_css -%}
<style type="text/css">
{{ resources.hooklab.css }}
</style>
{%- endblock html_head_css -%}"""

SLIDES_TEMPLATE = r"""{%- extends 'index.html.j2' -%}
{# nbconvert's reveal template, with every script loaded from the deck's own folder instead of a CDN #}
{%- block html_head_js -%}{%- endblock html_head_js -%}
""" + OFFLINE_HEAD + r"""
{% block footer_js %}
<script src="{{ resources.reveal.url_prefix }}/dist/reveal.js"></script>
<script src="{{ resources.reveal.url_prefix }}/plugin/notes/notes.js"></script>
<script>
// A link to a cell (NN_x.html#cell-id=...) opens the slide that holds it: reveal.js's own named links expect the
// id on a slide's own section element, and would open slide 1.
const hooklabTarget = decodeURIComponent(location.hash.slice(1));
Reveal.on('ready', () => {
  const cell = hooklabTarget && !hooklabTarget.startsWith('/') && document.getElementById(hooklabTarget);
  const slide = cell && cell.closest('section');
  if (slide) { const at = Reveal.getIndices(slide); Reveal.slide(at.h, at.v); }
});
Reveal.initialize({
  controls: true, progress: true, history: true, hash: true, center: false,
  slideNumber: 'c/t', transition: '{{ resources.reveal.transition }}',
  width: {{ resources.reveal.width }}, height: {{ resources.reveal.height }},
  plugins: [RevealNotes]
});
</script>
{% endblock footer_js %}
"""

SLIDES_CSS = """
:root { --jp-content-font-family: system-ui, -apple-system, "Segoe UI", "Noto Sans CJK SC", "Source Han Sans SC",
          "PingFang SC", "Microsoft YaHei", sans-serif; }
.reveal { font-family: var(--jp-content-font-family); }
.reveal .slides { text-align: left; }
.reveal .slides section { height: 100%; overflow-y: auto; }   /* a slide taller than the screen scrolls */
.reveal h1, .reveal h2, .reveal h3 { text-transform: none; font-family: var(--jp-content-font-family); }
.reveal h1 { font-size: 1.6em; } .reveal h2 { font-size: 1.3em; } .reveal h3 { font-size: 1.1em; }
.reveal pre { box-shadow: none; width: 100%; margin: 0; font-size: 0.9em;
              white-space: pre-wrap; overflow-wrap: anywhere; }   /* a long line wraps instead of being cut */
.reveal .jp-OutputArea-output pre { max-height: 540px; overflow: auto; }
.reveal img { max-height: 560px; }
.reveal .hooklab-continued { color: #888; font-size: 0.6em; margin: 0; text-align: right; }
.reveal table { font-size: 0.7em; }
"""


def exporter(lang: str, reveal_prefix: str):
    """nbconvert's SlidesExporter set up for an offline deck in ``lang``."""
    from jinja2 import DictLoader
    from nbconvert import SlidesExporter

    return SlidesExporter(
        extra_loaders=[DictLoader({"hooklab_slides.html.j2": SLIDES_TEMPLATE})],
        template_file="hooklab_slides.html.j2", reveal_url_prefix=reveal_prefix, reveal_theme="white",
        reveal_transition="none", reveal_width="1280", reveal_height="720", exclude_input_prompt=True,
        exclude_output_prompt=True, language_code=LANGUAGE_CODE[lang])


def deck_html(nb: dict[str, Any], lang: str, *, reveal_prefix: str, mathjax_url: str, title: str) -> str:
    """The HTML of the slide deck of one-language notebook ``nb``."""
    import nbformat

    # through JSON text, as from a file: nbformat joins the multi-line strings (sources, stream texts)
    planned = nbformat.reads(json.dumps(plan_slides(nb, lang)), as_version=4)
    planned.metadata["title"] = title
    resources = {"hooklab": {"mathjax_url": mathjax_url, "css": SLIDES_CSS}}
    html, _ = exporter(lang, reveal_prefix).from_notebook_node(planned, resources=resources)
    return html


def notebook_title(nb: dict[str, Any], fallback: str) -> str:
    """The first heading of the notebook, without its ``#`` marks."""
    for cell in nb["cells"]:
        if cell.get("cell_type") == "markdown":
            for line in _source(cell).split("\n"):
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return fallback


def mathjax_source() -> Path:
    """MathJax 3's one-file SVG build (no fonts to fetch) from the sphinx-mathjax-offline package in .venv."""
    from importlib import metadata

    try:
        path = Path(str(metadata.distribution("sphinx-mathjax-offline").locate_file(
            "sphinx-mathjax-offline/static/mathjax/tex-svg.js")))
    except metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise FileNotFoundError("MathJax is missing: the sphinx-mathjax-offline package should be in .venv "
                                "(./course builds .venv from uv.lock)")
    return path


def copy_assets(out: Path, *, reveal: bool) -> None:
    """Put MathJax (and reveal.js when ``reveal``) into ``out``/_vendor/, once."""
    mathjax = out / MATHJAX_FILE
    if not mathjax.is_file():
        mathjax.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(mathjax_source(), mathjax)
    if reveal and not (out / REVEAL_DIR / "dist" / "reveal.js").is_file():
        source = vendor.ensure(vendor.REVEAL)
        shutil.rmtree(out / REVEAL_DIR, ignore_errors=True)
        shutil.copytree(source, out / REVEAL_DIR)


_NOTEBOOK_LINK = re.compile(r'href="(\d\d_[A-Za-z0-9_]+)\.ipynb(#[^"]*)?"')


def link_siblings(html: str) -> str:
    """Links to other notebooks of the course point at their page in the same folder instead.

    >>> link_siblings('<a href="07_activation_checkpointing.ipynb#top">')
    '<a href="07_activation_checkpointing.html#top">'
    """
    return _NOTEBOOK_LINK.sub(lambda m: f'href="{m[1]}.html{m[2] or ""}"', html)


_ENCODED_ID = re.compile(r'\bid="([^"]*%[0-9A-Fa-f]{2}[^"]*)"')


def decoded_ids(page: str) -> str:
    """Ids that nbconvert wrote percent-encoded (a Chinese heading's) as the text they encode. A heading's ¶ link and a
    link from another deck name it as ``#%E5%B0%8F%E7%BB%93``; reveal.js looks a named link up with
    ``getElementById(decodeURIComponent(hash))``, which finds the decoded text only (a browser tries both).

    >>> decoded_ids('<h2 id="%E5%B0%8F%E7%BB%93">小结<a class="anchor-link" href="#%E5%B0%8F%E7%BB%93">¶</a></h2>')
    '<h2 id="小结">小结<a class="anchor-link" href="#%E5%B0%8F%E7%BB%93">¶</a></h2>'
    >>> decoded_ids('<h2 id="1.-Forward-pre-hooks">')
    '<h2 id="1.-Forward-pre-hooks">'
    """
    return _ENCODED_ID.sub(lambda m: f'id="{escape(unquote(unescape(m[1])), quote=True)}"', page)


def write_deck(path: Path, lang: str, out: Path) -> Path:
    """Write the deck of notebook ``path`` in ``lang`` to ``out``/<lang>/<name>.html; return that file."""
    copy_assets(out, reveal=True)
    nb = one_language(path, lang)
    html = deck_html(nb, lang, reveal_prefix=f"../{REVEAL_DIR}", mathjax_url=f"../{MATHJAX_FILE}",
                     title=notebook_title(nb, path.stem))
    target = out / lang / f"{path.stem}.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(link_siblings(decoded_ids(html)), encoding="utf-8")
    return target


def parse_args(prog: str, doc: str, default_out: str, argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0].split(": ", 1)[-1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=doc.split("\n\n", 1)[1])
    parser.add_argument("numbers", nargs="+", metavar="NN", help="notebook numbers (06 or 6), or 'all'")
    parser.add_argument("--lang", choices=LANGS, action="append",
                        help="language of the output: zh or en (default: both, each in its own folder)")
    parser.add_argument("--out", default=default_out,
                        help=f"output folder; files go to OUT/<lang>/ (default: {default_out})")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args("./course slides", __doc__, "build/slides", argv)
    out = Path(args.out).resolve()
    langs = args.lang or list(LANGS)
    try:
        paths = find_notebooks(args.numbers)
        written = [write_deck(path, lang, out) for path in paths for lang in langs]
    except (UsageError, NotebookError, vendor.VendorError, FileNotFoundError, OSError) as exc:
        print(f"[course] error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    for path in written:
        print(path)
    print(f"[course] {len(written)} deck(s) written; open one in a browser (it works offline: copy the whole "
          f"folder {out} to take it along)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
