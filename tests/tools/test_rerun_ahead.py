"""tools/rerun/ahead.py: the weekly re-run's runs ahead of the lock, planned from PyPI's answers (here: made-up JSON,
nothing is asked of PyPI), and the summary of which cells changed, from the runs' results.json (written by
tools/rerun/command.py from the same report data, here from synthetic notebooks)."""
from __future__ import annotations

import doctest
import json
import shlex
from pathlib import Path

import pytest

from tools.launch import copies as launch
from tools.rerun import ahead, command as rerun, compare, matrix_cells, report as mr

ROOT = Path(__file__).resolve().parents[2]
LOCK = {"torch": "2.15.0", "torchvision": "0.29.2", "transformers": "5.23.0", "accelerate": "1.15.0",
        "captum": "0.9.0", "diffusers": "0.42.1", "peft": "0.21.2", "pytorch-lightning": "2.6.6", "timm": "1.0.31",
        "torchao": "0.18.0", "torchinfo": "1.8.0"}

pytestmark = pytest.mark.timeout(60)


def pypi(**pages):
    """A stand-in for PyPI's JSON API: project -> page; a library not named has only the lock's version."""
    asked = []

    def get(name):
        asked.append(name)
        if name in pages:
            return pages[name]
        return {"releases": {LOCK.get(name, "1.0"): [{}], "0.0.1": [{}]}}
    get.asked = asked
    return get


TODAY = {  # the newest torch pair is the locked one; no pre-release
    "torch": {"releases": {"2.14.0": [{}], "2.15.0": [{}]}},
    "torchvision": {"info": {"version": "0.29.2", "requires_dist": ["torch==2.15.0"]},
                    "releases": {"0.29.2": [{}]}},
}


def test_nothing_newer_than_the_lock_plans_no_run_and_says_why():
    runs, lines = ahead.plan(pypi(**TODAY), lock=LOCK, environ={})
    assert runs == []
    assert lines == ["newest PyTorch: torch 2.15.0 + torchvision 0.29.2 is the locked pair: nothing to run",
                     "newest libraries: none is newer than the lock (transformers, accelerate, captum, diffusers, "
                     "peft, pytorch-lightning, timm, torchao, torchinfo)",
                     "PyTorch pre-release: none on PyPI newer than torch 2.15.0"]


def test_newer_libraries_run_together_on_the_locked_torch():
    get = pypi(**TODAY, transformers={"releases": {"5.23.0": [{}], "5.24.0": [{}], "6.0.0rc1": [{}],
                                                   "5.25.0": [{"yanked": True}]}},
               timm={"releases": {"1.0.31": [{}], "1.0.32": [{}]}})
    runs, lines = ahead.plan(get, lock=LOCK, environ={})
    run, = runs
    assert run == {"name": "newest-libraries", "title": "transformers 5.24.0, timm 1.0.32",
                   "args": "--torch 2.15.0 --vision 0.29.2 --with transformers==5.24.0 --with timm==1.0.32",
                   "prerelease": "if-necessary-or-explicit"}
    assert lines[1].startswith("newest libraries: transformers 5.24.0, timm 1.0.32 (the lock's: accelerate, ")
    args = rerun.parse_args(shlex.split(run["args"]))
    assert (args.torch, args.vision, args.extra) == ("2.15.0", "0.29.2", ["transformers==5.24.0", "timm==1.0.32"])
    # ./course rerun replaces the lock's pins of those packages and keeps the others
    exported = "torch==2.15.0\ntorchvision==0.29.2\ntransformers==5.23.0\ntimm==1.0.31\npeft==0.21.2\n"
    reqs = rerun.replace_torch_set(exported, args.torch, args.vision, args.extra).splitlines()
    assert [r for r in reqs if not r.startswith("#")] == ["peft==0.21.2", "torch==2.15.0", "torchvision==0.29.2",
                                                          "transformers==5.24.0", "timm==1.0.32"]


