"""The unusual cells' programs (docs/programs/matrix.json, tools/hook_matrix/programs.py) stay current and true.

- The file lists exactly the unusual cells of docs/hook_matrix.json (the rule: tools/hook_matrix/programs.unusual), and
  every program in it is the program the generator writes now from the probe code, in each language, the two
  differing in comments only; a fix is the program changed as tools/hook_matrix/fixes.toml says.
- A seeded sample (``HOOKLAB_PROGRAMS_SEED``, else the ISO week) of programs and one fix run in a fresh interpreter
  print what the file records; what a sampled program prints agrees with its cell of the matrix (calls, error).
- The rule counts what it claims: a cell made to fire once more than its family's eager cell becomes unusual.
- The columns whose probe reads its own record (threads, grad-scaler) have programs that print the cell's notes;
  a process group's cell has a program that runs in two gloo processes and prints what its cell records.
- The matrix page shows the programs in both languages, and marks the cells that differ from their family's eager
  cell only in their warnings.
- Every unusual cell whose hook misbehaves and that has no fix was tried against the strategies of
  tools/hook_matrix/fixes.toml that apply to it, each attempt recorded with what it printed, or fixes.toml says why
  none applies; the workarounds known for forward-hook@jit-trace, forward-hook@quantization and
  param-hook@backward-inputs are found; a cell that differs from eager only in its warnings is labelled so in the
  file, on the page and in the lookup.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tools.hook_matrix import generate, outcomes, page as hook_matrix_page, programs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recorded():
    return json.loads(programs.OUT.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def cells():
    return generate.load()["cells"]


def test_the_file_lists_exactly_the_unusual_cells(recorded, cells):
    keys = programs.unusual(cells)
    assert list(recorded["programs"]) == keys
    surprising = [k for k, r in cells.items() if r.get("surprising") and r["status"] == "observed"]
    assert set(surprising) <= set(keys)
    for key, entry in recorded["programs"].items():  # every one has a program, a process group's too
        assert set(entry) >= {"show", "fix", "no_fix", "needs", "kind", "attempts"} and entry["show"] is not None, key
        assert entry["kind"] == programs.kind(key, cells), key
        assert ("processes:2" in entry["needs"]) == generate.matrix().needs_workers(key), key
        prints = entry["show"]["prints"]  # None: not run yet (python -m tools.hook_matrix programs runs it)
        assert prints is None or "calls: " in [line[:7] for line in prints.splitlines()], key
        assert (entry["fix"] is None) != (entry["no_fix"] is None), key


def test_the_recorded_programs_agree_with_their_cells_but_the_known_few(recorded, cells):
    found = {k for k, e in recorded["programs"].items() if e["show"] and e["show"]["prints"] is not None
             and not agrees(k, e["show"]["prints"], cells[k])}
    assert found <= DIFFERENT, sorted(found - DIFFERENT)


def test_the_rule_finds_a_cell_that_fires_otherwise_than_eager(cells):
    plain = next(k for k in cells if k.endswith("@eager") and cells[k]["status"] == "observed")
    family = plain.split("@")[0]
    usual = next(k for k, r in cells.items() if k.startswith(family + "@") and k != plain
                 and r["status"] == "observed" and k not in programs.unusual(cells))
    changed = copy.deepcopy(cells)
    changed[usual]["calls"] += 1
    assert usual in programs.unusual(changed)


@pytest.mark.timeout(600)
def test_every_program_is_what_the_generator_writes_now(recorded, cells):
    table = programs.fixes()
    stale = []
    for key, entry in recorded["programs"].items():
        for lang in ("en", "zh"):
            code = programs.program(key, lang, cells)
            if entry["show"]["code"][lang] != code:
                stale.append(f"{key} ({lang})")
            elif entry["fix"] is not None:
                change = next((c for c in programs.candidates(key, table) if c["what"] == entry["fix"]["what"]), None)
                if change is None or entry["fix"]["code"][lang] != programs.fixed(code, change, lang, key):
                    stale.append(f"{key} fix ({lang})")
        tried = [(a["strategy"], a["what"]) for a in entry["attempts"]]
        if entry["kind"] == "misbehaves" and tried != [(c["strategy"], c["what"]) for c in programs.candidates(key, table)]:
            stale.append(f"{key} attempts")
        assert programs._same_code(entry["show"]["code"]["en"], entry["show"]["code"]["zh"]), key
    assert not stale, ("docs/programs/matrix.json is not what the probe code gives now: "
                       f"{', '.join(stale[:10])}; python -m tools.hook_matrix programs writes it")


# where a program shows something else than its cell records, and why: the probe counts a forward that raises on
# purpose as no error (forward-hook-always-call); its recording hook keeps the module it is given, which Dynamo refuses
# (global-forward-pre-hook@compile, see the cell's note), while the program's hook keeps only the phase; the node
# creation hook counts the Nodes made, and the program's own lines make some others
DIFFERENT = {"global-forward-pre-hook@compile", "node-creation-hook@jit-trace", "node-creation-hook@quantization"}


def agrees(key: str, prints: str, record: dict) -> bool:
    calls, raised = programs._calls(prints)
    if key.startswith("forward-hook-always-call@"):
        return calls == record["calls"]
    return (calls, raised) == (record["calls"], record["error"] is not None)


@pytest.mark.timeout(900)
def test_a_sample_of_programs_prints_what_is_recorded(recorded, cells):
    runnable = [k for k, e in recorded["programs"].items() if e["show"] is not None and e["show"]["prints"] is not None]
    with_fix = [k for k, e in recorded["programs"].items() if e["fix"] is not None]
    chosen = programs.sample(runnable, 2)
    fix_key = programs.sample(with_fix, 1)
    for key in chosen:
        prints = programs.run_program(recorded["programs"][key]["show"]["code"]["en"])
        assert prints == recorded["programs"][key]["show"]["prints"], key
        assert key in DIFFERENT or agrees(key, prints, cells[key]), \
            f"{key}: the program prints {prints!r}, the matrix records {cells[key]['calls']} calls, " \
            f"error {cells[key]['error']!r}"
    for key in fix_key:
        fix = recorded["programs"][key]["fix"]
        prints = programs.run_program(fix["code"]["en"])
        assert prints == fix["prints"], key
        assert programs.fires_as_eager(prints, key, cells), key


@pytest.mark.timeout(300)
def test_the_programs_of_the_columns_that_read_the_probes_record_print_its_notes(recorded, cells):
    """The thread and grad-scaler columns' probe reads its own record (what each hook call saw, what it received);
    their programs keep that record themselves: each program is one, and one of each kind, run in a fresh
    interpreter, prints its cell's calls and notes (the loss scale's ratio; the thread, ContextVar and thread-local
    the hook saw)."""
    reading = [k for k in recorded["programs"] if k.split("@")[1] in ("thread", "contextvar", "contextvar-pool",
                                                                       "grad-scaler")]
    assert len(reading) >= 8 and all(recorded["programs"][k]["show"] is not None for k in reading), reading
    for key in ("param-hook@grad-scaler", "tensor-hook@contextvar"):
        prints = programs.run_program(recorded["programs"][key]["show"]["code"]["en"])
        notes = [line[len("note: "):] for line in prints.splitlines() if line.startswith("note: ")]
        assert notes == cells[key]["notes"] and notes, (key, prints)
        assert f"calls: {cells[key]['calls']} " in prints, (key, prints)


@pytest.mark.timeout(300)
def test_a_process_groups_program_runs_in_two_gloo_processes_and_prints_what_its_cell_records(recorded, cells):
    """A cell of a process group (a DDP row, an FSDP2 column) has a program that wraps the network as the probe's
    workers do and runs in two gloo processes of its own: run fresh, it prints rank 0's calls and error as the cell
    records them, and leaves no process behind."""
    import psutil

    group = [k for k in recorded["programs"] if generate.matrix().needs_workers(k)]
    assert len(group) >= 40, len(group)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    for key in ("ddp-comm-hook@retain-graph", "param-hook@fsdp2"):
        code = recorded["programs"][key]["show"]["code"]["en"]
        assert "run_workers(on_each_rank, world_size=2" in code and "def wrap(rig)" in code, key
        prints = programs.run_program(code)
        assert prints == recorded["programs"][key]["show"]["prints"], (key, prints)
        assert agrees(key, prints, cells[key]), (key, prints, cells[key]["calls"])
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_the_page_shows_the_programs_in_both_languages(recorded):
    doc = generate.load()
    some = next(k for k, e in recorded["programs"].items() if e["fix"] is not None)
    for lang in ("en", "zh"):
        text = hook_matrix_page.page(doc, lang)
        assert f"## {hook_matrix_page.PAGE[lang]['title']}" in text
        assert f"<code>{some}</code>" in text
        assert hook_matrix_page.PAGE[lang]["fix"].split("{")[0] in text
        assert text.count("<details>") == text.count("</details>")
        assert text.count("```") % 2 == 0
    bare = hook_matrix_page.page(doc, "en", programs=False)
    assert hook_matrix_page.PAGE["en"]["title"] not in bare


def test_the_page_marks_the_cells_that_differ_from_eager_only_in_their_warnings(recorded, cells):
    """An unusual cell whose observation is its family's eager cell's (what fired, how often, in which phases, what
    the hook received, what its return value did, the error, the notes, the other ways of writing the probe) and
    whose warnings differ is said so in its family's table and on its program, in both languages, with which
    warnings they are; a cell that also differs in anything else is not."""
    quiet = hook_matrix_page.warnings_only(cells)
    assert quiet["param-hook@jit-script"]["which"] == "deprecation"
    assert quiet["param-hook@jit-script"]["added"] == cells["param-hook@jit-script"]["warnings"]
    for other in ("node-creation-hook@jit-script",  # its return value is used where eager rejects it
                  "forward-hook-always-call@jit-trace",  # fires while tracing, not in the forward
                  "state-dict-pre-hook@quantization",  # receives another prefix
                  "state-dict-pre-hook@precompile"):  # the run notes that no backward runs
        assert cells[other]["warnings"] != cells[other.split("@")[0] + "@eager"]["warnings"], other
        assert other not in quiet, other
    assert set(quiet) <= set(recorded["programs"])  # each one is unusual
    assert all(not cells[k]["surprising"] for k in quiet)
    changed = copy.deepcopy(cells)  # another warning than a deprecation notice: which says so
    changed["param-hook@jit-script"]["warnings"] = ["UserWarning: something else"]
    assert hook_matrix_page.warnings_only(changed)["param-hook@jit-script"]["which"] == "other"
    changed["param-hook@jit-script"]["warnings"].append(cells["param-hook@jit-script"]["warnings"][0])
    assert hook_matrix_page.warnings_only(changed)["param-hook@jit-script"]["which"] == "both"
    changed["param-hook@jit-script"]["calls"] += 1
    assert "param-hook@jit-script" not in hook_matrix_page.warnings_only(changed)
    doc = generate.load()
    for lang in ("en", "zh"):
        text = hook_matrix_page.page(doc, lang)
        words = hook_matrix_page.TEXT[lang]["warnings_only"].split("{")[0]
        rows = {line.split(" | ")[2].strip("`"): line for line in text.splitlines()
                if line.startswith("| ") and line.count(" | ") == 3 and line.split(" | ")[2].strip("`") in cells}
        assert len(rows) == len(cells), lang  # each cell's row in its family's table
        assert {key for key, row in rows.items() if words in row} == set(quiet), lang
        for key, found in quiet.items():
            assert hook_matrix_page.warnings_label(found, lang) in rows[key], (lang, key)
        tag = hook_matrix_page.PAGE[lang]["tag"]
        assert f"<summary><code>param-hook@jit-script</code> · calls: 1 (backward 1) · {tag}</summary>" in text
        assert text.count(f" · {tag}</summary>") == len(quiet), lang
        deprecation = sum(found["which"] == "deprecation" for found in quiet.values())
        assert hook_matrix_page.PAGE[lang]["quiet"].format(quiet=len(quiet), unusual=len(recorded["programs"]),
                                                           deprecation=deprecation, tag=tag) in text, lang


def test_an_unusual_cell_without_a_fix_has_recorded_attempts_or_a_reason(recorded, cells):
    """A cell whose hook misbehaves and that has no fix was tried against every change of fixes.toml that applies to
    it (:func:`programs.candidates`), each attempt kept with what its program printed, which does not fire as the
    family's eager cell, and its no_fix lists them ("tried: ..."); or fixes.toml says why no strategy applies to it.
    A cell that behaves as in eager (warnings only, or firing as in eager) says so instead, with nothing tried."""
    table = programs.fixes()
    neither, wrong = [], []
    for key, entry in recorded["programs"].items():
        if entry["kind"] != "misbehaves":
            assert entry["fix"] is None and not entry["attempts"], key
            assert entry["no_fix"] == programs.verdict(key, cells), key
            continue
        if entry["fix"] is not None:
            assert entry["attempts"] and entry["attempts"][0]["fires_as_eager"] is not None, key
            first = next(a for a in entry["attempts"] if a["fires_as_eager"])
            assert (first["strategy"], first["what"]) == (entry["fix"]["strategy"], entry["fix"]["what"]), key
            continue
        if entry["attempts"]:
            for attempt in entry["attempts"]:
                if attempt["fires_as_eager"] or programs.fires_as_eager(attempt["prints"], key, cells):
                    wrong.append(f"{key}: {attempt['strategy']} fires as eager but is not its fix")
            assert entry["no_fix"] == programs.tried(entry["attempts"]), key
            assert entry["no_fix"]["en"].startswith("tried: ") and entry["no_fix"]["zh"].startswith("试过："), key
            assert all(a["name"]["en"] in entry["no_fix"]["en"] for a in entry["attempts"]), key
        elif programs.none_applies(key, table) is not None:
            why = programs.none_applies(key, table)
            assert entry["no_fix"] == {lang: programs.NONE_APPLIES[lang].format(why=why[lang]) for lang in ("en", "zh")}
        else:
            neither.append(key)
    assert not neither, f"cells with neither an attempt nor a reason in fixes.toml: {neither[:10]}"
    assert not wrong, wrong
    assert not [k for k, e in recorded["programs"].items() if e["no_fix"] == programs.NO_FIX]


def test_the_workarounds_known_for_four_cells_are_found(recorded, cells):
    """forward-hook@jit-trace: the hook registered on the traced module after tracing; forward-hook@quantization:
    dequantize, change, quantize again (registered after convert); param-hook@backward-inputs: the parameter passed in
    inputs; tensor-hook@retain-graph: the handle its registration in the forward returns kept, and removed after the
    first backward (a change that removed only the handles registered outside the forward left it, and it fired in
    the second backward too). Each is the cell's fix, and each fixed program, run fresh, fires as the family's eager
    cell."""
    known = {"forward-hook@jit-trace": ("on-the-result", "    model = torch.jit.trace(rig.net, (rig.x,))\n"
                                                         "    phase('register')\n    install(rig, model)\n"),
             "forward-hook@quantization": ("requantize", "torch.quantize_per_tensor(doubled, 2 * output.q_scale()"),
             "param-hook@backward-inputs": ("inputs", "backward(inputs=[rig.x, *rig.net.parameters()])"),
             "tensor-hook@retain-graph": ("remove-after", "rig.handles.append(h.register_hook(hook))")}
    for key, (strategy, written) in known.items():
        fix = recorded["programs"][key]["fix"]
        assert fix is not None and fix["strategy"] == strategy, (key, fix and fix["strategy"])
        assert written in fix["code"]["en"] and written in fix["code"]["zh"], key
        assert programs.fires_as_eager(fix["prints"], key, cells), key


def test_the_acceptance_rule_wants_the_phases_of_eager():
    """A hook that fires as often as in eager, but only while tracing, does not fire as in eager; a column that
    names its one compiled step otherwise is compared by the count."""
    eager = {"calls": 1, "by_phase": {"forward": 1}}
    assert programs.fires_as({"forward": 1}, False, eager, "jit-trace")
    assert not programs.fires_as({"trace": 1}, False, eager, "jit-trace")
    assert not programs.fires_as({"forward": 1}, True, eager, "jit-trace")
    assert not programs.fires_as({"forward": 2}, False, eager, "jit-trace")
    assert programs.fires_as({"step": 1}, False, {"calls": 1, "by_phase": {"backward": 1}}, "compiled-autograd")
    assert programs._printed("calls: 3 (save and load 1, second backward 2)\nerror: None\n") == \
        ({"save and load": 1, "second backward": 2}, None)
    assert programs._printed(f"calls: 1 (forward 1)\nerror: {outcomes.ON_PURPOSE}\n")[1] is None


def test_the_strategies_are_written_in_both_languages():
    """Each strategy of fixes.toml has a name, what it is and how it changes a program in both languages; each
    change names columns and families that exist and says what it does in both; each reason that no strategy
    applies is written in both."""
    table = programs.fixes()
    matrix = generate.matrix()
    assert len(table["strategy"]) >= 8
    for sid, strategy in table["strategy"].items():
        for field in ("name", "name_zh", "en", "zh", "how", "how_zh"):
            assert strategy.get(field), (sid, field)
        assert strategy["change"], sid
        for change in strategy["change"]:
            assert change["en"] and change["zh"] and change["replace"], sid
            assert set(change["contexts"]) <= set(matrix.CONTEXT_BY_ID), (sid, change["contexts"])
            programs._named(change.get("families", ["*"]) + change.get("except", []), table)
    for entry in table["none"]:
        assert entry["en"] and entry["zh"] and set(entry["contexts"]) <= set(matrix.CONTEXT_BY_ID), entry


def test_a_cell_that_differs_only_in_warnings_is_labelled_so(recorded, cells):
    """kind "warnings" is exactly the matrix page's warnings-only cells (hook_matrix_page.warnings_only): the file
    keeps which warnings differ, nothing is tried on them, and the lookup's title says "warnings only"; a cell that
    misbehaves is not one."""
    from tools.ask import index

    quiet = hook_matrix_page.warnings_only(cells)
    warned = {k: e for k, e in recorded["programs"].items() if e["kind"] == "warnings"}
    assert set(warned) == set(quiet) and warned, sorted(set(warned) ^ set(quiet))
    titles = {e["id"]: e for e in index.matrix_entries()}
    for key, entry in warned.items():
        assert entry["warnings"] == quiet[key], key
        assert entry["fix"] is None and not entry["attempts"], key
        assert entry["no_fix"]["en"].startswith("warnings only") and entry["no_fix"]["zh"].startswith("只差警告"), key
        deprecation = all(programs._is_deprecation(w) for w in entry["warnings"]["added"] + entry["warnings"]["gone"])
        assert (entry["warnings"]["which"] == "deprecation") == deprecation, key
        assert titles[f"matrix:{key}"]["en"].endswith(index.WARNINGS_ONLY[entry["warnings"]["which"]][0]), key
        assert titles[f"matrix:{key}"]["zh"].endswith(index.WARNINGS_ONLY[entry["warnings"]["which"]][1]), key
    mis = next(k for k, e in recorded["programs"].items() if e["kind"] == "misbehaves")
    assert mis not in quiet and not titles.get(f"matrix:{mis}", {}).get("en", "").endswith(
        index.WARNINGS_ONLY["deprecation"][0])


def test_the_page_counts_are_the_files(recorded, cells):
    """The programs section's sentence of counts (fixed / tried without a fix / no strategy applies / warnings only /
    fires as in eager) states what docs/programs/matrix.json holds, counted here from the file itself, in both
    languages; each cell's program says its fix, its attempts ("Tried:") or its kind."""
    entries = recorded["programs"]
    counted = {"unusual": len(entries), "fixed": sum(e["fix"] is not None for e in entries.values()),
               "tried": sum(e["kind"] == "misbehaves" and e["fix"] is None and bool(e["attempts"])
                            for e in entries.values()),
               "none": sum(e["kind"] == "misbehaves" and e["fix"] is None and not e["attempts"]
                           for e in entries.values()),
               "warnings": sum(e["kind"] == "warnings" for e in entries.values()),
               "deprecation": sum(e["kind"] == "warnings" and e["warnings"]["which"] == "deprecation"
                                  for e in entries.values()),
               "fires": sum(e["kind"] == "fires-as-eager" for e in entries.values())}
    assert counted["fixed"] + counted["tried"] + counted["none"] + counted["warnings"] + counted["fires"] \
        == counted["unusual"]
    assert counted["tried"] > 0 and counted["fixed"] > 0 and counted["fires"] > 0
    doc = generate.load()
    for lang in ("en", "zh"):
        text = hook_matrix_page.page(doc, lang)
        assert hook_matrix_page.PAGE[lang]["kinds"].format(**counted) in text, lang
        t = hook_matrix_page.PAGE[lang]
        assert text.count(f"\n{t['tried']}\n") == sum(bool(e["attempts"]) for e in entries.values()), lang
        assert text.count(f" · {t['fires_tag']}</summary>") == counted["fires"], lang
