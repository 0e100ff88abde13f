"""The test gate (tools/gate/, ``./course test``) chooses what a push runs by its rules, and catches what it must:
every check of the rotation runs within 4 consecutive commits (a broken one is caught, end to end, in a git
history of its own), a change touches the checks that read what changed and no other, touched checks beyond the
budget all run within as many commits as their slices, a recipe's own cells decide whether it is touched (not the
notebook it sits in), and a traced run records what a check ran and read, in its process and in the processes it
started. The gate's modules' docstring examples run here too (tools/ is not among pytest's doctest paths)."""
from __future__ import annotations

import doctest
import importlib
import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from patience import hang_guard
from tools.gate import command, costs, plan, populations, record
from tools.gate.checks import Check, check_of, checks

ROOT = Path(__file__).resolve().parents[2]
GATE_MODULES = ("checks", "record", "plan", "plugin", "populations", "costs", "trace", "command")


@pytest.mark.parametrize("name", GATE_MODULES)
def test_the_gate_modules_docstring_examples_run(name):
    module = importlib.import_module(f"tools.gate.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


NOTEBOOK = json.dumps({"cells": [{"cell_type": "code", "source": "import os\n", "outputs": []}], "metadata": {},
                       "nbformat": 4, "nbformat_minor": 5})
SLOW = [f"tests/tools/test_slow_{k}.py" for k in "abcdefgh"]


def small_tree(tmp_path: Path) -> Path:
    files = {"tests/tools/test_fast.py": "def test_f():\n    assert True\n",
             "tests/helper.py": "VALUE = 1\n",
             "notebooks/00_intro.ipynb": NOTEBOOK, "recipes/01_autograd.ipynb": NOTEBOOK, "docs/data.json": "{}"}
    files.update({s: "import helper\n\ndef test_s():\n    assert helper.VALUE\n" for s in SLOW})
    return tree(tmp_path, files)


def make(root: Path, mode: str = "push", **kw) -> plan.Plan:
    """A plan of the tree at root with its records given (no git history: the commit number is given)."""
    cost = {"tests/tools/test_fast.py": 2.0, **{s: 100.0 for s in SLOW},
            "notebooks/00_intro.ipynb[scalar-cpu]": 30.0, "recipes/01_autograd.ipynb": 10.0,
            "recipes/01_autograd.ipynb[scalar-cpu]": 10.0}
    args = {"members": {}, "passed": {}, "costs": cost, "reads": {}, "count": 0, "commit": "abc", **kw}
    return plan.make(mode, root=root, **args)


def all_passed(root: Path, reads: dict | None = None) -> dict[str, str]:
    """Records as if every check had just passed."""
    return dict(make(root, reads=reads or {}).hashes)


def test_each_check_goes_to_its_tier(tmp_path):
    root = small_tree(tmp_path)
    ids = {c.id for c in checks(root)}
    assert ids == {"tests/tools/test_fast.py", *SLOW, "notebooks/00_intro.ipynb", "notebooks/00_intro.ipynb[scalar-cpu]",
                   "recipes/01_autograd.ipynb", "recipes/01_autograd.ipynb[scalar-cpu]"}
    fresh = make(root)  # nothing passed yet: everything but the fast tests and the course notebooks is touched
    assert fresh.tiers["tests/tools/test_fast.py"] == "fast"
    assert fresh.tiers["notebooks/00_intro.ipynb"] == "notebooks"
    assert {fresh.tiers[s] for s in SLOW} == {"touched"}
    settled = make(root, passed=all_passed(root))
    assert {settled.tiers[s] for s in SLOW} <= {"rotation", "skip"} and settled.count_of("touched") == 0
    assert settled.tiers["notebooks/00_intro.ipynb[scalar-cpu]"] in ("rotation", "skip")


def test_every_rotated_check_runs_within_four_consecutive_commits(tmp_path):
    root = small_tree(tmp_path)
    passed = all_passed(root)
    for start in range(0, 7):
        ran = [{c for c, t in make(root, passed=passed, count=n).tiers.items() if t == "rotation"}
               for n in range(start, start + plan.PARTS)]
        rotated = {c for c, t in make(root, passed=passed, count=start).tiers.items() if t in ("rotation", "skip")}
        assert set().union(*ran) == rotated and len(rotated) == len(SLOW) + 3
        assert all(ran), "a part that runs nothing"


def test_a_new_test_file_moves_no_other_check_between_rotation_parts(tmp_path):
    """A check not measured yet goes to a part by its id's hash: balancing it with the others moved a third of the
    suite's checks between parts when one test file was added, and a check moved back by a part waits up to 7
    commits."""
    root = small_tree(tmp_path)
    parts_before = {c: n for n in range(plan.PARTS) for c, t in make(root, passed=all_passed(root), count=n).tiers.items()
                    if t == "rotation"}
    (root / "tests/tools/test_slow_new.py").write_text("def test_n():\n    assert True\n", encoding="utf-8")
    after = {c: n for n in range(plan.PARTS) for c, t in make(root, passed=all_passed(root), count=n).tiers.items()
             if t == "rotation"}
    assert {c: after[c] for c in parts_before} == parts_before
    assert after["tests/tools/test_slow_new.py"] == zlib.crc32(b"tests/tools/test_slow_new.py") % plan.PARTS


def test_a_change_touches_the_checks_that_read_it_and_no_other(tmp_path):
    root = small_tree(tmp_path)
    reads = {SLOW[0]: ["docs/data.json"], SLOW[1]: ["tests/helper.py"]}
    passed = all_passed(root, reads)
    (root / "docs/data.json").write_text('{"changed": 1}', encoding="utf-8")
    touched = {c for c, t in make(root, passed=passed, reads=reads).tiers.items() if t == "touched"}
    assert touched == {SLOW[0]}
    # a check not traced reads what it imports: helper.py for every slow test
    (root / "tests/helper.py").write_text("VALUE = 2\n", encoding="utf-8")
    touched = {c for c, t in make(root, passed=passed, reads=reads).tiers.items() if t == "touched"}
    assert touched == {SLOW[0], SLOW[1], *SLOW[2:]}
    # a file added to a folder a check lists
    reads = {SLOW[0]: ["docs"]}
    passed = all_passed(root, reads)
    (root / "docs/more.json").write_text("{}", encoding="utf-8")
    assert make(root, passed=passed, reads=reads).tiers[SLOW[0]] == "touched"


def test_touched_checks_over_the_budget_run_in_slices_all_within_that_many_commits(tmp_path, monkeypatch):
    root = small_tree(tmp_path)
    monkeypatch.setattr(plan, "BUDGET_S", 250.0)
    monkeypatch.setattr(plan, "TOUCHED_FLOOR_S", 250.0)
    first = make(root, count=0)
    assert first.slices > 1 and first.deferred and "slices" in first.header()
    ran = set()
    for n in range(first.slices):
        p = make(root, count=n)
        assert p.cost("touched") <= 250.0 + 100.0  # a slice: at most the room and one check
        ran |= {c for c, t in p.tiers.items() if t == "touched"}
    assert ran == {c for c, t in make(root, mode="touched").tiers.items() if t == "touched"}


def test_a_recipe_is_touched_by_its_own_cells_not_by_its_neighbours_or_its_notebook(tmp_path):
    source = sorted((ROOT / "recipes").glob("[0-9][0-9]_*.ipynb"))[0]
    (tmp_path / "recipes").mkdir()
    shutil.copy(source, tmp_path / "recipes" / source.name)
    before = populations.recipes_alone(tmp_path)
    assert len(before) >= 2
    first, second = list(before)[:2]
    nb = json.loads((tmp_path / "recipes" / source.name).read_text(encoding="utf-8"))
    from tools.recipes.pages import split

    _setup, recipes = split(nb)
    cell = next(c for c in dict(recipes)[second] if c["cell_type"] == "code")
    cell["source"] = "".join(cell["source"]) + "\n# edited\n"
    (tmp_path / "recipes" / source.name).write_text(json.dumps(nb), encoding="utf-8")
    after = populations.recipes_alone(tmp_path)
    assert after[first][0] == before[first][0] and after[second][0] != before[second][0]
    (tmp_path / "recipes" / source.name).rename(tmp_path / "recipes" / "99_moved_here.ipynb")
    moved = populations.recipes_alone(tmp_path)
    assert moved[first][0] == before[first][0] and moved[first][1] == "recipes/99_moved_here.ipynb"


def git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


def test_the_rotation_catches_a_broken_check_within_four_consecutive_commits(tmp_path):
    """A check breaks without any of its inputs changing (what the gate cannot see: another machine, a library
    outside the lock): its record still says it passed, so only the rotation runs it. In a git history of its own,
    4 consecutive commits run the gate for real (pytest with the plugin and the plan): one of them fails, on it."""
    root = small_tree(tmp_path)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "a tree")
    passed = all_passed(root)
    broken = SLOW[5]
    (root / broken).write_text("def test_s():\n    assert False, 'broken outside the gate'\n", encoding="utf-8")
    passed[broken] = make(root).hashes[broken]  # recorded at its new hash: the gate sees no change
    record.save(root / "tests/gate/passed.json", {"checks": passed})
    cost = make(root).costs
    ours = costs.LAST_RUN.stat().st_mtime_ns if costs.LAST_RUN.exists() else None
    runs = []
    for k in range(plan.PARTS):
        git(root, "commit", "-q", "--allow-empty", "-m", f"commit {k}")
        p = plan.make("push", root=root, members={}, costs={c: v for c, v in cost.items()}, reads={},
                      passed=record.passed(root))
        (root / "plan.json").write_text(json.dumps(p.to_json()), encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tools.gate.plugin",
             f"--gate-plan={root / 'plan.json'}", "-q", "-c", "/dev/null", "--rootdir", str(root),
             "-o", f"pythonpath={root / 'tests'}", "tests"],
            cwd=root, capture_output=True, text=True, timeout=hang_guard(120),
            env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(ROOT)})
        runs.append((p.part, done.returncode, done.stdout))
    failed = [(part, out) for part, code, out in runs if code != 0]
    assert len(failed) == 1, runs
    assert f"FAILED {broken}" in failed[0][1] and "broken outside the gate" in failed[0][1]
    assert sorted(part for part, _c, _o in runs) == list(range(plan.PARTS))
    assert json.loads((root / "build/gate/last-run.json").read_text(encoding="utf-8"))["outcomes"]
    assert (costs.LAST_RUN.stat().st_mtime_ns if costs.LAST_RUN.exists() else None) == ours, \
        "the gate's run in the small tree wrote this checkout's build/gate/last-run.json"


