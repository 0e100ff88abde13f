"""One fact cut out of a profile's ``facts()`` (tools/profiles/slicing.py): what the cut keeps and leaves out, where it
refuses, and that the cut programs of docs/programs/profiles.json print what the profile stores (run by
tests/tools/test_programs.py; here the stored outputs and one cut run afresh)."""
from __future__ import annotations

import json
import textwrap

import pytest

from tools.profiles import programs
from tools.profiles.slicing import fact_slice

pytestmark = pytest.mark.tools

FACTS = textwrap.dedent('''\
    def facts():
        import torch
        torch.manual_seed(0)
        model, log, seen = build(), [], {}
        model.register_forward_hook(lambda m, a, o: log.append("fired"))
        handle = model.register_forward_pre_hook(lambda m, a: seen.update(pre=True))
        model(x)
        count = len(log)
        other = build()
        other.register_forward_hook(lambda m, a, o: None)
        other(x)
        handle.remove()
        log.clear()
        return {"calls": count, "other_hooks": len(other._forward_hooks), "seen": seen}
    ''')


def _statements(code: str) -> list[str]:
    return [line.strip() for line in code.splitlines() if line.strip()]


@pytest.mark.timeout(30)
def test_the_cut_keeps_what_the_value_reaches_and_drops_the_rest():
    cut = fact_slice(FACTS, "calls")
    assert cut is not None and cut.value == "count" and not cut.in_function
    kept = _statements(cut.code)
    # the seed (global state) and everything that touches the hooked model's objects, in order
    assert kept[:3] == ["import torch", "torch.manual_seed(0)", "model, log, seen = build(), [], {}"]
    assert "model(x)" in kept and "count = len(log)" in kept
    # another model, and what happens after the value was taken, are not needed
    assert not any(s.startswith(("other", "handle.remove", "log.clear")) for s in kept)
    other = fact_slice(FACTS, "other_hooks")
    assert other is not None and "other.register_forward_hook(lambda m, a, o: None)" in other.code
    assert "handle.remove()" not in other.code  # after the return's statements there is nothing, before: unrelated
    assert cut.kept < cut.total


@pytest.mark.timeout(30)
def test_an_import_kept_for_what_importing_does_stays():
    code = textwrap.dedent('''\
        def facts():
            import library.progress  # adds Learner.no_bar
            from library import Learner
            learn = Learner(build())
            with learn.no_bar():
                learn.fit()
            return {"calls": learn.calls}
        ''')
    cut = fact_slice(code, "calls")
    assert cut is not None and "import library.progress" in cut.code and "from library import Learner" in cut.code


@pytest.mark.timeout(30)
def test_a_value_that_cannot_be_located_or_reads_patched_module_state_gets_no_cut():
    spread = FACTS.replace('"seen": seen}', '**seen}')
    assert fact_slice(spread, "pre") is None  # an entry spread in with **
    filled_later = textwrap.dedent('''\
        def facts():
            out = {"calls": {}}
            for label in ("a", "b"):
                out["calls"][label] = label
            return out
        ''')
    assert fact_slice(filled_later, "calls") is None  # out["calls"] is filled after the dict is made
    patched = textwrap.dedent('''\
        def facts():
            import library
            library.initialize(build())
            return {"linear": torch.nn.functional.linear.__qualname__}
        ''')
    assert fact_slice(patched, "linear") is None  # a library may have replaced the function anywhere
    with pytest.raises(ValueError, match="no function facts"):
        fact_slice("x = 1\n", "calls")


@pytest.mark.timeout(30)
def test_statements_that_declare_nonlocal_names_stay_in_a_function():
    code = textwrap.dedent('''\
        def facts():
            calls = 0
            def hook(*args):
                nonlocal calls
                calls += 1
            model = build()
            model.register_forward_hook(hook)
            model(x)
            return {"calls": calls}
        ''')
    cut = fact_slice(code, "calls")
    assert cut is not None and cut.in_function
    tail = programs._slice_tail(cut)
    assert "def measure():" in tail and "    return calls" in tail
    compile(tail, "tail", "exec")


@pytest.mark.timeout(60)
def test_most_facts_programs_are_cut_and_each_cut_one_prints_the_stored_value():
    stored = json.loads(programs.OUT.read_text(encoding="utf-8"))["programs"]
    facts = {pid: e for pid, e in stored.items() if e.get("show") and pid.split(":", 1)[1].startswith("facts.")}
    cut = {pid: e for pid, e in facts.items() if "def facts(" not in e["show"]["code"]["en"]}
    assert len(cut) >= 0.8 * len(facts), (len(cut), len(facts))
    for pid, entry in cut.items():
        slug, fact = pid.split(":", 1)
        expected = json.dumps(programs.stored_value(slug, fact), indent=1, sort_keys=True, ensure_ascii=False)
        assert entry["show"]["prints"] == expected, pid
        assert entry["show"]["ran"] in ("here", "beside"), pid  # what it prints came from running it
        shorter = len(entry["show"]["code"]["en"].splitlines())
        assert shorter < len((programs.LIBRARIES / f"{slug}.py").read_text(encoding="utf-8").splitlines()), pid


@pytest.mark.timeout(180)
def test_a_cut_program_run_afresh_prints_the_profiles_value():
    pid = "swa_utils:facts.copied_hooks"
    record = programs.build_records({pid})[pid]
    assert "def facts(" not in record["show"]["code"]["en"]
    out = programs.run_fresh(record["show"]["code"]["en"], timeout=150)
    assert out == json.dumps(programs.stored_value("swa_utils", "facts.copied_hooks"), indent=1, sort_keys=True,
                             ensure_ascii=False)
