"""What a fresh run of ``./course rerun`` changed in the committed outputs, and which claims they prove.

Pure functions on notebooks (JSON dicts), so that they are unit-tested on small synthetic
notebooks (``tests/tools/test_rerun.py``) without running a kernel.

Cells are compared as nbval compares them (``./course test``), with nbval's own functions: code cells numbered from 0
("Cell N"), the cells that nbval skips or whose output it ignores left out (its comment markers and tags), streams
merged per name (with its ``\r`` / ``\b`` rewriting), images and metadata left out, the rules of
``tests/sanitize.cfg`` applied to both sides. Notebooks are read with nbformat; headings are found by the course's
own fence-aware parser (``hooklab.course.notebook.heading_lines``: a ``# comment`` in a code fence is no heading). For each changed cell it finds (and :mod:`tools.rerun.report` writes):

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
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbval.plugin import coalesce_streams, find_comment_markers, find_metadata_tags, get_sanitize_patterns

from .claims import claim_label, paragraph_before, prose_quoting, text_of, vanished_phrases

SKIP_KEYS = {"metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
             "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg"}
IMAGE_KEYS = ("image/png", "image/jpeg")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
NUMBER = re.compile(r"(?<![\w.])[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?(?![\w])")
NODE_NAME = re.compile(r"\b[A-Z]\w*Backward\d+\b")
IMPORTS_TORCHVISION = re.compile(r"^\s*(import|from)\s+torchvision\b", re.MULTILINE)

KINDS = ("behaviour change", "cosmetic", "float", "hooklab bug", "error")


# ---- reading ------------------------------------------------------------------------------------------------

def read_nb(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


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
