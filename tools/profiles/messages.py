"""The profiled libraries' own messages, explained: each error, warning and log line that concerns hooks (the population
of :mod:`tools.ask.library_pasted`, ``tools/ask/library_messages.json``) with what the user did that makes the
library say it and what to do instead, in both languages (``docs/library_messages.toml``, read from the library's
source at the line that raises it), on the library's page of the site and in the lookup.

A message the course explains elsewhere (a row of the message index, ``docs/hook_messages.json``, with its cell; a recipe
that meets it) is not explained again here: :func:`missing` lists the population's messages that have neither.

>>> row = explained()[0]
>>> sorted(set(row) & {"en", "zh", "where", "text", "library", "file", "line"})
['en', 'file', 'library', 'line', 'text', 'where', 'zh']
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parents[2]
EXPLAINED = ROOT / "docs" / "library_messages.toml"
POPULATION = ROOT / "tools" / "ask" / "library_messages.json"  # tools.ask.library_pasted writes it (imported by path:
# that module imports tools.ask.index, which imports this one)
ANCHOR = "libmsg-{id}"  # the message's heading on its library's page (profiles-<slug>.html#libmsg-<id>)
TEXT = {"en": {"title": "Its own messages that concern hooks",
               "intro": "What {library} {version} says about hooks, a replaced `forward`, swapped modules or "
                        "parameters, saved tensors and gradients, each with the place that raises it, what makes "
                        "it say so and what to do (read from its source at that line). Paste one into "
                        "`course.ask(...)` and it lands here.",
               "where": "raised in `{where}` (`{file}:{line}`)"},
        "zh": {"title": "它自己与钩子有关的报错和警告",
               "intro": "{library} {version} 里讲到钩子、被替换的 `forward`、被换掉的模块或参数、保存的张量和梯度的报错与"
                        "警告，每条都注明在哪里抛出、什么情况下会出现、该怎么办（按那一行的源码读出）。把它粘贴进 "
                        "`course.ask(...)` 就会落到这里。",
               "where": "抛出位置：`{where}`（`{file}:{line}`）"}}
KIND_ZH = {"error": "报错", "warning": "警告", "log": "日志", "assert": "断言"}
HEADING_CHARS = 110
WEIGHT = 0.5  # on words (hooklab.course.asking's ``weight``): a paste of the message finds it whatever its words weigh


def population() -> dict[str, Any]:
    return json.loads(POPULATION.read_text(encoding="utf-8"))


def explained(path: Path = EXPLAINED) -> list[dict[str, Any]]:
    """The explained messages, each the population's record with its ``en``, ``zh`` and ``where``, in the
    population's order (by id); an explanation of no message of the population is an error (the population moved:
    ``python -m tools.ask.library_pasted --write``)."""
    written = tomllib.loads(path.read_text(encoding="utf-8"))
    messages = {m["id"]: m for m in population()["messages"]}
    stray = sorted(set(written) - set(messages))
    if stray:
        raise ValueError(f"{path.name} explains {len(stray)} messages the population does not hold ({stray[:3]}): "
                         "the libraries changed; write the population again and move or drop those rows")
    wrong = sorted(mid for mid in written if written[mid].get("library") != messages[mid]["library"])
    if wrong:
        raise ValueError(f"{path.name}: the library of {wrong[:3]} is not the population's")
    return [{**messages[mid], **{k: written[mid][k] for k in ("en", "zh", "where")}}
            for mid in sorted(written)]


def missing() -> list[dict[str, Any]]:
    """The population's messages explained nowhere: neither here nor by another place of the lookup that holds the
    message (a row of the message index with its cell, a recipe that meets it, a symptom cell that prints it)."""
    from hooklab.course.asking import _index, message_key

    elsewhere = {message_key(e["message"]) for e in _index()[0]
                 if e.get("message") and "#libmsg-" not in (e.get("page") or "")}
    here = {row["id"] for row in explained()}
    return [m for m in population()["messages"] if m["id"] not in here and message_key(m["text"]) not in elsewhere]


def _heading(row: dict[str, Any], lang: str) -> str:
    text = re.sub(r"\s+", " ", row["text"]).strip()
    if len(text) > HEADING_CHARS:
        text = text[:HEADING_CHARS].rsplit(" ", 1)[0] + " …"
    kind = KIND_ZH.get(row["kind"], row["kind"]) if lang == "zh" else row["kind"]
    return f"{kind}{'：' if lang == 'zh' else ': '}{text}".replace("`", "'")


def section(slug: str, lang: str) -> list[str]:
    """The lines of library ``slug``'s page that list its explained messages (none when it has none)."""
    rows = [row for row in explained() if row["library"] == slug]
    if not rows:
        return []
    t = TEXT[lang]
    version = population()["versions"].get(slug) or ""
    lines = [f"## {t['title']}", "", t["intro"].format(library=slug, version=version).replace("  ", " "), ""]
    for row in sorted(rows, key=lambda r: (r["file"], r["line"])):
        lines += [f"({ANCHOR.format(id=row['id'])})=", f"### {_heading(row, lang)}", "",
                  row[lang], "", t["where"].format(where=row["where"], file=row["file"], line=row["line"]), ""]
    return lines


def index_entries() -> list[dict[str, Any]]:
    """One ``message`` entry of the lookup per explained message, linked to its heading on its library's page. Its
    words are the message's own and its explanation's: the library's and the raising function's names, repeated over
    hundreds of entries, made them common words and moved library-matrix operations asked by those names off their
    entries."""
    return [{"id": f"message:{row['library']}-{row['id']}", "kind": "message", "zh": row["zh"], "en": row["en"],
             "text": row["text"], "message": row["text"], "notebook": None,
             "cell": None, "page": f"profiles-{row['library']}.html#{ANCHOR.format(id=row['id'])}", "weight": WEIGHT}
            for row in explained()]
