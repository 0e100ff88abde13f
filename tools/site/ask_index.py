"""The course's own places as ``course.ask`` ranks them, written into each language's site for its search page.

A question in a learner's own words ("hook not firing", 钩子没有被调用, 显存一直涨) is answered on the site as it is
by ``course.ask(query, kinds=LEARNER_KINDS)`` (hooklab/course/asking.py): the same index, the same terms (English
words lightly stemmed, pairs of Chinese characters, one term per phrase of its SYNONYMS), the same BM25 and the
same weight for a title that says what the question says. This module writes what the browser needs for that into
``<lang>/_static/hooklab-ask.json``; tools/site/_static/hooklab-ask.js ranks with it (a port of ``ask``'s scoring
that reads the synonyms, stop words and weights from this file, so that there is one table of them), and
tests/tools/test_browser.py checks that the browser's first place is Python's for every learner query.

What it holds: the symptoms (each kind of silent symptom and each symptom cell) and the notebooks' sections, each
with its link on this language's site (a section's anchor from its heading, as the site makes it: docutils' on the
English site, tools/site/pages.py's heading_id on the Chinese one), its
title, its terms with their counts and its title's terms; every term's weight (idf) over the whole index, as
``course.ask`` computes it; and the average length. A place whose page this build leaves out (a quicker build of
some notebooks) is left out.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from docutils import nodes

from hooklab.course import asking

from .pages import heading_id

FILE = Path("_static") / "hooklab-ask.json"
_NOTEBOOK_PREFIX = re.compile(r"^\d\d · ")  # a section's title: "03 · 4. Several hooks…" (its heading is "4. …")


def link(entry: dict[str, Any], lang: str) -> str:
    """The entry's place on a language's site, relative to the language's root: a symptom's anchor as the index
    names it, a section's from its heading in that language.

    >>> link({"kind": "section", "page": "03_module_forward_hooks.html", "en": "03 · 4. Several hooks: order",
    ...       "zh": "03 · 4. 多个钩子：顺序"}, "zh")
    '03_module_forward_hooks.html#多个钩子-顺序'
    """
    if entry["kind"] != "section":
        return entry["page"]
    heading = _NOTEBOOK_PREFIX.sub("", entry[lang])
    return f"{entry['page']}#{heading_id(heading) if lang == 'zh' else nodes.make_id(heading)}"


def site_index(lang: str, present: set[str] | None = None) -> dict[str, Any]:
    """What the search page ranks a learner's words with, for the ``lang`` site; ``present``: the site's page file
    names (a place on another page is left out), None for all."""
    entries, counts, idf, average, titles = asking._index()
    chosen = [(entry, count, title) for entry, count, title in zip(entries, counts, titles, strict=True)
              if entry["kind"] in asking.LEARNER_KINDS and entry.get("page")
              and (present is None or entry["page"].split("#")[0] in present)]
    vocabulary = sorted({t for _, count, title in chosen for t in [*count, *title[0], *title[1]]})
    number = {term: i for i, term in enumerate(vocabulary)}
    places = [{"id": entry["id"], "kind": entry["kind"], "link": link(entry, lang), "title": entry[lang] or entry["en"],
               "terms": [x for term in sorted(count, key=number.get) for x in (number[term], count[term])],
               "titles": [sorted(number[t] for t in words) for words in title]}
              for entry, count, title in chosen]
    return {
        "about": "The course's own places for the search page's learner words, as course.ask ranks them. Written by "
                 "tools/site/ask_index.py from hooklab/course/assets/ask/index.json; do not edit.",
        "synonyms": asking.SYNONYMS, "stop": sorted(asking._STOP), "group_weight": asking.GROUP_WEIGHT,
        "title_weight": asking.TITLE_WEIGHT, "average": average, "vocabulary": vocabulary,
        "idf": [round(idf.get(term, 0.0), 6) for term in vocabulary], "places": places,
    }


def write(folder: Path, lang: str) -> Path:
    """Write ``folder``/_static/hooklab-ask.json for the built ``lang`` site in ``folder``."""
    present = {p.name for p in folder.glob("*.html")}
    path = folder / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(site_index(lang, present), ensure_ascii=False, separators=(",", ":")),
                    encoding="utf-8")
    return path
