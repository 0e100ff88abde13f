"""A message's text: its id, its fixed parts, the pattern it matches as printed, and the piece of an output that
shows it."""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

PLACEHOLDER = re.compile(r"\{[^{}\n]*\}|%[-#0 +]*\d*(?:\.\d+)?[sdrfixg]")
MIN_SHOWN = 20  # a cell "shows" a message when it shows a clause of the message's fixed text at least this long


def slug(text: str, words: int = 9) -> str:
    """A readable start of an id: the first words of a text, lowercase, without its variable parts.

    >>> slug("forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got {result}.")
    'forward-pre-hook-must-return-none-or-a-tuple'
    """
    plain = PLACEHOLDER.sub(" ", text.split("\n")[0])
    tokens = re.findall(r"[a-z0-9]+", plain.lower())
    return "-".join(tokens[:words])[:56].strip("-") or "message"


def message_id(source: str, text: str) -> str:
    """The stable id of a message: its first words and a digest of its source and text.

    >>> message_id("torch", "state_dict post-hook must return None")
    'state-dict-post-hook-must-return-none-...'
    """
    digest = hashlib.sha1(f"{source}\0{text}".encode()).hexdigest()[:6]
    return f"{slug(text)}-{digest}"


def literal_pieces(text: str) -> list[str]:
    """The fixed parts of a message, between its placeholders.

    >>> literal_pieces("hook {name} has changed the size of value (was {a} got {b})")
    ['hook ', ' has changed the size of value (was ', ' got ', ')']
    """
    return [p for p in PLACEHOLDER.split(text) if p]


def pattern(text: str) -> re.Pattern[str]:
    """A regular expression for the message as printed: placeholders match anything, white space any white space.

    >>> bool(pattern("got {len(out)}, but expected {n}").search("Error: got 3, but expected 2 values"))
    True
    """
    parts = PLACEHOLDER.split(text.strip())
    pieces = []
    for i, piece in enumerate(parts):
        if i:  # a variable part: anything, and up to the end of its line when nothing fixed follows
            pieces.append(r".*?" if i < len(parts) - 1 or piece else r"[^\n]*")
        pieces.append(r"\s+".join(re.escape(w) for w in re.split(r"\s+", piece)))
    return re.compile("".join(pieces), re.DOTALL)


def clauses(text: str) -> list[str]:
    """The clauses (between punctuation and line ends) of a message's fixed parts, without the punctuation."""
    out = []
    for piece in literal_pieces(text):
        out += [c.strip(" .,;:'\"") for c in re.split(r"[.!?;,:]\s+|\n", piece)]
    return [c for c in out if c]


def _prefixes(text: str) -> Iterator[str]:
    """The message cut after each of its words, longest first, while at least :data:`MIN_SHOWN` fixed characters
    are left (a cell may print a message cut short: ``str(e)[:80]``, its first sentence)."""
    tokens = re.findall(r"\{[^{}\n]*\}|%[-#0 +]*\d*(?:\.\d+)?[sdrfixg]|\S+|\s+", text.strip())
    for n in range(len(tokens) - 1, 0, -1):
        prefix = "".join(tokens[:n]).rstrip()
        if len("".join(literal_pieces(prefix)).strip()) < MIN_SHOWN:
            return
        if not PLACEHOLDER.fullmatch(tokens[n - 1]):
            yield prefix


def shown_piece(text: str, output: str) -> str | None:
    """The line of ``output`` that shows ``text``: the whole message, the message cut short (at least
    :data:`MIN_SHOWN` fixed characters), or one of its clauses that long (all of it when the message is shorter);
    None when the output does not show it."""
    match = pattern(text).search(output)
    for prefix in ([] if match else _prefixes(text)):
        match = pattern(prefix).search(output)
        if match:
            break
    if match:
        start, end = match.start(), match.end()
    else:
        shortest = min(MIN_SHOWN, len(text.strip()))
        piece = next((c for c in sorted(clauses(text), key=len, reverse=True)
                      if len(c) >= shortest and c in output), None)
        if piece is None:
            return None
        start = output.index(piece)
        end = start + len(piece)
    first = output.rfind("\n", 0, start) + 1
    last = output.find("\n", end)
    return output[first:last if last != -1 else len(output)].strip()

