"""The profiled libraries' own messages that concern hooks (tools/ask/library_messages.json, issue 79 item 4) are each
explained once, in both languages, at the place that raises them (docs/library_messages.toml, tools/profiles/messages.py):
on the library's page of the site under an anchor of their own, and in the lookup, where a paste of one lands on it."""
from __future__ import annotations

import math
import re
import sysconfig
from pathlib import Path

import pytest

from tools.profiles import messages

pytestmark = pytest.mark.timeout(300)
CJK = re.compile(r"[\u4e00-\u9fff]")
SITE = Path(sysconfig.get_paths()["purelib"])


def test_every_message_of_the_population_is_explained_once_somewhere():
    """Each message is explained here or by another place of the lookup that holds it (a row of the message index
    with its cell, a recipe), never missing; and not here as well as by a row of the message index."""
    from hooklab.course.asking import message_key
    from tools.ask.index import MESSAGES, _load

    assert [m["text"][:80] for m in messages.missing()] == []
    rows = {message_key(r["text"]) for r in _load(MESSAGES)["messages"] if r.get("en") and r.get("notebook")}
    assert [r["id"] for r in messages.explained() if message_key(r["text"]) in rows] == []


def test_each_explanation_is_in_both_languages_and_names_the_function_that_raises_it():
    from tests.course.test_glossary import GLOSSARY_VARIANTS

    ruled_out = {v.lower(): term for term, variants in GLOSSARY_VARIANTS.items() for v in variants}
    bad = []
    for row in messages.explained():
        if CJK.search(row["en"]) or not CJK.search(row["zh"]) or len(row["en"]) > 420:
            bad.append((row["id"], "language or length"))
        bad += [(row["id"], f"{v} (the glossary says {t})") for v, t in ruled_out.items() if v in row["zh"].lower()]
        source = (SITE / row["file"]).read_text(encoding="utf-8")
        name = row["where"].rstrip("()").split(".")[-1]
        if not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", source, re.M) and name != "<module>":
            bad.append((row["id"], f"{row['where']} is not defined in {row['file']}"))
    assert bad == []


def test_the_library_page_gives_each_message_a_heading_with_its_anchor():
    rows = messages.explained()
    for slug in sorted({r["library"] for r in rows}):
        for lang in ("zh", "en"):
            lines = messages.section(slug, lang)
            targets = re.findall(r"^\(libmsg-(\w+)\)=$", "\n".join(lines), re.M)
            assert sorted(targets) == sorted(r["id"] for r in rows if r["library"] == slug), (slug, lang)
            assert all(lines[lines.index(f"(libmsg-{t})=") + 1].startswith("### ") for t in targets)
    assert messages.section("no-such-library", "en") == []


def test_an_explanation_of_a_message_the_population_lost_is_named(tmp_path):
    path = tmp_path / "explained.toml"
    path.write_text('["000000000000"]\nen = "a"\nzh = "甲"\nwhere = "f"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="population does not hold"):
        messages.explained(path)


def test_a_pasted_message_lands_on_its_library_page():
    """One message of each library explained here, pasted as the measure pastes it (tools.ask.library_pasted), has
    the entry that explains it first."""
    from hooklab.course.asking import ask
    from tools.ask.library_pasted import cases

    rows = messages.explained()
    first = {r["library"]: r for r in reversed(rows)}
    pasted = {c["id"]: c["paste"] for c in cases(list(first.values()))}
    for library, row in sorted(first.items()):
        hits = ask(pasted[row["id"]], k=3, lang="en")
        assert hits and hits[0].page == f"profiles-{library}.html#libmsg-{row['id']}", (library, pasted[row["id"]])


def test_the_explained_messages_leave_how_words_weigh_as_it_was():
    """Their explanations say "forward", "hook" and a library's name on nearly every line: counted in the lookup's
    statistics, they made those words common and moved library-matrix operations asked by name off their entries.
    How rare a word is and an entry's usual length are those of the index without them."""
    from hooklab.course.asking import _index, tokens

    entries, counts, idf, average, _ = _index()
    plain = [c for c, e in zip(counts, entries) if "#libmsg-" not in (e.get("page") or "")]
    assert len(entries) - len(plain) == len(messages.explained())
    assert average == pytest.approx(sum(sum(c.values()) for c in plain) / len(plain))
    n = len(plain)
    for term in tokens("forward hook transformers opacus merge adapter"):
        f = sum(term in c for c in plain)
        assert idf[term] == pytest.approx(math.log(1 + (n - f + 0.5) / (f + 0.5))), term


def test_the_population_it_reads_is_the_one_the_measure_writes():
    from tools.ask import library_pasted

    assert messages.POPULATION == library_pasted.POPULATION
