"""./course rerun's comparison and report (tools/rerun/compare.py, claims.py, report.py) and argument handling
(tools/rerun/command.py), on small synthetic notebooks: no network, no environment is built; one test runs a kernel
(tools/rerun/execute.py), one a side environment's reuse with uv stubbed out."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from patience import hang_guard
from tools.rerun import claims, command as rerun, compare, report as mr

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(60)
RULES = compare.load_sanitizer(ROOT / "tests" / "sanitize.cfg")


def md(text, tag="lang-en"):
    return {"cell_type": "markdown", "metadata": {"tags": [tag]}, "source": text}


def code(src, text=None, *, tags=(), outputs=None):
    outs = outputs if outputs is not None else (
        [{"output_type": "stream", "name": "stdout", "text": text}] if text is not None else [])
    return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": src, "outputs": outs,
            "execution_count": None}


def nb(*cells):
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def with_outputs(notebook, texts: dict[int, str]):
    """A copy of the notebook whose code cells number N print texts[N] instead (the others unchanged)."""
    copy = json.loads(json.dumps(notebook))
    cells = [c for c in copy["cells"] if c["cell_type"] == "code"]
    for num, text in texts.items():
        cells[num]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": text}]
    return copy


def linear_notebook():
    """Shaped like notebook 08: a pitfall, then correction 2.17 whose prose quotes the node name."""
    return nb(
        md("# 08 · Pitfalls", "lang-both"),
        code("import torch", ""),
        md("### 1.1 A lambda in a loop\n\ntext"),
        code("print('late')", "late binding: True\n"),
        md("## 2. Corrections"),
        md("### 2.17 `nn.Linear` 接受一维输入\n\n模块的最后一个节点是 `ViewBackward0`。", "lang-zh"),
        md("### 2.17 `nn.Linear` accepts a 1-D input <span class=\"jp-toc-ignore\"></span>\n\n**In fact**: the "
           "module's last Node becomes a "
           "`ViewBackward0`.\nThe old hook sees that Node."),
        code("print(node)", "grad_fn of the 1-D call: ViewBackward0\nshape (2,)\n"),
        code("print(addr)", "object at 0x7f00deadbeef\n", tags=["nbval-ignore-output"]),
        code("print(addr)", "module at 0x7f11aaaa0000\n"),
    )


# ---- where a change sits and what it is ----------------------------------------------------------------------

def test_a_changed_cell_is_named_with_its_heading_and_correction_number():
    committed = linear_notebook()
    fresh = with_outputs(committed, {2: "grad_fn of the 1-D call: UnsafeViewBackward0\nshape (2,)\n"})
    result = compare.compare_notebook("08_pitfalls.ipynb", committed, fresh, None, RULES)
    assert [c.cell_num for c in result.changes] == [2]  # nbval's numbering: code cells from 0
    change = result.changes[0]
    assert change.heading == "2.17 `nn.Linear` accepts a 1-D input"  # the English heading, not the Chinese twin
    assert change.claim == "correction 2.17"
    assert change.kind == "behaviour change" and "ViewBackward0 -> UnsafeViewBackward0" in change.why
    # the full diff, git's direction: what was committed is '-', what the run printed is '+'
    assert "-grad_fn of the 1-D call: ViewBackward0" in change.diff.splitlines()
    assert "+grad_fn of the 1-D call: UnsafeViewBackward0" in change.diff.splitlines()
    assert change.diff.splitlines()[:2] == ["--- committed", "+++ fresh"]


def test_pitfalls_and_quoted_corrections_are_numbered_too():
    committed = linear_notebook()
    fresh = with_outputs(committed, {1: "late binding: False\n"})
    change, = compare.compare_notebook("08_pitfalls.ipynb", committed, fresh, None, RULES).changes
    assert change.claim == "pitfall 1.1" and change.kind == "behaviour change" and "boolean flipped" in change.why
    seven = nb(md("## 2. Today's argument"), md("> **Correction 1**: the post says ..."),
               code("warn()", "UserWarning: Starting in PyTorch 2.9, calling ...\n"))
    fresh7 = with_outputs(seven, {0: "UserWarning: In a future release, calling ...\n"})
    change, = compare.compare_notebook("07_checkpointing.ipynb", seven, fresh7, None, RULES).changes
    assert change.heading == "2. Today's argument" and change.claim == "correction 1"
    assert change.paragraph == "**Correction 1**: the post says ..."  # the quote's '>' left out
    assert change.kind == "cosmetic" and "warning" in change.why


def test_a_comment_in_a_code_fence_is_not_a_heading():
    # notebook 06's exercises: the prose shows code in a fence whose comment '# d' once filed the cells under "d"
    fenced = nb(md("## Exercises"), md("Fill in:\n\n```python\nx = c * 2\n# d\ny = x.sum()\n```\n\nthen run it."),
                code("answer()", "ok\n"))
    change, = compare.compare_notebook("06_saved.ipynb", fenced, with_outputs(fenced, {0: "wrong\n"}), None, RULES).changes
    assert change.heading == "Exercises"
    assert change.paragraph == "Fill in: ```python x = c * 2 # d y = x.sum() ``` then run it."  # the comment kept


def test_streams_are_merged_and_rewritten_as_nbval_does():
    # nbval's coalesce_streams: one text per stream name, a line ended by '\r' overwritten by what follows
    outputs = [{"output_type": "stream", "name": "stdout", "text": "step 1\rstep 2\n"},
               {"output_type": "stream", "name": "stderr", "text": "warn\n"},
               {"output_type": "stream", "name": "stdout", "text": ["a", "b\n"]}]
    assert compare.comparable(outputs, RULES) == {"stdout": ["step 2\nab\n"], "stderr": ["warn\n"]}
    assert outputs[0]["text"] == "step 1\rstep 2\n"  # the notebook itself is left as it was
    tagged = code("f()", "x\n", tags=["raises-exception"])
    assert compare.nbval_options(tagged) == {"raises"}
    assert compare.nbval_options({**tagged, "source": "# NBVAL_IGNORE_OUTPUT\nf()"}) == {"raises", "ignore-output"}
    assert compare.nbval_options(code("# NBVAL_SKIP\nf()", tags=["nbval-ignore-output"])) == {"skip", "ignore-output"}


def test_ignored_outputs_and_sanitized_differences_are_not_changes():
    committed = linear_notebook()
    fresh = with_outputs(committed, {3: "object at 0x7f22cafef00d\n", 4: "module at 0x7f99bbbb1111\n"})
    result = compare.compare_notebook("08_pitfalls.ipynb", committed, fresh, None, RULES)
    assert result.changes == [] and result.code_cells == 5 and result.compared == 4


def test_vanished_token_is_found_in_the_prose_of_both_languages():
    committed = linear_notebook()
    fresh = with_outputs(committed, {2: "grad_fn of the 1-D call: UnsafeViewBackward0\nshape (2,)\n"})
    results = compare.compare_all_from({"08_pitfalls.ipynb": committed}, {"08_pitfalls.ipynb": fresh}, None, RULES)
    change = results[0].changes[0]
    assert claims.maximal(change.vanished) == ["ViewBackward0"]
    quoted = [(index, tag) for _, index, tag, phrase, _ in change.prose]
    assert quoted == [(5, "zh"), (6, "en")]
    report = mr.render_report({"name": "t"}, None, results)
    assert "06" not in report.split("## Changed cells")[0]
    assert "quotes `ViewBackward0`: **In fact**: the module's last Node becomes a `ViewBackward0`." in report
    quotes = report.split("Prose that quotes what is gone")[1]
    assert "The old hook sees that Node." not in quotes  # only the lines that quote it
    # and the claim itself, the paragraph the cell proves, is quoted above the diff
    assert "> **In fact**: the module's last Node becomes a `ViewBackward0`. The old hook sees that Node." in report


def test_a_phrase_split_over_punctuation_in_prose_is_found():
    phrases = claims.vanished_phrases("UserWarning: Starting in PyTorch 2.9, calling ...\n",
                                  "UserWarning: In a future release, calling ...\n")
    notebook = nb(md("It says this becomes an error “starting in PyTorch 2.9”."),
                  md("警告说从 PyTorch 2.9 开始会报错。", "lang-zh"), md("PyTorch is a library."))
    hits = claims.prose_quoting({"07.ipynb": notebook}, phrases)
    assert [(i, phrase) for _, i, _, phrase, _ in hits] == [(0, "Starting in PyTorch 2.9"), (1, "PyTorch 2.9")]


def test_machine_drift_is_separated_from_pytorch_changes():
    committed = nb(md("## 5. Clipping"), code("count()", "entries beyond 1e-3: 7808667\n"),
                   md("## 6. Nodes"), code("node()", "last node: ViewBackward0\n"))
    fresh = with_outputs(committed, {0: "entries beyond 1e-3: 7808665\n", 1: "last node: UnsafeViewBackward0\n"})
    baseline = with_outputs(committed, {0: "entries beyond 1e-3: 7808665\n"})
    result = compare.compare_notebook("05_apps.ipynb", committed, fresh, baseline, RULES)
    assert [c.cell_num for c in result.drift] == [0]
    assert result.drift[0].kind == "float" and "baseline gives the same output" in result.drift[0].baseline_note
    assert [c.cell_num for c in result.torch_changes] == [1]
    report = mr.render_report({"name": "t"}, None, [result])
    changed, drift = report.split("## Changed cells")[1].split("## Machine drift")
    assert "05 · Cell 1:" in changed and "05 · Cell 0" not in changed
    assert "05 · Cell 0: float" in drift
    # only the drift left: nothing changed because of PyTorch
    only_drift = compare.compare_notebook("05_apps.ipynb", committed, baseline, baseline, RULES)
    assert only_drift.drift and not only_drift.torch_changes and mr.exit_code(None, [only_drift]) == 0


def test_figures_that_changed_are_listed_and_drift_is_told_apart():
    def plot(png):
        return code("plt.show()", outputs=[{"output_type": "display_data", "metadata": {},
                                            "data": {"image/png": png, "text/plain": "<Figure size 640x480 with 1 Axes>"}}])
    committed = nb(md("## 4. Memory"), plot("iVBORw0KGgoAAAA"), plot("iVBORw0KGgoBBBB"))
    fresh = json.loads(json.dumps(committed))
    fresh["cells"][1]["outputs"][0]["data"]["image/png"] = "iVBORw0KGgoCCCC"
    fresh["cells"][2]["outputs"][0]["data"]["image/png"] = "iVBORw0KGgoDDDD"
    baseline = json.loads(json.dumps(committed))
    baseline["cells"][2]["outputs"][0]["data"]["image/png"] = "iVBORw0KGgoEEEE"
    result = compare.compare_notebook("07_ckpt.ipynb", committed, fresh, baseline, RULES)
    assert result.changes == []  # nbval leaves images out; so does the comparison
    assert [(f.cell_num, f.machine_drift) for f in result.figures] == [(0, False), (1, True)]
    assert mr.exit_code(None, [result]) == 1
    assert "07 · Cell 0, under \"4. Memory\": pixels differ" in mr.render_report({"name": "t"}, None, [result])


# ---- guessing the kind ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("old, new, kind", [
    ("count: 7808667\n", "count: 7808665\n", "float"),
    ("error: 4e-03\n", "error: 3e-03\n", "float"),
    ("norm: 73.98\n", "norm: 73.99\n", "float"),
    ("hooks fired: 3\n", "hooks fired: 4\n", "behaviour change"),
    ("norm: 73.98\n", "norm: 75.12\n", "behaviour change"),
    ("same: True\n", "same: False\n", "behaviour change"),
    ("a  b\n", "a b\n", "cosmetic"),
    ("a line\n", "another line\nand more\n", "behaviour change"),
])
def test_guess_kind(old, new, kind):
    assert compare.guess_kind(old, new, [])[0] == kind


def test_errors_and_hooklab_bugs():
    def error(ename, frames):
        return [{"output_type": "error", "ename": ename, "evalue": "boom", "traceback": frames}]
    plain = error("RuntimeError", ["\x1b[0;31mRuntimeError\x1b[0m: boom", "File /x/site-packages/torch/nn/f.py:3"])
    ours = error("TypeError", ["File \x1b[0;32m/work/repo/hooklab/tracer.py:120\x1b[0m, in Tracer.multi_grad"])
    assert compare.guess_kind("ok\n", "", plain) == ("error", "raises `RuntimeError: boom`")
    assert compare.guess_kind("ok\n", "", ours)[0] == "hooklab bug"
    kind, why = compare.guess_kind("ok\n", "", error("NameError", []), after_error=3)
    assert kind == "error" and "Cell 3 failed before it" in why


def test_a_cell_that_now_raises_is_a_change_and_later_name_errors_point_back():
    committed = nb(md("## 1. Setup"), code("import torchviz", ""), code("torchviz.make_dot()", "digraph\n"))
    fresh = json.loads(json.dumps(committed))
    fresh["cells"][1]["outputs"] = [{"output_type": "error", "ename": "ModuleNotFoundError",
                                     "evalue": "No module named 'torchviz'", "traceback": []}]
    fresh["cells"][2]["outputs"] = [{"output_type": "error", "ename": "NameError",
                                     "evalue": "name 'torchviz' is not defined", "traceback": []}]
    result = compare.compare_notebook("06_saved.ipynb", committed, fresh, None, RULES)
    assert [(c.cell_num, c.kind) for c in result.changes] == [(0, "error"), (1, "error")]
    assert "ModuleNotFoundError" in result.changes[0].why and "Cell 0 failed before it" in result.changes[1].why
    assert "+[ename]" in result.changes[0].diff  # the error shows in the diff, not only in the guess


# ---- unit-test results, exit codes, the whole report ---------------------------------------------------------

def test_junit_results_and_exit_codes(tmp_path):
    xml = tmp_path / "unit.xml"
    xml.write_text("""<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="4">
      <testcase classname="tests.test_a" name="test_ok"/>
      <testcase classname="tests.test_a" name="test_bad"><failure message="assert 2 == 1">trace</failure></testcase>
      <testcase classname="tests.test_b" name="test_tv"><skipped message="needs torchvision"/></testcase>
      <testcase classname="tests.test_b" name="test_tv2"><skipped message="needs torchvision"/></testcase>
      <testcase classname="" name="tests.test_c"><skipped message="collection skipped">('/r/tests/test_c.py', 11, \
"Skipped: needs torchvision")</skipped></testcase>
    </testsuite></testsuites>""")
    units = mr.read_junit(xml, returncode=1)
    assert (units.tests, units.passed) == (5, 1)
    assert ("tests/test_c.py", "needs torchvision") in units.skipped  # a module skipped at collection
    assert units.failed == [("tests/test_a.py::test_bad", "assert 2 == 1")]
    assert mr.exit_code(units, []) == 1
    report = mr.render_report({"name": "t", "unit_only": True}, units, [])
    assert "`tests/test_a.py::test_bad`: assert 2 == 1" in report
    assert "3 × needs torchvision" in report and "Notebooks not run" in report
    library = mr.render_report({"name": "t", "unit_only": True, "library_only": True}, units, [])
    assert "Only the library's tests ran (`--library-only`" in library
    clean = mr.UnitResult(returncode=0, tests=3)
    assert mr.exit_code(clean, []) == 0
    assert mr.exit_code(clean, [compare.NotebookResult("00.ipynb", aborted="DeadKernelError")]) == 1
    assert mr.exit_code(clean, [compare.NotebookResult("04.ipynb", skipped="needs torchvision")]) == 0


def test_notebooks_needing_torchvision_are_recognised():
    assert compare.needs_torchvision(nb(code("import torch\nimport torchvision", "")))
    assert compare.needs_torchvision(nb(code("from torchvision.models import resnet18", "")))
    assert not compare.needs_torchvision(nb(md("uses `torchvision`"), code("# torchvision's BasicBlock\nx = 1", "")))


def test_compare_all_reads_files_and_reports_skipped_notebooks(tmp_path):
    committed_dir, fresh_dir = tmp_path / "notebooks", tmp_path / "executed"
    committed_dir.mkdir(), fresh_dir.mkdir()
    committed = linear_notebook()
    (committed_dir / "08_pitfalls.ipynb").write_text(json.dumps(committed))
    (committed_dir / "04_backward.ipynb").write_text(json.dumps(nb(code("import torchvision", ""))))
    fresh = with_outputs(committed, {2: "grad_fn of the 1-D call: UnsafeViewBackward0\nshape (2,)\n"})
    (fresh_dir / "08_pitfalls.ipynb").write_text(json.dumps(fresh))
    (fresh_dir / "08_pitfalls.json").write_text(json.dumps({"seconds": 3.2, "aborted": None}))
    results = compare.compare_all(sorted(committed_dir.glob("*.ipynb")), fresh_dir, None, ROOT / "tests" / "sanitize.cfg",
                             skipped={"04_backward.ipynb": "needs torchvision, and this run has none"},
                             fresh_label="fresh (torch 9.9.0)")
    assert [r.skipped for r in results] == ["needs torchvision, and this run has none", None]
    report = mr.render_report({"name": "torch-9.9.0-novision"}, mr.UnitResult(returncode=0, tests=1), results)
    assert "| 04_backward.ipynb | 1 | – | – | – | – | – | skipped: needs torchvision, and this run has none |" in report
    assert "| 08_pitfalls.ipynb | 5 | 4 | 1 | 0 | 0 | 3.2 s |  |" in report
    assert "### 08 · Cell 2: behaviour change" in report
    assert "- under: **2.17 `nn.Linear` accepts a 1-D input** (correction 2.17)" in report
    assert "+++ fresh (torch 9.9.0)" in report and "exit 1" in report


# ---- the command's arguments and environment ---------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    ([], "required: --torch"),
    (["--torch", "latest"], "is not a version"),
    (["--torch", "2.13.0", "--vision", "new"], "neither a version"),
    (["--torch", "2.13.0", "--with", "torch==2.3"], "use --torch / --vision"),
    (["--torch", "2.13.0", "--with", "numpy<2; rm -rf /"], "is not a requirement"),
    # review round 6: these passed the argument check and went on to build the side environment
    (["--torch", "2.13.0", "--vision", "none", "--with", "bad req!!"], "--with 'bad req!!' is not a requirement"),
    (["--torch", "2.13.0", "--with", "numpy 2"], "is not a requirement"),
    (["--torch", "2.13.0", "--with", "numpy<<2"], "is not a requirement"),
    (["--torch", "2.13.0", "--with", ""], "is not a requirement"),
    (["--torch", "2.13.0", "--with", "numpy<2; python_version >"], "is not a requirement"),
    # review round 7: a timeout that is not positive went on to build the side environment
    (["--torch", "2.13.0", "--timeout", "-5"], "--timeout is the seconds one notebook cell may run, a whole number "
                                                "of at least 1 (default 300), got -5"),
    (["--torch", "2.13.0", "--timeout", "0"], "got 0"),
    (["--torch", "2.13.0", "--timeout", "1.5"], "--timeout: invalid int value: '1.5'"),
])
def test_usage_errors_exit_2_with_a_message(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(rerun, "requirements", lambda *a: pytest.fail("must not export the lock on a usage error"))
    monkeypatch.setattr(rerun, "build_env", lambda *a: pytest.fail("must not build on a usage error"))
    assert rerun.main(argv) == 2
    assert message in capsys.readouterr().err


def test_without_uv_the_command_says_what_is_missing_before_it_runs_uv(capsys, monkeypatch, tmp_path):
    """A checkout whose .venv is current but that has no .tools/bin/uv (the course script installs uv only when it
    builds .venv): a clear error, not a FileNotFoundError from running it."""
    monkeypatch.setattr(rerun, "UV", rerun.ROOT / ".tools" / "bin" / "no-such-uv")
    monkeypatch.setattr(rerun, "BUILD", tmp_path)
    assert rerun.main(["--torch", "2.13.0", "--vision", "none", "--unit-only"]) == 2
    assert ".tools/bin/no-such-uv is missing: run ./course rerun (the course script installs uv first)" in \
        capsys.readouterr().err


@pytest.mark.parametrize("req, name", [("numpy<2", "numpy"), ("transformers[torch]>=4.40,<5", "transformers"),
                                       ("numpy<2; python_version >= '3.11'", "numpy"), ("Pillow==11.0.0", "Pillow")])
def test_a_requirement_with_extras_versions_and_a_marker_is_accepted(req, name):
    assert rerun.requirement_name(req) == name


def test_the_lock_minus_the_torch_set_keeps_torchviz_and_replaces_with_packages():
    exported = "\n".join([
        "torch==2.15.0 ; python_full_version >= '3.11'", "torchvision==0.29.2", "torchviz==0.0.3",
        "triton==3.9.0 ; sys_platform == 'linux'", "nvidia-cudnn-cu13==9.26.0.51", "nvidia-nvtx==13.2.86",
        "cuda-toolkit==13.2.2", "cuda-bindings==13.5.0", "numpy==2.4.6 ; python_full_version == '3.11.*'",
        "    # via", "    #   numpy", "nbval==0.11.0"])
    reqs = rerun.replace_torch_set(exported, "2.3.0", "0.18.0", ["numpy<2"]).splitlines()
    assert [r for r in reqs if not r.startswith(("#", " "))] == [
        "torchviz==0.0.3", "nbval==0.11.0", "torch==2.3.0", "torchvision==0.18.0", "numpy<2"]
    assert "torchvision==" not in "".join(rerun.replace_torch_set(exported, "2.15.0", "none", []))


def test_environment_names():
    assert rerun.env_name("2.13.0", "0.28.0", []) == "torch-2.13.0-vision-0.28.0"
    assert rerun.env_name("2.15.0", "none", []) == "torch-2.15.0-novision"
    assert rerun.env_name("2.3.0", "0.18.0", ["numpy<2"]) == "torch-2.3.0-vision-0.18.0-with-numpy-lt2"


def test_library_only_runs_the_library_tests_only(tmp_path, monkeypatch):
    seen = {}

    def fake_run(command, **kwargs):
        seen["command"] = command
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(rerun.subprocess, "run", fake_run)
    folder = rerun.ROOT / "build" / "rerun-test-library-only"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        rerun.unit_tests(Path(sys.executable), folder, library_only=True)
        assert seen["command"][-2:] == ["-m", "library and not pin"]
        rerun.unit_tests(Path(sys.executable), folder)
        assert "library and not pin" not in seen["command"]
    finally:
        import shutil
        shutil.rmtree(folder, ignore_errors=True)


def test_a_side_environment_is_reused_only_for_the_requirements_it_was_built_from(monkeypatch):
    """build_env keeps one environment per run name and rebuilds it when its requirements change (what nox's reuse,
    which compares no requirements, would not do: command.py's docstring)."""
    built = []

    def fake_run_checked(cmd, what, **kwargs):
        built.append(cmd[1:3])
        if cmd[1] == "venv":
            (Path(cmd[-1]) / "bin").mkdir(parents=True)
            (Path(cmd[-1]) / "bin" / "python").write_text("")
        return ""

    monkeypatch.setattr(rerun, "run_checked", fake_run_checked)
    monkeypatch.setattr(rerun.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))
    monkeypatch.setattr(rerun, "UV", rerun.ROOT / "pyproject.toml")  # exists; nothing runs uv here
    folder = rerun.ROOT / "build" / "rerun-test-reuse"
    import shutil
    shutil.rmtree(folder, ignore_errors=True)
    try:
        python = rerun.build_env(folder, "torch==2.13.0\n", [])
        assert python == folder / "venv" / "bin" / "python" and built[0] == ["venv", "--quiet"]
        first = len(built)
        assert rerun.build_env(folder, "torch==2.13.0\n", []) == python and len(built) == first  # reused
        rerun.build_env(folder, "torch==2.14.0\n", ["numpy<2"])  # other requirements: built again
        assert built[first] == ["venv", "--quiet"] and len(built) == 2 * first
        assert (folder / "requirements.txt").read_text() == "torch==2.14.0\n"
        assert (folder / "overrides.txt").read_text() == "numpy<2\n"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.timeout(180)
