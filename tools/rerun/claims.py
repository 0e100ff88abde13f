"""What a changed output of ``./course rerun`` says about the course's prose: the section and numbered claim a cell
proves (a "2.17" heading, a "**Correction 1**" quote before it) and the prose lines, of every notebook, that quote a
token which vanished from the output (a claim that a ``./course regen`` would leave stale).
"""
from __future__ import annotations

import difflib
import re

from hooklab.course.notebook import heading_lines, strip_toc_skip


def text_of(value) -> str:
    """A cell's source or an output's text: a string, or the list of lines a hand-made notebook may hold."""
    return "".join(value) if isinstance(value, list) else str(value)
NUMBERED_HEADING = re.compile(r"^(\d+(\.\d+)+)\s")
CORRECTION_QUOTE = re.compile(r"\*\*(Correction(?: \d+(?:\.\d+)*)?)\*\*")
WORD = re.compile(r"[A-Za-z0-9_][\w.]*\w|[A-Za-z0-9_]")
COMMON = {"the", "and", "for", "with", "from", "this", "that", "not", "are", "was", "but", "its", "into", "has",
          "call", "calls", "calling", "true", "false", "none", "input", "inputs", "output", "outputs", "grad",
          "tensor", "tensors", "should", "will", "passed", "parameter", "explicitly", "pytorch", "torch", "shape",
          "requires", "gradient", "gradients", "module", "layer", "first", "after", "before", "print", "value"}


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
