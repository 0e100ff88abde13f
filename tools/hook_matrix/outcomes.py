r"""The workaround strategies' file (``tools/hook_matrix/fixes.toml``) and what a tried program printed, read alike by
the programs that try the strategies (:mod:`tools.hook_matrix.programs`) and the page that lists them
(:mod:`tools.hook_matrix.page`), which imports nothing of the programs.

>>> printed("calls: 3 (forward 1, backward 2)\nerror: None\n")
({'forward': 1, 'backward': 2}, None)
>>> outcome("calls: 3 (forward 1, backward 2)\nerror: None\n", "en")
'fires 3x (forward 1, backward 2)'
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import tomllib

FIXES = Path(__file__).with_name("fixes.toml")
# the error the probe's always_call forward raises on purpose: not an error of the run (the probe does not count it)
ON_PURPOSE = "RuntimeError: probe: the forward raised on purpose"


def fixes(path: Path = FIXES) -> dict[str, Any]:
    """``tools/hook_matrix/fixes.toml``: the workaround strategies (``[strategy.<id>]``: a name and what it is, in
    both languages, and how it changes a program), each with its changes (``[[strategy.<id>.change]]``: the columns
    and families it applies to, what it does in both languages, ``replace = [[old, new], ...]``), the family groups
    the changes name (``[groups]``), the snippets a change writes per family (``[snippet.<name>]``, ``<<name>>`` in
    a replacement), and why no strategy applies to some cells (``[[none]]``)."""
    return tomllib.loads(path.read_text(encoding="utf-8"))


def printed(prints: str) -> tuple[dict[str, int], str | None]:
    """The calls by phase and the error (None: none) a program prints (rank 0's, for a process group's)."""
    lines = prints.splitlines()
    first = next(line for line in lines if line.startswith("calls: "))
    inside = first.split("(", 1)[1].rsplit(")", 1)[0] if "(" in first else ""
    by_phase = {}
    for part in filter(None, inside.split(", ")):
        name, n = part.rsplit(" ", 1)
        by_phase[name] = by_phase.get(name, 0) + int(n)
    error = next(line for line in lines if line.startswith("error: "))[len("error: "):]
    return by_phase, None if error in ("None", ON_PURPOSE) else error


def outcome(prints: str, lang: str) -> str:
    """What a changed program did, in a few words: how often the hook fired (by phase) and the error."""
    by_phase, error = printed(prints)
    calls = sum(by_phase.values())
    phases = ", ".join(f"{p} {n}" for p, n in by_phase.items())
    if lang == "zh":
        text = f"触发 {calls} 次" + (f"（{phases}）" if phases else "")
        return text + (f"，报错 {error[:100]}" if error else "")
    text = f"fires {calls}x" + (f" ({phases})" if phases else "")
    return text + (f", raises {error[:100]}" if error else "")