def test_execute_goes_on_after_a_failing_cell_and_writes_beside_not_over_the_notebook(tmp_path):
    """tools/rerun/execute.py in the locked environment's kernel: a cell that raises is one failure and the next cell
    still runs (nbmake would stop there, or with allow_errors pass the notebook); the executed copy goes to --out."""
    notebook = nb(code("raise ValueError('changed')"), code("print('still ran')"))
    notebook["metadata"]["kernelspec"] = {"name": "hooklab", "display_name": "hooklab", "language": "python"}
    source = tmp_path / "nb.ipynb"
    source.write_text(json.dumps(notebook), encoding="utf-8")
    before = source.read_bytes()
    done = subprocess.run([sys.executable, "-m", "tools.rerun.execute", "--out", str(tmp_path / "out"),
                           "--timeout", "60", str(source)], cwd=rerun.ROOT, env=rerun.rerun_env(),
                          capture_output=True, text=True, timeout=hang_guard(150))
    assert done.returncode == 0, done.stderr[-3000:]
    assert source.read_bytes() == before
    executed = json.loads((tmp_path / "out" / "nb.ipynb").read_text(encoding="utf-8"))
    first, second = executed["cells"]
    assert [o["output_type"] for o in first["outputs"]] == ["error"] and first["outputs"][0]["ename"] == "ValueError"
    assert "".join(second["outputs"][0]["text"]) == "still ran\n"
    assert json.loads((tmp_path / "out" / "nb.json").read_text(encoding="utf-8"))["aborted"] is None