def test_a_newer_pytorch_and_a_pre_release_get_runs_of_their_own():
    get = pypi(torch={"releases": {"2.15.0": [{}], "2.16.0": [{}], "2.17.0rc1": [{}], "2.16.1rc1": [{}]}},
               torchvision={"info": {"version": "0.30.0", "requires_dist": ["torch==2.16.0"]},
                            "releases": {"0.30.0": [{}], "0.31.0rc2": [{}]}},
               **{"torchvision/0.31.0rc2": {"info": {"requires_dist": ["torch==2.17.0rc1"]}}})
    runs, lines = ahead.plan(get, lock=LOCK, environ={})
    assert [(r["name"], r["args"], r["prerelease"]) for r in runs] == [
        ("newest-pytorch", "--torch 2.16.0 --vision 0.30.0", "if-necessary-or-explicit"),
        ("pytorch-prerelease", "--torch 2.17.0rc1 --vision 0.31.0rc2", "allow")]
    for run in runs:
        assert rerun.parse_args(shlex.split(run["args"])).torch in ("2.16.0", "2.17.0rc1")
    # a torchvision pre-release that does not accept the torch pre-release: the run goes without torchvision
    get = pypi(torch={"releases": {"2.15.0": [{}], "2.16.0rc1": [{}]}}, torchvision=TODAY["torchvision"] | {
        "releases": {"0.29.2": [{}], "0.30.0rc1": [{}]}},
               **{"torchvision/0.30.0rc1": {"info": {"requires_dist": ["torch==2.16.0rc9"]}}})
    runs, _ = ahead.plan(get, lock=LOCK, environ={})
    assert [r["args"] for r in runs] == ["--torch 2.16.0rc1 --vision none"]


def test_a_pair_given_by_hand_runs_without_asking_pypi_for_it():
    get = pypi(**TODAY)
    runs, lines = ahead.plan(get, lock=LOCK, environ={"TORCH": "2.13.0", "VISION": "0.28.0"})
    assert runs[0]["args"] == "--torch 2.13.0 --vision 0.28.0" and lines[0].endswith("(given by hand)")
    with pytest.raises(ahead.PlanError, match="give both TORCH and VISION, or neither"):
        ahead.plan(get, lock=LOCK, environ={"TORCH": "2.13.0"})
    with pytest.raises(ahead.PlanError, match="not a version ./course rerun takes"):
        ahead.plan(get, lock=LOCK, environ={"TORCH": "2.13; rm -rf /", "VISION": "none"})


def test_torchvisions_requirement_on_torch_decides_the_newest_pair():
    assert doctest.testmod(ahead).failed == 0
    torch = {"releases": {"2.14.0": [{}], "2.15.0": [{}], "2.16.0": [{"yanked": True}], "2.17.0a0": [{}]}}
    bounded = {"info": {"version": "0.29.0", "requires_dist": ["torch<2.15,>=2.14"]}}
    assert ahead.newest_pair(bounded, torch) == ("2.14.0", "0.29.0")
    with pytest.raises(ahead.PlanError, match="no torch release on PyPI satisfies torchvision 0.30.0's"):
        ahead.newest_pair({"info": {"version": "0.30.0", "requires_dist": ["torch>=3"]}}, torch)
    with pytest.raises(ahead.PlanError, match="names no torch requirement"):
        ahead.newest_pair({"info": {"version": "0.30.0", "requires_dist": ["numpy"]}}, torch)


def test_the_libraries_are_transformers_and_what_notebook_15_imports():
    nb = json.loads((ROOT / "notebooks" / "15_hooks_in_libraries.ipynb").read_text(encoding="utf-8"))
    imported = sorted(p.split("==")[0] for p in launch.notebook_pins(nb))
    # torch and torchvision travel together as the run's --torch / --vision pair, never as a --with library; numpy
    # is in every launch copy for torch's sake (launch.WITH_TORCH), not imported by the notebook
    tied = ("torch", "torchvision", "transformers", *launch.WITH_TORCH)
    assert ahead.LIBRARIES == ("transformers", *[n for n in imported if n not in tied])
    assert set(ahead.locked()) >= set(ahead.LIBRARIES) | {"torch", "torchvision"}


