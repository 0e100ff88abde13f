"""The library profiles' programs (docs/programs/profiles.json, tools/profiles/programs.py) stay current and reach the
learner: every surprise of hooklab/course/assets/profiles/library_profiles.json has a record, a seeded sample of
programs is what the generator writes now from the profiles' code, a show program of a ``facts.<name>`` fact prints
the value the profile stores, the profile pages fold them in both languages, and the lookup's profile entries carry
them. tests/tools/test_programs.py runs them."""
from __future__ import annotations

import json

import pytest

from commit_seed import seed
from tools.ask import index
from tools.profiles import page, programs
from tools.profiles.fixes import NO_FIX

pytestmark = pytest.mark.tools
ROOT = programs.ROOT


@pytest.fixture(scope="module")
def stored():
    return json.loads(programs.OUT.read_text(encoding="utf-8"))["programs"]


@pytest.mark.timeout(120)
def test_every_surprise_has_a_record_and_source_profiles_no_program(stored):
    doc = programs.profiles()
    assert list(stored) == programs.build_records_ids()
    for slug, record in doc.items():
        for i, surprise in enumerate(record["surprises"], 1):
            if record["status"] == "source":
                entry = stored[f"{slug}:source-{i}"]
                assert entry["show"] is None and entry["no_program"]["en"] and entry["no_program"]["zh"]
            else:
                pid = f"{slug}:{surprise['fact']}"
                entry = stored[pid]
                assert entry["show"]["code"]["en"] and (entry["fix"] is None) != (entry["no_fix"] is None)
                # each measured surprise has its program of what to do instead, or says why there is none
                assert entry["fix"] is not None or pid in NO_FIX, f"{pid}: no fix in tools/profiles/fixes.py"


@pytest.mark.timeout(240)
def test_a_seeded_sample_is_what_the_generator_writes_now():
    assert programs.check(seed(ROOT)) == []


@pytest.mark.timeout(60)
def test_a_facts_program_prints_the_value_the_profile_stores(stored):
    checked = 0
    for pid, entry in stored.items():
        slug, fact = pid.split(":", 1)
        if entry["show"] and fact.startswith("facts.") and entry["show"]["prints"] is not None:
            expected = json.dumps(programs.stored_value(slug, fact), indent=1, sort_keys=True, ensure_ascii=False)
            assert entry["show"]["prints"] == expected, pid
            checked += 1
    assert checked > 80


@pytest.mark.timeout(60)
def test_a_program_is_standalone_and_its_two_languages_differ_in_comments_only(stored):
    for pid, entry in stored.items():
        for part in ("show", "fix"):
            program = entry.get(part)
            if not program:
                continue
            en, zh = program["code"]["en"], program["code"]["zh"]
            strip = [line for line in en.splitlines() if not line.startswith("# ")]
            assert strip == [line for line in zh.splitlines() if not line.startswith("# ")], pid
            assert "from .." not in en and "from ._" not in en and "LIBRARY" not in en, pid
            compile(en, pid, "exec")
    ddp = stored["ddp:probe.survives.loads_fresh_state_dict"]["show"]["code"]["en"]
    assert "def one_process_group" in ddp and "def build" in ddp  # the helpers it uses, written out


@pytest.mark.timeout(60)
def test_a_wandb_program_makes_wandb_silent_itself(stored):
    """wandb prints its banner (run folder, how to sync) unless ``WANDB_SILENT`` is set: a program that imports wandb
    sets it itself before its ``wandb.init``, so that a reader's run prints what the file stores, and the generator's
    environment does not set it for the programs (which would hide a program that forgets to)."""
    assert "WANDB_SILENT" not in programs.ENV
    silent = 'os.environ["WANDB_SILENT"] = "true"'
    checked = 0
    for pid, entry in stored.items():
        for part in ("show", "fix"):
            code = (entry.get(part) or {}).get("code", {}).get("en", "")
            if "import wandb" in code:
                assert silent in code and code.index(silent) < code.index("wandb.init("), f"{pid} ({part})"
                checked += 1
    assert checked >= 6


@pytest.mark.timeout(60)
def test_the_generator_takes_only_the_definitions_a_program_uses():
    body = programs.program_body("prune", ("apply",), "print(apply)\n")
    assert "def apply" in body and "def build" not in body and "def facts" not in body
    with pytest.raises(SystemExit, match="no such program"):
        programs.main(["--only", "prune:facts.no_such_fact", "--print"])


@pytest.mark.timeout(120)
def test_the_profile_page_folds_each_surprise_program_in_both_languages(stored):
    doc = page.load()
    record = doc["libraries"]["prune"]
    pid = "prune:probe.survives.deepcopy"
    zh = page.library_page("prune", record, "zh", {}, stored)
    en = page.library_page("prune", record, "en", {}, stored)
    assert stored[pid]["show"]["code"]["zh"].rstrip() in zh and stored[pid]["show"]["code"]["en"].rstrip() in en
    assert "<details>" in zh and "演示它的程序" in zh and "The program that shows it" in en
    assert stored[pid]["fix"]["code"]["zh"].rstrip() in zh and "What to do instead" in en
    assert "<details>" not in page.library_page("prune", record, "en", {}, {})
    source = next(s for s, r in doc["libraries"].items() if r["status"] == "source" and r["surprises"])
    assert "读自源码" in page.library_page(source, doc["libraries"][source], "zh", {}, stored)


@pytest.mark.timeout(60)
def test_a_profile_entry_of_the_lookup_carries_the_list_of_its_programs(tmp_path, stored):
    folder = tmp_path / "programs"
    folder.mkdir()
    keep = {k: v for k, v in stored.items() if k.startswith(("prune:", "ddp:", "vllm:"))}
    (folder / "profiles.json").write_text(json.dumps({"about": "test", "programs": keep}), encoding="utf-8")
    entries = [{"id": "profile:prune"}, {"id": "profile:ddp"}, {"id": "profile:vllm"}, {"id": "profiles:prune"}]
    attached = index.attach_programs(entries, folder)
    assert attached == sum(1 for v in keep.values() if v["show"])
    assert [p["id"] for p in entries[0]["programs"]] == sorted(k for k in keep if k.startswith("prune:"))
    assert entries[0]["programs"][0]["show"] == keep[entries[0]["programs"][0]["id"]]["show"]
    assert "programs" not in entries[2] and "programs" not in entries[3]  # source-only: nothing to run


@pytest.mark.timeout(3600)
def test_every_program_of_a_library_beside_the_environment_prints_what_is_stored(stored, monkeypatch):
    """Weekly (HOOKLAB_PROGRAMS=all, as tests/tools/test_programs.py runs every program of this environment): each
    program of a library absent from the course's lock, run with the profile's pinned release installed beside the
    environment, prints what the file stores."""
    import os
    if os.environ.get("HOOKLAB_PROGRAMS") != "all":
        pytest.skip("every program run beside the environment is weekly (HOOKLAB_PROGRAMS=all); each push runs a "
                    "sample of those of this environment (tests/tools/test_programs.py)")
    monkeypatch.setenv("WANDB_SILENT", "false")  # a reader's setting: wandb's programs print the same whatever it is
    ran = 0
    for pid, entry in stored.items():
        for part in ("show", "fix"):
            program = entry.get(part)
            if program and program.get("ran") == "beside":
                out = programs.run_fresh(program["code"]["en"], beside=entry["requires"])
                assert out == program["prints"], f"{pid} ({part}) prints\n{out}\nthe file stores\n{program['prints']}"
                ran += 1
    assert ran >= 20, f"only {ran} programs are recorded as run beside the environment"
