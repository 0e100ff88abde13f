"""tools/launch/check.py (``python -m tools.launch.check``): what it reads from a launch copy, what it refuses, the
environment it gives pip, and its report. Here without building an environment; notebook 01's copy runs in a fresh
one, offline, in tests/tools/test_package.py (every copy runs online in the weekly workflow)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tools.launch import check as launch_check, copies as launch

ROOT = Path(__file__).resolve().parents[2]
WHEEL = "hooklab @ file:///tmp/dist/hooklab-0.1.0-py3-none-any.whl"

pytestmark = pytest.mark.timeout(120)


def copy_of(number: str) -> dict:
    path, = (ROOT / "notebooks").glob(f"{number}_*.ipynb")
    return launch.launch_copy(json.loads(path.read_text(encoding="utf-8")), "en", WHEEL, launch.pins())


def test_what_a_copys_cell_installs_is_read_from_the_cell():
    assert launch_check.cell_requirements(copy_of("01")) == [WHEEL, "torch==2.15.0", "numpy==2.4.6"]
    fifteen = launch_check.cell_requirements(copy_of("15"))
    assert fifteen[0] == WHEEL and "timm==1.0.31" in fifteen and "diffusers==0.42.1" in fifteen


def test_offline_runs_only_copies_that_need_no_more_than_the_course_extra():
    assert launch_check.beyond_the_extra(copy_of("01")) == []
    assert launch_check.beyond_the_extra(copy_of("06")) == ["torchviz==0.0.3"]
    assert "timm==1.0.31" in launch_check.beyond_the_extra(copy_of("15"))


def test_notebooks_are_chosen_by_number_or_name_and_a_wrong_one_is_refused():
    assert [p.name for p in launch_check.chosen(["01", "15_hooks_in_libraries"])] == [
        "01_tensor_hooks.ipynb", "15_hooks_in_libraries.ipynb"]
    notebooks, recipes = (sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb")) for folder in ("notebooks", "recipes"))
    assert launch_check.chosen([]) == notebooks + recipes and len(recipes) >= 12  # every copy the launch branch has
    assert launch_check.chosen(["recipes"]) == recipes
    assert [launch_check.copy_name(p) for p in launch_check.chosen(["r02", "recipes/17_transformers"])] == [
        "recipes/02_module_forward_hooks.ipynb", "recipes/17_transformers.ipynb"]
    with pytest.raises(launch_check.CheckError, match="'r99' names no notebook"):
        launch_check.chosen(["r99"])
    with pytest.raises(launch_check.CheckError, match="'99' names no notebook"):
        launch_check.chosen(["99"])
    with pytest.raises(launch_check.CheckError, match="'1' names more than one notebook"):
        launch_check.chosen(["1"])


def test_main_refuses_bad_input_with_exit_2(tmp_path, capsys):
    assert launch_check.main(["99", "--out", str(tmp_path)]) == 2
    assert "names no notebook" in capsys.readouterr().err
    (tmp_path / "x.whl").write_text("")
    assert launch_check.main(["01", "--wheel", str(tmp_path / "x.whl"), "--out", str(tmp_path)]) == 2
    assert "not a hooklab wheel" in capsys.readouterr().err
    assert launch_check.main(["15", "--offline", "--wheel", str(ROOT / "pyproject.toml"), "--out", str(tmp_path)]) == 2


def test_pip_in_the_copy_sees_only_its_index_as_on_colab(monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///opt/pypi/simple")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    env = launch_check.colab_env(offline=False)
    assert env["PIP_CONFIG_FILE"] == os.devnull and "PIP_FIND_LINKS" not in env and "PIP_EXTRA_INDEX_URL" not in env
    assert "PYTHONPATH" not in env and env["HF_HUB_OFFLINE"] == "1" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert "PIP_NO_INDEX" not in env and launch_check.colab_env(offline=True)["PIP_NO_INDEX"] == "1"


def test_the_report_gives_per_notebook_what_it_installs_how_long_the_cells_and_the_memory():
    ok = launch_check.CopyResult("01_tensor_hooks.ipynb", [WHEEL, "torch==2.15.0"], code_cells=28, passed=28,
                                 install_seconds=75.8, packages_added=47, seconds=123.4, peak_rss_mb=316.8,
                                 torch_before="2.15.0", torch_after="2.15.0")
    bad = launch_check.CopyResult("15_hooks_in_libraries.ipynb", [WHEEL, "torch==2.15.0"], code_cells=39, passed=24,
                                  failed=["Cell 1: PackageNotFoundError: No package metadata was found for diffusers"],
                                  install_seconds=94.9, packages_added=40, seconds=110, peak_rss_mb=2300.0)
    assert ok.ok and not bad.ok
    assert launch_check.one_line(ok) == ("01_tensor_hooks.ipynb: install 75.8 s (+47 packages), 28/28 code cells ran, "
                                         "kernel peak 317 MiB in 123 s")
    ok.downloads, ok.downloaded_mb, ok.growth_mb = 3, 2.4, 12.5
    assert ("install 75.8 s (+47 packages), pip downloaded 3 files (2 MB), the environment grew 12 MB, 28/28"
            in launch_check.one_line(ok))
    assert "kernel peak 2300 MiB (over Binder's 2048 MiB)" in launch_check.one_line(bad)
    report = launch_check.render_report([ok, bad], {"lang": "en", "hooklab": "w.whl", "python": "3.11.7",
                                                    "offline": False, "torch": "2.13.0"})
    assert ("| 01_tensor_hooks.ipynb | `hooklab`, `torch==2.15.0` | 75.8 s | 47 | 3 files, 2 MB | 12 MB | 28/28 | "
            "123 s | 317 MiB | 2.15.0 → 2.15.0 |  |") in report
    assert ("| 24/39 | 110 s | 2300 MiB (over Binder's limit) | – | Cell 1: PackageNotFoundError: No package metadata "
            "was found for diffusers |") in report
    assert "- 1 of 2 copies ran every code cell (and" in report and "downloaded from PyPI only" in report
    assert "torch 2.13.0 (preinstalled, as Colab ships torch; the outputs were verified with 2.15.0" in report


@pytest.mark.parametrize("before, after, replaced", [
    ("2.13.0", "2.13.0", False), ("2.15.0+cpu", "2.15.0+cpu", False),
    ("2.13.0", "2.15.0", True), ("2.15.0", "2.14.0", True),  # a torch inside the range must stay
    ("2.12.1", "2.15.0", False), ("2.16.0", "2.15.0", False)])  # outside it the cell installs the lock's on purpose
def test_a_copy_that_replaces_a_torch_inside_the_range_fails(before, after, replaced):
    result = launch_check.CopyResult("01_tensor_hooks.ipynb", [WHEEL], code_cells=3, passed=3, torch_before=before,
                                     torch_after=after)
    assert result.torch_replaced is replaced and result.ok is not replaced
    if replaced:
        assert f"the cell replaced torch {before} (inside the range) with {after}" in launch_check.one_line(result)


def test_the_real_install_source_and_another_torch_are_options(tmp_path, capsys, monkeypatch):
    assert launch_check.main(["01", "--repository-url", "https://github.com/o/r", "--offline", "--out",
                              str(tmp_path)]) == 2
    assert "--repository-url installs hooklab from the repository: not with --wheel or --offline" in \
        capsys.readouterr().err
    assert launch_check.main(["01", "--commit", "0123abc", "--out", str(tmp_path)]) == 2
    assert "--commit goes with --repository-url" in capsys.readouterr().err
    assert launch_check.main(["01", "--torch", "latest", "--out", str(tmp_path)]) == 2
    assert "--torch should be a release such as 2.13.0" in capsys.readouterr().err
    assert launch_check.main(["01", "--torch-wheels", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "--torch-wheels FOLDER goes with --torch X+BUILD" in capsys.readouterr().err
    # the fresh environment gets the lock's torch from uv's cache, then the asked-for one in its place
    commands = []
    monkeypatch.setattr(launch_check, "run", lambda command, what, **kwargs: commands.append(command) or "")
    launch_check.fresh_env(tmp_path / "venv", tmp_path, offline=False, torch="2.13.0")
    assert [c for c in commands if "pip" in c] == [[str(launch_check.UV), "pip", "install", "--quiet", "--python",
                                                    str(tmp_path / "venv" / "bin" / "python"), "torch==2.13.0"]]
    commands.clear()
    launch_check.fresh_env(tmp_path / "venv", tmp_path, offline=False, torch="2.15.0")  # the lock's: nothing more
    assert not [c for c in commands if "pip" in c]
    # a learner's Jupyter with a CPU torch: the CPU build of PyTorch's index (or of a folder of wheels)
    commands.clear()
    launch_check.fresh_env(tmp_path / "venv", tmp_path, offline=False, torch="2.13.0+cpu")
    pip, = [c for c in commands if "pip" in c]
    assert pip[-3:] == ["--extra-index-url", "https://download.pytorch.org/whl/cpu", "torch==2.13.0+cpu"]
    commands.clear()
    launch_check.fresh_env(tmp_path / "venv", tmp_path, offline=False, torch="2.13.0+cpu", torch_wheels=tmp_path)
    pip, = [c for c in commands if "pip" in c]
    assert pip[-3:] == ["--find-links", str(tmp_path), "torch==2.13.0+cpu"]


def test_a_copy_made_for_the_repository_installs_from_it(monkeypatch, tmp_path):
    made = {}

    def fake_check_copy(name, copy, work, **kwargs):
        made[name] = (launch_check.cell_requirements(copy), kwargs["torch"])
        return launch_check.CopyResult(name, [], code_cells=1, passed=1)

    monkeypatch.setattr(launch_check, "check_copy", fake_check_copy)
    monkeypatch.setattr(launch_check, "UV", ROOT / "pyproject.toml")  # exists; nothing runs uv here
    assert launch_check.main(["01", "--repository-url", "https://github.com/o/r", "--commit", "0123abc",
                              "--torch", "2.13.0", "--out", str(tmp_path)]) == 0
    assert made["01_tensor_hooks.ipynb"] == (["hooklab @ git+https://github.com/o/r@0123abc",
                                              "torch==2.15.0", "numpy==2.4.6"], "2.13.0")
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "hooklab from `git+https://github.com/o/r@0123abc` (the install source of the published copies)" in report


def test_a_copy_is_judged_by_the_torch_range_its_own_cell_keeps():
    fourteen = copy_of("14")
    assert launch_check.cell_torch_range(fourteen) == ("2.15", "2.15.0")
    assert launch_check.cell_torch_range(copy_of("01")) == launch.torch_range()
    # the weekly run on 2.13.0: notebook 14's cell installs 2.15.0 on purpose, which is no failure
    result = launch_check.CopyResult("14_hooks_in_frameworks.ipynb", [WHEEL], code_cells=1, passed=1,
                                     torch_before="2.13.0", torch_after="2.15.0", torch_range=("2.15", "2.15.0"))
    assert not result.torch_replaced and result.ok


def test_a_copy_its_install_cell_stopped_fails_and_says_why():
    stopped = launch_check.CopyResult("07_activation_checkpointing.ipynb", [WHEEL, "torch==2.15.0"], code_cells=41,
                                      passed=0, failed=["Cell 0: RuntimeError: torchvision could not be installed"],
                                      stopped="RuntimeError: torchvision could not be installed for this torch")
    assert not stopped.ok
    assert "its install cell stopped the run: RuntimeError: torchvision could not" in launch_check.one_line(stopped)
    report = launch_check.render_report([stopped], {"lang": "en", "hooklab": "w.whl", "python": "3.11.7",
                                                    "offline": False, "torch": "2.13.0+cpu"})
    assert "| 0/41 |" in report and "stopped by its install cell: RuntimeError: torchvision could not" in report


def _notebook(*cells: tuple[str, list[str]]) -> dict:
    return {"cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {"tags": tags}, "source": source,
                       "outputs": [], "execution_count": None} for i, (source, tags) in enumerate(cells)],
            "metadata": {"kernelspec": launch.PYTHON_KERNEL}, "nbformat": 4, "nbformat_minor": 5}


@pytest.mark.timeout(240)
def test_the_runner_goes_on_after_a_failing_cell_and_gives_the_install_cell_its_own_limit(tmp_path):
    """What check_runner.py does that nbmake does not (its docstring): every cell runs whatever an earlier one
    raised, each failure is counted, the install cell has a longer limit than the others and a cell over its limit is
    interrupted (and counted) while the rest still run; it reads the kernel's peak memory and torch before and after.
    Here in this environment's Python (its own python3 kernelspec, as ``ipykernel install --sys-prefix`` writes one
    in the fresh environment), no install."""
    import subprocess
    import sys
    from importlib.metadata import version

    kernels = tmp_path / "jupyter" / "kernels" / "python3"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python"}), encoding="utf-8")
    from patience import hang_guard

    # a trivial cell stays far below it, stretched by the load now; the install cell sleeps past it
    limit = round(hang_guard(10))
    source = tmp_path / "copy.ipynb"
    source.write_text(json.dumps(_notebook(
        (f"import time; time.sleep({limit + 3}); print('installed')", [launch.INSTALL_TAG]),  # over `limit`: its own
        ("raise ValueError('a failing cell')", []),
        (f"import time; time.sleep({limit * 20})", []),  # interrupted after `limit` s
        ("print('the last cell ran')", []))), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JUPYTER_PREFER_ENV_PATH")}
    env.update(JUPYTER_PATH=str(tmp_path / "jupyter"), JUPYTER_DATA_DIR=str(tmp_path / "data"))
    (tmp_path / "run").mkdir()
    done = subprocess.run([sys.executable, "-P", str(launch_check.RUNNER), str(source), str(tmp_path / "out.ipynb"),
                           str(tmp_path / "result.json"), "--install-timeout", "120", "--timeout", str(limit)],
                          cwd=tmp_path / "run", env=env, capture_output=True, text=True, timeout=hang_guard(200))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    assert result["code_cells"] == 4 and result["passed"] == 2 and result["aborted"] is None
    assert result["failed"][0] == "Cell 1: ValueError: a failing cell"
    assert result["failed"][1:] == ["Cell 2: KeyboardInterrupt: "], result["failed"]  # interrupted, then on
    assert result["install_output"] == "installed\n" and result["install_seconds"] >= limit
    assert result["peak_rss_mb"] > 0 and result["torch_before"] == result["torch_after"] == version("torch")
    executed = json.loads((tmp_path / "out.ipynb").read_text(encoding="utf-8"))
    assert "".join(executed["cells"][3]["outputs"][0]["text"]) == "the last cell ran\n"


@pytest.mark.timeout(240)
def test_the_runner_stops_where_the_install_cell_raises_as_run_all_does(tmp_path):
    """A copy whose install cell cannot install what the notebook needs raises there (tools/launch/copies.py: the
    torchvision of a CPU torch, PyTorch's index unreachable): the run stops, the learner sees that message and no
    cascade of NameErrors from the cells after it."""
    import subprocess
    import sys

    from patience import hang_guard

    kernels = tmp_path / "jupyter" / "kernels" / "python3"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python"}), encoding="utf-8")
    source = tmp_path / "copy.ipynb"
    source.write_text(json.dumps(_notebook(
        ("raise RuntimeError('torchvision could not be installed for this torch')", [launch.INSTALL_TAG]),
        ("import torchvision", []), ("print(torchvision.__version__)", []))), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JUPYTER_PREFER_ENV_PATH")}
    env.update(JUPYTER_PATH=str(tmp_path / "jupyter"), JUPYTER_DATA_DIR=str(tmp_path / "data"))
    (tmp_path / "run").mkdir()
    done = subprocess.run([sys.executable, "-P", str(launch_check.RUNNER), str(source), str(tmp_path / "out.ipynb"),
                           str(tmp_path / "result.json"), "--timeout", "120"],
                          cwd=tmp_path / "run", env=env, capture_output=True, text=True, timeout=hang_guard(200))
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    assert result["stopped"] == "RuntimeError: torchvision could not be installed for this torch"
    assert result["code_cells"] == 3 and result["passed"] == 0 and result["aborted"] is None
    assert result["failed"] == ["Cell 0: RuntimeError: torchvision could not be installed for this torch"]
    executed = json.loads((tmp_path / "out.ipynb").read_text(encoding="utf-8"))
    assert [c["execution_count"] for c in executed["cells"]] == [1, None, None]  # the others never ran


def _ran(copy: dict, outputs: dict[int, list[dict]]) -> dict:
    """``copy`` as if run: each code cell's committed outputs, those of the cells in ``outputs`` replaced."""
    ran = json.loads(json.dumps(copy))
    code = [c for c in ran["cells"] if c["cell_type"] == "code"]
    for number, replaced in outputs.items():
        code[number]["outputs"] = replaced
    return ran


def test_a_copy_whose_cell_shows_something_else_is_named_and_fails_on_the_recorded_torch():
    """The launch check's output comparison, on what it found on its first run with PyPI's torch: torch's warning
    when numpy is missing, a cell that printed "Numpy is not available" instead of the error it teaches, and an
    exercise's verdict in both languages in an English copy; a print that arrives in two pieces is the same."""
    copy = copy_of("01")
    code = [c for c in copy["cells"] if c["cell_type"] == "code"]
    setup = next(i for i, c in enumerate(code) if i and c.get("outputs") and c["outputs"][0].get("output_type") == "stream")
    text = "".join(code[setup]["outputs"][0]["text"])
    assert launch_check.differing_cells(copy, _ran(copy, {})) == []
    split = [{"output_type": "stream", "name": "stdout", "text": text[:5]},
             {"output_type": "stream", "name": "stdout", "text": text[5:]}]
    assert launch_check.differing_cells(copy, _ran(copy, {setup: split})) == []
    warned = [{"output_type": "stream", "name": "stderr",
               "text": "/tmp/x/torch/_tensor.py:1: UserWarning: Failed to initialize NumPy: No module named 'numpy'\n"},
              *code[setup]["outputs"]]
    assert launch_check.differing_cells(copy, _ran(copy, {setup: warned})) == [f"Cell {setup}"]
    result = launch_check.CopyResult("01_tensor_hooks.ipynb", [WHEEL], code_cells=3, passed=3, torch_before="2.15.0",
                                     torch_after="2.15.0", differs=[f"Cell {setup}"])
    assert not result.ok and f"output not the copy's in Cell {setup}" in launch_check.one_line(result)
    result.torch_before = result.torch_after = "2.13.0+cpu"  # another torch may show other numbers
    assert result.ok and "(torch 2.13.0+cpu: allowed)" in launch_check.one_line(result)


def test_a_copys_cell_makes_hooklab_answer_in_the_copys_language(monkeypatch):
    """Outside a Jupyter server that names the notebook (Colab, nbclient), nothing else tells hooklab the copy's
    language: its checkers printed both. The install cell sets HOOKLAB_LANG unless the learner has."""
    for lang in ("en", "zh"):
        cell = next(c for c in launch.launch_copy(json.loads((ROOT / "notebooks" / "01_tensor_hooks.ipynb").read_text(
            encoding="utf-8")), lang, WHEEL, launch.pins())["cells"] if launch.INSTALL_TAG in c["metadata"].get("tags", []))
        assert f'os.environ.setdefault("HOOKLAB_LANG", "{lang}")' in cell["source"]