def test_long_names_of_look_ahead_environments_stay_short_and_distinct():
    extra = [f"{name}=={version}9" for name, version in LOCK.items() if name not in ("torch", "torchvision")]
    name = rerun.env_name("2.15.0", "0.29.2", extra)
    assert name.startswith(f"torch-2.15.0-vision-0.29.2-with-{len(extra)}-packages-") and len(name) <= rerun.NAME_LIMIT
    assert rerun.env_name("2.15.0", "0.29.2", extra[:-1] + ["torchinfo==1.9.0"]) != name


# ---- the summary: which cells changed in which run ---------------------------------------------------------

def changed_run(tmp_path: Path) -> Path:
    """A run's results.json as tools/rerun/command.py writes it, from the report of a synthetic notebook."""
    committed = {"cells": [{"cell_type": "markdown", "metadata": {"tags": ["lang-en"]}, "source": "## 3. Hooks"},
                           {"cell_type": "code", "metadata": {}, "source": "f()", "execution_count": 1,
                            "outputs": [{"output_type": "stream", "name": "stdout", "text": "fired: 2\n"}]}],
                 "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    fresh = json.loads(json.dumps(committed))
    fresh["cells"][1]["outputs"][0]["text"] = "fired: 3\n"
    results = compare.compare_all_from({"15_hooks.ipynb": committed}, {"15_hooks.ipynb": fresh}, None, [])
    units = mr.UnitResult(returncode=0, tests=3, summary_line="3 passed in 1.0s")
    meta = {"name": "torch-2.15.0-vision-0.29.2-with-timm-eq1.0.32",
            "requested": {"torch": "2.15.0", "vision": "0.29.2", "with": ["timm==1.0.32"]},
            "versions": {"torch": "2.15.0", "torchvision": "0.29.2"}}
    folder = tmp_path / "rerun-newest-libraries" / meta["name"]
    folder.mkdir(parents=True)
    hooks = matrix_cells.HookMatrixResult(changed=[{"key": "forward-hook@compile",
                                                     "fields": {"calls": [1, 2]}}])
    rerun.write_results(folder / "results.json", meta, units, results, mr.exit_code(units, results), hooks)
    return folder


def test_the_summary_lists_every_changed_cell_of_every_run(tmp_path):
    changed_run(tmp_path)
    (tmp_path / "launch-check").mkdir()
    (tmp_path / "launch-check" / "results.json").write_text('{"meta": {}, "results": []}')  # another kind: left out
    results = ahead.read_results([tmp_path])
    assert [r["name"] for r in results] == ["torch-2.15.0-vision-0.29.2-with-timm-eq1.0.32"]
    text = ahead.summary(results, ["newest libraries: timm 1.0.32"])
    assert "- newest libraries: timm 1.0.32" in text
    assert ("| torch-2.15.0-vision-0.29.2-with-timm-eq1.0.32 | torch 2.15.0, torchvision 0.29.2, `timm==1.0.32` | "
            "3 passed in 1.0s | 1 | 0 | 0 | 1 changed | 1 |") in text
    assert '- 15 · Cell 0 (behaviour change), under "3. Hooks": numbers changed by more than rounding (2 -> 3)' in text
    assert "- hook matrix cell `forward-hook@compile` observed differently" in text
    assert "No run wrote results" in ahead.summary([])


def test_the_summary_command_reads_the_downloaded_artifacts(tmp_path, capsys):
    changed_run(tmp_path)
    assert ahead.main(["summary", str(tmp_path)]) == 0
    assert "15 · Cell 0 (behaviour change)" in capsys.readouterr().out
