"""The report of ``./course rerun``: which committed outputs a fresh run changed, and which claims they prove.

Pure functions on notebooks (JSON dicts) and pytest's JUnit XML, so that they are unit-tested on small synthetic
notebooks (``tests/tools/test_rerun.py``) without running a kernel.

Cells are compared as nbval compares them (``./course test``), with nbval's own functions: code cells numbered from 0
("Cell N"), the cells that nbval skips or whose output it ignores left out (its comment markers and tags), streams
merged per name (with its ``\r`` / ``\b`` rewriting), images and metadata left out, the rules of
``tests/sanitize.cfg`` applied to both sides. Notebooks are read with nbformat; headings are found by the course's
own fence-aware parser (``hooklab.course.notebook.heading_lines``: a ``# comment`` in a code fence is no heading). For each changed cell the report gives:

- nbval's id, the section heading it sits under and, where it proves a numbered claim, its number (notebook 08's
  "2.17", or a "**Correction 1**" quote before the cell);
- a guessed kind: behaviour change, cosmetic, float, hooklab bug or error, and why;
- the full unified diff, ``- committed`` / ``+ fresh``;
- the prose lines (of every notebook) that quote a token which vanished from the output: a claim that a
  ``./course regen`` would leave stale;
- whether the baseline (the same notebook run in the locked ``.venv`` on this machine) differs from the committed
  output too: then it is machine drift, not a PyTorch change.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import re
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbval.plugin import coalesce_streams, find_comment_markers, find_metadata_tags, get_sanitize_patterns

from hooklab.course.notebook import heading_lines, strip_toc_skip

SKIP_KEYS = {"metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
             "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg"}
IMAGE_KEYS = ("image/png", "image/jpeg")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
NUMBER = re.compile(r"(?<![\w.])[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?(?![\w])")
NODE_NAME = re.compile(r"\b[A-Z]\w*Backward\d+\b")
NUMBERED_HEADING = re.compile(r"^(\d+(\.\d+)+)\s")
CORRECTION_QUOTE = re.compile(r"\*\*(Correction(?: \d+(?:\.\d+)*)?)\*\*")
IMPORTS_TORCHVISION = re.compile(r"^\s*(import|from)\s+torchvision\b", re.MULTILINE)
WORD = re.compile(r"[A-Za-z0-9_][\w.]*\w|[A-Za-z0-9_]")
COMMON = {"the", "and", "for", "with", "from", "this", "that", "not", "are", "was", "but", "its", "into", "has",
          "call", "calls", "calling", "true", "false", "none", "input", "inputs", "output", "outputs", "grad",
          "tensor", "tensors", "should", "will", "passed", "parameter", "explicitly", "pytorch", "torch", "shape",
          "requires", "gradient", "gradients", "module", "layer", "first", "after", "before", "print", "value"}

KINDS = ("behaviour change", "cosmetic", "float", "hooklab bug", "error")


# ---- reading ------------------------------------------------------------------------------------------------

def read_nb(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def text_of(value) -> str:
    """A cell's source or an output's text: a string, or the list of lines a hand-made notebook may hold."""
    return "".join(value) if isinstance(value, list) else str(value)


def needs_torchvision(nb: dict) -> bool:
    return any(c["cell_type"] == "code" and IMPORTS_TORCHVISION.search(text_of(c["source"])) for c in nb["cells"])


def load_sanitizer(path: Path | None) -> list[tuple[str, str]]:
    """The regex / replace pairs of an nbval sanitize file (nbval's own reader)."""
    return get_sanitize_patterns(Path(path).read_text(encoding="utf-8")) if path is not None else []


def sanitize(text: str, rules: list[tuple[str, str]]) -> str:
    for regex, replace in rules:
        text = re.sub(regex, replace, text)
    return text


# ---- nbval's view of a cell ------------------------------------------------------------------------------------

def nbval_options(cell: dict) -> set[str]:
    """'skip', 'ignore-output', 'raises' as nbval reads them from the cell's tags and comment markers (the comments
    win, as in nbval)."""
    with warnings.catch_warnings():  # nbval's own notices about conflicting markers, shown by ./course test
        warnings.simplefilter("ignore")
        options = dict(find_metadata_tags(cell.get("metadata", {})))
        options.update(find_comment_markers(text_of(cell.get("source", ""))))
    named = {"skip": options.get("skip", False), "ignore-output": options.get("check") is False,
             "raises": options.get("check_exception", False)}
    return {name for name, on in named.items() if on}


def comparable(outputs: list[dict], rules: list[tuple[str, str]]) -> dict[str, list[str]]:
    """nbval's comparison view: streams merged per name (nbval's ``coalesce_streams``, on a copy), then every
    compared key -> its sanitized values."""
    copies = [nbformat.from_dict({**out, "text": text_of(out["text"])} if "text" in out else out) for out in outputs]
    merged = coalesce_streams(copies)
    view: dict[str, list[str]] = {}
    for out in merged:
        if out.get("output_type") == "stream":
            view.setdefault(out["name"], []).append(sanitize(out["text"], rules))
            continue
        for key, value in out.items():
            if key in SKIP_KEYS:
                continue
            if key == "data":
                for mime, data in value.items():
                    if mime not in SKIP_KEYS:
                        view.setdefault(mime, []).append(sanitize(text_of(data), rules))
            else:
                view.setdefault(key, []).append(sanitize(text_of(value), rules))
    return view


def render(view: dict[str, list[str]]) -> str:
    """One text for a diff: stdout as it is, every other key under a [key] line."""
    parts = []
    for key in sorted(view, key=lambda k: (k != "stdout", k)):
        for value in view[key]:
            body = value if value.endswith("\n") or not value else value + "\n"
            parts.append(body if key == "stdout" else f"[{key}]\n{body}")
    return "".join(parts)


def images(outputs: list[dict]) -> list[str]:
    found = []
    for out in outputs:
        for mime in IMAGE_KEYS:
            data = out.get("data", {}).get(mime)
            if data is not None:
                found.append(hashlib.sha256(text_of(data).replace("\n", "").encode()).hexdigest()[:12])
    return found


def error_of(outputs: list[dict]) -> dict | None:
    for out in outputs:
        if out.get("output_type") == "error":
            return out
    return None


# ---- where a cell sits ---------------------------------------------------------------------------------------

def is_english_or_both(cell: dict) -> bool:
    return "lang-zh" not in (cell.get("metadata", {}).get("tags") or [])


def headings(text: str) -> list[str]:
    """The Markdown headings of a cell's text, without their ``#`` marks (none from fenced code)."""
    lines = text.split("\n")
    return [lines[i].lstrip("#").strip() for i in heading_lines(text)]


def context(nb: dict, cell_index: int) -> tuple[str, str | None, str | None]:
    """The nearest (English) heading above a cell, its number if it has one ("2.17"), and the last
    "**Correction N**" quoted in the prose between that heading and the cell (notebook 07's "> **Correction 1**")."""
    correction = None
    for cell in reversed(nb["cells"][:cell_index]):
        if cell["cell_type"] != "markdown" or not is_english_or_both(cell):
            continue
        text = text_of(cell["source"])
        if correction is None:
            quotes = CORRECTION_QUOTE.findall(text)
            if quotes:
                correction = quotes[-1]
        found = headings(text)
        if found:
            heading = strip_toc_skip(found[-1])
            numbered = NUMBERED_HEADING.match(heading)
            return heading, numbered.group(1) if numbered else None, correction
    return "(before the first heading)", None, correction


def paragraph_before(nb: dict, cell_index: int, limit: int = 400) -> str:
    """The prose right before a code cell (the nearest English markdown cell, headings left out), shortened."""
    for cell in reversed(nb["cells"][:cell_index]):
        if cell["cell_type"] == "markdown" and is_english_or_both(cell):
            text = text_of(cell["source"])
            skip = set(heading_lines(text))
            lines = (re.sub(r"^(>\s*)+", "", line.strip()) for i, line in enumerate(text.split("\n")) if i not in skip)
            text = " ".join(line for line in lines if line)
            text = re.sub(r"\s+", " ", text)
            return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"
        if cell["cell_type"] == "code":
            return ""
    return ""


def claim_label(nb_name: str, nb: dict, cell_index: int) -> tuple[str, str | None]:
    """(heading, claim) where claim names a numbered correction or pitfall: notebook 08 numbers its pitfalls
    1.x and its corrections 2.x / 3.x in the headings; other notebooks quote "**Correction N**" in the prose."""
    heading, number, correction = context(nb, cell_index)
    labels = []
    if number and nb_name.startswith("08"):
        labels.append(f"pitfall {number}" if number.startswith("1.") else f"correction {number}")
    if correction:
        labels.append(correction.lower() if correction != "Correction" else "a correction")
    return heading, ", ".join(labels) or None


# ---- guessing the kind ---------------------------------------------------------------------------------------

def _numbers(text: str) -> list[str]:
    return [m.group(0) for m in NUMBER.finditer(text)]


def _within_rounding(a: str, b: str) -> bool:
    """Two printed numbers that differ by at most one unit of their last printed digit, or by < 1e-4 relative."""
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    mantissa = re.split(r"[eE]", a.lstrip("+-"))[0]
    exponent = int(re.split(r"[eE]", a)[1]) if re.search(r"[eE]", a) else 0
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    unit = 10.0 ** (exponent - decimals)
    is_int = "." not in mantissa and not re.search(r"[eE]", a)
    if abs(x - y) <= 1e-4 * max(abs(x), abs(y)):
        return True
    return not is_int and abs(x - y) <= unit * 1.0000001


def guess_kind(committed: str, fresh: str, fresh_outputs: list[dict], *, after_error: int | None = None,
               hooklab_dir: str = "hooklab") -> tuple[str, str]:
    """(kind, why) for a changed cell: the first rule that applies, in the order below."""
    err = error_of(fresh_outputs)
    if err is not None:
        trace = ANSI.sub("", "\n".join(err.get("traceback", [])))
        what = f"`{err.get('ename')}: {text_of(err.get('evalue', ''))[:200]}`"
        if after_error is not None and err.get("ename") in ("NameError", "AttributeError"):
            return "error", f"raises {what}, most likely because Cell {after_error} failed before it"
        if re.search(rf"[/\\]{hooklab_dir}[/\\][\w/\\]+\.py", trace):
            return "hooklab bug", f"raises {what}, and the traceback goes through hooklab's own code"
        return "error", f"raises {what}"
    if committed.split() == fresh.split():
        return "cosmetic", "only whitespace changed"
    masked_c, masked_f = NUMBER.sub("#", committed), NUMBER.sub("#", fresh)
    if masked_c == masked_f:
        pairs = [(a, b) for a, b in zip(_numbers(committed), _numbers(fresh)) if a != b]
        if all(_within_rounding(a, b) for a, b in pairs):
            shown = ", ".join(f"{a} -> {b}" for a, b in pairs[:4])
            return "float", f"only numbers changed, each within rounding of its last digit ({shown})"
        shown = ", ".join(f"{a} -> {b}" for a, b in pairs if not _within_rounding(a, b))[:200]
        return "behaviour change", f"numbers changed by more than rounding ({shown})"
    removed, added = _changed_lines(committed, fresh)
    flips = [(r, a) for r, a in zip(removed, added)
             if re.sub(r"\b(True|False)\b", "B", r) == re.sub(r"\b(True|False)\b", "B", a) and r != a]
    if flips:
        return "behaviour change", f"a printed boolean flipped: `{flips[0][0].strip()}` -> `{flips[0][1].strip()}`"
    old_nodes, new_nodes = set(NODE_NAME.findall(committed)), set(NODE_NAME.findall(fresh))
    if old_nodes != new_nodes:
        return "behaviour change", ("autograd node names changed: " + ", ".join(sorted(old_nodes - new_nodes))
                                    + " -> " + ", ".join(sorted(new_nodes - old_nodes)))
    changed = removed + added
    if changed and all(re.search(r"Warning\b|warn", line) for line in changed):
        return "cosmetic", "only the text of a warning changed (check whether the prose quotes it)"
    return "behaviour change", "the output text changed"


def _changed_lines(committed: str, fresh: str) -> tuple[list[str], list[str]]:
    removed, added = [], []
    for line in difflib.unified_diff(committed.splitlines(), fresh.splitlines(), lineterm="", n=0):
        if line.startswith(("---", "+++", "@@")):
            continue
        (removed if line.startswith("-") else added).append(line[1:])
    return removed, added


def unified_diff(committed: str, fresh: str, fresh_label: str = "fresh") -> str:
    return "\n".join(difflib.unified_diff(committed.splitlines(), fresh.splitlines(), "committed", fresh_label,
                                          lineterm="", n=3))


# ---- stale prose ---------------------------------------------------------------------------------------------

def _distinctive(words: list[str]) -> bool:
    """A phrase worth searching the prose for: a code-like or long word, or words that are not all common."""
    def strong(w: str) -> bool:
        if w.lower() in COMMON:
            return False
        return len(w) >= 6 or bool(re.search(r"[a-z][A-Z]|_|\d[A-Za-z]|[A-Za-z]\d", w))
    if len(words) == 1:
        return strong(words[0]) and (len(words[0]) >= 8 or bool(re.search(r"[a-z][A-Z]|_|\d", words[0])))
    solid = [w for w in words if len(w) >= 4 and w.lower() not in COMMON]
    numbered = any(re.search(r"\d", w) for w in words) and any(len(w) >= 4 and w.isalpha() for w in words)
    return len(solid) >= 2 or numbered


def vanished_phrases(committed: str, fresh: str, max_words: int = 5) -> list[str]:
    """Words and short phrases of the committed output that the fresh output no longer contains, longest first.

    The committed and fresh words are aligned; from each removed run, every phrase of 1..max_words consecutive
    words that is distinctive (a long or code-like word, or several uncommon words) and absent from the fresh
    output is a candidate. Sub-phrases are kept too (the prose may quote only part of an output line);
    ``maximal()`` gives the ones worth showing.
    """
    old, new = WORD.findall(committed), WORD.findall(fresh)
    fresh_words = " ".join(new).lower()
    candidates: list[str] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for op, i1, i2, _, _ in matcher.get_opcodes():
        if op not in ("replace", "delete"):
            continue
        run = old[i1:i2]
        for size in range(min(max_words, len(run)), 0, -1):
            for start in range(len(run) - size + 1):
                words = run[start:start + size]
                phrase = " ".join(words)
                if phrase in candidates or not _distinctive(words) or _word_in(phrase.lower(), fresh_words):
                    continue
                candidates.append(phrase)
    return sorted(candidates, key=lambda p: -len(p.split(" ")))


def maximal(phrases: list[str]) -> list[str]:
    """The phrases not contained in a longer one."""
    return [p for p in phrases if not any(p != q and _word_in(p.lower(), q.lower()) for q in phrases)]


def _word_in(phrase: str, text: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(phrase)}(?![\w])", text) is not None


def _phrase_pattern(phrase: str) -> re.Pattern:
    # words of the output, in order, separated in prose by anything that is not a word (spaces, commas, quotes)
    words = [re.escape(w) for w in phrase.split(" ")]
    return re.compile(r"(?<![\w])" + r"\W{1,4}".join(words) + r"(?![\w])", re.IGNORECASE)


def prose_quoting(notebooks: dict[str, dict], phrases: list[str]) -> list[tuple[str, int, str, str, str]]:
    """(notebook, markdown cell index, language tag, phrase, line) for every prose line that quotes a phrase."""
    hits = []
    patterns = [(p, _phrase_pattern(p)) for p in phrases]
    for name, nb in notebooks.items():
        for index, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "markdown":
                continue
            tag = ((cell.get("metadata", {}).get("tags") or ["?"])[0]).replace("lang-", "")
            for line in text_of(cell["source"]).splitlines():
                for phrase, pattern in patterns:
                    if pattern.search(line):
                        hits.append((name, index, tag, phrase, line.strip()))
                        break
    return hits


# ---- comparing ----------------------------------------------------------------------------------------------

@dataclass
class CellChange:
    notebook: str
    cell_num: int          # nbval's "Cell N": code cells counted from 0
    cell_index: int        # index into nb["cells"]
    heading: str
    claim: str | None
    kind: str
    why: str
    diff: str
    vanished: list[str]
    machine_drift: bool = False
    baseline_note: str = ""
    paragraph: str = ""
    prose: list[tuple[str, int, str, str, str]] = field(default_factory=list)
    symptom: str = ""      # the symptom index's entry of this cell whose message the fresh output no longer shows


@dataclass
class FigureChange:
    notebook: str
    cell_num: int
    heading: str
    machine_drift: bool
    note: str


@dataclass
class NotebookResult:
    notebook: str
    code_cells: int = 0
    compared: int = 0
    seconds: float | None = None
    skipped: str | None = None
    aborted: str | None = None
    changes: list[CellChange] = field(default_factory=list)
    figures: list[FigureChange] = field(default_factory=list)

    @property
    def torch_changes(self) -> list[CellChange]:
        return [c for c in self.changes if not c.machine_drift]

    @property
    def drift(self) -> list[CellChange]:
        return [c for c in self.changes if c.machine_drift]


def symptom_gone(cell: dict, fresh_outputs: list[dict]) -> str:
    """The symptom index entry (tools/messages/symptoms.py) of ``cell`` whose ``message`` the fresh outputs no longer show:
    ``"id: message"``, else ``""``."""
    entry = cell.get("metadata", {}).get("hooklab", {}).get("symptom")
    message = entry.get("message") if isinstance(entry, dict) else None
    if not isinstance(message, str):
        return ""
    shown = "\n".join(text_of(o.get("text")) + "\n" + text_of(o.get("data", {}).get("text/plain")) for o in fresh_outputs)
    return "" if message in shown else f"{entry.get('id')}: {message}"


def compare_notebook(name: str, committed: dict, fresh: dict, baseline: dict | None,
                     rules: list[tuple[str, str]], *, fresh_label: str = "fresh") -> NotebookResult:
    result = NotebookResult(name)
    code = [(i, c) for i, c in enumerate(committed["cells"]) if c["cell_type"] == "code"]
    fresh_code = [c for c in fresh["cells"] if c["cell_type"] == "code"]
    base_code = [c for c in baseline["cells"] if c["cell_type"] == "code"] if baseline else None
    result.code_cells = len(code)
    first_error = None  # the first code cell whose fresh run raised: later NameErrors follow from it
    for num, (index, cell) in enumerate(code):
        new_outputs = fresh_code[num].get("outputs", []) if num < len(fresh_code) else []
        base_outputs = base_code[num].get("outputs", []) if base_code is not None and num < len(base_code) else None
        opts = nbval_options(cell)
        if "skip" not in opts and "ignore-output" not in opts:
            result.compared += 1
            heading, claim = claim_label(name, committed, index)
            old_view, new_view = comparable(cell.get("outputs", []), rules), comparable(new_outputs, rules)
            if old_view != new_view and not ("raises" in opts and error_of(new_outputs)):
                old_text, new_text = render(old_view), render(new_view)
                kind, why = guess_kind(old_text, new_text, new_outputs, after_error=first_error)
                change = CellChange(name, num, index, heading, claim, kind, why,
                                    unified_diff(old_text, new_text, fresh_label),
                                    vanished_phrases(old_text, new_text),
                                    paragraph=paragraph_before(committed, index),
                                    symptom=symptom_gone(cell, new_outputs))
                if base_outputs is not None:
                    base_view = comparable(base_outputs, rules)
                    if base_view != old_view:
                        change.machine_drift = True
                        change.baseline_note = ("the baseline gives the same output as this run"
                                                if base_view == new_view else
                                                "the baseline differs from the committed output too, in another way")
                result.changes.append(change)
            old_images, new_images = images(cell.get("outputs", [])), images(new_outputs)
            if old_images != new_images:
                drift = base_outputs is not None and images(base_outputs) != old_images
                if not old_images:
                    note = "a figure appeared"
                elif not new_images:
                    note = "the figure is gone"
                else:
                    note = f"pixels differ ({len(old_images)} figure(s) committed, {len(new_images)} now)"
                result.figures.append(FigureChange(name, num, heading, drift, note))
        if first_error is None and error_of(new_outputs) is not None:
            first_error = num
    return result


def compare_all(notebooks: list[Path], fresh_dir: Path, base_dir: Path | None, sanitize_cfg: Path | None,
                *, skipped: dict[str, str] | None = None, fresh_label: str = "fresh") -> list[NotebookResult]:
    """Compare the committed notebooks with their executed copies in fresh_dir (and base_dir, the baseline)."""
    committed = {p.name: read_nb(p) for p in notebooks}
    fresh, base, info = {}, {}, {}
    for p in notebooks:
        if (fresh_dir / p.name).exists():
            fresh[p.name] = read_nb(fresh_dir / p.name)
        if (fresh_dir / (p.stem + ".json")).exists():
            info[p.name] = json.loads((fresh_dir / (p.stem + ".json")).read_text())
        if base_dir is not None and (base_dir / p.name).exists():
            base[p.name] = read_nb(base_dir / p.name)
    return compare_all_from(committed, fresh, base if base_dir is not None else None, load_sanitizer(sanitize_cfg),
                            skipped=skipped, fresh_label=fresh_label, info=info)


def compare_all_from(committed: dict[str, dict], fresh: dict[str, dict], baseline: dict[str, dict] | None,
                     rules: list[tuple[str, str]], *, skipped: dict[str, str] | None = None,
                     fresh_label: str = "fresh", info: dict[str, dict] | None = None) -> list[NotebookResult]:
    results = []
    for name, nb in committed.items():
        if skipped and name in skipped:
            results.append(NotebookResult(name, skipped=skipped[name],
                                          code_cells=sum(c["cell_type"] == "code" for c in nb["cells"])))
            continue
        if name not in fresh:
            results.append(NotebookResult(name, aborted="the notebook was not executed (see the command's output)"))
            continue
        result = compare_notebook(name, nb, fresh[name], (baseline or {}).get(name), rules, fresh_label=fresh_label)
        if info and name in info:
            result.seconds, result.aborted = info[name].get("seconds"), info[name].get("aborted")
        for change in result.changes:
            change.prose = prose_quoting(committed, change.vanished)
        results.append(result)
    return results


# ---- unit tests -----------------------------------------------------------------------------------------------

@dataclass
class UnitResult:
    returncode: int
    tests: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None
    seconds: float | None = None
    summary_line: str = ""

    @property
    def passed(self) -> int:
        return self.tests - len(self.failed) - len(self.skipped)

    @property
    def ok(self) -> bool:
        return self.error is None and self.returncode == 0 and not self.failed


def read_junit(path: Path, *, returncode: int) -> UnitResult:
    result = UnitResult(returncode=returncode)
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        result.tests += 1
        if case.get("classname"):
            test_id = f"{case.get('classname').replace('.', '/')}.py::{case.get('name')}"
        else:  # a whole module skipped or failed at collection
            test_id = f"{(case.get('name') or '?').replace('.', '/')}.py"
        for child in case:
            text = child.get("message") or child.text or ""
            if text == "collection skipped" and child.text:  # the reason is in the text: (path, line, 'Skipped: ...')
                found = re.search(r"Skipped: (.*?)['\"]\)\s*$", child.text.strip())
                text = found.group(1) if found else child.text
            message = text.strip().splitlines()
            first = message[0][:300] if message else ""
            if child.tag in ("failure", "error"):
                result.failed.append((test_id, first))
                break
            if child.tag == "skipped":
                result.skipped.append((test_id, first))
                break
    return result


# ---- the report ---------------------------------------------------------------------------------------------

def fence(text: str, lang: str = "") -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def one_line(units: UnitResult | None, results: list[NotebookResult]) -> str:
    parts = []
    if units is not None:
        parts.append("unit tests: " + (units.summary_line or (units.error or f"exit {units.returncode}")))
    if results:
        changed = sum(len(r.torch_changes) for r in results)
        drift = sum(len(r.drift) for r in results)
        figures = sum(1 for r in results for f in r.figures if not f.machine_drift)
        skipped = sum(1 for r in results if r.skipped)
        parts.append(f"notebooks: {changed} changed cell(s), {figures} changed figure(s), "
                     f"{drift} cell(s) of machine drift, {skipped} notebook(s) skipped")
    return "; ".join(parts)


def exit_code(units: UnitResult | None, results: list[NotebookResult]) -> int:
    if units is not None and not units.ok:
        return 1
    for r in results:
        if r.torch_changes or r.aborted or any(not f.machine_drift for f in r.figures):
            return 1
    return 0


def _nb_short(name: str) -> str:
    return name[:2]


def render_report(meta: dict, units: UnitResult | None, results: list[NotebookResult]) -> str:
    v = meta.get("versions", {})
    req = meta.get("requested", {})
    lines = [f"# Course re-run: {meta.get('name', '?')}", ""]
    lines += [
        f"- torch **{v.get('torch', req.get('torch'))}**, torchvision **{v.get('torchvision') or 'none'}**"
        + (f", with {', '.join(f'`{w}`' for w in req.get('with', []))}" if req.get("with") else "")
        + f"; numpy {v.get('numpy', '?')}, Python {v.get('python', '?')}",
        f"- CPU: {v.get('cpu_capability', '?')} kernels, {meta.get('host', v.get('machine', '?'))}",
        "- fixed environment: " + " ".join(f"`{k}={val}`" for k, val in meta.get("fixed_env", {}).items()),
        "- compared as nbval compares (`tests/sanitize.cfg`, images left out); \"Cell N\" counts code cells "
        "from 0 like nbval; diffs are `- committed` / `+ fresh`",
        "- baseline: the same notebooks run in the locked `.venv` on this machine; a cell that differs there too "
        "is **machine drift**, listed apart and not counted as a change",
        "",
        f"**Result**: {one_line(units, results)} → exit {exit_code(units, results)}", "",
    ]
    if units is not None:
        lines += ["## hooklab's unit tests", ""]
        if units.error:
            lines += [f"Could not run: {units.error}", ""]
        else:
            lines += [f"`{units.summary_line or f'{units.passed} passed, {len(units.failed)} failed'}`"
                      + (f" ({units.seconds:.0f} s)" if units.seconds and " in " not in units.summary_line else ""),
                      ""]
        if units.failed:
            lines += ["Failed:", ""] + [f"- `{t}`: {m}" for t, m in units.failed] + [""]
        if units.skipped:
            reasons: dict[str, list[str]] = {}
            for t, m in units.skipped:
                reasons.setdefault(m, []).append(t)
            lines += ["Skipped, by reason:", ""]
            for reason, tests in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
                example = tests[0] + (f" and {len(tests) - 1} more" if len(tests) > 1 else "")
                lines.append(f"- {len(tests)} × {reason or '(no reason given)'} (`{example}`)")
            lines.append("")
    if meta.get("library_only"):
        lines += ["Only the library's tests ran (`--library-only`: not the course's exercises, notebook format, export, "
                  "lab or site tests); notebooks not run.", ""]
        return "\n".join(lines)
    if meta.get("unit_only"):
        lines += ["Notebooks not run (`--unit-only`).", ""]
        return "\n".join(lines)
    lines += ["## Notebooks", "",
              "| notebook | code cells | compared | changed (PyTorch) | machine drift | figures changed | run time | note |",
              "|---|---|---|---|---|---|---|---|"]
    for r in results:
        figs = [f for f in r.figures if not f.machine_drift]
        note = r.skipped or r.aborted or ""
        if r.skipped:
            lines.append(f"| {r.notebook} | {r.code_cells} | – | – | – | – | – | skipped: {note} |")
            continue
        secs = f"{r.seconds:.1f} s" if r.seconds is not None else "–"
        lines.append(f"| {r.notebook} | {r.code_cells} | {r.compared} | {len(r.torch_changes)} | {len(r.drift)} | "
                     f"{len(figs)} | {secs} | {note} |")
    lines.append("")
    changed = [c for r in results for c in r.torch_changes]
    lines += ["## Changed cells", ""]
    if not changed:
        lines += ["None: every compared output is the committed one (machine drift aside).", ""]
    for c in changed:
        lines += _cell_section(c)
    drift = [c for r in results for c in r.drift]
    lines += ["## Machine drift (differs on the baseline too: not caused by this PyTorch)", ""]
    if not drift:
        lines += ["None.", ""]
    for c in drift:
        lines += _cell_section(c)
    lines += ["## Figures that changed", "",
              "nbval does not compare images; look at these in `build/rerun/<name>/executed/`.", ""]
    figures = [f for r in results for f in r.figures]
    if not figures:
        lines += ["None.", ""]
    for f in figures:
        where = "machine drift (the baseline's figure differs too)" if f.machine_drift else "not on the baseline"
        lines.append(f"- {_nb_short(f.notebook)} · Cell {f.cell_num}, under \"{f.heading}\": {f.note}; {where}")
    lines.append("")
    return "\n".join(lines)


def _cell_section(c: CellChange) -> list[str]:
    out = [f"### {_nb_short(c.notebook)} · Cell {c.cell_num}: {c.kind}", "",
           f"- nbval id: `notebooks/{c.notebook}::Cell {c.cell_num}` (`In [{c.cell_num + 1}]`)",
           f"- under: **{c.heading}**" + (f" ({c.claim})" if c.claim else ""),
           f"- guessed kind: **{c.kind}**: {c.why}"]
    if c.machine_drift:
        out.append(f"- baseline: {c.baseline_note}")
    if c.symptom:
        out.append(f"- symptom index: the message of `{c.symptom}` is no longer in the output: update the cell's "
                   "`hooklab.symptom.message` (and run `tools/messages/symptoms.py --write`), or teach what changed")
    if c.paragraph:
        out += ["", f"> {c.paragraph}"]
    out += ["", fence(c.diff, "diff"), ""]
    if c.vanished:
        gone = maximal(c.vanished)
        shown = ", ".join(f"`{p}`" for p in gone[:12]) + (" …" if len(gone) > 12 else "")
        out += [f"Gone from the output: {shown}", ""]
        if c.prose:
            out += ["Prose that quotes what is gone (a claim `./course regen` would leave stale):", ""]
            for nb, index, tag, phrase, line in c.prose:
                line = re.sub(r"^([-*>]|\d+\.)\s+", "", line)
                clipped = line if len(line) <= 400 else line[:400] + " …"
                out.append(f"- {_nb_short(nb)} · markdown cell {index} ({tag}), quotes `{phrase}`: {clipped}")
            out.append("")
        else:
            out += ["No prose quotes it.", ""]
    return out
