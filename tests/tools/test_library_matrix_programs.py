"""The library matrix's programs (docs/programs/library_matrix.json, tools/profiles/cell_programs.py): every operation
with an unusual cell has one, each printed the matrix's cells as they are now, a seeded sample is what the generator
writes now from cells.py, and the library pages fold them in both languages. tests/tools/test_programs.py runs them
with the other programs (a sample per push, every one with ``HOOKLAB_PROGRAMS=all``)."""
from __future__ import annotations

import json
import re

import pytest

from commit_seed import seed
from tools.profiles import cell_programs, page

pytestmark = pytest.mark.tools
ROOT = cell_programs.ROOT


@pytest.fixture(scope="module")
def stored():
    return cell_programs.load()


@pytest.fixture(scope="module")
def matrix():
    return json.loads(page.LIBRARY_MATRIX.read_text(encoding="utf-8"))


@pytest.mark.timeout(60)
def test_every_operation_with_an_unusual_cell_has_a_program_that_printed_its_cells(stored, matrix):
    assert sorted(stored) == sorted(cell_programs.wanted(matrix))
    shown = set()
    for operation, entry in stored.items():
        assert entry["show"], f"{operation}: no program ({entry.get('no_program')})"
        printed = cell_programs.printed_cells(entry["show"]["prints"], operation, entry["families"])
        assert printed == cell_programs.expected_cells(matrix, operation, entry["families"]), \
            f"{operation}: what its program printed is not the matrix's cells now"
        shown |= set(entry["cells"])
    assert shown == set(matrix["unusual"]["cells"])  # every unusual cell is shown by a program


@pytest.mark.timeout(120)
def test_a_seeded_sample_of_programs_is_what_the_generator_writes_now():
    assert cell_programs.check(seed(ROOT)) == []


def test_a_program_is_written_out_and_reads_nothing_of_the_repository(stored):
    for operation, entry in stored.items():
        for lang, code in entry["show"]["code"].items():
            assert not re.search(r"\btools\.profiles|(?<!\.)\bmodules\(\)", code), operation
            compile(code, operation, "exec")  # it parses
            assert code.startswith(f"# {operation}{':' if lang == 'en' else '：'}"), (operation, lang)


def test_a_case_made_in_a_loop_is_written_once_per_name():
    cases = cell_programs.case_sources()
    assert cases["torch_ao_quantization:quantize_jit"] == \
        "Case('torch_ao_quantization:quantize_jit', _scripted_and('quantize_jit'))"


def test_a_case_reading_another_profiles_module_gets_no_program():
    with pytest.raises(ValueError, match="another profile's module"):
        cell_programs._own_module("def f(m):\n    from tools.profiles.libraries import captum\n    return m\n",
                                  "peft")
    assert cell_programs._own_module("def f(m):\n    from tools.profiles.libraries import peft as profile\n"
                                     "    return profile.inputs()\n", "peft") == \
        "def f(m):\n    profile = PROFILE\n    return profile.inputs()\n"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_library_page_folds_each_operations_program(lang, stored, matrix):
    lines = page.operations_section("peft", lang, matrix, stored)
    text = "\n".join(lines)
    programs = [op for op in stored if op.startswith("peft:")]
    assert text.count("<details>") == len(programs) > 0
    assert stored["peft:LoraModel.unload"]["show"]["code"][lang] in text
    assert stored["peft:LoraModel.unload"]["show"]["prints"] in text
    assert "<details>" not in "\n".join(page.operations_section("peft", lang, matrix, {}))


def test_the_lookup_entry_of_an_operation_carries_its_program(stored):
    """course.ask's entry of an operation (profile:<slug>:<operation>) gets the operation's program, so that
    ``hit.run()`` observes its cells again where the question was asked."""
    from tools.ask import index
    entries = [{"id": f"profile:{operation}"} for operation in stored]
    assert index.attach_programs(entries) == len(stored)
    assert all(e["program"]["show"] == stored[e["id"].split(":", 1)[1]]["show"] for e in entries)
