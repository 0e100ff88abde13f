"""The libraries' messages that concern hooks, pasted (tools/ask/library_pasted.py, tools/ask/library_messages.json):
the rule on texts written here, the committed population as the rule gives it on the installed libraries, the
held-out part drawn by its seed, and the lookup's figure on it held at what was measured before any tuning."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from patience import hang_guard
from tools.ask import library_pasted

pytestmark = pytest.mark.timeout(600)
# measured on the held-out part before the lookup was changed for any of these messages (2026-11-29): 16 of 155;
# after each message was explained on its library's page (docs/library_messages.toml), measured once: 155 of 155
HELD_OUT_FOUND_BEFORE = 16
GOAL = 0.9  # the issue's: the explaining place among the first three for at least nine in ten


def committed() -> dict:
    return json.loads(library_pasted.POPULATION.read_text(encoding="utf-8"))


def test_the_rule_keeps_the_texts_of_its_topics_and_leaves_the_rest():
    assert library_pasted.topics("You shouldn't move a model that is dispatched using accelerate hooks.") == ["hooks"]
    assert library_pasted.topics("The original forward was wrapped twice") == ["forward replaced"]
    assert library_pasted.topics("Could not replace the target module {name} with a LoRA layer") == [
        "module or parameter swapped"]
    assert library_pasted.topics("Backward through FP4 weights is not supported.") == ["gradients"]
    assert library_pasted.topics("a saved tensor was freed before backward") == ["saved tensors", "gradients"]
    assert library_pasted.topics("vocab_size must be a positive integer") == []
    assert library_pasted.topics("num_layers must divide the forward batch") == []


def test_the_held_out_part_is_drawn_by_the_seed_and_holds_at_least_150_messages():
    doc = committed()
    assert doc["seed"] == library_pasted.SEED and doc["share"] == library_pasted.SHARE
    ids = [m["id"] for m in doc["messages"]]
    assert ids == sorted(set(ids)) and [c["id"] for c in doc["cases"]] == ids
    for message, case in zip(doc["messages"], doc["cases"]):
        assert message["id"] == library_pasted.message_id(message["library"], message["text"])
        assert case["held out"] == library_pasted.is_held_out(message["id"])
        assert message["topics"] == library_pasted.topics(message["text"]) != []
    held = sum(c["held out"] for c in doc["cases"])
    assert held >= 150, f"{held} held-out messages: the measure needs at least 150"
    assert abs(held / len(ids) - library_pasted.SHARE) < 0.1
    assert library_pasted.cases(doc["messages"]) == doc["cases"], "the pastes are not what the seed draws"


def test_the_committed_population_is_what_the_rule_gives_on_the_installed_libraries():
    """In a fresh interpreter (it reads thirteen libraries' sources: about 45 s without the parse cache)."""
    run = subprocess.run([sys.executable, "-m", "tools.ask.library_pasted", "--check"], capture_output=True, text=True,
                         timeout=hang_guard(400), check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]


def test_the_lookup_puts_the_explaining_place_first_three_for_nine_in_ten_held_out_messages():
    result = library_pasted.measure(committed())
    held = result["held out"]
    print(f"pasted library messages, held out: {held['found']} of {held['cases']} in the first three "
          f"(before any tuning: {HELD_OUT_FOUND_BEFORE})")
    assert held["found"] >= GOAL * held["cases"], (
        f"{held['found']} of {held['cases']} held-out pastes found; missed: {held['misses'][:10]}")