def test_the_command_refuses_options_that_do_not_go_together(capsys):
    for bad, said in ((["--shard", "0/4"], "--shard goes with --all"), (["--all", "--shard", "4/4"], "counts from 0"),
                      (["--all", "--touched"], "one of --all"), (["--order", "x"], "whole number")):
        with pytest.raises(SystemExit):
            command.parse(bad)
        assert said in capsys.readouterr().err
    ours, rest = command.parse(["--all", "--shard", "1/6", "-x", "tests/tools/test_gate.py"])
    assert ours.shard == (1, 6) and rest == ["-x", "tests/tools/test_gate.py"]
    assert command.named_paths(["-n", "1", "-k", "tests", "tests/tools/test_gate.py::test_x"]) == \
        ["tests/tools/test_gate.py::test_x"]


def test_a_traced_run_records_what_a_check_ran_and_read_in_its_process_and_its_children(tmp_path):
    folder = ROOT / "build" / f"gate-test-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        (folder / "test_traced.py").write_text(
            "import subprocess, sys\nfrom pathlib import Path\nROOT = Path(__file__).resolve().parents[2]\n\n"
            "def test_it():\n    from torch import nn\n    import hooklab\n"
            "    assert hooklab.get_module(nn.Sequential(nn.Linear(2, 2)), '0') is not None\n"
            "    (ROOT / 'docs' / 'runtimes.toml').read_text()\n"
            "    subprocess.run([sys.executable, '-c', 'from hooklab import _text; _text.format_bytes(9)'], "
            "check=True)\n", encoding="utf-8")
        reads = tmp_path / "reads.json"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n0", "-q", "-p", "tools.gate.trace",
             "-o", "addopts=", str(folder / "test_traced.py")],
            cwd=ROOT, capture_output=True, text=True, timeout=hang_guard(240),
            env={**os.environ, "HOOKLAB_GATE_TRACE_DIR": str(tmp_path / "trace"), "HOOKLAB_GATE_READS": str(reads)})
        assert done.returncode == 0, done.stdout + done.stderr
        seen = record.traced_reads(reads)[f"build/{folder.name}/test_traced.py"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert "hooklab/lookup.py" in seen  # its function ran, in the test
    assert "hooklab/_text.py" in seen  # in the child process only
    assert "docs/runtimes.toml" in seen  # read
    assert "hooklab/offload/disk.py" not in seen  # imported (import hooklab imports it all), never run


def test_the_cost_table_in_the_maintainers_notes_is_current():
    data = record.load(record.COSTS)
    text = costs.TABLE_FILE.read_text(encoding="utf-8")
    want = costs.table(checks(), data.get("checks", {}), data.get("measured", {}))
    assert want in text, "docs/maintainers/tests.md's table is stale: python -m tools.gate table"


def test_every_check_of_the_suite_has_a_tier_and_its_own_file():
    found = checks()
    assert all(isinstance(c, Check) and (ROOT / c.file).is_file() for c in found)
    assert check_of("tests/course/test_recipes_alone.py::test_x[autograd-hooks-01]") == \
        "tests/course/test_recipes_alone.py::autograd-hooks-01"
    tiers = costs.standing(found, record.costs())
    assert set(tiers) == {c.id for c in found}


def test_a_test_that_forks_autograd_passes_after_a_test_that_started_autograds_threads(tmp_path):
    """Order: once a test has run a compiled backward (it starts autograd's worker threads), a forked process can no
    longer run autograd, and a later test whose DataLoader workers run a backward failed (./course test --order 23).
    The gate (tools/gate/fresh.py) runs such a test in a fresh interpreter then: here a plugin spoils the process
    before the test, which passes; with the fresh interpreter switched off, the same run fails."""
    (tmp_path / "spoil_autograd_fork.py").write_text(
        "import torch\n\n\ndef pytest_collection_finish(session):\n"
        "    model = torch.compile(torch.nn.Linear(2, 2), backend='aot_eager')\n"
        "    model(torch.ones(1, 2)).sum().backward()\n")
    test = ("tests/library/test_explain_processes_and_swaps.py::"
            "test_a_model_run_in_dataloader_workers_is_not_called_model_not_called")
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "spoil_autograd_fork", "-p", "tools.gate.fresh",
            test]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    limit = hang_guard(120)  # a pytest run of one test (and one more of it in a fresh interpreter)
    fresh = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit, check=False)
    assert fresh.returncode == 0, (fresh.stdout + fresh.stderr)[-3000:]
    env["HOOKLAB_TEST_IN_A_FRESH_INTERPRETER"] = "1"  # what the fresh interpreter itself is told: run it here
    spoiled = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit, check=False)
    assert spoiled.returncode != 0 and "fork-based multiprocessing" in spoiled.stdout + spoiled.stderr, \
        (spoiled.stdout + spoiled.stderr)[-3000:]


def test_a_failure_in_the_fresh_interpreter_is_reported_from_its_assertion_on():
    """./course test --order 23 once failed a test in the fresh interpreter and reported only the last 6,000
    characters of its output: torch.compile's DEBUG trace records, with neither the assertion nor its values. The
    report starts at the FAILURES section and, where that is long, keeps its beginning and its end."""
    from tools.gate.fresh import failure_report

    assertion = "E       AssertionError: assert 'wrong' == 'correct'"
    output = ("F   [100%]\n" + "=" * 20 + " FAILURES " + "=" * 20 + "\n____ test_x ____\n" + assertion + "\n"
              + "---- Captured log call ----\n" + "DEBUG    torch.__trace:utils.py:2473 \n" * 2000
              + "=== short test summary info ===\nFAILED tests/x.py::test_x\n1 failed in 6.31s\n")
    report = failure_report(output)
    assert report.startswith("=" * 20 + " FAILURES") and assertion in report
    assert report.rstrip().endswith("1 failed in 6.31s") and "characters left out" in report
    assert len(report) < 6200
    assert failure_report("exit before any test ran") == "exit before any test ran"
